"""The `fib` entry point: subcommand discovery, conventions, `python -m fib_runtime`."""

import subprocess
import sys

import pytest

import fib_runtime.cli as cli_pkg
from fib_runtime.cli import main as cli_main


def test_version_and_help(capsys):
    with pytest.raises(SystemExit) as e:
        cli_main.main(["--version"])
    assert e.value.code == 0
    assert "fib-runtime" in capsys.readouterr().out


def test_no_command_prints_help_and_fails(capsys):
    assert cli_main.main([]) == 1
    assert "usage: fib" in capsys.readouterr().err


def test_builtin_commands_registered():
    parser = cli_main.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    assert {"validate", "list", "show"} <= set(sub.choices)


def test_discovery_loads_good_and_reports_broken(tmp_path, monkeypatch, capsys):
    (tmp_path / "zz_good_cmd.py").write_text(
        "from fib_runtime.errors import FibError\n"
        "def register(sub):\n"
        "    p = sub.add_parser('zz-hello')\n"
        "    p.add_argument('--fail', action='store_true')\n"
        "    p.set_defaults(func=run)\n"
        "def run(args):\n"
        "    if args.fail:\n"
        "        raise FibError('it went\\nwrong')\n"
        "    print('hello')\n"
        "    return 0\n")
    (tmp_path / "zz_broken_cmd.py").write_text("import not_a_module_anywhere_xyz\n")
    (tmp_path / "zz_plain_helper.py").write_text("X = 1\n")  # no register(): ignored
    monkeypatch.setattr(cli_pkg, "__path__", list(cli_pkg.__path__) + [str(tmp_path)])
    for name in ("zz_good_cmd", "zz_broken_cmd", "zz_plain_helper"):
        monkeypatch.delitem(sys.modules, f"fib_runtime.cli.{name}", raising=False)

    assert cli_main.main(["zz-hello"]) == 0
    out = capsys.readouterr()
    assert out.out == "hello\n"
    assert "warning: cannot load subcommands from fib_runtime.cli.zz_broken_cmd" in out.err
    assert "ModuleNotFoundError" in out.err

    assert cli_main.main(["zz-hello", "--fail"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "fib: error: it went wrong"  # one line, whitespace folded
    assert not any("Traceback" in line for line in err)


def test_table_alignment():
    text = cli_main.table([["a", 1], ["bbb", 22]], ["NAME", "N"])
    lines = text.splitlines()
    assert lines[0].startswith("NAME") and lines[1].startswith("----")
    assert lines[2].endswith(" 1") and lines[3].endswith("22")


def test_python_dash_m():
    r = subprocess.run([sys.executable, "-m", "fib_runtime", "--help"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "validate" in r.stdout and "list" in r.stdout and "show" in r.stdout
