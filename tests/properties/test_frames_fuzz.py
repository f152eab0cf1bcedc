"""Structured attacks on the channel-file readers (:mod:`gwbatch.io.frames`): after each attack,
reading either raises :class:`DataError` with a one-line message or returns exactly the right
data; never another exception, never a hang, never a crash of the interpreter.

1. GWF bytes: a 4 s, two-channel frame file at 256 Hz (four 1 s frames, REAL4 and REAL8; or one
   4 s frame from :func:`write_gwf`) with one to three of: truncation, flipped bytes, a range
   overwritten, duplicated or deleted, garbage appended.  Read through the ingest's path
   (:func:`expand_inputs`, :func:`scan_file` with checksums, :func:`probe_channel`, every piece).
   LALFrame's parser crashes the interpreter on some corrupt files (one byte in a structure
   header or the table of contents), so these cases run in one spawned child process that reads
   each path it is sent: a crash or a hang (no answer in ``CASE_TIMEOUT``) fails the example,
   naming it, hypothesis shrinks it, and the next example gets a fresh child.  The readers verify
   the file checksum (which LALFrame's writer, like FrameL's, always writes) in Python before
   LALFrame sees a byte, so a changed byte anywhere, a data sample included, is refused.
2. gwpy HDF5: attribute lies (``x0``/``dx`` and gwpy's other attributes as strings, NaN, inf,
   negative, 0, huge, arrays, empty, missing), datasets of the wrong kind (int, complex, bytes,
   2-D, empty, scalar, a group, links, missing external storage, an unknown filter) and odd
   dataset names, read in this process.
3. LAL cache files: drawn lines (good ones, wrong field counts, non-numeric or odd numbers, URLs
   with odd schemes, hosts and escapes, relative paths, missing files, blanks, comments, unicode,
   invalid UTF-8) through :func:`read_cache` and :func:`expand_inputs`.
4. ``--channel`` names through :func:`parse_channels`.

``MAX_EXAMPLES`` per attack: GWF 2000, HDF5 1000, cache 1000, channels 1000; the file runs in
about 21 s on the 2-core development machine.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import re
import traceback
import warnings
from decimal import Decimal
from pathlib import Path
from urllib.parse import quote, unquote

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from gwbatch.errors import DataError
from gwbatch.gpstime import GPSTime
from gwbatch.io.frames import (channel_sources, expand_inputs, parse_channels, probe_channel, read_cache, read_piece,
                               scan_file, verify_gwf, with_frame_pieces, write_gwf)

lal = pytest.importorskip("lal")
lalframe = pytest.importorskip("lalframe")

MAX_EXAMPLES = {"gwf": 2000, "hdf5": 1000, "cache": 1000, "channels": 1000}
T0, FS, SECONDS = 1_000_000_000, 256, 4
CHANNELS = ("H1:STRAIN", "L1:STRAIN")
#: Seconds one GWF case may take in the child before it counts as a hang.
CASE_TIMEOUT = 10.0
FUZZ = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _one_line(exc: DataError) -> None:
    message = str(exc)
    assert message and "\n" not in message and "\r" not in message and len(message) < 2000, message


def _series() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {CHANNELS[0]: rng.standard_normal(SECONDS * FS).astype(np.float32),
            CHANNELS[1]: rng.standard_normal(SECONDS * FS)}


# ---------------------------------------------------------------------------------------------
# 1. GWF bytes, read in a child process


def _write_frames(path: Path, series: dict[str, np.ndarray]) -> None:
    """One file of 1 s frames through LALFrame's stream writer (``write_gwf`` writes one frame)."""
    stream = lalframe.FrameUFrFileOpen(str(path), "w")
    for k in range(SECONDS):
        frame = lalframe.FrameNew(lal.LIGOTimeGPS(T0 + k, 0), 1.0, "gwbatch", 0, k, 0)
        for name, values in series.items():
            kind = "REAL4" if values.dtype == np.float32 else "REAL8"
            ts = getattr(lal, f"Create{kind}TimeSeries")(name, lal.LIGOTimeGPS(T0 + k, 0), 0.0, 1.0 / FS,
                                                        lal.StrainUnit, FS)
            ts.data.data[:] = values[k * FS: (k + 1) * FS]
            getattr(lalframe, f"FrameAdd{kind}TimeSeriesProcData")(frame, ts)
        lalframe.FrameUFrameHWrite(stream, frame)
    del stream  # closes the file


def _read_gwf_file(path: str) -> tuple:
    """What the ingest reads of ``path``: frames, pieces (without the path) and their samples."""
    files = expand_inputs([path])
    scans = [scan_file(f, CHANNELS) for f in files]
    formats = {c: probe_channel(p, c) for c, p in channel_sources(scans).items()}
    scans = with_frame_pieces(scans, formats)
    pieces = [p for s in scans for p in s.pieces]
    headers = [(p.channel, p.t0, p.sample_rate, p.n_samples, p.frame, p.dtype) for p in pieces]
    return [s.frames for s in scans], headers, [read_piece(p) for p in pieces]


def _serve(conn) -> None:
    """The child: read each path it is sent and send back ``("ok", result)``, ``("DataError",
    message)`` or ``("other", traceback)``."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))  # a runaway allocation fails, not swaps
    while True:
        try:
            path = conn.recv()
        except EOFError:
            return
        try:
            conn.send(("ok", _read_gwf_file(path)))
        except DataError as exc:
            conn.send(("DataError", str(exc)))
        except BaseException:  # any other exception: reported to the parent as a broken promise
            conn.send(("other", traceback.format_exc()))


class _Child:
    """A spawned process reading frame files; started again after it dies or hangs."""

    def __init__(self) -> None:
        self.ctx = multiprocessing.get_context("spawn")
        self.proc = self.conn = None

    def read(self, path: Path) -> tuple:
        if self.proc is None:
            self.conn, theirs = self.ctx.Pipe()
            self.proc = self.ctx.Process(target=_serve, args=(theirs,), daemon=True)
            self.proc.start()
            theirs.close()
        self.conn.send(str(path))
        try:
            if self.conn.poll(CASE_TIMEOUT):
                return self.conn.recv()
            outcome = ("hang", f"no answer in {CASE_TIMEOUT} s")
        except (EOFError, OSError):
            self.proc.join(10)
            outcome = ("crash", f"the reading process died (exit code {self.proc.exitcode})")
        self.close()
        return outcome

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join(10)
            self.conn.close()
        self.proc = self.conn = None


@pytest.fixture(scope="module")
def gwf(tmp_path_factory):
    """The base files' bytes and true contents, a directory for the attacked copies, the child."""
    where = tmp_path_factory.mktemp("gwf")
    series = _series()
    _write_frames(where / "multi.gwf", series)
    write_gwf(where / "single.gwf", T0, SECONDS, {c: (T0, FS, x) for c, x in series.items()})
    truth = {}
    for name, frame_s in (("multi", 1), ("single", SECONDS)):
        n, n_frames = frame_s * FS, SECONDS // frame_s
        frames = [tuple((GPSTime(T0 + k * frame_s), float(frame_s)) for k in range(n_frames))]
        pieces = [(c, GPSTime(T0 + k * frame_s), FS, n, k, str(x.dtype)) for c, x in series.items()
                  for k in range(n_frames)]
        values = [series[c][k * n: (k + 1) * n].astype(np.float64) for c, _, _, _, k, _ in pieces]
        truth[name] = ((where / f"{name}.gwf").read_bytes(), (frames, pieces, values))
    child = _Child()
    for name in truth:  # the readers give the truth for the files as written
        outcome = child.read(where / f"{name}.gwf")
        assert outcome[0] == "ok", outcome
        _assert_gwf_equal(outcome[1], truth[name][1])
    yield _Bases(truth, where, child)
    child.close()


class _Bases(tuple):
    """The ``gwf`` fixture: ``(truth, directory, child)``, shown briefly in a failure report."""

    def __new__(cls, *parts):
        return super().__new__(cls, parts)

    def __repr__(self) -> str:
        return "<the two base frame files>"


def _assert_gwf_equal(got: tuple, want: tuple, note: str = "") -> None:
    assert got[0] == want[0] and got[1] == want[1], note
    assert len(got[2]) == len(want[2]) and all(np.array_equal(a, b) for a, b in zip(got[2], want[2])), note


position = st.tuples(st.sampled_from(["from start", "from end"]), st.integers(0, 24_000))
gwf_mutation = st.one_of(
    st.tuples(st.just("truncate"), position),
    st.tuples(st.just("flip"), st.lists(st.tuples(position, st.integers(1, 255)), min_size=1, max_size=4)),
    st.tuples(st.just("overwrite"), position, st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("duplicate"), position, st.integers(1, 64)),
    st.tuples(st.just("delete"), position, st.integers(1, 64)),
    st.tuples(st.just("append"), st.binary(min_size=1, max_size=64)),
)


def _at(data: bytes | bytearray, pos: tuple[str, int]) -> int:
    where, k = pos
    return min(k, len(data)) if where == "from start" else max(0, len(data) - k)


def mutate(data: bytes, step: tuple) -> bytes:
    kind = step[0]
    if kind == "truncate":
        return data[: _at(data, step[1])]
    if kind == "flip":
        out = bytearray(data)
        for pos, mask in step[1]:
            i = _at(out, pos)
            if i < len(out):
                out[i] ^= mask
        return bytes(out)
    if kind == "overwrite":
        i = _at(data, step[1])
        return data[:i] + step[2] + data[i + len(step[2]):]
    if kind == "duplicate":
        i = _at(data, step[1])
        return data[: i + step[2]] + data[i: i + step[2]] + data[i + step[2]:]
    if kind == "delete":
        i = _at(data, step[1])
        return data[:i] + data[i + step[2]:]
    if kind == "append":
        return data + step[1]
    raise AssertionError(step)


_cases = itertools.count()


@settings(max_examples=MAX_EXAMPLES["gwf"], **FUZZ)
@example(base="multi", steps=[("flip", [(("from start", 55), 0xFF)])])  # crashed LALFrame's checksum check
@example(base="multi", steps=[("overwrite", ("from end", 470), b"\x01")])  # a count in the table of contents
@given(base=st.sampled_from(["multi", "single"]), steps=st.lists(gwf_mutation, min_size=1, max_size=3))
def test_a_gwf_attack_is_refused_or_reads_the_original(gwf, base, steps):
    truth, where, child = gwf
    data, want = truth[base]
    for step in steps:
        data = mutate(data, step)
    path = where / f"case-{next(_cases)}.gwf"  # a new path each time: nothing cached applies to it
    path.write_bytes(data)
    try:
        outcome = child.read(path)
    finally:
        path.unlink()
    note = f"{base} {steps}"
    event(outcome[0] if outcome[0] != "DataError" else "refused: " + outcome[1].replace(str(path), "FILE")[:60])
    if outcome[0] == "DataError":
        assert outcome[1] and "\n" not in outcome[1] and "\r" not in outcome[1], (note, outcome[1])
        return
    assert outcome[0] == "ok", (note, outcome)
    _assert_gwf_equal(outcome[1], want, note)


def test_a_flipped_byte_anywhere_in_a_frame_file_is_refused_before_lalframe_reads_it(gwf):
    """The file checksum is checked in Python before LALFrame parses a byte: one flipped bit
    anywhere (header, dictionary, a data sample, the table of contents) is refused."""
    truth, where, _ = gwf
    data = truth["multi"][0]
    path = where / "flips.gwf"
    for i in range(0, len(data), 13):  # every 13th byte: header, dictionary, data, table of contents
        flipped = bytearray(data)
        flipped[i] ^= 0x01
        path.write_bytes(bytes(flipped))
        with pytest.raises(DataError, match="checksum|GWF|end-of-file") as info:
            verify_gwf(path)
        _one_line(info.value)


# ---------------------------------------------------------------------------------------------
# 2. gwpy's HDF5 layout


DELETE = object()
ATTR_VALUES = [
    "1000000000", "1000000000.25", "0.00390625", "", "abc", "nan", "inf", "-1", "1e9", "1e400", "\u0661\u0662",
    b"1000000000", float("nan"), float("inf"), float("-inf"), -1.0, 0.0, -0.0, 1e300, 1e-300, 2.0**32,
    2.0**32 - 1, 1e9 + 0.5, 1 / 256, 1 / 255, 1 / 3, -1 / 256, 1 / 16384, 1 / 2**40, 1e-9, 3600.0, 1e30,
    0, -1, 1, 2**63 - 1, T0, np.int8(5), np.uint64(2**64 - 1), np.float16(0.0039), np.float32(1 / 256),
    np.longdouble(T0), True, np.bool_(False), 1 + 2j, np.array([T0, T0]), np.array([]), np.array([[1 / 256]]),
    np.array([1 / 256]), np.array(["a", "b"], dtype="S"), DELETE,
]
DATASET_KINDS = ["int32", "int8", "uint64", "complex128", "bytes", "unicode", "2-D", "2-D column", "empty",
                 "scalar", "float16", "longdouble", "compound", "group", "soft link", "dangling link",
                 "external link", "external storage", "unknown filter", "unwritten", "gzip", "short", "nan"]
NAMES = ["h1:strain", "H1:STRAIN ", " H1:STRAIN", "H1:STRAIN\n", "H1:STRA\u0130N", "grp/H1:STRAIN", "H1:STRAIN:",
         "H1", "H1:STRAIN.1", "\u00e9"]
hdf5_attack = st.one_of(
    st.tuples(st.just("attr"), st.sampled_from(CHANNELS),
              st.sampled_from(["x0", "dx", "t0", "sample_rate", "name", "channel", "unit", "epoch"]),
              st.sampled_from(ATTR_VALUES) | st.floats() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8)),
    st.tuples(st.just("dataset"), st.sampled_from(CHANNELS), st.sampled_from(DATASET_KINDS)),
    st.tuples(st.just("rename"), st.sampled_from(CHANNELS), st.sampled_from(NAMES)),
    st.tuples(st.just("gwosc"),),
)


def _write_gwpy(path: Path, series: dict[str, np.ndarray]) -> None:
    """gwpy's ``TimeSeries.write(format="hdf5")`` layout: one dataset per channel."""
    with h5py.File(path, "w") as h5:
        for name, x in series.items():
            ds = h5.create_dataset(name, data=x)
            ds.attrs.update({"x0": float(T0), "dx": 1.0 / FS, "name": name, "channel": name, "unit": "strain"})


def _replace(h5: h5py.File, name: str, kind: str, tmp: Path) -> None:
    old = h5[name]
    attrs, x = dict(old.attrs), old[()]
    del h5[name]
    if kind in ("soft link", "dangling link"):
        h5[name] = h5py.SoftLink("/" + (CHANNELS[1] if name == CHANNELS[0] else CHANNELS[0])
                                 if kind == "soft link" else "/nowhere")
        return
    if kind == "external link":
        h5[name] = h5py.ExternalLink(str(tmp / "missing.h5"), "/x")
        return
    if kind == "group":
        h5.create_group(name).attrs.update(attrs)
        return
    n = x.size
    makers = {
        "int32": lambda: h5.create_dataset(name, data=(x * 1000).astype("int32")),
        "int8": lambda: h5.create_dataset(name, data=np.zeros(n, "int8")),
        "uint64": lambda: h5.create_dataset(name, data=np.arange(n, dtype="uint64")),
        "complex128": lambda: h5.create_dataset(name, data=x.astype("complex128")),
        "bytes": lambda: h5.create_dataset(name, data=np.array([b"abc"] * n)),
        "unicode": lambda: h5.create_dataset(name, data=np.array(["é"] * n, dtype=h5py.string_dtype())),
        "2-D": lambda: h5.create_dataset(name, data=x.reshape(2, -1)),
        "2-D column": lambda: h5.create_dataset(name, data=x.reshape(-1, 1)),
        "empty": lambda: h5.create_dataset(name, data=x[:0]),
        "scalar": lambda: h5.create_dataset(name, data=x[0]),
        "float16": lambda: h5.create_dataset(name, data=x.astype("float16")),
        "longdouble": lambda: h5.create_dataset(name, data=x.astype(np.longdouble)),
        "compound": lambda: h5.create_dataset(name, data=np.zeros(n, dtype=[("a", "f8"), ("b", "f8")])),
        "external storage": lambda: h5.create_dataset(name, shape=x.shape, dtype=x.dtype,
                                                      external=[(str(tmp / "missing.raw"), 0, x.nbytes)]),
        "unwritten": lambda: h5.create_dataset(name, shape=x.shape, dtype=x.dtype),
        "gzip": lambda: h5.create_dataset(name, data=x, compression="gzip", chunks=(128,)),
        "short": lambda: h5.create_dataset(name, data=x[:7]),
        "nan": lambda: h5.create_dataset(name, data=np.where(np.arange(n) % 5 == 0, np.nan, x).astype(x.dtype)),
    }
    if kind == "unknown filter":
        ds = h5.create_dataset(name, shape=x.shape, dtype=x.dtype, chunks=x.shape, compression=32_123,
                               allow_unknown_filter=True)
        ds.id.write_direct_chunk((0,), x.tobytes())
    else:
        ds = makers[kind]()
    ds.attrs.update(attrs)


def _hdf5_attack(path: Path, step: tuple, tmp: Path) -> None:
    with h5py.File(path, "r+") as h5, warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # casts of an earlier attack's complex or NaN samples
        kind = step[0]
        if kind == "gwosc":
            h5.create_group("strain").create_dataset("Strain", data=np.zeros(4))
            return
        name = step[1]
        if name not in h5 or not isinstance(h5.get(name, getlink=True), h5py.HardLink) or \
                not isinstance(h5[name], h5py.Dataset):
            return  # an earlier attack left no dataset for this one
        if kind == "attr":
            _, _, key, value = step
            if value is DELETE:
                h5[name].attrs.pop(key, None)
            else:
                h5[name].attrs[key] = value
        elif kind == "dataset":
            _replace(h5, name, step[2], tmp)
        elif kind == "rename":
            if step[2] not in h5:
                h5.move(name, step[2])


def _expected_t0(value) -> GPSTime:
    """The GPS time an ``x0`` attribute states, worked out here: a number (a float by its shortest
    decimal form) or a decimal string, rounded to the nanosecond."""
    v = np.asarray(value)
    if v.size != 1 or v.dtype.kind not in "iufUSO":
        raise AssertionError(f"x0 {value!r} is not one number, yet it was accepted")
    item = v.item()
    if isinstance(item, bytes):
        raise AssertionError(f"x0 {value!r} is bytes, yet it was accepted")
    d = Decimal(item) if isinstance(item, (int, str)) else Decimal(repr(float(item)))
    assert d.is_finite(), value
    return GPSTime(0).add_ns(int((d * 1_000_000_000).to_integral_value()))


def _check_hdf5_read(path: Path, scan, values: list[np.ndarray]) -> None:
    with h5py.File(path, "r") as h5:
        held = [c for c in CHANNELS if isinstance(h5.get(c), h5py.Dataset)]
        assert sorted({p.channel for p in scan.pieces}) == sorted(scan.found) and set(scan.found) <= set(held)
        for piece, got in zip(scan.pieces, values):
            ds = h5[piece.channel]
            assert ds.ndim == 1 and ds.dtype.kind == "f" and ds.size == piece.n_samples > 0
            t0 = _expected_t0(ds.attrs["x0"])
            assert piece.t0 == t0 and 0 <= t0.seconds < 2**32, (piece.t0, ds.attrs["x0"])
            dx = float(np.asarray(ds.attrs["dx"]).item())
            assert math.isfinite(dx) and dx > 0 and abs(piece.sample_rate * dx - 1) < 1e-6, (piece.sample_rate, dx)
            assert np.array_equal(got, ds[()].astype(np.float64), equal_nan=True)


@pytest.fixture(scope="module")
def hdf5_base(tmp_path_factory):
    where = tmp_path_factory.mktemp("hdf5")
    _write_gwpy(where / "base.h5", _series())
    return where


@settings(max_examples=MAX_EXAMPLES["hdf5"], **FUZZ)
@example(steps=[("dataset", "H1:STRAIN", "external storage")])  # leaked OSError
@example(steps=[("dataset", "H1:STRAIN", "soft link"), ("dataset", "L1:STRAIN", "soft link")])  # RuntimeError
@example(steps=[("rename", "H1:STRAIN", "h1:strain"), ("rename", "L1:STRAIN", "H1:STRAIN\n")])  # two lines
@given(steps=st.lists(hdf5_attack, min_size=1, max_size=3))
def test_a_gwpy_hdf5_attack_is_refused_or_reads_what_the_file_says(hdf5_base, steps):
    path = hdf5_base / f"case-{next(_cases)}.h5"
    path.write_bytes((hdf5_base / "base.h5").read_bytes())
    for step in steps:
        try:
            _hdf5_attack(path, step, hdf5_base)
        except Exception:  # an attack h5py will not make (e.g. a move into a missing group):
            pass           # the file stays as it is
    try:
        files = expand_inputs([path])
        scan = with_frame_pieces([scan_file(f, CHANNELS) for f in files], {})[0]
        values = [read_piece(p) for p in scan.pieces]
    except DataError as exc:
        _one_line(exc)
        path.unlink()
        event("refused")
        return
    event(f"read {len(scan.pieces)} channels")
    _check_hdf5_read(path, scan, values)
    path.unlink()


def test_the_gwpy_file_as_written_reads_exactly(hdf5_base):
    scan = scan_file(hdf5_base / "base.h5", CHANNELS)
    series = _series()
    assert [(p.channel, p.t0, p.sample_rate, p.n_samples) for p in scan.pieces] == \
        [(c, GPSTime(T0), FS, SECONDS * FS) for c in CHANNELS]
    for p in scan.pieces:
        assert np.array_equal(read_piece(p), series[p.channel].astype(np.float64))


# ---------------------------------------------------------------------------------------------
# 3. LAL cache files


GOOD_NAMES = ["a.gwf", "b c.gwf", "é.gwf", "d%e.gwf", "sub/f.gwf"]
MISSING_NAMES = ["missing.gwf", "sub", "sub/../nope.gwf"]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    where = tmp_path_factory.mktemp("cache")
    (where / "sub").mkdir()
    for name in GOOD_NAMES:
        (where / name).write_bytes(b"IGWD\0\x08 not read here")
    return where


def _url(where: Path, name: str, form: str) -> str:
    """A cache line's URL for ``where/name``, written as ``form``."""
    absolute = str(where / name)
    return {"path": absolute, "relative": name, "./relative": "./" + name,
            "file://localhost": "file://localhost" + quote(absolute),
            "file:///": "file://" + quote(absolute)}[form]


GOOD = ("a.gwf", "path", "1000000000", "4", " ")
good_line = st.tuples(
    st.sampled_from(GOOD_NAMES + MISSING_NAMES),
    st.sampled_from(["path", "relative", "./relative", "file://localhost", "file:///"]),
    st.sampled_from(["1000000000", "0", "99999999999999999999", "007"]),
    st.sampled_from(["4", "4.5", "0", "4096.000", "12345678901234567890"]),
    st.sampled_from([" ", "\t", "  ", " \t "]),
)
ODD_FIELDS = ["H", "H1_X", "1000000000", "4", "-4", "x", "4..5", "1e9", "inf", "nan", "\uff11\uff12", "\u0661", "4.",
              ".5", "", "#", "\u2028", "\x0c", "\x85", "\x00", "\x1b", "\u00e9", "a b"]
ODD_URLS = ["file://host/a.gwf", "file://[::1]/a.gwf", "file://[/a.gwf", "file://]/a.gwf", "http://x/a.gwf",
            "gsiftp://x/a", "file:///a%0Ab.gwf", "file:///a%00b.gwf", "file:///%FF.gwf", "file:///a%0D",
            "file:///a%E2%80%A8b", "file:///a%C2%85b", "file:///a%1Bb", "/nope.gwf", "a:b.gwf", "file:", "file://",
            "file://localhost", "file:/abs.gwf", "file:rel.gwf", "file://localhost:80/a.gwf", "FILE:///a.gwf",
            "File://LOCALHOST/a.gwf", "file://user@localhost/a.gwf", "file:///a.gwf?x=1#y", "file:///a%3Fb.gwf",
            "file:///a#b", "C:\\a.gwf", "\x01/a.gwf", "./a:b.gwf", "~/a.gwf", "//a.gwf", "file:////a.gwf", "."]
cache_line = st.one_of(
    st.tuples(st.just("good"), good_line),
    st.tuples(st.just("odd url"), good_line, st.sampled_from(ODD_URLS)),
    st.tuples(st.just("odd field"), good_line, st.integers(0, 5), st.sampled_from(ODD_FIELDS)),
    st.tuples(st.just("fields"), st.lists(st.sampled_from(ODD_FIELDS + ODD_URLS), min_size=1, max_size=7)),
    st.tuples(st.just("text"), st.text(max_size=30)),
    st.tuples(st.just("raw"), st.sampled_from([b"", b"# comment", b"   ", b"\xff\xfe", b"\xe9", b"\x00",
                                                b"\xef\xbb\xbfH H1_X 1000000000 4 /x.gwf"])),
)


def _line_bytes(where: Path, line: tuple) -> tuple[bytes, bool]:
    """A line's bytes, and whether it is a well-formed line (which must be accepted)."""
    kind, value = line[0], line[1]
    if kind in ("good", "odd url", "odd field"):
        name, form, start, duration, sep = value
        fields = ["H", "H1_X", start, duration, _url(where, name, form)]
        if kind == "odd url":
            fields[4] = line[2]
        elif kind == "odd field":
            fields[line[2]: line[2] + 1] = [line[3]]  # index 5: one field too many
        # a bare path cannot hold a space
        return sep.join(fields).encode(), kind == "good" and not (" " in name and "file:" not in form)
    if kind == "fields":
        return " ".join(value).encode(), False
    if kind == "text":
        return value.encode(), False
    return value, False


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _listed(where: Path, url: str) -> Path | None:
    """The file a cache line's URL names (None: a URL that must be refused), worked out here: a
    path, or a ``file:`` URL (any case) of no host or ``localhost``, without its query and fragment."""
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):(.*)\Z", url, re.S)
    if scheme is None:
        text = url
    elif scheme.group(1).lower() != "file":
        return None
    else:
        rest = scheme.group(2)
        if rest.startswith("//"):
            host, rest = re.match(r"//([^/?#]*)(.*)\Z", rest, re.S).groups()
            if host not in ("", "localhost"):
                return None
        text = unquote(re.split("[?#]", rest)[0], errors="surrogateescape")
    if _CONTROL.search(text):
        return None
    path = Path(text)
    return path if path.is_absolute() else where / path


@settings(max_examples=MAX_EXAMPLES["cache"], **FUZZ)
@example(lines=[("odd url", GOOD, "file://[/a.gwf")], ending=b"\n")  # leaked ValueError
@example(lines=[("odd url", GOOD, "file:///a%0Ab.gwf")], ending=b"\n")  # a two-line message
@example(lines=[("good", GOOD), ("odd url", GOOD, "file:///%FF.gwf")], ending=b"\n")  # named U+FFFD
@given(lines=st.lists(cache_line, max_size=6), ending=st.sampled_from([b"\n", b"\r\n", b""]))
def test_a_cache_file_is_refused_or_lists_exactly_its_files(cache_dir, lines, ending):
    cache = cache_dir / "c.lcf"
    encoded = [_line_bytes(cache_dir, line) for line in lines]
    content = b"\n".join(b for b, _ in encoded) + ending
    cache.write_bytes(content)
    must_accept = bool(encoded) and all(good for _, good in encoded)
    # the model: lines of five fields, the fifth a path or a local file URL; '#' comments, blanks
    expected, well_formed = [], True
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        text, well_formed = "", False
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        path = _listed(cache_dir, fields[-1]) if len(fields) == 5 else None
        if path is None:
            well_formed = False
        else:
            expected.append(path)
    well_formed = well_formed and bool(expected)
    assert well_formed or not must_accept, lines
    magic = content[:8]
    for reader in (read_cache, lambda p: expand_inputs([p])):
        try:
            got = reader(cache)
        except DataError as exc:
            _one_line(exc)
            # a well-formed cache is refused by expand_inputs only, for a listed file that is not there
            assert not must_accept or (reader is not read_cache and not all(p.is_file() for p in expected)), \
                (lines, str(exc))
            event("refused")
            continue
        event("accepted")
        if reader is not read_cache and (magic.startswith(b"IGWD") or magic == b"\x89HDF\r\n\x1a\n"):
            assert got == [cache]  # a data file, not a cache
            continue
        assert well_formed, ("accepted a cache with a bad line", lines, got)
        if reader is read_cache:
            assert got == expected, (lines, got)
        else:
            assert all(p.is_file() for p in expected)
            assert got == list(dict.fromkeys(expected)), (lines, got)


# ---------------------------------------------------------------------------------------------
# 4. --channel names


_CHANNEL = re.compile(r"[A-Z][A-Z0-9]:[A-Za-z0-9_.:-]+", re.ASCII)
valid_name = st.from_regex(_CHANNEL, fullmatch=True).filter(lambda s: len(s) < 40)
odd_name = valid_name.flatmap(lambda s: st.sampled_from([
    s.lower(), s + "\n", s + " ", " " + s, s.replace(":", "", 1), s.replace(":", "\uff1a"), s[:3], s[:2],
    "\u0130" + s[1:], s.replace(":", ":\u00e9"), s + "\x00", s.encode(), s.upper(), s]))
channel_value = st.one_of(valid_name, odd_name, st.text(max_size=12), st.none(), st.integers(), st.binary(max_size=4))


@settings(max_examples=MAX_EXAMPLES["channels"], **FUZZ)
@given(names=st.lists(channel_value, max_size=5))
def test_channel_names_are_refused_or_parsed_exactly(names):
    ifos = [n.split(":", 1)[0] for n in names if isinstance(n, str)]
    valid = (bool(names) and all(isinstance(n, str) and _CHANNEL.fullmatch(n) for n in names)
             and len(set(ifos)) == len(ifos))
    try:
        got = parse_channels(names)
    except DataError as exc:
        _one_line(exc)
        assert not valid, names
        event("refused")
        return
    event("parsed")
    assert valid, names
    assert [c.name for c in got] == names and [c.ifo for c in got] == ifos
