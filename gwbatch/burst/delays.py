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
    by ``shift`` samples (a lag), delays ``-D..D`` quarter samples (``D = n_delay``)."""
    xp = array_namespace(x_up)
    frames = xp.asarray(frames, dtype=xp.int64)
    bins = xp.asarray(bins, dtype=xp.int64)
    n_up = int(x_up.shape[0])
    q, length, n_lag = UPSAMPLE, res.length, 2 * n_delay + 1
    span = q * (length - 1) + n_lag
    n_fft = 1 << int(np.ceil(np.log2(span)))
    start = q * (frames * res.hop + shift) - n_delay
    segment = x_up[(start[:, None] + xp.arange(span)[None, :]) % n_up]
    kernel = xp.zeros((frames.shape[0], n_fft), dtype=xp.complex64)
    n = xp.arange(length)
    w = xp.asarray(window(length), dtype=xp.float32)
    kernel[:, q * n] = w[None, :] * xp.exp(-2j * np.pi * bins[:, None].astype(xp.float64) * n[None, :] / length)
    corr = xp.fft.ifft(xp.fft.fft(segment, n_fft, axis=1) * xp.conj(xp.fft.fft(xp.conj(kernel), axis=1)), axis=1)
    return (corr[:, :n_lag] * np.float32(np.sqrt(2.0))).astype(xp.complex64)
