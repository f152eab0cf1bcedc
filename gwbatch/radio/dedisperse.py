"""Incoherent dedispersion over a DM plan: the CPU twin and the backend dispatch.

**Delays** (Lorimer & Kramer 2005; the constant is sigpyproc's ``DM_CONSTANT_LK``): channel ``c``
at frequency ``f_c`` (MHz) arrives ``K_DM DM (f_c^-2 - f_max^-2)`` seconds after the highest
channel ``f_max``; in samples of ``tsamp`` this is rounded to the nearest integer, halves to even
(:func:`dm_delays`: sigpyproc's ``Header.get_dmdelays``, ``(DM K_DM (f^-2 - fch1^-2) / tsamp)
.round()`` in the same order, in float64; sigpyproc refers to ``fch1``, the highest channel of a
band stored from the top).  sigpyproc 2.0 forms the channel frequencies in float32, which moves a
delay by about 1e-7 of ``DM K_DM f^-2 / tsamp`` (2.5e-5 samples for tutorial.fil at DM 30, whose
delays lie at least 8e-4 from a half): the rounded delays differ only where they lie that close.

**Dedispersed series.**  Trial ``i`` at DM ``DM_i`` with decimation ``d`` (:mod:`.dmplan`) reads the
spectra decimated by ``d``: ``x_d[c, j] = x_{d/2}[c, 2j] + x_{d/2}[c, 2j+1]`` (sums of sample
pairs, so the noise of a decimated sample stays a plain sum), and its sample ``j`` is::

    series_i[j] = sum over c, in array order, of x_d[c, j + delay_c(DM_i, d tsamp)]

accumulated in float32 from 0, exactly sigpyproc's ``dedisperse`` for ``d = 1``.  Every trial gives
``plan.n_out(ntime, d) = (ntime - plan.overlap) // d`` samples, ``plan.overlap`` being the largest
delay of the plan's highest DM in full-rate samples: with one DM and no decimation,
``ntime - max_delay``, sigpyproc's length.

**Sub-bands** (``subbands=``, a :class:`~gwbatch.radio.dmplan.SubbandPlan`; two-stage dedispersion
as in PRESTO's ``prepsubband``; Barsdell et al. 2012 discuss it beside the direct algorithm).  Per decimation level, with
``n`` a trial's nominal DM, ``s`` its sub-bands, ``b_s`` the lowest channel of ``s``::

    e_nc      = round(K_DM DM_n (f_{b_s}^-2 - f_c^-2) / t),  E_ns = max over c in s of e_nc
    stage 1:  sub[s, n, u] = sum over c in s of x_d[c, u + E_ns - e_nc]
    stage 2:  series_i[j]  = sum over s of sub[s, n(i), j + delay_{b_s}(DM_i) - E_{n(i)s}]

so channel ``c`` of trial ``i`` is read at ``j + delay_{b_s}(DM_i) - e_{n(i)c}``, between ``j`` and
``j + delay_{b_s}(DM_i)`` (``DM_n <= DM_i``): never outside brute force's span, and off its own
delay only by the sweep of the DM difference across the channel's sub-band (the plan's S/N
budget, :func:`~gwbatch.radio.dmplan.subband_plan`).

Both schemes are passes of one operation, :func:`shift_add`, whose CPU twin is
:func:`shift_add_numpy` (numba) and whose CUDA kernel is :mod:`gwbatch.radio._cuda`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numba
import numpy as np

from gwbatch._xp import HOST_PARALLEL, array_namespace
from gwbatch.errors import DataError

if TYPE_CHECKING:
    from gwbatch.radio.dmplan import DMPlan, SubbandPlan

#: Dispersion constant, s MHz^2 pc^-1 cm^3 (Lorimer & Kramer 2005; sigpyproc's DM_CONSTANT_LK).
K_DM = 4.148808e3

#: Output samples per task of the numba twin.
TWIN_TILE = 4096


def dm_delays(freqs, dm: float, tsamp: float) -> np.ndarray:
    """Delays (int64, samples of ``tsamp``) of channels ``freqs`` (MHz) at ``dm`` after the
    highest channel, rounded half to even."""
    f = np.asarray(freqs, dtype=np.float64)
    return np.rint(dm * K_DM * (f ** -2.0 - f.max() ** -2.0) / tsamp).astype(np.int64)


@dataclass(frozen=True, eq=False)
class DedispersedBlock:
    """The trials of one decimation level: their DMs (host float64) and place in the plan
    (``plan.dms[trials]``), the decimation factor, the series' sample time (s) and the series
    (float32 ``(ndm, n_out)``, on the spectra's backend; sample ``j`` starts at full-rate sample
    ``j * decimation`` of the spectra)."""

    dms: np.ndarray
    trials: slice
    decimation: int
    tsamp: float
    series: Any


@dataclass(frozen=True, eq=False)
class ShiftAdd:
    """One pass of :func:`shift_add`: ``out[o, t] = sum over q of in[row_base[o] + q * row_stride,
    t + delays[o, q]]`` (host int32 arrays), over ``n_out + extra`` samples."""

    row_base: np.ndarray
    row_stride: int
    delays: np.ndarray
    extra: int = 0


@numba.njit(parallel=True, cache=True)
def _shift_add(inp, row_base, row_stride, delays, out):
    n_rows, n_out = out.shape
    n_in = inp.shape[1]
    tiles = (n_out + TWIN_TILE - 1) // TWIN_TILE
    for job in numba.prange(n_rows * tiles):
        o = job // tiles
        t0 = (job % tiles) * TWIN_TILE
        t1 = min(t0 + TWIN_TILE, n_out)
        for t in range(t0, t1):
            out[o, t] = 0.0
        for q in range(delays.shape[1]):
            row = row_base[o] + q * row_stride
            d = delays[o, q]
            for t in range(t0, min(t1, n_in - d)):
                out[o, t] += inp[row, t + d]


def shift_add_numpy(inp: np.ndarray, row_base: np.ndarray, row_stride: int, delays: np.ndarray,
                    n_out: int) -> np.ndarray:
    """``out[o, t] = sum over q (in order) of inp[row_base[o] + q * row_stride, t + delays[o, q]]``
    for ``t < n_out``, float32 accumulated from 0; samples past the end of a row read as 0."""
    out = np.empty((delays.shape[0], n_out), dtype=np.float32)
    with HOST_PARALLEL:
        _shift_add(np.ascontiguousarray(inp, dtype=np.float32), row_base.astype(np.int64), int(row_stride),
                   delays.astype(np.int64), out)
    return out


def shift_add(inp, step: ShiftAdd, n_out: int):
    """One pass on the array's backend (the contract of :func:`shift_add_numpy`)."""
    if array_namespace(inp) is np:
        return shift_add_numpy(inp, step.row_base, step.row_stride, step.delays, n_out + step.extra)
    from gwbatch.radio._cuda import shift_add as shift_add_cuda

    return shift_add_cuda(inp, step, n_out + step.extra)


def decimate_pairs(x):
    """Sums of consecutive sample pairs along time (the last sample of an odd length is dropped)."""
    m = x.shape[1] // 2
    return x[:, 0 : 2 * m : 2] + x[:, 1 : 2 * m : 2]


def brute_force_pass(plan: DMPlan, trials: slice, decimation: int) -> ShiftAdd:
    """Every channel of every trial of a level, at its own delay."""
    delays = np.stack([plan.delays(dm, decimation) for dm in plan.dms[trials]]).astype(np.int32)
    return ShiftAdd(np.zeros(delays.shape[0], np.int32), 1, delays)


def subband_passes(scheme: SubbandPlan, trials: slice, decimation: int) -> tuple[ShiftAdd, ShiftAdd]:
    """Stage 1 (channels to sub-bands at each nominal DM) and stage 2 (sub-bands to trials) of a
    level (module docstring); stage 1's output rows are ``s * n_nominal + n``."""
    plan = scheme.plan
    nominal = scheme.nominal[trials]
    first = int(nominal[0])
    local = nominal - first
    nominal_dms = scheme.nominal_dms[first : int(nominal[-1]) + 1]
    tsamp = plan.tsamp * decimation
    f = plan.freqs.reshape(scheme.nsub, -1)
    bottom = f.argmin(axis=1)
    inv2 = f ** -2.0
    inv2_bottom = inv2[np.arange(scheme.nsub), bottom]
    # advance of each channel on its sub-band's lowest channel at each nominal DM: (n, s, q)
    advance = np.rint(nominal_dms[:, None, None] * K_DM * (inv2_bottom[None, :, None] - inv2[None]) / tsamp)
    top_advance = advance.max(axis=2)  # E_ns
    stage1 = (top_advance[:, :, None] - advance).transpose(1, 0, 2).reshape(-1, f.shape[1])
    lowest_channel = np.arange(scheme.nsub) * f.shape[1] + bottom
    stage2 = np.stack([plan.delays(dm, decimation)[lowest_channel] for dm in plan.dms[trials]]) - top_advance[local]
    n_nominal = nominal_dms.size
    return (ShiftAdd(np.repeat(np.arange(scheme.nsub) * f.shape[1], n_nominal).astype(np.int32), 1,
                     stage1.astype(np.int32), int(stage2.max())),
            ShiftAdd(local.astype(np.int32), n_nominal, stage2.astype(np.int32)))


@functools.lru_cache(maxsize=64)  # a search's batches (dm_batch) each have a plan: all stay cached
def level_passes(plan: DMPlan, subbands: SubbandPlan | None = None) -> tuple[tuple[int, slice, tuple[ShiftAdd, ...]], ...]:
    """Per decimation level ``(decimation, trials, passes)``: one brute-force pass, or the two
    sub-band stages (host tables, made once per plan)."""
    out = []
    for d, trials in plan.levels:
        passes = (brute_force_pass(plan, trials, d),) if subbands is None else subband_passes(subbands, trials, d)
        out.append((d, trials, passes))
    return tuple(out)


def dedisperse(spectra, freqs, tsamp: float, plan: DMPlan, subbands: SubbandPlan | None = None,
               ladder: dict | None = None, limit: int | None = None) -> list[DedispersedBlock]:
    """Dedisperse ``(nchan, ntime)`` spectra (NumPy or CuPy; float32, normalised by the caller) at
    every trial of ``plan``: one :class:`DedispersedBlock` per decimation level, in increasing
    order, each of ``plan.n_out(ntime, d)`` samples (fewer with ``limit``; module docstring); by brute force, or with the
    two-stage scheme of ``subbands`` (made for this plan).  ``ladder``: a dict that keeps the
    decimated spectra by factor, for calls on batches of one plan's trials over the same spectra
    (each factor is then made once, not once per batch).  ``limit``: at most the outputs that cover
    this many full-rate samples (``ceil(limit / d)`` at decimation ``d``): a batch of low DMs has a
    smaller overlap than the spectra were read for, and its outputs past the chunk are not needed.

    Raises
    ------
    DataError
        Spectra that are not ``(len(freqs), ntime)`` with ``ntime > plan.overlap``, or a band
        (``freqs``, ``tsamp``) other than the plan's.
    """
    xp = array_namespace(spectra)
    freqs = np.asarray(freqs, dtype=np.float64)
    if freqs.shape != plan.freqs.shape or not np.allclose(freqs, plan.freqs, rtol=1e-12, atol=0):
        raise DataError(f"the spectra's {freqs.size} channels are not the plan's {plan.freqs.size} "
                        f"({plan.freqs.max():g} to {plan.freqs.min():g} MHz); make the plan for this band")
    if not np.isclose(tsamp, plan.tsamp, rtol=1e-12, atol=0):
        raise DataError(f"the spectra's sample time {tsamp} s is not the plan's {plan.tsamp} s")
    if spectra.ndim != 2 or spectra.shape[0] != freqs.size or spectra.shape[1] <= plan.overlap:
        raise DataError(f"spectra of shape {spectra.shape}; expected ({freqs.size}, ntime) with ntime above the "
                        f"plan's overlap of {plan.overlap} samples (the delay at DM {plan.dms[-1]:g})")
    if subbands is not None and subbands.plan is not plan:
        raise DataError("the sub-band scheme was made for another DM plan")
    ladder = {} if ladder is None else ladder
    if 1 not in ladder:
        ladder[1] = xp.ascontiguousarray(spectra, dtype=xp.float32)
    ntime = ladder[1].shape[1]
    blocks = []
    for d, trials, passes in level_passes(plan, subbands):
        factor = max(f for f in ladder if f <= d)
        while factor < d:
            ladder[2 * factor], factor = decimate_pairs(ladder[factor]), 2 * factor
        series = ladder[d]
        n_out = plan.n_out(ntime, d) if limit is None else min(plan.n_out(ntime, d), -(-int(limit) // d))
        for step in passes:
            series = shift_add(series, step, n_out)
        blocks.append(DedispersedBlock(plan.dms[trials], trials, d, plan.tsamp * d, series))
    return blocks
