"""Stationary Gaussian noise with a given one-sided PSD, generated one span at a time.

White noise comes from a counter-based stream: block ``b`` of ``BLOCK`` samples of stream ``s``
is drawn from ``SeedSequence([seed, s, b])``, so any span can be generated alone and every sample
depends only on (seed, stream, index).  It is coloured by a causal FIR filter whose response is
``sqrt(S(f) fs / 2)`` (white unit-variance noise has one-sided PSD 2/fs), truncated to
``filter_duration`` seconds with a Hann window; spans are filtered overlap-save style, so a day of
data never needs to be in memory at once and the result does not depend on how it is split.
"""

from __future__ import annotations

import zlib
from typing import Callable

import numpy as np
from scipy.signal import fftconvolve

BLOCK = 1 << 16
_BLOCK_OFFSET = 1 << 40  # block indices may be negative (filter warm-up before sample 0)


def stream_id(name: str) -> int:
    """A stable stream number per detector name, so adding a detector leaves the others unchanged."""
    return zlib.crc32(name.encode())


def white_noise(seed: int, stream: int, start: int, stop: int) -> np.ndarray:
    """Unit-variance white Gaussian samples ``[start, stop)`` of one stream (float64)."""
    first, last = start // BLOCK, (stop - 1) // BLOCK
    blocks = [
        np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, stream, b + _BLOCK_OFFSET]))).standard_normal(BLOCK)
        for b in range(first, last + 1)
    ]
    data = np.concatenate(blocks)
    return data[start - first * BLOCK : stop - first * BLOCK]


def colouring_filter(psd: Callable[[np.ndarray], np.ndarray], sample_rate: float, filter_duration: float = 8.0) -> np.ndarray:
    """Causal FIR taps (float64) whose response approximates ``sqrt(S(f) fs / 2)``."""
    n = int(round(filter_duration * sample_rate)) // 2 * 2
    f = np.fft.rfftfreq(n, 1.0 / sample_rate)
    response = np.sqrt(psd(f) * sample_rate / 2.0)
    response[0] = 0.0  # no DC offset
    taps = np.fft.irfft(response, n=n)
    return np.roll(taps, n // 2) * np.hanning(n)


def coloured_noise(seed: int, stream: int, start: int, stop: int, taps: np.ndarray) -> np.ndarray:
    """Samples ``[start, stop)`` of white noise filtered by ``taps`` (float64)."""
    white = white_noise(seed, stream, start - (taps.size - 1), stop)
    return fftconvolve(white, taps, mode="valid")
