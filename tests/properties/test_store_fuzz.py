"""Structured attacks on small strain stores (issue 22, finding 8): attribute lies (rate, t0, ifos,
dq_bits, format, provenance), dtype changes (arrays rewritten, or only their metadata), chunk files
swapped, truncated, extended, flipped, deleted or added, arrays and their metadata deleted or
edited.  After each attack :func:`read_meta` plus reading every strain chunk and the DQ either
raises :class:`DataError` or returns exactly the original store's description and data: never
another exception, never silently different data.

Each example copies a 16 s, two-detector store at 256 Hz (4 chunks per detector, one never
written) and applies one to three attacks.  ``MAX_EXAMPLES`` (1200) cases run in about 20 s on
the 2-core development machine.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gwbatch.errors import DataError
from gwbatch.io.store import StoreWriter, read_dq, read_meta, read_strain

FS, N, CHUNK, IFOS = 256, 4096, 1024, ("H1", "L1")
MAX_EXAMPLES = 1200
DELETE = object()
ARRAYS = ("strain", "dq", "ifo", "checksum")
#: Grid positions (row, index); L1's chunk 2 is never written.
POSITIONS = [(r, i) for r in range(2) for i in range(4)]
WRITTEN = [p for p in POSITIONS if p != (1, 2)]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("fuzz") / "base.zarr"
    rng = np.random.default_rng(3)
    with StoreWriter(path, ifos=IFOS, sample_rate=FS, t0="1000000000.25", n_samples=N, chunk_samples=CHUNK,
                     provenance={"source": "fuzz"}) as w:
        for ifo in IFOS:
            x = rng.standard_normal(N).astype(np.float32)
            if ifo == "L1":
                x[2 * CHUNK : 3 * CHUNK] = np.nan  # never written: zarr skips all-NaN chunks
                x[100:110] = 0.0
            w.write_strain(ifo, 0, x)
            w.write_dq(ifo, 0, rng.integers(0, 128, N // FS))
        w.commit()
    meta = read_meta(path)
    assert meta.checksums[1, 2] == 0 and (meta.checksums != 0).sum() == 7
    return path, {"meta": meta, "strain": read_strain(meta, IFOS, 0, N), "dq": read_dq(meta, IFOS)}


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12)),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
PLAUSIBLE = {
    "sample_rate": [FS * 2, FS / 2, FS + 0.3, FS - 0.3, FS * 1.0001, -FS, 0, 0.0, 1e-300, 1e300, "256", float(FS), FS],
    "t0": [str(2**62), "-1", "1000000000.5", "1000000000.25", "1000000000.250000000", str(2**32 - 1), "1e9",
           1e9, 1000000000.25, "nan", "", [1, 2]],
    "ifos": [["L1", "H1"], ["H1"], ["H1", "L1", "V1"], ["H1", "H1"], ["H1", "X1"], [], ["H1", 1], "H1,L1"],
    "dq_bits": [["CBC_CAT1", "DATA", "CBC_CAT2", "CBC_CAT3", "BURST_CAT1", "BURST_CAT2", "BURST_CAT3"],
                ["DATA"], [], ["A", "A"], [f"B{i}" for i in range(9)], "DATA", [1, 2]],
    "format": ["gwbatch-strain/1", "gwbatch-strain/3", "", None],
    "provenance": [[], "text", {"source": "other"}],
}
attr_attack = st.sampled_from(sorted(PLAUSIBLE)).flatmap(
    lambda key: st.tuples(st.just("attr"), st.just(key),
                          st.one_of(st.sampled_from(PLAUSIBLE[key]), json_values, st.just(DELETE))))
dtype_attack = st.tuples(st.just("dtype"), st.sampled_from(ARRAYS),
                         st.sampled_from(["int32", "float64", "float16", "uint8", "int8", "int64", "uint64",
                                          "float32", "bool"]),
                         st.sampled_from(["rewrite", "metadata"]))
position = st.sampled_from(POSITIONS)
written = st.sampled_from(WRITTEN)
chunk_attack = st.one_of(
    st.tuples(st.just("swap"), written, written),
    st.tuples(st.just("truncate"), written, st.floats(0.0, 0.999)),
    st.tuples(st.just("append"), written, st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("flip"), written, st.floats(0.0, 0.999), st.integers(1, 255)),
    st.tuples(st.just("delete_chunk"), written),
    st.tuples(st.just("add_chunk"), position, written),
)
meta_attack = st.one_of(
    st.tuples(st.just("delete_array"), st.sampled_from(ARRAYS), st.sampled_from(["directory", "zarr.json"])),
    st.tuples(st.just("array_meta"), st.sampled_from(ARRAYS),
              st.sampled_from(["shape", "chunk_grid", "fill_value", "dimension_names", "codecs", "garbage"]),
              st.integers(0, 5)),
)
attacks = st.lists(st.one_of(attr_attack, dtype_attack, chunk_attack, meta_attack), min_size=1, max_size=3)


def _chunk(store: Path, pos: tuple[int, int]) -> Path:
    return store / "strain" / "c" / str(pos[0]) / str(pos[1])


def _edit_json(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _set_attr(doc: dict, key: str, value) -> None:
    if value is DELETE:
        doc.setdefault("attributes", {}).pop(key, None)
    else:
        doc.setdefault("attributes", {})[key] = value


ARRAY_META = {  # field -> variants of the array's zarr.json
    "shape": lambda doc, k: doc.__setitem__("shape", [[2, 2 * N], [3, N], [2, 100], [1, N], [N], [2, N, 1]][k]),
    "chunk_grid": lambda doc, k: doc["chunk_grid"]["configuration"].__setitem__(
        "chunk_shape", [[1, 512], [1, 2048], [2, 1024], [1, 1], [1], [1, 0]][k]),
    "fill_value": lambda doc, k: doc.__setitem__("fill_value", [0, 1.5, "NaN", "Infinity", None, 7][k]),
    "dimension_names": lambda doc, k: doc.__setitem__("dimension_names",
                                                      [["time", "ifo"], None, ["a", "b"], ["ifo"], [], ["ifo", "ifo"]][k]),
    "codecs": lambda doc, k: doc.__setitem__("codecs", [
        [c for c in doc["codecs"] if c["name"] != "zstd"],
        [{"name": "bytes", "configuration": {"endian": "big"}}] + doc["codecs"][1:],
        doc["codecs"] + [{"name": "gzip", "configuration": {"level": 1}}],
        [{"name": "transpose", "configuration": {"order": [1, 0]}}] + doc["codecs"],
        [], [{"name": "nonsense"}]][k]),
}


def attack(store: Path, step: tuple) -> None:
    kind = step[0]
    if kind == "attr":
        _edit_json(store / "zarr.json", lambda doc: _set_attr(doc, step[1], step[2]))
    elif kind == "dtype":
        _, name, dtype, how = step
        if how == "metadata":
            _edit_json(store / name / "zarr.json", lambda doc: doc.__setitem__("data_type", dtype))
            return
        group = zarr.open_group(store, mode="r+", use_consolidated=False)
        old = group[name]
        values = old[...]
        if values.dtype.kind in "OUT":  # the names array: strings cannot be cast to numbers
            values = np.arange(values.size)
        new = group.create_array(name, shape=values.shape, dtype=dtype, chunks=old.chunks, overwrite=True,
                                 dimension_names=old.metadata.dimension_names)
        with np.errstate(all="ignore"):
            new[...] = np.nan_to_num(values).astype(dtype)
    elif kind == "swap":
        a, b = _chunk(store, step[1]), _chunk(store, step[2])
        da, db = a.read_bytes(), b.read_bytes()
        a.write_bytes(db)
        b.write_bytes(da)
    elif kind == "truncate":
        f = _chunk(store, step[1])
        data = f.read_bytes()
        f.write_bytes(data[: int(len(data) * step[2])])
    elif kind == "append":
        f = _chunk(store, step[1])
        f.write_bytes(f.read_bytes() + step[2])
    elif kind == "flip":
        f = _chunk(store, step[1])
        data = bytearray(f.read_bytes())
        data[int(len(data) * step[2])] ^= step[3]
        f.write_bytes(bytes(data))
    elif kind == "delete_chunk":
        _chunk(store, step[1]).unlink(missing_ok=True)
    elif kind == "add_chunk":
        source = _chunk(store, step[2])
        if source.exists() and step[1] != step[2]:
            _chunk(store, step[1]).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, _chunk(store, step[1]))
    elif kind == "delete_array":
        target = store / step[1] if step[2] == "directory" else store / step[1] / "zarr.json"
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    elif kind == "array_meta":
        _, name, what, k = step
        doc_path = store / name / "zarr.json"
        if not doc_path.exists():
            return
        if what == "garbage":
            doc_path.write_text(['{"zarr_format": 3', "", "null", "[]", '{"zarr_format": 3, "node_type": "array"}',
                                 "\x00\xff"][k])
            return
        try:
            _edit_json(doc_path, lambda doc: ARRAY_META[what](doc, k))
        except (KeyError, TypeError, ValueError):
            pass  # an earlier attack left metadata this variant does not apply to
    else:
        raise AssertionError(step)


@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=attacks)
def test_a_store_attack_is_refused_or_changes_nothing(base, steps):
    path, ref = base
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "s.zarr"
        shutil.copytree(path, store)
        for step in steps:
            try:
                attack(store, step)
            except Exception:  # an earlier attack left nothing this one applies to (e.g. a rewrite of
                pass           # an array whose metadata it broke): the store stays as it is
        try:
            meta = read_meta(store)
            strain = read_strain(meta, meta.ifos, 0, meta.n_samples)  # every chunk of every detector
            dq = read_dq(meta, meta.ifos)
        except DataError as exc:
            message = str(exc)
            assert message and "\n" not in message and len(message) < 1000, message
            return
    want = ref["meta"]
    for name in ("ifos", "sample_rate", "t0", "n_samples", "chunk_samples", "dq_bits"):
        assert getattr(meta, name) == getattr(want, name), (name, steps)
    np.testing.assert_array_equal(strain, ref["strain"], err_msg=str(steps))
    np.testing.assert_array_equal(dq, ref["dq"], err_msg=str(steps))
