"""Build hook: compile the CUDA kernel families ahead of time during ``build_py``.

All metadata lives in pyproject.toml.  This file only adds a ``build_py`` command that first runs
``kernels_cuda/build.py`` so that ``fib_runtime/kernels/_bin/libfib_<family>.so`` ship inside the
wheel as package data (pyproject's ``[tool.setuptools.package-data]`` lists ``kernels/_bin/*.so``).
It also runs for ``pip install -e .`` (setuptools' editable_wheel runs build_py; the binaries are
written into the source tree, where the loader finds them).

``FIB_BUILD_KERNELS=0`` skips the compile.  Without nvcc the build prints "kernels unavailable"
and carries on: the package installs and reports the kernels unavailable at run time.
``FIB_BUILD_KERNELS_STRICT=1`` turns a missing nvcc into an error.  ``FIB_BUILD_JOBS`` sets the
parallel nvcc jobs (default: CPU count).
"""
import os
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.dist import Distribution
from setuptools.command.build_py import build_py as _build_py

HERE = Path(__file__).resolve().parent


def _ships_binaries() -> bool:
    """True when the wheel will hold compiled kernels (already built, or to be built now)."""
    built = any((HERE / "fib_runtime" / "kernels" / "_bin").glob("libfib_*.so"))
    return built or os.environ.get("FIB_BUILD_KERNELS", "1").strip().lower() not in ("0", "false", "no", "off")


def _build_kernels() -> None:
    if os.environ.get("FIB_BUILD_KERNELS", "1").strip().lower() in ("0", "false", "no", "off"):
        print("fib kernels: skipped (FIB_BUILD_KERNELS=0)")
        return
    script = HERE / "kernels_cuda" / "build.py"
    if not script.is_file():  # e.g. building from an sdist that left the sources out
        print("fib kernels: kernels_cuda/build.py not found; kernels unavailable")
        return
    cmd = [sys.executable, str(script)]
    if os.environ.get("FIB_BUILD_JOBS"):
        cmd += ["-j", os.environ["FIB_BUILD_JOBS"]]
    if os.environ.get("FIB_BUILD_KERNELS_STRICT", "0") == "1":
        cmd.append("--strict")
    rc = subprocess.call(cmd, cwd=str(HERE))
    if rc != 0:
        raise SystemExit(f"fib kernels: kernels_cuda/build.py failed (exit {rc}); "
                         "set FIB_BUILD_KERNELS=0 to install without CUDA kernels")


class build_py(_build_py):
    def run(self):
        _build_kernels()
        # data_files is computed lazily from the package-data globs; drop any early value so
        # the freshly built .so files are picked up.
        self.__dict__.pop("data_files", None)
        super().run()
        # SGLang activation without plugins: a .pth at the root of site-packages, gated by
        # FIB_ENABLE_APPLY / FIB_ENABLE_TRACING (adapters/sglang/_autoload.py). A wheel puts
        # top-level files of build_lib at the root of site-packages.
        pth = HERE / "adapters" / "sglang" / "fib_runtime_autoload.pth"
        if pth.is_file():
            self.copy_file(str(pth), os.path.join(self.build_lib, pth.name))

    def get_outputs(self, include_bytecode=1):
        outs = super().get_outputs(include_bytecode)
        return outs + [os.path.join(self.build_lib, "fib_runtime_autoload.pth")]


cmdclass = {"build_py": build_py}

try:  # the .so files are Python-independent (tvm-ffi C ABI): tag the wheel py3-none-<platform>
    try:
        from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
    except ImportError:  # older setuptools
        from wheel.bdist_wheel import bdist_wheel as _bdist_wheel

    class bdist_wheel(_bdist_wheel):
        def finalize_options(self):
            super().finalize_options()
            if _ships_binaries():
                self.root_is_pure = False

        def get_tag(self):
            python, abi, plat = super().get_tag()
            return ("py3", "none", plat) if not self.root_is_pure else (python, abi, plat)

    cmdclass["bdist_wheel"] = bdist_wheel
except ImportError:
    pass



class BinaryDistribution(Distribution):
    """With kernels, the whole package is platform-specific: it installs to platlib, so a wheel
    holds ``fib_runtime/`` at its root (not under ``.data/purelib``)."""

    def has_ext_modules(self):
        return _ships_binaries()


setup(cmdclass=cmdclass, distclass=BinaryDistribution)
