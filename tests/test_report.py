"""The campaign report: a self-contained, escaped HTML file that survives empty and odd inputs."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from gwbatch.report import write_report
from gwbatch.report.html import fig_to_svg, fmt_far, fmt_gps, fmt_ifar, fmt_snr, html_table

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
    for section in ("Summary", "Candidates", "Cumulative IFAR", "Ranking statistic distribution",
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

    monkeypatch.setattr(report_html.pathlib.Path, "write_text", boom)
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
