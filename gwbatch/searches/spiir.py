"""The SPIIR search as a campaign search: whitened strain through a template bank of IIR filters.

Per detector: the shared front end (read, mask, whiten), the detector's own built bank (filters for
its PSD; the same templates for every detector), per-template peaks clustered in time and their
autocorrelation chi-squared (:mod:`gwbatch.spiir.triggers`).  A trigger belongs to the chunk
whose own samples hold its ``|z|`` peak; the halo before a chunk covers the longest template, so a
chunk's output equals that of filtering the whole stream.  As in gstlal, filters run through masked
(zero-filled) stretches: just after a gap a long template's response is only partial, which lowers
its SNR and never raises it.

Per-detector triggers are ranked by PyCBC's chi-squared reweighted SNR (Babak et al. 2013, PRD 87,
024033, eq. 6) ``rank = snr / ((1 + chisq^3) / 2)^(1/6)`` for ``chisq > 1``, else ``snr``.

Candidates are network events of the coherent stage (:mod:`gwbatch.coherent.chunk`), formed in each
chunk from every detector's triggers in turn, with ``background.slides`` time-shifted trials there;
:meth:`SpiirSearch.significance` clusters them across chunks and gives each its FAR against the
trials (:mod:`gwbatch.background.trials`).  The candidate table's ``snr`` is the network coherent
SNR, ``rank`` the ranking statistic (:func:`gwbatch.coherent.stage.coherent_rank`).
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from gwbatch.background.trials import trial_background
from gwbatch.candidates.coincidence import IfoTriggers, cluster_in_time
from gwbatch.candidates.tables import coherent_background_table, coherent_candidate_table
from gwbatch.coherent.chunk import ChunkNetwork, CoherentSettings, coherent_chunk
from gwbatch.conditioning import filter_half_length
from gwbatch.config import Campaign, load_bank_config
from gwbatch.gpstime import GPSTime, sample_times
from gwbatch.io.banks import load_bank, read_bank_file
from gwbatch.io.store import read_meta
from gwbatch.searches import ChunkResult, ChunkSpec, Significance
from gwbatch.searches.common import gather_chunk_events, run_chunk
from gwbatch.spiir.triggers import find_triggers
from gwbatch.waveforms.taylorf2 import chirp_time

TRIGGER_COLUMNS = {
    "ifo": "str", "sample": "int64", "merger": "int64", "template": "int64", "mass1": "float64",
    "mass2": "float64", "snr": "float64", "phase": "float64", "chisq": "float64", "rank": "float64",
    "chunk": "int64",
}
#: Timing uncertainty of a SPIIR trigger in coincidence (s): the peak is good to a sample or two.
TIMING = 1e-3
#: Extra halo after a chunk for the coherent stage (s): arrival delays between detectors (up to
#: ~40 ms), merger delays of the filters (under 30 ms) and the chi-squared lags.
COHERENT_HALO = 0.25

#: Memory of one SPIIR task that does not grow with the chunk (filter coefficients, the coherent
#: stage's sky tables and candidate batches), an upper bound.
SPIIR_FIXED_BYTES = 512 * 2**20


def reweighted_snr(snr: np.ndarray, chisq: np.ndarray) -> np.ndarray:
    """PyCBC's new SNR: ``snr / ((1 + chisq^3)/2)^(1/6)`` where the reduced chi-squared exceeds 1."""
    snr, chisq = np.asarray(snr, float), np.nan_to_num(np.asarray(chisq, float), nan=1.0)
    return np.where(chisq > 1.0, snr / ((1.0 + chisq**3) / 2.0) ** (1.0 / 6.0), snr)


def filter_input(cond) -> object:
    """Whitened data in the units SPIIR filters expect, float32 on the backend.

    Conditioning whitens to unit variance in its band ``B`` (:mod:`gwbatch.conditioning.whiten`); a
    filter normalised to ``sum |u|^2 = 2`` gives ``E|z|^2 = 2`` for unit-variance *white* noise, so the
    data are scaled by ``sqrt(2 B / fs)`` (``snr2_per_energy``): without it SNRs come out
    ``sqrt(fs / 2B)`` too high (4% at 1024 Hz with a 20 Hz lower edge).
    """
    return (cond.data * np.sqrt(cond.snr2_per_energy)).astype(np.float32)


def loudest_over_templates(triggers: pd.DataFrame, window: float) -> pd.DataFrame:
    """Each detector's triggers that are the loudest of any template within ``window`` seconds (by
    ``snr``), loudest first: the single-detector trigger list an analyst reads."""
    out = [df[cluster_in_time(df["gps_time"].to_numpy(np.float64), df["snr"].to_numpy(np.float64), window)]
           for _, df in triggers.groupby("ifo", sort=True)]
    if not out:
        return triggers.iloc[:0]
    return pd.concat(out).sort_values("snr", ascending=False, kind="stable").reset_index(drop=True)


@functools.lru_cache(maxsize=8)
def _bank(path: str, fingerprint: str):
    """A worker loads each bank once (``fingerprint`` keys the cache to the file's content)."""
    bank = load_bank(path)
    if bank.fingerprint != fingerprint:
        raise RuntimeError(f"bank {path} changed while the campaign ran (fingerprint {bank.fingerprint})")
    return bank


def warm_samples(campaign: Campaign, sample_rate: float) -> int:
    """Samples the filters run from rest before their output counts: the bank's longest template."""
    return int(np.ceil(longest_template(campaign.search.bank) * sample_rate))


def longest_template(bank_path) -> float:
    """Seconds of the bank's longest template (Newtonian chirp time from f_low - 2 Hz, plus 2 s)."""
    cfg = load_bank_config(bank_path)
    if cfg.file is not None:
        t = read_bank_file(cfg.file)
        m1 = min(x.mass1 for x in t)
        m2 = min(x.mass2 for x in t)
    else:
        m1, m2 = cfg.mass1[0], cfg.mass2[0]
    return chirp_time(m1, m2, max(cfg.f_low - 2.0, 5.0)) + 2.0


def coherent_settings(campaign: Campaign, n_ifos: int, sample_rate: float) -> CoherentSettings:
    search, coinc = campaign.search, campaign.coincidence
    with_trials = coinc.min_ifos > 1 and n_ifos > 1
    return CoherentSettings(
        n_trials=campaign.background.slides if with_trials else 0,
        step=int(round(campaign.background.slide_step * sample_rate)),
        cluster=coinc.cluster_window * sample_rate,
        candidate_window=search.cluster_window * sample_rate,
        sky_order=search.coherent.sky_order,
        skymap_threshold=search.coherent.skymap_threshold,
        temperature=search.coherent.skymap_temperature,
        ifo_snr=search.coherent.ifo_snr,
        min_ifos=coinc.min_ifos,
        batch=search.batch,
    )


class SpiirSearch:
    kind = "spiir"
    slides_in_chunks = True
    candidate_fields = {"template": "template", "chisq": "chisq", "rank": "rank", "phase": "phase"}

    def halo(self, campaign: Campaign, sample_rate: float) -> tuple[int, int]:
        """Before: whitening corruption, the longest template, a cluster window; after: whitening, a
        cluster window and the chi-squared lags."""
        pad = filter_half_length(campaign.conditioning, sample_rate)
        cluster = int(np.ceil(campaign.search.cluster_window * sample_rate))
        warm = warm_samples(campaign, sample_rate)
        lags = load_bank_config(campaign.search.bank).spiir.autocorrelation_lags
        return pad + warm + cluster, pad + cluster + lags + 1 + int(np.ceil(COHERENT_HALO * sample_rate))

    def max_uncertainty(self, campaign: Campaign, sample_rate: float) -> float:
        return TIMING

    statistic_name = "SNR |z|"

    def statistic_series(self, campaign: Campaign, resources: dict, series, row, spec: ChunkSpec, span):
        """The candidate's template filtered in this detector: |z| against merger time, over the
        merger times ``span`` only. The filters start from rest the bank's longest template before
        it, as the chunk's own samples do after the read start (the search's halo)."""
        from gwbatch.spiir.filtering import filter_bank

        bank = _bank(*resources["banks"][series.ifo])
        template = int(row["template"])
        part, delay = bank.subset(np.array([template])), int(bank.merger_delay[template])
        x = filter_input(series.cond)
        warm = warm_samples(campaign, bank.sample_rate)
        hi = int(np.clip(span[1] - spec.read_start + delay, 0, x.size))
        lo = int(np.clip(span[0] - spec.read_start + delay - warm, 0, hi))
        z = np.abs(filter_bank(x[lo:hi], part.a, part.b, part.d)[0])
        z = np.where(np.asarray(series.cond.valid)[lo:hi], z, np.nan)
        return spec.read_start + lo + np.arange(z.size) - delay, z

    def work_bytes(self, campaign: Campaign, read_samples: int, n_ifos: int) -> int:
        """Kernel working memory of one task (upper bound): every detector's float32 filter input,
        kept for the coherent stage, and per pass of ``search.batch`` templates their complex64 SNR
        series with the float32 magnitudes, masks and peak scratch the trigger search makes of them
        (28 bytes per template and sample, measured 26 on an H200)."""
        return (4 * n_ifos + 28 * campaign.search.batch) * read_samples + SPIIR_FIXED_BYTES

    def process(self, campaign: Campaign, ifos: tuple[str, ...], backend: str, resources: dict,
                spec: ChunkSpec) -> ChunkResult:
        search = campaign.search

        filtered = {}  # each detector's filter input, made once for triggers and the coherent stage

        def search_one(series):
            bank = _bank(*resources["banks"][series.ifo])
            cond = series.cond
            filtered[series.ifo] = filter_input(cond)
            trig = find_triggers(filtered[series.ifo], cond.valid, bank, threshold=search.threshold,
                                 cluster_window=int(round(search.cluster_window * bank.sample_rate)),
                                 batch=search.batch, own=series.own, origin=spec.read_start)
            frame = pd.DataFrame({
                "ifo": series.ifo,
                "sample": trig.peak + spec.read_start,
                "merger": trig.merger + spec.read_start,
                "template": trig.template,
                "mass1": bank.mass1[trig.template],
                "mass2": bank.mass2[trig.template],
                "snr": trig.snr,
                "phase": trig.phase,
                "chisq": trig.chisq,
                "rank": reweighted_snr(trig.snr, trig.chisq),
            })
            return frame, {}

        def network(series, triggers):
            meta = read_meta(campaign.data.store)
            fs = meta.sample_rate
            net = ChunkNetwork(
                ifos=tuple(s.ifo for s in series), x=[filtered[s.ifo] for s in series],
                valid=[s.cond.valid for s in series], banks=[_bank(*resources["banks"][s.ifo]) for s in series],
                read_start=spec.read_start, own=series[0].own, sample_rate=fs,
                gps=float(sample_times(GPSTime.parse(meta.t0), 0.5 * (spec.start + spec.stop), fs)),
            )
            events, skymaps, livetime = coherent_chunk(net, triggers, coherent_settings(campaign, len(series), fs))
            return {"events": events.assign(chunk=spec.index)}, {"skymaps": skymaps, "livetime": livetime}

        return run_chunk(campaign, ifos, backend, spec, TRIGGER_COLUMNS, search_one, network)

    def significance(self, campaign: Campaign, plan, results: list[ChunkResult]) -> Significance:
        """Zero-lag events clustered across chunks, with FARs against every chunk's trials, in the
        output contract's tables; the skymaps of the candidates that have one."""
        fs, ifos = plan.sample_rate, plan.ifos
        t0 = GPSTime.parse(plan.t0)
        zero, trials, skymaps, livetime = gather_chunk_events(results, t0, fs)
        # chunks clustered each trial on the first detector's read time; events near a chunk edge meet here
        ref = zero[f"sample_{ifos[0]}"].to_numpy(np.float64)
        keep = cluster_in_time(ref, zero["rank"].to_numpy(), campaign.coincidence.cluster_window * fs)
        zero = zero[keep].reset_index(drop=True)
        settings = coherent_settings(campaign, len(ifos), fs)
        bg = trial_background(zero, trials, livetime, ifos=ifos, step=settings.step / fs, window=settings.cluster)
        candidates, named = coherent_candidate_table(bg.foreground, ifos, t0, fs, skymaps)
        return Significance(bg, candidates, coherent_background_table(trials, ifos, t0, fs, settings.step / fs), named)

    def merge(self, campaign: Campaign, triggers: pd.DataFrame, t0, sample_rate: float) -> pd.DataFrame:
        """Cluster each (detector, template)'s triggers over the whole span, as each chunk did (a
        trigger near a chunk edge may be kept by both neighbours); ``gps_time`` is the merger time."""
        window = campaign.search.cluster_window * sample_rate
        out = []
        for _, df in triggers.groupby("ifo", sort=False):
            sample = df["sample"].to_numpy(np.int64)
            stride = float(sample.max() - sample.min()) + 4 * window + 1
            keyed = (sample - sample.min()) + df["template"].to_numpy(np.float64) * stride
            out.append(df[cluster_in_time(keyed, df["snr"].to_numpy(), window)])
        if not out:
            return triggers.assign(gps_time=np.zeros(0))
        merged = pd.concat(out).sort_values(["ifo", "sample", "template"], kind="stable").reset_index(drop=True)
        return merged.assign(gps_time=sample_times(t0, merged["merger"].to_numpy(np.float64), sample_rate))

    def coincidence_triggers(self, df: pd.DataFrame, span_start: int, sample_rate: float) -> IfoTriggers:
        return IfoTriggers(
            time=(df["merger"].to_numpy(np.float64) - span_start) / sample_rate,
            uncertainty=np.full(len(df), TIMING),
            snr=df["rank"].to_numpy(np.float64),
            key=df["template"].to_numpy(np.int64),
        )
