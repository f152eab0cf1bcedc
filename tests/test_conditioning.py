"""Conditioning on both backends: Welch-median PSD, whitening to unit variance, gaps, gating, baseline."""

from __future__ import annotations

import numpy as np
import pytest

from gwbatch._xp import to_host
from gwbatch.conditioning import condition
from gwbatch.conditioning.design import design_psd
from gwbatch.conditioning.mask import dilate_invalid, mask_to_segments, merge_segments
from gwbatch.conditioning.psd import median_bias, welch_median
from gwbatch.conditioning.whiten import apply_fir, whiten, whitening_taps
from gwbatch.config import ConditioningConfig, GatingConfig
from gwbatch.simulate.noise import coloured_noise, colouring_filter

FS = 2048


@pytest.fixture(scope="module")
def coloured():
    taps = colouring_filter(lambda f: design_psd("aLIGO", f), FS)
    return coloured_noise(21, 1, 0, 256 * FS, taps)


def test_median_bias_values():
    assert median_bias(1) == 1.0
    assert median_bias(3) == pytest.approx(1 - 1 / 2 + 1 / 3)
    assert median_bias(999) == pytest.approx(np.log(2), abs=1e-3)


def test_welch_median_white_noise(xp):
    x = xp.asarray(np.random.default_rng(0).standard_normal(512 * FS) * 3.0)
    f, psd, n = welch_median(x, xp.ones(x.size, dtype=bool), FS, 4.0)
    assert n == 255
    # One-sided PSD of white noise of variance 9: 2 * 9 / fs, within 2% on average.
    assert float(xp.mean(psd[1:-1])) == pytest.approx(2 * 9.0 / FS, rel=0.02)


def test_welch_uses_only_valid_segments(xp):
    x = np.random.default_rng(1).standard_normal(64 * FS)
    valid = np.ones(x.size, bool)
    x[10 * FS : 12 * FS] = 1e6  # a glitch inside masked time must not reach the PSD
    valid[10 * FS : 12 * FS] = False
    f, psd, n = welch_median(xp.asarray(x), xp.asarray(valid), FS, 4.0)
    assert n == 31 - 2  # the two 4 s segments overlapping the 2 s gap (starting at 8 s and 10 s) are dropped
    assert float(xp.max(psd)) < 10 * 2.0 / FS


def test_whitening_unit_variance_true_psd(xp, coloured):
    f = np.fft.rfftfreq(4 * FS, 1 / FS)
    taps = whitening_taps(xp.asarray(f), xp.asarray(design_psd("aLIGO", f)), FS, 2 * FS, 20.0, None)
    out, valid = whiten(xp.asarray(coloured), xp.ones(coloured.size, dtype=bool), taps)
    d = to_host(out[valid])
    n = d.size
    # With the true PSD: mean 0 and std 1 within 3 sigma of their statistical errors (+0.2% for the
    # truncated filter), and Gaussian (small excess kurtosis).
    assert abs(d.mean()) < 3 / np.sqrt(n)
    assert abs(d.std() - 1) < 3 / np.sqrt(2 * n) + 0.002
    assert abs(((d - d.mean()) ** 4).mean() / d.var() ** 2 - 3) < 0.05


def test_whitening_estimated_psd(xp, coloured):
    cond = condition(xp.asarray(coloured), xp.ones(coloured.size, dtype=bool), ConditioningConfig().settings(), FS)
    d = to_host(cond.data[cond.valid])
    # A PSD estimated from ~127 segments leaves std within 2% of 1 (E[S/S_hat] > 1 by ~1/n_seg).
    assert abs(d.std() - 1) < 0.02 and abs(d.mean()) < 0.01
    assert cond.psd_segments == 127 and cond.snr2_per_energy == pytest.approx(2 * (1024 - 20) / 2048)
    # The filter's half-length is cropped at both ends of the series.
    h = FS  # filter_duration 2 s
    v = to_host(cond.valid)
    assert not v[: h].any() and not v[-h:].any() and v[h:-h].all()


def test_gap_corrupts_exactly_the_filter_half_length(xp, coloured):
    f = np.fft.rfftfreq(4 * FS, 1 / FS)
    taps = whitening_taps(xp.asarray(f), xp.asarray(design_psd("aLIGO", f)), FS, 2 * FS, 20.0, None)
    full = np.ones(coloured.size, bool)
    gap = full.copy()
    gap[100 * FS : 100 * FS + 500] = False
    with_gap = coloured.copy()
    with_gap[100 * FS : 100 * FS + 500] = np.nan  # NaN never reaches the FFT: whiten zero-fills
    a, _ = whiten(xp.asarray(coloured), xp.asarray(full), taps)
    b, vb = whiten(xp.asarray(np.where(gap, with_gap, 0.0)), xp.asarray(gap), taps)
    a, b, vb = to_host(a), to_host(b), to_host(vb)
    assert np.isfinite(b).all()
    bad = np.flatnonzero(~vb[FS:-FS]) + FS
    assert bad[0] == 100 * FS - FS and bad[-1] == 100 * FS + 500 - 1 + FS
    np.testing.assert_allclose(a[vb], b[vb], rtol=0, atol=1e-9)


def test_too_little_data_for_a_psd(xp):
    x = xp.asarray(np.random.default_rng(2).standard_normal(8 * FS))
    cond = condition(x, xp.ones(x.size, dtype=bool), ConditioningConfig().settings(), FS)
    assert not bool(cond.valid.any()) and "need 4" in cond.note


def test_gating_records_and_masks(xp, coloured):
    x = coloured.copy()
    glitch = 130 * FS
    x[glitch - 5 : glitch + 5] += 1e-18 * np.hanning(10)  # far louder than the noise
    cfg = ConditioningConfig(gating=GatingConfig(threshold=20.0, half_width=0.25, taper=0.1)).settings()
    cond = condition(xp.asarray(x), xp.ones(x.size, dtype=bool), cfg, FS)
    assert cond.gate_peaks.size == 1 and abs(int(cond.gate_peaks[0]) - glitch) <= 3
    assert cond.gate_values[0] > 20
    v = to_host(cond.valid)
    d = to_host(cond.data)
    core = slice(glitch - FS // 4, glitch + FS // 4)
    assert not v[core].any() and np.abs(d[core]).max() < 1e-12
    assert v[glitch + FS : glitch + 2 * FS].all()
    # what gating took out is recorded (the manifest's livetime.masked_seconds.gated): the gate, 0.5 s,
    # and its two 0.1 s tapers, within a sample of each edge
    gated = to_host(cond.gated)
    assert not (gated & v).any() and gated[core].all()
    assert abs(int(gated.sum()) - round(0.7 * FS)) <= 4


def test_baseline_removed(xp):
    t = np.arange(60 * FS) / FS
    rng = np.random.default_rng(3)
    x = rng.standard_normal(t.size) + 5.0 * np.sin(2 * np.pi * t / 20.0) + 3.0
    cfg = ConditioningConfig(whiten=False, baseline=0.5).settings()
    cond = condition(xp.asarray(x), xp.ones(x.size, dtype=bool), cfg, FS)
    d = to_host(cond.data)[FS:-FS]
    assert abs(d.mean()) < 0.02 and d.std() == pytest.approx(1.0, abs=0.02)


def test_mask_helpers(xp):
    v = np.ones(20, bool)
    v[10] = False
    np.testing.assert_array_equal(to_host(dilate_invalid(xp.asarray(v), 2)), np.r_[np.ones(8), np.zeros(5), np.ones(7)].astype(bool))
    np.testing.assert_array_equal(mask_to_segments(v, offset=100), [[100, 110], [111, 120]])
    np.testing.assert_array_equal(merge_segments(np.array([[5, 8], [0, 2], [2, 3], [7, 9]])), [[0, 3], [5, 9]])


def test_dilate_invalid_marks_every_sample_within_pad_of_an_invalid_one():
    """Brute force over random masks: lengths 1-60, pads 0-70 (past the mask's length), all valid."""
    rng = np.random.default_rng(7)
    for _ in range(3000):
        n, pad = int(rng.integers(1, 61)), int(rng.integers(0, 71))
        valid = rng.random(n) > rng.random() * 0.3
        bad = np.flatnonzero(~valid)
        expected = np.array([not np.any(np.abs(bad - i) <= pad) for i in range(n)]) if pad > 0 else valid
        got = dilate_invalid(valid, pad)
        assert got.dtype == bool and np.array_equal(got, expected), (n, pad, valid.astype(int))


def test_fir_is_the_linear_convolution_away_from_the_ends():
    """A read span's length is arbitrary (here 19 x 647 x 7 samples): the FFT convolution, done at a
    fast padded length, equals the direct convolution to 1e-12 wherever the taps lie inside the data."""
    rng = np.random.default_rng(3)
    n, h = 19 * 647 * 7, 301
    x, taps = rng.standard_normal(n), np.hanning(2 * h + 3)[1:-1] * rng.standard_normal(2 * h + 1)
    taps = 0.5 * (taps + taps[::-1])  # symmetric, as whitening_taps makes them
    got = apply_fir(x, taps)
    direct = np.convolve(x, taps, mode="same")
    assert got.shape == (n,)
    np.testing.assert_allclose(got[h:n - h], direct[h:n - h], rtol=0, atol=1e-12 * np.abs(direct).max())
