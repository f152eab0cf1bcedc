"""The kernel suite (``python -m benchmarks``) on the CPU backend with small problems: every row has
its cost model's work, a measured time, and its ideal time at the limits measured in the same run;
unknown rows are refused.  Timings themselves are not judged here (that is the GPU machine's job)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def quick_suite(tmp_path_factory):
    out = tmp_path_factory.mktemp("suite") / "suite.json"
    run = subprocess.run([sys.executable, "-m", "benchmarks", "--backend", "numpy", "--quick", "--repeat", "1",
                          "--only", "spiir,coherent,skyloop,pulse", "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(out.read_text()), run.stdout


def test_every_row_against_the_limits(quick_suite):
    record, stdout = quick_suite
    rows = {r["kernel"]: r for r in record["rows"]}
    assert list(rows) == ["SPIIR filtering", "coherent sky maximum", "burst sky loop", "single-pulse boxcars"]
    lim = record["limits"]
    assert lim["fp32_per_s"] > 1e8 and lim["bandwidth_bytes_per_s"] > 1e8
    # the cost models: filter updates (every filter at every sample, as seed 000 counts), evaluations, bytes
    assert rows["SPIIR filtering"]["work"] == 64 * 512 * 4096
    assert rows["SPIIR filtering"]["ideal_ms"] == pytest.approx(8 * rows["SPIIR filtering"]["work"] / lim["fp32_per_s"] * 1e3)
    assert rows["coherent sky maximum"]["work"] == 50 * 101 * 12288
    assert rows["burst sky loop"]["ideal_ms"] == pytest.approx(37 * 12288 * 1000 / lim["bandwidth_bytes_per_s"] * 1e3)
    assert rows["single-pulse boxcars"]["work"] == 3 * 2**20
    for r in rows.values():
        # no bound on the fraction here: limits measured on a busy test machine are noise
        assert r["ms"] > 0 and r["fraction"] == pytest.approx(r["ideal_ms"] / r["ms"]), r
        assert r["throughput"] == pytest.approx(r["work"] / (r["ms"] * 1e-3))
        assert r["seed"] and r["twin_ms"] == pytest.approx(r["ms"])  # on the CPU the row is the twin
        assert f"| {r['kernel']} |" in stdout
    assert rows["SPIIR filtering"]["peer_ms"] > 0 and rows["single-pulse boxcars"]["peer_ms"] > 0


def test_unknown_row_is_refused():
    run = subprocess.run([sys.executable, "-m", "benchmarks", "--backend", "numpy", "--only", "spiir,fft"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "--only fft: unknown row(s); allowed: spiir, coherent, skyloop, pulse, campaign" in run.stderr


def test_end_to_end_row_reads_the_campaigns_own_stage_times(small_store, tmp_path):
    out = tmp_path / "e2e.json"
    run = subprocess.run([sys.executable, "-m", "benchmarks", "--backend", "numpy", "--quick", "--repeat", "1",
                          "--only", "campaign", "--campaign", "configs/demo.yaml", "--set", f"data.store={small_store}",
                          "--set", "cluster.kind=in-process", "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    (row,) = json.loads(out.read_text())["rows"]
    stages = row["extra"]["task_stages"]
    assert row["kernel"] == "end to end" and "1 worker(s)" in row["config"]
    assert row["ideal_ms"] == pytest.approx(1e3 * stages["search"])  # one worker; the pulse search has no network
    assert row["ms"] == pytest.approx(1e3 * row["extra"]["run_stages"]["chunks"])
    assert 0 < row["fraction"] < 1  # the kernels' share of the chunk stage: reading and conditioning take the rest
    assert row["work"] == pytest.approx(2 * 256.0, rel=0.01)  # two detectors' 256 s store


def test_failed_campaign_is_reported(tmp_path):
    run = subprocess.run([sys.executable, "-m", "benchmarks", "--backend", "numpy", "--only", "campaign", "--campaign",
                          "configs/demo.yaml", "--set", f"data.store={tmp_path / 'missing.zarr'}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode != 0 and "campaign configs/demo.yaml failed (exit" in run.stderr
