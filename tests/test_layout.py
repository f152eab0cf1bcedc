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


@pytest.mark.parametrize(
    "module,allowed",
    [
        ("cupy", {"gwbatch/_xp.py", "gwbatch/pulse/_cuda.py"}),
        ("yaml", {"gwbatch/config.py"}),
        ("zarr", {"gwbatch/io/store.py"}),
        ("h5py", {"gwbatch/io/gwosc.py"}),
        ("pyarrow", {"gwbatch/io/tables.py"}),
    ],
)
def test_one_place_per_concern(module, allowed):
    users = {rel(p) for p in LIBRARY if module in imports(p)}
    assert users <= allowed, f"{module} imported outside {allowed}: {users - allowed}"


def test_import_gwbatch_without_gpu_packages():
    code = (
        "import sys; sys.modules['cupy'] = None; sys.modules['dask_cuda'] = None\n"
        "import gwbatch, gwbatch.searches.pulse, gwbatch.conditioning, gwbatch._xp as x\n"
        "assert x.resolve_backend('auto') == 'numpy'\n"
        "assert 'distributed' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
