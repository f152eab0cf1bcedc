"""Delayed pixel amplitudes (cWB's "TD amplitudes"; ALGORITHMS.md §4.2).

The sky loop needs every selected pixel's amplitude in every detector for the data moved by that
detector's arrival delay, at a finer step than one sample: coarse delays moved PycWB's sky maxima by
up to 165 degrees.  The data are band-limited, so ``x(m + d/4)`` is exact on a grid four times the
sample rate (:func:`upsample`, an FFT interpolation of the circular window).  The amplitude of pixel
``(t, k)`` for the data advanced by ``d`` quarter samples is then

    v[d] = sqrt(2) sum_n x_up[4 (t H + n) + d] w[n] exp(-2 pi i k n / L),

for ``-D <= d <= D``: a correlation of ``x_up`` with the pixel's kernel placed on every fourth
sample, done for a whole resolution's pixels with one batched FFT.  ``v[0]`` is the pixel of
:func:`gwbatch.burst.tfmap.tf_map`.
"""

from __future__ import annotations

import numpy as np

from gwbatch._xp import array_namespace
from gwbatch.burst.tfmap import Resolution, window

#: Delays are computed on a grid this many times finer than the data (cWB builds them at 4x).
UPSAMPLE = 4


def upsample(x, factor: int = UPSAMPLE):
    """Band-limited interpolation of the circular series ``x`` (length ``W``, even) to ``factor W``
    samples: ``out[factor m] == x[m]`` (float32)."""
    xp = array_namespace(x)
    n = int(x.shape[0])
    spec = xp.fft.rfft(x.astype(xp.float64))
    half = n // 2
    spec[half] *= 0.5  # the Nyquist bin splits between +/- fs/2
    out = xp.zeros(factor * n // 2 + 1, dtype=xp.complex128)
    out[:half + 1] = spec
    return (xp.fft.irfft(out, factor * n) * factor).astype(xp.float32)


def delay_range(max_delay: float, sample_rate: float) -> int:
    """``D``: quarter-sample delays either side that cover ``max_delay`` seconds."""
    return int(np.ceil(max_delay * sample_rate * UPSAMPLE)) + 1


def delayed_amplitudes(x_up, res: Resolution, frames, bins, shift: int, n_delay: int):
    """``v`` (``(P, 2 D + 1)`` complex64) for the pixels ``(frames[p], bins[p])`` of resolution
    ``res`` (bins absolute), on the upsampled circular series ``x_up``, the detector's frames moved
    by ``shift`` samples (a lag), delays ``-D..D`` quarter samples (``D = n_delay``).

    The correlation is a product of spectra: the data segment's depends on the frame only and the
    kernel's on the bin only.  On the host each is transformed once for the pixels that share it (a
    cluster holds several bins of a frame, and a lag's pixels a few dozen bins of each resolution);
    the values are the same, bit for bit, as those of one transform per pixel, which a GPU does."""
    xp = array_namespace(x_up)
    n_up = int(x_up.shape[0])
    q, length, n_lag = UPSAMPLE, res.length, 2 * n_delay + 1
    span = q * (length - 1) + n_lag
    n_fft = 1 << int(np.ceil(np.log2(span)))
    if xp is np:  # on the host the transforms are the cost: pixels that share a frame or a bin share them
        frame_of, which_frame = np.unique(np.asarray(frames, dtype=np.int64), return_inverse=True)
        bin_of, which_bin = np.unique(np.asarray(bins, dtype=np.int64), return_inverse=True)
        which_frame, which_bin = which_frame.ravel(), which_bin.ravel()
    else:  # on a GPU one batched transform per pixel is cheaper than gathering shared ones (RESULTS.md)
        frame_of, bin_of = xp.asarray(frames, dtype=xp.int64), xp.asarray(bins, dtype=xp.int64)
        which_frame = which_bin = slice(None)
    start = q * (frame_of * res.hop + shift) - n_delay
    segment = x_up[(start[:, None] + xp.arange(span)[None, :]) % n_up]
    kernel = xp.zeros((bin_of.shape[0], n_fft), dtype=xp.complex64)
    n = xp.arange(length)
    w = xp.asarray(window(length), dtype=xp.float32)
    kernel[:, q * n] = w[None, :] * xp.exp(-2j * np.pi * bin_of[:, None].astype(xp.float64) * n[None, :] / length)
    data = xp.fft.fft(segment, n_fft, axis=1)
    matched = xp.conj(xp.fft.fft(xp.conj(kernel), axis=1))
    corr = xp.fft.ifft(data[which_frame] * matched[which_bin], axis=1)
    return (corr[:, :n_lag] * np.float32(np.sqrt(2.0))).astype(xp.complex64)
