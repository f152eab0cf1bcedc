"""Time slides and their livetime (ALGORITHMS.md §6), shared by every search.

Slides are circular on the analysed span ``[0, L)`` (times relative to its start): in slide ``k``
detector ``j`` (its position in the campaign's detector list) is moved by ``k * step * j`` modulo
``L``.  Nothing falls off the end as shifts grow (PyCBC #5316), the shift follows the detector's
position explicitly (PyCBC #4120), and slide 0 is zero lag, never counted as background.
Segments are shifted the same way, and a slide's livetime is the time in which at least
``min_ifos`` detectors are analysing after the shift.
"""

from __future__ import annotations

import numpy as np

from gwbatch.conditioning.mask import mask_to_segments


def slide_shifts(n_ifos: int, n_slides: int, step: float, ring: float) -> np.ndarray:
    """Shifts (s) per slide and detector, ``(n_slides + 1, n_ifos)``; row 0 is zero lag."""
    k = np.arange(n_slides + 1, dtype=np.float64)[:, None]
    j = np.arange(n_ifos, dtype=np.float64)[None, :]
    return np.mod(k * step * j, ring)


def shift_segments(segments: np.ndarray, shift: float, ring: float) -> np.ndarray:
    """Move ``[start, stop)`` segments (s, within ``[0, ring)``) by ``shift`` on the ring, splitting at the wrap."""
    seg = np.asarray(segments, dtype=np.float64).reshape(-1, 2)
    if seg.shape[0] == 0:
        return seg
    start = np.mod(seg[:, 0] + shift, ring)
    stop = start + (seg[:, 1] - seg[:, 0])
    wraps = stop > ring
    parts = [np.stack([start, np.minimum(stop, ring)], axis=1)]
    if wraps.any():
        parts.append(np.stack([np.zeros(wraps.sum()), stop[wraps] - ring], axis=1))
    return np.concatenate(parts)


def coverage_time(segment_lists: list[np.ndarray], min_count: int) -> float:
    """Total time (s) covered by at least ``min_count`` of the segment lists."""
    edges, deltas = [], []
    for seg in segment_lists:
        seg = np.asarray(seg, dtype=np.float64).reshape(-1, 2)
        edges += [seg[:, 0], seg[:, 1]]
        deltas += [np.ones(seg.shape[0]), -np.ones(seg.shape[0])]
    if not edges:
        return 0.0
    t = np.concatenate(edges)
    d = np.concatenate(deltas)
    order = np.lexsort((d, t))  # at equal times close (-1) before opening (+1)
    t, d = t[order], d[order]
    level = np.cumsum(d)
    return float(np.sum(np.diff(t)[level[:-1] >= min_count]))


#: Slide-edge entries sorted at once by :func:`slide_livetimes` (memory: ~40 bytes each).
LIVETIME_BLOCK = 1 << 22


def slide_livetimes(segments: list[np.ndarray], shifts: np.ndarray, ring: float, min_ifos: int) -> np.ndarray:
    """Livetime (s) of every slide: time with at least ``min_ifos`` detectors on after shifting.

    All slides at once, as :func:`shift_segments` and :func:`coverage_time` do one at a time: every
    segment is two pieces on the ring (the second empty unless it wraps), each piece an opening and
    a closing edge; per slide the edges are sorted (closings first on ties) and the time at
    ``min_ifos`` or more summed."""
    shifts = np.asarray(shifts, dtype=np.float64).reshape(-1, len(segments))
    opens, closes = [], []
    for j, seg in enumerate(segments):
        seg = np.asarray(seg, dtype=np.float64).reshape(-1, 2)
        start = np.mod(seg[None, :, 0] + shifts[:, j:j + 1], ring)  # (slides, segments)
        stop = start + (seg[:, 1] - seg[:, 0])[None, :]
        opens += [start, np.zeros_like(start)]
        closes += [np.minimum(stop, ring), np.maximum(stop - ring, 0.0)]
    out = np.zeros(shifts.shape[0])
    if not opens or sum(o.shape[1] for o in opens) == 0:
        return out
    opening, closing = np.concatenate(opens, axis=1), np.concatenate(closes, axis=1)
    edges = np.concatenate([closing, opening], axis=1)  # closings first: a stable sort keeps them first on ties
    step = np.concatenate([-np.ones(closing.shape[1]), np.ones(opening.shape[1])])
    block = max(1, LIVETIME_BLOCK // edges.shape[1])
    for first in range(0, edges.shape[0], block):
        t = edges[first:first + block]
        order = np.argsort(t, axis=1, kind="stable")
        t = np.take_along_axis(t, order, axis=1)
        level = np.cumsum(step[order], axis=1)
        out[first:first + block] = np.sum(np.where(level[:, :-1] >= min_ifos, np.diff(t, axis=1), 0.0), axis=1)
    return out


def trial_livetimes(valid_own: list[np.ndarray], n_trials: int, step: int, sample_rate: float,
                    min_ifos: int) -> np.ndarray:
    """Livetime (s) of zero lag and each of ``n_trials`` trials on one chunk's own samples, from each
    detector's host validity mask there: trial ``k`` moves detector ``j`` by ``k * step * j``
    samples, wrapped within the chunk (the searches whose chunks run their own trials)."""
    span = valid_own[0].size
    segments = [mask_to_segments(v) / sample_rate for v in valid_own]
    shifts = slide_shifts(len(valid_own), n_trials, step / sample_rate, span / sample_rate)
    return slide_livetimes(segments, shifts, span / sample_rate, min_ifos)
