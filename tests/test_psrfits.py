"""PSRFITS search-mode reading and channel masks (issue 28): the Parkes UWL PSRFITS file against the
SIGPROC files of the same observation, known answers on synthetic PSRFITS files, and refusals.

What the Parkes files are (measured here): ``parkes_4bit.sf`` is 416 channels of 8 MHz (centres
4028 ... 708 MHz) x 4 products (AABBCRCI) x 4096 samples of 512 µs from MJD 58543.330362969, 4-bit,
with per-row DAT_SCL/DAT_OFFS (each row rescaled to mean 7.5).  ``parkes_4bit.fil`` and
``parkes_8bit_1.fil`` are 832 channels of 4 MHz (4030 ... 706 MHz) of total intensity over the
*next* 4096 samples: their tstart is the .sf's start plus 4096 x 512 µs (to 0.17 µs).  Same
telescope, source, band and sampling, but neither the same samples nor the same channels (8 MHz
channels cannot give 4 MHz ones), so the arrays cannot be equal; sigpyproc itself reads the .sf as
416 channels.  The tests check what does relate them: the channel grid (each .sf channel is a pair
of .fil channels), the timing, and the channel order through per-channel statistics.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from astropy.io import fits
from scipy import stats

from gwbatch.errors import DataError
from gwbatch.io.channel_mask import read_channel_mask
from gwbatch.io.filterbank import read_filterbank
from gwbatch.io.psrfits import read_psrfits, unpack_msb_first

from .conftest import DATA

RADIO = DATA / "radio"
SF = RADIO / "parkes_4bit.sf"
MASK = RADIO / "parkes_8bit_1_mask.h5"


@pytest.fixture(scope="module")
def parkes():
    return read_psrfits(SF), read_filterbank(RADIO / "parkes_4bit.fil"), read_filterbank(RADIO / "parkes_8bit_1.fil")


def test_unpack_puts_the_first_sample_in_the_high_bits():
    assert unpack_msb_first(np.array([0b00_01_10_11], np.uint8), 2).tolist() == [0, 1, 2, 3]
    assert unpack_msb_first(np.array([0xA5], np.uint8), 4).tolist() == [10, 5]
    assert unpack_msb_first(np.array([0b1010_0000], np.uint8), 1).tolist() == [1, 0, 1, 0, 0, 0, 0, 0]


def test_parkes_psrfits_reads_as_total_intensity(parkes):
    sf, fil, _ = parkes
    assert sf.data.shape == (4096, 1, 416) and sf.data.dtype == np.float32
    h = sf.header
    assert (h["nchans"], h["nbits"], h["nifs"], h["fch1"], h["foff"]) == (416, 32, 1, 4028.0, -8.0)
    extras = ("psrfits_pol_type", "psrfits_npol", "psrfits_nbits", "psrfits_scaled")
    assert [h[key] for key in extras] == ["AABBCRCI", 4, 4, True]
    for key in ("source_name", "telescope_id", "tsamp"):
        assert h[key] == fil.header[key]
    assert h["src_raj"] == pytest.approx(fil.header["src_raj"]) and h["src_dej"] == pytest.approx(fil.header["src_dej"])
    # STT_IMJD 58543, STT_SMJD 28543, STT_OFFS 0.3605, first row centred half a row in.
    assert (h["tstart"] - 58543) * 86400 == pytest.approx(28543.3605, abs=1e-6)


def test_the_fil_files_follow_the_psrfits_span_on_its_channel_grid(parkes):
    sf, fil4, fil8 = parkes
    for fil in (fil4, fil8):
        np.testing.assert_array_equal(sf.frequencies, fil.frequencies.reshape(-1, 2).mean(1))
        assert sf.tsamp == fil.tsamp
        after = (fil.header["tstart"] - sf.header["tstart"]) * 86400 - sf.data.shape[0] * sf.tsamp
        assert abs(after) < 1e-6  # measured 0.17 µs: the .fil starts where the .sf ends
    # No shared samples: per channel (8 MHz vs a summed pair of 4 MHz) correlation at lag 0 averages
    # -0.002 with either .fil.
    x = sf.data[:, 0].astype(float)
    y = fil8.data[:, 0].astype(float).reshape(-1, 416, 2).sum(2)
    x, y = x - x.mean(0), y - y.mean(0)
    assert abs(np.mean((x * y).sum(0) / np.sqrt((x * x).sum(0) * (y * y).sum(0)))) < 0.01


def _lag1_autocorrelation(x):
    x = x - x.mean(0)
    return (x[1:] * x[:-1]).sum(0) / (x * x).sum(0)


def test_channel_order_agrees_with_the_8bit_file_and_its_mask(parkes):
    """Channel fingerprints that outlast the 2 s between the spans: each channel's lag-1
    autocorrelation (RFI) ranks alike in the .sf and the 8-bit .fil (pairs summed): Spearman 0.40,
    0.016 with the .sf's band reversed; and the 58 of 416 .sf channels that hold a channel of the
    8-bit file's sigpyproc mask have median |excess kurtosis| 2.1 (0.06 the others), ranking above
    the others with probability 0.91 (0.44 with the mask reversed)."""
    sf, _, fil8 = parkes
    a = _lag1_autocorrelation(sf.data[:, 0].astype(float))
    b = _lag1_autocorrelation(fil8.data[:, 0].astype(float).reshape(-1, 416, 2).sum(2))
    assert stats.spearmanr(a, b)[0] > 0.3 and abs(stats.spearmanr(a[::-1], b)[0]) < 0.15
    flagged = read_channel_mask(MASK, 832).reshape(416, 2).any(1)
    kurtosis = np.abs(stats.kurtosis(sf.data[:, 0].astype(float), axis=0))

    def above(mask):
        return stats.mannwhitneyu(kurtosis[mask], kurtosis[~mask])[0] / (mask.sum() * (~mask).sum())

    assert flagged.sum() == 58 and above(flagged) > 0.85 and above(flagged[::-1]) < 0.6


def test_scales_and_offsets_join_the_rows(parkes):
    """The two rows carry different DAT_SCL/DAT_OFFS.  Channel means over 256 samples either side
    of the row boundary differ by a median 0.079 % (0.106 % between neighbouring blocks within a
    row); without ZERO_OFF 0.16 %, with the rows' scales swapped 0.41 %."""
    x = parkes[0].data[:, 0].astype(float)
    before, after = x[1792:2048].mean(0), x[2048:2304].mean(0)
    assert np.median(np.abs(after / before - 1)) < 0.0012


# Synthetic PSRFITS files ---------------------------------------------------------------------------

def pack_msb_first(values: np.ndarray, nbits: int) -> np.ndarray:
    per_byte = 8 // nbits
    v = values.reshape(-1, per_byte).astype(np.uint8)
    return np.bitwise_or.reduce([v[:, k] << (8 - nbits * (k + 1)) for k in range(per_byte)]).astype(np.uint8)


def _data_column(values: np.ndarray, nbits: int) -> fits.Column:
    rows = values.shape[0]
    if nbits == 32:
        return fits.Column(name="DATA", format=f"{values[0].size}E", array=values.reshape(rows, -1).astype(np.float32))
    if nbits == 16:
        raw = values.astype(">u2").view(np.uint8)
    elif nbits == 8:
        raw = values.astype(np.uint8)
    else:
        raw = np.stack([pack_msb_first(row, nbits) for row in values])
    raw = raw.reshape(rows, -1)
    return fits.Column(name="DATA", format=f"{raw.shape[1]}B", array=raw)


PRIMARY = {"OBS_MODE": "SEARCH", "TELESCOP": "Parkes", "SRC_NAME": "J0000+0000", "RA": "12:00:00.5",
           "DEC": "-30:15:07.25", "STT_IMJD": 58000, "STT_SMJD": 3600, "STT_OFFS": 0.25}


def write_psrfits(path, values, *, nbits=8, pol_type="AA+BB", tbin=1e-3, chan_bw=-1.0, freqs=None, scl=None,
                  offs=None, wts=None, offs_sub=None, primary=None, subint=None, drop=()):
    """A search-mode PSRFITS file of ``values`` ``(rows, NSBLK, NPOL, NCHAN)``; header keys set to None
    in ``primary``/``subint`` are left out, as are the columns in ``drop``."""
    rows, nsblk, npol, nchan = values.shape
    freqs = 1500.0 + chan_bw * np.arange(nchan) if freqs is None else np.asarray(freqs, float)
    per_row = {"DAT_FREQ": np.broadcast_to(freqs, (rows, freqs.size)),
               "DAT_WTS": np.ones((rows, nchan)) if wts is None else wts,
               "DAT_OFFS": np.zeros((rows, npol * nchan)) if offs is None else offs,
               "DAT_SCL": np.ones((rows, npol * nchan)) if scl is None else scl}
    offs_sub = (np.arange(rows) + 0.5) * nsblk * tbin if offs_sub is None else offs_sub
    columns = [fits.Column(name="OFFS_SUB", format="D", array=offs_sub)]
    columns += [fits.Column(name=name, format=f"{array.shape[1]}{'D' if name == 'DAT_FREQ' else 'E'}",
                            array=np.asarray(array)) for name, array in per_row.items()]
    columns = [c for c in columns + [_data_column(values, nbits)] if c.name not in drop]
    sub = {"NBITS": nbits, "NPOL": npol, "NCHAN": nchan, "NSBLK": nsblk, "TBIN": tbin, "CHAN_BW": chan_bw,
           "POL_TYPE": pol_type, "ZERO_OFF": 0.0, "NSTOT": rows * nsblk, "NSUBOFFS": 0, "SIGNINT": 0,
           **(subint or {})}
    head = {**PRIMARY, **(primary or {})}
    table = fits.BinTableHDU.from_columns(columns, name="SUBINT")
    table.header.update({k: v for k, v in sub.items() if v is not None})
    fits.HDUList([fits.PrimaryHDU(header=fits.Header({k: v for k, v in head.items() if v is not None})),
                  table]).writeto(path)
    return path


@pytest.mark.parametrize("nbits", [1, 2, 4, 8, 16, 32])
def test_single_product_keeps_the_recorded_samples(tmp_path, nbits):
    rng = np.random.default_rng(nbits)
    values = rng.integers(0, 2 ** min(nbits, 16), size=(3, 16, 1, 8))
    fb = read_psrfits(write_psrfits(tmp_path / "x.sf", values, nbits=nbits, scl=np.full((3, 8), 2.0),
                                    offs=np.full((3, 8), -1.0)))
    expected = {32: np.float32, 16: np.uint16}.get(nbits, np.uint8)
    assert fb.data.dtype == expected and fb.header["nbits"] == nbits and fb.header["psrfits_scaled"] is False
    np.testing.assert_array_equal(fb.data[:, 0], values.reshape(48, 8))
    np.testing.assert_allclose(fb.frequencies, 1500.0 - np.arange(8))
    assert fb.header["telescope_id"] == 4 and fb.header["tsamp"] == 1e-3
    assert fb.header["src_raj"] == pytest.approx(120000.5) and fb.header["src_dej"] == pytest.approx(-301507.25)
    assert (fb.header["tstart"] - 58000) * 86400 == pytest.approx(3600.25, abs=1e-6)


@pytest.mark.parametrize(("pol_type", "npol", "nbits", "dtype"), [
    ("AABB", 2, 4, np.uint8), ("AABBCRCI", 4, 4, np.uint8), ("AABBCRCI", 4, 8, np.uint16), ("AABB", 2, 16, np.float32),
    ("IQUV", 4, 8, np.uint8)])
def test_polarisations_become_total_intensity(tmp_path, pol_type, npol, nbits, dtype):
    values = np.random.default_rng(npol).integers(0, 2 ** nbits, size=(2, 8, npol, 4))
    fb = read_psrfits(write_psrfits(tmp_path / "x.sf", values, nbits=nbits, pol_type=pol_type))
    expected = values[:, :, 0] if pol_type == "IQUV" else values[:, :, 0] + values[:, :, 1]
    assert fb.data.dtype == dtype
    assert fb.header["nbits"] == (nbits if pol_type == "IQUV" else 8 * np.dtype(dtype).itemsize)
    np.testing.assert_array_equal(fb.data[:, 0], expected.reshape(16, 4))


def test_varying_scales_give_calibrated_float32(tmp_path):
    rng = np.random.default_rng(5)
    values = rng.integers(0, 16, size=(2, 8, 4, 3))
    scl, offs = (rng.uniform(lo, hi, size=(2, 12)).astype(np.float32) for lo, hi in ((1, 3), (-5, 5)))
    wts = np.array([[1.0, 0.0, 0.5], [1.0, 1.0, 0.5]])
    fb = read_psrfits(write_psrfits(tmp_path / "x.sf", values, nbits=4, pol_type="AABBCRCI", scl=scl, offs=offs,
                                    wts=wts, subint={"ZERO_OFF": 7.5}))
    real = ((values - 7.5) * scl.reshape(2, 1, 4, 3) + offs.reshape(2, 1, 4, 3)) * wts.reshape(2, 1, 1, 3)
    assert fb.data.dtype == np.float32 and fb.header["nbits"] == 32 and fb.header["psrfits_scaled"] is True
    np.testing.assert_allclose(fb.data[:, 0], (real[:, :, 0] + real[:, :, 1]).reshape(16, 3), atol=1e-5)


def test_start_offset_and_padding(tmp_path):
    values = np.arange(3 * 4 * 2, dtype=np.uint8).reshape(3, 4, 1, 2)
    row = 4 * 1e-3
    centres = (np.arange(3) + 5.5) * row  # the first row starts 5 rows after STT_OFFS
    fb = read_psrfits(write_psrfits(tmp_path / "a.sf", values, offs_sub=centres, subint={"NSTOT": 10}))
    assert (fb.header["tstart"] - 58000) * 86400 == pytest.approx(3600.25 + 5 * row, abs=1e-6)
    np.testing.assert_array_equal(fb.data[:, 0], values.reshape(12, 2)[:10])
    fb = read_psrfits(write_psrfits(tmp_path / "b.sf", values, drop=("OFFS_SUB",), subint={"NSUBOFFS": 2}))
    assert (fb.header["tstart"] - 58000) * 86400 == pytest.approx(3600.25 + 2 * row, abs=1e-6)


def test_refusals(tmp_path):
    values = np.zeros((2, 4, 1, 3), dtype=np.uint8)
    cases = [
        ({"primary": {"OBS_MODE": "PSR"}}, "OBS_MODE='PSR'"),
        ({"subint": {"NBITS": None}}, "'NBITS' is None"),
        ({"subint": {"NBITS": 3}}, "NBITS=3 is not supported"),
        ({"subint": {"NCHAN": 4}}, "DATA column holds 12 bytes a row, but NSBLK"),
        ({"subint": {"NSBLK": 5}}, "DATA column holds 12 bytes"),
        ({"subint": {"TBIN": 0.0}}, "TBIN=0.0"),
        ({"subint": {"TBIN": -1e-3}}, "TBIN=-0.001"),
        ({"subint": {"TBIN": "*"}}, "'TBIN' is '\\*'; expected a number"),  # FITS cards cannot hold NaN
        ({"subint": {"TBIN": 1e4}}, "TBIN=10000.0"),
        ({"subint": {"POL_TYPE": "AA+BB", "NPOL": 2}}, r"POL_TYPE='AA\+BB' with NPOL=2"),
        ({"freqs": [1500.0, 1499.0, 1498.0, 1497.0]}, "column DAT_FREQ holds 4 values a row; expected 3"),
        ({"subint": {"NSTOT": 9}}, "NSTOT=9"),
        ({"subint": {"SIGNINT": 1, "NBITS": 4}}, "SIGNINT=1"),
        ({"freqs": [2.0, 1.0, 0.0]}, "above 0 MHz"),
        ({"freqs": [1500.0, 1499.0, 1497.0]}, "steps by -2 MHz where CHAN_BW is -1"),
        ({"chan_bw": 0.0}, "CHAN_BW=0.0"),
        ({"offs_sub": [0.002, 0.010]}, "OFFS_SUB of row 1"),
        ({"wts": np.zeros((2, 3))}, "DAT_WTS 0"),
        ({"drop": ("DAT_SCL",)}, "no column DAT_SCL"),
        ({"primary": {"STT_SMJD": None}}, "'STT_SMJD' is None"),
        ({"primary": {"RA": "12h00m"}}, "'RA' is '12h00m'"),
    ]
    for k, (change, message) in enumerate(cases):
        path = write_psrfits(tmp_path / f"bad{k}.sf", values, **change)
        with pytest.raises(DataError, match=message) as caught:
            read_psrfits(path)
        assert str(path) in str(caught.value) and "\n" not in str(caught.value)
    freqs = fits.open(write_psrfits(tmp_path / "rows.sf", values))
    freqs["SUBINT"].data["DAT_FREQ"][1] += 1.0
    freqs.writeto(tmp_path / "rows2.sf")
    with pytest.raises(DataError, match="DAT_FREQ of row 1 differs"):
        read_psrfits(tmp_path / "rows2.sf")
    fits.HDUList([fits.PrimaryHDU(header=fits.Header(PRIMARY))]).writeto(tmp_path / "nosub.sf")
    with pytest.raises(DataError, match="no SUBINT table"):
        read_psrfits(tmp_path / "nosub.sf")
    (tmp_path / "text.sf").write_text("not fits")
    with pytest.raises(DataError, match="not a FITS file"):
        read_psrfits(tmp_path / "text.sf")
    with pytest.raises(DataError, match="does not exist"):
        read_psrfits(tmp_path / "missing.sf")


# Channel masks -----------------------------------------------------------------------------------

def test_sigpyproc_mask_of_the_8bit_file():
    mask = read_channel_mask(MASK, 832)
    assert mask.dtype == bool and mask.shape == (832,)
    assert mask.sum() == 83  # measured; 195, 239 and 388-398 first
    assert np.flatnonzero(mask)[:4].tolist() == [195, 239, 388, 389] and mask[829] and not mask[831]


def test_text_masks(tmp_path):
    path = tmp_path / "zap.txt"
    path.write_text("# zap list\n3\n\n 10:12 \n# 20\n0:0\n")
    assert np.flatnonzero(read_channel_mask(path, 16)).tolist() == [0, 3, 10, 11, 12]
    for k, (text, message) in enumerate([("16\n", "outside 0..15"), ("-1\n", "outside 0..15"),
                                         ("5:3\n", "not in increasing order"), ("2:20\n", "outside"),
                                         ("4\nfive\n", "line 2: 'five'"), ("1:2:3\n", "'1:2:3'")]):
        (tmp_path / f"bad{k}.txt").write_text(text)
        with pytest.raises(DataError, match=message):
            read_channel_mask(tmp_path / f"bad{k}.txt", 16)


def test_mask_refusals(tmp_path):
    with pytest.raises(DataError, match=r"shape \(832,\); expected one boolean per channel, \(416,\)"):
        read_channel_mask(MASK, 416)
    for name, dataset, data, message in [("ints.h5", "chan_mask", np.ones(4, np.uint8), "uint8; expected booleans"),
                                         ("other.h5", "user_mask", np.ones(4, bool), "no 'chan_mask' dataset")]:
        with h5py.File(tmp_path / name, "w") as fh:
            fh.create_dataset(dataset, data=data)
        with pytest.raises(DataError, match=message):
            read_channel_mask(tmp_path / name, 4)
    with pytest.raises(DataError, match="does not exist"):
        read_channel_mask(tmp_path / "missing.h5", 4)
