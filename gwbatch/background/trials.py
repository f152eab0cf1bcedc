"""Significance from per-chunk time-shifted trials (gstlal's scheme; ALGORITHMS.md §6).

A search that forms network events inside each chunk (SPIIR's coherent stage) also runs ``K``
time-shifted trials there: in trial ``k`` detector ``j`` is moved by ``k * step * j`` (the shared
slide convention of :mod:`gwbatch.background.slides`), wrapped within the chunk.  Trial ``k`` of
every chunk together is one time slide of the whole campaign, so the FAR conventions are those of
:mod:`gwbatch.background.far`:

``FAR(x) = N_trials(rank >= x) / T_bg``, with ``T_bg`` the summed livetime of all trials.

- inclusive: every trial event counts;
- exclusive: trial events whose pivot trigger is one of the candidate's own (same pivot detector,
  within the cluster window of the candidate's time there) are removed: the candidate's own data
  cannot be its own background.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gwbatch.background import BackgroundResult
from gwbatch.background.significance import assign_far
from gwbatch.background.slides import slide_shifts
from gwbatch.candidates.coincidence import cluster_in_time
from gwbatch.gpstime import GPSTime, sample_times


def own_trials(zero_lag: pd.DataFrame, trials: pd.DataFrame, ifos: tuple[str, ...], window: float) -> pd.DataFrame:
    """``(fg, bg)`` pairs: trial events whose pivot trigger is zero-lag event ``fg``'s own (pivot
    detector ``j``, pivot sample within ``window`` samples of the event's sample in ``j``)."""
    pairs = [pd.DataFrame({"fg": np.zeros(0, np.int64), "bg": np.zeros(0, np.int64)})]
    if zero_lag.empty or trials.empty:
        return pairs[0]
    pivot = trials["pivot"].to_numpy()
    for j, ifo in enumerate(ifos):
        rows = np.flatnonzero(pivot == j)
        if rows.size == 0:
            continue
        when = trials[f"sample_{ifo}"].to_numpy(np.float64)[rows]
        order = np.argsort(when, kind="stable")
        rows, when = rows[order], when[order]
        mine = zero_lag[f"sample_{ifo}"].to_numpy(np.float64)
        lo = np.searchsorted(when, mine - window, side="left")
        hi = np.searchsorted(when, mine + window, side="right")
        for i in np.flatnonzero(hi > lo):
            pairs.append(pd.DataFrame({"fg": i, "bg": rows[lo[i]:hi[i]]}))
    return pd.concat(pairs, ignore_index=True)


def trial_background(zero_lag: pd.DataFrame, trials: pd.DataFrame, livetime: np.ndarray, *,
                     ifos: tuple[str, ...], step: float, window: float, tail: int = 0,
                     hierarchical: bool = False) -> BackgroundResult:
    """Zero-lag events with FARs against the trial events
    (:func:`gwbatch.background.significance.assign_far`; ``tail`` and ``hierarchical`` as there).

    ``livetime``: per trial (s), ``[0]`` zero lag; ``step``: trial step (s); ``window``: the pivot
    window (samples) that links a trial event to a zero-lag event's own trigger.
    """
    zero_lag = zero_lag.reset_index(drop=True)
    sig = assign_far(zero_lag["rank"].to_numpy(), trials["rank"].to_numpy(),
                     own_trials(zero_lag, trials, ifos, window), float(np.sum(livetime[1:])),
                     tail=tail, hierarchical=hierarchical)
    fg = pd.concat([zero_lag.drop(columns=[c for c in sig.columns.columns if c in zero_lag]), sig.columns], axis=1)
    n_trials = len(livetime) - 1
    shifts = slide_shifts(len(ifos), n_trials, step, np.inf) if n_trials else np.zeros((1, len(ifos)))
    method = (f"time-shifted trials: {n_trials} per chunk, detector j moved by k x {step:g} s x j in trial k, "
              f"wrapped within each chunk")
    return BackgroundResult(fg, trials, shifts, np.asarray(livetime, dtype=np.float64), method, sig.fit, sig.removed)


def gather_chunk_events(results: list, t0: GPSTime, sample_rate: float):
    """The network events of every chunk: one table with ``gps_time`` (from ``geocent_sample``)
    and the ``skymap`` rows renumbered into the stacked skymaps, those skymaps, and the livetime of
    every trial summed over chunks.  Returns ``(zero_lag, trials, skymaps, livetime)``."""
    frames, maps, offset = [], [], 0
    for r in sorted(results, key=lambda r: r.index):
        ev = r.tables["events"]
        skymap = ev["skymap"].to_numpy()
        frames.append(ev.assign(skymap=np.where(skymap >= 0, skymap + offset, -1)))
        maps.append(r.arrays["skymaps"])
        offset += r.arrays["skymaps"].shape[0]
    events = pd.concat(frames, ignore_index=True)
    events["gps_time"] = sample_times(t0, events["geocent_sample"].to_numpy(np.float64), sample_rate)
    livetime = np.sum([r.arrays["livetime"] for r in results], axis=0)
    skymaps = np.concatenate(maps) if maps else np.zeros((0, 12))
    zero, trials = events[events["trial"] == 0], events[events["trial"] > 0].reset_index(drop=True)
    return zero, trials, skymaps, livetime


def chunk_trials_significance(results: list, *, t0: GPSTime, sample_rate: float, ifos: tuple[str, ...],
                              reference: str, cluster_window: float, step: float, window: int, tail: int = 0,
                              hierarchical: bool = False):
    """Significance of a search whose chunks run their own trials: every chunk's zero-lag events,
    clustered across chunk edges on their ``reference`` column (store samples) within
    ``cluster_window`` s, with FARs against every chunk's trial events (:func:`trial_background`;
    ``step``: the trial step, s; ``window``: the exclusive FAR's pivot window, samples; ``tail``,
    ``hierarchical``: :func:`gwbatch.background.significance.assign_far`'s).  Returns
    ``(BackgroundResult, trial events, skymaps)``."""
    zero, trials, skymaps, livetime = gather_chunk_events(results, t0, sample_rate)
    keep = cluster_in_time(zero[reference].to_numpy(np.float64), zero["rank"].to_numpy(), cluster_window * sample_rate)
    zero = zero[keep].reset_index(drop=True)
    return (trial_background(zero, trials, livetime, ifos=ifos, step=step, window=window, tail=tail,
                             hierarchical=hierarchical), trials, skymaps)
