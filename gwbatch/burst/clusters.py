"""Network excess-energy pixels and their clusters (ALGORITHMS.md §4.1; cWB's black pixels).

- **Selection**: per resolution, a pixel is *black* when the network energy ``sum_i e_i`` exceeds
  the level's threshold, ``e_i`` being detector ``i``'s energy maximised over the frames within the
  largest arrival delay (a signal reaches the detectors up to 21 ms apart, more than the shortest
  pixels).  The threshold is the ``1 - bpp`` quantile of that energy over the chunk's zero-lag
  pixels (cWB's black-pixel probability, typically 0.001), so it follows the data as cWB's does;
  lags use the zero-lag threshold, so foreground and background are selected alike.
- **Clusters**: black pixels are joined with their eight neighbours at the same resolution and,
  across adjacent resolutions, with the pixel whose tile holds their tile's centre; clusters are the
  connected components (union-find; :func:`scipy.sparse.csgraph.connected_components`).
- **Resolution of a cluster**: every level represents all the data, so a cluster's energy is
  counted once, at the level where its excess ``sum (E_j - 2N)`` is largest; its pixels there go to
  the sky loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from gwbatch._xp import array_namespace


@dataclass(frozen=True)
class Pixels:
    """Black pixels (host arrays): resolution index, frame, bin (absolute), network energy."""

    level: np.ndarray
    frame: np.ndarray
    bin: np.ndarray
    energy: np.ndarray

    @property
    def size(self) -> int:
        return int(self.level.size)

    def take(self, index) -> "Pixels":
        return Pixels(self.level[index], self.frame[index], self.bin[index], self.energy[index])


def dilate(energy, radius: int):
    """Per frame, the largest energy within ``radius`` frames (circular), same shape."""
    xp = array_namespace(energy)
    out = energy
    for r in range(1, radius + 1):
        out = xp.maximum(out, xp.maximum(xp.roll(energy, r, axis=0), xp.roll(energy, -r, axis=0)))
    return out


def threshold(network_energy, valid, bpp: float) -> float:
    """The level's black-pixel threshold: the ``1 - bpp`` quantile over valid pixels."""
    xp = array_namespace(network_energy)
    values = network_energy[valid]
    if values.size == 0:
        return float("inf")
    return float(xp.quantile(values.astype(xp.float64), 1.0 - bpp))


def black_pixels(levels: list, thresholds: list[float], bins_lo: list[int]) -> Pixels:
    """``levels[r]`` = ``(network_energy, valid)`` of resolution ``r`` (frames x bins): the pixels
    above ``thresholds[r]``, gathered to the host."""
    from gwbatch._xp import to_host

    parts = []
    for r, ((energy, valid), thr) in enumerate(zip(levels, thresholds)):
        xp = array_namespace(energy)
        mask = (energy > thr) & valid[:, None]
        t, k = (to_host(a) for a in xp.nonzero(mask))
        parts.append((np.full(t.size, r, np.int64), t.astype(np.int64), k.astype(np.int64) + bins_lo[r],
                      to_host(energy[mask]).astype(np.float64)))
    if not parts:
        return Pixels(*(np.zeros(0, np.int64),) * 3, np.zeros(0))
    return Pixels(*(np.concatenate(c) for c in zip(*parts)))


def _lookup(keys_sorted: np.ndarray, order: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Index (into the unsorted array) of each ``query`` key, -1 where absent."""
    pos = np.searchsorted(keys_sorted, query)
    pos = np.minimum(pos, keys_sorted.size - 1)
    found = keys_sorted[pos] == query
    return np.where(found, order[pos], -1)


def cluster_pixels(px: Pixels, n_frames: list[int]) -> np.ndarray:
    """Cluster label of every black pixel (``0..C-1``); ``n_frames[r]`` frames at resolution ``r``,
    resolution ``r + 1`` has twice the window of ``r``."""
    n = px.size
    if n == 0:
        return np.zeros(0, np.int64)
    span = 2 * int(px.bin.max()) + 3  # the cross-resolution lookups reach bin 2k
    key = (px.level * (max(n_frames) + 2) + px.frame) * span + px.bin
    order = np.argsort(key, kind="stable")
    sorted_keys = key[order]

    def key_of(level, frame, b):
        return (level * (max(n_frames) + 2) + frame) * span + b

    src, dst = [], []
    for dt, dk in ((0, 1), (1, -1), (1, 0), (1, 1)):
        other = _lookup(sorted_keys, order, key_of(px.level, px.frame + dt, px.bin + dk))
        hit = other >= 0
        src.append(np.flatnonzero(hit))
        dst.append(other[hit])
    # across resolutions: the coarser-in-time level r+1 holds centre (frame t, bin k) of level r at
    # (t // 2, 2 k); level r holds the centre of (t', k') of level r+1 at (2 t' + 1, (k' + 1) // 2)
    up = _lookup(sorted_keys, order, key_of(px.level + 1, px.frame // 2, 2 * px.bin))
    down = np.where(px.level > 0, _lookup(sorted_keys, order, key_of(px.level - 1, 2 * px.frame + 1, (px.bin + 1) // 2)), -1)
    for other in (up, down):
        hit = other >= 0
        src.append(np.flatnonzero(hit))
        dst.append(other[hit])
    src, dst = np.concatenate(src), np.concatenate(dst)
    graph = coo_matrix((np.ones(src.size, np.int8), (src, dst)), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    return labels.astype(np.int64)


def best_level_pixels(px: Pixels, labels: np.ndarray, n_det: int) -> tuple[np.ndarray, np.ndarray]:
    """``(keep, cluster)``: the pixels of each cluster at its resolution of largest excess energy
    (indices into ``px``, grouped by cluster) and their cluster labels renumbered ``0..C-1``."""
    if px.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    n_levels = int(px.level.max()) + 1
    n_cl = int(labels.max()) + 1
    excess = np.zeros((n_cl, n_levels))
    np.add.at(excess, (labels, px.level), px.energy - 2.0 * n_det)
    present = np.zeros((n_cl, n_levels), bool)
    present[labels, px.level] = True
    best = np.argmax(np.where(present, excess, -np.inf), axis=1)
    keep = np.flatnonzero(px.level == best[labels])
    keep = keep[np.argsort(labels[keep], kind="stable")]
    _, cluster = np.unique(labels[keep], return_inverse=True)
    return keep, cluster.astype(np.int64)
