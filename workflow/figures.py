"""The report's figures of the top candidates, recomputed on the client after the chunk stage: each
search's statistic around the candidate in every detector (:func:`candidate_series`) and its skymap."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from gwbatch._xp import StageTimer
from gwbatch.gpstime import GPSTime, sample_times, time_to_index
from gwbatch.searches import get_search
from gwbatch.searches.common import conditioned_series
from workflow.manifest import summed_stages
from workflow.member import Member
from workflow.plan import chunk_task
from workflow.reduce import Reduced

log = logging.getLogger("gwbatch")


def figure_stages(figures: dict) -> dict[str, float]:
    """Seconds of the report's time series per stage (read, condition, statistic), summed over
    the candidates."""
    return summed_stages(figures.get("series", []))



#: Candidates per search whose statistic time series and skymaps the report draws.
TOP_FIGURES = 3



def top_figures(m: Member, reduced: Reduced, top: int = TOP_FIGURES) -> dict:
    """The report's ``series`` (the search's statistic around each of the ``top`` most significant
    candidates, recomputed on the chunk that owns it) and ``skymaps`` (their probability maps)."""
    series, skymaps = [], []
    t0, fs = GPSTime.parse(m.plan.t0), m.plan.sample_rate
    for _, row in reduced.candidates.head(top).iterrows():
        sample = time_to_index(t0, float(row["gps_time"]), fs)
        spec = next((c for c in m.plan.chunks if c.start <= sample < c.stop), None)
        if spec is not None:
            try:
                series.append(candidate_series(m, spec, row))
            except Exception as exc:  # the figure is lost, not the run; the report says it is missing
                log.warning("no time series for the candidate at GPS %.3f: %s: %s", row["gps_time"],
                            type(exc).__name__, exc)
        prob = reduced.skymaps.get(row.get("skymap")) if isinstance(row.get("skymap"), str) else None
        if prob is not None:
            skymaps.append({"label": str(row["search"]),
                            "gps_time": float(row["gps_time"]), "prob": prob,
                            "ra": float(row["ra"]), "dec": float(row["dec"])})
    return {"series": series, "skymaps": skymaps}


def candidate_series(m: Member, spec, row: pd.Series, half_width: float = 1.0) -> dict:
    """The search's statistic in each detector within ``half_width`` s of a candidate, for the
    report: the chunk ``spec`` that owns the candidate is read and conditioned as the search did
    (NumPy), then :meth:`gwbatch.searches.base.Search.statistic_series` gives ``(store samples,
    values)`` covering at least the store samples of the window.  Returns ``{"label", "gps_time",
    "statistic", "curves": {ifo: (t, y)}, "stage_seconds"}`` with ``t`` in seconds from the
    candidate's ``gps_time`` and the seconds spent reading, conditioning and computing the statistic."""
    search, plan = get_search(m.plan.search), m.plan
    t0, fs, gps = GPSTime.parse(plan.t0), plan.sample_rate, float(row["gps_time"])
    centre = time_to_index(t0, gps, fs)
    span = (centre - int(np.ceil(half_width * fs)), centre + int(np.ceil(half_width * fs)) + 1)
    curves, timer = {}, StageTimer("numpy")
    for series in conditioned_series(chunk_task(plan, m.meta, spec, "numpy"), timer):
        if not series.cond.valid.any():
            continue
        with timer("statistic"):
            samples, values = search.statistic_series(plan.settings, m.resources, series, row, spec, span)
        t = sample_times(t0, np.asarray(samples, dtype=np.float64), fs) - gps
        keep = np.abs(t) <= half_width
        if keep.any():
            curves[series.ifo] = (t[keep], np.asarray(values, dtype=np.float64)[keep])
    return {"label": str(row["search"]), "gps_time": gps, "statistic": search.statistic_name,
            "curves": curves, "stage_seconds": dict(timer.seconds)}
