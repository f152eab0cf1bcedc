"""The campaign plan: a pure function from the campaign and the store's description to the work.

The analysed span ``[span_start, span_stop)`` (store samples) is cut into chunks of nearly equal
length, each between half and one and a half times ``plan.chunk``.  The chunks' own parts tile
the span exactly, so every sample is searched exactly once; each task also reads a halo before
and after (whitening corruption; plus the widest boxcar after), and keeps only triggers whose
boxcar starts in its own part.  Slides shift triggers, not data (circularly on the span), so they
need no data halo.  Nothing here touches the strain or imports Dask: the plan is data, printed by
``gwbatch run --dry-run`` and checked by property tests.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from gwbatch.background import AUTO_SLIDES, REACH_SLIDES, check_slides, most_slides, ring_holding
from gwbatch.background.far import SECONDS_PER_YEAR
from gwbatch.conditioning import ConditioningSettings
from gwbatch.conditioning.psd import MIN_SEGMENTS
from gwbatch.config import Campaign, physical_bounds
from gwbatch.config.schema import DEFAULT_CHUNK, DEFAULT_SLIDE_STEP
from gwbatch.detectors import get_detector, known_detectors, light_travel_time
from gwbatch.errors import ConfigError, DataError
from gwbatch.gpstime import GPSTime, time_to_index
from gwbatch.io.segments import DataSegments, resolve_segments
from gwbatch.io.span import zero_gap_samples
from gwbatch.io.store import StoreMeta, read_dq
from gwbatch.searches import get_search
from gwbatch.searches.base import NetworkSettings
from gwbatch.simulate.injection_set import InjectionSet, load_injection_set
from gwbatch.tasks import ChunkSpec, ChunkTask
from workflow.reference import check_reference

log = logging.getLogger("gwbatch")

#: Host bytes per read sample of a task wherever its kernels run: the raw float32 strain of every
#: detector (4 per detector) and one detector's float64 copy and masks in flight (16).
HOST_BYTES_PER_SAMPLE = 16
#: Kernel bytes per read sample for conditioning one detector (float64 series, complex FFTs) and per
#: detector for its conditioned float64 series and mask, kept for the network stages.
CONDITION_BYTES_PER_SAMPLE = 64
KEPT_BYTES_PER_SAMPLE = 9


@dataclass(frozen=True)
class Plan:
    campaign_name: str
    search: str
    store: str
    ifos: tuple[str, ...]
    sample_rate: float
    t0: str
    span_start: int
    span_stop: int
    halo_before: int
    halo_after: int
    chunks: tuple[ChunkSpec, ...]
    travel: tuple[tuple[float, ...], ...]  # light travel time (s) between detectors
    n_slides: int
    deep_slides: int  # background.deep_slides, ``auto`` resolved (:func:`deep_slides`); 0 without slides
    slide_step: float  # the step slides move by (s; :func:`shift_step`)
    chunk_seconds: float  # plan.chunk, ``auto`` resolved (:func:`resolve_spacing`)
    settings: object  # the search's frozen settings (gwbatch.searches.base.Search.settings)
    conditioning: ConditioningSettings
    dq_required: int  # DQ bits a second needs to be science
    zero_gap: int | None  # the shortest run of exact zeros masked as a gap (samples); None: zeros are data
    segments: DataSegments  # science segments and vetoes as store-sample intervals (gwbatch.io.segments)
    injections: InjectionSet | None  # data.injections, placed on the store's grid; None: none
    reference: str | None = None  # background.reference: the run whose background the FARs are against

    @property
    def read_samples(self) -> int:
        """Samples the longest task reads."""
        return max(c.read_stop - c.read_start for c in self.chunks)

    @property
    def task_memory_bytes(self) -> int:
        """One task on a CPU worker: host arrays plus the kernels' arrays (:func:`task_memory`)."""
        return int(sum(task_memory(get_search(self.search), self.settings, self.read_samples, len(self.ifos))))

    @property
    def task_device_bytes(self) -> int:
        """The kernels' arrays of one task, on the GPU of a GPU worker."""
        return int(task_memory(get_search(self.search), self.settings, self.read_samples, len(self.ifos))[1])

    @property
    def ring(self) -> float:
        """Length (s) of the circle slides move triggers on: the span plus the after-halo.

        A trigger's time is its boxcar centre, which can lie past the span's last start; the extra
        stretch keeps such times on the ring and carries no analysed time, so no livetime.
        """
        return ring_length(self.span_start, self.span_stop, self.halo_after, self.sample_rate)

    def describe(self, t0_float: float) -> str:
        fs = self.sample_rate
        lines = [
            f"campaign   {self.campaign_name} (search: {self.search})",
            f"store      {self.store}: {', '.join(self.ifos)} at {fs:g} Hz",
            f"span       GPS {t0_float + self.span_start / fs:.6f} .. {t0_float + self.span_stop / fs:.6f}"
            f" ({(self.span_stop - self.span_start) / fs:g} s, samples {self.span_start}..{self.span_stop})",
            f"chunks     {len(self.chunks)} tasks of {self._chunk_lengths()} s; halo {self.halo_before / fs:g} s before, "
            f"{self.halo_after / fs:g} s after",
            f"slides     {self.n_slides} x {self.slide_step:g} s (zero lag excluded from background)"
            + (f", and {self.deep_slides} deep ones" if self.deep_slides else ""),
            *self._reach_lines(),
            *self._segment_lines(),
            f"memory     per task ~{self.task_memory_bytes / 2**20:.0f} MiB on a CPU worker, or"
            f" ~{(self.task_memory_bytes - self.task_device_bytes) / 2**20:.0f} MiB host +"
            f" ~{self.task_device_bytes / 2**20:.0f} MiB GPU on a GPU worker" + self._auto_knobs(),
            "chunk  own GPS span                              own samples            read samples",
        ]
        for c in self.chunks:
            lines.append(
                f"{c.index:5d}  {t0_float + c.start / fs:17.6f} .. {t0_float + c.stop / fs:17.6f}"
                f"  [{c.start}, {c.stop})  [{c.read_start}, {c.read_stop})"
            )
        return "\n".join(lines)

    def _chunk_lengths(self) -> str:
        own = [(c.stop - c.start) / self.sample_rate for c in self.chunks]
        return f"{min(own):.6g}" if min(own) == max(own) else f"{min(own):.6g}-{max(own):.6g}"

    def _auto_knobs(self) -> str:
        knobs = get_search(self.search).memory_knobs(self.settings)
        auto = [f"{key} {knob.value}" for key, knob in knobs.items() if knob.auto_upto is not None]
        return f" (at {', '.join(auto)}: auto, sized to the workers' memory when the run starts)" if auto else ""

    def _reach_lines(self) -> list[str]:
        """The counted IFAR the slides can state at most: every slide's livetime is at most the span's,
        so the background time is at most ``slides x span`` (the manifest gives the exact one)."""
        slides = self.n_slides + self.deep_slides
        if not slides or len(self.ifos) < 2:
            return []
        span = (self.span_stop - self.span_start) / self.sample_rate
        month = slides * 30 * 86400.0 / SECONDS_PER_YEAR
        line = (f"reach      counted IFAR at most {_years(slides * span / SECONDS_PER_YEAR)} yr ({_years(month)} yr per "
                "30 days of data); louder candidates get the tail fit's FAR or a bound")
        if slides < REACH_SLIDES:
            line += f" (1e4 yr per 30 days needs {REACH_SLIDES} slides in all)"
        return [line]

    def _segment_lines(self) -> list[str]:
        seconds = self.segments.summary.get("seconds_in_span")
        if not seconds:
            return []
        parts = [f"{ifo} {s['not_science']:g} s not science, {s['category_1']:g} s category 1, "
                 f"{s['vetoed_after_conditioning']:g} s vetoed after conditioning, {s['hardware_injections']:g} s "
                 f"hardware injections" for ifo, s in seconds.items()]
        return ["segments   " + parts[0], *("           " + p for p in parts[1:])]


def _years(x: float) -> str:
    """Three significant figures, exponents as 1.03e4."""
    return f"{x:.3g}".replace("e+0", "e").replace("e+", "e")


def ring_length(span_start: int, span_stop: int, halo_after: int, sample_rate: float) -> float:
    return (span_stop - span_start + halo_after) / sample_rate


def chunk_edges(span_start: int, span_stop: int, chunk: int) -> np.ndarray:
    """Edges of nearly equal chunks tiling ``[span_start, span_stop)``, each 0.5-1.5 x ``chunk`` long."""
    length = span_stop - span_start
    n = max(1, length // chunk)
    if length - n * chunk > chunk // 2:
        n += 1
    return span_start + (np.arange(n + 1, dtype=np.int64) * length) // n


def _span(campaign: Campaign, meta: StoreMeta) -> tuple[int, int]:
    fs = meta.sample_rate
    start = 0
    if campaign.data.start is not None:
        start = int(np.ceil(time_to_index(meta.t0, campaign.data.start, fs) - 1e-6))
        if not 0 <= start < meta.n_samples:
            raise DataError(
                f"data.start {campaign.data.start} is outside store {meta.path} "
                f"(GPS {float(meta.t0):.6f} .. {meta.end:.6f})"
            )
    stop = meta.n_samples
    if campaign.data.duration is not None:
        stop = start + int(round(campaign.data.duration * fs))
        if stop > meta.n_samples:
            raise DataError(
                f"data.duration {campaign.data.duration} s runs past the end of store {meta.path} "
                f"(at most {(meta.n_samples - start) / fs:g} s from the start)"
            )
    return start, stop


def _ifos(campaign: Campaign, meta: StoreMeta) -> tuple[str, ...]:
    if campaign.data.ifos is None:
        return meta.ifos
    missing = [i for i in campaign.data.ifos if i not in meta.ifos]
    if missing:
        raise DataError(
            f"data.ifos names {', '.join(missing)}, not in store {meta.path} (it holds: {', '.join(meta.ifos)})"
        )
    return tuple(campaign.data.ifos)


def travel_matrix(ifos: tuple[str, ...]) -> np.ndarray:
    """Light travel times between detectors; 0 for series that are not known detectors."""
    known = set(known_detectors())
    n = len(ifos)
    out = np.zeros((n, n))
    for a in range(n):
        for b in range(n):
            if a != b and ifos[a] in known and ifos[b] in known:
                out[a, b] = light_travel_time(get_detector(ifos[a]), get_detector(ifos[b]))
    return out


def task_memory(search, settings, read_samples: int, n_ifos: int) -> tuple[int, int]:
    """Upper bounds of one task's ``(host, kernel)`` bytes; the kernels' arrays are on the GPU of a
    GPU worker and in host memory on a CPU worker (checked in :mod:`workflow.memory`)."""
    host = read_samples * (4 * n_ifos + HOST_BYTES_PER_SAMPLE)
    work = read_samples * (CONDITION_BYTES_PER_SAMPLE + KEPT_BYTES_PER_SAMPLE * n_ifos)
    return host, work + search.work_bytes(settings, read_samples)


def shift_step(step: float, search, fs: float) -> float:
    """The step (s) a search's slides move by: a whole number of samples for searches whose trials
    wrap within their chunks (they shift sample arrays), else ``step``."""
    if not search.slides_in_chunks:
        return step
    if round(step * fs) < 1:
        raise ConfigError(f"background.slide_step ({step:g} s) is less than one sample at {fs:g} Hz: this search "
                          f"shifts its trials by whole samples; use at least {1 / fs:g} s (or auto)")
    return round(step * fs) / fs


def step_label(configured: float, step: float, fs: float) -> str:
    """``background.slide_step`` as messages quote it: as set, and the whole samples it shifts by
    where they differ."""
    if np.isclose(configured, step, rtol=0, atol=1e-12):
        return f"{configured:g} s"
    return f"{configured:g} s, shifted by {round(step * fs)} samples = {step:.6g} s at {fs:g} Hz"


def deep_slides(campaign: Campaign, search, n_ifos: int, n_slides: int, step: float, ring: float,
                reach: float) -> int:
    """``background.deep_slides`` as a number: as set, or for ``auto`` (searches whose deep slides
    are cheap, :attr:`~gwbatch.searches.base.Search.auto_deep_slides`) the slides up to
    :data:`~gwbatch.background.AUTO_SLIDES` in all, as many as the ring of ``ring`` s holds
    (:func:`~gwbatch.background.most_slides`) at ``step``; 0 without slides."""
    asked = campaign.background.deep_slides
    if not n_slides:
        return 0
    if asked != "auto":
        return int(asked)
    if not search.auto_deep_slides:
        return 0
    fits = most_slides(n_ifos, step, ring, reach)
    return max(min(AUTO_SLIDES, fits) - n_slides, 0)


#: ``auto`` slide steps: the next multiple of this (s) above twice the coincidence reach, then
#: rounded up to a whole sample.
STEP_GRAIN = 0.01
#: ``auto`` chunks are whole multiples of this (s).
CHUNK_GRAIN = 16.0
#: The shortest chunk :func:`chunk_edges` makes of a span at least ``plan.chunk`` long, as a
#: fraction of ``plan.chunk`` (a span of 1.5-2 chunks is cut in two).
SHORTEST_CHUNK = 0.75


def coincidence_reach(campaign: Campaign, search, settings, travel: np.ndarray) -> float:
    """How far apart (s) one event's detector times can be: light travel, window and both triggers'
    timing uncertainties; slides must move detectors by more than twice this."""
    return float(travel.max()) + campaign.coincidence.window + 2.0 * search.max_uncertainty(settings)


def resolve_spacing(campaign: Campaign, search, ifos: tuple[str, ...], fs: float, layout) -> Campaign:
    """The campaign with ``background.slide_step`` and ``plan.chunk`` as numbers.

    ``auto`` is :data:`~gwbatch.config.schema.DEFAULT_SLIDE_STEP` and
    :data:`~gwbatch.config.schema.DEFAULT_CHUNK`, except for a search with slides whose trials wrap
    within its chunks and whose deep trials are cheap (SPIIR), whose counted reach is bounded by one
    chunk: there the step is the next multiple of :data:`STEP_GRAIN` above twice the coincidence
    reach (the shortest that keeps trials independent, :func:`~gwbatch.background.check_slides`),
    rounded up to a whole sample, and the chunk (at least the default) is long enough that every
    chunk of a longer span holds the trials asked: :data:`~gwbatch.background.AUTO_SLIDES` with
    ``deep_slides: auto`` (10^4 yr per 30 days by counting; docs/decisions.md, "Deep trials"), else
    ``slides + deep_slides``."""
    bg, plan = campaign.background, campaign.plan
    step = DEFAULT_SLIDE_STEP if bg.slide_step == "auto" else bg.slide_step
    chunk = DEFAULT_CHUNK if plan.chunk == "auto" else plan.chunk
    n_slides = NetworkSettings.of(campaign, len(ifos)).slides
    sized = search.slides_in_chunks and search.auto_deep_slides and n_slides > 0
    if sized and "auto" in (bg.slide_step, plan.chunk):
        provisional = campaign.model_copy(update={"background": bg.model_copy(update={"slide_step": step})})
        reach = coincidence_reach(campaign, search, search.settings(provisional, fs, ifos, layout), travel_matrix(ifos))
        if bg.slide_step == "auto":
            grain = (np.floor(2.0 * reach / STEP_GRAIN) + 1) * STEP_GRAIN
            step = float(np.ceil(round(grain * fs, 6))) / fs  # whole samples, as the trials shift (shift_step)
        step = shift_step(step, search, fs)
        if plan.chunk == "auto":
            trials = AUTO_SLIDES if bg.deep_slides == "auto" else n_slides + bg.deep_slides
            ring = ring_holding(len(ifos), trials, step, reach) + 1.0 / fs  # longer than that, by a sample
            chunk = max(DEFAULT_CHUNK, float(np.ceil(ring / SHORTEST_CHUNK / CHUNK_GRAIN) * CHUNK_GRAIN))
    return campaign.model_copy(update={"background": bg.model_copy(update={"slide_step": step}),
                                       "plan": plan.model_copy(update={"chunk": chunk})})


def make_plan(campaign: Campaign, meta: StoreMeta) -> Plan:
    """Everything that will run, decided before anything runs."""

    physical_bounds(campaign, meta.sample_rate)
    fs = meta.sample_rate
    search = get_search(campaign.search.kind)
    search.check_rate(campaign.search, fs)
    ifos = _ifos(campaign, meta)
    meta.dq_mask(campaign.data.dq_flags)  # unknown DQ flag names fail here, before any work
    span_start, span_stop = _span(campaign, meta)
    asked_step = campaign.background.slide_step
    campaign = resolve_spacing(campaign, search, ifos, fs, meta.layout)
    settings = search.settings(campaign, fs, ifos, meta.layout)
    before, after = search.halo(settings)
    chunk = int(round(campaign.plan.chunk * fs))
    cond = campaign.conditioning
    if cond.whiten:
        need = (MIN_SEGMENTS + 1) * cond.psd.segment / 2.0
        if campaign.plan.chunk / 2.0 + (before + after) / fs < need:
            raise ConfigError(
                f"plan.chunk ({campaign.plan.chunk:g} s) is too short to estimate a PSD from "
                f"{MIN_SEGMENTS} segments of {cond.psd.segment:g} s; use plan.chunk >= {2 * need:g}"
            )
    if chunk < 1:
        raise ConfigError(f"plan.chunk ({campaign.plan.chunk} s) is shorter than one sample")
    edges = chunk_edges(span_start, span_stop, chunk)
    chunks = tuple(
        ChunkSpec(k, int(a), int(b), int(a) - before, int(b) + after) for k, (a, b) in enumerate(zip(edges[:-1], edges[1:]))
    )
    travel = travel_matrix(ifos)
    ring = ring_length(span_start, span_stop, after, fs)
    if search.slides_in_chunks:  # trials wrap within each chunk's own samples
        ring = float(np.diff(edges).min()) / fs
    reach = coincidence_reach(campaign, search, settings, travel)
    n_slides = campaign.background.slides if (campaign.coincidence.min_ifos > 1 and len(ifos) > 1) else 0
    step = shift_step(campaign.background.slide_step, search, fs)
    deep = deep_slides(campaign, search, len(ifos), n_slides, step, ring, reach)
    if campaign.background.deep_slides == "auto":  # the search's settings carry the number
        campaign = campaign.model_copy(update={"background": campaign.background.model_copy(
            update={"deep_slides": deep})})
        settings = search.settings(campaign, fs, ifos, meta.layout)
    check_slides(len(ifos), n_slides + deep, step, ring, reach,
                 "the shortest chunk (plan.chunk)" if search.slides_in_chunks else "the analysed span",
                 step_label(step if asked_step == "auto" else asked_step, step, fs))
    return Plan(
        campaign_name=campaign.name,
        search=campaign.search.kind,
        store=str(meta.path),
        ifos=ifos,
        sample_rate=fs,
        t0=str(meta.t0),
        span_start=span_start,
        span_stop=span_stop,
        halo_before=before,
        halo_after=after,
        chunks=chunks,
        travel=tuple(tuple(float(v) for v in row) for row in travel),
        n_slides=n_slides,
        deep_slides=deep,
        slide_step=step,
        chunk_seconds=campaign.plan.chunk,
        settings=settings,
        conditioning=campaign.conditioning.settings(),
        dq_required=meta.dq_mask(campaign.data.dq_flags),
        zero_gap=zero_gap_samples(campaign.data.zero_gap, fs),
        segments=campaign_segments(campaign, meta, ifos, (span_start, span_stop)),
        injections=None if campaign.data.injections is None else
        injections_in_span(load_injection_set(campaign.data.injections, ifos, GPSTime.parse(meta.t0), fs),
                           GPSTime.parse(meta.t0), fs, (span_start, span_stop)),
        reference=None if campaign.background.reference is None else
        check_reference(campaign.background.reference, campaign, ifos),
    )


def injections_in_span(injections: InjectionSet, t0: GPSTime, fs: float, span: tuple[int, int]) -> InjectionSet:
    """``injections``, refused (:class:`DataError`) when none of its rows lies in the analysed
    span (a GPS typo would give a complete run with no injection); rows outside it are said in a
    warning (the reduction leaves them out of ``injections.parquet``)."""
    gps = injections.table["gps_time"].to_numpy(np.float64)
    lo, hi = (float(t0) + s / fs for s in span)
    inside = int(np.count_nonzero((gps >= lo) & (gps < hi)))
    if gps.size and not inside:
        raise DataError(f"data.injections ({injections.path}): none of its {gps.size} injections (GPS "
                        f"{gps.min():.3f} to {gps.max():.3f}) lies in the analysed span [{lo:.3f}, {hi:.3f}); "
                        "check the file's times, data.start and data.duration")
    if inside < gps.size:
        log.warning("data.injections (%s): %d of %d injections lie outside the analysed span [%.3f, %.3f) and are "
                    "left out", injections.path, gps.size - inside, gps.size, lo, hi)
    return injections


def campaign_segments(campaign: Campaign, meta: StoreMeta, ifos: tuple[str, ...], span: tuple[int, int]) -> DataSegments:
    """The campaign's science segments and vetoes, read and resolved to store samples."""
    data = campaign.data
    store_dq = None
    if data.vetoes is not None and any(s.store_dq for s in data.vetoes.extra):
        dq = read_dq(meta, list(ifos))
        store_dq = ({ifo: dq[i] for i, ifo in enumerate(ifos)}, meta.dq_bits)
    return resolve_segments(data, ifos, GPSTime.parse(meta.t0), meta.sample_rate, span, store_dq)


def chunk_task(plan: Plan, meta: StoreMeta, spec: ChunkSpec, backend: str) -> ChunkTask:
    """The task of chunk ``spec``: the plan's frozen facts and the store chunks the task reads
    (its read span, and up to a zero gap beyond it), with their checksums."""
    margin = plan.zero_gap or 0
    return ChunkTask(spec, meta.slice(spec.read_start - margin, spec.read_stop + margin), plan.ifos,
                     plan.dq_required, plan.zero_gap, plan.conditioning, plan.settings, backend,
                     None if plan.segments.empty else plan.segments.clipped(spec.read_start, spec.read_stop),
                     () if plan.injections is None else plan.injections.reaching(spec.read_start, spec.read_stop))


def member_plan(name: str, campaign: Campaign, meta: StoreMeta) -> Plan:
    """:func:`make_plan` for a member of a multi-search campaign: its errors name the member
    (``searches.<name>: search.f_high ...``); ``name`` is "" for a one-search campaign."""
    try:
        return make_plan(campaign, meta)
    except ConfigError as exc:
        if not name:
            raise
        raise ConfigError(f"searches.{name}: {exc}") from None
