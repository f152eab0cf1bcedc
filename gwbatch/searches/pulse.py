"""The single-pulse search as a campaign search: one chunk of strain in, per-detector triggers out.

Per detector: the shared front end (:mod:`gwbatch.searches.common`: read, mask, condition), the
boxcar search (:mod:`gwbatch.pulse.search`), and the merged triggers whose peak boxcar starts in
the chunk's own samples.  Candidates are coincidences of the merged triggers, with circular time
slides over the whole span for background (:func:`gwbatch.background.estimate_background`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import Field, field_validator

from gwbatch.background import estimate_background
from gwbatch.candidates.coincidence import IfoTriggers
from gwbatch.candidates.tables import background_table, candidate_table
from gwbatch.candidates.triggers import add_trigger_times, merge_chunk_triggers
from gwbatch.conditioning import ConditioningSettings, filter_half_length
from gwbatch.config.strict import Snr, StrictModel
from gwbatch.pulse.plan import boxcar_plan
from gwbatch.pulse.search import PulseSettings, search_series
from gwbatch.io.store import SampleLayout
from gwbatch.searches.base import NetworkSettings, PrepareContext, Reduction, require_strain
from gwbatch.searches.common import ChunkRun
from gwbatch.tasks import ChunkResult, ChunkSpec, ChunkTask, Significance

TRIGGER_COLUMNS = {
    "ifo": "str",
    "sample": "int64",
    "width": "int64",
    "centre": "float64",
    "snr": "float64",
    "rho": "float64",
    "group_start": "int64",
    "group_stop": "int64",
    "members": "int64",
    "chunk": "int64",
}
#: Per-detector columns of the candidate table: its name there (``<name>_<ifo>``) and the trigger's column.
CANDIDATE_FIELDS = {"rho": "rho", "duration": "duration"}
#: Bytes per read sample of the boxcar search's arrays (see ``work_bytes``).
WORK_PER_SAMPLE = 320


#: Most boxcar rounds and widths per round of the pulse search.
MAX_ROUNDS, MAX_WIDTHS_PER_ROUND = 16, 1024


class PulseSearchConfig(StrictModel):
    """Single-pulse boxcar search (Adámek & Armour; ALGORITHMS.md §5)."""

    kind: Literal["pulse"] = "pulse"
    #: Whether the search needs whitened strain (radio and SNR series are searched as they are).
    needs_whitening: ClassVar[bool] = False
    series: Literal["energy", "amplitude"] = Field(
        "energy",
        description="energy: boxcars over whitened power (any transient shape); amplitude: over the series itself",
    )
    threshold: Snr = Field(6.0, description="per-series SNR threshold (σ)")
    decimation: list[Annotated[int, Field(ge=1, le=MAX_WIDTHS_PER_ROUND)]] = Field(
        [32, 16, 16, 16], max_length=MAX_ROUNDS,
        description="boxcar widths per round: round 0 at full rate, then each round decimates by 2 "
                    f"(at most {MAX_ROUNDS} rounds of at most {MAX_WIDTHS_PER_ROUND} widths)",
    )
    sigma: Literal["white", "linear"] = Field(
        "white", description="σ_N model: white = sqrt(N)·σ (eq. 4); linear = eq. 5 blend with a measured σ_Nmax"
    )
    clip: Snr | None = Field(
        5.0, description="reject samples beyond this many σ when estimating μ, σ (loud pulses must not raise σ); null: off"
    )
    clip_iterations: int = Field(3, ge=1, le=100, description="outlier-rejection iterations when clip is set")
    merge_gap: int = Field(0, ge=0, le=2**20, description="samples allowed between boxcars merged friends-of-friends")

    @field_validator("decimation")
    @classmethod
    def _plan(cls, v):
        if not v:
            raise ValueError("needs at least one round, e.g. [32, 16, 16]")
        try:  # the plan's own checks, one place
            boxcar_plan(v)
        except ValueError as exc:
            raise ValueError(str(exc)) from None
        return v

    def settings(self) -> PulseSettings:
        """The section as the frozen settings the boxcar search takes."""
        return PulseSettings(series=self.series, threshold=self.threshold, decimation=tuple(self.decimation),
                             sigma=self.sigma, clip=self.clip, clip_iterations=self.clip_iterations,
                             merge_gap=self.merge_gap)


@dataclass(frozen=True)
class PulseSearchSettings:
    """The pulse search of a campaign: its boxcars, conditioning and network settings."""

    sample_rate: float
    ifos: tuple[str, ...]
    boxcars: PulseSettings
    conditioning: ConditioningSettings
    network: NetworkSettings


def uncertainty(triggers: pd.DataFrame, sample_rate: float) -> np.ndarray:
    """Timing uncertainty of each trigger: a quarter of its boxcar duration (s)."""
    return triggers["width"].to_numpy(dtype=np.float64) / sample_rate / 4.0


def coincidence_triggers(df: pd.DataFrame, span_start: int, sample_rate: float) -> IfoTriggers:
    """One detector's merged triggers as coincidence sees them: times (s from the span start),
    uncertainties and ranks."""
    return IfoTriggers(
        time=(df["centre"].to_numpy(np.float64) - span_start) / sample_rate,
        uncertainty=uncertainty(df, sample_rate),
        snr=df["rank"].to_numpy(np.float64),
    )


class PulseSearch:
    """Single-pulse boxcars per detector; candidates by coincidence, background by slides over the span."""

    kind = "pulse"
    section = PulseSearchConfig
    slides_in_chunks = False
    auto_deep_slides = True  # loudest trigger first: deep slides cost little
    statistic_name = "excess-energy SNR"
    rank_column = "snr"
    modelled = False
    far_convention = None  # time slides (workflow.manifest.FAR_CONVENTION)

    def settings(self, campaign, sample_rate: float, ifos: tuple[str, ...], layout: SampleLayout) -> PulseSearchSettings:
        require_strain(self.kind, layout)
        return PulseSearchSettings(sample_rate, tuple(ifos), campaign.search.settings(), campaign.conditioning.settings(),
                                   NetworkSettings.of(campaign, len(ifos)))

    def check_rate(self, section: PulseSearchConfig, sample_rate: float) -> None:
        """No key of the pulse section depends on the sample rate."""

    def identity(self, section: dict) -> dict:
        return section

    def halo(self, settings: PulseSearchSettings) -> tuple[int, int]:
        """Samples read before and after a chunk: whitening corruption, plus the widest boxcar after."""
        pad = filter_half_length(settings.conditioning, settings.sample_rate)
        return pad, pad + boxcar_plan(settings.boxcars.decimation).max_width

    def max_uncertainty(self, settings: PulseSearchSettings) -> float:
        """Largest trigger timing uncertainty (s) used in coincidence."""
        return boxcar_plan(settings.boxcars.decimation).max_width / settings.sample_rate / 4.0

    def work_bytes(self, settings: PulseSearchSettings, read_samples: int) -> int:
        """Kernel working memory of one task (upper bound): one detector at a time, its float64
        series and the float32 boxcar outputs of a decimation level with their statistics."""
        return WORK_PER_SAMPLE * read_samples

    def task_cost(self, settings: PulseSearchSettings, read_samples: int) -> float:
        return float(read_samples * len(settings.ifos))

    def memory_knobs(self, settings: PulseSearchSettings) -> dict:
        return {}

    def prepare(self, settings: PulseSearchSettings, context: PrepareContext) -> dict:
        return {}

    def process(self, task: ChunkTask, resources: dict) -> ChunkResult:
        spec, settings = task.spec, task.settings
        with ChunkRun(task) as run:
            for series in run.series():
                with run.stage("search"):
                    cond = series.cond
                    lo, hi = series.own
                    trig = search_series(cond.data, cond.valid, settings.boxcars, cond.snr2_per_energy)
                    trig = trig.select((trig.start >= lo) & (trig.start < hi))
                    frame = pd.DataFrame({
                        "ifo": series.ifo,
                        "sample": trig.start + spec.read_start,
                        "width": trig.width,
                        "centre": trig.centre + spec.read_start,
                        "snr": trig.snr,
                        "rho": trig.rho,
                        "group_start": trig.group_start + spec.read_start,
                        "group_stop": trig.group_stop + spec.read_start,
                        "members": trig.members,
                    })
                    run.add(series, frame, {"series_mean": trig.mean, "series_std": trig.std})
        return run.result(TRIGGER_COLUMNS)

    def merge_triggers(self, settings: PulseSearchSettings, triggers: pd.DataFrame, t0,
                       sample_rate: float) -> pd.DataFrame:
        """Friends-of-friends across chunk edges; times of the excess centroids; rank = snr."""
        merged = add_trigger_times(merge_chunk_triggers(triggers), t0, sample_rate)
        return merged.assign(rank=merged["snr"])

    def significance(self, settings: PulseSearchSettings, reduction: Reduction) -> Significance:
        """Coincidences of the merged triggers, zero lag and every slide through the same clustering
        (:func:`gwbatch.background.estimate_background`)."""
        fs, net, ifos = reduction.sample_rate, settings.network, reduction.ifos
        segments = [(reduction.segments[ifo] - reduction.span_start) / fs for ifo in ifos]
        triggers = [coincidence_triggers(df, reduction.span_start, fs) for df in reduction.triggers]
        bg = estimate_background(
            triggers, segments, ring=reduction.ring, travel=np.asarray(reduction.travel), window=net.window,
            min_ifos=net.min_ifos, cluster_window=net.cluster_window, n_slides=net.slides, slide_step=net.slide_step,
            tail=net.far_tail, hierarchical=net.hierarchical_removal, deep_slides=net.deep_slides,
        )
        candidates = candidate_table(self.kind, bg.foreground, reduction.triggers, ifos, CANDIDATE_FIELDS)
        return Significance(bg, candidates, background_table(bg.background, reduction.triggers, ifos, bg.shifts))

    def statistic_series(self, settings: PulseSearchSettings, resources: dict, series, row: pd.Series,
                         spec: ChunkSpec, span: tuple[int, int]):
        """The boxcar of the candidate's duration in this detector over whitened energy, as a
        Gaussian-equivalent SNR ``(S_w - w) / sqrt(2 w)`` (unit-variance samples), at its centre."""
        fs = settings.sample_rate
        width = row.get(f"duration_{series.ifo}", np.nan)
        w = max(1, int(round((width if np.isfinite(width) else 1.0 / fs) * fs)))
        x = np.asarray(series.cond.data, dtype=np.float64) * np.sqrt(series.cond.snr2_per_energy or 1.0)
        energy = np.where(np.asarray(series.cond.valid), x * x, 1.0)
        total = np.concatenate([[0.0], np.cumsum(energy)])
        snr = (total[w:] - total[:-w] - w) / np.sqrt(2.0 * w)
        return spec.read_start + np.arange(snr.size) + 0.5 * (w - 1), snr


    def candidate_pixels(self, settings, series, row: pd.Series, at: float, half_width: float):
        """None: the search has no time-frequency pixels of its own."""
        return None

    def own_figures(self, settings, task: ChunkTask, row: pd.Series) -> None:
        """None: the report draws the strain views."""
        return None


SEARCH = PulseSearch
