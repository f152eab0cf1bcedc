"""Faults in the data and in tasks (issue 8): a corrupted store chunk fails only the tasks that read
it, the campaign finishes the rest, says which chunks failed and exits 5, and --resume completes it
once the data is repaired; a store chunk never written is a gap, masked and left out of the
livetime, while a written chunk that disappears is damage that fails its tasks; a task that fails
once is run again."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from gwbatch.config import load_campaign
from gwbatch.io.tables import read_table
from gwbatch.searches.pulse import PulseSearch
from workflow.campaign import run_campaign

FS, STORE_CHUNK = 1024, 32 * 1024  # store chunks of 32 s


@pytest.fixture(scope="module")
def chunked_store(tmp_path_factory) -> Path:
    """256 s of H1 and L1 at 1024 Hz in 32-s store chunks, with loud injections."""
    from gwbatch.simulate import simulate_store
    from gwbatch.simulate.injections import InjectionSpec

    path = tmp_path_factory.mktemp("faults") / "store.zarr"
    return simulate_store(path, ifos=("H1", "L1"), duration=256, sample_rate=FS, seed=5,
                          injections=InjectionSpec(count=6, snr=(15.0, 30.0), f0=(100.0, 300.0)),
                          chunk_samples=STORE_CHUNK)


def campaign_file(store: Path, directory: Path, kind: str = "in-process") -> Path:
    path = directory / f"{kind}.yaml"
    path.write_text(yaml.safe_dump({
        "name": "faults", "data": {"store": str(store)},
        "search": {"kind": "pulse", "threshold": 4.0},
        "background": {"slides": 20, "slide_step": 1.0},
        "plan": {"chunk": 32.0},
        "cluster": {"kind": kind, "n_workers": 2, "dashboard_address": ":0"},
        "backend": "numpy",
    }))
    return path


def store_chunk(store: Path, row: int, index: int) -> Path:
    return store / "strain" / "c" / str(row) / str(index)


@pytest.fixture(scope="module")
def reference(chunked_store, tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("faults-reference")
    out = directory / "run"
    run_campaign(load_campaign(campaign_file(chunked_store, directory)), out=out, progress=False)
    return out


def test_corrupted_store_chunk_fails_its_tasks_only(chunked_store, reference, tmp_path):
    store = tmp_path / "store.zarr"
    shutil.copytree(chunked_store, store)
    victim = store_chunk(store, 0, 3)  # H1, samples 3 * 32768 ... 4 * 32768
    good = victim.read_bytes()
    victim.write_bytes(good[: len(good) // 2] + b"\x00garbage" + good[len(good) // 2 + 8:])
    config = campaign_file(store, tmp_path, "local")
    out = tmp_path / "run"
    run = subprocess.run([sys.executable, "-m", "gwbatch", "run", str(config), "--out", str(out), "--no-progress"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 5, run.stderr
    assert "chunk(s) failed; the others are done and checkpointed" in run.stderr and "Traceback" not in run.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    failed = {c["index"] for c in manifest["failed"]}
    # the tasks whose read span (own samples and halos) touches store chunk 3, and only those
    assert 3 in failed and failed <= {2, 3, 4}, failed
    assert all(f"chunk {i} (samples" in run.stderr for i in failed)
    assert {c["status"] for c in manifest["chunks"] if c["index"] not in failed} == {"done"}
    assert not (out / "candidates.parquet").exists() and not (out / "report.html").exists()
    victim.write_bytes(good)  # the data repaired
    resumed = subprocess.run([sys.executable, "-m", "gwbatch", "run", str(config), "--out", str(out), "--no-progress",
                              "--resume"], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    done = json.loads((out / "manifest.json").read_text())
    assert done["status"] == "complete"
    assert sorted(c["index"] for c in done["chunks"] if c["status"] == "done") == sorted(failed)
    for name in ("candidates.parquet", "background.parquet", "triggers.parquet"):
        pd.testing.assert_frame_equal(read_table(out / name), read_table(reference / name), obj=name, check_exact=True)


def without_chunk(source: Path, store: Path, row: int, index: int) -> Path:
    """A copy of ``source`` written with :class:`StoreWriter`, store chunk ``index`` of detector
    ``row`` never written."""
    from gwbatch.io.store import (
        StoreWriter,
        read_dq,
        read_injections,
        read_meta,
        read_strain,
    )

    meta = read_meta(source)
    with StoreWriter(store, ifos=meta.ifos, sample_rate=meta.sample_rate, t0=meta.t0, n_samples=meta.n_samples,
                     chunk_samples=meta.chunk_samples, dq_bits=meta.dq_bits, provenance=meta.provenance) as w:
        for r, ifo in enumerate(meta.ifos):
            for k in range(meta.n_chunks):
                if (r, k) != (row, index):
                    lo = k * meta.chunk_samples
                    w.write_strain(ifo, lo, read_strain(meta, [ifo], lo, min(lo + meta.chunk_samples, meta.n_samples))[0])
            w.write_dq(ifo, 0, read_dq(meta, [ifo])[0])
        w.write_injections(read_injections(source))
        return w.commit()


def test_missing_store_chunk_is_a_gap_out_of_the_livetime(chunked_store, reference, tmp_path):
    store = without_chunk(chunked_store, tmp_path / "store.zarr", 1, 5)  # L1, seconds 160 ... 192: reads as NaN
    assert not store_chunk(store, 1, 5).exists() and store_chunk(store, 0, 5).exists()
    out = tmp_path / "run"
    summary = run_campaign(load_campaign(campaign_file(store, tmp_path)), out=out, progress=False)
    full = json.loads((reference / "manifest.json").read_text())["livetime"]
    live = summary.manifest["livetime"]
    assert live["analysed_seconds"]["H1"] == pytest.approx(full["analysed_seconds"]["H1"], abs=1e-9)
    # L1 loses the missing 32 s and the whitening filter's half-length on each side of them
    edge = load_campaign(campaign_file(store, tmp_path)).conditioning.filter_duration
    assert full["analysed_seconds"]["L1"] - live["analysed_seconds"]["L1"] == pytest.approx(32.0 + edge, abs=1.0 / FS)
    # the manifest's segments are exactly the seconds counted, and none is in the gap or its edges
    for ifo in ("H1", "L1"):
        segments = np.asarray(live["segments_gps"][ifo])
        assert np.sum(segments[:, 1] - segments[:, 0]) == pytest.approx(live["analysed_seconds"][ifo], abs=1e-6)
    l1 = np.asarray(live["segments_gps"]["L1"]) - float(summary.manifest["store"]["t0"])
    gap = np.array([160.0 - edge / 2, 192.0 + edge / 2])
    assert not np.any((l1[:, 0] < gap[1]) & (l1[:, 1] > gap[0])), l1
    assert np.isclose(l1[:, 1], gap[0]).any() and np.isclose(l1[:, 0], gap[1]).any(), l1


def test_deleted_store_chunk_fails_its_tasks_naming_it(chunked_store, tmp_path, capsys):
    """A chunk the store was written with that disappears is damage, not a gap: the tasks that read it
    fail naming the store chunk, the others finish, exit 5."""
    from workflow.cli import main

    store = tmp_path / "store.zarr"
    shutil.copytree(chunked_store, store)
    store_chunk(store, 1, 5).unlink()
    out = tmp_path / "run"
    assert main(["run", str(campaign_file(store, tmp_path)), "--out", str(out), "--no-progress"]) == 5
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "strain chunk 5 of L1 (samples 163840..196608, file strain/c/1/5) is missing, though the store was " \
           "written with it" in err, err
    manifest = json.loads((out / "manifest.json").read_text())
    failed = {c["index"] for c in manifest["failed"]}
    assert 5 in failed and failed <= {4, 5, 6}, failed
    assert {c["status"] for c in manifest["chunks"] if c["index"] not in failed} == {"done"}


def test_a_task_that_fails_once_is_run_again(chunked_store, reference, tmp_path, monkeypatch):
    original, failures = PulseSearch.process, []

    def flaky(self, task, resources):
        if task.spec.index == 1 and not failures:
            failures.append(task.spec.index)
            raise OSError("transient read error")
        return original(self, task, resources)

    monkeypatch.setattr(PulseSearch, "process", flaky)
    out = tmp_path / "run"
    summary = run_campaign(load_campaign(campaign_file(chunked_store, tmp_path)), out=out, progress=False)
    assert failures == [1] and summary.manifest["status"] == "complete"
    pd.testing.assert_frame_equal(read_table(out / "candidates.parquet"), read_table(reference / "candidates.parquet"),
                                  check_exact=True)
