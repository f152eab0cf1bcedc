"""The radio transient search as a campaign search: filterbank spectra in, single pulses over DM and
time out (issue 28; Barsdell et al. 2012, Heimdall; Adámek & Armour 2020).

Per beam of a chunk: the spectra are read with the store's data quality
(:func:`gwbatch.io.span.read_spectra_span`), conditioned (per-channel baseline and σ, channel masks,
RFI flags, zero-DM: :mod:`gwbatch.radio.condition`), dedispersed over the DM plan a batch of trials
at a time (:mod:`gwbatch.radio.dedisperse`, delays referred to the highest channel), and every trial
is searched with the boxcars (:mod:`gwbatch.radio.pulses`).  A chunk reads the plan's largest
dispersion delay and the widest boxcar past its end, so a pulse arriving at the top of the band
in its own samples is seen whole; it keeps the boxcars starting in its own samples.  Triggers of
every chunk are clustered friends-of-friends in (time, DM, width) per beam, flagged as RFI when
seen in many beams or at DM 0 (:mod:`gwbatch.radio.candidates`), and written as a Heimdall
``.cand`` file beside the candidate table.

False alarms come from the noise statistics: each boxcar is normalised by its trial's measured σ
(``sigma: measured``, :mod:`gwbatch.radio.pulses`), so the boxcars are unit-variance noise and the
rate of noise events at least as loud as a candidate is the number of effective trials (DM trials
× boxcar widths × samples over width, Cordes & McLaughlin 2003) times the Gaussian tail, over the
beam's analysed time (``far_kind`` "noise model").  ``tests/test_radio_search.py`` checks this
count against noise-only data.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Annotated, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import Field, field_validator

from gwbatch._xp import get_xp
from gwbatch.background import BackgroundResult
from gwbatch.background.slides import coverage_time
from gwbatch.background.significance import ifar_years
from gwbatch.candidates.tables import FAR_COLUMNS
from gwbatch.conditioning import Conditioned
from gwbatch.conditioning.baseline import MIN_BASELINE_SAMPLES
from gwbatch.config.strict import Snr, StrictModel
from gwbatch.errors import ConfigError, DataError
from gwbatch.gpstime import GPSTime
from gwbatch.io.span import read_spectra_span
from gwbatch.io.store import SampleLayout
from gwbatch.pulse.plan import boxcar_plan
from gwbatch.pulse.search import PulseSettings
from gwbatch.radio.candidates import cluster_triggers, effective_trials, flag_rfi, time_inf, time_top, undispersed
from gwbatch.radio.condition import RadioConditioning, condition_spectra
from gwbatch.radio.dedisperse import dedisperse
from gwbatch.radio.dmplan import DMPlan, batch_bytes, dm_batches, dm_plan, subband_sweep_per_dm
from gwbatch.radio.pulses import (
    DEFAULT_BOXCARS, SIGMA_BYTES, SIGMA_GROUP_SAMPLES, TrialBlock, boxcar_excess, measured_over_white, normalise_trials,
    search_trials,
)
from gwbatch.searches.base import MemoryKnob, NetworkSettings, PrepareContext, Reduction
from gwbatch.searches.common import ChunkRun, ChunkSeries
from gwbatch.tasks import ChunkResult, ChunkSpec, ChunkTask, Significance

TRIGGER_COLUMNS = {"ifo": "str", "dm_index": "int64", "dm": "float64", "sample": "int64", "width": "int64",
                   "snr": "float64", "chunk": "int64"}
#: The ``far_kind`` of a FAR from the Gaussian noise model and the trial count.
NOISE_MODEL = "noise model"
#: Bytes per read sample and channel of one beam's spectra in flight (float32 raw, conditioned, masks,
#: and the conditioned spectra decimated by 2, 4, ... that the batches of trials share: 4 more).
SPECTRA_BYTES = 16
#: Bytes per output sample of one dedispersed trial in flight (series, normalised copy, laid out, mask).
TRIAL_BYTES = 16
#: ``search.dm_batch: auto`` on CPU workers (and where the GPU's memory is not known).
CPU_DM_BATCH = 512
MAX_ROUNDS, MAX_WIDTHS_PER_ROUND = 16, 1024
#: The report's waterfall of a candidate: at most this many sub-bands and time bins.
WATERFALL_CHANNELS, WATERFALL_BINS = 64, 256
#: The report's bow-tie of a candidate: DM trials either side of its own.
BOWTIE_TRIALS = 40


class RfiConfig(StrictModel):
    """How the spectra are cleaned before dedispersion (:mod:`gwbatch.radio.condition`)."""

    mask: Path | None = Field(None, description="channel mask file: sigproc/sigpyproc HDF5 or a text list of "
                                                "channel indices and a:b ranges (True/listed = bad)")
    baseline_window: float | None = Field(1.0, ge=1e-3, le=1e4, description="running baseline of each channel (s); null: one level "
                                                           "per channel and chunk")
    sk_sigma: float | None = Field(3.0, ge=2, le=20, description="spectral-kurtosis bounds (σ); null: no SK flags")
    sk_block: int = Field(256, ge=16, le=65536, description="samples per spectral-kurtosis block (M)")
    sk_fraction: float = Field(0.15, ge=0, le=0.99, description="a channel is flagged when this fraction of its blocks fail SK")
    sk_chunk_sigma: float | None = Field(5.0, ge=2, le=50, description="bounds (σ) on a channel's SK over the whole chunk (persistent "
                                                          "RFI); null: off")
    variance_sigma: float | None = Field(5.0, ge=2, le=50, description="robust z-score of channel σ beyond which a channel is "
                                                          "flagged; null: off")
    zero_dm: bool = Field(False, description="subtract the mean over channels at each sample (Eatough et al. 2009)")
    clip_sigma: float | None = Field(None, ge=3, le=100, description="set channel samples beyond this (σ) to 0; null: off")

    def settings(self) -> RadioConditioning:
        return RadioConditioning(**self.model_dump(exclude={"mask"}))

    @field_validator("mask")
    @classmethod
    def _exists(cls, v):
        if v is not None and not Path(v).is_file():
            raise ValueError(f"channel mask file {v} does not exist")
        return v


class RadioSearchConfig(StrictModel):
    """Radio single-pulse search of filterbank spectra over DM and time (issue 28)."""

    kind: Literal["radio"] = "radio"
    needs_whitening: ClassVar[bool] = False
    dm_min: float = Field(0.0, ge=0, le=1e5, description="lowest trial DM (pc/cm³)")
    dm_max: float = Field(1000.0, gt=0, le=1e5, description="highest trial DM (pc/cm³); the plan ends at the first "
                                                            "trial at or above it")
    dm_tolerance: float = Field(1.25, gt=1, le=4, description="DM plan tolerance: the pulse broadening one DM step "
                                                              "or decimation may add (dedisp/Heimdall)")
    pulse_width: float = Field(40e-6, ge=0, le=1, description="intrinsic pulse width the DM plan is made for (s)")
    decimate: bool = Field(True, description="search high-DM trials at a lower time resolution (DM plan)")
    threshold: Snr = Field(6.0, description="boxcar S/N threshold (σ)")
    decimation: list[Annotated[int, Field(ge=1, le=MAX_WIDTHS_PER_ROUND)]] = Field(
        list(DEFAULT_BOXCARS), max_length=MAX_ROUNDS,
        description="boxcar widths per round over each trial: round 0 at the trial's rate, then each round "
                    "decimates by 2",
    )
    baseline: float = Field(2.0, gt=0, le=3600, description="running-median baseline of each dedispersed trial (s)")
    sigma: Literal["measured", "white"] = Field(
        "measured", description="boxcar σ: measured = each trial's own, from its boxcars of 1, 2, 4, ... samples (red "
                                "noise lowers wide boxcars' S/N, never raises it); white = sqrt(width)")
    cluster_time: float = Field(3.0, ge=0, le=1000, description="friends in time within this many widths of the "
                                                                "wider boxcar (Heimdall: 3)")
    cluster_dm: int = Field(200, ge=0, le=100000, description="friends within this many DM trials (Heimdall: 200)")
    cluster_width: float | None = Field(8.0, ge=1, le=1e6, description="friends when widths are within this ratio; null: any")
    rfi_beams: int = Field(3, ge=1, le=10000, description="an event in more than this many beams is RFI")
    rfi_dm: float = Field(1.5, ge=0, le=1e5, description="an event peaking at or below this DM is RFI (pc/cm³; "
                                                      "Heimdall's cand_rfi_dm_cut)")
    dm_batch: Annotated[int, Field(ge=1, le=1 << 20)] | Literal["auto"] = Field(
        "auto", description="DM trials dedispersed and searched at once (memory); auto: as many as a task alone "
                            "can hold on a GPU worker, 512 on CPU workers")
    subbands: Annotated[int, Field(ge=1, le=1 << 20)] | Literal["auto"] | None = Field(
        None, description="two-stage (sub-band) dedispersion with this many sub-bands (a divisor of the channel "
                          "count), or auto (the count with the fewest additions); null: brute force. Costs S/N: at "
                          "most 16% for one-sample pulses, 6% at four samples (docs/decisions.md)")
    rfi: RfiConfig = Field(default_factory=RfiConfig)

    @field_validator("decimation")
    @classmethod
    def _plan(cls, v):
        if not v:
            raise ValueError("needs at least one round, e.g. [32, 16, 16]")
        try:
            boxcar_plan(v)
        except ValueError as exc:
            raise ValueError(str(exc)) from None
        return v


@dataclass(frozen=True)
class RadioSettings:
    """The radio search of a campaign, frozen: the band, the DM plan, cleaning, boxcars and clustering."""

    sample_rate: float
    ifos: tuple[str, ...]  # beams
    frequencies: tuple[float, ...]  # MHz, store channel order
    dm_plan: DMPlan
    conditioning: RadioConditioning
    channel_mask: tuple[bool, ...] | None
    boxcars: PulseSettings
    baseline: float
    cluster: tuple[float, int, float | None]  # time (widths), DM trials, width ratio
    rfi_beams: int
    rfi_dm: float
    dm_batch: int
    subbands: int | str | None
    network: NetworkSettings
    dm_batch_auto: bool = False  # sized to the workers' memory (memory_knobs), else fixed

    @cached_property
    def batches(self) -> tuple[tuple[int, DMPlan, object], ...]:
        """The DM plan in batches of at most ``dm_batch`` trials of one decimation level, with their
        sub-band schemes (:func:`gwbatch.radio.dmplan.dm_batches`), made once per settings object."""
        return dm_batches(self.dm_plan, self.dm_batch, self.subbands)

    @property
    def tsamp(self) -> float:
        return 1.0 / self.sample_rate

    @property
    def widest(self) -> int:
        """The widest boxcar of any trial, full-rate samples."""
        return boxcar_plan(self.boxcars.decimation).max_width * int(self.dm_plan.decimation.max())


class RadioSearch:
    """Dedispersion over a DM plan and boxcars over every trial, per beam; candidates by clustering."""

    kind = "radio"
    section = RadioSearchConfig
    slides_in_chunks = False
    auto_deep_slides = False  # no slides (one beam's series)
    statistic_name = "dedispersed S/N"
    rank_column = "snr"
    modelled = False
    far_convention = ("far = effective trials (DM trials x boxcar widths x samples / width, per beam) x the "
                      "Gaussian tail of the candidate's S/N / the beam's livetime (far_kind 'noise model'; no time "
                      "slides, nothing counted; RFI-flagged candidates keep their FARs and are ranked last)")

    def check_rate(self, section: RadioSearchConfig, sample_rate: float) -> None:
        """The DM plan is checked with the band (:meth:`settings`)."""

    def settings(self, campaign, sample_rate: float, ifos: tuple[str, ...], layout: SampleLayout) -> RadioSettings:
        if not layout.spectra:
            raise DataError("search kind 'radio' reads filterbank spectra; the store holds strain or a dedispersed "
                            "series (make a filterbank store with 'gwbatch ingest filterbank', or use kind 'pulse')")
        s = campaign.search
        if s.dm_max <= s.dm_min:
            raise ConfigError(f"search.dm_max ({s.dm_max}) must exceed search.dm_min ({s.dm_min})")
        shortest = min_chunk_seconds(s, sample_rate)
        if campaign.plan.chunk != "auto" and campaign.plan.chunk < shortest:
            raise ConfigError(f"plan.chunk ({campaign.plan.chunk:g} s) is too short for the radio search's per-chunk "
                              f"statistics: at least {shortest:.3g} s ({MIN_SK_BLOCKS} blocks of search.rfi.sk_block samples)")
        freqs = np.asarray(layout.frequencies, dtype=np.float64)
        plan = dm_plan(freqs, 1.0 / sample_rate, s.dm_min, s.dm_max, s.pulse_width, s.dm_tolerance, s.decimate)
        coarsest = int(plan.decimation.max())
        if s.baseline * sample_rate / coarsest < MIN_BASELINE_SAMPLES:
            least = MIN_BASELINE_SAMPLES * coarsest / sample_rate
            raise ConfigError(f"search.baseline ({s.baseline:g} s) is {s.baseline * sample_rate / coarsest:.3g} samples of "
                              f"the DM plan's coarsest trials (decimated {coarsest}x); each trial's running baseline "
                              f"needs at least {MIN_BASELINE_SAMPLES} samples: at least {least:.3g} s")
        mask = None
        if s.rfi.mask is not None:
            from gwbatch.io.channel_mask import read_channel_mask

            mask = tuple(bool(v) for v in read_channel_mask(s.rfi.mask, freqs.size))
        boxcars = PulseSettings(series="amplitude", threshold=s.threshold, decimation=tuple(s.decimation),
                                sigma=s.sigma, clip=None, clip_iterations=1, merge_gap=0)
        return RadioSettings(sample_rate, tuple(ifos), tuple(float(f) for f in freqs), plan, s.rfi.settings(), mask,
                             boxcars, s.baseline, (s.cluster_time, s.cluster_dm, s.cluster_width), s.rfi_beams,
                             s.rfi_dm, CPU_DM_BATCH if s.dm_batch == "auto" else s.dm_batch, s.subbands,
                             NetworkSettings.of(campaign, len(ifos)), s.dm_batch == "auto")

    def identity(self, section: dict) -> dict:
        """The section, with the mask file's content in place of its path."""
        section = dict(section)
        rfi = dict(section.get("rfi") or {})
        if rfi.get("mask"):
            from gwbatch.io.store import file_sha256

            rfi["mask"] = file_sha256(rfi["mask"])
        section["rfi"] = rfi
        return section

    def halo(self, settings: RadioSettings) -> tuple[int, int]:
        """Nothing before; after: the plan's largest dispersion delay and the widest boxcar."""
        return 0, settings.dm_plan.overlap + settings.widest

    def max_uncertainty(self, settings: RadioSettings) -> float:
        return settings.widest / settings.sample_rate / 4.0

    def work_bytes(self, settings: RadioSettings, read_samples: int) -> int:
        """One beam at a time: its spectra over the read span, and the largest batch's trials and
        sub-band stage-1 buffer over the samples the chunk searches (the read span less the plan's
        overlap; :func:`gwbatch.radio.dmplan.batch_bytes`), and with ``sigma: measured`` the
        temporaries of one group of measured trials (:data:`gwbatch.radio.pulses.SIGMA_BYTES`)."""
        needed = max(1, read_samples - settings.dm_plan.overlap)
        measuring = SIGMA_BYTES * SIGMA_GROUP_SAMPLES if settings.boxcars.sigma == "measured" else 0
        return int(SPECTRA_BYTES * len(settings.frequencies) * read_samples
                   + batch_bytes(settings.batches, needed, TRIAL_BYTES) + measuring)

    def task_cost(self, settings: RadioSettings, read_samples: int) -> float:
        return float(len(settings.ifos) * read_samples * len(settings.frequencies)
                     * sum((t.stop - t.start) / d for d, t in settings.dm_plan.levels))

    def memory_knobs(self, settings: RadioSettings) -> dict:
        """``search.dm_batch``; ``auto`` fills the GPU (batches of 2048 trials and more run the
        SKA-MID plan 15% faster than 512: benchmarks/RESULTS.md) and is :data:`CPU_DM_BATCH` on CPU."""
        from dataclasses import replace

        auto = settings.dm_plan.ndm if settings.dm_batch_auto else None
        return {"search.dm_batch": MemoryKnob(settings.dm_batch, lambda v: replace(settings, dm_batch=int(v)), auto)}

    def prepare(self, settings: RadioSettings, context: PrepareContext) -> dict:
        return {}

    def process(self, task: ChunkTask, resources: dict) -> ChunkResult:
        spec, settings = task.spec, task.settings
        run = ChunkRun(task)
        with run:
            xp = get_xp(run.backend)
            for beam in task.ifos:
                with run.stage("read"):
                    span = read_spectra_span(task.store, beam, spec.read_start, spec.read_stop,
                                             dq_required=task.dq_required,
                                             excluded=task.segments.excluded if task.segments else None)
                valid, note, stats = span.valid, "no valid sample of this beam in the chunk", {}
                with run.stage("condition"):
                    if valid.any():  # a beam without data here (a gap, a shorter file) is masked, not an error
                        cond, spectra = _condition(span.spectra, valid, settings, xp)
                        note, stats = cond.note, {"good_channels": cond.n_good, "flagged_channels": int(cond.mask.sum())}
                        if cond.n_good == 0:  # every channel flagged: nothing of the beam is searched or counted
                            valid = np.zeros_like(valid)
                with run.stage("search"):
                    frame = self._search_beam(settings, spectra, valid, spec, xp) if valid.any() else _no_triggers()
                    frame.insert(0, "ifo", beam)
                run.add(_beam_series(beam, valid, span, spec, note), frame, stats)
        return run.result(TRIGGER_COLUMNS)

    def _search_beam(self, settings: RadioSettings, spectra, valid: np.ndarray, spec: ChunkSpec, xp) -> pd.DataFrame:
        """Triggers of one beam's conditioned spectra: every batch of trials dedispersed and searched;
        those whose boxcar starts in the chunk's own samples, in store samples."""
        own_lo, own_hi = spec.start - spec.read_start, spec.stop - spec.read_start
        freqs = np.asarray(settings.frequencies)
        frames, ladder = [], {}  # the decimated spectra, made once for all batches
        needed = own_hi + settings.widest  # boxcars starting in the chunk, at their widest
        for first, plan, subbands in settings.batches:
            for block in dedisperse(spectra, freqs, settings.tsamp, plan, subbands, ladder, needed):
                d, n = block.decimation, block.series.shape[1]
                index = first + np.arange(block.trials.start, block.trials.stop)
                ok = _trial_valid(_decimated_valid(valid, d), plan, block.dms, d, n, xp)
                trials = TrialBlock(index, d, block.series, ok)
                found = search_trials(trials, settings.boxcars, max(1, int(round(settings.baseline / block.tsamp))))
                frames.append(found[(found["sample"] >= own_lo) & (found["sample"] < own_hi)])
        out = pd.concat(frames, ignore_index=True)
        out["sample"] += spec.read_start
        out.insert(1, "dm", settings.dm_plan.dms[out["dm_index"].to_numpy()])
        return out

    def merge_triggers(self, settings: RadioSettings, triggers: pd.DataFrame, t0, sample_rate: float) -> pd.DataFrame:
        """Friends-of-friends over (time, DM, width) per beam, across chunk edges; RFI flags; times at
        the top of the band and at infinite frequency (of the boxcar centre)."""
        trig = triggers.rename(columns={"ifo": "beam"})
        time_tol, dm_tol, width_tol = settings.cluster
        cands = cluster_triggers(trig, time_tol, dm_tol, width_tol)
        cands = flag_rfi(cands, len(settings.ifos), settings.rfi_beams, settings.rfi_dm)
        flat = undispersed(cands, subband_sweep_per_dm(np.asarray(settings.frequencies), 1), 1.0 / sample_rate)
        if settings.dm_plan.dms[0] == 0 and flat.any():  # the first trial is DM 0: the test applies
            reason = cands["rfi_reason"].where(~flat, (cands["rfi_reason"] + ",undispersed").str.lstrip(","))
            cands = cands.assign(rfi=cands["rfi"].to_numpy() | flat, rfi_reason=reason)
        start = float(GPSTime.parse(str(t0)))
        tsamp = 1.0 / sample_rate
        top = time_top(cands["sample"].to_numpy(), cands["width"].to_numpy(), tsamp, start)
        inf = time_inf(cands["sample"].to_numpy(), cands["width"].to_numpy(), cands["dm"].to_numpy(), tsamp,
                       max(settings.frequencies), start)
        return cands.rename(columns={"beam": "ifo"}).assign(gps_time=top, gps_time_inf=inf, rank=cands["snr"],
                                                            centre=cands["sample"] + (cands["width"] - 1) / 2.0)

    def significance(self, settings: RadioSettings, reduction: Reduction) -> Significance:
        """Candidates per beam with FARs from the Gaussian noise model over the effective trials
        (module docstring); RFI-flagged candidates are kept, flagged, and ranked last."""
        fs, plan = reduction.sample_rate, settings.dm_plan
        widths = np.concatenate([np.arange(r.first_width, r.last_width + 1) * r.decimation
                                 for r in boxcar_plan(settings.boxcars.decimation).rounds])
        rows = []
        for ifo, cands in zip(reduction.ifos, reduction.triggers):
            livetime = coverage_time([(reduction.segments[ifo] - reduction.span_start) / fs], 1)
            trials = sum(effective_trials(livetime * fs / d, t.stop - t.start, widths)
                         for d, t in plan.levels) if livetime > 0 else 0.0  # a beam never searched
            far = trials * _gaussian_tail(cands["snr"].to_numpy()) / livetime if livetime > 0 else \
                np.full(len(cands), np.inf)
            rows.append(cands.assign(search=self.kind, beam=ifo, ifos=ifo, n_ifos=1, far=far, effective_trials=trials,
                                     livetime=livetime))
        table = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
        table = _far_columns(table)
        table = table.sort_values(["rfi", "far", "snr"], ascending=[True, True, False], kind="stable")
        fg = table.reset_index(drop=True)
        total = np.array([sum(coverage_time([(reduction.segments[i] - reduction.span_start) / fs], 1)
                              for i in reduction.ifos)])
        sigma = ("each trial's measured boxcar σ" if settings.boxcars.sigma == "measured"
                 else "the white boxcar σ sqrt(width)")
        method = (f"noise model: effective trials (DM x width x samples / width) x Gaussian tail, per beam; "
                  f"S/N over {sigma}")
        bg = BackgroundResult(fg, fg.iloc[:0].copy(), np.zeros((1, len(reduction.ifos))), total, method)
        return Significance(bg, fg, fg.iloc[:0].copy())

    def statistic_series(self, settings: RadioSettings, resources: dict, series, row: pd.Series, spec: ChunkSpec,
                         span: tuple[int, int]):
        """Not used: the radio search's views of a candidate are :meth:`own_figures`."""
        raise TypeError("the radio search's candidate views come from own_figures")

    def own_figures(self, settings: RadioSettings, task: ChunkTask, row: pd.Series) -> dict:
        """The candidate's beam around it, cleaned as the search did (NumPy): ``series`` (its boxcar S/N
        at its DM, the dedispersed profile), ``waterfall`` (the spectra shifted by its DM's delays,
        in at most :data:`WATERFALL_CHANNELS` sub-bands and :data:`WATERFALL_BINS` time bins) and
        ``bowtie`` (the boxcar S/N over DM trials around its DM and time)."""
        beam, spec = str(row["ifo"]), task.spec
        fs, tsamp = settings.sample_rate, settings.tsamp
        width = int(row["width"])
        at = int(row["sample"]) - spec.read_start  # boxcar start at the top of the band, in the read span
        half = max(int(0.1 * fs), 20 * width)
        span = read_spectra_span(task.store, beam, spec.read_start, spec.read_stop, dq_required=task.dq_required,
                                 excluded=task.segments.excluded if task.segments else None)
        cond, spectra = _condition(span.spectra, span.valid, settings, np)
        freqs = np.asarray(settings.frequencies)
        plan = settings.dm_plan
        lo, hi = max(0, at - half), min(spectra.shape[1], at + width + half)
        delays = plan.delays(float(row["dm"]))
        shifted = np.stack([_window_of(spectra[c], lo + delays[c], hi - lo) for c in range(freqs.size)])
        times = (np.arange(lo, hi) - at - 0.5 * (width - 1)) * tsamp
        profile = shifted.sum(axis=0) / np.sqrt(max(cond.n_good, 1))
        box = np.convolve(profile, np.ones(width), mode="full")[width - 1 : width - 1 + profile.size] / np.sqrt(width)
        nearby = np.arange(max(0, int(row["dm_index"]) - BOWTIE_TRIALS), min(plan.ndm, int(row["dm_index"]) + BOWTIE_TRIALS + 1))
        bowtie = _bowtie(spectra, freqs, settings, plan.dms[nearby], width, lo, hi)
        fbin = max(1, freqs.size // WATERFALL_CHANNELS)
        tbin = max(1, (hi - lo) // WATERFALL_BINS)
        nf, nt = freqs.size // fbin, (hi - lo) // tbin
        image = shifted[: nf * fbin, : nt * tbin].reshape(nf, fbin, nt, tbin).sum(axis=(1, 3))
        return {
            "series": {"label": str(row["search"]), "gps_time": float(row["gps_time"]), "statistic": self.statistic_name,
                       "curves": {beam: (times, box)}, "stage_seconds": {}},
            "waterfall": {"label": str(row["search"]), "gps_time": float(row["gps_time"]), "beam": beam,
                          "dm": float(row["dm"]), "times": times[: nt * tbin].reshape(nt, tbin).mean(axis=1),
                          "frequencies": freqs[: nf * fbin].reshape(nf, fbin).mean(axis=1), "power": image,
                          "profile": (times, profile)},
            "bowtie": {"label": str(row["search"]), "gps_time": float(row["gps_time"]), "beam": beam,
                       "times": times[: bowtie.shape[1]], "dms": plan.dms[nearby], "snr": bowtie},
        }

    def candidate_pixels(self, settings, series, row: pd.Series, at: float, half_width: float):
        return None


def _bowtie(spectra: np.ndarray, freqs: np.ndarray, settings: RadioSettings, dms: np.ndarray, width: int, lo: int,
            hi: int) -> np.ndarray:
    """Boxcar S/N of ``width`` samples starting at samples ``lo:hi`` of the read span, over the trials
    ``dms`` at the full rate, normalised as the search normalises its trials (running baseline, σ,
    and with ``sigma: measured`` each trial's measured boxcar σ; :mod:`gwbatch.radio.pulses`)."""
    tsamp = settings.tsamp
    trials = dedisperse(spectra, freqs, tsamp, DMPlan.fixed(freqs, tsamp, dms))[0].series
    valid = np.ones(trials.shape, dtype=bool)
    z, _ = normalise_trials(trials, valid, max(1, int(round(settings.baseline / tsamp))))
    scale = np.full(z.shape[0], np.sqrt(width))
    if settings.boxcars.sigma == "measured":
        excess = boxcar_excess(z, valid.view(np.uint8), np.arange(z.shape[0]), width)
        scale *= measured_over_white(excess, np.full(z.shape[0], float(width)))
    z = z[:, lo:hi]
    csum = np.concatenate([np.zeros((z.shape[0], 1)), np.cumsum(z, axis=1, dtype=np.float64)], axis=1)
    return (csum[:, width:] - csum[:, :-width]) / scale[:, None]


def _window_of(x: np.ndarray, start: int, n: int) -> np.ndarray:
    """``x[start : start + n]``, zero beyond ``x``'s end."""
    out = np.zeros(n, dtype=np.float32)
    part = x[start : start + n]
    out[: part.size] = part
    return out


def _gaussian_tail(snr: np.ndarray) -> np.ndarray:
    from scipy.special import ndtr

    return ndtr(-np.asarray(snr, dtype=np.float64))


def _far_columns(table: pd.DataFrame) -> pd.DataFrame:
    """The shared FAR columns of a noise-model FAR: the same inclusive and exclusive, nothing counted."""
    far = table["far"].to_numpy(np.float64) if len(table) else np.zeros(0)
    kind = np.full(far.size, NOISE_MODEL, dtype=object)
    values = {"far": far, "ifar_years": ifar_years(far), "far_kind": kind, "far_upper": far, "far_exclusive": far,
              "ifar_exclusive_years": ifar_years(far), "far_exclusive_kind": kind,
              "n_louder": np.full(far.size, np.nan), "n_louder_exclusive": np.full(far.size, np.nan),
              "far_no_removal": far, "removal_round": np.zeros(far.size, np.int64)}
    return table.assign(**{c: values[c] for c in FAR_COLUMNS})


def _condition(spectra: np.ndarray, valid: np.ndarray, settings: RadioSettings, xp):
    """The valid samples of host ``spectra`` conditioned together (a gap is left out, so the baselines,
    moments and RFI statistics see data only), put back in place on ``xp`` with 0 in the gaps."""
    mask = None if settings.channel_mask is None else np.asarray(settings.channel_mask)
    if valid.all():
        cond = condition_spectra(xp.asarray(spectra), settings.conditioning, settings.tsamp, mask)
        return cond, cond.spectra
    if not valid.any():
        raise DataError("no valid sample in the chunk's read span")  # the task masks such a beam first
    cond = condition_spectra(xp.asarray(np.ascontiguousarray(spectra[:, valid])), settings.conditioning,
                             settings.tsamp, mask)
    out = xp.zeros(spectra.shape, dtype=xp.float32)
    out[:, xp.asarray(valid)] = cond.spectra
    return cond, out


#: Spectral-kurtosis blocks a chunk must hold (:func:`min_chunk_seconds`).
MIN_SK_BLOCKS = 4


def min_chunk_seconds(section: RadioSearchConfig, sample_rate: float) -> float:
    """The shortest ``plan.chunk`` (s) the radio search takes: channel levels, spectral kurtosis and
    trial normalisation are measured per chunk (as Heimdall measures them per gulp), and a channel's
    spectral kurtosis needs :data:`MIN_SK_BLOCKS` blocks of ``search.rfi.sk_block`` samples."""
    return MIN_SK_BLOCKS * section.rfi.sk_block / sample_rate


def _no_triggers() -> pd.DataFrame:
    """A beam's triggers when none of its chunk can be searched."""
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in TRIGGER_COLUMNS.items() if c not in ("ifo", "chunk")})


def _decimated_valid(valid: np.ndarray, d: int) -> np.ndarray:
    """Samples at decimation ``d`` whose ``d`` full-rate samples are all valid (host)."""
    n = valid.size // d
    return valid[: n * d].reshape(n, d).all(axis=1)


def _trial_valid(ok: np.ndarray, plan: DMPlan, dms: np.ndarray, d: int, n: int, xp):
    """Per trial at ``dms`` and output sample: every input sample its channels read is valid."""
    if ok.all():
        return xp.ones((dms.size, n), dtype=bool)
    bad = np.concatenate([[0], np.cumsum(~ok)])
    out = np.empty((dms.size, n), dtype=bool)
    t = np.arange(n)
    for k, dm in enumerate(dms):
        reach = int(plan.delays(dm, d).max())
        hi = np.minimum(t + reach + 1, ok.size)
        out[k] = (bad[hi] - bad[np.minimum(t, ok.size)]) == 0
    return xp.asarray(out)


def _beam_series(beam: str, valid: np.ndarray, span, spec: ChunkSpec, note: str) -> ChunkSeries:
    """A beam's chunk as the shared bookkeeping records it (analysed segments, statistics)."""
    empty_i, empty_f = np.zeros(0, np.int64), np.zeros(0)
    cond = Conditioned(data=None, valid=valid, gate_peaks=empty_i, gate_values=empty_f, psd_segments=0,
                       snr2_per_energy=None, note=note)
    none = np.zeros(valid.size, dtype=bool)
    return ChunkSeries(beam, cond, span.finite, span.science, none, none, [],
                       (spec.start - spec.read_start, spec.stop - spec.read_start))


SEARCH = RadioSearch
