"""Preparation on forked local CPU workers (:mod:`workflow.cpu_workers`): every result, failures named,
and a bank built on them identical to one built in process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gwbatch.errors import GwbatchError
from workflow.cpu_workers import forked_map

REPO = Path(__file__).resolve().parents[1]


def _square(offset: int, item: int) -> int:
    if item == 13:
        raise ValueError("thirteen")
    if item == 17:
        raise GwbatchError("seventeen")
    return offset + item * item


class Named(GwbatchError):
    pass


def test_forked_map_yields_every_result():
    got = sorted(forked_map(2, _square, (1,), list(range(12)), desc="squares", failure=None, progress=False))
    assert got == sorted(1 + k * k for k in range(12))


def test_forked_map_names_the_failed_item_and_passes_gwbatch_errors():
    def failure(item, exc):
        return Named(f"item {item}: {exc}")

    with pytest.raises(Named, match="item 13: thirteen"):
        list(forked_map(2, _square, (0,), [1, 13, 2], desc="squares", failure=failure, progress=False))
    with pytest.raises(GwbatchError, match="^seventeen$"):
        list(forked_map(2, _square, (0,), [17], desc="squares", failure=failure, progress=False))


def _build(tmp_path: Path, cluster: str, name: str) -> str:
    out = tmp_path / name
    run = subprocess.run([sys.executable, "-m", "workflow.cli", "-v", "bank", "build",
                          str(REPO / "configs/banks/bbh-small.yaml"), "--cluster", cluster, "--no-progress",
                          "--out", str(out)], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stderr


def test_bank_built_on_forked_workers_equals_the_in_process_build(tmp_path):
    from gwbatch.io.banks import load_bank

    log = _build(tmp_path, "local", "forked.h5")
    assert "local CPU workers, forked" in log
    _build(tmp_path, "in-process", "here.h5")
    forked, here = load_bank(tmp_path / "forked.h5"), load_bank(tmp_path / "here.h5")
    assert forked.size == here.size == 37
    assert forked.filters_digest == here.filters_digest
