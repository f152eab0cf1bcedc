"""Per-detector triggers from all chunks, de-duplicated across chunk edges.

A chunk keeps a trigger group only when its peak boxcar starts in the chunk's own samples, so a
pulse is reported once; a group that straddles an edge can still be seen as two groups, one per
chunk.  Merging the groups' extents friends-of-friends over the whole series joins them and keeps
the loudest, so the result does not depend on where chunk edges fall.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gwbatch.candidates.fof import friends_of_friends
from gwbatch.gpstime import GPSTime, sample_times


def merge_chunk_triggers(triggers: pd.DataFrame) -> pd.DataFrame:
    """One row per pulse and detector, sorted by detector and sample."""
    out = []
    for _, df in triggers.groupby("ifo", sort=False):
        groups = friends_of_friends(df["group_start"].to_numpy(), df["group_stop"].to_numpy(), df["snr"].to_numpy())
        peaks = df.iloc[groups.peak].copy()
        peaks["group_start"] = groups.start
        peaks["group_stop"] = groups.stop
        peaks["members"] = np.bincount(groups.label, weights=df["members"].to_numpy(), minlength=groups.peak.size).astype(np.int64)
        out.append(peaks)
    if not out:
        return triggers.iloc[:0].copy()
    return pd.concat(out).sort_values(["ifo", "sample"], kind="stable").reset_index(drop=True)


def add_trigger_times(triggers: pd.DataFrame, t0: GPSTime, sample_rate: float) -> pd.DataFrame:
    """Add ``gps_time`` (of the trigger's ``centre`` sample) and ``duration`` (boxcar length, s)."""
    width = triggers["width"].to_numpy(dtype=np.float64)
    centre = triggers["centre"].to_numpy(dtype=np.float64)
    return triggers.assign(gps_time=sample_times(t0, centre, sample_rate), duration=width / sample_rate)
