"""The report's Q transform against gwpy's: the loudest tile of a sine-Gaussian and of a chirp in white
noise is found at the same Q plane, time and frequency, and its energy is gwpy's median-normalised one
times ln 2 (ours is normalised to the noise mean)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gwbatch.report.qtransform import q_transform, q_values

RATE, DURATION = 2048.0, 8.0
FRANGE, SEARCH = (20.0, 600.0), (3.0, 5.0)
TIME_TOLERANCE_S = 0.005  # a tile step of the finest rows is ~2 ms
FREQUENCY_TOLERANCE = 0.02  # relative: the rows of a plane are ~mismatch apart
ENERGY_TOLERANCE = 0.05  # relative, after the ln 2 of the normalisations


def sine_gaussian(t, t0, f0, q):
    tau = q / (math.sqrt(2.0) * math.pi * f0)
    return np.exp(-((t - t0) / tau) ** 2) * np.sin(2 * math.pi * f0 * (t - t0))


def chirp(t, t0, f_start, f_stop, length):
    """A linear chirp from ``f_start`` to ``f_stop`` over ``length`` s ending at ``t0``, Tukey-tapered."""
    from scipy.signal import chirp as scipy_chirp
    from scipy.signal.windows import tukey

    inside = (t >= t0 - length) & (t < t0)
    out = np.zeros_like(t)
    out[inside] = scipy_chirp(t[inside] - (t0 - length), f_start, length, f_stop) * tukey(int(inside.sum()), 0.2)
    return out


SIGNALS = {
    "sine-gaussian 150 Hz Q 12": lambda t: 1.5 * sine_gaussian(t, 4.3, 150.0, 12.0),
    "sine-gaussian 400 Hz Q 40": lambda t: 1.0 * sine_gaussian(t, 3.7, 400.0, 40.0),
    "chirp 40-300 Hz": lambda t: 0.6 * chirp(t, 4.2, 40.0, 300.0, 0.5),
}


@pytest.fixture(scope="module")
def gwpy_scan():
    pytest.importorskip("gwpy")
    from gwpy.signal.qtransform import q_scan
    from gwpy.timeseries import TimeSeries

    def scan(x):
        qgram, _ = q_scan(TimeSeries(x, sample_rate=RATE, t0=0), qrange=(4, 64), frange=FRANGE, mismatch=0.2,
                          search=SEARCH)
        return qgram.plane.q, qgram.peak

    return scan


@pytest.mark.parametrize("name", SIGNALS)
def test_loudest_tile_matches_gwpy(name, gwpy_scan):
    rng = np.random.default_rng(sorted(SIGNALS).index(name))
    t = np.arange(int(RATE * DURATION)) / RATE
    x = rng.normal(size=t.size) + SIGNALS[name](t)
    ours = q_transform(x, RATE, frange=FRANGE, search=SEARCH)
    q, peak = gwpy_scan(x)
    assert ours.q == pytest.approx(q, rel=1e-9)
    assert abs(ours.peak_time - peak["time"]) <= TIME_TOLERANCE_S
    assert ours.peak_frequency == pytest.approx(peak["frequency"], rel=FREQUENCY_TOLERANCE)
    assert ours.peak_energy == pytest.approx(math.log(2.0) * float(peak["energy"]), rel=ENERGY_TOLERANCE)
    assert ours.peak_energy > 20  # well above the noise's mean of 1


def test_sine_gaussian_found_where_injected():
    """Without gwpy: the loudest tile lies within 10 ms of the injected time and within half a tile's
    bandwidth (2 sqrt(pi) f / Q) of its frequency."""
    t = np.arange(int(RATE * DURATION)) / RATE
    x = np.random.default_rng(5).normal(size=t.size) + 1.5 * sine_gaussian(t, 4.3, 150.0, 12.0)
    scan = q_transform(x, RATE, frange=FRANGE, search=SEARCH, outseg=(4.0, 4.6), n_times=120, n_frequencies=60)
    half_band = math.sqrt(math.pi) * scan.peak_frequency / scan.q
    assert abs(scan.peak_time - 4.3) < 0.01 and abs(scan.peak_frequency - 150.0) < half_band
    assert scan.energy.shape == (60, 120) and scan.times[0] == 4.0 and scan.times[-1] == 4.6
    assert np.isclose(scan.frequencies[0], FRANGE[0], rtol=0.05)
    i, j = np.unravel_index(np.argmax(scan.energy), scan.energy.shape)
    assert abs(scan.times[j] - 4.3) < 0.01 and abs(scan.frequencies[i] - 150.0) < half_band


def test_noise_is_normalised_to_mean_one():
    x = np.random.default_rng(9).normal(size=int(RATE * DURATION))
    scan = q_transform(x, RATE, frange=FRANGE, qrange=(8.0, 8.0))
    assert q_values((8.0, 8.0)).tolist() == [8.0]
    assert np.mean(scan.energy) == pytest.approx(1.0, abs=0.05)
