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
- ``candidate_fields``: extra per-detector columns for the candidate table.

Everything after ``process`` (coincidence, time slides, FAR, outputs, report) is shared.
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
    device: str = "cpu"
    worker: str = ""
    seconds: float = 0.0


def get_search(kind: str):
    from gwbatch.searches.pulse import PulseSearch
    from gwbatch.searches.spiir import SpiirSearch

    registry = {"pulse": PulseSearch, "spiir": SpiirSearch}
    try:
        return registry[kind]()
    except KeyError:
        raise ConfigError(f"unknown search kind {kind!r}; known: {', '.join(registry)}") from None
