"""The coherent kernels' sky table: per direction, sample offsets and the coherent projection.

For detectors ``j = 1..D`` with sensitivities ``sigma_j`` (SNR of an optimally oriented source at
unit distance, so ``sigma_j / 8`` is the horizon) and antenna patterns at polarisation angle 0, the
network response to the two polarisations in direction ``p`` is the ``D x 2`` matrix
``A_p = [sigma_j F+_j(p), sigma_j Fx_j(p)]`` (ALGORITHMS.md §3.3; Chu 2017 §4).  Its SVD
``A_p = U S V^T`` gives an orthonormal basis ``U`` whose first two columns span the signal space:
for a detector SNR vector ``Z``, ``w = U^T Z`` splits ``|Z|^2`` into the coherent part
``|w_0|^2 + |w_1|^2`` and the null part ``sum_{k>=2} |w_k|^2``.  The sky table stores that projection
without the SVD (:mod:`gwbatch.coherent.statistic` has the formulas).  The choice ``psi = 0`` loses
nothing: a polarisation rotation mixes the columns of ``A`` and leaves their span unchanged.

As in gstlal-spiir, ``sigma`` is one value per detector (its horizon for the bank), not per
template: only the ratios between detectors enter ``U``, and they change little across a bank.
The delays and antenna patterns come from the shared sky geometry (:mod:`gwbatch.sky.network`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from gwbatch.sky.network import NetworkGeometry


@dataclass(frozen=True, eq=False)
class SkyTable:
    """Per-direction kernel inputs for one network, sky grid, GPS time, sample rate and ``sigma``.

    ``offsets[pivot, p, j]``: detector ``j``'s arrival after the pivot's, whole samples (int32
    ``(D, P, D)``).  ``projection`` (float32 ``(P, G)``): nothing for two detectors; the unit null
    vector ``n = a x b / |a x b|`` for three (``a``, ``b`` the columns of ``A_p``); for four or more
    ``a``, ``b`` and the entries ``q00, q01, q11`` of ``(A^T A)^-1``.
    """

    offsets: np.ndarray
    projection: np.ndarray
    fplus: np.ndarray  # (P, D) float32
    fcross: np.ndarray  # (P, D) float32
    sigma: np.ndarray  # (D,)
    device: dict = field(default_factory=dict, repr=False)  # backend copies, made once

    @property
    def n_dir(self) -> int:
        return int(self.fplus.shape[0])

    @property
    def n_det(self) -> int:
        return int(self.fplus.shape[1])

    @functools.cached_property
    def groups(self) -> "DirectionGroups":
        """The directions grouped by their non-pivot offsets (:func:`direction_groups`), made once."""
        return direction_groups(self.offsets)


#: Most directions in one group of :class:`DirectionGroups` (larger sets of directions that share
#: their offsets are split into groups of this size and a remainder).
GROUP_MAX = 8


@dataclass(frozen=True)
class DirectionGroups:
    """Per pivot, the sky's directions in evaluation order, grouped by the sample offsets of the
    other detectors (directions of a group read the same samples and differ only in projection).

    ``order[pivot, q]``: the direction evaluated ``q``-th (int32 ``(D, P)``), which also breaks exact
    ties of the sky maximum (the first in this order wins, on every backend).  Groups of ``k``
    directions (``k = 1 .. GROUP_MAX``) come together, by size: ``size[pivot, k - 1] = (g0, g1, q0)``
    says groups ``g0 .. g1 - 1`` hold ``k`` directions each, from position ``q0`` on.  ``offsets[pivot,
    g]`` (int32 ``(D, G, D)``) are group ``g``'s arrival offsets (the pivot's is 0); ``G`` is the
    largest group count over pivots (unused rows are 0).
    """

    order: np.ndarray
    size: np.ndarray
    offsets: np.ndarray


def direction_groups(offsets: np.ndarray, group_max: int = GROUP_MAX) -> DirectionGroups:
    """Group ``offsets[pivot, p, j]`` (:class:`SkyTable`) into :class:`DirectionGroups`: directions
    sorted by their offsets, then by index; each set sharing offsets cut into groups of
    ``group_max`` and a remainder; groups ordered by size, then by offsets."""
    n_det, n_dir, _ = offsets.shape
    orders, sizes, keys = [], [], []
    for piv in range(n_det):
        off = offsets[piv]
        by_key = np.lexsort((np.arange(n_dir),) + tuple(off[:, j] for j in reversed(range(n_det))))
        key = off[by_key]
        new = np.ones(n_dir, bool)
        new[1:] = np.any(key[1:] != key[:-1], axis=1)
        first = np.flatnonzero(new)
        count = np.diff(np.append(first, n_dir))
        set_of = np.cumsum(new) - 1  # which set of equal offsets each sorted direction is in
        rank = np.arange(n_dir) - first[set_of]  # position within its set
        piece = rank // group_max
        size = np.minimum(group_max, count[set_of] - piece * group_max)
        stream = np.lexsort((rank, piece, set_of, size))  # by size, then set, then piece, then rank
        orders.append(by_key[stream].astype(np.int32))
        heads = stream[rank[stream] % group_max == 0]  # the first direction of each group, in order
        keys.append(key[heads])
        bounds = np.zeros((group_max, 3), np.int32)
        group_size = size[heads]
        for k in range(1, group_max + 1):
            g0, g1 = np.searchsorted(group_size, [k, k + 1])
            bounds[k - 1] = g0, g1, int(np.sum(group_size[:g0]))
        sizes.append(bounds)
    n_groups = max(len(k) for k in keys)
    padded = np.zeros((n_det, n_groups, n_det), np.int32)
    for piv, k in enumerate(keys):
        padded[piv, :len(k)] = k
    return DirectionGroups(np.stack(orders), np.stack(sizes), padded)


def projection(fplus: np.ndarray, fcross: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """The ``projection`` column block of :class:`SkyTable` (computed in float64)."""
    a = np.asarray(fplus, np.float64) * sigma
    b = np.asarray(fcross, np.float64) * sigma
    n_det = a.shape[1]
    if n_det <= 2:
        return np.zeros((a.shape[0], 0), np.float32)
    if n_det == 3:
        n = np.cross(a, b)
        norm = np.linalg.norm(n, axis=1, keepdims=True)
        return np.where(norm > 0, n / np.where(norm > 0, norm, 1.0), 0.0).astype(np.float32)
    m00, m01, m11 = np.sum(a * a, 1), np.sum(a * b, 1), np.sum(b * b, 1)
    det = m00 * m11 - m01 * m01
    inv = np.where(det > 0, 1.0 / np.where(det > 0, det, 1.0), 0.0)
    return np.column_stack([a, b, m11 * inv, -m01 * inv, m00 * inv]).astype(np.float32)


def coherent_sky_table(geometry: NetworkGeometry, sample_rate: float, sigma) -> SkyTable:
    """What the coherent kernels read per direction (:class:`SkyTable`), for SNR series at
    ``sample_rate`` and detector sensitivities ``sigma`` (one per detector), from a network's
    geometry over a sky grid (:func:`gwbatch.sky.network.network_geometry`)."""
    sigma = np.asarray(sigma, dtype=np.float64)
    if sigma.shape != (len(geometry.ifos),) or not np.all(sigma > 0):
        raise ValueError(f"sigma needs one positive value per detector {geometry.ifos}, got {sigma}")
    d = geometry.delay_samples(sample_rate)
    # floor(d_j - d_pivot + 1/2) in float32, the same rounding on every backend
    offsets = np.stack([np.floor(d - d[:, [piv]] + np.float32(0.5)) for piv in range(d.shape[1])])
    return SkyTable(offsets.astype(np.int32), projection(geometry.fplus, geometry.fcross, sigma),
                    np.asarray(geometry.fplus, np.float32), np.asarray(geometry.fcross, np.float32), sigma)
