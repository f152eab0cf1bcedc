"""Filterbank stores (issue 28, item 1): ``gwbatch ingest filterbank`` of one or many files and beams
into spectra ``(beam, channel, time)`` at the recorded precision, with gaps masked, overlaps checked
and the store's contract (checksums, seal) as for strain."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from gwbatch.errors import DataError
from gwbatch.io.filterbank import read_filterbank
from gwbatch.io.span import read_spectra_span
from gwbatch.io.spectra import ingest_filterbank
from gwbatch.io.store import FILTERBANK_FORMAT, read_dq, read_meta, read_spectra, read_strain
from gwbatch.io.sigproc import mjd_utc_to_gps
from workflow.cli import main

from .conftest import DATA

TUTORIAL = DATA / "radio" / "tutorial.fil"
INTS = {"nchans", "nbits", "nifs", "telescope_id", "machine_id", "data_type", "nsamples", "ibeam", "nbeams"}
TSAMP, MJD0 = 0.001, 58000.0


def _string(s: str) -> bytes:
    return struct.pack("<i", len(s)) + s.encode()


def write_fil(path, spectra: np.ndarray, start_sample: int = 0, **extra) -> None:
    """An 8-bit, 8-channel SIGPROC filterbank of ``spectra`` (time, channel) starting ``start_sample``
    samples of :data:`TSAMP` after MJD :data:`MJD0`."""
    header = {"telescope_id": 4, "nchans": spectra.shape[1], "nbits": 8, "nifs": 1, "tsamp": TSAMP,
              "fch1": 1500.0, "foff": -2.0, "tstart": MJD0 + start_sample * TSAMP / 86400.0, **extra}
    out = _string("HEADER_START")
    for key, value in header.items():
        out += _string(key) + (struct.pack("<i", value) if key in INTS else struct.pack("<d", value))
    path.write_bytes(out + _string("HEADER_END") + np.ascontiguousarray(spectra, np.uint8).tobytes())


@pytest.fixture
def noise():
    return np.random.default_rng(5).integers(0, 256, size=(6000, 8), dtype=np.uint8)


def test_tutorial_ingests_at_its_recorded_precision(tmp_path):
    assert main(["ingest", "filterbank", str(TUTORIAL), "--out", str(tmp_path / "t.zarr")]) == 0
    meta = read_meta(tmp_path / "t.zarr")
    fb = read_filterbank(TUTORIAL)
    assert meta.layout.format == FILTERBANK_FORMAT and meta.layout.dtype == "uint8"
    assert meta.ifos == ("Fake",) and meta.sample_rate == pytest.approx(1 / 320e-6)
    assert meta.layout.frequencies == pytest.approx(fb.frequencies.tolist())
    assert str(meta.t0) == str(mjd_utc_to_gps(50000.0))
    x = read_spectra(meta, "Fake", 0, meta.n_samples)
    assert np.array_equal(x, fb.data[:, 0, :].T.astype(np.float32))  # 2-bit values 0..3, kept as they are
    assert set(np.unique(x)) <= {0, 1, 2, 3} and read_dq(meta, ["Fake"]).all()


def test_files_in_any_order_with_a_gap_and_an_equal_overlap(tmp_path, noise):
    # file a: samples 0..2000, b: 1500..3500 (500 shared), c: 4700..6000 (a gap 3500..4700)
    write_fil(tmp_path / "c.fil", noise[4700:], 4700)
    write_fil(tmp_path / "a.fil", noise[:2000], 0)
    write_fil(tmp_path / "b.fil", noise[1500:3500], 1500)
    out = ingest_filterbank(sorted(tmp_path.glob("*.fil"))[::-1], tmp_path / "s.zarr")
    meta = read_meta(out)
    assert meta.ifos == ("Parkes",) and meta.n_samples == 6000
    x = read_spectra(meta, "Parkes", 0, 6000)
    assert np.array_equal(x[:, :3500], noise[:3500].T) and np.array_equal(x[:, 4700:], noise[4700:].T)
    # seconds 0-2 are whole; 3 and 4 hold gap samples (3500..4700 at 1 kHz): masked; 5 is whole again
    assert read_dq(meta, ["Parkes"])[0].tolist() == [1, 1, 1, 0, 0, 1]
    span = read_spectra_span(meta, "Parkes", 0, 6000, dq_required=1)
    assert not span.valid[3000:5000].any() and span.valid[:3000].all() and span.valid[5000:].all()


def test_an_overlap_that_disagrees_is_refused(tmp_path, noise):
    other = noise.copy()
    other[1800, 3] ^= 1
    write_fil(tmp_path / "a.fil", noise[:2000], 0)
    write_fil(tmp_path / "b.fil", other[1500:3500], 1500)
    with pytest.raises(DataError, match=r"b.fil overlaps .*a.fil by 500 samples and their spectra differ"):
        ingest_filterbank([tmp_path / "a.fil", tmp_path / "b.fil"], tmp_path / "s.zarr")
    assert not (tmp_path / "s.zarr").exists() and not list(tmp_path.glob(".s.zarr*"))


def test_an_overlap_with_any_earlier_file_is_compared(tmp_path, noise):
    """A file inside a longer earlier one is compared with it even when another file lies between
    them in time (only the file just before was compared: c.fil's different spectra were dropped)."""
    write_fil(tmp_path / "a.fil", noise, 0)
    write_fil(tmp_path / "b.fil", noise[100:200], 100)
    write_fil(tmp_path / "c.fil", np.random.default_rng(9).integers(0, 256, size=(1000, 8), dtype=np.uint8), 3000)
    with pytest.raises(DataError, match=r"c.fil overlaps .*a.fil by 1000 samples and their spectra differ"):
        ingest_filterbank([tmp_path / n for n in ("a.fil", "b.fil", "c.fil")], tmp_path / "s.zarr")
    write_fil(tmp_path / "c.fil", noise[3000:4000], 3000)  # the same data: taken
    meta = read_meta(ingest_filterbank([tmp_path / n for n in ("a.fil", "b.fil", "c.fil")], tmp_path / "s.zarr"))
    assert np.array_equal(read_spectra(meta, "Parkes", 0, 6000), noise.T)


def test_beams_become_rows(tmp_path, noise):
    write_fil(tmp_path / "b0.fil", noise[:3000], 0, ibeam=1, nbeams=2)
    write_fil(tmp_path / "b1.fil", noise[3000:], 0, ibeam=2, nbeams=2)
    meta = read_meta(ingest_filterbank([tmp_path / "b1.fil", tmp_path / "b0.fil"], tmp_path / "s.zarr"))
    assert meta.ifos == ("Parkes-B01", "Parkes-B02") and meta.n_samples == 3000
    assert np.array_equal(read_spectra(meta, "Parkes-B02", 0, 3000), noise[3000:].T)


@pytest.mark.parametrize("change, message", [
    ({"foff": -1.0}, r"do not share one grid \(foff -1.0 vs -2.0\)"),
    ({"nbits": 16}, r"do not share one grid|not a whole number"),
    ({"tstart": MJD0 + 100.4 * TSAMP / 86400.0}, r"starts 100.(39|40)\d* samples after the earliest file, not on its sample grid"),
])
def test_files_off_the_grid_are_refused(tmp_path, noise, change, message):
    write_fil(tmp_path / "a.fil", noise[:2000], 0)
    write_fil(tmp_path / "b.fil", noise[:2000], 100, **change)
    with pytest.raises(DataError, match=message):
        ingest_filterbank([tmp_path / "a.fil", tmp_path / "b.fil"], tmp_path / "s.zarr")


def test_a_filterbank_store_keeps_the_store_contract(tmp_path, noise):
    write_fil(tmp_path / "a.fil", noise, 0)
    meta = read_meta(ingest_filterbank([tmp_path / "a.fil"], tmp_path / "s.zarr"))
    with pytest.raises(DataError, match="holds radio spectra .* search kind 'radio'"):
        read_strain(meta, ["Parkes"], 0, 10)
    chunk = next((tmp_path / "s.zarr" / "spectra" / "c" / "0" / "0").iterdir())
    data = bytearray(chunk.read_bytes())
    data[-5] ^= 0xFF
    chunk.write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"spectra chunk 0 of Parkes .* does not match its checksum"):
        read_spectra(meta, "Parkes", 0, 10)


def test_searches_refuse_the_other_layout(tmp_path, noise):
    from gwbatch.config import load_campaign
    from workflow.plan import make_plan

    write_fil(tmp_path / "a.fil", noise, 0)
    ingest_filterbank([tmp_path / "a.fil"], tmp_path / "s.zarr")
    for kind, message in (("pulse", "reads strain or a dedispersed series, and the store holds radio spectra"),):
        campaign = load_campaign(DATA.parent.parent / "configs" / "pulsar-j1807.yaml",
                                 [f"data.store={tmp_path / 's.zarr'}", "data.zero_gap=null"])
        with pytest.raises(DataError, match=message):
            make_plan(campaign, read_meta(tmp_path / "s.zarr"))
    strain = tmp_path / "strain.zarr"
    assert main(["ingest", "sigproc", str(DATA / "pulsar-j1807" / "GBT_J1807-0847.tim"), "--out", str(strain)]) == 0
    campaign = load_campaign(DATA.parent.parent / "configs" / "radio-tutorial.yaml", [f"data.store={strain}"])
    with pytest.raises(DataError, match="search kind 'radio' reads filterbank spectra"):
        make_plan(campaign, read_meta(strain))


def test_psrfits_ingests_like_a_filterbank(tmp_path):
    """The PSRFITS search-mode file (416 channels x AABBCRCI, 4-bit, per-row scales) becomes a store of its
    total intensity, scaled to float32 because its scales change between rows, beside its reader's array."""
    from gwbatch.io.psrfits import read_psrfits

    sf = DATA / "radio" / "parkes_4bit.sf"
    assert main(["ingest", "filterbank", str(sf), "--out", str(tmp_path / "sf.zarr")]) == 0
    meta = read_meta(tmp_path / "sf.zarr")
    fb = read_psrfits(sf)
    assert meta.ifos == ("Parkes",) and meta.layout.dtype == "float32" and meta.layout.n_channels == 416
    assert meta.layout.frequencies[0] == 4028.0 and meta.layout.frequencies[-1] == 708.0
    assert meta.sample_rate == pytest.approx(1 / 512e-6) and meta.n_samples == 4096
    assert np.array_equal(read_spectra(meta, "Parkes", 0, 4096), fb.data[:, 0, :].T)
