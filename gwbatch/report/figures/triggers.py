"""Single-detector triggers: the histogram of each detector's SNR (log counts)."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from gwbatch.report.figures.common import drawn
from gwbatch.report.format import fmt_int, num, text
from gwbatch.report.markup import html_table, skipped, subsection

BINS = 40


def snr_histograms(values: dict[str, np.ndarray], bins: int = BINS) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Shared bin edges over every detector's finite values, and each detector's counts in them."""
    finite = {ifo: v[np.isfinite(v)] for ifo, v in values.items()}
    every = np.concatenate([v for v in finite.values()]) if finite else np.zeros(0)
    lo, hi = (float(every.min()), float(every.max())) if every.size else (0.0, 1.0)
    edges = np.linspace(lo, hi if hi > lo else lo + 1.0, bins + 1)
    return edges, {ifo: np.histogram(v, edges)[0] for ifo, v in finite.items()}


def fig_snr_histograms(triggers: dict | None) -> str:
    """Step histograms of each detector's trigger statistic (one colour per detector, log counts), and a
    table of the trigger counts and the loudest value."""
    title = "Single-detector trigger SNR"
    if not triggers:
        return skipped(title, "no single-detector triggers were given to the report.")
    values = {str(ifo): np.asarray(v, dtype=np.float64).ravel() for ifo, v in (triggers.get("values") or {}).items()}
    if not any(np.isfinite(v).any() for v in values.values()):
        return skipped(title, "the search records no single-detector triggers (a coherent search ranks network "
                              "events only).")
    name = text(triggers.get("statistic") or "SNR")
    edges, counts = snr_histograms(values)
    fig = Figure(figsize=(7.5, 4), layout="constrained")
    ax = fig.add_subplot()
    rows = []
    for k, (ifo, n) in enumerate(counts.items()):
        if n.sum():
            ax.stairs(n, edges, color=f"C{k % 10}", lw=1.3, label=f"{ifo} ({int(n.sum())})")
        v = values[ifo][np.isfinite(values[ifo])]
        rows.append([ifo, fmt_int(v.size), num(np.median(v) if v.size else None, ".2f"),
                     num(v.max() if v.size else None, ".2f")])
    ax.set_yscale("log")
    ax.set_ylim(bottom=0.7)
    ax.set_xlabel(name)
    ax.set_ylabel("triggers per bin")
    ax.legend(loc="upper right", fontsize="small")
    caption = (f"Histogram of each detector's final single-detector triggers by {name} ({BINS} bins shared by the "
               "detectors, log counts), after clustering and vetoes.")
    return subsection(title, drawn(fig, "fig-snr-hist", caption)
                      + html_table(["detector", "triggers", f"median {name}", f"largest {name}"], rows,
                                   [False, True, True, True]))
