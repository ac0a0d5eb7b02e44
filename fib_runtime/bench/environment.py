"""The ``environment`` of an evaluation: hardware name, library versions, and the worker's device.

``environment.hardware`` is the GPU name (``torch.cuda.get_device_name``) or the CPU model;
``environment.libs`` holds ``torch``, ``cuda``, ``driver``, ``triton``, ``flashinfer``,
``fib_runtime``, ``python`` (each only when known) plus ``device`` (``"cuda:1"``, ``"cpu:0"``: the
worker's device label) and ``device_index``. Computed once per worker process.
"""

from __future__ import annotations

import functools
import importlib.metadata
import platform
import subprocess
import sys
from typing import Dict


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except Exception:
        return None


def _module_version(name: str) -> str | None:
    mod = sys.modules.get(name)
    if mod is None:
        try:
            import importlib

            mod = importlib.import_module(name)
        except Exception:
            return None
    return getattr(mod, "__version__", None)


@functools.lru_cache(maxsize=None)
def _driver(index: int) -> str | None:
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader",
                            "-i", str(index)], capture_output=True, text=True, timeout=10)
        v = r.stdout.strip().splitlines()
        return v[0].strip() if r.returncode == 0 and v else None
    except Exception:
        return None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def device_index(label: str) -> int:
    _, _, idx = label.partition(":")
    return int(idx) if idx.isdigit() else 0


def snapshot(device_label: str) -> Dict[str, object]:
    """``{"hardware": ..., "libs": {...}}`` for a worker running on ``device_label``."""
    import torch

    libs: Dict[str, str] = {"python": platform.python_version(), "torch": torch.__version__}
    idx = device_index(device_label)
    if device_label.startswith("cuda") and torch.cuda.is_available():
        hardware = torch.cuda.get_device_name(idx)
        if torch.version.cuda:
            libs["cuda"] = str(torch.version.cuda)
        cc = torch.cuda.get_device_capability(idx)
        libs["compute_capability"] = f"{cc[0]}.{cc[1]}"
        drv = _driver(idx)
        if drv:
            libs["driver"] = drv
    else:
        hardware = f"CPU ({_cpu_name()})"  # hardware class 'CPU' for the dispatcher
    for name in ("triton", "flashinfer"):
        if name in sys.modules or _version(name) or _version(name + "-python"):
            v = _module_version(name) or _version(name) or _version(name + "-python")
            if v:
                libs[name] = str(v)
    v = _version("fib-runtime")
    if v:
        libs["fib_runtime"] = v
    libs["device"] = device_label
    libs["device_index"] = str(idx)
    return {"hardware": hardware, "libs": libs}
