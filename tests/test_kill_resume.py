"""Failures long runs meet: the client killed (SIGKILL) at a random point and the campaign rerun
with --resume; a Dask worker killed mid-campaign.  Both end with exactly the tables of an
uninterrupted run.  The campaign runs two searches (burst and pulse) on a 2-worker LocalCluster.
Workers that run two tasks at once (as GPU workers do) give the same tables too."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
import yaml

from gwbatch.config import load_run
from gwbatch.io.tables import read_table
from workflow.campaign import run_suite

SEED = int(os.environ.get("GWBATCH_KILL_SEED", random.randrange(1 << 30)))
TABLES = ("candidates.parquet", "burst/candidates.parquet", "burst/background.parquet",
          "pulse/candidates.parquet", "pulse/background.parquet", "pulse/triggers.parquet")


def campaign_file(store: Path, directory: Path, kind: str, **cluster) -> Path:
    path = directory / f"{kind}.yaml"
    path.write_text(yaml.safe_dump({
        "name": "kill",
        "data": {"store": str(store)},
        "searches": {
            "burst": {"search": {"kind": "burst", "f_high": 448.0, "rho_min": 3.0, "sky_order": 4},
                      "background": {"slides": 8, "slide_step": 0.5}, "coincidence": {"cluster_window": 0.5}},
            "pulse": {"search": {"kind": "pulse", "threshold": 4.0}, "background": {"slides": 40, "slide_step": 1.0}},
        },
        "plan": {"chunk": 32.0},
        "cluster": {"kind": kind, "n_workers": 2, "dashboard_address": ":0", **cluster},
        "backend": "numpy",
    }))
    return path


@pytest.fixture(scope="module")
def reference(small_store, tmp_path_factory):
    directory = tmp_path_factory.mktemp("kill-reference")
    out = directory / "run"
    summary = run_suite(load_run(campaign_file(small_store, directory, "in-process")), out=out, progress=False)
    for name in ("burst", "pulse"):  # tables worth comparing
        found = summary.members[name].reduced
        assert len(found.candidates) >= 3 and len(found.background_events) >= 3, name
    return out


def assert_same_tables(out: Path, reference: Path) -> None:
    for name in TABLES:
        pd.testing.assert_frame_equal(read_table(out / name), read_table(reference / name), obj=name, check_exact=True)


def start(config: Path, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gwbatch", "run", str(config), "--out", str(out), "--no-progress",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def checkpoints(out: Path) -> int:
    return sum(len(list((out / m / "chunks").glob("*.json"))) for m in ("burst", "pulse"))


def wait_for_checkpoints(proc: subprocess.Popen, out: Path, n: int, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while checkpoints(out) < n:
        assert proc.poll() is None, f"the run ended before {n} chunks were checkpointed:\n{proc.stdout.read()}"
        assert time.monotonic() < deadline, f"no {n} checkpoints within {timeout} s"
        time.sleep(0.05)


def test_client_killed_then_resumed_gives_the_same_tables(small_store, reference, tmp_path):
    config = campaign_file(small_store, tmp_path, "local")
    out = tmp_path / "run"
    total = 2 * 8  # 256 s in 32 s chunks, two searches
    when = random.Random(SEED).randint(1, total - 2)
    proc = start(config, out)
    wait_for_checkpoints(proc, out, when)
    for child in psutil.Process(proc.pid).children(recursive=True):
        child.kill()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    done = checkpoints(out)
    assert when <= done < total, f"seed {SEED}: killed after {done} chunks"
    assert not (out / "manifest.json").exists() and not (out / "candidates.parquet").exists()
    refused = start(config, out)
    assert refused.wait(timeout=120) == 4  # an unfinished run is not overwritten without --resume
    resumed = start(config, out, "--resume")
    log = resumed.communicate(timeout=600)[0]
    assert resumed.returncode == 0, log
    manifests = [json.loads((out / m / "manifest.json").read_text()) for m in ("burst", "pulse")]
    reused = sum(c["status"] == "reused" for m in manifests for c in m["chunks"])
    assert reused == done, f"seed {SEED}"
    assert_same_tables(out, reference)


def test_worker_killed_mid_campaign_gives_the_same_tables(small_store, reference, tmp_path, spawned_workers):
    config = campaign_file(small_store, tmp_path, "local")
    out = tmp_path / "run"
    when = random.Random(SEED + 1).randint(1, 8)
    proc = start(config, out)
    wait_for_checkpoints(proc, out, when)
    workers = [c for c in psutil.Process(proc.pid).children(recursive=True)
               if "spawn_main" in " ".join(c.cmdline()) and "resource_tracker" not in " ".join(c.cmdline())]
    assert workers, "no worker process found"
    random.Random(SEED).choice(workers).kill()
    log = proc.communicate(timeout=600)[0]
    if proc.returncode != 0:  # Dask gave up on a task; the campaign completes with --resume
        resumed = start(config, out, "--resume")
        log = resumed.communicate(timeout=600)[0]
        assert resumed.returncode == 0, log
    assert_same_tables(out, reference)


def test_stop_after_then_resume_gives_the_same_tables(small_store, reference, tmp_path):
    """--stop-after before any chunk: exit 6, nothing final written, the part logged; --resume
    finishes with the reference tables and both parts in the manifest."""
    config = campaign_file(small_store, tmp_path, "in-process")
    out = tmp_path / "run"
    stopped = start(config, out, "--stop-after", "1e-6")
    log = stopped.communicate(timeout=300)[0]
    assert stopped.returncode == 6, log
    assert "--stop-after 1e-06 s reached: 0 chunks done in this run, 16 of 16 left" in log and "--resume" in log
    assert not (out / "manifest.json").exists() and not (out / "candidates.parquet").exists()
    resumed = start(config, out, "--resume")
    log = resumed.communicate(timeout=600)[0]
    assert resumed.returncode == 0, log
    assert_same_tables(out, reference)
    manifest = json.loads((out / "manifest.json").read_text())
    timing, parts = manifest["timing"], manifest["timing"]["parts"]
    assert [(p["chunks_done"], p["chunks_left"], p["ended"]) for p in parts] == [(0, 16, "stopped"), (16, 0, "complete")]
    assert timing["stages"]["plan"] == pytest.approx(sum(p["stages"]["plan"] for p in parts), rel=1e-9)
    assert timing["wall_seconds"] > sum(p["wall_seconds"] for p in parts)
    # after the chunks: each member's reduction and figures, inside the suite's "members" stage
    finish = [m["finish_stages"] for m in manifest["members"]]
    assert all(set(f) == {"reduce", "figures"} and min(f.values()) > 0 for f in finish)
    assert sum(sum(f.values()) for f in finish) < timing["stages"]["members"] < timing["wall_seconds"]


@pytest.mark.parametrize("bad", ["0", "-5", "inf", "soon"])
def test_stop_after_must_be_positive_seconds(bad, capsys):
    from workflow.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["run", "configs/demo.yaml", "--stop-after", bad])
    assert exit_.value.code == 2
    assert f"argument --stop-after: {bad!r} is not a positive number of seconds" in capsys.readouterr().err


def test_two_tasks_per_worker_give_the_same_tables(small_store, reference, tmp_path):
    """Two threads per worker: the searches' tasks run side by side in each worker (their parallel
    numba kernels taking turns) and the tables are those of the one-at-a-time run."""
    config = campaign_file(small_store, tmp_path, "local", threads_per_worker=2)
    out = tmp_path / "run"
    proc = start(config, out)
    log = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, log
    manifest = json.loads((out / "burst" / "manifest.json").read_text())
    assert manifest["cluster"]["threads_per_worker"] == 2 and manifest["cluster"]["workers"] == 2
    assert_same_tables(out, reference)
