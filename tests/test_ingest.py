"""Ingest of GWOSC HDF5 files and SIGPROC time series into the strain store."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import h5py
import numpy as np
import pytest
from astropy.time import Time

from gwbatch.errors import DataError, OutputError
from gwbatch.gpstime import GPSTime
from gwbatch.io import gwosc as gwosc_mod
from gwbatch.io.gwosc import ingest_gwosc, read_gwosc
from gwbatch.io.sigproc import ingest_sigproc, read_sigproc_header, read_tim
from gwbatch.io.store import StoreWriter, open_store, read_dq, read_meta, read_strain

DATA = Path(__file__).parent / "data"
H1_FILE = DATA / "gw150914" / "H-H1_LOSC_4_V2-1126259446-32.hdf5"
L1_FILE = DATA / "gw150914" / "L-L1_LOSC_4_V2-1126259446-32.hdf5"
TIM_FILE = DATA / "pulsar-j1807" / "GBT_J1807-0847.tim"
FS = 4096
GPS0 = 1126259446


# ---------------------------------------------------------------------------------------------
# helpers


def _file_arrays(path: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    with h5py.File(path, "r") as h5:
        strain = h5["strain/Strain"][()]
        dq = h5["quality/simple/DQmask"][()]
        names = [n.decode() for n in h5["quality/simple/DQShortnames"][()]]
    return strain, dq, names


def _replace(h5: h5py.File, name: str, data: np.ndarray, **attrs) -> None:
    """Recreate dataset ``name`` with ``data``, keeping its attributes (updated by ``attrs``)."""
    old = dict(h5[name].attrs)
    del h5[name]
    ds = h5.create_dataset(name, data=data)
    ds.attrs.update({**old, **attrs})


def _gwosc_piece(dst: Path, lo: int, hi: int, *, src: Path = H1_FILE, decimate: int = 1) -> Path:
    """A GWOSC-layout file holding seconds ``[lo, hi)`` of ``src`` (optionally decimated)."""
    with h5py.File(src, "r") as s, h5py.File(dst, "w") as d:
        for key in s:
            s.copy(s[key], d, name=key)
        strain = s["strain/Strain"][lo * FS : hi * FS : decimate]
        start = GPS0 + lo
        _replace(d, "strain/Strain", strain, Xstart=start, Npoints=strain.size,
                 Xspacing=decimate / FS)
        for name in ("quality/simple/DQmask", "quality/injections/Injmask"):
            _replace(d, name, s[name][lo:hi], Xstart=start, Npoints=hi - lo)
        _replace(d, "meta/GPSstart", np.int64(start))
        _replace(d, "meta/Duration", np.int64(hi - lo))
    return dst


def _strain(store: Path, ifos=("H1",)) -> np.ndarray:
    ds = open_store(store)
    return read_strain(ds, ifos, 0, ds.sizes["time"])


def _dq(store: Path, ifos=("H1",)) -> np.ndarray:
    return read_dq(open_store(store), ifos)


def _sigproc_header(**fields) -> bytes:
    """A SIGPROC header with ``fields`` (ints as int32, floats as float64, str as strings)."""

    def s(text: str) -> bytes:
        return struct.pack("<i", len(text)) + text.encode()

    out = s("HEADER_START")
    for key, value in fields.items():
        out += s(key)
        if isinstance(value, str):
            out += s(value)
        elif isinstance(value, float):
            out += struct.pack("<d", value)
        else:
            out += struct.pack("<i", value)
    return out + s("HEADER_END")


@pytest.fixture(scope="module")
def h1_store(tmp_path_factory) -> Path:
    return ingest_gwosc([H1_FILE], tmp_path_factory.mktemp("h1") / "h1.zarr")


# ---------------------------------------------------------------------------------------------
# GWOSC: the real GW150914 files


def test_read_gwosc_real_file():
    f = read_gwosc(H1_FILE)
    assert f.ifo == "H1"
    assert f.t0 == GPSTime(GPS0)
    assert f.sample_rate == FS
    assert f.strain.dtype == np.float64 and f.strain.size == 32 * FS
    assert f.dq.dtype == np.uint8 and f.dq.size == 32
    assert f.dq_bits[0] == "DATA"


def test_ingest_gw150914_both_detectors(tmp_path):
    out = ingest_gwosc([L1_FILE, H1_FILE], tmp_path / "gw150914.zarr")
    meta = read_meta(out)
    assert meta.ifos == ("H1", "L1")
    assert meta.sample_rate == FS
    assert meta.t0 == GPSTime(GPS0)
    assert meta.n_samples == 131072
    strain = _strain(out, ("H1", "L1"))
    dq = _dq(out, ("H1", "L1"))
    for i, path in enumerate((H1_FILE, L1_FILE)):
        ref, ref_dq, names = _file_arrays(path)
        np.testing.assert_array_equal(strain[i], ref.astype(np.float32))
        np.testing.assert_array_equal(dq[i], ref_dq)
        assert meta.dq_bits == tuple(names)
    prov = meta.provenance
    assert prov["source"] == "gwosc"
    assert [f["name"] for f in prov["files"]] == [H1_FILE.name, L1_FILE.name]
    assert all(len(f["sha256"]) == 64 and f["duration"] == 32 for f in prov["files"])


# ---------------------------------------------------------------------------------------------
# GWOSC: joining, gaps, overlaps, rates, layouts


@pytest.mark.parametrize("reverse", [False, True])
def test_join_two_halves_equals_single_file(tmp_path, h1_store, reverse):
    a = _gwosc_piece(tmp_path / "H-H1_a.hdf5", 0, 16)
    b = _gwosc_piece(tmp_path / "H-H1_b.hdf5", 16, 32)
    files = [b, a] if reverse else [a, b]
    out = ingest_gwosc(files, tmp_path / "joined.zarr")
    assert read_meta(out).n_samples == read_meta(h1_store).n_samples
    np.testing.assert_array_equal(_strain(out), _strain(h1_store))
    np.testing.assert_array_equal(_dq(out), _dq(h1_store))


def test_gap_reads_nan_and_dq_zero(tmp_path, h1_store):
    a = _gwosc_piece(tmp_path / "H-H1_a.hdf5", 0, 14)
    b = _gwosc_piece(tmp_path / "H-H1_b.hdf5", 18, 32)
    out = ingest_gwosc([a, b], tmp_path / "gap.zarr")
    got, full = _strain(out)[0], _strain(h1_store)[0]
    assert got.size == 32 * FS
    gap = slice(14 * FS, 18 * FS)
    assert np.isnan(got[gap]).all()
    assert not (got[gap] == 0).any()
    np.testing.assert_array_equal(got[: 14 * FS], full[: 14 * FS])
    np.testing.assert_array_equal(got[18 * FS :], full[18 * FS :])
    assert not np.isnan(got[: 14 * FS]).any() and not np.isnan(got[18 * FS :]).any()
    dq = _dq(out)[0]
    assert (dq[14:18] == 0).all()
    np.testing.assert_array_equal(dq[:14], _dq(h1_store)[0][:14])
    np.testing.assert_array_equal(dq[18:], _dq(h1_store)[0][18:])


def test_detector_not_covering_span_reads_nan(tmp_path):
    h = _gwosc_piece(tmp_path / "H-H1_a.hdf5", 0, 32)
    l_part = _gwosc_piece(tmp_path / "L-L1_a.hdf5", 8, 16, src=L1_FILE)
    out = ingest_gwosc([l_part, h], tmp_path / "span.zarr")
    assert read_meta(out).ifos == ("H1", "L1")
    l1 = _strain(out, ("L1",))[0]
    assert np.isnan(l1[: 8 * FS]).all() and np.isnan(l1[16 * FS :]).all()
    assert not np.isnan(l1[8 * FS : 16 * FS]).any()
    assert (_dq(out, ("L1",))[0][[0, 7, 16, 31]] == 0).all()


def test_nan_samples_in_file_are_kept(tmp_path):
    src = _gwosc_piece(tmp_path / "H-H1_a.hdf5", 0, 4)
    with h5py.File(src, "r+") as h5:
        strain = h5["strain/Strain"][()]
        strain[100:200] = np.nan
        _replace(h5, "strain/Strain", strain)
    got = _strain(ingest_gwosc([src], tmp_path / "nan.zarr"))[0]
    assert np.isnan(got[100:200]).all() and not np.isnan(got[:100]).any()


def test_overlap_refused_naming_both_files(tmp_path):
    a = _gwosc_piece(tmp_path / "H-H1_first.hdf5", 0, 17)
    b = _gwosc_piece(tmp_path / "H-H1_second.hdf5", 15, 32)
    with pytest.raises(DataError, match="overlap") as err:
        ingest_gwosc([b, a], tmp_path / "overlap.zarr")
    msg = str(err.value)
    assert a.name in msg and b.name in msg
    assert "1126259461" in msg and "1126259463" in msg  # the overlapping GPS interval
    assert not (tmp_path / "overlap.zarr").exists()


def test_mismatched_rates_refused(tmp_path):
    full = _gwosc_piece(tmp_path / "H-H1_4k.hdf5", 0, 16)
    half = _gwosc_piece(tmp_path / "H-H1_2k.hdf5", 16, 32, decimate=2)
    assert read_gwosc(half).sample_rate == 2048
    with pytest.raises(DataError) as err:
        ingest_gwosc([full, half], tmp_path / "rates.zarr")
    msg = str(err.value)
    assert "4096" in msg and "2048" in msg and full.name in msg and half.name in msg


def test_off_grid_start_refused(tmp_path):
    a = _gwosc_piece(tmp_path / "H-H1_a.hdf5", 0, 16)
    b = _gwosc_piece(tmp_path / "H-H1_b.hdf5", 16, 32)
    with h5py.File(b, "r+") as h5:
        h5["strain/Strain"].attrs["Xstart"] = GPS0 + 16 + 0.0001  # under one sample
    with pytest.raises(DataError, match="sample grid"):
        ingest_gwosc([a, b], tmp_path / "grid.zarr")


def test_unknown_hdf5_layout_refused(tmp_path):
    path = tmp_path / "HLV-like.hdf"
    with h5py.File(path, "w") as h5:
        ds = h5.create_dataset("H1:LDAS-STRAIN", data=np.zeros(16384))
        ds.attrs.update({"x0": 968654552.0, "dx": 1 / 16384})
    with pytest.raises(DataError, match="strain/Strain") as err:
        read_gwosc(path)
    assert path.name in str(err.value) and "GWOSC" in str(err.value)
    with pytest.raises(DataError, match="strain/Strain"):
        ingest_gwosc([path], tmp_path / "hlv.zarr")


def test_missing_dqmask_refused(tmp_path):
    path = _gwosc_piece(tmp_path / "H-H1_a.hdf5", 0, 4)
    with h5py.File(path, "r+") as h5:
        del h5["quality/simple/DQmask"]
    with pytest.raises(DataError, match="quality/simple/DQmask"):
        read_gwosc(path)


def test_dqmask_length_checked(tmp_path):
    path = _gwosc_piece(tmp_path / "H-H1_a.hdf5", 0, 4)
    with h5py.File(path, "r+") as h5:
        _replace(h5, "quality/simple/DQmask", np.full(3, 127, dtype=np.uint32))
    with pytest.raises(DataError, match="expected 4"):
        read_gwosc(path)


def test_non_hdf5_refused(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not strain\n")
    with pytest.raises(DataError, match="not an HDF5 file"):
        read_gwosc(path)
    with pytest.raises(DataError, match="does not exist"):
        read_gwosc(tmp_path / "missing.hdf5")


def test_fractional_sample_rate_refused(tmp_path):
    path = _gwosc_piece(tmp_path / "H-H1_a.hdf5", 0, 4)
    with h5py.File(path, "r+") as h5:
        h5["strain/Strain"].attrs["Xspacing"] = 1 / 4096.5
    with pytest.raises(DataError, match="whole number of Hz"):
        read_gwosc(path)


def test_mismatched_dq_bits_refused(tmp_path):
    a = _gwosc_piece(tmp_path / "H-H1_a.hdf5", 0, 16)
    b = _gwosc_piece(tmp_path / "H-H1_b.hdf5", 16, 32)
    with h5py.File(b, "r+") as h5:
        names = h5["quality/simple/DQShortnames"][()]
        names[1] = b"OTHER"
        _replace(h5, "quality/simple/DQShortnames", names)
    with pytest.raises(DataError, match="DQ bit names differ"):
        ingest_gwosc([a, b], tmp_path / "bits.zarr")


# ---------------------------------------------------------------------------------------------
# GWOSC: output handling


def test_existing_output_needs_overwrite(tmp_path):
    short = _gwosc_piece(tmp_path / "H-H1_a.hdf5", 0, 4)
    out = ingest_gwosc([short], tmp_path / "store.zarr")
    with pytest.raises(OutputError, match="already exists"):
        ingest_gwosc([H1_FILE], out)
    assert read_meta(out).n_samples == 4 * FS
    ingest_gwosc([H1_FILE], out, overwrite=True)
    assert read_meta(out).n_samples == 32 * FS


def test_overwrite_replaces_only_a_store(tmp_path, capsys):
    """``--overwrite`` replaces a gwbatch store and nothing else: a directory of other files (the
    input frames' own, say), an input file given as ``--out``, or a link is refused with exit 4 and
    left as it was; an ``--out`` that cannot be created is one line and exit 4, not a traceback."""
    from workflow.cli import main

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "notes.txt").write_text("precious\n")
    source = tmp_path / "H-H1_copy.hdf5"
    source.write_bytes(H1_FILE.read_bytes())
    link = tmp_path / "link.zarr"
    link.symlink_to(victim)
    for out in (victim, source, link):
        assert main(["ingest", "gwosc", str(source), "--out", str(out), "--overwrite"]) == 4
        assert "is not a gwbatch store: --overwrite replaces only a store" in capsys.readouterr().err
    assert (victim / "notes.txt").read_text() == "precious\n" and source.read_bytes() == H1_FILE.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["H-H1_copy.hdf5", "link.zarr", "victim"]
    store = tmp_path / "s.zarr"
    assert main(["ingest", "gwosc", str(source), "--out", str(store)]) == 0
    assert main(["ingest", "gwosc", str(source), "--out", str(store), "--overwrite"]) == 0
    assert read_meta(store).n_samples == 32 * FS
    capsys.readouterr()
    assert main(["ingest", "gwosc", str(source), "--out", str(source / "x.zarr")]) == 4
    err = capsys.readouterr().err
    assert err.startswith("gwbatch: error: cannot create the directory of") and "Traceback" not in err


def test_interrupted_ingest_leaves_nothing(tmp_path, monkeypatch):
    a = _gwosc_piece(tmp_path / "H-H1_a.hdf5", 0, 16)
    b = _gwosc_piece(tmp_path / "H-H1_b.hdf5", 16, 32)
    calls = []
    real = StoreWriter.write_strain

    def failing(self, ifo, start, values):
        calls.append(start)
        if len(calls) == 2:
            raise KeyboardInterrupt("simulated interruption")
        return real(self, ifo, start, values)

    monkeypatch.setattr(gwosc_mod.StoreWriter, "write_strain", failing)
    out = tmp_path / "interrupted.zarr"
    with pytest.raises(KeyboardInterrupt):
        ingest_gwosc([a, b], out)
    assert len(calls) == 2
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


def test_chunk_samples_passed_to_store(tmp_path):
    out = ingest_gwosc([H1_FILE], tmp_path / "chunked.zarr", chunk_samples=8192)
    assert read_meta(out).chunk_samples == 8192


# ---------------------------------------------------------------------------------------------
# SIGPROC


def test_sigproc_header_of_real_file():
    header, size = read_sigproc_header(TIM_FILE)
    assert header["source_name"] == "J1807-0847"
    assert header["tsamp"] == pytest.approx(0.00016384, abs=1e-12)
    assert header["nchans"] == 1 and header["nbits"] == 32 and header["nifs"] == 1
    assert header["telescope_id"] == 6
    assert header["tstart"] == pytest.approx(59313.3098, abs=1e-4)
    assert size == 318


def test_read_tim_real_file():
    series = read_tim(TIM_FILE)
    _, size = read_sigproc_header(TIM_FILE)
    assert series.data.dtype == np.float32
    assert series.data.size == (TIM_FILE.stat().st_size - size) // 4 == 131130


def test_ingest_sigproc_real_file(tmp_path):
    out = ingest_sigproc(TIM_FILE, tmp_path / "j1807.zarr")
    header, size = read_sigproc_header(TIM_FILE)
    meta = read_meta(out)
    assert meta.ifos == ("GBT",)
    assert meta.sample_rate == 1 / header["tsamp"]
    assert meta.n_samples == (TIM_FILE.stat().st_size - size) // 4
    raw = np.fromfile(TIM_FILE, dtype="<f4", offset=size)
    np.testing.assert_array_equal(_strain(out, ("GBT",))[0], raw)
    gps = Time(header["tstart"], format="mjd", scale="utc").gps
    assert abs(float(meta.t0) - gps) < 1e-6
    assert meta.dq_bits == ("DATA",)
    assert (_dq(out, ("GBT",))[0] == 1).all()
    assert meta.provenance["source"] == "sigproc"
    assert meta.provenance["file"] == TIM_FILE.name
    assert meta.provenance["header"]["source_name"] == "J1807-0847"


def test_ingest_sigproc_custom_name(tmp_path):
    out = ingest_sigproc(TIM_FILE, tmp_path / "named.zarr", name="J1807")
    assert read_meta(out).ifos == ("J1807",)


def test_truncated_tim_refused(tmp_path):
    path = tmp_path / "truncated.tim"
    path.write_bytes(TIM_FILE.read_bytes()[:-2])
    with pytest.raises(DataError, match="truncated"):
        read_tim(path)


def test_nsamples_mismatch_refused(tmp_path):
    path = tmp_path / "short.tim"
    path.write_bytes(_sigproc_header(nchans=1, nifs=1, nbits=32, tsamp=1e-3, nsamples=10)
                     + np.zeros(8, dtype="<f4").tobytes())
    with pytest.raises(DataError, match="nsamples=10"):
        read_tim(path)


def test_eight_bit_tim_converted(tmp_path):
    path = tmp_path / "eight.tim"
    values = np.array([0, 1, 128, 255], dtype=np.uint8)
    path.write_bytes(_sigproc_header(nchans=1, nifs=1, nbits=8, tsamp=1e-3) + values.tobytes())
    series = read_tim(path)
    assert series.data.dtype == np.float32
    np.testing.assert_array_equal(series.data, values.astype(np.float32))


def test_filterbank_refused(tmp_path):
    path = tmp_path / "crab.fil"
    path.write_bytes(_sigproc_header(telescope_id=4, nchans=832, nifs=1, nbits=8, tsamp=512e-6,
                                     fch1=4030.0, foff=-4.0, tstart=58000.0)
                     + bytes(832 * 16))
    with pytest.raises(DataError, match="filterbank") as err:
        read_tim(path)
    assert "832" in str(err.value)


def test_unknown_header_keyword_refused(tmp_path):
    path = tmp_path / "odd.tim"
    path.write_bytes(_sigproc_header(nchans=1, nbits=32, frobnicate=3) + bytes(16))
    with pytest.raises(DataError, match="frobnicate") as err:
        read_sigproc_header(path)
    assert "byte" in str(err.value)


def test_not_sigproc_refused(tmp_path):
    path = tmp_path / "notes.tim"
    path.write_text("hello, this is text\n")
    with pytest.raises(DataError):
        read_sigproc_header(path)


def test_truncated_hdf5_refused(tmp_path):
    cut = tmp_path / "cut.hdf5"
    cut.write_bytes(H1_FILE.read_bytes()[:200_000])
    with pytest.raises(DataError, match=r"cannot open .*cut.hdf5 as HDF5 \(.*truncated file.*\); is the file complete\?"):
        ingest_gwosc([cut], tmp_path / "s.zarr")
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.parametrize("case", ["zero-length", "integers", "bytes", "two-dimensional"])
def test_malformed_strain_refused(tmp_path, case):
    """Each malformed strain dataset gets its own message, and no store is written."""
    src = _gwosc_piece(tmp_path / "piece.hdf5", 0, 4 if case != "zero-length" else 0)
    if case != "zero-length":
        with h5py.File(src, "a") as h5:
            x = h5["strain/Strain"][:]
            _replace(h5, "strain/Strain", {"integers": (x * 1e21).astype(np.int32), "bytes": np.array([b"abc"] * x.size),
                                           "two-dimensional": x.reshape(2, -1)}[case])
    expected = {"zero-length": r"has shape \(0,\); expected a non-empty 1-D series",
                "integers": "has dtype int32; expected floating-point strain",
                "bytes": r"has dtype \|S3; expected floating-point strain",
                "two-dimensional": r"has shape \(2, 8192\); expected a non-empty 1-D series"}[case]
    with pytest.raises(DataError, match=expected):
        ingest_gwosc([src], tmp_path / "s.zarr")
    assert not (tmp_path / "s.zarr").exists()


# ---------------------------------------------------------------------------------------------
# extremes (issue 22, finding 13): refused with the file and key named, exit 3, no store left


def _ingest_cli(capsys, *args) -> tuple[int, str]:
    from workflow.cli import main

    code = main(["ingest", *map(str, args)])
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 1, err
    return code, err


def test_join_spanning_decades_refused_naming_both_files(tmp_path, capsys):
    a = _gwosc_piece(tmp_path / "H-H1_a.hdf5", 0, 16)
    b = _gwosc_piece(tmp_path / "H-H1_b.hdf5", 16, 32)
    with h5py.File(b, "r+") as h5:
        h5["strain/Strain"].attrs["Xstart"] = GPS0 + 16 + 1_000_000_000  # 1e9 s off: a 31-year store
    out = tmp_path / "s.zarr"
    code, err = _ingest_cli(capsys, "gwosc", a, b, "--out", out)
    assert code == 3
    assert a.name in err and b.name in err and "a store may span at most 126230400 s (4 years)" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [a.name, b.name]


@pytest.mark.parametrize("xstart, message", [
    (2**62, r"Xstart 4611686018427387904.000000000 is outside the GPS times gwbatch handles, \[0, 2\*\*32\)"),
    (-5.0, r"Xstart -5.000000000 is outside the GPS times"),
    (float("nan"), "Xstart nan is not a GPS time"),
    (float("inf"), "Xstart inf is not a GPS time"),
])
def test_xstart_outside_gps_refused(tmp_path, capsys, xstart, message):
    a = _gwosc_piece(tmp_path / "H-H1_a.hdf5", 0, 4)
    with h5py.File(a, "r+") as h5:
        h5["strain/Strain"].attrs["Xstart"] = xstart
    code, err = _ingest_cli(capsys, "gwosc", a, "--out", tmp_path / "s.zarr")
    assert code == 3 and a.name in err
    assert re.search(message, err), err
    assert not (tmp_path / "s.zarr").exists()


def test_absurd_xspacing_refused(tmp_path, capsys):
    a = _gwosc_piece(tmp_path / "H-H1_a.hdf5", 0, 4)
    with h5py.File(a, "r+") as h5:
        h5["strain/Strain"].attrs["Xspacing"] = 1e-300
    code, err = _ingest_cli(capsys, "gwosc", a, "--out", tmp_path / "s.zarr")
    assert code == 3 and "Xspacing 1e-300 s is a sample rate of 1e+300 Hz; expected 0.001 to 1e+06 Hz" in err


@pytest.mark.parametrize("key, value", [
    ("tstart", 1e300), ("tstart", -1e300), ("tstart", float("nan")), ("tstart", float("inf")), ("tstart", 0.0),
    ("tstart", -1.0), ("tstart", 1e6),
    ("tsamp", 1e300), ("tsamp", -1e300), ("tsamp", float("nan")), ("tsamp", 0.0), ("tsamp", -1e-3),
    ("tsamp", 1e-300), ("tsamp", 1e-12), ("tsamp", 1e5),
])
def test_sigproc_extreme_header_values_refused(tmp_path, capsys, key, value):
    fields = {"nchans": 1, "nifs": 1, "nbits": 32, "tsamp": 1e-3, "tstart": 59313.3}
    fields[key] = value
    path = tmp_path / "extreme.tim"
    path.write_bytes(_sigproc_header(**fields) + np.ones(64, dtype="<f4").tobytes())
    code, err = _ingest_cli(capsys, "sigproc", path, "--out", tmp_path / "s.zarr")
    assert code == 3 and f"SIGPROC header key '{key}' is {value!r}" in err, err
    assert not (tmp_path / "s.zarr").exists() and not [p for p in tmp_path.iterdir() if ".partial-" in p.name]
