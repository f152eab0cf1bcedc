"""Conditioning shared by every search: PSD, whitening, gating, baseline, masks (ALGORITHMS.md §1).

One code path for NumPy and CuPy: every function takes arrays and works in their namespace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gwbatch._xp import array_namespace
from gwbatch.conditioning.baseline import running_median_baseline
from gwbatch.conditioning.gating import apply_gating
from gwbatch.conditioning.psd import MIN_SEGMENTS, psd_method
from gwbatch.conditioning.whiten import snr2_per_energy, whiten, whitening_taps


@dataclass(frozen=True)
class ConditioningSettings:
    """How a chunk's series are conditioned (the campaign's ``conditioning`` section, frozen:
    :meth:`gwbatch.config.ConditioningConfig.settings`).  Times in seconds, frequencies in Hz."""

    whiten: bool  # with the chunk's own PSD; False for radio and SNR series
    psd_method: str  # a name of :func:`gwbatch.conditioning.psd.psd_method`
    psd_segment: float  # Welch segment length
    filter_duration: float  # whitening filter length; half of it is cropped at data edges
    f_low: float  # whitening band
    f_high: float | None  # None: Nyquist
    gate_threshold: float | None  # whitened sigma; None: no gating
    gate_half_width: float
    gate_taper: float
    baseline: float | None  # running-median window subtracted from an un-whitened series


@dataclass
class Conditioned:
    """A conditioned series on the backend's device, with its validity mask and what was done."""

    data: object  # float64 array
    valid: object  # bool array
    gate_peaks: np.ndarray  # host sample indices (relative to the series start) of gate centres
    gate_values: np.ndarray  # whitened |x| at each gate centre (σ)
    psd_segments: int
    snr2_per_energy: float | None  # rho^2 per unit whitened energy; None when not whitened
    note: str = ""
    psd: tuple | None = None  # (frequencies, one-sided PSD) the data were whitened with, when whitened
    gated: object = None  # bool array of the samples gating took out of ``valid`` (None: no gating)


def filter_half_length(cfg: ConditioningSettings, sample_rate: float) -> int:
    """Samples corrupted on each side of an edge or gap by conditioning (0 without whitening)."""
    return int(round(cfg.filter_duration * sample_rate)) // 2 if cfg.whiten else 0


def condition(x, valid, cfg: ConditioningSettings, sample_rate: float) -> Conditioned:
    """Condition one series ``x`` (float64) whose usable samples are ``valid``."""
    xp = array_namespace(x, valid)
    snr2 = None
    nseg = 0
    if cfg.whiten:
        freqs, psd, nseg = psd_method(cfg.psd_method)(x, valid, sample_rate, cfg.psd_segment)
        if psd is None:
            note = f"PSD not estimated: {nseg} fully valid {cfg.psd_segment:g} s segments (need {MIN_SEGMENTS})"
            none = np.zeros(0, np.int64)
            return Conditioned(xp.zeros_like(x), xp.zeros(x.size, dtype=bool), none, none.astype(float), nseg, None, note)
        taps = whitening_taps(freqs, psd, sample_rate, int(round(cfg.filter_duration * sample_rate)), cfg.f_low, cfg.f_high)
        data, valid = whiten(x, valid, taps)
        snr2 = snr2_per_energy(sample_rate, cfg.f_low, cfg.f_high)
    else:
        data = xp.where(valid, x, 0.0)
        if cfg.baseline is not None:
            data = data - running_median_baseline(data, valid, max(1, int(round(cfg.baseline * sample_rate))))
            data = xp.where(valid, data, 0.0)
    peaks, values, gated = np.zeros(0, np.int64), np.zeros(0), None
    if cfg.gate_threshold is not None:
        before = valid
        data, valid, peaks, values = apply_gating(
            data, valid, cfg.gate_threshold,
            int(round(cfg.gate_half_width * sample_rate)), int(round(cfg.gate_taper * sample_rate)),
        )
        gated = before & ~valid
    return Conditioned(data, valid, peaks, values, nseg, snr2, psd=(freqs, psd) if cfg.whiten else None, gated=gated)
