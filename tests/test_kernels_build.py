"""CPU checks of the kernel build mechanism, the loader and the built-in table (no GPU needed)."""
from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "kernels_cuda" / "build.py"
NVCC = "/usr/local/cuda/bin/nvcc"
have_nvcc = Path(NVCC).is_file() or shutil.which("nvcc") is not None


def run_build(*args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, str(BUILD), *args], capture_output=True, text=True, env=e, cwd=REPO)


def test_families_discovered_from_src():
    r = run_build("--list")
    assert r.returncode == 0
    names = r.stdout.split()
    expected = sorted(p.stem for p in (REPO / "kernels_cuda" / "src").glob("*.cu"))
    assert names == expected
    assert "sampling" in names


def test_missing_nvcc_reports_unavailable_and_exits_zero(tmp_path):
    r = run_build("--out-dir", str(tmp_path / "bin"), env={"NVCC": str(tmp_path / "no-nvcc")})
    assert r.returncode == 0
    assert "kernels unavailable" in (r.stdout + r.stderr)
    assert not (tmp_path / "bin").exists() or not list((tmp_path / "bin").glob("*.so"))
    r = run_build("--strict", "--out-dir", str(tmp_path / "bin"), env={"NVCC": ""})
    assert r.returncode == 1


def test_unknown_family_is_an_error():
    r = run_build("--family", "no_such_family", env={"NVCC": ""})
    assert r.returncode == 1
    assert "unknown family" in r.stderr


TINY = r"""
#include <tvm/ffi/function.h>
#include <tvm/ffi/container/tensor.h>
int64_t add(int64_t a, int64_t b) { return a + b; }
TVM_FFI_DLL_EXPORT_TYPED_FUNC(add, add);
"""


# the same family without the tvm-ffi headers (whose host compile is most of a tiny build): for the
# tests of the command line and the fingerprint, which never load the library
TINY_BARE = r"""
extern "C" __global__ void fib_tiny_kernel(int* x) { *x += 1; }
"""


def tiny_family(tmp_path, text=TINY):
    """A kernels_cuda-like tree with the one family `text` under tmp_path/k; returns (src dir, out dir)."""
    src = tmp_path / "k" / "src"
    src.mkdir(parents=True)
    (src / "tiny.cu").write_text(text)
    return src, tmp_path / "bin"


@pytest.mark.skipif(not have_nvcc, reason="needs nvcc")
def test_build_tiny_family_skip_when_up_to_date(tmp_path):
    src, out = tiny_family(tmp_path)
    # (one architecture: the shipped set's command is test_arch_build_is_its_own_fingerprint's)
    r = run_build("--src-dir", str(tmp_path / "k"), "--out-dir", str(out), "-j", "2", "--arch", "90")
    assert r.returncode == 0, r.stderr
    assert "tiny: built" in r.stdout
    so = out / "libfib_tiny.so"
    assert so.is_file()
    # no libtorch / libpython / dynamic cudart
    needed = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True).stdout
    assert "libtvm_ffi.so" in needed
    for bad in ("libtorch", "libc10", "libpython", "libcudart.so"):
        assert bad not in needed, bad
    r = run_build("--src-dir", str(tmp_path / "k"), "--out-dir", str(out), "--arch", "90")
    assert "tiny: up-to-date" in r.stdout
    # loads through tvm_ffi without a GPU and calls
    import tvm_ffi

    mod = tvm_ffi.load_module(str(so))
    assert mod.add(2, 3) == 5
    # a changed source is rebuilt (into a new file: the loaded one stays as it was)
    (src / "tiny.cu").write_text(TINY_BARE)
    r = run_build("--src-dir", str(tmp_path / "k"), "--out-dir", str(out), "--arch", "90")
    assert "tiny: built" in r.stdout
    assert "tiny: up-to-date" in run_build("--src-dir", str(tmp_path / "k"), "--out-dir", str(out), "--arch", "90").stdout


def test_arch_selects_machine_code_only():
    spec = importlib.util.spec_from_file_location("fib_kernels_build", BUILD)
    b = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(b)
    assert b.gencode(None) == b.GENCODE and b.gencode("") == b.GENCODE
    assert ("compute_90", "compute_90") in b.GENCODE  # the shipped set carries PTX for newer GPUs
    assert b.gencode("90") == [("compute_90", "sm_90")]
    assert b.gencode("sm_80, 90,compute_90") == [("compute_80", "sm_80"), ("compute_90", "sm_90")]
    with pytest.raises(ValueError, match="'75'"):
        b.gencode("75")


def test_bad_arch_is_an_error(tmp_path):
    r = run_build("--arch", "90,12x", "--out-dir", str(tmp_path))
    assert r.returncode == 1
    assert "unknown CUDA architecture '12x'" in r.stderr


@pytest.mark.skipif(not have_nvcc, reason="needs nvcc")
def test_extra_nvcc_flag_reaches_the_command_and_the_fingerprint(tmp_path):
    _, out = tiny_family(tmp_path, TINY_BARE)
    args = ("--src-dir", str(tmp_path / "k"), "--out-dir", str(out), "-v", "--arch", "90")
    r = run_build(*args)
    assert r.returncode == 0 and "tiny: built" in r.stdout, r.stderr
    assert "-DFIB_TINY_PROFILE" not in r.stdout
    r = run_build(*args, "--nvcc-flag=-DFIB_TINY_PROFILE", "--nvcc-flag=-lineinfo")
    assert r.returncode == 0 and "tiny: built" in r.stdout, r.stderr  # another binary: rebuilt
    assert "-DFIB_TINY_PROFILE" in r.stdout and "-lineinfo" in r.stdout
    assert "tiny: up-to-date" in run_build(*args, "--nvcc-flag=-DFIB_TINY_PROFILE", "--nvcc-flag=-lineinfo").stdout
    assert "tiny: built" in run_build(*args).stdout  # and back


@pytest.mark.skipif(not have_nvcc, reason="needs nvcc")
def test_thread_counts_stay_out_of_the_fingerprint(tmp_path):
    # nvcc --threads and ptxas --split-compile change how fast, not what is built
    _, out = tiny_family(tmp_path, TINY_BARE)
    args = ("--src-dir", str(tmp_path / "k"), "--out-dir", str(out), "-v", "--arch", "80,90")
    r = run_build(*args, "-j", "2")
    assert r.returncode == 0 and "tiny: built" in r.stdout, r.stderr
    assert "--threads 2" in r.stdout and "--ptxas-options=--split-compile=2" in r.stdout
    assert "tiny: up-to-date" in run_build(*args, "-j", "1").stdout
    r = run_build(*args, "-j", "1", "--force")
    assert "tiny: built" in r.stdout and "--threads" not in r.stdout and "split-compile" not in r.stdout


@pytest.mark.skipif(not have_nvcc, reason="needs nvcc")
def test_arch_build_is_its_own_fingerprint(tmp_path):
    _, out = tiny_family(tmp_path, TINY_BARE)
    args = ("--src-dir", str(tmp_path / "k"), "--out-dir", str(out), "-v")
    r = run_build(*args, "--arch", "90")
    assert r.returncode == 0 and "tiny: built" in r.stdout, r.stderr
    assert "code=sm_90" in r.stdout and "sm_80" not in r.stdout and "code=compute_90" not in r.stdout
    assert "tiny: up-to-date" in run_build(*args, "--arch", "90").stdout
    r = run_build(*args)  # the shipped set is another binary
    assert "tiny: built" in r.stdout and "code=sm_80" in r.stdout and "code=compute_90" in r.stdout


def test_loader_never_raises_and_reports_reasons(tmp_path, monkeypatch):
    from fib_runtime.kernels import loader

    monkeypatch.setenv("FIB_KERNELS_DIR", str(tmp_path))  # empty: nothing built
    loader._reset_for_tests()
    try:
        assert loader.load_family("sampling") is None
        av = loader.availability()
        assert "sampling" in av and av["sampling"] != "ok"
        assert loader.load_family("does_not_exist") is None
        # garbage .so: still no exception
        (tmp_path / "libfib_broken.so").write_bytes(b"not an elf")
        assert loader.load_family("broken") is None
        assert loader.availability()["broken"] != "ok"
        monkeypatch.setenv("FIB_DISABLE_KERNELS", "sampling")
        loader._reset_for_tests()
        assert "disabled" in loader.reason("sampling")
    finally:
        monkeypatch.delenv("FIB_KERNELS_DIR", raising=False)
        monkeypatch.delenv("FIB_DISABLE_KERNELS", raising=False)
        loader._reset_for_tests()


def test_loader_thread_safe_single_load(monkeypatch):
    from fib_runtime.kernels import loader

    loader._reset_for_tests()
    calls = []
    real = loader._load

    def counting(name):
        calls.append(name)
        return real(name)

    monkeypatch.setattr(loader, "_load", counting)
    ts = [threading.Thread(target=loader.load_family, args=("sampling",)) for _ in range(16)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert calls.count("sampling") == 1
    loader._reset_for_tests()


def test_no_gpu_means_unavailable_here():
    import torch

    from fib_runtime.kernels import loader

    if torch.cuda.is_available():
        pytest.skip("GPU present")
    loader._reset_for_tests()
    assert loader.load_family("sampling") is None
    assert loader.availability().get("sampling", "missing") != "ok"


def test_builtin_table_entries_import():
    from fib_runtime.kernels import builtin_table as bt

    need = ["sampling_from_probs", "sampling_from_logits", "top_k_sampling_from_probs", "top_p_sampling_from_probs",
            "min_p_sampling_from_probs", "top_k_top_p_sampling_from_probs", "top_k_top_p_sampling_from_logits",
            "top_k_renorm_probs", "top_p_renorm_probs", "top_k_mask_logits"]
    prefixes = {b.definition_prefix for b in bt.BUILTINS}
    for n in need:
        assert f"{n}_v" in prefixes, n
    for b in bt.BUILTINS:
        fn = b.load()
        assert callable(fn)
        assert b.op_type in ("sampling", "cascade_merge", "cascade_attention")
    e = bt.find("top_k_top_p_sampling_from_probs_v128256")
    assert e is not None and e.callable_path.endswith(":top_k_top_p_sampling_from_probs")
    assert bt.find("top_k_sampling_from_probs_v151936").callable_path.endswith(":top_k_sampling_from_probs")
    assert bt.find("sampling_from_probs_v32000").callable_path.endswith(":sampling_from_probs")
    import torch

    x = torch.rand(2, 100)
    assert e.supports((x, torch.tensor([5, 5], dtype=torch.int32), torch.tensor([0.9, 0.9]))) is False


def test_sampling_api_raises_unavailable_without_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("GPU present")
    S = importlib.import_module("fib_runtime.kernels.sampling")
    with pytest.raises(S.KernelUnavailable):
        S.top_k_sampling_from_probs(torch.rand(2, 10), 3)
    assert S.available() is False


def test_setup_py_skips_with_env(tmp_path):
    src = (REPO / "setup.py").read_text()
    assert "FIB_BUILD_KERNELS" in src and "build_py" in src
    r = subprocess.run([sys.executable, "-c", "import setup"], cwd=REPO, capture_output=True, text=True,
                       env={**os.environ, "FIB_BUILD_KERNELS": "0", "SETUPTOOLS_USE_DISTUTILS": "local"})
    # importing setup.py runs setup() without a command: it must fail on "no commands" only
    assert "Traceback" not in r.stderr or "no commands supplied" in (r.stdout + r.stderr)


def test_philox_reference_matches_known_vector():
    """Our Philox4x32-10 (kernels_cuda/include/fib/sampling/common.cuh) against the Random123 KAT."""
    def philox(key, ctr):
        M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
        k0, k1 = key
        c = list(ctr)
        for _ in range(10):
            p0, p1 = M0 * c[0], M1 * c[2]
            c = [((p1 >> 32) ^ c[1] ^ k0) & 0xFFFFFFFF, p1 & 0xFFFFFFFF, ((p0 >> 32) ^ c[3] ^ k1) & 0xFFFFFFFF,
                 p0 & 0xFFFFFFFF]
            k0, k1 = (k0 + W0) & 0xFFFFFFFF, (k1 + W1) & 0xFFFFFFFF
        return c

    # Random123 kat_vectors: philox4x32 10 rounds, ctr=0, key=0
    assert philox((0, 0), (0, 0, 0, 0)) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    hdr = (REPO / "kernels_cuda" / "include" / "fib" / "sampling" / "common.cuh").read_text()
    for const in ("0xD2511F53u", "0xCD9E8D57u", "0x9E3779B9u", "0xBB67AE85u"):
        assert const in hdr


def test_min_top_k_hint_in_the_flags(monkeypatch):
    """min_top_k goes to the library in the flags word (bits 16-46, host_args.h), explicitly or as a
    note on the per-row top_k tensor (note_min_top_k: that tensor object only, the last 16 kept);
    an explicit hint wins over a note; a negative one is refused before any launch."""
    import torch

    S = importlib.import_module("fib_runtime.kernels.sampling")
    flags = []
    monkeypatch.setattr(S, "_fn", lambda *a: flags.append(a[2]) or 0)
    monkeypatch.setattr(S, "_fn_alloc", None)
    monkeypatch.setattr(S, "_hints", {})
    x = torch.rand(3, 500)
    k = torch.tensor([300, 400, 500], dtype=torch.int32)
    S.top_k_top_p_sampling_from_probs(x, k, 0.9, seed=1, offset=1)
    S.top_k_top_p_sampling_from_probs(x, k, 0.9, min_top_k=300, seed=1, offset=1)
    S.top_k_sampling_from_logits(x, k, min_top_k=2**40, seed=1, offset=1)
    assert flags == [S._SAMPLE, S._SAMPLE | 300 << 16, S._SAMPLE | S._LOGITS | (2**31 - 1) << 16]
    assert S.note_min_top_k(k, 250) is k
    S.top_k_top_p_sampling_from_logits(x, k, 0.9, filter_apply_order="joint", seed=1, offset=1)
    assert flags[-1] == S._SAMPLE | S._LOGITS | S._JOINT | 250 << 16
    S.top_k_top_p_sampling_from_logits(x, k, 0.9, min_top_k=129, seed=1, offset=1)
    assert flags[-1] == S._SAMPLE | S._LOGITS | 129 << 16
    S.top_k_top_p_sampling_from_logits(x, k.clone(), 0.9, seed=1, offset=1)  # another tensor: no note
    assert flags[-1] == S._SAMPLE | S._LOGITS
    for _ in range(20):
        S.note_min_top_k(torch.tensor([200, 200, 200]), 200)
    assert len(S._hints) == 16 and id(k) not in S._hints
    n = len(flags)
    with pytest.raises(ValueError, match="min_top_k"):
        S.top_k_sampling_from_probs(x, k, min_top_k=-1, seed=1, offset=1)
    with pytest.raises(ValueError, match="min_top_k"):
        S.note_min_top_k(k, -5)
    assert len(flags) == n


def test_sampling_wrapper_marshalling(monkeypatch):
    """The Python layer hands the library its arguments as they are and converts only on refusal
    (no GPU: a fake library that refuses what the real one refuses)."""
    import torch

    S = importlib.import_module("fib_runtime.kernels.sampling")
    calls = []

    def fake(*args):
        calls.append(args)
        k = args[3]
        if isinstance(k, torch.Tensor) and k.dtype not in (torch.int32, torch.int64):
            raise TypeError("fib sampling: top_k must be int32/int64")
        if isinstance(args[4], torch.Tensor) and args[4].dtype != torch.float32:
            raise TypeError("fib sampling: top_p must be float32")
        if isinstance(k, float):
            raise TypeError("fib sampling: top_k must be an integer")
        if args[0].dim() == 2 and args[0].stride(1) != 1:
            raise ValueError("fib sampling: rows must be contiguous")
        return 1

    monkeypatch.setattr(S, "_fn", fake)
    monkeypatch.setattr(S, "_fn_alloc", None)  # (the library-allocating entry is not faked)
    x = torch.randn(3, 10)
    k = torch.tensor([1, 2, 3], dtype=torch.int32)
    p = torch.tensor([0.5, 0.9, 1.0])
    out = S.top_k_top_p_sampling_from_logits(x, k, p, temperature=0.7, seed=5, offset=9)
    assert out.shape == (3,) and out.dtype == torch.int64 and len(calls) == 1
    # (x, out, flags, top_k, top_p, min_p, temperature, seed, offset, cluster, stream)
    a = calls[-1]
    assert a[0] is x and a[1] is out and a[2] == S._SAMPLE | S._LOGITS
    assert a[3] is k and a[4] is p and a[5] is None and a[6] == 0.7 and a[7] == 5 and a[8] == 9 and a[10] == -1
    S.top_k_top_p_sampling_from_probs(x.softmax(-1), 50, 0.9, filter_apply_order="joint", seed=1, offset=2)
    a = calls[-1]
    assert a[2] == S._SAMPLE | S._JOINT and a[3] == 50 and a[4] == 0.9 and a[6] is None
    # refused arguments (int16 k, float64 p, a float k, strided rows) are converted and sent again
    n = len(calls)
    S.top_k_top_p_sampling_from_probs(x.softmax(-1), k.to(torch.int16), p.double(), seed=1, offset=2)
    assert len(calls) == n + 2 and calls[-1][3].dtype == torch.int32 and calls[-1][4].dtype == torch.float32
    S.top_k_sampling_from_probs(x.softmax(-1), 4.0, seed=1, offset=2)
    assert calls[-1][3] == 4 and type(calls[-1][3]) is int
    xt = torch.randn(10, 3).t()
    S.sampling_from_logits(xt, seed=1, offset=2)
    assert calls[-1][0].is_contiguous() and torch.equal(calls[-1][0], xt)
    # 0-d tensors and device seed/offset tensors pass through untouched
    st = torch.tensor([3], dtype=torch.int64)
    p0 = torch.tensor(0.8)
    S.top_p_sampling_from_probs(x.softmax(-1), p0, seed=st, offset=st)
    a = calls[-1]
    assert a[4] is p0 and a[7] is st and a[8] is st
    # default RNG: offsets advance per call
    S.sampling_from_probs(x.softmax(-1))
    o1 = calls[-1][8]
    S.sampling_from_probs(x.softmax(-1))
    assert calls[-1][8] == o1 + 1
    # renorm / mask outputs
    r = S.top_k_renorm_probs(x.softmax(-1), 3)
    assert r.shape == x.shape and r.dtype == torch.float32 and calls[-1][2] == S._RENORM and calls[-1][1] is r
    m = S.top_k_mask_logits(x.to(torch.bfloat16), 3)
    assert m.dtype == torch.bfloat16 and calls[-1][2] == S._MASK | S._LOGITS
    # 1-D input: the library takes it as one row; the token comes back 0-d
    y = S.sampling_from_logits(x[0])
    assert y.shape == () and calls[-1][0].shape == (10,)
    with pytest.raises(ValueError):
        S.top_k_top_p_sampling_from_probs(x, 1, 0.5, filter_apply_order="bogus")


def test_every_knob_the_kernels_read_is_a_documented_variable():
    """Each FIB_* variable the CUDA libraries read (std::getenv in kernels_cuda/) has an entry in
    fib_runtime.envs, so `fib env` lists it with its default and meaning; and that entry names the
    same default for the two-pass switches whose C++ default is spelled next to it."""
    import re

    from fib_runtime import envs

    read = set()
    for src in sorted((REPO / "kernels_cuda").rglob("*")):
        if src.suffix in (".cu", ".cuh", ".h"):
            read |= set(re.findall(r'getenv\("(FIB_[A-Z0-9_]+)"\)', src.read_text()))
    assert {"FIB_SAMPLING_TWOPASS_ROW_BOUND", "FIB_SAMPLING_TWOPASS2_MIN_B", "FIB_SAMPLING_REJECT_MIN_K"} <= read
    missing = sorted(read - set(envs.names()))
    assert not missing, f"read by kernels_cuda but not in fib_runtime/envs.py: {missing}"
    policy = (REPO / "kernels_cuda" / "include" / "fib" / "sampling" / "host_policy.h").read_text()
    for name, field in (("FIB_SAMPLING_TWOPASS2_MIN_B", "twopass2_min_b"), ("FIB_SAMPLING_TWOPASS_MAX_B", "twopass_max_b"),
                        ("FIB_SAMPLING_STREAM_MIN_B", "stream_min_b"), ("FIB_SAMPLING_PLAIN_MIN_B", "plain_min_b")):
        m = re.search(rf"int {field} = (\d+);", policy)
        assert m, field
        assert envs._SPECS[name].default == int(m.group(1)), name
