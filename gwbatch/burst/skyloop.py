"""The coherent sky loop over clusters (ALGORITHMS.md §4.3; seed 003 algorithm 1; cWB subNetCut).

For one cluster of ``P`` pixels and a sky direction ``l``, detector ``i`` contributes its delayed
amplitude ``u_ij + i w_ij = v[i, j, ml[i, l]]`` (:mod:`gwbatch.burst.delays`; 00 and 90 quadratures)
and the noise-weighted antenna patterns ``f+_ij = F+_i(l) s_ij``, ``fx_ij = Fx_i(l) s_ij`` (``s_ij``
the detector's relative sensitivity at the pixel's frequency).  Per pixel:

- energies ``e_ij = u_ij^2 + w_ij^2``, ``E_j = sum_i e_ij``, subnetwork energy ``E_j - max_i e_ij``;
- the likelihood in the dominant polarisation frame (DPF: ``f+`` and ``fx`` rotated to be orthogonal,
  ``|f+| >= |fx|``): ``L_j = (f+.u)^2 + (f+.w)^2) / |f+|^2 + ((fx.u)^2 + (fx.w)^2) / (|fx|^2 + delta |f+|^2)``.
  ``delta = 0`` is the unconstrained maximum-likelihood projection on the signal plane; a large
  ``delta`` keeps only the ``+`` polarisation (cWB's regulator: with two nearly aligned detectors
  the plane is almost the whole space, and only the constraint leaves a null stream).

Over the pixels with ``E_j > En`` (``m`` of them): ``Eo = sum E_j``, ``Ls = sum (E_j - max_i e_ij)``,
``Ln = sum E_j`` over those whose subnetwork energy also exceeds ``Es`` (seen by two detectors or
more), ``Lo = sum L_j``; then ``aa = Ls Ln / (Eo - Ls)``.  A direction is rejected early when
``(aa - m) / (aa + m) < subcut`` (energy carried by one detector); otherwise its sky statistic is

    AA = aa / (|aa| + |Eo - Lo| + 2 m (Eo - Ln) / Eo).

The loop keeps, per cluster, the direction of the largest ``AA`` (a rejected direction counts
``-1``; ties go to the lowest index).  :func:`skyloop_max` is the CPU twin (numba, float64) of the
CUDA kernel (:mod:`gwbatch.burst._cuda`, float32, one thread per direction, many clusters per
launch, branch-free maximum); :func:`direction_statistics` is the float64 reference of every
quantity at chosen directions (events, skymaps, tests).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numba
import numpy as np

from gwbatch._xp import HOST_PARALLEL

#: A rejected direction's statistic.
REJECTED = -1.0


@dataclass(frozen=True)
class SkyLoopCuts:
    pixel_energy: float  # En: a pixel enters the sums above this network energy
    subnet_energy: float  # Es: ... and counts in Ln above this subnetwork energy
    subcut: float  # early rejection of directions (seed 003: 0.33)
    delta: float  # polarisation regulator (0: both polarisations free)

    def as_array(self) -> np.ndarray:
        return np.array([self.pixel_energy, self.subnet_energy, self.subcut, self.delta], dtype=np.float64)


@dataclass(frozen=True)
class ClusterBatch:
    """Clusters' pixels for one sky loop: ``amplitudes`` ``(N, P_total, 2 D + 1)`` complex64, pixel
    ``offsets`` ``(C + 1,)`` (cluster ``c`` owns pixels ``offsets[c]:offsets[c + 1]``), ``weights``
    ``(P_total, N)`` float32 (relative sensitivities ``s_ij``)."""

    amplitudes: np.ndarray
    offsets: np.ndarray
    weights: np.ndarray

    @property
    def n_clusters(self) -> int:
        return int(self.offsets.shape[0]) - 1


@dataclass(frozen=True)
class SkyTable:
    """Per direction: delay index ``ml`` ``(N, S)`` int32 (``D`` + quarter samples of delay) and
    antenna patterns at polarisation 0, ``fplus``, ``fcross`` ``(N, S)`` float32."""

    ml: np.ndarray
    fplus: np.ndarray
    fcross: np.ndarray
    n_delay: int  # D
    upsample: int  # delay steps per sample
    device: dict = field(default_factory=dict, repr=False, compare=False)  # backend copies, made once

    @property
    def n_dir(self) -> int:
        return int(self.ml.shape[1])

    def delay(self, detector: int, direction: int) -> float:
        """Arrival delay (samples after the geocentre) of ``detector`` at ``direction``, as read."""
        return float(self.ml[detector, direction] - self.n_delay) / self.upsample


def sky_table(delays: np.ndarray, fplus: np.ndarray, fcross: np.ndarray, sample_rate: float, n_delay: int,
              upsample: int) -> SkyTable:
    """From arrival delays ``(S, N)`` (s, after the geocentre) and antenna patterns ``(S, N)``."""
    steps = np.rint(np.asarray(delays, np.float64) * sample_rate * upsample).astype(np.int64)
    if np.abs(steps).max() > n_delay:
        raise ValueError(f"delays reach {np.abs(steps).max()} quarter samples; the amplitudes cover {n_delay}")
    return SkyTable(np.ascontiguousarray((steps + n_delay).T, dtype=np.int32),
                    np.ascontiguousarray(np.asarray(fplus).T, dtype=np.float32),
                    np.ascontiguousarray(np.asarray(fcross).T, dtype=np.float32), int(n_delay), int(upsample))


def coherent_energy_bound(peak: np.ndarray) -> np.ndarray:
    """Per pixel, an upper bound on its coherent energy ``L_j - sum_i P_ii e_ij`` at every direction,
    from ``peak`` ``(N, P)``: each detector's largest ``|a_ij|`` over the delays (host, any float).

    The DPF likelihood is ``a^T P a`` with ``P`` symmetric, eigenvalues in ``[0, 1]`` (the projector
    on the signal plane, its second direction scaled down by the regulator).  So the coherent part
    ``sum_{i != k} P_ik Re(a_i conj(a_k))`` is at most ``a^T P a <= E_j``; and as ``P^2 <= P``,
    ``sum_k P_ik^2 <= P_ii``, so ``P_ik^2 <= P_ii (1 - P_ii) <= 1/4``: it is also at most
    ``sum_{i < k} |a_i| |a_k|`` (tight for two aligned detectors seeing the same amplitude).  The
    smaller of the two, with each ``|a_i|`` at its largest over the delays, holds for every
    direction; it is widened by 1e-5 of itself so that float32 amplitudes cannot put it under the
    float64 sums.  A cluster's ``rho^2 <= Ec / 2`` (:func:`gwbatch.burst.chunk.network_measures`) is
    then at most half the sum over its pixels: the sky loop can be skipped for clusters whose sum is
    below ``2 rho_min^2``.  The pair term is what prunes: noise clusters whose energy sits in one
    detector have little.
    """
    peak = np.asarray(peak, np.float64)
    energy = np.sum(peak * peak, axis=0)
    pairs = 0.5 * (np.sum(peak, axis=0) ** 2 - energy)
    return np.minimum(energy, np.maximum(pairs, 0.0)) * (1.0 + 1e-5)


@numba.njit(cache=True, inline="always")
def _pixel(v, j, ml, fp, fx, s, l, delta):
    """Per-pixel energies and DPF likelihood at direction ``l``:
    ``(E, max_i e_i, L, sum_i P_ii e_i, |f+|^2, |fx|^2)``."""
    n_det = v.shape[0]
    e_sum = 0.0
    e_max = 0.0
    gpp = 0.0
    gxx = 0.0
    gpx = 0.0
    pu = 0.0
    pw = 0.0
    xu = 0.0
    xw = 0.0
    for i in range(n_det):
        a = v[i, j, ml[i, l]]
        u = np.float64(a.real)
        w = np.float64(a.imag)
        e = u * u + w * w
        e_sum += e
        e_max = max(e_max, e)
        p = np.float64(fp[i, l]) * np.float64(s[j, i])
        x = np.float64(fx[i, l]) * np.float64(s[j, i])
        gpp += p * p
        gxx += x * x
        gpx += p * x
        pu += p * u
        pw += p * w
        xu += x * u
        xw += x * w
    # rotate (f+, fx) to the DPF: tan(2 psi) = 2 gpx / (gpp - gxx)
    c2 = gpp - gxx
    s2 = 2.0 * gpx
    r = np.sqrt(c2 * c2 + s2 * s2)
    cos2 = c2 / r if r > 0 else 1.0
    cs = np.sqrt(max(0.5 * (1.0 + cos2), 0.0))
    sn = np.sqrt(max(0.5 * (1.0 - cos2), 0.0))
    if s2 < 0:
        sn = -sn
    npp = 0.5 * (gpp + gxx + r)
    nxx = max(0.5 * (gpp + gxx - r), 0.0)
    dp = npp if npp > 0 else 1.0
    dx = nxx + delta * npp
    dx = dx if dx > 0 else 1.0
    au = cs * pu + sn * xu
    aw = cs * pw + sn * xw
    bu = -sn * pu + cs * xu
    bw = -sn * pw + cs * xw
    like = (au * au + aw * aw) / dp + (bu * bu + bw * bw) / dx
    diag = 0.0
    for i in range(n_det):
        a = v[i, j, ml[i, l]]
        e = np.float64(a.real) ** 2 + np.float64(a.imag) ** 2
        p = np.float64(fp[i, l]) * np.float64(s[j, i])
        x = np.float64(fx[i, l]) * np.float64(s[j, i])
        qa = cs * p + sn * x
        qb = -sn * p + cs * x
        diag += (qa * qa / dp + qb * qb / dx) * e
    return e_sum, e_max, like, diag, npp, nxx


@numba.njit(cache=True)
def _direction(v, first, last, ml, fp, fx, s, l, cuts):
    """Sums over a cluster's pixels at direction ``l``: ``(AA, Eo, Ls, Ln, m, Lo, Ec, dof)``."""
    en, es, subcut, delta = cuts[0], cuts[1], cuts[2], cuts[3]
    n_det = v.shape[0]
    eo = 0.0
    ls = 0.0
    ln = 0.0
    m = 0.0
    lo = 0.0
    ec = 0.0
    dof = 0.0
    for j in range(first, last):
        e, e_max, like, diag, npp, nxx = _pixel(v, j, ml, fp, fx, s, l, delta)
        if e > en:
            sub = e - e_max
            m += 1.0
            eo += e
            ls += sub
            if sub > es:
                ln += e
            lo += like
            ec += like - diag
            gamma = nxx / (nxx + delta * npp) if nxx + delta * npp > 0 else 0.0
            dof += 2.0 * (n_det - 1.0 - gamma)
    stat = REJECTED
    if m > 0 and eo - ls > 0:
        aa = ls * ln / (eo - ls)
        if (aa - m) / (aa + m) >= subcut:
            stat = aa / (abs(aa) + abs(eo - lo) + 2.0 * m * (eo - ln) / eo)
    return stat, eo, ls, ln, m, lo, ec, dof


@numba.njit(cache=True, parallel=True)
def _skyloop(v, offsets, ml, fp, fx, s, cuts, stat, best):
    n_cl = offsets.shape[0] - 1
    n_dir = ml.shape[1]
    for c in range(n_cl):
        values = np.empty(n_dir)
        for l in numba.prange(n_dir):
            values[l] = _direction(v, offsets[c], offsets[c + 1], ml, fp, fx, s, l, cuts)[0]
        k = np.argmax(values)
        best[c] = k
        stat[c] = values[k]


@numba.njit(cache=True, parallel=True)
def _at(v, first, last, ml, fp, fx, s, cuts, directions, out):
    for k in numba.prange(directions.shape[0]):
        row = _direction(v, first, last, ml, fp, fx, s, directions[k], cuts)
        for q in range(8):
            out[k, q] = row[q]


def skyloop_max(batch: ClusterBatch, table: SkyTable, cuts: SkyLoopCuts) -> tuple[np.ndarray, np.ndarray]:
    """CPU twin of the kernel: per cluster the largest sky statistic and its direction."""
    stat = np.empty(batch.n_clusters)
    best = np.empty(batch.n_clusters, dtype=np.int64)
    if batch.n_clusters:
        with HOST_PARALLEL:
            _skyloop(batch.amplitudes, batch.offsets.astype(np.int64), table.ml, table.fplus, table.fcross,
                     batch.weights, cuts.as_array(), stat, best)
    return stat, best


FIELDS = ("stat", "Eo", "Ls", "Ln", "m", "Lo", "Ec", "dof")


@numba.njit(cache=True, parallel=True)
def _at_each(v, offsets, ml, fp, fx, s, cuts, directions, out):
    for c in numba.prange(offsets.shape[0] - 1):
        row = _direction(v, offsets[c], offsets[c + 1], ml, fp, fx, s, directions[c], cuts)
        for q in range(8):
            out[c, q] = row[q]


def cluster_statistics(batch: ClusterBatch, table: SkyTable, cuts: SkyLoopCuts, directions) -> dict[str, np.ndarray]:
    """Every sky-loop quantity of each cluster at its own direction (host arrays, float64)."""
    directions = np.asarray(directions, np.int64)
    out = np.empty((batch.n_clusters, len(FIELDS)))
    if batch.n_clusters:
        with HOST_PARALLEL:
            _at_each(batch.amplitudes, np.asarray(batch.offsets, np.int64), table.ml, table.fplus, table.fcross,
                     batch.weights, cuts.as_array(), directions, out)
    return {name: out[:, q] for q, name in enumerate(FIELDS)}


def direction_statistics(batch: ClusterBatch, cluster: int, table: SkyTable, cuts: SkyLoopCuts,
                         directions=None) -> dict[str, np.ndarray]:
    """Every sky-loop quantity of ``cluster`` at ``directions`` (default all), float64 (``FIELDS``)."""
    directions = np.arange(table.n_dir) if directions is None else np.atleast_1d(np.asarray(directions, np.int64))
    out = np.empty((directions.size, len(FIELDS)))
    with HOST_PARALLEL:
        _at(batch.amplitudes, int(batch.offsets[cluster]), int(batch.offsets[cluster + 1]), table.ml, table.fplus,
            table.fcross, batch.weights, cuts.as_array(), directions, out)
    return {name: out[:, q] for q, name in enumerate(FIELDS)}
