"""The unmodelled burst search as a campaign search (cWB style; ALGORITHMS.md §4 and §6).

Per chunk: the shared front end (read, mask, whiten) for every detector, then the network stage
(:mod:`gwbatch.burst.chunk`): time-frequency pixels, clusters, the coherent sky loop and events,
for zero lag and ``background.slides`` lags of ``background.slide_step`` (detector ``j`` moved by
``k * step * j`` in lag ``k``, wrapped within the chunk).  The search has no single-detector
triggers: its events are network clusters, so the trigger table stays empty.
:meth:`BurstSearch.significance` clusters the zero-lag events across chunk edges and gives each
its FAR against all lag events (:mod:`gwbatch.background.trials`); ``rank`` is ``rho``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import chi2

from gwbatch.background.trials import trial_background
from gwbatch.burst.chunk import BurstNetwork, BurstSettings, burst_chunk, window_pad
from gwbatch.burst.skyloop import SkyLoopCuts
from gwbatch.burst.tfmap import burst_input, resolutions, tf_map
from gwbatch.candidates.coincidence import IfoTriggers, cluster_in_time
from gwbatch.candidates.tables import burst_background_table, burst_candidate_table
from gwbatch.conditioning import filter_half_length
from gwbatch.config import Campaign
from gwbatch.errors import ConfigError
from gwbatch.gpstime import GPSTime, sample_times
from gwbatch.io.store import read_meta
from gwbatch.searches import ChunkResult, ChunkSpec, Significance
from gwbatch.searches.common import gather_chunk_events, run_chunk

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

#: Memory of one burst task that does not grow with the chunk (clusters' delayed amplitudes, sky-loop
#: batches, FFT plans), an upper bound.
BURST_FIXED_BYTES = 2**30


def pixel_levels(campaign: Campaign, sample_rate: float):
    """The search's resolutions, or a ConfigError naming the setting."""
    cfg = campaign.search
    if cfg.f_high > sample_rate / 2:
        raise ConfigError(f"search.f_high ({cfg.f_high:g} Hz) is above the Nyquist frequency {sample_rate / 2:g} Hz")
    try:
        return resolutions(sample_rate, cfg.resolutions, cfg.f_low, cfg.f_high)
    except ValueError as exc:
        raise ConfigError(f"search.resolutions: {exc}") from None


def default_regulator(n_ifos: int) -> float:
    return REGULATOR[2] if n_ifos <= 2 else REGULATOR["more"]


def burst_settings(campaign: Campaign, n_ifos: int, sample_rate: float) -> BurstSettings:
    cfg, coinc = campaign.search, campaign.coincidence
    en = cfg.pixel_threshold or float(chi2.isf(1.0 - PIXEL_QUANTILE, 2 * n_ifos))
    es = cfg.subnet_threshold or float(chi2.isf(1.0 - PIXEL_QUANTILE, 2 * max(n_ifos - 1, 1)))
    with_lags = coinc.min_ifos > 1 and n_ifos > 1
    return BurstSettings(
        bandwidths=tuple(cfg.resolutions), f_low=cfg.f_low, f_high=cfg.f_high, bpp=cfg.black_pixel_probability,
        cuts=SkyLoopCuts(en, es, cfg.subcut, default_regulator(n_ifos) if cfg.regulator is None else cfg.regulator),
        rho_min=cfg.rho_min, cc_min=cfg.cc_min,
        n_trials=campaign.background.slides if with_lags else 0,
        step=int(round(campaign.background.slide_step * sample_rate)),
        cluster=int(round(coinc.cluster_window * sample_rate)), sky_order=cfg.sky_order,
        skymap_threshold=cfg.skymap_threshold, temperature=cfg.skymap_temperature,
    )


class BurstSearch:
    kind = "burst"
    slides_in_chunks = True
    candidate_fields: dict = {}

    def halo(self, campaign: Campaign, sample_rate: float) -> tuple[int, int]:
        """Whitening corruption plus the analysis window's margin (longest pixel, largest delay and a
        pixel step) on each side; checks the lag step fits the pixels."""
        levels = pixel_levels(campaign, sample_rate)
        step = campaign.background.slide_step * sample_rate
        if abs(step - round(step)) > 1e-9 or round(step) % levels[-1].hop:
            raise ConfigError(f"background.slide_step ({campaign.background.slide_step:g} s) must be a multiple of the "
                              f"burst search's longest pixel step, {levels[-1].hop / sample_rate:g} s "
                              f"(1 / (2 x the smallest of search.resolutions))")
        pad = filter_half_length(campaign.conditioning, sample_rate) + window_pad(levels, EARTH_DELAY, sample_rate)
        return pad, pad + levels[-1].hop

    def max_uncertainty(self, campaign: Campaign, sample_rate: float) -> float:
        """An event's timing uncertainty (s): the step of the coarsest-in-time pixels."""
        return 0.5 / min(campaign.search.resolutions)

    statistic_name = "band excess energy"

    def statistic_series(self, campaign: Campaign, resources: dict, series, row, spec: ChunkSpec, span):
        """Excess pixel energy ``sum(|a|^2 / 2 - 1)`` over the candidate's band ``[f_min, f_max]`` at
        its resolution, per time frame (centre time): ~rho^2 of the detector's share of the event."""
        fs = read_meta(campaign.data.store).sample_rate
        levels = pixel_levels(campaign, fs)
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

    def work_bytes(self, campaign: Campaign, read_samples: int, n_ifos: int) -> int:
        """Kernel working memory of one task (upper bound): per detector the float32 input and its 4x
        upsampled copy, and a float32 energy map per resolution (one pixel per sample); per lag the
        rolled network maps and their masks; the sky table and a batch of delayed amplitudes."""
        n_levels = len(campaign.search.resolutions)
        per_ifo = (4 + 16 + (8 + 8) * n_levels) * read_samples
        per_lag = (4 + 1 + 8) * n_levels * read_samples
        sky = 12 * 4**campaign.search.sky_order * n_ifos * 16
        return n_ifos * per_ifo + per_lag + sky + BURST_FIXED_BYTES

    def process(self, campaign: Campaign, ifos: tuple[str, ...], backend: str, resources: dict,
                spec: ChunkSpec) -> ChunkResult:
        inputs = {}

        def search_one(series):
            cond = series.cond  # without a PSD the data are zeros and nothing is valid
            inputs[series.ifo] = burst_input(cond.data, cond.snr2_per_energy or 1.0)
            return pd.DataFrame({c: pd.Series(dtype=t if t != "str" else object) for c, t in TRIGGER_COLUMNS.items()
                                 if c != "chunk"}), {}

        def network(series, triggers):
            meta = read_meta(campaign.data.store)
            fs = meta.sample_rate
            settings = burst_settings(campaign, len(series), fs)
            net = BurstNetwork(
                ifos=tuple(s.ifo for s in series),
                x=[inputs[s.ifo] for s in series], valid=[s.cond.valid for s in series],
                psd=[s.cond.psd for s in series], read_start=spec.read_start, own=series[0].own, sample_rate=fs,
                gps=float(sample_times(GPSTime.parse(meta.t0), 0.5 * (spec.start + spec.stop), fs)),
            )
            events, skymaps, livetime = burst_chunk(net, settings)
            return {"events": events.assign(chunk=spec.index)}, {"skymaps": skymaps, "livetime": livetime}

        return run_chunk(campaign, ifos, backend, spec, TRIGGER_COLUMNS, search_one, network)

    def significance(self, campaign: Campaign, plan, results: list[ChunkResult]) -> Significance:
        """Zero-lag events clustered across chunk edges, with FARs against every chunk's lags."""
        fs, ifos = plan.sample_rate, plan.ifos
        t0 = GPSTime.parse(plan.t0)
        zero, lags, skymaps, livetime = gather_chunk_events(results, t0, fs)
        keep = cluster_in_time(zero["geocent_sample"].to_numpy(np.float64), zero["rank"].to_numpy(),
                               campaign.coincidence.cluster_window * fs)
        zero = zero[keep].reset_index(drop=True)
        settings = burst_settings(campaign, len(ifos), fs)
        bg = trial_background(zero, lags, livetime, ifos=ifos, step=settings.step / fs, window=settings.cluster)
        candidates, named = burst_candidate_table(bg.foreground, ifos, t0, fs, skymaps)
        return Significance(bg, candidates, burst_background_table(lags, ifos, t0, fs, settings.step / fs), named)

    def merge(self, campaign: Campaign, triggers: pd.DataFrame, t0, sample_rate: float) -> pd.DataFrame:
        """No single-detector triggers: the (empty) table with ``gps_time``."""
        return triggers.assign(gps_time=sample_times(t0, triggers["sample"].to_numpy(np.float64), sample_rate))

    def coincidence_triggers(self, df: pd.DataFrame, span_start: int, sample_rate: float) -> IfoTriggers:
        return IfoTriggers(time=np.zeros(0), uncertainty=np.zeros(0), snr=np.zeros(0))
