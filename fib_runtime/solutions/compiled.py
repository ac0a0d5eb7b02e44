"""cuda/cpp solutions: compile once per content hash under a file lock, load with tvm-ffi or torch.

Layout: ``$FIB_CACHE_PATH/<language>/<hash>/src/`` (the sources), ``.../build/`` (the build
folder), ``.../<binding>.done`` (the path of the finished library, written last). A finished
build is loaded without compiling; concurrent processes wait on ``<hash>.lock`` for the one
that builds. Compile errors raise :class:`~fib_runtime.solutions.SolutionLoadError` with the
compiler's message (the in-process cache remembers the failure; the disk does not, so a fixed
toolchain is retried in the next process).
"""

from __future__ import annotations

from pathlib import Path

from . import SolutionLoadError, _write_sources

_CUDA_EXT = (".cu",)
_CPP_EXT = (".cc", ".cpp", ".cxx", ".c")


def load_compiled(solution, h: str, root: Path):
    binding = solution.spec.binding or "tvm-ffi"
    folder = root / solution.spec.language / h
    src = folder / "src"
    try:
        from filelock import FileLock

        folder.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(folder) + ".lock")
    except OSError as e:
        raise SolutionLoadError(f"solution {solution.name!r}: cache folder {folder} is not writable "
                                f"({e}); set FIB_CACHE_PATH to a writable folder") from e
    with lock:
        _write_sources(solution, src)
        files = [str(src / s.path) for s in solution.sources
                 if s.path.endswith(_CUDA_EXT + _CPP_EXT)]
        if not files:
            raise SolutionLoadError(f"solution {solution.name!r}: no .cu/.cpp source to compile")
        name = f"fib_{h[:16]}"
        try:
            if binding == "torch":
                return _torch(solution, name, files, src, folder), str(folder)
            return _tvm_ffi(solution, name, files, src, folder), str(folder)
        except SolutionLoadError:
            raise
        except Exception as e:  # compiler errors, missing nvcc, bad symbol...
            raise SolutionLoadError(f"solution {solution.name!r}: build failed ({binding}): "
                                    f"{type(e).__name__}: {str(e)[-2000:]}") from e


def _tvm_ffi(solution, name, files, src: Path, folder: Path):
    import tvm_ffi
    import tvm_ffi.cpp

    done = folder / "tvm-ffi.done"
    lib = done.read_text().strip() if done.exists() else ""
    if not lib or not Path(lib).exists():
        lib = tvm_ffi.cpp.build(name, sources=files, extra_include_paths=[str(src)],
                                build_directory=str(folder / "build"))
        done.write_text(str(lib))
    mod = tvm_ffi.load_module(lib)
    fname = solution.spec.entry_function
    try:
        fn = getattr(mod, fname)
    except AttributeError:
        fn = None
    if fn is None:
        raise SolutionLoadError(f"solution {solution.name!r}: {lib} exports no function {fname!r} "
                                f"(use TVM_FFI_DLL_EXPORT_TYPED_FUNC)")
    if solution.spec.destination_passing_style:
        return fn
    return _to_torch(fn)


def _to_torch(fn):
    import torch

    def run(*args):
        out = fn(*args)
        if isinstance(out, (tuple, list)) or type(out).__name__ == "Array":
            return tuple(torch.from_dlpack(o) if hasattr(o, "__dlpack__") else o for o in out)
        return torch.from_dlpack(out) if hasattr(out, "__dlpack__") else out

    return run


def _torch(solution, name, files, src: Path, folder: Path):
    from torch.utils.cpp_extension import load

    build = folder / "build-torch"
    build.mkdir(parents=True, exist_ok=True)
    mod = load(name=name, sources=files, extra_include_paths=[str(src)], build_directory=str(build),
               verbose=False)
    fn = getattr(mod, solution.spec.entry_function, None)
    if fn is None:
        raise SolutionLoadError(f"solution {solution.name!r}: torch extension has no "
                                f"{solution.spec.entry_function!r}")
    return fn
