"""The analysed segments, vetoes and gates of each detector on one time axis."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from gwbatch.report.figures.common import drawn
from gwbatch.report.format import fmt_gps, fmt_int, fmt_seconds
from gwbatch.report.inputs import frame
from gwbatch.report.markup import html_table, skipped, subsection

ANALYSED, VETOED, GATE = "tab:green", "tab:red", "black"


def intervals(value) -> np.ndarray:
    """``[start, stop)`` GPS intervals as a float ``(n, 2)`` array (empty for None)."""
    a = np.asarray(value if value is not None else np.zeros((0, 2)), dtype=np.float64)
    return a.reshape(-1, 2)


def total(seg: np.ndarray) -> float:
    """Seconds covered by ``seg``."""
    return float(np.sum(seg[:, 1] - seg[:, 0])) if seg.size else 0.0


def fig_timeline(segments: dict | None, gates: pd.DataFrame | None) -> str:
    """One row per detector: analysed segments (green), vetoed intervals (red) and gates (black ticks)
    against time since the span's start; a table of their seconds and counts."""
    title = "Analysed segments, vetoes and gates"
    if not segments or not segments.get("analysed"):
        return skipped(title, "no analysed segments were given to the report.")
    analysed = {str(ifo): intervals(s) for ifo, s in segments["analysed"].items()}
    vetoed = {str(ifo): intervals(s) for ifo, s in (segments.get("vetoed") or {}).items()}
    gates = frame(gates)
    ifos = list(analysed)
    start, stop = segments.get("span") or (min((s[0, 0] for s in analysed.values() if s.size), default=0.0),
                                           max((s[-1, 1] for s in analysed.values() if s.size), default=1.0))
    start, stop = float(start), float(stop)
    fig = Figure(figsize=(9, 0.55 * len(ifos) + 1.3), layout="constrained")
    ax = fig.add_subplot()
    rows = []
    for k, ifo in enumerate(ifos):
        y = len(ifos) - 1 - k
        on, off = analysed[ifo], vetoed.get(ifo, np.zeros((0, 2)))
        ax.broken_barh([(a - start, b - a) for a, b in on], (y - 0.3, 0.6), color=ANALYSED, lw=0)
        ax.broken_barh([(a - start, b - a) for a, b in off], (y - 0.3, 0.6), color=VETOED, lw=0)
        times = (pd.to_numeric(gates.loc[gates["ifo"].astype(str) == ifo, "gps_time"], errors="coerce").to_numpy()
                 if len(gates) and {"ifo", "gps_time"} <= set(gates.columns) else np.zeros(0))
        ax.vlines(times - start, y - 0.4, y + 0.4, color=GATE, lw=0.8)
        rows.append([ifo, fmt_seconds(total(on)), fmt_int(len(on)), fmt_seconds(total(off)), fmt_int(len(off)),
                     fmt_int(times.size)])
    ax.set_yticks(range(len(ifos)), ifos[::-1])
    ax.set_ylim(-0.6, len(ifos) - 0.4)
    ax.set_xlim(0.0, max(stop - start, 1e-9))
    ax.set_xlabel(f"time since GPS {fmt_gps(start)} (s)")
    fig.legend(handles=[Patch(color=ANALYSED, label="analysed"), Patch(color=VETOED, label="vetoed"),
                       Patch(color=GATE, label="gate")], loc="outside upper right", ncols=3, fontsize="small")
    caption = ("Per detector, the samples analysed (green), the intervals vetoed after conditioning (red; categories 2 "
               "and 4) and the gates (black) over the analysed span; gaps are data not analysed (missing, out of "
               "science, or masked).")
    header = ["detector", "analysed", "segments", "vetoed", "vetoed intervals", "gates"]
    return subsection(title, drawn(fig, "fig-segments", caption)
                      + html_table(header, rows, [False, True, True, True, True, True]))
