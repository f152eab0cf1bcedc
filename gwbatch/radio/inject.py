"""Dispersed, scattered radio pulses injected into filterbank spectra: the radio search's efficiency
and the calibration of its S/N.

**The pulse** (Lorimer & Kramer 2005, *Handbook of Pulsar Astronomy*, on dispersion and scattering
by the interstellar medium and on dispersive smearing within a channel).  A Gaussian of full width
at half maximum ``width`` arrives at the highest channel ``f_max`` at ``time`` (its peak) and at
channel ``f`` ``K_DM DM (f^-2 - f_max^-2)`` later, the search's own delay (:mod:`.dedisperse`) but
kept fractional.  Within a channel of width ``Δf`` the pulse sweeps from the delay of its upper edge
to that of its lower edge, so each channel holds the Gaussian convolved with that box (the
intra-channel smearing, ``≈ 8.3 µs DM Δf_MHz / f_GHz³``) and, when scattered, with the one-sided
exponential ``exp(-t/τ)/τ`` of a thin screen, ``τ(f) = τ_ref (f / f_ref)^-4``.  Each sample ``k``
holds the integral of that profile over ``[(k - 1/2), (k + 1/2)) tsamp`` (sample ``k`` is at ``k
tsamp``, as the search's times take it): the Gaussian ⊗ box integrals are exact (the second
antiderivative of the Gaussian), the exponential is convolved on a grid of ``tsamp /``
:data:`SCATTER_OVERSAMPLE`.  The fluence of channel ``f`` is ``(f / f_c)^α`` (``α`` the spectral
index, ``f_c`` the band's centre; 0: flat) in units of **that channel's noise σ** times a sample:
the spectrum is the pulse's per-channel S/N, as data whose bandpass is flattened show it.

**The S/N** a pulse is scaled to (its *optimal* S/N; :func:`optimal_snr`)::

    S/N = max over w >= 1, j0 of  sum_{j=j0}^{j0+w-1} sum_{c good} p_c[j + d_c] / σ_c  /  (σ_DM sqrt(w) x(w))

``p_c`` the pulse in channel ``c`` (samples), ``d_c`` the search's integer delays at the pulse's
DM (:func:`~gwbatch.radio.dedisperse.dm_delays`), ``σ_c`` the channel's noise σ and "good" the
channels the search keeps, both from :func:`~gwbatch.radio.condition.condition_spectra` (running
baseline, clipped σ, SK and variance flags) of the data around the pulse (its extent and
:data:`NOISE_PAD` either side) before injection, and
``σ_DM`` the σ of those conditioned spectra dedispersed at the pulse's DM as the search normalises
a trial (:func:`~gwbatch.radio.pulses.normalise_trials`, called here: less a running baseline over
the search's ``baseline`` window, over its robust σ).  For independent Gaussian channels
``σ_DM = sqrt(n_good)`` and this is the radiometer S/N of the best boxcar,
``sum / (σ_c sqrt(n_good w))``; on real data, whose channels share interference and slow wander,
it is more, and the search, which divides each trial by its own σ, sees that: parkes_8bit_1.fil
has σ_DM = 1.12, 1.11, 0.99 and 1.04 sqrt(n_good) at DM 100, 150, 200 and 250 with the default 2 s
baseline, 1.03, 1.04, 0.97 and 1.04 with 0.1 s.  It is the S/N the search would measure without
noise at the exact DM with every boxcar width; its trials lose up to a DM step and a width step of
it, and its best of many trials gains from the noise.  ``x(w)`` is the search's boxcar σ over the
white ``sqrt(w)`` measured on that normalised trial (``sigma: measured``,
:func:`~gwbatch.radio.pulses.boxcar_excess`; 1 with ``sigma: white``): where the trial is red, a wide
pulse's S/N is what the search, which measures it so, can reach.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import ndtr

from gwbatch.errors import ConfigError, DataError
from gwbatch.radio.condition import RadioConditioning, condition_spectra
from gwbatch.radio.dedisperse import K_DM, dedisperse, dm_delays
from gwbatch.radio.dmplan import DMPlan
from gwbatch.pulse.plan import boxcar_plan
from gwbatch.radio.pulses import DEFAULT_BOXCARS, measured_over_white, normalise_trials, series_excess

#: FWHM of a Gaussian over its σ, 2 sqrt(2 ln 2).
FWHM_PER_SIGMA = 2.0 * math.sqrt(2.0 * math.log(2.0))
#: A pulse's Gaussian is followed to this many σ either side (fluence beyond: 6e-7).
TAIL_SIGMAS = 5.0
#: A scattering tail is followed to this many τ (fluence beyond: 5e-5).
TAIL_TAUS = 10.0
#: Sub-samples per sample of the grid the scattering tail is convolved on.
SCATTER_OVERSAMPLE = 16
#: Seconds of data either side of a pulse's sweep whose noise sets its amplitude.
NOISE_PAD = 1.0
#: The radio search's default window of a dedispersed trial's running baseline (s; ``search.baseline``).
TRIAL_BASELINE = 2.0
#: Fewest dedispersed samples whose σ is measured; with fewer, σ_DM is taken as sqrt(n_good).
MIN_SERIES_SAMPLES = 64
#: Random arrangements of a population's arrival times tried before it is refused as too crowded.
PLACEMENT_TRIES = 1000
#: The ``waveform`` of an injected pulse in the injection table.
WAVEFORMS = ("dispersed-gaussian", "scattered-gaussian")


@dataclass(frozen=True)
class Pulse:
    """One pulse: ``time`` (s after the spectra's first sample) of its Gaussian peak at the highest
    channel, ``dm`` (pc cm^-3), ``width`` (FWHM, s), the target optimal ``snr``, the scattering time
    ``scatter`` (s) at ``scatter_frequency`` (MHz; 0: unscattered) and the ``spectral_index``."""

    time: float
    dm: float
    width: float
    snr: float
    scatter: float = 0.0
    scatter_frequency: float = 1000.0
    spectral_index: float = 0.0

    def __post_init__(self) -> None:
        checks = (("time", self.time, math.isfinite(self.time), "a finite time (s)"),
                  ("dm", self.dm, math.isfinite(self.dm) and self.dm >= 0, "a DM >= 0"),
                  ("width", self.width, math.isfinite(self.width) and self.width > 0, "a FWHM > 0 s"),
                  ("snr", self.snr, math.isfinite(self.snr) and self.snr > 0, "an S/N > 0"),
                  ("scatter", self.scatter, math.isfinite(self.scatter) and self.scatter >= 0, "a time >= 0 s"),
                  ("scatter_frequency", self.scatter_frequency,
                   math.isfinite(self.scatter_frequency) and self.scatter_frequency > 0, "a frequency > 0 MHz"),
                  ("spectral_index", self.spectral_index, math.isfinite(self.spectral_index), "a finite index"))
        for name, value, ok, allowed in checks:
            if not ok:
                raise ConfigError(f"pulse {name}={value!r} is out of range: allowed {allowed}")

    @property
    def waveform(self) -> str:
        return WAVEFORMS[self.scatter > 0]


@dataclass(frozen=True, eq=False)
class DispersedPulse:
    """A pulse in the spectra, channel by channel: ``values[c, k]`` is added to sample ``first[c] + k``
    of channel ``c`` (``first`` int64 ``(channel,)``, ``values`` ``(channel, n)``)."""

    first: np.ndarray
    values: np.ndarray

    def scaled(self, factors) -> "DispersedPulse":
        """The pulse with channel ``c`` multiplied by ``factors[c]`` (or all by one number)."""
        factors = np.broadcast_to(np.asarray(factors, dtype=np.float64), self.first.shape)
        return DispersedPulse(self.first, self.values * factors[:, None])


@dataclass(frozen=True, eq=False)
class Noise:
    """The noise a pulse's amplitude is set in: each channel's σ (raw units) and whether the search
    keeps it (``good``), and ``series_sigma``, the σ of the good channels' normalised sum dedispersed
    at the pulse's DM (module docstring)."""

    sigma: np.ndarray
    good: np.ndarray
    series_sigma: float
    boxcar_excess: np.ndarray | None = None  # σ over white at widths 1, 2, 4, ... (sigma: measured); None: white

    @property
    def n_good(self) -> int:
        return int(self.good.sum())

    def excess(self, widths: np.ndarray) -> np.ndarray:
        """The search's boxcar σ over the white ``sqrt(w)`` for boxcars of ``widths`` samples
        (:func:`~gwbatch.radio.pulses.measured_over_white`; 1 for white noise)."""
        widths = np.asarray(widths, dtype=np.float64)
        if self.boxcar_excess is None:
            return np.ones_like(widths)
        return measured_over_white(np.broadcast_to(self.boxcar_excess, (widths.size, self.boxcar_excess.size)),
                                   widths)


# --- dispersion and scattering -----------------------------------------------------------------

def dispersion_delays(freqs, dm: float) -> np.ndarray:
    """Delays (s, float64) of channels ``freqs`` (MHz) after the highest, ``K_DM DM (f^-2 - f_max^-2)``."""
    f = np.asarray(freqs, dtype=np.float64)
    return K_DM * dm * (f ** -2.0 - f.max() ** -2.0)


def channel_width(freqs) -> float:
    """The channel width (MHz) of evenly spaced channels ``freqs``."""
    f = np.asarray(freqs, dtype=np.float64)
    if f.size < 2:
        raise DataError(f"{f.size} channel: a dispersed pulse needs at least 2 evenly spaced channels")
    return float(np.abs(np.diff(f)).mean())


def smearing_edges(freqs, dm: float, bandwidth: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per channel, the delays (s) of its upper and lower edges relative to its centre's: the box the
    pulse sweeps within the channel (negative, positive).  ``bandwidth``: the channel width (MHz;
    default from the spacing of ``freqs``)."""
    f = np.asarray(freqs, dtype=np.float64)
    half = (channel_width(f) if bandwidth is None else bandwidth) / 2.0
    return K_DM * dm * ((f + half) ** -2.0 - f ** -2.0), K_DM * dm * ((f - half) ** -2.0 - f ** -2.0)


def scattering_times(freqs, tau: float, reference: float) -> np.ndarray:
    """Scattering time (s) per channel of a thin screen, ``tau (f / reference)^-4``."""
    return tau * (np.asarray(freqs, dtype=np.float64) / reference) ** -4.0


def sweep_per_dm(freqs) -> float:
    """Seconds per unit DM from the band's upper edge to its lower edge (the highest channel's centre
    plus half a channel, the lowest's less half a channel)."""
    f = np.asarray(freqs, dtype=np.float64)
    half = channel_width(f) / 2.0
    return K_DM * ((f.min() - half) ** -2.0 - (f.max() + half) ** -2.0)


def pulse_extent(pulse: Pulse, freqs) -> tuple[float, float]:
    """Seconds of data a pulse needs before and after its arrival at the highest channel's centre:
    its Gaussian's tail and the band's upper edge, which it reaches first; its sweep to the band's
    lower edge with the Gaussian's and the scattering's tails there."""
    f = np.asarray(freqs, dtype=np.float64)
    sigma = pulse.width / FWHM_PER_SIGMA
    lead = -float(smearing_edges(f.max(), pulse.dm, channel_width(f))[0])
    tau = float(scattering_times(f.min(), pulse.scatter, pulse.scatter_frequency))
    return TAIL_SIGMAS * sigma + lead, pulse.dm * sweep_per_dm(f) - lead + TAIL_SIGMAS * sigma + TAIL_TAUS * tau


def largest_dm(freqs, seconds: float, width: float, scatter: float = 0.0, scatter_frequency: float = 1000.0) -> float:
    """The largest DM whose pulse (FWHM ``width``, scattering ``scatter`` at ``scatter_frequency``)
    fits in ``seconds`` of data (:func:`pulse_extent`); negative when none does."""
    before, after = pulse_extent(Pulse(0.0, 0.0, width, 1.0, scatter, scatter_frequency), freqs)
    return (seconds - before - after) / sweep_per_dm(freqs)


# --- the pulse ---------------------------------------------------------------------------------

def _gaussian_box_cdf(t: np.ndarray, a: np.ndarray, b: np.ndarray, sigma: float) -> np.ndarray:
    """∫_{-∞}^t of a unit Gaussian (σ ``sigma``) convolved with the unit box ``[a, b]`` (per row):
    ``σ / (b - a) [Ψ((t - a)/σ) - Ψ((t - b)/σ)]``, ``Ψ(x) = x Φ(x) + φ(x)``; the Gaussian's CDF at the
    box's centre where the box is narrower than 1e-6 σ."""
    def psi(x):
        return x * ndtr(x) + np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)

    span = (b - a)[:, None]
    narrow = span < 1e-6 * sigma
    safe = np.where(narrow, 1.0, span)
    boxed = sigma / safe * (psi((t - a[:, None]) / sigma) - psi((t - b[:, None]) / sigma))
    return np.where(narrow, ndtr((t - 0.5 * (a + b)[:, None]) / sigma), boxed)


def _scatter(fine: np.ndarray, tau_bins: np.ndarray) -> np.ndarray:
    """Rows of ``fine`` (sub-sample bin integrals) convolved with a one-sided exponential of ``tau_bins``
    bins each, truncated to the rows' length: a bin's content moves ``k`` bins by the exponential's
    integral over ``[k - 1/2, k + 1/2)`` bins (``[0, 1/2)`` for ``k = 0``), which keeps its mean delay."""
    n = fine.shape[1]
    k = np.arange(n, dtype=np.float64)
    rate = 1.0 / np.maximum(tau_bins, 1e-300)[:, None]
    kernel = np.exp(-np.maximum(k - 0.5, 0.0) * rate) - np.exp(-(k + 0.5) * rate)
    size = 2 * n
    return np.fft.irfft(np.fft.rfft(fine, size, axis=1) * np.fft.rfft(kernel, size, axis=1), size, axis=1)[:, :n]


def pulse_profile(pulse: Pulse, freqs, tsamp: float) -> DispersedPulse:
    """The pulse in spectra sampled every ``tsamp`` s from time 0 (module docstring), each channel's
    fluence ``(f / f_c)^spectral_index`` samples (float64): scale channel ``c`` by its noise σ for raw
    units."""
    f = np.asarray(freqs, dtype=np.float64)
    sigma = pulse.width / FWHM_PER_SIGMA
    centre = pulse.time + dispersion_delays(f, pulse.dm)
    upper, lower = smearing_edges(f, pulse.dm)
    tau = scattering_times(f, pulse.scatter, pulse.scatter_frequency)
    start = centre + upper - TAIL_SIGMAS * sigma
    stop = centre + lower + TAIL_SIGMAS * sigma + TAIL_TAUS * tau
    first = np.floor(start / tsamp + 0.5).astype(np.int64)
    n = int((np.floor(stop / tsamp + 0.5).astype(np.int64) - first).max()) + 1
    oversample = SCATTER_OVERSAMPLE if pulse.scatter > 0 else 1
    edges = (first[:, None] - 0.5) * tsamp + np.arange(n * oversample + 1) * (tsamp / oversample)
    fine = np.diff(_gaussian_box_cdf(edges, centre + upper, centre + lower, sigma), axis=1)
    if pulse.scatter > 0:
        fine = _scatter(fine, tau / (tsamp / oversample))
    values = fine.reshape(f.size, n, oversample).sum(axis=2)
    spectrum = (f / (0.5 * (f.max() + f.min()))) ** pulse.spectral_index
    return DispersedPulse(first, values * spectrum[:, None])


# --- S/N ---------------------------------------------------------------------------------------

def dedispersed_profile(profile: DispersedPulse, freqs, tsamp: float, dm: float,
                        good: np.ndarray) -> tuple[int, np.ndarray]:
    """The good channels of ``profile`` summed at the search's integer delays for ``dm``: the first
    dedispersed sample's index and the series (float64)."""
    shift = profile.first - dm_delays(freqs, dm, tsamp)
    rows = np.flatnonzero(good)
    if rows.size == 0:
        return 0, np.zeros(1)
    base = int(shift[rows].min())
    n = profile.values.shape[1]
    series = np.zeros(int(shift[rows].max()) - base + n)
    np.add.at(series, ((shift[rows] - base)[:, None] + np.arange(n)).ravel(), profile.values[rows].ravel())
    return base, series


def best_boxcar(series: np.ndarray, excess=None) -> tuple[float, int, int]:
    """The boxcar of any width with the largest ``sum / (sqrt(width) excess(width))`` over ``series``
    (``excess``: the noise's boxcar σ over white, :meth:`Noise.excess`; None: 1): that value, its
    width and its first sample."""
    csum = np.concatenate([[0.0], np.cumsum(series)])
    scale = np.ones(series.size) if excess is None else excess(np.arange(1, series.size + 1))
    best = (-np.inf, 1, 0)
    for w in range(1, series.size + 1):
        sums = csum[w:] - csum[:-w]
        j = int(np.argmax(sums))
        value = sums[j] / (math.sqrt(w) * scale[w - 1])
        if value > best[0]:
            best = (float(value), w, j)
    return best


def optimal_snr(profile: DispersedPulse, freqs, tsamp: float, dm: float, good: np.ndarray,
                series_sigma: float, excess=None) -> tuple[float, int, int]:
    """The optimal S/N (module docstring) of ``profile`` in units of each channel's σ: the best
    boxcar over its good channels dedispersed at ``dm`` over ``series_sigma sqrt(w) excess(w)``; with
    the boxcar's width (samples) and first sample (at the highest channel)."""
    base, series = dedispersed_profile(profile, freqs, tsamp, dm, good)
    value, width, start = best_boxcar(series, excess)
    return value / series_sigma, width, base + start


def measure_noise(spectra: np.ndarray, freqs, tsamp: float, dm: float,
                  conditioning: RadioConditioning = RadioConditioning(), mask=None,
                  trial_baseline: float = TRIAL_BASELINE, sigma: str = "measured",
                  boxcars: tuple[int, ...] = DEFAULT_BOXCARS) -> Noise:
    """The noise of ``spectra`` ``(channel, time)`` as the radio search measures it (module
    docstring): channel σ and flags from :func:`condition_spectra` (``conditioning``, channel
    ``mask``), and the σ of the conditioned spectra dedispersed at ``dm`` less a running baseline of
    ``trial_baseline`` s (the search's ``baseline``), or sqrt(n_good) when fewer than
    :data:`MIN_SERIES_SAMPLES` dedispersed samples fit; with ``sigma`` ``measured`` also that trial's
    boxcar σ under the plan ``boxcars`` (:func:`~gwbatch.radio.pulses.series_excess`: the search's
    ``sigma`` and ``decimation``)."""
    if not (math.isfinite(trial_baseline) and 0 < trial_baseline <= MAX_TRIAL_BASELINE):
        raise ConfigError(f"trial baseline {trial_baseline!r} s is not allowed: need a window in (0, "
                          f"{MAX_TRIAL_BASELINE:g}] s (the search's baseline)")
    cond = condition_spectra(np.asarray(spectra, dtype=np.float32), conditioning, tsamp, mask)
    good = ~cond.mask
    if sigma not in ("measured", "white"):
        raise ConfigError(f"boxcar sigma model {sigma!r} is not allowed: measured or white (the search's sigma)")
    series_sigma, excess = math.sqrt(max(cond.n_good, 1)), None
    plan = DMPlan.fixed(np.asarray(freqs, dtype=np.float64), tsamp, [dm])
    if cond.n_good and spectra.shape[1] - plan.overlap >= MIN_SERIES_SAMPLES:
        series = dedisperse(cond.spectra, freqs, tsamp, plan)[0].series
        window = max(1, int(round(trial_baseline / tsamp)))
        valid = np.ones(series.shape, dtype=bool)
        z, trial_sigma = normalise_trials(series, valid, window)
        if np.isfinite(trial_sigma[0]) and trial_sigma[0] > 0:
            series_sigma = float(trial_sigma[0])
            if sigma == "measured":
                excess = series_excess(z[0], valid[0], boxcar_plan(boxcars).max_width)
    return Noise(cond.sigma, good, series_sigma, excess)


@dataclass(frozen=True, eq=False)
class Injected:
    """A pulse scaled to its target S/N: in raw units (``pulse``), the fluence per channel in units of
    its σ times a sample at the band's centre frequency (``amplitude``), the optimal boxcar (width
    and first sample) and the noise it was scaled in."""

    pulse: DispersedPulse
    amplitude: float
    snr: float
    boxcar_width: int
    boxcar_start: int
    noise: Noise


def scale_to_snr(pulse: Pulse, freqs, tsamp: float, noise: Noise) -> Injected:
    """``pulse`` with the amplitude that gives it its optimal S/N ``pulse.snr`` in ``noise``."""
    unit = pulse_profile(pulse, freqs, tsamp)
    snr, width, start = optimal_snr(unit, freqs, tsamp, pulse.dm, noise.good, noise.series_sigma, noise.excess)
    if not snr > 0:
        raise DataError(f"the pulse at {pulse.time:.6f} s (DM {pulse.dm:g}) reaches no channel the search keeps "
                        f"({noise.n_good} good channels); it cannot be scaled to S/N {pulse.snr:g}")
    amplitude = pulse.snr / snr
    return Injected(unit.scaled(amplitude * noise.sigma), amplitude, pulse.snr, width, start, noise)


def add_pulses(spectra: np.ndarray, pulses, start: int = 0) -> np.ndarray:
    """A float32 copy of ``spectra`` ``(channel, time)``, whose sample 0 is sample ``start`` of the pulses'
    time axis, with the parts of ``pulses`` (:class:`DispersedPulse`) that fall in it added."""
    out = np.array(spectra, dtype=np.float32, copy=True)
    rows = np.arange(out.shape[0])[:, None]
    for pulse in pulses:
        cols = pulse.first[:, None] - start + np.arange(pulse.values.shape[1])
        inside = (cols >= 0) & (cols < out.shape[1])
        if inside.any():
            r, c = np.broadcast_to(rows, cols.shape)[inside], cols[inside]
            out[r, c] = out[r, c] + pulse.values[inside].astype(np.float32)
    return out


def noise_window(pulse: Pulse, freqs, tsamp: float, lo: int, hi: int) -> tuple[int, int]:
    """Samples ``[a, b)`` whose noise sets a pulse's amplitude: its extent with :data:`NOISE_PAD`
    either side, within ``[lo, hi)``."""
    before, after = pulse_extent(pulse, freqs)
    a = int(math.floor((pulse.time - before - NOISE_PAD) / tsamp))
    b = int(math.ceil((pulse.time + after + NOISE_PAD) / tsamp)) + 1
    return max(lo, a), min(hi, b)


def inject_pulses(spectra: np.ndarray, freqs, tsamp: float, pulses: list[Pulse],
                  conditioning: RadioConditioning = RadioConditioning(), mask=None,
                  trial_baseline: float = TRIAL_BASELINE, sigma: str = "measured",
                  boxcars: tuple[int, ...] = DEFAULT_BOXCARS) -> tuple[np.ndarray, list[Injected]]:
    """``spectra`` ``(channel, time)`` with ``pulses`` added (float32; a pulse's ``time`` counts from
    sample 0), each scaled to its S/N in the noise of the spectra around it before any pulse is
    added (:func:`noise_window`, :func:`measure_noise` with ``conditioning``, ``mask``,
    ``trial_baseline``, ``sigma`` and ``boxcars``)."""
    injected = []
    for pulse in pulses:
        a, b = noise_window(pulse, freqs, tsamp, 0, spectra.shape[1])
        noise = measure_noise(spectra[:, a:b], freqs, tsamp, pulse.dm, conditioning, mask, trial_baseline, sigma,
                              boxcars)
        injected.append(scale_to_snr(pulse, freqs, tsamp, noise))
    return add_pulses(spectra, [i.pulse for i in injected]), injected


# --- a population ------------------------------------------------------------------------------

#: Limits of an injected population: an S/N far beyond any search's use, spectral indices well past
#: the steepest measured (about ±10) yet whose factors stay finite in float32 over a 4:1 band, at
#: most a million pulses, and a trial baseline as the radio search's ``search.baseline`` allows.
MAX_SNR, MAX_SPECTRAL_INDEX, MAX_PULSES, MAX_TRIAL_BASELINE = 1e4, 20.0, 10**6, 3600.0


def check_count(count) -> int:
    """``count`` if it is a whole number of pulses in [1, :data:`MAX_PULSES`], else a ConfigError."""
    if not (isinstance(count, (int, np.integer)) and not isinstance(count, bool) and 1 <= count <= MAX_PULSES):
        raise ConfigError(f"pulse count {count!r} is not allowed: need a whole number in [1, {MAX_PULSES}]")
    return int(count)


def _span(value, name: str, low: float, high: float = math.inf) -> tuple[float, float]:
    a, b = (value, value) if np.isscalar(value) else tuple(value)
    if not (math.isfinite(a) and math.isfinite(b) and low <= a <= b <= high):
        upper = "" if high == math.inf else f" and <= {high:g}"
        raise ConfigError(f"pulse {name} range {a:g},{b:g} is not allowed: need {low:g} <= MIN <= MAX{upper}")
    return float(a), float(b)


def _free(allowed: list[tuple[float, float]], taken: list[float], spacing: float) -> list[tuple[float, float]]:
    """``allowed`` intervals less ``(t - spacing, t + spacing)`` around each taken time."""
    out = allowed
    for t in taken:
        cut = []
        for a, b in out:
            if t - spacing > a:
                cut.append((a, min(b, t - spacing)))
            if t + spacing < b:
                cut.append((max(a, t + spacing), b))
        out = [(a, b) for a, b in cut if b > a]
    return out


def draw_pulses(rng: np.random.Generator, count: int, freqs, intervals: list[tuple[float, float]], *,
                dm: tuple[float, float], snr, width: tuple[float, float], spacing: float,
                scatter: float = 0.0, scatter_frequency: float = 1000.0, spectral_index=0.0) -> list[Pulse]:
    """``count`` pulses with DM, S/N, width (FWHM, s) and spectral index uniform in their ranges (a
    number: fixed), arriving at the highest channel at least ``spacing`` s apart, each with its whole
    sweep (:func:`pulse_extent`) inside one of ``intervals`` (``[start, stop)`` s of valid data),
    uniform over the times that allow (the most constrained pulses, highest DM first, placed first;
    an arrangement that leaves one no room is drawn again, up to :data:`PLACEMENT_TRIES` times).
    Returned in time order.

    Raises
    ------
    DataError
        A DM range whose sweep does not fit in the longest interval (naming the largest DM that
        does), or pulses that do not fit at this spacing.
    """
    check_count(count)
    if not (math.isfinite(spacing) and spacing >= 0):
        raise ConfigError(f"pulse spacing {spacing!r} s is not allowed: need a time >= 0 s")
    dm, width, snr = _span(dm, "DM", 0.0), _span(width, "width (s)", 1e-9), _span(snr, "S/N", 1e-9, MAX_SNR)
    index = _span(spectral_index, "spectral index", -MAX_SPECTRAL_INDEX, MAX_SPECTRAL_INDEX)
    if not intervals:
        raise DataError("the store has no valid data to inject pulses into")
    longest = max(b - a for a, b in intervals)
    fits = largest_dm(freqs, longest, width[1], scatter, scatter_frequency)
    if fits < 0:
        before, after = pulse_extent(Pulse(0.0, 0.0, width[1], 1.0, scatter, scatter_frequency), freqs)
        raise DataError(f"a pulse of width {width[1]:g} s with scattering {scatter:g} s at {scatter_frequency:g} MHz "
                        f"spans {before + after:.3g} s even undispersed, longer than the {longest:.3g} s of the "
                        "store's longest stretch of data; inject narrower or less scattered pulses")
    if dm[1] > fits:
        sweep, half = dm[1] * sweep_per_dm(freqs), channel_width(freqs) / 2.0
        raise DataError(f"pulses at DM up to {dm[1]:g} pc cm^-3 sweep {sweep:.3g} s across the band "
                        f"({np.max(freqs) + half:g} to {np.min(freqs) - half:g} MHz), longer than the {longest:.3g} s "
                        f"of the store's longest stretch of data; the largest DM that fits (width {width[1]:g} s) is "
                        f"{max(fits, 0.0):.0f} pc cm^-3")
    pulses = [Pulse(0.0, float(rng.uniform(*dm)), float(rng.uniform(*width)), float(rng.uniform(*snr)), scatter,
                    scatter_frequency, float(rng.uniform(*index))) for _ in range(count)]

    windows = [_windows(p, freqs, intervals) for p in pulses]
    order = sorted(range(count), key=lambda i: sum(b - a for a, b in windows[i]))
    for _ in range(PLACEMENT_TRIES):
        times = _place(rng, [windows[i] for i in order], spacing)
        if times is not None:
            break
    else:
        raise DataError(f"{count} pulses at DM {dm[0]:g} to {dm[1]:g} do not fit {spacing:g} s apart in the store "
                        f"(no arrangement found in {PLACEMENT_TRIES} tries); inject fewer, at lower DMs or with a "
                        "smaller spacing")
    placed = {i: t for i, t in zip(order, times)}
    return sorted((Pulse(placed[i], p.dm, p.width, p.snr, p.scatter, p.scatter_frequency, p.spectral_index)
                   for i, p in enumerate(pulses)), key=lambda p: p.time)


def _windows(pulse: Pulse, freqs, intervals) -> list[tuple[float, float]]:
    """The arrival times (at the highest channel) that keep ``pulse`` inside one of ``intervals``."""
    before, after = pulse_extent(pulse, freqs)
    return [(a + before, b - after) for a, b in intervals if b - after > a + before]


def _place(rng: np.random.Generator, windows: list[list[tuple[float, float]]], spacing: float) -> list[float] | None:
    """One arrival time per pulse, each uniform over its ``windows`` less ``spacing`` around those placed
    before it; None when one finds no room."""
    times: list[float] = []
    for allowed in windows:
        free = _free(allowed, times, spacing)
        total = sum(b - a for a, b in free)
        if total <= 0:
            return None
        u = rng.uniform(0.0, total)
        for a, b in free:
            if u <= b - a:
                times.append(a + u)
                break
            u -= b - a
    return times


# --- a store with pulses -----------------------------------------------------------------------

def valid_intervals(dq: np.ndarray, required: int, n_samples: int, sample_rate: float) -> list[tuple[float, float]]:
    """``[start, stop)`` seconds (from the first sample) of the runs of seconds whose DQ values have every
    bit of ``required`` set, the last cut at the end of the data."""
    ok = np.concatenate([[False], (np.asarray(dq) & required) == required, [False]])
    edges = np.flatnonzero(np.diff(ok.astype(np.int8)))
    end = n_samples / sample_rate
    return [(float(a), float(min(b, end))) for a, b in zip(edges[::2], edges[1::2]) if min(b, end) > a]


def injection_table(pulses: list[Pulse], injected: list[Injected], beams: list[str], ifos, t0: float,
                    freqs, tsamp: float) -> pd.DataFrame:
    """The injection table of a store: one row per pulse with the columns found/missed matching reads
    (``id``, ``waveform``, ``gps_time``, ``snr``, ``duration``, ``time_<beam>``, ``snr_<beam>``: NaN and
    0 outside the pulse's beam) and the pulse's own (module docstring)."""
    f_max = float(np.max(freqs))
    rows = []
    for k, (p, inj, beam) in enumerate(zip(pulses, injected, beams)):
        gps = t0 + p.time
        row = {"id": k, "waveform": p.waveform, "gps_time": gps, "gps_time_inf": gps - K_DM * p.dm / f_max ** 2,
               "ifo": beam, "beam": beam, "dm": p.dm, "width": p.width, "snr": inj.snr,
               "duration": inj.boxcar_width * tsamp, "boxcar_width": inj.boxcar_width,
               "amplitude": inj.amplitude, "spectral_index": p.spectral_index, "scatter": p.scatter,
               "scatter_frequency": p.scatter_frequency, "good_channels": inj.noise.n_good,
               "series_sigma": inj.noise.series_sigma / math.sqrt(max(inj.noise.n_good, 1))}
        for ifo in ifos:
            row[f"time_{ifo}"] = gps if ifo == beam else np.nan
            row[f"snr_{ifo}"] = inj.snr if ifo == beam else 0.0
        rows.append(row)
    return pd.DataFrame(rows)


def simulate_pulses_store(store, out, *, count: int, dm, snr, width, seed: int, spacing: float = 1.0,
                          scatter: float = 0.0, scatter_frequency: float = 1000.0, spectral_index=0.0,
                          conditioning: RadioConditioning = RadioConditioning(), trial_baseline: float = TRIAL_BASELINE,
                          sigma: str = "measured", boxcars: tuple[int, ...] = DEFAULT_BOXCARS,
                          overwrite: bool = False) -> Path:
    """A copy of filterbank store ``store`` at ``out`` with ``count`` pulses added (:func:`draw_pulses`,
    each in one beam drawn uniformly, in the seconds its DQ bit ``DATA`` passes), scaled in the noise
    that ``conditioning``, ``trial_baseline``, ``sigma`` and ``boxcars`` measure (:func:`measure_noise`:
    set them as the search that will look for the pulses has them), and listed in its injection
    table.  The copy keeps the grid, the channels, the DQ and the provenance (under ``base``), but
    its spectra are float32: injected data are no longer at the recorded precision.  Chunks never
    written in ``store`` stay unwritten."""
    from gwbatch.io.store import read_dq, read_meta, store_identity

    check_count(count)
    if not (isinstance(seed, (int, np.integer)) and seed >= 0):
        raise ConfigError(f"pulse seed {seed!r} is not allowed: need a whole number >= 0")
    meta = read_meta(store)
    if not meta.layout.spectra:
        raise DataError(f"store {meta.path} holds strain, not radio spectra; pulses are injected into a filterbank "
                        "store ('gwbatch ingest filterbank')")
    if meta.has_injections:
        raise DataError(f"store {meta.path} has an injection table already; inject into the store it was made from")
    freqs = np.asarray(meta.layout.frequencies, dtype=np.float64)
    dq = read_dq(meta, meta.ifos)
    required = meta.dq_mask(["DATA"])
    intervals = {ifo: valid_intervals(dq[i], required, meta.n_samples, meta.sample_rate)
                 for i, ifo in enumerate(meta.ifos)}
    rng = np.random.default_rng(seed)
    population = dict(dm=dm, snr=snr, width=width, spacing=spacing, scatter=scatter,
                      scatter_frequency=scatter_frequency, spectral_index=spectral_index)
    pulses, beams = _draw_in_beams(rng, count, meta.ifos, freqs, intervals, population)
    injected = [_scaled_in_store(meta, beam, pulse, intervals[beam], conditioning, trial_baseline, sigma, boxcars)
                for pulse, beam in zip(pulses, beams)]
    table = injection_table(pulses, injected, beams, meta.ifos, float(meta.t0), freqs, 1.0 / meta.sample_rate)
    provenance = {"source": "simulate pulses", "base": meta.provenance,
                  "base_store": {"path": str(meta.path), "dtype": meta.layout.dtype,
                                 "identity": {k: v for k, v in store_identity(meta).items() if k != "provenance"}},
                  "pulses": {"count": count, "seed": seed, "trial_baseline": trial_baseline, "sigma": sigma,
                             "boxcars": [int(b) for b in boxcars],
                             **{k: [float(x) for x in np.atleast_1d(v)] for k, v in population.items()}},
                  "note": "spectra are float32: the injected data are no longer at the recorded precision"}
    return _write_copy(meta, out, dq, {beam: [i.pulse for i, b in zip(injected, beams) if b == beam]
                                       for beam in meta.ifos}, table, provenance, overwrite)


def _draw_in_beams(rng: np.random.Generator, count: int, ifos, freqs, intervals: dict,
                   population: dict) -> tuple[list[Pulse], list[str]]:
    """``count`` pulses, each in a beam drawn uniformly (:func:`draw_pulses` per beam), in time order."""
    beams = [ifos[int(b)] for b in rng.integers(len(ifos), size=count)]
    drawn = []
    for beam in ifos:
        if beams.count(beam):
            drawn += [(p, beam) for p in draw_pulses(rng, beams.count(beam), freqs, intervals[beam], **population)]
    drawn.sort(key=lambda pb: pb[0].time)
    return [p for p, _ in drawn], [b for _, b in drawn]


def _scaled_in_store(meta, beam: str, pulse: Pulse, intervals, conditioning: RadioConditioning,
                     trial_baseline: float, sigma: str, boxcars: tuple[int, ...]) -> Injected:
    """``pulse`` scaled in the noise of ``beam`` around it (:func:`noise_window`, within its stretch
    of valid data)."""
    from gwbatch.io.store import read_spectra

    rate, freqs = meta.sample_rate, np.asarray(meta.layout.frequencies, dtype=np.float64)
    lo, hi = next((math.ceil(a * rate), math.floor(b * rate)) for a, b in intervals if a <= pulse.time < b)
    a, b = noise_window(pulse, freqs, 1.0 / rate, lo, hi)
    noise = measure_noise(read_spectra(meta, beam, a, b), freqs, 1.0 / rate, pulse.dm, conditioning,
                          trial_baseline=trial_baseline, sigma=sigma, boxcars=boxcars)
    return scale_to_snr(pulse, freqs, 1.0 / rate, noise)


def _write_copy(meta, out, dq: np.ndarray, pulses: dict[str, list[DispersedPulse]], table: pd.DataFrame,
                provenance: dict, overwrite: bool) -> Path:
    """Store ``meta``'s spectra as float32 at ``out`` with each beam's ``pulses`` added, its DQ and the
    injection ``table``; chunks of ``meta`` never written are left unwritten."""
    from gwbatch.io.spectra import CHUNK_BYTES
    from gwbatch.io.store import SampleLayout, StoreWriter, read_spectra

    layout = SampleLayout("float32", meta.layout.frequencies)
    chunk = max(1024, 1 << int(np.log2(max(1, CHUNK_BYTES // (layout.n_channels * 4)))))
    with StoreWriter(out, ifos=meta.ifos, sample_rate=meta.sample_rate, t0=meta.t0, n_samples=meta.n_samples,
                     chunk_samples=chunk, dq_bits=meta.dq_bits, provenance=provenance, overwrite=overwrite,
                     layout=layout) as writer:
        for row, beam in enumerate(meta.ifos):
            for a in range(0, meta.n_samples, chunk):
                b = min(meta.n_samples, a + chunk)
                if any(meta.checksum(row, k) for k in meta.chunk_range(a, b)):
                    writer.write_spectra(beam, a, add_pulses(read_spectra(meta, beam, a, b), pulses[beam], a))
            writer.write_dq(beam, 0, dq[row])
        writer.write_injections(table)
        return writer.commit()
