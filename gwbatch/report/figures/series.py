"""The search's statistic (SNR or rho) against time around each top candidate."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from gwbatch.report.figures.common import MAX_PANELS, drawn
from gwbatch.report.format import fmt_gps, text
from gwbatch.report.markup import skipped, subsection


def fig_series(series: Sequence[dict] | None) -> str:
    """One small panel per top candidate (up to ``MAX_PANELS``): the statistic against time relative to
    the candidate, one line per detector, with a marker at zero."""
    title = "SNR / \u03c1 time series around the top candidates"
    if series is None:
        return skipped(title, "no time series were given to the report (this search does not record them).")
    entries = [s for s in series if isinstance(s, dict)]
    if not entries:
        return skipped(title, "no candidate has a time series.")
    shown = entries[:MAX_PANELS]
    ifos: list[str] = []
    for entry in shown:
        ifos += [str(k) for k in (entry.get("curves") or {}) if str(k) not in ifos]
    colours = {ifo: f"C{k % 10}" for k, ifo in enumerate(ifos)}
    ncols = min(len(shown), 3)
    nrows = -(-len(shown) // ncols)
    fig = Figure(figsize=(3.5 * ncols + 0.4, 2.7 * nrows + 0.5), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[len(shown):]:
        ax.set_visible(False)
    for ax, entry in zip(axes, shown):
        lines = 0
        for ifo, curve in (entry.get("curves") or {}).items():
            ty = _curve(curve)
            if ty is not None:
                ax.plot(*ty, color=colours[str(ifo)], lw=1)
                lines += 1
        ax.axvline(0.0, color="0.3", ls="--", lw=0.8)
        ax.set_title(f"{text(entry.get('label'))}  GPS {fmt_gps(entry.get('gps_time'))}", parse_math=False,
                     fontsize="small")
        ax.set_xlabel("time from the candidate (s)")
        ax.set_ylabel(text(entry.get("statistic") or "SNR"), parse_math=False)
        if not lines:
            ax.text(0.5, 0.5, "no finite samples", ha="center", va="center", transform=ax.transAxes)
    if ifos:
        handles = [Line2D([], [], color=colours[ifo], lw=1.5) for ifo in ifos]
        fig.legend(handles, ifos, loc="outside lower center", ncols=len(ifos), fontsize="small")
    caption = ("The search's statistic against time relative to each top candidate (most significant first), one "
               "line per detector; the dashed line marks the candidate's time.")
    if len(entries) > len(shown):
        caption += f" The first {len(shown)} of {len(entries)} are drawn."
    return subsection(title, drawn(fig, "fig-series", caption))


def _curve(curve) -> tuple[np.ndarray, np.ndarray] | None:
    """A ``(t, y)`` pair as float arrays of the same length, finite samples only (None if none)."""
    try:
        t, y = (np.asarray(c, dtype=np.float64).ravel() for c in curve)
    except (TypeError, ValueError):
        return None
    if t.size != y.size:
        return None
    ok = np.isfinite(t) & np.isfinite(y)
    return (t[ok], y[ok]) if ok.any() else None
