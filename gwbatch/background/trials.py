"""Significance from per-chunk time-shifted trials (gstlal's scheme; ALGORITHMS.md §6).

A search that forms network events inside each chunk (SPIIR's coherent stage) also runs ``K``
time-shifted trials there: in trial ``k`` detector ``j`` is moved by ``k * step * j`` (the shared
slide convention of :mod:`gwbatch.background.slides`), wrapped within the chunk.  Trial ``k`` of
every chunk together is one time slide of the whole campaign, so the FAR conventions are those of
:mod:`gwbatch.background.far`:

``FAR(x) = N_trials(rank >= x) / T_bg``, with ``T_bg`` the summed livetime of all trials.

- inclusive: every trial event counts;
- exclusive: trial events that read the candidate's own data in any detector (their sample there
  within the cluster window of the candidate's) are removed: the candidate's own data cannot be
  its own background, whichever detector's trigger seeded the trial event.

**Deep trials** (``background.deep_slides``): trials ``K + 1 ... K + D`` after the ``K`` base ones,
on the same ring of the chunk, whose events are kept only at or above a rank cut.  Each chunk sets
its own cut from its base trials (:func:`deep_trial_cut`) and reports it; the campaign's cut is the
largest chunk cut, above which every chunk's deep events are complete
(:func:`chunk_trials_significance`), and the FARs of candidates at or above it count the deep events
over the deep trials' livetime as well (:class:`gwbatch.background.significance.DeepBackground`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gwbatch.background import BackgroundResult, deep_cut
from gwbatch.background.significance import DeepBackground, assign_far
from gwbatch.background.slides import slide_shifts
from gwbatch.candidates.coincidence import cluster_in_time
from gwbatch.errors import DataError
from gwbatch.gpstime import GPSTime, sample_times


def own_trials(zero_lag: pd.DataFrame, trials: pd.DataFrame, ifos: tuple[str, ...], window: float) -> pd.DataFrame:
    """``(fg, bg)`` pairs, each once: trial events that read zero-lag event ``fg``'s own data, their
    sample in some detector within ``window`` samples of the event's sample there.

    Every detector counts, not only the trial event's pivot: a loud signal in one detector seeds
    trial events from noise triggers of the other (its pivot) as well as from its own trigger, and
    both are the signal's, not noise (a shared trigger in any detector, as PyCBC's exclusive
    background)."""
    fgs, bgs = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    if not (zero_lag.empty or trials.empty):
        for ifo in ifos:
            when = trials[f"sample_{ifo}"].to_numpy(np.float64)
            rows = np.argsort(when, kind="stable")
            when = when[rows]
            mine = zero_lag[f"sample_{ifo}"].to_numpy(np.float64)
            lo = np.searchsorted(when, mine - window, side="left")
            hi = np.searchsorted(when, mine + window, side="right")
            count = np.maximum(hi - lo, 0)
            fgs.append(np.repeat(np.arange(mine.size), count))
            # the ranges lo[i] ... hi[i] - 1 laid end to end
            starts = np.repeat(lo - np.concatenate([[0], np.cumsum(count)[:-1]]), count)
            bgs.append(rows[starts + np.arange(int(count.sum()))])
    pairs = np.unique(np.stack([np.concatenate(fgs), np.concatenate(bgs)]).astype(np.int64), axis=1)
    return pd.DataFrame({"fg": pairs[0], "bg": pairs[1]})


def noise_ranks(zero_lag: pd.DataFrame, trials: pd.DataFrame, ifos: tuple[str, ...], window: float) -> np.ndarray:
    """The ranks of ``trials`` less those linked to a zero-lag event at least as loud
    (:func:`own_trials`): a loud candidate's own trials are the events hierarchical removal takes
    out, and would set a cut above the noise's tail."""
    rank = trials["rank"].to_numpy(np.float64)
    links = own_trials(zero_lag.reset_index(drop=True), trials.reset_index(drop=True), ifos, window)
    fg, bg = links["fg"].to_numpy(np.int64), links["bg"].to_numpy(np.int64)
    louder = bg[zero_lag["rank"].to_numpy(np.float64)[fg] >= rank[bg]]
    return np.delete(rank, np.unique(louder))


def deep_trial_cut(zero_lag: pd.DataFrame, trials: pd.DataFrame, ifos: tuple[str, ...], window: float,
                   tail: int) -> float:
    """The rank above which one chunk keeps its deep trials' events: :func:`~gwbatch.background.deep_cut`
    (the ``tail + 1``-th loudest) of its base trial events' :func:`noise_ranks`."""
    return deep_cut(noise_ranks(zero_lag, trials, ifos, window), tail)


def risen_cut(cut: float, deep: pd.DataFrame, zero_lag: pd.DataFrame, ifos: tuple[str, ...], window: float,
              tail: int) -> tuple[float, pd.DataFrame]:
    """``(cut, kept)``: a chunk's deep-trial cut risen to the ``tail + 1``-th loudest of the ``deep``
    events so far that is not a louder zero-lag event's own (:func:`noise_ranks`), and those events
    at or above it.  Run after each round of deep trials, it keeps about ``tail`` deep events a chunk
    however many trials run, and every event at or above the final cut (module docstring)."""
    noise = noise_ranks(zero_lag, deep, ifos, window)
    if noise.size > tail:
        cut = max(cut, float(np.sort(noise)[::-1][tail]))
    return cut, deep[deep["rank"].to_numpy() >= cut]


def trial_background(zero_lag: pd.DataFrame, trials: pd.DataFrame, livetime: np.ndarray, *,
                     ifos: tuple[str, ...], step: float, window: float, tail: int = 0,
                     hierarchical: bool = False, n_base: int | None = None,
                     cut: float = -np.inf) -> BackgroundResult:
    """Zero-lag events with FARs against the trial events
    (:func:`gwbatch.background.significance.assign_far`; ``tail`` and ``hierarchical`` as there).

    ``livetime``: per trial (s), ``[0]`` zero lag; ``step``: trial step (s); ``window``: the window
    (samples) that links a trial event to a zero-lag event's own data (:func:`own_trials`).  ``n_base``: the
    base trials (default: all); trials after them are deep, their events all ranked at least
    ``cut`` (module docstring).
    """
    zero_lag = zero_lag.reset_index(drop=True)
    n_trials = len(livetime) - 1
    n_base = n_trials if n_base is None else int(n_base)
    trials = trials.reset_index(drop=True)
    is_deep = trials["trial"].to_numpy() > n_base
    base, extra = trials[~is_deep].reset_index(drop=True), trials[is_deep].reset_index(drop=True)
    deep = None
    if n_trials > n_base:
        deep = DeepBackground(extra["rank"].to_numpy(np.float64), own_trials(zero_lag, extra, ifos, window),
                              float(np.sum(livetime[n_base + 1:])), float(cut))
    sig = assign_far(zero_lag["rank"].to_numpy(), base["rank"].to_numpy(),
                     own_trials(zero_lag, base, ifos, window), float(np.sum(livetime[1:n_base + 1])),
                     tail=tail, hierarchical=hierarchical, deep=deep)
    fg = pd.concat([zero_lag.drop(columns=[c for c in sig.columns.columns if c in zero_lag]), sig.columns], axis=1)
    shifts = slide_shifts(len(ifos), n_trials, step, np.inf) if n_trials else np.zeros((1, len(ifos)))
    method = (f"time-shifted trials: {n_base} per chunk, detector j moved by k x {step:g} s x j in trial k, "
              f"wrapped within each chunk")
    if deep is not None:
        method += f", and {n_trials - n_base} more keeping events ranked >= {deep.cut:.4g}"
    return BackgroundResult(fg, pd.concat([base, extra], ignore_index=True), shifts,
                            np.asarray(livetime, dtype=np.float64), method, sig.fit, sig.removed,
                            deep.cut if deep is not None else None)


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
    counts = {r.index: r.arrays["livetime"].size for r in results}
    if len(set(counts.values())) > 1:  # checkpoints of another plan: never summed as if one
        a, b = min(counts, key=counts.get), max(counts, key=counts.get)
        raise DataError(f"chunks ran different numbers of trials (chunk {a}: {counts[a] - 1}, chunk {b}: {counts[b] - 1}): "
                        "their checkpoints come from different plans; run again with --overwrite")
    livetime = np.sum([r.arrays["livetime"] for r in results], axis=0)
    skymaps = np.concatenate(maps) if maps else np.zeros((0, 12))
    zero, trials = events[events["trial"] == 0], events[events["trial"] > 0].reset_index(drop=True)
    return zero, trials, skymaps, livetime


def chunk_trials_significance(results: list, *, t0: GPSTime, sample_rate: float, ifos: tuple[str, ...],
                              reference: str, cluster_window: float, step: float, window: int, tail: int = 0,
                              hierarchical: bool = False, n_base: int | None = None):
    """Significance of a search whose chunks run their own trials: every chunk's zero-lag events,
    clustered across chunk edges on their ``reference`` column (store samples) within
    ``cluster_window`` s, with FARs against every chunk's trial events (:func:`trial_background`;
    ``step``: the trial step, s; ``window``: the window (samples) within which a trial event reads a
    candidate's own data (:func:`own_trials`); ``tail``,
    ``hierarchical``: :func:`gwbatch.background.significance.assign_far`'s).  ``n_base``: the base
    trials when the chunks also ran deep ones: their events are kept at or above the largest cut a
    chunk reported (its ``deep_cut`` array).  Returns ``(BackgroundResult, skymaps)``; the trial
    events kept are the result's ``background``."""
    zero, trials, skymaps, livetime = gather_chunk_events(results, t0, sample_rate)
    keep = cluster_in_time(zero[reference].to_numpy(np.float64), zero["rank"].to_numpy(), cluster_window * sample_rate)
    zero = zero[keep].reset_index(drop=True)
    cut = -np.inf
    if n_base is not None and len(livetime) - 1 > n_base:
        cut = campaign_deep_cut(results)
        deep = trials["trial"].to_numpy() > n_base
        trials = trials[~deep | (trials["rank"].to_numpy() >= cut)].reset_index(drop=True)
    bg = trial_background(zero, trials, livetime, ifos=ifos, step=step, window=window, tail=tail,
                          hierarchical=hierarchical, n_base=n_base, cut=cut)
    return bg, skymaps


def campaign_deep_cut(results: list) -> float:
    """The largest of the chunks' deep-trial cuts: every chunk kept all its deep events at or above it."""
    cuts = [float(np.max(r.arrays["deep_cut"])) for r in results if np.size(r.arrays.get("deep_cut", ())) > 0]
    return max(cuts) if cuts else -np.inf
