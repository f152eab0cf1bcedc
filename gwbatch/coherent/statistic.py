"""Coherent and null SNR over the sky for candidates and their time-shifted trials.

Inputs (every backend; ALGORITHMS.md §3.4-3.6, seed 000 eqs. 4-5):

- ``snr``: complex SNR series, ``(D, S, N)`` complex64: detector, slot (a candidate's template),
  sample;
- candidates ``c``: ``slot[c]``, the pivot detector ``pivot[c]`` and its peak sample ``sample[c]``;
- a :class:`~gwbatch.coherent.network.SkyTable`: arrival offsets in samples per pivot,
  ``offsets[pivot, p, j]``, and the projection onto the signal space per direction;
- trials ``k = 0..K`` (0 is zero lag): detector ``j`` is read ``k * step * (j - pivot)`` samples later
  (gstlal's shifts), wrapped circularly into the valid window ``[lo, lo + span)``.

For trial ``k`` and direction ``p`` detector ``j`` is read at
``i_j = wrap(sample + offsets[pivot, p, j] + k step (j - pivot))``, giving ``Z``.  The coherent SNR²
is the energy of ``Z`` in the span of ``A_p = [sigma F+, sigma Fx]``, the null SNR² the rest
(seed 000 eqs. 4-5 with ``U`` from the SVD of ``A_p``).  Without the SVD:

- ``D <= 2``: ``A_p`` spans everything: ``rho_c^2 = |Z|^2``, no null stream;
- ``D = 3``: the null direction is the unit vector ``n`` along ``a x b`` (``a``, ``b`` the columns of
  ``A_p``): ``rho_null^2 = |n . Z|^2``, ``rho_c^2 = |Z|^2 - rho_null^2``;
- ``D >= 4``: ``rho_c^2 = beta^H Q beta`` with ``beta = A^T Z`` and ``Q = (A^T A)^-1``, and
  ``rho_null^2 = |Z|^2 - rho_c^2``.

The result per (candidate, trial) is the maximum of ``rho_c^2`` over directions, its direction (on
exact ties the first in the table's evaluation order, :attr:`SkyTable.groups`, on every backend),
and the null SNR² there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from gwbatch._xp import HOST_PARALLEL, array_namespace, to_host
from gwbatch.coherent.network import SkyTable


@dataclass(frozen=True)
class SkyMaximum:
    """Per (candidate, trial), shape ``(C, K+1)``: ``rho_c2``, ``null2`` and ``pixel`` (int32)."""

    rho_c2: np.ndarray
    null2: np.ndarray
    pixel: np.ndarray


@numba.njit(cache=True, inline="always")
def _wrap(i, lo, span):
    r = (i - lo) % span
    if r < 0:
        r += span
    return lo + r


@numba.njit(cache=True, inline="always")
def _coherent_energy(zr, zi, total, proj, p):
    """rho_c^2 of Z = zr + i zi, with |Z|^2 = total, in direction p (float64)."""
    n_det = zr.size
    if n_det <= 2:
        return total
    if n_det == 3:
        nr = 0.0
        ni = 0.0
        for j in range(3):
            nr += float(proj[p, j]) * zr[j]
            ni += float(proj[p, j]) * zi[j]
        return total - (nr * nr + ni * ni)
    ar = 0.0
    ai = 0.0
    br = 0.0
    bi = 0.0
    for j in range(n_det):
        a = float(proj[p, j])
        b = float(proj[p, n_det + j])
        ar += a * zr[j]
        ai += a * zi[j]
        br += b * zr[j]
        bi += b * zi[j]
    q00 = float(proj[p, 2 * n_det])
    q01 = float(proj[p, 2 * n_det + 1])
    q11 = float(proj[p, 2 * n_det + 2])
    return q00 * (ar * ar + ai * ai) + 2.0 * q01 * (ar * br + ai * bi) + q11 * (br * br + bi * bi)


@numba.njit(parallel=True, cache=True)
def _max_over_sky(snr, slot, sample, pivot, group_offsets, group_size, order, proj, n_trials, step, lo, span,
                  first, rho_c2, pixel):
    """The sky maximum per (candidate, trial) over the groups of :attr:`SkyTable.groups` (the
    directions of a group read the same samples, so ``Z`` and ``|Z|^2`` are formed once per group),
    in evaluation order: the first direction in that order wins an exact tie.  Column ``k`` of
    candidate ``c`` is trial ``first[c] + k``."""
    n_det = snr.shape[0]
    for task in numba.prange(slot.size * (n_trials + 1)):
        c = task // (n_trials + 1)
        k = task % (n_trials + 1) + first[c]
        s, piv, t = slot[c], pivot[c], sample[c]
        zr = np.empty(n_det)
        zi = np.empty(n_det)
        best, best_p = -1.0, order[piv, 0]
        for size in range(group_size.shape[1]):
            g0, g1, q0 = group_size[piv, size]
            for g in range(g0, g1):
                total = 0.0
                for j in range(n_det):
                    z = snr[j, s, _wrap(t + group_offsets[piv, g, j] + k * step * (j - piv), lo, span)]
                    zr[j] = z.real
                    zi[j] = z.imag
                    total += zr[j] * zr[j] + zi[j] * zi[j]
                q = q0 + (g - g0) * (size + 1)
                for d in range(size + 1):
                    p = order[piv, q + d]
                    coh = _coherent_energy(zr, zi, total, proj, p)
                    if coh > best:
                        best, best_p = coh, p
        rho_c2[c, k - first[c]] = best
        pixel[c, k - first[c]] = best_p


def twin_tables(table: SkyTable) -> tuple:
    """What the numba twin reads of ``table``: group offsets, group sizes, order, projection."""
    groups = table.groups
    return groups.offsets, groups.size, groups.order, table.projection


def _table_on(xp, table: SkyTable) -> tuple:
    """``table``'s offsets and projection on the array module ``xp`` (copied once)."""
    arrays = (table.offsets, table.projection)
    if xp is np:
        return arrays
    if xp.__name__ not in table.device:
        table.device[xp.__name__] = tuple(xp.asarray(a) for a in arrays)
    return table.device[xp.__name__]


def _inputs(xp, snr, slot, sample, pivot):
    return (xp.ascontiguousarray(xp.asarray(snr), dtype=xp.complex64),
            xp.ascontiguousarray(xp.asarray(slot), dtype=xp.int64),
            xp.ascontiguousarray(xp.asarray(sample), dtype=xp.int64),
            xp.ascontiguousarray(xp.asarray(pivot), dtype=xp.int64))


def _check(snr, slot, sample, pivot, table: SkyTable) -> None:
    if table.n_det != snr.shape[0]:
        raise ValueError(f"SNR series of {snr.shape[0]} detectors with a sky table for {table.n_det}")
    if not (slot.shape == sample.shape == pivot.shape):
        raise ValueError("slot, sample and pivot need one entry per candidate")


def sky_argmax(snr, slot, sample, pivot, table: SkyTable, n_trials: int = 0, step: int = 0,
               window: tuple[int, int] | None = None, first=None):
    """The kernel alone: ``(rho_c2, pixel)`` of the maximum over the sky per (candidate, trial),
    each ``(C, K+1)``; CUDA for CuPy ``snr``, else numba (arguments as :func:`max_over_sky`).
    ``first`` (per candidate, default 0): the trial column 0 holds, so that chosen trials of chosen
    candidates are evaluated alone (``n_trials = 0``) exactly as within a run of all trials."""
    xp = array_namespace(snr)
    pivot_host = np.asarray(pivot) if isinstance(pivot, (np.ndarray, list, tuple)) else None
    args = _inputs(xp, snr, slot, sample, pivot)
    _check(*args, table)
    first = xp.zeros(args[1].size, xp.int64) if first is None else xp.ascontiguousarray(xp.asarray(first), dtype=xp.int64)
    if first.shape != args[1].shape:
        raise ValueError("first needs one trial per candidate")
    lo, span = window if window is not None else (0, args[0].shape[2])
    n_trials, step, lo, span = int(n_trials), int(step), int(lo), int(span)
    if xp is not np:
        from gwbatch.coherent._cuda import max_over_sky_cuda

        return max_over_sky_cuda(*args, table, n_trials, step, lo, span, pivot_host=pivot_host, first=first)
    shape = (args[1].size, n_trials + 1)
    rho_c2, pixel = np.empty(shape), np.empty(shape, np.int32)
    with HOST_PARALLEL:
        _max_over_sky(*args, *twin_tables(table), n_trials, step, lo, span, first, rho_c2, pixel)
    return rho_c2, pixel


#: Relative slack of the network-SNR bound (:func:`trials_reaching`) against the kernels' float32
#: coherent SNR², whose rounding differs from the bound's by ~1e-7.
BOUND_SLACK = 1e-4

#: (candidate, trial) entries of the bound formed at once (memory: ~24 bytes each).
BOUND_BLOCK = 1 << 22


@numba.njit(parallel=True, cache=True)
def _spread_max(z, slot, base, k0, delta, lo, span, width, out):
    """``out[c, i]``: the largest ``|z|^2`` (float32, ``re^2 + im^2``) of row ``slot[c]`` over the
    ``width`` samples that start ``base[c] + (k0 + i) delta`` into the ring ``[lo, lo + span)``."""
    n_c, n_k = out.shape
    for task in numba.prange(n_c * n_k):
        c = task // n_k
        i = task % n_k
        r = (base[c] + (k0 + i) * delta) % span
        if r < 0:
            r += span
        best = np.float32(-1.0)
        for u in range(width):
            q = r + u
            if q >= span:
                q -= span
            v = z[slot[c], lo + q]
            p = v.real * v.real + v.imag * v.imag
            if p > best:
                best = p
        out[c, i] = best


def spread_max(z, slot, base, k0: int, n_k: int, delta: int, lo: int, span: int, width: int):
    """``(C, n_k)`` float32: per candidate ``c`` and trial ``k0 + i``, the largest ``|z|^2`` of row
    ``slot[c]`` of ``z`` (``(S, N)`` complex64) over the ``width`` samples that start
    ``base[c] + (k0 + i) delta`` into the ring ``[lo, lo + span)``, wrapped (CUDA for CuPy ``z``,
    :mod:`gwbatch.coherent._cuda_bound`; else numba)."""
    if not 1 <= width <= span:
        raise ValueError(f"a spread of {width} samples on a ring of {span}: needs 1 <= width <= span")
    xp = array_namespace(z)
    if xp is not np:
        from gwbatch.coherent._cuda_bound import spread_max_cuda

        return spread_max_cuda(z, slot, base, k0, n_k, delta, lo, span, width)
    out = np.empty((np.size(slot), n_k), np.float32)
    with HOST_PARALLEL:
        _spread_max(np.ascontiguousarray(z, np.complex64), np.asarray(slot, np.int64), np.asarray(base, np.int64),
                    int(k0), int(delta), int(lo), int(span), int(width), out)
    return out


@dataclass(frozen=True)
class ReachingTrials:
    """(candidate, trial) pairs and their network-SNR bound² (host arrays), and ``rest2``: the
    largest bound² of the pairs in range that were not returned (``-inf`` when none were left out)."""

    c: np.ndarray
    k: np.ndarray
    bound2: np.ndarray
    rest2: float


def trials_reaching(snr, slot, sample, pivot, table: SkyTable, first: int, count: int, step: int,
                    window: tuple[int, int] | None, floor2: float, *, ceiling2: float = np.inf,
                    limit: int | None = None, ifo_floor2: float = 0.0, min_ifos: int = 0) -> ReachingTrials:
    """The candidates and trials among ``first ... first + count - 1`` whose sky maximum may reach
    ``rho_c^2 >= floor2`` (and whose bound is below ``ceiling2``) with ``min_ifos`` detectors at
    ``|z|^2 >= ifo_floor2`` or more: every (candidate, trial) that does is among them.  With
    ``limit``, only the pairs of the ``limit`` largest bounds (and their ties) are returned, and
    ``rest2`` says how high the others reach.

    The bound: in any direction ``rho_c^2 <= |Z|^2``, and ``|Z|^2`` is the pivot's ``|z(t)|^2`` plus,
    per other detector, ``|z|^2`` at a sample within the spread of its arrival offsets over the sky
    (shifted for the trial): per other detector the largest ``|z|^2`` over that spread, on the ring
    ``window`` the trials wrap in (:func:`spread_max`), ``C x count x D`` windows of a few samples
    instead of ``C x count x`` directions, so that thousands of trials per candidate cost little
    where few reach the floor (the deep trials above their cut), and no memory beyond the pairs'.
    A detector whose maximum over its spread is below ``ifo_floor2`` cannot count towards
    ``min_ifos`` at any direction.  Pairs come sorted by candidate and trial.
    """
    xp = array_namespace(snr)
    snr, slot, sample, pivot = _inputs(xp, snr, slot, sample, pivot)
    lo, span = window if window is not None else (0, snr.shape[2])
    n_det = snr.shape[0]
    pivot_host = to_host(pivot)
    floor2 = float(floor2) * (1.0 - BOUND_SLACK) if floor2 > 0 else -np.inf
    lowest = floor2
    ifo_floor2 = float(ifo_floor2) * (1.0 - BOUND_SLACK)
    limit = np.iinfo(np.int64).max if limit is None else int(limit)
    kept_c, kept_k, kept_b = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0)]
    rest2 = -np.inf

    def trim(floor2, rest2):
        """Keep the pairs of the ``limit`` largest bounds: the floor rises to the limit-th."""
        b = np.concatenate(kept_b)
        if b.size <= limit:
            return floor2, rest2
        v = float(np.partition(b, b.size - limit)[b.size - limit])
        keep = b >= v
        rest2 = max(rest2, float(b[~keep].max())) if (~keep).any() else rest2
        parts = [np.concatenate(a)[keep] for a in (kept_c, kept_k, kept_b)]
        for store, part in zip((kept_c, kept_k, kept_b), parts):
            store[:] = [part]
        return v, rest2

    for p in np.unique(pivot_host).tolist():
        cands = np.flatnonzero(pivot_host == p)
        rows = xp.asarray(cands)
        s, t = slot[rows], sample[rows] - lo
        zp = snr[p, s, lo + xp.mod(t, span)]
        pivot_power = (zp.real * zp.real + zp.imag * zp.imag).astype(xp.float64)[:, None]
        spreads = []  # (detector, where its spread starts for trial 0, its width, its shift per trial)
        for j in range(n_det):
            if j == p:
                continue
            start = int(table.offsets[p, :, j].min())
            spreads.append((j, t + start, int(table.offsets[p, :, j].max()) - start + 1, step * (j - p)))
        block = max(1, BOUND_BLOCK // cands.size)
        for k0 in range(first, first + count, block):
            n_k = min(block, first + count - k0)
            total = pivot_power + 0.0
            loud = (pivot_power >= ifo_floor2).astype(xp.int32)
            for j, base, width, delta in spreads:
                at = spread_max(snr[j], s, base, k0, n_k, delta, lo, span, width)
                total = total + at
                loud = loud + (at >= ifo_floor2)
            inside = (total < ceiling2) & (loud >= min_ifos)
            c, kk = xp.nonzero(inside & (total >= floor2))
            if floor2 > lowest:  # the pairs a risen floor leaves out
                below = inside & (total >= lowest) & (total < floor2)
                if bool(below.any()):
                    rest2 = max(rest2, float(xp.max(xp.where(below, total, -np.inf))))
            kept_c.append(cands[to_host(c)])
            kept_k.append(to_host(kk).astype(np.int64) + k0)
            kept_b.append(to_host(total[c, kk]))
            if sum(a.size for a in kept_b) > 2 * limit:
                floor2, rest2 = trim(floor2, rest2)
    _, rest2 = trim(floor2, rest2)
    c, k, b = (np.concatenate(a) for a in (kept_c, kept_k, kept_b))
    order = np.lexsort((k, c))
    return ReachingTrials(c[order], k[order], b[order], rest2)


def max_over_sky(snr, slot, sample, pivot, table: SkyTable, n_trials: int = 0, step: int = 0,
                 window: tuple[int, int] | None = None) -> SkyMaximum:
    """Maximum coherent SNR² over the sky per (candidate, trial), with the null SNR² there.

    ``window = (lo, span)`` is the valid range that shifted reads wrap into (default: all of ``snr``).
    """
    xp = array_namespace(snr)
    rho_c2, pixel = sky_argmax(snr, slot, sample, pivot, table, n_trials, step, window)
    trial = xp.broadcast_to(xp.arange(int(n_trials) + 1)[None, :], pixel.shape)
    ref = at_directions(snr, slot, sample, pivot, table, pixel, trial, step, window)
    return SkyMaximum(rho_c2, ref.null2, pixel)


@dataclass(frozen=True)
class DirectionStatistics:
    """Coherent and null SNR² at given directions and trials, with the per-detector samples read
    and the SNRs found there (``index`` and ``z`` carry a trailing detector axis)."""

    rho_c2: np.ndarray
    null2: np.ndarray
    index: np.ndarray
    z: np.ndarray


def at_directions(snr, slot, sample, pivot, table: SkyTable, pixel, trial, step: int = 0,
                  window: tuple[int, int] | None = None) -> DirectionStatistics:
    """The statistic, vectorised, at ``pixel`` and ``trial`` (arrays of shape ``(C, ...)``), in
    float64 on the array module of ``snr``: the null SNR at each maximum, per-detector SNR and
    time, and full-sky maps (``pixel = arange(P)``)."""
    xp = array_namespace(snr)
    snr, slot, sample, pivot = _inputs(xp, snr, slot, sample, pivot)
    offsets, proj = _table_on(xp, table)
    lo, span = window if window is not None else (0, snr.shape[2])
    pixel, trial = xp.broadcast_arrays(xp.asarray(pixel, dtype=xp.int64), xp.asarray(trial, dtype=xp.int64))
    n_det = snr.shape[0]
    extra = (slice(None),) + (None,) * (pixel.ndim - 1)
    piv, s, t = pivot[extra], slot[extra], sample[extra]
    j = xp.arange(n_det)
    index = (t[..., None] + offsets[piv[..., None], pixel[..., None], j]
             + trial[..., None] * step * (j - piv[..., None]))
    index = lo + xp.mod(index - lo, span)
    z = snr[j, s[..., None], index].astype(xp.complex128)
    total = xp.sum(xp.abs(z) ** 2, axis=-1)
    q = proj[pixel].astype(xp.float64)
    if n_det <= 2:
        coh, null = total, xp.zeros_like(total)
    elif n_det == 3:
        null = xp.abs(xp.sum(q * z, axis=-1)) ** 2
        coh = total - null
    else:
        ba, bb = xp.sum(q[..., :n_det] * z, -1), xp.sum(q[..., n_det:2 * n_det] * z, -1)
        coh = (q[..., 2 * n_det] * xp.abs(ba) ** 2 + 2 * q[..., 2 * n_det + 1] * xp.real(ba * xp.conj(bb))
               + q[..., 2 * n_det + 2] * xp.abs(bb) ** 2)
        null = total - coh
    return DirectionStatistics(coh, null, index, z)
