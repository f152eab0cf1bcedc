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
    return path == "gwbatch/_xp.py" or Path(path).name.startswith("_cuda")


def _file_io(path: str) -> bool:
    return path.startswith("gwbatch/io/")


@pytest.mark.parametrize(
    "module,allowed",
    [
        # CuPy only in the array-module switch and in the kernel modules (_cuda*.py).
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


# -- the rooms' own rules (issue 23) -------------------------------------------------------------

WORKFLOW = sorted((ROOT / "workflow").rglob("*.py"))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in LIBRARY + WORKFLOW}


def imported_modules(path: Path, top_level: bool) -> set[str]:
    """The project modules ``path`` imports (every import, or only those run when it is imported)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found - {module_name(path)}


#: The one arrow up from below the searches: the campaign schema asks the registry for the searches'
#: sections (inside :func:`gwbatch.config.schema.search_sections`, when the campaign model is first built).
SCHEMA_ASKS_THE_REGISTRY = ("gwbatch.config.schema", {"gwbatch.searches"})


def test_nothing_below_the_searches_imports_them_or_the_workflow():
    """The library's rooms (kernels, conditioning, io, background, ...) are used by the searches
    and the workflow, never the other way round."""
    offenders = {}
    for path in LIBRARY:
        name = module_name(path)
        if name.startswith("gwbatch.searches") or name == "gwbatch.__main__":  # the entry point hands over to the CLI
            continue
        bad = {m for m in imported_modules(path, top_level=False) if m.startswith(("gwbatch.searches", "workflow"))}
        if name == SCHEMA_ASKS_THE_REGISTRY[0]:
            assert imported_modules(path, top_level=True) & bad == set(), "the schema asks the registry on first use"
            bad -= SCHEMA_ASKS_THE_REGISTRY[1]
        if bad:
            offenders[rel(path)] = sorted(bad)
    assert offenders == {}


def test_only_the_searches_and_bank_building_take_config_models():
    """The campaign's pydantic models stop at the searches (which freeze them into settings) and at
    the SPIIR bank builder (bank files are configs of their own)."""
    allowed = ("gwbatch/config/", "gwbatch/searches/", "gwbatch/spiir/bank.py", "gwbatch/spiir/cache.py")
    offenders = [rel(p) for p in LIBRARY if not rel(p).startswith(allowed)
                 and any(m.startswith("gwbatch.config") for m in imported_modules(p, top_level=False))]
    assert offenders == []


def test_no_import_circles():
    """Module-level imports of the library and the workflow form no circle."""
    graph = {name: imported_modules(path, top_level=True) for name, path in MODULES.items()}
    done, path = set(), []

    def visit(node):
        if node in path:
            raise AssertionError("import circle: " + " -> ".join(path[path.index(node):] + [node]))
        if node in done:
            return
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            visit(nxt)
        path.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)


def test_the_workflow_never_names_a_search():
    """The workflow asks the search interface, never which search it runs (a fourth search needs no
    workflow change)."""
    kinds = {"pulse", "spiir", "burst"}
    offenders = []
    for path in WORKFLOW:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in kinds:
                offenders.append(f"{rel(path)}:{node.lineno}: {node.value!r}")
    assert offenders == []
