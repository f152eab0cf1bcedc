"""The campaign report: a self-contained, escaped HTML file that survives empty and odd inputs."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from gwbatch.report import write_report
from gwbatch.report.figures.common import fig_to_svg
from gwbatch.report.format import fmt_far, fmt_gps, fmt_ifar, fmt_snr
from gwbatch.report.markup import html_table

SPAN_START = 1_126_259_000.0
SPAN = 4096.0
YEAR = 365.25 * 86400.0


def make_manifest(ifos=("H1", "L1"), name="test-campaign", n_slides=10) -> dict:
    chunks = [
        {
            "index": k,
            "gps_start": SPAN_START + 1024.0 * k,
            "gps_stop": SPAN_START + 1024.0 * (k + 1),
            "status": "done" if k else "reused",
            "device": "cuda:0" if k % 2 else "cpu",
            "worker": f"tcp://127.0.0.1:{40000 + k}",
            "seconds": 1.5 + k,
            "triggers": {ifo: 10 + k for ifo in ifos},
            "analysed_seconds": {ifo: 1000.0 for ifo in ifos},
        }
        for k in range(4)
    ]
    zero_lag = 4000.0
    return {
        "campaign": {
            "name": name,
            "description": "Synthetic campaign for the report tests",
            "search": {"kind": "pulse", "series": "strain", "threshold": 5.5, "decimation": 4},
            "coincidence": {"min_ifos": len(ifos), "window": 0.005, "cluster_window": 0.1},
            "background": {"slides": n_slides, "slide_step": 5.0},
        },
        "gwbatch_version": "0.1.0",
        "created_utc": "2025-01-01T00:00:00Z",
        "command": "gwbatch run configs/test.yaml --cluster local",
        "status": "complete",
        "store": {"path": "/data/store.zarr", "ifos": list(ifos), "sample_rate": 4096.0,
                  "t0": f"{SPAN_START:.1f}", "duration": SPAN},
        "plan": {"span_start_gps": SPAN_START, "span_duration": SPAN, "chunks": 4, "halo_before_s": 8.0,
                 "halo_after_s": 8.0, "task_memory_bytes": 2 * 1024**3},
        "cluster": {"kind": "local", "workers": 2, "dashboard": None, "backend": "numpy"},
        "devices": ["cpu", "cuda:0"],
        "chunks": chunks,
        "livetime": {
            "analysed_seconds": {ifo: 4050.0 for ifo in ifos},
            "zero_lag_seconds": zero_lag,
            "background_seconds": zero_lag * n_slides,
            "per_slide_seconds": [zero_lag] * (n_slides + 1),
            "min_ifos": len(ifos),
        },
        "background": {"method": "time slides", "slides": n_slides, "slide_step": 5.0,
                       "far_convention": "inclusive FAR = N_bg(>= x) / T_bg, bounded below by 1/T_bg"},
        "counts": {"triggers": {ifo: 46 for ifo in ifos}, "candidates": 50, "background_events": 500,
                   "gates": 2, "injections": 6, "injections_found": 4},
        "timing": {"wall_seconds": 3725.0, "chunk_seconds_total": 12.0},
    }


def make_candidates(ifos=("H1", "L1"), n=50, seed=1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    snr = np.sort(rng.uniform(7.0, 12.0, n))[::-1]
    snr[0] = 40.0
    t_bg = 40_000.0
    far = np.maximum(np.arange(n), 1.0) / t_bg
    ifar = 1.0 / (far * YEAR)
    ifar[0] = np.inf
    far[0] = 0.0
    table = pd.DataFrame({
        "search": "pulse",
        "gps_time": SPAN_START + rng.uniform(0, SPAN, n),
        "ifos": ",".join(ifos),
        "n_ifos": len(ifos),
        "snr": snr,
        "rho": snr * 0.98,
        "far": far,
        "ifar_years": ifar,
        "far_exclusive": far,
        "ifar_exclusive_years": ifar,
        "n_louder": np.arange(n),
        "n_louder_exclusive": np.arange(n),
    })
    table.loc[0, "gps_time"] = SPAN_START + 1234.56789
    for k, ifo in enumerate(ifos):
        table[f"time_{ifo}"] = table["gps_time"] + 0.001 * k
        table[f"snr_{ifo}"] = snr / np.sqrt(len(ifos))
        table[f"rho_{ifo}"] = table[f"snr_{ifo}"] * 0.98
        table[f"duration_{ifo}"] = 0.01
    if len(ifos) > 1:
        table.loc[5, f"snr_{ifos[-1]}"] = np.nan
    return table


def make_background(ifos=("H1", "L1"), n=500, seed=2) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    table = pd.DataFrame({
        "slide": rng.integers(1, 11, n),
        "snr": 7.0 + rng.exponential(1.0, n),
        "ifos": ",".join(ifos),
        "ring_time": rng.uniform(0, SPAN, n),
    })
    for k, ifo in enumerate(ifos):
        table[f"time_{ifo}"] = SPAN_START + rng.uniform(0, SPAN, n)
        table[f"snr_{ifo}"] = table["snr"] / np.sqrt(len(ifos))
        table[f"shift_{ifo}"] = 5.0 * k * table["slide"]
    return table


def make_injections(ifos=("H1", "L1"), seed=3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = 6
    found = np.array([True, True, True, True, False, False])
    analysed = np.array([True, True, True, True, True, False])
    snr = np.array([30.0, 20.0, 12.0, 9.0, 8.5, 25.0])
    table = pd.DataFrame({
        "id": np.arange(n), "waveform": "gaussian", "gps_time": SPAN_START + np.linspace(100, 4000, n),
        "snr": snr, "duration": 0.01, "analysed": analysed, "found": found,
        "candidate": np.where(found, np.arange(n), -1),
        "found_snr": np.where(found, snr * 0.95, np.nan),
        "found_far": np.where(found, 1e-4, np.nan),
        "found_ifar_years": np.where(found, 3e-4, np.nan),
    })
    for ifo in ifos:
        inj = snr / np.sqrt(len(ifos))
        table[f"injected_snr_{ifo}"] = inj
        table[f"found_time_{ifo}"] = np.where(found, table["gps_time"] + 1e-4, np.nan)
        table[f"found_rho_{ifo}"] = np.where(found, inj * rng.uniform(0.8, 1.1, n), np.nan)
        table[f"found_snr_{ifo}"] = np.where(found, inj * 0.97, np.nan)
        table[f"dt_{ifo}"] = np.where(found, 2e-4, np.nan)
    return table


def make_gates() -> pd.DataFrame:
    return pd.DataFrame({"ifo": ["H1", "L1"], "sample": [4096, 81920],
                         "gps_time": [SPAN_START + 1.0, SPAN_START + 20.0], "peak": [120.5, 88.25]})


def make_series(ifos=("H1", "L1"), n=3, seed=4) -> list[dict]:
    """Statistic time series around the first ``n`` candidates: a peak at 0 (ms offsets per detector) on noise."""
    rng = np.random.default_rng(seed)
    t = np.linspace(-0.5, 0.5, 401)
    cands = make_candidates(ifos)
    series = []
    for i in range(n):
        peak = float(cands["snr"].iloc[i]) / np.sqrt(len(ifos))
        curves = {ifo: (t, np.abs(rng.normal(0, 1, t.size)) + peak * np.exp(-0.5 * ((t - 0.002 * k) / 0.01) ** 2))
                  for k, ifo in enumerate(ifos)}
        series.append({"label": f"#{i + 1}", "gps_time": float(cands["gps_time"].iloc[i]), "statistic": "\u03c1",
                       "curves": curves})
    return series


def gaussian_skymap(order: int, ra: float, dec: float, sigma_deg: float) -> np.ndarray:
    """A von Mises-Fisher blob of width ``sigma_deg`` around (ra, dec), nested HEALPix probabilities."""
    from gwbatch.sky.grid import sky_grid

    grid = sky_grid(order)
    cos = (np.sin(dec) * np.sin(grid.dec) + np.cos(dec) * np.cos(grid.dec) * np.cos(grid.ra - ra))
    logp = (cos - 1) / np.radians(sigma_deg) ** 2
    p = np.exp(logp - logp.max())
    return p / p.sum()


UNIFORM_PIXELS = 16  # order-3 pixels 0..15: the 16 children of order-1 pixel 0, one compact patch


def uniform_skymap(order: int = 3, k: int = UNIFORM_PIXELS) -> np.ndarray:
    prob = np.zeros(12 * 4**order)
    prob[:k] = 1.0 / k
    return prob


def make_skymaps() -> list[dict]:
    return [
        {"label": "#1", "gps_time": SPAN_START + 1234.56789, "prob": gaussian_skymap(5, 2.0, -0.6, 8.0),
         "ra": 2.0, "dec": -0.6},
        {"label": "#2", "gps_time": SPAN_START + 2000.0, "prob": uniform_skymap(), "ra": None, "dec": None},
    ]


def make_gpu(n_gpus=2, samples=120, interval=5.0, seed=5) -> dict:
    rng = np.random.default_rng(seed)
    devices = []
    for k in range(n_gpus):
        t = np.arange(samples) * interval
        u = np.clip(80 + 10 * rng.standard_normal(samples) - 5 * k, 0, 100)
        u[:3] = 0.0
        mem = (20 + 5 * k) * 2**30 * np.minimum(1.0, t / 60.0)
        devices.append({"index": k, "name": "NVIDIA H200", "t": t.tolist(), "utilisation": u.tolist(),
                        "memory_used": mem.tolist(), "mean": float(u.mean())})
    return {"interval_s": interval, "devices": devices}


PROVENANCE = {
    "config_sha256": "3f5a0c9e" * 8,
    "code_version": "0.1.0",
    "git_commit": "d3796880f1c2a4b5e6d7c8b9a0f1e2d3c4b5a697",
    "host": "node-17.example",
    "devices": ["cpu", "cuda:0"],
    "packages": {"numpy": "2.1.3", "scipy": "1.14.1", "matplotlib": "3.9.2"},
}

MEMBERS = [
    {"name": "pulse", "kind": "pulse", "candidates": 50, "report": "pulse/report.html", "livetime_s": 4000.0,
     "background_s": 40000.0},
    {"name": "burst", "kind": "burst", "candidates": 7, "report": "burst/report.html", "livetime_s": 3900.0,
     "background_s": 195000.0},
]


def rich_inputs(ifos=("H1", "L1")) -> dict:
    """Every section of the report filled: the full inputs plus time series, skymaps, provenance, stage
    timing, GPU utilisation, member searches, and injections with hrss and skymap credible levels."""
    inputs = full_inputs(ifos)
    manifest = inputs["manifest"]
    manifest["provenance"] = PROVENANCE
    manifest["timing"]["stages"] = {"plan": 0.5, "chunks": 3000.0, "reduce": 600.0, "report": 4.5}
    manifest["gpu_utilisation"] = make_gpu()
    inj = inputs["injections"]
    inj["hrss"] = np.geomspace(1e-22, 1e-21, len(inj))
    inj["credible_level"] = np.where(inj["found"], np.linspace(0.1, 0.9, len(inj)), np.nan)
    inj["area90"] = np.where(inj["found"], 120.0, np.nan)
    inputs["series"] = make_series(ifos)
    inputs["skymaps"] = make_skymaps()
    inputs["psds"] = make_psds(ifos)
    inputs["segments"] = make_segments(ifos)
    inputs["triggers"] = make_trigger_snrs(ifos)
    inputs["qscans"] = [make_qscan(ifos)]
    inputs["tfmaps"] = [make_tfmap(ifos)]
    return inputs


PSD_FREQUENCY = np.linspace(0.0, 1024.0, 1025)


def design_asd(f: np.ndarray) -> np.ndarray:
    """A bucket-shaped ASD (strain/√Hz) with its minimum near 150 Hz."""
    f = np.maximum(f, 1.0)
    return 1e-23 * ((f / 150.0) ** -4 + 1.0 + (f / 150.0) ** 2) / 3.0


def make_psds(ifos=("H1", "L1"), chunks=9):
    """Per detector, ``chunks`` PSDs: the design PSD scaled by 0.8 ... 1.2 (so the median chunk is the
    design itself), the second detector 1.5 times less sensitive."""
    from gwbatch.io.psds import ChunkPSDs

    scale = np.linspace(0.8, 1.2, chunks)
    return {ifo: ChunkPSDs(PSD_FREQUENCY, (1.5 ** k * design_asd(PSD_FREQUENCY)) ** 2 * scale[:, None],
                           SPAN_START + 1024.0 * np.arange(chunks), SPAN_START + 1024.0 * (np.arange(chunks) + 1),
                           np.full(chunks, 15, np.int64))
            for k, ifo in enumerate(ifos)}


def make_segments(ifos=("H1", "L1")) -> dict:
    """Two analysed segments per detector (the second detector has a gap), one veto in the first."""
    analysed = {ifo: np.array([[SPAN_START, SPAN_START + 2000.0 - 300.0 * k],
                               [SPAN_START + 2100.0, SPAN_START + SPAN]]) for k, ifo in enumerate(ifos)}
    return {"analysed": analysed, "vetoed": {ifos[0]: np.array([[SPAN_START + 500.0, SPAN_START + 532.0]])},
            "span": (SPAN_START, SPAN_START + SPAN)}


def make_trigger_snrs(ifos=("H1", "L1"), seed=6) -> dict:
    rng = np.random.default_rng(seed)
    return {"statistic": "SNR", "values": {ifo: 5.5 + rng.exponential(1.0, 200 + 50 * k)
                                           for k, ifo in enumerate(ifos)}}


QSCAN_RATE, QSCAN_F0, QSCAN_Q = 1024.0, 150.0, 9.0


def sine_gaussian(t: np.ndarray, t0: float, f0: float, q: float) -> np.ndarray:
    tau = q / (np.sqrt(2.0) * np.pi * f0)
    return np.exp(-((t - t0) / tau) ** 2) * np.sin(2 * np.pi * f0 * (t - t0))


def make_qscan(ifos=("H1", "L1"), seed=7) -> dict:
    """The top candidate's Q transforms: 4 s of white noise with a sine-Gaussian at the candidate (2 s in)."""
    from dataclasses import replace

    from gwbatch.report.qtransform import q_transform

    rng = np.random.default_rng(seed)
    t = np.arange(int(4 * QSCAN_RATE)) / QSCAN_RATE
    scans = {}
    for ifo in ifos:
        x = rng.normal(size=t.size) + 4.0 * sine_gaussian(t, 2.0, QSCAN_F0, QSCAN_Q)
        scan = q_transform(x, QSCAN_RATE, frange=(20.0, np.inf), search=(1.75, 2.25), outseg=(1.5, 2.5),
                           n_times=150, n_frequencies=80)
        scans[ifo] = replace(scan, times=scan.times - 2.0, peak_time=scan.peak_time - 2.0)
    cands = make_candidates(ifos)
    return {"label": "pulse", "gps_time": float(cands["gps_time"].iloc[0]), "scans": scans}


def make_tfmap(ifos=("H1", "L1")) -> dict:
    """A burst-like pixel map of the top candidate: unit noise with an excess box at 100-200 Hz."""
    rng = np.random.default_rng(8)
    t, f = np.linspace(-0.5, 0.5, 64), np.arange(24, 500, 16.0)
    maps = {}
    for ifo in ifos:
        energy = rng.exponential(1.0, (f.size, t.size))
        energy[np.ix_((f >= 100) & (f <= 200), np.abs(t) < 0.05)] += 30.0
        maps[ifo] = (t, f, energy)
    tw = np.linspace(-0.1, 0.1, 411)
    waves = {ifo: (tw, 6.0 * np.exp(-(tw / 0.02) ** 2) * np.cos(2 * np.pi * 150 * tw)) for ifo in ifos}
    cands = make_candidates(ifos)
    return {"label": "burst", "gps_time": float(cands["gps_time"].iloc[0]), "resolution": 16.0,
            "box": (-0.05, 0.05, 100.0, 200.0), "maps": maps, "waveforms": waves}


def full_inputs(ifos=("H1", "L1")) -> dict:
    return {"manifest": make_manifest(ifos), "candidates": make_candidates(ifos), "background": make_background(ifos),
            "injections": make_injections(ifos), "gates": make_gates()}


def empty_inputs() -> dict:
    manifest = make_manifest()
    manifest["counts"]["candidates"] = 0
    return {"manifest": manifest, "candidates": pd.DataFrame(), "background": pd.DataFrame(),
            "injections": None, "gates": pd.DataFrame()}


def assert_no_leftovers(directory) -> None:
    names = sorted(p.name for p in directory.iterdir())
    assert names == ["report.html"], names


@pytest.fixture(scope="module")
def full_report(tmp_path_factory):
    """One full report shared by the tests that only read it (drawing the figures takes ~1 s)."""
    directory = tmp_path_factory.mktemp("full")
    inputs = full_inputs()
    out = write_report(directory / "report.html", **inputs)
    return directory, out, inputs


def test_full_report(full_report):
    tmp_path, out, inputs = full_report
    assert out == tmp_path / "report.html" and out.exists()
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert text.rstrip().endswith("</html>")
    assert text.count("<svg") >= 4  # time, cumulative IFAR, ranking statistic, injections
    assert "test-campaign" in text
    assert "50 zero-lag candidates in total" in text
    top = inputs["candidates"]["gps_time"].iloc[0]
    assert f"{top:.4f}" in text and "1126260234.5679" in text
    assert ">inf<" in text  # the infinite IFAR of the top candidate
    for section in ("Configuration and timing", "Candidates", "Cumulative IFAR", "Ranking statistic distribution",
                    "Injection recovery", "Chunks", "Gates", "FAR convention"):
        assert section in text
    assert "2.00 GiB" in text
    assert "N_bg(&gt;= x) / T_bg" in text  # footer, escaped
    for external in ("<link", "<img", "src=", 'href="http', "url(http", "@import"):  # self-contained
        assert external not in text
    assert "<metadata>" not in text and "<?xml" not in text
    assert "<script" not in text.lower()
    assert_no_leftovers(tmp_path)


def test_candidates_table_limited_to_top_25(full_report):
    text = full_report[1].read_text()
    table = text.split('id="candidates"')[1].split("</section>")[0]
    assert table.count("<tr>") == 25 + 1  # header + 25 rows


def test_seconds_read_in_their_unit():
    from gwbatch.report.format import fmt_seconds

    assert fmt_seconds(2.804e-06) == "2.8 \u00b5s" and fmt_seconds(0.0123) == "0.0123 s"
    assert fmt_seconds(0) == "0 s" and fmt_seconds(254.0) == "254 s (0:04:14)" and fmt_seconds(3700) == "3700 s (1:01:40)"


def test_candidates_carry_their_utc_time(full_report):
    """Beside each GPS time its UTC (leap seconds applied): GW150914's 1126259462.4 is 09:50:45.4."""
    from gwbatch.report.format import fmt_utc

    assert fmt_utc(1126259462.4) == "2015-09-14 09:50:45.400"
    table = full_report[1].read_text().split('id="candidates"')[1].split("</section>")[0]
    assert "<th>UTC</th>" in table or ">UTC<" in table
    assert len(re.findall(r">\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}<", table)) == 25


def test_svg_ids_unique_across_figures(full_report):
    text = full_report[1].read_text()
    ids = re.findall(r'\bid="([^"]+)"', text)
    assert len(ids) == len(set(ids))


def test_strings_are_escaped(tmp_path):
    inputs = full_inputs()
    inputs["injections"] = None  # not needed here; saves drawing time
    evil = "<script>alert(1)</script>"
    inputs["manifest"]["campaign"]["name"] = evil
    inputs["manifest"]["campaign"]["description"] = evil
    inputs["manifest"]["command"] = f"gwbatch run '{evil}'"
    inputs["manifest"]["chunks"][0]["worker"] = evil
    inputs["candidates"].loc[0, "ifos"] = evil
    inputs["gates"].loc[0, "ifo"] = evil
    text = write_report(tmp_path / "report.html", **inputs).read_text()
    assert "<script" not in text.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_empty_inputs(tmp_path):
    out = write_report(tmp_path / "report.html", **empty_inputs())
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>")
    assert "No zero-lag candidates were found" in text
    assert "Not drawn" in text
    assert "there are no zero-lag candidates" in text
    assert "this campaign has no injections" in text
    assert "No gates" in text
    assert "<svg" not in text
    assert_no_leftovers(tmp_path)


def test_candidates_without_background(tmp_path):
    """Single-series style: candidates but no slides; cumulative IFAR is skipped, the rate plot is drawn."""
    inputs = full_inputs()
    inputs["background"] = inputs["background"].iloc[:0]
    inputs["injections"] = inputs["injections"].iloc[:0]
    text = write_report(tmp_path / "report.html", **inputs).read_text()
    assert "there is no time-slide background" in text
    assert "No time-slide background is available" in text
    assert "the injection set is empty" in text
    assert text.count("<svg") == 2


def test_single_detector(tmp_path):
    ifos = ("H1",)
    inputs = full_inputs(ifos)
    inputs["gates"] = inputs["gates"].iloc[:1]
    manifest = inputs["manifest"]
    manifest["background"]["slides"] = 0
    manifest["livetime"]["background_seconds"] = 0.0
    inputs["background"] = pd.DataFrame(columns=["slide", "snr", "ifos", "ring_time"])
    text = write_report(tmp_path / "report.html", **inputs).read_text()
    assert "SNR H1" in text and "SNR L1" not in text
    assert text.count("<svg") == 4  # over time, ranking, injection recovery, efficiency (no IFAR: no slides)
    assert_no_leftovers(tmp_path)


def test_missing_optional_manifest_keys(tmp_path):
    manifest = {"campaign": {"name": "bare"}}
    text = write_report(tmp_path / "report.html", manifest=manifest, candidates=make_candidates(),
                        background=make_background(), injections=None, gates=make_gates()).read_text()
    assert "bare" in text and "No chunk records" in text


def test_nan_and_all_inf_values(tmp_path):
    inputs = full_inputs()
    inputs["injections"] = None
    cands = inputs["candidates"]
    cands["ifar_years"] = np.inf
    cands["far"] = 0.0
    cands.loc[3, "snr"] = np.nan
    text = write_report(tmp_path / "report.html", **inputs).read_text()
    assert "infinite IFAR(s) drawn at" in text
    assert text.count("<svg") == 3


def test_overwrites_existing_report(tmp_path):
    target = tmp_path / "report.html"
    target.write_text("old")
    write_report(target, **empty_inputs())
    assert target.read_text().startswith("<!DOCTYPE html>")
    assert_no_leftovers(tmp_path)


def test_failed_render_leaves_nothing(tmp_path, monkeypatch):
    import gwbatch.report.html as report_html

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(report_html, "render_report", boom)
    with pytest.raises(RuntimeError):
        write_report(tmp_path / "report.html", **empty_inputs())
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()  # a failure while writing: no half page, no temporary file (gwbatch.io.atomic)
    import gwbatch.io.atomic as atomic

    monkeypatch.setattr(atomic.os, "replace", boom)
    with pytest.raises(RuntimeError):
        write_report(tmp_path / "report.html", **empty_inputs())
    assert list(tmp_path.iterdir()) == []


def test_formatters_and_table():
    assert fmt_gps(1126259462.4) == "1126259462.4000"
    assert fmt_snr(7.456) == "7.46"
    assert fmt_far(1.23456e-7) == "1.235e-07"
    assert fmt_ifar(1234.5) == "1.23e+03" and fmt_ifar(np.inf) == "inf"
    assert fmt_snr(np.nan) == fmt_gps(None) == "\u2013"
    table = html_table(["a", "<b>"], [["1", "<i>"]])
    assert "<th>&lt;b&gt;</th>" in table and "<td>&lt;i&gt;</td>" in table


def test_fig_to_svg_strips_header():
    from matplotlib.figure import Figure

    fig = Figure()
    fig.add_subplot().plot([1, 2], [3, 4])
    svg = fig_to_svg(fig, "x")
    assert svg.startswith("<svg") and "<?xml" not in svg and "DOCTYPE" not in svg


# ----------------------------------------------------------------------------------------------
# time series and skymaps of the top candidates, provenance, stage timing, GPU utilisation, searches

FIGURE_IDS = ("fig-time", "fig-ifar", "fig-rank", "fig-series", "fig-skymaps", "fig-inj", "fig-eff-snr",
              "fig-eff-hrss", "fig-pp", "fig-gpu", "fig-asd", "fig-segments", "fig-snr-hist", "fig-qscan-1",
              "fig-tfmap-1", "fig-waveform-1")
PIXEL_AREA_ORDER3 = 4 * np.pi * (180 / np.pi) ** 2 / 768


@pytest.fixture(scope="module")
def rich_report(tmp_path_factory):
    """One report with every section filled, shared by the tests that only read it (~4 s to draw)."""
    directory = tmp_path_factory.mktemp("rich")
    inputs = rich_inputs()
    out = write_report(directory / "report.html", **inputs)
    return out.read_text(encoding="utf-8"), inputs


def figure_html(text: str, fig_id: str) -> str:
    match = re.search(rf'<figure id="{fig_id}">(.*?)</figure>', text, re.S)
    assert match, f"no figure {fig_id}"
    return match.group(1)


def svg_group(svg: str, gid: str) -> str:
    """The SVG group with id ``gid`` up to the next group of the same nesting (enough to count its paths)."""
    start = svg.index(f'<g id="{gid}">')
    return svg[start:svg.index("</g>", start)]


def test_rich_report_has_every_figure(rich_report):
    text, _ = rich_report
    for fig_id in FIGURE_IDS:
        assert "<svg" in figure_html(text, fig_id)
    assert "Not drawn" not in text
    ids = re.findall(r'\bid="([^"]+)"', text)
    assert len(ids) == len(set(ids))


def test_rich_report_is_self_contained(rich_report):
    text, _ = rich_report
    for external in ("<link", "<img", "src=", 'href="http', "url(http", "@import", "<script"):
        assert external not in text
    # the only references: to ids inside the page, the skymaps' embedded PNGs, and the member searches' reports
    for href in re.findall(r'href="([^"]*)"', text):
        assert href.startswith(("#", "data:image/png;base64,")) or href in ("pulse/report.html", "burst/report.html")


def test_series_figure(rich_report):
    text, inputs = rich_report
    assert "SNR / \u03c1 time series around the top candidates" in text
    svg = figure_html(text, "fig-series")
    assert len(re.findall(r'<g id="fig-series-axes_\d+">', svg)) == len(inputs["series"]) == 3
    assert "the dashed line marks the candidate&#x27;s time" in svg


def test_series_at_most_five_panels(tmp_path):
    inputs = empty_inputs()
    series = make_series(n=7)
    for entry in series[5:]:  # beyond the fifth: never drawn, so their values do not matter
        entry["curves"] = {"H1": (np.zeros(3), np.zeros(4))}
    text = write_report(tmp_path / "report.html", **inputs, series=series).read_text()
    svg = figure_html(text, "fig-series")
    assert len(re.findall(r'<g id="fig-series-axes_\d+">', svg)) == 5
    assert "The first 5 of 7 are drawn." in svg


def test_series_with_unusable_curves(tmp_path):
    """Curves of mismatched lengths or without finite samples are left out; the panel says so."""
    series = [{"label": "#1", "gps_time": SPAN_START, "statistic": "SNR",
               "curves": {"H1": (np.arange(3.0), np.arange(4.0)), "L1": (np.arange(3.0), np.full(3, np.nan))}}]
    text = write_report(tmp_path / "report.html", **empty_inputs(), series=series).read_text()
    assert 'id="fig-series"' in text


def test_skymap_areas_and_contours(rich_report):
    """A map uniform over 16 order-3 pixels: the 90% region is the 15 most probable (ceil(0.9 * 16)) and the
    50% region 8 of them; the contours are drawn, and the best direction only where one is given."""
    text, inputs = rich_report
    area90, area50 = 15 * PIXEL_AREA_ORDER3, 8 * PIXEL_AREA_ORDER3
    assert f"{area90:.0f}" == "806" and f"{area50:.0f}" == "430"
    svg = figure_html(text, "fig-skymaps")
    table = text.split('<figure id="fig-skymaps">')[1].split("</table>")[0]
    row = [r for r in table.split("<tr>") if "<td>#2</td>" in r][0]
    assert '<td class="num">768 (order 3)</td>' in row
    assert '<td class="num">430</td><td class="num">806</td>' in row
    for k in (0, 1):
        for level in (50, 90):
            assert "<path" in svg_group(svg, f"fig-skymaps-sky{k}-c{level}")
    assert 'id="fig-skymaps-sky0-best"' in svg and 'id="fig-skymaps-sky1-best"' not in svg
    assert "data:image/png;base64," in svg  # the probability layer, rasterised inside the SVG


def test_skymap_gaussian_area(rich_report):
    """A von Mises-Fisher blob of width sigma holds 90% within radius sigma * sqrt(2 ln 10): its 90% area is
    2 pi ln(10) sigma^2 deg² (flat-sky limit), printed in the table."""
    text, _ = rich_report
    table = text.split('<figure id="fig-skymaps">')[1].split("</table>")[0]
    row = [r for r in table.split("<tr>") if "<td>#1</td>" in r][0]
    cells = re.findall(r'<td class="num">([^<]*)</td>', row)
    assert cells[1] == "12288 (order 5)"
    expected = 2 * np.pi * np.log(10) * 8.0**2
    assert abs(float(cells[3]) / expected - 1) < 0.03
    assert float(cells[2]) < float(cells[3])
    assert cells[4] == f"{np.degrees(2.0):.1f}" and cells[5] == f"{np.degrees(-0.6):.1f}"


def test_skymap_projection_puts_ra_increasing_to_the_left():
    """All probability in the pixel of (RA 90 deg, Dec 30 deg): on the drawing grid it lies at Mollweide
    x = 180 - 90 = +90 deg (right of the centre, RA 180 deg), and RA 270 deg at x = -90 deg."""
    from gwbatch.report.figures.skymaps import _sky_x, _skymap_on_grid
    from gwbatch.sky.grid import pixel_of

    for ra_deg, x_deg in ((90.0, 90.0), (270.0, -90.0)):
        prob = np.zeros(12 * 4**4)
        prob[int(pixel_of(4, np.radians(ra_deg), np.radians(30.0)))] = 1.0
        _, _, x, y, density, levels = _skymap_on_grid(prob, 4)
        iy, ix = np.unravel_index(np.argmax(density), density.shape)
        assert abs(np.degrees(x[ix]) - x_deg) < 5 and abs(np.degrees(y[iy]) - 30.0) < 5
        assert levels.min() == 0.0 and levels.max() == 1.0
        assert _sky_x(np.radians(ra_deg)) == pytest.approx(np.radians(x_deg))


def test_skymap_not_healpix(tmp_path):
    skymaps = [{"label": "#1", "gps_time": SPAN_START, "prob": np.ones(100), "ra": 0.0, "dec": 0.0},
               {"label": "#2", "gps_time": SPAN_START, "prob": np.zeros(192), "ra": 0.0, "dec": 0.0}]
    text = write_report(tmp_path / "report.html", **empty_inputs(), skymaps=skymaps).read_text()
    assert "not drawn: not a full HEALPix map" in text and "not drawn: the map holds no probability" in text
    assert 'id="fig-skymaps"' not in text
    good = skymaps + [{"label": "#3", "gps_time": SPAN_START, "prob": uniform_skymap(), "ra": 1.0, "dec": 0.2}]
    text = write_report(tmp_path / "report.html", **empty_inputs(), skymaps=good).read_text()
    assert 'id="fig-skymaps"' in text and "not drawn: not a full HEALPix map" in text


def test_provenance_section(rich_report):
    text, _ = rich_report
    section = text.split('id="provenance"')[1].split("</section>")[0]
    assert PROVENANCE["config_sha256"] in section and len(PROVENANCE["config_sha256"]) == 64
    assert PROVENANCE["git_commit"] in section and "node-17.example" in section
    assert "numpy 2.1.3, scipy 1.14.1, matplotlib 3.9.2" in section


def test_provenance_without_git_commit(tmp_path):
    inputs = empty_inputs()
    inputs["manifest"]["provenance"] = {**PROVENANCE, "git_commit": None}
    text = write_report(tmp_path / "report.html", **inputs).read_text()
    assert "none recorded (not run from a git checkout)" in text


def test_stage_times_in_summary(rich_report):
    text, _ = rich_report
    summary = text.split('id="summary"')[1].split("</section>")[0]
    assert "<th>time per stage: chunks</th><td>3000 s (0:50:00), 81% of the wall time</td>" in summary
    assert "<th>time per stage: plan</th><td>0.5 s, &lt;1% of the wall time</td>" in summary
    assert "<th>wall time</th><td>3725 s (1:02:05)</td>" in summary


def test_gpu_utilisation(rich_report):
    text, inputs = rich_report
    summary = text.split('id="summary"')[1].split("</section>")[0]
    for device in inputs["manifest"]["gpu_utilisation"]["devices"]:
        mean = f"{device['mean']:.1f}"
        assert f"<th>mean utilisation, GPU {device['index']} (NVIDIA H200)</th><td>{mean} %</td>" in summary
        assert f'<td class="num">{mean}</td>' in text.split('id="fig-gpu"')[1]
    assert "sampled every 5 s" in figure_html(text, "fig-gpu")
    assert '<td class="num">25.00 GiB</td>' in text  # GPU 1's peak memory


def test_gpu_mean_from_samples(tmp_path):
    inputs = empty_inputs()
    gpu = make_gpu(n_gpus=1)
    del gpu["devices"][0]["mean"]
    inputs["manifest"]["gpu_utilisation"] = gpu
    text = write_report(tmp_path / "report.html", **inputs).read_text()
    assert f"{np.mean(gpu['devices'][0]['utilisation']):.1f} %" in text
    inputs["manifest"]["gpu_utilisation"] = {"interval_s": 5.0, "devices": []}
    text = write_report(tmp_path / "report.html", **inputs).read_text()
    assert "no GPU was sampled during the run" in text


def test_members_section(tmp_path):
    inputs = empty_inputs()
    inputs["manifest"]["members"] = MEMBERS
    text = write_report(tmp_path / "report.html", **inputs).read_text()
    section = text.split('id="searches"')[1].split("</section>")[0]
    assert "This campaign runs 2 searches" in section
    assert '<a href="burst/report.html">burst/report.html</a>' in section
    assert '<td class="num">7</td>' in section and "195000 s (54:10:00)" in section
    assert text.index('id="searches"') < text.index('id="summary"')


def test_member_links_stay_relative(tmp_path):
    inputs = empty_inputs()
    inputs["manifest"]["members"] = [
        {"name": n, "kind": "pulse", "candidates": 1, "report": r, "livetime_s": 1.0, "background_s": 2.0}
        for n, r in (("a", "http://example.org/r.html"), ("b", "javascript:alert(1)"), ("c", "/etc/r.html"),
                     ("d", "../other/report.html"), ("e", "my search/report.html"), ("<b>", None))]
    text = write_report(tmp_path / "report.html", **inputs).read_text()
    # in the searches table and in the per-search figures' note: only the relative link
    assert [h for h in re.findall(r'<a href="([^"]*)"', text) if not h.startswith("#")] == ["my%20search/report.html"] * 2
    assert "<td>javascript:alert(1)</td>" in text and "&lt;b&gt;" in text


def test_old_manifest_renders_new_sections_empty(tmp_path):
    """A manifest from before provenance, stages, GPU samples and members, and no series or skymaps: every
    new section says why it is empty, and the package versions of the old manifest are shown."""
    inputs = full_inputs()
    inputs["injections"] = None
    inputs["manifest"]["versions"] = {"python": "3.11.2", "numpy": "2.1.3"}
    text = write_report(tmp_path / "report.html", **inputs).read_text()
    assert "Not drawn: no time series were given to the report" in text
    assert "Not drawn: no skymaps were given to the report" in text
    assert "Not drawn: the run recorded no GPU utilisation" in text
    assert "This manifest records no provenance" in text and "python 3.11.2, numpy 2.1.3" in text
    assert 'id="searches"' not in text and "time per stage" not in text and "mean utilisation" not in text
    for fig_id in ("fig-series", "fig-skymaps", "fig-gpu"):
        assert f'id="{fig_id}"' not in text
    assert text.count("<svg") == 3


def test_empty_series_and_skymaps(tmp_path):
    text = write_report(tmp_path / "report.html", **empty_inputs(), series=[], skymaps=[]).read_text()
    assert "Not drawn: no candidate has a time series." in text
    assert "Not drawn: no candidate has a skymap." in text


def test_new_inputs_are_escaped(tmp_path):
    evil = "<script>alert(1)</script>"
    inputs = empty_inputs()
    inputs["manifest"]["provenance"] = {**PROVENANCE, "host": evil, "packages": {evil: evil}}
    inputs["manifest"]["timing"]["stages"] = {evil: 1.0}
    inputs["manifest"]["members"] = [{"name": evil, "kind": evil, "candidates": 1, "report": evil}]
    skymaps = [{"label": evil, "gps_time": SPAN_START, "prob": uniform_skymap(), "ra": None, "dec": None}]
    series = [{"label": evil, "gps_time": SPAN_START, "statistic": evil,
               "curves": {evil: (np.arange(5.0), np.arange(5.0))}}]
    text = write_report(tmp_path / "report.html", **inputs, series=series, skymaps=skymaps).read_text()
    assert "<script" not in text.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_campaign_of_several_searches_draws_their_ifars_together(tmp_path):
    """A campaign of several searches (candidates with a ``member`` column, no background of its own):
    each search's candidates against its own background, all of them against the summed expectation."""
    inputs = empty_inputs()
    inputs["manifest"]["members"] = MEMBERS
    pulse = make_candidates().assign(member="pulse")  # 50, one with infinite IFAR
    burst = make_candidates(n=7, seed=2).assign(member="burst", search="burst")
    inputs["candidates"] = pd.concat([pulse, burst], ignore_index=True)
    text = write_report(tmp_path / "report.html", **inputs).read_text()
    figure = text.split('id="fig-ifar"')[1].split("</figure>")[0]
    assert "\u03a3 T_fg = 7900 s over 2 searches" in figure  # 4000 s + 3900 s
    assert "2 infinite IFAR(s) drawn at the background time of their search" in figure
    for label in ("all searches (57)", "pulse (50)", "burst (7)"):
        assert label in figure
    # a search without a background adds neither a curve nor livetime
    inputs["manifest"]["members"] = [MEMBERS[0], {**MEMBERS[1], "background_s": 0.0}]
    text = write_report(tmp_path / "report.html", **inputs).read_text()
    figure = text.split('id="fig-ifar"')[1].split("</figure>")[0]
    assert "\u03a3 T_fg = 4000 s over 1 searches" in figure and "burst (7)" not in figure


def test_run_over_several_invocations(tmp_path):
    """A run resumed after --stop-after: the summary says so and the GPU figure names its samples."""
    from workflow.manifest import account_parts

    inputs = empty_inputs()
    manifest = inputs["manifest"]
    manifest["timing"] = {"wall_seconds": 100.0, "stages": {"plan": 1.0, "chunks": 60.0, "reduce": 30.0}}
    gpu = make_gpu(n_gpus=1)
    manifest["gpu_utilisation"] = {**gpu, "mean": gpu["devices"][0]["mean"]}  # as workflow.monitor writes it
    last = manifest["gpu_utilisation"]["mean"]
    parts = [{"stages": {"plan": 2.0, "chunks": 300.0}, "wall_seconds": 310.0, "chunks_done": 40,
              "gpu_utilisation_mean": 80.0},
             {"stages": {"plan": 1.0, "chunks": 60.0}, "wall_seconds": 65.0, "chunks_done": 10,
              "gpu_utilisation_mean": last}]
    account_parts(manifest, parts)
    assert manifest["timing"]["stages"] == {"plan": 3.0, "chunks": 360.0, "reduce": 30.0}
    assert manifest["timing"]["wall_seconds"] == 410.0
    assert manifest["gpu_utilisation"]["mean"] == pytest.approx((80.0 * 300 + last * 60) / 360, rel=1e-12)
    text = write_report(tmp_path / "report.html", **inputs).read_text()
    summary = text.split('id="summary"')[1].split("</section>")[0]
    assert "<th>invocations</th><td>2 (chunks done in each: 40, 10); wall and stage times are their sums</td>" in summary
    assert "<th>time per stage: chunks</th><td>360 s (0:06:00), 88% of the wall time</td>" in summary
    assert f"<th>mean utilisation over every invocation</th><td>{manifest['gpu_utilisation']['mean']:.1f} %</td>" in summary
    assert "during the last of 2 invocations of the run" in figure_html(text, "fig-gpu")


def test_summary_states_the_deep_background_and_the_reach(tmp_path):
    inputs = empty_inputs()
    inputs["manifest"]["background"] |= {
        "deep_slides": 400, "deep_cut": 7.0312, "ifar_reach_years": 0.0571,
        "tail_fit": {"ifar_reach_years": 1258.4, "extrapolated_up_to": 10.4204}}
    text = write_report(tmp_path / "report.html", **inputs).read_text()
    summary = text.split('id="summary"')[1].split("</section>")[0]
    assert "<th>deep slides</th><td>400, keeping events ranked &gt;= 7.031</td>" in summary
    assert ("<th>IFAR reach</th><td>0.0571 yr counted; 1.26e+03 yr from the tail fit (up to rank 10.42)</td>"
            in summary)


# ----------------------------------------------------------------------------------------------
# the page for analysts: candidates first, navigation, flags and links, detector figures, Q transforms


def section_ids(text: str) -> list[str]:
    return re.findall(r'<section id="([^"]+)"', text)


def candidate_rows(text: str) -> list[str]:
    table = text.split('<section id="candidates">')[1].split("</table>")[0]
    return table.split("<tbody>")[1].split("<tr>")[1:]


def test_candidates_come_first_and_the_configuration_last(rich_report):
    """The first section is the candidate table (after the title line and the navigation bar); the
    configuration and timing and the provenance come after every figure."""
    text, _ = rich_report
    ids = section_ids(text)
    assert ids[0] == "candidates"
    assert ids[-2:] == ["summary", "provenance"]
    for before in ("details", "figures", "asd", "segments", "triggers", "chunks", "gates"):
        assert ids.index(before) < ids.index("summary")
    body = text.split("<body>")[1]
    assert body.index("<header") < body.index("<nav") < body.index('<section id="candidates">')
    assert body.index('id="fig-gpu"') > body.index('<section id="summary">')


def test_navigation_links_every_section(rich_report):
    text, _ = rich_report
    nav = re.search(r"<nav[^>]*>(.*?)</nav>", text, re.S).group(1)
    targets = re.findall(r'href="#([^"]+)"', nav)
    assert targets == section_ids(text)
    ids = set(re.findall(r'\bid="([^"]+)"', text))
    for target in re.findall(r'href="#([^"]+)"', text):  # every in-page link resolves
        assert target in ids, target


def test_bound_fars_are_marked(tmp_path):
    """A bound FAR is an upper limit: "< FAR" and "> IFAR"; counted and extrapolated ones are plain."""
    inputs = empty_inputs()
    cands = make_candidates(n=6)
    cands["far"] = [1e-8, 2e-8, 3e-8, 4e-8, 5e-8, 6e-8]
    cands["ifar_years"] = 1.0 / (cands["far"] * YEAR)
    cands["far_kind"] = ["bound", "counted", "extrapolated", "bound", "counted", "counted"]
    inputs["candidates"] = cands
    rows = candidate_rows(write_report(tmp_path / "report.html", **inputs).read_text())
    assert len(rows) == 6
    for row, kind, far, ifar in zip(rows, cands["far_kind"], cands["far"], cands["ifar_years"]):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
        bound = kind == "bound"
        assert (f"&lt; {fmt_far(far)}" in cells) is bound and (f"&gt; {fmt_ifar(ifar)}" in cells) is bound
        assert (fmt_far(far) in cells) is not bound and (fmt_ifar(ifar) in cells) is not bound


def test_injection_flag_exactly_on_matched_rows(full_report):
    """Found injections 0-3 matched candidates 0-3 (``candidate``): those rows, and only those, say so."""
    _, out, inputs = full_report
    inj = inputs["injections"]
    matched = dict(zip(inj.loc[inj["found"], "candidate"], inj.loc[inj["found"], "id"]))
    assert sorted(matched) == [0, 1, 2, 3]
    for i, row in enumerate(candidate_rows(out.read_text())):
        flag = re.search(r'<span class="flag">([^<]*)</span>', row)
        assert (flag is not None) is (i in matched)
        if flag:
            assert flag.group(1) == f"injection {matched[i]}"


def test_hardware_injection_flag(tmp_path):
    inputs = empty_inputs()
    flags = [False, True, False, False, True, False]
    inputs["candidates"] = make_candidates(n=6).assign(hw_injection=flags)
    rows = candidate_rows(write_report(tmp_path / "report.html", **inputs).read_text())
    assert ['<span class="flag">hardware injection</span>' in r for r in rows] == flags


def test_candidates_link_their_skymap_and_detail(tmp_path):
    """The skymap link is relative to the run directory (to the member's in a campaign of several
    searches); the detail link goes to the candidate's block, which exists for candidates with figures."""
    inputs = empty_inputs()
    cands = make_candidates(n=6)
    cands["skymap"] = [f"skymaps/{t:.3f}.fits" for t in cands["gps_time"]]
    cands.loc[3:, "skymap"] = ""
    inputs["candidates"] = cands
    series = [{**entry, "gps_time": float(t)} for entry, t in zip(make_series(n=2), cands["gps_time"])]
    text = write_report(tmp_path / "report.html", **inputs, series=series).read_text()
    rows = candidate_rows(text)
    for i, row in enumerate(rows):
        has_map = i < 3
        assert (f'<a href="skymaps/{cands["gps_time"].iloc[i]:.3f}.fits">skymap</a>' in row) is has_map
        assert (f'<a href="#cand-{i + 1}">detail</a>' in row) is (i < 2)
    assert 'id="cand-1"' in text and 'id="cand-2"' in text and 'id="cand-3"' not in text
    inputs["candidates"] = cands.assign(member="spiir")
    text = write_report(tmp_path / "report.html", **inputs).read_text()
    assert f'<a href="spiir/skymaps/{cands["gps_time"].iloc[0]:.3f}.fits">skymap</a>' in candidate_rows(text)[0]


def test_asd_bands_follow_the_chunks():
    """Nine chunks scaled 0.8 ... 1.2 in PSD: the median ASD is the design ASD, the 10 % and 90 %
    percentiles those of the chunks' ASD scales, and nothing below f_low or at Nyquist is kept."""
    from gwbatch.report.figures.asd import asd_bands

    psd = make_psds(("H1",))["H1"]
    f, median, low, high = asd_bands(psd, 20.0)
    assert f[0] == 20.0 and f[-1] == 1023.0
    np.testing.assert_allclose(median, design_asd(f), rtol=1e-12)
    scales = np.percentile(np.sqrt(np.linspace(0.8, 1.2, 9)), [10, 90])
    np.testing.assert_allclose(low, design_asd(f) * scales[0], rtol=1e-12)
    np.testing.assert_allclose(high, design_asd(f) * scales[1], rtol=1e-12)


def test_asd_figure_quotes_the_median_at_100_hz(rich_report):
    """The ASD table's median at 100 Hz matches sqrt of the input PSDs' median there (within 0.1 %,
    the printed precision); the lowest median ASD lies at the design's minimum."""
    text, inputs = rich_report
    assert "<svg" in figure_html(text, "fig-asd")
    table = text.split('<figure id="fig-asd">')[1].split("</table>")[0]
    for k, ifo in enumerate(inputs["psds"]):
        row = [r for r in table.split("<tr>") if f"<td>{ifo}</td>" in r][0]
        cells = re.findall(r'<td class="num">([^<]*)</td>', row)
        assert cells[0] == "9"
        expected = 1.5 ** k * design_asd(np.array([100.0]))[0]
        assert float(cells[1]) == pytest.approx(expected, rel=1e-3)
        grid = np.arange(20.0, 1024.0)
        assert float(cells[3]) == pytest.approx(1.5 ** k * design_asd(grid).min(), rel=1e-3)
        assert float(cells[4]) == grid[np.argmin(design_asd(grid))]


def test_segment_timeline(rich_report):
    """Analysed and vetoed seconds per detector, counts of segments and gates, as given."""
    text, inputs = rich_report
    assert "<svg" in figure_html(text, "fig-segments")
    table = text.split('<figure id="fig-segments">')[1].split("</table>")[0]
    rows = {ifo: re.findall(r'<td class="num">([^<]*)</td>', [r for r in table.split("<tr>") if f"<td>{ifo}</td>" in r][0])
            for ifo in ("H1", "L1")}
    assert rows["H1"] == ["3996 s (1:06:36)", "2", "32 s", "1", "1"]
    assert rows["L1"] == ["3696 s (1:01:36)", "2", "0 s", "0", "1"]


def test_snr_histograms(rich_report):
    """Each detector's triggers all counted in the histogram's table, with their largest SNR."""
    text, inputs = rich_report
    assert "<svg" in figure_html(text, "fig-snr-hist")
    table = text.split('<figure id="fig-snr-hist">')[1].split("</table>")[0]
    for ifo, values in inputs["triggers"]["values"].items():
        row = [r for r in table.split("<tr>") if f"<td>{ifo}</td>" in r][0]
        cells = re.findall(r'<td class="num">([^<]*)</td>', row)
        assert cells == [str(values.size), f"{np.median(values):.2f}", f"{values.max():.2f}"]
    from gwbatch.report.figures.triggers import snr_histograms

    edges, counts = snr_histograms(inputs["triggers"]["values"])
    assert {ifo: int(n.sum()) for ifo, n in counts.items()} == {"H1": 200, "L1": 250}


def test_no_single_detector_triggers(tmp_path):
    text = write_report(tmp_path / "report.html", **empty_inputs(),
                        triggers={"statistic": "SNR", "values": {"H1": np.zeros(0)}}).read_text()
    assert "Not drawn: the search records no single-detector triggers" in text


def test_candidate_block_has_its_q_transform_and_tf_map(rich_report):
    """The top candidate's block holds its Q transform (loudest tile at the injected sine-Gaussian:
    within 10 ms and 10 % of 150 Hz) and its burst map."""
    text, _ = rich_report
    block = text.split('<div class="cand" id="cand-1">')[1].split("</div>")[0]
    assert 'id="fig-qscan-1"' in block and 'id="fig-tfmap-1"' in block and 'id="fig-waveform-1"' in block
    assert "data:image/png;base64," in figure_html(text, "fig-qscan-1")
    table = block.split('<figure id="fig-qscan-1">')[1].split("</table>")[0]
    for ifo in ("H1", "L1"):
        cells = re.findall(r'<td class="num">([^<]*)</td>', [r for r in table.split("<tr>") if f"<td>{ifo}</td>" in r][0])
        q, t, f, energy = (float(c) for c in cells)
        assert abs(t) < 0.01 and abs(f / QSCAN_F0 - 1) < 0.1 and energy > 25
    assert '<a href="#candidates">back to the table</a>' in block


def test_failed_figure_is_named_and_the_report_written(tmp_path, monkeypatch):
    import gwbatch.report.html as report_html

    def broken(*args):
        raise ValueError("no ink")

    monkeypatch.setattr(report_html, "fig_asd", broken)
    inputs = empty_inputs()
    text = write_report(tmp_path / "report.html", **inputs, psds=make_psds()).read_text()
    assert "Not drawn: drawing it failed (ValueError: no ink)." in text


def test_captions_mention_injections_only_when_there_are_some(tmp_path):
    inputs = full_inputs()
    inputs["injections"] = None
    text = write_report(tmp_path / "report.html", **inputs).read_text()
    assert "injection" not in figure_html(text, "fig-time")
    assert "injections are marked" in figure_html(write_report(tmp_path / "r.html", **full_inputs()).read_text(),
                                                  "fig-time")


def test_old_run_without_the_new_inputs(full_report):
    """A run from before PSDs, segments, trigger SNRs and maps were given: each says why it is missing."""
    text = full_report[1].read_text()
    assert "Not drawn: no PSDs were given to the report" in text
    assert "Not drawn: no analysed segments were given to the report" in text
    assert "Not drawn: no single-detector triggers were given to the report" in text
    assert "No time-frequency maps were given to the report" in text


def test_new_figure_inputs_are_escaped(tmp_path):
    evil = "<script>alert(1)</script>"
    inputs = empty_inputs()
    inputs["candidates"] = make_candidates().assign(ifos=evil, member=evil, skymap=evil)
    qscan, tfmap = make_qscan(), make_tfmap()
    qscan["label"] = tfmap["label"] = evil
    text = write_report(tmp_path / "report.html", **inputs, qscans=[qscan], tfmaps=[tfmap],
                        triggers={"statistic": evil, "values": {evil: np.arange(5.0)}}).read_text()
    assert "<script" not in text.lower() and "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_the_page_of_several_searches_sends_per_search_figures_to_their_reports(tmp_path):
    """The combined page has no background or injections of its own: it said "no candidates and no
    background" and "this campaign has no injections" of a campaign whose every search had both.
    It now links each search's report for the figures that are per search."""
    inputs = empty_inputs()
    inputs["manifest"]["members"] = MEMBERS
    inputs["candidates"] = make_candidates().assign(member="pulse")
    text = write_report(tmp_path / "report.html", **inputs).read_text()
    per_search = text.split("Significance and injections, per search")[1].split("</p>")[0]
    for m in MEMBERS:
        assert f'<a href="{m["name"]}/report.html">{m["name"]}</a>' in per_search
    assert "no candidates and no background" not in text and "this campaign has no injections" not in text
    assert 'id="fig-rank"' not in text
    # a campaign of one search still draws them
    single = write_report(tmp_path / "one.html", **{**empty_inputs(), "candidates": make_candidates()}).read_text()
    assert "per search" not in single and "Ranking statistic distribution" in single
