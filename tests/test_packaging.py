"""Packaging (issue 27): a built gwbatch wheel installs beside gwpy and ligo.skymap without moving their
dask, and ships the example campaigns.

pip resolves, in a fresh virtual environment, gwpy and ligo.skymap alone and then with the wheel
(``pip install --dry-run --report``: the resolution an install would do, without installing); the
dask and distributed versions must be the same.  Needs the package index (as the install does);
skipped when it cannot be reached.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NEIGHBOURS = ("gwpy", "ligo.skymap")


def _pip(python: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True, timeout=900)


def _resolved(python: Path, report: Path, *requirements: str) -> dict[str, str]:
    done = _pip(python, "install", "--quiet", "--dry-run", "--ignore-installed", "--report", str(report), *requirements)
    assert done.returncode == 0, done.stderr[-2000:]
    return {item["metadata"]["name"].lower(): item["metadata"]["version"]
            for item in json.loads(report.read_text())["install"]}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The project's wheel.  pip builds it in the tree (``build/``), so pytest-xdist workers that
    each need it take turns (a lock beside their shared base directory); two builds at once
    overwrite each other's files."""
    import fcntl

    out = tmp_path_factory.mktemp("wheel")
    with open(tmp_path_factory.getbasetemp().parent / "gwbatch-wheel.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = _pip(Path(sys.executable), "wheel", "--quiet", "--no-deps", str(REPO), "-w", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    return next(out.glob("gwbatch-*.whl"))


def test_wheel_ships_the_example_campaigns(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "gwbatch/examples/demo.yaml" in names and "gwbatch/examples/banks/bbh.yaml" in names
    assert "gwbatch/conditioning/data/aLIGO_ZeroDetHighPower_asd.txt" in names


@pytest.mark.slow
def test_wheel_beside_gwpy_keeps_their_dask(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    if _pip(python, "download", "--quiet", "--no-deps", "--dest", str(tmp_path / "probe"), "gwpy").returncode:
        pytest.skip("the package index cannot be reached")
    alone = _resolved(python, tmp_path / "alone.json", *NEIGHBOURS)
    together = _resolved(python, tmp_path / "together.json", *NEIGHBOURS, str(wheel))
    assert "gwbatch" in together
    for name in ("dask", "distributed"):
        if name in alone:
            assert together[name] == alone[name], f"{name} {alone[name]} beside gwpy, {together[name]} with gwbatch"
    assert together["dask"] == alone["dask"]
