"""What a population injection campaign shows: found and missed injections against distance and
chirp mass, and the sensitive volume-time at several IFAR thresholds (:mod:`gwbatch.sensitivity`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from gwbatch.report.figures.common import drawn
from gwbatch.report.inputs import column, flag, frame
from gwbatch.report.markup import html_table, subsection
from gwbatch.sensitivity import NEEDED, sensitive_vt

VT_THRESHOLDS = (0.1, 1.0, 10.0, 100.0)  # IFAR (years) of the VT table
MARKED_IFAR = 1.0  # found injections at or above this IFAR (years) are marked apart


def fig_sensitivity(manifest: dict, injections: pd.DataFrame | None) -> str:
    """Found/missed against luminosity distance and detector-frame chirp mass, and VT; nothing
    (an empty string) unless the injections come from a population (``distance``, ``volume``)."""
    inj = frame(injections)
    if len(inj) == 0 or any(c not in inj for c in (*NEEDED, "distance", "mass1", "mass2")):
        return ""
    live = float((manifest.get("livetime") or {}).get("zero_lag_seconds") or 0.0)
    analysed = flag(inj, "analysed", True)
    m1, m2 = column(inj, "mass1"), column(inj, "mass2")
    chirp = (m1 * m2) ** 0.6 / (m1 + m2) ** 0.2
    distance = column(inj, "distance")
    found = flag(inj, "found", False) & analysed
    ifar = np.nan_to_num(column(inj, "found_ifar_years"), nan=-np.inf)
    fig = Figure(figsize=(7, 4.2), layout="constrained")
    ax = fig.add_subplot()
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
    ax.legend(loc="upper left", fontsize="small")
    vt = sensitive_vt(inj, live, VT_THRESHOLDS, bootstrap=500)
    rows = [[f"{r.ifar_years:g}", f"{r.vt:.4g} \u00b1 {r.vt_error:.2g}", f"{r.found} / {r.injections}"]
            for r in vt.itertuples()]
    caption = ("Analysed injections from a population uniform in comoving volume: found and missed against "
               "distance and chirp mass. The table gives the sensitive volume-time, VT = T \u00d7 mean over "
               "injections of (found \u00d7 V / (1 + z)), with bootstrap 1\u03c3 errors (gwbatch vt).")
    table = html_table(["IFAR \u2265 (yr)", "VT (Mpc\u00b3 yr)", "found / analysed"], rows, [True, True, True])
    return subsection("Sensitive volume-time", drawn(fig, "fig-vt", caption) + table)
