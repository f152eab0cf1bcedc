"""The strain store: one Zarr v3 group per data set.

Layout::

    strain   (ifo, time)        float32, chunked (1, C) along time, zstd with its frame checksum;
                                never-written chunks read as NaN (a gap)
    dq       (ifo, second)      uint8 bit mask; second k covers [t0 + k, t0 + k + 1); fill value 0
    ifo      (ifo)              detector / series names (equal to the ``ifos`` attribute)
    checksum (ifo, store_chunk) uint64: per strain chunk, a 64-bit BLAKE2b digest of its key
                                ``"row/index"`` and its file's bytes; 0: never written
    injections/                 optional: one 1-D array per column of the injection table
    native_tail/                stores made from channel files: per detector, its last native
                                samples (:class:`NativeTail`), so ``ingest frames --append``
                                can extend the store exactly

A filterbank store (format :data:`FILTERBANK_FORMAT`, from ``gwbatch ingest filterbank``) has the
same layout, attributes and contract with radio spectra in place of strain::

    spectra  (beam, channel, time)  at the recorded precision (uint8 for 1-8 bit samples, uint16,
                                    float32), chunked (1, channels, C); never-written chunks are gaps

and the ``frequencies`` attribute (channel centres, MHz, in channel order); ``ifos`` names its
beams.  :class:`SampleLayout` is the difference between the two, and nothing else is.

Attributes: ``format`` (:data:`STORE_FORMAT`), ``sample_rate`` (Hz), ``t0`` (exact GPS, decimal
string), ``ifos``, ``dq_bits`` (names of the mask bits, bit 0 first), ``provenance``.  There is no
time coordinate: times follow from ``t0`` and ``sample_rate`` (a float64 coordinate for a day at
16 kHz would be 11 GiB).  Unwritten strain reads as NaN and unwritten DQ as 0, so a gap is masked,
never zero.

The store's contract (:func:`read_meta` checks it before any task reads strain): every attribute
and array above has its type, shape and dtype, the ``dq`` array has one value per second of the
strain at ``sample_rate``, and the ``checksum`` table's ``attributes_sha256`` matches the
attributes and layout it was sealed with.  Every strain chunk file read is checked against the
table first, so a chunk edited, swapped with another or deleted after the store was written is a
:class:`DataError`, never different numbers.  A deliberate edit is blessed with :func:`seal`
(``gwbatch seal STORE``), which also upgrades stores of format 1 (no checksums).

A store is written under a temporary name (``.NAME.partial-PID``, holding an owner file with the
host and PID) and renamed into place by :meth:`StoreWriter.commit`: an interrupted write never
leaves a store that looks complete, and the next writer of the same path removes partial
directories whose process on this host is gone.  A resumable ingest writes ``.NAME.resume-KEY``
instead, kept when interrupted and taken over by the next ingest with the same inputs.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import os
import shutil
import socket
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numcodecs
import numpy as np
import pandas as pd
import xarray as xr
import zarr
from zarr.abc.codec import ArrayArrayCodec

from gwbatch.errors import DataError, OutputError
from gwbatch.io.atomic import process_alive
from gwbatch.gpstime import GPSTime, check_gps_range, sample_times

STORE_FORMAT = "gwbatch-strain/2"
#: Formats :func:`seal` upgrades (format 1: the same layout without the ``checksum`` table).
OLD_FORMATS = ("gwbatch-strain/1",)
#: The format of a filterbank store: radio spectra ``(beam, channel, time)`` at their recorded precision.
FILTERBANK_FORMAT = "gwbatch-filterbank/1"
#: Sample types a filterbank store keeps (1, 2, 4 and 8-bit samples are kept as uint8).
SPECTRA_DTYPES = ("uint8", "uint16", "float32")
#: GWOSC ``quality/simple/DQmask`` bits, bit 0 first (127 = all pass).
DQ_BITS = ("DATA", "CBC_CAT1", "CBC_CAT2", "CBC_CAT3", "BURST_CAT1", "BURST_CAT2", "BURST_CAT3")
DEFAULT_CHUNK_SAMPLES = 1 << 20
#: zstd with its frame checksum: a chunk corrupted on disk fails to decode instead of reading as
#: wrong numbers (a flipped byte in a zstd frame without a checksum can decode to garbage).
STRAIN_COMPRESSOR = zarr.codecs.ZstdCodec(level=0, checksum=True)
#: The group of a frame store that keeps each detector's last native samples (:class:`NativeTail`).
NATIVE_TAIL = "native_tail"
#: Sample rates a store may have (Hz): below 1 mHz a sample is over 16 minutes; above 1 MHz
#: float64 GPS times (0.24 µs resolution at 1e9 s) no longer resolve a few samples.
MIN_SAMPLE_RATE, MAX_SAMPLE_RATE = 1e-3, 1e6
#: The longest store (s): 4 Julian years.  A join of files whose start times are wildly apart (a
#: corrupt ``Xstart``) would otherwise make a decades-long store of NaN.
MAX_STORE_SECONDS = 4 * 365.25 * 86400.0
#: The checksum table's ``algorithm`` attribute.
CHECKSUM_ALGORITHM = "blake2b-64 of the chunk key 'row/index', a NUL byte and the chunk file's bytes; 0: never written"
_OWNER = ".gwbatch-writer.json"
#: A partial directory without an owner file (from gwbatch before format 2) is removed once its
#: PID is gone here and it is older than this (s).
_LEGACY_PARTIAL_AGE = 60.0


@dataclass(frozen=True)
class SampleLayout:
    """What a store's sample array is: strain ``(ifo, time)`` float32 (no ``frequencies``), or radio
    spectra ``(beam, channel, time)`` of ``dtype`` with one channel per entry of ``frequencies`` (MHz)."""

    dtype: str = "float32"
    frequencies: tuple[float, ...] = ()

    @property
    def spectra(self) -> bool:
        return bool(self.frequencies)

    @property
    def format(self) -> str:
        return FILTERBANK_FORMAT if self.spectra else STORE_FORMAT

    @property
    def array(self) -> str:
        """The sample array's name in the group."""
        return "spectra" if self.spectra else "strain"

    @property
    def dimensions(self) -> tuple[str, ...]:
        return ("beam", "channel", "time") if self.spectra else ("ifo", "time")

    @property
    def n_channels(self) -> int:
        return len(self.frequencies)

    @property
    def fill_value(self):
        """What a never-written chunk holds in the array: NaN, or 0 for integer spectra (gaps are known
        from the checksum table and the DQ, never from the value)."""
        return np.nan if self.dtype == "float32" else 0

    def shape(self, n_rows: int, n_samples: int) -> tuple[int, ...]:
        return (n_rows, self.n_channels, n_samples) if self.spectra else (n_rows, n_samples)

    def chunks(self, chunk_samples: int) -> tuple[int, ...]:
        return (1, self.n_channels, chunk_samples) if self.spectra else (1, chunk_samples)

    def chunk_file(self, root: Path, row: int, index: int) -> Path:
        """The file of chunk ``index`` of row ``row`` (Zarr v3 default keys, separator '/')."""
        return root / self.array / "c" / str(row) / ("0" if self.spectra else "") / str(index)

    def row_directory(self, root: Path, row: int) -> Path:
        return self.chunk_file(root, row, 0).parent

    def decode(self, data: bytes, chunk_samples: int) -> np.ndarray:
        """A chunk file's samples (zstd, then little-endian ``dtype``): ``(chunk_samples,)`` of strain or
        ``(channels, chunk_samples)`` of spectra; ValueError if the size is not that."""
        raw = numcodecs.Zstd().decode(data)
        x = np.frombuffer(raw, dtype=np.dtype(self.dtype).newbyteorder("<"))
        expected = chunk_samples * max(1, self.n_channels)
        if x.size != expected:
            raise ValueError(f"it decodes to {x.size} values, not {expected}")
        return x.reshape(self.n_channels, chunk_samples) if self.spectra else x


#: The strain store's layout.
STRAIN = SampleLayout()


class _Grid:
    """Sample and chunk arithmetic of a store's strain (``n_samples`` in chunks of ``chunk_samples``)."""

    ifos: tuple[str, ...]
    sample_rate: float
    n_samples: int
    chunk_samples: int

    @property
    def duration(self) -> float:
        return self.n_samples / self.sample_rate

    @property
    def n_chunks(self) -> int:
        """Strain chunks per detector: ``ceil(n_samples / chunk_samples)``."""
        return -(-self.n_samples // self.chunk_samples)

    def rows(self, ifos: Iterable[str]) -> list[int]:
        """The store rows of ``ifos``, in that order; unknown names are a :class:`DataError`."""
        ifos = list(ifos)
        missing = [ifo for ifo in ifos if ifo not in self.ifos]
        if missing:
            raise DataError(f"detector(s) {', '.join(missing)} not in the store; it has {', '.join(self.ifos)}")
        return [self.ifos.index(ifo) for ifo in ifos]

    def chunk_range(self, start: int, stop: int) -> range:
        """Indices of the strain chunks holding any of the samples ``[start, stop)`` (clipped to the store)."""
        lo, hi = max(int(start), 0), min(int(stop), self.n_samples)
        if hi <= lo:
            return range(0)
        return range(lo // self.chunk_samples, (hi - 1) // self.chunk_samples + 1)


@dataclass(frozen=True)
class StoreMeta(_Grid):
    """What a store holds, read from its attributes and small arrays (no strain is loaded).

    ``checksums`` is the ``(ifo, store_chunk)`` uint64 table of strain chunk digests (0: never
    written); chunk ``k`` holds samples ``[k C, (k + 1) C)`` with ``C = chunk_samples``.
    """

    path: Path
    ifos: tuple[str, ...]
    sample_rate: float
    t0: GPSTime
    n_samples: int
    chunk_samples: int
    dq_bits: tuple[str, ...]
    provenance: dict = field(default_factory=dict)
    has_injections: bool = False
    checksums: np.ndarray | None = field(default=None, compare=False, repr=False)
    layout: SampleLayout = STRAIN

    @property
    def end(self) -> float:
        return float(self.t0) + self.duration

    def times(self, index) -> np.ndarray:
        """Float64 GPS times of sample indices."""
        return sample_times(self.t0, index, self.sample_rate)

    def checksum(self, row: int, index: int) -> int:
        """The checksum of strain chunk ``index`` of row ``row`` (0: never written)."""
        return int(self.checksums[row, index])

    def slice(self, start: int, stop: int) -> "StoreSlice":
        """What a task that reads samples ``[start, stop)`` needs of the store: the grid and the
        checksums of the strain chunks under those samples, nothing else."""
        chunks = self.chunk_range(start, stop)
        first = chunks.start if len(chunks) else 0
        return StoreSlice(self.path, self.ifos, self.sample_rate, str(self.t0), self.n_samples, self.chunk_samples,
                          first, np.ascontiguousarray(self.checksums[:, first:first + len(chunks)]), self.layout)

    def dq_mask(self, names: Iterable[str]) -> int:
        """Bit mask for DQ flag names; unknown names are refused with the allowed list."""
        mask = 0
        for name in names:
            if name not in self.dq_bits:
                raise DataError(
                    f"DQ flag {name!r} is not in store {self.path} (its flags: {', '.join(self.dq_bits)})"
                )
            mask |= 1 << self.dq_bits.index(name)
        return mask


@dataclass(frozen=True)
class StoreSlice(_Grid):
    """The part of a store a chunk task reads (:meth:`StoreMeta.slice`): the strain's grid and the
    checksums of strain chunks ``[first, first + k)`` of every detector, ``(n_ifo, k)``."""

    path: Path
    ifos: tuple[str, ...]
    sample_rate: float
    t0: str
    n_samples: int
    chunk_samples: int
    first: int
    checksums: np.ndarray = field(compare=False, repr=False)
    layout: SampleLayout = STRAIN

    def checksum(self, row: int, index: int) -> int:
        k = index - self.first
        if not 0 <= k < self.checksums.shape[1]:
            raise DataError(f"store {self.path}: strain chunk {index} is outside the chunks this task was given "
                            f"({self.first}..{self.first + self.checksums.shape[1] - 1})")
        return int(self.checksums[row, k])


# ---------------------------------------------------------------------------------------------
# checksums


def chunk_digest(row: int, index: int, data: bytes) -> int:
    """64-bit BLAKE2b digest of a strain chunk file bound to its position: the key ``"row/index"``,
    a NUL byte, then the file's bytes.  Never 0 (0 marks a chunk never written).

    Cost, measured on the 2-core development machine for a 1M-sample chunk of noise (a 3.9 MB
    file): 4.2 ms for the digest (~0.9 GB/s), 3.3 ms to decode; a verified read of the chunk takes
    8.1 ms against 5.6 ms through zarr, a few ms per chunk against the seconds a task spends
    searching it."""
    h = hashlib.blake2b(digest_size=8)
    h.update(f"{int(row)}/{int(index)}\0".encode())
    h.update(data)
    return int.from_bytes(h.digest(), "little") or 1


def _attributes_digest(ifos, sample_rate: float, t0: GPSTime, dq_bits, n_samples: int, chunk_samples: int,
                       dq_sha256: str | None, layout: SampleLayout = STRAIN) -> str:
    """SHA-256 of what gives the strain its meaning (format, detectors, rate, t0, DQ bit names,
    shape) and of the data-quality array's content: sealed with the checksum table, so an attribute
    or a DQ value edited afterwards is seen.  ``dq_sha256`` None: the digest of stores sealed before
    the DQ array was (recognised, to ask for a new seal)."""
    fields = {"format": layout.format, "ifos": list(ifos), "sample_rate": float(sample_rate), "t0": str(t0),
              "dq_bits": list(dq_bits), "n_samples": int(n_samples), "chunk_samples": int(chunk_samples)}
    if dq_sha256 is not None:
        fields["dq_sha256"] = dq_sha256
    if layout.spectra:
        fields.update(dtype=layout.dtype, frequencies=[float(f) for f in layout.frequencies])
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def _dq_sha256(values: np.ndarray) -> str:
    """SHA-256 of the DQ array: its shape and its uint8 bytes."""
    values = np.ascontiguousarray(values, dtype=np.uint8)
    h = hashlib.sha256(repr(values.shape).encode())
    h.update(values.tobytes())
    return h.hexdigest()


def _checksum_table(root: Path, n_ifo: int, n_chunks: int, chunk_samples: int, *, decode: bool,
                    carried: np.ndarray | None = None, layout: SampleLayout = STRAIN) -> np.ndarray:
    """The ``(n_ifo, n_chunks)`` digest table of the strain chunk files under ``root`` (0 where
    there is none); with ``decode``, each chunk is also decoded and a damaged one refused.
    ``carried``: digests already known of files linked from another store (nonzero entries), taken
    as they are while the file is still shared (more than one link) rather than read again."""
    table = np.zeros((n_ifo, n_chunks), dtype=np.uint64)
    for row in range(n_ifo):
        directory = layout.row_directory(root, row)
        if not directory.is_dir():
            continue
        for entry in os.scandir(directory):
            name = entry.name
            if not (name.isdigit() and name == str(int(name)) and int(name) < n_chunks):
                continue  # not a chunk of the grid: never read
            index = int(name)
            if carried is not None and index < carried.shape[1] and carried[row, index] and not decode \
                    and entry.stat().st_nlink > 1:
                table[row, index] = carried[row, index]
                continue
            data = Path(entry.path).read_bytes()
            if decode:
                try:
                    layout.decode(data, chunk_samples)
                except Exception as exc:
                    raise DataError(
                        f"store {root}: {layout.array} chunk file {layout.chunk_file(Path(), row, index)} cannot be decoded "
                        f"({type(exc).__name__}: {exc}); restore it or re-ingest the store before sealing"
                    ) from exc
            table[row, index] = chunk_digest(row, index, data)
    return table


def _write_seal(group: zarr.Group, table: np.ndarray, attributes_sha256: str) -> None:
    arr = group.create_array(
        "checksum", shape=table.shape, chunks=(table.shape[0], max(1, min(table.shape[1], 1 << 16))),
        dtype="uint64", fill_value=0, dimension_names=("ifo", "store_chunk"), overwrite=True,
    )
    arr[...] = table
    arr.attrs.update({"algorithm": CHECKSUM_ALGORITHM, "attributes_sha256": attributes_sha256})


def _consolidate(path: Path) -> None:
    with warnings.catch_warnings():
        # zarr-python's consolidated metadata for v3 is an extension; gwbatch reads each array's own.
        warnings.filterwarnings("ignore", message="Consolidated metadata", category=UserWarning)
        zarr.consolidate_metadata(path)


# ---------------------------------------------------------------------------------------------
# writing


def remove_stale_partials(path: str | os.PathLike) -> list[Path]:
    """Remove ``.NAME.partial-PID`` directories of store ``path`` left by a writer killed on this
    host (its owner file names this host and a PID that is gone); returns those removed.

    Partial directories of other hosts, or of live processes, are left alone."""
    path = Path(path)
    removed, host = [], socket.gethostname()
    for partial in path.parent.glob(f".{path.name}.partial-*"):
        if not partial.is_dir() or partial.is_symlink():
            continue
        try:
            owner = json.loads((partial / _OWNER).read_text())
            stale = owner.get("host") == host and not process_alive(int(owner["pid"]))
        except (OSError, ValueError, KeyError, TypeError):  # no owner file: a writer of format 1
            suffix = partial.name.rsplit("-", 1)[-1]
            try:
                old = time.time() - partial.stat().st_mtime > _LEGACY_PARTIAL_AGE
            except OSError:
                continue
            stale = suffix.isdigit() and not process_alive(int(suffix)) and old
        if stale:
            shutil.rmtree(partial, ignore_errors=True)
            removed.append(partial)
    return removed


def _drain_zarr() -> None:
    """Wait (at most 10 s) for zarr's background writes: an exception raised in this thread by a
    signal handler leaves the chunk write it interrupted running in zarr's event loop."""
    try:
        from zarr.core.sync import _get_loop

        loop = _get_loop()

        async def pending():
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            await asyncio.wait(tasks, timeout=10.0) if tasks else None

        asyncio.run_coroutine_threadsafe(pending(), loop).result(timeout=12.0)
    except Exception:
        pass


def _check_sample_rate(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise DataError(f"{what} is {_short(value)}; expected a number of Hz in [{MIN_SAMPLE_RATE:g}, {MAX_SAMPLE_RATE:g}]")
    try:
        rate = float(value)
    except OverflowError:
        rate = math.inf
    if not (math.isfinite(rate) and MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE):
        raise DataError(f"{what} is {rate!r}; expected a finite number of Hz in [{MIN_SAMPLE_RATE:g}, {MAX_SAMPLE_RATE:g}]")
    return rate


def whole_hz_rate(spacing: float, what: str) -> int:
    """The whole-Hz sample rate of a file header's sample spacing ``spacing`` (s), named ``what``
    in the error (e.g. ``"FILE: Xspacing"``): positive, within [:data:`MIN_SAMPLE_RATE`,
    :data:`MAX_SAMPLE_RATE`] and a whole number of Hz (every archive's rates are)."""
    if not (np.isfinite(spacing) and spacing > 0):
        raise DataError(f"{what} {spacing!r} is not a positive number of seconds")
    rate = 1.0 / spacing
    if not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE:
        raise DataError(f"{what} {spacing!r} s is a sample rate of {rate:g} Hz; expected "
                        f"{MIN_SAMPLE_RATE:g} to {MAX_SAMPLE_RATE:g} Hz")
    if abs(rate - round(rate)) > 1e-6:
        raise DataError(f"{what} {spacing!r} s is a sample rate of {rate!r} Hz, not a whole number of Hz "
                        f"(expected e.g. 4096)")
    return int(round(rate))


def _check_dq_bits(value, what: str) -> tuple[str, ...]:
    ok = (isinstance(value, (list, tuple)) and 1 <= len(value) <= 8 and all(isinstance(v, str) and v for v in value)
          and len(set(value)) == len(value))
    if not ok:
        raise DataError(f"{what} is {_short(value)}; expected a list of 1 to 8 distinct names (bit 0 first)")
    return tuple(value)


def _check_duration(n_samples: int, rate: float, what: str) -> None:
    if n_samples / rate > MAX_STORE_SECONDS:
        raise DataError(f"{what}: {n_samples} samples at {rate:g} Hz is {n_samples / rate:.6g} s, longer than the "
                        f"{MAX_STORE_SECONDS:.0f} s (4 years) a store may span")


def is_gwbatch_store(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a directory (not a link) holding a gwbatch store of any format: what
    ``--overwrite`` may replace."""
    path = Path(path)
    if path.is_symlink() or not path.is_dir():
        return False
    try:
        attrs = json.loads((path / "zarr.json").read_text()).get("attributes") or {}
    except (OSError, ValueError, AttributeError):
        return False
    return attrs.get("format") in (STORE_FORMAT, FILTERBANK_FORMAT, *OLD_FORMATS)


class StoreWriter:
    """Create a store; write strain and DQ region by region; :meth:`commit` to publish it.

    Use as a context manager: leaving the block by an exception (``KeyboardInterrupt``, or the
    exception a SIGTERM handler raises) deletes the partial store.  A resumable writer
    (``resume_key``: a digest of everything the store is made from) writes ``.NAME.resume-KEY``
    instead, keeps it when interrupted, and takes it over (:attr:`resumed`) when the same key comes
    again; bad input (:class:`DataError`) still removes it.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        ifos: Iterable[str],
        sample_rate: float,
        t0: GPSTime | str | float,
        n_samples: int,
        chunk_samples: int = DEFAULT_CHUNK_SAMPLES,
        dq_bits: Iterable[str] = DQ_BITS,
        provenance: dict | None = None,
        overwrite: bool = False,
        resume_key: str | None = None,
        layout: SampleLayout = STRAIN,
    ) -> None:
        self.path = Path(path)
        self.layout = _check_layout(layout, f"store {path}")
        self.ifos = tuple(ifos)
        if not self.ifos or not all(isinstance(i, str) and i for i in self.ifos):
            raise DataError(f"a store needs at least one detector/series name, got {list(self.ifos)}")
        if len(set(self.ifos)) != len(self.ifos):
            raise DataError(f"duplicate detector names: {list(self.ifos)}")
        self.sample_rate = _check_sample_rate(sample_rate, "sample rate")
        if n_samples <= 0:
            raise DataError(f"a store needs at least one sample, got n_samples={n_samples}")
        if int(chunk_samples) < 1:
            raise DataError(f"chunk_samples must be at least 1, got {chunk_samples}")
        _check_duration(int(n_samples), self.sample_rate, f"store {self.path}")
        if self.path.exists() or self.path.is_symlink():
            if not overwrite:
                raise OutputError(f"{self.path} already exists; pass --overwrite to replace it")
            if not is_gwbatch_store(self.path):
                raise OutputError(f"{self.path} exists and is not a gwbatch store: --overwrite replaces only a store "
                                  "(never other files or directories); choose another --out")
        self.t0 = check_gps_range(GPSTime.parse(t0), f"store start t0 of {self.path}")
        self.n_samples = int(n_samples)
        self.chunk_samples = int(min(chunk_samples, self.n_samples))
        self.dq_bits = _check_dq_bits(list(dq_bits), "dq_bits")
        self.overwrite = overwrite
        self.resume_key = resume_key
        self.resumed = False
        self._carried = np.zeros((len(self.ifos), -(-self.n_samples // self.chunk_samples)), dtype=np.uint64)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"cannot create the directory of {self.path}: {exc.strerror or exc}") from None
        remove_stale_partials(self.path)
        if resume_key is not None:
            self._tmp = self.path.parent / f".{self.path.name}.resume-{resume_key[:16]}"
            if self._reopen():
                return
        else:
            self._tmp = self.path.parent / f".{self.path.name}.partial-{os.getpid()}"
        if self._tmp.exists():  # this process's own, from a writer never finished; or a stale resume
            shutil.rmtree(self._tmp)
        try:
            self._create(provenance)
        except OSError as exc:
            self.abort()
            raise OutputError(f"cannot write {self.path}: {exc.strerror or exc}") from None
        except BaseException:
            self.abort()
            raise

    def _reopen(self) -> bool:
        """Resumable writers: take over the partial store of an earlier writer with the same key
        that is gone (True), or refuse one that still runs.  A partial store whose attributes do
        not match this writer's is not reused (False)."""
        if not self._tmp.is_dir() or self._tmp.is_symlink():
            return False
        try:
            owner = json.loads((self._tmp / _OWNER).read_text())
            pid, host = int(owner["pid"]), owner.get("host")
        except (OSError, ValueError, KeyError, TypeError):
            return False
        if host == socket.gethostname() and pid != os.getpid() and process_alive(pid):
            raise OutputError(f"{self.path} is being written by process {pid} on this host ({self._tmp}); "
                              f"wait for it or stop it")
        try:
            group = zarr.open_group(self._tmp, mode="r+", zarr_format=3, use_consolidated=False)
            attrs = dict(group.attrs)
            strain, dq = group[self.layout.array], group["dq"]
        except Exception:
            return False
        same = (attrs.get("sample_rate") == self.sample_rate and attrs.get("t0") == str(self.t0)
                and attrs.get("ifos") == list(self.ifos) and attrs.get("dq_bits") == list(self.dq_bits)
                and attrs.get("format") == self.layout.format and strain.dtype == np.dtype(self.layout.dtype)
                and attrs.get("frequencies", []) == list(self.layout.frequencies)
                and strain.shape == self.layout.shape(len(self.ifos), self.n_samples)
                and strain.chunks == self.layout.chunks(self.chunk_samples))
        if not same:
            return False
        (self._tmp / _OWNER).write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid()}))
        self._group, self._strain, self._dq = group, strain, dq
        self.resumed = True
        return True

    @property
    def partial(self) -> Path:
        """The directory being written (renamed to :attr:`path` by :meth:`commit`)."""
        return self._tmp

    @property
    def strain_path(self) -> str:
        """The strain array of the partial store: worker processes write whole chunks of it."""
        return str(self._tmp / self.layout.array)

    def set_provenance(self, provenance: dict) -> None:
        self._group.attrs["provenance"] = provenance

    def _create(self, provenance: dict | None) -> None:
        os.mkdir(self._tmp)
        (self._tmp / _OWNER).write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid()}))
        n_sec = int(np.ceil(self.n_samples / self.sample_rate))
        self._group = zarr.open_group(self._tmp, mode="a", zarr_format=3)
        layout = self.layout
        self._strain = self._group.create_array(
            layout.array, shape=layout.shape(len(self.ifos), self.n_samples), chunks=layout.chunks(self.chunk_samples),
            dtype=layout.dtype, fill_value=layout.fill_value, dimension_names=layout.dimensions,
            compressors=STRAIN_COMPRESSOR,
        )
        self._dq = self._group.create_array(
            "dq", shape=(len(self.ifos), n_sec), chunks=(len(self.ifos), max(1, min(n_sec, 86400))),
            dtype="uint8", fill_value=0, dimension_names=("ifo", "second"),
        )
        names = self._group.create_array("ifo", shape=(len(self.ifos),), dtype=str, dimension_names=("ifo",))
        names[:] = np.array(self.ifos)
        self._group.attrs.update(
            {
                "format": layout.format,
                "sample_rate": self.sample_rate,
                "t0": str(self.t0),
                "ifos": list(self.ifos),
                "dq_bits": list(self.dq_bits),
                "provenance": provenance or {},
                **({"frequencies": [float(f) for f in layout.frequencies]} if layout.spectra else {}),
            }
        )

    def write_strain(self, ifo: str, start: int, values: np.ndarray) -> None:
        """Write ``values`` (cast to float32) at sample ``start`` of detector ``ifo``."""
        if self.layout.spectra:
            raise TypeError("a filterbank store is written with write_spectra")
        i = self.ifos.index(ifo)
        values = strain_float32(values, f"{ifo} samples {start}..")
        if start < 0 or start + values.size > self.n_samples:
            raise DataError(f"strain write [{start}, {start + values.size}) outside [0, {self.n_samples})")
        self._strain[i, start : start + values.size] = values

    def write_spectra(self, beam: str, start: int, values: np.ndarray) -> None:
        """Write spectra ``values`` ``(channels, n)`` at sample ``start`` of beam ``beam``; their dtype must be
        the store's (the recorded precision is kept, never converted)."""
        layout = self.layout
        if not layout.spectra:
            raise TypeError("a strain store is written with write_strain")
        values = np.asarray(values)
        if values.dtype != np.dtype(layout.dtype) or values.ndim != 2 or values.shape[0] != layout.n_channels:
            raise DataError(f"spectra of {values.dtype} {values.shape} cannot be written to a store of {layout.dtype} "
                            f"({layout.n_channels}, time)")
        if start < 0 or start + values.shape[1] > self.n_samples:
            raise DataError(f"spectra write [{start}, {start + values.shape[1]}) outside [0, {self.n_samples})")
        self._strain[self.ifos.index(beam), :, start : start + values.shape[1]] = values

    def write_dq(self, ifo: str, first_second: int, values: np.ndarray) -> None:
        """Write DQ bit masks for seconds ``first_second, first_second + 1, ...``."""
        i = self.ifos.index(ifo)
        values = np.asarray(values, dtype=np.uint8)
        if first_second < 0 or first_second + values.size > self._dq.shape[1]:
            raise DataError(
                f"DQ write [{first_second}, {first_second + values.size}) outside [0, {self._dq.shape[1]}) seconds"
            )
        self._dq[i, first_second : first_second + values.size] = values

    def write_injections(self, table: pd.DataFrame) -> None:
        """Store the injection table (numeric and string columns) as a sub-group."""
        grp = self._group.create_group("injections")
        for col in table.columns:
            data = table[col].to_numpy()
            if data.dtype == object or pd.api.types.is_string_dtype(data.dtype):
                arr = grp.create_array(col, shape=data.shape, dtype=str, dimension_names=("injection",))
                arr[:] = data.astype(str)
            else:
                arr = grp.create_array(col, shape=data.shape, dtype=data.dtype, dimension_names=("injection",))
                arr[:] = data
        grp.attrs["columns"] = list(table.columns)

    def carry_chunks(self, base: "StoreMeta", rewrite: set[tuple[int, int]]) -> int:
        """Extend store ``base`` (same detectors, rate, t0 and chunk length; this writer's store is
        longer): hard-link each of its strain chunk files that is not in ``rewrite`` (``(row,
        index)`` pairs the caller writes anew) into the partial store, and carry its digest to
        :meth:`commit`.  No sample is copied; ``base`` is left as it is (a chunk written later is
        unlinked first, :func:`write_partial_strain`).  Returns the number of chunks carried."""
        if (base.ifos, base.sample_rate, base.t0, base.chunk_samples, base.layout) != (
                self.ifos, self.sample_rate, self.t0, self.chunk_samples, self.layout) \
                or base.n_samples > self.n_samples:
            raise DataError(f"store {base.path} cannot be extended to {self.path}: its detectors, rate, start or "
                            f"chunk length differ, or it is longer")
        carried = 0
        for row in range(len(self.ifos)):
            for index in np.flatnonzero(base.checksums[row]):
                if (row, int(index)) in rewrite:
                    continue
                target = self.layout.chunk_file(self._tmp, row, int(index))
                if not target.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.link(self.layout.chunk_file(base.path, row, int(index)), target)
                self._carried[row, index] = base.checksums[row, index]
                carried += 1
        return carried

    def write_native_tail(self, tail: "NativeTail") -> None:
        """Keep a detector's last native samples (:class:`NativeTail`) for a later append."""
        group = self._group.require_group(NATIVE_TAIL)
        arr = group.create_array(tail.ifo, shape=(tail.values.size,), chunks=(max(1, tail.values.size),),
                                 dtype="float64", fill_value=np.nan, overwrite=True)
        if tail.values.size:
            arr[:] = tail.values
        arr.attrs.update({"rate": tail.rate, "start": tail.start, "end": tail.end, "sha256": tail.sha256()})

    def commit(self) -> Path:
        """Seal the store (the checksum of every strain chunk file written), consolidate its
        metadata and move it into place."""
        n_chunks = -(-self.n_samples // self.chunk_samples)
        table = _checksum_table(self._tmp, len(self.ifos), n_chunks, self.chunk_samples, decode=False,
                                carried=self._carried, layout=self.layout)
        _write_seal(self._group, table, _attributes_digest(self.ifos, self.sample_rate, self.t0, self.dq_bits,
                                                           self.n_samples, self.chunk_samples,
                                                           _dq_sha256(self._group["dq"][...]), self.layout))
        (self._tmp / _OWNER).unlink(missing_ok=True)
        _consolidate(self._tmp)
        old = None
        if self.path.exists():
            if not self.overwrite:
                raise OutputError(f"{self.path} appeared while writing; not replacing it")
            # Move the old store aside first: a crash between the two renames leaves both, never neither.
            old = self.path.parent / f".{self.path.name}.old-{os.getpid()}"
            os.replace(self.path, old)
        os.replace(self._tmp, self.path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return self.path

    def abort(self) -> None:
        """Delete the partial store (after zarr's background writes have ended, so none recreates it)."""
        _drain_zarr()
        for _ in range(3):
            shutil.rmtree(self._tmp, ignore_errors=True)
            if not self._tmp.exists():
                break
            time.sleep(0.05)

    def __enter__(self) -> "StoreWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            return
        if self.resume_key is not None and not issubclass(exc_type, (DataError, OutputError)):
            _drain_zarr()  # interrupted: the partial store stays for the same command to resume
            return
        self.abort()


def write_partial_strain(strain_path: str, row: int, start: int, values: np.ndarray) -> None:
    """Write ``values`` (whole store chunks, as float32) at sample ``start`` of row ``row`` of a
    partial store's strain array (:attr:`StoreWriter.strain_path`): how worker processes write
    distinct chunks of one store at once."""
    arr = zarr.open_array(strain_path, mode="r+")
    chunk = arr.chunks[1]
    for index in range(start // chunk, (start + values.size - 1) // chunk + 1):
        target = Path(strain_path) / "c" / str(row) / str(index)
        with contextlib.suppress(FileNotFoundError):
            if target.stat().st_nlink > 1:  # linked from the store being extended: never write through
                target.unlink()
    arr[row, start: start + values.size] = strain_float32(values, f"store row {row} samples {start}..")


def strain_float32(values: np.ndarray, where: str) -> np.ndarray:
    """``values`` as the store's float32, refused (:class:`DataError`) where a finite sample does
    not fit (beyond ±3.4e38: it would become infinite and read as no data)."""
    values = np.asarray(values)
    if values.dtype == np.float32:
        return values
    with np.errstate(over="ignore"):
        out = values.astype(np.float32)
    lost = np.isinf(out) & np.isfinite(values)
    if lost.any():
        k = int(np.flatnonzero(lost)[0])
        raise DataError(f"{where}: sample {k} is {values.flat[k]:.6g}, beyond float32's range (±3.4e38), so it "
                        f"cannot be stored; {int(lost.sum())} such samples (strain is of order 1e-21: check the "
                        "channel and its units)")
    return out


# ---------------------------------------------------------------------------------------------
# what an append needs of a frame store


@dataclass(frozen=True, eq=False)
class NativeTail:
    """A detector's last native samples before the end of its data in a store made from channel
    files: ``values`` are native samples ``[start, end)`` (counted at ``rate`` Hz from the store's
    t0; NaN where there was no data), as many as the resampling filter reaches back from the end,
    so an append computes the outputs next to the old end exactly as one ingest of all the files
    would."""

    ifo: str
    rate: int
    start: int
    end: int
    values: np.ndarray = field(repr=False)

    def sha256(self) -> str:
        return hashlib.sha256(np.ascontiguousarray(self.values, dtype="<f8").tobytes()).hexdigest()


def read_native_tails(meta: "StoreMeta") -> dict[str, NativeTail] | None:
    """The :class:`NativeTail` of every detector of ``meta``'s store; None for a store without
    them (not made by ``gwbatch ingest frames``).  A tail whose samples do not match their recorded
    SHA-256 is a :class:`DataError`."""
    group = _open_group(meta.path)
    if NATIVE_TAIL not in group:
        return None
    tails = {}
    for ifo in meta.ifos:
        arr = _array(meta.path, group[NATIVE_TAIL], ifo, "re-ingest the store")
        attrs = arr.attrs.asdict()
        try:
            tail = NativeTail(ifo, int(attrs["rate"]), int(attrs["start"]), int(attrs["end"]),
                              _values(meta.path, arr, f"{NATIVE_TAIL}/{ifo}").astype(np.float64))
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"store {meta.path}: {NATIVE_TAIL}/{ifo} has attributes {_short(attrs)} "
                            f"({exc}); re-ingest the store") from None
        if tail.sha256() != attrs.get("sha256") or tail.end - tail.start != tail.values.size:
            raise DataError(f"store {meta.path}: {NATIVE_TAIL}/{ifo} does not match its recorded SHA-256 or length; "
                            f"re-ingest the store")
        tails[ifo] = tail
    return tails


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a file, read in 1 MiB blocks (for the provenance of ingested files)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# the contract


def _short(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _open_group(path: Path, mode: str = "r") -> zarr.Group:
    if not path.exists():
        raise DataError(f"strain store {path} does not exist (create one with 'gwbatch simulate' or 'gwbatch ingest')")
    try:
        # each array's own zarr.json, never the consolidated copy an edit may have left stale
        return zarr.open_group(path, mode=mode, zarr_format=3, use_consolidated=False)
    except Exception as exc:
        raise DataError(f"{path} is not a Zarr v3 group: {type(exc).__name__}: {_short(str(exc), 200)}") from exc


def _array(path: Path, group: zarr.Group, name: str, advice: str) -> zarr.Array:
    try:
        arr = group.get(name)
    except Exception as exc:
        raise DataError(f"store {path}: array {name!r} cannot be opened ({type(exc).__name__}: "
                        f"{_short(str(exc), 200)}); {advice}") from exc
    if not isinstance(arr, zarr.Array):
        raise DataError(f"store {path} has no {name!r} array ({'a group' if arr is not None else 'missing'}); {advice}")
    return arr


def _values(path: Path, arr: zarr.Array, name: str, selection=Ellipsis) -> np.ndarray:
    """``arr[selection]``; an array whose metadata or chunks cannot be decoded is a :class:`DataError`."""
    try:
        return np.asarray(arr[selection])
    except Exception as exc:
        raise DataError(f"store {path}: array {name!r} cannot be read ({type(exc).__name__}: "
                        f"{_short(str(exc), 200)}); re-ingest or re-simulate the store") from exc


def _check_format(path: Path, attrs: dict, sealing: bool) -> None:
    fmt = attrs.get("format")
    if fmt in OLD_FORMATS and not sealing:
        raise DataError(f"store {path} is in format {fmt} (no per-chunk checksums); run 'gwbatch seal {path}' "
                        f"to add them (format {STORE_FORMAT}), or re-ingest/re-simulate it")
    if fmt not in (STORE_FORMAT, FILTERBANK_FORMAT) and fmt not in OLD_FORMATS:
        raise DataError(f"{path} is not a gwbatch strain store (format attribute {_short(fmt)}, expected "
                        f"{STORE_FORMAT!r} or {FILTERBANK_FORMAT!r})")


def _check_layout(layout: SampleLayout, what: str) -> SampleLayout:
    """``layout`` if it is one a store may have: float32 strain, or spectra of a :data:`SPECTRA_DTYPES`
    type over distinct, positive, finite channel frequencies (MHz)."""
    if not layout.spectra:
        if layout.dtype != "float32":
            raise DataError(f"{what}: strain is float32, not {layout.dtype}")
        return layout
    if layout.dtype not in SPECTRA_DTYPES:
        raise DataError(f"{what}: spectra of data type {layout.dtype}; expected one of {', '.join(SPECTRA_DTYPES)}")
    freqs = np.asarray(layout.frequencies, dtype=np.float64)
    if not (np.all(np.isfinite(freqs)) and np.all(freqs > 0) and np.unique(freqs).size == freqs.size):
        raise DataError(f"{what}: channel frequencies {_short(layout.frequencies)} MHz; expected distinct finite "
                        "positive values")
    return layout


def _layout_of(path: Path, attrs: dict, arr: zarr.Array) -> SampleLayout:
    """The layout a store's ``format`` and ``frequencies`` attributes declare, its sample dtype taken from
    its array (checked by :func:`_check_samples`)."""
    if attrs.get("format") != FILTERBANK_FORMAT:
        return STRAIN
    freqs = attrs.get("frequencies")
    if not (isinstance(freqs, list) and freqs and all(isinstance(f, (int, float)) and not isinstance(f, bool)
                                                        for f in freqs)):
        raise DataError(f"store {path}: attribute 'frequencies' is {_short(freqs)}; expected the channel frequencies "
                        "in MHz, one number per channel")
    return _check_layout(SampleLayout(str(arr.dtype), tuple(float(f) for f in freqs)), f"store {path}")


def _check_ifos(path: Path, attrs: dict) -> tuple[str, ...]:
    ifos = attrs.get("ifos")
    if not (isinstance(ifos, list) and ifos and all(isinstance(i, str) and i for i in ifos)
            and len(set(ifos)) == len(ifos)):
        raise DataError(f"store {path}: attribute 'ifos' is {_short(ifos)}; expected a non-empty list of distinct "
                        "detector names")
    return tuple(ifos)


def _check_samples(path: Path, arr: zarr.Array, n_ifo: int, layout: SampleLayout) -> tuple[int, int]:
    """``(n_samples, chunk_samples)`` of a strain or spectra array that keeps the contract."""
    what = f"store {path}: array {layout.array!r}"
    if layout.spectra and str(arr.dtype) not in SPECTRA_DTYPES or not layout.spectra and arr.dtype != np.float32:
        allowed = ", ".join(SPECTRA_DTYPES) if layout.spectra else "float32"
        raise DataError(f"{what} has data type {arr.dtype}; expected {allowed} (re-ingest or re-simulate the store)")
    dims = layout.dimensions
    if arr.ndim != len(dims) or arr.shape[-1] < 1:
        raise DataError(f"{what} has shape {arr.shape}; expected {len(dims)}-D {dims} with at least one sample")
    if arr.shape[0] != n_ifo:
        raise DataError(f"{what} has {arr.shape[0]} {'beam' if layout.spectra else 'detector'} rows; "
                        f"attribute 'ifos' names {n_ifo}")
    if layout.spectra and arr.shape[1] != layout.n_channels:
        raise DataError(f"{what} has {arr.shape[1]} channels; attribute 'frequencies' names {layout.n_channels}")
    meta = arr.metadata
    if getattr(meta, "dimension_names", None) != dims:
        raise DataError(f"{what} has dimension names {_short(getattr(meta, 'dimension_names', None))}; "
                        f"expected {dims}")
    if arr.shards is not None or arr.chunks[:-1] != layout.chunks(1)[:-1] or arr.chunks[-1] < 1:
        raise DataError(f"{what} has chunk grid {arr.chunks}{' (sharded)' if arr.shards else ''}; "
                        f"expected ({', '.join(map(str, layout.chunks(1)[:-1]))}, C) with C >= 1, unsharded")
    codecs = tuple(meta.codecs)
    if not (len(codecs) == 2 and isinstance(codecs[0], zarr.codecs.BytesCodec)
            and (getattr(codecs[0].endian, "value", None) == "little" or arr.dtype.itemsize == 1)
            and isinstance(codecs[1], zarr.codecs.ZstdCodec)):
        raise DataError(f"{what} has codecs {_short([type(c).__name__ for c in codecs])}; expected bytes "
                        "(little-endian) then zstd")
    enc = meta.chunk_key_encoding
    if type(enc).__name__ != "DefaultChunkKeyEncoding" or getattr(enc, "separator", None) != "/":
        raise DataError(f"{what} has chunk key encoding {_short(enc)}; expected the default, separator '/'")
    return int(arr.shape[-1]), int(arr.chunks[-1])


def _check_ifo_array(path: Path, group: zarr.Group, ifos: tuple[str, ...]) -> None:
    arr = _array(path, group, "ifo", "re-ingest or re-simulate the store")
    names = [str(v) for v in _values(path, arr, "ifo").ravel()] if arr.ndim == 1 else None
    if names != list(ifos):
        raise DataError(f"store {path}: array 'ifo' holds {_short(names)}; expected the 'ifos' attribute, "
                        f"{_short(list(ifos))}")


def _check_t0(path: Path, attrs: dict, duration: float) -> GPSTime:
    value = attrs.get("t0")
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise DataError(f"store {path}: attribute 't0' is {_short(value)}; expected a GPS time as a decimal string")
    try:
        t0 = GPSTime.parse(value)
    except DataError as exc:
        raise DataError(f"store {path}: attribute 't0' is {_short(value)}; expected a GPS time as a decimal string "
                        f"({exc})") from exc
    check_gps_range(t0, f"store {path}: attribute 't0'")
    if t0.seconds + duration >= 2**32:
        raise DataError(f"store {path}: attribute 't0' {t0} plus the {duration:g} s of strain ends after GPS 2**32 s")
    return t0


def _check_dq(path: Path, group: zarr.Group, n_ifo: int, n_samples: int, rate: float) -> None:
    arr = _array(path, group, "dq", "re-ingest or re-simulate the store (no data quality, no science time)")
    n_sec = int(np.ceil(n_samples / rate))
    if arr.dtype != np.dtype("uint8"):
        raise DataError(f"store {path}: array 'dq' has data type {arr.dtype}; expected uint8")
    reordering = [type(c).__name__ for c in arr.metadata.codecs if isinstance(c, ArrayArrayCodec)]
    if reordering or arr.shards is not None:
        raise DataError(f"store {path}: array 'dq' is stored with {_short(reordering or ['shards'])}; expected its "
                        "values in order (no transpose or other array-to-array codec, unsharded)")
    if arr.shape != (n_ifo, n_sec):
        raise DataError(
            f"store {path}: array 'dq' has shape {arr.shape}; expected {(n_ifo, n_sec)}: one value per second of "
            f"the {n_samples} samples at attribute 'sample_rate' {rate:g} Hz (is the sample rate wrong?)"
        )


def _check_checksums(path: Path, group: zarr.Group, n_ifo: int, n_chunks: int, attributes_sha256: str,
                     unsealed_dq_sha256: str) -> np.ndarray:
    advice = f"run 'gwbatch seal {path}' if the store is as intended, or re-ingest it"
    arr = _array(path, group, "checksum", advice)
    if arr.dtype != np.dtype("uint64") or arr.shape != (n_ifo, n_chunks):
        raise DataError(f"store {path}: array 'checksum' has data type {arr.dtype} and shape {arr.shape}; expected "
                        f"uint64 {(n_ifo, n_chunks)}, one per strain chunk; {advice}")
    sealed = arr.attrs.get("attributes_sha256")
    if sealed == unsealed_dq_sha256:
        raise DataError(f"store {path} was sealed by an older gwbatch, which did not seal its data-quality array; "
                        f"{advice}")
    if sealed != attributes_sha256:
        raise DataError(f"store {path}: its attributes (ifos, sample_rate, t0, dq_bits), strain layout or "
                        f"data-quality values changed after it was sealed; {advice}")
    return _values(path, arr, "checksum").astype(np.uint64)


def _contract(path: Path, group: zarr.Group, sealing: bool = False) -> StoreMeta:
    """Check the store's contract (all but the checksum table when ``sealing``); its description."""
    attrs = group.attrs.asdict()
    _check_format(path, attrs, sealing)
    ifos = _check_ifos(path, attrs)
    name = "spectra" if attrs.get("format") == FILTERBANK_FORMAT else "strain"
    strain = _array(path, group, name, "re-ingest or re-simulate the store")
    layout = _layout_of(path, attrs, strain)
    n_samples, chunk = _check_samples(path, strain, len(ifos), layout)
    _check_ifo_array(path, group, ifos)
    rate = _check_sample_rate(attrs.get("sample_rate"), f"store {path}: attribute 'sample_rate'")
    _check_duration(n_samples, rate, f"store {path}")
    t0 = _check_t0(path, attrs, n_samples / rate)
    dq_bits = _check_dq_bits(attrs.get("dq_bits"), f"store {path}: attribute 'dq_bits'")
    _check_dq(path, group, len(ifos), n_samples, rate)
    provenance = attrs.get("provenance", {})
    if not isinstance(provenance, dict):
        raise DataError(f"store {path}: attribute 'provenance' is {_short(provenance)}; expected a mapping")
    checksums = None
    if not sealing:
        dq = _dq_sha256(_values(path, _array(path, group, "dq", "re-ingest the store"), "dq"))
        checksums = _check_checksums(path, group, len(ifos), -(-n_samples // chunk),
                                     _attributes_digest(ifos, rate, t0, dq_bits, n_samples, chunk, dq, layout),
                                     _attributes_digest(ifos, rate, t0, dq_bits, n_samples, chunk, None, layout))
    return StoreMeta(path=path, ifos=ifos, sample_rate=rate, t0=t0, n_samples=n_samples, chunk_samples=chunk,
                     dq_bits=dq_bits, provenance=dict(provenance), has_injections="injections" in group,
                     checksums=checksums, layout=layout)


def read_meta(path: str | os.PathLike) -> StoreMeta:
    """A store's description, its contract checked (see the module docstring), no strain read.

    Raises
    ------
    DataError
        One line naming the store, the attribute or array, the value found and what is expected:
        a format-1 store (run ``gwbatch seal``), a wrong dtype, shape, chunk grid or codec, a
        ``sample_rate`` that is not a number in [1e-3, 1e6] Hz or disagrees with the ``dq`` array's
        one value per second, a ``t0`` outside GPS [0, 2**32), a missing array, ``dq_bits`` that
        are not distinct names, or attributes changed since the store was sealed.
    """
    path = Path(path)
    return _contract(path, _open_group(path))


def seal(path: str | os.PathLike) -> StoreMeta:
    """Recompute the checksum table of an existing store and mark it format 2; returns its meta.

    For a deliberate edit of the strain or attributes (with zarr), or a store of format 1.  The
    store must keep the rest of its contract; every strain chunk file is decoded first, so a
    damaged chunk is refused rather than sealed.  Not atomic: a seal interrupted part way leaves
    a store whose chunks fail their checks until it is sealed again."""
    path = Path(path)
    group = _open_group(path, mode="r+")
    meta = _contract(path, group, sealing=True)
    table = _checksum_table(path, len(meta.ifos), meta.n_chunks, meta.chunk_samples, decode=True, layout=meta.layout)
    group.attrs["format"] = meta.layout.format
    dq = _dq_sha256(_values(path, _array(path, group, "dq", "re-ingest the store"), "dq"))
    _write_seal(group, table, _attributes_digest(meta.ifos, meta.sample_rate, meta.t0, meta.dq_bits,
                                                 meta.n_samples, meta.chunk_samples, dq, meta.layout))
    _consolidate(path)
    return read_meta(path)


def store_identity(meta: StoreMeta) -> dict:
    """What a store is, for resume fingerprints (JSON-serialisable): format, ifos, sample_rate, t0,
    n_samples, chunk_samples, dq_bits, the SHA-256 of the ``dq`` array's content (shape and bytes),
    the SHA-256 of the injection table (None without one) and the provenance.  The strain's
    checksums are not in it: callers compare those chunk by chunk (``meta.checksums``).  Reads the
    whole DQ array (a year at 1 Hz is 32 MB per detector)."""
    group = _open_group(meta.path)
    dq = _dq_sha256(_values(meta.path, _array(meta.path, group, "dq", "re-ingest the store"), "dq"))
    return {
        "format": meta.layout.format,
        **({"dtype": meta.layout.dtype, "frequencies": list(meta.layout.frequencies)} if meta.layout.spectra else {}),
        "ifos": list(meta.ifos),
        "sample_rate": meta.sample_rate,
        "t0": str(meta.t0),
        "n_samples": meta.n_samples,
        "chunk_samples": meta.chunk_samples,
        "dq_bits": list(meta.dq_bits),
        "dq_sha256": dq,
        "injections_sha256": _table_sha256(read_injections(meta.path)) if meta.has_injections else None,
        "provenance": json.loads(json.dumps(meta.provenance, default=str)),
    }


def _table_sha256(table: pd.DataFrame | None) -> str | None:
    """SHA-256 of a table's columns: names, dtypes and values, in order."""
    if table is None:
        return None
    h = hashlib.sha256()
    for col in table.columns:
        values = table[col].to_numpy()
        h.update(f"{col}\0{values.dtype.str}\0{values.size}\0".encode())
        if values.dtype.kind in "OUS":
            h.update("\0".join(str(v) for v in values).encode())
        else:
            h.update(np.ascontiguousarray(values).tobytes())
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# reading


def open_store(path: str | os.PathLike) -> xr.Dataset:
    """The store as a lazily indexed xarray Dataset (no Dask, nothing loaded yet), its contract
    checked.  Read strain from it with :func:`read_strain` (which checks each chunk's checksum),
    not through xarray (which does not)."""
    path = Path(path)
    read_meta(path)
    ds = xr.open_dataset(path, engine="zarr", chunks=None, cache=False, consolidated=False, zarr_format=3)
    ds.encoding["source"] = str(path)
    return ds


def _as_meta(store) -> "StoreMeta | StoreSlice":
    if isinstance(store, StoreSlice) or (isinstance(store, StoreMeta) and store.checksums is not None):
        return store
    if isinstance(store, StoreMeta):
        return read_meta(store.path)
    if isinstance(store, xr.Dataset):
        return read_meta(store.encoding["source"])
    return read_meta(store)


def _chunk_error(meta: StoreMeta, row: int, index: int, problem: str) -> DataError:
    lo = index * meta.chunk_samples
    hi = min(lo + meta.chunk_samples, meta.n_samples)
    layout = meta.layout
    return DataError(
        f"store {meta.path}: {layout.array} chunk {index} of {meta.ifos[row]} (samples {lo}..{hi}, file "
        f"{layout.chunk_file(Path(), row, index)}) {problem}; restore the store from a copy or re-ingest it (if the change was "
        f"deliberate, run 'gwbatch seal {meta.path}')"
    )


def _verified_bytes(meta: StoreMeta, row: int, index: int) -> bytes | None:
    """The bytes of strain chunk file ``(row, index)`` once checked against ``meta.checksums``;
    None for a chunk never written (no file, checksum 0)."""
    expected = meta.checksum(row, index)
    try:
        data = meta.layout.chunk_file(meta.path, row, index).read_bytes()
    except FileNotFoundError:
        data = None
    except OSError as exc:
        raise _chunk_error(meta, row, index, f"cannot be read ({exc})") from exc
    if data is None:
        if expected:
            raise _chunk_error(meta, row, index, "is missing, though the store was written with it")
        return None
    if not expected:
        raise _chunk_error(meta, row, index, "exists, though the store's checksum table says it was never written")
    if chunk_digest(row, index, data) != expected:
        raise _chunk_error(meta, row, index, "does not match its checksum (edited, swapped with another chunk, "
                                             "or damaged)")
    return data


def read_chunk(meta: StoreMeta, row: int, index: int) -> np.ndarray | None:
    """Strain chunk ``index`` of detector row ``row`` as float32 ``(chunk_samples,)`` (spectra:
    ``(channels, chunk_samples)`` of the store's dtype), or None
    when it was never written (a gap).  The file is checked against ``meta.checksums`` before it
    is decoded: a chunk edited, swapped, damaged, deleted or added after sealing is a
    :class:`DataError` naming the detector, chunk and samples."""
    data = _verified_bytes(meta, row, index)
    if data is None:
        return None
    try:
        return meta.layout.decode(data, meta.chunk_samples)
    except Exception as exc:
        raise _chunk_error(meta, row, index, f"cannot be decoded ({type(exc).__name__}: {exc})") from exc


def verify_store_chunks(meta: StoreMeta, chunks: dict[str, Iterable[int]], threads: int = 1) -> None:
    """Check the strain chunk files ``{ifo: [chunk index, ...]}`` against ``meta.checksums``
    without decoding them (~4 ms per 1M-sample chunk); the first that fails, in the order given,
    is a :class:`DataError` naming it (see :func:`read_chunk`).  Indices outside the grid are
    refused.  ``threads`` > 1 reads and hashes that many files at once (file reads and BLAKE2b
    release the interpreter)."""
    files = []
    for ifo, indices in chunks.items():
        (row,) = meta.rows([ifo])
        for index in indices:
            if not 0 <= int(index) < meta.n_chunks:
                raise DataError(f"store {meta.path}: no strain chunk {index} (it has {meta.n_chunks} per detector)")
            files.append((row, int(index)))
    if threads <= 1 or len(files) < 2:
        for row, index in files:
            _verified_bytes(meta, row, index)
        return
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for _ in pool.map(lambda f: _verified_bytes(meta, *f) is None, files):
            pass  # raises the first failure in order


def read_strain(store: StoreMeta | StoreSlice | xr.Dataset | str | os.PathLike, ifos: Iterable[str], start: int,
                stop: int) -> np.ndarray:
    """Strain of ``ifos`` for samples ``[start, stop)`` as float32 ``(ifo, time)``.

    ``store`` is a :class:`StoreMeta` from :func:`read_meta` or a task's :class:`StoreSlice` (no
    metadata read again), a path, or a Dataset from :func:`open_store`.  Every chunk touched is
    verified (:func:`read_chunk`);
    samples outside the store and chunks never written read as NaN (no data), so callers mask
    them like any gap.
    """
    meta = _as_meta(store)
    if meta.layout.spectra:
        raise DataError(f"store {meta.path} holds radio spectra (beam, channel, time), not strain: search it with "
                        "search kind 'radio'")
    rows = meta.rows(ifos)
    out = np.full((len(rows), stop - start), np.nan, dtype=np.float32)
    c = meta.chunk_samples
    for i, row in enumerate(rows):
        for index in meta.chunk_range(start, stop):
            chunk = read_chunk(meta, row, index)
            if chunk is None:
                continue
            lo, hi = max(start, index * c), min(stop, (index + 1) * c, meta.n_samples)
            out[i, lo - start : hi - start] = chunk[lo - index * c : hi - index * c]
    return out


def read_spectra(store: StoreMeta | StoreSlice | str | os.PathLike, beam: str, start: int, stop: int) -> np.ndarray:
    """Spectra of ``beam`` for samples ``[start, stop)`` as float32 ``(channels, time)``, every chunk touched
    verified (:func:`read_chunk`); samples outside the store and in chunks never written are NaN
    (no data), so callers mask them like any gap."""
    meta = _as_meta(store)
    if not meta.layout.spectra:
        raise DataError(f"store {meta.path} holds strain, not radio spectra; a filterbank store comes from "
                        "'gwbatch ingest filterbank'")
    (row,) = meta.rows([beam])
    out = np.full((meta.layout.n_channels, stop - start), np.nan, dtype=np.float32)
    c = meta.chunk_samples
    for index in meta.chunk_range(start, stop):
        chunk = read_chunk(meta, row, index)
        if chunk is None:
            continue
        lo, hi = max(start, index * c), min(stop, (index + 1) * c, meta.n_samples)
        out[:, lo - start : hi - start] = chunk[:, lo - index * c : hi - index * c]
    return out


def ifo_rows(ds: xr.Dataset, ifos: Iterable[str]) -> list[int]:
    """The store rows of ``ifos``, in that order."""
    names = [str(v) for v in ds["ifo"].values]
    missing = [ifo for ifo in ifos if ifo not in names]
    if missing:
        raise DataError(f"detector(s) {', '.join(missing)} not in the store; it has {', '.join(names)}")
    return [names.index(ifo) for ifo in ifos]


def read_dq(store: StoreMeta | StoreSlice | xr.Dataset | str | os.PathLike, ifos: Iterable[str]) -> np.ndarray:
    """The whole DQ bit mask ``(ifo, second)`` uint8 (a day is 86400 bytes per detector)."""
    if isinstance(store, xr.Dataset):
        return store["dq"].isel(ifo=ifo_rows(store, ifos)).values
    meta = store if isinstance(store, (StoreMeta, StoreSlice)) else read_meta(store)
    rows = meta.rows(ifos)
    dq = _array(meta.path, _open_group(meta.path), "dq", "re-ingest the store")
    return np.stack([_values(meta.path, dq, "dq", (row, slice(None))).astype(np.uint8) for row in rows]) if rows \
        else np.zeros((0, dq.shape[1]), np.uint8)


def dq_sample_mask(dq_seconds: np.ndarray, required: int, start: int, stop: int, sample_rate: float) -> np.ndarray:
    """Per-sample science mask for samples ``[start, stop)`` from a 1 Hz DQ bit mask.

    A sample passes when every bit of ``required`` is set in its second (``floor(k / sample_rate)``);
    samples outside the DQ record fail.  With a whole-number rate the test runs once per second and
    is repeated over the second's samples (a tenth of the time for a 512 s chunk at 4096 Hz).
    """
    if float(sample_rate).is_integer() and stop > start:
        fs = int(sample_rate)
        first, last = start // fs, (stop - 1) // fs
        sec = np.arange(first, last + 1, dtype=np.int64)
        inside = (sec >= 0) & (sec < dq_seconds.shape[-1])
        ok = np.zeros(sec.shape, dtype=bool)
        ok[inside] = (dq_seconds[sec[inside]] & required) == required
        counts = np.full(sec.shape, fs, dtype=np.int64)
        counts[-1] = stop - last * fs
        counts[0] = min((first + 1) * fs, stop) - start
        return np.repeat(ok, counts)
    idx = np.arange(start, stop, dtype=np.int64)
    sec = np.floor(idx / sample_rate).astype(np.int64)
    inside = (sec >= 0) & (sec < dq_seconds.shape[-1])
    ok = np.zeros(idx.shape, dtype=bool)
    ok[inside] = (dq_seconds[sec[inside]] & required) == required
    return ok


def read_injections(path: str | os.PathLike) -> pd.DataFrame | None:
    """The store's injection table, or None when it has none."""
    path = Path(path)
    read_meta(path)
    group = _open_group(path)
    if "injections" not in group:
        return None
    try:
        grp = group["injections"]
        cols = grp.attrs.get("columns", sorted(grp.array_keys()))
        return pd.DataFrame({c: np.asarray(grp[c][:]) for c in cols})
    except Exception as exc:
        raise DataError(f"store {path}: the injection table cannot be read ({type(exc).__name__}: "
                        f"{_short(str(exc), 200)}); re-simulate the store") from exc


def describe(meta: StoreMeta) -> str:
    """A short human summary of a store."""
    written = int(np.count_nonzero(meta.checksums)) if meta.checksums is not None else 0
    total = len(meta.ifos) * meta.n_chunks
    lines = [
        f"store       {meta.path}",
        f"format      {meta.layout.format}: {written} of {total} {meta.layout.array} chunks written "
        f"({meta.chunk_samples} samples each), each checked against its checksum when read",
        f"series      {', '.join(meta.ifos)}",
        f"sample rate {meta.sample_rate:g} Hz",
        *([f"channels    {meta.layout.n_channels} x {meta.layout.dtype}, {meta.layout.frequencies[0]:g} to "
           f"{meta.layout.frequencies[-1]:g} MHz"] if meta.layout.spectra else []),
        f"start (GPS) {meta.t0}",
        f"duration    {meta.duration:.6g} s ({meta.n_samples} samples)",
        f"dq bits     {', '.join(meta.dq_bits)}",
        f"injections  {'yes' if meta.has_injections else 'no'}",
        f"provenance  {json.dumps(meta.provenance)[:300]}",
    ]
    return "\n".join(lines + coverage_lines(meta))


#: Gaps listed per detector by :func:`coverage_lines` (the rest are counted).
SHOWN_GAPS = 5


def coverage_lines(meta: StoreMeta) -> list[str]:
    """Per detector: the seconds with data (the DQ ``DATA`` bit set, in written chunks) and the gaps
    as GPS ``[start, stop)``, then the seconds each other DQ flag is set."""
    from gwbatch.conditioning.mask import mask_to_segments

    dq = read_dq(meta, meta.ifos)
    n_sec = dq.shape[1]
    t0 = float(GPSTime.parse(str(meta.t0)))
    data_bit = 1 << meta.dq_bits.index("DATA") if "DATA" in meta.dq_bits else 0
    # from the DQ record and the chunks written, without reading the strain: NaN or zero samples
    # inside written data are masked by the search (livetime.masked_seconds), not counted here
    lines = ["coverage (DQ DATA bit, chunks written; NaN or zeros inside the data are not counted here)"]
    for row, ifo in enumerate(meta.ifos):
        ok = (dq[row] & data_bit).astype(bool) if data_bit else np.ones(n_sec, bool)
        if meta.checksums is not None:  # chunks never written read as gaps
            chunk_s = meta.chunk_samples / meta.sample_rate
            for c in np.flatnonzero(meta.checksums[row] == 0):
                ok[int(c * chunk_s):int(np.ceil((c + 1) * chunk_s))] = False
        gaps = mask_to_segments(~ok)
        shown = ", ".join(f"[{t0 + a:.0f}, {t0 + b:.0f}) {b - a} s" for a, b in gaps[:SHOWN_GAPS])
        more = f" and {len(gaps) - SHOWN_GAPS} more" if len(gaps) > SHOWN_GAPS else ""
        lines.append(f"  {ifo:<4} data {int(ok.sum())} of {n_sec} s ({100.0 * ok.mean() if n_sec else 0:.1f}%), "
                     f"{len(gaps)} gap{'s' if len(gaps) != 1 else ''}" + (f": {shown}{more}" if len(gaps) else ""))
        flags = [f"{name} {int(((dq[row] >> bit) & 1).sum())} s" for bit, name in enumerate(meta.dq_bits) if name != "DATA"]
        if flags:
            lines.append(f"       DQ flags, seconds set: {', '.join(flags)}")
    return lines
