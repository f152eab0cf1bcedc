"""SPIIR filter construction: a whitened template as a sum of first-order complex IIR filters.

Hooper et al. 2012 (PRD 86, 024012); LAL's ``XLALInspiralGenerateIIRSet``; ALGORITHMS.md §2.
Filter ``l`` is ``y[k] = a_l y[k-1] + b_l x[k - d_l]`` and the template's complex SNR is
``z[k] = sum_l y_l[k]``.

1. :func:`whitened_template`: the analytic (positive-frequency) whitened template
   ``h = ifft(2 h~(f) / ASD(f))``, tapered from ``f_low - 2 Hz``, cropped from where its frequency
   reaches ``f_low`` to just after the amplitude peak (``|h|`` below 2% of the peak), with the phase
   ``phi`` of the unwhitened waveform on the same samples.  Whitening weights are real, so they keep
   each frequency's time and ``phi`` tracks the chirp; but a measured PSD's spectral lines cut
   notches in ``|h|`` where the whitened phase jumps, and a walk on that phase would place a filter
   per sample there.
2. :func:`walk_filters`: walk back from the end in steps ``jstep = round(sqrt(2 eps / phi''))``;
   each step places one filter centred at ``k = round(j - alpha jstep)`` with
   ``a = exp(-beta/jstep) exp(-i phi'(k))``, ``b = A[k] exp(i (phi[k] + phi'(k)(j - k)))``,
   ``d = N - 1 - j``.  The impulse response ``b a^p`` at ``d + p`` then approximates the
   time-reversed template; building with ``conj(a)``, ``conj(b)`` gives ``z[k] = rho[k - (N-1)]``
   with ``rho[t] = sum_n x[t+n] conj(h[n])``, the usual complex SNR of a template starting at ``t``.
3. :func:`least_squares_b` (optional): keep ``a, d`` and solve for the best ``b`` in the least-squares
   sense (Gram matrix of the filters' impulse responses); it removes the construction's phase bias.
4. Numerical normalisation: ``sum |r|^2 = 2``, so in unit-variance white noise ``E|z|^2 = 2`` and
   ``|z|`` is the SNR.
5. :func:`construct`: the largest ``eps`` (fewest filters) whose response reaches the overlap target.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import scipy.fft

from gwbatch.errors import DataError

#: Decay of each filter's impulse response below which its tail is ignored (relative amplitude).
TAIL = 1e-7


@dataclass(frozen=True)
class WhitenedTemplate:
    """A cropped analytic whitened template, the unwhitened waveform's unwrapped phase (rad) and
    where its merger is.  The merger is the amplitude peak of the unwhitened waveform without the
    ISCO taper, the time injections are listed at (:mod:`gwbatch.simulate.cbc`); whitening and the
    taper move the whitened template's own peak by up to a few ms."""

    h: np.ndarray  # complex128
    phase: np.ndarray  # float64, same length
    merger: int  # index in h of the unwhitened waveform's amplitude peak (the merger)

    @property
    def size(self) -> int:
        return int(self.h.size)


@dataclass(frozen=True)
class IIRFilters:
    """One template's filters (``conj`` convention: ``z[k] = rho[k - latency]``)."""

    a: np.ndarray  # complex128 (L,)
    b: np.ndarray  # complex128 (L,)
    d: np.ndarray  # int64 (L,) delays in samples
    epsilon: float
    overlap: float  # max over time and phase of the normalised overlap with the template
    latency: int  # samples from template start to the peak of z (N - 1 plus the fitted lag)
    peak_offset: int  # samples from the merger to the template's end

    @property
    def n_filters(self) -> int:
        return int(self.a.size)


def whitened_template(htilde: np.ndarray, psd: np.ndarray, delta_f: float, sample_rate: float,
                      f_low: float, f_end: float | None = None) -> WhitenedTemplate:
    """Cropped analytic whitened template from ``h~`` and the PSD on the same rfft grid.

    The grid must span ``[0, fs/2]`` with ``delta_f`` fine enough to hold the whole template.
    ``f_end``: for waveforms that stop abruptly (TaylorF2 at ISCO), a Hann taper over the last 10%
    of the band below it; without it the cut rings in time and the walk fills the ringing with
    thousands of useless filters.
    """
    n_freq = htilde.size
    n = 2 * (n_freq - 1)
    if abs(n * delta_f - sample_rate) > 1e-6 * sample_rate:
        raise DataError(f"frequency grid ({n_freq} bins of {delta_f} Hz) does not end at Nyquist of {sample_rate} Hz")
    f = np.arange(n_freq) * delta_f
    taper = np.clip((f - (f_low - 2.0)) / 2.0, 0.0, 1.0)
    taper = 0.5 - 0.5 * np.cos(np.pi * taper)  # smooth Hann ramp from f_low - 2 Hz to f_low
    if f_end is not None:
        top = np.clip((f_end - f) / (0.1 * f_end), 0.0, 1.0)
        taper *= 0.5 - 0.5 * np.cos(np.pi * top)
    with np.errstate(divide="ignore", invalid="ignore"):
        white = np.where(psd > 0, 2.0 * htilde * taper / np.sqrt(psd), 0.0)
    white[0] = 0.0
    h = _analytic(white)
    n_roll = n - 1 - int(0.1 * n) - int(np.argmax(np.abs(h)))
    # Put the merger near the end of the buffer so the inspiral that preceded it is contiguous.
    h = np.roll(h, n_roll)
    amp = np.abs(h)
    peak = int(np.argmax(amp))
    after = np.flatnonzero(amp[peak:] < 0.02 * amp[peak])
    end = peak + (int(after[0]) if after.size else n - 1 - peak)
    # Where the template starts (its frequency reaches f_low) is read from the unwhitened waveform.
    raw = np.roll(_analytic(2.0 * htilde * taper), n_roll)
    phase = np.unwrap(np.angle(raw[: end + 1]))
    freq = np.gradient(phase[: peak + 1]) * sample_rate / (2.0 * np.pi)
    below = np.flatnonzero(freq < f_low)
    start = int(below[-1]) + 1 if below.size else 0
    low_taper = 0.5 - 0.5 * np.cos(np.pi * np.clip((f - (f_low - 2.0)) / 2.0, 0.0, 1.0))
    merger = int(np.argmax(np.abs(np.roll(_analytic(2.0 * htilde * low_taper), n_roll)))) - start
    return WhitenedTemplate(h[start : end + 1], phase[start:], int(np.clip(merger, 0, end - start)))


def _analytic(half: np.ndarray) -> np.ndarray:
    """Time series of the positive-frequency half spectrum ``half`` (rfft grid, Nyquist dropped)."""
    n = 2 * (half.size - 1)
    spectrum = np.zeros(n, dtype=np.complex128)
    spectrum[: half.size - 1] = half[:-1]
    return scipy.fft.ifft(spectrum, overwrite_x=True)


def walk_filters(h: np.ndarray, epsilon: float, alpha: float = 0.99, beta: float = 0.25, phase=None):
    """ALGORITHMS.md §2 steps 2-4: ``(a, b, d)`` (in the conj convention) for template ``h``, walking
    on ``phase`` (default: ``h``'s own unwrapped phase)."""
    n = h.size
    amp = np.abs(h)
    phi = np.unwrap(np.angle(h))
    chirp = phi if phase is None else np.asarray(phase, dtype=np.float64)
    peak = int(np.argmax(amp))
    if peak < 2:
        raise DataError("template too short to build SPIIR filters (amplitude peak within 2 samples of its start)")
    phidd_peak = (chirp[peak - 2] - 2.0 * chirp[peak - 1] + chirp[peak]) / (2.0 * np.pi)
    a, b, d = [], [], []
    j, jstep = n - 1, 1
    while True:
        phidd = (chirp[j - 2] - 2.0 * chirp[j - 1] + chirp[j]) / (2.0 * np.pi)
        if j > peak:  # after the peak the frequency stops rising: use the rate at the peak
            phidd = max(phidd, phidd_peak)
        if phidd > 0:
            jstep = max(1, int(round(np.sqrt(2.0 * epsilon / phidd))))
        k = int(round(j - alpha * jstep))
        if k <= 2:
            break
        if k + 2 <= n - 1:
            phid = (phi[k - 2] - 8.0 * phi[k - 1] + 8.0 * phi[k + 1] - phi[k + 2]) / 12.0
        else:
            phid = 11.0 / 6.0 * phi[k] - 3.0 * phi[k - 1] + 1.5 * phi[k - 2] - phi[k - 3] / 3.0
        a.append(np.exp(-beta / jstep) * np.exp(-1j * phid))
        b.append(amp[k] * np.exp(1j * (phi[k] + phid * (j - k))))
        d.append(n - 1 - j)
        j -= jstep
    # conj(a), conj(b): the response approximates conj(h) reversed, so z[k] = rho[k - (N-1)].
    return np.conj(np.array(a)), np.conj(np.array(b)), np.array(d, dtype=np.int64)


def tail_lengths(a: np.ndarray) -> np.ndarray:
    """Samples until each filter's impulse response decays below :data:`TAIL`."""
    return np.ceil(np.log(TAIL) / np.log(np.maximum(np.abs(a), 1e-300))).astype(np.int64) + 1


def impulse_response(a: np.ndarray, b: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``r[n] = sum_l b_l a_l^(n - d_l)`` for ``n >= d_l`` (complex128), to where every filter has decayed."""
    a, b = np.asarray(a, dtype=np.complex128), np.asarray(b, dtype=np.complex128)
    d = np.asarray(d, dtype=np.int64)
    tails = tail_lengths(a)
    r = np.zeros(int(np.max(d + tails)) if a.size else 0, dtype=np.complex128)
    _add_responses(r, a, b, d, tails)
    return r


@numba.njit(cache=True)
def _add_responses(r, a, b, d, tails):
    """``r[d_l + p] += b_l a_l^p`` for ``p < tail_l``; powers by repeated multiplication (rounding
    grows ~1e-16 per step)."""
    for l in range(a.size):
        power = 1.0 + 0.0j
        for p in range(tails[l]):
            r[d[l] + p] += b[l] * power
            power *= a[l]


@numba.njit(cache=True)
def _gram(a, d):
    """``G[l, m] = sum_n conj(r_l[n]) r_m[n]`` for unit-``b`` responses (closed form in
    :func:`least_squares_b`), Hermitian, so the lower triangle is computed and mirrored."""
    n = a.size
    gram = np.empty((n, n), dtype=np.complex128)
    for l in range(n):
        for m in range(l + 1):
            lag = d[l] - d[m]
            lead = a[m] ** lag if lag >= 0 else np.conj(a[l]) ** -lag
            g = lead / (1.0 - np.conj(a[l]) * a[m])
            gram[l, m] = g
            gram[m, l] = np.conj(g)
    return gram


@numba.njit(cache=True)
def _backward_sums(a, d, tails, target):
    """``c_l = sum_p conj(a_l)^p target[d_l + p]`` over ``p < tail_l`` (within ``target``), by the
    one-pole recursion ``s = target[k] + conj(a_l) s`` run from the window's end to ``d_l``."""
    out = np.empty(a.size, dtype=np.complex128)
    for l in range(a.size):
        pole = np.conj(a[l])
        s = 0.0 + 0.0j
        for k in range(min(d[l] + tails[l], target.size) - 1, d[l] - 1, -1):
            s = target[k] + pole * s
        out[l] = s
    return out


class Target:
    """The ideal impulse response of template ``h``, ``conj(h)`` reversed, with its spectrum cached
    per FFT length: a template's filters are compared with it once per ``eps`` and multi-rate try."""

    def __init__(self, h: np.ndarray):
        self.values = np.conj(np.asarray(h, dtype=np.complex128)[::-1])
        self.power = float(np.sum(np.abs(self.values) ** 2))
        self._spectra: dict[int, np.ndarray] = {}

    def spectrum(self, n: int) -> np.ndarray:
        if n not in self._spectra:
            self._spectra[n] = np.conj(scipy.fft.fft(self.values, n))
        return self._spectra[n]

    def overlap(self, r: np.ndarray, lead: int = 0) -> tuple[float, int]:
        """:func:`overlap` of ``r`` with this target preceded by ``lead`` zeros."""
        n = 1 << int(np.ceil(np.log2(r.size + self.values.size)))
        c = scipy.fft.ifft(scipy.fft.fft(r, n) * self.spectrum(n), overwrite_x=True)
        k = int(np.argmax(np.abs(c)))  # c[k] = sum_n r[n + lag] conj(target[n]); lag = k, or k - n past r's end
        best = float(np.abs(c[k]) / np.sqrt(np.sum(np.abs(r) ** 2) * self.power))
        return best, (k if k < r.size else k - n) - lead


def overlap(r: np.ndarray, target: np.ndarray) -> tuple[float, int]:
    """Max over time and phase of ``|<r, target>| / (|r| |target|)`` and the best lag (samples)."""
    return Target(np.conj(np.asarray(target)[::-1])).overlap(r)


def least_squares_b(a: np.ndarray, d: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The ``b`` minimising ``|sum_l b_l r_l - target|^2`` for fixed ``a, d`` (ALGORITHMS.md §2.6).

    With unit-``b`` responses ``r_l[n] = a_l^(n - d_l)`` (``n >= d_l``) the normal equations are
    ``sum_m G[l, m] b_m = c_l`` with ``G[l, m] = sum_n conj(r_l[n]) r_m[n]``, in closed form
    ``a_m^(d_l - d_m) / (1 - conj(a_l) a_m)`` when ``d_l >= d_m`` and
    ``conj(a_l)^(d_m - d_l) / (1 - conj(a_l) a_m)`` otherwise, and
    ``c_l = sum_p conj(a_l)^p target[d_l + p]``.
    """
    a = np.asarray(a, dtype=np.complex128)
    d = np.asarray(d, dtype=np.int64)
    rhs = _backward_sums(a, d, tail_lengths(a), np.ascontiguousarray(target, dtype=np.complex128))
    return np.linalg.solve(_gram(a, d), rhs)


def normalise(a: np.ndarray, b: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``b`` scaled so ``sum |r|^2 = 2`` (``|z|`` is then the SNR in unit-variance white noise)."""
    power = np.sum(np.abs(impulse_response(a, b, d)) ** 2)
    return b / np.sqrt(power / 2.0)


def construct(h: np.ndarray, *, overlap_target: float = 0.99, epsilons=(0.04, 0.02, 0.01, 0.005),
              alpha: float = 0.99, beta: float = 0.25, least_squares: bool = True, phase=None,
              merger: int | None = None, target: Target | None = None) -> IIRFilters:
    """Filters for whitened template ``h``: the largest ``eps`` reaching ``overlap_target`` (else the best);
    ``phase``: the phase to walk on, ``merger``: the merger's index in ``h`` (both from
    :class:`WhitenedTemplate`; the merger defaults to the peak of ``|h|``); ``target``: ``Target(h)``,
    when the caller compares other responses with it too."""
    target = Target(h) if target is None else target
    best = None
    for eps in sorted(epsilons, reverse=True):
        a, b, d = walk_filters(h, eps, alpha, beta, phase)
        if least_squares:
            b = least_squares_b(a, d, target.values)
        r = impulse_response(a, b, d)
        scale = np.sqrt(2.0 / np.sum(np.abs(r) ** 2))
        b, r = b * scale, r * scale
        ov, lag = target.overlap(r)
        candidate = (ov, eps, a, b, d, lag)
        if best is None or ov > best[0]:
            best = candidate
        if ov >= overlap_target:
            best = candidate
            break
    ov, eps, a, b, d, lag = best
    peak = int(np.argmax(np.abs(h))) if merger is None else int(merger)
    return IIRFilters(a, b, d, eps, ov, latency=h.size - 1 + lag, peak_offset=h.size - 1 - peak)


def autocorrelation(response: np.ndarray, h: np.ndarray, lags: int) -> np.ndarray:
    """``R(s)`` for ``s = -lags..lags``: the SPIIR response to its own template, normalised to ``R(0) = 1``.

    ``response``: the filters' impulse response as the bank runs them (single- or multi-rate).
    This is what ``z`` looks like around a signal's peak (gstlal's autocorrelation chi-squared uses
    the SPIIR response, not the exact template).
    """
    r = response
    n = 1 << int(np.ceil(np.log2(r.size + h.size + 2 * lags)))
    y = scipy.fft.ifft(scipy.fft.fft(r, n) * scipy.fft.fft(h, n), overwrite_x=True)  # output for the complex template
    peak = int(np.argmax(np.abs(y)))
    window = y[np.arange(peak - lags, peak + lags + 1) % n]
    return window / y[peak]
