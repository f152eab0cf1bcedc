"""Read SIGPROC dedispersed time series (``.tim``) and ingest them into a strain store.

SIGPROC header format (SIGPROC user guide, "Header parameters"; Lorimer): the file starts with
the keyword ``HEADER_START`` and ends its header with ``HEADER_END``.  Every keyword is a string
stored as an int32 length followed by that many bytes; each keyword but those two is followed by
its value, whose type the keyword fixes (int32, float64 or another length-prefixed string).  All
numbers are little-endian.  The samples follow the header directly, ``nbits`` bits each.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import numpy as np

from gwbatch.errors import ConfigError, DataError
from gwbatch.gpstime import GPS_MAX, GPSTime, check_gps_range
from gwbatch.io.store import MAX_SAMPLE_RATE, MIN_SAMPLE_RATE, StoreWriter, file_sha256

_INT_KEYS = frozenset(
    {"telescope_id", "machine_id", "data_type", "barycentric", "pulsarcentric", "nbits",
     "nsamples", "nchans", "nifs", "nbeams", "ibeam"}
)
_FLOAT_KEYS = frozenset(
    {"az_start", "za_start", "src_raj", "src_dej", "tstart", "tsamp", "fch1", "foff", "refdm", "period"}
)
_STR_KEYS = frozenset({"source_name", "rawdatafile"})
#: SIGPROC telescope_id -> name (the table in SIGPROC's aliases.c as carried by PRESTO's
#: sigproc.py; sigpyproc agrees for 0-8).  Names are valid store series names.
TELESCOPES = {
    0: "Fake", 1: "Arecibo", 2: "Ooty", 3: "Nancay", 4: "Parkes", 5: "Jodrell", 6: "GBT",
    7: "GMRT", 8: "Effelsberg", 9: "ATA", 10: "SRT", 11: "LOFAR", 12: "VLA", 20: "CHIME",
    21: "FAST", 64: "MeerKAT", 65: "KAT-7",
}
DEFAULT_SERIES = "SERIES"
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
# Real headers are a few hundred bytes; a bound stops a foreign file from being read whole.
_MAX_HEADER = 1 << 16
_MAX_KEYWORD = 80
# nbits -> on-disk dtype; 8-bit SIGPROC data are unsigned.
_DTYPES = {32: np.dtype("<f4"), 8: np.dtype("u1")}


@dataclass(frozen=True, eq=False)
class SigprocData:
    """A SIGPROC file read: its path, header (keyword -> value) and samples."""

    path: Path
    header: dict
    data: np.ndarray

    @property
    def tsamp(self) -> float:
        return float(self.header["tsamp"])

    @property
    def sample_rate(self) -> float:
        return 1.0 / self.tsamp


@dataclass(frozen=True, eq=False)
class SigprocSeries(SigprocData):
    """A SIGPROC dedispersed time series: its header and samples (float32)."""


def _take(buf: bytes, pos: int, n: int, path: Path, what: str) -> bytes:
    if pos + n > len(buf):
        raise DataError(
            f"{path}: SIGPROC header ends inside {what} at byte {pos}; no HEADER_END within the first "
            f"{min(len(buf), _MAX_HEADER)} bytes (truncated file or not SIGPROC)"
        )
    return buf[pos : pos + n]


def _string(buf: bytes, pos: int, path: Path, what: str) -> tuple[str, int]:
    """A length-prefixed string at ``pos``; returns it and the position after it."""
    (n,) = struct.unpack("<i", _take(buf, pos, 4, path, what))
    if not 0 < n <= _MAX_KEYWORD:
        raise DataError(
            f"{path}: bad string length {n} for {what} at byte {pos} (expected 1..{_MAX_KEYWORD}); "
            f"not a SIGPROC file, or a corrupt header"
        )
    raw = _take(buf, pos + 4, n, path, what)
    return raw.decode("ascii", errors="replace"), pos + 4 + n


def _value(buf: bytes, pos: int, key: str, key_pos: int, path: Path) -> tuple[object, int]:
    if key in _INT_KEYS:
        return struct.unpack("<i", _take(buf, pos, 4, path, key))[0], pos + 4
    if key in _FLOAT_KEYS:
        return struct.unpack("<d", _take(buf, pos, 8, path, key))[0], pos + 8
    if key in _STR_KEYS:
        return _string(buf, pos, path, key)
    known = ", ".join(sorted(_INT_KEYS | _FLOAT_KEYS | _STR_KEYS))
    raise DataError(f"{path}: unknown SIGPROC header keyword {key!r} at byte {key_pos} (known: {known})")


def parse_sigproc_header(buf: bytes, path: Path) -> tuple[dict, int]:
    """Parse a SIGPROC header from the start of ``buf``; ``path`` only names it in errors."""
    first, pos = _string(buf, 0, path, "the first keyword")
    if first != "HEADER_START":
        raise DataError(f"{path}: starts with {first!r}, expected HEADER_START (not a SIGPROC file)")
    header: dict = {}
    while True:
        key_pos = pos
        key, pos = _string(buf, pos, path, "a keyword")
        if key == "HEADER_END":
            return header, pos
        header[key], pos = _value(buf, pos, key, key_pos, path)


def read_sigproc_header(path: str | os.PathLike) -> tuple[dict, int]:
    """Read the header of a SIGPROC file.

    Returns
    -------
    header, header_size
        Keyword -> value (int, float or str) and the header's length in bytes (the data offset).

    Raises
    ------
    DataError
        No ``HEADER_START``/``HEADER_END``, a truncated header, or an unknown keyword (named,
        with its byte offset).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"input file {path} does not exist (expected a SIGPROC .tim file)")
    with open(path, "rb") as fh:
        buf = fh.read(_MAX_HEADER)
    return parse_sigproc_header(buf, path)


def _require(header: dict, key: str, path: Path):
    if key not in header:
        raise DataError(f"{path}: SIGPROC header has no {key!r} (it holds: {', '.join(header)})")
    return header[key]


def _sample_dtype(header: dict, path: Path) -> np.dtype:
    nchans = header.get("nchans", 1)
    if nchans != 1:
        raise DataError(
            f"{path} is a filterbank with {nchans} channels; dedisperse it first (e.g. SIGPROC "
            f"'dedisperse' or sigpyproc) and ingest the 1-channel time series (.tim)"
        )
    nifs = header.get("nifs", 1)
    if nifs != 1:
        raise DataError(f"{path} has nifs={nifs} polarisations/IFs; expected 1 (sum them first)")
    nbits = _require(header, "nbits", path)
    if nbits not in _DTYPES:
        raise DataError(f"{path}: nbits={nbits} is not supported; expected 32 (float32) or 8 (unsigned)")
    return _DTYPES[nbits]


def read_tim(path: str | os.PathLike) -> SigprocSeries:
    """Read a SIGPROC dedispersed time series.

    Parameters
    ----------
    path
        A SIGPROC file with ``nchans`` 1 and ``nifs`` 1 (missing means 1, as in SIGPROC) and
        ``nbits`` 32 (float32) or 8 (unsigned; converted to float32).

    Returns
    -------
    SigprocSeries
        The header and the samples as float32.

    Raises
    ------
    DataError
        A filterbank, an unsupported ``nbits``, a data length that is not a whole number of
        samples, or a header ``nsamples`` that disagrees with the data.
    """
    path = Path(path)
    header, size = read_sigproc_header(path)
    dtype = _sample_dtype(header, path)
    check_tsamp(_require(header, "tsamp", path), path)
    n_bytes = path.stat().st_size - size
    n, rest = divmod(n_bytes, dtype.itemsize)
    if rest:
        # Never drop bytes silently: a partial sample means a truncated copy or a foreign tail.
        raise DataError(
            f"{path}: {n_bytes} data bytes after the {size}-byte header is not a whole number of "
            f"{dtype.itemsize}-byte samples; the file is truncated or has trailing bytes"
        )
    if n == 0:
        raise DataError(f"{path}: no samples after the {size}-byte header")
    if "nsamples" in header and header["nsamples"] not in (0, n):
        raise DataError(
            f"{path}: header says nsamples={header['nsamples']} but the file holds {n} samples "
            f"({n_bytes} bytes); the file is truncated or has trailing bytes"
        )
    data = np.fromfile(path, dtype=dtype, offset=size).astype(np.float32, copy=False)
    return SigprocSeries(path=path, header=header, data=data)


#: UTC MJD of GPS 0 (1980-01-06) and, a little generously, of GPS 2**32 s (2116).
_MJD_GPS0 = 44244.0
_MJD_GPS_MAX = _MJD_GPS0 + GPS_MAX / 86400.0


def check_tsamp(tsamp, path: Path) -> float:
    """``tsamp`` (s) if it gives a sample rate gwbatch stores (1 mHz to 1 MHz), else a
    :class:`DataError` naming the header key."""
    lo, hi = 1.0 / MAX_SAMPLE_RATE, 1.0 / MIN_SAMPLE_RATE
    if isinstance(tsamp, bool) or not isinstance(tsamp, (int, float)) or not (np.isfinite(tsamp) and lo <= tsamp <= hi):
        raise DataError(f"{path}: SIGPROC header key 'tsamp' is {tsamp!r}; expected a sample interval in seconds in "
                        f"[{lo:g}, {hi:g}] (sample rates {MIN_SAMPLE_RATE:g} to {MAX_SAMPLE_RATE:g} Hz)")
    return float(tsamp)


def tstart_gps(tstart, path: Path) -> GPSTime:
    """The GPS time of header key ``tstart`` (UTC MJD), refused with the key named unless it is a
    finite MJD within GPS [0, 2**32) s (MJD 44244 to ~93954)."""
    if isinstance(tstart, bool) or not isinstance(tstart, (int, float)) or not (
            np.isfinite(tstart) and _MJD_GPS0 <= tstart < _MJD_GPS_MAX):
        raise DataError(f"{path}: SIGPROC header key 'tstart' is {tstart!r}; expected a UTC MJD within the GPS era "
                        f"[{_MJD_GPS0:g}, {_MJD_GPS_MAX:.0f}) (1980-01-06 to 2116)")
    return check_gps_range(mjd_utc_to_gps(tstart), f"{path}: SIGPROC header key 'tstart' as GPS")


def mjd_utc_to_gps(mjd: float) -> GPSTime:
    """GPS time of a UTC MJD (SIGPROC ``tstart``), to the nanosecond.

    The float's exact binary value goes to astropy, whose decimal output avoids the 0.24 µs
    resolution of a float64 GPS time; the MJD float itself resolves about 1 µs.
    """
    from astropy.time import Time  # astropy is slow to import; only ingest needs it

    if not np.isfinite(mjd):
        raise DataError(f"tstart={mjd!r} is not a finite MJD")
    gps = Time(float(mjd), format="mjd", scale="utc").to_value("gps", subfmt="decimal")
    return GPSTime.parse(Decimal(gps))


def series_name(header: dict, name: str | None = None) -> str:
    """``name`` if given (validated), else the telescope's name, else ``"SERIES"``."""
    if name is not None:
        if not _NAME_RE.match(name):
            raise ConfigError(f"series name {name!r} is not of the form [A-Za-z0-9][A-Za-z0-9_.-]*")
        return name
    return TELESCOPES.get(header.get("telescope_id"), DEFAULT_SERIES)


def ingest_sigproc(
    path: str | os.PathLike,
    out: str | os.PathLike,
    *,
    name: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Ingest one SIGPROC time series into a one-series strain store.

    The series is named ``name``, else after the header's ``telescope_id`` (e.g. 6 -> ``GBT``),
    else ``SERIES``.  ``sample_rate = 1/tsamp``; ``t0`` is ``tstart`` (UTC MJD) as GPS.  Every
    second is flagged DATA: a time series carries no data-quality record.

    Returns
    -------
    Path
        ``out``, once the store is committed.
    """
    series = read_tim(path)
    header = series.header
    label = series_name(header, name)
    t0 = tstart_gps(_require(header, "tstart", series.path), series.path)
    rate = series.sample_rate
    n = series.data.size
    provenance = {"source": "sigproc", "file": series.path.name, "sha256": file_sha256(series.path), "header": header}
    with StoreWriter(
        out, ifos=(label,), sample_rate=rate, t0=t0, n_samples=n, dq_bits=("DATA",),
        provenance=provenance, overwrite=overwrite,
    ) as writer:
        writer.write_strain(label, 0, series.data)
        # Same second count as the store's dq array (StoreWriter uses ceil(n / rate)).
        writer.write_dq(label, 0, np.ones(int(np.ceil(n / rate)), dtype=np.uint8))
        return writer.commit()
