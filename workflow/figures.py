"""The report's figures, recomputed on the client after the chunk stage: for the top candidates each
search's statistic around the candidate in every detector, the Q transform of each detector's whitened
data and a burst candidate's pixels (:func:`candidate_figures`), and its skymap; for the run, the
analysed segments, vetoes and trigger SNRs of each detector (:func:`top_figures`)."""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import pandas as pd

from gwbatch._xp import StageTimer
from gwbatch.gpstime import GPSTime, sample_times, time_to_index
from gwbatch.report.qtransform import QScan, q_transform
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



#: Candidates per search whose statistic time series, skymaps and time-frequency maps the report draws.
TOP_FIGURES = 3

#: The Q transform of a candidate: seconds of whitened data transformed, the window (either side of the
#: candidate) in which its loudest tile is looked for, and the window drawn.
QSCAN_DATA_S, QSCAN_SEARCH_S, QSCAN_SHOWN_S = 4.0, 0.25, 0.5


def top_figures(m: Member, reduced: Reduced, top: int = TOP_FIGURES) -> dict:
    """What the report draws beyond the tables: for each of the ``top`` most significant candidates the
    search's statistic around it (``series``), the Q transform of each detector's whitened data
    (``qscans``) and, for a burst candidate, the search's time-frequency pixels (``tfmaps``), all from one
    read of the chunk that owns it, and its probability map (``skymaps``); for a radio candidate, its
    dedispersed waterfall and profile (``waterfalls``) and its S/N over DM and time (``bowties``)
    (:meth:`gwbatch.searches.base.Search.own_figures`); and for the run, each detector's
    analysed segments and vetoes (``segments``) and its trigger SNRs (``triggers``)."""
    series, skymaps, qscans, tfmaps, waterfalls, bowties = [], [], [], [], [], []
    t0, fs = GPSTime.parse(m.plan.t0), m.plan.sample_rate
    for _, row in reduced.candidates.head(top).iterrows():
        sample = time_to_index(t0, float(row["gps_time"]), fs)
        spec = next((c for c in m.plan.chunks if c.start <= sample < c.stop), None)
        if spec is not None:
            try:
                found = candidate_figures(m, spec, row)
            except Exception as exc:  # the figure is lost, not the run; the report says it is missing
                log.warning("no time series or maps for the candidate at GPS %.3f: %s: %s", row["gps_time"],
                            type(exc).__name__, exc)
            else:
                series.append(found["series"])
                qscans += [found["qscan"]] if found["qscan"]["scans"] else []
                tfmaps += [found["tfmap"]] if found["tfmap"] is not None else []
                waterfalls += [found["waterfall"]] if found.get("waterfall") else []
                bowties += [found["bowtie"]] if found.get("bowtie") else []
        prob = reduced.skymaps.get(row.get("skymap")) if isinstance(row.get("skymap"), str) else None
        if prob is not None:
            skymaps.append({"label": str(row["search"]),
                            "gps_time": float(row["gps_time"]), "prob": prob,
                            "ra": float(row["ra"]), "dec": float(row["dec"])})
    return {"series": series, "skymaps": skymaps, "qscans": qscans, "tfmaps": tfmaps, "waterfalls": waterfalls,
            "bowties": bowties,
            "segments": run_segments(m, reduced), "triggers": trigger_snrs(m, reduced)}


def run_segments(m: Member, reduced: Reduced) -> dict:
    """Per detector the analysed and the vetoed GPS ``[start, stop)`` intervals within the span, and the
    span's GPS start and stop (the report's segment timeline)."""
    t0, fs, plan = GPSTime.parse(m.plan.t0), m.plan.sample_rate, m.plan
    lo, hi = (int(plan.span_start), int(plan.span_stop))

    def gps(seg) -> np.ndarray:
        seg = np.clip(np.asarray(seg, dtype=np.int64).reshape(-1, 2), lo, hi)
        return sample_times(t0, seg[seg[:, 1] > seg[:, 0]].astype(np.float64), fs).reshape(-1, 2)

    vetoed = plan.segments.vetoed if plan.segments is not None else {}
    return {"analysed": {ifo: gps(seg) for ifo, seg in reduced.segments.items()},
            "vetoed": {ifo: gps(seg) for ifo, seg in vetoed.items() if len(seg)},
            "span": tuple(float(x) for x in sample_times(t0, [lo, hi], fs))}


def trigger_snrs(m: Member, reduced: Reduced) -> dict:
    """Each detector's final single-detector trigger SNRs (empty for a search without them)."""
    values = {ifo: df["snr"].to_numpy(np.float64) for ifo, df in zip(m.plan.ifos, reduced.triggers)
              if "snr" in df.columns}
    return {"statistic": "SNR", "values": values}


def candidate_series(m: Member, spec, row: pd.Series, half_width: float = 1.0) -> dict:
    """The search's statistic in each detector within ``half_width`` s of a candidate
    (:func:`candidate_figures` without its maps)."""
    return candidate_figures(m, spec, row, half_width, maps=False)["series"]


def candidate_figures(m: Member, spec, row: pd.Series, half_width: float = 1.0, maps: bool = True) -> dict:
    """A candidate's figures from one read of the chunk ``spec`` that owns it, conditioned as the search
    did (NumPy):

    - ``series``: the search's statistic in each detector within ``half_width`` s
      (:meth:`gwbatch.searches.base.Search.statistic_series`, ``(store samples, values)`` covering at least
      the window): ``{"label", "gps_time", "statistic", "curves": {ifo: (t, y)}, "stage_seconds"}`` with
      ``t`` in seconds from the candidate's ``gps_time`` and the seconds spent reading, conditioning and
      computing the statistic;
    - with ``maps``, ``qscan``: ``{"label", "gps_time", "scans": {ifo: QScan}, "stage_seconds"}``, the Q
      transform of each detector's whitened data (and the seconds of it and of the burst pixels) (:func:`whitened_qscan`; none for a search that does not whiten), and
      ``tfmap``: the search's own pixels around it and its waveform
      (:meth:`gwbatch.searches.base.Search.candidate_pixels`), None for a search without them."""
    search, plan = get_search(m.plan.search), m.plan
    t0, fs, gps = GPSTime.parse(plan.t0), plan.sample_rate, float(row["gps_time"])
    centre = time_to_index(t0, gps, fs)
    span = (centre - int(np.ceil(half_width * fs)), centre + int(np.ceil(half_width * fs)) + 1)
    curves, scans, pixels, timer, maps_timer = {}, {}, {}, StageTimer("numpy"), StageTimer("numpy")
    task = chunk_task(plan, m.meta, spec, "numpy")
    own = search.own_figures(plan.settings, task, row)
    if own is not None:  # a search of other data (radio spectra) draws its own views
        return {"qscan": {"label": str(row["search"]), "gps_time": gps, "scans": {}, "stage_seconds": {}},
                "tfmap": None, **own}
    for series in conditioned_series(task, timer):
        if not series.cond.valid.any():
            continue
        with timer("statistic"):
            samples, values = search.statistic_series(plan.settings, m.resources, series, row, spec, span)
        t = sample_times(t0, np.asarray(samples, dtype=np.float64), fs) - gps
        keep = np.abs(t) <= half_width
        if keep.any():
            curves[series.ifo] = (t[keep], np.asarray(values, dtype=np.float64)[keep])
        if not maps or series.cond.snr2_per_energy is None:  # not whitened: no maps
            continue
        at = centre - spec.read_start
        try:  # a map is lost, not the candidate's time series; the report says which is missing
            with maps_timer("qtransform"):
                scans[series.ifo] = whitened_qscan(series, at, fs, task.conditioning)
            with maps_timer("tfmap"):
                found = search.candidate_pixels(plan.settings, series, row, at, QSCAN_SHOWN_S)
            if found is not None:
                pixels[series.ifo] = found
        except Exception as exc:
            log.warning("no time-frequency map of %s for the candidate at GPS %.3f: %s: %s", series.ifo, gps,
                        type(exc).__name__, exc)
    label = str(row["search"])
    tfmap = None
    if pixels:
        box = (-0.5 * float(row["duration"]), 0.5 * float(row["duration"]), float(row["f_min"]), float(row["f_max"]))
        tfmap = {"label": label, "gps_time": gps, "resolution": float(row["resolution"]), "box": box,
                 "maps": {ifo: p[:3] for ifo, p in pixels.items()}, "waveforms": {ifo: p[3] for ifo, p in pixels.items()}}
    return {"series": {"label": label, "gps_time": gps, "statistic": search.statistic_name, "curves": curves,
                       "stage_seconds": dict(timer.seconds)},
            "qscan": {"label": label, "gps_time": gps, "scans": scans, "stage_seconds": dict(maps_timer.seconds)},
            "tfmap": tfmap}


def _window(at: float, n: int, width: int) -> tuple[int, int]:
    """``[lo, hi)`` of ``width`` samples (at most ``n``) centred on sample ``at``, kept inside ``[0, n)``."""
    width = min(width, n)
    lo = min(max(int(round(at)) - width // 2, 0), n - width)
    return lo, lo + width


def whitened_qscan(series, at: float, fs: float, conditioning) -> QScan:
    """The Q transform (:mod:`gwbatch.report.qtransform`) of ``QSCAN_DATA_S`` of a detector's whitened data
    around read-span sample ``at`` (invalid samples zeroed), over the whitening band, with the loudest
    tile within ``QSCAN_SEARCH_S`` of it; times from the candidate."""
    data = np.where(np.asarray(series.cond.valid), np.asarray(series.cond.data, dtype=np.float64), 0.0)
    lo, hi = _window(at, data.size, int(QSCAN_DATA_S * fs))
    centre = (at - lo) / fs
    scan = q_transform(data[lo:hi], fs, frange=(float(conditioning.f_low or 0.0), conditioning.f_high or np.inf),
                       search=(centre - QSCAN_SEARCH_S, centre + QSCAN_SEARCH_S),
                       outseg=(centre - QSCAN_SHOWN_S, centre + QSCAN_SHOWN_S))
    return replace(scan, times=scan.times - centre, peak_time=scan.peak_time - centre)
