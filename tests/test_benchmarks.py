"""The kernel suite (``python -m benchmarks``) on the CPU backend with small problems: every row has
its cost model's work, a measured time, and its ideal time at the limits measured in the same run;
unknown rows are refused.  Timings themselves are not judged here (that is the GPU machine's job)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
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
    assert rows["SPIIR filtering"]["ideal_ms"] == pytest.approx(6 * rows["SPIIR filtering"]["work"] / lim["fp32_per_s"] * 1e3)
    assert rows["coherent sky maximum"]["work"] == 50 * 101 * 12288
    assert rows["burst sky loop"]["ideal_ms"] == pytest.approx(37 * 12288 * 1000 / lim["bandwidth_bytes_per_s"] * 1e3)
    assert rows["single-pulse boxcars"]["work"] == 3 * 2**20
    assert rows["single-pulse boxcars"]["ideal_ms"] == pytest.approx(4 * 3 * 2**20 / lim["bandwidth_bytes_per_s"] * 1e3)
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
    assert row["ms"] == pytest.approx(1e3 * row["extra"]["wall_seconds"])  # the whole run
    assert row["ms"] > 1e3 * sum(row["extra"]["run_stages"].values())
    # the kernels' share of the run, and of its chunk stage: reading and conditioning take the rest
    assert 0 < row["fraction"] < row["extra"]["chunk_stage_fraction"] < 1
    assert row["work"] == pytest.approx(2 * 256.0, rel=0.01)  # two detectors' 256 s store


def test_failed_campaign_is_reported(tmp_path):
    run = subprocess.run([sys.executable, "-m", "benchmarks", "--backend", "numpy", "--only", "campaign", "--campaign",
                          "configs/demo.yaml", "--set", f"data.store={tmp_path / 'missing.zarr'}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode != 0 and "campaign configs/demo.yaml failed (exit" in run.stderr


def test_memory_trend_of_the_week_benchmark():
    """benchmarks/week.py judges memory over the chunk stage only: a series that warms up, stays flat
    with noise and drops at shutdown has a second-half slope near 0; one that leaks 1 MiB/s has 3600."""
    import numpy as np

    from benchmarks.week import MiB, trend

    t = np.arange(0.0, 300.0, 5.0)
    noise = np.random.default_rng(0).normal(0, 5 * MiB, t.size)
    flat = np.where(t < 20, 500 * MiB, 1500 * MiB) + noise
    flat[t > 280] = 0  # the run has ended
    r = trend(t, flat, (10.0, 280.0))
    assert abs(r["second_half_slope_mib_per_hour"]) < 600 and r["second_half_range_mib"] < 40
    assert r["min_mib"] < 600 and r["max_mib"] > 1490
    leak = 1000 * MiB + t * MiB
    assert trend(t, leak, (10.0, 280.0))["second_half_slope_mib_per_hour"] == pytest.approx(3600, rel=1e-6)
    assert trend(t, leak, (10.0, 280.0))["second_half_fitted_change_mib"] == pytest.approx(135, rel=1e-6)


def test_ncu_summary_reads_the_details_page(tmp_path):
    """benchmarks/ncu_summary.py: ncu's own messages before the CSV header are skipped, metrics are
    grouped per profiled kernel, and what a profile lacks prints as n/a."""
    header = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
              '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')
    rows = ['"0","1","python","h","void coherent_max<3>(const float2 *)","1","7","(256, 1, 1)","(9, 1, 1)","0","9.0",'
            '"GPU Speed Of Light Throughput","Duration","ns","1,388,064"',
            '"0","1","python","h","void coherent_max<3>(const float2 *)","1","7","(256, 1, 1)","(9, 1, 1)","0","9.0",'
            '"Launch Statistics","Registers Per Thread","register/thread","46"']
    path = tmp_path / "ncu_coherent.csv"
    path.write_text("==PROF== Connected to process 1\n" + "\n".join([header, *rows]) + "\n")
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ncu_summary.py"), str(path)],
                         capture_output=True, text=True, check=True)
    lines = run.stdout.splitlines()
    assert lines[0] == "| figure | void coherent_max<3> [0] |"
    assert "| duration | 1,388,064 ns |" in lines and "| registers / thread | 46 register/thread |" in lines
    assert "| shared bank conflicts | n/a |" in lines


def test_scale_runs_share_the_bank_cache(tmp_path):
    """benchmarks/scale.py points every SPIIR search of its campaign at one bank cache outside the
    output directory each run replaces, and the overrides are valid campaign keys."""
    from benchmarks.scale import bank_cache_sets
    from gwbatch.config import load_run

    cache = tmp_path / "scale.banks"
    sets = bank_cache_sets(ROOT / "configs" / "one-day.yaml", cache)
    assert sets == [f"searches.spiir.search.bank_cache={cache}"]
    suite = load_run(ROOT / "configs" / "one-day.yaml", sets)
    (spiir,) = [m for m in suite.members.values() if m.search.kind == "spiir"]
    assert spiir.search.bank_cache == cache
    assert bank_cache_sets(ROOT / "configs" / "gw150914.yaml", cache) == [f"search.bank_cache={cache}"]
    assert bank_cache_sets(ROOT / "configs" / "demo.yaml", cache) == []


def test_coherent_benchmark_refuses_a_bad_define():
    """``--define`` takes NAME=INTEGER or NAME=WORD items and names a bad one; a profile must be one
    the kernel has."""
    script = str(ROOT / "benchmarks" / "coherent_kernel.py")
    run = subprocess.run([sys.executable, script, "--backend", "numpy", "--define", "TILE=1.5"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "'TILE=1.5' is not NAME=INTEGER or NAME=WORD" in run.stderr
    run = subprocess.run([sys.executable, script, "--backend", "numpy", "--define", "PROFILE=huge"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "PROFILE=huge" in run.stderr and "narrow" in run.stderr
    from benchmarks.timing import define_variant

    assert define_variant("WARPS=16,MIN_BLOCKS=2") == {"WARPS": 16, "MIN_BLOCKS": 2}
    assert define_variant("PROFILE=wide") == {"PROFILE": "wide"}


def test_scale_warm_up_runs_first_untimed_on_one_gpu(tmp_path, monkeypatch):
    """``--warm-up S``: one untimed run over the store's first S s on one GPU, in its own directory,
    before the timed runs; its wall time is recorded apart and the scaling counts only the timed runs."""
    from benchmarks import scale

    store = tmp_path / "day.zarr"
    store.mkdir()
    (store / "zarr.json").write_text("{}")
    calls = []

    def fake_run(config, out, gpus, sets, *, first_gpu=0, resume=False, stop_after=None):
        calls.append((out.name, gpus, [s for s in sets if s.startswith("data.")]))
        chunks = 1000.0 / gpus
        return {"gpus": gpus, "wall_seconds": chunks + 30.0, "stages": {"chunks": chunks},
                "strain_seconds_per_gpu_second": 1.0, "gpu_utilisation_mean": 80.0}

    monkeypatch.setattr(scale, "run", fake_run)
    result = tmp_path / "scale.json"
    assert scale.main(["--gpus", "4,1", "--store", str(store), "--out", str(tmp_path / "scale"), "--warm-up", "2048",
                       "--result", str(result)]) == 0
    assert calls == [("scale.warm-up", 1, [f"data.store={store}", "data.duration=2048.0"]),
                     ("scale", 4, [f"data.store={store}"]), ("scale", 1, [f"data.store={store}"])]
    record = json.loads(result.read_text())
    assert record["warm_up"]["store_seconds"] == 2048.0 and record["warm_up"]["wall_seconds"] >= 0
    assert [r["gpus"] for r in record["runs"]] == [4, 1]
    assert record["runs"][0]["scaling_wall"] == pytest.approx(1030.0 / (4 * 280.0))


def test_tail_extrapolation_judges_the_fit_against_the_counts():
    """An exponential background: the fit to 1000 s of it predicts the counts of 100x more within
    Poisson (conservative); a deeper background with a heavier tail than the base's is caught."""
    from benchmarks.tail_extrapolation import compare

    rng = np.random.default_rng(3)
    base = 3.0 + rng.exponential(1 / 2.0, size=2000)  # 2 per s above 3 over 1000 s, slope 2
    deep = 3.0 + rng.exponential(1 / 2.0, size=198000)  # 99000 s more of the same
    cut = 8.0
    rows, fit = compare(base, deep[deep >= cut], 1000.0, 99000.0, cut, 100)
    assert fit.count == 100 and abs(fit.slope - 2.0) < 0.5
    assert [r["k"] for r in rows] and all(r["conservative"] for r in rows)
    # ranks beyond the base's loudest: up to two decades past its bound
    assert max(r["decades"] for r in rows) == pytest.approx(2.0, abs=0.01)
    heavy = 3.0 + rng.exponential(1 / 1.0, size=198000)  # slope 1: far more loud events
    rows, _ = compare(base, heavy[heavy >= cut], 1000.0, 99000.0, cut, 100)
    assert not all(r["conservative"] for r in rows)


def test_epoch_psds_benchmark_times_each_thread_count_and_compares(small_store, tmp_path):
    """``benchmarks/epoch_psds.py`` on a 256 s store in 64 s epochs: one line per thread count, the
    four epochs' eight PSDs, each run equal to the first."""
    config = tmp_path / "epochs.yaml"
    config.write_text(f"name: epochs\ndata: {{store: {small_store}}}\n"
                      "search: {kind: spiir, bank: configs/banks/bbh-small.yaml, psd_seconds: 64, psd_epoch: 64}\n"
                      "plan: {chunk: 64}\nbackground: {slides: 2, slide_step: 2.0}\n")
    run = subprocess.run([sys.executable, "benchmarks/epoch_psds.py", str(config), "--threads", "1", "3"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    assert [r["threads"] for r in lines] == [1, 3]
    assert all(r["epochs"] == 4 and r["measurements"] == 8 and r["equal_to_first"] for r in lines)
