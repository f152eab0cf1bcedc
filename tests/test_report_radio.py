"""The report of a radio single-pulse run: per top candidate its dedispersed waterfall with the pulse
profile and its DM-time bow-tie; for the run every candidate over DM and time and its S/N against DM;
the candidate table's pulse columns.  A real run of the tutorial pulsar (250 ms at DM 30), synthetic
inputs with known answers, and a gravitational-wave report that has none of it."""

from __future__ import annotations

import re
import time

import numpy as np
import pandas as pd
import pytest

from gwbatch.io.spectra import ingest_filterbank
from gwbatch.report import render_report, write_report
from gwbatch.report.figures.radio import (
    MAX_POINTS,
    display_factors,
    drawn_subset,
    fig_bowtie,
    fig_dm_time,
    fig_snr_dm,
    fig_waterfall,
)
from tests.test_report import candidate_rows, empty_inputs, figure_html, rich_inputs
from workflow.cli import main

from .conftest import DATA

ROOT = DATA.parent.parent
PULSE_FIGURES = ("fig-dm-time", "fig-snr-dm", "fig-waterfall-", "fig-bowtie-")


@pytest.fixture(scope="module")
def radio_run(tmp_path_factory):
    """The tutorial pulsar run as ``make radio`` does (threshold 5), in this process: its report and tables."""
    tmp = tmp_path_factory.mktemp("radio-report")
    ingest_filterbank([DATA / "radio" / "tutorial.fil"], tmp / "t.zarr")
    assert main(["run", str(ROOT / "configs" / "radio-tutorial.yaml"), "--set", f"data.store={tmp / 't.zarr'}",
                 "--set", f"output.dir={tmp / 'run'}", "--set", "cluster.kind=in-process",
                 "--set", "search.threshold=5"]) == 0
    run = tmp / "run"
    import json

    manifest = json.loads((run / "manifest.json").read_text())
    return (run / "report.html").read_text(encoding="utf-8"), pd.read_parquet(run / "candidates.parquet"), manifest


def block(text: str, n: int) -> str:
    """The detail block of candidate ``n`` (1-based)."""
    start = text.index(f'<div class="cand" id="cand-{n}">')
    return text[start:text.index("\n</div>", start)]


def bowtie_table(html: str) -> dict[str, tuple[float, float, float]]:
    """The bow-tie's table after its figure: row name -> (DM, time s, S/N)."""
    table = html.split("</figure>", 1)[1].split("</table>")[0]
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", table, re.S):
        cells = re.findall(r"<td[^>]*>([^<]*)</td>", row)
        if cells:
            rows[cells[0]] = tuple(float(c) for c in cells[1:])
    return rows


def kv(html: str) -> dict[str, str]:
    return dict(re.findall(r"<tr><th>([^<]*)</th><td>([^<]*)</td></tr>", html))


# --- the real run --------------------------------------------------------------------------------------


def test_radio_report_has_waterfalls_bowties_and_dm_figures(radio_run):
    text, cands, _ = radio_run
    for fig_id in ("fig-dm-time", "fig-snr-dm"):
        assert "<svg" in figure_html(text, fig_id)
    for n in (1, 2, 3):  # workflow.figures.TOP_FIGURES candidates
        b = block(text, n)
        for fig_id in (f"fig-waterfall-{n}", f"fig-bowtie-{n}"):
            assert f'<figure id="{fig_id}">' in b
            assert "data:image/png;base64," in figure_html(text, fig_id)  # the images are rasterised
        assert "Q transform" not in b  # a radio candidate has no whitened strain to transform
    assert "drawing it failed" not in text
    ids = re.findall(r'\bid="([^"]+)"', text)
    assert len(ids) == len(set(ids))
    # the DM figures sit at the top of the figures section, before the significance figures
    figures = text.split('<section id="figures">')[1]
    assert figures.index('id="fig-dm-time"') < figures.index('id="fig-snr-dm"') < figures.index('id="fig-time"')


def test_bowtie_peaks_at_the_candidates_dm_trial(radio_run):
    """Each top candidate's bow-tie has its largest S/N in the candidate's own DM trial, within the
    candidate's width of its time, at its S/N within 2 % (the bow-tie's trials are normalised as the
    search's: running baseline, σ and measured boxcar σ; measured 1.000 to 1.005).  (A single pulse
    of this pulsar barely constrains its DM, tests/test_radio_search.py.)"""
    text, cands, manifest = radio_run
    fs = float(manifest["store"]["sample_rate"])
    for n in (1, 2, 3):
        row = cands.iloc[n - 1]
        table = bowtie_table(block(text, n).split(f'<figure id="fig-bowtie-{n}">')[1])
        dm, t, snr = table["bow-tie maximum"]
        assert table["candidate"][0] == pytest.approx(row["dm"], abs=0.005)
        assert dm == pytest.approx(row["dm"], abs=0.005), (n, dm, row["dm"])
        assert abs(t) <= row["width"] / fs, (n, t)
        assert snr == pytest.approx(row["snr"], rel=0.02), (n, snr, row["snr"])
        assert table["candidate"][2] == pytest.approx(row["snr"], abs=0.005)


def test_waterfall_profile_peaks_at_the_pulse(radio_run):
    """The profile above each waterfall peaks at the candidate (within its width) a few σ above the noise,
    and the waterfall is averaged for drawing to about half the pulse's width."""
    text, cands, manifest = radio_run
    fs = float(manifest["store"]["sample_rate"])
    for n in (1, 2, 3):
        caption = figure_html(text, f"fig-waterfall-{n}").split("<figcaption>")[1]
        peak, at = (float(x) for x in re.search(r"whose peak is ([\d.]+) σ at ([+-][\d.]+) ms", caption).groups())
        width_ms = cands["width"].iloc[n - 1] / fs * 1e3
        assert peak > 3.0 and abs(at) <= width_ms, (n, peak, at)
        samples = int(re.search(r"bins of (\d+) samples \(pixels sized", caption).group(1))
        assert 0.25 * cands["width"].iloc[n - 1] <= samples <= 0.5 * cands["width"].iloc[n - 1]


def test_dm_time_plot_counts_every_candidate(radio_run):
    text, cands, _ = radio_run
    caption = figure_html(text, "fig-dm-time").split("<figcaption>")[1]
    assert f"Every zero-lag candidate ({len(cands)})" in caption
    assert f"({cands['snr'].min():.2f} to {cands['snr'].max():.2f})" in caption
    assert "drawn as markers" not in caption and len(cands) < 5000  # all drawn (236 measured)
    assert 1 <= cands["rfi"].sum() <= 20  # some peak at DM 0 (8 measured)
    assert "RFI-flagged in grey, stacked" in figure_html(text, "fig-snr-dm")


def test_candidate_table_and_block_show_the_pulse_columns(radio_run):
    text, cands, manifest = radio_run
    fs = float(manifest["store"]["sample_rate"])
    header = re.findall(r"<th>([^<]*)</th>", text.split('<section id="candidates">')[1].split("</thead>")[0])
    for name in ("DM (pc/cm³)", "width (ms)", "members", "RFI", "FAR is"):
        assert name in header, header
    row = cands.iloc[0]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", candidate_rows(text)[0])
    shown = dict(zip(header, cells))
    assert shown["DM (pc/cm³)"] == f"{row['dm']:.2f}"
    assert shown["width (ms)"] == f"{row['width'] / fs * 1e3:.3g}"
    assert shown["members"] == str(int(row["members"]))
    assert shown["FAR is"] == "noise model" and shown["RFI"] == ""
    values = kv(block(text, 1))
    assert values["DM (pc/cm³)"] == f"{row['dm']:.2f}" and values["RFI"] == "not flagged"
    assert values["FAR is"] == "noise model"
    assert '<a href="#fig-skymaps">' not in block(text, 1)  # no skymaps on a radio page: no dead link


# --- synthetic inputs ----------------------------------------------------------------------------------


def radio_candidates(n: int = 30, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    snr = np.sort(rng.uniform(6.0, 9.0, n))[::-1]
    rfi = np.zeros(n, dtype=bool)
    rfi[[2, 5]] = True
    return pd.DataFrame({
        "search": "radio", "ifos": "beam0", "beam": "beam0", "gps_time": 1.0e9 + rng.uniform(0, 100, n),
        "snr": snr, "dm": rng.choice([0.0, 10.0, 20.0, 30.0], n), "dm_index": 0, "width": 8, "members": 12,
        "rfi": rfi, "rfi_reason": np.where(rfi, "zero_dm", ""), "far": np.geomspace(1e-9, 1e-3, n),
        "ifar_years": 1.0, "far_kind": "noise model"})


def synthetic_waterfall(gps: float, width_s: float = 0.004) -> dict:
    """A pulse at time 0 in every channel of a (64, 200) waterfall of unit noise, frequencies descending."""
    rng = np.random.default_rng(5)
    times = (np.arange(200) - 100) * 0.001
    freqs = np.linspace(1500.0, 1437.0, 64)
    power = rng.normal(size=(64, 200))
    power[:, np.abs(times) < width_s / 2] += 1.0
    pt = (np.arange(800) - 400) * 0.00025
    profile = rng.normal(size=800)
    profile[np.abs(pt) < width_s / 2] += 4.0
    return {"label": "radio", "gps_time": gps, "beam": "beam0", "dm": 30.0, "times": times, "frequencies": freqs,
            "power": power, "profile": (pt, profile)}


def synthetic_bowtie(gps: float, peak_trial: int = 13) -> dict:
    """A bow-tie whose S/N peaks at DM trial ``peak_trial`` at +2 ms and widens away from it."""
    dms = np.geomspace(1.0, 100.0, 21)
    times = np.linspace(-0.05, 0.05, 201)
    off = np.abs(np.arange(dms.size) - peak_trial)[:, None]
    snr = 10.0 / (1 + 0.2 * off) * np.exp(-0.5 * ((times[None, :] - 0.002) / (0.002 * (1 + off))) ** 2)
    return {"label": "radio", "gps_time": gps, "beam": "beam0", "times": times, "dms": dms, "snr": snr}


def test_synthetic_bowtie_and_waterfall_numbers():
    entry = synthetic_bowtie(1.0e9)
    html = fig_bowtie(entry, "fig-bowtie-1", float(entry["dms"][13]), 9.5)
    table = bowtie_table(html)
    assert table["bow-tie maximum"] == pytest.approx((entry["dms"][13], 0.002, 10.0), abs=0.005)
    assert table["candidate"][0] == pytest.approx(entry["dms"][13], abs=0.005)
    assert "21 DM trials (1.00 to 100.00 pc/cm³)" in html
    wf = fig_waterfall(synthetic_waterfall(1.0e9), "fig-waterfall-1", 16, 8.0)
    caption = wf.split("<figcaption>")[1]
    peak, at = (float(x) for x in re.search(r"whose peak is ([\d.]+) σ at ([+-][\d.]+) ms", caption).groups())
    assert abs(at) <= 2.0 and peak > 5.0  # 16 samples of +4 in 4-sample bins: ~8 σ
    # 16-sample pulse in 4-sample bins: 2 bins a pixel; S/N 8 -> ~14 sub-bands: 64 / 4 = 16
    assert display_factors(64, 200, 4.0, 16, 8.0) == (4, 2)
    assert "averaged for drawing into 16 sub-bands and 100 bins of 8 samples" in caption
    assert display_factors(64, 200, 4.0, None, None) == (1, 1)  # nothing known: as the search gave it
    assert "Waterfall not drawn" in fig_waterfall({"times": [0.0]}, "x")
    assert "Bow-tie not drawn" in fig_bowtie({"times": [0.0], "dms": [1.0], "snr": [[np.nan]]}, "x")


def test_rfi_candidates_flagged_in_the_table_and_hollow_in_the_plots(tmp_path):
    inputs = empty_inputs()
    inputs["candidates"] = cands = radio_candidates()
    gps = float(cands["gps_time"].iloc[0])
    text = write_report(tmp_path / "report.html", **inputs, waterfalls=[synthetic_waterfall(gps)],
                        bowties=[synthetic_bowtie(gps)]).read_text()
    rows = candidate_rows(text)
    for i in range(len(rows)):
        assert ('<span class="flag">RFI (zero_dm)</span>' in rows[i]) is bool(cands["rfi"].iloc[i])
    assert "width (ms)" in text  # the manifest's sample rate gives the width in ms
    assert "RFI-flagged candidates are hollow and grey" in figure_html(text, "fig-dm-time")
    assert "<svg" in figure_html(text, "fig-waterfall-1") and "<svg" in figure_html(text, "fig-bowtie-1")
    assert 'id="cand-2"' not in text  # only the candidate with figures has a detail block


def test_a_hundred_thousand_candidates_are_subsampled_and_fast():
    n = 100_000
    rng = np.random.default_rng(1)
    cands = pd.DataFrame({"gps_time": 1.0e9 + rng.uniform(0, 3600, n), "dm": rng.uniform(0, 1000, n), "width": 4,
                          "snr": 6 + rng.exponential(1.0, n), "rfi": rng.random(n) < 0.05})
    manifest = {"plan": {"span_start_gps": 1.0e9}}
    start = time.perf_counter()
    dm_time, snr_dm = fig_dm_time(manifest, cands), fig_snr_dm(manifest, cands)
    assert time.perf_counter() - start < 30  # ~0.6 s alone; generous on a shared machine
    assert f"{MAX_POINTS} of the {n} candidates are drawn as markers" in dm_time
    assert f"{MAX_POINTS} of the {n} candidates below are drawn as markers" in snr_dm
    assert len(dm_time) < 2_000_000 and len(snr_dm) < 2_000_000  # markers rasterised
    shown, random = drawn_subset(cands["snr"].to_numpy())
    loudest = np.argsort(cands["snr"].to_numpy())[-(MAX_POINTS // 2):]
    assert shown.size == MAX_POINTS and random == MAX_POINTS // 2 and set(loudest) <= set(shown)
    assert np.all(np.diff(cands["snr"].to_numpy()[shown]) >= 0)  # the loudest drawn last (on top)


def test_a_gravitational_wave_report_has_none_of_it():
    """No DM, waterfall or bow-tie figure and no pulse column on a GW report, and empty radio inputs (what
    the workflow passes for every search) change nothing; a pulse search of a dedispersed series (a width
    but no DM) gets no DM figures either."""
    inputs = rich_inputs()
    page = render_report(**inputs)
    for fig_id in PULSE_FIGURES:
        assert f'id="{fig_id}' not in page
    assert "DM (pc/cm" not in page and "Waterfall" not in page and "Bow-tie" not in page
    assert render_report(**inputs, waterfalls=[], bowties=[]) == page
    assert render_report(**inputs, waterfalls=None, bowties=None) == page
    inputs["candidates"] = inputs["candidates"].assign(width=16, members=3)
    page = render_report(**inputs)
    assert 'id="fig-dm-time"' not in page and 'id="fig-snr-dm"' not in page and "width (ms)" in page
