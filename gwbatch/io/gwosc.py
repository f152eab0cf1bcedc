"""Read GWOSC (formerly LOSC) HDF5 strain files and ingest them into a strain store.

The GWOSC HDF5 file format (https://gwosc.org/archive/dataset/ "HDF5 file format"; the same layout
as the older LOSC files) holds::

    strain/Strain              float64 strain; attrs Xstart (GPS start), Xspacing (1/sample rate)
    quality/simple/DQmask      1 Hz integer bit mask, one value per second of the file
    quality/simple/DQShortnames names of the mask bits, bit 0 first
    meta/Detector, meta/GPSstart, meta/Duration, ...

Only this layout is read; other HDF5 layouts (e.g. gwpy's ``H1:LDAS-STRAIN`` datasets) are
refused with a message saying so, rather than guessed at.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import h5py
import numpy as np

from gwbatch.errors import DataError, OutputError
from gwbatch.gpstime import GPSTime, check_gps_range
from gwbatch.io.store import (
    MAX_STORE_SECONDS,
    StoreWriter,
    file_sha256,
    whole_hz_rate,
)

_STRAIN = "strain/Strain"
_DQMASK = "quality/simple/DQmask"
_DQNAMES = "quality/simple/DQShortnames"
#: Detectors in this order first; any others follow, sorted.
IFO_ORDER = ("H1", "L1", "V1", "K1")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
# GWOSC file names are OBSERVATORY-IFO_..., e.g. H-H1_LOSC_4_V2-1126259446-32.hdf5.
_FILENAME_IFO_RE = re.compile(r"[A-Z]-([A-Z][0-9])_")
_NS = 1_000_000_000


@dataclass(frozen=True, eq=False)
class GwoscFile:
    """One GWOSC HDF5 file, fully read.

    ``eq=False``: instances compare by identity, since element-wise array equality has no single
    truth value.
    """

    path: Path
    ifo: str
    t0: GPSTime
    sample_rate: int
    strain: np.ndarray
    dq: np.ndarray
    dq_bits: tuple[str, ...]

    @property
    def n_samples(self) -> int:
        return int(self.strain.size)

    @property
    def duration(self) -> float:
        return self.n_samples / self.sample_rate


@dataclass(frozen=True, eq=False)
class _Layout:
    """Everything about a file except its strain (which may be large): the ingest plan."""

    path: Path
    ifo: str
    t0: GPSTime
    sample_rate: int
    n_samples: int
    dq: np.ndarray
    dq_bits: tuple[str, ...]


def _as_str(value) -> str:
    if isinstance(value, np.ndarray):
        value = value.item()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").strip()
    return str(value).strip()


def _open_hdf5(path: Path) -> h5py.File:
    if not path.is_file():
        raise DataError(f"input file {path} does not exist (expected a GWOSC/LOSC HDF5 strain file)")
    if not h5py.is_hdf5(path):
        raise DataError(
            f"{path} is not an HDF5 file; only GWOSC/LOSC HDF5 strain files (.hdf5) are supported"
        )
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        raise DataError(f"cannot open {path} as HDF5 ({exc}); is the file complete?") from exc


def _require(h5: h5py.File, name: str, path: Path) -> h5py.Dataset:
    obj = h5.get(name)
    if not isinstance(obj, h5py.Dataset):
        have = ", ".join(sorted(h5.keys())) or "nothing"
        raise DataError(
            f"{path} has no dataset {name!r} (top level holds: {have}); only GWOSC/LOSC HDF5 files "
            f"are supported (they hold {_STRAIN!r} and {_DQMASK!r})"
        )
    return obj


def _ifo(h5: h5py.File, path: Path) -> str:
    if "meta/Detector" in h5:
        ifo = _as_str(h5["meta/Detector"][()])
    else:
        # The observatory letter alone ("H") cannot tell H1 from H2; the file name can.
        m = _FILENAME_IFO_RE.match(path.name)
        if m is None:
            raise DataError(
                f"{path} has no meta/Detector and its name does not follow the GWOSC pattern "
                f"'H-H1_...'; cannot tell which detector it holds"
            )
        ifo = m.group(1)
    if not _NAME_RE.match(ifo):
        raise DataError(f"{path}: detector name {ifo!r} is not of the form [A-Za-z0-9][A-Za-z0-9_.-]*")
    return ifo


def _start(strain: h5py.Dataset, h5: h5py.File, path: Path) -> GPSTime:
    if "Xstart" in strain.attrs:
        value = strain.attrs["Xstart"]
    elif "meta/GPSstart" in h5:
        value = h5["meta/GPSstart"][()]
    else:
        raise DataError(f"{path}: no start time ({_STRAIN} attribute Xstart or meta/GPSstart)")
    # GPSTime.parse goes through str(): exact for integers, shortest round-trip repr for floats.
    value = np.asarray(value).item() if np.asarray(value).size == 1 else value
    what = "Xstart" if "Xstart" in strain.attrs else "meta/GPSstart"
    try:
        t0 = GPSTime.parse(value)
    except DataError as exc:
        raise DataError(f"{path}: {what} {value!r} is not a GPS time ({exc})") from exc
    return check_gps_range(t0, f"{path}: {what}")


def _sample_rate(strain: h5py.Dataset, path: Path) -> int:
    if "Xspacing" not in strain.attrs:
        raise DataError(f"{path}: {_STRAIN} has no Xspacing attribute (the sample spacing in seconds)")
    return whole_hz_rate(float(np.asarray(strain.attrs["Xspacing"]).item()), f"{path}: Xspacing")


def _dq_bits(h5: h5py.File, path: Path) -> tuple[str, ...]:
    names = tuple(_as_str(n) for n in np.asarray(_require(h5, _DQNAMES, path)[()]).ravel())
    if len(names) > 8:
        raise DataError(f"{path}: {len(names)} DQ bits in {_DQNAMES}; at most 8 are supported (the store keeps uint8)")
    return names


def _dq(h5: h5py.File, path: Path, n_samples: int, rate: int, n_bits: int) -> np.ndarray:
    raw = np.asarray(_require(h5, _DQMASK, path)[()]).ravel()
    n_sec = -(-n_samples // rate)
    if raw.size != n_sec:
        raise DataError(
            f"{path}: {_DQMASK} has {raw.size} values, expected {n_sec} (one per second of the "
            f"{n_samples / rate:g} s of strain)"
        )
    if raw.size and (raw.min() < 0 or raw.max() >= (1 << n_bits)):
        raise DataError(
            f"{path}: {_DQMASK} values span [{raw.min()}, {raw.max()}], outside the {n_bits} bits "
            f"named in {_DQNAMES} (allowed 0..{(1 << n_bits) - 1})"
        )
    return raw.astype(np.uint8)


def _read(path: str | os.PathLike, with_strain: bool) -> tuple[_Layout, np.ndarray | None]:
    path = Path(path)
    with _open_hdf5(path) as h5:
        strain = _require(h5, _STRAIN, path)
        _require(h5, _DQMASK, path)
        if strain.ndim != 1 or strain.size == 0:
            raise DataError(f"{path}: {_STRAIN} has shape {strain.shape}; expected a non-empty 1-D series")
        if strain.dtype.kind != "f":  # integers would be ADC counts or another layout, not strain
            raise DataError(f"{path}: {_STRAIN} has dtype {strain.dtype}; expected floating-point strain "
                            "(float32 or float64)")
        rate = _sample_rate(strain, path)
        bits = _dq_bits(h5, path)
        layout = _Layout(
            path=path,
            ifo=_ifo(h5, path),
            t0=_start(strain, h5, path),
            sample_rate=rate,
            n_samples=int(strain.size),
            dq=_dq(h5, path, int(strain.size), rate, len(bits)),
            dq_bits=bits,
        )
        values = np.asarray(strain[()], dtype=np.float64) if with_strain else None
    return layout, values


def read_gwosc(path: str | os.PathLike) -> GwoscFile:
    """Read one GWOSC/LOSC HDF5 strain file.

    Parameters
    ----------
    path
        A file in the GWOSC HDF5 format (``strain/Strain`` with ``Xstart``/``Xspacing``,
        ``quality/simple/DQmask`` and ``DQShortnames``).

    Returns
    -------
    GwoscFile
        Strain as float64 (NaN samples kept), the 1 Hz DQ mask as uint8 and the bit names.

    Raises
    ------
    DataError
        Not HDF5, not the GWOSC layout, a non-integer sample rate, or a DQ mask whose length is
        not ``ceil(duration)``.
    """
    layout, strain = _read(path, with_strain=True)
    return GwoscFile(
        path=layout.path, ifo=layout.ifo, t0=layout.t0, sample_rate=layout.sample_rate,
        strain=strain, dq=layout.dq, dq_bits=layout.dq_bits,
    )


def _ifo_key(ifo: str) -> tuple[int, str]:
    return (IFO_ORDER.index(ifo), "") if ifo in IFO_ORDER else (len(IFO_ORDER), ifo)


def _check_common(files: Sequence[_Layout]) -> None:
    """One sample rate and one set of DQ bit names across all files."""
    first = files[0]
    for f in files[1:]:
        if f.sample_rate != first.sample_rate:
            raise DataError(
                f"sample rates differ: {first.path.name} is {first.sample_rate} Hz but {f.path.name} "
                f"is {f.sample_rate} Hz; all files of one ingest must share one rate (resample first)"
            )
        if f.dq_bits != first.dq_bits:
            raise DataError(
                f"DQ bit names differ: {first.path.name} has {list(first.dq_bits)} but {f.path.name} "
                f"has {list(f.dq_bits)}; all files of one ingest must use the same DQ bits"
            )


def _offset_samples(f: _Layout, t0: GPSTime, ref: _Layout) -> int:
    """Sample index of ``f``'s start in a store starting at ``t0`` (the start of ``ref``)."""
    delta_ns = f.t0.total_ns - t0.total_ns
    # Exact integer test: delta_ns * rate must be a whole number of 1e9 (rate is integer Hz).
    if (delta_ns * f.sample_rate) % _NS:
        raise DataError(
            f"{f.path.name} starts at GPS {f.t0}, which is not on the sample grid of {ref.path.name} "
            f"(start {t0}, {f.sample_rate} Hz): start times must differ by a whole number of samples"
        )
    if delta_ns % _NS:
        raise DataError(
            f"{f.path.name} starts at GPS {f.t0}, not a whole number of seconds after the store start "
            f"{t0} ({ref.path.name}); its 1 Hz DQ mask could not be placed (GWOSC files start on whole seconds)"
        )
    return delta_ns * f.sample_rate // _NS


def _check_overlaps(files: Sequence[_Layout], offsets: Sequence[int], t0: GPSTime) -> None:
    """Refuse files of one detector that share any sample (``files`` sorted by detector, start)."""
    for i in range(1, len(files)):
        prev, nxt = files[i - 1], files[i]
        prev_stop = offsets[i - 1] + prev.n_samples
        if prev.ifo == nxt.ifo and offsets[i] < prev_stop:
            stop = min(prev_stop, offsets[i] + nxt.n_samples)
            raise DataError(
                f"{prev.path.name} and {nxt.path.name} ({nxt.ifo}) overlap in GPS "
                f"[{nxt.t0}, {t0.add_samples(stop, nxt.sample_rate)}); files of one detector must "
                f"not overlap (drop one or trim it)"
            )


def _check_span(files: Sequence[_Layout], offsets: Sequence[int], ref: _Layout, n_samples: int) -> None:
    """Refuse a join longer than :data:`~gwbatch.io.store.MAX_STORE_SECONDS` (4 years), naming the
    first file and the one that ends last (one of them likely has a corrupt start time)."""
    seconds = n_samples / ref.sample_rate
    if seconds > MAX_STORE_SECONDS:
        last = max(zip(offsets, files), key=lambda of: of[0] + of[1].n_samples)[1]
        raise DataError(
            f"the files span {seconds:.6g} s, from {ref.path.name} (GPS {ref.t0}) to the end of {last.path.name} "
            f"(GPS {last.t0} + {last.n_samples / last.sample_rate:g} s); a store may span at most "
            f"{MAX_STORE_SECONDS:.0f} s (4 years): "
            f"is one start time (Xstart) wrong? Ingest the files in separate stores otherwise"
        )


def _provenance(files: Sequence[_Layout]) -> dict:
    return {
        "source": "gwosc",
        "files": [
            {
                "name": f.path.name,
                "ifo": f.ifo,
                "gps_start": str(f.t0),
                "duration": f.n_samples / f.sample_rate,
                "sha256": file_sha256(f.path),
            }
            for f in files
        ],
    }


def ingest_gwosc(
    paths: Iterable[str | os.PathLike],
    out: str | os.PathLike,
    *,
    overwrite: bool = False,
    chunk_samples: int | None = None,
) -> Path:
    """Ingest GWOSC HDF5 files (any detectors, any order) into one strain store.

    The store spans the earliest file start to the latest file end.  Times a detector's files do
    not cover are left unwritten, so they read as NaN strain and DQ 0 (masked, never zeros).

    Parameters
    ----------
    paths
        GWOSC/LOSC HDF5 files; all at one sample rate, on one sample grid, starting on whole
        seconds relative to each other, with the same DQ bit names.  Files of one detector must
        not overlap.
    out
        The store to create (a directory).
    overwrite
        Replace an existing store at ``out``.
    chunk_samples
        Strain chunk length along time; ``None`` keeps the store's default.

    Returns
    -------
    Path
        ``out``, once the store is committed.
    """
    out = Path(out)
    paths = [Path(p) for p in paths]
    if not paths:
        raise DataError("no input files given; expected one or more GWOSC HDF5 files")
    # Fail before reading and hashing possibly gigabytes of input.
    if out.exists() and not overwrite:
        raise OutputError(f"{out} already exists; pass --overwrite to replace it")
    files = sorted((_read(p, with_strain=False)[0] for p in paths), key=lambda f: (_ifo_key(f.ifo), f.t0))
    _check_common(files)
    ref = min(files, key=lambda f: f.t0)
    offsets = [_offset_samples(f, ref.t0, ref) for f in files]
    _check_overlaps(files, offsets, ref.t0)
    n_samples = max(off + f.n_samples for off, f in zip(offsets, files))
    _check_span(files, offsets, ref, n_samples)
    ifos = tuple(dict.fromkeys(f.ifo for f in files))
    extra = {} if chunk_samples is None else {"chunk_samples": int(chunk_samples)}
    with StoreWriter(
        out, ifos=ifos, sample_rate=ref.sample_rate, t0=ref.t0, n_samples=n_samples,
        dq_bits=ref.dq_bits, provenance=_provenance(files), overwrite=overwrite, **extra,
    ) as writer:
        for off, f in zip(offsets, files):
            _, strain = _read(f.path, with_strain=True)
            writer.write_strain(f.ifo, off, strain)
            writer.write_dq(f.ifo, off // f.sample_rate, f.dq)
        return writer.commit()
