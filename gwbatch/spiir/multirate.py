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
``k`` is at top-rate sample ``j 2^k``.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.signal import firwin, kaiserord

from gwbatch._xp import array_namespace

#: Headroom between a filter's frequency and its rate's Nyquist frequency: gstlal-spiir's 1.3.
#: The bank setting ``spiir.multirate_safety`` (default the same) changes it.
SAFETY = 1.3
#: Stopband attenuation of the factor-2 decimation and interpolation filter (dB).
ATTENUATION_DB = 80.0
#: Its passband edge, as a fraction of the lower rate's Nyquist frequency.
PASSBAND = 0.8


def _half_band() -> np.ndarray:
    width = 2.0 * (1.0 - PASSBAND) / 2.0  # transition (2 - 2 PASSBAND) x the lower Nyquist, over the upper Nyquist
    numtaps, beta = kaiserord(ATTENUATION_DB, width)
    numtaps = 4 * math.ceil((numtaps - 1) / 4) + 1  # 4m + 1 taps: the decimator's centre is a whole output sample
    return firwin(numtaps, 0.5, window=("kaiser", beta))


#: The factor-2 anti-alias / anti-image FIR (unit DC gain; a half-band filter: every other tap is zero).
HALF_BAND = _half_band()
TAPS = int(HALF_BAND.size)
_CENTRE = (TAPS - 1) // 2


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


def decimate2(x):
    """``x`` (last axis) low-passed by :data:`HALF_BAND` and kept every other sample; sample ``j``
    is at input sample ``2j`` (zeros taken beyond the ends)."""
    xp = array_namespace(x)
    upfirdn = _upfirdn(xp)
    n_out = -(-x.shape[-1] // 2)
    taps = xp.asarray(HALF_BAND, dtype=xp.float32 if x.dtype in (np.float32, np.complex64) else xp.float64)
    y = upfirdn(taps, x, 1, 2, axis=-1)
    return y[..., _CENTRE // 2: _CENTRE // 2 + n_out].astype(x.dtype, copy=False)


def interpolate2(x, n_out: int):
    """``x`` (last axis) at twice the rate: zeros between samples, low-passed by ``2 HALF_BAND``;
    output sample ``2j`` is at input sample ``j``; ``n_out`` samples."""
    xp = array_namespace(x)
    upfirdn = _upfirdn(xp)
    taps = xp.asarray(2.0 * HALF_BAND, dtype=xp.float32 if x.dtype in (np.float32, np.complex64) else xp.float64)
    y = upfirdn(taps, x, 2, 1, axis=-1)
    out = y[..., _CENTRE: _CENTRE + n_out]
    if out.shape[-1] < n_out:  # the last input sample's image reaches at most TAPS - 1 past 2 n_in
        pad = [(0, 0)] * (out.ndim - 1) + [(0, n_out - out.shape[-1])]
        out = xp.pad(out, pad)
    return out.astype(x.dtype, copy=False)


def _upfirdn(xp):
    if xp is np:
        from scipy.signal import upfirdn
    else:
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
    response to an impulse at any phase has the same energy and overlap to ~1e-4.  Each rung's
    filters are applied exactly by convolution with their impulse response (FFT)."""
    from scipy.signal import fftconvolve

    from gwbatch.spiir.construct import impulse_response

    top = int(level.max()) if level.size else 0
    step = 1 << top
    start = -(-(reach(top) + TAPS) // step) * step if start is None else start
    responses = {k: impulse_response(a[level == k], b[level == k], d[level == k]) for k in np.unique(level).tolist()}
    n = start + max(r.size << k for k, r in responses.items()) + reach(top) + TAPS
    n = -(-n // step) * step
    # The impulse going down the ladder stays within reach(top) of ``start``: the ladder runs on a
    # short window (the same sums as on the whole series, whose other samples are zero), and each
    # rung convolves only its window with its response.
    window = -(-(start + reach(top) + TAPS) // step) * step
    impulse = np.zeros(window)
    impulse[start] = 1.0
    xs = [np.pad(x, (0, (n >> k) - x.size)) for k, x in enumerate(decimate_ladder(impulse, top))]
    nonzero = {n >> k: window >> k for k in range(top + 1)}  # rung length -> its window

    def run(xk, r):
        out = np.zeros(xk.size, dtype=np.complex128)
        full = fftconvolve(xk[: nonzero[xk.size]], r)[: xk.size]
        out[: full.size] = full
        return out

    return accumulate_up(xs, {k: (r,) for k, r in responses.items()}, run), start
