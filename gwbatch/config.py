"""Campaign configuration: the schema and the one loader (the only module that reads YAML).

A campaign is one YAML file.  Unknown keys and wrong types are refused with a message that names
the key, the bad value and what is allowed.  Relative paths are taken relative to the directory
the command runs in.
"""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Iterable, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from gwbatch.coherent.skymap import TEMPERATURE
from gwbatch.errors import ConfigError

Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)


class DataConfig(StrictModel):
    """Which data to analyse."""

    store: Path = Field(description="path of the Zarr strain store")
    ifos: list[Name] | None = Field(None, description="detectors/series to analyse; default: all in the store")
    start: float | None = Field(None, description="GPS start of the analysis; default: store start")
    duration: PositiveFloat | None = Field(None, description="seconds to analyse; default: to the store end")
    dq_flags: list[str] = Field(["DATA"], description="DQ bits that must all be set for science time")

    @field_validator("ifos")
    @classmethod
    def _unique_ifos(cls, v):
        if v is not None and (len(v) == 0 or len(set(v)) != len(v)):
            raise ValueError(f"must be a non-empty list of distinct names, got {v}")
        return v


class PSDConfig(StrictModel):
    method: Literal["median-welch"] = "median-welch"
    segment: PositiveFloat = Field(4.0, description="Welch segment length (s); 50% overlap, Hann window")


class GatingConfig(StrictModel):
    threshold: PositiveFloat | None = Field(None, description="gate whitened samples with |x| above this (σ); null: off")
    half_width: PositiveFloat = Field(0.25, description="seconds zeroed on each side of a gated peak")
    taper: PositiveFloat = Field(0.1, description="Tukey taper length (s) on each side of a gate")


class ConditioningConfig(StrictModel):
    whiten: bool = Field(True, description="whiten with the chunk's own PSD (strain); false for radio/SNR series")
    psd: PSDConfig = PSDConfig()
    filter_duration: PositiveFloat = Field(2.0, description="whitening filter length (s); half is cropped at data edges")
    f_low: NonNegativeFloat = Field(20.0, description="whitening band low edge (Hz)")
    f_high: PositiveFloat | None = Field(None, description="whitening band high edge (Hz); default Nyquist")
    gating: GatingConfig = GatingConfig()
    baseline: PositiveFloat | None = Field(
        None, description="running-median window (s) subtracted from an un-whitened series; null: off"
    )

    @model_validator(mode="after")
    def _band(self):
        if self.f_high is not None and self.f_high <= self.f_low:
            raise ValueError(f"f_high ({self.f_high}) must be above f_low ({self.f_low})")
        if self.psd.segment < self.filter_duration:
            raise ValueError(
                f"psd.segment ({self.psd.segment} s) must be at least filter_duration ({self.filter_duration} s)"
            )
        if self.gating.threshold is not None and not self.whiten:
            raise ValueError("gating.threshold is in whitened σ and needs whiten: true")
        if self.baseline is not None and self.whiten:
            raise ValueError("baseline removal is for un-whitened series; whitening already removes it")
        return self


class PulseSearchConfig(StrictModel):
    """Single-pulse boxcar search (Adámek & Armour; ALGORITHMS.md §5)."""

    kind: Literal["pulse"] = "pulse"
    series: Literal["energy", "amplitude"] = Field(
        "energy",
        description="energy: boxcars over whitened power (any transient shape); amplitude: over the series itself",
    )
    threshold: PositiveFloat = Field(6.0, description="per-series SNR threshold (σ)")
    decimation: list[PositiveInt] = Field(
        [32, 16, 16, 16],
        description="boxcar widths per round: round 0 at full rate, then each round decimates by 2",
    )
    sigma: Literal["white", "linear"] = Field(
        "white", description="σ_N model: white = sqrt(N)·σ (eq. 4); linear = eq. 5 blend with a measured σ_Nmax"
    )
    clip: PositiveFloat | None = Field(
        5.0, description="reject samples beyond this many σ when estimating μ, σ (loud pulses must not raise σ); null: off"
    )
    clip_iterations: PositiveInt = Field(3, description="outlier-rejection iterations when clip is set")
    merge_gap: NonNegativeInt = Field(0, description="samples allowed between boxcars merged friends-of-friends")

    @field_validator("decimation")
    @classmethod
    def _plan(cls, v):
        if not v:
            raise ValueError("needs at least one round, e.g. [32, 16, 16]")
        from gwbatch.pulse.plan import boxcar_plan  # the plan's own checks, one place

        try:
            boxcar_plan(v)
        except ValueError as exc:
            raise ValueError(str(exc)) from None
        return v


Range = Annotated[list[float], Field(min_length=2, max_length=2)]


class PlacementConfig(StrictModel):
    method: Literal["stochastic", "grid"] = "stochastic"
    minimal_match: float = Field(0.97, gt=0.5, lt=1.0, description="every point of the space matches a template this well")
    seed: NonNegativeInt = 0
    patience: PositiveInt = Field(2000, description="stochastic: stop after this many rejected proposals in a row")
    max_templates: PositiveInt = 50_000


class SpiirFilterConfig(StrictModel):
    """SPIIR construction (ALGORITHMS.md §2)."""

    overlap_target: float = Field(0.99, gt=0.5, lt=1.0, description="smallest eps whose response reaches this overlap")
    epsilons: list[PositiveFloat] = Field([0.04, 0.02, 0.01, 0.005], min_length=1)
    alpha: float = Field(0.99, gt=0.0, le=1.0)
    beta: PositiveFloat = 0.25
    least_squares: bool = Field(True, description="solve for b by least squares (removes the phase bias)")
    autocorrelation_lags: PositiveInt = Field(100, description="lags each side of the autocorrelation chi-squared")


class BankConfig(StrictModel):
    """A template bank: a region placed to a minimal match, or the templates of a bank file."""

    name: Name
    approximant: str = Field("TaylorF2", description="TaylorF2 (built in) or a LALSimulation FD approximant")
    file: Path | None = Field(None, description="HDF5 bank file with columns mass1, mass2, spin1z, spin2z")
    mass1: Range | None = None
    mass2: Range | None = None
    total_mass: Range | None = None
    mass_ratio: Range | None = None
    spin1z: Range = [0.0, 0.0]
    spin2z: Range = [0.0, 0.0]
    f_low: PositiveFloat = Field(30.0, description="templates start here (Hz)")
    sample_rate: PositiveFloat = 4096.0
    placement: PlacementConfig = PlacementConfig()
    spiir: SpiirFilterConfig = SpiirFilterConfig()

    @model_validator(mode="after")
    def _ranges(self):
        if self.file is None and (self.mass1 is None or self.mass2 is None):
            raise ValueError("a bank needs either file: or both mass1: and mass2: ranges")
        for key in ("mass1", "mass2", "total_mass", "mass_ratio", "spin1z", "spin2z"):
            r = getattr(self, key)
            if r is not None and r[0] > r[1]:
                raise ValueError(f"{key} range must be [min, max], got {r}")
        for key in ("spin1z", "spin2z"):
            r = getattr(self, key)
            if not -1.0 <= r[0] <= r[1] <= 1.0:
                raise ValueError(f"{key} must lie in [-1, 1], got {r}")
            if r[0] != r[1] and self.file is None and self.placement.method == "grid":
                raise ValueError(
                    f"{key}: grid placement covers the mass plane at fixed aligned spins; give [x, x] (got {r}) "
                    "or use placement method 'stochastic'"
                )
        return self


def load_bank_config(path: str | Path, overrides: Iterable[str] = ()) -> BankConfig:
    """Read a bank YAML file (the ``bank:`` mapping or the file's top level)."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read bank file {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if isinstance(raw, dict) and set(raw) == {"bank"}:
        raw = raw["bank"]
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a bank must be a mapping of keys (name, approximant, mass1, ...)")
    for item in overrides:
        apply_override(raw, item)
    try:
        return BankConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, str(path), BankConfig)) from None


class CoherentConfig(StrictModel):
    """The coherent stage of the SPIIR search (ALGORITHMS.md §3): sky grid and skymaps.  Its
    time-shifted trials are ``background.slides`` shifts of ``background.slide_step`` per chunk."""

    sky_order: int = Field(5, ge=0, le=8, description="HEALPix order of the sky grid (5: 12288 directions, 7: 196608)")
    ifo_snr: PositiveFloat = Field(
        4.0, description="an event needs coincidence.min_ifos detectors with SNR at least this (the pivot is one), "
                         "so a glitch in one detector is never a network event")
    skymap_threshold: PositiveFloat = Field(
        8.0, description="zero-lag candidates ranked at least this get a skymap (FITS) and a 90% area")
    skymap_temperature: PositiveFloat = Field(
        TEMPERATURE, description="width of the skymaps, P ~ exp(rho_c^2 / 2T), calibrated by a P-P test on injections "
                         "(benchmarks/coherent_campaigns.py reports the test for a range of T)")


class SpiirSearchConfig(StrictModel):
    """SPIIR compact-binary search (ALGORITHMS.md §2): a template bank as IIR filters on whitened data."""

    kind: Literal["spiir"] = "spiir"
    bank: Path = Field(description="bank YAML file (see configs/banks/)")
    placement_psd: Literal["aLIGO", "AdVirgo", "KAGRA"] = Field(
        "aLIGO", description="design curve the templates are placed with (the same templates for every detector)"
    )
    psd: str = Field("data", description="PSD the filters are built for: 'data' (each detector's own) or a design curve")
    psd_seconds: PositiveFloat = Field(512.0, description="with psd: data, seconds from the span start used")
    threshold: PositiveFloat = Field(5.5, description="single-detector |z| threshold")
    cluster_window: PositiveFloat = Field(0.1, description="keep the loudest trigger within this many seconds")
    batch: PositiveInt = Field(256, description="templates filtered per pass")
    bank_cache: Path | None = Field(
        None, description="directory of placed templates and built banks, by configuration, templates and PSD (a "
                          "bank serves PSDs within 1e-6 of its own); default <output>/banks. Campaigns that name "
                          "the same directory share them")
    coherent: CoherentConfig = CoherentConfig()

    @field_validator("psd")
    @classmethod
    def _psd(cls, v):
        if v not in ("data", "aLIGO", "AdVirgo", "KAGRA"):
            raise ValueError(f"must be 'data' or a design curve (aLIGO, AdVirgo, KAGRA), got {v!r}")
        return v


class BurstSearchConfig(StrictModel):
    """Unmodelled burst search, cWB style (ALGORITHMS.md §4): time-frequency pixels of whitened
    data, clusters, a coherent sky loop over HEALPix, events ranked by rho.  Its lags are
    ``background.slides`` shifts of ``background.slide_step`` per chunk."""

    kind: Literal["burst"] = "burst"
    f_low: PositiveFloat = Field(32.0, description="lowest pixel frequency (Hz)")
    f_high: PositiveFloat = Field(1024.0, description="highest pixel frequency (Hz; at most Nyquist)")
    resolutions: list[PositiveFloat] = Field(
        [64.0, 32.0, 16.0, 8.0], description="pixel bandwidths (Hz), one per resolution; sample_rate / bandwidth must "
                                             "be a power of two (pixel duration is 1 / (2 bandwidth))")
    black_pixel_probability: float = Field(
        0.001, gt=0, lt=0.5, description="fraction of a chunk's pixels selected per resolution (cWB bpp)")
    pixel_threshold: PositiveFloat | None = Field(
        None, description="network energy a pixel needs to enter the sky statistic at a direction; null: the "
                          "90% noise quantile (chi-squared, 2 x detectors degrees of freedom)")
    subnet_threshold: PositiveFloat | None = Field(
        None, description="subnetwork energy a pixel needs to count as seen by two detectors or more; null: the 90% "
                          "noise quantile of chi-squared with 2 x (detectors - 1) degrees of freedom")
    subcut: float = Field(0.33, ge=-1, lt=1, description="early rejection of sky directions, (aa - m) / (aa + m) "
                                                         "below this (seed 003: 0.33)")
    regulator: NonNegativeFloat | None = Field(
        None, description="polarisation regulator delta: 0 lets both polarisations free, large keeps only the dominant "
                          "one; null: 0.1 with three detectors or more, 1000 with two (two nearly aligned detectors "
                          "span the whole signal plane, so only the constraint leaves a null stream)")
    rho_min: PositiveFloat = Field(5.0, description="events below this rho are not kept")
    cc_min: float = Field(0.5, ge=-1, le=1, description="events below this network correlation are not kept")
    sky_order: int = Field(6, ge=0, le=8, description="HEALPix order of the sky grid (6: 49152 directions, 7: 196608)")
    skymap_threshold: PositiveFloat = Field(8.0, description="zero-lag events with rho at least this get a skymap")
    skymap_temperature: PositiveFloat = Field(
        1.0, description="width of the skymaps, P ~ exp(Lo / 2T) with Lo the sky loop's likelihood")

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


class CoincidenceConfig(StrictModel):
    min_ifos: PositiveInt = Field(2, description="detectors a candidate needs; 1 = single-series candidates")
    window: NonNegativeFloat = Field(0.005, description="seconds allowed beyond the light travel time")
    cluster_window: PositiveFloat = Field(0.1, description="keep the loudest candidate within this many seconds")


class BackgroundConfig(StrictModel):
    slides: NonNegativeInt = Field(100, description="number of time slides (zero lag excluded)")
    slide_step: PositiveFloat = Field(1.0, description="shift step (s); detector j moves by k·step·j in slide k")


class PlanConfig(StrictModel):
    chunk: PositiveFloat = Field(128.0, description="seconds of data each task owns (plus halos)")


JOBQUEUE_KINDS = ("slurm", "pbs", "htcondor")

_BYTES = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]i?b?|b)?\s*$", re.IGNORECASE)


def _memory(v: str | None) -> str | None:
    if v is not None and (not _BYTES.match(v) or float(_BYTES.match(v).group(1)) <= 0):
        raise ValueError("must be an amount of memory such as '16GiB', '4000MB' or '64G'")
    return v


class JobqueueConfig(StrictModel):
    """Batch jobs for the kinds ``slurm``, ``pbs`` and ``htcondor`` (dask-jobqueue): what one job asks
    for, and how many jobs the run may hold (adaptive scaling)."""

    queue: str | None = Field(None, description="partition (SLURM -p) or queue (PBS -q); HTCondor has none")
    account: str | None = Field(None, description="account charged (SLURM/PBS -A; HTCondor accounting_group)")
    walltime: str = Field("04:00:00", description="time limit of one job, HH:MM:SS (HTCondor: MY.MaxRuntime)")
    cores: PositiveInt = Field(1, description="CPU cores per job, shared by its worker processes")
    processes: PositiveInt = Field(1, description="Dask worker processes per job (each gets cores / processes threads)")
    memory: str | None = Field(None, description="memory per job, e.g. '16GiB' (required); each worker gets "
                                                 "memory / processes")
    gpus: NonNegativeInt = Field(0, description="GPUs per job; when > 0 each worker is pinned to one GPU "
                                                "(dask-cuda worker) and processes must equal gpus")
    disk: str | None = Field(None, description="HTCondor only: scratch disk per job; default the job's memory")
    job_extra_directives: list[str] = Field(
        [], description="extra scheduler directives, one per item (SLURM/PBS: the text after #SBATCH / #PBS; "
                        "HTCondor: 'key = value' submit commands)")
    job_script_prologue: list[str] = Field(
        [], description="shell lines run before the workers start, e.g. 'module load cuda'")
    local_directory: str | None = Field(None, description="worker scratch directory on the compute node, "
                                                          "e.g. $TMPDIR or /scratch")
    log_directory: str | None = Field(None, description="directory for the batch system's job logs")
    interface: str | None = Field(None, description="network interface the scheduler and workers listen on, "
                                                    "e.g. ib0")
    python: str | None = Field(None, description="python on the compute nodes; default this run's interpreter")
    minimum_jobs: NonNegativeInt = Field(0, description="adaptive scaling: jobs kept even when idle")
    maximum_jobs: PositiveInt = Field(1, description="adaptive scaling: most jobs held at once")
    start_timeout: PositiveFloat = Field(
        600.0, description="seconds to wait for the first worker (queue wait included) before giving up")

    @field_validator("walltime", mode="before")
    @classmethod
    def _sexagesimal(cls, v):
        # YAML 1.1 reads an unquoted 04:00:00 as the integer 14400 (base 60): take it as seconds.
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return f"{v // 3600:02d}:{v // 60 % 60:02d}:{v % 60:02d}"
        return v

    @field_validator("walltime")
    @classmethod
    def _walltime(cls, v):
        if not re.fullmatch(r"\d+:[0-5]\d:[0-5]\d", v) or v.replace("0", "").replace(":", "") == "":
            raise ValueError("must be a positive time HH:MM:SS, e.g. '04:00:00' or '48:00:00'")
        return v

    @field_validator("memory", "disk")
    @classmethod
    def _bytes(cls, v):
        return _memory(v)

    @model_validator(mode="after")
    def _shape(self):
        if self.gpus > 0 and self.processes != self.gpus:
            raise ValueError(
                f"processes ({self.processes}) must equal gpus ({self.gpus}) when gpus > 0: each worker process "
                "is pinned to one GPU")
        if self.cores < self.processes:
            raise ValueError(
                f"cores ({self.cores}) must be at least processes ({self.processes}): each worker process "
                "needs a core")
        if self.maximum_jobs < self.minimum_jobs:
            raise ValueError(
                f"maximum_jobs ({self.maximum_jobs}) must be at least minimum_jobs ({self.minimum_jobs})")
        return self

    def walltime_seconds(self) -> int:
        h, m, s = (int(p) for p in self.walltime.split(":"))
        return 3600 * h + 60 * m + s


class ClusterConfig(StrictModel):
    kind: Literal["auto", "local", "local-cuda", "address", "in-process", "slurm", "pbs", "htcondor"] = Field(
        "auto", description="where tasks run: auto (local-cuda with GPUs, else local), local, local-cuda, address, "
                            "in-process, or batch jobs on slurm, pbs or htcondor (see cluster.jobqueue)")
    n_workers: PositiveInt | None = Field(None, description="workers (local: default one per core; local-cuda: one per GPU)")
    threads_per_worker: PositiveInt | None = Field(
        None, description="tasks a local worker runs at once; default 2 on a GPU worker (one task's reading, "
                          "conditioning and host steps overlap the other's kernels), 1 on a CPU worker")
    memory_limit: str = "auto"
    address: str | None = Field(None, description="scheduler address for kind 'address'")
    dashboard_address: str = ":8787"
    jobqueue: JobqueueConfig = Field(JobqueueConfig(), description="batch jobs for kinds slurm, pbs and htcondor")

    @model_validator(mode="after")
    def _address(self):
        if self.kind == "address" and not self.address:
            raise ValueError("kind 'address' needs cluster.address, e.g. tcp://scheduler:8786")
        return self

    @model_validator(mode="after")
    def _jobqueue(self):
        if self.kind not in JOBQUEUE_KINDS:
            return self
        jq = self.jobqueue
        if jq.memory is None:
            raise ValueError(f"kind {self.kind!r} needs cluster.jobqueue.memory, the memory of one job (e.g. 16GiB)")
        if self.kind == "htcondor":
            if jq.queue is not None:
                raise ValueError(f"cluster.jobqueue.queue ({jq.queue!r}) has no HTCondor equivalent; put submit "
                                 "commands such as 'requirements = ...' in cluster.jobqueue.job_extra_directives")
            bad = [d for d in jq.job_extra_directives if "=" not in d]
            if bad:
                raise ValueError(f"cluster.jobqueue.job_extra_directives: HTCondor takes 'key = value' submit "
                                 f"commands, got {bad[0]!r}")
        return self


class OutputConfig(StrictModel):
    dir: Path | None = Field(None, description="output directory; default runs/<name>")


class Campaign(StrictModel):
    """A whole campaign: data, conditioning, search, coincidence, background, execution."""

    name: Name
    description: str = ""
    data: DataConfig
    conditioning: ConditioningConfig = ConditioningConfig()
    search: Annotated[PulseSearchConfig | SpiirSearchConfig | BurstSearchConfig, Field(discriminator="kind")]
    coincidence: CoincidenceConfig = CoincidenceConfig()
    background: BackgroundConfig = BackgroundConfig()
    plan: PlanConfig = PlanConfig()
    cluster: ClusterConfig = ClusterConfig()
    backend: Literal["auto", "numpy", "cupy"] = "auto"
    output: OutputConfig = OutputConfig()

    @model_validator(mode="after")
    def _spiir_needs_whitening(self):
        if self.search.kind in ("spiir", "burst") and not self.conditioning.whiten:
            raise ValueError(f"search kind {self.search.kind!r} needs whitened strain: set conditioning.whiten: true")
        return self

    @property
    def output_dir(self) -> Path:
        return self.output.dir if self.output.dir is not None else Path("runs") / self.name


# ----------------------------------------------------------------------------------------------
# Loading


#: Sections a member of a multi-search campaign may set for itself; the rest are shared.
MEMBER_SECTIONS = ("search", "conditioning", "coincidence", "background", "plan")


@dataclass(frozen=True)
class Suite:
    """A campaign that runs several searches over the same data (``searches:`` in the YAML).

    Each member is a whole :class:`Campaign`: the shared sections with the member's own
    ``search`` and any of ``conditioning``, ``coincidence``, ``background`` and ``plan`` it sets.
    Its outputs go to ``<output_dir>/<member>/``; the suite writes a combined candidate table,
    manifest and report at the top.
    """

    name: str
    description: str
    members: dict[str, Campaign]
    cluster: ClusterConfig
    backend: str
    output_dir: Path


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def validate_suite(raw: dict, source: str = "campaign") -> Suite:
    """A multi-search campaign: ``searches`` maps member names to their own sections."""
    searches = raw.get("searches")
    if "search" in raw:
        raise ConfigError(f"{source}: give either search (one search) or searches (several), not both")
    if not isinstance(searches, dict) or not searches:
        raise ConfigError(f"{source}: searches must map member names to their sections, e.g. "
                          f"searches: {{burst: {{search: {{kind: burst}}}}}}; got {searches!r}")
    shared = {k: v for k, v in raw.items() if k != "searches"}
    top = validate_campaign({**shared, "search": {"kind": "pulse"}}, source)  # the shared sections alone
    members = {}
    for member, sections in searches.items():
        where = f"searches.{member}"
        if not isinstance(member, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", member):
            raise ConfigError(f"{source}: {where}: a member name is letters, digits, '_', '.', '-' (got {member!r})")
        if not isinstance(sections, dict) or "search" not in sections:
            raise ConfigError(f"{source}: {where} must be a mapping with at least a search section (got {sections!r})")
        unknown = [k for k in sections if k not in MEMBER_SECTIONS]
        if unknown:
            raise ConfigError(f"{source}: {where}.{unknown[0]}: unknown key (allowed here: {', '.join(MEMBER_SECTIONS)}; "
                              "cluster, backend, data and output are shared by all members)")
        member_raw = _merge(shared, sections)
        member_raw["name"] = f"{top.name}-{member}"
        member_raw["output"] = {"dir": str(top.output_dir / member)}
        members[member] = validate_campaign(member_raw, f"{source} ({where})")
    return Suite(top.name, top.description, members, top.cluster, top.backend, top.output_dir)


def load_run(path: str | Path, overrides: Iterable[str] = ()) -> Campaign | Suite:
    """Read a campaign YAML file with one search (:class:`Campaign`) or several (:class:`Suite`)."""
    raw = _read_campaign_yaml(path, overrides)
    return validate_suite(raw, str(path)) if "searches" in raw else validate_campaign(raw, source=str(path))


def load_campaign(path: str | Path, overrides: Iterable[str] = ()) -> Campaign:
    """Read a one-search campaign YAML file, apply ``key=value`` overrides and validate it."""
    raw = _read_campaign_yaml(path, overrides)
    if "searches" in raw:
        raise ConfigError(f"{path} runs several searches (searches:); load it with load_run")
    return validate_campaign(raw, source=str(path))


def _read_campaign_yaml(path: str | Path, overrides: Iterable[str]) -> dict:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read campaign file {path}: {exc.strerror}") from exc
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a campaign must be a mapping of keys (name, data, search, ...), got {type(raw).__name__}")
    for item in overrides:
        apply_override(raw, item)
    return raw


def validate_campaign(raw: dict, source: str = "campaign") -> Campaign:
    try:
        return Campaign.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from None


def apply_override(raw: dict, item: str) -> None:
    """Apply one ``dotted.key=value`` override; the value is parsed as YAML (numbers, lists, null)."""
    if "=" not in item:
        raise ConfigError(f"--set expects key=value, got {item!r}")
    key, _, value = item.partition("=")
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(f"--set: bad key {key!r}")
    try:
        parsed = yaml.safe_load(value) if value.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {key}: value {value!r} is not valid YAML: {exc}") from None
    node = raw
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            prefix = ".".join(parts[: depth + 1])
            raise ConfigError(f"--set {key}: {prefix} is a value ({child!r}), not a section")
        node = child
    node[parts[-1]] = parsed


#: The search sections by ``search.kind``; pydantic puts the kind in an error's location after "search".
SEARCH_MODELS: dict[str, type[BaseModel]] = {"pulse": PulseSearchConfig, "spiir": SpiirSearchConfig,
                                             "burst": BurstSearchConfig}


def _is_search_tag(loc: tuple, i: int) -> bool:
    return i > 0 and loc[i - 1] == "search" and loc[i] in SEARCH_MODELS


def _model_at(loc: tuple, root: type[BaseModel] | None = None) -> type[BaseModel] | None:
    """The model class that owns the last element of a validation-error location (with its search
    kind tag, if any)."""
    model: Any = root or Campaign
    for i, part in enumerate(loc[:-1]):
        if _is_search_tag(loc, i):
            model = SEARCH_MODELS[part]
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or part not in model.model_fields:
            return None
        model = _model_of(model.model_fields[part].annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _model_of(annotation: Any) -> Any:
    for arg in (annotation, *typing.get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return annotation


def format_validation_error(exc: ValidationError, source: str, root: type[BaseModel] | None = None) -> str:
    lines = [f"{source}: invalid {'campaign' if root is None else 'bank'}"]
    for err in exc.errors():
        tagged = tuple(err["loc"])
        loc = tuple(p for i, p in enumerate(tagged) if not _is_search_tag(tagged, i))
        key = ".".join(str(p) for p in loc) or "(top level)"
        key = key if key.isprintable() else repr(key)  # a key with control characters, quoted
        kind = err["type"]
        if kind == "extra_forbidden":
            owner = _model_at(tagged, root)
            allowed = ", ".join(owner.model_fields) if owner else "see the documentation"
            lines.append(f"  {key}: unknown key (allowed here: {allowed})")
        elif kind == "missing":
            lines.append(f"  {key}: required key is missing")
        elif kind in ("union_tag_invalid", "union_tag_not_found"):  # search.kind
            ctx = err.get("ctx") or {}
            field = str(ctx.get("discriminator", "kind")).strip("'")
            allowed = ctx.get("expected_tags", ", ".join(repr(k) for k in SEARCH_MODELS))
            got = "required key is missing" if kind == "union_tag_not_found" else f"{_short(ctx.get('tag'))} is not known"
            lines.append(f"  {key}.{field}: {got} (allowed: {allowed})")
        else:
            msg = err["msg"].removeprefix("Value error, ")
            got = err.get("input")
            # a section-wide check (its message names the keys) would otherwise echo the whole section
            shown = "" if isinstance(got, dict) and kind == "value_error" else f" (got {_short(got)})"
            lines.append(f"  {key}: {msg}{shown}")
    return "\n".join(lines)


def _short(value, limit: int = 200) -> str:
    """``repr(value)``, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + " ...)"
