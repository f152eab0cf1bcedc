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


def slide_livetimes(segments: list[np.ndarray], shifts: np.ndarray, ring: float, min_ifos: int) -> np.ndarray:
    """Livetime (s) of every slide: time with at least ``min_ifos`` detectors on after shifting."""
    out = np.empty(shifts.shape[0])
    for k, row in enumerate(shifts):
        moved = [shift_segments(seg, s, ring) for seg, s in zip(segments, row)]
        out[k] = coverage_time(moved, min_ifos)
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
