"""What a chunk task is and what it gives back: the small frozen facts the plan computed going out
to a worker, small tables coming back (never sample series).

- :class:`ChunkSpec`: the samples a chunk owns and the samples it reads (its halos).
- :class:`ChunkTask`: everything a worker needs for one chunk of one search, built by the plan
  (:func:`workflow.plan.chunk_task`): the chunk, the store chunks it reads with their checksums,
  the detectors, the data-quality bits, the conditioning and the search's own frozen settings,
  and the array backend.  A worker never sees the YAML model and never reads store metadata.
- :class:`ChunkResult`: per-detector triggers, analysed segments, gates and statistics, and the
  search's own tables and arrays (SPIIR's and the burst search's network events).
- :class:`Significance`: a search's candidates with FARs, its background events and skymaps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class ChunkSpec:
    """One chunk: the store samples it owns ``[start, stop)`` and reads ``[read_start, read_stop)``."""

    index: int
    start: int
    stop: int
    read_start: int
    read_stop: int


@dataclass(frozen=True)
class ChunkTask:
    """One chunk of one search, as a worker runs it (see the module docstring).

    ``store`` is a :class:`gwbatch.io.store.StoreSlice`; ``zero_gap`` the shortest run of exact
    zeros masked as a gap (samples; None: zeros are data); ``conditioning`` a
    :class:`gwbatch.conditioning.ConditioningSettings`; ``settings`` the search's frozen settings
    (:meth:`gwbatch.searches.base.Search.settings`); ``segments`` a
    :class:`gwbatch.io.segments.DataSegments` clipped to the read span (None: the DQ alone);
    ``injections`` the rows of ``data.injections`` whose strain reaches the read span
    (:mod:`gwbatch.simulate.injection_set`), added to the samples as they are read."""

    spec: ChunkSpec
    store: object
    ifos: tuple[str, ...]
    dq_required: int
    zero_gap: int | None
    conditioning: object
    settings: object
    backend: str
    segments: object = None  # gwbatch.io.segments.DataSegments clipped to the read span; None: none
    injections: tuple = ()  # rows of the campaign's injection file that reach the read span (dicts)

    @property
    def sample_rate(self) -> float:
        return self.store.sample_rate


@dataclass
class ChunkResult:
    """What a chunk task sends back: small tables, never sample series."""

    index: int
    triggers: pd.DataFrame  # one row per trigger; columns per search, always ifo/sample/snr/...
    segments: dict[str, np.ndarray]  # per detector: analysed [start, stop) store samples in the chunk
    gates: pd.DataFrame  # ifo, sample, peak
    series_stats: dict[str, dict] = field(default_factory=dict)  # per detector: mean, std, notes...
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)  # the search's network tables (SPIIR: events)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)  # and arrays (SPIIR: skymaps, trial livetimes)
    device: str = "cpu"
    worker: str = ""
    seconds: float = 0.0
    device_peak_bytes: int = 0  # most GPU memory-pool bytes the task added (0 on CPUs)
    stage_seconds: dict[str, float] = field(default_factory=dict)  # read, condition, search, network


@dataclass
class Significance:
    """A search's zero-lag candidates with their FARs, its background events, and skymaps by file
    name (relative to the run directory)."""

    background: object  # gwbatch.background.BackgroundResult
    candidates: pd.DataFrame
    background_events: pd.DataFrame
    skymaps: dict[str, np.ndarray] = field(default_factory=dict)
