"""What a population injection campaign shows: found and missed injections against distance and
chirp mass, and the sensitive volume-time at several IFAR thresholds (:mod:`gwbatch.sensitivity`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from gwbatch.report.figures.common import drawn
from gwbatch.report.inputs import column, flag, frame
from gwbatch.report.markup import html_table, subsection
from gwbatch.sensitivity import NEEDED, sensitive_vt, union_found

VT_THRESHOLDS = (0.1, 1.0, 10.0, 100.0)  # IFAR (years) of the VT table
MARKED_IFAR = 1.0  # found injections at or above this IFAR (years) are marked apart


def _population(inj: pd.DataFrame) -> bool:
    """Whether ``inj`` comes from a population (it has what VT and the found/missed plot need)."""
    return len(inj) > 0 and all(c in inj for c in (*NEEDED, "distance", "mass1", "mass2"))


def _found_missed(ax, inj: pd.DataFrame, legend: bool = True) -> None:
    """Analysed injections on ``ax``: missed, found below and at or above :data:`MARKED_IFAR`, against
    luminosity distance and detector-frame chirp mass."""
    analysed = flag(inj, "analysed", True)
    m1, m2 = column(inj, "mass1"), column(inj, "mass2")
    chirp = (m1 * m2) ** 0.6 / (m1 + m2) ** 0.2
    distance = column(inj, "distance")
    found = flag(inj, "found", False) & analysed
    ifar = np.nan_to_num(column(inj, "found_ifar_years"), nan=-np.inf)
    missed = analysed & ~found
    loud = found & (ifar >= MARKED_IFAR)
    ax.scatter(distance[missed], chirp[missed], marker="x", color="tab:red", s=18, label=f"missed ({missed.sum()})")
    ax.scatter(distance[found & ~loud], chirp[found & ~loud], color="0.55", s=14,
               label=f"found, IFAR < {MARKED_IFAR:g} yr ({(found & ~loud).sum()})")
    ax.scatter(distance[loud], chirp[loud], color="tab:blue", s=14,
               label=f"found, IFAR \u2265 {MARKED_IFAR:g} yr ({loud.sum()})")
    ax.set_xscale("log")
    ax.set_xlabel("luminosity distance (Mpc)")
    ax.set_ylabel("chirp mass, detector frame (M\u2609)")
    ax.legend(loc="upper left", fontsize="small" if legend else "x-small")


def _vt_rows(inj: pd.DataFrame, livetime: float, name: str | None = None) -> list[list[str]]:
    vt = sensitive_vt(inj, livetime, VT_THRESHOLDS, bootstrap=500)
    head = [] if name is None else [name]
    return [head + [f"{r.ifar_years:g}", f"{r.vt:.4g} \u00b1 {r.vt_error:.2g}", f"{r.found} / {r.injections}"]
            for r in vt.itertuples()]


def fig_sensitivity(manifest: dict, injections: pd.DataFrame | None) -> str:
    """Found/missed against luminosity distance and detector-frame chirp mass, and VT; nothing
    (an empty string) unless the injections come from a population (``distance``, ``volume``)."""
    inj = frame(injections)
    if not _population(inj):
        return ""
    live = float((manifest.get("livetime") or {}).get("zero_lag_seconds") or 0.0)
    fig = Figure(figsize=(7, 4.2), layout="constrained")
    _found_missed(fig.add_subplot(), inj)
    caption = ("Analysed injections from a population uniform in comoving volume: found and missed against "
               "distance and chirp mass. The table gives the sensitive volume-time, VT = T \u00d7 mean over "
               "injections of (found \u00d7 V / (1 + z)), with bootstrap 1\u03c3 errors (gwbatch vt).")
    table = html_table(["IFAR \u2265 (yr)", "VT (Mpc\u00b3 yr)", "found / analysed"], _vt_rows(inj, live),
                       [True, True, True])
    return subsection("Sensitive volume-time", drawn(fig, "fig-vt", caption) + table)


def fig_sensitivity_searches(searches: dict[str, tuple[pd.DataFrame, float]] | None) -> str:
    """A campaign of several searches over one population: found/missed per search and for their
    union (found by any search, at the largest IFAR any gave), and the VT of each and of the union
    (over the shortest livetime), as ``gwbatch vt`` gives them; nothing unless two or more searches
    have population injections.  ``searches``: name to (injection table, zero-lag livetime in s)."""
    tables = {name: (frame(inj), live) for name, (inj, live) in (searches or {}).items() if _population(frame(inj))}
    if len(tables) < 2:
        return ""
    union = union_found({name: inj for name, (inj, _) in tables.items()})
    panels = {**{name: inj for name, (inj, _) in tables.items()}, "union": union}
    cols = min(3, len(panels))
    rows_n = -(-len(panels) // cols)
    fig = Figure(figsize=(4.2 * cols, 3.4 * rows_n), layout="constrained")
    first = None
    for k, (name, inj) in enumerate(panels.items()):
        ax = fig.add_subplot(rows_n, cols, k + 1, sharex=first, sharey=first)
        first = first or ax
        _found_missed(ax, inj, legend=False)
        ax.set_title(name, fontsize="medium")
    rows = [row for name, (inj, live) in tables.items() for row in _vt_rows(inj, live, name)]
    rows += _vt_rows(union, min(live for _, live in tables.values()), "union")
    caption = ("Found and missed injections of the shared population, per search and for their union (found by "
               "any search, at the largest IFAR any gave it), against distance and chirp mass. The table gives "
               "each one's VT with bootstrap 1\u03c3 errors; the union's is over the shortest livetime (gwbatch vt).")
    table = html_table(["search", "IFAR \u2265 (yr)", "VT (Mpc\u00b3 yr)", "found / analysed"], rows,
                       [False, True, True, True])
    return subsection("Sensitive volume-time of every search", drawn(fig, "fig-vt-searches", caption) + table)
