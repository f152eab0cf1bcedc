"""Structured fuzz of the segment, veto-definer and injection-file readers (issue 24 item 6).

Segwizard text and GWOSC timeline JSON are drawn from a grammar of plausible and broken lines;
LIGO_LW segment, veto-definer and sim_inspiral documents are valid files with 1 to 3 byte-level
mutations (truncation, flipped bytes, overwritten or duplicated ranges, digits replaced).  Every
reader either raises :class:`DataError` with a one-line message or returns well-formed values:
segments as sorted-or-not ``(n, 2)`` int64 nanoseconds with ``start <= stop`` inside
``[0, 2**32)`` s, veto rows with a known category, injection tables with finite checked columns.
``MAX_EXAMPLES`` cases per reader (about 10 s in all on the 2-core development machine).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gwbatch.errors import DataError

pytest.importorskip("lal")
from gwbatch.io.injection_files import read_injection_file  # noqa: E402
from gwbatch.io.segments import CATEGORIES, read_flag, read_veto_definer  # noqa: E402
from tests.ligolw_files import write_segment_xml, write_sim_inspiral, write_veto_definer  # noqa: E402

MAX_EXAMPLES = 400  # per reader
NS = 1_000_000_000
FUZZ = settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
DIR = Path(tempfile.mkdtemp(prefix="segfuzz-"))


def _segments_ok(seg: np.ndarray) -> None:
    assert seg.dtype == np.int64 and seg.ndim == 2 and seg.shape[1] == 2
    assert np.all(seg[:, 0] <= seg[:, 1]) and np.all(seg >= 0) and np.all(seg < 2**32 * NS)


def _refused(exc: DataError) -> None:
    assert "\n" not in str(exc) and str(exc)


numbers = st.one_of(st.integers(-10, 2**33).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
                    st.sampled_from(["1e400", "-0", "0x10", "1_000", "nan", "", "١٢٣", "1000000000.123456789012"]),
                    st.text(max_size=6))
lines = st.lists(st.one_of(st.tuples(numbers, numbers).map(" ".join),
                           st.tuples(st.integers(0, 9).map(str), numbers, numbers, numbers).map(" ".join),
                           st.text(max_size=20), st.just("# comment"), st.just("")), max_size=8).map("\n".join)


@FUZZ
@given(text=lines)
def test_segwizard_text(text):
    path = DIR / "s.txt"
    path.write_bytes(text.encode("utf-8", "replace"))
    try:
        ifo, seg = read_flag(path, ifo="H1")
    except DataError as exc:
        return _refused(exc)
    assert ifo == "H1"
    _segments_ok(seg)


json_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40),
                                     st.floats(allow_nan=False), st.text(max_size=8)),
                           lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                   st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                           max_leaves=12)


@FUZZ
@given(segments=st.one_of(json_values, st.lists(st.lists(st.one_of(st.integers(-5, 2**33), st.floats(), st.text(max_size=3)),
                                                           min_size=0, max_size=3), max_size=5)),
       name=st.one_of(st.none(), st.sampled_from(["H1_DATA", "L1_CBC_CAT2", "X_DATA", "H1", 5])))
def test_gwosc_json(segments, name):
    path = DIR / "s.json"
    path.write_text(json.dumps({"id": name, "segments": segments}))
    try:
        ifo, seg = read_flag(path, ifo=None if isinstance(name, str) and name[:2] in ("H1", "L1") else "V1")
    except DataError as exc:
        return _refused(exc)
    _segments_ok(seg)


def _mutate(data: bytes, ops) -> bytes:
    b = bytearray(data)
    for kind, pos, value in ops:
        if not b:
            break
        i = pos % len(b)
        if kind == "truncate":
            del b[i:]
        elif kind == "flip":
            b[i] ^= (value % 255) + 1
        elif kind == "digit":  # replace a digit by another character, keeping the XML well-formed more often
            j = next((k for k in range(i, len(b)) if chr(b[k]).isdigit()), None)
            if j is not None:
                b[j] = b"0123456789-.e "[value % 14]
        elif kind == "duplicate":
            b[i:i] = b[i:i + value % 64]
        else:
            del b[i:i + value % 64]
    return bytes(b)


mutations = st.lists(st.tuples(st.sampled_from(["truncate", "flip", "digit", "duplicate", "delete"]),
                               st.integers(0, 2**20), st.integers(0, 2**16)), min_size=1, max_size=3)
BASE = {}


def _base(name: str) -> bytes:
    if name not in BASE:
        path = DIR / f"base-{name}.xml"
        if name == "segments":
            write_segment_xml(path, {"H1:A:1": [("1000000000", "1000000010.5"), (1000000020, 1000000030)],
                                     "L1:B:2": [(1000000005, 1000000006)]})
        elif name == "definer":
            write_veto_definer(path, [dict(ifo="H1", name="A", version=1, category=2, start_pad=-1, end_pad=2),
                                      dict(ifo="L1", name="B", version=2, category=1, start_time=10, end_time=20)])
        else:
            write_sim_inspiral(path, [dict(gps_time="1000000100.25", mass1=1.4, mass2=1.3, distance=40.0, ra=1.0,
                                           dec=0.2, inclination=0.5, phase=0.1, polarization=0.3, f_low=30.0,
                                           approximant="TaylorF2threePointFivePN")] * 2)
        BASE[name] = path.read_bytes()
    return BASE[name]


def _check_segments(path):
    ifo, seg = read_flag(path, flag="H1:A:1")
    assert ifo == "H1"
    _segments_ok(seg)


def _check_definer(path):
    for r in read_veto_definer(path):
        assert r.category in CATEGORIES and abs(r.start_pad) <= 86400 * NS and (r.stop is None or r.stop > r.start)


def _check_injections(path):
    table = read_injection_file(path)
    assert len(table) >= 1
    for col in ("gps_time", "mass1", "mass2", "distance", "f_low"):
        assert np.all(np.isfinite(table[col].to_numpy(dtype=np.float64))) and np.all(table[col] > 0)


CHECKS = {"segments": _check_segments, "definer": _check_definer, "injections": _check_injections}


@settings(parent=FUZZ, max_examples=3 * MAX_EXAMPLES)
@given(kind=st.sampled_from(sorted(CHECKS)), ops=mutations)
@example(kind="segments", ops=[("delete", 878, 63)])  # a segment table without its segment_def_id column
def test_ligolw_documents(kind, ops):
    """A mutated segment, veto-definer or sim_inspiral document: refused in one line, or read well-formed."""
    path = DIR / f"m-{kind}.xml"
    path.write_bytes(_mutate(_base(kind), ops))
    try:
        CHECKS[kind](path)
    except DataError as exc:
        _refused(exc)
