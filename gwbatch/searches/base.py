"""The search interface: what every search implements, and the frozen facts it is handed.

A search is one module, ``gwbatch/searches/<kind>.py`` (``kind`` is the YAML ``search.kind``), with
its campaign section and one class that implements this interface, named by the module's
``SEARCH``; the package's modules are the registry (:mod:`gwbatch.searches`) and the campaign
schema's search union is made of their sections.  The workflow calls these methods and nothing
else: it never asks which search it runs.

Its life in a campaign, on the host unless said otherwise:

1. :meth:`Search.check_rate` then :meth:`Search.settings`: the search's section checked at the
   data's sample rate; the campaign's sections for this search, frozen, built once (no
   pydantic model goes further); :meth:`Search.identity` says which of them decide a chunk's result.
2. :meth:`Search.halo`, :meth:`Search.max_uncertainty`, :meth:`Search.work_bytes`,
   :meth:`Search.task_cost`, :meth:`Search.memory_knobs`: what the plan needs (halos, slide
   checks, the memory plan and its advice, task ordering).
3. :meth:`Search.prepare`: what the chunks need that is built once (SPIIR's banks), with the CPU
   workers of :class:`PrepareContext`; most searches need nothing.
4. :meth:`Search.process` (on a worker): one :class:`~gwbatch.tasks.ChunkTask` to a
   :class:`~gwbatch.tasks.ChunkResult`.
5. :meth:`Search.merge_triggers` and :meth:`Search.significance`: the chunks' results to the
   per-detector trigger tables, the candidates with FARs and the background, through the shared
   background module (:mod:`gwbatch.background`).
6. :meth:`Search.statistic_series` (or :meth:`Search.own_figures`): the search's statistic around a
   candidate, for the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Protocol, runtime_checkable

import numpy as np
import pandas as pd

from gwbatch.config.schema import DEFAULT_SLIDE_STEP
from gwbatch.errors import DataError
from gwbatch.io.store import SampleLayout
from gwbatch.tasks import ChunkResult, ChunkSpec, ChunkTask, Significance


def require_strain(kind: str, layout: SampleLayout) -> None:
    """Refuse radio spectra for a search of strain (or of a dedispersed series)."""
    if layout.spectra:
        raise DataError(f"search kind {kind!r} reads strain or a dedispersed series, and the store holds radio "
                        f"spectra ({layout.n_channels} channels): use search kind 'radio'")


@dataclass(frozen=True)
class NetworkSettings:
    """A campaign's coincidence and background sections, frozen (times in seconds)."""

    min_ifos: int  # detectors a candidate needs
    window: float  # allowed beyond the light travel time
    cluster_window: float  # the loudest candidate within this is kept
    slides: int  # time slides (trials); 0 where there is no background (one detector, min_ifos 1)
    slide_step: float  # detector j moves by k * step * j in slide k
    far_tail: int = 0  # background events of the tail fit (gwbatch.background.significance)
    hierarchical_removal: bool = False  # loud candidates removed from the quieter ones' background
    deep_slides: int = 0  # further slides keeping only loud background events

    @classmethod
    def of(cls, campaign, n_ifos: int) -> "NetworkSettings":
        coinc, bg = campaign.coincidence, campaign.background
        slides = bg.slides if (coinc.min_ifos > 1 and n_ifos > 1) else 0
        deep = bg.deep_slides if slides and bg.deep_slides != "auto" else 0  # auto: sized by the plan
        step = DEFAULT_SLIDE_STEP if bg.slide_step == "auto" else bg.slide_step  # auto: sized by the plan
        return cls(coinc.min_ifos, coinc.window, coinc.cluster_window, slides, step, bg.far_tail,
                   bg.hierarchical_removal, deep)


@dataclass(frozen=True)
class MemoryKnob:
    """A setting that trades a task's memory for speed (:meth:`Search.memory_knobs`): its value and
    the settings with another value.  With ``auto_upto`` the setting is ``auto``: on GPU workers the
    workflow sizes it, once the workers are known, to the largest value up to ``auto_upto`` whose
    task fits the GPU's usable memory (:func:`workflow.memory.fit_memory`); CPU workers keep
    ``value``, or with ``on_cpu`` get the largest whose task fits their memory limit."""

    value: int
    with_value: Callable[[int], Any]
    auto_upto: int | None = None
    on_cpu: bool = False


@dataclass(frozen=True)
class PrepareContext:
    """What :meth:`Search.prepare` may use: the store (a :class:`~gwbatch.io.store.StoreMeta`), the
    span's first sample and the plan's chunks, how samples are masked and conditioned, the run's own cache directory,
    ``parallel(fn, args, items, desc)``, which yields ``fn(*args, item)`` for every item as it
    completes on CPU workers (the workflow starts them on first use), and the ``threads`` this
    process may use for work that releases the interpreter (store reads, FFTs)."""

    store: Any
    ifos: tuple[str, ...]
    span_start: int
    chunks: tuple  # the plan's gwbatch.tasks.ChunkSpec, in order
    dq_required: int
    zero_gap: int | None
    conditioning: Any  # gwbatch.conditioning.ConditioningSettings
    excluded: dict  # per detector: store-sample intervals that are not science (gwbatch.io.segments)
    cache: Path
    parallel: Callable
    progress: bool = True
    threads: int = 1


@dataclass(frozen=True)
class Reduction:
    """What a search's significance is computed from, once every chunk has run: the span (store
    samples), the ring slides move on (s), light travel times between detectors (s), the chunks'
    results in chunk order, each detector's merged triggers (:meth:`Search.merge_triggers`) and
    analysed segments (store samples)."""

    ifos: tuple[str, ...]
    sample_rate: float
    t0: str
    span_start: int
    ring: float
    travel: np.ndarray
    results: list[ChunkResult]
    triggers: list[pd.DataFrame]
    segments: dict[str, np.ndarray]


@runtime_checkable
class Search(Protocol):
    """Every search implements all of this (see the module docstring for when each runs)."""

    #: The name in YAML (``search.kind``), also the module's name (``gwbatch/searches/<kind>.py``).
    kind: ClassVar[str]
    #: The campaign's ``search`` section for this kind (a pydantic model with ``kind: Literal[...]``
    #: and ``needs_whitening``); the schema's search union is made of these.
    section: ClassVar[type]
    #: True when each chunk forms network candidates with its own time-shifted trials (SPIIR's
    #: coherent stage, the burst lags); False when candidates come from coincidence of the merged
    #: triggers with slides over the whole span.
    slides_in_chunks: ClassVar[bool]
    #: True when ``background.deep_slides: auto`` runs deep slides for this search: its deep slides
    #: cost far less than base ones (pulse: loudest trigger first; SPIIR: a network-SNR bound).
    #: False where each costs a base one (the burst lags).
    auto_deep_slides: ClassVar[bool]
    #: What :meth:`statistic_series` draws, for the report.
    statistic_name: ClassVar[str]
    #: The candidates' and background events' column their FARs are of.
    rank_column: ClassVar[str]
    #: True for a template search: its candidates carry a template (masses, spins), per-detector complex
    #: SNRs and ``sigma_<ifo>``, and it implements :meth:`snr_series`; they are exported as
    #: ``sngl_inspiral`` rows and their skymaps get distance layers.  False: unmodelled (``sngl_burst``).
    modelled: ClassVar[bool]
    #: How the search's FARs are formed, for the manifest, where not from time slides (None: the
    #: time-slide convention, ``workflow.manifest.FAR_CONVENTION``).
    far_convention: ClassVar[str | None]

    def check_rate(self, section, sample_rate: float) -> None:
        """Refuse (:class:`~gwbatch.errors.ConfigError`, naming the key, its value and the allowed range)
        what of the search's section the data's sample rate makes meaningless; the rules every
        campaign shares are :func:`gwbatch.config.physical_bounds`."""

    def settings(self, campaign, sample_rate: float, ifos: tuple[str, ...], layout: SampleLayout) -> Any:
        """The search's frozen settings for data of ``ifos`` at ``sample_rate`` (which they keep, as
        ``sample_rate`` and ``ifos``) laid out as ``layout`` (strain, or radio spectra with their
        channel frequencies); a search refuses a layout it cannot read (:func:`require_strain`)."""

    def identity(self, section: dict) -> dict:
        """The campaign's search section (``model_dump(mode="json")``) as it decides a chunk's
        result, for ``--resume``: what only says where things live is left out, files named are
        replaced by their content."""

    def halo(self, settings) -> tuple[int, int]:
        """Samples read before and after each chunk's own samples."""

    def max_uncertainty(self, settings) -> float:
        """The largest timing uncertainty (s) of a trigger or event, for the slide checks."""

    def work_bytes(self, settings, read_samples: int) -> int:
        """An upper bound of one task's kernel memory (bytes), for the memory plan."""

    def task_cost(self, settings, read_samples: int) -> float:
        """A task's relative cost, to submit each search's longest tasks first."""

    def memory_knobs(self, settings) -> dict[str, MemoryKnob]:
        """Settings besides ``plan.chunk`` that cut a task's memory, by key (the memory plan's
        advice, and the sizing of those set to ``auto``)."""

    def prepare(self, settings, context: PrepareContext) -> dict:
        """What every chunk task needs and is built once (``{}`` for most searches); its ``summary``,
        if any, is written to the manifest as ``resources``."""

    def process(self, task: ChunkTask, resources: dict) -> ChunkResult:
        """One chunk (on a worker)."""

    def merge_triggers(self, settings, triggers: pd.DataFrame, t0, sample_rate: float) -> pd.DataFrame:
        """Every chunk's triggers, de-duplicated across chunk edges, with ``gps_time``, ``snr`` and
        ``rank`` (the per-detector ranking SNR)."""

    def significance(self, settings, reduction: Reduction) -> Significance:
        """Candidates with inclusive and exclusive FARs, background events and skymaps."""

    def statistic_series(self, settings, resources: dict, series, row: pd.Series, spec: ChunkSpec,
                         span: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """The statistic in one detector's conditioned chunk around candidate ``row``, as (store
        samples, values), covering at least the store samples ``span``."""

    def candidate_pixels(self, settings, series, row: pd.Series, at: float, half_width: float):
        """For the report: the search's own time-frequency pixels of one detector's conditioned chunk
        within ``half_width`` s of read-span sample ``at`` (candidate ``row``), as ``(times from the
        candidate, frequencies, energy (F, T), (times, waveform))``; None for a search without them."""

    def own_figures(self, settings, task: ChunkTask, row: pd.Series) -> dict | None:
        """For the report: the figures of candidate ``row`` that a search of data other than strain draws
        from its chunk ``task`` in place of the strain views (statistic series, Q transforms, pixels),
        with at least ``series`` as :func:`workflow.figures.candidate_figures` gives it; None for a
        search of strain."""
