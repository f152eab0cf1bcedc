"""The front end every search shares: one chunk of strain read, masked and conditioned per detector.

Non-finite samples, DQ-failing seconds and runs of exact zeros of at least ``data.zero_gap`` seconds
(data that is not data: a detector writing zeros) are masked; a non-finite value never reaches a
kernel (it is counted, masked and replaced by zero for the FFT).  After the search has found its triggers,
:func:`bookkeeping` gives the chunk's analysed segments (valid samples of its own part), its gates
and the per-detector statistics that go into the manifest.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import pandas as pd

from gwbatch._xp import StageTimer, device_memory_peak, get_xp, resolve_backend, task_stream, to_host
from gwbatch.conditioning import Conditioned, condition
from gwbatch.conditioning.mask import edge_zeros, mask_to_segments, zero_runs
from gwbatch.config import Campaign
from gwbatch.io.store import StoreMeta, dq_sample_mask, read_dq, read_meta, read_strain
from gwbatch.searches import ChunkSpec


@dataclass
class ChunkSeries:
    """One detector's conditioned data for a chunk (arrays on the chunk's backend)."""

    ifo: str
    cond: Conditioned
    finite: np.ndarray  # host bool, read span
    science: np.ndarray  # host bool, read span
    own: tuple[int, int]  # the chunk's own samples, relative to the read start
    zeros: np.ndarray | None = None  # host bool, read span: in a run of exact zeros (masked)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def zero_gap_samples(zero_gap: float | None, sample_rate: float) -> int | None:
    """The shortest run of exact zeros (samples, at least 2) masked as a gap; None: zeros are data."""
    if zero_gap is None:
        return None
    return max(2, int(np.ceil(zero_gap * sample_rate - 1e-9)))


def zero_gap_mask(meta: StoreMeta, ifo: str, x: np.ndarray, min_length: int, read_start: int) -> np.ndarray:
    """:func:`~gwbatch.conditioning.mask.zero_runs` of ``x`` (``ifo``'s samples from ``read_start``):
    a run touching either end of ``x`` with fewer than ``min_length`` zeros inside is followed up
    to ``min_length`` samples beyond it in the store, so it is judged by its whole length."""
    lead, trail = edge_zeros(x)
    before = after = 0
    if 0 < lead < min_length:
        before = edge_zeros(read_strain(meta, [ifo], read_start - (min_length - lead), read_start)[0])[1]
    if 0 < trail < min_length:
        stop = read_start + x.size
        after = edge_zeros(read_strain(meta, [ifo], stop, stop + (min_length - trail))[0])[0]
    return zero_runs(x, min_length, (before, after))


def conditioned_series(campaign: Campaign, ifos: tuple[str, ...], backend: str, spec: ChunkSpec,
                       timer: StageTimer | None = None) -> Iterator[ChunkSeries]:
    """Read the chunk with its halo and condition each detector in turn (on ``backend``); ``timer``
    gets the ``read`` and ``condition`` stages."""
    timer = timer or StageTimer("numpy")
    xp = get_xp(resolve_backend(backend))
    meta = read_meta(campaign.data.store)
    fs = meta.sample_rate
    with timer("read"):
        raw = read_strain(meta, ifos, spec.read_start, spec.read_stop)
        dq = read_dq(meta, ifos)
    required = meta.dq_mask(campaign.data.dq_flags)
    min_zeros = zero_gap_samples(campaign.data.zero_gap, fs)
    own = (spec.start - spec.read_start, spec.stop - spec.read_start)
    for i, ifo in enumerate(ifos):
        with timer("condition"):
            x = raw[i]
            finite = np.isfinite(x)
            science = dq_sample_mask(dq[i], required, spec.read_start, spec.read_stop, fs)
            zeros = (zero_gap_mask(meta, ifo, x, min_zeros, spec.read_start) if min_zeros is not None
                     else np.zeros(x.size, dtype=bool))
            valid = finite & science & ~zeros
            host = np.where(finite, x, 0.0).astype(np.float64)
            cond = condition(xp.asarray(host), xp.asarray(valid), campaign.conditioning, fs)
        yield ChunkSeries(ifo, cond, finite, science, own, zeros)


def bookkeeping(series: ChunkSeries, spec: ChunkSpec, n_triggers: int, extra: dict | None = None):
    """``(segments, gates, stats)`` of one detector's chunk after its search."""
    lo, hi = series.own
    cond = series.cond
    proper_valid = to_host(cond.valid[lo:hi])
    segments = mask_to_segments(proper_valid, offset=spec.start)
    inside = (cond.gate_peaks >= lo) & (cond.gate_peaks < hi)
    gates = pd.DataFrame({"ifo": series.ifo, "sample": cond.gate_peaks[inside] + spec.read_start,
                          "peak": cond.gate_values[inside]}) if inside.any() else None
    stats = {
        "psd_segments": cond.psd_segments,
        "nonfinite_in_science": int(np.count_nonzero(~series.finite[lo:hi] & series.science[lo:hi])),
        "science_samples": int(np.count_nonzero(series.science[lo:hi])),
        # science samples of the chunk's own part masked because they lie in a run of exact zeros
        "zero_samples": int(np.count_nonzero(series.zeros[lo:hi] & series.science[lo:hi]))
        if series.zeros is not None else 0,
        "analysed_samples": int(proper_valid.sum()),
        "triggers": int(n_triggers),
        "note": cond.note,
        **(extra or {}),
    }
    return segments, gates, stats


def empty_gates() -> pd.DataFrame:
    return pd.DataFrame({"ifo": pd.Series(dtype=str), "sample": pd.Series(dtype=np.int64),
                         "peak": pd.Series(dtype=np.float64)})


def run_chunk(campaign: Campaign, ifos: tuple[str, ...], backend: str, spec: ChunkSpec, columns: dict,
              search_one: Callable[[ChunkSeries], tuple[pd.DataFrame, dict]],
              network: Callable[[list[ChunkSeries], pd.DataFrame], tuple[dict, dict]] | None = None):
    """A chunk's :class:`~gwbatch.searches.ChunkResult`: each detector's conditioned series through
    ``search_one``, which returns its triggers (``columns`` and their dtypes) and extra statistics
    for the manifest; then, if given, ``network(series, triggers)`` over all detectors together,
    which returns the result's ``(tables, arrays)``."""
    from gwbatch._xp import device_name
    from gwbatch.searches import ChunkResult

    started = time.perf_counter()
    backend = resolve_backend(backend)
    timer = StageTimer(backend)
    frames, segments, gates, stats, kept = [], {}, [], {}, []
    with task_stream(backend), device_memory_peak(backend) as peak:
        for series in conditioned_series(campaign, ifos, backend, spec, timer):
            with timer("search"):
                frame, extra = search_one(series)
                frames.append(frame.assign(chunk=spec.index))
                segments[series.ifo], gate, stats[series.ifo] = bookkeeping(series, spec, len(frame), extra)
            if gate is not None:
                gates.append(gate)
            if network is not None:
                kept.append(series)
        triggers = pd.concat(frames, ignore_index=True).astype(columns)
        with timer("network"):
            tables, arrays = network(kept, triggers) if network is not None else ({}, {})
    return ChunkResult(
        index=spec.index,
        triggers=triggers,
        segments=segments,
        gates=pd.concat(gates, ignore_index=True) if gates else empty_gates(),
        series_stats=stats,
        device=device_name(backend),
        worker=worker_name(),
        seconds=time.perf_counter() - started,
        tables=tables,
        arrays=arrays,
        device_peak_bytes=int(peak[0]),
        stage_seconds={k: v for k, v in timer.seconds.items() if k != "network" or network is not None},
    )


def gather_chunk_events(results: list, t0, sample_rate: float):
    """The network events of every chunk (searches whose chunks run their own trials): one table
    with ``gps_time`` (from ``geocent_sample``) and the ``skymap`` rows renumbered into the stacked
    skymaps, those skymaps, and the livetime of every trial summed over chunks.  Returns
    ``(zero_lag, trials, skymaps, livetime)``."""
    from gwbatch.gpstime import sample_times

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


def candidate_series(search, campaign: Campaign, ifos: tuple[str, ...], resources: dict, spec: ChunkSpec,
                     row: pd.Series, half_width: float = 1.0) -> dict:
    """The search's statistic in each detector within ``half_width`` s of a candidate, for the
    report: the chunk that owns the candidate is read and conditioned as the search did (NumPy),
    then ``search.statistic_series(campaign, resources, series, row, spec, span)`` gives ``(store
    samples, values)`` covering at least the store samples ``span`` of the window.  Returns
    ``{"label", "gps_time", "statistic", "curves": {ifo: (t, y)}, "stage_seconds"}`` with ``t`` in
    seconds from the candidate's ``gps_time`` and the seconds spent reading, conditioning and
    computing the statistic."""
    from gwbatch.gpstime import GPSTime, sample_times, time_to_index

    meta = read_meta(campaign.data.store)
    t0, fs, gps = GPSTime.parse(meta.t0), meta.sample_rate, float(row["gps_time"])
    centre = time_to_index(t0, gps, fs)
    span = (centre - int(np.ceil(half_width * fs)), centre + int(np.ceil(half_width * fs)) + 1)
    curves, timer = {}, StageTimer("numpy")
    for series in conditioned_series(campaign, ifos, "numpy", spec, timer):
        if not series.cond.valid.any():
            continue
        with timer("statistic"):
            samples, values = search.statistic_series(campaign, resources, series, row, spec, span)
        t = sample_times(t0, np.asarray(samples, dtype=np.float64), fs) - gps
        keep = np.abs(t) <= half_width
        if keep.any():
            curves[series.ifo] = (t[keep], np.asarray(values, dtype=np.float64)[keep])
    return {"label": str(row["search"]), "gps_time": gps, "statistic": search.statistic_name,
            "curves": curves, "stage_seconds": dict(timer.seconds)}
