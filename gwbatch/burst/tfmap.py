"""Time-frequency pixels: a multi-resolution sine-window Gabor frame with both quadratures.

cWB decomposes whitened data with WDM wavelets (Necula, Klimenko & Mitselmakher 2012); gwbatch
uses the Gabor alternative that ALGORITHMS.md §4.1 allows.  At a resolution with window length
``L`` (a power of two; pixel bandwidth ``df = fs / L``, time step ``H = L / 2``, so
``dt * df = 1/2`` as for WDM) the pixel of frame ``t`` and bin ``k`` is

    a[t, k] = sqrt(2) * sum_n x[t H + n] w[n] exp(-2 pi i k n / L),
    w[n] = sin(pi (n + 1/2) / L) / sqrt(L / 2).

``w`` has unit energy and ``w[n]^2 + w[n + H]^2`` is constant, so the frame is tight: for
unit-variance white noise (the search's input, :func:`burst_input`) ``Re a`` and ``Im a`` (the 00
and 90 quadratures) each have unit variance and the pixel energy ``|a|^2`` is chi-squared with two
degrees of freedom (mean 2); for a signal ``s`` the energies of the bins ``0 < k < L/2`` sum to
``2 sum s^2 = 2 SNR^2`` at every resolution.

Frames are circular over the analysis window (``x[(t H + n) mod W]``): a lag that moves a detector by
a multiple of ``H`` then only rolls its frames (:mod:`gwbatch.burst.chunk`).  One code path for
NumPy and CuPy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gwbatch._xp import array_namespace


@dataclass(frozen=True)
class Resolution:
    """One level of the decomposition: window ``length`` (samples) and the bins kept ``[k_lo, k_hi]``."""

    length: int
    k_lo: int
    k_hi: int

    @property
    def hop(self) -> int:
        return self.length // 2

    @property
    def n_bins(self) -> int:
        return self.k_hi - self.k_lo + 1

    def frequency(self, k, sample_rate: float):
        """Centre frequency (Hz) of bin ``k``."""
        return np.asarray(k) * sample_rate / self.length

    def bandwidth(self, sample_rate: float) -> float:
        return sample_rate / self.length


def resolutions(sample_rate: float, bandwidths, f_low: float, f_high: float) -> tuple[Resolution, ...]:
    """The levels for pixel ``bandwidths`` (Hz), each keeping the bins whose band lies in
    ``[f_low, f_high]`` (never the zero or Nyquist bin)."""
    out = []
    for df in bandwidths:
        length = sample_rate / df
        if length != int(length) or int(length) & (int(length) - 1) or length < 8:
            raise ValueError(f"pixel bandwidth {df:g} Hz gives a window of {length:g} samples at {sample_rate:g} Hz; "
                             "it must be a power of two of at least 8 samples")
        length = int(length)
        k_lo = max(1, int(np.ceil(f_low / df + 0.5)))
        k_hi = min(length // 2 - 1, int(np.floor(f_high / df - 0.5)))
        if k_hi < k_lo:
            raise ValueError(f"no {df:g} Hz pixel fits in the band [{f_low:g}, {f_high:g}] Hz")
        out.append(Resolution(length, k_lo, k_hi))
    return tuple(sorted(out, key=lambda r: r.length))


def window(length: int) -> np.ndarray:
    """The unit-energy sine window (float64)."""
    n = np.arange(length)
    return np.sin(np.pi * (n + 0.5) / length) / np.sqrt(length / 2.0)


def burst_input(data, snr2_per_energy: float):
    """Whitened data scaled to unit variance per sample in band (float32): conditioning whitens to
    unit variance over its band ``B``, which is ``2B/fs`` of a white series' power
    (:func:`gwbatch.conditioning.whiten.snr2_per_energy`)."""
    xp = array_namespace(data)
    return (data * np.sqrt(snr2_per_energy)).astype(xp.float32)


def tf_map(x, res: Resolution):
    """Complex pixels ``(W / H, n_bins)`` (complex64) of the circular series ``x`` (length ``W``, a
    multiple of ``H``): frame ``t`` starts at sample ``t H``, column ``k - k_lo`` is bin ``k``."""
    xp = array_namespace(x)
    n, length, hop = int(x.shape[0]), res.length, res.hop
    if n % hop:
        raise ValueError(f"window of {n} samples is not a multiple of the hop {hop}")
    index = (xp.arange(n // hop)[:, None] * hop + xp.arange(length)[None, :]) % n
    frames = x[index] * xp.asarray(window(length), dtype=xp.float32)[None, :]
    spec = xp.fft.rfft(frames, axis=1)[:, res.k_lo:res.k_hi + 1]
    return (spec * np.float32(np.sqrt(2.0))).astype(xp.complex64)


def tf_synthesis(pixels, res: Resolution, n: int):
    """The series (float64, length ``n``, circular) whose frame coefficients in the kept bins are
    ``pixels`` ``(n / H, n_bins)``: the frame's adjoint, which for a tight frame inverts
    :func:`tf_map` on series band-limited to the kept bins.  Frame ``t``'s bins give
    ``f_t[j] = sqrt(2) / L * sum_k Re(a[t, k] exp(2 pi i k j / L))``, and ``x[t H + j] = (L / 2)
    sum_t w[j] f_t[j]`` since ``sum_t w[j - t H]^2 = 2 / L``.  Zeroed pixels leave their part out: the
    series of an event's own pixels is its waveform in whitened units (the search's input)."""
    xp = array_namespace(pixels)
    length, hop = res.length, res.hop
    spectrum = xp.zeros((pixels.shape[0], length // 2 + 1), dtype=xp.complex128)
    spectrum[:, res.k_lo:res.k_hi + 1] = pixels
    frames = xp.fft.irfft(spectrum, n=length, axis=1) * (length / 2.0) * (np.sqrt(2.0) / length)
    frames = frames * xp.asarray(window(length))[None, :] * (length / 2.0)
    out = xp.zeros(n, dtype=xp.float64)
    index = (xp.arange(pixels.shape[0])[:, None] * hop + xp.arange(length)[None, :]) % n
    if xp is np:
        np.add.at(out, index.ravel(), frames.ravel())
    else:
        xp.add.at(out, index.ravel(), frames.ravel())
    return out


def frame_valid(valid, res: Resolution):
    """Frames (circular, as :func:`tf_map`) whose samples are all valid (bool ``(W / H,)``)."""
    xp = array_namespace(valid)
    n, hop, length = int(valid.shape[0]), res.hop, res.length
    bad = xp.concatenate([xp.zeros(1, dtype=xp.int64), xp.cumsum(~valid.astype(bool), dtype=xp.int64)])
    start = xp.arange(n // hop) * hop
    stop = start + length
    inside = bad[xp.minimum(stop, n)] - bad[start]
    wrapped = xp.where(stop > n, bad[xp.clip(stop - n, 0, n)], 0)
    return (inside + wrapped) == 0
