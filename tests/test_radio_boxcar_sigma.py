"""The radio search's boxcar σ measured per trial (``search.sigma: measured``,
:func:`gwbatch.radio.pulses.boxcar_excess`): white noise stays white, red noise gets its analytic σ,
masked samples stay out, and a red trial's S/N counts what a Gaussian trial of its σ would."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from gwbatch.pulse.plan import boxcar_plan
from gwbatch.pulse.search import PulseSettings
from gwbatch.radio.pulses import (
    DEFAULT_BOXCARS, TrialBlock, boxcar_excess, excess_widths, measured_over_white, search_trials,
)

N = 1 << 18


def ar1(rng: np.random.Generator, rows: int, n: int, phi: float) -> np.ndarray:
    """Unit-variance AR(1) noise ``x_k = phi x_{k-1} + sqrt(1 - phi^2) e_k`` (float32 ``(rows, n)``)."""
    e = rng.standard_normal((rows, n)) * np.sqrt(1.0 - phi * phi)
    x = np.empty((rows, n))
    x[:, 0] = rng.standard_normal(rows)
    for k in range(1, n):
        x[:, k] = phi * x[:, k - 1] + e[:, k]
    return x.astype(np.float32)


def ar1_excess(phi: float, w: np.ndarray) -> np.ndarray:
    """σ of a boxcar of ``w`` samples of unit AR(1) noise over sqrt(w): var = w + 2 sum_k (w - k) phi^k."""
    out = []
    for m in np.atleast_1d(w):
        k = np.arange(1, m)
        out.append(np.sqrt((m + 2.0 * np.sum((m - k) * phi**k)) / m))
    return np.array(out)


def test_excess_widths_are_the_powers_of_two_to_the_widest():
    assert excess_widths(256).tolist() == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert excess_widths(300).tolist()[-1] == 512 and excess_widths(1).tolist() == [1]


def test_white_noise_measures_white_and_red_noise_its_analytic_sigma():
    """Gaussian noise: every width within 4 % of white (the MAD of 8192 boxcars has a 1.3 % standard
    error).  AR(1) noise with phi 0.9 (a boxcar of 256 samples has σ 4.2 sqrt(256)): within 6 % of
    the analytic σ at every width (wide boxcars of correlated noise have fewer independent values)."""
    rng = np.random.default_rng(5)
    white = rng.standard_normal((2, N)).astype(np.float32)
    red = ar1(rng, 2, N, 0.9)
    laid = np.concatenate([white, red])
    ok = np.ones(laid.shape, np.uint8)
    excess = boxcar_excess(laid, ok, np.arange(4), 256)
    widths = excess_widths(256)
    assert np.all(np.abs(excess[:2] - 1) < 0.04), excess[:2]
    truth = ar1_excess(0.9, widths)
    assert truth[-1] > 4
    assert np.all(np.abs(excess[2:] / truth - 1) < 0.06), excess[2:] / truth


def test_masked_samples_stay_out_of_the_measurement():
    """A masked stretch holding huge values changes nothing, and a trial with no valid boxcar of a
    width gives NaN there (counted as white)."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, N)).astype(np.float32)
    ok = np.ones(x.shape, np.uint8)
    ok[0, 1000:60000] = 0
    clean = boxcar_excess(np.where(ok == 1, x, 0).astype(np.float32), ok, np.array([0]), 256)
    loud = x.copy()
    loud[0, 1000:60000] = 1e6
    assert np.array_equal(boxcar_excess(loud, ok, np.array([0]), 256), clean)
    short = np.zeros((1, 64), np.uint8)
    short[0, :40] = 1
    got = boxcar_excess(np.ones((1, 64), np.float32), short, np.array([0]), 64)
    assert np.isnan(got[0, -1]) and np.isfinite(got[0, :-1]).all()  # no whole boxcar of 64 in 40 valid samples
    assert measured_over_white(got, np.array([64.0]))[0] == 1.0


def test_measured_over_white_interpolates_in_log_width_and_never_goes_below_white():
    excess = np.array([[1.0, 1.2, 2.0, 0.5, np.nan]])  # widths 1, 2, 4, 8, 16
    rows = np.zeros(6, np.int64)
    got = measured_over_white(excess[rows], np.array([1.0, 2.0, 3.0, 4.0, 8.0, 64.0]))
    np.testing.assert_allclose(got, [1.0, 1.2, 1.2 + 0.8 * np.log2(1.5), 2.0, 1.0, 1.0])


@pytest.mark.parametrize("backend", ["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def test_red_trials_count_false_alarms_as_gaussian_trials_do(backend):
    """Eight trials of AR(1) noise (phi 0.95) searched at S/N 4.5 with the default boxcars: with the
    white σ they give 226,183 boxcars above threshold (wide boxcars of red noise), with the measured
    σ no more than independent Gaussian trials would (8.3 by Cordes & McLaughlin's count, an upper
    bound; 0 measured).  Eight Gaussian trials at S/N 4: the measured σ keeps 85 % of the white
    count (237 of 280; never below white, its estimate's noise only lowers an S/N).  On the GPU
    the same boxcars and S/N within 1e-4 of the CPU's."""
    from gwbatch._xp import get_xp

    if backend == "cupy":
        pytest.importorskip("cupy")
        from gwbatch._xp import cupy_available

        if not cupy_available():
            pytest.skip("needs CuPy and a CUDA GPU")
    xp = get_xp(backend)
    rng = np.random.default_rng(7)
    series = ar1(rng, 8, 1 << 16, 0.95)
    found = {}
    for sigma in ("white", "measured"):
        boxcars = PulseSettings(series="amplitude", threshold=4.5, decimation=DEFAULT_BOXCARS, sigma=sigma, clip=None,
                                clip_iterations=1, merge_gap=0)
        block = TrialBlock(np.arange(8), 1, xp.asarray(series), xp.ones(series.shape, dtype=bool))
        found[sigma] = search_trials(block, boxcars, 1 << 14)
    white, measured = found["white"], found["measured"]
    assert len(white) > 1000
    # independent tests over widths (Cordes & McLaughlin) x Q(4.5): an upper bound on the count
    widths = np.array(boxcar_plan(DEFAULT_BOXCARS).widths, dtype=np.float64)
    expected = 8 * np.sum(series.shape[1] / widths) * norm.sf(4.5)
    assert len(measured) <= expected + 3 * np.sqrt(expected), (len(measured), expected)
    assert (measured["snr"] >= 4.5).all()
    gaussian = np.random.default_rng(8).standard_normal((8, 1 << 16)).astype(np.float32)
    counts = {}
    for sigma in ("white", "measured"):
        boxcars = PulseSettings(series="amplitude", threshold=4.0, decimation=DEFAULT_BOXCARS, sigma=sigma, clip=None,
                                clip_iterations=1, merge_gap=0)
        block = TrialBlock(np.arange(8), 1, xp.asarray(gaussian), xp.ones(gaussian.shape, dtype=bool))
        counts[sigma] = len(search_trials(block, boxcars, 1 << 14))
    assert 0.7 * counts["white"] <= counts["measured"] <= counts["white"], counts
    if backend == "cupy":
        cpu = search_trials(TrialBlock(np.arange(8), 1, series, np.ones(series.shape, dtype=bool)),
                            PulseSettings(series="amplitude", threshold=4.5, decimation=DEFAULT_BOXCARS,
                                          sigma="measured", clip=None, clip_iterations=1, merge_gap=0), 1 << 14)
        a, b = (f.sort_values(["dm_index", "sample", "width"]).reset_index(drop=True) for f in (cpu, measured))
        assert len(a) == len(b) and np.array_equal(a["sample"], b["sample"]) and np.array_equal(a["width"], b["width"])
        np.testing.assert_allclose(b["snr"], a["snr"], rtol=1e-4)


@pytest.mark.gpu
def test_cuda_boxcar_mad_equals_the_twin():
    """The CUDA kernel (one block per width and row, bitonic sorts in shared memory) against the NumPy
    twin on red and white trials with masked stretches, a trial shorter than the widest boxcar, and
    widths with fewer starts than the table holds: the same counts, the σ within 1e-6."""
    pytest.importorskip("cupy")
    from gwbatch._xp import cupy_available

    if not cupy_available():
        pytest.skip("needs CuPy and a CUDA GPU")
    import cupy

    rng = np.random.default_rng(9)
    for n, max_width in ((1 << 17, 256), (3000, 256), (200, 512)):
        laid = np.concatenate([ar1(rng, 3, n, 0.8), rng.standard_normal((3, n)).astype(np.float32)])
        ok = np.ones(laid.shape, np.uint8)
        ok[1, n // 4 : n // 2] = 0
        ok[4, :: 7] = 0
        ok[5] = 0
        cpu = boxcar_excess(laid, ok, np.arange(6), max_width)
        gpu = boxcar_excess(cupy.asarray(laid), cupy.asarray(ok), np.arange(6), max_width)
        assert np.array_equal(np.isnan(cpu), np.isnan(gpu)) and np.isnan(cpu[5]).all()
        np.testing.assert_allclose(gpu[~np.isnan(gpu)], cpu[~np.isnan(cpu)], rtol=1e-6)


def test_the_kernel_and_its_twin_take_the_same_boxcars():
    """The CUDA kernel computes its starts as the twin's table does, from the same count."""
    from gwbatch.radio import _cuda_moments
    from gwbatch.radio.pulses import SIGMA_BOXCARS, _spread_starts

    assert _cuda_moments.MAD_BOXCARS == SIGMA_BOXCARS and f"#define MAD_BOXCARS {SIGMA_BOXCARS}" in _cuda_moments.SOURCE
    starts, take = _spread_starts(10000, 4)
    assert take.sum(axis=1).tolist() == [8192] * 4
    assert starts[3, take[3]][-1] == 8191 * (10000 - 8 + 1) // 8192 and np.all(np.diff(starts[3, take[3]]) >= 1)
    short, take = _spread_starts(100, 3)
    assert take.sum(axis=1).tolist() == [100, 99, 97] and short[2, :97].tolist() == list(range(97))


def test_measuring_holds_no_more_memory_than_the_plan_counts():
    """The temporaries of one group of measured trials stay within SIGMA_BYTES per sample of
    SIGMA_GROUP_SAMPLES (host, traced: 37.2 bytes a sample measured, against 48 counted by the radio
    search's work estimate, tests/test_memory.py)."""
    import tracemalloc

    from gwbatch.radio.pulses import SIGMA_BYTES, SIGMA_GROUP_SAMPLES

    n = 1 << 17
    rows = 2 * SIGMA_GROUP_SAMPLES // n  # two full groups
    laid = np.random.default_rng(10).standard_normal((rows, n)).astype(np.float32)
    ok = np.ones(laid.shape, np.uint8)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    boxcar_excess(laid, ok, np.arange(rows), 256)
    peak = tracemalloc.get_traced_memory()[1] - before
    tracemalloc.stop()
    assert 0.3 * SIGMA_BYTES * SIGMA_GROUP_SAMPLES < peak <= SIGMA_BYTES * SIGMA_GROUP_SAMPLES, peak / SIGMA_GROUP_SAMPLES
