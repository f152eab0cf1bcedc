"""Simulated data: deterministic, independent of how it is split, coloured by the design PSD."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from gwbatch.conditioning.design import design_psd
from gwbatch.conditioning.psd import welch_median
from gwbatch.errors import ConfigError
from gwbatch.io.store import open_store, read_injections, read_meta, read_strain
from gwbatch.simulate import simulate_store
from gwbatch.simulate.injections import (
    InjectionSpec,
    energy_fwhm,
    optimal_snr,
    waveform,
)
from gwbatch.simulate.noise import coloured_noise, colouring_filter


def digest(path) -> str:
    data = read_strain(open_store(path), read_meta(path).ifos, 0, read_meta(path).n_samples)
    return hashlib.sha256(data.tobytes()).hexdigest()


def test_same_seed_same_bytes(tmp_path):
    kw = dict(ifos=("H1", "V1"), duration=32, sample_rate=512, injections=InjectionSpec(count=3, margin=4, min_spacing=1))
    a = simulate_store(tmp_path / "a.zarr", seed=5, **kw)
    b = simulate_store(tmp_path / "b.zarr", seed=5, **kw)
    c = simulate_store(tmp_path / "c.zarr", seed=6, **kw)
    assert digest(a) == digest(b) != digest(c)
    assert read_injections(a).equals(read_injections(b))


def test_chunking_does_not_change_the_data(tmp_path):
    kw = dict(ifos=("H1",), duration=64, sample_rate=512, seed=2)
    a = simulate_store(tmp_path / "a.zarr", chunk_samples=4096, **kw)
    b = simulate_store(tmp_path / "b.zarr", chunk_samples=32768, **kw)
    xa = read_strain(open_store(a), ["H1"], 0, 32768)[0]
    xb = read_strain(open_store(b), ["H1"], 0, 32768)[0]
    np.testing.assert_allclose(xa, xb, rtol=0, atol=1e-6 * np.abs(xa).max())


def test_detector_stream_independent_of_others(tmp_path):
    one = simulate_store(tmp_path / "a.zarr", ifos=("L1",), duration=8, sample_rate=256, seed=1)
    two = simulate_store(tmp_path / "b.zarr", ifos=("H1", "L1"), duration=8, sample_rate=256, seed=1)
    np.testing.assert_array_equal(read_strain(open_store(one), ["L1"], 0, 2048), read_strain(open_store(two), ["L1"], 0, 2048))


@pytest.mark.parametrize("model,ifo", [("aLIGO", "H1"), ("AdVirgo", "V1")])
def test_noise_has_the_design_psd(model, ifo):
    fs = 2048
    taps = colouring_filter(lambda f: design_psd(model, f), fs)
    x = coloured_noise(11, 3, 0, 256 * fs, taps)
    f, psd, n = welch_median(x, np.ones(x.size, bool), fs, 4.0)
    band = (f >= 20) & (f <= 900)
    ratio = psd[band] / design_psd(model, f[band])
    # 127 segments: the median of the ratio is within 3% of 1 and 95% of bins within 30%.
    assert abs(np.median(ratio) - 1) < 0.03
    assert np.mean(np.abs(ratio - 1) < 0.3) > 0.95


def test_design_psd_values():
    # Values of LALSimulation's aLIGOZeroDetHighPower and AdvVirgo (Manzotti & Dietz 2012) curves.
    asd = np.sqrt(design_psd("aLIGO", np.array([215.0, 1000.0])))
    np.testing.assert_allclose(asd, [3.6179e-24, 5.2264e-24], rtol=1e-4)
    assert np.sqrt(design_psd("AdVirgo", np.array([300.0])))[0] == pytest.approx(1.259e-24 * (
        0.07 * np.exp(-0.142) + 3.1 * np.exp(-0.466) + 0.4 * np.exp(-0.304) + 0.09 * np.exp(1.466)))
    with pytest.raises(ConfigError, match="known: aLIGO, AdVirgo, KAGRA"):
        design_psd("LIGO-X", np.array([100.0]))


def test_optimal_snr_white_noise_analytic():
    # White one-sided PSD S0: rho^2 = (2 / S0) * integral h^2 dt.
    fs, s0 = 4096.0, 2.0e-3
    t = (np.arange(8192) - 4096) / fs
    h = waveform("sine-gaussian", t, f0=300.0, q=9.0)
    analytic = np.sqrt(2.0 / s0 * np.sum(h**2) / fs)
    assert optimal_snr(h, fs, lambda f: np.full_like(f, s0), f_low=0.0) == pytest.approx(analytic, rel=1e-3)


def test_energy_fwhm():
    sigma = 1e-3
    t = np.linspace(-5e-3, 5e-3, 200001)
    e = waveform("gaussian", t, sigma=sigma) ** 2
    above = t[e >= 0.5]
    assert energy_fwhm("gaussian", sigma=sigma) == pytest.approx(above[-1] - above[0], rel=1e-3)


def test_injections_listed_with_requested_snr(tmp_path):
    path = simulate_store(tmp_path / "s.zarr", ifos=("H1", "L1"), duration=64, sample_rate=1024, seed=4,
                          injections=InjectionSpec(count=5, snr=(10, 20), margin=4))
    inj = read_injections(path)
    assert len(inj) == 5 and set(inj["waveform"]) <= {"gaussian", "sine-gaussian"}
    assert ((inj["snr"] >= 10) & (inj["snr"] <= 20)).all()
    np.testing.assert_allclose(inj["snr_H1"], inj["snr"])
    # Arrival times differ by at most the H1-L1 light travel time (10.0 ms).
    assert (np.abs(inj["time_H1"] - inj["time_L1"]) <= 0.01002).all()


def test_simulate_refuses_bad_arguments(tmp_path):
    with pytest.raises(ConfigError, match="--duration must be positive"):
        simulate_store(tmp_path / "x.zarr", ifos=("H1",), duration=-1, sample_rate=512, seed=0)
    with pytest.raises(ConfigError, match="no design noise curve for detector 'G1'"):
        simulate_store(tmp_path / "x.zarr", ifos=("G1",), duration=1, sample_rate=512, seed=0)
    with pytest.raises(ConfigError, match="do not fit"):
        simulate_store(tmp_path / "x.zarr", ifos=("H1",), duration=20, sample_rate=512, seed=0,
                       injections=InjectionSpec(count=50))
    with pytest.raises(ConfigError, match="unknown injection waveform"):
        InjectionSpec(count=1, waveforms=("chirp",))
    from gwbatch.simulate.cbc import CbcSpec

    with pytest.raises(ConfigError, match="CBC injection snr range"):
        CbcSpec(count=1, snr=(30.0, 8.0))
    with pytest.raises(ConfigError, match="f_low must exceed"):
        CbcSpec(count=1, f_low=2.0)
    with pytest.raises(ConfigError, match="CBC injections do not fit"):
        simulate_store(tmp_path / "x.zarr", ifos=("H1",), duration=64, sample_rate=512, seed=0, cbc=CbcSpec(count=10))
    with pytest.raises(ConfigError, match="unknown approximant 'Nope'"):
        simulate_store(tmp_path / "x.zarr", ifos=("H1",), duration=200, sample_rate=512, seed=0,
                       cbc=CbcSpec(count=1, approximant="Nope", mass1=(10, 12), mass2=(10, 12)))
    with pytest.raises(ConfigError, match="distance range must satisfy 0 < min < max <= 100000 \\(Mpc\\), got 400.0, 100.0"):
        CbcSpec(count=1, distance=(400.0, 100.0))
    from gwbatch.simulate.glitches import GlitchSpec

    with pytest.raises(ConfigError, match="--glitch-rate must be a number of glitches per second in \\[0, 10\\], got inf"):
        GlitchSpec(rate=float("inf"))
    with pytest.raises(ConfigError, match="unknown glitch kind"):
        GlitchSpec(rate=0.1, kinds=("koi-fish",))
    assert not (tmp_path / "x.zarr").exists()  # refused before anything was written


def test_cbc_injections_projected_at_the_requested_network_snr(tmp_path):
    """Binaries are added to the noise exactly (store minus the noise-only store), each detector's
    optimal SNR of what was added is the listed one, the network SNR is the drawn one, and each
    chirp ends at its listed arrival time."""
    from gwbatch.detectors import antenna_pattern, time_delay_from_earth_center
    from gwbatch.simulate.cbc import CbcSpec, cbc_strain

    ifos, fs = ("H1", "L1", "V1"), 2048
    spec = CbcSpec(count=3, mass1=(10.0, 14.0), mass2=(10.0, 14.0), snr=(10.0, 20.0), f_low=30.0, min_spacing=8.0)
    both = simulate_store(tmp_path / "cbc.zarr", ifos=ifos, duration=64, sample_rate=fs, seed=4, cbc=spec,
                          chunk_samples=1 << 14)
    noise = simulate_store(tmp_path / "noise.zarr", ifos=ifos, duration=64, sample_rate=fs, seed=4)
    meta = read_meta(both)
    stored = read_strain(open_store(both), ifos, 0, meta.n_samples).astype(np.float64)
    added = stored - read_strain(open_store(noise), ifos, 0, meta.n_samples)
    inj = read_injections(both)
    assert len(inj) == 3 and (inj["waveform"] == "cbc").all()
    np.testing.assert_allclose(np.sqrt(sum(inj[f"snr_{i}"] ** 2 for i in ifos)), inj["snr"], rtol=1e-9)
    assert ((inj["snr"] >= 10) & (inj["snr"] <= 20)).all() and (inj["distance"] > 0).all()
    expected = np.zeros_like(added)
    for row in inj.to_dict("records"):
        for j, ifo in enumerate(ifos):
            first, x = cbc_strain(row, ifo, float(meta.t0), fs)
            lo, hi = max(first, 0), min(first + x.size, meta.n_samples)
            expected[j, lo:hi] += x[lo - first : hi - first]
            # optimal SNR of the added chirp against the design PSD, from f_low (float32 storage: 1e-6)
            seg = np.zeros(1 << 16)
            seg[: hi - lo] = added[j, lo:hi]
            f = np.fft.rfftfreq(seg.size, 1 / fs)
            band = (f >= 30.0) & (f < fs / 2)
            h = np.fft.rfft(seg)[band] / fs
            rho = np.sqrt(4 * (f[1] - f[0]) * np.sum(np.abs(h) ** 2 / design_psd("aLIGO" if ifo != "V1" else "AdVirgo", f[band])))
            assert rho == pytest.approx(row[f"snr_{ifo}"], rel=0.01)
            # the chirp's amplitude peaks at its listed merger time
            from scipy.signal import hilbert

            peak = (lo + int(np.argmax(np.abs(hilbert(added[j, lo:hi]))))) / fs + float(meta.t0)
            assert abs(peak - row[f"time_{ifo}"]) <= 1.0 / fs
            delay = time_delay_from_earth_center(ifo, row["ra"], row["dec"], row["gps_time"])
            assert row[f"time_{ifo}"] - row["gps_time"] == pytest.approx(delay, abs=2.5e-7)  # float64 GPS
        # SNR ratios between detectors follow the antenna patterns (same PSD for H1 and L1)
        resp = []
        for ifo in ("H1", "L1"):
            fp, fc = antenna_pattern(ifo, row["ra"], row["dec"], row["polarization"], row["gps_time"])
            ci = np.cos(row["inclination"])
            resp.append(abs(fp * (1 + ci * ci) / 2 - 1j * fc * ci))
        assert row["snr_H1"] / row["snr_L1"] == pytest.approx(resp[0] / resp[1], rel=1e-6)
    np.testing.assert_allclose(added, expected, atol=2e-7 * np.abs(stored).max())  # float32 storage
    assert digest(both) == digest(simulate_store(tmp_path / "again.zarr", ifos=ifos, duration=64, sample_rate=fs,
                                                 seed=4, cbc=spec))


def test_glitches_are_single_detector_transients_at_their_snr(tmp_path):
    """With glitches, each detector's data is its glitch-free noise plus its own glitches only, each
    at its drawn optimal SNR (1%), and the counts follow the rate (Poisson, 4 sigma)."""
    from gwbatch.simulate.glitches import GlitchSpec, draw_glitches
    from gwbatch.simulate.injections import optimal_snr

    fs, duration, rate = 2048, 400, 0.05
    kw = dict(ifos=("H1", "L1"), duration=duration, sample_rate=fs, seed=4)
    spec = GlitchSpec(rate=rate)
    clean = simulate_store(tmp_path / "clean.zarr", **kw)
    glitchy = simulate_store(tmp_path / "glitchy.zarr", glitches=spec, **kw)
    meta = read_meta(glitchy)
    assert meta.provenance["glitch_spec"]["rate"] == rate
    n = duration * fs
    added = read_strain(open_store(glitchy), ["H1", "L1"], 0, n) - read_strain(open_store(clean), ["H1", "L1"], 0, n)
    table = draw_glitches(spec, seed=4, start=float(meta.t0), duration=duration, sample_rate=fs, ifos=("H1", "L1"),
                          psds={ifo: (lambda f: design_psd("aLIGO", f)) for ifo in ("H1", "L1")})
    assert set(table["kind"]) == {"blip", "sine-gaussian"}
    assert meta.provenance["glitches"] == {ifo: int((table["ifo"] == ifo).sum()) for ifo in ("H1", "L1")}
    for j, ifo in enumerate(("H1", "L1")):
        mine = table[table["ifo"] == ifo]
        assert abs(len(mine) - rate * duration) <= 4 * np.sqrt(rate * duration)
        touched = np.zeros(n, bool)
        for row in mine.itertuples():
            centre = int(round((row.gps_time - float(meta.t0)) * fs))
            lo, hi = max(centre - fs // 2, 0), min(centre + fs // 2, n)
            touched[lo:hi] = True
            isolated = ((mine["gps_time"] - row.gps_time).abs() > 1.0).sum() == len(mine) - 1
            if isolated and fs // 2 <= centre < n - fs // 2:
                segment = np.zeros(2 * fs)
                segment[: hi - lo] = added[j, lo:hi]
                rho = optimal_snr(segment, fs, lambda f: design_psd("aLIGO", f), spec.f_low)
                assert rho == pytest.approx(row.snr, rel=0.01)
        assert np.all(added[j, ~touched] == 0)  # nothing outside this detector's glitches
