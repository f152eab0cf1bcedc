"""Rational-rate resampling at ingest: a stated anti-alias filter applied by a polyphase FIR.

A detector recorded at ``rate_in`` (Virgo 20000 Hz, LIGO 16384 Hz) is brought to the analysis
rate ``rate_out`` by :func:`scipy.signal.resample_poly` with ``up/down = rate_out/rate_in`` in
lowest terms and a linear-phase FIR designed here, not the library's default (whose passband
droops well before the new Nyquist frequency):

- Kaiser window (:func:`scipy.signal.kaiserord`), :data:`ATTENUATION_DB` dB in the stopband and the
  same ripple (``10**(-ATTENUATION_DB/20)``) in the passband;
- passband up to :data:`PASSBAND` × the lower of the two Nyquist frequencies, stopband from that
  Nyquist frequency: nothing aliases below the new Nyquist frequency, and the spectrum below
  ``PASSBAND`` × it is kept to within the ripple.

The filter is symmetric with an odd number of taps, so the output has no delay: output sample
``j`` is at the time of input position ``j·down/up``.  Output sample ``j`` depends only on the
input samples within :attr:`Resampler.halo` of that position, so a long series is resampled
exactly in blocks (:meth:`Resampler.block`) and a NaN input sample (a gap) makes NaN exactly the
outputs whose filter reaches it: the filter edges next to a gap are masked, never filled.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
from scipy.signal import firwin, kaiserord, resample_poly

from gwbatch.errors import ConfigError

#: Stopband attenuation and passband ripple of the anti-alias filter (dB).
ATTENUATION_DB = 100.0
#: The passband's edge as a fraction of the lower Nyquist frequency.
PASSBAND = 0.9


def _ratio(rate_in: float, rate_out: float) -> tuple[int, int]:
    """``(up, down)`` in lowest terms with ``rate_out/rate_in = up/down`` (rates must be whole Hz)."""
    r = Fraction(int(rate_out), int(rate_in))
    return r.numerator, r.denominator


#: The longest anti-alias filter a resampler designs (20000 Hz to 4096 Hz takes 80145 taps; a
#: co-prime ratio such as 1024 Hz to 999983 Hz would take 1.3e8 and gigabytes).
MAX_TAPS = 1 << 20


@dataclass(frozen=True, eq=False)
class Resampler:
    """The polyphase resampler from ``rate_in`` to ``rate_out`` (whole Hz).

    ``taps``: the anti-alias FIR at ``rate_in·up`` Hz (unit gain at DC; empty when the rates are
    equal); ``halo``: the input samples on each side an output block needs, a multiple of ``down``.
    """

    rate_in: int
    rate_out: int
    up: int = field(init=False)
    down: int = field(init=False)
    taps: np.ndarray = field(init=False, repr=False)
    halo: int = field(init=False)

    def __post_init__(self) -> None:
        up, down = _ratio(self.rate_in, self.rate_out)
        object.__setattr__(self, "up", up)
        object.__setattr__(self, "down", down)
        if up == down == 1:
            object.__setattr__(self, "taps", np.zeros(0))
            object.__setattr__(self, "halo", 0)
            return
        fs = float(self.rate_in) * up  # the filter runs at the common, upsampled rate
        nyquist = min(self.rate_in, self.rate_out) / 2.0
        numtaps, beta = kaiserord(ATTENUATION_DB, (1.0 - PASSBAND) * nyquist / (fs / 2.0))
        numtaps |= 1  # odd: a whole-sample delay, removed by resample_poly
        if numtaps > MAX_TAPS:
            raise ConfigError(f"resampling {self.rate_in} Hz to {self.rate_out} Hz is a ratio of {up}/{down}, whose "
                              f"anti-alias filter needs {numtaps} taps (at most {MAX_TAPS}); choose a rate in a "
                              f"simpler ratio to {self.rate_in} Hz, such as a power of two")
        taps = firwin(numtaps, (1.0 + PASSBAND) / 2.0 * nyquist, window=("kaiser", beta), fs=fs)
        object.__setattr__(self, "taps", taps)
        reach = math.ceil((numtaps - 1) / 2 / up) + 1  # input samples an output sample touches, each side
        object.__setattr__(self, "halo", -(-reach // down) * down)

    @functools.cached_property
    def _device_taps(self):
        """The taps on the current GPU, copied once per resampler (80145 of them from 20000 Hz)."""
        from gwbatch._xp import get_xp

        return get_xp("cupy").asarray(self.taps)

    def __reduce__(self):
        return Resampler, (self.rate_in, self.rate_out)  # tasks carry two rates, not the taps

    @property
    def identity(self) -> bool:
        return self.up == self.down == 1

    def out_samples(self, n_in: int) -> int:
        """Output samples of ``n_in`` input samples (``n_in`` a multiple of ``down``)."""
        return n_in * self.up // self.down

    def in_position(self, j: int) -> int:
        """The input sample at the time of output sample ``j`` (``j`` a multiple of ``up``)."""
        return j * self.down // self.up

    def block(self, x: np.ndarray, backend: str = "numpy") -> np.ndarray:
        """Resample ``x``, input that holds :attr:`halo` samples on each side of the block it
        stands for; returns the block's output samples only (exactly those of the whole series).
        ``backend`` ``"cupy"``: the same polyphase filter on the GPU
        (:func:`cupyx.scipy.signal.resample_poly`, float64; equal to the CPU's to float64
        rounding), the result back in host memory."""
        if self.identity:
            return np.asarray(x, dtype=np.float64)
        if backend == "cupy":
            from cupyx.scipy.signal import resample_poly as resample_poly_gpu

            from gwbatch._xp import get_xp

            cp = get_xp("cupy")
            y = cp.asnumpy(resample_poly_gpu(cp.asarray(x, dtype=cp.float64), self.up, self.down,
                                             window=self._device_taps))
        else:
            y = resample_poly(np.asarray(x, dtype=np.float64), self.up, self.down, window=self.taps)
        trim = self.out_samples(self.halo)
        return y[trim: y.size - trim] if trim else y

    def describe(self) -> dict:
        """The filter as the store's provenance records it."""
        if self.identity:
            return {"rate_in": self.rate_in, "rate_out": self.rate_out, "filter": "none (same rate)"}
        return {
            "rate_in": self.rate_in, "rate_out": self.rate_out, "up": self.up, "down": self.down,
            "filter": "scipy.signal.resample_poly with a linear-phase Kaiser-window FIR",
            "taps": int(self.taps.size), "attenuation_db": ATTENUATION_DB,
            "passband_hz": PASSBAND * min(self.rate_in, self.rate_out) / 2.0,
            "stopband_hz": min(self.rate_in, self.rate_out) / 2.0,
        }
