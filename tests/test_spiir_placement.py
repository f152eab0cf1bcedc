"""Template placement: chirp-time coordinates, the numeric metric against exact matches, coverage."""

from __future__ import annotations

import numpy as np
import pytest

from gwbatch.conditioning.design import design_psd
from gwbatch.spiir.placement import (
    Metric,
    Region,
    Space,
    chirp_times,
    grid_placement,
    masses,
    regularised,
    stochastic_placement,
)
from gwbatch.waveforms import Template, frequency_domain

FS, F_LOW = 2048, 40.0
N = 16 * FS
DF = FS / N
F = np.arange(N // 2 + 1) * DF
PSD = design_psd("aLIGO", np.maximum(F, 1.0))
W = np.where(F >= F_LOW, 1.0 / PSD, 0.0)
# A small region (tens of templates) whose TaylorF2 ends at ISCO (>= 730 Hz), above the sensitive
# band, so the phase metric applies.
REGION = Region((3.0, 3.2), (2.4, 2.5))


def waveform(m1, m2, s1=0.0, s2=0.0):
    return frequency_domain("TaylorF2", Template(m1, m2, s1, s2), F.size, DF, F_LOW - 3)


def match(a, b):
    """Exact match, maximised over time (FFT) and phase (modulus), PSD-weighted."""
    n = 4 * N  # 4x oversampled in time for the maximisation
    c = np.fft.ifft(np.conj(a) * b * W, n)
    return np.abs(c).max() * n / np.sqrt(np.sum(np.abs(a) ** 2 * W) * np.sum(np.abs(b) ** 2 * W))


def nearest_fitting_factors(space, bank, metric_at, n: int, seed: int) -> np.ndarray:
    """Exact matches of ``n`` random points of ``space`` with the best of their 12 nearest templates
    of ``bank`` under the metric ``metric_at(*point)``."""
    rng = np.random.default_rng(seed)
    lo, hi, _ = space.box()
    ff = []
    while len(ff) < n:
        p = lo + (hi - lo) * rng.random(space.dims)
        if not space.contains(p):
            continue
        g = metric_at(*p)
        dq = bank - p
        nearest = np.argsort(np.einsum("ni,ij,nj->n", dq, g, dq))[:12]
        h = waveform(*map(float, space.parameters(p)))
        ff.append(max(match(waveform(*map(float, space.parameters(bank[i]))), h) for i in nearest))
    return np.array(ff)


@pytest.fixture(scope="module")
def metric():
    return Metric("TaylorF2", F, PSD, F_LOW, Space(REGION, F_LOW))


def test_chirp_time_roundtrip():
    m1, m2 = np.array([1.4, 30.0, 8.0]), np.array([1.2, 29.0, 3.0])
    t0, t3 = chirp_times(m1, m2, 20.0)
    b1, b2 = masses(t0, t3, 20.0)
    np.testing.assert_allclose(b1, m1, rtol=1e-9)
    np.testing.assert_allclose(b2, m2, rtol=1e-9)
    e0, e3 = chirp_times(10.0, 10.0, 20.0)
    assert np.isnan(masses(e0, e3 * 0.9, 20.0)[0])  # beyond equal masses (eta > 1/4): no binary
    assert masses(e0, e3 * 0.9, 20.0, clamp=True)[0] == masses(e0, e3 * 0.9, 20.0, clamp=True)[1]
    assert chirp_times(1.4, 1.4, 40.0)[0] == pytest.approx(25.0, rel=0.02)  # tau0 of a BNS from 40 Hz


def test_metric_predicts_exact_matches(metric):
    """Steps of ds^2 = 0.03 (predicted match 0.97), random directions at three points: the exact match
    is never below 0.963 (a metric that overstates the match would leave holes in a bank) and its
    median is within 0.005 of 0.97.  Along the near-degenerate (constant chirp mass) direction the
    quadratic metric overstates the mismatch, which only makes placement denser."""
    rng = np.random.default_rng(0)
    exact = []
    for m1, m2 in ((2.3, 2.25), (4.0, 3.0), (6.5, 3.0)):
        t = np.array(chirp_times(m1, m2, F_LOW))
        g = metric.at(*t)
        for _ in range(3):
            v = rng.standard_normal(2)
            v *= np.sqrt(0.03 / (v @ g @ v))
            q1, q2 = masses(*(t + v), F_LOW)
            if np.isfinite(q1):
                exact.append(match(waveform(m1, m2), waveform(float(q1), float(q2))))
    exact = np.array(exact)
    assert exact.size >= 7 and exact.min() >= 0.963 and abs(np.median(exact) - 0.97) < 0.005


@pytest.mark.parametrize("method", ["stochastic", "grid"])
def test_bank_covers_the_region(metric, method):
    """Fitting factors of 40 random points against the bank (exact matches): >= 0.96, median >= 0.975."""
    space = metric.space
    tau = (stochastic_placement(space, metric, 0.97, patience=500) if method == "stochastic"
           else grid_placement(space, metric, 0.97, patience=500))
    bank_m1, bank_m2 = masses(tau[:, 0], tau[:, 1], F_LOW)
    assert REGION.contains(bank_m1, bank_m2).all() and 20 < len(tau) < 200
    rng = np.random.default_rng(1)
    lo, hi, _ = REGION.tau_box(F_LOW)
    points = []
    while len(points) < 40:
        p = lo + (hi - lo) * rng.random(2)
        m1, m2 = masses(*p, F_LOW)
        if REGION.contains(m1, m2):
            points.append(p)
    bank_h = [waveform(a, b) for a, b in zip(bank_m1, bank_m2)]
    ff = np.array([max(match(h, waveform(*map(float, masses(*p, F_LOW)))) for h in bank_h) for p in points])
    assert ff.min() >= 0.96 and np.median(ff) >= 0.975


def test_aligned_spin_bank_covers_the_region():
    """A spin coordinate (spin1z in [-0.1, 0.1]) placed through the same metric: fitting factors of
    30 random (masses, spin) points against their 12 metric-nearest templates (exact matches)
    >= 0.96, median >= 0.975."""
    region = Region((3.0, 3.2), (2.4, 2.5), spin1z=(-0.1, 0.1))
    space = Space(region, F_LOW)
    metric = Metric("TaylorF2", F, PSD, F_LOW, space)
    bank = stochastic_placement(space, metric, 0.97, patience=500)
    assert space.dims == 3 and space.contains(bank).all() and 30 < len(bank) < 1000
    spins = space.parameters(bank)[2]
    assert spins.min() < -0.08 and spins.max() > 0.08  # the spin range is used
    ff = nearest_fitting_factors(space, bank, metric.at, 30, seed=4)
    assert ff.min() >= 0.96 and np.median(ff) >= 0.975, np.sort(ff)[:5]


def test_regularised_metric_of_a_free_direction():
    """A metric with a direction of rounding noise (eigenvalue -1e-14): made positive definite by
    raising that eigenvalue to radius2 / |extent|^2, finite half-widths capped at the box; a well
    conditioned metric comes back unchanged with the inverse's diagonal."""
    rot = np.linalg.qr(np.random.default_rng(0).standard_normal((3, 3)))[0]
    g = (rot * np.array([4.0, 1.0, -1e-14])) @ rot.T
    extent = np.array([1.0, 2.0, 2.0])
    fixed, widths = regularised(g, 0.03, extent)
    w = np.linalg.eigvalsh(fixed)
    assert np.allclose(np.sort(w), [0.03 / 9.0, 1.0, 4.0], rtol=1e-9)
    assert np.isfinite(widths).all() and (widths <= extent).all() and (widths > 0).all()
    good = np.array([[2.0, 1.0], [1.0, 3.0]])
    same, widths = regularised(good, 0.03, np.array([10.0, 10.0]))
    assert same is good
    assert np.allclose(widths, np.sqrt(0.03 * np.diag(np.linalg.inv(good))), rtol=1e-12)


def test_two_aligned_spins_place_and_cover():
    """Both spins free (spin1z in [-0.4, 0.4], spin2z in [-0.05, 0.05]): the Fisher matrix is nearly
    singular (eigenvalues from 1e-5 to 2e3); placed through the regularised metric, 20 random points of the 4-d region match one of their 12 metric-nearest
    templates at >= 0.96 (exact matches), median >= 0.975."""
    region = Region((3.0, 3.2), (2.4, 2.5), spin1z=(-0.4, 0.4), spin2z=(-0.05, 0.05))
    space = Space(region, F_LOW)
    metric = Metric("TaylorF2", F, PSD, F_LOW, space)
    bank = stochastic_placement(space, metric, 0.97, patience=500)
    assert space.dims == 4 and space.contains(bank).all() and 10 < len(bank) < 2000
    lo, hi, _ = space.box()
    ff = nearest_fitting_factors(space, bank, lambda *p: regularised(metric.at(*p), 0.03, hi - lo)[0], 20, seed=5)
    assert ff.min() >= 0.96 and np.median(ff) >= 0.975, np.sort(ff)[:5]
