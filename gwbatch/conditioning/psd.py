"""PSD estimation: Welch's method with a median average (ALGORITHMS.md §1).

Hann segments with 50% overlap, each mean-removed; only segments made entirely of valid samples
are used.  The median of periodograms is biased low for exponentially distributed powers; it is
divided by the expected median of ``n`` unit-mean exponential variates,
``1 + sum_{i=1}^{(n-1)//2} (1/(2i+1) - 1/(2i))`` (the factor LAL, PyCBC and SciPy use).
Computed in float64 on either backend.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from gwbatch._xp import array_namespace
from gwbatch.conditioning.design import design_psd
from gwbatch.errors import ConfigError

#: Fewest segments a PSD is estimated from; fewer leaves the chunk's data unanalysed.
MIN_SEGMENTS = 4


def median_bias(n: int) -> float:
    """Expected sample median of ``n`` unit-mean exponential variates."""
    return 1.0 + sum(1.0 / (2 * i + 1) - 1.0 / (2 * i) for i in range(1, (n - 1) // 2 + 1))


def welch_median(x, valid, sample_rate: float, segment: float):
    """One-sided PSD of ``x`` (strain²/Hz) from fully valid Hann segments.

    Returns ``(freqs, psd, n_segments)``; ``psd`` is None when fewer than :data:`MIN_SEGMENTS`
    valid segments exist.
    """
    xp = array_namespace(x, valid)
    nseg = int(round(segment * sample_rate))
    step = nseg // 2
    freqs = xp.fft.rfftfreq(nseg, 1.0 / sample_rate)
    if x.size < nseg:
        return freqs, None, 0
    starts = xp.arange(0, x.size - nseg + 1, step)
    bad = xp.concatenate([xp.zeros(1, dtype=xp.int64), xp.cumsum(~valid, dtype=xp.int64)])
    usable = starts[(bad[starts + nseg] - bad[starts]) == 0]
    n = int(usable.size)
    if n < MIN_SEGMENTS:
        return freqs, None, n
    window = xp.asarray(_hann(nseg, xp))
    segs = x[usable[:, None] + xp.arange(nseg)[None, :]].astype(xp.float64)
    segs = segs - segs.mean(axis=1, keepdims=True)
    power = xp.abs(xp.fft.rfft(segs * window, axis=1)) ** 2
    psd = xp.median(power, axis=0) / median_bias(n)
    psd *= 2.0 / (sample_rate * float((window**2).sum()))
    psd[0] /= 2.0
    if nseg % 2 == 0:
        psd[-1] /= 2.0
    return freqs, psd, n


def _hann(n: int, xp):
    """Periodic Hann window (the spectral-analysis convention)."""
    k = xp.arange(n, dtype=xp.float64)
    return 0.5 - 0.5 * xp.cos(2.0 * xp.pi * k / n)


PSD_METHODS: dict[str, Callable] = {"median-welch": welch_median}


def psd_method(name: str) -> Callable:
    try:
        return PSD_METHODS[name]
    except KeyError:
        raise ConfigError(f"unknown PSD method {name!r}; known: {', '.join(PSD_METHODS)}") from None


@dataclass(frozen=True)
class PSD:
    """A one-sided PSD on a frequency grid, interpolated log-log (held flat outside it)."""

    frequencies: np.ndarray
    values: np.ndarray
    source: str = ""

    def __call__(self, f: np.ndarray) -> np.ndarray:
        f = np.asarray(f, dtype=np.float64)
        ok = (self.frequencies > 0) & (self.values > 0) & np.isfinite(self.values)
        lf, lv = np.log(self.frequencies[ok]), np.log(self.values[ok])
        return np.exp(np.interp(np.log(np.maximum(f, self.frequencies[ok][0])), lf, lv))

    def fingerprint(self) -> str:
        data = np.ascontiguousarray(self.frequencies).tobytes() + np.ascontiguousarray(self.values).tobytes()
        return hashlib.sha256(data).hexdigest()[:16]

    def matches(self, other: PSD, rtol: float) -> bool:
        """The same frequencies, and values within ``rtol`` relative of ``other``'s at every one (equal
        where not finite)."""
        return (self.frequencies.shape == other.frequencies.shape and self.values.shape == other.values.shape
                and np.allclose(self.frequencies, other.frequencies, rtol=1e-12, atol=0.0)
                and np.allclose(self.values, other.values, rtol=rtol, atol=0.0, equal_nan=True))


def design(model: str, sample_rate: float = 4096.0, delta_f: float = 0.125) -> PSD:
    """A design curve (``aLIGO``, ``AdVirgo``, ``KAGRA``; :mod:`gwbatch.conditioning.design`) as a :class:`PSD`."""
    f = np.arange(1, int(sample_rate / 2 / delta_f) + 1) * delta_f
    return PSD(f, design_psd(model, f), source=f"design curve {model}")


def estimate(x, valid, sample_rate: float, segment: float, source: str) -> PSD:
    """Welch-median PSD of a host series, as a :class:`PSD` (raises if too little valid data)."""
    from gwbatch.errors import DataError

    f, psd, n = welch_median(np.asarray(x, dtype=np.float64), np.asarray(valid, dtype=bool), sample_rate, segment)
    if psd is None:
        raise DataError(f"{source}: only {n} fully valid {segment:g} s segments; a PSD needs {MIN_SEGMENTS}")
    return PSD(np.asarray(f[1:]), np.asarray(psd[1:]), source=f"{source} (median of {n} segments of {segment:g} s)")
