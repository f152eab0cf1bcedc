"""SPIIR template banks: placement, per-template construction, and the packed bank the kernels run.

A bank is built for one detector's PSD.  Each template is built independently (a pure function, so
a campaign maps it over CPU workers): waveform -> whitened analytic template on its own frequency
grid -> SPIIR filters by the eps search (:mod:`gwbatch.spiir.construct`) -> the response's
autocorrelation for the chi-squared (read off the correlation that measured the response's overlap)
-> ``sigma``, the optimal SNR at 1 Mpc (horizon distance ``sigma / 8`` Mpc).  :func:`pack` lays the filters out as padded ``(templates, filters)`` arrays,
each template's filters sorted by rung and delay.  With ``spiir.multirate`` (the default) each
filter runs at a rate matched to its frequency (:mod:`gwbatch.spiir.multirate`); with
``spiir.subbands`` a template's filters run in complex sub-band channels instead where that keeps
its overlap (:mod:`gwbatch.spiir.subbands`; ``subband`` per template, ``channel`` per filter).
Overlaps are measured on the response the bank runs and, for comparison, on the single-rate filters.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field

import numpy as np

from gwbatch.conditioning.psd import PSD
from gwbatch.config import BankConfig
from gwbatch.errors import ConfigError
from gwbatch.spiir import subbands
from gwbatch.spiir.construct import Target, construct, whitened_template
from gwbatch.spiir.multirate import (
    effective_response,
    filter_levels,
    impulse_start,
    level_sets,
    max_level,
    reach,
    to_rate,
)
from gwbatch.spiir.placement import (
    Metric,
    Region,
    Space,
    grid_placement,
    stochastic_placement,
)
from gwbatch.waveforms import Template, frequency_domain
from gwbatch.waveforms.taylorf2 import chirp_time, isco_frequency


@dataclass(frozen=True)
class BuiltTemplate:
    template: Template
    a: np.ndarray  # at each filter's own rate (multi-rate: ``to_rate``)
    b: np.ndarray
    d: np.ndarray
    level: np.ndarray  # int8: each filter runs at sample_rate / 2^level (sub-bands: channel rate / 2^level)
    epsilon: float
    overlap: float  # of the response the bank runs (multi-rate when levels are used)
    overlap_single: float  # of the same filters all at the top rate
    length: int  # whitened template length (samples): the warm-up a chunk needs
    latency: int  # samples from template start to the peak of z
    merger_delay: int  # samples from the merger (unwhitened amplitude peak) to the peak of z
    sigma: float  # optimal SNR at 1 Mpc for this PSD
    autocorr: np.ndarray  # R(s), s = -m..m
    channel: np.ndarray | None = None  # int8 per filter: its sub-band channel (sub-band templates)
    subband: bool = False  # the filters run in sub-band channels (a, b, d at the channel rate)


def template_duration(template: Template, cfg: BankConfig) -> float:
    """Seconds the template lasts from ``f_low - 2 Hz``, plus 2 s for the merger and ringdown: its
    length, and what its construction costs grows with."""
    return chirp_time(template.mass1, template.mass2, max(cfg.f_low - 2.0, 5.0)) + 2.0


def frequency_grid(template: Template, cfg: BankConfig) -> tuple[int, float]:
    """``(n, delta_f)``: a power-of-two length holding the template from ``f_low - 2 Hz`` twice over."""
    n = 1 << int(np.ceil(np.log2(2.0 * template_duration(template, cfg) * cfg.sample_rate)))
    return n, cfg.sample_rate / n


#: Where a TaylorF2 template's taper may end at the latest, as a fraction of the Nyquist frequency.
F_END_NYQUIST = 0.95


def taper_end(template: Template, cfg: BankConfig) -> float | None:
    """Where the template's spectrum is tapered to zero (:func:`~gwbatch.spiir.construct.whitened_template`'s
    ``f_end``): TaylorF2 stops at the innermost stable circular orbit, but no later than
    :data:`F_END_NYQUIST` of the Nyquist frequency.  A template whose frequency reaches Nyquist
    advances its phase by nearly pi a sample, where the walk's unwrapped phase is ambiguous: light
    binaries at 4096 Hz (total mass below 2.15 M_sun) then got 1000-5400 filters and overlaps down
    to 0.971 instead of ~390 filters and 0.992; the cap costs them at most 1e-4 of their SNR
    (aLIGO design PSD).  None (no taper) for the IMR approximants, whose ringdown ends the signal."""
    if cfg.approximant != "TaylorF2":
        return None
    return min(isco_frequency(template.mass1, template.mass2), F_END_NYQUIST * cfg.sample_rate / 2.0)


def build_template(template: Template, cfg: BankConfig, psd: PSD) -> BuiltTemplate:
    """SPIIR filters and metadata of one template for ``psd`` (pure; safe to run on any worker).

    Every overlap of the template (each ``eps``, each multi-rate try) is computed against one
    :class:`~gwbatch.spiir.construct.Target`, on one FFT length long enough for the multi-rate
    responses' lead; the autocorrelation comes from the chosen response's overlap."""
    n, delta_f = frequency_grid(template, cfg)
    f = np.arange(n // 2 + 1) * delta_f
    s = psd(np.maximum(f, 1.0))
    htilde = frequency_domain(cfg.approximant, template, f.size, delta_f, max(cfg.f_low - 3.0, 5.0))
    f_end = taper_end(template, cfg)
    white = whitened_template(htilde, s, delta_f, cfg.sample_rate, cfg.f_low, f_end)
    h = white.h
    sp = cfg.spiir
    # Overlaps are computed on one FFT length per template, holding the multi-rate responses' lead.
    headroom = impulse_start(max_level(cfg.f_low, cfg.sample_rate, sp.multirate_safety)) if sp.multirate else 0
    target = Target(h, headroom=max(headroom, subbands.LEAD) if sp.subbands else headroom)
    filt = construct(h, overlap_target=sp.overlap_target, epsilons=sp.epsilons, alpha=sp.alpha, beta=sp.beta,
                     least_squares=sp.least_squares, phase=white.phase, merger=white.merger, target=target,
                     lags=sp.autocorrelation_lags)
    band = f >= cfg.f_low
    sigma = float(np.sqrt(4.0 * delta_f * np.sum(np.abs(htilde[band]) ** 2 / s[band])))
    channels = _subbands(filt, target, cfg) if sp.multirate and sp.subbands else None
    if channels is not None:
        a, b, d, channel, level, ov, latency, autocorr = channels
        return BuiltTemplate(template, a, b, d, level, filt.epsilon, ov, filt.overlap, h.size,
                             latency, latency - (h.size - 1 - filt.peak_offset), sigma, autocorr,
                             channel.astype(np.int8), True)
    moved = _multirate(filt, target, cfg) if sp.multirate else None
    if moved is None:  # single-rate: the response construct measured
        moved = (filt.a, filt.b, filt.d, np.zeros(filt.a.size, np.int8), filt.overlap, filt.latency, filt.autocorr)
    a, b, d, level, ov, latency, autocorr = moved
    return BuiltTemplate(
        template, a, b, d, level, filt.epsilon, ov, filt.overlap, h.size, latency,
        latency - (h.size - 1 - filt.peak_offset), sigma, autocorr,
    )


def _subbands(filt, target: Target, cfg: BankConfig):
    """The template's filters in sub-band channels (:mod:`gwbatch.spiir.subbands`, the slowly decaying
    ones in nested channels) when their response keeps the single-rate overlap within
    ``spiir.multirate_tolerance``: ``(a, b, d, channel, level, overlap, latency, autocorrelation)`` at the channel rate, normalised on that response; else None.  The
    short-lived filters' amplitudes are fitted again through the channels
    (:func:`gwbatch.spiir.subbands.refit_short_filters`) where that raises the overlap."""
    sp = cfg.spiir
    a, b, d, channel, level = subbands.move_template(filt.a, filt.b, filt.d, cfg.sample_rate)
    if subbands.plan_of([(a, b, d, channel, level)]).most_rows_per_parity() > subbands.MAX_ROWS_PER_PARITY:
        return None  # more channel rows than the synthesis kernels hold: the ladder
    start = subbands.IMPULSE_AT
    response, first = subbands.impulse_response(filt.a, filt.b, filt.d, cfg.sample_rate, start)
    ov, lag, autocorr = target.match(response, lead=start - first, lags=sp.autocorrelation_lags)
    # response[n + lag + start - first] ~ target[n] (the match's lag counts from the impulse)
    refit = subbands.refit_short_filters(filt.a, filt.b, filt.d, cfg.sample_rate, start, response, first,
                                         lag + start - first, target.values)
    if refit is not None:  # the short-lived filters' amplitudes fitted again through the channels
        b_new, response_new = refit
        ov_new, lag_new, autocorr_new = target.match(response_new, lead=start - first, lags=sp.autocorrelation_lags)
        if ov_new > ov:
            a, b, d, channel, level = subbands.move_template(filt.a, b_new, filt.d, cfg.sample_rate)
            response, ov, lag, autocorr = response_new, ov_new, lag_new, autocorr_new
    if ov < filt.overlap - sp.multirate_tolerance:
        return None
    b = b * np.sqrt(2.0 / np.sum(np.abs(response) ** 2))
    return a, b, d, channel, level, ov, target.values.size - 1 + lag, autocorr


#: Multi-rate attempts per template: a filter's rate keeps at least this many of its samples per
#: e-folding of its decay (0: the frequency rule alone).  Short-lived filters (a BBH merger's) sampled
#: more coarsely than this lose their shape; the first that keeps the overlap is used.
DECAY_SAMPLES = (0, 4, 8, 16, 32)


def _multirate(filt, target: Target, cfg: BankConfig):
    """The template's filters moved to lower rates (:mod:`gwbatch.spiir.multirate`): the fewest updates
    among :data:`DECAY_SAMPLES` whose response's overlap is within ``spiir.multirate_tolerance`` of the
    single-rate filters'; ``(a, b, d, level, overlap, latency, autocorrelation)`` (the response's), or
    None (stay single-rate)."""
    sp = cfg.spiir
    base = filter_levels(filt.a, cfg.sample_rate, cfg.f_low, sp.multirate_safety)
    decay = -1.0 / np.log(np.abs(filt.a))  # samples per e-folding
    tried = set()
    for samples in DECAY_SAMPLES:
        level = base if not samples else np.minimum(base, np.floor(np.log2(np.maximum(decay / samples, 1.0))))
        level = level.astype(np.int8)
        if not level.any():
            return None
        if level.tobytes() in tried:
            continue
        tried.add(level.tobytes())
        a, b, d = to_rate(filt.a, filt.b, filt.d, level)
        response, start = effective_response(a, b, d, level)
        energy = np.sum(np.abs(response) ** 2)
        b = b * np.sqrt(2.0 / energy)  # normalised on the response it really has (overlaps do not depend on it)
        ov, lag, autocorr = target.match(response, lead=start, lags=sp.autocorrelation_lags, energy=energy)
        if ov >= filt.overlap - sp.multirate_tolerance:
            return a, b, d, level, ov, target.values.size - 1 + lag, autocorr
    return None


def multirate_tail(cfg: BankConfig) -> int:
    """Samples after a chunk's own that the bank's multi-rate filtering needs (0 single-rate): the
    ladder's reach, or the sub-band channels' where they reach further."""
    sp = cfg.spiir
    if not sp.multirate:
        return 0
    ladder = reach(max_level(cfg.f_low, cfg.sample_rate, sp.multirate_safety))
    return max(ladder, subbands.reach()) if sp.subbands else ladder


def place(cfg: BankConfig, psd: PSD, templates_from_file: list[Template] | None = None) -> list[Template]:
    """The bank's template points: from a bank file, or placed in the mass region to the minimal match."""
    if templates_from_file is not None:
        return templates_from_file
    region = Region(tuple(cfg.mass1), tuple(cfg.mass2), tuple(cfg.total_mass) if cfg.total_mass else None,
                    tuple(cfg.mass_ratio) if cfg.mass_ratio else None, tuple(cfg.spin1z), tuple(cfg.spin2z))
    space = Space(region, cfg.f_low)
    longest = chirp_time(cfg.mass1[0], cfg.mass2[0], cfg.f_low)
    n = 1 << int(np.ceil(np.log2(2.0 * (longest + 2.0) * cfg.sample_rate)))
    f = np.arange(n // 2 + 1) * (cfg.sample_rate / n)
    metric = Metric(cfg.approximant, f, psd(np.maximum(f, 1.0)), cfg.f_low, space)
    pl = cfg.placement
    try:
        if pl.method == "grid":
            points = grid_placement(space, metric, pl.minimal_match, seed=pl.seed, patience=pl.patience)
        else:
            points = stochastic_placement(space, metric, pl.minimal_match, seed=pl.seed, patience=pl.patience,
                                          max_templates=pl.max_templates)
    except ValueError as exc:
        raise ConfigError(f"bank {cfg.name}: {exc}") from None
    if pl.method == "stochastic" and len(points) >= pl.max_templates:
        raise ConfigError(f"bank {cfg.name}: placement reached placement.max_templates = {pl.max_templates} before "
                          "the region was covered; raise placement.max_templates (at most 1000000) or narrow the "
                          "mass and spin ranges")
    return space.templates(points)


#: The per-template arrays of a :class:`FilterBank` (rows are templates).
PER_TEMPLATE = ("mass1", "mass2", "spin1z", "spin2z", "n_filters", "length", "latency", "merger_delay",
                "epsilon", "overlap", "overlap_single", "sigma", "a", "b", "d", "level", "autocorr", "subband",
                "channel")


@dataclass(frozen=True)
class FilterBank:
    """The packed bank for one PSD: what the filtering kernels and the trigger code use."""

    name: str
    approximant: str
    sample_rate: float
    f_low: float
    mass1: np.ndarray
    mass2: np.ndarray
    spin1z: np.ndarray
    spin2z: np.ndarray
    n_filters: np.ndarray
    length: np.ndarray
    latency: np.ndarray
    merger_delay: np.ndarray
    epsilon: np.ndarray
    overlap: np.ndarray  # of the response the bank runs
    overlap_single: np.ndarray  # of the same filters all at the top rate
    sigma: np.ndarray
    a: np.ndarray  # (T, L) complex64, padding a = b = 0; each filter at its own rate
    b: np.ndarray
    d: np.ndarray  # (T, L) int32, in samples of the filter's rate
    level: np.ndarray  # (T, L) int8: filter runs at sample_rate / 2^level (sub-band templates: at the
    # channel rate / 2^level, subbands.NEST_LEVEL in nested channels)
    autocorr: np.ndarray  # (T, 2m+1) complex64
    psd: PSD
    fingerprint: str
    config: dict = field(default_factory=dict)
    subband: np.ndarray | None = None  # (T,) bool: the template's filters run in sub-band channels
    channel: np.ndarray | None = None  # (T, L) int8: each filter's channel (sub-band templates)

    def __post_init__(self) -> None:
        if self.subband is None:  # a bank of the ladder alone (or read from a file made before sub-bands)
            object.__setattr__(self, "subband", np.zeros(self.mass1.size, bool))
        if self.channel is None:
            object.__setattr__(self, "channel", np.zeros(self.a.shape, np.int8))

    @property
    def size(self) -> int:
        return int(self.mass1.size)

    @property
    def levels(self) -> int:
        """The lowest rung of the rate ladder the bank's ladder templates use (0: single-rate, or
        sub-bands alone: a sub-band template's ``level`` is its filters' nesting)."""
        ladder = self.level[~self.subband]
        return int(ladder.max()) if ladder.size else 0

    @functools.cached_property
    def parts(self) -> tuple[tuple[np.ndarray, "FilterBank"], ...]:
        """``(rows, bank)`` of its templates on the ladder (or single-rate) and of those in sub-bands,
        each part present only when it has templates (made once per bank object)."""
        out = []
        for mask in (~self.subband, self.subband):
            rows = np.flatnonzero(mask)
            if rows.size:
                out.append((rows, self if rows.size == self.size else self.subset(rows)))
        return tuple(out)

    @functools.cached_property
    def channel_plan(self) -> subbands.ChannelPlan:
        """The channel rows of a bank of sub-band templates (:func:`gwbatch.spiir.subbands.plan_of`)."""
        if not self.subband.all():
            raise ValueError("channel_plan is for a bank whose templates are all in sub-bands (see parts)")
        return subbands.plan_of(list(zip(self.a, self.b, self.d, self.channel, self.level)))

    @functools.cached_property
    def level_sets(self) -> dict[int, tuple]:
        """The filters split by rung (:func:`gwbatch.spiir.multirate.level_sets`)."""
        return level_sets(self.a, self.b, self.d, self.level)

    @functools.cached_property
    def filters_digest(self) -> str:
        """A digest of the filters (``a``, ``b``, ``d``, ``level``, ``subband``, ``channel``): banks with
        the same one filter alike (the GPU's packed arrays are cached by it). Computed once per bank
        object."""
        digest = hashlib.blake2b(digest_size=16)
        for v in (self.a, self.b, self.d, self.level, self.subband, self.channel):
            digest.update(np.ascontiguousarray(v).view(np.uint8).data)
            digest.update(str(v.shape).encode())
        return digest.hexdigest()

    def updates_per_sample(self) -> np.ndarray:
        """Filter updates per top-rate sample, per template (the single-rate count is ``n_filters``)."""
        used = self.b != 0
        rate = 2.0 ** -self.level.astype(np.float64) / np.where(self.subband[:, None], subbands.DECIMATION, 1)
        return np.sum(np.where(used, rate, 0.0), axis=1)

    @property
    def warmup(self) -> int:
        """Samples before a chunk that every template needs: the longest latency plus the filter decay."""
        return int(self.latency.max()) + 4 * int(self.autocorr.shape[1])

    @functools.cached_property
    def _batches(self) -> dict:
        return {}

    def batch(self, lo: int, hi: int) -> "FilterBank":
        """Templates ``[lo, hi)`` (:meth:`subset`), made once per bank object and range: a search
        filters the same batches chunk after chunk, and with the batch come its filter digest, rung
        sets and GPU plan, made once (for the 2901-template BBH bank, 0.11 s of host time per batch
        of 1024 on the 2-core machine, against 0.04 s of H200 time filtering 512 s with it)."""
        part = self._batches.get((lo, hi))
        if part is None:
            part = self._batches[(lo, hi)] = self.subset(np.arange(lo, hi))
        return part

    def subset(self, index: np.ndarray) -> "FilterBank":
        """The bank restricted to templates ``index`` (same filters and metadata)."""
        values = {k: getattr(self, k)[index] for k in PER_TEMPLATE}
        width = int(values["n_filters"].max()) if values["n_filters"].size else 1
        for k in ("a", "b", "d", "level", "channel"):
            values[k] = values[k][:, :width]
        return FilterBank(self.name, self.approximant, self.sample_rate, self.f_low, psd=self.psd,
                          fingerprint=self.fingerprint, config=self.config, **values)

    def _decomposition(self) -> str:
        """The summary's account of how the templates are filtered below the top rate."""
        said = []
        if (~self.subband).any() and self.levels:
            said.append(f"{self.levels + 1} rates, {self.sample_rate / 2 ** self.levels:g}-{self.sample_rate:g} Hz")
        if self.subband.any():
            said.append(f"{int(self.subband.sum())} of {self.size} templates in {subbands.CHANNELS} sub-band channels "
                        f"at {self.sample_rate / subbands.DECIMATION:g} Hz")
            used = (self.b != 0) & self.subband[:, None]
            nested = int((used & (self.level > 0)).sum())
            if nested:
                said.append(f"{nested / max(1, int(used.sum())):.0%} of their filters in nested channels at "
                            f"{self.sample_rate / subbands.DECIMATION / subbands.NEST:g} Hz")
        return "; ".join(said)

    def summary(self) -> str:
        ov = self.overlap
        lines = [
            f"bank {self.name}: {self.size} templates ({self.approximant}, from {self.f_low:g} Hz at {self.sample_rate:g} Hz)",
            f"  PSD: {self.psd.source}; fingerprint {self.fingerprint}",
            f"  mass1 {self.mass1.min():.3f}..{self.mass1.max():.3f}, mass2 {self.mass2.min():.3f}..{self.mass2.max():.3f} Msun",
            f"  filters per template: min {self.n_filters.min()}, median {int(np.median(self.n_filters))}, "
            f"max {self.n_filters.max()}, total {int(self.n_filters.sum())}",
            f"  overlap with the exact whitened template: min {ov.min():.4f}, median {np.median(ov):.4f}, "
            f"5th percentile {np.percentile(ov, 5):.4f}",
            *([f"  multi-rate ({self._decomposition()}): "
               f"{self.n_filters.sum() / self.updates_per_sample().sum():.2f}x fewer filter updates; overlap "
               f"loss against single-rate median {np.median(self.overlap_single - ov):.4f}, 95th percentile "
               f"{np.percentile(self.overlap_single - ov, 95):.4f}"] if self.levels or self.subband.any() else []),
            "  eps used: " + ", ".join(f"{e:g} x{int(np.sum(self.epsilon == e))}" for e in np.unique(self.epsilon)),
            f"  longest template {self.length.max() / self.sample_rate:.2f} s; "
            f"horizon distance (SNR 8) {self.sigma.min() / 8:.0f}..{self.sigma.max() / 8:.0f} Mpc",
        ]
        return "\n".join(lines)


#: Bumped whenever construction changes what a built bank holds, so cached banks are rebuilt
#: (2: the merger is the unwhitened waveform's amplitude peak; 3: multi-rate filters; 4: TaylorF2's
#: taper ends by 0.95 of the Nyquist frequency, :func:`taper_end`).
CONSTRUCTION_VERSION = 4


#: Bank settings added after banks were first cached, with the value at which the bank built is the
#: one built before the setting existed: at that value a setting stays out of the key, so cached banks
#: stay valid.
KEY_NEUTRAL = {("spiir", "subbands"): False}


def construction_key(cfg: BankConfig, templates: list[Template]) -> str:
    """What a built bank is made from apart from its PSD: its configuration, its templates and the
    construction version."""
    points = np.array([(t.mass1, t.mass2, t.spin1z, t.spin2z) for t in templates], dtype=np.float64)
    config = cfg.model_dump(mode="json")
    for (section, key), neutral in KEY_NEUTRAL.items():
        if config[section][key] == neutral:
            del config[section][key]
    blob = (f"construction {CONSTRUCTION_VERSION}".encode() + json.dumps(config, sort_keys=True).encode()
            + points.tobytes())
    if cfg.spiir.subbands:  # sub-band templates' construction has its own version
        blob += f"subbands {subbands.CONSTRUCTION_VERSION}".encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def bank_fingerprint(cfg: BankConfig, psd: PSD, templates: list[Template]) -> str:
    """Identifies a built bank: its construction (:func:`construction_key`) and the PSD its filters
    are for."""
    return hashlib.sha256((construction_key(cfg, templates) + psd.fingerprint()).encode()).hexdigest()[:16]


def pack(built: list[BuiltTemplate], cfg: BankConfig, psd: PSD, templates: list[Template]) -> FilterBank:
    """Padded ``(T, L)`` arrays, each template's filters sorted by delay (neighbouring GPU lanes then
    read neighbouring samples)."""
    if not built:
        raise ConfigError(f"bank {cfg.name} has no templates")
    width = max(bt.a.size for bt in built)
    n = len(built)
    a = np.zeros((n, width), np.complex64)
    b = np.zeros((n, width), np.complex64)
    d = np.zeros((n, width), np.int32)
    level = np.zeros((n, width), np.int8)
    channel = np.zeros((n, width), np.int8)
    for i, bt in enumerate(built):
        ch = bt.channel if bt.channel is not None else np.zeros(bt.a.size, np.int8)
        order = np.lexsort((bt.d, ch, bt.level))  # by rung (or channel), then delay
        m = bt.a.size
        a[i, :m], b[i, :m], d[i, :m], level[i, :m] = bt.a[order], bt.b[order], bt.d[order], bt.level[order]
        channel[i, :m] = ch[order]
    col = lambda get, dtype: np.array([get(bt) for bt in built], dtype=dtype)  # noqa: E731
    return FilterBank(
        name=cfg.name, approximant=cfg.approximant, sample_rate=cfg.sample_rate, f_low=cfg.f_low,
        mass1=col(lambda t: t.template.mass1, np.float64), mass2=col(lambda t: t.template.mass2, np.float64),
        spin1z=col(lambda t: t.template.spin1z, np.float64), spin2z=col(lambda t: t.template.spin2z, np.float64),
        n_filters=col(lambda t: t.a.size, np.int64), length=col(lambda t: t.length, np.int64),
        latency=col(lambda t: t.latency, np.int64), merger_delay=col(lambda t: t.merger_delay, np.int64),
        epsilon=col(lambda t: t.epsilon, np.float64), overlap=col(lambda t: t.overlap, np.float64),
        overlap_single=col(lambda t: t.overlap_single, np.float64),
        sigma=col(lambda t: t.sigma, np.float64), a=a, b=b, d=d, level=level,
        autocorr=np.stack([bt.autocorr for bt in built]).astype(np.complex64),
        subband=col(lambda t: t.subband, bool), channel=channel,
        psd=psd, fingerprint=bank_fingerprint(cfg, psd, templates), config=cfg.model_dump(mode="json"),
    )
