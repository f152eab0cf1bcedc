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
    if pad <= 0 or bool(valid.all()):
        return valid.copy()
    # Window sums of bad samples over [i - pad, i + pad] from a cumulative sum, its ends held:
    # c[min(i + pad + 1, n)] - c[max(i - pad, 0)].
    n, p = valid.size, min(pad, valid.size)
    c = xp.concatenate([xp.zeros(1, dtype=xp.int64), xp.cumsum(~valid, dtype=xp.int64)])
    upper = xp.concatenate([c[p + 1:], xp.repeat(c[n:], p)])
    lower = xp.concatenate([xp.zeros(p, dtype=xp.int64), c[: n - p]])
    return (upper - lower) == 0


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
    stops = seg[new, 1].copy()  # not zeros: segments may lie at negative positions
    np.maximum.at(stops, group, seg[:, 1])
    return np.stack([starts, stops], axis=1)


def zero_runs(x: np.ndarray, min_length: int, outside: tuple[int, int] = (0, 0)) -> np.ndarray:
    """Host bool mask, shape of ``x`` (1-D): True where ``x`` is in a run of at least
    ``min_length`` consecutive exact zeros (``0.0`` or ``-0.0``; NaN is not zero).

    ``outside = (before, after)`` are the exact zeros known to continue the runs that touch the
    first and last sample of ``x`` beyond it; they count toward those runs' lengths.

    Why a run cut by the read edge is still found: a chunk is read with a halo of at least the
    whitening filter's half-length on each side, and a run that reaches the chunk's own samples
    from beyond the read edge has the whole halo inside the read span; with the halo at least
    ``min_length`` that part alone is long enough.  Runs that touch the read edge without reaching
    the chunk (they can still shorten its analysed time by the whitening edge) and halos shorter
    than ``min_length`` are handled by the caller, which reads up to ``min_length`` samples
    beyond the edge and passes the zeros it finds there as ``outside``
    (:func:`gwbatch.io.span.zero_gap_mask`).  Either way a sample's mask does not
    depend on where chunks are cut.
    """
    x = np.asarray(x)
    if min_length < 1:
        raise ValueError(f"min_length must be at least 1 sample, got {min_length}")
    z = np.concatenate([[False], x == 0, [False]]).astype(np.int8)
    edges = np.diff(z)
    starts = np.flatnonzero(edges == 1)
    stops = np.flatnonzero(edges == -1)
    length = stops - starts
    if starts.size:
        length[starts == 0] += int(outside[0])
        length[stops == x.size] += int(outside[1])
    keep = length >= min_length
    if not keep.any():  # the usual case: no gap to mark
        return np.zeros(x.size, dtype=bool)
    mask = np.zeros(x.size + 1, dtype=np.int32)
    np.add.at(mask, starts[keep], 1)
    np.add.at(mask, stops[keep], -1)
    return np.cumsum(mask[:-1]) > 0


def edge_zeros(x: np.ndarray) -> tuple[int, int]:
    """Exact zeros at the start and at the end of ``x`` (1-D): ``(leading, trailing)``."""
    nonzero = np.asarray(x) != 0
    if not nonzero.any():
        return x.size, x.size
    return int(np.argmax(nonzero)), int(np.argmax(nonzero[::-1]))
