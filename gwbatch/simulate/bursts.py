"""Astrophysical burst injections for an unmodelled search: sine-Gaussians and white-noise bursts
at a chosen root-sum-square strain ``hrss``, projected onto each detector.

The waveforms follow the LIGO-Virgo all-sky burst searches (Abadie et al. 2012, PRD 85, 122007;
Abbott et al. 2017, PRD 95, 042003), with ``t`` relative to the peak:

- ``sg-burst`` (elliptically polarised sine-Gaussian, central frequency ``f0``, quality factor ``Q``,
  ``tau = Q / (sqrt(2) pi f0)``, inclination ``iota`` giving the ellipticity, phase ``phi``)::

      h+ = A (1 + cos^2 iota) / 2 exp(-t^2 / tau^2) cos(2 pi f0 t + phi)
      hx = A cos iota             exp(-t^2 / tau^2) sin(2 pi f0 t + phi)

  with ``A`` set analytically so that ``hrss^2 = int (h+^2 + hx^2) dt`` is the drawn value;
- ``wnb`` (white-noise burst): independent white Gaussian noise for ``h+`` and ``hx`` times the
  envelope ``exp(-t^2 / (2 sigma_t^2))``, then band-limited in the frequency domain to
  ``[f_lo, f_lo + bandwidth]`` (flat over the middle 80 %, cosine edges inside the band, so all
  of its energy lies in the band) and scaled to the drawn ``hrss`` on the sampled series.  Its
  ``wnb_duration`` is ``2 sigma_t``.  The noise is drawn from ``SeedSequence([seed, 0xB0, id])``,
  so a row of the table always gives the same strain.

Detector ``j`` records ``F+_j h+ + Fx_j hx`` (antenna patterns at ``polarization`` and the
geocentric peak time ``gps_time``, :mod:`gwbatch.detectors`), peaking at ``time_<ifo>`` = ``gps_time``
plus the detector's delay, to sub-sample precision: a WNB (band-limited) is shifted by a phase
ramp in the frequency domain, as in :mod:`gwbatch.simulate.cbc`; a sine-Gaussian, whose spectrum
can reach the Nyquist frequency, is evaluated at the shifted sample times.  ``snr_<ifo>`` is its
optimal SNR, ``rho^2 = 4 sum |h~|^2 / S df`` over ``[f_low, fs/2)``, and ``snr`` the network SNR
``sqrt(sum_j rho_j^2)``.

Table columns: ``id``, ``waveform``, ``gps_time``, ``ra``, ``dec`` (isotropic), ``polarization``,
``inclination`` (``cos iota`` uniform; unused by ``wnb``), ``phase`` (unused by ``wnb``), ``hrss``,
``f0``, ``q`` (``sg-burst``; NaN for ``wnb``), ``bandwidth``, ``wnb_duration`` (``wnb``; NaN for
``sg-burst``), ``frequency`` (``f0``, or the band centre ``f_lo + bandwidth / 2``), ``duration``,
``seed``, ``time_<ifo>``, ``snr_<ifo>``, ``snr``.  ``duration`` is the tolerance for matching
candidates to the injection (:mod:`gwbatch.candidates.injections`): the half-width of the
interval about the peak that holds 99 % of the Gaussian envelope's energy, at least 0.1 s.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from gwbatch.errors import ConfigError
from gwbatch.simulate.cbc import optimal_snr_fd
from gwbatch.simulate.injections import RANGE_CEILINGS, check_ranges, injection_spacing

#: Spec names of the waveforms and the ``waveform`` column values they get in the table (distinct
#: from the detector-characterisation ``sine-gaussian`` of :mod:`gwbatch.simulate.injections`).
WAVEFORMS = {"sine-gaussian": "sg-burst", "white-noise-burst": "wnb"}
TABLE_WAVEFORMS = tuple(WAVEFORMS.values())
MIN_MATCH_WINDOW = 0.1  # s: the smallest matching tolerance
ENERGY_99 = 2.5758293035489  # a Gaussian holds 99 % of its weight within this many sigma
BAND_TAPER = 0.1  # fraction of a WNB band taken by each cosine edge
_SHAPE = ("waveform", "id", "seed", "hrss", "f0", "q", "phase", "inclination", "bandwidth", "frequency",
          "wnb_duration")
_PLACE = ("ra", "dec", "polarization", "gps_time")


@dataclass(frozen=True)
class BurstSpec:
    """How many bursts to inject and from which parameters (all drawn from the store's seed)."""

    count: int
    hrss: tuple[float, float] = (5e-23, 1e-21)  # root-sum-square strain, log-uniform
    waveforms: tuple[str, ...] = tuple(WAVEFORMS)
    f0: tuple[float, ...] = (70.0, 235.0, 554.0)  # sine-Gaussian central frequencies (Hz), one chosen
    q: tuple[float, ...] = (3.0, 9.0)  # sine-Gaussian quality factors, one chosen
    # white-noise-burst presets (f_lo Hz, bandwidth Hz, duration s), one chosen
    wnb: tuple[tuple[float, float, float], ...] = ((100.0, 100.0, 0.1), (250.0, 100.0, 0.1))
    f_low: float = 20.0  # Hz: low edge of the SNR integral
    margin: float = 8.0  # seconds kept free at each end of the data
    min_spacing: float = 10.0  # seconds between consecutive injections

    def __post_init__(self) -> None:
        bad = [w for w in self.waveforms if w not in WAVEFORMS]
        if bad or not self.waveforms:
            raise ConfigError(f"unknown burst injection waveform(s) {bad or list(self.waveforms)}; "
                              f"known: {', '.join(WAVEFORMS)}")
        if self.count < 0:
            raise ConfigError(f"burst injection count must be >= 0, got {self.count}")
        check_ranges(self, ("hrss",), "burst injection")
        for name in ("f0", "q"):
            values = getattr(self, name)
            top = RANGE_CEILINGS[name]
            if not values or not all(0 < v <= top for v in values):
                raise ConfigError(f"burst injection {name} must be one or more values in (0, {top:g}], got {list(values)}")
        if not self.wnb or not all(len(p) == 3 and all(v > 0 for v in p) for p in self.wnb):
            raise ConfigError(f"burst injection wnb presets must be (f_low, bandwidth, duration) triples of positive "
                              f"values, got {[tuple(p) for p in self.wnb]}")
        if not 0 < self.f_low <= RANGE_CEILINGS["f0"]:
            raise ConfigError(f"burst injection f_low must be positive, got {self.f_low}")
        if not 0 <= self.margin < float("inf") or not 0 < self.min_spacing < float("inf"):
            raise ConfigError(f"burst injection margin must be >= 0 and min_spacing > 0, "
                              f"got {self.margin}, {self.min_spacing}")

    def check_sample_rate(self, sample_rate: float) -> None:
        """ConfigError unless every waveform that can be drawn lies below the Nyquist frequency."""
        nyquist = sample_rate / 2.0
        if "sine-gaussian" in self.waveforms and max(self.f0) >= nyquist:
            raise ConfigError(f"burst injection f0 {max(self.f0):g} Hz is not below the Nyquist frequency "
                              f"{nyquist:g} Hz of {sample_rate:g} Hz data")
        if "white-noise-burst" in self.waveforms:
            top = max(p[0] + p[1] for p in self.wnb)
            if top > nyquist:
                raise ConfigError(f"burst injection WNB band up to {top:g} Hz exceeds the Nyquist frequency "
                                  f"{nyquist:g} Hz of {sample_rate:g} Hz data")


def sg_tau(f0: float, q: float) -> float:
    """Sine-Gaussian envelope time ``tau = Q / (sqrt(2) pi f0)`` (s) (Abadie et al. 2012)."""
    return q / (np.sqrt(2.0) * np.pi * f0)


def sg_amplitude(hrss: float, f0: float, q: float, inclination: float, phase: float) -> float:
    """``A`` of the elliptical sine-Gaussian with root-sum-square strain ``hrss``:
    ``int e^{-2t^2/tau^2} cos^2(2 pi f0 t + phi) dt = (tau/2) sqrt(pi/2) (1 + cos 2phi e^{-Q^2})``
    (and ``1 - ...`` for ``sin^2``)."""
    ci = np.cos(inclination)
    base = 0.5 * sg_tau(f0, q) * np.sqrt(np.pi / 2.0)
    beat = np.cos(2.0 * phase) * np.exp(-q * q)
    energy = base * (((1.0 + ci * ci) / 2.0) ** 2 * (1.0 + beat) + ci * ci * (1.0 - beat))
    return float(hrss / np.sqrt(energy))


def match_tolerance(row: dict) -> float:
    """Seconds about the peak holding 99 % of the envelope's energy, at least ``MIN_MATCH_WINDOW``.

    Energy envelopes: ``exp(-2t^2/tau^2)`` (sigma ``tau/2``) for a sine-Gaussian,
    ``exp(-t^2/sigma_t^2)`` (sigma ``sigma_t/sqrt 2``) for a WNB."""
    if row["waveform"] == "sg-burst":
        sigma = sg_tau(row["f0"], row["q"]) / 2.0
    else:
        sigma = row["wnb_duration"] / 2.0 / np.sqrt(2.0)
    return max(MIN_MATCH_WINDOW, ENERGY_99 * sigma)


def buffer_length(row: dict, sample_rate: float) -> int:
    """Samples (a power of two) of the buffer holding the burst, peak at sample ``n // 2``: the
    envelope to ``e^{-32}`` or beyond, at least 1 s, and a WNB band at least 16 bins wide."""
    if row["waveform"] == "sg-burst":
        seconds = max(1.0, 12.0 * sg_tau(row["f0"], row["q"]) + 0.5)
    else:
        seconds = max(1.0, 8.0 * row["wnb_duration"] + 1.0, 16.0 / row["bandwidth"])
    return 1 << int(np.ceil(np.log2(seconds * sample_rate)))


def band_window(f: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """1 over the middle of ``[lo, hi]``, cosine edges ``BAND_TAPER (hi - lo)`` wide inside it, 0 outside."""
    w = BAND_TAPER * (hi - lo)
    rise = np.clip((f - lo) / w, 0.0, 1.0)
    fall = np.clip((hi - f) / w, 0.0, 1.0)
    return 0.25 * (1.0 - np.cos(np.pi * rise)) * (1.0 - np.cos(np.pi * fall))


def _key(row: dict, names: tuple[str, ...]) -> tuple:
    def plain(v):
        if v is None or isinstance(v, str):
            return v
        v = float(v)
        return None if np.isnan(v) else v

    return tuple((k, plain(row[k])) for k in names)


def sg_polarisations(row: dict, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(h+, hx)`` of the elliptical sine-Gaussian of ``row`` at times ``t`` (s from the peak)."""
    amp = sg_amplitude(row["hrss"], row["f0"], row["q"], row["inclination"], row["phase"])
    ci = np.cos(row["inclination"])
    env = amp * np.exp(-((t / sg_tau(row["f0"], row["q"])) ** 2))
    arg = 2.0 * np.pi * row["f0"] * t + row["phase"]
    return env * (1.0 + ci * ci) / 2.0 * np.cos(arg), env * ci * np.sin(arg)


def wnb_polarisations(row: dict, sample_rate: float) -> tuple[np.ndarray, np.ndarray]:
    """``(h+, hx)`` of the white-noise burst of ``row`` on its buffer (peak at sample ``n // 2``)."""
    n = buffer_length(row, sample_rate)
    t = (np.arange(n) - n // 2) / sample_rate
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(row["seed"]), 0xB0, int(row["id"])])))
    noise = rng.standard_normal((2, n)) * np.exp(-0.5 * (t / (row["wnb_duration"] / 2.0)) ** 2)
    lo = row["frequency"] - row["bandwidth"] / 2.0
    window = band_window(np.fft.rfftfreq(n, 1.0 / sample_rate), lo, lo + row["bandwidth"])
    hp, hc = np.fft.irfft(np.fft.rfft(noise, axis=1) * window, n, axis=1)
    scale = row["hrss"] / np.sqrt(np.sum(hp * hp + hc * hc) / sample_rate)
    return hp * scale, hc * scale


@functools.lru_cache(maxsize=64)
def _polarisations_cached(key: tuple, sample_rate: float) -> tuple[np.ndarray, np.ndarray]:
    row = dict(key)
    if row["waveform"] == "sg-burst":
        n = buffer_length(row, sample_rate)
        hp, hc = sg_polarisations(row, (np.arange(n) - n // 2) / sample_rate)
    else:
        hp, hc = wnb_polarisations(row, sample_rate)
    hp.setflags(write=False)
    hc.setflags(write=False)
    return hp, hc


def burst_polarisations(row: dict, sample_rate: float) -> tuple[np.ndarray, np.ndarray]:
    """``(h+, hx)`` sampled at ``sample_rate`` on a buffer of :func:`buffer_length` samples with the
    peak at sample ``n // 2`` (read-only arrays)."""
    return _polarisations_cached(_key(row, _SHAPE), float(sample_rate))


def _projected(row: dict, ifo: str, sample_rate: float, frac: float = 0.0) -> np.ndarray:
    """``F+ h+ + Fx hx`` in ``ifo`` on the buffer, peak at sample ``n // 2 + frac`` (``0 <= frac < 1``).

    A sine-Gaussian is evaluated at the shifted times; a WNB, band-limited below the Nyquist
    frequency, is shifted by a phase ramp in the frequency domain.  (A phase ramp on a sampled
    sine-Gaussian with power near Nyquist, e.g. 554 Hz and Q = 3 at 2048 Hz, rings through the
    buffer at ~1 % of the peak.)"""
    from gwbatch.detectors import antenna_pattern

    fp, fc = antenna_pattern(ifo, row["ra"], row["dec"], row["polarization"], row["gps_time"])
    if row["waveform"] == "sg-burst" and frac:
        n = buffer_length(row, sample_rate)
        hp, hc = sg_polarisations(row, (np.arange(n) - n // 2 - frac) / sample_rate)
        return fp * hp + fc * hc
    hp, hc = burst_polarisations(row, sample_rate)
    x = fp * hp + fc * hc
    if frac:
        f = np.fft.rfftfreq(x.size, 1.0 / sample_rate)
        x = np.fft.irfft(np.fft.rfft(x) * np.exp(-2j * np.pi * f * frac / sample_rate), x.size)
    return x


def draw_burst_injections(
    spec: BurstSpec,
    *,
    seed: int,
    start: float,
    duration: float,
    sample_rate: float,
    ifos: tuple[str, ...],
    psds: dict[str, Callable[[np.ndarray], np.ndarray]],
    delay: Callable[[str, float, float, float], float],
    first_id: int = 0,
) -> pd.DataFrame:
    """Draw the burst injection table (see the module docstring for the columns).

    Every row draws every parameter, used or not, so the stream does not depend on the waveforms.
    """
    if spec.count == 0:
        return pd.DataFrame()
    spec.check_sample_rate(sample_rate)
    if not 0 <= seed < 2**53:
        raise ConfigError(f"burst injections need a seed in [0, 2**53) (kept exactly in the float64 table), "
                          f"got {seed}")
    spacing = injection_spacing(spec.count, duration - 2.0 * spec.margin, spec.min_spacing,
                                f"{spec.count} burst injections do not fit in {duration} s with {spec.margin} s "
                                f"margins and {spec.min_spacing} s spacing")
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, 0xB057])))
    rows = []
    for k in range(spec.count):
        kind = WAVEFORMS[spec.waveforms[rng.integers(len(spec.waveforms))]]
        row = {
            "id": first_id + k,
            "waveform": kind,
            "gps_time": start + spec.margin + (k + 0.5 + rng.uniform(-0.3, 0.3)) * spacing,
            "ra": float(rng.uniform(0.0, 2.0 * np.pi)),
            "dec": float(np.arcsin(rng.uniform(-1.0, 1.0))),
            "polarization": float(rng.uniform(0.0, np.pi)),
            "inclination": float(np.arccos(rng.uniform(-1.0, 1.0))),
            "phase": float(rng.uniform(0.0, 2.0 * np.pi)),
            "hrss": float(np.exp(rng.uniform(np.log(spec.hrss[0]), np.log(spec.hrss[1])))),
        }
        f0, q = float(spec.f0[rng.integers(len(spec.f0))]), float(spec.q[rng.integers(len(spec.q))])
        f_lo, bandwidth, wnb_duration = (float(v) for v in spec.wnb[rng.integers(len(spec.wnb))])
        sg = kind == "sg-burst"
        row.update({
            "f0": f0 if sg else np.nan,
            "q": q if sg else np.nan,
            "bandwidth": np.nan if sg else bandwidth,
            "wnb_duration": np.nan if sg else wnb_duration,
            "frequency": f0 if sg else f_lo + bandwidth / 2.0,
            "seed": int(seed),
        })
        row["duration"] = match_tolerance(row)
        rho2 = 0.0
        for ifo in ifos:
            x = _projected(row, ifo, sample_rate)
            f = np.fft.rfftfreq(x.size, 1.0 / sample_rate)
            rho = optimal_snr_fd(f, np.fft.rfft(x) / sample_rate, psds[ifo], spec.f_low)
            row[f"time_{ifo}"] = row["gps_time"] + delay(ifo, row["ra"], row["dec"], row["gps_time"])
            row[f"snr_{ifo}"] = rho
            rho2 += rho * rho
        row["snr"] = float(np.sqrt(rho2))
        rows.append(row)
    return pd.DataFrame(rows)


@functools.lru_cache(maxsize=16)
def _strain_cached(key: tuple, ifo: str, t0: float, sample_rate: float) -> tuple[int, np.ndarray]:
    row = dict(key)
    arrival = (row[f"time_{ifo}"] - t0) * sample_rate  # fractional sample index of the peak
    x = _projected(row, ifo, sample_rate, float(arrival - np.floor(arrival)))
    x.setflags(write=False)
    return int(np.floor(arrival)) - x.size // 2, x


def burst_strain(row: dict, ifo: str, t0: float, sample_rate: float) -> tuple[int, np.ndarray]:
    """The injection's strain in ``ifo``: ``(first sample index in the store, samples)``."""
    key = _key(row, _SHAPE + _PLACE + (f"time_{ifo}",))
    return _strain_cached(key, ifo, float(t0), float(sample_rate))


def add_bursts(data: np.ndarray, start: int, t0: float, sample_rate: float, ifo: str, row: dict) -> None:
    """Add the part of ``row``'s burst that falls in samples ``[start, start + len(data))``."""
    first, x = burst_strain(row, ifo, t0, sample_rate)
    lo, hi = max(start, first), min(start + data.size, first + x.size)
    if hi > lo:
        data[lo - start : hi - start] += x[lo - first : hi - first]
