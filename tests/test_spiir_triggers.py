"""SPIIR triggers: per-template window clustering, chunk independence, chi-squared, effective PSD."""

from __future__ import annotations

import numpy as np
import pytest

from gwbatch.conditioning.psd import PSD, design
from gwbatch.conditioning.whiten import effective_psd
from gwbatch.config import BankConfig
from gwbatch.spiir.bank import build_template, frequency_grid, pack
from gwbatch.spiir.construct import whitened_template
from gwbatch.spiir.triggers import find_triggers, window_peaks
from gwbatch.waveforms import Template, frequency_domain
from gwbatch.waveforms.taylorf2 import isco_frequency

FS = 2048
CFG = BankConfig(name="t", approximant="TaylorF2", mass1=[8, 25], mass2=[8, 25], f_low=30.0, sample_rate=FS)
TEMPLATES = [Template(10.0, 10.0), Template(14.0, 9.0), Template(20.0, 12.0), Template(24.0, 20.0)]


def test_window_peaks_keep_local_maxima_over_threshold():
    mag = np.zeros((2, 40), np.float32)
    mag[0, [3, 6, 17, 30]] = [6.0, 7.0, 9.0, 8.5]  # 3 < 6 (same window); 17 and 30 are 13 apart
    mag[1, [9, 11]] = [7.0, 7.0]  # a tie across a window edge goes to the earlier peak
    mag[1, 25] = 4.0  # under the threshold
    row, pos = window_peaks(mag, 5.0, 10)
    assert sorted(zip(row.tolist(), pos.tolist())) == [(0, 6), (0, 17), (0, 30), (1, 9)]
    row, pos = window_peaks(mag, 5.0, 12)  # neighbouring windows, but 17 and 30 are 13 > 12 samples apart
    assert (0, 30) in set(zip(row.tolist(), pos.tolist()))
    row, pos = window_peaks(mag, 5.0, 14)  # now they are: 30 (8.5) loses to 17 (9.0)
    assert (0, 30) not in set(zip(row.tolist(), pos.tolist())) and (0, 17) in set(zip(row.tolist(), pos.tolist()))


def test_window_peaks_do_not_depend_on_where_a_slice_starts():
    rng = np.random.default_rng(0)
    mag = np.abs(rng.normal(size=(3, 5000))).astype(np.float32) * 2.5
    w = 50
    row, pos = window_peaks(mag, 6.0, w)
    whole = {(r, p) for r, p in zip(row.tolist(), pos.tolist()) if 1000 <= p < 4000}
    lo = 737  # a slice starting mid-window, with a margin of two windows each side of [1000, 4000)
    row, pos = window_peaks(mag[:, lo:4200], 6.0, w, origin=lo)
    part = {(r, p + lo) for r, p in zip(row.tolist(), pos.tolist()) if 1000 <= p + lo < 4000}
    assert whole and part == whole


@pytest.mark.gpu
def test_window_maxima_from_the_complex_series_on_the_gpu_equal_the_twin():
    """The CUDA window maxima read ``z`` (strided rows) and the mask directly: every window's maximum
    equals the twin's on CuPy's ``|z|`` to the bit, its sample too wherever it is above zero (ties:
    the earlier), and the selected peaks are the same; against NumPy's ``|z|``, within an ulp."""
    import cupy

    from gwbatch.spiir._cuda_peaks import window_maxima_cuda
    from gwbatch.spiir.triggers import select_peaks, window_maxima

    rng = np.random.default_rng(3)
    n, window, origin = 20011, 97, 1234567
    z = (rng.normal(size=(5, n + 9)) + 1j * rng.normal(size=(5, n + 9))).astype(np.complex64)[:, 4:4 + n]
    z[1, 300] = z[1, 310] = 9.0 + 0j  # a tie inside a window
    z[2, 5000:5400] = 0  # windows with nothing above zero
    mask = np.ones(n, np.float32)
    mask[7000:7300] = 0
    zd, md = cupy.asarray(z), cupy.asarray(mask)
    want_v, want_p = (cupy.asnumpy(a) for a in window_maxima(cupy.abs(zd) * md[None, :], window, origin))
    got_v, got_p = (cupy.asnumpy(a) for a in window_maxima_cuda(zd, md, window, origin))
    np.testing.assert_array_equal(got_v, want_v)
    np.testing.assert_allclose(got_v, window_maxima(np.abs(z) * mask[None, :], window, origin)[0], rtol=2.5e-7)
    above = want_v > 0
    np.testing.assert_array_equal(got_p[above], want_p[above])
    for threshold in (3.0, 4.0):
        a = select_peaks(want_v, want_p, threshold, window, n)
        b = select_peaks(got_v, got_p, threshold, window, n)
        assert a[0].size > 10 and all(np.array_equal(u, v) for u, v in zip(a, b))


@pytest.fixture(scope="module")
def bank():
    psd = design("aLIGO", FS)
    return pack([build_template(t, CFG, psd) for t in TEMPLATES], CFG, psd, TEMPLATES), psd


def _injected(bank, psd, snr: float, merger: int, n: int, seed: int):
    """Unit white noise plus the whitened template 2 of the bank with optimal SNR ``snr``."""
    t = TEMPLATES[2]
    gn, df = frequency_grid(t, CFG)
    f = np.arange(gn // 2 + 1) * df
    white = whitened_template(frequency_domain("TaylorF2", t, f.size, df, 27.0), psd(np.maximum(f, 1.0)), df, FS,
                              30.0, isco_frequency(t.mass1, t.mass2))
    h = white.h
    s = np.real(h) * snr / np.sqrt(np.sum(np.real(h) ** 2))
    x = np.random.default_rng(seed).normal(size=n)
    peak = white.merger
    x[merger - peak : merger - peak + s.size] += s
    return x.astype(np.float32)


def test_chunked_triggers_equal_whole_stream(bank):
    """Filtering a stream in two chunks, each with the search's halo, gives the whole stream's triggers."""
    fb, psd = bank
    n = 40 * FS
    merger = 21 * FS + 37  # just after the chunk boundary: its inspiral lies in the first chunk
    x = _injected(fb, psd, 14.0, merger, n, seed=5)
    valid = np.ones(n, bool)
    window, lags = int(0.1 * FS), fb.autocorr.shape[1] // 2
    kw = dict(threshold=4.0, cluster_window=window)  # low, so noise triggers are compared too
    whole = find_triggers(x, valid, fb, **kw)
    before = int(max(fb.length)) + 2 * FS + window  # longest template, filter memory, a window
    after = window + lags + 1
    parts = []
    for own0, own1 in [(0, 20 * FS), (20 * FS, n)]:
        r0, r1 = max(0, own0 - before), min(n, own1 + after)
        tr = find_triggers(x[r0:r1], valid[r0:r1], fb, own=(own0 - r0, own1 - r0), origin=r0, **kw)
        parts.append((r0, tr))
    peak = np.concatenate([tr.peak + r0 for r0, tr in parts])
    tmpl = np.concatenate([tr.template for _, tr in parts])
    snr = np.concatenate([tr.snr for _, tr in parts])
    chisq = np.concatenate([tr.chisq for _, tr in parts])
    assert whole.peak.size > 10
    key_w = np.lexsort((whole.peak, whole.template))
    key_c = np.lexsort((peak, tmpl))
    np.testing.assert_array_equal(peak[key_c], whole.peak[key_w])
    np.testing.assert_array_equal(tmpl[key_c], whole.template[key_w])
    np.testing.assert_allclose(snr[key_c], whole.snr[key_w], rtol=1e-4)
    np.testing.assert_allclose(chisq[key_c], whole.chisq[key_w], rtol=1e-3, atol=1e-4)
    # the injection: its own template is the loudest, at the merger (within 2 samples), SNR ~14,
    # with a chi-squared near its noise mean of 1
    loud = np.argmax(whole.snr)
    assert whole.template[loud] == 2
    assert abs(whole.merger[loud] - merger) <= 2
    assert 12.0 < whole.snr[loud] < 16.0
    assert 0.2 < whole.chisq[loud] < 3.0  # one draw of a statistic with mean 1 and few effective dof (0.37)


def test_noise_chisq_has_unit_mean(bank):
    """In Gaussian noise the reduced autocorrelation chi-squared of triggers averages ~1."""
    fb, _ = bank
    x = np.random.default_rng(9).normal(size=60 * FS).astype(np.float32)
    tr = find_triggers(x, np.ones(x.size, bool), fb, threshold=3.0, cluster_window=int(0.1 * FS))
    ok = np.isfinite(tr.chisq)
    assert ok.sum() > 200
    assert 0.85 < np.mean(tr.chisq[ok]) < 1.15, np.mean(tr.chisq[ok])  # measured 0.93 over 478 triggers


def test_effective_psd_of_a_smooth_curve_and_of_a_line():
    """A smooth PSD survives 2 s truncation within 1%; a narrow line comes out wider and shallower
    (measured: a 1e4 x line of 0.14 Hz becomes a 1.3 x bump some 1.2 Hz wide)."""
    smooth = design("aLIGO", FS)
    eff = effective_psd(smooth, FS, 2 * FS, 15.0, None)
    f = np.linspace(25.0, 900.0, 400)
    np.testing.assert_allclose(eff(f) / smooth(f), 1.0, rtol=0.01)
    grid = np.arange(1, 8 * 1024 + 1) / 8.0
    values = smooth(grid) * (1.0 + 1e4 * (np.abs(grid - 60.0) < 0.07))
    eff = effective_psd(PSD(grid, values, "line"), FS, 2 * FS, 15.0, None)
    assert eff(np.array([60.0]))[0] < 1e-3 * values[grid == 60.0][0]
    assert eff(np.array([60.4]))[0] > 1.05 * smooth(np.array([60.4]))[0]


def test_a_bank_makes_each_batch_once(bank):
    """The search's batches of templates are made once per bank object: the same object (with its
    digest and GPU plan) chunk after chunk, equal to the subset."""
    b, _ = bank
    part = b.batch(1, 3)
    assert part is b.batch(1, 3) and part.size == 2 and b.batch(0, 2) is not part
    same = b.subset(np.arange(1, 3))
    np.testing.assert_array_equal(part.a, same.a)
    assert part.filters_digest == same.filters_digest and part.mass1.tolist() == b.mass1[1:3].tolist()
