"""Channel files: GWF frames (through LALFrame) and gwpy's HDF5 time series, read piece by piece.

Why LALFrame: it is the frame library of the LVK's own pipelines, it ships as wheels with
lalsuite (already gwbatch's optional dependency for waveforms) and its per-frame calls
(``XLALFrFileQueryChanType``, ``...ChanVectorLength``, ``XLALFrFileRead*TimeSeries``) let a file
be listed before any sample is read, so a missing channel or an empty frame is refused in
milliseconds.  gwpy would read the same frames through the same libraries with more layers.

A channel is named ``IFO:NAME`` (``H1:GDS-CALIB_STRAIN``); its detector is the prefix.  Each
frame of a file that holds the channel, or each gwpy dataset, is one :class:`Piece`: a contiguous
run of samples at one whole-Hz rate.  Inputs are files, globs or LAL cache files
(:func:`expand_inputs`); a file is told by its first bytes (``IGWD``: a frame; the HDF5
signature: a gwpy file), never by its name.

The boundary: every header value (start, sample spacing, sample count, data type) is range
checked before an array is made; a missing channel, an empty frame or a file LALFrame cannot open
is a one-line :class:`~gwbatch.errors.DataError` naming the file and the channel.  LALFrame is
handed only frame files whose own file checksum holds (:func:`verify_gwf`, in Python): its parser
crashes the interpreter on some corrupt files (a flipped byte in a structure header), and that
checksum covers every byte.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import hashlib
import os
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence
from urllib.parse import unquote, urlparse

import h5py
import numpy as np

from gwbatch.errors import DataError
from gwbatch.gpstime import GPS_MAX, GPSTime, check_gps_range
from gwbatch.io.store import MAX_STORE_SECONDS, file_sha256, whole_hz_rate

FRAME_MAGIC = b"IGWD"
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
_NS = 1_000_000_000
_CHANNEL_RE = re.compile(r"([A-Z][A-Z0-9]):([A-Za-z0-9_.:-]+)\Z")
#: The most samples one piece may hold (a frame of 2**31 samples is 16 GiB of REAL8).
MAX_PIECE_SAMPLES = 1 << 31
#: Lines of a LAL cache file read before giving up (a 10 MB cache lists ~10^5 files).
MAX_CACHE_LINES = 1_000_000
#: Characters no listed path may hold, and channel names are quoted for: C0 and C1 controls and
#: Unicode's line separators.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


@dataclass(frozen=True)
class Channel:
    """A requested channel ``IFO:NAME``."""

    name: str

    @property
    def ifo(self) -> str:
        return self.name.split(":", 1)[0]


def shown_names(names: Sequence[str], limit: int) -> str:
    """The first ``limit`` of a file's channel names for a message, one line: a name holding a
    control character or a line separator is shown quoted."""
    shown = [repr(n) if _CONTROL.search(n) else n for n in names[:limit]]
    return ", ".join(shown) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def parse_channels(names: Iterable[str]) -> tuple[Channel, ...]:
    """The ``--channel`` values: ``IFO:NAME``, at most one per detector."""
    out: list[Channel] = []
    for name in names:
        if not isinstance(name, str) or not _CHANNEL_RE.match(name):
            raise DataError(f"channel {name!r} is not of the form IFO:NAME with IFO a letter and a digit "
                            f"(e.g. H1:GDS-CALIB_STRAIN)")
        ch = Channel(name)
        if any(c.ifo == ch.ifo for c in out):
            other = next(c.name for c in out if c.ifo == ch.ifo)
            raise DataError(f"channels {other} and {name} are both for {ch.ifo}; give one channel per detector")
        out.append(ch)
    if not out:
        raise DataError("no --channel given; name each detector's channel, e.g. --channel H1:GDS-CALIB_STRAIN")
    return tuple(out)


@dataclass(frozen=True)
class Piece:
    """A contiguous run of one channel in one file: frame ``frame`` of a GWF file, a gwpy HDF5
    dataset (``frame`` -1) or a series in memory (-2).  ``dtype``: the stored sample type."""

    path: Path
    channel: str
    t0: GPSTime
    sample_rate: int
    n_samples: int
    frame: int
    dtype: str

    @property
    def ifo(self) -> str:
        return self.channel.split(":", 1)[0]

    @property
    def kind(self) -> str:
        return {-1: "hdf5", -2: "memory"}.get(self.frame, "gwf")


@dataclass(frozen=True)
class FileScan:
    """What a file holds of the requested channels, with its size and SHA-256."""

    path: Path
    format: str
    pieces: tuple[Piece, ...]
    size: int
    sha256: str
    held: tuple[str, ...] = ()  # every channel the file holds (for messages)
    frames: tuple[tuple[GPSTime, float], ...] = ()  # a frame file's frames: (start, length in s)
    found: tuple[str, ...] = ()  # the requested channels it holds


# ---------------------------------------------------------------------------------------------
# inputs


def _magic(path: Path) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(8)
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from None


def _cache_path(entry: str, cache: Path, lineno: int) -> Path:
    """The file of a LAL cache line's URL (``file://localhost/path``, ``file:///path`` or a path)."""
    try:
        url = urlparse(entry)
    except ValueError as exc:  # e.g. 'file://[/a.gwf': an unclosed IPv6 host
        raise DataError(f"{cache} line {lineno}: URL {entry!r} cannot be parsed ({exc})") from None
    if url.scheme not in ("", "file"):
        raise DataError(f"{cache} line {lineno}: URL {entry!r} is not a local file (only file:// URLs and paths)")
    if url.scheme == "file" and url.netloc not in ("", "localhost"):
        raise DataError(f"{cache} line {lineno}: URL {entry!r} names host {url.netloc!r}; only localhost files are read")
    # %-escapes are the name's bytes (surrogateescape keeps those that are not UTF-8, as os.fsdecode does)
    text = unquote(url.path, errors="surrogateescape") if url.scheme else entry
    if _CONTROL.search(text):
        raise DataError(f"{cache} line {lineno}: {entry!r} names a path holding a control character")
    path = Path(text)
    return path if path.is_absolute() else cache.parent / path


def read_cache(path: Path) -> list[Path]:
    """The files of a LAL cache (lines ``OBSERVATORY DESCRIPTION GPS_START DURATION URL``)."""
    files: list[Path] = []
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        lines = text.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise DataError(f"{path} is neither a GWF frame, a gwpy HDF5 file nor a LAL cache (text) file") from None
    if len(lines) > MAX_CACHE_LINES:
        raise DataError(f"{path}: {len(lines)} lines; a LAL cache may list at most {MAX_CACHE_LINES} files")
    for lineno, line in enumerate(lines, 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) != 5 or not fields[2].isdigit() or not fields[3].replace(".", "", 1).isdigit():
            raise DataError(f"{path} line {lineno}: {line.strip()[:80]!r} is not a LAL cache line "
                            f"(OBSERVATORY DESCRIPTION GPS_START DURATION URL)")
        files.append(_cache_path(fields[4], path, lineno))
    if not files:
        raise DataError(f"{path} is a text file listing no frame files; expected a LAL cache "
                        f"(lines 'H H1_HOFT 1126256640 4096 file://localhost/path.gwf')")
    return files


def expand_inputs(items: Iterable[str | os.PathLike]) -> list[Path]:
    """Files from ``items``: data files, glob patterns (matched, sorted) and LAL cache files
    (their listed files); each file once, in the order given."""
    found: dict[Path, None] = {}
    for item in items:
        text = os.fspath(item)
        if not Path(text).exists() and glob.has_magic(text):
            matches = sorted(glob.glob(text))
            if not matches:
                raise DataError(f"pattern {text!r} matches no file")
            paths = [Path(m) for m in matches]
        else:
            paths = [Path(text)]
        for path in paths:
            if not path.is_file():
                raise DataError(f"input {path} does not exist or is not a file (expected GWF frames, gwpy HDF5 "
                                f"files, globs or LAL cache files)")
            magic = _magic(path)
            if magic.startswith(FRAME_MAGIC) or magic == HDF5_MAGIC:
                found.setdefault(path)
            else:
                for listed in read_cache(path):
                    if not listed.is_file():
                        raise DataError(f"{path} lists {listed}, which does not exist")
                    found.setdefault(listed)
    if not found:
        raise DataError("no input files given; expected GWF frames, gwpy HDF5 files, globs or LAL cache files")
    return list(found)


# ---------------------------------------------------------------------------------------------
# header checks, shared by both formats


def header_piece(path: Path, channel: str, t0: GPSTime, spacing: float, n: int, frame: int, dtype: str) -> Piece:
    where = f"{path}: channel {channel}" + (f" frame {frame}" if frame >= 0 else "")
    check_gps_range(t0, f"{where}: start")
    rate = whole_hz_rate(spacing, f"{where}: sample spacing")
    if n <= 0:
        raise DataError(f"{where} holds no samples (an empty frame); drop the file or re-make it")
    if n > MAX_PIECE_SAMPLES or n / rate > MAX_STORE_SECONDS:
        raise DataError(f"{where}: {n} samples at {rate} Hz is more than a store may hold")
    return Piece(path, channel, t0, rate, int(n), frame, dtype)


# ---------------------------------------------------------------------------------------------
# GWF through LALFrame


def _lalframe():
    try:
        import lal
        import lalframe
    except ImportError:
        raise DataError("reading GWF frames needs LALFrame: pip install 'gwbatch[lal]' (lalsuite)") from None
    return lal, lalframe


@contextlib.contextmanager
def _quiet_lal() -> Iterator[tuple]:
    """LAL and LALFrame with XLAL's error printing off (its errors become one-line DataErrors)."""
    lal, lalframe = _lalframe()
    level = lal.GetDebugLevel()
    lal.ClobberDebugLevel(0)
    try:
        yield lal, lalframe
    finally:
        lal.ClobberDebugLevel(level)


#: Sample types read (LAL type code: name, reader suffix); strain is real.
_GWF_TYPES = {10: ("float32", "REAL4"), 11: ("float64", "REAL8")}


#: Bytes of a version 8 frame file's header and of the FrEndOfFile structure that ends it (the
#: common structure header, nFrames, nBytes, seekTOC and the header, structure and file CRCs).
_GWF_HEADER, _GWF_EOF = 40, 46
_BIT_REVERSED = bytes(int(f"{i:08b}"[::-1], 2) for i in range(256))
#: Frame files whose checksum held, by (path, device, inode, size, mtime, ctime): verified once
#: per process however many of their frames are read.
_VERIFIED: dict[tuple, str] = {}


def _posix_cksum(fh, n: int, also=None) -> int:
    """The POSIX ``cksum`` CRC of the next ``n`` bytes of ``fh`` (FrameL's file checksum), through
    zlib's reflected CRC-32 on bit-reversed bytes; ``also`` (a hashlib object) is fed the same bytes."""
    crc, left = 0xFFFFFFFF, n  # zlib's state is complemented: this starts the CRC at 0
    while left:
        block = fh.read(min(left, 1 << 22))
        if not block:
            break
        crc = zlib.crc32(block.translate(_BIT_REVERSED), crc)
        if also is not None:
            also.update(block)
        left -= len(block)
    crc = zlib.crc32(n.to_bytes((n.bit_length() + 7) // 8, "little").translate(_BIT_REVERSED), crc)  # then the length
    return ~int(f"{crc ^ 0xFFFFFFFF:032b}"[::-1], 2) & 0xFFFFFFFF


def verify_gwf(path: Path) -> str:
    """Refuse a frame file that is not a version 8 GWF file ending in its FrEndOfFile structure, or
    whose file checksum (a CRC of every byte before it) does not hold; returns the file's SHA-256
    (computed in the same read).  A file is verified once per process, until it changes.

    The file checksum covers every byte, so FrameL's per-structure checksums (``FrFileCksumValid``,
    a second pass through the file at ~100 MB/s) would add nothing once it holds."""
    try:
        st = os.stat(path)
        key = (os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if key in _VERIFIED:
            return _VERIFIED[key]
        with open(path, "rb") as fh:
            head = fh.read(_GWF_HEADER)
            if len(head) < _GWF_HEADER or not head.startswith(FRAME_MAGIC + b"\0"):
                raise DataError(f"{path}: not a GWF frame file (its {_GWF_HEADER}-byte header is cut or wrong)")
            if head[5] != 8:
                raise DataError(f"{path}: GWF version {head[5]}; gwbatch reads version 8 frame files (whose file "
                                f"checksum it verifies before LALFrame parses them)")
            order = {b"\x34\x12": "<", b"\x12\x34": ">"}.get(head[12:14])
            if order is None or st.st_size < _GWF_HEADER + _GWF_EOF:
                raise DataError(f"{path}: a cut or corrupt GWF header or file")
            fh.seek(st.st_size - _GWF_EOF)
            length, _, _, _, _, n_bytes, _, _, _, stored = struct.unpack(order + "QBBIIQQIII", fh.read(_GWF_EOF))
            if (length, n_bytes) != (_GWF_EOF, st.st_size):
                raise DataError(f"{path}: does not end with the GWF end-of-file record its length and layout call for "
                                f"(a truncated, extended or corrupt frame file)")
            if stored == 0:
                raise DataError(f"{path}: the frame file carries no file checksum, so it cannot be verified before "
                                f"LALFrame parses it; re-write it with checksums")
            fh.seek(0)
            sha = hashlib.sha256()
            if _posix_cksum(fh, st.st_size - 4, also=sha) != stored:
                raise DataError(f"{path}: the frame file's checksum does not match its contents (a corrupt frame file)")
            sha.update(fh.read(4))
        if len(_VERIFIED) >= 4096:  # a bound on memory; a file forgotten is verified again
            _VERIFIED.clear()
        _VERIFIED[key] = sha.hexdigest()
        return _VERIFIED[key]
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from None


def _open_gwf(lalframe, path: Path):
    verify_gwf(path)
    try:
        return lalframe.FrFileOpenURL(str(path))
    except RuntimeError as exc:
        raise DataError(f"{path}: LALFrame cannot open it as a GWF frame file ({exc}): truncated or corrupt?") from None


def _toc(path: Path) -> tuple[list[str], list[tuple[GPSTime, float]]]:
    """A frame file's channel names (ADC, processed, simulated) and its frames' ``(start, length)``,
    from its table of contents: no data vector is read."""
    with _quiet_lal() as (lal, lalframe):
        # FrFileOpenURL reads and checks the table of contents (a truncated file fails here); the
        # lower-level FrameU calls below would crash on a table of contents that is not there.
        frfile = _open_gwf(lalframe, path)
        frames = []
        for k in range(lalframe.FrFileQueryNFrame(frfile)):
            start = lal.LIGOTimeGPS(0)
            lalframe.FrFileQueryGTime(start, frfile, k)
            dt = float(lalframe.FrFileQueryDt(frfile, k))
            if not (np.isfinite(dt) and 0 < dt <= MAX_STORE_SECONDS):
                raise DataError(f"{path}: frame {k} lasts {dt!r} s: not a frame header gwbatch can use")
            if not 0 <= start.gpsSeconds < GPS_MAX:
                raise DataError(f"{path}: frame {k} starts at GPS {start.gpsSeconds}, outside [0, 2**32) s")
            frames.append((GPSTime.parse(start), dt))
        stream = lalframe.FrameUFrFileOpen(str(path), "r")
        toc = lalframe.FrameUFrTOCRead(stream) if stream is not None else None
        names = []
        if toc is not None:
            for count, name in ((lalframe.FrameUFrTOCQueryAdcN, lalframe.FrameUFrTOCQueryAdcName),
                                (lalframe.FrameUFrTOCQueryProcN, lalframe.FrameUFrTOCQueryProcName),
                                (lalframe.FrameUFrTOCQuerySimN, lalframe.FrameUFrTOCQuerySimName)):
                names += [name(toc, i) for i in range(count(toc))]
        del toc, stream  # the table of contents refers into the open file: drop it first
    return names, frames


def gwf_channels(path: Path) -> list[str]:
    """The channel names in a frame file's table of contents (empty if it cannot be read)."""
    try:
        return _toc(path)[0]
    except DataError:
        return []


@dataclass(frozen=True)
class ChannelFormat:
    """How a frame file stores a channel, from one frame: sample type, rate, and the channel's
    start relative to its frame's (a processed channel's time offset)."""

    channel: str
    dtype: str
    sample_rate: int
    offset_ns: int


def probe_channel(path: Path, channel: str) -> ChannelFormat:
    """Read one frame of ``channel`` in ``path`` for its sample type, rate and time offset."""
    names, frames = _toc(path)
    if channel not in names:
        raise DataError(f"{path} does not hold {channel}")
    with _quiet_lal() as (_, lalframe):
        frfile = _open_gwf(lalframe, path)
        try:
            code = lalframe.FrFileQueryChanType(frfile, channel, 0)
        except RuntimeError as exc:
            raise DataError(f"{path}: channel {channel} frame 0 cannot be read ({exc})") from None
        if code not in _GWF_TYPES:
            raise DataError(f"{path}: channel {channel} holds LAL type code {code}; expected real strain (REAL4 or REAL8)")
        dtype, suffix = _GWF_TYPES[code]
        try:
            meta = getattr(lalframe, f"FrFileRead{suffix}TimeSeriesMetadata")(frfile, channel, 0)
        except RuntimeError as exc:
            raise DataError(f"{path}: channel {channel} frame 0 cannot be read ({exc})") from None
    where = f"{path}: channel {channel}"
    rate = whole_hz_rate(float(meta.deltaT), f"{where}: sample spacing")
    offset = GPSTime(int(meta.epoch.gpsSeconds), int(meta.epoch.gpsNanoSeconds)).total_ns - frames[0][0].total_ns
    if abs(offset) > frames[0][1] * _NS:
        raise DataError(f"{where} starts {offset / _NS:g} s from its frame's start, outside the frame")
    return ChannelFormat(channel, dtype, rate, offset)


def gwf_pieces(scan: "FileScan", fmt: ChannelFormat) -> tuple[Piece, ...]:
    """The pieces of ``fmt.channel`` in a scanned frame file: one per frame, ``rate × length``
    samples from the frame's start plus the channel's offset (checked when each is read)."""
    pieces = []
    for k, (start, dt) in enumerate(scan.frames):
        n = dt * fmt.sample_rate
        if abs(n - round(n)) > 1e-6:
            raise DataError(f"{scan.path}: frame {k} lasts {dt!r} s, not a whole number of {fmt.sample_rate} Hz samples "
                            f"of {fmt.channel}")
        pieces.append(header_piece(scan.path, fmt.channel, start.add_ns(fmt.offset_ns), 1.0 / fmt.sample_rate,
                                   int(round(n)), k, fmt.dtype))
    return tuple(pieces)


def channel_sources(scans: Sequence["FileScan"]) -> dict[str, Path]:
    """For each requested channel held in a frame file, the first such file (to probe)."""
    first: dict[str, Path] = {}
    for scan in scans:
        if scan.format == "gwf":
            for channel in scan.found:
                first.setdefault(channel, scan.path)
    return first


def with_frame_pieces(scans: Sequence["FileScan"], formats: dict[str, ChannelFormat]) -> list["FileScan"]:
    """The scans with each frame file's pieces laid out from the channels' probed formats."""
    return [dataclasses.replace(s, pieces=s.pieces + sum((gwf_pieces(s, formats[c]) for c in s.found), ()))
            if s.format == "gwf" else s for s in scans]


def scan_all(paths: Sequence[Path], channels: Sequence[str]) -> list["FileScan"]:
    """:func:`scan_file` each path and lay out its pieces, in this process."""
    scans = [scan_file(p, channels) for p in paths]
    formats = {c: probe_channel(p, c) for c, p in channel_sources(scans).items()}
    return with_frame_pieces(scans, formats)


def _read_gwf(piece: Piece) -> np.ndarray:
    with _quiet_lal() as (_, lalframe):
        frfile = _open_gwf(lalframe, piece.path)
        suffix = _GWF_TYPES[11 if piece.dtype == "float64" else 10][1]
        try:
            series = getattr(lalframe, f"FrFileRead{suffix}TimeSeries")(frfile, piece.channel, piece.frame)
        except RuntimeError as exc:
            raise DataError(f"{piece.path}: channel {piece.channel} frame {piece.frame} cannot be read as "
                            f"{piece.dtype} ({exc}): a corrupt frame, or a sample type unlike the first file's?") from None
        values = np.array(series.data.data, dtype=np.float64)
        t0 = GPSTime(int(series.epoch.gpsSeconds), int(series.epoch.gpsNanoSeconds))
        spacing = float(series.deltaT)
    if (values.size, t0) != (piece.n_samples, piece.t0) or abs(spacing * piece.sample_rate - 1) > 1e-9:
        raise DataError(f"{piece.path}: channel {piece.channel} frame {piece.frame} holds {values.size} samples at "
                        f"{1 / spacing:g} Hz from GPS {t0}; its frame header and the channel's first frame said "
                        f"{piece.n_samples} at {piece.sample_rate} Hz from {piece.t0}")
    return values


# ---------------------------------------------------------------------------------------------
# gwpy's HDF5 layout: one dataset per channel, named by it, with attributes x0 (GPS start) and dx


#: What h5py raises for a link, dataset or attribute it cannot follow or read (a soft-link cycle,
#: a missing external file, an attribute of a type it has no NumPy form for).
_H5_ERRORS = (KeyError, OSError, RuntimeError, TypeError, ValueError)


def _hdf5_pieces(path: Path, channels: Sequence[str]) -> list[Piece]:
    try:
        h5 = h5py.File(path, "r")
    except OSError as exc:
        raise DataError(f"cannot open {path} as HDF5 ({exc}); is the file complete?") from None
    with h5:
        try:
            return _hdf5_headers(h5, path, channels)
        except _H5_ERRORS as exc:
            raise DataError(f"{path}: a dataset or attribute cannot be read ({' '.join(str(exc).split())})") from None


def _hdf5_headers(h5: h5py.File, path: Path, channels: Sequence[str]) -> list[Piece]:
    pieces: list[Piece] = []
    if "strain/Strain" in h5:
        raise DataError(f"{path} is a GWOSC strain file, not a gwpy one: ingest it with 'gwbatch ingest gwosc'")
    for channel in channels:
        obj = h5.get(channel)
        if obj is None:
            continue
        where = f"{path}: channel {channel}"
        if not isinstance(obj, h5py.Dataset) or obj.ndim != 1 or obj.dtype.kind != "f":
            raise DataError(f"{where} is not a 1-D floating-point dataset (gwpy's TimeSeries layout)")
        missing = [a for a in ("x0", "dx") if a not in obj.attrs]
        if missing:
            raise DataError(f"{where} has no attribute {', '.join(missing)} (gwpy writes x0 = GPS start, "
                            f"dx = sample spacing)")
        try:
            t0 = GPSTime.parse(np.asarray(obj.attrs["x0"]).item())
            spacing = float(np.asarray(obj.attrs["dx"]).item())
        except (DataError, TypeError, ValueError) as exc:
            raise DataError(f"{where}: x0/dx are not numbers ({exc})") from None
        pieces.append(header_piece(path, channel, t0, spacing, int(obj.size), -1, str(obj.dtype)))
    return pieces


def _read_hdf5(piece: Piece) -> np.ndarray:
    try:
        with h5py.File(piece.path, "r") as h5:
            values = np.asarray(h5[piece.channel][()], dtype=np.float64)
    except _H5_ERRORS as exc:  # e.g. missing external storage, a filter not installed
        reason = " ".join(str(exc).split())
        raise DataError(f"{piece.path}: channel {piece.channel} cannot be read ({reason})") from None
    if values.size != piece.n_samples:
        raise DataError(f"{piece.path}: channel {piece.channel} changed while being read")
    return values


# ---------------------------------------------------------------------------------------------


def file_format(path: Path) -> str:
    magic = _magic(path)
    if magic.startswith(FRAME_MAGIC):
        return "gwf"
    if magic == HDF5_MAGIC:
        return "hdf5"
    raise DataError(f"{path} is neither a GWF frame file nor an HDF5 file")


def list_channels(path: Path) -> list[str]:
    """Every channel a file holds (for error messages)."""
    if file_format(path) == "gwf":
        return gwf_channels(path)
    names = []
    with contextlib.suppress(OSError), h5py.File(path, "r") as h5:
        for name in h5:
            with contextlib.suppress(*_H5_ERRORS):  # a link that leads nowhere holds no channel
                if isinstance(h5.get(name), h5py.Dataset):
                    names.append(name)
    return sorted(names)


def scan_file(path: Path, channels: Sequence[str]) -> FileScan:
    """What ``path`` holds of ``channels``, with its size and SHA-256, reading no samples: a frame
    file's table of contents (its pieces follow from :func:`gwf_pieces` once the channel's format
    is known), a gwpy file's dataset headers.  A frame file's file checksum is verified
    (:func:`verify_gwf`) before LALFrame reads it.  A file holding none of the channels is refused,
    naming what it holds."""
    fmt = file_format(path)
    if fmt == "gwf":
        held, frames = _toc(path)
        if not frames:
            raise DataError(f"{path} holds no frames (an empty frame file)")
        found, pieces = [c for c in channels if c in held], ()
    else:
        held, frames = list_channels(path), []
        pieces = tuple(_hdf5_pieces(path, channels))
        found = sorted({p.channel for p in pieces})
    if not found:
        if not held:
            raise DataError(f"{path} holds no channels (an empty frame); drop the file or re-make it")
        raise DataError(f"{path} holds none of the channels {', '.join(channels)} (it holds: {shown_names(held, 8)})")
    sha256 = verify_gwf(path) if fmt == "gwf" else file_sha256(path)
    return FileScan(path, fmt, pieces, path.stat().st_size, sha256, tuple(held), tuple(frames),
                    tuple(found))


def write_gwf(path: str | os.PathLike, t0: GPSTime | str | float, duration: float,
              series: dict[str, tuple[GPSTime | str | float, float, np.ndarray]]) -> Path:
    """Write one frame of ``duration`` s from GPS ``t0`` holding each ``channel: (start, rate,
    samples)`` as processed data (REAL4 or REAL8, as the samples' dtype), through LALFrame."""
    with _quiet_lal() as (lal, lalframe):
        start = GPSTime.parse(t0)
        frame = lalframe.FrameNew(lal.LIGOTimeGPS(start.seconds, start.nanoseconds), float(duration), "gwbatch",
                                  0, 0, 0)
        for channel, (first, rate, values) in series.items():
            values = np.asarray(values)
            first = GPSTime.parse(first)
            kind = "REAL4" if values.dtype == np.float32 else "REAL8"
            ts = getattr(lal, f"Create{kind}TimeSeries")(channel, lal.LIGOTimeGPS(first.seconds, first.nanoseconds),
                                                        0.0, 1.0 / rate, lal.StrainUnit, values.size)
            ts.data.data[:] = values
            getattr(lalframe, f"FrameAdd{kind}TimeSeriesProcData")(frame, ts)
        lalframe.FrameWrite(frame, os.fspath(path))
    return Path(path)


def read_piece(piece: Piece) -> np.ndarray:
    """A piece's samples as float64."""
    return _read_gwf(piece) if piece.kind == "gwf" else _read_hdf5(piece)
