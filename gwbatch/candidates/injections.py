"""Found/missed injections: which listed injections the candidates recovered.

An injection is found by a candidate when, in every detector the candidate has, the trigger time
lies within the injection's match window (``duration``: a pulse's energy FWHM, 10 ms for a binary)
of the injection's arrival time in that detector, or within the candidate's own duration there when
that is longer (``duration_<ifo>``, else ``duration``: a pulse's boxcar, a burst cluster's extent,
which holds its energy-weighted time; a binary's burst cluster centres on its last cycles, ~0.2 s
before the merger), or within the search's timing uncertainty (``timing``: its ``max_uncertainty``,
which its coincidence already allows), and at least one sample. For candidates with a sky direction
(the coherent SPIIR search, column ``ra``) only detectors with SNR at least ``LOCATED_SNR`` count:
their per-detector times are the samples read at the best direction, and in a detector that holds
little of the signal that sample is set by noise, up to the light travel time away. (Their
geocentric time is no better: on a two-detector ring the best direction's delay to the geocentre is
uncertain by up to 21 ms.) Candidates of one detector each without per-detector columns (column
``ifo``, e.g. the radio search's beams) have their ``gps_time`` and ``snr`` in their own detector
and none in the others. Of several matching candidates the one with the highest ranking statistic
(``rank``, else ``snr``) is taken. A candidate the search flags as interference (a true ``rfi``
column: the radio search's multi-beam, DM-0 and undispersed events) finds nothing: an analyst
discards it, so an injection that only such a candidate holds (one merged into an RFI cluster) is
missed, not found at that cluster's FAR. Injections arriving outside the analysed time of fewer than
``min_ifos`` detectors are marked ``analysed = False`` (they could not be found) rather than
silently dropped.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: Detector SNR from which a sky-located candidate's time in that detector must match (the
#: coherent stage's default ``ifo_snr``).
LOCATED_SNR = 4.0


def in_segments(t: np.ndarray, segments: np.ndarray) -> np.ndarray:
    seg = np.asarray(segments, dtype=np.float64).reshape(-1, 2)
    if seg.shape[0] == 0:
        return np.zeros(t.size, dtype=bool)
    i = np.searchsorted(seg[:, 0], t, side="right") - 1
    ok = i >= 0
    ok[ok] = t[ok] < seg[i[ok], 1]
    return ok


def per_detector(candidates: pd.DataFrame, field: str, fallback: str | None, ifo: str) -> np.ndarray | None:
    """The candidates' ``<field>_<ifo>`` column; for candidates of one detector each without it (an
    ``ifo`` column), their ``fallback`` column in ``ifo`` and NaN elsewhere; else None."""
    if f"{field}_{ifo}" in candidates:
        return candidates[f"{field}_{ifo}"].to_numpy(dtype=np.float64)
    if "ifo" in candidates and fallback in candidates:
        own = candidates["ifo"].to_numpy(dtype=str) == ifo
        return np.where(own, candidates[fallback].to_numpy(dtype=np.float64), np.nan)
    return None


def candidate_extent(candidates: pd.DataFrame, ifo: str) -> np.ndarray:
    """The candidates' duration in ``ifo`` (s; ``duration_<ifo>``, else ``duration``, else 0)."""
    for column in (f"duration_{ifo}", "duration"):
        if column in candidates:
            return np.nan_to_num(candidates[column].to_numpy(dtype=np.float64), nan=0.0)
    return np.zeros(len(candidates))


def match_injections(
    injections: pd.DataFrame,
    candidates: pd.DataFrame,
    ifos: tuple[str, ...],
    gps_segments: dict[str, np.ndarray],
    min_ifos: int,
    sample_rate: float,
    timing: float = 0.0,
) -> pd.DataFrame:
    """One row per injection with ``found``, the matching candidate's statistics and per-detector
    errors (``timing``: the search's timing uncertainty, s; module docstring)."""
    inj = injections.reset_index(drop=True)
    n = len(inj)
    tol = np.maximum(inj["duration"].to_numpy(dtype=np.float64), max(float(timing), 1.0 / sample_rate))
    analysed = np.zeros(n, dtype=int)
    for ifo in ifos:
        analysed += in_segments(inj[f"time_{ifo}"].to_numpy(dtype=np.float64), gps_segments[ifo])
    out = inj[["id", "waveform", "gps_time", "snr", "duration",
               *(c for c in ("ra", "dec", "hrss", "frequency", "mass1", "mass2", "distance", "redshift", "volume")
                 if c in inj)]].copy()
    out["analysed"] = analysed >= min_ifos
    found = np.zeros(n, dtype=bool)
    best = np.full(n, -1, dtype=np.int64)
    if len(candidates):
        cand_times = {ifo: per_detector(candidates, "time", "gps_time", ifo) for ifo in ifos}
        extent = {ifo: candidate_extent(candidates, ifo) for ifo in ifos}
        if "ra" in candidates:  # sky-located: only detectors that hold the signal
            for ifo in ifos:
                quiet = ~(candidates[f"snr_{ifo}"].to_numpy(dtype=np.float64) >= LOCATED_SNR)
                cand_times[ifo] = np.where(quiet, np.nan, cand_times[ifo])
        cand_snr = candidates["rank" if "rank" in candidates else "snr"].to_numpy(dtype=np.float64)
        for lo in range(0, n, 256):  # blocks keep the injection x candidate matrix small
            rows = slice(lo, min(lo + 256, n))
            matches = np.ones((rows.stop - rows.start, len(candidates)), dtype=bool)
            for ifo in ifos:
                it = inj[f"time_{ifo}"].to_numpy(dtype=np.float64)[rows]
                window = np.maximum(tol[rows, None], extent[ifo][None, :])
                close = np.abs(it[:, None] - cand_times[ifo][None, :]) <= window
                matches &= np.isnan(cand_times[ifo])[None, :] | close
            if "rfi" in candidates:
                matches &= ~candidates["rfi"].to_numpy(dtype=bool)[None, :]
            stat = np.where(matches, cand_snr[None, :], -np.inf)
            best[rows] = np.where(matches.any(axis=1), np.argmax(stat, axis=1), -1)
        found = best >= 0
    out["found"] = found
    out["candidate"] = best
    take = np.where(found, best, 0)
    for col in ("snr", "far", "ifar_years", *(("rank",) if "rank" in candidates else ())):
        values = candidates[col].to_numpy(dtype=np.float64)[take] if len(candidates) else np.zeros(n)
        out[f"found_{col}"] = np.where(found, values, np.nan)
    for ifo in ifos:
        for field, fallback in (("time", "gps_time"), ("rho", None), ("snr", "snr")):
            values = per_detector(candidates, field, fallback, ifo)
            if values is not None:
                values = values[take] if len(candidates) else np.zeros(n)
                out[f"found_{field}_{ifo}"] = np.where(found, values, np.nan)
        out[f"injected_snr_{ifo}"] = inj[f"snr_{ifo}"].to_numpy(dtype=np.float64)
        out[f"dt_{ifo}"] = out[f"found_time_{ifo}"] - inj[f"time_{ifo}"].to_numpy(dtype=np.float64)
    return out
