"""SPIIR construction's kernels against direct references: the response, the least-squares sums and
Gram matrix, the walk, the unwrap, and the overlap's correlation (exact lags around the peak,
Cauchy-Schwarz bounds elsewhere) against the full correlation."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from gwbatch.spiir import construct as C


def _filters(rng, n_filters, span, slow=(5.0, 400.0)):
    jstep = rng.uniform(*slow, n_filters)
    a = np.exp(-0.25 / jstep) * np.exp(1j * rng.uniform(-3.0, 3.0, n_filters))
    b = rng.standard_normal(n_filters) + 1j * rng.standard_normal(n_filters)
    d = np.sort(rng.integers(0, span, n_filters))
    return a, b, d


def test_impulse_response_is_the_sum_of_decaying_exponentials():
    rng = np.random.default_rng(1)
    for n_filters, span, order in [(1, 10, "sorted"), (7, 300, "sorted"), (60, 5000, "sorted"), (25, 800, "shuffled")]:
        a, b, d = _filters(rng, n_filters, span)
        if order == "shuffled":
            d = rng.permutation(d)
        tails = C.tail_lengths(a)
        ref = np.zeros(int(np.max(d + tails)), complex)
        for al, bl, dl, tl in zip(a, b, d, tails):
            ref[dl: dl + tl] += bl * al ** np.arange(tl)
        r = C.impulse_response(a, b, d)
        assert r.shape == ref.shape and r.dtype == np.complex128
        assert np.max(np.abs(r - ref)) <= 1e-12 * np.max(np.abs(ref))
    assert C.impulse_response(np.array([]), np.array([]), np.array([], np.int64)).size == 0


@numba.njit(cache=False)
def _reference_gram(a, d):
    n = a.size
    gram = np.empty((n, n), dtype=np.complex128)
    for l in range(n):
        for m in range(l + 1):
            lag = d[l] - d[m]
            lead = a[m] ** lag if lag >= 0 else np.conj(a[l]) ** -lag
            g = lead / (1.0 - np.conj(a[l]) * a[m])
            gram[l, m] = g
            gram[m, l] = np.conj(g)
    return gram


@numba.njit(cache=False)
def _reference_sums(a, d, tails, target):
    out = np.empty(a.size, dtype=np.complex128)
    for l in range(a.size):
        pole = np.conj(a[l])
        s = 0.0 + 0.0j
        for k in range(min(d[l] + tails[l], target.size) - 1, d[l] - 1, -1):
            s = target[k] + pole * s
        out[l] = s
    return out


def test_least_squares_pieces_equal_the_plain_loops_to_the_bit():
    """The Gram matrix (powers from each pole's modulus and angle, taken once) and the backward sums
    (four recursions stepped together) are the plain loops' to the last bit, lags 0 and 2 (numba's
    special cases) and unsorted delays included."""
    rng = np.random.default_rng(2)
    for trial in range(12):
        a, _, d = _filters(rng, int(rng.integers(1, 90)), 20000, slow=(1.0, 600.0))
        d[: d.size // 3] = np.arange(d.size // 3)  # lags 0, 1, 2
        if trial % 3 == 0:
            d = rng.permutation(d)
        assert np.array_equal(C._gram(a, d), _reference_gram(a, d))
        target = rng.standard_normal(int(d.max()) + 50) + 1j * rng.standard_normal(int(d.max()) + 50)
        tails = C.tail_lengths(a)
        assert np.array_equal(C._backward_sums(a, d, tails, target), _reference_sums(a, d, tails, target))


def test_least_squares_b_solves_the_normal_equations():
    """``least_squares_b`` (Cholesky of the Hermitian positive-definite Gram matrix) solves
    ``G b = c`` to 1e-12 of the largest ``b`` (LU's answer), and ``b`` minimises the residual: no
    perturbation of it fits the target better."""
    rng = np.random.default_rng(5)
    for _ in range(6):
        a, _, d = _filters(rng, int(rng.integers(5, 120)), 4000, slow=(2.0, 300.0))
        target = rng.standard_normal(int(d.max()) + 400) + 1j * rng.standard_normal(int(d.max()) + 400)
        b = C.least_squares_b(a, d, target)
        gram, rhs = C._gram(a, d), C._backward_sums(a, d, C.tail_lengths(a), target)
        assert np.max(np.abs(b - np.linalg.solve(gram, rhs))) <= 1e-12 * np.max(np.abs(b))
        length = max(target.size, int((d + C.tail_lengths(a)).max()))
        padded = np.zeros(length, complex)
        padded[: target.size] = target

        def residual(bb):
            r = C.impulse_response(a, bb, d)
            return np.sum(np.abs(np.pad(r, (0, max(0, length - r.size)))[:length] - padded) ** 2)

        best = residual(b)
        for _ in range(4):
            assert residual(b * (1 + 1e-3 * rng.standard_normal(b.size))) > best


def _reference_walk(h, epsilon, alpha, beta, phase):
    n = h.size
    amp, phi = np.abs(h), np.unwrap(np.angle(h))
    chirp = phi if phase is None else phase
    peak = int(np.argmax(amp))
    phidd_peak = (chirp[peak - 2] - 2.0 * chirp[peak - 1] + chirp[peak]) / (2.0 * np.pi)
    a, b, d = [], [], []
    j, jstep = n - 1, 1
    while True:
        phidd = (chirp[j - 2] - 2.0 * chirp[j - 1] + chirp[j]) / (2.0 * np.pi)
        if j > peak:
            phidd = max(phidd, phidd_peak)
        if phidd > 0:
            jstep = max(1, round(np.sqrt(2.0 * epsilon / phidd)))
        k = round(j - alpha * jstep)
        if k <= 2:
            break
        if k + 2 <= n - 1:
            phid = (phi[k - 2] - 8.0 * phi[k - 1] + 8.0 * phi[k + 1] - phi[k + 2]) / 12.0
        else:
            phid = 11.0 / 6.0 * phi[k] - 3.0 * phi[k - 1] + 1.5 * phi[k - 2] - phi[k - 3] / 3.0
        a.append(np.exp(-beta / jstep) * np.exp(-1j * phid))
        b.append(amp[k] * np.exp(1j * (phi[k] + phid * (j - k))))
        d.append(n - 1 - j)
        j -= jstep
    return np.conj(np.array(a)), np.conj(np.array(b)), np.array(d, dtype=np.int64)


def _chirp(n, f0=0.002, f1=0.2):
    t = np.arange(n) / n
    phase = 2 * np.pi * n * (f0 * t + (f1 - f0) * t ** 4 / 4)
    amp = (0.2 + t ** 2) * np.exp(-(((t - 0.97) / 0.03) ** 2) * (t > 0.97))
    return amp * np.exp(1j * phase)


def test_walk_equals_the_step_by_step_walk_to_the_bit():
    h = _chirp(6000)
    phase = np.unwrap(np.angle(h)) + 1e-3 * np.sin(np.arange(h.size) / 50.0)
    for eps in (0.04, 0.02, 0.005):
        for walked in (None, phase):
            got, ref = C.walk_filters(h, eps, 0.99, 0.25, walked), _reference_walk(h, eps, 0.99, 0.25, walked)
            for u, v in zip(got, ref):
                assert u.dtype == v.dtype and np.array_equal(u, v)


def test_unwrap_is_numpys_to_the_bit():
    rng = np.random.default_rng(4)
    cases = [np.angle(np.exp(1j * np.cumsum(rng.uniform(-3.5, 3.5, 3000)))), rng.uniform(-20, 20, 500),
             np.array([0.0, np.pi, 0.0, -np.pi, 0.0, 2 * np.pi, -2 * np.pi, 3.0, -3.5]), np.array([1.0]), np.array([])]
    steps = np.angle(np.exp(1j * np.cumsum(rng.uniform(0, 0.6, 2000))))
    steps[::7], steps[3::11] = np.pi, -np.pi
    for p in cases + [steps]:
        assert np.array_equal(C._unwrap(p), np.unwrap(p))


def _full_correlation(r, t):
    """c[lag] = sum_n r[n + lag] conj(t[n]) for lag = -(N-1) .. r.size-1, directly."""
    c = np.correlate(np.concatenate([np.zeros(t.size - 1), r, np.zeros(t.size - 1)]), t, mode="valid")
    return c, np.arange(-(t.size - 1), r.size + t.size - 1)


@pytest.mark.parametrize("case", ["near", "late", "early", "two", "tail", "lead"])
def test_match_is_the_full_correlations_maximum(case):
    """Overlap, lag and autocorrelation window from the exact lags near the peak equal those of the
    full correlation; a peak outside them (by construction here) is found through the fallback."""
    rng = np.random.default_rng(5)
    h = _chirp(3000)
    target = C.Target(h, headroom=200 if case == "lead" else 0)
    ideal = np.conj(h[::-1])
    shift = {"near": 3, "late": 3 * h.size, "early": 0, "two": 0, "tail": 5, "lead": 200}[case]
    r = np.zeros(shift + ideal.size + (4 * h.size if case == "tail" else 0), complex)
    r[shift: shift + ideal.size] = ideal * (1 + 0.05 * rng.standard_normal(ideal.size))
    if case == "early":  # the response starts before the target: a negative lag far below the window
        r = np.concatenate([ideal[target.below + 500:], np.zeros(100)])
    if case == "two":  # a weaker copy at lag 0, the stronger one at a lag below the exact window
        r = 0.5 * r + np.concatenate([ideal[target.below + 10:], np.zeros(target.below + 10 + shift)])
    if case == "tail":  # a long weak decaying tail, as the filters' responses have
        r[shift + ideal.size:] = 1e-3 * np.exp(-np.arange(4 * h.size) / 2000.0)
    lags = 20
    ov, lag, window = target.match(r, lead=shift if case == "lead" else 0, lags=lags)
    c, lag_of = _full_correlation(r, target.values)
    k = int(np.argmax(np.abs(c)))
    ref_ov = np.abs(c[k]) / np.sqrt(np.sum(np.abs(r) ** 2) * target.power)
    assert lag == lag_of[k] - (shift if case == "lead" else 0)
    assert abs(ov - ref_ov) < 1e-12
    pick = np.clip(np.arange(k - lags, k + lags + 1), 0, c.size - 1)
    ref_window = np.where((np.arange(k - lags, k + lags + 1) >= 0) & (np.arange(k - lags, k + lags + 1) < c.size), c[pick], 0) / c[k]
    assert np.max(np.abs(window - ref_window)) < 1e-12
    assert np.allclose(C.autocorrelation(r, h, lags), window, atol=1e-12)


def test_damaged_bank_cache_entries_are_made_again(tmp_path, caplog):
    """A cached placement or built bank that cannot be read (a truncated file, rows that are not
    templates, rows that no longer match their SHA-256) is placed or built again with a warning,
    as a damaged checkpoint is rerun; it was a traceback, a refusal that --overwrite did not clear,
    or (rows of another shape) silently used."""
    import json

    from gwbatch.conditioning.psd import design
    from gwbatch.config import load_bank_config
    from gwbatch.spiir.cache import build_bank, placed_templates

    cfg = load_bank_config("configs/banks/bbh-small.yaml")
    psd = design("aLIGO", cfg.sample_rate)
    cache = tmp_path / "banks"
    templates = placed_templates(cfg, psd, cache)
    placement = next(cache.glob("*-placement-*.json"))
    good = json.loads(placement.read_text())
    moved = {**good, "templates": [[r[0] + 1.0, *r[1:]] for r in good["templates"]]}
    for damage in ("{", json.dumps({"templates": [[1, 2]]}), json.dumps(moved)):
        placement.write_text(damage)
        caplog.clear()
        with caplog.at_level("WARNING", logger="gwbatch"):
            assert placed_templates(cfg, psd, cache) == templates
        assert "is damaged" in caplog.text
    assert json.loads(placement.read_text()) == good  # written again
    bank, path = build_bank(cfg, psd, cache=cache, templates=templates[:3])
    path.write_bytes(path.read_bytes()[:5000])
    caplog.clear()
    with caplog.at_level("WARNING", logger="gwbatch"):
        again, where = build_bank(cfg, psd, cache=cache, templates=templates[:3])
    assert where == path and "cannot read bank" in caplog.text and "building it again" in caplog.text
    assert np.array_equal(again.a, bank.a) and np.array_equal(again.b, bank.b)
    import h5py

    from gwbatch.errors import DataError
    from gwbatch.io.banks import load_bank

    with h5py.File(path, "r+") as f:  # an attribute gone: one error, not a KeyError traceback
        del f.attrs["name"]
    with pytest.raises(DataError, match="cannot read bank .*KeyError"):
        load_bank(path)
