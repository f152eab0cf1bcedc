"""Campaign configuration: the schema and the one loader (the only module that reads YAML).

A campaign is one YAML file.  Unknown keys and wrong types are refused with a message that names
the key, the bad value and what is allowed.  Relative paths are taken relative to the directory
the command runs in.

Every file and ``--set`` value goes through one reader (:func:`read_yaml`): at most
:data:`MAX_YAML_BYTES`, strict UTF-8 without control characters, nesting at most
:data:`MAX_YAML_DEPTH` deep, at most :data:`MAX_YAML_NODES` values once aliases are expanded
(checked on the parser's events, before anything is built), safe tags only and no duplicate keys.
Every number of the schema has finite bounds; a boolean or a text is never read as a number.
:func:`physical_bounds` adds the rules that need the data's sample rate.
"""

from __future__ import annotations

import ipaddress
import math
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Iterable, Literal

import annotated_types
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gwbatch.coherent.skymap import TEMPERATURE
from gwbatch.errors import ConfigError, DataError

# ----------------------------------------------------------------------------------------------
# Limits

#: Longest stretch of time any key can name (s): four Julian years (data.duration, plan.chunk, ...).
MAX_SECONDS = 4 * 365.25 * 86400.0
#: GPS times are in [0, 2**32) s (until 2116).
MAX_GPS = 2.0**32
#: Highest frequency any key can name (Hz); the data's Nyquist frequency bounds it further.
MAX_FREQUENCY = 1e6
#: Largest threshold in sigma or SNR: far above any detection, so a larger value only disables the search.
MAX_SNR = 1000.0
#: Most workers, threads, cores or processes of one kind.
MAX_WORKERS = 1024
#: Least memory a Dask worker is given (below it a worker restarts on every task).
MIN_WORKER_MEMORY = 512 * 2**20
#: Smallest fraction of a machine's memory a worker may be given (a tiny one is as bad as a tiny amount).
MIN_MEMORY_FRACTION = 0.01
#: Most memory any key can name (1 PiB).
MAX_MEMORY = 2**50
#: Longest batch job (hours): a year.
MAX_WALLTIME_HOURS = 8760
#: Whitening: the filter must hold this many cycles of ``conditioning.f_low`` (f_low x filter_duration).
MIN_FILTER_CYCLES = 4.0
#: Whitening: the filter must be at least this many samples long at the data's rate.
MIN_FILTER_SAMPLES = 16
#: Sample indices are int64: no span of samples may exceed this.
MAX_SAMPLES = 2**62
#: Names (campaign, member, bank) become file names: at most this many characters.
MAX_NAME = 200
#: A path: at most PATH_MAX characters, each component at most NAME_MAX bytes (Linux).
MAX_PATH, MAX_PATH_COMPONENT = 4096, 255
#: Any other text value.
MAX_TEXT = 4096
#: A campaign or bank file, or one --set value (bytes).
MAX_YAML_BYTES = 2**20
#: Nesting of mappings and lists in one YAML document.
MAX_YAML_DEPTH = 32
#: Values (scalars, mappings, lists) in one YAML document once aliases are expanded.
MAX_YAML_NODES = 10_000
#: Lines of a validation error (one per bad key) shown at most.
MAX_ERROR_LINES = 20

#: The run directory's own entries: a member of a multi-search campaign (whose outputs go to
#: ``<output>/<member>/``) cannot take one of these names (compared without case).
RESERVED_NAMES = ("manifest.json", "candidates.parquet", "triggers.parquet", "background.parquet",
                  "injections.parquet", "gates.parquet", "report.html", "chunks", "banks", "skymaps", "parts.jsonl",
                  "run.json")

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
Name = Annotated[str, Field(pattern=NAME_PATTERN, max_length=MAX_NAME)]


# ----------------------------------------------------------------------------------------------
# Strict types: one check over every field, driven by its annotation


def _options(annotation: Any) -> list:
    """The types an annotation admits, through ``Annotated``, ``Optional`` and unions (None left out)."""
    if typing.get_origin(annotation) is Annotated:
        return _options(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [t for arg in typing.get_args(annotation) for t in _options(arg)]
    return [] if annotation is type(None) else [annotation]


def _constraints(annotation: Any) -> list:
    """``annotated_types`` constraints inside an annotation (e.g. ``PositiveFloat``'s ``Gt(0)``)."""
    if typing.get_origin(annotation) is Annotated:
        args = typing.get_args(annotation)
        inner = [c for m in args[1:] for c in (getattr(m, "metadata", None) or [m])]
        return inner + _constraints(args[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [c for arg in typing.get_args(annotation) for c in _constraints(arg)]
    return []


def _number(x: float) -> str:
    """A bound as a message shows it (``4294967296``, ``0.5``)."""
    return f"{x:.12g}"


def _range_text(constraints: list) -> str:
    """`` in (0, 1000]``, `` >= 0`` or ``''`` from Gt/Ge/Lt/Le constraints."""
    lo = hi = None
    for c in constraints:
        if isinstance(c, annotated_types.Gt):
            lo = f"({_number(c.gt)}"
        elif isinstance(c, annotated_types.Ge):
            lo = f"[{_number(c.ge)}"
        elif isinstance(c, annotated_types.Lt):
            hi = f"{_number(c.lt)})"
        elif isinstance(c, annotated_types.Le):
            hi = f"{_number(c.le)}]"
    if lo and hi:
        return f" in {lo}, {hi}"
    if lo:
        return f" {'>' if lo[0] == '(' else '>='} {lo[1:]}"
    if hi:
        return f" {'<' if hi[-1] == ')' else '<='} {hi[:-1]}"
    return ""


@dataclass(frozen=True)
class _Expect:
    """What a field takes, for the strict check: ``number``, ``numbers`` (a list), ``bool``, ``path`` or
    ``other``; ``noun`` says it in a message (``a number in (0, 1000]``)."""

    kind: str
    noun: str = ""


def _expectation(field) -> _Expect:
    """The strict check's view of a pydantic field, from its annotation and constraints."""
    options = _options(field.annotation)
    if options and all(t in (int, float) for t in options):
        noun = "a whole number" if all(t is int for t in options) else "a number"
        return _Expect("number", noun + _range_text([*field.metadata, *_constraints(field.annotation)]))
    if options and all(typing.get_origin(t) is list for t in options):
        inner = [a for t in options for a in typing.get_args(t)]
        items = [t for a in inner for t in _options(a)]
        if items and all(t in (int, float) for t in items):
            noun = "whole numbers" if all(t is int for t in items) else "numbers"
            return _Expect("numbers", f"a list of {noun}{_range_text([c for a in inner for c in _constraints(a)])}")
    if options == [bool]:
        return _Expect("bool")
    if options and all(t is Path for t in options):
        return _Expect("path")
    return _Expect("other")


_EXPECTATIONS: dict[tuple[type, str], _Expect] = {}


def _kind_of(value: Any) -> str | None:
    """Why ``value`` is not a number, or None if it is one."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (str, bytes)):
        return "text"
    if isinstance(value, int) and abs(value) > 2**1023:
        return "an integer too large for a number"
    return None


def _strict(value: Any, expect: _Expect) -> Any:
    """``value`` if it suits ``expect``; else a ValueError saying what is allowed."""
    if expect.kind == "number":
        why = _kind_of(value)
        if why:
            raise ValueError(f"must be {expect.noun}, not {why}")
    elif expect.kind == "numbers" and isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            why = _kind_of(item)
            if why:
                raise ValueError(f"must be {expect.noun}; item {i} is {why}")
    elif expect.kind == "bool":
        if not isinstance(value, bool):
            raise ValueError("must be true or false")
    elif expect.kind == "path":
        return check_path(value)
    return value  # other fields: pydantic refuses a boolean for a text, a choice or a section itself


def check_path(value: Any) -> Any:
    """A path that every file system takes: text without control characters, at most
    :data:`MAX_PATH` characters, each component at most :data:`MAX_PATH_COMPONENT` bytes."""
    if isinstance(value, Path):
        value = str(value)
    if not isinstance(value, str):
        return value  # pydantic says it is not a path
    if not value:
        raise ValueError("must be a path, not empty")
    bad = re.search(r"[\x00-\x1f\x7f]", value)
    if bad:
        raise ValueError(f"a path cannot hold the control character {bad.group()!r} (at character {bad.start()})")
    if len(value) > MAX_PATH:
        raise ValueError(f"a path has at most {MAX_PATH} characters, this one {len(value)}")
    for part in value.split("/"):
        size = len(part.encode("utf-8", "surrogatepass"))
        if size > MAX_PATH_COMPONENT:
            raise ValueError(f"each part of a path has at most {MAX_PATH_COMPONENT} bytes; {_short(part, 40)} has {size}")
    return value


class StrictModel(BaseModel):
    """Unknown keys refused, NaN and infinities refused, no text over :data:`MAX_TEXT` characters;
    every field checked by :func:`_strict` against its annotation before pydantic converts it."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False,
                              str_max_length=MAX_TEXT)

    @field_validator("*", mode="before")
    @classmethod
    def _strict_types(cls, value: Any, info: ValidationInfo) -> Any:
        key = (cls, info.field_name)
        if key not in _EXPECTATIONS:
            _EXPECTATIONS[key] = _expectation(cls.model_fields[info.field_name])
        return _strict(value, _EXPECTATIONS[key])


Seconds = Annotated[float, Field(gt=0, le=MAX_SECONDS)]
Hertz = Annotated[float, Field(gt=0, le=MAX_FREQUENCY)]
Snr = Annotated[float, Field(gt=0, le=MAX_SNR)]


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

    @field_validator("ifos")
    @classmethod
    def _unique_ifos(cls, v):
        if v is not None and (len(v) == 0 or len(set(v)) != len(v)):
            raise ValueError(f"must be a non-empty list of distinct names, got {_short(v)}")
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


#: Most boxcar rounds and widths per round of the pulse search.
MAX_ROUNDS, MAX_WIDTHS_PER_ROUND = 16, 1024


class PulseSearchConfig(StrictModel):
    """Single-pulse boxcar search (Adámek & Armour; ALGORITHMS.md §5)."""

    kind: Literal["pulse"] = "pulse"
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
        from gwbatch.pulse.plan import boxcar_plan  # the plan's own checks, one place

        try:
            boxcar_plan(v)
        except ValueError as exc:
            raise ValueError(str(exc)) from None
        return v


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
    bank: Path = Field(description="bank YAML file (see configs/banks/)")
    placement_psd: Literal["aLIGO", "AdVirgo", "KAGRA"] = Field(
        "aLIGO", description="design curve the templates are placed with (the same templates for every detector)"
    )
    psd: str = Field("data", description="PSD the filters are built for: 'data' (each detector's own) or a design curve")
    psd_seconds: float = Field(512.0, gt=0, le=4096,
                               description="with psd: data, seconds from the span start used (at most 4096)")
    threshold: Snr = Field(5.5, description="single-detector |z| threshold")
    cluster_window: float = Field(0.1, gt=0, le=3600, description="keep the loudest trigger within this many seconds")
    batch: int = Field(256, ge=1, le=65536, description="templates filtered per pass")
    bank_cache: Path | None = Field(
        None, description="directory of placed templates and built banks, by configuration, templates and PSD (a "
                          "bank serves PSDs within 1e-6 of its own); default <output>/banks. Campaigns that name "
                          "the same directory share them")
    coherent: CoherentConfig = CoherentConfig()

    @field_validator("psd")
    @classmethod
    def _psd(cls, v):
        if v not in ("data", "aLIGO", "AdVirgo", "KAGRA"):
            raise ValueError(f"must be 'data' or a design curve (aLIGO, AdVirgo, KAGRA), got {_short(v)}")
        return v


class BurstSearchConfig(StrictModel):
    """Unmodelled burst search, cWB style (ALGORITHMS.md §4): time-frequency pixels of whitened
    data, clusters, a coherent sky loop over HEALPix, events ranked by rho.  Its lags are
    ``background.slides`` shifts of ``background.slide_step`` per chunk."""

    kind: Literal["burst"] = "burst"
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
        1.0, gt=0, le=1e6, description="width of the skymaps, P ~ exp(Lo / 2T) with Lo the sky loop's likelihood")

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
    min_ifos: int = Field(2, ge=1, le=64, description="detectors a candidate needs; 1 = single-series candidates")
    window: float = Field(0.005, ge=0, le=60, description="seconds allowed beyond the light travel time")
    cluster_window: float = Field(0.1, gt=0, le=3600, description="keep the loudest candidate within this many seconds")


class BackgroundConfig(StrictModel):
    slides: int = Field(100, ge=0, le=100_000, description="number of time slides (zero lag excluded)")
    slide_step: float = Field(1.0, gt=0, le=86400, description="shift step (s); detector j moves by k·step·j in slide k")


class PlanConfig(StrictModel):
    chunk: Seconds = Field(128.0, description="seconds of data each task owns (plus halos); at most four years")


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
        raise ValueError(f"host {_short(host, 60)} is not a hostname, an IPv4 address or a bracketed IPv6 "
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
                raise ValueError(f"cluster.jobqueue.queue ({_short(jq.queue)}) has no HTCondor equivalent; put submit "
                                 "commands such as 'requirements = ...' in cluster.jobqueue.job_extra_directives")
            bad = [d for d in jq.job_extra_directives if "=" not in d]
            if bad:
                raise ValueError(f"cluster.jobqueue.job_extra_directives: HTCondor takes 'key = value' submit "
                                 f"commands, got {_short(bad[0])}")
        return self


class OutputConfig(StrictModel):
    dir: Path | None = Field(None, description="output directory; default runs/<name>")


def _search_kind(value: Any) -> str | None:
    """The ``kind`` of a search section (a mapping or a built section): the tag of the search union.
    A callable discriminator, because pydantic refuses a field discriminator with a before-validator."""
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return kind if kind is None or isinstance(kind, str) else _short(kind, 60)


class Campaign(StrictModel):
    """A whole campaign: data, conditioning, search, coincidence, background, execution."""

    name: Name
    description: str = ""
    data: DataConfig
    conditioning: ConditioningConfig = ConditioningConfig()
    search: Annotated[typing.Union[Annotated[PulseSearchConfig, Tag("pulse")], Annotated[SpiirSearchConfig, Tag("spiir")],
                                   Annotated[BurstSearchConfig, Tag("burst")]], Discriminator(_search_kind)]
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
# Reading YAML: one reader for campaign files, bank files and --set values

#: Characters YAML allows (its reader's own rule); anything else is a control character or not text.
_NON_PRINTABLE = re.compile("[^\x09\x0A\x0D\x20-\x7E\x85\xA0-\uD7FF\uE000-\uFFFD\U00010000-\U0010FFFF]")
#: Byte-order marks of encodings that are not UTF-8 (UTF-32 first: its mark starts like UTF-16's).
_BOMS = {b"\xff\xfe\x00\x00": "UTF-32", b"\x00\x00\xfe\xff": "UTF-32", b"\xff\xfe": "UTF-16", b"\xfe\xff": "UTF-16"}
#: libyaml's parser where PyYAML has it (fast, and like PyYAML's own, iterative).
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Refused(Exception):
    """A YAML text the reader refuses; the message is one line, without the source."""


class _Loader(_FAST_LOADER):
    """Safe tags only; a key given twice in one mapping is refused (YAML would silently keep the
    last); a value that cannot be built (a date out of range, an integer of more than 4300 digits)
    is a YAML error at its line; ``1e3`` is a number as in YAML 1.2 (YAML 1.1 reads it as text,
    which strict types would then refuse)."""

    def construct_mapping(self, node, deep=False):
        _no_duplicate_keys(self, node)
        return super().construct_mapping(node, deep=deep)

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError) as exc:
            raise yaml.constructor.ConstructorError(None, None, _clip(str(exc), 120), node.start_mark) from None


_Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$"),
                              list("-+0123456789."))


def _no_duplicate_keys(loader: _Loader, node) -> None:
    """Refuse a mapping node that gives a key twice (``<<`` merge keys aside: explicit keys override them)."""
    seen: dict = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node)
        try:
            first = seen.setdefault(key, key_node)
        except TypeError:  # unhashable: the constructor refuses it
            continue
        if first is not key_node:
            raise _Refused(f"key {_short(key, 80)} is given twice in one mapping (lines {first.start_mark.line + 1} "
                           f"and {key_node.start_mark.line + 1}); keep one")


def _decode(data: bytes) -> str:
    """Strict UTF-8 (a UTF-8 byte-order mark is dropped); otherwise say where and what to do."""
    for bom, name in _BOMS.items():
        if data.startswith(bom):
            raise _Refused(f"the file is {name} (it starts with a {name} byte-order mark); save it as UTF-8")
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        guess = "UTF-16 or UTF-32 without a byte-order mark" if data.count(b"\x00") * 4 > len(data) else "Latin-1?"
        raise _Refused(f"not UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start} (line {line}) is not UTF-8 "
                       f"text ({guess}); save the file as UTF-8") from None


def _check_characters(text: str) -> None:
    """Refuse NUL and other control characters (and lone surrogates), naming the line and column."""
    bad = _NON_PRINTABLE.search(text)
    if bad:
        at = bad.start()
        line, column = text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at)
        hint = " (the file looks like UTF-16: save it as UTF-8)" if text.count("\x00") * 4 > len(text) else ""
        raise _Refused(f"line {line}, column {column}: control character U+{ord(bad.group()):04X} is not allowed in "
                       f"a campaign; remove it{hint}")


def _check_structure(text: str) -> None:
    """Refuse, from the parser's events alone (before anything is built, and without recursion),
    nesting deeper than :data:`MAX_YAML_DEPTH` and more than :data:`MAX_YAML_NODES` values once
    aliases are expanded (an alias counts as the whole node it names: a "billion laughs" file
    stops here after a few thousand events)."""
    total, sizes, stack = 0, {}, []  # values so far; expanded size per anchor; open collections (anchor, start)
    try:
        for event in yaml.parse(text, Loader=_FAST_LOADER):
            total = _count_event(event, total, sizes, stack)
    except yaml.YAMLError as exc:  # libyaml's scanner reads ahead and stops flow nesting at 1000 levels itself
        if "maximum nesting depth" not in str(exc):
            raise
        mark = getattr(exc, "problem_mark", None)
        raise _Refused(f"line {mark.line + 1 if mark else 1}: nested more than {MAX_YAML_DEPTH} levels deep "
                       "(a campaign needs a few)") from None


def _count_event(event, total: int, sizes: dict, stack: list) -> int:
    """One parser event of :func:`_check_structure`: the values counted after it (``sizes``: expanded
    size of each complete anchor; ``stack``: open collections as (anchor, count at their start))."""
    line = event.start_mark.line + 1 if event.start_mark else 0
    if isinstance(event, yaml.AliasEvent):
        if event.anchor not in sizes:
            raise _Refused(f"line {line}: alias *{_clip(event.anchor, 40)} names no complete node before it "
                           "(an undefined or recursive alias)")
        total += sizes[event.anchor]
    elif isinstance(event, yaml.CollectionStartEvent):
        total += 1
        sizes.pop(event.anchor, None)
        stack.append((event.anchor, total - 1))
        if len(stack) > MAX_YAML_DEPTH:
            raise _Refused(f"line {line}: nested more than {MAX_YAML_DEPTH} levels deep (a campaign needs a few)")
    elif isinstance(event, yaml.CollectionEndEvent):
        anchor, start = stack.pop()
        if anchor is not None:
            sizes[anchor] = total - start
    elif isinstance(event, yaml.ScalarEvent):
        total += 1
        if event.anchor is not None:
            sizes[event.anchor] = 1
    if total > MAX_YAML_NODES:
        raise _Refused(f"line {line}: more than {MAX_YAML_NODES} values once aliases are expanded (a campaign "
                       "has a few hundred); is it an alias bomb?")
    return total


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """One line: where the YAML error is and what it is."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    what = " ".join(str(p) for p in (getattr(exc, "context", None), getattr(exc, "problem", None)) if p) or str(exc)
    return _clip(f"{where}: {' '.join(what.split())}", 300)


def read_yaml(text: str | bytes, source: str) -> Any:
    """The value of one YAML document (bytes: a file's content; str: a ``--set`` value), read within
    every limit of this module; otherwise a one-line :class:`ConfigError` that starts with ``source``."""
    try:
        if len(text) > MAX_YAML_BYTES:
            raise _Refused(f"larger than {MAX_YAML_BYTES} bytes (a campaign is a few kB)")
        if isinstance(text, bytes):
            text = _decode(text)
        _check_characters(text)
        _check_structure(text)
        return yaml.load(text, Loader=_Loader)
    except _Refused as exc:
        raise ConfigError(f"{source}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML{_yaml_problem(exc)}") from None


def read_yaml_file(path: str | Path, what: str) -> Any:
    """:func:`read_yaml` of a file; ``what`` names it in messages (``campaign file``, ``bank file``)."""
    name = _clip(str(path), 200)
    try:
        with open(path, "rb") as stream:
            data = stream.read(MAX_YAML_BYTES + 1)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {what} {name}: {getattr(exc, 'strerror', None) or _clip(str(exc), 100)}") from None
    return read_yaml(data, name)


# ----------------------------------------------------------------------------------------------
# Loading


def load_bank_config(path: str | Path, overrides: Iterable[str] = ()) -> BankConfig:
    """Read a bank YAML file (the ``bank:`` mapping or the file's top level)."""
    raw = read_yaml_file(path, "bank file")
    source = _clip(str(path), 200)
    if isinstance(raw, dict) and set(raw) == {"bank"}:
        raw = raw["bank"]
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: a bank must be a mapping of keys (name, approximant, mass1, ...)")
    for item in overrides:
        apply_override(raw, item)
    try:
        return BankConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source, BankConfig)) from None


#: Sections a member of a multi-search campaign may set for itself; the rest are shared.
MEMBER_SECTIONS = ("search", "conditioning", "coincidence", "background", "plan")
#: A member's name: its outputs go to ``<output>/<member>/`` and its campaign is ``<name>-<member>``.
MAX_MEMBER_NAME = 64


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


def check_member_name(member: Any, source: str) -> None:
    """A member name is a directory of the run: letters, digits, '_', '.', '-' (not first), at most
    :data:`MAX_MEMBER_NAME` characters, and none of :data:`RESERVED_NAMES` (any case)."""
    if not isinstance(member, str) or not re.fullmatch(NAME_PATTERN, member) or len(member) > MAX_MEMBER_NAME:
        raise ConfigError(f"{source}: searches.{_key_text(member)}: a member name is letters, digits, '_', '.', '-', "
                          f"not starting with '.', '_' or '-', at most {MAX_MEMBER_NAME} characters (got {_short(member)})")
    if member.lower() in {n.lower() for n in RESERVED_NAMES}:
        raise ConfigError(f"{source}: searches.{member}: {member!r} is a name of the run directory's own, where the "
                          f"member's outputs would go; choose another (reserved: {', '.join(RESERVED_NAMES)})")


def validate_suite(raw: dict, source: str = "campaign") -> Suite:
    """A multi-search campaign: ``searches`` maps member names to their own sections."""
    searches = raw.get("searches")
    if "search" in raw:
        raise ConfigError(f"{source}: give either search (one search) or searches (several), not both")
    if not isinstance(searches, dict) or not searches:
        raise ConfigError(f"{source}: searches must map member names to their sections, e.g. "
                          f"searches: {{burst: {{search: {{kind: burst}}}}}}; got {_short(searches)}")
    shared = {k: v for k, v in raw.items() if k != "searches"}
    top = validate_campaign({**shared, "search": {"kind": "pulse"}}, source)  # the shared sections alone
    members = {}
    for member, sections in searches.items():
        check_member_name(member, source)
        where = f"searches.{member}"
        if not isinstance(sections, dict) or "search" not in sections:
            raise ConfigError(f"{source}: {where} must be a mapping with at least a search section "
                              f"(got {_short(sections)})")
        unknown = [k for k in sections if k not in MEMBER_SECTIONS]
        if unknown:
            raise ConfigError(f"{source}: {where}.{_key_text(unknown[0])}: unknown key (allowed here: "
                              f"{', '.join(MEMBER_SECTIONS)}; cluster, backend, data and output are shared by all members)")
        member_raw = _merge(shared, sections)
        member_raw["name"] = f"{top.name}-{member}"
        member_raw["output"] = {"dir": str(top.output_dir / member)}
        members[member] = validate_campaign(member_raw, f"{source} ({where})")
    return Suite(top.name, top.description, members, top.cluster, top.backend, top.output_dir)


def load_run(path: str | Path, overrides: Iterable[str] = ()) -> Campaign | Suite:
    """Read a campaign YAML file with one search (:class:`Campaign`) or several (:class:`Suite`)."""
    raw = _read_campaign_yaml(path, overrides)
    source = _clip(str(path), 200)
    return validate_suite(raw, source) if "searches" in raw else validate_campaign(raw, source=source)


def load_campaign(path: str | Path, overrides: Iterable[str] = ()) -> Campaign:
    """Read a one-search campaign YAML file, apply ``key=value`` overrides and validate it."""
    raw = _read_campaign_yaml(path, overrides)
    source = _clip(str(path), 200)
    if "searches" in raw:
        raise ConfigError(f"{source} runs several searches (searches:); load it with load_run")
    return validate_campaign(raw, source=source)


def _read_campaign_yaml(path: str | Path, overrides: Iterable[str]) -> dict:
    raw = read_yaml_file(path, "campaign file")
    if not isinstance(raw, dict):
        raise ConfigError(f"{_clip(str(path), 200)}: a campaign must be a mapping of keys (name, data, search, ...), "
                          f"got {type(raw).__name__}")
    for item in overrides:
        apply_override(raw, item)
    return raw


def validate_campaign(raw: dict, source: str = "campaign") -> Campaign:
    try:
        return Campaign.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from None


def apply_override(raw: dict, item: str) -> None:
    """Apply one ``dotted.key=value`` override; the value is read as YAML (numbers, lists, null) by
    :func:`read_yaml`, with its limits."""
    if "=" not in item:
        raise ConfigError(f"--set expects key=value, got {_short(item)}")
    key, _, value = item.partition("=")
    parts = key.strip().split(".")
    if not all(parts) or len(key) > MAX_TEXT or len(parts) > MAX_YAML_DEPTH:
        raise ConfigError(f"--set: bad key {_short(key)}")
    shown = _key_text(key.strip())
    parsed = read_yaml(value, f"--set {shown}: value {_short(value, 80)}") if value.strip() else None
    node = raw
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            prefix = _key_text(".".join(parts[: depth + 1]))
            raise ConfigError(f"--set {shown}: {prefix} is a value ({_short(child)}), not a section")
        node = child
    node[parts[-1]] = parsed


# ----------------------------------------------------------------------------------------------
# Bounds that need the data


def physical_bounds(campaign: Campaign, sample_rate: float) -> None:
    """Refuse settings that the data's sample rate makes meaningless, naming the key, its value and
    the allowed range: whitening band edges at or above Nyquist, a whitening filter shorter than
    :data:`MIN_FILTER_SAMPLES` samples, a burst band or pixel bandwidth the rate cannot give, a
    chunk shorter than a sample, and spans whose sample counts overflow int64."""
    fs = float(sample_rate)
    if not (math.isfinite(fs) and fs > 0):
        raise DataError(f"the store's sample rate ({sample_rate!r} Hz) is not a positive number")
    nyquist = fs / 2.0
    cond = campaign.conditioning
    if cond.whiten:
        if cond.f_low >= nyquist:
            raise ConfigError(f"conditioning.f_low ({cond.f_low:g} Hz) must be below the Nyquist frequency of the "
                              f"store ({nyquist:g} Hz)")
        if cond.f_high is not None and cond.f_high > nyquist:
            raise ConfigError(f"conditioning.f_high ({cond.f_high:g} Hz) must be at most the Nyquist frequency of "
                              f"the store ({nyquist:g} Hz); leave it out for Nyquist")
        if cond.filter_duration * fs < MIN_FILTER_SAMPLES:
            raise ConfigError(f"conditioning.filter_duration ({cond.filter_duration:g} s) is "
                              f"{cond.filter_duration * fs:.3g} samples at {fs:g} Hz; it must be at least "
                              f"{MIN_FILTER_SAMPLES} samples ({MIN_FILTER_SAMPLES / fs:g} s)")
    for key, seconds in (("plan.chunk", campaign.plan.chunk), ("data.duration", campaign.data.duration)):
        if seconds is not None and seconds * fs < 1:
            raise ConfigError(f"{key} ({seconds:g} s) is shorter than one sample at {fs:g} Hz (at least {1 / fs:g} s)")
    for key, seconds in (("plan.chunk", campaign.plan.chunk), ("data.duration", campaign.data.duration),
                         ("data.start", campaign.data.start)):
        if seconds is not None and seconds * fs > MAX_SAMPLES:
            raise ConfigError(f"{key} ({seconds:g} s) is {seconds * fs:.3g} samples at {fs:g} Hz, more than a sample "
                              f"index holds (2**62); at most {MAX_SAMPLES / fs:.6g} s")
    if campaign.search.kind == "burst":
        _burst_bounds(campaign.search, fs)


def _burst_bounds(search: BurstSearchConfig, fs: float) -> None:
    """The burst band at most Nyquist; each pixel bandwidth a power-of-two window of at least 8
    samples with a pixel inside the band (the burst code's own rule, :func:`gwbatch.burst.tfmap.resolutions`)."""
    from gwbatch.burst.tfmap import resolutions

    if search.f_high > fs / 2.0:
        raise ConfigError(f"search.f_high ({search.f_high:g} Hz) must be at most the Nyquist frequency of the store "
                          f"({fs / 2.0:g} Hz)")
    try:
        resolutions(fs, search.resolutions, search.f_low, search.f_high)
    except ValueError as exc:
        raise ConfigError(f"search.resolutions: {exc}") from None


# ----------------------------------------------------------------------------------------------
# Messages


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
    """The header and one line per bad key (at most :data:`MAX_ERROR_LINES`), each naming the key, what
    is wrong or allowed, and the value it got, cut short."""
    lines = [f"{source}: invalid {'campaign' if root is None else 'bank'}"]
    errors = exc.errors()
    for err in errors[:MAX_ERROR_LINES]:
        tagged = tuple(err["loc"])
        loc = tuple(p for i, p in enumerate(tagged) if not _is_search_tag(tagged, i))
        key = _key_text(".".join(p if isinstance(p, str) else _short(p, 40) for p in loc) or "(top level)")
        kind = err["type"]
        if kind == "extra_forbidden":
            owner = _model_at(tagged, root)
            allowed = ", ".join(owner.model_fields) if owner else "see the documentation"
            lines.append(f"  {key}: unknown key (allowed here: {allowed})")
        elif kind == "missing":
            lines.append(f"  {key}: required key is missing")
        elif kind in ("union_tag_invalid", "union_tag_not_found"):  # search.kind
            ctx = err.get("ctx") or {}
            allowed = ", ".join(repr(k) for k in SEARCH_MODELS)
            got = "required key is missing" if kind == "union_tag_not_found" else f"{_short(ctx.get('tag'))} is not known"
            lines.append(f"  {key}.kind: {got} (allowed: {allowed})")
        else:
            msg = _clip(err["msg"].removeprefix("Value error, "), 300)
            got = err.get("input")
            # a section-wide check (its message names the keys) would otherwise echo the whole section
            shown = "" if isinstance(got, dict) and kind == "value_error" else f" (got {_short(got)})"
            lines.append(f"  {key}: {msg}{shown}")
    if len(errors) > MAX_ERROR_LINES:
        lines.append(f"  ... and {len(errors) - MAX_ERROR_LINES} more")
    return "\n".join(lines)


def _clip(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters."""
    return text if len(text) <= limit else text[: limit - 4] + " ..."


def _key_text(key: Any) -> str:
    """A key as a message shows it: quoted when it holds control characters, cut to 120 characters."""
    text = key if isinstance(key, str) else _short(key, 80)
    return _clip(text if text.isprintable() else repr(text), 120)


class _Lit(str):
    """Punctuation of :func:`_short`'s output (not a value to quote)."""


def _items(value) -> Iterable:
    """The pieces of a container's repr, lazily: punctuation and the values inside."""
    if isinstance(value, dict):
        yield _Lit("{")
        for i, (k, v) in enumerate(value.items()):
            yield from ((_Lit(", "),) if i else ())
            yield k
            yield _Lit(": ")
            yield v
        yield _Lit("}")
        return
    opening, closing = {list: ("[", "]"), tuple: ("(", ")"), set: ("{", "}"), frozenset: ("frozenset({", "})")}.get(
        type(value), ("[", "]"))
    yield _Lit(opening)
    for i, v in enumerate(value):
        yield from ((_Lit(", "),) if i else ())
        yield v
    yield _Lit("," + closing if isinstance(value, tuple) and len(value) == 1 else closing)


def _scalar_repr(value: Any, limit: int) -> str:
    """``repr`` of a non-container, never longer than about ``limit`` (huge integers and texts are cut first)."""
    if isinstance(value, str):
        return repr(value[: limit + 1])
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * limit:
        return f"<integer of {value.bit_length()} bits>"
    try:
        return repr(value)[: limit + 1]
    except Exception:  # a value whose repr fails is shown by its type
        return f"<{type(value).__name__}>"


_END = object()


def _short(value: Any, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters, built piece by piece and stopped at the limit:
    never expands more of a value (shared or recursive parts included) than it shows."""
    pieces, size, stack = [], 0, [iter((value,))]
    while stack and size <= limit:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
            continue
        if isinstance(item, _Lit):
            piece = str(item)
        elif isinstance(item, (dict, list, tuple)) or (isinstance(item, (set, frozenset)) and item):
            stack.append(_items(item))
            continue
        else:
            piece = _scalar_repr(item, limit)
        pieces.append(piece)
        size += len(piece)
    text = "".join(pieces)
    return text if not stack and len(text) <= limit else _clip(text, limit)
