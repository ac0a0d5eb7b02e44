"""The detector of fib_runtime/kernels/sass_check.py on SASS text (no GPU, no CUDA toolkit needed): it
finds the ptxas 13.0 double-offset store of the 16-bit filter kernels and nothing in correct code."""
from __future__ import annotations

from fib_runtime.kernels import sass_check


def _listing(*ins: str, fn: str = "_ZN3fib8sampling13filter_kernelILi1EEEvNS0_6ParamsE") -> str:
    lines = [f"\t\tFunction : {fn}"]
    for a, t in enumerate(ins):
        lines.append(f"        /*{0x1f2e0 + 16 * a:05x}*/                   {t} ;                 /* 0x000fd80000000000 */")
        lines.append("                                                                           /* 0x000fd80000000000 */")
    return "\n".join(lines) + "\n"


# as compiled by ptxas V13.0.88 -O3 for filter_kernel<bf16> (commit 92d5499 with -DFIB_FILTER_DEBUG)
BAD = ("ISETP.GE.OR P0, PT, R22, R9, P0", "VIADD R5, R5, 0x800", "@!P0 IMAD R11, R22, 0x8, R5",
       "@!P0 STS.64 [R11+0x800], R12", "BAR.SYNC.DEFER_BLOCKING 0x0")


def test_finds_the_ptxas_double_offset_store():
    hits = sass_check.double_offset_stores(_listing(*BAD))
    assert len(hits) == 1
    fn, seq = hits[0]
    assert "filter_kernel" in fn
    assert seq[0] == "VIADD R5, R5, 0x800" and seq[-1] == "@!P0 STS.64 [R11+0x800], R12"


def test_correct_shapes_are_not_reported():
    ok_store = ("VIADD R5, R5, 0x800", "@!P0 IMAD R11, R22, 0x8, R5", "@!P0 STS.64 [R11], R12")
    other_base = ("VIADD R5, R5, 0x800", "@!P0 IMAD R11, R22, 0x8, R7", "@!P0 STS.64 [R11+0x800], R12")
    other_imm = ("VIADD R5, R5, 0x800", "@!P0 IMAD R11, R22, 0x8, R5", "@!P0 STS.64 [R11+0x100], R12")
    far = ("VIADD R5, R5, 0x800", "@!P0 IMAD R11, R22, 0x8, R5") + ("NOP",) * 6 + ("STS.64 [R11+0x800], R12",)
    for ins in (ok_store, other_base, other_imm, far):
        assert sass_check.double_offset_stores(_listing(*ins)) == [], ins


def test_function_names_follow_the_listing():
    two = _listing(*BAD, fn="kernel_a") + _listing("VIADD R1, R1, 0x10", "STS [R1], R2", fn="kernel_b") + \
        _listing(*BAD, fn="kernel_c")
    assert [fn for fn, _ in sass_check.double_offset_stores(two)] == ["kernel_a", "kernel_c"]
