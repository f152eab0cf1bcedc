"""The cumulative rate of the ranking statistic, zero lag against the time-slide background."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from gwbatch.report.figures.common import drawn
from gwbatch.report.inputs import column, livetime
from gwbatch.report.markup import skipped, subsection


def fig_ranking(manifest: dict, candidates: pd.DataFrame, background: pd.DataFrame) -> str:
    """Rate of events at least as loud as x: the background's count over its livetime and the zero lag's
    count over the zero-lag livetime, in the statistic FARs are computed from."""
    title = "Ranking statistic distribution"
    stat = _ranking_column(candidates, background)
    bg = _cumulative_rate(column(background, stat), livetime(manifest, "background_seconds"))
    fg = _cumulative_rate(column(candidates, stat), livetime(manifest, "zero_lag_seconds"))
    if bg is None and fg is None:
        return skipped(title, "there are no events with livetime to plot (no candidates and no background).")
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.add_subplot()
    if bg is not None:
        ax.step(*bg, where="post", color="tab:blue", label=f"time-slide background ({bg[0].size})")
    if fg is not None:
        ax.step(*fg, where="post", color="black", label=f"zero lag ({fg[0].size})")
    ax.set_yscale("log")
    ax.set_xlabel(f"ranking statistic x ({stat})")
    ax.set_ylabel(f"rate of events with {stat} \u2265 x (Hz)")
    ax.legend(loc="upper right", fontsize="small")
    caption = ("Cumulative rate of events at least as loud as x: background count over the background livetime "
               "and zero-lag count over the zero-lag livetime.")
    if bg is None:
        caption += " No time-slide background is available."
    return subsection(title, drawn(fig, "fig-rank", caption))


def _cumulative_rate(values: np.ndarray | None, time: float) -> tuple[np.ndarray, np.ndarray] | None:
    """Sorted finite ``values`` and the rate (Hz) of those at least as large; None without any or without time."""
    if values is None or time <= 0:
        return None
    v = np.sort(values[np.isfinite(values)])
    if v.size == 0:
        return None
    return v, np.arange(v.size, 0, -1) / time


def _ranking_column(*frames: pd.DataFrame) -> str:
    """The column FARs are computed from: ``rank`` where the search has one, else ``snr``."""
    return "rank" if all("rank" in f.columns for f in frames if len(f.columns)) else "snr"
