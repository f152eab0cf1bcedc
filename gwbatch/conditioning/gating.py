"""Gating of loud glitches in whitened data (PyCBC autogating; gstlal-spiir ``--ht-gate-threshold``).

Whitened samples whose magnitude exceeds the threshold are grouped (peaks closer than a gate
width share one gate); each gate zeroes ``half_width`` on both sides of its peak, with a Tukey
taper of ``taper`` samples outside that.  Gated samples (core and taper) are masked: they produce
no candidates and no livetime.  Every gate is returned so it can be reported.
"""

from __future__ import annotations

import numpy as np

from gwbatch._xp import array_namespace, to_host


def find_gate_peaks(xw, valid, threshold: float, half_width: int) -> tuple[np.ndarray, np.ndarray]:
    """Host indices and magnitudes of gate centres: the loudest sample of each group of exceedances."""
    xp = array_namespace(xw, valid)
    over = to_host(xp.flatnonzero(valid & (xp.abs(xw) > threshold)))
    if over.size == 0:
        return over.astype(np.int64), np.zeros(0)
    mag = to_host(xp.abs(xw[xp.asarray(over)]))
    breaks = np.flatnonzero(np.diff(over) > 2 * half_width) + 1
    best = [(grp[np.argmax(m)], m.max()) for grp, m in zip(np.split(over, breaks), np.split(mag, breaks))]
    return np.array([b[0] for b in best], dtype=np.int64), np.array([b[1] for b in best], dtype=np.float64)


def gate_window(n: int, peaks: np.ndarray, half_width: int, taper: int, xp):
    """Multiplicative window (float64): 0 within ``half_width`` of each peak, Tukey ramps of ``taper``."""
    window = np.ones(n)
    ramp = 0.5 + 0.5 * np.cos(np.pi * np.arange(1, taper + 1) / (taper + 1))  # 1 -> 0
    for p in peaks:
        gate = np.ones(2 * (half_width + taper) + 1)
        gate[taper : taper + 2 * half_width + 1] = 0.0
        gate[:taper] = ramp
        gate[taper + 2 * half_width + 1 :] = ramp[::-1]
        lo = p - half_width - taper
        a, b = max(lo, 0), min(lo + gate.size, n)
        window[a:b] = np.minimum(window[a:b], gate[a - lo : b - lo])
    return xp.asarray(window)


def apply_gating(xw, valid, threshold: float, half_width: int, taper: int):
    """Gate ``xw``; returns ``(gated, valid_after, peaks, peak_values)`` (host arrays for the peaks)."""
    xp = array_namespace(xw, valid)
    peaks, values = find_gate_peaks(xw, valid, threshold, half_width)
    if peaks.size == 0:
        return xw, valid, peaks, values
    window = gate_window(xw.size, peaks, half_width, taper, xp)
    return xw * window, valid & (window == 1.0), peaks, values
