"""The limits every campaign value is checked against: finite sizes, times and names that fit the
machine and the file system (each constant says why it is what it is)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

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
                  "injections.parquet", "gates.parquet", "psd.h5", "candidates.cand", "report.html", "vt.json", "chunks", "banks",
                  "skymaps", "parts.jsonl",
                  "run.json")

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
Name = Annotated[str, Field(pattern=NAME_PATTERN, max_length=MAX_NAME)]

