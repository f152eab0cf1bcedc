"""The strain store: one Zarr v3 group per data set.

Layout::

    strain (ifo, time)   float32, chunked along time (ifo chunk 1), fill value NaN
    dq     (ifo, second) uint8 bit mask; second k covers [t0 + k, t0 + k + 1); fill value 0
    ifo    (ifo)         detector / series names
    injections/          optional: one 1-D array per column of the injection table

Attributes: ``format``, ``sample_rate`` (Hz), ``t0`` (exact GPS, decimal string), ``ifos``,
``dq_bits`` (names of the mask bits, bit 0 first), ``provenance``.  There is no time coordinate:
times follow from ``t0`` and ``sample_rate`` (a float64 coordinate for a day at 16 kHz would be
11 GiB).  Unwritten strain reads as NaN and unwritten DQ as 0, so a gap is masked, never zero.

A store is written under a temporary name and renamed into place by :meth:`StoreWriter.commit`:
an interrupted write never leaves a store that looks complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd
import xarray as xr
import zarr

from gwbatch.errors import DataError, OutputError
from gwbatch.gpstime import GPSTime, sample_times

STORE_FORMAT = "gwbatch-strain/1"
#: GWOSC ``quality/simple/DQmask`` bits, bit 0 first (127 = all pass).
DQ_BITS = ("DATA", "CBC_CAT1", "CBC_CAT2", "CBC_CAT3", "BURST_CAT1", "BURST_CAT2", "BURST_CAT3")
DEFAULT_CHUNK_SAMPLES = 1 << 20
#: zstd with its frame checksum: a chunk corrupted on disk fails to decode instead of reading as
#: wrong numbers (a flipped byte in a zstd frame without a checksum can decode to garbage).
STRAIN_COMPRESSOR = zarr.codecs.ZstdCodec(level=0, checksum=True)


@dataclass(frozen=True)
class StoreMeta:
    """What a store holds, read from its attributes (no strain is loaded)."""

    path: Path
    ifos: tuple[str, ...]
    sample_rate: float
    t0: GPSTime
    n_samples: int
    chunk_samples: int
    dq_bits: tuple[str, ...]
    provenance: dict = field(default_factory=dict)
    has_injections: bool = False

    @property
    def duration(self) -> float:
        return self.n_samples / self.sample_rate

    @property
    def end(self) -> float:
        return float(self.t0) + self.duration

    def times(self, index) -> np.ndarray:
        """Float64 GPS times of sample indices."""
        return sample_times(self.t0, index, self.sample_rate)

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


class StoreWriter:
    """Create a store; write strain and DQ region by region; :meth:`commit` to publish it.

    Use as a context manager: leaving the block by an exception deletes the partial store.
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
    ) -> None:
        self.path = Path(path)
        self.ifos = tuple(ifos)
        if not self.ifos:
            raise DataError("a store needs at least one detector/series")
        if len(set(self.ifos)) != len(self.ifos):
            raise DataError(f"duplicate detector names: {list(self.ifos)}")
        if not (np.isfinite(sample_rate) and sample_rate > 0):
            raise DataError(f"sample rate must be a positive number of Hz, got {sample_rate!r}")
        if n_samples <= 0:
            raise DataError(f"a store needs at least one sample, got n_samples={n_samples}")
        if self.path.exists() and not overwrite:
            raise OutputError(f"{self.path} already exists; pass --overwrite to replace it")
        self.sample_rate = float(sample_rate)
        self.t0 = GPSTime.parse(t0)
        self.n_samples = int(n_samples)
        self.dq_bits = tuple(dq_bits)
        self.overwrite = overwrite
        self._tmp = self.path.parent / f".{self.path.name}.partial-{os.getpid()}"
        if self._tmp.exists():
            shutil.rmtree(self._tmp)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        n_sec = int(np.ceil(self.n_samples / self.sample_rate))
        chunk = int(min(chunk_samples, self.n_samples))
        self._group = zarr.open_group(self._tmp, mode="w", zarr_format=3)
        self._strain = self._group.create_array(
            "strain", shape=(len(self.ifos), self.n_samples), chunks=(1, chunk), dtype="float32",
            fill_value=np.nan, dimension_names=("ifo", "time"), compressors=STRAIN_COMPRESSOR,
        )
        self._dq = self._group.create_array(
            "dq", shape=(len(self.ifos), n_sec), chunks=(len(self.ifos), max(1, min(n_sec, 86400))),
            dtype="uint8", fill_value=0, dimension_names=("ifo", "second"),
        )
        names = self._group.create_array("ifo", shape=(len(self.ifos),), dtype=str, dimension_names=("ifo",))
        names[:] = np.array(self.ifos)
        self._group.attrs.update(
            {
                "format": STORE_FORMAT,
                "sample_rate": self.sample_rate,
                "t0": str(self.t0),
                "ifos": list(self.ifos),
                "dq_bits": list(self.dq_bits),
                "provenance": provenance or {},
            }
        )

    def write_strain(self, ifo: str, start: int, values: np.ndarray) -> None:
        """Write ``values`` (cast to float32) at sample ``start`` of detector ``ifo``."""
        i = self.ifos.index(ifo)
        values = np.asarray(values, dtype=np.float32)
        if start < 0 or start + values.size > self.n_samples:
            raise DataError(f"strain write [{start}, {start + values.size}) outside [0, {self.n_samples})")
        self._strain[i, start : start + values.size] = values

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

    def commit(self) -> Path:
        """Consolidate metadata and move the finished store into place."""
        with warnings.catch_warnings():
            # zarr-python's consolidated metadata for v3 is an extension; gwbatch reads it back itself.
            warnings.filterwarnings("ignore", message="Consolidated metadata", category=UserWarning)
            zarr.consolidate_metadata(self._tmp)
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
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> "StoreWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a file, read in 1 MiB blocks (for the provenance of ingested files)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _check_store(path: Path) -> zarr.Group:
    if not path.exists():
        raise DataError(f"strain store {path} does not exist (create one with 'gwbatch simulate' or 'gwbatch ingest')")
    try:
        group = zarr.open_group(path, mode="r", zarr_format=3)
    except Exception as exc:
        raise DataError(f"{path} is not a Zarr v3 group: {exc}") from exc
    fmt = group.attrs.get("format")
    if fmt != STORE_FORMAT:
        raise DataError(f"{path} is not a gwbatch strain store (format attribute {fmt!r}, expected {STORE_FORMAT!r})")
    return group


def read_meta(path: str | os.PathLike) -> StoreMeta:
    """Read a store's description without touching the strain."""
    path = Path(path)
    group = _check_store(path)
    attrs = group.attrs.asdict()
    strain = group["strain"]
    return StoreMeta(
        path=path,
        ifos=tuple(attrs["ifos"]),
        sample_rate=float(attrs["sample_rate"]),
        t0=GPSTime.parse(attrs["t0"]),
        n_samples=int(strain.shape[1]),
        chunk_samples=int(strain.chunks[1]),
        dq_bits=tuple(attrs["dq_bits"]),
        provenance=dict(attrs.get("provenance", {})),
        has_injections="injections" in group,
    )


def open_store(path: str | os.PathLike) -> xr.Dataset:
    """The store as a lazily indexed xarray Dataset (no Dask, nothing loaded yet)."""
    path = Path(path)
    _check_store(path)
    return xr.open_dataset(path, engine="zarr", chunks=None, cache=False, consolidated=True, zarr_format=3)


def read_strain(ds: xr.Dataset, ifos: Iterable[str], start: int, stop: int) -> np.ndarray:
    """Strain of ``ifos`` for samples ``[start, stop)`` as float32 ``(ifo, time)``.

    Samples outside the store read as NaN (no data), so callers mask them like any gap; a chunk
    that cannot be decoded is a :class:`DataError`.
    """
    ifos = list(ifos)
    rows = ifo_rows(ds, ifos)
    n = ds.sizes["time"]
    out = np.full((len(rows), stop - start), np.nan, dtype=np.float32)
    lo, hi = max(start, 0), min(stop, n)
    if hi > lo and rows:
        strain, span = ds["strain"], slice(lo, hi)
        try:
            # slices only: zarr's orthogonal selection (a list of detectors) decodes ~15x slower
            if rows == list(range(rows[0], rows[0] + len(rows))):
                out[:, lo - start : hi - start] = strain.isel(ifo=slice(rows[0], rows[-1] + 1), time=span).values
            else:
                for i, row in enumerate(rows):
                    out[i, lo - start : hi - start] = strain.isel(ifo=row, time=span).values
        except Exception as exc:  # a chunk that fails to decode (its checksum, a truncated file)
            raise DataError(f"strain of {', '.join(ifos)}, samples {lo}..{hi}, cannot be read from the store "
                            f"({type(exc).__name__}: {exc}); a chunk of it is damaged: restore or re-ingest it") from exc
    return out


def ifo_rows(ds: xr.Dataset, ifos: Iterable[str]) -> list[int]:
    """The store rows of ``ifos``, in that order."""
    names = [str(v) for v in ds["ifo"].values]
    missing = [ifo for ifo in ifos if ifo not in names]
    if missing:
        raise DataError(f"detector(s) {', '.join(missing)} not in the store; it has {', '.join(names)}")
    return [names.index(ifo) for ifo in ifos]


def read_dq(ds: xr.Dataset, ifos: Iterable[str]) -> np.ndarray:
    """The whole DQ bit mask ``(ifo, second)`` (a day is 86400 bytes per detector)."""
    return ds["dq"].sel(ifo=list(ifos)).values


def dq_sample_mask(dq_seconds: np.ndarray, required: int, start: int, stop: int, sample_rate: float) -> np.ndarray:
    """Per-sample science mask for samples ``[start, stop)`` from a 1 Hz DQ bit mask.

    A sample passes when every bit of ``required`` is set in its second; samples outside the
    DQ record fail.
    """
    idx = np.arange(start, stop, dtype=np.int64)
    sec = np.floor(idx / sample_rate).astype(np.int64)
    inside = (sec >= 0) & (sec < dq_seconds.shape[-1])
    ok = np.zeros(idx.shape, dtype=bool)
    ok[inside] = (dq_seconds[sec[inside]] & required) == required
    return ok


def read_injections(path: str | os.PathLike) -> pd.DataFrame | None:
    """The store's injection table, or None when it has none."""
    group = _check_store(Path(path))
    if "injections" not in group:
        return None
    grp = group["injections"]
    cols = grp.attrs.get("columns", sorted(grp.array_keys()))
    return pd.DataFrame({c: np.asarray(grp[c][:]) for c in cols})


def describe(meta: StoreMeta) -> str:
    """A short human summary of a store."""
    lines = [
        f"store       {meta.path}",
        f"series      {', '.join(meta.ifos)}",
        f"sample rate {meta.sample_rate:g} Hz",
        f"start (GPS) {meta.t0}",
        f"duration    {meta.duration:.6g} s ({meta.n_samples} samples)",
        f"dq bits     {', '.join(meta.dq_bits)}",
        f"injections  {'yes' if meta.has_injections else 'no'}",
        f"provenance  {json.dumps(meta.provenance)[:300]}",
    ]
    return "\n".join(lines)
