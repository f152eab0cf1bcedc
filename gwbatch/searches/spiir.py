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
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import Field, field_validator, model_validator

from gwbatch.background.trials import chunk_trials_significance
from gwbatch.candidates.coincidence import cluster_in_time
from gwbatch.candidates.tables import coherent_background_table, coherent_candidate_table
from gwbatch.coherent.chunk import ChunkNetwork, CoherentSettings, coherent_chunk
from gwbatch.conditioning import ConditioningSettings, filter_half_length
from gwbatch.conditioning.psd import design
from gwbatch.conditioning.whiten import effective_psd
from gwbatch.config import load_bank_config
from gwbatch.config.strict import Snr, StrictModel
from gwbatch.config.text import short
from gwbatch.errors import ConfigError, DataError
from gwbatch.gpstime import GPSTime, sample_times
from gwbatch.io.banks import load_bank, read_bank_file
from gwbatch.io.store import file_sha256
from gwbatch.io.store import SampleLayout
from gwbatch.searches.base import MemoryKnob, NetworkSettings, PrepareContext, Reduction, require_strain
from gwbatch.searches.common import ChunkRun
from gwbatch.sky.skymap import TEMPERATURE
from gwbatch.spiir.cache import build_bank, cached_bank_path, placed_templates, store_psd
from gwbatch.spiir.bank import multirate_tail
from gwbatch.spiir.epochs import Epoch, mismatch_loss, plan_epochs, share_banks, template_cutoffs
from gwbatch.spiir._cuda_subbands import GRAPH_BYTES
from gwbatch.spiir.triggers import PASS_BYTES, find_triggers
from gwbatch.tasks import ChunkResult, ChunkSpec, ChunkTask, Significance
from gwbatch.waveforms.taylorf2 import chirp_time, isco_frequency

TRIGGER_COLUMNS = {
    "ifo": "str", "sample": "int64", "merger": "int64", "template": "int64", "mass1": "float64",
    "mass2": "float64", "snr": "float64", "phase": "float64", "chisq": "float64", "rank": "float64",
    "chunk": "int64",
}
#: Timing uncertainty of a SPIIR trigger or event (s): the peak is good to a sample or two.
TIMING = 1e-3
#: ``search.batch: auto``: templates per pass where the workers' memory allows.
AUTO_BATCH = 256
#: Extra halo after a chunk for the coherent stage (s): arrival delays between detectors (up to
#: ~40 ms), merger delays of the filters (under 30 ms) and the chi-squared lags.
COHERENT_HALO = 0.25

#: Memory of one SPIIR task that does not grow with the chunk (filter coefficients, the coherent
#: stage's sky tables and candidate batches), an upper bound.
SPIIR_FIXED_BYTES = 512 * 2**20

log = logging.getLogger("gwbatch")


class CoherentConfig(StrictModel):
    """The coherent stage of the SPIIR search (ALGORITHMS.md §3): sky grid and skymaps.  Its
    time-shifted trials are ``background.slides`` shifts of ``background.slide_step`` per chunk."""

    sky_order: int = Field(5, ge=0, le=8, description="HEALPix order of the sky grid (5: 12288 directions, 7: 196608)")
    ifo_snr: Snr = Field(
        4.0, description="an event needs coincidence.min_ifos detectors with SNR at least this (the pivot is one), "
                         "so a glitch in one detector is never a network event")
    skymap_threshold: Snr = Field(
        8.0, description="zero-lag candidates ranked at least this get a skymap (FITS) and a 90% area")
    skymap_temperature: float = Field(
        TEMPERATURE, gt=0, le=1e6,
        description="width of the skymaps, P ~ exp(rho_c^2 / 2T), calibrated by a P-P test on injections "
                    "(benchmarks/coherent_campaigns.py reports the test for a range of T)")


class SpiirSearchConfig(StrictModel):
    """SPIIR compact-binary search (ALGORITHMS.md §2): a template bank as IIR filters on whitened data."""

    kind: Literal["spiir"] = "spiir"
    needs_whitening: ClassVar[bool] = True
    bank: Path = Field(description="bank YAML file (see configs/banks/)")
    placement_psd: Literal["aLIGO", "AdVirgo", "KAGRA"] = Field(
        "aLIGO", description="design curve the templates are placed with (the same templates for every detector)"
    )
    psd: str = Field("data", description="PSD the filters are built for: 'data' (each detector's own) or a design curve")
    psd_seconds: float = Field(512.0, gt=0, le=4096,
                               description="with psd: data, seconds from each PSD epoch's start measured (at most 4096)")
    psd_epoch: float = Field(
        4096.0, gt=0, le=10 * 365 * 86400,
        description="with psd: data, the span is cut into epochs of about this many seconds (whole chunks), each "
                    "with its PSD measured; an epoch reuses an earlier epoch's bank unless that loses more than "
                    "psd_tolerance of its SNR (gwbatch.spiir.epochs)")
    psd_tolerance: float = Field(
        0.005, gt=0, le=0.2,
        description="largest fraction of the optimal SNR an epoch may lose by reusing a bank built for another "
                    "epoch's PSD; beyond it the epoch gets a bank of its own")
    threshold: Snr = Field(5.5, description="single-detector |z| threshold")
    cluster_window: float = Field(0.1, gt=0, le=3600, description="keep the loudest trigger within this many seconds")
    batch: Annotated[int, Field(ge=1, le=65536)] | Literal["auto"] = Field(
        "auto", description=f"templates filtered per pass. auto (the default): the most, up to {AUTO_BATCH}, whose task "
                            "fits a worker's memory (its GPU's on a GPU worker, its memory limit on a CPU worker)")
    bank_cache: Path | None = Field(
        None, description="directory of placed templates and built banks, by configuration, templates and PSD (a "
                          "bank serves PSDs within 1e-6 of its own); default <output>/banks. Campaigns that name "
                          "the same directory share them")
    coherent: CoherentConfig = CoherentConfig()

    @field_validator("psd")
    @classmethod
    def _psd(cls, v):
        if v not in ("data", "aLIGO", "AdVirgo", "KAGRA"):
            raise ValueError(f"must be 'data' or a design curve (aLIGO, AdVirgo, KAGRA), got {short(v)}")
        return v

    @model_validator(mode="after")
    def _epoch_holds_its_psd(self):
        if self.psd == "data" and self.psd_seconds > self.psd_epoch:
            raise ValueError(f"psd_seconds ({self.psd_seconds:g}) must be at most psd_epoch ({self.psd_epoch:g}): each "
                             "epoch's PSD is measured from its own first psd_seconds")
        return self


@dataclass(frozen=True)
class SpiirSettings:
    """The SPIIR search of a campaign, frozen: the bank (its file, and what the plan needs of it:
    the longest template and the autocorrelation lags), how its filters are built, the trigger
    search, and the coherent stage (:class:`gwbatch.coherent.chunk.CoherentSettings`)."""

    sample_rate: float
    ifos: tuple[str, ...]
    bank: str  # the bank's YAML file
    placement_psd: str  # design curve the templates are placed with
    psd: str  # "data" (each detector's own) or a design curve the filters are built for
    psd_seconds: float  # with psd "data": seconds from each epoch's start measured
    psd_epoch: float  # with psd "data": seconds per PSD epoch (gwbatch.spiir.epochs)
    psd_tolerance: float  # SNR fraction an epoch may lose by reusing another epoch's bank
    bank_cache: str | None  # None: the run directory's own
    threshold: float  # single-detector |z|
    cluster_window: float  # s
    batch: int  # templates per pass
    batch_auto: bool  # search.batch auto: sized to the workers' memory (memory_knobs), at most AUTO_BATCH
    warm: int  # samples the filters run from rest before their output counts: the longest template
    tail: int  # samples after the chunk's own the multi-rate ladder's FIRs need (0 single-rate)
    autocorrelation_lags: int
    coherent: CoherentSettings
    conditioning: ConditioningSettings
    network: NetworkSettings


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


@functools.lru_cache(maxsize=32)
def _bank(path: str, fingerprint: str):
    """A worker loads each bank once (``fingerprint`` keys the cache to the file's content); 32 hold
    three detectors' banks for ten PSD epochs that each needed their own."""
    bank = load_bank(path)
    if bank.fingerprint != fingerprint:
        raise RuntimeError(f"bank {path} changed while the campaign ran (fingerprint {bank.fingerprint})")
    return bank


def chunk_bank(resources: dict, ifo: str, spec: ChunkSpec):
    """The bank ``ifo``'s filters use in chunk ``spec``: its PSD epoch's (:meth:`SpiirSearch.prepare`)."""
    return _bank(*resources["epoch_banks"][resources["chunk_epoch"][spec.index]][ifo])


def longest_template(cfg) -> float:
    """Seconds of the longest template of bank ``cfg`` (a :class:`gwbatch.config.BankConfig`):
    the Newtonian chirp time from f_low - 2 Hz, plus 2 s."""
    if cfg.file is not None:
        t = read_bank_file(cfg.file)
        m1 = min(x.mass1 for x in t)
        m2 = min(x.mass2 for x in t)
    else:
        m1, m2 = cfg.mass1[0], cfg.mass2[0]
    return chirp_time(m1, m2, max(cfg.f_low - 2.0, 5.0)) + 2.0


class SpiirSearch:
    """SPIIR filtering per detector, then the coherent stage per chunk: network candidates, their
    time-shifted trials and skymaps (ALGORITHMS.md §2-3)."""

    kind = "spiir"
    section = SpiirSearchConfig
    slides_in_chunks = True
    auto_deep_slides = True  # bounded by the network SNR: deep trials cost little
    statistic_name = "SNR |z|"
    rank_column = "rank"
    modelled = True
    far_convention = None  # time slides (workflow.manifest.FAR_CONVENTION)

    def settings(self, campaign, sample_rate: float, ifos: tuple[str, ...], layout: SampleLayout) -> SpiirSettings:
        require_strain(self.kind, layout)
        search, network = campaign.search, NetworkSettings.of(campaign, len(ifos))
        bank = load_bank_config(search.bank)
        batch = AUTO_BATCH if search.batch == "auto" else search.batch
        coherent = CoherentSettings(
            n_trials=network.slides, step=int(round(network.slide_step * sample_rate)),
            cluster=network.cluster_window * sample_rate, candidate_window=search.cluster_window * sample_rate,
            sky_order=search.coherent.sky_order, skymap_threshold=search.coherent.skymap_threshold,
            temperature=search.coherent.skymap_temperature, ifo_snr=search.coherent.ifo_snr,
            min_ifos=network.min_ifos, batch=batch, n_deep=network.deep_slides, deep_tail=network.far_tail,
        )
        return SpiirSettings(
            sample_rate=sample_rate, ifos=tuple(ifos), bank=str(search.bank), placement_psd=search.placement_psd,
            psd=search.psd, psd_seconds=search.psd_seconds, psd_epoch=search.psd_epoch,
            psd_tolerance=search.psd_tolerance,
            bank_cache=None if search.bank_cache is None else str(search.bank_cache),
            threshold=search.threshold, cluster_window=search.cluster_window, batch=batch,
            batch_auto=search.batch == "auto",
            warm=int(np.ceil(longest_template(bank) * sample_rate)), tail=multirate_tail(bank),
            autocorrelation_lags=bank.spiir.autocorrelation_lags, coherent=coherent,
            conditioning=campaign.conditioning.settings(), network=network,
        )

    def check_rate(self, section: SpiirSearchConfig, sample_rate: float) -> None:
        """The bank says its own rate; nothing else of the section depends on the data's."""

    def identity(self, section: dict) -> dict:
        """The bank's definition, not where it is or where its builds are cached."""
        out = {k: v for k, v in section.items() if k != "bank_cache"}
        out["bank"] = Path(section["bank"]).read_text()
        bank = load_bank_config(section["bank"])
        if bank.file is not None:
            out["bank_file_sha256"] = file_sha256(bank.file)
        return out

    def halo(self, settings: SpiirSettings) -> tuple[int, int]:
        """Before: whitening corruption, the longest template, a cluster window; after: whitening, a
        cluster window, the chi-squared lags and the multi-rate ladder's reach."""
        fs = settings.sample_rate
        pad = filter_half_length(settings.conditioning, fs)
        cluster = int(np.ceil(settings.cluster_window * fs))
        return (pad + settings.warm + cluster,
                pad + cluster + settings.autocorrelation_lags + 1 + int(np.ceil(COHERENT_HALO * fs)) + settings.tail)

    def max_uncertainty(self, settings: SpiirSettings) -> float:
        return TIMING

    def work_bytes(self, settings: SpiirSettings, read_samples: int) -> int:
        """Kernel working memory of one task (upper bound): every detector's float32 filter input,
        kept for the coherent stage, and per pass of ``search.batch`` templates their complex64 SNR
        series with the float32 magnitudes, masks and peak scratch the trigger search makes of them
        (:data:`gwbatch.spiir.triggers.PASS_BYTES` per template and sample), with the sub-band
        filters' CUDA graphs' working memory (:data:`gwbatch.spiir._cuda_subbands.GRAPH_BYTES`, which
        they keep; reserved on the CPU too, an upper bound); the coherent stage refilters within the
        same memory (:func:`gwbatch.coherent.chunk.coherent_batch`)."""
        per_template = PASS_BYTES + GRAPH_BYTES
        return (4 * len(settings.ifos) + per_template * settings.batch) * read_samples + SPIIR_FIXED_BYTES

    def task_cost(self, settings: SpiirSettings, read_samples: int) -> float:
        return read_samples * len(settings.ifos) * 100.0 * (1 + settings.network.slides / 100)

    def memory_knobs(self, settings: SpiirSettings) -> dict:
        def with_batch(batch: int) -> SpiirSettings:
            return replace(settings, batch=batch, coherent=replace(settings.coherent, batch=batch))

        return {"search.batch": MemoryKnob(settings.batch, with_batch, AUTO_BATCH if settings.batch_auto else None,
                                           on_cpu=True)}

    def psd_epochs(self, settings: SpiirSettings, chunks) -> list[Epoch]:
        """The plan's ``chunks`` grouped into PSD epochs of ``psd_epoch`` seconds with ``psd: data``,
        else one (:func:`gwbatch.spiir.epochs.plan_epochs`)."""
        return plan_epochs(chunks, settings.psd_epoch if settings.psd == "data" else None, settings.sample_rate)

    def epoch_psds(self, settings: SpiirSettings, context: PrepareContext, epochs: list[Epoch]) -> list[dict]:
        """Per PSD epoch, the PSD each detector's bank would be built for: measured from the store's
        first ``psd_seconds`` of the epoch as the chunks will whiten it (None where too little of
        that is data, when other epochs have some), or the design curve.  The measurements (a store
        read and a Welch median each) run in ``context.threads`` threads: a month of 8192 s epochs
        makes 316 per detector."""
        fs, cond = settings.sample_rate, settings.conditioning
        if settings.psd != "data":
            return [{ifo: design(settings.psd, fs) for ifo in settings.ifos} for _ in epochs]

        def measure(item):
            epoch, ifo = item
            try:
                raw = store_psd(context.store, ifo, start=epoch.start, seconds=settings.psd_seconds,
                                segment=cond.psd_segment, dq_required=context.dq_required,
                                zero_gap=context.zero_gap, excluded=context.excluded)
            except DataError as exc:
                return exc
            return effective_psd(raw, fs, int(round(cond.filter_duration * fs)), cond.f_low, cond.f_high)

        items = [(epoch, ifo) for epoch in epochs for ifo in settings.ifos]
        with ThreadPoolExecutor(max_workers=max(1, min(context.threads, len(items)))) as pool:
            measured = iter(list(pool.map(measure, items)))
        out, failed = [], {}
        for _ in epochs:
            psds = {}
            for ifo in settings.ifos:
                psd = next(measured)
                if isinstance(psd, DataError):
                    failed.setdefault(ifo, psd)
                    psd = None
                psds[ifo] = psd
            out.append(psds)
        for ifo, exc in failed.items():
            if all(p[ifo] is None for p in out):
                raise exc
            log.warning("%s: %d of %d PSD epochs have too little data for a PSD (%s); each takes the bank of its "
                        "nearest epoch", ifo, sum(p[ifo] is None for p in out), len(out), exc)
        return out

    def bank_plan(self, settings: SpiirSettings, context: PrepareContext, cfg, templates: list) -> tuple:
        """``(epochs, psds, sharing)``: the PSD epochs (:func:`gwbatch.spiir.epochs.plan_epochs`), each
        one's PSDs (:meth:`epoch_psds`), and per detector which epoch's PSD each epoch's bank is built
        for (:class:`gwbatch.spiir.epochs.Sharing`), the loss judged from bank ``cfg``'s ``f_low`` over
        the span of its ``templates``."""
        fs = settings.sample_rate
        epochs = self.psd_epochs(settings, context.chunks)
        psds = self.epoch_psds(settings, context, epochs)
        cutoffs = template_cutoffs(np.array([isco_frequency(t.mass1, t.mass2) for t in templates]), fs)

        def loss(built_for, data):
            return mismatch_loss(built_for, data, cfg.f_low, cutoffs)

        return epochs, psds, {ifo: share_banks([p[ifo] for p in psds], loss, settings.psd_tolerance)
                              for ifo in settings.ifos}

    def prepare(self, settings: SpiirSettings, context: PrepareContext) -> dict:
        """The banks each chunk's detectors filter with. The templates are placed once (with the
        placement design curve, so every detector has the same templates); the chunks are grouped
        into PSD epochs (:mod:`gwbatch.spiir.epochs`), and each detector's filters are built for an
        epoch's PSD (:meth:`epoch_psds`) where the banks built so far would lose more than
        ``psd_tolerance`` of its SNR. Banks are built on the context's CPU workers and cached
        (``search.bank_cache``, default the run's ``banks/``), reused while they match."""
        cfg = load_bank_config(settings.bank)
        if abs(cfg.sample_rate - settings.sample_rate) > 1e-9:
            raise ConfigError(f"bank {settings.bank} is for {cfg.sample_rate:g} Hz but store {context.store.path} is "
                              f"at {settings.sample_rate:g} Hz; set sample_rate in the bank file to the data's rate")
        cache = Path(settings.bank_cache) if settings.bank_cache else context.cache
        try:
            cache.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"search.bank_cache {str(cache)!r} cannot hold banks: {exc.strerror or exc}; "
                              "name a directory that exists or can be created") from exc
        fs = settings.sample_rate
        templates = placed_templates(cfg, design(settings.placement_psd, fs), cache)
        epochs, psds, shared = self.bank_plan(settings, context, cfg, templates)
        epoch_banks = [{} for _ in epochs]
        summary = [{"epoch": e.index, "chunks": list(e.chunks), "banks": {}} for e in epochs]
        for ifo, sharing in shared.items():
            built = {}
            for k in sorted(set(sharing.owner)):
                path = cached_bank_path(cfg, psds[k][ifo], templates, cache)
                if not path.exists():
                    build_bank(cfg, psds[k][ifo], parallel=context.parallel, cache=cache, templates=templates)
                bank = load_bank(path)
                log.info("bank %s for %s, PSD epoch %d: %d templates, median overlap %.4f (%s)", cfg.name, ifo, k,
                         bank.size, float(sorted(bank.overlap)[bank.size // 2]), path.name)
                built[k] = (str(path), bank.fingerprint)
            for k, owner in enumerate(sharing.owner):
                epoch_banks[k][ifo] = built[owner]
                lost = sharing.loss[k]
                summary[k]["banks"][ifo] = {"file": built[owner][0], "fingerprint": built[owner][1],
                                            "built_for_epoch": owner, "snr_loss": None if np.isnan(lost) else lost}
            if len(epochs) > 1:
                log.info("%s: %d PSD epochs share %d banks (largest SNR loss from sharing %.4f, tolerance %g)", ifo,
                         len(epochs), len(built), np.nanmax(sharing.loss), settings.psd_tolerance)
        t0, store_stop = GPSTime.parse(context.store.t0), context.store.n_samples
        for row, e in zip(summary, epochs):
            row["gps_start"], row["gps_stop"] = (float(t) for t in sample_times(t0, [e.start, e.stop], fs))
            if settings.psd == "data":
                row["psd_gps_start"] = row["gps_start"]
                row["psd_seconds"] = min(settings.psd_seconds, (store_stop - e.start) / fs)
        return {
            "epoch_banks": tuple(epoch_banks),
            "chunk_epoch": {c: e.index for e in epochs for c in e.chunks},
            "summary": {
                "psd_epochs": summary,
                "psd_tolerance": settings.psd_tolerance,
                "banks": {ifo: sorted({b[ifo][0] for b in epoch_banks}) for ifo in settings.ifos},
            },
        }

    def process(self, task: ChunkTask, resources: dict) -> ChunkResult:
        spec, settings = task.spec, task.settings
        fs = task.sample_rate
        kept, filtered = [], {}  # each detector's series and filter input, for triggers and the coherent stage
        with ChunkRun(task) as run:
            for series in run.series():
                with run.stage("search"):
                    bank = chunk_bank(resources, series.ifo, spec)
                    cond = series.cond
                    filtered[series.ifo] = filter_input(cond)
                    trig = find_triggers(filtered[series.ifo], cond.valid, bank, threshold=settings.threshold,
                                         cluster_window=int(round(settings.cluster_window * bank.sample_rate)),
                                         batch=settings.batch, own=series.own, origin=spec.read_start)
                    run.add(series, pd.DataFrame({
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
                    }))
                kept.append(series)
            triggers = run.triggers(TRIGGER_COLUMNS)
            with run.stage("network"):
                net = ChunkNetwork(
                    ifos=tuple(s.ifo for s in kept), x=[filtered[s.ifo] for s in kept],
                    valid=[s.cond.valid for s in kept], banks=[chunk_bank(resources, s.ifo, spec) for s in kept],
                    read_start=spec.read_start, own=kept[0].own, sample_rate=fs,
                    gps=float(sample_times(GPSTime.parse(task.store.t0), 0.5 * (spec.start + spec.stop), fs)),
                )
                events, skymaps, livetime, cut = coherent_chunk(net, triggers, settings.coherent)
        return run.result(TRIGGER_COLUMNS, {"events": events.assign(chunk=spec.index)},
                          {"skymaps": skymaps, "livetime": livetime, "deep_cut": np.array([cut])})

    def merge_triggers(self, settings: SpiirSettings, triggers: pd.DataFrame, t0, sample_rate: float) -> pd.DataFrame:
        """Cluster each (detector, template)'s triggers over the whole span, as each chunk did (a
        trigger near a chunk edge may be kept by both neighbours); ``gps_time`` is the merger time."""
        window = settings.cluster_window * sample_rate
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

    def significance(self, settings: SpiirSettings, reduction: Reduction) -> Significance:
        """Zero-lag events clustered across chunks (chunks clustered each trial on the first
        detector's read time; events near a chunk edge meet here), with FARs against every chunk's
        trials, in the output contract's tables; the skymaps of the candidates that have one."""
        fs, ifos, t0 = reduction.sample_rate, reduction.ifos, GPSTime.parse(reduction.t0)
        step = settings.coherent.step / fs
        bg, skymaps = chunk_trials_significance(
            reduction.results, t0=t0, sample_rate=fs, ifos=ifos, reference=f"sample_{ifos[0]}",
            cluster_window=settings.network.cluster_window, step=step, window=settings.coherent.cluster,
            tail=settings.network.far_tail, hierarchical=settings.network.hierarchical_removal,
            n_base=settings.coherent.n_trials)
        candidates, named = coherent_candidate_table(bg.foreground, ifos, t0, fs, skymaps)
        return Significance(bg, candidates, coherent_background_table(bg.background, ifos, t0, fs, step), named)

    def statistic_series(self, settings: SpiirSettings, resources: dict, series, row: pd.Series, spec: ChunkSpec,
                         span: tuple[int, int]):
        """The candidate's template filtered in this detector: |z| against merger time, over the
        merger times ``span`` only (:meth:`snr_series`)."""
        samples, z = self.snr_series(settings, resources, series, row, spec, span)
        return samples, np.abs(z)

    def snr_series(self, settings: SpiirSettings, resources: dict, series, row: pd.Series, spec: ChunkSpec,
                   span: tuple[int, int]):
        """The candidate's complex SNR ``z`` in this detector against merger time (store samples), over
        the merger times ``span`` only, NaN where the data are not valid.  The filters start from rest
        the bank's longest template before it, as the chunk's own samples do after the read start
        (the search's halo)."""
        from gwbatch.spiir.filtering import filter_templates

        bank = chunk_bank(resources, series.ifo, spec)
        template = int(row["template"])
        part, delay = bank.subset(np.array([template])), int(bank.merger_delay[template])
        x = filter_input(series.cond)
        hi = int(np.clip(span[1] - spec.read_start + delay, 0, x.size))
        lo = int(np.clip(span[0] - spec.read_start + delay - settings.warm, 0, hi))
        z = np.asarray(filter_templates(x[lo:min(x.size, hi + settings.tail)], part, spec.read_start + lo)[0])[: hi - lo]
        z = np.where(np.asarray(series.cond.valid)[lo:hi], z, np.nan)
        return spec.read_start + lo + np.arange(z.size) - delay, z


    def candidate_pixels(self, settings, series, row: pd.Series, at: float, half_width: float):
        """None: the search has no time-frequency pixels of its own."""
        return None

    def own_figures(self, settings, task: ChunkTask, row: pd.Series) -> None:
        """None: the report draws the strain views."""
        return None


SEARCH = SpiirSearch
