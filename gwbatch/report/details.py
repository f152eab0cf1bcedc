"""The top candidates in detail: their statistic time series and skymaps side by side, then one block
per candidate (``id="cand-<n>"``, n its row in the candidate table) with its values, links and the
time-frequency maps of each detector's whitened data (Q transform; burst pixels for a burst candidate),
or, for a dispersed pulse, its dedispersed waterfall and its DM-time bow-tie (:mod:`.figures.radio`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from gwbatch.report.figures.common import MAX_PANELS, guarded
from gwbatch.report.figures.qscans import fig_burst_waveform, fig_qscan, fig_tfmap
from gwbatch.report.figures.radio import DM_UNIT, fig_bowtie, fig_waterfall
from gwbatch.report.figures.series import fig_series
from gwbatch.report.figures.skymaps import fig_skymaps
from gwbatch.report.format import fmt_far, fmt_gps, fmt_ifar, fmt_int, fmt_snr, fmt_utc, missing, num, text
from gwbatch.report.markup import esc, kv_table, link, note, section
from gwbatch.report.tables import MAX_CANDIDATES, bounded, candidate_links, fmt_width, rfi_text

SAME_EVENT_S = 1e-3  # an entry (time series, skymap, map) belongs to the candidate within this of its GPS time


def detail_anchors(candidates: pd.DataFrame, *entries: Sequence[dict] | None) -> dict[int, str]:
    """Row position -> anchor of the listed candidates (the first ``MAX_CANDIDATES``) that have a time
    series, skymap or time-frequency map in ``entries`` (matched by GPS time), at most ``MAX_PANELS``."""
    if "gps_time" not in candidates.columns:
        return {}
    times = [float(e["gps_time"]) for group in entries for e in (group or []) if isinstance(e, dict)
             and not missing(e.get("gps_time"))]
    if not times:
        return {}
    gps = pd.to_numeric(candidates["gps_time"].head(MAX_CANDIDATES), errors="coerce").to_numpy()
    near = np.abs(gps[:, None] - np.asarray(times)[None, :]).min(axis=1) <= SAME_EVENT_S
    return {int(i): f"cand-{int(i) + 1}" for i in np.flatnonzero(near)[:MAX_PANELS]}


def _entry_for(entries: Sequence[dict] | None, gps: float) -> dict | None:
    for e in entries or []:
        if isinstance(e, dict) and not missing(e.get("gps_time")) and abs(float(e["gps_time"]) - gps) <= SAME_EVENT_S:
            return e
    return None


def details_section(candidates: pd.DataFrame, anchors: dict[int, str], series: Sequence[dict] | None,
                    skymaps: Sequence[dict] | None, qscans: Sequence[dict] | None,
                    tfmaps: Sequence[dict] | None, waterfalls: Sequence[dict] | None = None,
                    bowties: Sequence[dict] | None = None, sample_rate: float | None = None) -> str:
    """``Top candidates``: the time series and skymaps of the top candidates, then a block per candidate
    in ``anchors`` with its values, links and time-frequency maps (or waterfall and bow-tie; ``sample_rate``,
    Hz, gives a pulse's width in ms)."""
    parts = [guarded("SNR / \u03c1 time series around the top candidates", fig_series, series),
             guarded("Skymaps of the top candidates", fig_skymaps, skymaps)]
    drawn_figures = {"series": _any_entry(series), "skymaps": _any_entry(skymaps)}
    for i, anchor in anchors.items():
        parts.append(_candidate_block(candidates.iloc[i], i, anchor, qscans, tfmaps, waterfalls, bowties,
                                      sample_rate, drawn_figures))
    if qscans is None and waterfalls is None and bowties is None:
        parts.append(note("No time-frequency maps were given to the report (a run from before they were made)."))
    return section("Top candidates", "\n".join(parts), "details")


def _is_pulse(row: pd.Series) -> bool:
    """A dispersed pulse (a search of radio spectra): the candidate has a DM and a width (in a campaign of
    several searches, the other searches' rows have the columns, empty)."""
    return not missing(row.get("dm")) and not missing(row.get("width"))


def _any_entry(entries: Sequence[dict] | None) -> bool:
    return any(isinstance(e, dict) for e in entries or [])


def _candidate_block(row: pd.Series, i: int, anchor: str, qscans, tfmaps, waterfalls=None, bowties=None,
                     sample_rate: float | None = None, drawn_figures: dict | None = None) -> str:
    """One candidate: its values, links (skymap FITS, the time series and skymap figures where the page
    has them) and maps: the Q transform and burst pixels, or a dispersed pulse's waterfall and bow-tie."""
    gps = float(row["gps_time"])
    pairs = [("UTC", fmt_utc(gps)), ("GPS time", fmt_gps(gps)), ("detectors", text(row.get("ifos"))),
             ("SNR", fmt_snr(row.get("snr")))]
    for key, label, fmt in (("dm", f"DM ({DM_UNIT})", lambda v: num(v, ".2f")),
                            ("width", "width (ms)" if sample_rate else "width (samples)",
                             lambda v: fmt_width(v, sample_rate)),
                            ("members", "members", fmt_int)):
        if not missing(row.get(key)):
            pairs.append((label, fmt(row[key])))
    if not missing(row.get("rfi")):
        pairs.append(("RFI", rfi_text(row) or "not flagged"))
    for key, label, fmt in (("far", "FAR (Hz)", fmt_far), ("ifar_years", "IFAR (yr)", fmt_ifar),
                            ("far_kind", "FAR is", text)):
        if key in row.index:
            pairs.append((label, bounded(key, row, fmt(row[key]))))
    drawn_figures = drawn_figures if drawn_figures is not None else {"series": True, "skymaps": True}
    links = " ".join(p for p in [candidate_links(row, None),
                                 link("#fig-series", "time series") if drawn_figures.get("series") else "",
                                 link("#fig-skymaps", "skymaps") if drawn_figures.get("skymaps") else "",
                                 link("#candidates", "back to the table")] if p)
    body = [f"<h3>#{i + 1} \u2013 {esc(fmt_utc(gps))} UTC</h3>",
            kv_table(pairs), f'<p class="links">{links}</p>']
    if _is_pulse(row):  # a dispersed pulse: its waterfall and bow-tie (the search gives no Q transform)
        waterfall, bowtie = _entry_for(waterfalls, gps), _entry_for(bowties, gps)
        if waterfall is not None:
            body.append(guarded(f"waterfall of {anchor}", fig_waterfall, waterfall, f"fig-waterfall-{i + 1}",
                                float(row["width"]), None if missing(row.get("snr")) else float(row["snr"])))
        elif waterfalls is not None:
            body.append(note("Waterfall not drawn: this candidate's spectra could not be read again."))
        if bowtie is not None:
            dm = row.get("dm")
            body.append(guarded(f"bow-tie of {anchor}", fig_bowtie, bowtie, f"fig-bowtie-{i + 1}",
                                None if missing(dm) else float(dm), row.get("snr")))
        elif bowties is not None:
            body.append(note("Bow-tie not drawn: this candidate's spectra could not be read again."))
    qscan = _entry_for(qscans, gps)
    if qscan is not None:
        body.append(guarded(f"Q transform of {anchor}", fig_qscan, qscan, f"fig-qscan-{i + 1}"))
    elif qscans is not None and not _is_pulse(row):
        body.append(note("Q transform not drawn: this candidate's data could not be read again."))
    tfmap = _entry_for(tfmaps, gps)
    if tfmap is not None:
        body.append(guarded(f"time-frequency map of {anchor}", fig_tfmap, tfmap, f"fig-tfmap-{i + 1}"))
        if tfmap.get("waveforms"):
            body.append(guarded(f"waveform of {anchor}", fig_burst_waveform, tfmap, f"fig-waveform-{i + 1}"))
    return f'<div class="cand" id="{anchor}">\n' + "\n".join(body) + "\n</div>"
