"""The DM plan of the radio search: trial DMs, each trial's time decimation, and the sub-band
grouping of the two-stage scheme.

**Trial DMs** are dedisp's and Heimdall's list (``generate_dm_list`` in ``src/kernels.cuh`` of
ajameson/dedisp, Barsdell et al. 2012; the algorithm is Lina Levin's).  A pulse of intrinsic width
``W`` seen through sampling ``dt``, intra-channel smearing ``a DM`` and the error of a DM step ``b
(DM - DM_prev)`` has the effective width (quadrature sum, microseconds)::

    W_eff^2 = dt^2 + W^2 + (a DM)^2 + (b (DM - DM_prev))^2,   a = 8.3 df / f^3,  b = a nchan / 4

(``df`` the channel width in MHz, ``f`` the band centre in GHz, 8.3 us the dispersion smearing of
1 MHz at 1 GHz and DM 1).  Each DM is the largest for which this stays within ``tolerance`` times
the width at the previous DM with no step error.  The list starts at ``dm_min`` and ends with the
first DM at or above ``dm_max``; the DMs are rounded to float32 as dedisp stores them, and the
band centre is dedisp's ``f0 + (nchan // 2 - 0.5) df`` from the highest channel ``f0``.

**Decimation.**  A trial at high DM is smeared over many samples, so it may be searched at a lower
time resolution: the spectra are summed over ``d`` consecutive samples (sums of pairs, ``d`` a
power of 2) before the channels are summed.  The decimated sample time ``d dt`` enters the same
quadrature sum as ``dt``; a trial takes the largest ``d`` whose effective width (no step term)
stays within the tolerance of the full-rate one, ``W_eff(d dt) <= tolerance W_eff(dt)``.  The S/N
of a boxcar-matched pulse goes as ``W_eff^-1/2``, so decimation costs at most ``1 - tolerance^-1/2``
of it (10.6% at 1.25), like one DM step.  dedisp/Heimdall's ``generate_scrunch_list`` compares
successive factors instead (``W(2d)/W(d) < tolerance``) and AstroAccelerate halves the rate where
smearing exceeds twice the sample time; this rule bounds the loss from full rate directly.

**Sub-bands** (the two-stage scheme, :func:`subband_plan`): the channels are cut into ``nsub``
equal sub-bands; stage 1 dedisperses each sub-band at a coarse set of nominal DMs, stage 2 sums the
sub-bands of a trial at its own DM.  A trial's nominal DM is the lowest DM of its group, never
above its own, so no channel is read outside the span brute force reads
(:mod:`gwbatch.radio.dedisperse`).  Its channels are then delayed as at the nominal DM within their
sub-band: the widest sub-band sweep, ``(DM - DM_nominal) * s`` with ``s`` the largest
intra-sub-band delay per unit DM, joins the quadrature sum, and a group grows while
``sqrt(W_eff^2 + sweep^2) <= subband_tolerance * W_eff`` for each of its trials.  The sweep then
costs at most ``1 - subband_tolerance^-1/2`` of the S/N (4.7% at 1.1); the two stages also round
twice, so a channel can sit a whole sample off where brute force puts it within half of one.
Measured against brute force at the trials farthest from their nominal DMs (tolerance 1.1):
at most 16% (mean 10%) for pulses one sample of their level wide, 10% (5%) for two, 6% (2%) for
four (tests/test_dedisperse.py).  On the SKA-MID-like band (:mod:`gwbatch.radio._cuda`) the
scheme makes 7.6x fewer additions than brute force.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from gwbatch.errors import ConfigError
from gwbatch.radio.dedisperse import K_DM, dm_delays

#: Dispersion smearing of a 1 MHz channel at 1 GHz and DM 1, microseconds (dedisp, Levin).
SMEARING_US = 8.3


@dataclass(frozen=True, eq=False)
class DMPlan:
    """Trial DMs (float64, increasing), each trial's decimation factor (int64, a power of 2,
    non-decreasing), the tolerance and pulse width (s) the list was made for, and the band: channel
    frequencies (MHz, array order) and the sample time (s) of the spectra it is for."""

    dms: np.ndarray
    decimation: np.ndarray
    tolerance: float
    pulse_width: float
    freqs: np.ndarray
    tsamp: float

    def __post_init__(self):
        dms = np.asarray(self.dms, dtype=np.float64)
        dec = np.asarray(self.decimation, dtype=np.int64)
        freqs = np.asarray(self.freqs, dtype=np.float64)
        _check_band(freqs, self.tsamp)
        if dms.ndim != 1 or dms.size == 0 or not np.all(np.isfinite(dms)) or dms[0] < 0 or np.any(np.diff(dms) <= 0):
            raise ConfigError(f"dms: {dms!r}; expected a non-empty, strictly increasing list of DMs >= 0")
        if dec.shape != dms.shape or np.any(dec < 1) or np.any(dec & (dec - 1)) or np.any(np.diff(dec) < 0):
            raise ConfigError(f"decimation: {dec!r}; expected one power of 2 per DM, non-decreasing with DM")
        for name, value in (("dms", dms), ("decimation", dec), ("freqs", freqs)):
            value.setflags(write=False)
            object.__setattr__(self, name, value)

    @classmethod
    def fixed(cls, freqs, tsamp: float, dms) -> DMPlan:
        """A plan of the given DMs at full rate (no decimation), e.g. one known DM."""
        dms = np.atleast_1d(np.asarray(dms, dtype=np.float64))
        return cls(dms, np.ones(dms.size, np.int64), tolerance=np.nan, pulse_width=np.nan, freqs=freqs, tsamp=tsamp)

    @property
    def ndm(self) -> int:
        return int(self.dms.size)

    @property
    def adds_per_second(self) -> float:
        """Additions of brute-force dedispersion per second of spectra: every channel of every
        trial at its decimated rate."""
        return float(np.sum(self.freqs.size / (self.decimation * self.tsamp)))

    @property
    def levels(self) -> list[tuple[int, slice]]:
        """``(decimation, trials)`` per decimation factor, in increasing order; ``trials`` slices
        the plan's DMs."""
        factors, first = np.unique(self.decimation, return_index=True)
        bounds = list(first) + [self.ndm]
        return [(int(d), slice(int(bounds[k]), int(bounds[k + 1]))) for k, d in enumerate(factors)]

    def delays(self, dm: float, decimation: int = 1) -> np.ndarray:
        """Channel delays (int64, array order) at ``dm`` in samples of ``decimation * tsamp``."""
        return dm_delays(self.freqs, dm, self.tsamp * decimation)

    @functools.cached_property
    def overlap(self) -> int:
        """Samples (full rate) that the next block of spectra must repeat: the largest delay at the
        plan's highest DM, over the decimation levels, in full-rate samples (``d`` times the delay in
        samples of ``d * tsamp``)."""
        top = self.dms[-1]
        return max(d * int(self.delays(top, d).max()) for d, _ in self.levels)

    def n_out(self, ntime: int, decimation: int) -> int:
        """Samples each trial at ``decimation`` gives from ``ntime`` spectra:
        ``(ntime - overlap) // decimation``, the same span (to within ``decimation - 1`` samples)
        at every level; exactly the same where ``ntime - overlap`` is a multiple of the largest
        decimation."""
        return max(0, (ntime - self.overlap) // decimation)


@dataclass(frozen=True, eq=False)
class SubbandPlan:
    """The two-stage scheme for a plan: ``nsub`` sub-bands of ``nchan // nsub`` consecutive
    channels (array order); per trial the index of its nominal DM in ``nominal_dms`` (non-decreasing;
    each nominal DM is the lowest DM of its group, a trial DM itself, at that group's decimation)."""

    plan: DMPlan
    nsub: int
    tolerance: float
    nominal: np.ndarray
    nominal_dms: np.ndarray

    @property
    def channels_per_subband(self) -> int:
        return self.plan.freqs.size // self.nsub

    @property
    def adds_per_second(self) -> float:
        """Additions of the two stages per second of spectra: every channel at each nominal DM
        (stage 1) and every sub-band of every trial (stage 2), at each level's decimated rate."""
        plan = self.plan
        stage1 = np.sum(plan.freqs.size / (plan.decimation[np.unique(self.nominal, return_index=True)[1]] * plan.tsamp))
        return float(stage1 + np.sum(self.nsub / (plan.decimation * plan.tsamp)))

    @property
    def sweep_per_dm(self) -> float:
        """The largest dispersion sweep across one sub-band per unit DM, seconds."""
        return subband_sweep_per_dm(self.plan.freqs, self.nsub)

    def subset(self, take: slice, part: DMPlan) -> SubbandPlan:
        """The scheme of trials ``take`` of the plan (``part``: their own plan): the same nominal DMs,
        so that batches of a plan dedisperse exactly as the whole plan does (a group cut by a batch
        boundary has its stage 1 made in both)."""
        nominal = self.nominal[take]
        first = int(nominal[0])
        return SubbandPlan(part, self.nsub, self.tolerance, nominal - first, self.nominal_dms[first: int(nominal[-1]) + 1])


def subband_sweep_per_dm(freqs: np.ndarray, nsub: int) -> float:
    """The largest dispersion sweep across one of ``nsub`` equal sub-bands per unit DM, seconds."""
    f = np.asarray(freqs, dtype=np.float64).reshape(nsub, -1)
    return float(np.max(K_DM * (f.min(axis=1) ** -2.0 - f.max(axis=1) ** -2.0)))


def _check_band(freqs: np.ndarray, tsamp: float) -> None:
    if freqs.ndim != 1 or freqs.size == 0 or not np.all(np.isfinite(freqs)) or np.any(freqs <= 0):
        raise ConfigError(f"freqs: expected a 1-D array of channel frequencies > 0 MHz, got {freqs!r}")
    if not (np.isfinite(tsamp) and tsamp > 0):
        raise ConfigError(f"tsamp: {tsamp!r} s; expected a sample time > 0")


def _uniform_band(freqs: np.ndarray) -> tuple[float, float, int]:
    """Highest channel (MHz), channel width (MHz, negative as dedisp takes it) and channel count of
    an evenly spaced band, in whatever order its channels come."""
    if freqs.size < 2:
        raise ConfigError(f"freqs: {freqs.size} channel; a DM plan needs at least 2 evenly spaced channels")
    step = np.diff(freqs)
    if not (np.all(step > 0) or np.all(step < 0)) or np.ptp(np.abs(step)) > 1e-6 * np.abs(step).max():
        raise ConfigError("freqs: the channels must be evenly spaced and monotonic for a DM plan "
                          f"(steps from {np.abs(step).min()} to {np.abs(step).max()} MHz)")
    top = float(freqs.max())
    return top, -(top - float(freqs.min())) / (freqs.size - 1), int(freqs.size)


def levin_dm_list(dm_min: float, dm_max: float, tsamp: float, pulse_width: float, f0: float, df: float,
                  nchan: int, tolerance: float) -> np.ndarray:
    """dedisp's ``generate_dm_list`` (Levin): ``tsamp`` and ``pulse_width`` in seconds, ``f0`` the
    highest channel and ``df`` the (negative) channel width in MHz; float32 DMs as float64."""
    dt, ti = tsamp * 1e6, pulse_width * 1e6
    f = (f0 + (nchan // 2 - 0.5) * df) * 1e-3
    tol2 = tolerance * tolerance
    a2 = (SMEARING_US * df / f ** 3) ** 2
    b2 = a2 * (nchan * nchan / 16.0)
    c = (dt * dt + ti * ti) * (tol2 - 1.0)
    dms = [float(np.float32(dm_min))]
    while dms[-1] < dm_max:
        prev = dms[-1]
        k = c + tol2 * a2 * prev * prev
        dms.append(float(np.float32((b2 * prev + np.sqrt(-a2 * b2 * prev * prev + (a2 + b2) * k)) / (a2 + b2))))
    return np.array(dms)


def effective_width(dms, decimation, tsamp: float, pulse_width: float, f0: float, df: float, nchan: int) -> np.ndarray:
    """``sqrt((d dt)^2 + W^2 + (a DM)^2)`` in seconds: sampling at ``decimation * tsamp``, pulse
    width and intra-channel smearing at the band centre (Levin's terms, no DM step)."""
    f = (f0 + (nchan // 2 - 0.5) * df) * 1e-3
    smear = SMEARING_US * 1e-6 * abs(df) / f ** 3 * np.asarray(dms, dtype=np.float64)
    return np.sqrt((np.asarray(decimation) * tsamp) ** 2 + pulse_width ** 2 + smear ** 2)


def decimation_factors(dms, tsamp: float, pulse_width: float, f0: float, df: float, nchan: int,
                       tolerance: float) -> np.ndarray:
    """Per DM the largest power of 2 ``d`` with ``W_eff(d tsamp) <= tolerance W_eff(tsamp)``."""
    dms = np.asarray(dms, dtype=np.float64)
    limit = tolerance * effective_width(dms, 1, tsamp, pulse_width, f0, df, nchan)
    d = np.ones(dms.size, dtype=np.int64)
    while True:
        wider = effective_width(dms, 2 * d, tsamp, pulse_width, f0, df, nchan) <= limit
        if not wider.any():
            return d
        d[wider] *= 2


def dm_plan(freqs, tsamp: float, dm_min: float, dm_max: float, pulse_width: float = 40e-6,
            tolerance: float = 1.25, decimate: bool = True) -> DMPlan:
    """Levin's DM list from ``dm_min`` to the first DM at or above ``dm_max`` for the band ``freqs``
    (MHz, array order, evenly spaced) at sample time ``tsamp`` (s), with each trial's decimation
    (all 1 unless ``decimate``); module docstring.

    Raises
    ------
    ConfigError
        Naming the key and its allowed range: ``dm_min >= 0``, ``dm_max > dm_min``, ``tsamp > 0``,
        ``pulse_width >= 0``, ``tolerance > 1``, and a band of at least 2 evenly spaced channels > 0 MHz.
    """
    freqs = np.asarray(freqs, dtype=np.float64)
    _check_band(freqs, tsamp)
    checks = (
        ("dm_min", dm_min, np.isfinite(dm_min) and dm_min >= 0, "a DM >= 0"),
        ("dm_max", dm_max, np.isfinite(dm_max) and dm_max > dm_min, f"a DM > dm_min ({dm_min})"),
        ("pulse_width", pulse_width, np.isfinite(pulse_width) and pulse_width >= 0, "a width >= 0 s"),
        ("tolerance", tolerance, np.isfinite(tolerance) and tolerance > 1, "a ratio > 1 (e.g. 1.25)"),
    )
    for key, value, ok, allowed in checks:
        if not ok:
            raise ConfigError(f"{key}: {value!r}; expected {allowed}")
    f0, df, nchan = _uniform_band(freqs)
    dms = levin_dm_list(dm_min, dm_max, tsamp, pulse_width, f0, df, nchan, tolerance)
    dec = (decimation_factors(dms, tsamp, pulse_width, f0, df, nchan, tolerance) if decimate
           else np.ones(dms.size, np.int64))
    return DMPlan(dms, dec, float(tolerance), float(pulse_width), freqs, float(tsamp))


def subband_plan(plan: DMPlan, nsub: int | None = None, tolerance: float = 1.1) -> SubbandPlan:
    """Group the plan's trials under nominal DMs for the two-stage scheme (module docstring): a
    group starts at a trial (its nominal DM), never spans two decimation levels, and takes the
    following trials while ``sqrt(W_eff^2 + ((DM - DM_nominal) s)^2) <= tolerance W_eff`` (``W_eff``
    at the trial's decimation, ``s`` :attr:`SubbandPlan.sweep_per_dm`).  ``nsub=None`` takes the
    divisor of the channel count with the fewest additions (:attr:`SubbandPlan.adds_per_second`).

    Raises
    ------
    ConfigError
        ``nsub`` not a divisor of the channel count, ``tolerance <= 1``, or a plan without a pulse
        width (:meth:`DMPlan.fixed`).
    """
    nchan = plan.freqs.size
    if not (np.isfinite(tolerance) and tolerance > 1):
        raise ConfigError(f"subband tolerance: {tolerance!r}; expected a ratio > 1 (e.g. 1.1)")
    if not np.isfinite(plan.pulse_width):
        raise ConfigError("subband_plan needs a plan made by dm_plan (its pulse width sets the tolerated sweep)")
    if nsub is None:
        schemes = [subband_plan(plan, n, tolerance) for n in range(1, nchan + 1) if nchan % n == 0]
        return min(schemes, key=lambda s: s.adds_per_second)
    if not (isinstance(nsub, (int, np.integer)) and 1 <= nsub <= nchan and nchan % nsub == 0):
        raise ConfigError(f"nsub: {nsub!r}; expected a divisor of the channel count {nchan}")
    f0, df, _ = _uniform_band(plan.freqs)
    width = effective_width(plan.dms, plan.decimation, plan.tsamp, plan.pulse_width, f0, df, nchan)
    limit = np.sqrt(tolerance ** 2 - 1.0) * width  # the sweep each trial tolerates, seconds
    sweep = subband_sweep_per_dm(plan.freqs, nsub)
    nominal = np.empty(plan.ndm, dtype=np.int64)
    starts: list[int] = []
    for i in range(plan.ndm):
        first = starts[-1] if starts else -1
        if first < 0 or plan.decimation[i] != plan.decimation[first] or (plan.dms[i] - plan.dms[first]) * sweep > limit[i]:
            starts.append(i)
        nominal[i] = len(starts) - 1
    nominal_dms = plan.dms[starts]
    for value in (nominal, nominal_dms):
        value.setflags(write=False)
    return SubbandPlan(plan, int(nsub), float(tolerance), nominal, nominal_dms)


@functools.lru_cache(maxsize=16)
def whole_scheme(plan: DMPlan, subbands: int | str) -> SubbandPlan:
    """The plan's sub-band scheme for the setting ``subbands`` (``"auto"``: fewest additions, else a
    sub-band count), made once per plan object (choosing ``"auto"`` tries every divisor of the
    channel count)."""
    return subband_plan(plan, None if subbands == "auto" else int(subbands))


def batch_bytes(batches, needed: int, trial_bytes: int, sub_bytes: int = 4) -> int:
    """The most bytes any batch of trials holds at once when a chunk needs ``needed`` full-rate output
    samples: its trials over ``ceil(needed / d)`` samples at ``trial_bytes`` a sample, and with
    sub-bands its stage-1 rows (``nsub`` x its nominal DMs) over those samples and the batch's own
    sweep (stage 2 reads that far past them), at ``sub_bytes``."""
    most = 0
    for _, part, scheme in batches:
        d = int(part.decimation[0])
        n_out = -(-int(needed) // d)
        total = trial_bytes * part.ndm * n_out
        if scheme is not None:
            total += sub_bytes * scheme.nsub * scheme.nominal_dms.size * (n_out + -(-part.overlap // d))
        most = max(most, total)
    return int(most)


def dm_batches(plan: DMPlan, size: int, subbands: int | str | None = None) -> tuple[tuple[int, DMPlan, SubbandPlan | None], ...]:
    """The plan in batches of at most ``size`` trials of one decimation level, each ``(first trial,
    its own plan, its sub-band scheme)``: none with ``subbands=None`` (brute force), else the whole
    plan's scheme (:func:`subband_plan`: the fewest additions with ``"auto"``, else ``subbands``
    sub-bands) restricted to the batch (:meth:`SubbandPlan.subset`).  Made once per search."""
    scheme = None if subbands is None else whole_scheme(plan, subbands)
    out = []
    for _, trials in plan.levels:
        for first in range(trials.start, trials.stop, size):
            take = slice(first, min(trials.stop, first + size))
            part = DMPlan(plan.dms[take], plan.decimation[take], plan.tolerance, plan.pulse_width, plan.freqs, plan.tsamp)
            out.append((first, part, None if scheme is None else scheme.subset(take, part)))
    return tuple(out)
