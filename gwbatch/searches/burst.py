"""The unmodelled burst search as a campaign search (cWB style; ALGORITHMS.md §4 and §6).

Per chunk: the shared front end (read, mask, whiten) for every detector, then the network stage
(:mod:`gwbatch.burst.chunk`): time-frequency pixels, clusters, the coherent sky loop and events,
for zero lag and ``background.slides`` lags of ``background.slide_step`` (detector ``j`` moved by
``k * step * j`` in lag ``k``, wrapped within the chunk).  The search has no single-detector
triggers: its events are network clusters, so the trigger table stays empty.
:meth:`BurstSearch.significance` clusters the zero-lag events across chunk edges and gives each
its FAR against all lag events (:func:`gwbatch.background.trials.chunk_trials_significance`);
``rank`` is ``rho``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import Field, model_validator
from scipy.stats import chi2

from gwbatch.background.trials import chunk_trials_significance
from gwbatch.burst.chunk import BurstNetwork, BurstSettings, burst_chunk, window_pad
from gwbatch.burst.skyloop import SkyLoopCuts
from gwbatch.burst.tfmap import burst_input, resolutions, tf_map, tf_synthesis
from gwbatch.candidates.tables import burst_background_table, burst_candidate_table
from gwbatch.conditioning import ConditioningSettings, filter_half_length
from gwbatch.config.strict import Hertz, Snr, StrictModel
from gwbatch.errors import ConfigError
from gwbatch.gpstime import GPSTime, sample_times
from gwbatch.io.store import SampleLayout
from gwbatch.searches.base import NetworkSettings, PrepareContext, Reduction, require_strain
from gwbatch.searches.common import ChunkRun
from gwbatch.tasks import ChunkResult, ChunkSpec, ChunkTask, Significance

TRIGGER_COLUMNS = {"ifo": "str", "sample": "int64", "snr": "float64", "chunk": "int64"}
#: Largest arrival delay after the geocentre (s): the Earth's radius over c, rounded up.
EARTH_DELAY = 0.0214
#: Noise quantile of the default pixel and subnetwork energy thresholds of the sky loop.
PIXEL_QUANTILE = 0.9
#: Default polarisation regulator for two detectors (only the dominant polarisation) and for more
#: (nearly free: three-detector white-noise bursts at network SNR 40 keep cc 0.70-0.88 at 0.1, against
#: 0.52-0.87 at 1 and 0.90-0.93 at 0, while the sky errors of sine-Gaussians stay those of 1; 0 moves
#: some by 20-70 degrees).
REGULATOR = {2: 1000.0, "more": 0.1}

#: Skymap temperature ``T = SKYMAP_TEMPERATURE + systematic * max(Lo)``
#: (:func:`gwbatch.burst.chunk.skymap_temperature`), the systematic fraction by network size as the
#: regulator is (one polarisation with two detectors fits real signals worse than two with three).
#: Chosen by the P-P test of the true directions' credible levels (:func:`gwbatch.sky.skymap.pp_test`)
#: over burst injection campaigns in simulated design noise (``benchmarks/burst_pp.py``: sine-Gaussians
#: and white-noise bursts, hrss 4e-23 to 4e-22, 2048 Hz, sky order 6, the found ones with rho >= 8):
#: 123 H1-L1 maps gave KS p 0.17 at 0.01 (90% areas: median 1260 deg^2), 77 H1-L1-V1 maps 0.53 at
#: 0.006 (median 150 deg^2).  The former map, ``Lo / 2`` at ``T = max(chisq, 1)``, gave p 1e-77
#: (30 deg^2 blobs, not rings).  GW150914's 90% region is then 900 deg^2 on the southern part of
#: the H1-L1 delay ring (LVK: 590-610 deg^2, an annulus section mostly in the southern hemisphere;
#: PRL 116, 241102).
SKYMAP_TEMPERATURE = 6.0
SKYMAP_SYSTEMATIC = {2: 0.01, "more": 0.006}

#: Memory of one burst task that does not grow with the chunk (clusters' delayed amplitudes, sky-loop
#: batches, FFT plans), an upper bound.
BURST_FIXED_BYTES = 2**30


def pixel_levels(bandwidths, f_low: float, f_high: float, sample_rate: float):
    """The search's resolutions, or a ConfigError naming the setting."""
    if f_high > sample_rate / 2:
        raise ConfigError(f"search.f_high ({f_high:g} Hz) is above the Nyquist frequency {sample_rate / 2:g} Hz")
    try:
        return resolutions(sample_rate, list(bandwidths), f_low, f_high)
    except ValueError as exc:
        raise ConfigError(f"search.resolutions: {exc}") from None


def by_network(configured: float | None, defaults: dict, n_ifos: int) -> float:
    """``configured``, else the default for a network of ``n_ifos`` (``defaults``: two detectors, and more)."""
    if configured is not None:
        return configured
    return defaults[2] if n_ifos <= 2 else defaults["more"]


class BurstSearchConfig(StrictModel):
    """Unmodelled burst search, cWB style (ALGORITHMS.md §4): time-frequency pixels of whitened
    data, clusters, a coherent sky loop over HEALPix, events ranked by rho.  Its lags are
    ``background.slides`` shifts of ``background.slide_step`` per chunk."""

    kind: Literal["burst"] = "burst"
    needs_whitening: ClassVar[bool] = True
    f_low: Hertz = Field(32.0, description="lowest pixel frequency (Hz)")
    f_high: Hertz = Field(1024.0, description="highest pixel frequency (Hz; at most Nyquist)")
    resolutions: list[Hertz] = Field(
        [64.0, 32.0, 16.0, 8.0], max_length=16,
        description="pixel bandwidths (Hz), one per resolution; sample_rate / bandwidth must "
                    "be a power of two of at least 8 samples (pixel duration is 1 / (2 bandwidth))")
    black_pixel_probability: float = Field(
        0.001, gt=0, lt=0.5, description="fraction of a chunk's pixels selected per resolution (cWB bpp)")
    pixel_threshold: float | None = Field(
        None, gt=0, le=1e6, description="network energy a pixel needs to enter the sky statistic at a direction; null: "
                                        "the 90% noise quantile (chi-squared, 2 x detectors degrees of freedom)")
    subnet_threshold: float | None = Field(
        None, gt=0, le=1e6,
        description="subnetwork energy a pixel needs to count as seen by two detectors or more; null: the 90% "
                    "noise quantile of chi-squared with 2 x (detectors - 1) degrees of freedom")
    subcut: float = Field(0.33, ge=-1, lt=1, description="early rejection of sky directions, (aa - m) / (aa + m) "
                                                         "below this (seed 003: 0.33)")
    regulator: float | None = Field(
        None, ge=0, le=1e6,
        description="polarisation regulator delta: 0 lets both polarisations free, large keeps only the dominant "
                    "one; null: 0.1 with three detectors or more, 1000 with two (two nearly aligned detectors "
                    "span the whole signal plane, so only the constraint leaves a null stream)")
    rho_min: Snr = Field(5.0, description="events below this rho are not kept")
    cc_min: float = Field(0.5, ge=-1, le=1, description="events below this network correlation are not kept")
    sky_order: int = Field(6, ge=0, le=8, description="HEALPix order of the sky grid (6: 49152 directions, 7: 196608)")
    skymap_threshold: Snr = Field(8.0, description="zero-lag events with rho at least this get a skymap")
    skymap_temperature: float = Field(
        SKYMAP_TEMPERATURE, gt=0, le=1e6,
        description="base width of the skymaps, P ~ exp(Lo / 2T) with Lo the sky loop's likelihood and T = "
                    "skymap_temperature + skymap_systematic x max(Lo) (default from a P-P test of injections)")
    skymap_systematic: float | None = Field(
        None, ge=0, le=1,
        description="fraction of the event's largest likelihood added to the skymap temperature: the pixel model's "
                    "misfit, which grows with the signal; null: 0.01 with two detectors, 0.006 with three or more "
                    "(from a P-P test of injections)")

    @model_validator(mode="after")
    def _band(self):
        if self.f_high <= self.f_low:
            raise ValueError(f"f_high ({self.f_high}) must be above f_low ({self.f_low})")
        if not self.resolutions:
            raise ValueError("resolutions needs at least one pixel bandwidth, e.g. [64, 32, 16, 8]")
        ratios = sorted(self.resolutions, reverse=True)
        if any(a != 2 * b for a, b in zip(ratios, ratios[1:])):
            raise ValueError(f"resolutions must halve from one to the next (e.g. [64, 32, 16, 8]), got {self.resolutions}")
        return self


@dataclass(frozen=True)
class BurstSearchSettings:
    """The burst search of a campaign, frozen: the chunk stage's settings
    (:class:`gwbatch.burst.chunk.BurstSettings`), its conditioning and network settings."""

    sample_rate: float
    ifos: tuple[str, ...]
    chunk: BurstSettings
    conditioning: ConditioningSettings
    network: NetworkSettings

    @property
    def levels(self):
        """The pixel resolutions (:func:`gwbatch.burst.tfmap.resolutions`)."""
        c = self.chunk
        return pixel_levels(c.bandwidths, c.f_low, c.f_high, self.sample_rate)


def chunk_settings(search, network: NetworkSettings, n_ifos: int, sample_rate: float) -> BurstSettings:
    """The chunk stage's settings from the campaign's burst search section."""
    en = search.pixel_threshold or float(chi2.isf(1.0 - PIXEL_QUANTILE, 2 * n_ifos))
    es = search.subnet_threshold or float(chi2.isf(1.0 - PIXEL_QUANTILE, 2 * max(n_ifos - 1, 1)))
    regulator = by_network(search.regulator, REGULATOR, n_ifos)
    return BurstSettings(
        bandwidths=tuple(search.resolutions), f_low=search.f_low, f_high=search.f_high,
        bpp=search.black_pixel_probability, cuts=SkyLoopCuts(en, es, search.subcut, regulator),
        rho_min=search.rho_min, cc_min=search.cc_min, n_trials=network.slides,
        step=int(round(network.slide_step * sample_rate)), cluster=int(round(network.cluster_window * sample_rate)),
        sky_order=search.sky_order, skymap_threshold=search.skymap_threshold, temperature=search.skymap_temperature,
        systematic=by_network(search.skymap_systematic, SKYMAP_SYSTEMATIC, n_ifos),
        n_deep=network.deep_slides, deep_tail=network.far_tail,
    )


class BurstSearch:
    """cWB-style burst search per chunk: time-frequency pixels of the whitened detectors, their
    clusters, the coherent sky loop for each cluster and its lags, events ranked by rho
    (ALGORITHMS.md §4)."""

    kind = "burst"
    section = BurstSearchConfig
    slides_in_chunks = True
    auto_deep_slides = False  # a deep lag costs a base lag (docs/decisions.md)
    statistic_name = "band excess energy"
    rank_column = "rank"
    modelled = False
    far_convention = None  # time slides (workflow.manifest.FAR_CONVENTION)

    def settings(self, campaign, sample_rate: float, ifos: tuple[str, ...], layout: SampleLayout) -> BurstSearchSettings:
        """The search's settings; the lag step must be a multiple of the longest pixel step."""
        require_strain(self.kind, layout)
        network = NetworkSettings.of(campaign, len(ifos))
        settings = BurstSearchSettings(sample_rate, tuple(ifos), chunk_settings(campaign.search, network, len(ifos),
                                       sample_rate), campaign.conditioning.settings(), network)
        hop = settings.levels[-1].hop
        step = network.slide_step * sample_rate
        if abs(step - round(step)) > 1e-9 or round(step) % hop:
            raise ConfigError(f"background.slide_step ({network.slide_step:g} s) must be a multiple of the burst "
                              f"search's longest pixel step, {hop / sample_rate:g} s (1 / (2 x the smallest of "
                              "search.resolutions))")
        return settings

    def check_rate(self, section: BurstSearchConfig, sample_rate: float) -> None:
        """The band at most Nyquist; each pixel bandwidth a power-of-two window of at least 8 samples
        with a pixel inside the band (the burst code's own rule, :func:`gwbatch.burst.tfmap.resolutions`)."""
        if section.f_high > sample_rate / 2.0:
            raise ConfigError(f"search.f_high ({section.f_high:g} Hz) must be at most the Nyquist frequency of the "
                              f"store ({sample_rate / 2.0:g} Hz)")
        try:
            resolutions(sample_rate, section.resolutions, section.f_low, section.f_high)
        except ValueError as exc:
            raise ConfigError(f"search.resolutions: {exc}") from None

    def identity(self, section: dict) -> dict:
        return section

    def halo(self, settings: BurstSearchSettings) -> tuple[int, int]:
        """Whitening corruption plus the analysis window's margin (longest pixel, largest delay and a
        pixel step) on each side."""
        fs, levels = settings.sample_rate, settings.levels
        pad = filter_half_length(settings.conditioning, fs) + window_pad(levels, EARTH_DELAY, fs)
        return pad, pad + levels[-1].hop

    def max_uncertainty(self, settings: BurstSearchSettings) -> float:
        """An event's timing uncertainty (s): the step of the coarsest-in-time pixels."""
        return 0.5 / min(settings.chunk.bandwidths)

    def work_bytes(self, settings: BurstSearchSettings, read_samples: int) -> int:
        """Kernel working memory of one task (upper bound): per detector the float32 input and its 4x
        upsampled copy, and a float32 energy map per resolution (one pixel per sample); per lag the
        rolled network maps and their masks; the sky table and a batch of delayed amplitudes."""
        n_levels, n_ifos = len(settings.chunk.bandwidths), len(settings.ifos)
        per_ifo = (4 + 16 + (8 + 8) * n_levels) * read_samples
        per_lag = (4 + 1 + 8) * n_levels * read_samples
        sky = 12 * 4**settings.chunk.sky_order * n_ifos * 16
        return n_ifos * per_ifo + per_lag + sky + BURST_FIXED_BYTES

    def task_cost(self, settings: BurstSearchSettings, read_samples: int) -> float:
        return read_samples * len(settings.ifos) * 10.0 * (1 + settings.network.slides / 10)

    def memory_knobs(self, settings: BurstSearchSettings) -> dict:
        return {}

    def prepare(self, settings: BurstSearchSettings, context: PrepareContext) -> dict:
        return {}

    def process(self, task: ChunkTask, resources: dict) -> ChunkResult:
        spec, settings, fs = task.spec, task.settings, task.sample_rate
        kept, inputs = [], {}
        empty = pd.DataFrame({c: pd.Series(dtype=t if t != "str" else object) for c, t in TRIGGER_COLUMNS.items()
                              if c != "chunk"})
        with ChunkRun(task) as run:
            for series in run.series():
                with run.stage("search"):
                    cond = series.cond  # without a PSD the data are zeros and nothing is valid
                    inputs[series.ifo] = burst_input(cond.data, cond.snr2_per_energy or 1.0)
                    run.add(series, empty)
                kept.append(series)
            with run.stage("network"):
                net = BurstNetwork(
                    ifos=tuple(s.ifo for s in kept), x=[inputs[s.ifo] for s in kept],
                    valid=[s.cond.valid for s in kept], psd=[s.cond.psd for s in kept], read_start=spec.read_start,
                    own=kept[0].own, sample_rate=fs,
                    gps=float(sample_times(GPSTime.parse(task.store.t0), 0.5 * (spec.start + spec.stop), fs)),
                )
                events, skymaps, livetime, cut = burst_chunk(net, settings.chunk)
        return run.result(TRIGGER_COLUMNS, {"events": events.assign(chunk=spec.index)},
                          {"skymaps": skymaps, "livetime": livetime, "deep_cut": np.array([cut])})

    def merge_triggers(self, settings: BurstSearchSettings, triggers: pd.DataFrame, t0,
                       sample_rate: float) -> pd.DataFrame:
        """No single-detector triggers: the (empty) table with ``gps_time``."""
        return triggers.assign(gps_time=sample_times(t0, triggers["sample"].to_numpy(np.float64), sample_rate))

    def significance(self, settings: BurstSearchSettings, reduction: Reduction) -> Significance:
        """Zero-lag events clustered across chunk edges, with FARs against every chunk's lags."""
        fs, ifos, t0 = reduction.sample_rate, reduction.ifos, GPSTime.parse(reduction.t0)
        step = settings.chunk.step / fs
        bg, skymaps = chunk_trials_significance(
            reduction.results, t0=t0, sample_rate=fs, ifos=ifos, reference="geocent_sample",
            cluster_window=settings.network.cluster_window, step=step, window=settings.chunk.cluster,
            tail=settings.network.far_tail, hierarchical=settings.network.hierarchical_removal,
            n_base=settings.chunk.n_trials)
        candidates, named = burst_candidate_table(bg.foreground, ifos, t0, fs, skymaps)
        return Significance(bg, candidates, burst_background_table(bg.background, ifos, t0, fs, step), named)

    def statistic_series(self, settings: BurstSearchSettings, resources: dict, series, row: pd.Series,
                         spec: ChunkSpec, span: tuple[int, int]):
        """Excess pixel energy ``sum(|a|^2 / 2 - 1)`` over the candidate's band ``[f_min, f_max]`` at
        its resolution, per time frame (centre time): ~rho^2 of the detector's share of the event."""
        fs, levels = settings.sample_rate, settings.levels
        bandwidth = float(row.get("resolution", fs / levels[0].length))
        res = min(levels, key=lambda r: abs(fs / r.length - bandwidth))
        x = np.asarray(burst_input(series.cond.data, series.cond.snr2_per_energy or 1.0))
        x = np.where(np.asarray(series.cond.valid), x, 0.0).astype(np.float32)
        x = x[: x.size - x.size % res.hop]
        energy = np.abs(np.asarray(tf_map(x, res))) ** 2 / 2.0 - 1.0
        freqs = np.arange(res.k_lo, res.k_hi + 1) * fs / res.length
        band = (freqs >= float(row["f_min"]) - 0.5 * bandwidth) & (freqs <= float(row["f_max"]) + 0.5 * bandwidth)
        frames = np.arange(energy.shape[0]) * res.hop + 0.5 * res.length
        return spec.read_start + frames, energy[:, band].sum(axis=1)

    def candidate_pixels(self, settings: BurstSearchSettings, series, row: pd.Series, at: float, half_width: float):
        """The candidate's pixels in one detector: ``|a|^2 / 2`` (noise mean 1) at the level nearest its
        resolution, within ``half_width`` s (or its duration, if longer) of read-span sample ``at``, and
        its waveform: the pixels inside its time-frequency extent synthesised back to time
        (:func:`gwbatch.burst.tfmap.tf_synthesis`), in whitened units, with the noise of those pixels."""
        fs, levels = settings.sample_rate, settings.levels
        res = min(levels, key=lambda r: abs(fs / r.length - float(row["resolution"])))
        x = np.asarray(burst_input(series.cond.data, series.cond.snr2_per_energy or 1.0))
        x = np.where(np.asarray(series.cond.valid), x, 0.0).astype(np.float32)
        n = x.size - x.size % res.hop
        half = max(half_width, float(row["duration"])) * fs + res.length
        width = min(int(np.ceil(2 * half / res.hop)) * res.hop, n)
        lo = min(max(int(round(at)) - width // 2, 0), n - width)
        lo -= lo % res.hop
        pixels = np.asarray(tf_map(x[lo:lo + width], res))
        energy = np.abs(pixels) ** 2 / 2.0
        times = (lo + np.arange(energy.shape[0]) * res.hop + 0.5 * res.length - at) / fs
        freqs = res.frequency(np.arange(res.k_lo, res.k_hi + 1), fs)
        shown = np.abs(times) <= half / fs - res.length / fs
        box = ((np.abs(times) <= 0.5 * float(row["duration"]) + 0.5 * res.length / fs)[:, None]
               & ((freqs >= float(row["f_min"])) & (freqs <= float(row["f_max"])))[None, :])
        wave = tf_synthesis(np.where(box, pixels, 0), res, width)
        t = (lo + np.arange(width) - at) / fs
        near = np.abs(t) <= 0.5 * float(row["duration"]) + 2 * res.length / fs
        return times[shown], freqs, energy[shown].T, (t[near], wave[near])

    def own_figures(self, settings, task: ChunkTask, row: pd.Series) -> None:
        """None: the report draws the strain views."""
        return None


SEARCH = BurstSearch
