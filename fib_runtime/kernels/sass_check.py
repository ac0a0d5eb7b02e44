#!/usr/bin/env python3
"""Looks for a known ptxas miscompile in built kernels (needs ``cuobjdump`` from a CUDA toolkit).

ptxas 13.0 (V13.0.88, at -O2 and -O3) compiled the 16-bit filter kernels' rank-sort store
``D[r] = v`` (D = G + 256 entries, D then read through the same register as G) as::

    VIADD R5, R5, 0x800            ; the base moved to D
    @!P0 IMAD R11, R22, 0x8, R5    ; D + 8r
    @!P0 STS.64 [R11+0x800], R12   ; ... + 0x800 again: 2 KB past D

so the ranked entries landed 2 KB past where they were read, and rows sampled stale tokens
(docs/sampling-journal.md, "A ptxas miscompile"). The source now avoids the shape (sort_desc_top copies
its result back); this check finds the pattern again should a compiler or a code change bring it
back: a register raised by an immediate, then within a few instructions a shared store through an
address computed from it with the same immediate as offset. A correct program can contain that
shape too, so a hit is a lead to read in the SASS, not proof; the shipped kernels have none.

Usage: python -m fib_runtime.kernels.sass_check [LIB.so ...]   (default: the built kernels, loader.bin_dir())
Exit status 1 when a site is found, 2 when cuobjdump is missing.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

_ADD = re.compile(r"VIADD (R\d+), \1, (0x[0-9a-f]+)$")  # (instruction text, ";" dropped)
_WINDOW = 5  # instructions after the add that may carry the store


def _instructions(sass: str) -> list[tuple[str, str]]:
    """(function, instruction text) pairs of a ``cuobjdump -sass`` listing, encodings dropped."""
    fn, out = "", []
    for line in sass.splitlines():
        if "Function :" in line:
            fn = line.split("Function :", 1)[1].strip()
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
        if m:
            out.append((fn, m.group(1).strip()))
    return out


def double_offset_stores(sass: str) -> list[tuple[str, list[str]]]:
    """Sites of the pattern above in a SASS listing: (function, the instructions from the add to
    the store)."""
    ins = _instructions(sass)
    hits = []
    for i, (fn, text) in enumerate(ins):
        m = _ADD.search(text)
        if not m:
            continue
        reg, imm = m.group(1), m.group(2)
        derived = {reg}
        for j in range(i + 1, min(i + 1 + _WINDOW, len(ins))):
            t = ins[j][1]
            d = re.match(r"(?:@!?P\d+ )?(?:IMAD|IADD3|LEA|VIADD|IMAD\.IADD)\S* (R\d+), (.*)", t)
            if d and any(re.search(rf"\b{r}\b", d.group(2)) for r in derived):
                derived.add(d.group(1))
                continue
            s = re.match(r"(?:@!?P\d+ )?STS(?:\.\d+)? \[(R\d+)\+" + imm + r"\]", t)
            if s and s.group(1) in derived - {reg}:
                hits.append((fn, [x[1] for x in ins[i:j + 1]]))
                break
    return hits


def find_cuobjdump() -> str | None:
    for c in (shutil.which("cuobjdump"), os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "cuobjdump")):
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    return None


def check_library(path: str | Path, cuobjdump: str) -> list[tuple[str, list[str]]]:
    r = subprocess.run([cuobjdump, "-sass", str(path)], capture_output=True, text=True, check=True)
    return double_offset_stores(r.stdout)


def main(argv: list[str]) -> int:
    tool = find_cuobjdump()
    if tool is None:
        print("sass_check: no cuobjdump (CUDA toolkit) found", file=sys.stderr)
        return 2
    from fib_runtime.kernels import loader

    libs = argv or sorted(str(p) for p in loader.bin_dir().glob("*.so"))
    bad = 0
    for lib in libs:
        hits = check_library(lib, tool)
        print(f"{lib}: {len(hits)} suspect site(s)")
        for fn, seq in hits:
            bad += 1
            print(f"  {fn}\n    " + "\n    ".join(seq))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
