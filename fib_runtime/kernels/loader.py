"""Load the prebuilt kernel families (``_bin/libfib_<family>.so``) through apache-tvm-ffi.

``load_family(name)`` returns the tvm_ffi module, or ``None`` when the family cannot be used
here (not built, no tvm_ffi, no CUDA driver/GPU, load error).  ``availability()`` maps every
known family to ``"ok"`` or the reason.  Neither ever raises.  Each family is loaded at most
once per process (thread-safe); the outcome, good or bad, is cached.

Environment: ``FIB_KERNELS_DIR`` overrides the folder holding the ``.so`` files;
``FIB_DISABLE_KERNELS=1`` (or a comma list of families) reports them unavailable.
"""
from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import Any

_BIN = Path(__file__).resolve().parent / "_bin"
_SRC = Path(__file__).resolve().parents[2] / "kernels_cuda" / "src"

_lock = threading.Lock()
_cache: dict[str, tuple[Any, str]] = {}  # family -> (module or None, "ok" or reason)
_gpu_reason: str | None = None
_gpu_checked = False


def bin_dir() -> Path:
    return Path(os.environ.get("FIB_KERNELS_DIR") or _BIN)


def known_families() -> list[str]:
    """Families built here (``_bin``) plus those with a source in a source checkout."""
    names = set()
    try:
        names.update(p.name[len("libfib_"):-len(".so")] for p in bin_dir().glob("libfib_*.so"))
    except OSError:
        pass
    try:
        if _SRC.is_dir():
            names.update(p.stem for p in _SRC.glob("*.cu"))
    except OSError:
        pass
    return sorted(names)


def _check_gpu() -> str | None:
    """None when a CUDA driver with at least one device is present, else the reason."""
    global _gpu_checked, _gpu_reason
    if _gpu_checked:
        return _gpu_reason
    reason: str | None = None
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        reason = "no CUDA driver (libcuda.so.1 not found)"
    else:
        try:
            if lib.cuInit(0) != 0:
                reason = "CUDA driver present but cuInit failed (no usable GPU)"
            else:
                n = ctypes.c_int(0)
                if lib.cuDeviceGetCount(ctypes.byref(n)) != 0 or n.value == 0:
                    reason = "no CUDA device"
        except Exception as exc:  # noqa: BLE001
            reason = f"CUDA driver query failed: {exc}"
    _gpu_reason, _gpu_checked = reason, True
    return reason


def _disabled(name: str) -> bool:
    v = os.environ.get("FIB_DISABLE_KERNELS", "").strip()
    if not v or v == "0":
        return False
    if v in ("1", "all", "true", "yes"):
        return True
    return name in {s.strip() for s in v.split(",")}


def _load(name: str) -> tuple[Any, str]:
    if _disabled(name):
        return None, "disabled by FIB_DISABLE_KERNELS"
    path = bin_dir() / f"libfib_{name}.so"
    if not path.is_file():
        return None, f"not built ({path.name} missing; run kernels_cuda/build.py with nvcc available)"
    try:
        import tvm_ffi  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return None, f"apache-tvm-ffi not importable: {exc}"
    gpu = _check_gpu()
    if gpu is not None:
        return None, gpu
    try:
        import tvm_ffi

        mod = tvm_ffi.load_module(str(path))
    except Exception as exc:  # noqa: BLE001
        return None, f"load failed: {type(exc).__name__}: {exc}"
    return mod, "ok"


def load_family(name: str) -> Any | None:
    """The family's tvm_ffi module, or None. Never raises."""
    try:
        hit = _cache.get(name)
        if hit is None:
            with _lock:
                hit = _cache.get(name)
                if hit is None:
                    try:
                        hit = _load(name)
                    except Exception as exc:  # noqa: BLE001 - never raise
                        hit = (None, f"load failed: {type(exc).__name__}: {exc}")
                    _cache[name] = hit
        return hit[0]
    except Exception:  # noqa: BLE001
        return None


def reason(name: str) -> str:
    """"ok" or why the family is unavailable (loads it if needed)."""
    load_family(name)
    hit = _cache.get(name)
    return hit[1] if hit else "unknown"


def availability() -> dict[str, str]:
    """{family: "ok" | reason} for every known family. Never raises."""
    out: dict[str, str] = {}
    try:
        for name in known_families():
            out[name] = reason(name)
    except Exception as exc:  # noqa: BLE001
        out.setdefault("*", f"availability check failed: {exc}")
    return out


def _reset_for_tests() -> None:
    global _gpu_checked, _gpu_reason
    with _lock:
        _cache.clear()
        _gpu_checked, _gpu_reason = False, None
