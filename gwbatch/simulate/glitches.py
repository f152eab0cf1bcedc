"""Single-detector glitches for the simulator: blips and sine-Gaussians at a stated rate.

Real detectors record loud non-Gaussian transients in one detector at a time, which a
search's background must absorb (ALGORITHMS.md §6; the calibration in noise with glitches,
tests/test_science.py).  Each detector gets its own Poisson stream of ``rate`` glitches per second,
independent of the others, each either

- a **blip**: a short broadband Gaussian pulse, ``exp(-t^2 / (2 sigma^2))`` with ``sigma`` of
  1-4 ms (the ``gaussian`` transient of :mod:`gwbatch.simulate.injections`), or
- a **sine-Gaussian**: ``exp(-t^2 / tau^2) cos(2 pi f0 t + phi)``, ``tau = Q / (sqrt(2) pi f0)``,
  f0 30-500 Hz and Q 3-20,

at a detector optimal SNR log-uniform in ``snr``.  Glitches are not injections: the store lists
none of them (they are drawn again from the store's seed and this specification, recorded in its
provenance, by :func:`draw_glitches`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from gwbatch.errors import ConfigError
from gwbatch.simulate.injections import add_transient, check_ranges, optimal_snr, support, waveform

#: Glitch kinds and the transient waveform each is drawn as.
KINDS = {"blip": "gaussian", "sine-gaussian": "sine-gaussian"}

#: The most glitches per second per detector a simulation takes (O3's detectors saw about one a minute).
MAX_GLITCH_RATE = 10.0


@dataclass(frozen=True)
class GlitchSpec:
    """Rate (per detector per second) and parameter ranges of the glitches (drawn from the seed)."""

    rate: float
    snr: tuple[float, float] = (6.0, 100.0)  # log-uniform detector optimal SNR
    kinds: tuple[str, ...] = tuple(KINDS)
    sigma: tuple[float, float] = (1e-3, 4e-3)  # blip width (s)
    f0: tuple[float, float] = (30.0, 500.0)  # sine-Gaussian centre frequency (Hz)
    q: tuple[float, float] = (3.0, 20.0)  # sine-Gaussian quality factor
    f_low: float = 20.0  # low edge of the SNR integral (Hz)

    def __post_init__(self) -> None:
        if not 0 <= self.rate <= MAX_GLITCH_RATE:
            raise ConfigError(f"--glitch-rate must be a number of glitches per second in [0, {MAX_GLITCH_RATE:g}], "
                              f"got {self.rate}")
        bad = [k for k in self.kinds if k not in KINDS]
        if bad or not self.kinds:
            raise ConfigError(f"unknown glitch kind(s) {bad}; known: {', '.join(KINDS)}")
        check_ranges(self, ("snr", "sigma", "f0", "q"), "glitch")


def draw_glitches(spec: GlitchSpec, *, seed: int, start: float, duration: float, sample_rate: float,
                  ifos: tuple[str, ...], psds: dict[str, Callable[[np.ndarray], np.ndarray]]) -> pd.DataFrame:
    """The glitches of every detector: ``ifo``, ``gps_time``, ``kind``, ``waveform``, ``sigma``,
    ``f0``, ``q``, ``phase``, ``snr`` and ``amplitude`` (the peak strain giving that SNR)."""
    rows = []
    for j, ifo in enumerate(ifos):
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, 0x611C4, j])))
        count = int(rng.poisson(spec.rate * duration))
        for gps in np.sort(rng.uniform(start, start + duration, count)):
            kind = spec.kinds[rng.integers(len(spec.kinds))]
            form = KINDS[kind]
            shape = ({"sigma": float(rng.uniform(*spec.sigma))} if form == "gaussian" else
                     {"f0": float(rng.uniform(*spec.f0)), "q": float(rng.uniform(*spec.q))})
            phase = float(rng.uniform(0.0, 2.0 * np.pi)) if form == "sine-gaussian" else 0.0
            snr = float(np.exp(rng.uniform(*np.log(spec.snr))))
            half = support(form, **shape)
            t = np.arange(-int(np.ceil(half * sample_rate)), int(np.ceil(half * sample_rate)) + 1) / sample_rate
            padded = np.zeros(max(t.size, int(2 ** np.ceil(np.log2(sample_rate)))))
            padded[: t.size] = waveform(form, t, phase=phase, **shape)
            rows.append({"ifo": ifo, "gps_time": float(gps), "kind": kind, "waveform": form,
                         "sigma": shape.get("sigma", np.nan), "f0": shape.get("f0", np.nan),
                         "q": shape.get("q", np.nan), "phase": phase, "snr": snr,
                         "amplitude": snr / optimal_snr(padded, sample_rate, psds[ifo], spec.f_low)})
    return pd.DataFrame(rows, columns=["ifo", "gps_time", "kind", "waveform", "sigma", "f0", "q", "phase", "snr",
                                       "amplitude"])


def add_glitches(data: np.ndarray, start: int, t0: float, sample_rate: float, ifo: str, table: pd.DataFrame) -> None:
    """Add ``ifo``'s glitches that reach samples ``[start, start + len(data))`` in place."""
    if table is None or table.empty:
        return
    for r in table[table["ifo"] == ifo].itertuples(index=False):
        shape = {k: getattr(r, k) for k in ("sigma", "f0", "q") if np.isfinite(getattr(r, k))}
        add_transient(data, start, (r.gps_time - t0) * sample_rate, sample_rate, r.amplitude, r.waveform, shape,
                      r.phase)
