"""Conditioning of filterbank spectra (gwbatch.radio.condition): normalisation, channel flags,
zero-DM filter and clip, on simulated spectra and on the shared Parkes and tutorial files.

Tolerances come from sample counts: over n Gaussian samples a mean is known to 1/√n and a variance
to √(2/n); assertions allow 5 of those.  Figures measured on the shared files are asserted with the
margins stated at each test.
"""

from __future__ import annotations

import numpy as np
import pytest

from gwbatch.errors import ConfigError, DataError
from gwbatch.io.filterbank import read_filterbank
from gwbatch.radio.condition import (
    RadioConditioning,
    clip_samples,
    condition_spectra,
    spectral_kurtosis,
    spectral_kurtosis_variance,
)

from .conftest import DATA

RADIO = DATA / "radio"
KDM = 4.148808e3  # dispersion constant, s MHz² / (pc cm⁻³)


def spectra_of(name: str):
    """(channel, time) float32 spectra of a shared filterbank file, its tsamp and frequencies."""
    fb = read_filterbank(RADIO / name)
    return np.ascontiguousarray(fb.data[:, 0, :].T, dtype=np.float32), fb.tsamp, fb.frequencies


def dedispersed(z, freqs, dm: float, tsamp: float) -> np.ndarray:
    """Sum over channels of ``z`` shifted by the whole-sample delays of ``dm``."""
    shifts = np.round(KDM * dm * (freqs ** -2.0 - freqs.max() ** -2.0) / tsamp).astype(int)
    n = z.shape[1] - shifts.max()
    return sum(z[c, s:s + n] for c, s in enumerate(shifts))


def requantised_noise(rng, nchan: int, ntime: int) -> np.ndarray:
    """Gaussian spectra like a recorder's flattened 8-bit ones: mean 128, σ 21.5 with a 4 % spread
    over channels (parkes_8bit_1.fil's)."""
    sigma = 21.5 * np.exp(0.04 * rng.standard_normal(nchan))
    return (128 + sigma[:, None] * rng.standard_normal((nchan, ntime))).astype(np.float32)


@pytest.mark.parametrize("field, value", [
    ("baseline_window", 0.0), ("baseline_window", float("nan")), ("sk_sigma", 1.0), ("sk_block", 8),
    ("sk_block", 256.0), ("sk_fraction", 1.0), ("sk_chunk_sigma", 100.0), ("variance_sigma", -1.0),
    ("zero_dm", 1), ("clip_sigma", 2.0), ("clip_sigma", True),
])
def test_settings_out_of_range_name_field_value_and_range(field, value):
    with pytest.raises(ConfigError, match=rf"{field}={value!r}.*allowed"):
        RadioConditioning(**{field: value})


def test_inputs_are_checked():
    x = np.ones((4, 1000), np.float32)
    with pytest.raises(DataError, match="user mask"):
        condition_spectra(x, RadioConditioning(), 1e-3, user_mask=np.zeros(5, bool))
    with pytest.raises(ConfigError, match="baseline_window=0.01 s is 10 samples"):
        condition_spectra(x, RadioConditioning(baseline_window=0.01), 1e-3)
    with pytest.raises(DataError, match="shape"):
        condition_spectra(x[0], RadioConditioning(), 1e-3)


def test_bandpass_and_slow_drift_come_out_zero_mean_unit_variance():
    """64 channels with gains over a factor 3.6 and a drift of 2σ (linear) plus 1σ (20 s sinusoid)
    over 32.8 s.  The 1 s running baseline leaves every channel's mean within 5/√n and variance
    within 5√(2/n) + 2/W of 0 and 1 (n = 32768 samples, W = 1000 per block); the chunk-wide baseline
    leaves the drift in (σ 1.35 times the noise's)."""
    rng = np.random.default_rng(11)
    nchan, n, tsamp = 64, 1 << 15, 1e-3
    gain = 0.5 + 1.5 * np.sin(np.linspace(0.2, 3.0, nchan)) ** 2
    t = np.arange(n) * tsamp
    drift = 2.0 * t / t[-1] + np.sin(2 * np.pi * t / 20.0)
    x = (gain[:, None] * (100.0 + 10.0 * (drift + rng.standard_normal((nchan, n))))).astype(np.float32)
    out = condition_spectra(x, RadioConditioning(), tsamp)
    z = out.spectra
    assert out.n_good == nchan and not out.mask.any() and z.dtype == np.float32
    assert np.abs(z.mean(axis=1)).max() < 5 / np.sqrt(n)
    assert np.abs(z.var(axis=1) - 1).max() < 5 * np.sqrt(2 / n) + 2 / 1000
    np.testing.assert_allclose(out.sigma, 10 * gain, rtol=5 * np.sqrt(1 / (2 * n)) + 1e-3)
    np.testing.assert_allclose(out.mean, gain * (100 + 10 * drift.mean()), rtol=1e-3)
    flat = condition_spectra(x, RadioConditioning(baseline_window=None, sk_sigma=None, variance_sigma=None), tsamp)
    assert (flat.sigma / (10 * gain)).min() > 1.25


def test_rfi_and_dead_channels_are_flagged_and_clean_ones_not():
    """256 channels of 8 s at 1 ms; the injected channels are flagged, by the test stated for each,
    and no clean one (the false-flag rate is tested below)."""
    rng = np.random.default_rng(5)
    nchan, n, tsamp = 256, 8192, 1e-3
    x = requantised_noise(rng, nchan, n)
    t = np.arange(n) * tsamp
    noise = rng.standard_normal(n).astype(np.float32)
    x[17] += 21.5 * 1.1 * noise  # steady excess noise, σ x 1.5: variance
    x[211] = 128 + 21.5 * 2.0 * noise  # steady excess noise, σ x 2: variance
    x[89] += 21.5 * 2.0 * np.sin(2 * np.pi * 50.0 * t)  # mains hum: SK < 1 and variance
    spikes = rng.random(n) < 0.01
    x[53] += np.where(spikes, 8 * 21.5, 0)  # impulses, 1 % of samples at 8σ: SK
    x[240] += np.where(rng.random(n) < 0.003, 6 * 21.5, 0)  # sparse weak impulses: SK (block mean)
    bursts = (t % 0.5) < 0.02  # a 20 ms burst at 3σ every 0.5 s: SK
    x[131] += np.where(bursts, 3 * 21.5 * rng.standard_normal(n), 0)
    x[173] = 128.0  # dead
    x[7, 100:110] = np.nan  # dropped samples: dead
    bad = [7, 17, 53, 89, 131, 173, 211, 240]
    out = condition_spectra(x, RadioConditioning(), tsamp)
    assert np.flatnonzero(out.mask).tolist() == bad and out.n_good == nchan - len(bad)
    assert np.isfinite(out.spectra).all() and not out.spectra[bad].any()
    assert out.sigma[173] == 0 and out.sigma[7] == 0
    sk_only = condition_spectra(x, RadioConditioning(variance_sigma=None), tsamp)
    assert {53, 89, 131, 240} <= set(np.flatnonzero(sk_only.mask))
    variance_only = condition_spectra(x, RadioConditioning(sk_sigma=None), tsamp)
    assert {17, 89, 211} <= set(np.flatnonzero(variance_only.mask))
    user = np.zeros(nchan, bool)
    user[[0, 53]] = True
    masked = condition_spectra(x, RadioConditioning(), tsamp, user_mask=user)
    assert np.flatnonzero(masked.mask).tolist() == sorted([0, *bad]) and not masked.spectra[0].any()
    assert "flagged: user 2, dead 2, SK 3," in masked.note


def test_false_flag_rate_in_clean_noise():
    """1024 clean channels of 32 blocks: the defaults' rules expect 0.02 false flags (block rule,
    5 of 32 beyond 3σ: 1.4e-5 per channel; 5σ rules: ~1e-6); at most 1 is allowed (0.1 %),
    measured 0."""
    rng = np.random.default_rng(8)
    out = condition_spectra(requantised_noise(rng, 1024, 8192), RadioConditioning(), 1e-3)
    assert out.mask.sum() <= 1


@pytest.mark.parametrize("d, m", [(0.5, 64), (1, 128), (4, 32)])
def test_spectral_kurtosis_matches_nita_and_gary_on_gaussian_noise(d, m):
    """Blocks of m samples that are each the sum of d detected powers of Gaussian noise: d = 1/2 is
    the square of a real Gaussian (the detected-sample SK condition_spectra uses), d = 1 and 4
    sums of |v|² of complex Gaussian voltages.  Over 40000 blocks the SK mean is 1 within
    5 √(Var / blocks) and its variance the Nita & Gary formula within 6 % (the variance of a
    variance estimate over B samples of kurtosis ≤ 6 is ≤ 5 Var² / B: 5 of those is 5.6 %)."""
    rng = np.random.default_rng(3)
    blocks = 40000
    if d == 0.5:
        power = rng.standard_normal((blocks, m)) ** 2
    else:
        v = rng.standard_normal((blocks, m, d, 2))
        power = (v ** 2).sum(axis=(2, 3)) / 2
    sk = spectral_kurtosis(power.sum(axis=1), (power ** 2).sum(axis=1), m, d)
    var = spectral_kurtosis_variance(m, d)
    assert abs(sk.mean() - 1) < 5 * np.sqrt(var / blocks)
    assert sk.var() == pytest.approx(var, rel=0.06)


def test_zero_dm_removes_a_dm0_pulse_and_keeps_a_dispersed_one():
    """256 channels of 1 MHz from 1500 MHz, 0.5 ms samples.  A broadband DM 0 pulse (4 samples,
    1σ in every channel, S/N 32) is gone after the zero-DM filter; a DM 300 pulse (same energy,
    swept over 500 samples) keeps 0.98 of its dedispersed S/N (measured 0.997: it lights ~2
    of the 256 channels at a time, and the filter takes that fraction, 0.9 %, of its amplitude, and
    0.3 % of the noise)."""
    rng = np.random.default_rng(2)
    nchan, n, tsamp, dm = 256, 8192, 5e-4, 300.0
    freqs = 1500.0 - np.arange(nchan, dtype=np.float64)
    x = requantised_noise(rng, nchan, n)
    x[:, 1000:1004] += 21.5
    delays = np.round(KDM * dm * (freqs ** -2.0 - freqs.max() ** -2.0) / tsamp).astype(int)
    for c, s in enumerate(delays):
        x[c, 4000 + s:4004 + s] += 21.5
    assert delays.max() == pytest.approx(500, abs=2)

    def snr(series, at):
        boxcar = np.convolve(series, np.ones(4), "valid")
        off = np.r_[boxcar[: at - 50], boxcar[at + 50:]]
        return (boxcar[at] - off.mean()) / off.std()

    plain = condition_spectra(x, RadioConditioning(), tsamp)
    filtered = condition_spectra(x, RadioConditioning(zero_dm=True), tsamp)
    assert plain.n_good == filtered.n_good == nchan and "zero-DM" in filtered.note
    assert snr(dedispersed(plain.spectra, freqs, 0.0, tsamp), 1000) > 25
    assert np.abs(dedispersed(filtered.spectra, freqs, 0.0, tsamp)).max() < 1e-3
    assert np.abs(filtered.spectra[:, 1000:1004].mean()) < 5 / np.sqrt(4 * nchan)
    before = snr(dedispersed(plain.spectra, freqs, dm, tsamp), 4000)
    after = snr(dedispersed(filtered.spectra, freqs, dm, tsamp), 4000)
    assert before > 25 and after / before > 0.98


def test_clip_zeroes_only_samples_beyond_the_threshold():
    z = np.array([[0.5, -7.0, 6.5], [5.5, 0.0, -6.0]], np.float32)
    clipped, count = clip_samples(z, 6.0)
    assert count == 2 and clipped.tolist() == [[0.5, 0.0, 0.0], [5.5, 0.0, -6.0]]
    x = requantised_noise(np.random.default_rng(4), 32, 4096)
    x[3, 2000] += 30 * 21.5
    out = condition_spectra(x, RadioConditioning(clip_sigma=6.0), 1e-3)
    assert out.spectra[3, 2000] == 0 and "samples beyond 6 sigma set to 0" in out.note


def test_parkes_flags_against_the_sigpyproc_mask():
    """parkes_8bit_1.fil (Parkes UWL, 832 x 4 MHz from 4030 MHz): the defaults flag 78 channels
    (SK 77, variance 42, overlapping) in the 2.34-2.48 GHz ISM and satellite-radio bands, mobile
    bands at 1.73-1.98 GHz and 714-962 MHz, GNSS at 1214 MHz, Iridium at 1622 MHz and aircraft
    DME/ADS-B at 1018-1134 MHz.  sigpyproc's mask (double-MAD z-scores of channel variance,
    skewness and kurtosis, threshold 3) flags 83: all 78 of ours are among them (94 % of theirs);
    its other 5 are channels of excess kurtosis 0.2-0.35 over the chunk (90 % of good channels lie
    within ±0.13; the chunk SK test flags at ±0.38), a variance outlier at 3.7 robust σ and a
    skewness outlier.  Asserted: 74 to 82 flagged, at least 95 % of them in sigpyproc's mask, at
    least 88 % of its channels found."""
    from gwbatch.io.channel_mask import read_channel_mask

    x, tsamp, _ = spectra_of("parkes_8bit_1.fil")
    out = condition_spectra(x, RadioConditioning(), tsamp)
    theirs = read_channel_mask(RADIO / "parkes_8bit_1_mask.h5", x.shape[0])
    both = (out.mask & theirs).sum()
    assert theirs.sum() == 83 and 74 <= out.mask.sum() <= 82
    assert both >= 0.95 * out.mask.sum() and both >= 0.88 * theirs.sum()


def test_parkes_zero_dm_removes_the_150_hz_broadband_interference():
    """The DM 0 sum of parkes_8bit_1.fil's good channels has a 150 Hz line 123 times the median
    power (asserted > 50) and noise 1.34 √n_good; after the zero-DM filter the DM 0 sum is 0 and
    the series dedispersed at the Crab's DM 56.77 has noise 1.07 √n_good rather than 1.17 (asserted
    below 1.10 and above 1.12)."""
    x, tsamp, freqs = spectra_of("parkes_8bit_1.fil")
    plain = condition_spectra(x, RadioConditioning(), tsamp)
    filtered = condition_spectra(x, RadioConditioning(zero_dm=True), tsamp)
    dm0 = dedispersed(plain.spectra, freqs, 0.0, tsamp)
    power = np.abs(np.fft.rfft(dm0 - dm0.mean())) ** 2
    line = np.argmin(np.abs(np.fft.rfftfreq(dm0.size, tsamp) - 150.2))
    assert power[line - 2:line + 3].max() > 50 * np.median(power)
    assert np.abs(dedispersed(filtered.spectra, freqs, 0.0, tsamp)).max() < 1e-2
    crab = [dedispersed(c.spectra, freqs, 56.77, tsamp).std() / np.sqrt(c.n_good) for c in (plain, filtered)]
    assert crab[0] > 1.12 and crab[1] < 1.10


def test_tutorial_flags_nothing():
    """tutorial.fil (2-bit, 64 clean channels, 60 s): nothing flagged; its coarse quantisation puts
    the SK centre at 0.16 for every channel (Gaussian: 1)."""
    x, tsamp, _ = spectra_of("tutorial.fil")
    out = condition_spectra(x, RadioConditioning(), tsamp)
    assert out.n_good == 64 and "SK centres 0.16" in out.note
    # the baseline and σ are measured on every other sample (STATS_SAMPLES): a channel's mean is then off by
    # about 1/sqrt(93760) = 0.0033 (0.008 at most of 64 measured), its variance by about 0.005
    from gwbatch.radio.condition import STATS_SAMPLES

    measured = x.shape[1] // max(1, x.shape[1] // STATS_SAMPLES)
    assert np.abs(out.spectra.mean(axis=1)).max() < 4 / np.sqrt(measured)
    assert np.abs(out.spectra.var(axis=1) - 1).max() < 6 / np.sqrt(measured)


@pytest.mark.gpu
def test_cupy_matches_numpy():
    """The same conditioning on CuPy: the same flags, spectra within 1e-4 (float32 sums in another
    order), per-channel mean and σ within 1e-5 relative."""
    cupy = pytest.importorskip("cupy")
    x, tsamp, _ = spectra_of("parkes_8bit_1.fil")
    user = np.zeros(x.shape[0], bool)
    user[:5] = True
    for settings in (RadioConditioning(), RadioConditioning(baseline_window=None, zero_dm=True, clip_sigma=5.0)):
        cpu = condition_spectra(x, settings, tsamp, user_mask=user)
        gpu = condition_spectra(cupy.asarray(x), settings, tsamp, user_mask=cupy.asarray(user))
        assert isinstance(gpu.spectra, cupy.ndarray) and gpu.spectra.dtype == np.float32
        np.testing.assert_array_equal(gpu.mask, cpu.mask)
        assert gpu.n_good == cpu.n_good and gpu.note.split(";")[0] == cpu.note.split(";")[0]
        np.testing.assert_allclose(gpu.spectra.get(), cpu.spectra, rtol=0, atol=1e-4)
        np.testing.assert_allclose(gpu.mean, cpu.mean, rtol=1e-5)
        np.testing.assert_allclose(gpu.sigma, cpu.sigma, rtol=1e-5)


@pytest.mark.gpu
def test_cupy_clipped_moments_kernel_matches_numpy():
    """The reduction kernels of a clipped-moment pass (gwbatch.radio._cuda_moments) against the NumPy
    expressions: 3-D blocks with a validity mask and outliers, means and σ within 1e-6 relative; the
    fused normalisation within 1e-5."""
    cupy = pytest.importorskip("cupy")
    from gwbatch.radio.condition import block_means, clipped_moments, normalise

    rng = np.random.default_rng(4)
    x = rng.normal(100.0, 10.0, (7, 5, 3000)).astype(np.float32)
    x[:, :, ::97] += 400.0  # outliers the clip removes
    keep = rng.random(x.shape) > 0.1
    for valid in (None, keep):
        cpu = clipped_moments(x, valid)
        gpu = clipped_moments(cupy.asarray(x), None if valid is None else cupy.asarray(valid))
        for c, g in zip(cpu, gpu):
            np.testing.assert_allclose(g.get(), c, rtol=1e-6)
    spectra = x.reshape(7, -1)
    means, centres = block_means(spectra, 2000)
    scale = (1.0 / np.arange(1, 8, dtype=np.float32))[:, None]
    expected = normalise(spectra, means, centres, scale)
    found = normalise(cupy.asarray(spectra), cupy.asarray(means), centres, cupy.asarray(scale))
    np.testing.assert_allclose(found.get(), expected, rtol=0, atol=1e-5 * np.abs(expected).max())


@pytest.mark.gpu
def test_cupy_statistics_kernels_match_numpy_on_strided_views_and_masks():
    """The one-read kernels (gwbatch.radio._cuda_moments) against the NumPy twin: block means of a
    strided view (the cleaning's sampled spectra) within 1e-6 relative; the normalisation of that
    view bit for bit; the SK sums within 1e-9 relative; the clipped and plain σ within 1e-6."""
    cupy = pytest.importorskip("cupy")
    from gwbatch.radio.condition import (_sk_starts, block_means, clipped_and_plain_sigma, normalise,
                                         sk_sums)

    rng = np.random.default_rng(9)
    x = rng.normal(50.0, 4.0, (9, 40_003)).astype(np.float32)
    x[:, ::131] += 300.0
    host_view, device_view = x[:, ::5], cupy.asarray(x)[:, ::5]
    means, centres = block_means(host_view, 900)
    g_means, g_centres = block_means(device_view, 900)
    np.testing.assert_array_equal(g_centres, centres)
    np.testing.assert_allclose(g_means.get(), means, rtol=1e-6)
    ones = np.ones((9, 1), np.float32)
    z = normalise(host_view, means, centres, ones)
    g_z = normalise(device_view, cupy.asarray(means), centres, cupy.asarray(ones))
    np.testing.assert_array_equal(g_z.get(), z)
    for c, g in zip(clipped_and_plain_sigma(z), clipped_and_plain_sigma(cupy.asarray(z))):
        np.testing.assert_allclose(g, c, rtol=1e-6)
    inverse = 1.0 / np.arange(1.0, 10.0)
    starts, m = _sk_starts(x.shape[1], 256)
    full_centres = centres * 5
    for c, g in zip(sk_sums(x, starts, m, means, full_centres, inverse),
                    sk_sums(cupy.asarray(x), starts, m, cupy.asarray(means), full_centres, inverse)):
        np.testing.assert_allclose(g.get(), c, rtol=1e-9)


@pytest.mark.gpu
def test_cupy_trial_normalisation_matches_numpy_with_gaps_and_an_empty_trial():
    """Trial block moments and the normalisation written into a laid-out buffer: the GPU's one-read
    kernels against the NumPy twin with invalid samples, an empty trial and blocks of 1030 samples
    for a window of 1000; normalised samples within 1e-6 of each other (σ within 1e-6 relative), invalid ones and the
    padding 0."""
    cupy = pytest.importorskip("cupy")
    from gwbatch.radio.pulses import block_moments, normalise_trials

    rng = np.random.default_rng(10)
    series = rng.normal(3.0, 2.0, (6, 10_300)).astype(np.float32)
    series += np.linspace(0, 5, series.shape[1], dtype=np.float32)
    series[:, 5000:5010] += 80.0
    valid = rng.random(series.shape) > 0.05
    valid[4] = False
    cpu = block_moments(series, valid, 1000)
    gpu = block_moments(cupy.asarray(series), cupy.asarray(valid), 1000)
    np.testing.assert_array_equal(gpu[2], cpu[2])
    for c, g in zip(cpu[:2], gpu[:2]):
        np.testing.assert_allclose(g.get(), c, rtol=1e-6)
    out = np.full((6, 10_500), 7.0, np.float32)
    g_out = cupy.full((6, 10_500), 7.0, cupy.float32)
    z, sigma = normalise_trials(series, valid, 1000, out=out)
    g_z, g_sigma = normalise_trials(cupy.asarray(series), cupy.asarray(valid), 1000, out=g_out)
    assert z is out and g_z is g_out
    np.testing.assert_allclose(g_sigma, sigma, rtol=1e-6)
    np.testing.assert_allclose(g_out.get(), out, rtol=0, atol=1e-6 * np.abs(out).max())
    assert not g_out.get()[~np.pad(valid, ((0, 0), (0, 200)))].any()
