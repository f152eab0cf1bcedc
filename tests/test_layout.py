"""The house rules of DESIGN.md, checked on the source: who may import what."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
LIBRARY = sorted((ROOT / "gwbatch").rglob("*.py"))


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("module", ["dask", "distributed", "dask_cuda"])
def test_library_never_imports_dask(module):
    offenders = [rel(p) for p in LIBRARY if module in imports(p)]
    # gwbatch/__main__.py only hands over to the workflow CLI.
    assert offenders == []


def _cuda_kernels(path: str) -> bool:
    return path == "gwbatch/_xp.py" or path.endswith("/_cuda.py")


def _file_io(path: str) -> bool:
    return path.startswith("gwbatch/io/")


@pytest.mark.parametrize(
    "module,allowed",
    [
        # CuPy only in the array-module switch and in the kernel modules named _cuda.py.
        ("cupy", _cuda_kernels),
        ("yaml", lambda p: p == "gwbatch/config/yamlfile.py"),
        ("zarr", lambda p: p == "gwbatch/io/store.py"),
        # HDF5 (GWOSC frames, waveform files, bank files) only in the I/O package.
        ("h5py", _file_io),
        ("pyarrow", lambda p: p == "gwbatch/io/tables.py"),
    ],
)
def test_one_place_per_concern(module, allowed):
    offenders = {rel(p) for p in LIBRARY if module in imports(p) and not allowed(rel(p))}
    assert offenders == set(), f"{module} imported where it does not belong: {offenders}"


def test_import_gwbatch_without_gpu_packages():
    code = (
        "import sys; sys.modules['cupy'] = None; sys.modules['dask_cuda'] = None\n"
        "import gwbatch, gwbatch.searches.pulse, gwbatch.conditioning, gwbatch._xp as x\n"
        "assert x.resolve_backend('auto') == 'numpy'\n"
        "assert 'distributed' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
