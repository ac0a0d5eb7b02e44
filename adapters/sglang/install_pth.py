"""Install (or remove) ``fib_runtime_autoload.pth`` in this interpreter's site-packages.

    python -m fib_runtime.adapters.sglang.install_pth            # install
    python -m fib_runtime.adapters.sglang.install_pth --uninstall
    python -m fib_runtime.adapters.sglang.install_pth --print    # where it goes

Wheels built by setup.py ship the file at the root of the wheel (so pip puts it in
site-packages and removes it on uninstall); this helper covers editable installs and
environments where the wheel's copy was not installed.
"""

from __future__ import annotations

import argparse
import sysconfig
from pathlib import Path

NAME = "fib_runtime_autoload.pth"
SOURCE = Path(__file__).with_name(NAME)


def target() -> Path:
    return Path(sysconfig.get_paths()["purelib"]) / NAME


def install() -> Path:
    t = target()
    t.write_text(SOURCE.read_text())
    return t


def uninstall() -> bool:
    t = target()
    if t.exists():
        t.unlink()
        return True
    return False


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fib_runtime.adapters.sglang.install_pth")
    ap.add_argument("--uninstall", action="store_true")
    ap.add_argument("--print", action="store_true", dest="show")
    a = ap.parse_args(argv)
    if a.show:
        print(target())
    elif a.uninstall:
        print("removed" if uninstall() else "absent", target())
    else:
        print("installed", install())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
