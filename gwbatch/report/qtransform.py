"""The constant-Q transform of whitened data, for the report's per-candidate Q-scans.

The Q transform of Chatterjee, Shawhan et al. (S. Chatterjee, "The search for gravitational wave bursts
in data from the second LIGO science run", PhD thesis, MIT 2005; the Omega pipeline; also Chatterjee et
al., Class. Quantum Grav. 21 S1809, 2004), as gwpy implements it:

- **Tiling**: Q planes logarithmic in ``Q`` over ``qrange``; in each plane, rows logarithmic in
  frequency, and in each row tiles uniform in time, so that neighbouring tiles mismatch by at most
  ``mismatch`` (``deltam = 2 sqrt(mismatch / 3)``).
- **Row at (Q, f)**: the data's spectrum around ``f`` times a bisquare window
  ``(1 - x^2)^2``, ``x = (f' - f) Q' / f`` with ``Q' = Q / sqrt(11)``; its inverse FFT over the
  row's tiles (a power of two) gives a complex envelope whose squared magnitude is the tile energy.
- **Normalised energy**: each row's energy divided by its mean, estimated robustly as the median over
  the row divided by ln 2 (tile energies of Gaussian noise are exponentially distributed), so that
  noise has mean 1 whatever the whitening's scale.

The plane holding the loudest tile within the search window is kept, and interpolated onto a regular
grid (linear in time, linear in log frequency) for drawing.  Pure NumPy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

QRANGE = (4.0, 64.0)
MISMATCH = 0.2
QPRIME_FACTOR = math.sqrt(11.0)  # Q' = Q / sqrt(11): the bisquare window's half width is f / Q'


@dataclass(frozen=True)
class QScan:
    """The plane of the loudest tile: normalised ``energy`` ``(F, T)`` on ``times`` (s from the data's
    first sample) and log-spaced ``frequencies`` (Hz), its ``q``, and the loudest tile's time, frequency
    and normalised energy (raw tiles, not the interpolated grid)."""

    q: float
    times: np.ndarray
    frequencies: np.ndarray
    energy: np.ndarray
    peak_time: float
    peak_frequency: float
    peak_energy: float


def mismatch_step(mismatch: float) -> float:
    """``deltam``: the step, in the tiling's cumulative mismatch metric, between neighbouring tiles."""
    return 2.0 * math.sqrt(mismatch / 3.0)


def q_values(qrange: tuple[float, float] = QRANGE, mismatch: float = MISMATCH) -> np.ndarray:
    """The planes' Q, logarithmically spaced over ``qrange``."""
    cumulative = math.log(qrange[1] / qrange[0]) / math.sqrt(2.0)
    n = max(math.ceil(cumulative / mismatch_step(mismatch)), 1)
    return qrange[0] * np.exp(math.sqrt(2.0) * cumulative / n * (np.arange(n) + 0.5))


def frequency_range(qs: np.ndarray, frange: tuple[float, float], duration: float,
                    sample_rate: float) -> tuple[float, float]:
    """``frange`` with a zero lower end raised to ``50 max(Q) / (2 pi duration)`` and the upper end at most
    the highest frequency whose window stays below Nyquist, ``fs / 2 / (1 + sqrt(11) / min(Q))``."""
    low = float(frange[0]) or 50.0 * float(np.max(qs)) / (2.0 * math.pi * duration)
    high = min(float(frange[1]), sample_rate / 2.0 / (1.0 + QPRIME_FACTOR / float(np.min(qs))))
    if not low < high:
        raise ValueError(f"no frequency in [{low:g}, {high:g}] Hz can be tiled for {duration:g} s at {sample_rate:g} Hz")
    return low, high


def row_frequencies(q: float, frange: tuple[float, float], duration: float, mismatch: float = MISMATCH) -> np.ndarray:
    """The rows of one plane: logarithmic over ``frange``, on the data's frequency grid (1 / duration)."""
    low, high = frange
    cumulative = math.log(high / low) * math.sqrt(2.0 + q * q) / 2.0
    n = max(math.ceil(cumulative / mismatch_step(mismatch)), 1)
    f = low * np.exp(2.0 / math.sqrt(2.0 + q * q) * (np.arange(n) + 0.5) * cumulative / n)
    return np.unique(np.floor(f * duration) / duration)


def row_energy(spectrum: np.ndarray, q: float, frequency: float, duration: float,
               mismatch: float = MISMATCH) -> np.ndarray:
    """Normalised tile energies of the row at ``(q, frequency)``, over the data's span (``spectrum``: the
    data's ``rfft``); tile ``j`` is centred on ``j duration / n`` with ``n`` the row's tiles."""
    qprime = q / QPRIME_FACTOR
    half = int(frequency / qprime * duration)
    offsets = np.arange(-half, half + 1)
    x = offsets * qprime / (frequency * duration)
    window = (1.0 - x * x) ** 2
    n_tiles = 1 << max(math.ceil(math.log2(duration * 2.0 * math.pi * frequency / q / mismatch_step(mismatch))), 0)
    n_tiles = max(n_tiles, 2 * half + 1)
    envelope = np.zeros(n_tiles, dtype=np.complex128)
    envelope[offsets % n_tiles] = spectrum[int(round(frequency * duration)) + offsets] * window
    energy = np.abs(np.fft.ifft(envelope)) ** 2
    median = float(np.median(energy))
    return energy * (math.log(2.0) / median) if median > 0 else np.zeros_like(energy)


def q_transform(data, sample_rate: float, *, qrange: tuple[float, float] = QRANGE,
                frange: tuple[float, float] = (0.0, math.inf), mismatch: float = MISMATCH,
                search: tuple[float, float] | None = None, outseg: tuple[float, float] | None = None,
                n_times: int = 400, n_frequencies: int = 200) -> QScan:
    """The Q transform of whitened ``data`` (module docstring).  ``search``: the window (s from the first
    sample) in which the loudest tile is looked for (default all); ``outseg``: the window drawn
    (default the search window), on ``n_times`` times and ``n_frequencies`` log-spaced frequencies."""
    data = np.asarray(data, dtype=np.float64)
    duration = data.size / float(sample_rate)
    search = (0.0, duration) if search is None else (max(search[0], 0.0), min(search[1], duration))
    outseg = search if outseg is None else outseg
    qs = q_values(qrange, mismatch)
    band = frequency_range(qs, frange, duration, sample_rate)
    spectrum = np.fft.rfft(data)
    best = None
    for q in qs:
        freqs = row_frequencies(float(q), band, duration, mismatch)
        rows = [row_energy(spectrum, float(q), float(f), duration, mismatch) for f in freqs]
        peak = _plane_peak(rows, freqs, duration, search)
        if best is None or peak[2] > best[2][2]:
            best = (float(q), freqs, peak, rows)
    q, freqs, (t_peak, f_peak, e_peak), rows = best
    times = np.linspace(outseg[0], outseg[1], n_times)
    grid = np.geomspace(freqs[0], freqs[-1], n_frequencies) if freqs.size > 1 else freqs.copy()
    energy = _on_grid(rows, freqs, duration, times, grid)
    return QScan(q, times, grid, energy, t_peak, f_peak, e_peak)


def _plane_peak(rows: list[np.ndarray], freqs: np.ndarray, duration: float,
                search: tuple[float, float]) -> tuple[float, float, float]:
    """``(time, frequency, energy)`` of the loudest tile of a plane whose centre lies in ``search``."""
    best = (math.nan, math.nan, -math.inf)
    for f, energy in zip(freqs, rows):
        t = np.arange(energy.size) * (duration / energy.size)
        inside = np.flatnonzero((t >= search[0]) & (t <= search[1]))
        if inside.size:
            j = inside[np.argmax(energy[inside])]
            if energy[j] > best[2]:
                best = (float(t[j]), float(f), float(energy[j]))
    return best


def _on_grid(rows: list[np.ndarray], freqs: np.ndarray, duration: float, times: np.ndarray,
             grid: np.ndarray) -> np.ndarray:
    """Each row's energy at ``times`` (linear, circular), then across rows at ``grid`` (linear in log f)."""
    at_times = np.stack([np.interp(times, np.arange(e.size + 1) * (duration / e.size), np.r_[e, e[0]])
                         for e in rows])
    if freqs.size == 1:
        return at_times
    logf, log_grid = np.log(freqs), np.log(grid)
    i = np.clip(np.searchsorted(logf, log_grid) - 1, 0, freqs.size - 2)
    w = np.clip((log_grid - logf[i]) / (logf[i + 1] - logf[i]), 0.0, 1.0)[:, None]
    return (1.0 - w) * at_times[i] + w * at_times[i + 1]
