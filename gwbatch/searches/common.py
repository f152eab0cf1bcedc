"""The front end every search shares: one chunk of strain read, masked and conditioned per detector,
and the bookkeeping of a chunk task (:class:`ChunkRun`).

Non-finite samples, DQ-failing seconds, time outside the science segments or in category-1 vetoes,
and runs of exact zeros of at least ``data.zero_gap`` seconds (:func:`gwbatch.io.span.read_span`)
are masked before conditioning; a non-finite value never reaches a kernel (it is counted, masked
and replaced by zero for the FFT).  Category-2 and -4 vetoes (and vetoed hardware injections) are
masked after conditioning: the data still serve the PSD and the filters, but no trigger, network
event or livetime comes from a vetoed sample.  After the search has found a detector's
triggers, :meth:`ChunkRun.add` records the chunk's analysed segments (valid samples of its own
part), its gates and the per-detector statistics that go into the manifest.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pandas as pd

from gwbatch._xp import StageTimer, device_memory_peak, device_name, get_xp, resolve_backend, task_stream, to_host
from gwbatch.conditioning import Conditioned, condition
from gwbatch.conditioning.mask import mask_to_segments
from gwbatch.gpstime import GPSTime
from gwbatch.io.segments import interval_mask
from gwbatch.simulate.injection_set import add_injections, injection_snrs
from gwbatch.io.span import read_span
from gwbatch.io.tables import gates_frame
from gwbatch.tasks import ChunkResult, ChunkTask


#: The chunk table of the file injections' measured optimal SNRs (``id``, ``ifo``, ``snr``).
INJECTED = "injected"
#: The chunk arrays of the PSDs each detector was whitened with (:meth:`ChunkRun.psd_arrays`).
PSD, PSD_FREQUENCY = "psd", "psd_frequency"


@dataclass
class ChunkSeries:
    """One detector's conditioned data for a chunk (arrays on the chunk's backend)."""

    ifo: str
    cond: Conditioned
    finite: np.ndarray  # host bool, read span
    science: np.ndarray  # host bool, read span
    zeros: np.ndarray  # host bool, read span: in a run of exact zeros (masked)
    vetoed: np.ndarray  # host bool, read span: vetoed after conditioning (categories 2 and 4)
    injected: list  # [{id, ifo, snr, time}]: optimal SNRs and envelope peaks of the file injections arriving here
    own: tuple[int, int]  # the chunk's own samples, relative to the read start


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def conditioned_series(task: ChunkTask, timer: StageTimer | None = None, backend: str | None = None
                       ) -> Iterator[ChunkSeries]:
    """Read the task's chunk with its halo and condition each detector in turn, on ``backend``
    (default the task's); ``timer`` gets the ``read`` and ``condition`` stages."""
    timer = timer or StageTimer("numpy")
    xp = get_xp(resolve_backend(backend or task.backend))
    spec, fs = task.spec, task.sample_rate
    segments, t0 = task.segments, GPSTime.parse(task.store.t0)
    with timer("read"):
        span = read_span(task.store, task.ifos, spec.read_start, spec.read_stop, dq_required=task.dq_required,
                         zero_gap=task.zero_gap, excluded=segments.excluded if segments else None)
    own = (spec.start - spec.read_start, spec.stop - spec.read_start)
    for i, ifo in enumerate(task.ifos):
        with timer("condition"):
            finite = span.finite[i]
            host = np.where(finite, span.strain[i], 0.0).astype(np.float64)
            if task.injections:
                add_injections(host, ifo, spec.read_start, task.injections, t0, fs)
            cond = condition(xp.asarray(host), xp.asarray(span.valid[i]), task.conditioning, fs)
            vetoed = np.zeros(host.size, dtype=bool)
            if segments and len(segments.vetoed.get(ifo, ())):
                vetoed = interval_mask(segments.vetoed[ifo], spec.read_start, spec.read_stop)
                cond.valid = cond.valid & ~xp.asarray(vetoed)
            psd = None if cond.psd is None else tuple(to_host(p) for p in cond.psd)
            injected = injection_snrs(task.injections, ifo, (spec.start, spec.stop), psd, t0, fs,
                                      task.conditioning.f_low) if task.injections else []
        yield ChunkSeries(ifo, cond, finite, span.science[i], span.zeros[i], vetoed, injected, own)


def bookkeeping(series: ChunkSeries, start: int, read_start: int, n_triggers: int, extra: dict | None = None):
    """``(segments, gates, stats)`` of one detector's chunk after its search (``start``, ``read_start``:
    the chunk's first own and first read store sample)."""
    lo, hi = series.own
    cond = series.cond
    proper_valid = to_host(cond.valid[lo:hi])
    segments = mask_to_segments(proper_valid, offset=start)
    inside = (cond.gate_peaks >= lo) & (cond.gate_peaks < hi)
    gates = gates_frame({"ifo": [series.ifo] * int(inside.sum()), "sample": cond.gate_peaks[inside] + read_start,
                         "peak": cond.gate_values[inside]})
    stats = {
        "psd_segments": cond.psd_segments,
        "nonfinite_in_science": int(np.count_nonzero(~series.finite[lo:hi] & series.science[lo:hi])),
        "science_samples": int(np.count_nonzero(series.science[lo:hi])),
        # science samples of the chunk's own part masked because they lie in a run of exact zeros
        "zero_samples": int(np.count_nonzero(series.zeros[lo:hi] & series.science[lo:hi])),
        # samples of the chunk's own part vetoed after conditioning (categories 2 and 4)
        "vetoed_samples": int(np.count_nonzero(series.vetoed[lo:hi])),
        # samples of the chunk's own part that gating took out (the gate and its tapers)
        "gated_samples": int(cond.gated[lo:hi].sum()) if cond.gated is not None else 0,
        "analysed_samples": int(proper_valid.sum()),
        "triggers": int(n_triggers),
        "note": cond.note,
        **(extra or {}),
    }
    return segments, gates, stats


class ChunkRun:
    """One chunk task's bookkeeping while a search's ``process`` runs it::

        with ChunkRun(task) as run:
            for series in run.series():          # read, masked, conditioned: one detector at a time
                with run.stage("search"):
                    ...                          # the detector's triggers
                    run.add(series, triggers)
            with run.stage("network"):
                ...                              # searches that form network events
        return run.result(TRIGGER_COLUMNS, tables, arrays)

    The task's kernels queue on its own CUDA stream (:func:`gwbatch._xp.task_stream`) and each
    stage ends by synchronising it, so a stage is charged with the kernels it queued; the GPU
    memory the task adds is recorded (:func:`gwbatch._xp.device_memory_peak`)."""

    def __init__(self, task: ChunkTask) -> None:
        self.task = task
        self.backend = resolve_backend(task.backend)
        self.timer = StageTimer(self.backend)
        self.frames: list[pd.DataFrame] = []
        self.segments: dict[str, np.ndarray] = {}
        self.gates: list[pd.DataFrame] = []
        self.stats: dict[str, dict] = {}
        self.injected: list[dict] = []
        self.psds: dict[str, tuple] = {}
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> "ChunkRun":
        self.started = time.perf_counter()
        self._stack.enter_context(task_stream(self.backend))
        self._peak = self._stack.enter_context(device_memory_peak(self.backend))
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def series(self) -> Iterator[ChunkSeries]:
        return conditioned_series(self.task, self.timer, self.backend)

    def stage(self, name: str):
        return self.timer(name)

    def add(self, series: ChunkSeries, triggers: pd.DataFrame, extra: dict | None = None) -> None:
        """Record one detector's triggers and its segments, gates and statistics."""
        spec = self.task.spec
        self.frames.append(triggers.assign(chunk=spec.index))
        self.segments[series.ifo], gates, self.stats[series.ifo] = bookkeeping(
            series, spec.start, spec.read_start, len(triggers), extra)
        if len(gates):
            self.gates.append(gates)
        self.injected += series.injected
        if series.cond.psd is not None and series.cond.psd[1] is not None:
            self.psds[series.ifo] = tuple(to_host(p) for p in series.cond.psd)

    def psd_arrays(self) -> dict[str, np.ndarray]:
        """The PSDs the detectors were whitened with: ``psd`` ``(detectors, F)`` in the task's detector
        order (NaN for a detector whose PSD was not measured) and ``psd_frequency`` ``(F,)``; none
        when no detector was whitened."""
        if not self.psds:
            return {}
        freq = next(iter(self.psds.values()))[0]
        rows = [self.psds[ifo][1] if ifo in self.psds else np.full(freq.size, np.nan) for ifo in self.task.ifos]
        return {PSD: np.stack(rows).astype(np.float64), PSD_FREQUENCY: np.asarray(freq, np.float64)}

    def triggers(self, columns: dict) -> pd.DataFrame:
        """The triggers recorded so far, every detector's, in ``columns`` and their dtypes."""
        return pd.concat(self.frames, ignore_index=True).astype(columns)

    def result(self, columns: dict, tables: dict | None = None, arrays: dict | None = None) -> ChunkResult:
        """The task's :class:`~gwbatch.tasks.ChunkResult` (call after the ``with`` block: the GPU memory
        peak is known once it has ended)."""
        return ChunkResult(
            index=self.task.spec.index,
            triggers=self.triggers(columns),
            segments=self.segments,
            gates=pd.concat(self.gates, ignore_index=True) if self.gates else gates_frame(),
            series_stats=self.stats,
            device=device_name(self.backend),
            worker=worker_name(),
            seconds=time.perf_counter() - self.started,
            tables={**(tables or {}), **({INJECTED: pd.DataFrame(self.injected, columns=["id", "ifo", "snr", "time"])}
                                         if self.task.injections else {})},
            arrays={**(arrays or {}), **self.psd_arrays()},
            device_peak_bytes=int(self._peak[0]),
            stage_seconds=dict(self.timer.seconds),
        )
