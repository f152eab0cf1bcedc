"""Whitening with a compact, zero-phase FIR filter (ALGORITHMS.md §1).

The inverse ASD, normalised so that whitened noise has unit variance in the band
``[f_low, f_high]`` (``W = 1 / sqrt(S(f) B)``, ``B = f_high - f_low``), is taken to the time domain,
truncated to ``filter_length`` samples with a Hann window (PyCBC's inverse-spectrum truncation) and
applied by FFT convolution.  Because the filter has compact support, an invalid sample (a gap,
a non-finite value, the data edge) corrupts exactly ``filter_length // 2`` samples on each side,
and only those are masked: data further away is bit-for-bit what it would be without the gap.

With this normalisation a signal of optimal SNR ``rho`` has whitened energy
``sum s_w^2 = rho^2 fs / (2 B)``; :func:`snr2_per_energy` returns the inverse factor.
"""

from __future__ import annotations

from scipy.fft import next_fast_len

from gwbatch._xp import array_namespace
from gwbatch.conditioning.mask import dilate_invalid


def band_edges(sample_rate: float, f_low: float, f_high: float | None) -> tuple[float, float]:
    return float(f_low), float(sample_rate / 2.0 if f_high is None else min(f_high, sample_rate / 2.0))


def snr2_per_energy(sample_rate: float, f_low: float, f_high: float | None) -> float:
    """``rho^2`` per unit of whitened energy: ``2 B / fs``."""
    lo, hi = band_edges(sample_rate, f_low, f_high)
    return 2.0 * (hi - lo) / sample_rate


def whitening_taps(freqs, psd, sample_rate: float, filter_length: int, f_low: float, f_high: float | None):
    """Symmetric FIR taps (length ``2 h + 1``, ``h = filter_length // 2``) of the whitening filter."""
    xp = array_namespace(psd)
    lo, hi = band_edges(sample_rate, f_low, f_high)
    in_band = (freqs >= lo) & (freqs <= hi) & (psd > 0)
    inv_asd = xp.where(in_band, 1.0 / xp.sqrt(xp.where(in_band, psd, 1.0) * (hi - lo)), 0.0)
    nseg = 2 * (freqs.size - 1)
    kernel = xp.fft.irfft(inv_asd, n=nseg)
    h = min(filter_length // 2, nseg // 2 - 1)
    taps = xp.concatenate([kernel[nseg - h :], kernel[: h + 1]])
    k = xp.arange(-h, h + 1, dtype=xp.float64)
    return taps * (0.5 + 0.5 * xp.cos(xp.pi * k / (h + 1)))


def apply_fir(x, taps):
    """FFT convolution of ``x`` with centred symmetric ``taps`` (float64), zero-padded to a fast FFT
    length of at least ``x.size + h`` (``h`` the taps' half-length): a read span's length is
    whatever the chunk and its halo make it (8396119 = 19 x 647 x 683 samples for an 8192 s chunk
    at 1024 Hz, whose transforms took 11 times as long as at 8437500).  Only the first and last
    ``h`` outputs see the padding instead of the other end of ``x``; :func:`whiten` masks them."""
    xp = array_namespace(x, taps)
    n = x.size
    h = (taps.size - 1) // 2
    m = next_fast_len(n + h, real=True)
    placed = xp.zeros(m, dtype=xp.float64)
    placed[: h + 1] = taps[h:]
    placed[m - h :] = taps[:h]
    return xp.fft.irfft(xp.fft.rfft(x, n=m) * xp.fft.rfft(placed).real, n=m)[:n]


def whiten(x, valid, taps):
    """Whiten ``x`` (float64) with ``taps``; returns ``(whitened, valid_after)``.

    Invalid samples are set to zero for the convolution; every sample within the filter's
    half-length of an invalid sample or of either end of ``x`` is marked invalid and
    is zero in the output, so filters with memory (SPIIR) never integrate corrupted samples.
    """
    xp = array_namespace(x, valid)
    h = (taps.size - 1) // 2
    filled = xp.where(valid, x, 0.0)
    out = apply_fir(filled, taps)
    edges = xp.ones(x.size, dtype=bool)
    edges[:h] = False
    edges[x.size - h :] = False
    valid_after = dilate_invalid(valid, h) & edges
    return xp.where(valid_after, out, 0.0), valid_after


def effective_psd(psd, sample_rate: float, filter_length: int, f_low: float, f_high: float | None,
                  delta_f: float = 0.125):
    """The PSD that the truncated whitening filter of ``psd`` whitens exactly, as a
    :class:`~gwbatch.conditioning.psd.PSD`: ``S_eff = 1 / (B |W(f)|^2)`` with ``W`` the response of
    :func:`whitening_taps`.

    Templates whitened with ``S_eff`` match data whitened by the truncated filter: the truncation
    smooths the inverse ASD (spectral lines become shallower and wider), and a template whitened by
    the raw estimate would not match the data.  Outside the band, where ``W`` vanishes, the PSD is
    held at 1e6 times its in-band maximum.
    """
    import numpy as np

    from gwbatch.conditioning.psd import PSD

    n = int(round(sample_rate / delta_f))
    freqs = np.fft.rfftfreq(n, 1.0 / sample_rate)
    taps = whitening_taps(freqs, psd(np.maximum(freqs, freqs[1])), sample_rate, filter_length, f_low, f_high)
    h = (taps.size - 1) // 2
    placed = np.zeros(n)
    placed[: h + 1] = taps[h:]
    placed[n - h :] = taps[:h]
    gain = np.abs(np.fft.rfft(placed))
    lo, hi = band_edges(sample_rate, f_low, f_high)
    band = (freqs >= lo) & (freqs <= hi) & (gain > 0)
    values = np.empty(n // 2 + 1)
    values[band] = 1.0 / (gain[band] ** 2 * (hi - lo))
    values[~band] = 1e6 * values[band].max()
    values = np.minimum(values, 1e6 * values[band].max())
    return PSD(freqs[1:], values[1:], source=f"{psd.source}, as whitened by a {filter_length / sample_rate:g} s filter")
