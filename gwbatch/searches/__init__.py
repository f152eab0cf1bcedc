"""Searches, picked by ``search.kind``.

A search tells the planner how much data it needs around each chunk (:meth:`halo`) and turns one
chunk of strain into per-detector triggers and analysed segments
(:meth:`process(campaign, ifos, backend, spec)`), returning a
:class:`ChunkResult`.  Everything after that (merging chunk edges, coincidence, time slides, FAR,
outputs, report) is shared.
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

    registry = {"pulse": PulseSearch}
    try:
        return registry[kind]()
    except KeyError:
        raise ConfigError(f"unknown search kind {kind!r}; known: {', '.join(registry)}") from None
