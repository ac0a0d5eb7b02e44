"""The built sampling kernels hold no site of the ptxas 13.0 double-offset store
(fib_runtime/kernels/sass_check.py; docs/sampling-journal.md, "A ptxas miscompile"). Needs the built library and
cuobjdump from a CUDA toolkit (the H200 machine has both), no GPU."""
from __future__ import annotations

import pytest

from fib_runtime.kernels import loader, sass_check

LIB = loader.bin_dir() / "libfib_sampling.so"
TOOL = sass_check.find_cuobjdump()


@pytest.mark.skipif(TOOL is None, reason="needs cuobjdump (CUDA toolkit)")
@pytest.mark.skipif(not LIB.is_file(), reason=f"no built sampling kernels at {LIB}")
def test_no_double_offset_store_in_the_sampling_kernels():
    hits = sass_check.check_library(LIB, TOOL)
    assert hits == [], "\n".join(f"{fn}: {' / '.join(seq)}" for fn, seq in hits)
