"""Hardware classes: the unit traces are matched on ("NVIDIA H200" and "NVIDIA H200 NVL" are H200).

    normalize_hardware("NVIDIA A800-SXM4-80GB")   # 'A800'
    normalize_hardware("NVIDIA H100 80GB HBM3")   # 'H100'
    normalize_hardware("NVIDIA GeForce RTX 4090") # 'RTX4090'
    normalize_hardware("")                        # 'CPU'
    detect_hardware()                             # class of CUDA device 0, or 'CPU'

Rule: drop the vendor words (NVIDIA, Tesla, GeForce, Quadro), take the first remaining token,
cut it at the first '-' (form factor and memory: ``-SXM4-80GB``, ``-PCIE``); a bare ``RTX``/``GTX``
token is joined with the model number that follows. Upper case. Empty or "cpu" names are CPU.
"""

from __future__ import annotations

import re
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
    """Class of CUDA device 0 when torch sees one, else ``CPU``. Initialises CUDA when present."""
    try:
        import torch

        if torch.cuda.is_available():
            return normalize_hardware(torch.cuda.get_device_name(0))
    except Exception:  # pragma: no cover - broken CUDA install: behave as CPU
        pass
    return "CPU"
