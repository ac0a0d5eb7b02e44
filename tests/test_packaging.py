"""Packaging: adapters/ and tracer/ import only as fib_runtime.adapters / fib_runtime.tracer.

Every folder with an ``__init__.py`` under adapters/ and tracer/ must (1) be listed in
``[tool.setuptools] packages`` (a missing one silently drops out of the wheel) and (2) import
as ``fib_runtime.<...>``. A bare ``import adapters`` / ``import tracer`` must never resolve to
our folders (docs/TEAM.md, style.md section 3). Also: the embedded dataset is package data, and
no source file imports a bare ``adapters`` / ``tracer``.
"""

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = None

REPO = Path(__file__).resolve().parents[1]
MAPPED = {"adapters": "fib_runtime.adapters", "tracer": "fib_runtime.tracer"}


def _packages_on_disk():
    out = []
    for folder, pkg in MAPPED.items():
        for init in sorted((REPO / folder).rglob("__init__.py")):
            rel = init.parent.relative_to(REPO / folder)
            if "__pycache__" in rel.parts:
                continue
            out.append(".".join([pkg, *rel.parts]))
    return out


PACKAGES = _packages_on_disk()


def test_there_is_something_to_check():
    assert "fib_runtime.adapters" in PACKAGES and "fib_runtime.tracer" in PACKAGES


@pytest.mark.skipif(tomllib is None, reason="tomllib needs Python 3.11")
def test_every_package_is_listed_in_pyproject():
    conf = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(conf["packages"])
    missing = [p for p in PACKAGES if p not in listed]
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"
    assert conf["package-dir"] == {"fib_runtime.adapters": "adapters", "fib_runtime.tracer": "tracer"}
    for init in (REPO / "fib_runtime").rglob("__init__.py"):
        pkg = ".".join(init.parent.relative_to(REPO).parts)
        assert pkg in listed or "__pycache__" in pkg or "data" in init.parts, pkg


@pytest.mark.parametrize("pkg", PACKAGES)
def test_imports_under_fib_runtime(pkg):
    mod = importlib.import_module(pkg)
    folder = REPO / Path(*pkg.split(".")[1:])
    assert Path(mod.__file__).resolve().parent == folder.resolve()


@pytest.mark.parametrize("bare", sorted(MAPPED))
def test_bare_import_is_not_ours(bare, tmp_path):
    code = (f"import importlib.util, sys\n"
            f"spec = importlib.util.find_spec({bare!r})\n"
            f"print(spec.origin if spec else 'NONE')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    origin = r.stdout.strip()
    assert origin == "NONE" or not Path(origin).resolve().is_relative_to(REPO), origin


def test_no_source_imports_bare_names():
    offenders = []
    roots = [REPO / "fib_runtime", REPO / "adapters", REPO / "tracer", REPO / "tests", REPO / "examples",
             REPO / "benchmarks"]
    for root in roots:
        for path in root.rglob("*.py") if root.exists() else ():
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"))
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                if any(n.split(".")[0] in MAPPED for n in names):
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not offenders, offenders


def test_embedded_dataset_is_package_data():
    import fib_runtime
    from fib_runtime.default_dataset import default_dataset_path

    assert default_dataset_path().is_relative_to(Path(fib_runtime.__file__).parent)
    if tomllib is not None:
        data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
        assert "data/**/*" in data["fib_runtime"]


def test_built_wheel_layout_and_imports(tmp_path):
    """A built wheel holds fib_runtime/adapters/... and fib_runtime/tracer/..., never a top-level
    adapters/ or tracer/, ships the embedded dataset, and imports them from the unpacked wheel."""
    import os
    import zipfile

    env = dict(os.environ, FIB_BUILD_KERNELS="0")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "w"),
                        str(REPO)], capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0 and ("No matching distribution" in r.stderr or "Could not find a version" in r.stderr):
        pytest.skip("build dependencies cannot be installed here: " + r.stderr.strip().splitlines()[-1])
    assert r.returncode == 0, r.stderr[-2000:]
    (whl,) = (tmp_path / "w").glob("fib_runtime-*.whl")
    names = zipfile.ZipFile(whl).namelist()
    # the .pth at the root activates the SGLang hook (gated by FIB_ENABLE_APPLY/TRACING)
    assert {n.split("/")[0] for n in names} == {"fib_runtime", "fib_runtime_autoload.pth",
                                                 whl.name.split("-py")[0] + ".dist-info"}
    for pkg in PACKAGES:
        assert "/".join(pkg.split(".")) + "/__init__.py" in names, pkg
    from fib_runtime.default_dataset import default_dataset_path

    ds = default_dataset_path()
    shipped = sorted(p.relative_to(ds).as_posix() for p in ds.rglob("*") if p.is_file())
    assert all(f"fib_runtime/data/default_dataset/{f}" in names for f in shipped)
    unpacked = tmp_path / "site"
    zipfile.ZipFile(whl).extractall(unpacked)
    code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
            "import importlib.util, fib_runtime\n"
            "assert fib_runtime.__file__.startswith(sys.argv[1]), fib_runtime.__file__\n"
            f"for p in {PACKAGES!r}:\n"
            "    spec = importlib.util.find_spec(p)\n"
            "    assert spec and spec.origin.startswith(sys.argv[1]), (p, spec)\n"
            "from fib_runtime.default_dataset import default_dataset_path\n"
            "assert (default_dataset_path() / 'definitions').is_dir()\n"
            "from fib_runtime.store import Dataset\n"
            "assert Dataset.open(default_dataset_path()).problems == []\n")
    r = subprocess.run([sys.executable, "-c", code, str(unpacked)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
