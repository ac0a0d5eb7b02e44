"""Hardware classes: the unit traces are matched on ("NVIDIA H200" and "NVIDIA H200 NVL" are H200).

    normalize_hardware("NVIDIA A800-SXM4-80GB")   # 'A800'
    normalize_hardware("NVIDIA H100 80GB HBM3")   # 'H100'
    normalize_hardware("NVIDIA GeForce RTX 4090") # 'RTX4090'
    normalize_hardware("")                        # 'CPU'
    detect_hardware()                             # class of the first visible GPU, or 'CPU'

Rule: drop the vendor words (NVIDIA, Tesla, GeForce, Quadro), take the first remaining token,
cut it at the first '-' (form factor and memory: ``-SXM4-80GB``, ``-PCIE``); a bare ``RTX``/``GTX``
token is joined with the model number that follows. Upper case. Empty or "cpu" names are CPU.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Optional

_VENDOR = {"nvidia", "tesla", "geforce", "quadro", "amd", "instinct", "radeon"}


def normalize_hardware(name: Optional[str]) -> str:
    """The hardware class of a device name (see module docstring)."""
    if not name:
        return "CPU"
    toks = [t for t in re.split(r"\s+", name.strip()) if t and t.lower() not in _VENDOR]
    if not toks or toks[0].lower() in ("cpu", "x86_64", "aarch64"):
        return "CPU"
    head = toks[0]
    if head.upper() in ("RTX", "GTX") and len(toks) > 1:
        head = head + toks[1]
    head = head.split("-")[0]
    return head.upper() or "CPU"


def detect_hardware() -> str:
    """Class of the first visible GPU, or ``CPU``. Never initialises CUDA.

    Initialising CUDA in an engine's parent process breaks the workers it forks, so the name is
    read, in order, from: torch when CUDA is already initialised (the current device); NVML
    (``pynvml``, from nvidia-ml-py, when installed; the first ``CUDA_VISIBLE_DEVICES`` entry
    when it is a plain index); the driver's ``/proc/driver/nvidia/gpus/*/information``. None of
    these found: ``CPU``.
    """
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return normalize_hardware(torch.cuda.get_device_name(torch.cuda.current_device()))
    except Exception:
        pass
    name = _nvml_name() or _proc_name()
    return normalize_hardware(name) if name else "CPU"


def _first_visible_index() -> int:
    vis = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return int(vis) if vis.isdigit() else 0


def _nvml_name() -> Optional[str]:
    try:
        import pynvml
    except Exception:
        return None
    try:
        pynvml.nvmlInit()
        try:
            if pynvml.nvmlDeviceGetCount() == 0:
                return None
            h = pynvml.nvmlDeviceGetHandleByIndex(_first_visible_index())
            name = pynvml.nvmlDeviceGetName(h)
            return name.decode() if isinstance(name, bytes) else str(name)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


def _proc_name() -> Optional[str]:
    base = "/proc/driver/nvidia/gpus"
    try:
        gpus = sorted(os.listdir(base))
    except OSError:
        return None
    for g in gpus:
        try:
            with open(os.path.join(base, g, "information")) as f:
                for line in f:
                    if line.startswith("Model:"):
                        return line.split(":", 1)[1].strip()
        except OSError:
            continue
    return None
