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

Cost (a bank builds thousands of templates, one per CPU worker at a time): the whitening's inverse
FFTs, one per analytic series (the unwhitened one serves for the merger too when there is no
``f_end`` taper); the walk's steps compiled (:func:`_walk_steps`); per ``eps`` the least-squares
sums and Gram matrix (compiled, to the bit what plain loops give, so ``b`` is unchanged), the
response (:func:`impulse_response`, a block of output samples at a time) and one correlation with
the template on a short FFT (:class:`Target`: exact lags around the peak, the others bounded),
whose window around the peak is also the autocorrelation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np
import scipy.fft
import scipy.linalg

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
    autocorr: np.ndarray | None = None  # R(s) of the response, s = -lags..lags (construct's ``lags``)

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
    low_taper = _ramp(np.clip((f - (f_low - 2.0)) / 2.0, 0.0, 1.0))  # smooth Hann ramp from f_low - 2 Hz to f_low
    taper = low_taper
    if f_end is not None:
        taper = low_taper * _ramp(np.clip((f_end - f) / (0.1 * f_end), 0.0, 1.0))
    weighted = 2.0 * htilde * taper
    with np.errstate(divide="ignore", invalid="ignore"):
        white = np.where(psd > 0, weighted / np.sqrt(psd), 0.0)
    white[0] = 0.0
    h = _analytic(white)
    amp = np.abs(h)
    n_roll = n - 1 - int(0.1 * n) - int(np.argmax(amp))
    # Put the merger near the end of the buffer so the inspiral that preceded it is contiguous.
    amp = np.roll(amp, n_roll)
    peak = int(np.argmax(amp))
    after = np.flatnonzero(amp[peak:] < 0.02 * amp[peak])
    end = peak + (int(after[0]) if after.size else n - 1 - peak)
    # Where the template starts (its frequency reaches f_low) is read from the unwhitened waveform.
    raw = np.roll(_analytic(weighted), n_roll)
    phase = _unwrap(np.angle(raw[: end + 1]))
    freq = np.gradient(phase[: peak + 1]) * sample_rate / (2.0 * np.pi)
    below = np.flatnonzero(freq < f_low)
    start = int(below[-1]) + 1 if below.size else 0
    # The merger: the amplitude peak of the unwhitened waveform with the low-frequency ramp only (the
    # series above when there is no f_end taper).
    unwhitened = raw if f_end is None else np.roll(_analytic(2.0 * htilde * low_taper), n_roll)
    merger = int(np.argmax(np.abs(unwhitened))) - start
    cropped = h[(np.arange(start, end + 1) - n_roll) % n]  # the rolled series' samples start..end
    return WhitenedTemplate(cropped, phase[start:], int(np.clip(merger, 0, end - start)))


def _ramp(x: np.ndarray) -> np.ndarray:
    """``0.5 - 0.5 cos(pi x)`` for ``x`` in ``[0, 1]``: 0 at 0, 1 at 1 (exactly: ``cos(pi) = -1``
    in floating point); the cosine is taken only where ``0 < x < 1``."""
    out = (x >= 1.0).astype(np.float64)
    ramp = (x > 0.0) & (x < 1.0)
    out[ramp] = 0.5 - 0.5 * np.cos(np.pi * x[ramp])
    return out


@numba.njit(cache=True)
def _unwrap(p):
    """``np.unwrap(p)`` (period ``2 pi``) to the bit: each step ``dd`` of ``|dd| >= pi`` is corrected
    by ``mod(dd + pi, 2 pi) - pi - dd`` (``+pi`` for a step of exactly ``+pi``), corrections summed
    in order."""
    out = np.empty_like(p)
    if p.size == 0:
        return out
    period = 2.0 * np.pi
    high = period / 2.0
    low = -high
    out[0] = p[0]
    total = 0.0
    for i in range(1, p.size):
        dd = p[i] - p[i - 1]
        if abs(dd) >= high:
            m = np.fmod(dd - low, period)  # NumPy's floor modulo: the sign of the period
            if m != 0.0:
                if m < 0.0:
                    m += period
            else:
                m = 0.0
            ddmod = m + low
            if ddmod == low and dd > 0:
                ddmod = high
            total += ddmod - dd
        else:
            total += 0.0
        out[i] = p[i] + total
    return out


def _analytic(half: np.ndarray) -> np.ndarray:
    """Time series of the positive-frequency half spectrum ``half`` (rfft grid, Nyquist dropped)."""
    n = 2 * (half.size - 1)
    spectrum = np.zeros(n, dtype=np.complex128)
    spectrum[: half.size - 1] = half[:-1]
    return scipy.fft.ifft(spectrum, overwrite_x=True)


def walk_filters(h: np.ndarray, epsilon: float, alpha: float = 0.99, beta: float = 0.25, phase=None):
    """ALGORITHMS.md §2 steps 2-4: ``(a, b, d)`` (in the conj convention) for template ``h``, walking
    on ``phase`` (default: ``h``'s own unwrapped phase)."""
    return _walk(_Shape(h, phase), epsilon, alpha, beta)


class _Shape:
    """What the walk reads of a template: ``|h|``, ``h``'s unwrapped phase and the phase walked on."""

    def __init__(self, h: np.ndarray, phase=None):
        self.amp = np.abs(h)
        self.phi = _unwrap(np.angle(h))
        self.chirp = self.phi if phase is None else np.ascontiguousarray(phase, dtype=np.float64)
        self.peak = int(np.argmax(self.amp))


def _walk(shape: _Shape, epsilon: float, alpha: float, beta: float):
    """:func:`walk_filters` on a template's :class:`_Shape`: the steps by :func:`_walk_steps`, the
    filters' exponentials for all steps at once."""
    if shape.peak < 2:
        raise DataError("template too short to build SPIIR filters (amplitude peak within 2 samples of its start)")
    jstep, k, j, phid = _walk_steps(shape.chirp, shape.phi, shape.peak, float(epsilon), float(alpha))
    if not jstep.size:
        return np.conj(np.array([])), np.conj(np.array([])), np.array([], dtype=np.int64)
    a = np.exp(-beta / jstep) * np.exp(-1j * phid)
    b = shape.amp[k] * np.exp(1j * (shape.phi[k] + phid * (j - k)))
    # conj(a), conj(b): the response approximates conj(h) reversed, so z[k] = rho[k - (N-1)].
    return np.conj(a), np.conj(b), (shape.phi.size - 1 - j).astype(np.int64)


@numba.njit(cache=True)
def _walk_steps(chirp, phi, peak, epsilon, alpha):
    """The walk's steps from the end (ALGORITHMS.md §2 step 2): each step's ``jstep``, filter centre
    ``k``, end ``j`` and phase slope ``phi'(k)``; ``round`` is round-half-even (``np.rint``), as
    Python's."""
    n = phi.size
    steps = np.empty(n, dtype=np.int64)
    centres = np.empty(n, dtype=np.int64)
    ends = np.empty(n, dtype=np.int64)
    slopes = np.empty(n)
    phidd_peak = (chirp[peak - 2] - 2.0 * chirp[peak - 1] + chirp[peak]) / (2.0 * np.pi)
    count = 0
    j, jstep = n - 1, 1
    while True:
        phidd = (chirp[j - 2] - 2.0 * chirp[j - 1] + chirp[j]) / (2.0 * np.pi)
        if j > peak:  # after the peak the frequency stops rising: use the rate at the peak
            phidd = max(phidd, phidd_peak)
        if phidd > 0:
            jstep = max(1, int(np.rint(math.sqrt(2.0 * epsilon / phidd))))
        k = int(np.rint(j - alpha * jstep))
        if k <= 2:
            break
        if k + 2 <= n - 1:
            phid = (phi[k - 2] - 8.0 * phi[k - 1] + 8.0 * phi[k + 1] - phi[k + 2]) / 12.0
        else:
            phid = 11.0 / 6.0 * phi[k] - 3.0 * phi[k - 1] + 1.5 * phi[k - 2] - phi[k - 3] / 3.0
        steps[count], centres[count], ends[count], slopes[count] = jstep, k, j, phid
        count += 1
        j -= jstep
    return steps[:count], centres[:count], ends[:count], slopes[:count]


def tail_lengths(a: np.ndarray) -> np.ndarray:
    """Samples until each filter's impulse response decays below :data:`TAIL`."""
    return np.ceil(np.log(TAIL) / np.log(np.maximum(np.abs(a), 1e-300))).astype(np.int64) + 1


def impulse_response(a: np.ndarray, b: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``r[n] = sum_l b_l a_l^(n - d_l)`` for ``n >= d_l`` (complex128), to where every filter has decayed."""
    a, b = np.asarray(a, dtype=np.complex128), np.asarray(b, dtype=np.complex128)
    d = np.asarray(d, dtype=np.int64)
    tails = tail_lengths(a)
    r = np.zeros(int(np.max(d + tails)) if a.size else 0, dtype=np.complex128)
    if a.size:
        _add_responses(r.view(np.float64), a, b, d, tails)
    return r


#: Output samples per block of :func:`_add_responses`.
RESPONSE_BLOCK = 128


@numba.njit(cache=True)
def _add_responses(r, a, b, d, tails):
    """``r[d_l + p] += b_l a_l^p`` for ``p < tail_l`` (``r`` complex as interleaved reals), a block of
    ``B`` (:data:`RESPONSE_BLOCK`) output samples at a time: each filter active in the block adds
    ``y w_j`` with ``w_j = a^j`` (``j <= B``, by repeated multiplication) and its state ``y`` (``b``
    times the power reached), then ``y *= w_B``; filters are summed in order of delay, in registers,
    and the block written once.  Rounding grows ~1e-16 per block and per power (against per sample
    for ``b a^p`` by repeated multiplication)."""
    block = RESPONSE_BLOCK
    n_filters = a.size
    order = np.argsort(d, kind="mergesort")
    wr = np.empty((n_filters, block + 1))
    wi = np.empty((n_filters, block + 1))
    for l in range(n_filters):
        power = 1.0 + 0.0j
        for j in range(block + 1):
            wr[l, j] = power.real
            wi[l, j] = power.imag
            power *= a[l]
    yr = b.real.copy()
    yi = b.imag.copy()
    ends = d + tails
    acc_r = np.zeros(block)
    acc_i = np.zeros(block)
    size = r.size // 2
    lo = hi = 0  # filters order[lo:hi] have started; those before lo have ended
    start = (d[order[0]] // block) * block
    while start < size:
        while hi < n_filters and d[order[hi]] < start + block:
            hi += 1
        while lo < hi and ends[order[lo]] <= start:
            lo += 1
        if lo == hi:  # none active: on to the next filter's block
            if hi == n_filters:
                break
            start = (d[order[hi]] // block) * block
            continue
        acc_r[:] = 0.0
        acc_i[:] = 0.0
        for i in range(lo, hi):
            l = order[i]
            if ends[l] <= start:
                continue
            first, last = max(d[l] - start, 0), min(ends[l] - start, block)
            ur, ui = wr[l], wi[l]
            sr, si = yr[l], yi[l]
            if first == 0 and last == block:
                for j in range(block):
                    acc_r[j] += sr * ur[j] - si * ui[j]
                    acc_i[j] += sr * ui[j] + si * ur[j]
            else:
                for j in range(first, last):
                    acc_r[j] += sr * ur[j - first] - si * ui[j - first]
                    acc_i[j] += sr * ui[j - first] + si * ur[j - first]
            qr, qi = ur[block - first], ui[block - first]
            yr[l] = sr * qr - si * qi
            yi[l] = sr * qi + si * qr
        for j in range(min(block, size - start)):
            r[2 * (start + j)] += acc_r[j]
            r[2 * (start + j) + 1] += acc_i[j]
        start += block


@numba.njit(cache=True)
def _gram(a, d):
    """``G[l, m] = sum_n conj(r_l[n]) r_m[n]`` for unit-``b`` responses (closed form in
    :func:`least_squares_b`), Hermitian, so the lower triangle is computed and mirrored.  The powers
    are :func:`_power`'s, each pole's modulus and angle taken once."""
    n = a.size
    gram = np.empty((n, n), dtype=np.complex128)
    modulus = np.empty(n)
    angle = np.empty(n)
    angle_conj = np.empty(n)
    for l in range(n):
        modulus[l] = math.hypot(a[l].real, a[l].imag)
        angle[l] = math.atan2(a[l].imag, a[l].real)
        angle_conj[l] = math.atan2(-a[l].imag, a[l].real)
    for l in range(n):
        pole = np.conj(a[l])
        for m in range(l + 1):
            lag = d[l] - d[m]
            if lag >= 0:
                lead = _power(a[m], modulus[m], angle[m], float(lag))
            else:
                lead = _power(pole, modulus[l], angle_conj[l], float(-lag))
            g = lead / (1.0 - pole * a[m])
            gram[l, m] = g
            gram[m, l] = np.conj(g)
    return gram


@numba.njit(cache=True)
def _power(z, modulus, angle, k):
    """``z ** k`` as numba's complex power computes it (CPython's ``_Py_c_pow`` for a real exponent,
    ``z z`` for ``k = 2``), given ``modulus = hypot(z)`` and ``angle = atan2(z)``:
    ``modulus^k (cos(k angle), sin(k angle))``."""
    if k == 0.0:
        return 1.0 + 0.0j
    if k == 2.0:
        return z * z
    length = math.pow(modulus, k)
    phase = angle * k
    return complex(length * math.cos(phase), length * math.sin(phase))


@numba.njit(cache=True)
def _backward_sums(a, d, tails, target):
    """``c_l = sum_p conj(a_l)^p target[d_l + p]`` over ``p < tail_l`` (within ``target``), by the
    one-pole recursion ``s = target[k] + conj(a_l) s`` run from the window's end to ``d_l``.  Four
    filters' recursions are stepped together (independent chains the CPU overlaps), each filter's
    own steps the same as alone."""
    out = np.empty(a.size, dtype=np.complex128)
    for l0 in range(0, a.size, 4):
        if l0 + 4 > a.size:
            for l in range(l0, a.size):
                out[l] = _backward_sum(np.conj(a[l]), d[l], min(d[l] + tails[l], target.size) - 1, 0.0 + 0.0j, target)
            continue
        p0, p1, p2, p3 = np.conj(a[l0]), np.conj(a[l0 + 1]), np.conj(a[l0 + 2]), np.conj(a[l0 + 3])
        h0 = min(d[l0] + tails[l0], target.size) - 1
        h1 = min(d[l0 + 1] + tails[l0 + 1], target.size) - 1
        h2 = min(d[l0 + 2] + tails[l0 + 2], target.size) - 1
        h3 = min(d[l0 + 3] + tails[l0 + 3], target.size) - 1
        steps = max(0, min(h0 - d[l0], h1 - d[l0 + 1], h2 - d[l0 + 2], h3 - d[l0 + 3]) + 1)
        s0 = s1 = s2 = s3 = 0.0 + 0.0j
        for i in range(steps):
            s0 = target[h0 - i] + p0 * s0
            s1 = target[h1 - i] + p1 * s1
            s2 = target[h2 - i] + p2 * s2
            s3 = target[h3 - i] + p3 * s3
        out[l0] = _backward_sum(p0, d[l0], h0 - steps, s0, target)
        out[l0 + 1] = _backward_sum(p1, d[l0 + 1], h1 - steps, s1, target)
        out[l0 + 2] = _backward_sum(p2, d[l0 + 2], h2 - steps, s2, target)
        out[l0 + 3] = _backward_sum(p3, d[l0 + 3], h3 - steps, s3, target)
    return out


@numba.njit(cache=True)
def _backward_sum(pole, first, last, s, target):
    """``s = target[k] + pole s`` for ``k`` from ``last`` down to ``first``."""
    for k in range(last, first - 1, -1):
        s = target[k] + pole * s
    return s


class Target:
    """The ideal impulse response of template ``h``, ``conj(h)`` reversed, with its spectrum cached
    per FFT length: a template's filters are compared with it once per ``eps`` and multi-rate try.

    A response ``r`` is correlated with it (:meth:`match`), ``c[lag] = sum_n r[n + lag] conj(t[n])``
    (``t`` the target, ``N`` samples), exactly for the lags ``-below..above`` around the peak: by FFT
    of ``r[-below : above + N]`` on :attr:`length` = ``N + below + above`` (5-smooth,
    :func:`scipy.fft.next_fast_len`), one length and one spectrum for all of a template's
    comparisons.  ``below = N // 16 + 256``; ``above`` is that plus ``headroom``, the lead of the
    multi-rate responses.  The other lags are bounded by Cauchy-Schwarz: past ``above``,
    ``|c[lag]| <= |r[lag : lag + N]| |t|``; before ``-below``, ``|c[lag]| <= |r[: N + lag]|
    |t[-lag:]| <= |r[: N - below - 1]| |t[below + 1:]|``.  If a bound could reach the maximum
    found, or the autocorrelation window leaves the exact lags, every lag is computed (an FFT of
    ``r`` whole).  The maximum and its lag are therefore those of the full correlation; its value
    differs from another FFT length's by rounding only."""

    def __init__(self, h: np.ndarray, headroom: int = 0):
        self.values = np.conj(np.asarray(h, dtype=np.complex128)[::-1])
        self.power = float(np.sum(np.abs(self.values) ** 2))
        size = self.values.size
        self.below = min(size - 1, size // 16 + 256)
        self.length = scipy.fft.next_fast_len(size + 2 * self.below + int(headroom))
        self.above = self.length - size - self.below
        rest = self.values[self.below + 1:]
        self._early = float(np.vdot(rest, rest).real)  # |t[below + 1:]|^2
        self._spectra: dict[int, np.ndarray] = {}

    def spectrum(self, n: int) -> np.ndarray:
        if n not in self._spectra:
            self._spectra[n] = np.conj(scipy.fft.fft(self.values, n))
        return self._spectra[n]

    def overlap(self, r: np.ndarray, lead: int = 0) -> tuple[float, int]:
        """:func:`overlap` of ``r`` with this target preceded by ``lead`` zeros."""
        ov, lag, _ = self.match(r, lead)
        return ov, lag

    def match(self, r: np.ndarray, lead: int = 0, lags: int = 0,
              energy: float | None = None) -> tuple[float, int, np.ndarray]:
        """:meth:`overlap` of ``r`` and, from the same correlation, :func:`autocorrelation` of ``r``
        with ``lags`` lags each side (``r`` convolved with the template is the correlation shifted by
        ``N - 1``); ``energy``: ``sum |r|^2`` when the caller has it.  Neither depends on ``r``'s
        scale."""
        size, n, below, above = self.values.size, self.length, self.below, self.above
        energy = float(np.sum(np.abs(r) ** 2)) if energy is None else float(energy)
        x = np.zeros(n, dtype=np.complex128)
        m = min(r.size, n - below)
        x[below: below + m] = r[:m]
        c = scipy.fft.ifft(scipy.fft.fft(x, overwrite_x=True) * self.spectrum(n), overwrite_x=True)[: below + above + 1]
        mag = np.abs(c)  # c[i] is lag i - below
        # The first maximum in the full correlation's order: lags 0, 1, ... before -N+1, ..., -1.
        k = below + int(np.argmax(mag[below:]))
        if below:
            early = int(np.argmax(mag[:below]))
            if mag[early] > mag[k]:
                k = early
        lag = k - below
        if lag - lags >= -below and lag + lags <= above and self._bounded(r, energy, mag[k]):
            around = np.arange(lag - lags, lag + lags + 1)
            window = np.where((around > -size) & (around < r.size), c[np.clip(around + below, 0, c.size - 1)], 0.0)
        else:  # every lag: r whole, on a length without wrap-around
            n = scipy.fft.next_fast_len(r.size + size - 1 + lags)
            c = scipy.fft.ifft(scipy.fft.fft(r, n) * self.spectrum(n), overwrite_x=True)
            mag = np.abs(c)
            mag[r.size: n - size + 1] = -1.0  # zero padding between the last lag and the first negative one
            k = int(np.argmax(mag))  # c[k] = sum_n r[n + lag] conj(target[n]); lag = k, or k - n past r's end
            lag = k if k < r.size else k - n
            around = np.arange(lag - lags, lag + lags + 1)
            window = np.where((around > -size) & (around < r.size), c[around % n], 0.0)
        best = float(mag[k] / np.sqrt(energy * self.power))
        return best, lag - lead, window / c[k]

    def _bounded(self, r: np.ndarray, energy: float, found: float) -> bool:
        """Whether no lag outside ``-below..above`` can reach ``found`` (Cauchy-Schwarz, class
        docstring): the windows past ``above`` bounded by all of ``r``'s energy after ``above`` or,
        if that is not enough, each by its own."""
        slack = (1.0 - 1e-9) * found
        size, below, above = self.values.size, self.below, self.above
        head = r[: max(size - below - 1, 0)]
        if np.sqrt((float(np.vdot(head, head).real) + 1e-12 * energy) * self._early) >= slack:
            return False
        if r.size <= above + 1:
            return True
        after = energy - float(np.vdot(r[: above + 1], r[: above + 1]).real)
        if np.sqrt(max(after + 1e-12 * energy, 0.0) * self.power) < slack:
            return True
        cum = np.cumsum(np.abs(r) ** 2)  # cum[i] = |r[: i + 1]|^2
        first = above + 1
        widest = cum[-1] - cum[max(first, r.size - size) - 1]  # windows reaching r's end
        if r.size - size > first:  # windows r[lag : lag + N] inside r
            widest = max(widest, float(np.max(cum[first + size - 1: -1] - cum[first - 1: r.size - size - 1])))
        return bool(np.sqrt(max(widest + 1e-12 * energy, 0.0) * self.power) < slack)


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
    gram = _gram(a, d)
    try:  # G is a Gram matrix, Hermitian positive definite: Cholesky, half the work of LU
        return scipy.linalg.cho_solve(scipy.linalg.cho_factor(gram, lower=True, check_finite=False), rhs,
                                      check_finite=False)
    except np.linalg.LinAlgError:  # numerically semi-definite (nearly dependent responses)
        return np.linalg.solve(gram, rhs)


def normalise(a: np.ndarray, b: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``b`` scaled so ``sum |r|^2 = 2`` (``|z|`` is then the SNR in unit-variance white noise)."""
    power = np.sum(np.abs(impulse_response(a, b, d)) ** 2)
    return b / np.sqrt(power / 2.0)


def construct(h: np.ndarray, *, overlap_target: float = 0.99, epsilons=(0.04, 0.02, 0.01, 0.005),
              alpha: float = 0.99, beta: float = 0.25, least_squares: bool = True, phase=None,
              merger: int | None = None, target: Target | None = None, lags: int = 0) -> IIRFilters:
    """Filters for whitened template ``h``: the largest ``eps`` reaching ``overlap_target`` (else the best);
    ``phase``: the phase to walk on, ``merger``: the merger's index in ``h`` (both from
    :class:`WhitenedTemplate`; the merger defaults to the peak of ``|h|``); ``target``: ``Target(h)``,
    when the caller compares other responses with it too; ``lags``: with ``lags > 0`` the filters'
    :func:`autocorrelation` to that many lags, from the overlap's correlation."""
    target = Target(h) if target is None else target
    shape = _Shape(h, phase)
    best = None
    for eps in sorted(epsilons, reverse=True):
        a, b, d = _walk(shape, eps, alpha, beta)
        if least_squares:
            b = least_squares_b(a, d, target.values)
        r = impulse_response(a, b, d)
        energy = np.sum(np.abs(r) ** 2)
        b = b * np.sqrt(2.0 / energy)  # sum |r|^2 = 2 (the overlaps do not depend on the scale)
        ov, lag, autocorr = target.match(r, lags=lags, energy=energy)
        candidate = (ov, eps, a, b, d, lag, autocorr)
        if best is None or ov > best[0]:
            best = candidate
        if ov >= overlap_target:
            best = candidate
            break
    ov, eps, a, b, d, lag, autocorr = best
    peak = int(np.argmax(np.abs(h))) if merger is None else int(merger)
    return IIRFilters(a, b, d, eps, ov, latency=h.size - 1 + lag, peak_offset=h.size - 1 - peak,
                      autocorr=autocorr if lags > 0 else None)


def autocorrelation(response: np.ndarray, h: np.ndarray, lags: int) -> np.ndarray:
    """``R(s)`` for ``s = -lags..lags``: the SPIIR response to its own template, normalised to ``R(0) = 1``.

    ``response``: the filters' impulse response as the bank runs them (single- or multi-rate).
    This is what ``z`` looks like around a signal's peak (gstlal's autocorrelation chi-squared uses
    the SPIIR response, not the exact template).  :meth:`Target.match` gives the same from the
    correlation it computes for the overlap.
    """
    return Target(h).match(np.asarray(response, dtype=np.complex128), lags=lags)[2]
