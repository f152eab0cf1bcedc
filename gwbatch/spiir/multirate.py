"""Multi-rate SPIIR: each filter runs at a rate matched to its frequency (gstlal-spiir's ``--downsample``).

ALGORITHMS.md §2 item 9.  A filter ``y[k] = a y[k-1] + b x[k-d]`` of normalised frequency
``f = |arg a| / 2 pi`` (cycles per top-rate sample) runs at ``R / M`` with

    M = 2^-ceil(log2(2 * SAFETY * f)),   1 <= M <= M(f_low),

so its frequency stays below ``1 / (2 SAFETY)`` of the lower rate (:data:`SAFETY` = 1.3, gstlal's).
Its coefficients move to that rate (:func:`to_rate`) by sampling its impulse response
``r[n] = b a^(n-d)`` every ``M`` samples, times ``M`` (the Riemann sum of the convolution at the
lower rate)::

    a' = a^M,   d' = ceil(d / M),   b' = M b a^(d' M - d).

(gstlal writes ``sqrt(M)`` for ``M``: it renormalises the decimated data to unit variance, which
gwbatch's amplitude-keeping decimator does not.)  The bank is then renormalised on the response it
really has, the multi-rate one (:func:`effective_response`).

The rate ladder is ``R, R/2, ..., R/2^K``.  The whitened chunk goes down it by factor-2 stages
(:func:`decimate2`), each rate's filters run with the single-rate kernels, and the outputs come back
up by factor-2 stages (:func:`interpolate2`), each adding its rate's output, to the top rate
(:func:`filter_multirate`).  Both stages use one FIR (:data:`HALF_BAND`): a Kaiser-window half-band
low-pass of :data:`TAPS` taps with :data:`ATTENUATION_DB` dB stopband attenuation, so passband ripple
``10^(-80/20) = 1e-4``; passband to :data:`PASSBAND` of the lower rate's Nyquist frequency, stopband
from ``2 - PASSBAND`` of it.  What aliases in decimation lands above the passband, where no filter
of that rate sits (its filters are below ``1/1.3 = 0.77`` of that Nyquist frequency), and the next
stage removes it.  The filters are symmetric, so every stage is zero-phase: sample ``j`` of rate
``k`` is at top-rate sample ``j 2^k``.  A half-band filter's taps at even offsets from its centre
are zero (to ~1e-17), so on NumPy arrays both stages run in polyphase form on the centre tap and
the :data:`_ODD_TAPS` odd-offset taps each side (compiled kernels); CuPy arrays go through CuPy's
``upfirdn``.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from gwbatch._xp import array_namespace

#: Headroom between a filter's frequency and its rate's Nyquist frequency: gstlal-spiir's 1.3.
#: The bank setting ``spiir.multirate_safety`` (default the same) changes it.
SAFETY = 1.3
#: Stopband attenuation of the factor-2 decimation and interpolation filter (dB).
ATTENUATION_DB = 80.0
#: Its passband edge, as a fraction of the lower rate's Nyquist frequency.
PASSBAND = 0.8


def _half_band() -> np.ndarray:
    """Kaiser's window design (Oppenheim & Schafer, 3rd ed., eqs. 7.62-7.63; what
    ``scipy.signal.kaiserord`` and ``firwin`` compute, to the bit): the length and beta for
    :data:`ATTENUATION_DB` over the transition, a windowed sinc at half the upper Nyquist, unit DC gain."""
    width = 2.0 * (1.0 - PASSBAND) / 2.0  # transition (2 - 2 PASSBAND) x the lower Nyquist, over the upper Nyquist
    a = ATTENUATION_DB
    beta = 0.1102 * (a - 8.7) if a > 50 else (0.5842 * (a - 21) ** 0.4 + 0.07886 * (a - 21) if a > 21 else 0.0)
    numtaps = int(math.ceil((a - 7.95) / 2.285 / (math.pi * width) + 1))
    numtaps = 4 * math.ceil((numtaps - 1) / 4) + 1  # 4m + 1 taps: the decimator's centre is a whole output sample
    taps = 0.5 * np.sinc(0.5 * (np.arange(numtaps) - (numtaps - 1) / 2)) * np.kaiser(numtaps, beta)
    return taps / taps.sum()


#: The factor-2 anti-alias / anti-image FIR (unit DC gain; a half-band filter: every other tap is zero).
HALF_BAND = _half_band()
TAPS = int(HALF_BAND.size)
_CENTRE = (TAPS - 1) // 2
#: Its nonzero taps on each side of the centre (odd offsets 1, 3, ..., _CENTRE - 1); a compile-time
#: constant of the polyphase kernels, whose tap loops it unrolls.
_ODD_TAPS = _CENTRE // 2


def filter_frequency(a: np.ndarray) -> np.ndarray:
    """Each filter's frequency in cycles per sample, ``|arg a| / 2 pi``."""
    return np.abs(np.angle(a)) / (2.0 * np.pi)


def max_level(f_low: float, sample_rate: float, safety: float = SAFETY) -> int:
    """The lowest rung ``K`` of the ladder (rate ``R / 2^K``): the level a filter at ``f_low`` gets."""
    return int(max(0, -math.ceil(math.log2(2.0 * safety * f_low / sample_rate))))


def filter_levels(a: np.ndarray, sample_rate: float, f_low: float, safety: float = SAFETY) -> np.ndarray:
    """Each filter's rung (``M = 2^level``), capped by :func:`max_level`."""
    f = np.maximum(filter_frequency(a), 1e-12)
    level = np.maximum(0, -np.ceil(np.log2(2.0 * safety * f))).astype(np.int64)
    return np.minimum(level, max_level(f_low, sample_rate, safety)).astype(np.int8)


def to_rate(a: np.ndarray, b: np.ndarray, d: np.ndarray, level: np.ndarray):
    """``(a', b', d')`` of filters moved to rate ``R / 2^level`` (module docstring), in complex128."""
    a = np.asarray(a, dtype=np.complex128)
    m = (1 << np.asarray(level, dtype=np.int64))
    d_low = -(-np.asarray(d, dtype=np.int64) // m)
    return a ** m, m * np.asarray(b, dtype=np.complex128) * a ** (d_low * m - d), d_low


def reach(levels: int) -> int:
    """Top-rate samples at each end of a series whose multi-rate output the ladder's FIRs corrupt
    (they see zeros beyond the ends): a chunk needs this much more halo after its own samples."""
    return int(sum(2 * _CENTRE * (1 << (k - 1)) for k in range(1, levels + 1)))


def impulse_start(top: int) -> int:
    """Where :func:`effective_response` puts its impulse for a ladder of ``top`` rungs by default:
    the first multiple of ``2^top`` at least ``reach(top) + TAPS`` in."""
    step = 1 << top
    return -(-(reach(top) + TAPS) // step) * step


def decimate2(x):
    """``x`` (last axis) low-passed by :data:`HALF_BAND` and kept every other sample; sample ``j``
    is at input sample ``2j`` (zeros taken beyond the ends).

    NumPy arrays go through :func:`_decimate2_rows`, the filter's polyphase form: a half-band filter's
    taps at even offsets from the centre are zero (to ~1e-17), so output ``j`` is
    ``HALF_BAND[c] x[2j] + sum_t HALF_BAND[c+1+2t] (x[2j-1-2t] + x[2j+1+2t])`` (``c`` =
    :data:`_CENTRE`).  Float32 and complex64 series are filtered in float32 with float32 taps, others
    in float64; the output has ``x``'s dtype."""
    xp = array_namespace(x)
    n_out = -(-x.shape[-1] // 2)
    if xp is not np:
        upfirdn = _upfirdn(xp)
        taps = xp.asarray(HALF_BAND, dtype=xp.float32 if x.dtype in (np.float32, np.complex64) else xp.float64)
        y = upfirdn(taps, x, 1, 2, axis=-1)
        return y[..., _CENTRE // 2: _CENTRE // 2 + n_out].astype(x.dtype, copy=False)
    rows, work = _rows(x)
    out = np.zeros((rows.shape[0], n_out), dtype=work)
    if n_out:
        centre, odd = _polyphase(1.0, work)
        _decimate2_rows(rows, out, centre, odd)
    return out.reshape(x.shape[:-1] + (n_out,)).astype(x.dtype, copy=False)


def interpolate2(x, n_out: int):
    """``x`` (last axis) at twice the rate: zeros between samples, low-passed by ``2 HALF_BAND``;
    output sample ``2j`` is at input sample ``j``; ``n_out`` samples.

    NumPy arrays go through :func:`_interpolate2_rows`, the polyphase form: output ``2j`` is
    ``2 HALF_BAND[c] x[j]`` and output ``2j + 1`` is ``sum_t 2 HALF_BAND[c+1+2t] (x[j-t] + x[j+1+t])``
    (zeros beyond the ends).  Dtypes as :func:`decimate2`."""
    xp = array_namespace(x)
    if xp is not np:
        upfirdn = _upfirdn(xp)
        taps = xp.asarray(2.0 * HALF_BAND, dtype=xp.float32 if x.dtype in (np.float32, np.complex64) else xp.float64)
        y = upfirdn(taps, x, 2, 1, axis=-1)
        out = y[..., _CENTRE: _CENTRE + n_out]
        if out.shape[-1] < n_out:  # the last input sample's image reaches at most TAPS - 1 past 2 n_in
            pad = [(0, 0)] * (out.ndim - 1) + [(0, n_out - out.shape[-1])]
            out = xp.pad(out, pad)
        return out.astype(x.dtype, copy=False)
    rows, work = _rows(x)
    out = np.zeros((rows.shape[0], n_out), dtype=work)
    if n_out and rows.shape[1]:
        centre, odd = _polyphase(2.0, work)
        if np.iscomplexobj(rows):
            real = rows.real.dtype
            _interpolate2_complex_rows(rows.view(real), out.view(real), centre, odd)
        else:
            _interpolate2_rows(rows, out, centre, odd)
    return out.reshape(x.shape[:-1] + (n_out,)).astype(x.dtype, copy=False)


def _rows(x: np.ndarray):
    """``x`` as C-contiguous ``(rows, n)`` in the dtype it is filtered in (float32 and complex64
    stay; other real and complex types go to float64 and complex128), and that dtype."""
    x = np.asarray(x)
    if x.dtype in (np.float32, np.float64, np.complex64, np.complex128):
        work = x.dtype
    else:
        work = np.dtype(np.complex128 if np.iscomplexobj(x) else np.float64)
    return np.ascontiguousarray(x.reshape(math.prod(x.shape[:-1]), x.shape[-1]), dtype=work), work


def _polyphase(gain: float, work: np.dtype):
    """``gain HALF_BAND``'s centre tap and its odd-offset taps ``[c+1, c+3, ...]`` (the filter is
    symmetric), in the real dtype of ``work``."""
    real = np.float32 if work in (np.float32, np.complex64) else np.float64
    taps = (gain * HALF_BAND).astype(real)
    return taps[_CENTRE], np.ascontiguousarray(taps[_CENTRE + 1:: 2])


@numba.njit(cache=True)
def _decimate2_rows(x, out, centre, odd):
    """``out[r, j] = centre x[r, 2j] + sum_t odd[t] (x[r, 2j-1-2t] + x[r, 2j+1+2t])``, zeros
    beyond the row's ends (:func:`decimate2`)."""
    n = x.shape[1]
    m = _ODD_TAPS
    for r in range(x.shape[0]):
        for j in range(out.shape[1]):
            c = 2 * j
            acc = centre * x[r, c]
            if c - 2 * m + 1 >= 0 and c + 2 * m - 1 < n:
                for t in range(m):
                    acc += odd[t] * (x[r, c - 1 - 2 * t] + x[r, c + 1 + 2 * t])
            else:
                for t in range(m):
                    if c - 1 - 2 * t >= 0:
                        acc += odd[t] * x[r, c - 1 - 2 * t]
                    if c + 1 + 2 * t < n:
                        acc += odd[t] * x[r, c + 1 + 2 * t]
            out[r, j] = acc


@numba.njit(cache=True)
def _interpolate2_rows(x, out, centre, odd):
    """``out[r, 2j] = centre x[r, j]``, ``out[r, 2j+1] = sum_t odd[t] (x[r, j-t] + x[r, j+1+t])``,
    zeros beyond the row's ends (:func:`interpolate2`); real rows, ``out`` starts zeroed."""
    for r in range(x.shape[0]):
        _interpolate2_row(x[r], out[r], centre, odd)


@numba.njit(cache=True)
def _interpolate2_row(x, out, centre, odd):
    """One row of :func:`_interpolate2_rows`."""
    n, n_out, m = x.size, out.size, _ODD_TAPS
    first, last = m - 1, min(n - m, n_out // 2)  # odd outputs whose inputs all lie inside the row
    for j in range(min((n_out + 1) // 2, n)):
        out[2 * j] = centre * x[j]
    for j in range(first, last):
        acc = odd[0] * (x[j] + x[j + 1])
        for t in range(1, m):
            acc += odd[t] * (x[j - t] + x[j + 1 + t])
        out[2 * j + 1] = acc
    for j in range(min(n_out // 2, n + m - 1)):  # near the ends: inputs outside the row are zero
        if first <= j < last:
            continue
        acc = out[2 * j + 1]
        for t in range(m):
            if 0 <= j - t < n:
                acc += odd[t] * x[j - t]
            if j + 1 + t < n:
                acc += odd[t] * x[j + 1 + t]
        out[2 * j + 1] = acc


@numba.njit(cache=True)
def _interpolate2_complex_rows(x, out, centre, odd):
    """:func:`_interpolate2_rows` of complex rows given as interleaved (real, imaginary) reals."""
    for r in range(x.shape[0]):
        _interpolate2_complex_row(x[r], out[r], centre, odd)


@numba.njit(cache=True)
def _interpolate2_complex_row(x, out, centre, odd):
    """One row of :func:`_interpolate2_complex_rows`, the two parts accumulated apart (real taps)."""
    n, n_out, m = x.size // 2, out.size // 2, _ODD_TAPS
    first, last = m - 1, min(n - m, n_out // 2)
    for j in range(min((n_out + 1) // 2, n)):
        out[4 * j] = centre * x[2 * j]
        out[4 * j + 1] = centre * x[2 * j + 1]
    for j in range(first, last):
        re = odd[0] * (x[2 * j] + x[2 * j + 2])
        im = odd[0] * (x[2 * j + 1] + x[2 * j + 3])
        for t in range(1, m):
            lo, hi = 2 * (j - t), 2 * (j + 1 + t)
            re += odd[t] * (x[lo] + x[hi])
            im += odd[t] * (x[lo + 1] + x[hi + 1])
        out[4 * j + 2] = re
        out[4 * j + 3] = im
    for j in range(min(n_out // 2, n + m - 1)):
        if first <= j < last:
            continue
        re, im = out[4 * j + 2], out[4 * j + 3]
        for t in range(m):
            for i in (j - t, j + 1 + t):
                if 0 <= i < n:
                    re += odd[t] * x[2 * i]
                    im += odd[t] * x[2 * i + 1]
        out[4 * j + 2] = re
        out[4 * j + 3] = im


def _upfirdn(xp):
    from cupyx.scipy.signal import upfirdn

    return upfirdn


def level_sets(a: np.ndarray, b: np.ndarray, d: np.ndarray, level: np.ndarray) -> dict[int, tuple]:
    """The packed bank split by rung: ``{k: (a_k, b_k, d_k)}``, each ``(T, L_k)`` with every
    template's filters of rung ``k`` (padding ``a = b = 0``); rungs no filter uses are absent."""
    out = {}
    for k in np.unique(level[b != 0]).tolist():
        mine = (level == k) & (b != 0)
        width = int(mine.sum(axis=1).max())
        order = np.argsort(~mine, axis=1, kind="stable")[:, :width]  # each row's rung-k filters first, in order
        keep = np.take_along_axis(mine, order, axis=1)
        pick = lambda v: np.where(keep, np.take_along_axis(v, order, axis=1), 0).astype(v.dtype)  # noqa: E731
        out[int(k)] = (pick(a), pick(b), pick(d))
    return out


def filter_multirate(x, sets: dict[int, tuple], run) -> object:
    """The bank's top-rate output for input ``x`` (last axis time): ``x`` down the ladder, rung
    ``k``'s filters run on it by ``run(x_k, a_k, b_k, d_k)`` (a single-rate kernel, ``(T, n_k)``),
    and the sum back up the ladder.  Rungs with no filters are passed through."""
    return accumulate_up(decimate_ladder(x, max(sets)), sets, run)


def decimate_ladder(x, top: int) -> list:
    """``[x, x at R/2, ..., x at R/2^top]`` by :func:`decimate2` stages."""
    xs = [x]
    for _ in range(top):
        xs.append(decimate2(xs[-1]))
    return xs


def accumulate_up(xs: list, sets: dict[int, tuple], run) -> object:
    """Rung ``k``'s output ``run(xs[k], *sets[k])``, summed up the ladder by :func:`interpolate2`
    stages from the lowest rung to the top rate."""
    acc = None
    for k in range(len(xs) - 1, -1, -1):
        if acc is not None:
            acc = interpolate2(acc, xs[k].shape[-1])
        if k in sets:
            z = run(xs[k], *sets[k])
            acc = z if acc is None else acc + z
    return acc


def effective_response(a: np.ndarray, b: np.ndarray, d: np.ndarray, level: np.ndarray, *, start: int | None = None):
    """The top-rate output of the multi-rate filters for a unit impulse at sample ``start`` (a
    multiple of ``2^K``; default: far enough in for the ladder's FIRs), complex128, and ``start``.

    The system is periodically time-varying (period ``2^K``); with the ladder's 80 dB filters the
    response to an impulse at any phase has the same energy and overlap to ~1e-4.  The impulse goes
    down the ladder (:func:`decimate_ladder`, on a window holding everything it reaches); each rung's
    filters are applied exactly, as their impulse response times the rung's nonzero input samples,
    and the rungs are summed up the ladder (:func:`accumulate_up`).  For ``start`` a multiple of
    ``2^K`` the impulse meets only the FIR's centre tap on the way down, so each rung's input is one
    sample, ``HALF_BAND[c]^k`` at ``start / 2^k``, and its output a scaled copy of its response."""
    from gwbatch.spiir.construct import impulse_response

    top = int(level.max()) if level.size else 0
    step = 1 << top
    start = impulse_start(top) if start is None else start
    responses = {k: impulse_response(a[level == k], b[level == k], d[level == k]) for k in np.unique(level).tolist()}
    n = start + max(r.size << k for k, r in responses.items()) + reach(top) + TAPS
    n = -(-n // step) * step
    # The impulse going down the ladder stays within reach(top) of ``start``: the ladder runs on a
    # short window (the same sums as on the whole series, whose other samples are zero).
    window = -(-(start + reach(top) + TAPS) // step) * step
    impulse = np.zeros(window)
    impulse[start] = 1.0
    xs = decimate_ladder(impulse, top)
    acc = None
    for k in range(top, -1, -1):  # accumulate_up, each rung's output added where it is nonzero
        acc = np.zeros(n >> top, dtype=np.complex128) if acc is None else interpolate2(acc, n >> k)
        r = responses.get(k)
        if r is None:
            continue
        for j in np.flatnonzero(xs[k]).tolist():  # rung k's output: its response from each input sample
            m = min(r.size, acc.size - j)
            if m > 0:
                acc[j: j + m] += xs[k][j] * r[:m]
    return acc, start
