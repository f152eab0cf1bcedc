"""The campaign schema: every section and key, its type, bounds and description (``gwbatch run``
reads nothing else)."""

from __future__ import annotations

import functools
import ipaddress
import re
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Discriminator,
    Field,
    Tag,
    create_model,
    field_validator,
    model_validator,
)

from gwbatch.conditioning import ConditioningSettings
from gwbatch.config.limits import (
    MAX_FREQUENCY,
    MAX_GPS,
    MAX_MEMORY,
    MAX_WALLTIME_HOURS,
    MAX_WORKERS,
    MIN_FILTER_CYCLES,
    MIN_FILTER_SAMPLES,
    MIN_MEMORY_FRACTION,
    MIN_WORKER_MEMORY,
    Name,
)
from gwbatch.config.strict import Hertz, Seconds, Snr, StrictModel
from gwbatch.config.text import short


#: Seconds added to a segment's start or end.
Pad = Annotated[float, Field(ge=-86400, le=86400)]


class SegmentSource(StrictModel):
    """One source of segments: a file (LIGO_LW segment XML, segwizard text, GWOSC timeline JSON or
    a GWOSC HDF5 file's bit) and which of its flags, for which detector."""

    file: Path = Field(description="segment file: LIGO_LW segment XML, segwizard text, GWOSC timeline JSON, "
                                   "or a GWOSC HDF5 strain file (one bit of its DQ or injection mask)")
    flag: str | None = Field(None, max_length=200,
                             description="XML: IFO:NAME[:VERSION] (needed when the file holds several flags); "
                                         "GWOSC HDF5: a bit name such as CBC_CAT2 or NO_CBC_HW_INJ")
    ifo: Name | None = Field(None, description="detector, for files that do not name it (segwizard text)")
    complement: bool = Field(False, description="use the times NOT in these segments (e.g. a GWOSC 'passes "
                                                "CAT2' flag or NO_CBC_HW_INJ)")
    padding: tuple[Pad, Pad] = Field((0.0, 0.0), description="seconds added to each segment's start and end "
                                                         "(start += first, end += second), each within a day")


class VetoSource(StrictModel):
    """A veto not in a veto-definer file: segments of a file, or the seconds where a bit of the
    store's DQ is unset (GWOSC's 'passes' bits), with a category."""

    category: Literal[1, 2, 3, 4] = Field(description="1: data removed before conditioning; 2, 4: triggers and "
                                                      "livetime removed; 3: hardware injections (data.hardware_injections)")
    file: Path | None = Field(None, description="segment file (as in data.segments); or give store_dq")
    store_dq: str | None = Field(None, max_length=64, description="a DQ bit of the store: vetoed where it is unset "
                                                                  "(e.g. CBC_CAT2 of a GWOSC store)")
    flag: str | None = Field(None, max_length=200, description="as in data.segments")
    ifo: Name | None = Field(None, description="detector (needed with store_dq and for files that do not name it)")
    complement: bool = Field(False, description="use the times NOT in the file's segments")
    padding: tuple[Pad, Pad] = Field((0.0, 0.0), description="seconds added to each segment's start and end")

    @model_validator(mode="after")
    def _one_source(self):
        if (self.file is None) == (self.store_dq is None):
            raise ValueError("give exactly one of file and store_dq")
        if self.store_dq is not None and (self.ifo is None or self.flag is not None or self.complement
                                          or self.padding != (0.0, 0.0)):
            raise ValueError("store_dq takes ifo and nothing else (flag, complement, padding are for files)")
        return self


class VetoConfig(StrictModel):
    """Vetoes by category (the veto-definer convention; docs/decisions.md)."""

    definer: Path | None = Field(None, description="veto-definer XML: flags with categories, validity and paddings")
    files: list[Path] = Field([], max_length=10000,
                              description="LIGO_LW segment XML files holding the veto definer's flags' segments")
    categories: list[Literal[1, 2, 4]] = Field([1, 2], description="categories applied (1: before conditioning; "
                                                                   "2, 4: triggers and livetime); 3 (hardware "
                                                                   "injections) follows data.hardware_injections")
    extra: list[VetoSource] = Field([], max_length=10000, description="vetoes not in the definer")

    @model_validator(mode="after")
    def _definer_needs_files(self):
        if self.definer is not None and not self.files:
            raise ValueError("definer needs files: the segment XML files holding its flags")
        if len(set(self.categories)) != len(self.categories):
            raise ValueError(f"categories must be distinct, got {short(self.categories)}")
        return self


class DataConfig(StrictModel):
    """Which data to analyse."""

    store: Path = Field(description="path of the Zarr strain store")
    ifos: list[Name] | None = Field(None, description="detectors/series to analyse; default: all in the store")
    start: float | None = Field(None, ge=0, lt=MAX_GPS,
                                description="GPS start of the analysis, in [0, 2**32) s; default: store start")
    duration: Seconds | None = Field(None, description="seconds to analyse (at most four years); default: to the "
                                                       "store end")
    dq_flags: list[str] = Field(["DATA"], description="DQ bits that must all be set for science time")
    zero_gap: Seconds | None = Field(
        0.01, description="runs of exact zeros at least this long (s) are gaps: masked like missing data, left out "
                          "of the livetime and reported (zero_samples per chunk and detector); null: zeros are data")
    segments: list[SegmentSource] | None = Field(
        None, max_length=10000, description="science segments (the union per detector; every analysed detector needs "
                                            "one); data outside them is removed before conditioning. Default: the "
                                            "store's DQ alone")
    vetoes: VetoConfig | None = Field(None, description="vetoes by category, from a veto definer and segment files")
    injections: Path | None = Field(
        None, description="injection file (LIGO_LW sim_inspiral or sim_burst XML, or PyCBC HDF): its signals are "
                          "generated with LALSuite and added to each chunk as it is read; the store is not modified")
    hardware_injections: Literal["flag", "veto"] = Field(
        "flag", description="hardware-injection times (category 3): flag the candidates in them (hw_injection), or "
                            "veto them like category 2")

    @field_validator("ifos")
    @classmethod
    def _unique_ifos(cls, v):
        if v is not None and (len(v) == 0 or len(set(v)) != len(v)):
            raise ValueError(f"must be a non-empty list of distinct names, got {short(v)}")
        return v


class PSDConfig(StrictModel):
    method: Literal["median-welch"] = "median-welch"
    segment: float = Field(4.0, gt=0, le=4096, description="Welch segment length (s, at most 4096); 50% overlap, "
                                                           "Hann window")


class GatingConfig(StrictModel):
    threshold: Snr | None = Field(None, description="gate whitened samples with |x| above this (σ); null: off")
    half_width: float = Field(0.25, gt=0, le=100, description="seconds zeroed on each side of a gated peak")
    taper: float = Field(0.1, gt=0, le=100, description="Tukey taper length (s) on each side of a gate")


class ConditioningConfig(StrictModel):
    whiten: bool = Field(True, description="whiten with the chunk's own PSD (strain); false for radio/SNR series")
    psd: PSDConfig = PSDConfig()
    filter_duration: float = Field(
        2.0, gt=0, le=1024, description="whitening filter length (s); half is cropped at data edges. It must hold "
                                        f"at least {MIN_FILTER_CYCLES:g} cycles of f_low (f_low x filter_duration >= "
                                        f"{MIN_FILTER_CYCLES:g}: its Hann taper smooths the inverse ASD over about "
                                        "2 / filter_duration Hz, which must stay well below f_low) and "
                                        f"{MIN_FILTER_SAMPLES} samples")
    f_low: float = Field(20.0, ge=0, le=MAX_FREQUENCY, description="whitening band low edge (Hz); below Nyquist")
    f_high: Hertz | None = Field(None, description="whitening band high edge (Hz, at most Nyquist); default Nyquist")
    gating: GatingConfig = GatingConfig()
    baseline: float | None = Field(
        None, gt=0, le=3600, description="running-median window (s) subtracted from an un-whitened series; null: off"
    )

    @model_validator(mode="after")
    def _band(self):
        if self.f_high is not None and self.f_high <= self.f_low:
            raise ValueError(f"f_high ({self.f_high}) must be above f_low ({self.f_low})")
        if self.psd.segment < self.filter_duration:
            raise ValueError(
                f"psd.segment ({self.psd.segment} s) must be at least filter_duration ({self.filter_duration} s)"
            )
        if self.whiten and self.f_low * self.filter_duration < MIN_FILTER_CYCLES:
            longer = f"filter_duration >= {MIN_FILTER_CYCLES / self.f_low:.3g} s or " if self.f_low > 0 else ""
            raise ValueError(
                f"filter_duration ({self.filter_duration:g} s) must hold at least {MIN_FILTER_CYCLES:g} cycles of "
                f"f_low ({self.f_low:g} Hz), or the whitening filter cannot resolve the band's low edge: use "
                f"{longer}f_low >= {MIN_FILTER_CYCLES / self.filter_duration:.3g} Hz")
        if self.gating.threshold is not None and not self.whiten:
            raise ValueError("gating.threshold is in whitened σ and needs whiten: true")
        if self.baseline is not None and self.whiten:
            raise ValueError("baseline removal is for un-whitened series; whitening already removes it")
        return self

    def settings(self) -> ConditioningSettings:
        """The section as the frozen settings the conditioning code takes."""
        return ConditioningSettings(
            whiten=self.whiten, psd_method=self.psd.method, psd_segment=self.psd.segment,
            filter_duration=self.filter_duration, f_low=self.f_low, f_high=self.f_high,
            gate_threshold=self.gating.threshold, gate_half_width=self.gating.half_width,
            gate_taper=self.gating.taper, baseline=self.baseline)


Range = Annotated[list[float], Field(min_length=2, max_length=2)]
#: Largest mass (solar masses) a bank range can name.
MAX_MASS = 1e4


class PlacementConfig(StrictModel):
    method: Literal["stochastic", "grid"] = "stochastic"
    minimal_match: float = Field(0.97, gt=0.5, lt=1.0, description="every point of the space matches a template this well")
    seed: int = Field(0, ge=0, lt=2**63)
    patience: int = Field(2000, ge=1, le=10**7,
                          description="stochastic: stop after this many rejected proposals in a row")
    max_templates: int = Field(50_000, ge=1, le=10**6)


class SpiirFilterConfig(StrictModel):
    """SPIIR construction (ALGORITHMS.md §2)."""

    overlap_target: float = Field(0.99, gt=0.5, lt=1.0, description="smallest eps whose response reaches this overlap")
    epsilons: list[Annotated[float, Field(gt=0, le=1)]] = Field([0.04, 0.02, 0.01, 0.005], min_length=1, max_length=16)
    alpha: float = Field(0.99, gt=0.0, le=1.0)
    beta: float = Field(0.25, gt=0, le=10)
    least_squares: bool = Field(True, description="solve for b by least squares (removes the phase bias)")
    autocorrelation_lags: int = Field(100, ge=1, le=10_000,
                                      description="lags each side of the autocorrelation chi-squared")
    multirate: bool = Field(True, description="run each filter at a rate matched to its frequency "
                                              "(gstlal-spiir's --downsample; gwbatch.spiir.multirate)")
    multirate_safety: float = Field(1.3, ge=1.05, le=4.0,
                                    description="a filter's rate is at least 2 x this x its frequency")
    multirate_tolerance: float = Field(0.001, ge=0.0, le=0.1,
                                       description="largest overlap a template may lose to multi-rate filtering "
                                                   "against its single-rate filters (else fewer filters move)")
    subbands: bool = Field(False, description="run a template's filters in 32 complex sub-band "
                                              "channels at 1/16 of the rate (gwbatch.spiir.subbands) when that "
                                              "loses at most multirate_tolerance of its overlap, else on the octave "
                                              "ladder; needs multirate")

    @model_validator(mode="after")
    def _subbands_are_multirate(self):
        if self.subbands and not self.multirate:
            raise ValueError("subbands is a multi-rate method: it needs multirate: true")
        return self


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
    f_low: Hertz = Field(30.0, description="templates start here (Hz); below sample_rate / 2")
    sample_rate: float = Field(4096.0, gt=0, le=MAX_FREQUENCY)
    placement: PlacementConfig = PlacementConfig()
    spiir: SpiirFilterConfig = SpiirFilterConfig()

    @model_validator(mode="after")
    def _ranges(self):
        if self.file is None and (self.mass1 is None or self.mass2 is None):
            raise ValueError("a bank needs either file: or both mass1: and mass2: ranges")
        if self.f_low >= self.sample_rate / 2:
            raise ValueError(f"f_low ({self.f_low:g} Hz) must be below the Nyquist frequency of sample_rate "
                             f"({self.sample_rate / 2:g} Hz)")
        for key in ("mass1", "mass2", "total_mass", "mass_ratio", "spin1z", "spin2z"):
            r = getattr(self, key)
            if r is not None and r[0] > r[1]:
                raise ValueError(f"{key} range must be [min, max], got {r}")
        for key in ("mass1", "mass2", "total_mass", "mass_ratio"):
            r = getattr(self, key)
            if r is not None and not 0 < r[0] <= r[1] <= MAX_MASS:
                raise ValueError(f"{key} must lie in (0, {MAX_MASS:g}], got {r}")
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


class CoincidenceConfig(StrictModel):
    min_ifos: int = Field(2, ge=1, le=64, description="detectors a candidate needs; 1 = single-series candidates")
    window: float = Field(0.005, ge=0, le=60, description="seconds allowed beyond the light travel time")
    cluster_window: float = Field(0.1, gt=0, le=3600, description="keep the loudest candidate within this many seconds")


#: ``background.slide_step`` and ``plan.chunk`` (s) where ``auto`` does not size them for the reach
#: (:func:`workflow.plan.resolve_spacing`).
DEFAULT_SLIDE_STEP = 1.0
DEFAULT_CHUNK = 128.0


class BackgroundConfig(StrictModel):
    slides: int = Field(100, ge=0, le=100_000, description="number of time slides (zero lag excluded)")
    slide_step: Annotated[float, Field(gt=0, le=86400)] | Literal["auto"] = Field("auto", description=(
        "shift step (s); detector j moves by k·step·j in slide k. auto (the default): 1 s, except for a search "
        "whose trials wrap within its chunks (spiir, with slides): the shortest step that keeps its trials "
        "independent, the next 0.01 s above twice the coincidence reach in whole samples"))
    deep_slides: Annotated[int, Field(ge=0, le=10_000_000)] | Literal["auto"] = Field("auto", description=(
        "further slides after `slides` that keep only background events ranked at or above the base background's "
        "tail-fit threshold: a deep background for the loud candidates (pulse: slides of the whole span; spiir: "
        "coherent trials within each chunk, a few reads each where the network SNR cannot reach the cut, up to "
        "plan.chunk / slide_step of them; burst: lags within each chunk, each as dear as a base one). auto (the "
        "default): pulse and spiir run as many as reach an IFAR of 1e4 yr per 30 days by counting (125000 slides "
        "in all), "
        "or as many as the span (pulse) or the shortest chunk (spiir) holds; burst runs none"))
    far_tail: int = Field(100, ge=0, le=10_000_000, description=(
        "loudest background events fitted with an exponential; a candidate louder than all background gets its "
        "FAR extrapolated from the fit (0: no fit, such FARs are the bound 1/T_bg)"))
    reference: str | None = Field(None, description=(
        "a finished run of the same search and settings over data without injections: this run's candidates get "
        "their FARs against its background and livetime instead of their own (PyCBC's practice for injection "
        "campaigns, whose own background holds their injections' shifted copies)"))
    hierarchical_removal: bool = Field(True, description=(
        "remove zero-lag candidates louder than all background, loudest first, from the background of the "
        "quieter ones (as pycbc_add_statmap); the FAR without removal is kept as far_no_removal"))


class PlanConfig(StrictModel):
    chunk: Seconds | Literal["auto"] = Field("auto", description=(
        "seconds of data each task owns (plus halos); at most four years. auto (the default): 128 s, except for a "
        "search whose trials wrap within its chunks (spiir, with slides): chunks of at least 128 s that each hold "
        "its trials at background.slide_step: with deep_slides auto those of an IFAR of 1e4 yr per 30 days "
        "(125000), else slides + deep_slides"))


JOBQUEUE_KINDS = ("slurm", "pbs", "htcondor")

_BYTES = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]i?b?|b)?\s*$", re.IGNORECASE)


def _bytes(text: str) -> float | None:
    """Bytes in an amount of memory as Dask reads it ('16GiB', '4000MB', '64G': k, M, G, T, P are powers
    of 1000, Ki, Mi, Gi, Ti, Pi of 1024), or None if ``text`` is not one."""
    match = _BYTES.match(text) if isinstance(text, str) else None
    if not match:
        return None
    number, unit = float(match.group(1)), (match.group(2) or "b").lower()
    if unit == "b":
        return number
    power = "kmgtp".index(unit[0]) + 1
    return number * (1024 if unit[1:2] == "i" else 1000) ** power


def _memory(v: str | None) -> str | None:
    if v is None:
        return v
    amount = _bytes(v)
    if amount is None or amount <= 0:
        raise ValueError("must be an amount of memory such as '16GiB', '4000MB' or '64G'")
    if not MIN_WORKER_MEMORY <= amount <= MAX_MEMORY:
        raise ValueError(f"must be between 512 MiB and 1 PiB (this is {amount:.4g} bytes), e.g. '16GiB'")
    return v


_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")


def _host_port(v: Any) -> Any:
    """``[host]:port``: port 0-65535; host empty, a hostname, IPv4 or bracketed IPv6."""
    if not isinstance(v, str):
        raise ValueError("must be '[host]:port', e.g. ':8787' or '127.0.0.1:8787'")
    host, colon, port = v.rpartition(":")
    if not colon or not re.fullmatch(r"\d{1,5}", port) or int(port) > 65535:
        raise ValueError("must be '[host]:port' with a port 0-65535, e.g. ':8787' or '127.0.0.1:8787'")
    if host.startswith("["):
        try:
            ok = host.endswith("]") and ipaddress.IPv6Address(host[1:-1]) is not None
        except ValueError:
            ok = False
    elif host and host.replace(".", "").isdigit():
        try:
            ok = ipaddress.IPv4Address(host) is not None
        except ValueError:
            ok = False
    else:
        ok = not host or bool(_HOSTNAME.match(host))
    if not ok:
        raise ValueError(f"host {short(host, 60)} is not a hostname, an IPv4 address or a bracketed IPv6 "
                         "address such as [::1]")
    return v


def _memory_limit(v: Any) -> Any:
    """``auto``, a fraction of the machine's memory in [0.01, 1], or an amount of at least 512 MiB."""
    allowed = (f"'auto', a fraction of the machine's memory in [{MIN_MEMORY_FRACTION:g}, 1] or an amount of at least "
               "512 MiB such as '4GiB'")
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        raise ValueError(f"must be {allowed}")
    if v == "auto":
        return v
    try:
        number = float(v)
    except (ValueError, OverflowError):
        number = None
    if number is not None:
        if not MIN_MEMORY_FRACTION <= number <= 1:
            raise ValueError(f"a bare number is a fraction of the machine's memory in [{MIN_MEMORY_FRACTION:g}, 1]; "
                             "for an amount give a unit, e.g. '4GiB'")
        return str(v)
    amount = _bytes(v)
    if amount is None or not MIN_WORKER_MEMORY <= amount <= MAX_MEMORY:
        raise ValueError(f"must be {allowed}")
    return v


class JobqueueConfig(StrictModel):
    """Batch jobs for the kinds ``slurm``, ``pbs`` and ``htcondor`` (dask-jobqueue): what one job asks
    for, and how many jobs the run may hold (adaptive scaling)."""

    queue: str | None = Field(None, description="partition (SLURM -p) or queue (PBS -q); HTCondor has none")
    account: str | None = Field(None, description="account charged (SLURM/PBS -A; HTCondor accounting_group)")
    walltime: str = Field("04:00:00", description="time limit of one job, HH:MM:SS (HTCondor: MY.MaxRuntime), "
                                                  f"at most {MAX_WALLTIME_HOURS}:00:00")
    cores: int = Field(1, ge=1, le=MAX_WORKERS, description="CPU cores per job, shared by its worker processes")
    processes: int = Field(1, ge=1, le=MAX_WORKERS,
                           description="Dask worker processes per job (each gets cores / processes threads)")
    memory: str | None = Field(None, description="memory per job, e.g. '16GiB' (required); each worker gets "
                                                 "memory / processes, at least 512 MiB")
    gpus: int = Field(0, ge=0, le=64, description="GPUs per job; when > 0 each worker is pinned to one GPU "
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
    minimum_jobs: int = Field(0, ge=0, le=10_000, description="adaptive scaling: jobs kept even when idle")
    maximum_jobs: int = Field(1, ge=1, le=10_000, description="adaptive scaling: most jobs held at once")
    start_timeout: float = Field(
        600.0, gt=0, le=7 * 86400,
        description="seconds to wait for the first worker (queue wait included) before giving up; at most a week")

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
        hours, minutes, seconds = v.split(":")
        if len(hours) > 6 or 3600 * int(hours) + 60 * int(minutes) + int(seconds) > 3600 * MAX_WALLTIME_HOURS:
            raise ValueError(f"must be at most {MAX_WALLTIME_HOURS}:00:00 (a year)")
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
        if self.memory is not None and _bytes(self.memory) / self.processes < MIN_WORKER_MEMORY:
            raise ValueError(
                f"memory ({self.memory}) gives each of the {self.processes} worker processes less than 512 MiB; "
                "give more memory or fewer processes")
        return self

    def walltime_seconds(self) -> int:
        h, m, s = (int(p) for p in self.walltime.split(":"))
        return 3600 * h + 60 * m + s


class ClusterConfig(StrictModel):
    kind: Literal["auto", "local", "local-cuda", "address", "in-process", "slurm", "pbs", "htcondor"] = Field(
        "auto", description="where tasks run: auto (local-cuda with GPUs, else local), local, local-cuda, address, "
                            "in-process, or batch jobs on slurm, pbs or htcondor (see cluster.jobqueue)")
    n_workers: int | None = Field(None, ge=1, le=MAX_WORKERS,
                                  description="workers (local: default one per core; local-cuda: one per GPU)")
    threads_per_worker: int | None = Field(
        None, ge=1, le=MAX_WORKERS,
        description="tasks a local worker runs at once; default 2 on a GPU worker (one task's reading, "
                    "conditioning and host steps overlap the other's kernels), 1 on a CPU worker")
    workers_per_gpu: int = Field(
        1, ge=1, le=MAX_WORKERS,
        description="local-cuda: worker processes on each GPU, each seeing only its GPU and planning its "
                    "tasks within its share of the GPU's memory (for campaigns whose tasks leave the GPU "
                    "idle while Python runs: many short chunks, small kernels)")
    memory_limit: str = Field("auto", description="memory of each local worker: 'auto', a fraction of the "
                                                  "machine's memory in [0.01, 1], or an amount of at least 512 MiB")
    address: str | None = Field(None, description="scheduler address for kind 'address'")
    dashboard_address: str = Field(":8787", description="where the Dask dashboard listens: [host]:port, port 0-65535")
    jobqueue: JobqueueConfig = Field(JobqueueConfig(), description="batch jobs for kinds slurm, pbs and htcondor")

    @field_validator("memory_limit", mode="before")
    @classmethod
    def _memory_limit(cls, v):
        return _memory_limit(v)

    @field_validator("dashboard_address", mode="before")
    @classmethod
    def _dashboard(cls, v):
        return _host_port(v)

    @model_validator(mode="after")
    def _workers_per_gpu(self):
        if self.workers_per_gpu > 1 and self.kind not in ("auto", "local-cuda"):
            raise ValueError(f"cluster.workers_per_gpu ({self.workers_per_gpu}) is for local GPU workers; kind "
                             f"{self.kind!r} does not start them (use kind local-cuda or auto)")
        return self

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
                raise ValueError(f"cluster.jobqueue.queue ({short(jq.queue)}) has no HTCondor equivalent; put submit "
                                 "commands such as 'requirements = ...' in cluster.jobqueue.job_extra_directives")
            bad = [d for d in jq.job_extra_directives if "=" not in d]
            if bad:
                raise ValueError(f"cluster.jobqueue.job_extra_directives: HTCondor takes 'key = value' submit "
                                 f"commands, got {short(bad[0])}")
        return self


class OutputConfig(StrictModel):
    dir: Path | None = Field(None, description="output directory; default runs/<name>")


def search_sections() -> dict[str, type[BaseModel]]:
    """The search sections by ``search.kind``: each registered search's own
    (:data:`gwbatch.searches.Search.section`).  The one arrow from the config up to the searches,
    taken when the campaign model is first built, so that a new search needs no change here."""
    from gwbatch.searches import search_sections as registered

    return registered()


def _search_kind(value: Any) -> str | None:
    """The ``kind`` of a search section (a mapping or a built section): the tag of the search union.
    A callable discriminator, because pydantic refuses a field discriminator with a before-validator."""
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return kind if kind is None or isinstance(kind, str) else short(kind, 60)


@functools.cache
def campaign_model() -> type[BaseModel]:
    """The :class:`Campaign` model, its ``search`` a union of the registered searches' sections
    (pydantic puts the kind in an error's location after "search")."""
    sections = search_sections()
    search_union = Annotated[typing.Union[tuple(Annotated[m, Tag(k)] for k, m in sections.items())],
                             Discriminator(_search_kind)]

    class Campaign(StrictModel):
        """A whole campaign: data, conditioning, search, coincidence, background, execution."""

        name: Name
        description: str = ""
        data: DataConfig
        conditioning: ConditioningConfig = ConditioningConfig()
        search: search_union
        coincidence: CoincidenceConfig = CoincidenceConfig()
        background: BackgroundConfig = BackgroundConfig()
        plan: PlanConfig = PlanConfig()
        cluster: ClusterConfig = ClusterConfig()
        backend: Literal["auto", "numpy", "cupy"] = "auto"
        output: OutputConfig = OutputConfig()

        @model_validator(mode="after")
        def _whitened_where_needed(self):
            if self.search.needs_whitening and not self.conditioning.whiten:
                raise ValueError(f"search kind {self.search.kind!r} needs whitened strain: set conditioning.whiten: "
                                 "true")
            return self

        @property
        def output_dir(self) -> Path:
            return self.output.dir if self.output.dir is not None else Path("runs") / self.name

    Campaign.__module__ = __name__
    Campaign.__qualname__ = "Campaign"
    return Campaign


@functools.cache
def shared_sections_model() -> type[BaseModel]:
    """The campaign's sections but ``search``: what the members of a multi-search campaign share."""
    campaign = campaign_model()
    fields = {name: (field.annotation, field) for name, field in campaign.model_fields.items() if name != "search"}
    shared = create_model("SharedSections", __base__=StrictModel, __module__=__name__, **fields)
    shared.output_dir = campaign.output_dir
    return shared


def __getattr__(name: str) -> Any:
    """``Campaign`` is built on first use (:func:`campaign_model`)."""
    if name == "Campaign":
        return campaign_model()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
