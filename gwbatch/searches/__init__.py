"""Searches, picked by ``search.kind``.

A search is an object with:

- ``halo(campaign, fs) -> (before, after)``: samples read around each chunk;
- ``max_uncertainty(campaign, fs)``: its largest trigger timing uncertainty (s), for slide checks;
- ``process(campaign, ifos, backend, resources, spec) -> ChunkResult``: one chunk of strain to
  per-detector triggers and analysed segments (``resources``: what the workflow prepared before the
  chunks ran, e.g. built template banks);
- ``merge(campaign, triggers, t0, fs) -> DataFrame``: the chunks' triggers, de-duplicated across chunk edges,
  with ``gps_time``, ``snr`` and ``rank`` (the per-detector ranking SNR) columns;
- ``coincidence_triggers(df, span_start, fs) -> IfoTriggers``: one detector's triggers for coincidence;
- ``candidate_fields``: extra per-detector columns for the candidate table;
- ``work_bytes(campaign, read_samples, n_ifos)``: an upper bound of one task's kernel memory, for
  the memory plan (:mod:`workflow.memory`);
- ``statistic_series(campaign, resources, series, row, spec, span)`` and ``statistic_name``: the
  search's statistic in one detector's conditioned chunk around a candidate, for the report, at
  least over the store samples ``span = (first, stop)`` (it may return more);
- ``slides_in_chunks``: False when candidates come from coincidence of the merged triggers, with
  time slides over the whole span (shared, :mod:`gwbatch.background`); True when each chunk forms
  network candidates itself, with its own time-shifted trials (SPIIR's coherent stage, the burst
  search's lags); such a search
  also has ``significance(campaign, plan, results) -> Significance``.

Everything else (FAR conventions, livetime, outputs, report) is shared.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gwbatch.errors import ConfigError


@dataclass(frozen=True)
class ChunkSpec:
    """One task: the samples it owns ``[start, stop)`` and the samples it reads ``[read_start, read_stop)``."""

    index: int
    start: int
    stop: int
    read_start: int
    read_stop: int


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


def get_search(kind: str):
    from gwbatch.searches.burst import BurstSearch
    from gwbatch.searches.pulse import PulseSearch
    from gwbatch.searches.spiir import SpiirSearch

    registry = {"pulse": PulseSearch, "spiir": SpiirSearch, "burst": BurstSearch}
    try:
        return registry[kind]()
    except KeyError:
        raise ConfigError(f"unknown search kind {kind!r}; known: {', '.join(registry)}") from None
