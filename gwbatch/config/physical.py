"""Rules that need the data: settings the store's sample rate makes meaningless."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gwbatch.conditioning.baseline import MIN_BASELINE_SAMPLES
from gwbatch.config.limits import MAX_SAMPLES, MIN_FILTER_SAMPLES
from gwbatch.errors import ConfigError, DataError

if TYPE_CHECKING:
    from gwbatch.config.schema import Campaign


def physical_bounds(campaign: Campaign, sample_rate: float) -> None:
    """Refuse settings that the data's sample rate makes meaningless, naming the key, its value and
    the allowed range: whitening band edges at or above Nyquist, a whitening filter shorter than
    :data:`MIN_FILTER_SAMPLES` samples, a running baseline shorter than
    :data:`~gwbatch.conditioning.baseline.MIN_BASELINE_SAMPLES` samples (one of a sample subtracts the
    series from itself and leaves nothing to search), a chunk shorter than a sample, and spans whose sample
    counts overflow int64.  A search's own rules of this kind are its settings' (built with the
    sample rate: :meth:`gwbatch.searches.base.Search.settings`)."""
    fs = float(sample_rate)
    if not (math.isfinite(fs) and fs > 0):
        raise DataError(f"the store's sample rate ({sample_rate!r} Hz) is not a positive number")
    nyquist = fs / 2.0
    cond = campaign.conditioning
    if cond.whiten:
        if cond.f_low >= nyquist:
            raise ConfigError(f"conditioning.f_low ({cond.f_low:g} Hz) must be below the Nyquist frequency of the "
                              f"store ({nyquist:g} Hz)")
        if cond.f_high is not None and cond.f_high > nyquist:
            raise ConfigError(f"conditioning.f_high ({cond.f_high:g} Hz) must be at most the Nyquist frequency of "
                              f"the store ({nyquist:g} Hz); leave it out for Nyquist")
        if cond.filter_duration * fs < MIN_FILTER_SAMPLES:
            raise ConfigError(f"conditioning.filter_duration ({cond.filter_duration:g} s) is "
                              f"{cond.filter_duration * fs:.3g} samples at {fs:g} Hz; it must be at least "
                              f"{MIN_FILTER_SAMPLES} samples ({MIN_FILTER_SAMPLES / fs:g} s)")
    if cond.baseline is not None and cond.baseline * fs < MIN_BASELINE_SAMPLES:
        raise ConfigError(f"conditioning.baseline ({cond.baseline:g} s) is {cond.baseline * fs:.3g} samples at {fs:g} Hz; "
                          f"a running baseline needs at least {MIN_BASELINE_SAMPLES} samples "
                          f"({MIN_BASELINE_SAMPLES / fs:g} s), and should be far longer than the widest boxcar")
    chunk = None if campaign.plan.chunk == "auto" else campaign.plan.chunk  # auto: sized by the plan
    for key, seconds in (("plan.chunk", chunk), ("data.duration", campaign.data.duration)):
        if seconds is not None and seconds * fs < 1:
            raise ConfigError(f"{key} ({seconds:g} s) is shorter than one sample at {fs:g} Hz (at least {1 / fs:g} s)")
    for key, seconds in (("plan.chunk", chunk), ("data.duration", campaign.data.duration),
                         ("data.start", campaign.data.start)):
        if seconds is not None and seconds * fs > MAX_SAMPLES:
            raise ConfigError(f"{key} ({seconds:g} s) is {seconds * fs:.3g} samples at {fs:g} Hz, more than a sample "
                              f"index holds (2**62); at most {MAX_SAMPLES / fs:.6g} s")
