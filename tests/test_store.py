"""The Zarr strain store: layout, exact t0, NaN/0 fill for gaps, atomic publication."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gwbatch.errors import DataError, OutputError
from gwbatch.gpstime import GPSTime
from gwbatch.io.store import (
    DQ_BITS,
    StoreWriter,
    dq_sample_mask,
    open_store,
    read_dq,
    read_injections,
    read_meta,
    read_strain,
)


def make(path, n=4096, fs=256.0, t0="1000000000.5", overwrite=False, ifos=("H1", "L1")):
    writer = StoreWriter(path, ifos=ifos, sample_rate=fs, t0=t0, n_samples=n, chunk_samples=1024,
                         provenance={"source": "test"}, overwrite=overwrite)
    return writer


def test_roundtrip(tmp_path):
    path = tmp_path / "s.zarr"
    rng = np.random.default_rng(0)
    data = rng.standard_normal(4096).astype(np.float32) * 1e-21
    with make(path) as w:
        w.write_strain("H1", 0, data)
        w.write_strain("L1", 1000, data[:500])
        w.write_dq("H1", 0, np.full(16, 127))
        w.write_injections(pd.DataFrame({"id": [0, 1], "waveform": ["gaussian", "sine-gaussian"], "snr": [8.0, 9.5]}))
        w.commit()
    meta = read_meta(path)
    assert meta.ifos == ("H1", "L1") and meta.sample_rate == 256.0 and meta.n_samples == 4096
    assert meta.t0 == GPSTime(1000000000, 500000000) and meta.dq_bits == DQ_BITS
    assert meta.provenance == {"source": "test"} and meta.has_injections and meta.chunk_samples == 1024
    ds = open_store(path)
    assert ds["strain"].dims == ("ifo", "time") and ds["strain"].dtype == np.float32
    assert "time" not in ds.coords  # times come from t0 and the rate
    block = read_strain(ds, ["H1", "L1"], 0, 4096)
    np.testing.assert_array_equal(block[0], data)
    # Never-written strain is NaN, never zero; never-written DQ is 0.
    assert np.isnan(block[1, :1000]).all() and np.isnan(block[1, 1500:]).all()
    np.testing.assert_array_equal(block[1, 1000:1500], data[:500])
    dq = read_dq(ds, ["H1", "L1"])
    assert (dq[0] == 127).all() and (dq[1] == 0).all()
    inj = read_injections(path)
    assert list(inj["waveform"]) == ["gaussian", "sine-gaussian"] and list(inj["snr"]) == [8.0, 9.5]
    np.testing.assert_allclose(meta.times([0, 256]), [1000000000.5, 1000000001.5])


def test_detectors_read_in_the_order_asked(tmp_path):
    """Any subset and order of the store's detectors, across chunk boundaries; unknown ones refused."""
    path = tmp_path / "s.zarr"
    rows = {ifo: np.arange(4096, dtype=np.float32) + 10000 * k for k, ifo in enumerate(("H1", "L1", "V1"))}
    with make(path, ifos=("H1", "L1", "V1")) as w:
        for ifo, x in rows.items():
            w.write_strain(ifo, 0, x)
        w.commit()
    ds = open_store(path)
    for ifos in (["H1", "L1", "V1"], ["L1", "V1"], ["V1", "H1"], ["L1"], ["V1", "L1", "H1"]):
        block = read_strain(ds, ifos, 1000, 3100)  # spans three 1024-sample chunks
        np.testing.assert_array_equal(block, np.stack([rows[i][1000:3100] for i in ifos]), err_msg=str(ifos))
    with pytest.raises(DataError, match="detector.s. K1 not in the store; it has H1, L1, V1"):
        read_strain(ds, ["H1", "K1"], 0, 10)


def test_read_outside_store_is_nan(tmp_path):
    path = tmp_path / "s.zarr"
    with make(path) as w:
        w.write_strain("H1", 0, np.ones(4096))
        w.commit()
    block = read_strain(open_store(path), ["H1"], -10, 10)
    assert np.isnan(block[0, :10]).all() and (block[0, 10:] == 1).all()


def test_dq_sample_mask():
    dq = np.array([127, 1, 0, 127], dtype=np.uint8)
    mask = dq_sample_mask(dq, required=1, start=-2, stop=10, sample_rate=2.0)
    # samples -2,-1 outside; seconds 0,1 pass; second 2 fails; second 3 passes; samples 8,9 outside
    np.testing.assert_array_equal(mask, [0, 0, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0])
    mask_cat = dq_sample_mask(dq, required=0b11, start=0, stop=8, sample_rate=2.0)
    np.testing.assert_array_equal(mask_cat, [1, 1, 0, 0, 0, 0, 1, 1])


def test_dq_sample_mask_per_second_equals_per_sample():
    """The whole-number-rate path (a test per second, repeated) gives every sample the answer of
    ``floor(k / rate)``, for spans that start and stop mid-second, before and past the record, and
    for a rate that is not a whole number (the per-sample path)."""
    rng = np.random.default_rng(5)
    dq = rng.integers(0, 4, 50).astype(np.uint8)

    def per_sample(start, stop, rate):
        k = np.arange(start, stop)
        sec = np.floor(k / rate).astype(np.int64)
        inside = (sec >= 0) & (sec < dq.size)
        ok = np.zeros(k.size, bool)
        ok[inside] = (dq[sec[inside]] & 1) == 1
        return ok

    for rate in (1.0, 7.0, 16.0, 1000.0, 3906.25):
        for start, stop in ((0, 1), (-13, 5), (3, int(rate) + 2), (int(rate * 48) - 3, int(rate * 52) + 9), (5, 5)):
            got = dq_sample_mask(dq, 1, start, stop, rate)
            np.testing.assert_array_equal(got, per_sample(start, stop, rate), err_msg=f"{rate} {start} {stop}")


def test_dq_flag_names_checked(tmp_path):
    path = tmp_path / "s.zarr"
    with make(path) as w:
        w.commit()
    meta = read_meta(path)
    assert meta.dq_mask(["DATA", "CBC_CAT1"]) == 0b11
    with pytest.raises(DataError, match="'CAT9' is not in store .* DATA, CBC_CAT1"):
        meta.dq_mask(["CAT9"])


def test_interrupted_write_leaves_nothing(tmp_path):
    path = tmp_path / "s.zarr"
    with pytest.raises(RuntimeError):
        with make(path) as w:
            w.write_strain("H1", 0, np.ones(100))
            raise RuntimeError("killed")
    assert not path.exists()
    assert not any(p.name.startswith(".s.zarr") for p in tmp_path.iterdir())


def test_existing_store_needs_overwrite(tmp_path):
    path = tmp_path / "s.zarr"
    with make(path) as w:
        w.write_strain("H1", 0, np.ones(4096))
        w.commit()
    with pytest.raises(OutputError, match="already exists; pass --overwrite"):
        make(path)
    with make(path, overwrite=True) as w:
        w.write_strain("H1", 0, np.full(4096, 2.0))
        w.commit()
    assert (read_strain(open_store(path), ["H1"], 0, 4)[0] == 2).all()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]


def test_bad_writes_and_paths(tmp_path):
    with make(tmp_path / "s.zarr") as w:
        with pytest.raises(DataError, match="outside"):
            w.write_strain("H1", 4000, np.ones(200))
        with pytest.raises(DataError, match="outside"):
            w.write_dq("H1", 10, np.ones(10))
        w.abort()
    with pytest.raises(DataError, match="does not exist"):
        read_meta(tmp_path / "missing.zarr")
    (tmp_path / "plain").mkdir()
    with pytest.raises(DataError, match="not a Zarr v3 group|not a gwbatch strain store"):
        read_meta(tmp_path / "plain")
    with pytest.raises(DataError, match="sample rate"):
        StoreWriter(tmp_path / "x.zarr", ifos=("H1",), sample_rate=0, t0=0, n_samples=10)
    with pytest.raises(DataError, match="duplicate"):
        StoreWriter(tmp_path / "x.zarr", ifos=("H1", "H1"), sample_rate=1, t0=0, n_samples=10)


def test_info_lists_coverage_gaps_and_flags(tmp_path):
    """``gwbatch info``: per detector the seconds with data (DATA bit, written chunks) and the gaps in
    GPS, then the seconds each other DQ flag is set."""
    from gwbatch.io.store import describe

    path = tmp_path / "s.zarr"
    with make(path, t0="1000000000") as w:  # 16 s at 256 Hz, chunks of 4 s
        w.write_strain("H1", 0, np.ones(4096))
        dq = np.full(16, 127)
        dq[5:7] = 0  # H1 off for 2 s
        dq[10] = 1  # DATA only: the other flags fail there
        w.write_dq("H1", 0, dq)
        w.write_strain("L1", 0, np.ones(2048))  # L1's last two chunks never written
        w.write_dq("L1", 0, np.full(16, 1))
        w.commit()
    text = describe(read_meta(path))
    assert "  H1   data 14 of 16 s (87.5%), 1 gap: [1000000005, 1000000007) 2 s" in text
    assert "CBC_CAT1 13 s" in text
    assert "  L1   data 8 of 16 s (50.0%), 1 gap: [1000000008, 1000000016) 8 s" in text


def test_data_quality_values_are_sealed(tmp_path):
    """DQ values rewritten after the seal (same dtype and shape) are refused, as is a store sealed
    before the DQ array was; gwbatch seal accepts a deliberate edit."""
    import zarr

    from gwbatch.io.store import _attributes_digest, seal

    path = tmp_path / "s.zarr"
    with make(path) as w:
        w.write_strain("H1", 0, np.ones(4096))
        w.write_strain("L1", 0, np.ones(4096))
        w.write_dq("H1", 0, np.full(16, 127))
        w.write_dq("L1", 0, np.full(16, 127))
        w.commit()
    meta = read_meta(path)
    group = zarr.open_group(path, mode="r+", use_consolidated=False)
    group["dq"][0, 3] = 1  # H1 second 3 loses its CAT flags
    with pytest.raises(DataError, match="data-quality values changed after it was sealed"):
        read_meta(path)
    assert (read_dq(seal(path), ["H1"])[0, 3]) == 1  # resealed: the edit is the store's content now
    old = _attributes_digest(meta.ifos, meta.sample_rate, meta.t0, meta.dq_bits, meta.n_samples, meta.chunk_samples, None)
    group = zarr.open_group(path, mode="r+", use_consolidated=False)
    group["checksum"].attrs["attributes_sha256"] = old
    with pytest.raises(DataError, match="sealed by an older gwbatch, which did not seal its data-quality array"):
        read_meta(path)
