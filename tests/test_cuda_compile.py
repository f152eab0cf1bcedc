"""Every CUDA kernel module compiles for sm_90 with nvcc (no GPU needed), without register spills,
and names its CPU twin.

Kernel modules are found, not listed: every ``gwbatch/**/_cuda*.py``.  One that builds a
``cupy.RawModule`` exposes ``compile_cases()``, ``(label, source, name expressions)`` built from the
same constants and functions its launcher compiles from (``SOURCE``/``source()``,
``NAME_EXPRESSIONS``/``kernel_name``, ``OPTIONS``), so nothing here restates a kernel's signature:
the name expressions are instantiated by taking their addresses, as NVRTC does for CuPy.
"""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
NVCC = shutil.which("nvcc")
MODULES = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "gwbatch").rglob("_cuda*.py"))


def _builds_kernels(name: str) -> bool:
    return "RawModule(" in (ROOT / (name.replace(".", "/") + ".py")).read_text()


KERNEL_MODULES = [m for m in MODULES if _builds_kernels(m)]
CASES = {f"{m}: {label}": (m, source, names)
         for m in KERNEL_MODULES for label, source, names in importlib.import_module(m).compile_cases()}


def test_every_kernel_module_is_found_and_compiled():
    assert {"gwbatch.pulse._cuda", "gwbatch.pulse._cuda_fused", "gwbatch.spiir._cuda", "gwbatch.coherent._cuda",
            "gwbatch.burst._cuda"} <= set(KERNEL_MODULES)
    assert {m for m, _, _ in CASES.values()} == set(KERNEL_MODULES)


@pytest.mark.parametrize("module", KERNEL_MODULES)
def test_launcher_compiles_with_the_module_options(module):
    """Every ``RawModule`` of the module is built with ``options=OPTIONS``, the options compiled here."""
    tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "RawModule"]
    assert calls
    for call in calls:
        options = [k.value for k in call.keywords if k.arg == "options"]
        assert len(options) == 1 and isinstance(options[0], ast.Name) and options[0].id == "OPTIONS", module


def _instantiations(names: tuple[str, ...]) -> str:
    """Host code that takes each name expression's address: nvcc instantiates those templates."""
    if not names:
        return ""
    return "void gwbatch_name_expressions()\n{\n" + "".join(f"    (void)&{n};\n" for n in names) + "}\n"


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
@pytest.mark.parametrize("case", CASES)
def test_compiles_for_sm90_without_spills(case, tmp_path):
    module, source, names = CASES[case]
    cu = tmp_path / "k.cu"
    cu.write_text(source + "\n" + _instantiations(names))
    out = subprocess.run(
        [NVCC, "-arch=sm_90", "-cubin", *importlib.import_module(module).OPTIONS, "-Xptxas", "-v",
         "-o", str(tmp_path / "k.cubin"), str(cu)],
        capture_output=True, text=True, check=False,
    )
    assert out.returncode == 0, out.stderr
    entries = re.findall(r"Compiling entry function '(\w+)'", out.stderr)
    assert len(entries) >= max(1, len(names)), out.stderr  # every name expression became a kernel
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", out.stderr)]
    assert spills and max(spills) == 0, out.stderr


TWIN = re.compile(r"CPU twin: :func:`~?([\w.]+)`")


@pytest.mark.parametrize("module", MODULES)
def test_docstring_names_a_cpu_twin_that_exists(module):
    doc = importlib.import_module(module).__doc__ or ""
    found = TWIN.search(doc)
    assert found, f"{module}: no 'CPU twin: :func:`...`' in its docstring"
    path = found.group(1).split(".")
    for cut in range(len(path) - 1, 0, -1):  # the longest importable module, then attributes
        try:
            obj = importlib.import_module(".".join(path[:cut]))
        except ImportError:
            continue
        for attr in path[cut:]:
            obj = getattr(obj, attr)
        break
    else:
        pytest.fail(f"{module}: twin {found.group(1)} does not import")
    assert callable(obj), found.group(1)
