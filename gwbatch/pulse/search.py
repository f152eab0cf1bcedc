"""The single-pulse search of one conditioned series (ALGORITHMS.md §5; Adámek & Armour 2018).

1. The detection series (``amplitude`` or ``energy``, :mod:`gwbatch.pulse.series`), its mean and
   standard deviation by Chan et al.'s pairwise updates with outlier rejection (see
   :func:`series_moments`), so loud pulses do not raise the noise estimate.
2. Invalid samples are replaced by the mean, so a boxcar touching them gains nothing.
3. Boxcar rounds of the decimation plan; each round reports, per boxcar start, the best
   (SNR, width); starts over the threshold at valid samples become triggers.
4. Triggers are merged friends-of-friends over their boxcar intervals; each group keeps its peak.
5. Each trigger is timed by the centroid of the series' excess over the mean inside its best
   boxcar.  The boxcar centre would do for the amplitude series, but for a loud transient in the
   energy series the best boxcar can be much wider than the pulse (the chi-squared significance of
   a fixed energy changes slowly with width), so its centre is not where the pulse is.

Everything up to the threshold runs on the series' backend; only triggers come back to the host.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gwbatch._xp import array_namespace, to_host
from gwbatch.candidates.fof import friends_of_friends
from gwbatch.pulse.boxcar import run_rounds
from gwbatch.pulse.plan import boxcar_plan
from gwbatch.pulse.series import boxcar_sum, detection_series, round_constants, sigma_n
from gwbatch.pulse.stats import robust_moments


@dataclass(frozen=True)
class PulseSettings:
    """The boxcar search of one series (the campaign's ``search`` section of ``kind: pulse``, frozen:
    :meth:`gwbatch.searches.pulse.PulseSearchConfig.settings`)."""

    series: str  # "energy" (boxcars over whitened x^2) or "amplitude" (over the series itself)
    threshold: float  # detection SNR (sigma)
    decimation: tuple[int, ...]  # boxcar widths per round; each round after the first decimates by 2
    sigma: str  # sigma_N model: "white" (eq. 4) or "linear" (eq. 5)
    clip: float | None  # outlier rejection (sigma) of the mean and sigma estimates; None: off
    clip_iterations: int
    merge_gap: int  # samples allowed between boxcars merged friends-of-friends


@dataclass(frozen=True)
class SeriesTriggers:
    """Triggers of one series (host arrays; samples relative to the series start)."""

    start: np.ndarray  # int64 boxcar start
    width: np.ndarray  # int64 boxcar width (samples)
    centre: np.ndarray  # float64 excess-weighted centroid (fractional sample)
    snr: np.ndarray  # float64 detection SNR (σ)
    rho: np.ndarray  # float64 estimated signal SNR (energy: sqrt of excess whitened energy)
    group_start: np.ndarray  # int64 extent of the merged group
    group_stop: np.ndarray
    members: np.ndarray  # int64 boxcars merged into this trigger
    mean: float  # detection-series mean and σ used for the SNRs
    std: float

    @classmethod
    def empty(cls, mean: float = np.nan, std: float = np.nan) -> "SeriesTriggers":
        i, f = np.zeros(0, np.int64), np.zeros(0, np.float64)
        return cls(i, i, f, f, f, i, i, i, mean, std)

    def select(self, keep: np.ndarray) -> "SeriesTriggers":
        return SeriesTriggers(
            self.start[keep], self.width[keep], self.centre[keep], self.snr[keep], self.rho[keep],
            self.group_start[keep], self.group_stop[keep], self.members[keep], self.mean, self.std,
        )


def _valid_starts(valid, decimation: int, n_out: int, xp):
    v = valid[::decimation]
    return v[:n_out] if v.size >= n_out else xp.concatenate([v, xp.zeros(n_out - v.size, dtype=bool)])


def excess_centroid(kind: str, data, valid, mean: float, start: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Centroid (fractional sample) of the detection series' excess ``max(y - mean, 0)`` over each
    ``[start, start + width)``; only the triggers' own samples are gathered from ``data``."""
    xp = array_namespace(data, valid)
    if start.size == 0:
        return np.zeros(0)
    offsets = np.arange(int(width.max()))
    idx = start[:, None] + offsets[None, :]
    inside = (offsets[None, :] < width[:, None]) & (idx < data.size)
    flat = xp.asarray(np.where(inside, idx, 0).ravel())
    values = detection_series(kind, to_host(data[flat]).astype(np.float64)).reshape(idx.shape)
    ok = to_host(valid[flat]).reshape(idx.shape) & inside
    weight = np.where(ok, np.maximum(values - mean, 0.0), 0.0)
    s0 = weight.sum(axis=1)
    centre = start + (width - 1) / 2.0
    has = s0 > 0
    centre[has] = (weight[has] * idx[has]).sum(axis=1) / s0[has]
    return centre


def series_moments(cfg: PulseSettings, data, y, valid) -> tuple[float, float, int]:
    """Mean and σ of the detection series, robust to the transients being searched for.

    Amplitude series: Chan moments of the series, outlier-clipped.  Energy series: the clipped
    moments of the whitened amplitude ``x`` (Gaussian noise), turned into those of ``x^2``:
    ``mu_E = s^2 + m^2``, ``sigma_E^2 = 2 s^4 + 4 m^2 s^2``.  Clipping ``x^2`` directly would
    cut the chi-squared tail that the noise itself has; estimating from all samples would let a
    loud pulse inflate σ and hide quieter ones in the same chunk.
    """
    if cfg.series == "energy":
        m, s, count = robust_moments(data, valid, cfg.clip, cfg.clip_iterations)
        return s * s + m * m, float(np.sqrt(2 * s**4 + 4 * m * m * s * s)), count
    return robust_moments(y, valid, cfg.clip, cfg.clip_iterations)


def raw_triggers(data, valid, cfg: PulseSettings, snr2_per_energy: float | None = None,
                 moments: tuple[float, float] | None = None):
    """Above-threshold boxcars of every round, before merging: host ``(start, width, snr, rho)`` and (μ, σ).
    ``moments``: the series' (μ, σ) when the caller knows them (normalised series), else measured."""
    xp = array_namespace(data, valid)
    plan = boxcar_plan(cfg.decimation)
    y = detection_series(cfg.series, data)
    mean, std, count = series_moments(cfg, data, y, valid) if moments is None else (*moments, y.size)
    if count < 2 or not std > 0:
        return (*_NO_TRIGGERS, mean, std)
    n = y.size
    # Invalid samples take the mean, and padding with the mean gives every start a full-width boxcar.
    series = xp.empty(n + plan.max_width, dtype=xp.float32)
    series[:n] = xp.where(valid, y, mean)
    series[n:] = mean
    return (*padded_triggers(series, valid.astype(xp.uint8), n, cfg, mean, std, snr2_per_energy, valid), mean, std)


_NO_TRIGGERS = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0))


def padded_triggers(series, valid_u8, n: int, cfg: PulseSettings, mean: float, std: float,
                    snr2_per_energy: float | None = None, valid=None):
    """:func:`raw_triggers`' search of a series already laid out for the boxcar rounds: ``series``
    (float32) of ``n`` samples followed by the plan's widest boxcar of padding, invalid samples and
    padding at ``mean``; ``valid_u8`` (uint8, at least ``n``) marks the valid ones.  ``valid`` (bool,
    ``n``) is needed only when ``cfg.sigma`` is not ``white`` (each round's moments are measured).
    Returns host ``(start, width, snr, rho)``."""
    xp = array_namespace(series)
    plan = boxcar_plan(cfg.decimation)
    energy = cfg.series == "energy"
    consts = {}

    def round_consts(k: int, series_k):
        rnd = plan.rounds[k]
        d = rnd.decimation
        widths = np.arange(rnd.first_width, rnd.last_width + 1)
        if cfg.sigma == "white":
            mean_r, std_r, sig_nmax = mean * d, std * np.sqrt(d), None
        else:  # eq. 5: measure this round's series and its widest boxcar
            v_r = _valid_starts(valid, d, series_k.size, xp)
            mean_r, std_r, _ = robust_moments(series_k, v_r, cfg.clip, cfg.clip_iterations)
            prefix = xp.concatenate([xp.zeros(1), xp.cumsum(series_k, dtype=xp.float64)])
            wmax = rnd.last_width
            sums = prefix[wmax:] - prefix[:-wmax]
            _, sig_nmax, _ = robust_moments(sums, v_r[: sums.size], cfg.clip, cfg.clip_iterations)
        consts[k] = (mean_r, round_constants(cfg.series, widths, mean_r, sigma_n(widths, std_r, cfg.sigma, sig_nmax),
                                             cfg.threshold))
        return consts[k][1]  # host constants: the GPU path picks its test from them, then uploads

    results = run_rounds(series, valid_u8, plan.rounds, round_consts, cfg.threshold, energy, n,
                         measures_series=cfg.sigma != "white")
    out = [[], [], [], []]
    for k, (idx, width, best) in enumerate(results):
        if idx.size == 0:
            continue
        rnd = plan.rounds[k]
        d = rnd.decimation
        mean_r, c = consts[k]
        idx, w, z = idx.astype(np.int64), width.astype(np.int64), best.astype(np.float64)
        nw = rnd.n_widths
        j = w - rnd.first_width
        p, q, rr = c[nw : 2 * nw][j], c[2 * nw : 3 * nw][j], c[3 * nw :][j]
        if energy:
            excess = boxcar_sum("energy", z, p, q, rr) - w * mean_r
            rho = np.sqrt(np.maximum(excess, 0.0) / mean * (snr2_per_energy or 1.0))
        else:
            rho = z
        for lst, val in zip(out, (idx * d, w * d, z, rho)):
            lst.append(val)
    if not out[0]:
        return _NO_TRIGGERS
    return tuple(np.concatenate(v) for v in out)


def search_series(data, valid, cfg: PulseSettings, snr2_per_energy: float | None = None) -> SeriesTriggers:
    """Triggers of one conditioned series, merged friends-of-friends (one per pulse)."""
    start, width, snr, rho, mean, std = raw_triggers(data, valid, cfg, snr2_per_energy)
    if start.size == 0:
        return SeriesTriggers.empty(mean, std)
    groups = friends_of_friends(start, start + width, snr, cfg.merge_gap)
    k = groups.peak
    centre = excess_centroid(cfg.series, data, valid, mean, start[k], width[k])
    return SeriesTriggers(
        start[k], width[k], centre, snr[k], rho[k], groups.start, groups.stop, groups.members, mean, std
    )
