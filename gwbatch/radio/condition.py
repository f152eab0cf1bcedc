"""Conditioning of filterbank spectra before dedispersion: baseline and scale per channel, channel
flags, zero-DM filter and sample clipping (issue 28).

Spectra ``x`` are ``(channel, time)`` arrays in file order (:mod:`gwbatch.radio`).  Every function
works in the namespace of its input (NumPy or CuPy); only per-channel vectors reach the host.
:func:`condition_spectra` runs, in order:

1. **Baseline and scale.**  The baseline of each channel is its clipped mean in blocks of about
   ``baseline_window`` seconds, linearly interpolated between block centres and held beyond the
   outer ones (one block, a constant, when the window is None or the chunk shorter), so that slow
   bandpass drifts go; the scale is the clipped standard deviation of what is left.  Clipped
   moments: the mean and standard deviation re-estimated :data:`MOMENT_PASSES` times from the
   samples within :data:`MOMENT_CLIP` σ of the last mean, which leaves Gaussian noise's σ 0.06 % low.
   Not median and MAD: on 1-8 bit samples those are quantised (tutorial.fil's 2-bit channels have
   median 2 against a mean of 1.64, and MAD 0 against σ = 0.48).
2. **Channel flags**, added to the caller's mask (True = bad): *dead* channels (clipped σ 0, or
   non-finite samples); *spectral kurtosis* (:func:`spectral_kurtosis_flags`); the channel's
   *variance* against the others' (:func:`variance_flags`).
3. **Normalise**: ``(x - baseline) / σ`` in float32, flagged channels 0, so that they add nothing
   to a dedispersed sum; the sum of ``n_good`` unit-variance channels has variance ``n_good``.
4. Optionally the **zero-DM filter** (:func:`zero_dm_filter`) and a **sample clip**
   (:func:`clip_samples`), both off by default.

The statistics (block means, σ, the channels' σ spread, spectral kurtosis) are measured on at most
:data:`STATS_SAMPLES` samples per channel: evenly spaced ones for the moments, whole SK blocks
spread evenly over the chunk for the kurtosis.  65536 samples measure σ to 0.3 %; every sample is
then normalised in one pass, piece by piece between block centres.  On a 20 s chunk of 4096 channels
at 64 µs (1.3e9 samples) the statistics over every sample took 0.56 s on an H200; the normalisation
alone is a few memory passes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gwbatch._xp import array_namespace, to_host
from gwbatch.conditioning.baseline import MIN_BASELINE_SAMPLES
from gwbatch.errors import ConfigError, DataError

#: Samples further than this many σ from the mean are left out of the next clipped-moment pass.
MOMENT_CLIP = 4.0
#: Clipped passes after the first, unclipped one.
MOMENT_PASSES = 4
#: Samples per channel the statistics are measured on (module docstring).
STATS_SAMPLES = 1 << 16
#: Most passes of the iterative channel-variance test.
VARIANCE_PASSES = 10
#: MAD of a Gaussian times this is its σ.
MAD_TO_SIGMA = 1.4826

_TINY = float(np.finfo(np.float64).tiny)


def _check_range(name: str, value, low: float, high: float, optional: bool) -> None:
    if value is None and optional:
        return
    off = " or None (off)" if optional else ""
    number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if not (number and low <= value <= high):
        raise ConfigError(f"radio conditioning {name}={value!r} is out of range: allowed {low:g} to {high:g}{off}")


@dataclass(frozen=True)
class RadioConditioning:
    """How filterbank spectra are conditioned (module docstring); ranges are checked on creation.

    ``baseline_window``: seconds per running-baseline block, 1e-3 to 1e4, or None for one constant
    per channel over the chunk.  ``sk_sigma`` (2 to 20, or None: no SK test), ``sk_block`` (M, 16 to
    65536 samples), ``sk_fraction`` (0 to 0.99) and ``sk_chunk_sigma`` (2 to 50, or None) of
    :func:`spectral_kurtosis_flags`.  ``variance_sigma`` (2 to 50, or None: no test) of
    :func:`variance_flags`.  ``zero_dm``: :func:`zero_dm_filter`.  ``clip_sigma`` (3 to 100, or
    None: no clip) of :func:`clip_samples`: off by default, because a per-channel clip at k σ
    removes a dispersed pulse whose per-channel amplitude exceeds k, which a flat-spectrum pulse of
    one sample reaches at a dedispersed S/N of about k √n_good (165 for k = 6 and parkes_8bit_1's
    754 good channels): Crab giant pulses and bright FRBs, the pulses most wanted.  Narrowband
    impulses are left to the SK test and broadband ones to the zero-DM filter.
    """

    baseline_window: float | None = 1.0
    sk_sigma: float | None = 3.0
    sk_block: int = 256
    sk_fraction: float = 0.15
    sk_chunk_sigma: float | None = 5.0
    variance_sigma: float | None = 5.0
    zero_dm: bool = False
    clip_sigma: float | None = None

    def __post_init__(self) -> None:
        _check_range("baseline_window", self.baseline_window, 1e-3, 1e4, optional=True)
        _check_range("sk_sigma", self.sk_sigma, 2.0, 20.0, optional=True)
        if isinstance(self.sk_block, bool) or not isinstance(self.sk_block, (int, np.integer)):
            raise ConfigError(f"radio conditioning sk_block={self.sk_block!r} is out of range: "
                              f"allowed a whole number of samples, 16 to 65536")
        _check_range("sk_block", self.sk_block, 16, 65536, optional=False)
        _check_range("sk_fraction", self.sk_fraction, 0.0, 0.99, optional=False)
        _check_range("sk_chunk_sigma", self.sk_chunk_sigma, 2.0, 50.0, optional=True)
        _check_range("variance_sigma", self.variance_sigma, 2.0, 50.0, optional=True)
        if not isinstance(self.zero_dm, bool):
            raise ConfigError(f"radio conditioning zero_dm={self.zero_dm!r} is out of range: allowed True or False")
        _check_range("clip_sigma", self.clip_sigma, 3.0, 100.0, optional=True)


@dataclass(frozen=True, eq=False)
class ConditionedSpectra:
    """Conditioned spectra (float32, on the input's device) and what was done to them."""

    spectra: object  # (channel, time): zero-mean unit-variance noise, flagged channels 0
    mask: np.ndarray  # bool per channel, True = flagged (the caller's mask included)
    n_good: int  # channels not flagged: a dedispersed sum of the spectra has noise variance n_good
    mean: np.ndarray  # float64 per channel: the baseline's average over the chunk
    sigma: np.ndarray  # float64 per channel: the clipped σ the channel was divided by (0 when dead)
    note: str  # what was flagged, filtered and clipped


def moments(x, keep=None):
    """Mean and standard deviation (population) along the last axis, float64, over the samples
    where ``keep`` is True (all when None); sums accumulate in float64."""
    xp = array_namespace(x)
    if keep is None:
        count = x.shape[-1]
        mean = x.sum(axis=-1, dtype=xp.float64) / count
        dev = x - mean[..., None].astype(x.dtype)
    else:
        count = xp.maximum(keep.sum(axis=-1), 1)
        mean = xp.where(keep, x, 0).sum(axis=-1, dtype=xp.float64) / count
        dev = xp.where(keep, x - mean[..., None].astype(x.dtype), 0)
    return mean, xp.sqrt((dev * dev).sum(axis=-1, dtype=xp.float64) / count)


def clipped_moments(x, valid=None, passes: int = MOMENT_PASSES):
    """:func:`moments` re-estimated ``passes`` times from the (``valid``) samples within
    :data:`MOMENT_CLIP` σ of the previous mean (samples of a pulse or an RFI burst drop out)."""
    xp = array_namespace(x)
    if xp is not np:  # one kernel, every pass (gwbatch.radio._cuda_moments)
        from gwbatch.radio._cuda_moments import clipped_moments as on_gpu

        mean, std, _, _ = on_gpu(x, valid, passes, MOMENT_CLIP)
        return mean, std
    mean, std = moments(x, valid)
    for _ in range(passes):
        keep = xp.abs(x - mean[..., None].astype(x.dtype)) <= (MOMENT_CLIP * std)[..., None]
        mean, std = moments(x, keep if valid is None else keep & valid)
    return mean, std


def clipped_and_plain_sigma(z) -> tuple[np.ndarray, np.ndarray]:
    """The clipped σ (:func:`clipped_moments`) and the plain σ (:func:`moments`) of each row of ``z``
    (host float64); on the GPU from one kernel (the plain moments are its first pass)."""
    if array_namespace(z) is not np:
        from gwbatch.radio._cuda_moments import clipped_moments as on_gpu

        _, clipped, _, plain = on_gpu(z, None, MOMENT_PASSES, MOMENT_CLIP)
        return to_host(clipped), to_host(plain)
    return to_host(clipped_moments(z)[1]), to_host(moments(z)[1])


def near_equal_blocks(n: int, window: int) -> tuple[np.ndarray, np.ndarray]:
    """``max(1, round(n / window))`` near-equal blocks of ``n`` samples: their starts and lengths
    (host int64).  Not ``window`` each and a remainder: a remainder of a few samples has a mean as
    noisy as a sample, and a baseline interpolated towards it is wrong over a whole block."""
    edges = np.round(np.linspace(0, n, max(1, round(n / window)) + 1)).astype(np.int64)
    return edges[:-1], np.diff(edges)


def block_clipped_moments(x, starts: np.ndarray, lengths: np.ndarray, passes: int, valid=None):
    """:func:`clipped_moments` of blocks ``[starts, starts + lengths)`` of every row of 2-D ``x``
    (``valid``: a bool mask of ``x``'s shape, or None): mean, σ (float64) and valid count, each
    ``(rows, blocks)``.  On the GPU one kernel reads each block once, in place (any strides;
    :func:`gwbatch.radio._cuda_moments.segment_moments`)."""
    xp = array_namespace(x)
    if xp is not np:
        from gwbatch.radio._cuda_moments import segment_moments

        mean, std, _, _, count = segment_moments(x, starts, lengths, passes, MOMENT_CLIP,
                                                 valid=None if valid is None else xp.ascontiguousarray(valid))
        return mean, std, count
    offsets = np.arange(lengths.max())
    index = np.minimum(starts[:, None] + offsets, x.shape[1] - 1)
    keep = offsets < lengths[:, None]
    if valid is not None:
        keep = np.asarray(valid)[:, index] & keep
    mean, std = clipped_moments(np.asarray(x)[:, index], keep, passes)
    return mean, std, np.broadcast_to(keep, (x.shape[0], *keep.shape[-2:])).sum(axis=2)


def block_means(x, window: int):
    """The clipped mean of each channel of ``x`` in each of its :func:`near_equal_blocks` of about
    ``window`` samples (float32 ``(channel, block)``), and the blocks' centres (host float64, samples)."""
    starts, lengths = near_equal_blocks(x.shape[1], window)
    mean, _, _ = block_clipped_moments(x, starts, lengths, MOMENT_PASSES)
    return mean.astype(array_namespace(x).float32), starts + (lengths - 1) / 2.0


def interpolation(centres: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where samples ``t`` lie between block ``centres`` (host): the block on the left and the weight
    of the one on its right (float32), clipped to the outer blocks (one block: 0 and 0)."""
    if centres.size == 1:
        return np.zeros(t.size, np.int64), np.zeros(t.size, np.float32)
    right = np.clip(np.searchsorted(centres, t, side="right"), 1, centres.size - 1)
    weight = np.clip((t - centres[right - 1]) / (centres[right] - centres[right - 1]), 0.0, 1.0)
    return right - 1, weight.astype(np.float32)


def baseline_at(means, centres: np.ndarray, t: np.ndarray):
    """The baseline of block ``means`` (``(channel, block)`` at ``centres``) at samples ``t`` (host):
    linear between block centres, constant beyond the outer ones (float32 ``(channel, t)``)."""
    xp = array_namespace(means)
    if centres.size == 1:
        return xp.broadcast_to(means[:, :1], (means.shape[0], t.size))
    left, weight = interpolation(centres, t)
    weight = xp.asarray(weight)
    return means[:, left] * (1 - weight) + means[:, left + 1] * weight


def baseline_level(means, centres: np.ndarray, n: int):
    """The average of :func:`baseline_at` over samples ``0 .. n - 1`` (float64 per channel): block
    ``means`` times each block's share of the interpolation weights (one small product, not a pass
    over the samples)."""
    xp = array_namespace(means)
    left, weight = interpolation(centres, np.arange(n, dtype=np.float64))
    weight = weight.astype(np.float64)
    share = np.bincount(left, 1.0 - weight, minlength=centres.size)
    share += np.bincount(np.minimum(left + 1, centres.size - 1), weight, minlength=centres.size)
    return means.astype(xp.float64) @ xp.asarray(share / n)


def normalise(x, means, centres: np.ndarray, scale):
    """``(x - baseline) * scale`` (float32, a new array), the baseline of block ``means`` at ``centres``
    (:func:`baseline_at`), written piece by piece between centres so that no temporary of ``x``'s size
    is made; ``scale``: one per channel, ``(channel, 1)``."""
    xp = array_namespace(x)
    ntime = x.shape[1]
    if xp is not np:  # one pass, from x in place (gwbatch.radio._cuda_moments)
        from gwbatch.radio._cuda_moments import normalise_rows

        return normalise_rows(x, centres, means, scale)
    out = xp.empty(x.shape, dtype=xp.float32)
    cuts = np.unique(np.clip(np.ceil(centres).astype(np.int64), 0, ntime))
    bounds = np.concatenate([[0], cuts, [ntime]])
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b > a:
            out[:, a:b] = (x[:, a:b] - baseline_at(means, centres, np.arange(a, b, dtype=np.float64))) * scale
    return out


def spectral_kurtosis(s1, s2, m: int, d):
    """Generalised spectral kurtosis estimator (Nita & Gary 2010, MNRAS 406 L60) of blocks of ``m``
    samples, each the sum of ``d`` detected powers, with sums ``s1`` = Σx and ``s2`` = Σx²:
    ``SK = (m d + 1) / (m - 1) (m s2 / s1² - 1)``; expectation 1 for gamma(d) samples (an all-zero
    block gives 0)."""
    xp = array_namespace(s1, s2)
    return (m * d + 1) / (m - 1) * (m * s2 - s1 * s1) / xp.maximum(s1 * s1, _TINY)


def spectral_kurtosis_variance(m: int, d):
    """Variance of :func:`spectral_kurtosis` for gamma(d) samples (Nita & Gary 2010):
    ``2 d (d + 1) m² Γ(m d + 2) / ((m - 1) Γ(m d + 4))`` = ``2 d (d + 1) m² / ((m - 1)(m d + 2)(m d + 3))``,
    about ``2 (1 + 1/d) / m`` for large ``m``."""
    return 2 * d * (d + 1) * m * m / ((m - 1) * (m * d + 2) * (m * d + 3))


def sk_sums(x, starts: np.ndarray, m: int, means, centres: np.ndarray, inverse: np.ndarray):
    """Sums ``s1`` = Σz² and ``s2`` = Σz⁴ (float64 ``(channel, block)``) over the ``m`` samples from each
    of ``starts`` of every channel of spectra ``x``, ``z`` being the sample less the baseline of block
    ``means`` at ``centres``, times ``inverse`` (one per channel) in float32, as :func:`normalise`
    makes it; on the GPU read from ``x`` in place by one kernel."""
    xp = array_namespace(x)
    if xp is not np:
        from gwbatch.radio._cuda_moments import sk_sums as on_gpu

        return on_gpu(x, starts, m, centres, means, np.asarray(inverse, np.float32))
    picked = (np.asarray(starts, np.int64)[:, None] + np.arange(m)).ravel()
    z = (x[:, picked] - baseline_at(means, centres, picked.astype(np.float64))) * np.asarray(inverse, np.float32)[:, None]
    power = z.reshape(x.shape[0], -1, m) ** 2
    return power.sum(axis=-1, dtype=np.float64), (power * power).sum(axis=-1, dtype=np.float64)


def spectral_kurtosis_flags(s1, s2, m: int, eligible: np.ndarray, sigma: float, fraction: float,
                            chunk_sigma: float | None) -> tuple[np.ndarray, float, float]:
    """Channels (host bool, among ``eligible``) whose spectral kurtosis departs from the others', from
    the sums ``s1``, ``s2`` (:func:`sk_sums`) of blocks of ``m`` normalised samples per channel, and
    the centres it is measured from (blocks, whole chunk).

    SK of the detected samples: a filterbank sample is an average of N = |Δν| tsamp npol powers
    (4096 for Parkes UWL's 4 MHz x 512 µs x 2), Gaussian by the central limit theorem (excess
    kurtosis 6 / N), but recorders rescale and offset it before requantising, so neither N nor a
    zero level is known and the power-domain estimator cannot be calibrated.  The baseline-removed
    sample z is Gaussian with unknown σ, so z² is gamma-distributed with d = 1/2 (one real degree
    of freedom), whatever N and the offset: :func:`spectral_kurtosis` of z² with d = 1/2 has the
    Nita & Gary expectation 1 and variance ≈ 6 / M (it is (M + 2)(k - 1) / (2 (M - 1)) for the
    sample kurtosis k = M Σz⁴ / (Σz²)² of a block).  M = ``m`` samples per block (the condition's
    ``min(sk_block, ntime)``, whole blocks only).  Impulsive RFI gives SK > 1, a sinusoidally
    modulated channel SK < 1; steady Gaussian excess noise leaves SK at 1 (:func:`variance_flags`
    sees it).

    A channel is flagged when more than ``fraction`` of its blocks, and at least 2, lie beyond
    ``sigma`` √Var(M) of the blocks' centre (intermittent RFI), or when the SK of all its whole
    blocks together lies beyond ``chunk_sigma`` √Var(M x blocks) of the chunk's centre (persistent
    impulses, and RFI switching on scales longer than a block such as Iridium's at 1622 MHz in
    parkes_8bit_1.fil; None: not tested).  The centres are medians over the eligible channels
    (of their mean block SK, and of their chunk SK): 1 for Gaussian samples (1.003 and 1.004
    measured on parkes_8bit_1.fil), but coarse quantisation moves them for every channel alike
    (2-bit tutorial.fil: 0.16).  The SK distribution is skewed to high values: of Gaussian blocks
    of 256, 0.9 % lie beyond +3σ and none below -3σ, so that 3 or more of 16 such blocks are out
    (the defaults' rule for 16 blocks) in 5e-4 of clean channels.
    """
    xp = array_namespace(s1, s2)
    nblocks = s1.shape[1]
    sk = spectral_kurtosis(s1, s2, m, 0.5)
    mean_sk = to_host(sk.mean(axis=1))
    centre = float(np.median(mean_sk[eligible])) if eligible.any() else 1.0
    outside = to_host((xp.abs(sk - centre) > sigma * np.sqrt(spectral_kurtosis_variance(m, 0.5))).sum(axis=1))
    flagged = outside > max(fraction * nblocks, 1)
    chunk_sk = to_host(spectral_kurtosis(s1.sum(axis=1), s2.sum(axis=1), m * nblocks, 0.5))
    chunk_centre = float(np.median(chunk_sk[eligible])) if eligible.any() else 1.0
    if chunk_sigma is not None:
        flagged |= np.abs(chunk_sk - chunk_centre) > chunk_sigma * np.sqrt(spectral_kurtosis_variance(m * nblocks, 0.5))
    return flagged & eligible, centre, chunk_centre


def variance_flags(std: np.ndarray, eligible: np.ndarray, sigma: float) -> np.ndarray:
    """Channels (host bool) whose log σ (``std``, host, per channel) lies more than ``sigma`` robust σ
    (MAD x 1.4826) from the median over the ``eligible`` channels not yet flagged, repeated
    without the flagged ones until no more are flagged (at most :data:`VARIANCE_PASSES` passes).
    log σ: bandpass gains are factors, and a channel close to dead is as far out as a loud one.
    The spread is that of the recorder's channel gains (parkes_8bit_1.fil, whose recorder flattens
    the band: 4 % in σ); a steep, unflattened bandpass widens it, and then only grosser outliers
    are flagged."""
    log_std = np.log(np.where(std > 0, std, 1.0))
    flagged = np.zeros(std.shape, dtype=bool)
    for _ in range(VARIANCE_PASSES):
        reference = log_std[eligible & ~flagged]
        if reference.size < 3:
            break
        centre = np.median(reference)
        scale = MAD_TO_SIGMA * np.median(np.abs(reference - centre))
        outliers = eligible & (np.abs(log_std - centre) > sigma * scale)
        if scale == 0 or not (outliers & ~flagged).any():
            break
        flagged |= outliers
    return flagged


def zero_dm_filter(spectra, good: np.ndarray):
    """Subtract from every good channel the mean over the good channels at each sample (Eatough,
    Keane & Lyne 2009, MNRAS 395 410); other channels are left as they are.  It removes
    broadband (DM 0) signals; a pulse dispersed over many samples loses about the fraction of good
    channels it lights at once."""
    xp = array_namespace(spectra)
    n_good = int(good.sum())
    if n_good == 0:
        return spectra
    weights = xp.asarray(good, dtype=spectra.dtype)
    return spectra - weights[:, None] * ((weights @ spectra) / n_good)[None, :]


def clip_samples(spectra, sigma: float):
    """``spectra`` with samples beyond ``sigma`` (in units of the normalised noise) set to 0, and
    how many were."""
    xp = array_namespace(spectra)
    outliers = xp.abs(spectra) > sigma
    return xp.where(outliers, spectra.dtype.type(0), spectra), int(outliers.sum())


def _sk_starts(ntime: int, block: int) -> tuple[np.ndarray, int]:
    """The blocks SK is measured on: their first samples (host int64) and their length ``m`` =
    ``min(block, ntime)``; whole blocks, all of them up to :data:`STATS_SAMPLES` samples, else that
    many spread evenly over the chunk."""
    m = min(block, ntime)
    n_blocks = ntime // m
    keep = max(1, min(n_blocks, STATS_SAMPLES // m))
    return np.unique(np.round(np.linspace(0, n_blocks - 1, keep)).astype(np.int64)) * m, m


def _window_samples(window: float | None, tsamp: float, ntime: int) -> int:
    if window is None:
        return ntime
    samples = round(window / tsamp)
    if samples < MIN_BASELINE_SAMPLES:
        raise ConfigError(f"radio conditioning baseline_window={window} s is {samples} samples of {tsamp} s; "
                          f"it must hold at least {MIN_BASELINE_SAMPLES}")
    return samples


def _checked_inputs(x, tsamp: float, user_mask, xp):
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 2:
        raise DataError(f"spectra of shape {x.shape}; expected (channels, time) with at least 2 samples")
    if not (np.isfinite(tsamp) and tsamp > 0):
        raise DataError(f"tsamp={tsamp} s; expected a positive sampling interval")
    user = np.zeros(x.shape[0], dtype=bool) if user_mask is None else to_host(user_mask)
    if user.shape != (x.shape[0],) or user.dtype != np.bool_:
        raise DataError(f"user mask of dtype {user.dtype} and shape {user.shape}; expected bool ({x.shape[0]},)")
    return xp.ascontiguousarray(x, dtype=xp.float32), user


def condition_spectra(x, settings: RadioConditioning, tsamp: float, user_mask=None) -> ConditionedSpectra:
    """Condition spectra ``x`` (channel, time; any real dtype, taken as float32) sampled every
    ``tsamp`` seconds; ``user_mask`` (bool per channel, True = bad, NumPy or CuPy) is added to the
    flags (module docstring)."""
    xp = array_namespace(x)
    integers = np.dtype(x.dtype).kind in "biu"  # samples as recorded: every one is finite
    x, user = _checked_inputs(x, tsamp, user_mask, xp)
    if integers:
        finite = np.ones(x.shape[0], dtype=bool)
    else:
        finite = to_host(xp.isfinite(x.sum(axis=1, dtype=xp.float64)))  # a non-finite sample makes the sum so
    if not finite.all():
        x = xp.where(xp.isfinite(x), x, xp.float32(0))
    ntime = x.shape[1]
    stride = max(1, ntime // STATS_SAMPLES)
    sampled = xp.ascontiguousarray(x[:, ::stride])  # one strided read; the statistics' passes read this
    means, centres = block_means(sampled, max(1, round(_window_samples(settings.baseline_window, tsamp, ntime) / stride)))
    z_sampled = normalise(sampled, means, centres, xp.ones((x.shape[0], 1), dtype=xp.float32))
    level = baseline_level(means, centres, sampled.shape[1])
    centres = centres * stride  # in samples of x
    sigma, plain = clipped_and_plain_sigma(z_sampled)
    inverse = np.where(sigma > 0, 1.0 / np.where(sigma > 0, sigma, 1.0), 0.0)
    flags = {"user": user, "dead": ~finite | ~(sigma > 0)}
    eligible = ~user & ~flags["dead"]
    notes = []
    if settings.sk_sigma is not None:
        starts, m = _sk_starts(ntime, settings.sk_block)
        s1, s2 = sk_sums(x, starts, m, means, centres, inverse)
        flags["SK"], centre, chunk_centre = spectral_kurtosis_flags(
            s1, s2, m, eligible, settings.sk_sigma, settings.sk_fraction, settings.sk_chunk_sigma)
        notes.append(f"SK centres {centre:.3f} (blocks), {chunk_centre:.3f} (chunk)")
    if settings.variance_sigma is not None:
        flags["variance"] = variance_flags(plain, eligible, settings.variance_sigma)
    good = ~np.logical_or.reduce(list(flags.values()))
    z = normalise(x, means, centres, xp.asarray(np.where(good, inverse, 0.0), dtype=xp.float32)[:, None])
    if settings.zero_dm:
        z = zero_dm_filter(z, good)
        notes.append("zero-DM filtered")
    if settings.clip_sigma is not None:
        z, clipped = clip_samples(z, settings.clip_sigma)
        notes.append(f"{clipped} samples beyond {settings.clip_sigma:g} sigma set to 0")
    counts = ", ".join(f"{name} {int(f.sum())}" for name, f in flags.items())
    note = f"{int(good.sum())} of {good.size} channels good (flagged: {counts})"
    return ConditionedSpectra(z, ~good, int(good.sum()), to_host(level),
                              np.where(finite, sigma, 0.0).astype(np.float64), "; ".join([note, *notes]))
