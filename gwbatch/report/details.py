"""The top candidates in detail: their statistic time series and skymaps side by side, then one block
per candidate (``id="cand-<n>"``, n its row in the candidate table) with its values, links and the
time-frequency maps of each detector's whitened data (Q transform; burst pixels for a burst candidate)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from gwbatch.report.figures.common import MAX_PANELS, guarded
from gwbatch.report.figures.qscans import fig_burst_waveform, fig_qscan, fig_tfmap
from gwbatch.report.figures.series import fig_series
from gwbatch.report.figures.skymaps import fig_skymaps
from gwbatch.report.format import fmt_far, fmt_gps, fmt_ifar, fmt_snr, fmt_utc, missing, text
from gwbatch.report.markup import esc, kv_table, link, note, section
from gwbatch.report.tables import MAX_CANDIDATES, bounded, candidate_links

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
                    tfmaps: Sequence[dict] | None) -> str:
    """``Top candidates``: the time series and skymaps of the top candidates, then a block per candidate
    in ``anchors`` with its values, links and time-frequency maps."""
    parts = [guarded("SNR / \u03c1 time series around the top candidates", fig_series, series),
             guarded("Skymaps of the top candidates", fig_skymaps, skymaps)]
    for i, anchor in anchors.items():
        parts.append(_candidate_block(candidates.iloc[i], i, anchor, qscans, tfmaps))
    if qscans is None:
        parts.append(note("No time-frequency maps were given to the report (a run from before they were made)."))
    return section("Top candidates", "\n".join(parts), "details")


def _candidate_block(row: pd.Series, i: int, anchor: str, qscans, tfmaps) -> str:
    """One candidate: its values, links (skymap FITS, the time series and skymap figures) and maps."""
    gps = float(row["gps_time"])
    pairs = [("UTC", fmt_utc(gps)), ("GPS time", fmt_gps(gps)), ("detectors", text(row.get("ifos"))),
             ("SNR", fmt_snr(row.get("snr")))]
    for key, label, fmt in (("far", "FAR (Hz)", fmt_far), ("ifar_years", "IFAR (yr)", fmt_ifar),
                            ("far_kind", "FAR is", text)):
        if key in row.index:
            pairs.append((label, bounded(key, row, fmt(row[key]))))
    links = " ".join(p for p in [candidate_links(row, None), link("#fig-series", "time series"),
                                 link("#fig-skymaps", "skymaps"), link("#candidates", "back to the table")] if p)
    body = [f"<h3>#{i + 1} \u2013 {esc(fmt_utc(gps))} UTC</h3>",
            kv_table(pairs), f'<p class="links">{links}</p>']
    qscan = _entry_for(qscans, gps)
    if qscan is not None:
        body.append(guarded(f"Q transform of {anchor}", fig_qscan, qscan, f"fig-qscan-{i + 1}"))
    elif qscans is not None:
        body.append(note("Q transform not drawn: this candidate's data could not be read again."))
    tfmap = _entry_for(tfmaps, gps)
    if tfmap is not None:
        body.append(guarded(f"time-frequency map of {anchor}", fig_tfmap, tfmap, f"fig-tfmap-{i + 1}"))
        if tfmap.get("waveforms"):
            body.append(guarded(f"waveform of {anchor}", fig_burst_waveform, tfmap, f"fig-waveform-{i + 1}"))
    return f'<div class="cand" id="{anchor}">\n' + "\n".join(body) + "\n</div>"
