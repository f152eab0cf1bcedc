"""Short-transient injections: Gaussian pulses and sine-Gaussians at chosen SNRs.

Waveforms (unit peak amplitude, ``t`` relative to the arrival time):

- ``gaussian``: ``h = exp(-t^2 / (2 sigma^2))``;
- ``sine-gaussian``: ``h = exp(-t^2 / tau^2) cos(2 pi f0 t + phi)`` with ``tau = Q / (sqrt(2) pi f0)``
  (the burst-search convention, e.g. Abadie et al. 2012, PRD 85, 122007).

Each injection has a geocentric time and a sky position; it arrives in each detector at the
geocentric time plus that detector's delay.  Its amplitude is set separately in each detector so
that the detector's optimal SNR, ``rho^2 = 4 sum |h~(f)|^2 / S(f) df`` over ``[f_low, fs/2)``,
equals the injection's ``snr`` (detector-characterisation style: the same SNR everywhere, so
every detector can see it; compact binaries, with antenna patterns, are in
:mod:`gwbatch.simulate.cbc`, astrophysical bursts at a chosen hrss in
:mod:`gwbatch.simulate.bursts`).  The table records per detector the arrival time and the SNR
actually computed.

``duration`` is the full width at half maximum of the energy envelope ``|h|^2``: the tolerance
used when matching candidates to injections.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from gwbatch.errors import ConfigError

WAVEFORMS = ("gaussian", "sine-gaussian")


#: The largest value a simulator range may reach, per field: far beyond any physical use, and
#: below where the waveform arithmetic overflows (masses of 1e308 Msun, SNRs of 1e308).
RANGE_CEILINGS = {"snr": 1e4, "sigma": 1e3, "f0": 1e6, "q": 1e3, "mass1": 1e3, "mass2": 1e3, "hrss": 1e-15,
                  "distance": 1e5}


def check_ranges(spec, names, what: str) -> None:
    """Refuse a simulator spec whose ``(min, max)`` fields ``names`` are not ``0 < min <= max <=``
    the field's :data:`RANGE_CEILINGS` (``what`` names the spec in the message)."""
    for name in names:
        lo, hi = getattr(spec, name)
        top = RANGE_CEILINGS[name]
        if not 0 < lo <= hi <= top:
            raise ConfigError(f"{what} {name} range must satisfy 0 < min <= max <= {top:g}, got {lo}, {hi}")


def check_spacing(spec, what: str) -> None:
    """Refuse a spec whose ``min_spacing`` (s) is not a finite number >= 0."""
    if not 0 <= spec.min_spacing < float("inf"):
        raise ConfigError(f"{what} spacing must be a finite number of seconds >= 0, got {spec.min_spacing}")
_LN2 = np.log(2.0)


@dataclass(frozen=True)
class InjectionSpec:
    """How many transients to inject and from which parameter ranges (all drawn from ``seed``)."""

    count: int
    snr: tuple[float, float] = (8.0, 40.0)  # log-uniform per-detector optimal SNR
    waveforms: tuple[str, ...] = WAVEFORMS
    sigma: tuple[float, float] = (0.5e-3, 2e-3)  # Gaussian width (s)
    f0: tuple[float, float] = (200.0, 500.0)  # sine-Gaussian centre frequency (Hz)
    q: tuple[float, float] = (2.0, 5.0)  # sine-Gaussian quality factor
    f_low: float = 20.0  # low edge of the SNR integral (Hz)
    margin: float = 8.0  # seconds kept free at each end of the data
    min_spacing: float = 2.0  # seconds between consecutive injections

    def __post_init__(self) -> None:
        bad = [w for w in self.waveforms if w not in WAVEFORMS]
        if bad or not self.waveforms:
            raise ConfigError(f"unknown injection waveform(s) {bad}; known: {', '.join(WAVEFORMS)}")
        check_ranges(self, ("snr", "sigma", "f0", "q"), "injection")
        check_spacing(self, "--injection-spacing: injection")
        if self.count < 0:
            raise ConfigError(f"injection count must be >= 0, got {self.count}")


def waveform(kind: str, t: np.ndarray, *, sigma: float = 0.0, f0: float = 0.0, q: float = 0.0, phase: float = 0.0) -> np.ndarray:
    """Unit-amplitude waveform ``kind`` at times ``t`` (s, relative to arrival)."""
    if kind == "gaussian":
        return np.exp(-0.5 * (t / sigma) ** 2)
    if kind == "sine-gaussian":
        tau = q / (np.sqrt(2.0) * np.pi * f0)
        return np.exp(-((t / tau) ** 2)) * np.cos(2.0 * np.pi * f0 * t + phase)
    raise ConfigError(f"unknown waveform {kind!r}; known: {', '.join(WAVEFORMS)}")


def envelope_scale(kind: str, *, sigma: float = 0.0, f0: float = 0.0, q: float = 0.0) -> float:
    """The envelope's width parameter (s): sigma for a Gaussian, tau for a sine-Gaussian."""
    return sigma if kind == "gaussian" else q / (np.sqrt(2.0) * np.pi * f0)


def energy_fwhm(kind: str, **params: float) -> float:
    """Full width at half maximum of ``|h|^2`` (s)."""
    scale = envelope_scale(kind, **params)
    return 2.0 * scale * np.sqrt(_LN2) if kind == "gaussian" else scale * np.sqrt(2.0 * _LN2)


def optimal_snr(h: np.ndarray, sample_rate: float, psd: Callable[[np.ndarray], np.ndarray], f_low: float) -> float:
    """``sqrt(4 sum_{f >= f_low} |h~|^2 / S df)`` for a sampled waveform ``h`` (strain)."""
    n = h.size
    hf = np.fft.rfft(h) / sample_rate
    f = np.fft.rfftfreq(n, 1.0 / sample_rate)
    band = (f >= f_low) & (f < sample_rate / 2.0)
    df = sample_rate / n
    return float(np.sqrt(4.0 * df * np.sum(np.abs(hf[band]) ** 2 / psd(f[band]))))


def support(kind: str, **params: float) -> float:
    """Half-length (s) outside which the waveform is below 1e-7 of its peak."""
    scale = envelope_scale(kind, **params)
    return (5.7 if kind == "gaussian" else 4.1) * scale


def injection_spacing(count: int, usable: float, min_spacing: float, refusal: str) -> float:
    """Seconds between ``count`` injections spread over ``usable`` seconds, or a ConfigError
    (``refusal``, then what to change) when that is less than ``min_spacing``."""
    spacing = usable / count if usable > 0 else 0.0
    if spacing < min_spacing:
        raise ConfigError(f"{refusal}; use fewer injections or more data")
    return spacing


def draw_injections(
    spec: InjectionSpec,
    *,
    seed: int,
    start: float,
    duration: float,
    sample_rate: float,
    ifos: tuple[str, ...],
    psds: dict[str, Callable[[np.ndarray], np.ndarray]],
    delay: Callable[[str, float, float, float], float],
) -> pd.DataFrame:
    """Draw the injection table.

    ``delay(ifo, ra, dec, gps)`` gives each detector's arrival-time offset from the geocentre;
    ``psds[ifo]`` the detector's PSD, used to set the amplitude for the requested SNR.
    """
    if spec.count == 0:
        return pd.DataFrame()
    spacing = injection_spacing(spec.count, duration - 2.0 * spec.margin, spec.min_spacing,
                                f"{spec.count} injections do not fit in {duration} s with {spec.margin} s margins "
                                f"and {spec.min_spacing} s spacing")
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, 0x1A1EC7])))
    rows = []
    for k in range(spec.count):
        kind = spec.waveforms[rng.integers(len(spec.waveforms))]
        params = {
            "sigma": float(rng.uniform(*spec.sigma)) if kind == "gaussian" else np.nan,
            "f0": float(rng.uniform(*spec.f0)) if kind == "sine-gaussian" else np.nan,
            "q": float(rng.uniform(*spec.q)) if kind == "sine-gaussian" else np.nan,
        }
        shape = {k_: v for k_, v in params.items() if np.isfinite(v)}
        row = {
            "id": k,
            "waveform": kind,
            "gps_time": start + spec.margin + (k + 0.5 + rng.uniform(-0.3, 0.3)) * spacing,
            "ra": float(rng.uniform(0.0, 2.0 * np.pi)),
            "dec": float(np.arcsin(rng.uniform(-1.0, 1.0))),
            "phase": float(rng.uniform(0.0, 2.0 * np.pi)) if kind == "sine-gaussian" else 0.0,
            **params,
            "duration": energy_fwhm(kind, **shape),
            "snr": float(np.exp(rng.uniform(np.log(spec.snr[0]), np.log(spec.snr[1])))),
        }
        half = support(kind, **shape)
        t = np.arange(-int(np.ceil(half * sample_rate)), int(np.ceil(half * sample_rate)) + 1) / sample_rate
        unit = waveform(kind, t, phase=row["phase"], **shape)
        # Zero-pad to >= 1 s so the SNR integral resolves frequencies down to f_low.
        padded = np.zeros(max(unit.size, int(2 ** np.ceil(np.log2(sample_rate)))))
        padded[: unit.size] = unit
        for ifo in ifos:
            rho_unit = optimal_snr(padded, sample_rate, psds[ifo], spec.f_low)
            row[f"time_{ifo}"] = row["gps_time"] + delay(ifo, row["ra"], row["dec"], row["gps_time"])
            row[f"amplitude_{ifo}"] = row["snr"] / rho_unit
            row[f"snr_{ifo}"] = row["snr"]
        rows.append(row)
    return pd.DataFrame(rows)


def add_injections(data: np.ndarray, start: int, t0: float, sample_rate: float, ifo: str, table: pd.DataFrame) -> None:
    """Add every injection of ``table`` that overlaps samples ``[start, start + len(data))`` in place.

    ``t0`` is the GPS time of sample 0 of the store; times are evaluated exactly at each sample,
    so sub-sample arrival times are kept.  Compact binaries (``waveform == "cbc"``) and bursts
    (``"sg-burst"``, ``"wnb"``) are added by :mod:`gwbatch.simulate.cbc` and :mod:`gwbatch.simulate.bursts`.
    """
    if table is None or table.empty:
        return
    from gwbatch.simulate.bursts import TABLE_WAVEFORMS, add_bursts
    from gwbatch.simulate.cbc import add_cbc

    for row in table.itertuples(index=False):
        r = row._asdict()
        if r["waveform"] == "cbc":
            add_cbc(data, start, t0, sample_rate, ifo, r)
            continue
        if r["waveform"] in TABLE_WAVEFORMS:
            add_bursts(data, start, t0, sample_rate, ifo, r)
            continue
        shape = {k: r[k] for k in ("sigma", "f0", "q") if np.isfinite(r[k])}
        add_transient(data, start, (r[f"time_{ifo}"] - t0) * sample_rate, sample_rate, r[f"amplitude_{ifo}"],
                      r["waveform"], shape, r["phase"])


def add_transient(data: np.ndarray, start: int, arrival: float, sample_rate: float, amplitude: float, kind: str,
                  shape: dict, phase: float) -> None:
    """Add ``amplitude`` times transient ``kind`` (``shape``, ``phase``) arriving at fractional sample
    ``arrival`` to ``data``, which holds samples ``[start, start + len(data))``, in place."""
    half = support(kind, **shape) * sample_rate
    lo, hi = max(start, int(np.floor(arrival - half))), min(start + data.size, int(np.ceil(arrival + half)) + 1)
    if hi <= lo:
        return
    t = (np.arange(lo, hi) - arrival) / sample_rate
    data[lo - start : hi - start] += amplitude * waveform(kind, t, phase=phase, **shape)
