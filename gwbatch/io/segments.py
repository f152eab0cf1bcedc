"""Science segments and vetoes from the files analysts have, resolved to store samples.

Readers (each returns GPS ``[start, stop)`` segments as int64 nanoseconds, ``(n, 2)``):

- LIGO_LW segment XML (``segment_definer`` + ``segment`` tables; plain or gzip), read with
  igwn-ligolw; a flag is named ``IFO:NAME:VERSION`` as in the segment database;
- segwizard text: ``segnum start stop duration`` (or ``start stop``) per line, ``#`` comments;
- GWOSC timeline JSON: ``{"id": "H1_DATA", "segments": [[start, stop], ...], ...}``;
- a GWOSC HDF5 strain file: the seconds where one bit of ``quality/simple/DQmask`` or
  ``quality/injections/Injmask`` is set (for example ``NO_CBC_HW_INJ``);
- a veto-definer XML (``veto_definer`` table): per flag its detector, category, the GPS interval
  in which the definition holds (``end_time`` 0: open-ended) and paddings, which are added to each
  segment (``start += start_pad``, ``end += end_pad``), as the segment database tools do.

Categories follow the veto-definer convention: 1 removes data before conditioning, 2 and 4 (the
old CAT3) remove triggers and livetime, 3 holds hardware injections.

:func:`resolve_segments` turns a campaign's sources into per-detector store-sample intervals
(:class:`DataSegments`).  A sample ``k`` (at ``t0 + k / fs``) is inside ``[a, b)`` when
``a <= t0 + k / fs < b``, computed exactly in integers, so livetimes are exact to the sample.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from pathlib import Path
from typing import Iterable

import numpy as np

from gwbatch.conditioning.mask import mask_to_segments, merge_segments
from gwbatch.errors import DataError
from gwbatch.gpstime import GPS_MAX, GPSTime

_NS = 1_000_000_000
#: Segments one file may hold.
MAX_SEGMENTS = 10_000_000
#: Veto categories: 1 before conditioning, 2 and 4 after it (triggers and livetime), 3 hardware injections.
CATEGORIES = (1, 2, 3, 4)
#: Beyond any store: the domain in which "not in the segments" is taken.
_FAR = 2**62
_FLAG_RE = re.compile(r"([A-Z][0-9]):([A-Za-z0-9_.\-]+)(?::([0-9]+))?\Z")
log = logging.getLogger("gwbatch")
_IFO_RE = re.compile(r"[A-Z][0-9]\Z")
_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


def _empty() -> np.ndarray:
    return np.zeros((0, 2), dtype=np.int64)


def _ns(value, what: str) -> int:
    """Exact GPS nanoseconds of a number or decimal string in ``[0, 2**32)`` s."""
    if isinstance(value, bool):
        raise DataError(f"{what}: {value!r} is not a GPS time")
    try:
        d = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        raise DataError(f"{what}: {str(value)[:40]!r} is not a GPS time") from None
    if not d.is_finite() or not 0 <= d < GPS_MAX:
        raise DataError(f"{what}: GPS time {repr(value)[:40]} is outside [0, 2**32) s")
    return int((d * _NS).to_integral_value())


def _checked(segments: list[tuple[int, int]], what: str) -> np.ndarray:
    if len(segments) > MAX_SEGMENTS:
        raise DataError(f"{what}: {len(segments)} segments; at most {MAX_SEGMENTS} are read from one file")
    for a, b in segments:
        if b < a:
            raise DataError(f"{what}: segment [{a / _NS:.9f}, {b / _NS:.9f}) ends before it starts")
    if not segments:
        return _empty()
    return np.asarray(segments, dtype=np.int64).reshape(-1, 2)


def _read_bytes(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(f"segment file {path}: cannot be read ({exc.strerror or exc})") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, ValueError) as exc:
            raise DataError(f"segment file {path}: broken gzip ({exc})") from None
    return data


def file_kind(path: Path, data: bytes) -> str:
    """``xml``, ``json``, ``hdf5`` or ``text`` from a file's first bytes."""
    if data.startswith(_HDF5_MAGIC):
        return "hdf5"
    head = data[:512].lstrip()
    if head.startswith(b"<"):
        return "xml"
    if head.startswith(b"{"):
        return "json"
    return "text"


# ---------------------------------------------------------------------------------------------
# readers


def read_segwizard(path: Path, text: str) -> np.ndarray:
    """Segwizard text: ``segnum start stop duration`` or ``start stop`` per line."""
    segments = []
    for lineno, line in enumerate(text.splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        what = f"segment file {path} line {lineno}"
        if len(fields) == 4:
            a, b = _ns(fields[1], what), _ns(fields[2], what)
            if _ns_duration(fields[3], what) != b - a:
                raise DataError(f"{what}: duration {fields[3]} is not stop - start ({(b - a) / _NS:g} s)")
        elif len(fields) == 2:
            a, b = _ns(fields[0], what), _ns(fields[1], what)
        else:
            raise DataError(f"{what}: {len(fields)} columns; expected 'segnum start stop duration' or 'start stop'")
        segments.append((a, b))
    return _checked(segments, f"segment file {path}")


def _ns_duration(value: str, what: str) -> int:
    try:
        d = Decimal(value)
    except InvalidOperation:
        raise DataError(f"{what}: duration {value[:40]!r} is not a number") from None
    if not d.is_finite() or abs(d) >= GPS_MAX:
        raise DataError(f"{what}: duration {value[:40]} is outside (-2**32, 2**32) s")
    return int((d * _NS).to_integral_value())


def read_gwosc_json(path: Path, text: str) -> tuple[str | None, np.ndarray]:
    """GWOSC timeline JSON: ``(detector from its id or None, segments)``."""
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise DataError(f"segment file {path}: not JSON ({str(exc).splitlines()[0][:80]})") from None
    segs = doc.get("segments") if isinstance(doc, dict) else None
    if not isinstance(segs, list):
        raise DataError(f"segment file {path}: a GWOSC timeline holds a 'segments' list of [start, stop] pairs")
    out = []
    for i, pair in enumerate(segs):
        if not (isinstance(pair, list) and len(pair) == 2):
            raise DataError(f"segment file {path}: segments[{i}] is {repr(pair)[:40]}, not [start, stop]")
        what = f"segment file {path} segments[{i}]"
        out.append((_ns(pair[0], what), _ns(pair[1], what)))
    name = doc.get("id", doc.get("flag"))
    prefix = re.split(r"[_:]", name, maxsplit=1)[0] if isinstance(name, str) else ""
    ifo = prefix if _IFO_RE.match(prefix) else None  # "H1_DATA" (GWOSC) or "L1:DMT-ANALYSIS_READY:1"
    return ifo, _checked(out, f"segment file {path}")


def read_gwosc_bits(path: Path, bit: str) -> tuple[str, np.ndarray]:
    """``(detector, seconds where ``bit`` is set)`` of a GWOSC HDF5 strain file, from its DQ or
    injection mask."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            for mask, names in (("quality/simple/DQmask", "quality/simple/DQShortnames"),
                                ("quality/injections/Injmask", "quality/injections/InjShortnames")):
                if mask not in f or names not in f:
                    continue
                known = [n.decode() if isinstance(n, bytes) else str(n) for n in f[names][()]]
                if bit not in known:
                    continue
                values = np.asarray(f[mask][()])
                start = _ns(f[mask].attrs.get("Xstart", f["meta/GPSstart"][()] if "meta/GPSstart" in f else None),
                            f"segment file {path} {mask} Xstart")
                ifo = f["meta/Detector"][()] if "meta/Detector" in f else b""
                ifo = ifo.decode() if isinstance(ifo, bytes) else str(ifo)
                break
            else:
                have = []
                for names in ("quality/simple/DQShortnames", "quality/injections/InjShortnames"):
                    if names in f:
                        have += [n.decode() if isinstance(n, bytes) else str(n) for n in f[names][()]]
                raise DataError(f"segment file {path}: no bit {bit!r} in its DQ or injection masks"
                                f" (they hold: {', '.join(have) or 'none'})")
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise DataError(f"segment file {path}: not a readable GWOSC HDF5 file ({str(exc).splitlines()[0][:80]})") from None
    if values.ndim != 1 or values.dtype.kind not in "iu" or not _IFO_RE.match(ifo):
        raise DataError(f"segment file {path}: not a GWOSC bit mask (1-D integers, with meta/Detector)")
    on = ((values >> known.index(bit)) & 1).astype(bool)
    segs = [(start + int(a) * _NS, start + int(b) * _NS) for a, b in mask_to_segments(on)]
    if segs and segs[-1][1] >= GPS_MAX * _NS:
        raise DataError(f"segment file {path}: its mask runs past GPS 2**32 s")
    return ifo, _checked(segs, f"segment file {path}")


def _ligolw_document(path: Path, data: bytes):
    try:
        import lal  # noqa: F401  (igwn_ligolw's tables need LIGOTimeGPS from lalsuite)
        from igwn_ligolw import ligolw, lsctables, utils  # noqa: F401  (importing lsctables registers its tables)
    except ImportError:
        raise DataError(f"{path}: reading LIGO_LW XML needs lalsuite: pip install 'gwbatch[lal]'") from None
    try:
        return utils.load_fileobj(io.BytesIO(data), contenthandler=ligolw.LIGOLWContentHandler)
    except Exception as exc:  # the XML parser and the table code raise many types
        raise DataError(f"{path}: not a readable LIGO_LW document ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0][:100] if str(exc) else ''})") from None


def _table(doc, cls, path: Path, what: str, columns: tuple[str, ...]):
    """The document's ``what`` table, with every one of ``columns`` (the ones its reader uses)."""
    try:
        table = cls.get_table(doc)
    except ValueError:
        raise DataError(f"{path}: no {what} table (a LIGO_LW {what} file holds one)") from None
    missing = [c for c in columns if c not in table.columnnames]
    if missing:
        raise DataError(f"{path}: the {what} table has no {', '.join(missing)} column"
                        f"{'s' if len(missing) > 1 else ''}; it needs {', '.join(columns)}")
    return table


def _gps_text(seconds, nanoseconds, what: str) -> str:
    """A LIGO_LW ``(s, ns)`` time as decimal text; the nanoseconds must lie in [0, 10^9) (1.5e9 ns
    pasted after the point read as 0.15 s)."""
    ns = int(nanoseconds or 0)
    if not 0 <= ns < 1_000_000_000:
        raise DataError(f"{what}_ns is {ns}; nanoseconds must lie in [0, 999999999]")
    return f"{int(seconds)}.{ns:09d}"


def read_segment_xml(path: Path, data: bytes) -> dict[str, np.ndarray]:
    """Every flag's active segments in a LIGO_LW segment document, by ``IFO:NAME:VERSION``."""
    from igwn_ligolw import lsctables

    doc = _ligolw_document(path, data)
    definers = _table(doc, lsctables.SegmentDefTable, path, "segment_definer",
                      ("segment_def_id", "ifos", "name", "version"))
    segments = _table(doc, lsctables.SegmentTable, path, "segment",
                      ("segment_def_id", "start_time", "start_time_ns", "end_time", "end_time_ns"))
    names = {}
    for row in definers:
        ifos = str(row.ifos or "")
        if not _IFO_RE.match(ifos):
            raise DataError(f"{path}: segment_definer {row.name!r} is for detectors {ifos!r}; one detector per flag is read")
        version = "" if row.version is None else f":{int(row.version)}"
        names[row.segment_def_id] = f"{ifos}:{row.name}{version}"
    out: dict[str, list] = {name: [] for name in names.values()}
    for i, row in enumerate(segments):
        what = f"{path} segment row {i}"
        if row.segment_def_id not in names:
            raise DataError(f"{what}: segment_def_id {row.segment_def_id} has no segment_definer row")
        a = _ns(_gps_text(row.start_time, row.start_time_ns, f"{what} start_time"), what)
        b = _ns(_gps_text(row.end_time, row.end_time_ns, f"{what} end_time"), what)
        out[names[row.segment_def_id]].append((a, b))
    return {name: _checked(segs, f"{path} flag {name}") for name, segs in out.items()}


@dataclass(frozen=True)
class VetoDefinition:
    """One row of a veto-definer file (times in ns; ``stop`` None: open-ended; pads in ns)."""

    ifo: str
    name: str
    version: int
    category: int
    start: int
    stop: int | None
    start_pad: int
    end_pad: int

    @property
    def flag(self) -> str:
        return f"{self.ifo}:{self.name}:{self.version}"


def read_veto_definer(path: Path) -> list[VetoDefinition]:
    """The rows of a veto-definer XML, checked (categories 1-4, times in range, pads under a day)."""
    from igwn_ligolw import lsctables

    doc = _ligolw_document(path, _read_bytes(path))
    out = []
    columns = ("ifo", "name", "version", "category", "start_time", "end_time", "start_pad", "end_pad")
    for i, row in enumerate(_table(doc, lsctables.VetoDefTable, path, "veto_definer", columns)):
        what = f"veto definer {path} row {i} ({row.ifo}:{row.name}:{row.version})"
        if not _IFO_RE.match(str(row.ifo or "")):
            raise DataError(f"{what}: ifo {row.ifo!r} is not a detector name like H1")
        if row.category not in CATEGORIES:
            raise DataError(f"{what}: category {row.category}; allowed: {', '.join(map(str, CATEGORIES))}")
        for pad in ("start_pad", "end_pad"):
            if abs(int(getattr(row, pad) or 0)) > 86400:
                raise DataError(f"{what}: {pad} {getattr(row, pad)} s; at most a day either way")
        start = _ns(int(row.start_time or 0), what)
        stop = None if not row.end_time else _ns(int(row.end_time), what)
        if stop is not None and stop <= start:
            raise DataError(f"{what}: end_time {row.end_time} is not after start_time {row.start_time}")
        out.append(VetoDefinition(str(row.ifo), str(row.name), int(row.version or 0), int(row.category),
                                  start, stop, int(row.start_pad or 0) * _NS, int(row.end_pad or 0) * _NS))
    return out


def read_flag(path: Path, *, flag: str | None = None, ifo: str | None = None) -> tuple[str, np.ndarray]:
    """``(detector, segments in ns)`` of one source: a flag of a segment XML or GWOSC HDF5 file,
    or a segwizard / GWOSC JSON file (whose detector ``ifo`` names, unless the file does)."""
    path = Path(path)
    data = _read_bytes(path)
    kind = file_kind(path, data)
    if kind == "hdf5":
        if not flag:
            raise DataError(f"segment file {path}: a GWOSC HDF5 file needs flag: a bit name such as NO_CBC_HW_INJ")
        found, segs = read_gwosc_bits(path, flag)
        return _detector(path, ifo, found), segs
    if kind == "xml":
        flags = read_segment_xml(path, data)
        return _pick_flag(path, flags, flag, ifo)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise DataError(f"segment file {path}: not text, LIGO_LW XML, JSON or HDF5") from None
    if kind == "json":
        found, segs = read_gwosc_json(path, text)
        return _detector(path, ifo, found), segs
    return _detector(path, ifo, None), read_segwizard(path, text)


def _detector(path: Path, ifo: str | None, found: str | None) -> str:
    if ifo and found and ifo != found:
        raise DataError(f"segment file {path} is for {found}, but ifo: {ifo} was given")
    if not (ifo or found):
        raise DataError(f"segment file {path} does not name its detector: give ifo: (e.g. H1)")
    return ifo or found


def _pick_flag(path: Path, flags: dict[str, np.ndarray], flag: str | None, ifo: str | None):
    if flag is None:
        if len(flags) != 1:
            raise DataError(f"segment file {path} holds {len(flags)} flags; name one with flag: "
                            f"({', '.join(sorted(flags))[:300] or 'none'})")
        name = next(iter(flags))
    else:
        m = _FLAG_RE.match(flag)
        if not m:
            raise DataError(f"flag {flag!r} is not IFO:NAME or IFO:NAME:VERSION")
        matches = [n for n in flags if n == flag or (m.group(3) is None and n.rsplit(":", 1)[0] == flag)]
        if len(matches) != 1:
            have = ", ".join(sorted(flags))[:300] or "none"
            raise DataError(f"segment file {path}: {'no' if not matches else 'several versions of'} flag {flag}"
                            f"{'; name the version' if matches else ''} (it holds: {have})")
        name = matches[0]
    return _detector(path, ifo, name.split(":", 1)[0]), flags[name]


# ---------------------------------------------------------------------------------------------
# segment arithmetic (int64 [start, stop) rows, any units)


def union(*lists: np.ndarray) -> np.ndarray:
    """Sorted, merged union of int64 segment lists."""
    seg = np.concatenate([np.asarray(s, dtype=np.int64).reshape(-1, 2) for s in lists] or [_empty()])
    return merge_segments(seg).astype(np.int64).reshape(-1, 2)


def complement(seg: np.ndarray, lo: int = -_FAR, hi: int = _FAR) -> np.ndarray:
    """``[lo, hi)`` minus the segments."""
    seg = union(seg)
    seg = seg[(seg[:, 1] > lo) & (seg[:, 0] < hi)]
    edges = np.concatenate([[lo], np.clip(seg.ravel(), lo, hi), [hi]]).reshape(-1, 2)
    return edges[edges[:, 1] > edges[:, 0]].astype(np.int64)


def intersect(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return complement(union(complement(a), complement(b)))


def clip(seg: np.ndarray, lo: int, hi: int) -> np.ndarray:
    seg = np.asarray(seg, dtype=np.int64).reshape(-1, 2)
    seg = seg[(seg[:, 1] > lo) & (seg[:, 0] < hi)]
    return np.clip(seg, lo, hi)


def interval_mask(seg: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Bool mask of samples ``[start, stop)`` inside the sample intervals ``seg``."""
    out = np.zeros(max(0, stop - start), dtype=bool)
    for a, b in clip(seg, start, stop):
        out[a - start:b - start] = True
    return out


def to_samples(seg_ns: np.ndarray, t0: GPSTime, sample_rate: float) -> np.ndarray:
    """GPS-ns segments to store-sample intervals: sample ``k`` (at ``t0 + k / fs``) is inside
    ``[a, b)`` when ``a <= t0 + k / fs < b``, i.e. ``k`` in ``[ceil((a - t0) fs), ceil((b - t0) fs))``."""
    rate = Fraction(repr(float(sample_rate)))
    num, den = rate.numerator, rate.denominator * _NS
    t0_ns = t0.total_ns
    out = [(-((-(int(a) - t0_ns) * num) // den), -((-(int(b) - t0_ns) * num) // den)) for a, b in np.asarray(seg_ns).reshape(-1, 2)]
    return union(np.asarray(out, dtype=np.int64).reshape(-1, 2)) if out else _empty()


def seconds_to_samples(seconds: np.ndarray, sample_rate: float) -> np.ndarray:
    """Whole DQ seconds ``[k, m)`` to the samples in them: ``[ceil(k fs), ceil(m fs))``
    (:func:`gwbatch.io.store.dq_sample_mask`'s rule)."""
    seg = np.asarray(seconds, dtype=np.int64).reshape(-1, 2)
    rate = Fraction(repr(float(sample_rate)))
    return np.asarray([[-((-int(v) * rate.numerator) // rate.denominator) for v in row] for row in seg],
                      dtype=np.int64).reshape(-1, 2)


def pad(seg_ns: np.ndarray, start_pad: int, end_pad: int) -> np.ndarray:
    """``start += start_pad``, ``end += end_pad`` (ns); segments that vanish are dropped."""
    seg = np.asarray(seg_ns, dtype=np.int64).reshape(-1, 2) + np.array([start_pad, end_pad], dtype=np.int64)
    return union(seg)


# ---------------------------------------------------------------------------------------------
# a campaign's segments


@dataclass(frozen=True, eq=False)
class DataSegments:
    """Per detector, store-sample intervals: ``excluded`` (outside the science segments or in a
    category-1 veto: masked before conditioning), ``vetoed`` (categories 2 and 4, and hardware
    injections when vetoed: masked after conditioning, so triggers and livetime go but the data
    still serve the PSD and the filters), ``hardware`` (hardware injections, to flag candidates);
    ``summary`` says where each came from and how much of the span each removes."""

    excluded: dict[str, np.ndarray] = field(default_factory=dict)
    vetoed: dict[str, np.ndarray] = field(default_factory=dict)
    hardware: dict[str, np.ndarray] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not any(len(v) for d in (self.excluded, self.vetoed, self.hardware) for v in d.values())

    def clipped(self, start: int, stop: int) -> "DataSegments":
        """The intervals inside samples ``[start, stop)`` (what one task needs)."""
        return DataSegments(*({k: clip(v, start, stop) for k, v in d.items()}
                              for d in (self.excluded, self.vetoed, self.hardware)))

    def digest(self) -> str:
        """SHA-256 of the intervals (for the run identity)."""
        h = hashlib.sha256()
        for name, d in (("excluded", self.excluded), ("vetoed", self.vetoed), ("hardware", self.hardware)):
            for ifo in sorted(d):
                h.update(f"{name}:{ifo}:".encode())
                h.update(np.ascontiguousarray(d[ifo], dtype="<i8").tobytes())
        return h.hexdigest()


def _source_segments(src, ifos: Iterable[str], t0: GPSTime, fs: float, store_dq) -> tuple[str, np.ndarray, str]:
    """``(detector, sample intervals, description)`` of one configured source."""
    if getattr(src, "store_dq", None):
        ifo = src.ifo
        dq, bits = store_dq
        if src.store_dq not in bits:
            raise DataError(f"store_dq {src.store_dq!r} is not a DQ bit of the store (its bits: {', '.join(bits)})")
        row = dq[ifo] if ifo in dq else None
        if row is None:
            raise DataError(f"store_dq {src.store_dq!r}: detector {ifo!r} is not analysed")
        unset = ((row.astype(np.int64) >> bits.index(src.store_dq)) & 1) == 0  # GWOSC bits say "passes"
        seg = seconds_to_samples(mask_to_segments(unset), fs)
        what = f"store DQ bit {src.store_dq} unset"
    else:
        ifo, seg_ns = read_flag(Path(src.file), flag=src.flag, ifo=src.ifo)
        pads = [int(Decimal(repr(float(p))) * _NS) for p in src.padding]
        seg = to_samples(pad(seg_ns, *pads), t0, fs)
        what = f"{src.file}{' ' + src.flag if src.flag else ''}"
    if src.complement:
        seg = complement(seg)
        what = f"not {what}"
    return ifo, seg, what


def resolve_segments(data_cfg, ifos: tuple[str, ...], t0: GPSTime, sample_rate: float,
                     span: tuple[int, int], store_dq=None) -> DataSegments:
    """A campaign's ``data.segments``, ``data.vetoes`` and ``data.hardware_injections`` as
    :class:`DataSegments` for detectors ``ifos`` of a store starting at ``t0``; ``span`` (store
    samples) is what the summary's seconds count; ``store_dq`` is ``({ifo: 1 Hz DQ}, bit names)``
    for sources naming a store DQ bit."""
    sci_cfg, veto_cfg = getattr(data_cfg, "segments", None), getattr(data_cfg, "vetoes", None)
    if sci_cfg is None and veto_cfg is None:
        return DataSegments()
    fs = sample_rate
    science = {ifo: [] for ifo in ifos}
    by_cat: dict[int, dict[str, list]] = {c: {ifo: [] for ifo in ifos} for c in CATEGORIES}
    sources: list[dict] = []
    for src in sci_cfg or []:
        ifo, seg, what = _source_segments(src, ifos, t0, fs, store_dq)
        if ifo in science:
            science[ifo].append(seg)
            sources.append({"ifo": ifo, "use": "science", "source": what})
        else:
            _not_analysed("data.segments", what, ifo, ifos)
    if sci_cfg is not None:
        missing = [ifo for ifo in ifos if not science[ifo]]
        if missing:
            raise DataError(f"data.segments names no science segments for {', '.join(missing)}; every analysed "
                            f"detector needs at least one source (analysed: {', '.join(ifos)})")
    if veto_cfg is not None:
        if veto_cfg.definer is not None:
            _definer_vetoes(veto_cfg, ifos, t0, fs, by_cat, sources)
        for src in veto_cfg.extra:
            ifo, seg, what = _source_segments(src, ifos, t0, fs, store_dq)
            if ifo in by_cat[src.category]:
                by_cat[src.category][ifo].append(seg)
                sources.append({"ifo": ifo, "use": f"category {src.category}", "source": what})
            else:
                _not_analysed("data.vetoes.extra", what, ifo, ifos)
    applied = set(veto_cfg.categories) if veto_cfg is not None else set()
    hw_veto = getattr(data_cfg, "hardware_injections", "flag") == "veto"
    excluded, vetoed, hardware, seconds = {}, {}, {}, {}
    lo, hi = span
    for ifo in ifos:
        not_science = complement(union(*science[ifo])) if sci_cfg is not None else _empty()
        cat1 = union(*by_cat[1][ifo]) if 1 in applied else _empty()
        excluded[ifo] = union(not_science, cat1)
        hardware[ifo] = union(*by_cat[3][ifo])
        vetoed[ifo] = union(*(by_cat[c][ifo] for c in (2, 4) if c in applied), hardware[ifo] if hw_veto else _empty())
        total = lambda s: float(np.sum(np.diff(clip(s, lo, hi), axis=1))) / fs  # noqa: E731
        seconds[ifo] = {"not_science": total(not_science), "category_1": total(cat1),
                        "vetoed_after_conditioning": total(vetoed[ifo]), "hardware_injections": total(hardware[ifo])}
    return DataSegments(excluded, vetoed, hardware,
                        {"sources": sources, "categories": sorted(applied), "hardware_injections":
                         "veto" if hw_veto else "flag", "seconds_in_span": seconds})


def _not_analysed(key: str, what: str, ifo: str, ifos: tuple[str, ...]) -> None:
    """Say that a source for a detector the campaign does not analyse is not used (a list for
    every detector serves any subset of them, so this is not an error)."""
    log.warning("%s: %s is for %s, which this campaign does not analyse (%s): not used", key, what, ifo,
                ", ".join(ifos))


def _definer_vetoes(veto_cfg, ifos, t0, fs, by_cat, sources) -> None:
    definer = Path(veto_cfg.definer)
    flags: dict[str, np.ndarray] = {}
    for path in veto_cfg.files:
        path = Path(path)
        data = _read_bytes(path)
        if file_kind(path, data) != "xml":
            raise DataError(f"vetoes.files: {path} is not LIGO_LW segment XML (the veto definer's flags are read from XML)")
        for name, seg in read_segment_xml(path, data).items():
            flags[name] = union(flags.get(name, _empty()), seg)
    wanted = set(veto_cfg.categories) | {3}
    for row in read_veto_definer(definer):
        if row.ifo not in ifos or row.category not in wanted:
            continue
        if row.flag not in flags:
            raise DataError(f"veto definer {definer}: flag {row.flag} (category {row.category}) is in none of "
                            f"data.vetoes.files (they hold: {', '.join(sorted(flags))[:300] or 'no flags'})")
        valid = np.array([[row.start, row.stop if row.stop is not None else GPS_MAX * _NS]], dtype=np.int64)
        seg = pad(intersect(flags[row.flag], valid), row.start_pad, row.end_pad)
        by_cat[row.category][row.ifo].append(to_samples(seg, t0, fs))
        sources.append({"ifo": row.ifo, "use": f"category {row.category}",
                        "source": f"{definer}: {row.flag} <{row.start_pad // _NS}:{row.end_pad // _NS}>"})
