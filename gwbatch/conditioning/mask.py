"""Sample masks: valid data, dilation around invalid samples, and segment lists."""

from __future__ import annotations

import numpy as np

from gwbatch._xp import array_namespace


def dilate_invalid(valid, pad: int):
    """Mark every sample within ``pad`` samples of an invalid one invalid too.

    Whitening with a filter of half-length ``pad`` spreads any gap, zero-fill or edge over
    ``pad`` samples on each side; those samples must not produce candidates or count as livetime.
    """
    xp = array_namespace(valid)
    if pad <= 0:
        return valid.copy()
    bad = (~valid).astype(xp.int32)
    # Window sums of bad samples over [i - pad, i + pad] via a cumulative sum.
    c = xp.concatenate([xp.zeros(1, dtype=xp.int64), xp.cumsum(bad, dtype=xp.int64)])
    n = valid.size
    idx = xp.arange(n)
    lo = xp.clip(idx - pad, 0, n)
    hi = xp.clip(idx + pad + 1, 0, n)
    return (c[hi] - c[lo]) == 0


def mask_to_segments(mask: np.ndarray, offset: int = 0) -> np.ndarray:
    """Half-open ``[start, stop)`` runs of True in a host boolean mask, as an ``(n, 2)`` int64 array."""
    m = np.asarray(mask, dtype=np.int8)
    edges = np.diff(np.concatenate([[0], m, [0]]))
    starts = np.flatnonzero(edges == 1)
    stops = np.flatnonzero(edges == -1)
    return np.stack([starts, stops], axis=1).astype(np.int64) + offset


def segments_total(segments: np.ndarray) -> int:
    segments = np.asarray(segments).reshape(-1, 2)
    return int(np.sum(segments[:, 1] - segments[:, 0]))


def merge_segments(segments: np.ndarray) -> np.ndarray:
    """Sort and merge overlapping or touching ``[start, stop)`` segments."""
    seg = np.asarray(segments, dtype=np.float64 if np.asarray(segments).dtype.kind == "f" else np.int64).reshape(-1, 2)
    seg = seg[seg[:, 1] > seg[:, 0]]
    if seg.shape[0] == 0:
        return seg
    seg = seg[np.argsort(seg[:, 0], kind="stable")]
    # A new run starts where a start lies beyond every earlier stop.
    running_stop = np.maximum.accumulate(seg[:, 1])
    new = np.concatenate([[True], seg[1:, 0] > running_stop[:-1]])
    group = np.cumsum(new) - 1
    starts = seg[new, 0]
    stops = np.zeros(starts.size, dtype=seg.dtype)
    np.maximum.at(stops, group, seg[:, 1])
    return np.stack([starts, stops], axis=1)
