"""Single pulses over DM x time: every DM trial's dedispersed series through the project's boxcar
search (Adámek & Armour 2020; ALGORITHMS.md §5), all trials of a block in one pass.

Each trial is made zero-mean and unit-variance on its own: a running baseline (the clipped mean of
blocks of ``baseline`` samples, interpolated between block centres, as Heimdall removes a running
baseline; Barsdell et al. 2012) and σ, the median over blocks of their clipped standard deviations.
Clipped moments (:func:`gwbatch.radio.condition.clipped_moments`) are sums, so they cost a few passes
over the trials, where medians of every block (a sort of every sample) cost more than the
dedispersion; medians of subsampled blocks were tried and lost 18% of the tutorial pulsar's pulses
(their baseline error, 4% of σ per block, adds noise to every boxcar).  The trials are then laid end to end,
each followed by a gap of at least the widest boxcar that is masked and zero, and searched as one
series with ``sigma: white``: no boxcar reaches from one trial into the next, and one launch of the
boxcar kernels covers every trial of the block.  A boxcar's S/N is its sum over ``sqrt(width)``
(the trials have unit variance), compared across widths and DMs as Heimdall's is.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gwbatch._xp import array_namespace, to_host
from gwbatch.pulse.plan import boxcar_plan
from gwbatch.pulse.search import PulseSettings, padded_triggers
from gwbatch.radio.condition import baseline_at, block_clipped_moments, near_equal_blocks

#: Clipped passes of a trial's block moments after the unclipped one: a pulse of a few percent of a
#: block is out after the first (the cleaning's spectra take :data:`gwbatch.radio.condition.MOMENT_PASSES`).
TRIAL_PASSES = 2


TRIAL_COLUMNS = {"dm_index": "int64", "sample": "int64", "width": "int64", "snr": "float64"}


def block_moments(series, valid, window: int):
    """Clipped mean and σ of every trial of ``series`` ``(trials, n)`` in its near-equal blocks of
    about ``window`` samples (:func:`gwbatch.radio.condition.near_equal_blocks`,
    :func:`~gwbatch.radio.condition.block_clipped_moments`: sums, no sorting), as float32
    ``(trials, blocks)`` with NaN for a block without valid samples (and σ NaN for a block of fewer
    than half a window's, where a trial has longer ones), and the blocks' centres (host)."""
    xp = array_namespace(series)
    n = series.shape[1]
    window = int(max(1, min(window, n)))
    starts, lengths = near_equal_blocks(n, window)
    mean, std, counts = block_clipped_moments(series, starts, lengths, TRIAL_PASSES, valid)
    empty = counts == 0
    # a block of a few samples has a poor σ: only blocks of at least half a window vote on the trial's σ
    std = xp.where((counts < (window + 1) // 2) & (counts.max(axis=1, keepdims=True) >= (window + 1) // 2), xp.nan, std)
    centres = starts + (lengths - 1) / 2.0
    return (xp.where(empty, xp.nan, mean).astype(xp.float32), xp.where(empty, xp.nan, std).astype(xp.float32),
            centres)


def normalise_trials(series, valid, window: int, out=None, valid_out=None):
    """``series`` ``(trials, n)`` less its running baseline, over its σ (module docstring); invalid
    samples are 0.  Returns the normalised float32 trials and each trial's σ (host).  ``out``: a
    float32 ``(trials, >= n)`` array (unit element step) to write them into, its columns past ``n`` set
    to 0, and ``valid_out`` (uint8, ``out``'s layout) the mask, 0 past ``n``; on the GPU one kernel
    writes both (:func:`gwbatch.radio._cuda_moments.normalise_rows`)."""
    xp = array_namespace(series)
    n = series.shape[1]
    means, stds, centres = block_moments(series, valid, window)
    with warnings.catch_warnings():  # a trial without valid samples has no σ (inf below)
        warnings.simplefilter("ignore", RuntimeWarning)
        means = xp.where(xp.isnan(means), xp.nanmedian(means, axis=1, keepdims=True), means)
        sigma = xp.nanmedian(stds, axis=1)  # the blocks' median: one loud block does not set it
    means = xp.nan_to_num(means, nan=0.0)
    sigma = xp.where(xp.isfinite(sigma) & (sigma > 0), sigma, xp.inf)
    if xp is not np:
        from gwbatch.radio._cuda_moments import normalise_rows

        out = normalise_rows(series, centres, means, sigma.astype(xp.float32), divide=True,
                             valid=xp.ascontiguousarray(valid), out=out, valid_out=valid_out)
        return out, to_host(sigma).astype(np.float64)
    baseline = means if centres.size == 1 else baseline_at(means, centres, np.arange(n, dtype=np.float64))
    z = series - baseline
    z /= sigma[:, None].astype(xp.float32)
    if not bool(valid.all()):
        z[~valid] = 0.0
    if out is not None:
        out[:, :n] = z
        out[:, n:] = 0.0
        z = out
    if valid_out is not None:
        valid_out[:, :n] = valid
        valid_out[:, n:] = 0
    return z, to_host(sigma).astype(np.float64)


@dataclass(frozen=True)
class TrialBlock:
    """Dedispersed trials at one time decimation: ``series`` ``(trials, n)`` whose sample ``j`` starts at
    full-rate sample ``j * decimation`` of the read span, their ``valid`` mask (same shape) and their
    indices in the DM plan."""

    dm_index: np.ndarray
    decimation: int
    series: object
    valid: object


def search_trials(block: TrialBlock, boxcars: PulseSettings, baseline: int) -> pd.DataFrame:
    """Above-threshold boxcars of every trial of ``block`` (module docstring), before clustering:
    ``dm_index``, ``sample`` (first full-rate sample of the boxcar, relative to the read span),
    ``width`` (full-rate samples) and ``snr``.  ``baseline``: the running median's window in the
    block's own samples."""
    xp = array_namespace(block.series)
    n_trials, n = block.series.shape
    if n_trials == 0 or n == 0:
        return pd.DataFrame({k: np.zeros(0, v) for k, v in TRIAL_COLUMNS.items()})
    plan = boxcar_plan(boxcars.decimation)
    unit = 1 << (len(plan.rounds) - 1)  # every trial starts on a sample each round's decimation keeps
    stride = -(-(n + plan.max_width) // unit) * unit
    total = n_trials * stride
    laid = xp.empty(total + plan.max_width, dtype=xp.float32)  # the trials end to end, then the padding
    laid[total:] = 0.0
    ok = xp.empty((n_trials, stride), dtype=xp.uint8)
    normalise_trials(block.series, block.valid, baseline, out=laid[:total].reshape(n_trials, stride), valid_out=ok)
    white = PulseSettings(series="amplitude", threshold=boxcars.threshold, decimation=boxcars.decimation,
                          sigma="white", clip=None, clip_iterations=1, merge_gap=0)
    start, width, snr, _ = padded_triggers(laid, ok.ravel(), total, white, 0.0, 1.0)
    trial, at = np.divmod(start, stride)
    d = block.decimation
    return pd.DataFrame({"dm_index": np.asarray(block.dm_index, np.int64)[trial], "sample": at * d,
                         "width": width * d, "snr": snr}).astype(TRIAL_COLUMNS)
