"""Compact-binary (CBC) injections: chirps projected onto each detector at a chosen network SNR.

A source has component masses and aligned spins, a sky position (``ra``, ``dec``), inclination
``iota``, polarisation angle ``psi``, coalescence phase ``phi`` and geocentric coalescence time
``gps_time``.  Its dominant-mode polarisations follow from the face-on waveform ``h0~(f)`` of
:func:`gwbatch.waveforms.frequency_domain` (optimally oriented at 1 Mpc):

    h+~ = h0~ e^{2 i phi} (1 + cos^2 iota) / 2,     hx~ = -i h0~ e^{2 i phi} cos iota,

and detector ``j`` records ``F+_j h+ + Fx_j hx`` (antenna patterns at ``psi`` and the geocentric
time, :mod:`gwbatch.detectors`).  ``gps_time`` is the merger, the time of the amplitude peak (as
the SPIIR search reports it; for TaylorF2, which ends at the ISCO frequency, this is some ms before
the formal coalescence time), at the geocentre; each detector sees it at ``gps_time`` plus its
arrival delay, kept to sub-sample precision by a phase ramp in the frequency domain.  The waveform is
generated from ``f_low - 3 Hz`` and tapered in the time domain until the signal reaches
``f_low`` (a cosine ramp), so it starts smoothly; SNRs are integrated from ``f_low``.

With ``distance`` ranges (``CbcSpec.distance``) sources are drawn uniform in comoving volume
(:mod:`gwbatch.simulate.population`), masses redshifted to the detector frame (``mass1``,
``mass2``; the source frame's in ``mass1_source``, ``mass2_source``), with ``redshift`` and the
population's comoving ``volume``, and ``snr`` is what the distance gives.  Otherwise the distance
is set so that the network optimal SNR, ``sqrt(sum_j rho_j^2)`` with
``rho_j^2 = 4 sum |h_j~|^2 / S_j df`` over ``[f_low, fs/2)``, equals the drawn value; the table
records ``distance`` (Mpc) and each detector's ``snr_<ifo>`` and ``time_<ifo>``.  ``duration`` is
the matching window of a template search, 10 ms (:mod:`gwbatch.candidates.injections`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from gwbatch.errors import ConfigError
from gwbatch.simulate.injections import RANGE_CEILINGS, check_ranges, check_spacing
from gwbatch.waveforms import Template, frequency_domain
from gwbatch.waveforms.taylorf2 import chirp_time

MATCH_WINDOW = 0.010  # s: a found CBC injection's trigger lies this close to its arrival time
GENERATION_MARGIN = 3.0  # Hz below f_low where the waveform starts (inside the taper)
RINGDOWN = 1.0  # s of buffer after coalescence


@dataclass(frozen=True)
class CbcSpec:
    """How many binaries to inject and from which ranges (all drawn from the store's seed)."""

    count: int
    mass1: tuple[float, float] = (1.2, 2.0)  # component masses (Msun), uniform; mass1 >= mass2 after sorting
    mass2: tuple[float, float] = (1.2, 2.0)
    snr: tuple[float, float] = (8.0, 30.0)  # network optimal SNR, uniform
    approximant: str = "TaylorF2"
    f_low: float = 30.0  # Hz: taper end and low edge of the SNR integral
    margin: float = 8.0  # seconds kept free after the last coalescence and before the first chirp
    min_spacing: float = 10.0  # seconds between consecutive coalescences
    # luminosity distances (Mpc): sources uniform in comoving volume (gwbatch.simulate.population),
    # masses redshifted to the detector frame; None: the network SNR range sets each distance
    distance: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.distance is not None and not 0 < self.distance[0] < self.distance[1] <= RANGE_CEILINGS["distance"]:
            raise ConfigError(f"CBC injection distance range must satisfy 0 < min < max <= "
                              f"{RANGE_CEILINGS['distance']:g} (Mpc), got {self.distance[0]}, {self.distance[1]}")
        check_ranges(self, ("mass1", "mass2", "snr"), "CBC injection")
        check_spacing(self, "--cbc-spacing: CBC injection")
        if self.count < 0:
            raise ConfigError(f"CBC injection count must be >= 0, got {self.count}")
        if self.f_low <= GENERATION_MARGIN + 1.0:
            raise ConfigError(f"CBC injection f_low must exceed {GENERATION_MARGIN + 1.0} Hz, got {self.f_low}")

    def longest_chirp(self) -> float:
        """Seconds from the generation start to coalescence for the lightest binary, plus 1 s."""
        return chirp_time(self.mass1[0], self.mass2[0], self.f_low - GENERATION_MARGIN) + 1.0


def _buffer_length(row: dict, sample_rate: float) -> int:
    seconds = chirp_time(row["mass1"], row["mass2"], row["f_low"] - GENERATION_MARGIN) + RINGDOWN + 2.0
    return 1 << int(np.ceil(np.log2(seconds * sample_rate)))


def _projected(row: dict, ifo: str, n: int, sample_rate: float) -> tuple[np.ndarray, np.ndarray]:
    """``(f, h_j~)`` of the source in detector ``ifo`` at 1 Mpc on the rfft grid of length ``n``
    (coalescence at t = 0)."""
    from gwbatch.detectors import antenna_pattern

    df = sample_rate / n
    f = np.arange(n // 2 + 1) * df
    tmpl = Template(row["mass1"], row["mass2"], row["spin1z"], row["spin2z"])
    h0 = frequency_domain(row["approximant"], tmpl, f.size, df, row["f_low"] - GENERATION_MARGIN)
    h0 = h0 * np.exp(2j * row["phase"])
    ci = np.cos(row["inclination"])
    fp, fc = antenna_pattern(ifo, row["ra"], row["dec"], row["polarization"], row["gps_time"])
    return f, h0 * (fp * (1 + ci * ci) / 2 - 1j * fc * ci)


def optimal_snr_fd(f: np.ndarray, htilde: np.ndarray, psd: Callable[[np.ndarray], np.ndarray], f_low: float) -> float:
    """``sqrt(4 sum |h~|^2 / S df)`` over ``f_low <= f < f_Nyquist``."""
    band = (f >= f_low) & (f < f[-1])
    df = f[1] - f[0]
    return float(np.sqrt(4.0 * df * np.sum(np.abs(htilde[band]) ** 2 / psd(f[band]))))


def draw_cbc_injections(
    spec: CbcSpec,
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
    """Draw the CBC injection table (see the module docstring for the columns)."""
    if spec.count == 0:
        return pd.DataFrame()
    from gwbatch.simulate.injections import injection_spacing

    lead = spec.longest_chirp()
    spacing = injection_spacing(spec.count, duration - lead - 2.0 * spec.margin, spec.min_spacing,
                                f"{spec.count} CBC injections do not fit in {duration} s: each needs "
                                f"{spec.min_spacing} s, plus {lead:.0f} s for the longest chirp and {spec.margin} s margins")
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, 0xCBC])))
    rows = []
    if spec.distance is not None:
        from gwbatch.simulate.population import draw_distances

        distance, redshift, volume = draw_distances(rng, *spec.distance, spec.count)
    for k in range(spec.count):
        m1, m2 = sorted((float(rng.uniform(*spec.mass1)), float(rng.uniform(*spec.mass2))), reverse=True)
        row = {
            "id": first_id + k,
            "waveform": "cbc",
            "gps_time": start + lead + spec.margin + (k + 0.5 + rng.uniform(-0.3, 0.3)) * spacing,
            "ra": float(rng.uniform(0.0, 2.0 * np.pi)),
            "dec": float(np.arcsin(rng.uniform(-1.0, 1.0))),
            "phase": float(rng.uniform(0.0, 2.0 * np.pi)),
            "polarization": float(rng.uniform(0.0, np.pi)),
            "inclination": float(np.arccos(rng.uniform(-1.0, 1.0))),
            "mass1": m1, "mass2": m2, "spin1z": 0.0, "spin2z": 0.0,
            "approximant": spec.approximant, "f_low": spec.f_low,
            "duration": MATCH_WINDOW,
            "snr": float(rng.uniform(*spec.snr)) if spec.distance is None else np.nan,
        }
        if spec.distance is not None:  # detector-frame masses; the source frame's are kept
            z = float(redshift[k])
            row.update(mass1_source=m1, mass2_source=m2, mass1=m1 * (1 + z), mass2=m2 * (1 + z), redshift=z,
                       distance=float(distance[k]), volume=float(volume))
        n = _buffer_length(row, sample_rate)
        unit = {}
        for ifo in ifos:
            f, h = _projected(row, ifo, n, sample_rate)
            unit[ifo] = optimal_snr_fd(f, h, psds[ifo], spec.f_low)
        network = float(np.sqrt(sum(v * v for v in unit.values())))
        if spec.distance is None:
            row["distance"] = network / row["snr"]
        else:
            row["snr"] = network / row["distance"]
        for ifo in ifos:
            row[f"time_{ifo}"] = row["gps_time"] + delay(ifo, row["ra"], row["dec"], row["gps_time"])
            row[f"snr_{ifo}"] = unit[ifo] / row["distance"]
        rows.append(row)
    return pd.DataFrame(rows)


@functools.lru_cache(maxsize=256)
def merger_offset(approximant: str, mass1: float, mass2: float, spin1z: float, spin2z: float, f_low: float,
                  sample_rate: float) -> float:
    """Seconds from the formal coalescence time to the amplitude peak (negative for TaylorF2): the
    peak of the analytic signal's envelope, refined by a parabola through its three top samples."""
    row = dict(mass1=mass1, mass2=mass2, f_low=f_low)
    n = _buffer_length(row, sample_rate)
    df = sample_rate / n
    h0 = frequency_domain(approximant, Template(mass1, mass2, spin1z, spin2z), n // 2 + 1, df, f_low - GENERATION_MARGIN)
    centre = n // 2  # coalescence in the middle of the buffer
    spectrum = np.zeros(n, dtype=np.complex128)
    spectrum[: h0.size] = 2.0 * h0 * np.exp(-2j * np.pi * np.arange(h0.size) * df * centre / sample_rate)
    envelope = np.abs(np.fft.ifft(spectrum))
    k = int(np.argmax(envelope))
    a, b, c = envelope[k - 1], envelope[k], envelope[k + 1]
    shift = 0.5 * (a - c) / (a - 2.0 * b + c) if (a - 2.0 * b + c) != 0 else 0.0
    return float((k + shift - centre) / sample_rate)


@functools.lru_cache(maxsize=16)
def _strain_cached(key: tuple, ifo: str, t0: float, sample_rate: float) -> tuple[int, np.ndarray]:
    row = dict(key)
    n = _buffer_length(row, sample_rate)
    offset = merger_offset(row["approximant"], row["mass1"], row["mass2"], row["spin1z"], row["spin2z"],
                           row["f_low"], sample_rate)
    arrival = (row[f"time_{ifo}"] - offset - t0) * sample_rate  # fractional sample index of coalescence
    first = int(np.floor(arrival)) - n + int(RINGDOWN * sample_rate)
    f, h = _projected(row, ifo, n, sample_rate)
    h = h / row["distance"] * np.exp(-2j * np.pi * f * (arrival - first) / sample_rate)
    x = np.fft.irfft(h, n) * sample_rate
    # cosine taper from the generation start to where the signal reaches f_low; nothing before it
    t = (np.arange(n) - (arrival - first)) / sample_rate  # time relative to coalescence
    t_gen = -chirp_time(row["mass1"], row["mass2"], row["f_low"] - GENERATION_MARGIN)
    t_low = -chirp_time(row["mass1"], row["mass2"], row["f_low"])
    ramp = np.clip((t - t_gen) / (t_low - t_gen), 0.0, 1.0)
    x *= 0.5 * (1.0 - np.cos(np.pi * ramp))
    x.setflags(write=False)
    return first, x


def cbc_strain(row: dict, ifo: str, t0: float, sample_rate: float) -> tuple[int, np.ndarray]:
    """The injection's strain in ``ifo``: ``(first sample index in the store, samples)``."""
    key = tuple(sorted((k, v) for k, v in row.items()
                       if isinstance(v, (int, float, str, np.floating, np.integer)) and not (isinstance(v, float) and np.isnan(v))))
    return _strain_cached(key, ifo, float(t0), float(sample_rate))


def add_cbc(data: np.ndarray, start: int, t0: float, sample_rate: float, ifo: str, row: dict) -> None:
    """Add the part of ``row``'s chirp that falls in samples ``[start, start + len(data))``."""
    first, x = cbc_strain(row, ifo, t0, sample_rate)
    lo, hi = max(start, first), min(start + data.size, first + x.size)
    if hi > lo:
        data[lo - start : hi - start] += x[lo - first : hi - first]
