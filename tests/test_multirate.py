"""Multi-rate SPIIR (issue 25): the rate rule, the ladder's FIRs, the coefficient transform, the
filtering against the effective response, and BNS injections against the exact matched filter."""

from __future__ import annotations

import numpy as np
import pytest

from gwbatch.conditioning import condition
from gwbatch.conditioning.design import design_psd
from gwbatch.conditioning.psd import design
from gwbatch.config import BankConfig, ConditioningConfig
from gwbatch.simulate.noise import coloured_noise, colouring_filter
from gwbatch.spiir import multirate as mr
from gwbatch.spiir.bank import build_template, frequency_grid, pack
from gwbatch.spiir.construct import impulse_response, overlap, whitened_template
from gwbatch.spiir.filtering import filter_templates
from gwbatch.waveforms import Template, frequency_domain
from gwbatch.waveforms.taylorf2 import isco_frequency


def test_rate_rule_follows_the_frequency_and_stops_at_f_low():
    fs, f_low = 4096.0, 30.0
    freqs = np.array([0.2, 0.1, 0.05, 0.01, 30 / fs, 25 / fs])  # cycles per sample
    a = 0.999 * np.exp(2j * np.pi * freqs)
    # M = 2^-ceil(log2(2.6 f)): 0.52 -> 1; 0.26 -> 2; 0.13 -> 4; 0.026 -> 32; f_low 30 Hz -> 32 (cap)
    assert mr.filter_levels(a, fs, f_low).tolist() == [0, 1, 2, 5, 5, 5]
    assert mr.max_level(f_low, fs) == 5
    # every filter stays below 1/2.6 of its own rate
    assert np.all(mr.filter_frequency(a[:4]) * 2.0 ** mr.filter_levels(a[:4], fs, f_low) <= 1 / 2.6)


def test_ladder_keeps_the_passband_and_rejects_aliases():
    n = 1 << 14
    k = np.arange(n)
    inside = np.cos(2 * np.pi * 0.7 * 0.25 * k)  # 0.7 of the lower rate's Nyquist frequency
    down = mr.decimate2(inside)
    assert np.allclose(down[200:-200], inside[::2][200:-200], atol=2e-4)  # ripple 1e-4 (80 dB Kaiser)
    up = mr.interpolate2(down, n)
    assert np.allclose(up[400:-400], inside[400:-400], atol=3e-4)
    alias = np.cos(2 * np.pi * 1.25 * 0.25 * k)  # stopband (from 1.2 x the lower Nyquist): would alias in band
    assert np.max(np.abs(mr.decimate2(alias)[200:-200])) < 2e-4


@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32, np.complex64])
def test_polyphase_stages_equal_the_direct_convolution(dtype):
    """decimate2 and interpolate2 (the half-band FIR's nonzero taps only, polyphase) against a direct
    convolution with all of HALF_BAND, zeros beyond the ends: same shape and dtype, equal within
    1e-12 of the input's scale in float64 (the taps they skip are ~1e-17) and 1e-6 in float32;
    rows filtered alike; every output length, shorter and longer than the image."""
    rng = np.random.default_rng(7)
    h = mr.HALF_BAND
    tol = 1e-12 if dtype in (np.float64, np.complex128) else 1e-6
    for n in [1, 2, 5, 26, 27, 53, 54, 101, 1000]:
        x = rng.standard_normal((3, n))
        if np.iscomplexobj(np.zeros(1, dtype)):
            x = x + 1j * rng.standard_normal((3, n))
        x = x.astype(dtype)
        scale = np.max(np.abs(x))
        down = mr.decimate2(x)
        ref = np.stack([np.convolve(row.astype(np.complex128), h)[mr._CENTRE::2][: -(-n // 2)] for row in x])
        assert down.shape == (3, -(-n // 2)) and down.dtype == dtype
        assert np.max(np.abs(down - ref)) <= tol * scale
        assert np.array_equal(mr.decimate2(x[1]), down[1])
        for n_out in {0, 1, 2 * n - 1, 2 * n, 2 * n + mr.TAPS, 2 * n + 3 * mr.TAPS}:
            up = mr.interpolate2(x, n_out)
            zeros = np.zeros((3, 2 * n - 1), np.complex128)
            zeros[:, ::2] = x
            full = np.stack([np.convolve(row, 2.0 * h) for row in zeros])
            ref = np.zeros((3, n_out), np.complex128)
            m = min(n_out, full.shape[1] - mr._CENTRE)
            ref[:, :m] = full[:, mr._CENTRE: mr._CENTRE + m]
            assert up.shape == (3, n_out) and up.dtype == dtype
            assert np.max(np.abs(up - ref), initial=0.0) <= tol * scale
            assert np.array_equal(mr.interpolate2(x[2], n_out), up[2])


def test_effective_response_is_the_ladder_run_on_an_impulse():
    """effective_response (each rung's response copied at the ladder's nonzero samples) against the
    ladder run literally: the impulse down by decimate_ladder, each rung's filters applied by
    convolution with their impulse response, the sum up by accumulate_up; at the default start (one
    nonzero sample per rung) and at an odd one (several)."""
    from scipy.signal import fftconvolve

    rng = np.random.default_rng(8)
    freqs = np.array([0.2, 0.1, 0.06, 0.03, 0.012, 0.006])
    a = np.exp(-0.25 / rng.uniform(20, 200, freqs.size)) * np.exp(2j * np.pi * freqs)
    b = rng.standard_normal(freqs.size) + 1j * rng.standard_normal(freqs.size)
    d = np.sort(rng.integers(0, 3000, freqs.size))
    level = mr.filter_levels(a, 4096.0, 20.0)
    assert level.max() >= 3
    ra, rb, rd = mr.to_rate(a, b, d, level)
    for start in (None, mr.impulse_start(int(level.max())) + 8 * (1 << int(level.max())) + 5):
        r, at = mr.effective_response(ra, rb, rd, level, start=start)
        impulse = np.zeros(r.size)
        impulse[at] = 1.0
        xs = mr.decimate_ladder(impulse, int(level.max()))
        sets = {k: (impulse_response(ra[level == k], rb[level == k], rd[level == k]),) for k in np.unique(level).tolist()}
        ref = mr.accumulate_up(xs, sets, lambda x, resp: fftconvolve(x, resp)[: x.size])
        assert r.shape == ref.shape and r.dtype == np.complex128
        assert np.max(np.abs(r - ref)) <= 1e-12 * np.max(np.abs(ref))


def test_coefficient_transform_keeps_a_slow_filter():
    """One narrow-band filter moved down 3 rungs: its effective top-rate response still matches the
    original's.  Alone, a filter loses its sharp onset's broadband part (measured overlap 0.9988, best
    lag 2 samples: its start moves to the next multiple of M = 8, 5 samples later); in a template
    the neighbours' onsets cancel and the loss is ~0 (test_bns_injections_...)."""
    a = np.array([np.exp(-0.25 / 200) * np.exp(2j * np.pi * 0.02)])
    b, d = np.array([1.0 + 0.5j]), np.array([123])
    level = np.array([3], np.int8)
    r, start = mr.effective_response(*mr.to_rate(a, b, d, level), level)
    ref = impulse_response(a, b, d)
    ov, lag = overlap(r, np.concatenate([np.zeros(start), ref]))
    assert ov > 0.998 and abs(lag) <= 3, (ov, lag)
    # amplitude kept: energies within 1%
    assert abs(np.sum(np.abs(r) ** 2) / np.sum(np.abs(ref) ** 2) - 1) < 0.01


CFG_BNS = BankConfig(name="bns-mr", approximant="TaylorF2", mass1=[1.2, 2.0], mass2=[1.2, 2.0], f_low=40.0,
                     sample_rate=2048.0)


def test_multirate_filtering_is_the_effective_response():
    """The numba twin's multi-rate output for an impulse equals the response the bank was built on
    (at the ladder's phase 0, within float32's 1e-3 of the peak); at other phases of its period (16
    samples) the output differs pointwise by ~2% of the peak (the impulse's alias band meets the
    filters' tails) but keeps the overlap (measured >= 0.99996) and energy (within 1.5e-4)."""
    psd = design("aLIGO", CFG_BNS.sample_rate)
    t = Template(1.5, 1.3)
    bt = build_template(t, CFG_BNS, psd)
    bank = pack([bt], CFG_BNS, psd, [t])
    assert bank.levels == mr.max_level(40.0, 2048.0) == 4  # 2.6 x 40 / 2048 = 2^-4.3: rates 2048 ... 128 Hz
    r, start = mr.effective_response(bt.a, bt.b, bt.d, bt.level)
    for shift in (0, 1, 5, 11):
        x = np.zeros(r.size, np.float32)
        x[start + shift] = 1.0
        z = filter_templates(x, bank)[0][start + shift:]
        ref = r[start: r.size - shift]
        if shift == 0:
            assert np.max(np.abs(z - ref)) < 1e-3 * np.max(np.abs(ref))
        ov, lag = overlap(z.astype(np.complex128), ref)
        assert ov > 0.9999 and lag == 0, (shift, ov, lag)
        assert abs(np.sum(np.abs(z) ** 2) / np.sum(np.abs(ref) ** 2) - 1) < 5e-4
    # the bank's updates per sample: every rung counts 2^-level
    assert bank.updates_per_sample()[0] == pytest.approx(np.sum(2.0 ** -bt.level))
    # 302 filters at 86.4 updates a sample (the template's taper ends at 0.95 of Nyquist, 973 Hz:
    # cut by Nyquist instead, it took 2796 filters at 431 updates)
    assert bank.n_filters[0] / bank.updates_per_sample()[0] > 3.0


@pytest.mark.slow
@pytest.mark.parametrize("subbands", [False, True])
def test_bns_injections_match_the_exact_matched_filter(subbands):
    """50 BNS injections (1.2-2.0 Msun, TaylorF2 from 40 Hz) in aLIGO noise at 2048 Hz, each filtered by
    its own multi-rate template and by the exact FFT matched filter of the same whitened template.
    Issue 25: median SNR ratio within 3% of 1, peak times within 2 samples for >= 48 of 50.  The same
    at 4096 Hz with every template in sub-band channels (``spiir.subbands``, the tolerance at 0.002:
    their channels are 256 Hz at 4096 Hz; at 2048 Hz, 128 Hz channels lose 0.0014 of the overlap
    (median) and most templates would stay on the ladder)."""
    cfg = CFG_BNS
    if subbands:
        spiir = CFG_BNS.spiir.model_copy(update={"subbands": True, "multirate_tolerance": 0.002})
        cfg = CFG_BNS.model_copy(update={"spiir": spiir, "sample_rate": 4096.0})
    fs = int(cfg.sample_rate)
    rng = np.random.default_rng(25)
    n_inj, spacing = 50, 8 * fs
    templates = [Template(*sorted(rng.uniform(1.2, 2.0, 2), reverse=True)) for _ in range(n_inj)]
    psd = design("aLIGO", fs)
    built, whitened, signals = [], [], []
    for t in templates:
        gn, df = frequency_grid(t, cfg)
        f = np.arange(gn // 2 + 1) * df
        htilde = frequency_domain("TaylorF2", t, f.size, df, 37.0)
        hs = np.fft.irfft(htilde * fs, gn)
        hs = np.roll(hs, -int(np.argmax(np.abs(hs))) + gn - fs)  # merger 1 s before the buffer's end
        sigma = np.sqrt(4 * df * np.sum(np.abs(htilde[f >= 40]) ** 2 / psd(np.maximum(f[f >= 40], 1))))
        signals.append(hs * rng.uniform(10, 30) / sigma)
        whitened.append(whitened_template(htilde, psd(np.maximum(f, 1.0)), df, fs, 40.0,
                                          isco_frequency(t.mass1, t.mass2)))
        built.append(build_template(t, cfg, psd))
    assert sum(bt.subband for bt in built) == (n_inj if subbands else 0)
    longest = max(s.size for s in signals)
    n = longest + (n_inj + 2) * spacing
    strain = coloured_noise(3, 1, 0, n, colouring_filter(lambda f: design_psd("aLIGO", f), fs))
    mergers = []
    for i, hs in enumerate(signals):
        end = longest + (i + 1) * spacing
        strain[end - hs.size: end] += hs
        mergers.append(end - fs)
    cond = condition(strain, np.ones(n, bool), ConditioningConfig(filter_duration=4.0, psd={"segment": 8.0}).settings(), fs)
    x = cond.data.astype(np.float32)
    ratios, dt = [], []
    for t, bt, white, merger in zip(templates, built, whitened, mergers):
        h = white.h
        lo, hi = merger - h.size - 2 * fs, merger + 2 * fs  # the template's warm-up, the signal, the ladder's reach
        seg = x[lo:hi]
        z = filter_templates(seg, pack([bt], cfg, psd, [t]), origin=lo)[0]
        hn = h / np.sqrt(np.sum(np.abs(h) ** 2) / 2.0)
        m = 1 << int(np.ceil(np.log2(seg.size + hn.size)))
        rho = np.fft.ifft(np.fft.fft(seg, m) * np.conj(np.fft.fft(hn, m)))[: seg.size]
        win = slice(merger - lo - fs // 2, merger - lo + fs // 2)
        kz = win.start + int(np.argmax(np.abs(z[win])))
        start = merger - lo - white.merger - fs // 2  # rho is indexed by template start
        kr = start + int(np.argmax(np.abs(rho[start: start + fs])))
        ratios.append(np.abs(z[kz]) / np.abs(rho[kr]))
        dt.append((kz - bt.merger_delay) - (kr + white.merger))
    ratios, dt = np.array(ratios), np.array(dt)
    assert abs(np.median(ratios) - 1) <= 0.03, np.median(ratios)
    assert np.sum(np.abs(dt) <= 2) >= 48, dt


@pytest.mark.gpu
def test_cuda_multirate_matches_the_numba_twin():
    """The GPU path (CuPy's upfirdn between rungs, the CUDA kernel per rung) against the numba twin on
    whitened-like noise with a 3-template BNS bank: within the single-rate kernel's tolerance (1e-4 of
    the output's peak, benchmarks/RESULTS.md)."""
    import cupy

    psd = design("aLIGO", CFG_BNS.sample_rate)
    templates = [Template(1.5, 1.3), Template(2.0, 1.2), Template(1.25, 1.2)]
    bank = pack([build_template(t, CFG_BNS, psd) for t in templates], CFG_BNS, psd, templates)
    x = np.random.default_rng(4).standard_normal(1 << 17).astype(np.float32)
    ref = filter_templates(x, bank)
    z = cupy.asnumpy(filter_templates(cupy.asarray(x), bank))
    assert z.shape == ref.shape and z.dtype == np.complex64
    assert np.max(np.abs(z - ref)) < 1e-4 * np.max(np.abs(ref))


@pytest.mark.gpu
def test_cuda_multirate_bank_wide_layouts_match_the_numba_twin():
    """A bank of 600 templates (three BNS templates repeated), its rungs' filters packed by their
    count on each rung into several templates per warp: every row equals the twin's row of its
    template within 1e-4 of that row's peak."""
    import cupy

    from gwbatch.spiir import _cuda_multirate

    psd = design("aLIGO", CFG_BNS.sample_rate)
    templates = [Template(1.5, 1.3), Template(2.0, 1.2), Template(1.25, 1.2)]
    small = pack([build_template(t, CFG_BNS, psd) for t in templates], CFG_BNS, psd, templates)
    which = np.tile(np.arange(3), 200)
    bank = small.subset(which)
    layouts = {(launch.f, launch.w) for rung in _cuda_multirate.device_plan(bank) for launch in rung.launches}
    assert any(w < 32 for _, w in layouts), layouts
    x = np.random.default_rng(5).standard_normal(1 << 16).astype(np.float32)
    ref = filter_templates(x, small, origin=48)
    z = cupy.asnumpy(filter_templates(cupy.asarray(x), bank, origin=48))
    assert z.shape == (bank.size, x.size)
    err = np.abs(z - ref[which]).max(axis=1) / np.abs(ref[which]).max(axis=1)
    assert np.all(err < 1e-4), err.max()


@pytest.mark.gpu
def test_cuda_decimation_matches_the_ladder_stage():
    import cupy

    from gwbatch.spiir._cuda import decimate2 as decimate2_cuda

    for n in (4097, 4096, 33):
        x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        ref = mr.decimate2(x)
        got = decimate2_cuda(cupy.asarray(x)).get()
        assert got.shape == ref.shape
        assert np.max(np.abs(got - ref)) < 1e-6 * np.max(np.abs(ref))


def test_rung_templates_are_grouped_into_layouts_that_hold_them():
    """The grouping of a rung's templates by filter count: every template in exactly one group,
    each group's layout holding its largest count, one group for a uniform rung, and a rung of
    mostly one-filter templates not run in the layout its few widest templates need."""
    from gwbatch.spiir._cuda import LAYOUTS
    from gwbatch.spiir._cuda_multirate import LAYOUT_PS, cheapest_layout, group_by_layout

    assert set(LAYOUT_PS) == set(LAYOUTS)
    rng = np.random.default_rng(0)
    counts = np.concatenate([np.ones(900, int), rng.integers(2, 130, 124)])
    groups = group_by_layout(counts, 1 << 18)
    rows = np.concatenate([r for _, r in groups])
    assert np.array_equal(np.sort(rows), np.arange(counts.size))
    for (f, w), r in groups:
        assert f * w >= counts[r].max()
    (f, w), = [layout for layout, r in groups if np.any(counts[r] == 1)]
    assert f * w <= 2  # the one-filter templates share no layout with the wide ones
    assert [layout for layout, _ in group_by_layout(np.full(500, 20), 1 << 18)] == [cheapest_layout(20)]
    assert cheapest_layout(700) == (16, 32)  # beyond one warp: the widest, in parts


def test_half_band_is_scipys_kaiser_design_bit_for_bit():
    """The ladder's FIR, designed without scipy.signal (so the bank build does not import it), equals
    ``firwin(kaiserord(...))`` exactly: the filters and every multi-rate output stay as they were."""
    import math

    from scipy.signal import firwin, kaiserord

    numtaps, beta = kaiserord(mr.ATTENUATION_DB, 1.0 - mr.PASSBAND)
    numtaps = 4 * math.ceil((numtaps - 1) / 4) + 1
    np.testing.assert_array_equal(mr.HALF_BAND, firwin(numtaps, 0.5, window=("kaiser", beta)))
