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
series with the kernels' white constants: no boxcar reaches from one trial into the next, and one
launch of the boxcar kernels covers every trial of the block.  With ``sigma: white`` a boxcar's S/N
is its sum over ``sqrt(width)`` (the trials have unit variance).

Real dedispersed trials are not white: a receiver's slow variations and residual RFI make the wide
boxcars of low-DM trials several times noisier than ``sqrt(width)`` (Parkes UWL, DM 4.4: a 128-sample
boxcar's σ is 4.9 ``sqrt(128)``).  With ``sigma: measured`` (the radio default) each trial's boxcars are
normalised by their own measured σ, as Heimdall divides every filtered series by its own RMS
(Barsdell et al. 2012): per trial, the σ of its boxcars of 1, 2, 4, ... samples up to the widest,
from their median absolute deviation (:func:`boxcar_excess`), interpolated in ``log2(width)`` between
them and never below the
white ``sqrt(width)`` (:func:`measured_over_white`; a measured σ at the widest boxcar and the eq. 5
line of Adámek & Armour 2020 from width 1 overstate the σ of narrow boxcars in such noise).  So no
S/N rises above its white value, the kernels' white search at the threshold finds every boxcar the
measured S/N keeps, and each is then rescaled and cut again; only the trials holding such a boxcar
are measured.
"""

from __future__ import annotations

import functools
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
    if boxcars.sigma == "measured" and trial.size:
        rows, row = np.unique(trial, return_inverse=True)
        excess = boxcar_excess(laid[:total].reshape(n_trials, stride), ok, rows, plan.max_width)
        snr = snr / measured_over_white(excess[row], width)
        keep = snr >= boxcars.threshold
        trial, at, width, snr = trial[keep], at[keep], width[keep], snr[keep]
    d = block.decimation
    return pd.DataFrame({"dm_index": np.asarray(block.dm_index, np.int64)[trial], "sample": at * d,
                         "width": width * d, "snr": snr}).astype(TRIAL_COLUMNS)


#: The radio search's boxcar plan (widths per round; :mod:`gwbatch.pulse.plan`) unless set.
DEFAULT_BOXCARS = (32, 16, 16, 16)
#: Gaussian σ per median absolute deviation.
MAD_SIGMA = 1.482602218505602
#: Boxcars per width and trial whose MAD gives their σ (evenly spaced; 1.3 % standard error).
SIGMA_BOXCARS = 8192
#: Trial samples measured at once by :func:`boxcar_excess`, in at most this many trials (a CUDA grid's
#: second dimension), and the bytes per such sample its temporaries hold at most (a float32 copy,
#: float64 values and prefix sums, the mask and its float64 prefix sums: the memory plan counts them).
SIGMA_GROUP_SAMPLES, SIGMA_GROUP_ROWS, SIGMA_BYTES = 1 << 22, 32768, 48


def excess_widths(max_width: int) -> np.ndarray:
    """The boxcar widths whose σ is measured: 1, 2, 4, ... up to the first at or above ``max_width``."""
    return 1 << np.arange(int(max(max_width - 1, 0)).bit_length() + 1)


def boxcar_excess(laid, ok, rows: np.ndarray, max_width: int) -> np.ndarray:
    """Host float64 ``(len(rows), len(excess_widths(max_width)))``: for each trial ``rows[i]`` of
    ``laid`` ``(trials, n)`` (normalised, invalid samples 0; ``ok`` its mask) and each width ``w`` of
    :func:`excess_widths`, the σ of its boxcars of ``w`` samples (about :data:`SIGMA_BOXCARS` evenly
    spaced starts whose samples are all valid) from their median absolute deviation, over the white
    ``sqrt(w)``; NaN where fewer than two such boxcars exist.  The MAD, not a clipped standard
    deviation: a pulsar's own pulses (S/N ~6 in 4 % of tutorial.fil's samples) raise a 4σ-clipped σ of
    its 32-sample boxcars enough to cost 10 % of its pulses (209 of ~240 found against 231); they move
    the median little."""
    xp = array_namespace(laid)
    widths = excess_widths(max_width)
    out = np.full((len(rows), widths.size), np.nan)
    n = laid.shape[1]
    widths = widths[widths <= n]
    if widths.size == 0:
        return out
    group = min(max(1, SIGMA_GROUP_SAMPLES // n), SIGMA_GROUP_ROWS)
    for g in range(0, len(rows), group):
        pick = xp.asarray(rows[g : g + group])
        bad = ok[pick] == 0
        zero = xp.zeros((pick.size, 1))
        prefix = xp.concatenate([zero, xp.cumsum(xp.where(bad, 0.0, laid[pick]), axis=1, dtype=xp.float64)], axis=1)
        holes = xp.concatenate([zero, xp.cumsum(bad, axis=1, dtype=xp.float64)], axis=1)
        if xp is np:
            mad, counts = _boxcar_mad(prefix, holes, widths.size)
        else:  # one thread block per (width, row): gather, sort, sort (gwbatch.radio._cuda_moments)
            from gwbatch.radio._cuda_moments import boxcar_mad

            mad, counts = boxcar_mad(prefix, holes, widths.size)
        mad, counts = to_host(xp.stack([mad, counts.astype(xp.float32)]))  # one copy to the host
        out[g : g + pick.size, : widths.size] = np.where(counts > 1, MAD_SIGMA * mad / np.sqrt(widths), np.nan)
    return out


def _boxcar_mad(prefix: np.ndarray, holes: np.ndarray, n_widths: int):
    """The NumPy twin of :func:`gwbatch.radio._cuda_moments.boxcar_mad`: per row and width ``2^w``
    (``w < n_widths``), the median absolute deviation (float32) of the boxcar sums at the starts of
    :func:`_spread_starts` whose samples are all valid, and their number."""
    widths = 1 << np.arange(n_widths)
    starts, take = _spread_starts(prefix.shape[1] - 1, n_widths)
    spans = starts + widths[:, None]
    whole = ((holes[:, spans] - holes[:, starts]) == 0) & take  # (rows, widths, boxcars)
    sums = np.where(whole, (prefix[:, spans] - prefix[:, starts]).astype(np.float32), np.float32(np.nan))
    counts = whole.sum(axis=2)
    centre = _medians(sums, counts)
    return _medians(np.abs(sums - centre[..., None]), counts), counts


def _medians(x: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Medians along the last axis of float32 ``x`` whose ``counts`` values are numbers and the rest
    NaN (a sort puts NaN last), half the sum of the two middle ones in float32; NaN where ``counts``
    is 0."""
    ordered = np.sort(x, axis=-1)
    lo = np.maximum((counts - 1) // 2, 0)[..., None]
    hi = np.maximum(counts // 2, 0)[..., None]
    both = np.take_along_axis(ordered, lo, axis=-1) + np.take_along_axis(ordered, hi, axis=-1)
    return (np.float32(0.5) * both)[..., 0]


@functools.lru_cache(maxsize=64)
def _spread_starts(n: int, n_widths: int) -> tuple[np.ndarray, np.ndarray]:
    """For boxcars of ``2^w`` samples (``w < n_widths``) in ``n``: at most :data:`SIGMA_BOXCARS`
    distinct starts ``k positions // count`` spread evenly over the ``positions = n - 2^w + 1``
    there are, ``(n_widths, SIGMA_BOXCARS)`` int64 (padded with 0), and which of them are real
    (bool); made once per shape (read-only)."""
    positions = n - (1 << np.arange(n_widths, dtype=np.int64)) + 1
    count = np.minimum(positions, SIGMA_BOXCARS)
    k = np.arange(SIGMA_BOXCARS)
    take = k[None, :] < count[:, None]
    starts = np.where(take, (k[None, :] * positions[:, None]) // np.maximum(count[:, None], 1), 0).astype(np.int64)
    starts.flags.writeable = take.flags.writeable = False
    return starts, take


def measured_over_white(excess: np.ndarray, width: np.ndarray) -> np.ndarray:
    """For boxcars of ``width`` samples with the measured ``excess`` rows (:func:`boxcar_excess`, one
    row per boxcar), their σ over the white ``sqrt(width)``: interpolated linearly in ``log2(width)``
    between the measured powers of two (the widest beyond them), at least 1; a NaN counts as 1."""
    excess = np.maximum(np.nan_to_num(np.asarray(excess, np.float64), nan=1.0), 1.0)
    position = np.clip(np.log2(np.maximum(np.asarray(width, np.float64), 1.0)), 0, excess.shape[1] - 1)
    lower = np.floor(position).astype(np.int64)
    upper = np.minimum(lower + 1, excess.shape[1] - 1)
    rows = np.arange(excess.shape[0])
    frac = position - lower
    return (1 - frac) * excess[rows, lower] + frac * excess[rows, upper]


def series_excess(z: np.ndarray, valid: np.ndarray, max_width: int) -> np.ndarray:
    """:func:`boxcar_excess` of one normalised trial ``z`` (1-D, ``valid`` its bool mask), host ``(widths,)``."""
    laid = np.where(valid, z, 0.0).astype(np.float32)[None]
    return boxcar_excess(laid, np.asarray(valid, np.uint8)[None], np.array([0]), max_width)[0]
