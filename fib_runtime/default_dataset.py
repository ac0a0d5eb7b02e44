"""The small FlashInfer Trace dataset shipped inside the package, and how commands pick a dataset.

    from fib_runtime.default_dataset import default_dataset_path, resolve_dataset_path
    default_dataset_path()          # .../fib_runtime/data/default_dataset
    resolve_dataset_path(None)      # $FIB_DATASET_PATH if set, else the embedded default

The embedded dataset (``fib_runtime/data/default_dataset/``) holds a slice of the public
FlashInfer Trace dataset (Apache-2.0: 3 sampling, 2 rmsnorm, 1 paged GQA decode and 1 GEMM
definition, their workloads and two evaluation-trace files) plus random workloads for the three
sampling definitions, so that ``fib list`` / ``fib show`` and the demo have something to run
with no download. It is read-only package data: commands that write take an explicit root.
The paged GQA workloads name blob files that are not shipped (as in the public dataset, whose
blobs live in Git LFS): validate it with ``--skip-blobs``.

``FIB_DATASET_PATH`` is never created when missing (opening it is an error instead).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

ENV_VAR = "FIB_DATASET_PATH"


def default_dataset_path() -> Path:
    """Path of the dataset embedded in the package (exists in source trees, editable and wheel installs)."""
    return Path(__file__).resolve().parent / "data" / "default_dataset"


def resolve_dataset_path(path: Optional[Union[str, os.PathLike]] = None) -> Path:
    """``path`` if given, else ``$FIB_DATASET_PATH`` if set and non-empty, else the embedded default."""
    if path is not None and str(path) != "":
        return Path(path).expanduser()
    from . import envs  # every FIB_* variable is parsed there

    env = envs.get(ENV_VAR)
    if env:
        return Path(env)
    return default_dataset_path()
