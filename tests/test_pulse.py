"""Single-pulse search: Chan statistics, the boxcar kernel against brute force, SNR calibration,
and recovery of known pulses (both backends where a GPU is present)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from gwbatch._xp import to_host
from gwbatch.searches.pulse import PulseSearchConfig
from gwbatch.pulse.boxcar import boxcar_best_numpy, boxcar_round
from gwbatch.pulse.plan import boxcar_plan
from gwbatch.pulse.search import search_series
from gwbatch.pulse.series import (
    boxcar_sum,
    round_constants,
    sigma_n,
    transform_constants,
)
from gwbatch.pulse.stats import chan_moments, robust_moments


def test_chan_moments_match_numpy(xp):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(100_003) * 7 + 1e4  # offset: pairwise merging stays accurate
    valid = rng.random(x.size) > 0.3
    mean, std, n = chan_moments(xp.asarray(x), xp.asarray(valid))
    assert n == valid.sum()
    assert mean == pytest.approx(x[valid].mean(), rel=1e-13)
    assert std == pytest.approx(x[valid].std(), rel=1e-10)


def test_robust_moments_reject_pulses(xp):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(200_000)
    x[::1000] += 50.0  # strong pulses inflate the plain std
    ok = np.ones(x.size, bool)
    _, plain, _ = robust_moments(xp.asarray(x), xp.asarray(ok), None, 3)
    mean, clipped, _ = robust_moments(xp.asarray(x), xp.asarray(ok), 3.0, 3)
    assert plain > 1.5 and clipped == pytest.approx(1.0, abs=0.02) and abs(mean) < 0.02


def test_boxcar_plan():
    plan = boxcar_plan([32, 16, 16, 16])
    assert plan.max_width == 256
    assert plan.widths[:33] == list(range(1, 33)) + [34] and plan.widths[-1] == 256
    assert boxcar_plan([32] + [16] * 8).max_width == 8192
    with pytest.raises(ValueError, match="multiple of 2"):
        boxcar_plan([3, 4])


def brute_force(y, first, last, p, q, r, energy):
    n_out = y.size - last + 1
    best = np.full(n_out, -np.inf)
    width = np.zeros(n_out, int)
    for i in range(n_out):
        for j, w in enumerate(range(first, last + 1)):
            b = float(np.sum(y[i : i + w], dtype=np.float64))
            z = (np.cbrt(b * p[j]) - q[j]) * r[j] if energy else b * p[j] - q[j]
            if z > best[i]:
                best[i], width[i] = z, w
    return best, width


@pytest.mark.parametrize("energy", [False, True])
@pytest.mark.parametrize("first,last,stride", [(1, 8, 1), (5, 12, 2), (17, 32, 4)])
def test_boxcar_round_matches_brute_force(xp, energy, first, last, stride):
    rng = np.random.default_rng(2)
    n_out = 1500
    y = rng.standard_normal(n_out + last + 37).astype(np.float32)
    if energy:
        y = y * y
    valid = rng.random(n_out * stride) > 0.05
    widths = np.arange(first, last + 1)
    mean, std = float(y.mean()), float(y.std())
    kind = "energy" if energy else "amplitude"
    sig = sigma_n(widths, std, "white")
    threshold = 1.5  # low, so the check sees many hits (widths are strongly correlated)
    consts = round_constants(kind, widths, mean, sig, threshold)
    idx, width, snr, nxt = boxcar_round(xp.asarray(y), xp.asarray(valid.astype(np.uint8)), stride, first, last,
                                        xp.asarray(consts), threshold, energy, n_out)
    p, q, r = transform_constants(kind, widths, mean, sig)
    ref_best, ref_width = brute_force(y[: n_out + last - 1], first, last, p, q, r, energy)
    ref_hit = np.flatnonzero((ref_best >= threshold) & valid[::stride][:n_out])
    assert ref_hit.size > 20
    np.testing.assert_array_equal(to_host(idx), ref_hit)
    np.testing.assert_allclose(to_host(snr), ref_best[ref_hit], rtol=1e-5, atol=1e-5)
    assert np.mean(to_host(width) == ref_width[ref_hit]) > 0.98  # ties to float32 precision aside
    np.testing.assert_allclose(to_host(nxt), y[0 : 2 * (y.size // 2) : 2] + y[1 : 2 * (y.size // 2) : 2], rtol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("threshold", [4.0, 0.5])
def test_gpu_rounds_equal_the_twin_rounds(threshold):
    """Every round of a plan on the GPU (one workspace, one synchronisation) against the NumPy twin:
    the same starts and widths, SNRs within 1e-5.  At threshold 0.5 most starts are hits, more than
    the first rounds have room for, so those rounds are run again with room for all."""
    import cupy

    from gwbatch.pulse._cuda import capacity
    from gwbatch.pulse.boxcar import run_rounds

    rng = np.random.default_rng(5)
    n, plan = 1 << 20, boxcar_plan([32, 16, 16, 16])
    y = np.concatenate([rng.standard_normal(n), np.zeros(plan.max_width)]).astype(np.float32)
    valid = (rng.random(n) > 0.01).astype(np.uint8)
    consts = [round_constants("amplitude", np.arange(r.first_width, r.last_width + 1), 0.0,
                              sigma_n(np.arange(r.first_width, r.last_width + 1), np.sqrt(r.decimation), "white"),
                              threshold) for r in plan.rounds]
    cpu = run_rounds(y, valid, plan.rounds, lambda k, _s: consts[k], threshold, False, n)
    gpu = run_rounds(cupy.asarray(y), cupy.asarray(valid), plan.rounds, lambda k, _s: cupy.asarray(consts[k]),
                     threshold, False, n)
    hits = [a[0].size for a in cpu]
    assert sum(hits) > 500  # measured: 555 at threshold 4
    if threshold < 1:
        assert hits[0] > capacity(n)  # the rerun path is taken
    for (i, w, z), (gi, gw, gz) in zip(cpu, gpu):
        np.testing.assert_array_equal(gi, i)
        assert np.mean(gw == w) > 0.98  # ties to float32 precision aside
        np.testing.assert_allclose(gz, z, rtol=1e-5, atol=1e-5)


def _energy_series_with_pulses(n: int, plan, seed: int):
    """Chi-squared (1 dof) noise with boxcar pulses of every round's widths, padded for the plan,
    and the per-round constants at threshold 6 (white noise, mean 1, sigma sqrt 2 per sample)."""
    rng = np.random.default_rng(seed)
    y = rng.standard_normal(n) ** 2
    for start in rng.integers(0, n - 20000, 60):
        width = int(rng.choice([1, 3, 8, 30, 70, 200, 600, 2000, 7000]))
        y[start : start + width] += rng.uniform(0.5, 3.0) * 40.0 / np.sqrt(width)
    y = np.concatenate([y, np.ones(plan.max_width)]).astype(np.float32)
    consts = []
    for r in plan.rounds:
        widths = np.arange(r.first_width, r.last_width + 1)
        d = r.decimation
        consts.append(round_constants("energy", widths, 1.0 * d, sigma_n(widths, np.sqrt(2.0 * d), "white"), 6.0))
    return y, consts


def test_blocked_threshold_tests_cover_noise_rarely():
    """The energy series' threshold test covers blocks of widths only where Gaussian noise almost
    never passes a block test (the margin), one width at a time for the amplitude series; on
    chi-squared noise the chosen blocks pass a block test at under 1e-3 of the starts."""
    from gwbatch.pulse._cuda import BLOCK_MARGIN_SNR, block_length

    plan = boxcar_plan([32] + [16] * 8)
    y, consts = _energy_series_with_pulses(1 << 20, plan, 0)
    noise = np.random.default_rng(1).standard_normal(1 << 20) ** 2
    blocks = [block_length(True, r.first_width, r.last_width, c) for r, c in zip(plan.rounds, consts)]
    assert blocks[0] >= 8 and blocks[3] >= 4 and blocks == sorted(blocks, reverse=True)  # [8, 8, 8, 4, 4, 2, 2, 2, 1]
    assert all(block_length(False, r.first_width, r.last_width, c) == 1 for r, c in zip(plan.rounds, consts))
    low = round_constants("energy", np.arange(1, 33), 1.0, sigma_n(np.arange(1, 33), np.sqrt(2.0), "white"), 1.0)
    assert block_length(True, 1, 32, low) == 1  # a threshold near the noise: every width on its own
    series = noise.astype(np.float64)
    for r, c, b in zip(plan.rounds, consts, blocks):
        nw = r.n_widths
        t = c[:nw]
        prefix = np.concatenate([[0.0], np.cumsum(series)])
        m = series.size - r.last_width
        passed = np.zeros(m, bool)
        for j1 in range(0, nw, b):
            j2 = min(j1 + b, nw) - 1
            passed |= prefix[r.first_width + j2 : r.first_width + j2 + m] - prefix[:m] >= t[j1]
        assert passed.mean() < 1e-3, (r, b, passed.mean())
        series = series[: series.size // 2 * 2 : 2] + series[1 : series.size // 2 * 2 : 2]
    assert BLOCK_MARGIN_SNR >= 3.5


def test_fused_kernel_takes_the_usual_plans_and_leaves_wide_ones_to_one_launch_per_round():
    """The fused kernel's block holds the default plans' groups (shared memory as ptxas counts it for
    the suite's first group: 35952 bytes); plans whose tiles or rounds are too wide for it run one
    launch per round."""
    from gwbatch.pulse._cuda_fused import (
        GROUP_SHARED_LIMIT,
        fused_fits,
        group_shared_bytes,
    )

    assert group_shared_bytes(((1, 32, 8), (17, 32, 8), (17, 32, 8), (17, 32, 4))) == 35952
    for widths in ([32] + [16] * 8, [16, 8, 8], [32, 16, 16, 16], [64, 32, 32, 32], [48, 48, 48, 48]):
        assert fused_fits(boxcar_plan(widths).rounds), widths
    assert not fused_fits(boxcar_plan([128]).rounds)  # more widths in a round than its tests unroll
    wide = boxcar_plan([64, 64, 64, 64]).rounds  # the fourth round's halo: shared memory over the limit
    assert all(r.n_widths <= 64 for r in wide) and not fused_fits(wide)
    assert group_shared_bytes(tuple((r.first_width, r.last_width, 1) for r in wide)) > GROUP_SHARED_LIMIT


@pytest.mark.gpu
@pytest.mark.parametrize("fused", [False, True])
def test_gpu_blocked_energy_rounds_equal_the_twin_rounds(fused):
    """The energy series' rounds with blocked threshold tests on prefix sums (GPU) find exactly the
    starts of the twin's per-width test: the same starts, widths, SNRs within 1e-5, in every round
    of the suite's plan, with pulses of every round's widths; one launch per round, and the fused
    kernel (four rounds per launch, then four, then one)."""
    import cupy

    from gwbatch.pulse._cuda import block_length
    from gwbatch.pulse._cuda_fused import round_groups
    from gwbatch.pulse.boxcar import run_rounds

    n, plan = 1 << 20, boxcar_plan([32] + [16] * 8)
    assert [len(g) for g in round_groups(len(plan.rounds))] == [4, 4, 1]
    y, consts = _energy_series_with_pulses(n, plan, 3)
    assert block_length(True, 1, 32, consts[0]) > 1
    valid = (np.random.default_rng(4).random(n) > 0.01).astype(np.uint8)
    cpu = run_rounds(y, valid, plan.rounds, lambda k, _s: consts[k], 6.0, True, n)
    gpu = run_rounds(cupy.asarray(y), cupy.asarray(valid), plan.rounds, lambda k, _s: consts[k], 6.0, True, n,
                     measures_series=not fused)
    hits = [a[0].size for a in cpu]
    assert min(hits) > 0 and sum(hits) > 1000, hits
    for (i, w, z), (gi, gw, gz) in zip(cpu, gpu):
        np.testing.assert_array_equal(gi, i)
        assert np.mean(gw == w) > 0.98  # ties to float32 precision aside
        np.testing.assert_allclose(gz, z, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("plan_widths,n,threshold", [([16, 8, 8], (1 << 18) + 12345, 6.0), ([32, 16, 16, 16, 16], 1 << 19, 2.0),
                                                    ([8, 4, 4, 4, 4, 4, 4], 100003, 6.0)])
def test_gpu_fused_rounds_equal_the_twin_rounds(plan_widths, n, threshold):
    """The fused kernel on other plans and lengths: three rounds in one launch (the one-day
    campaign's plan) on a length that is no multiple of the tile, a group of four and one of one
    whose first rounds overflow their hit lists at a low threshold (run again alone with room for
    all), and rounds of two widths; every hit as the twin's."""
    import cupy

    from gwbatch.pulse._cuda import capacity
    from gwbatch.pulse.boxcar import run_rounds

    plan = boxcar_plan(plan_widths)
    rng = np.random.default_rng(n)
    y = rng.standard_normal(n) ** 2
    for start in rng.integers(0, n - 3000, 30):
        width = int(rng.choice([1, 5, 20, 90, 300]))
        y[start : start + width] += rng.uniform(0.5, 3.0) * 40.0 / np.sqrt(width)
    y = np.concatenate([y, np.ones(plan.max_width)]).astype(np.float32)
    consts = [round_constants("energy", np.arange(r.first_width, r.last_width + 1), 1.0 * r.decimation,
                              sigma_n(np.arange(r.first_width, r.last_width + 1), np.sqrt(2.0 * r.decimation), "white"),
                              threshold) for r in plan.rounds]
    valid = (rng.random(n) > 0.02).astype(np.uint8)
    cpu = run_rounds(y, valid, plan.rounds, lambda k, _s: consts[k], threshold, True, n)
    def unmeasured(k, series_k):
        assert series_k is None  # the fused kernel writes no round's series
        return consts[k]

    gpu = run_rounds(cupy.asarray(y), cupy.asarray(valid), plan.rounds, unmeasured, threshold, True, n,
                     measures_series=False)
    hits = [a[0].size for a in cpu]
    assert min(hits) > 0, hits
    if threshold < 3:
        assert hits[0] > capacity(n)  # the rerun path is taken
    for (i, w, z), (gi, gw, gz) in zip(cpu, gpu):
        np.testing.assert_array_equal(gi, i)
        assert np.mean(gw == w) > 0.98
        np.testing.assert_allclose(gz, z, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["amplitude", "energy"])
@pytest.mark.parametrize("w", [1, 4, 16, 64])
def test_snr_calibrated_in_gaussian_noise(kind, w):
    """P(z > t) per boxcar matches the Gaussian tail at every width (seed 0, 4e6 samples)."""
    x = np.random.default_rng(0).standard_normal(4_000_000)
    y = x if kind == "amplitude" else x * x
    widths = np.array([w])
    p, q, r = transform_constants(kind, widths, y.mean(), sigma_n(widths, y.std(), "white"))
    z, _ = boxcar_best_numpy(np.concatenate([y, np.full(w - 1, y.mean())]).astype(np.float32), w, w, p, q, r, kind == "energy")
    for t in (2.0, 3.0):
        rate = np.mean(z[: x.size - w] > t)
        # amplitude: exact; energy: Wilson-Hilferty, within 15% of the tail at 3 sigma even at w = 1
        assert rate == pytest.approx(norm.sf(t), rel=0.15 if kind == "energy" or w > 1 else 0.06)


def test_sigma_models():
    w = np.array([1, 2, 4, 8])
    np.testing.assert_allclose(sigma_n(w, 2.0, "white"), 2 * np.sqrt(w))
    lin = sigma_n(w, 2.0, "linear", sigma_nmax=10.0)
    assert lin[0] == pytest.approx(2.0) and lin[-1] == pytest.approx(10.0)  # exact at N=1 and N_max


def test_boxcar_sum_inverts_transform():
    widths = np.array([3, 9])
    for kind in ("amplitude", "energy"):
        p, q, r = transform_constants(kind, widths, 1.0, sigma_n(widths, np.sqrt(2.0), "white"))
        b = np.array([7.5, 20.0])
        z = (np.cbrt(b * p) - q) * r if kind == "energy" else b * p - q
        np.testing.assert_allclose(boxcar_sum(kind, z, p, q, r), b, rtol=1e-5)


def test_amplitude_pulse_found_at_right_place(xp):
    rng = np.random.default_rng(4)
    x = rng.standard_normal(200_000)
    start, width, amp = 123_456, 12, 4.0  # boxcar SNR = amp * sqrt(width) = 13.9
    x[start : start + width] += amp
    cfg = PulseSearchConfig(series="amplitude", threshold=6.0, decimation=[16, 8]).settings()
    trig = search_series(xp.asarray(x), xp.ones(x.size, dtype=bool), cfg)
    assert trig.start.size == 1
    assert abs(trig.start[0] - start) <= 1 and abs(trig.width[0] - width) <= 2
    assert trig.snr[0] == pytest.approx(amp * np.sqrt(width), abs=1.5)
    assert trig.centre[0] == pytest.approx(start + (width - 1) / 2, abs=1.0)


def test_energy_pulse_snr_estimate(xp):
    """A whitened-domain burst of energy rho^2 is found with rho_hat within 15% and sub-sample timing."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal(100_000)
    t = np.arange(-40, 41)
    burst = np.exp(-((t / 6.0) ** 2)) * np.cos(2 * np.pi * 0.2 * t)
    rho = 15.0
    at = 50_000
    x[at - 40 : at + 41] += burst * rho / np.sqrt(np.sum(burst**2))
    cfg = PulseSearchConfig(series="energy", threshold=5.0, decimation=[16, 8, 8]).settings()
    trig = search_series(xp.asarray(x), xp.ones(x.size, dtype=bool), cfg, snr2_per_energy=1.0)
    k = int(np.argmax(trig.snr))
    assert trig.rho[k] == pytest.approx(rho, rel=0.15)
    assert abs(trig.centre[k] - at) < 2.0


def test_invalid_samples_make_no_triggers(xp):
    rng = np.random.default_rng(6)
    x = rng.standard_normal(50_000)
    x[20_000:20_010] += 30.0
    valid = np.ones(x.size, bool)
    valid[19_990:20_030] = False
    cfg = PulseSearchConfig(series="amplitude", threshold=6.0, decimation=[16]).settings()
    trig = search_series(xp.asarray(x), xp.asarray(valid), cfg)
    assert trig.start.size == 0


@pytest.mark.parametrize("series", ["energy", "amplitude"])
def test_loud_pulse_does_not_hide_a_quiet_one(xp, series):
    """Noise statistics are outlier-robust: a second, much louder pulse in the same stretch changes
    the quiet pulse's SNR by less than 2% (without rejection, sigma inflates and the SNR drops)."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal(300_000)
    t = np.arange(-30, 31)
    burst = np.exp(-((t / 5.0) ** 2)) * (np.cos(2 * np.pi * 0.15 * t) if series == "energy" else 1.0)
    burst /= np.sqrt(np.sum(burst**2))
    quiet = x.copy()
    quiet[100_000 - 30 : 100_000 + 31] += 10 * burst
    both = quiet.copy()
    for at in range(150_000, 290_000, 20_000):  # seven SNR-60 pulses
        both[at - 30 : at + 31] += 60 * burst
    cfg = PulseSearchConfig(series=series, threshold=5.0, decimation=[16, 8, 8]).settings()
    ok = xp.ones(x.size, dtype=bool)

    def quiet_snr(data):
        trig = search_series(xp.asarray(data), ok, cfg, snr2_per_energy=1.0)
        return trig.snr[np.argmin(np.abs(trig.centre - 100_000))]

    assert quiet_snr(both) == pytest.approx(quiet_snr(quiet), rel=0.02)
