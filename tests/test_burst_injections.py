"""Astrophysical burst injections: hrss normalisation, antenna projection and arrival time,
listed SNRs, WNB band, determinism, refusals, and the store's injection table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.signal import hilbert

from gwbatch.conditioning.design import design_psd
from gwbatch.detectors import antenna_pattern, time_delay_from_earth_center
from gwbatch.errors import ConfigError
from gwbatch.io.store import open_store, read_injections, read_meta, read_strain
from gwbatch.simulate import bursts as bursts_module
from gwbatch.simulate import simulate_store
from gwbatch.simulate.bursts import (
    TABLE_WAVEFORMS,
    BurstSpec,
    add_bursts,
    burst_polarisations,
    burst_strain,
    draw_burst_injections,
)
from gwbatch.simulate.injections import InjectionSpec, add_injections

IFOS, FS, T0, SPAN = ("H1", "L1", "V1"), 2048.0, 1_000_000_000.0, 64.0
MODELS = {"H1": "aLIGO", "L1": "aLIGO", "V1": "AdVirgo"}
PSDS = {ifo: (lambda f, m=MODELS[ifo]: design_psd(m, f)) for ifo in IFOS}


def delay(ifo, ra, dec, gps):
    return float(time_delay_from_earth_center(ifo, ra, dec, gps))


def draw(spec: BurstSpec, seed: int = 7, duration: float = SPAN) -> pd.DataFrame:
    return draw_burst_injections(spec, seed=seed, start=T0, duration=duration, sample_rate=FS, ifos=IFOS,
                                 psds=PSDS, delay=delay)


def injected(row: dict, ifo: str, n: int = int(SPAN * FS)) -> np.ndarray:
    """The burst added alone into ``n`` zero samples starting at T0."""
    data = np.zeros(n)
    add_bursts(data, 0, T0, FS, ifo, row)
    return data


def snr_of(data: np.ndarray, ifo: str, f_low: float = 20.0) -> float:
    f = np.fft.rfftfreq(data.size, 1 / FS)
    band = (f >= f_low) & (f < FS / 2)
    h = np.fft.rfft(data)[band] / FS
    return float(np.sqrt(4 * (f[1] - f[0]) * np.sum(np.abs(h) ** 2 / PSDS[ifo](f[band]))))


def test_hrss_of_both_waveforms_is_the_drawn_one():
    """sqrt(int h+^2 + hx^2 dt) of the sampled polarisations is the listed hrss within 1 %
    (sine-Gaussians are normalised analytically, so this checks the waveform against the formula)."""
    table = draw(BurstSpec(count=30, margin=1.0, min_spacing=1.0), duration=40.0)
    assert set(table["waveform"]) == set(TABLE_WAVEFORMS)
    for row in table.to_dict("records"):
        hp, hc = burst_polarisations(row, FS)
        hrss = np.sqrt(np.sum(hp**2 + hc**2) / FS)
        assert hrss == pytest.approx(row["hrss"], rel=0.01)
        assert 5e-23 <= row["hrss"] <= 1e-21
        if row["waveform"] == "sg-burst":
            assert row["f0"] in (70.0, 235.0, 554.0) and row["q"] in (3.0, 9.0) and row["frequency"] == row["f0"]
        else:
            assert np.isnan(row["f0"]) and row["bandwidth"] == 100.0 and row["frequency"] in (150.0, 300.0)
            assert abs(np.corrcoef(hp, hc)[0, 1]) < 0.9  # independent noise in each polarisation
        assert row["duration"] >= 0.1


def test_strain_is_the_antenna_projection_at_the_arrival_time():
    """The added strain is F+ h+ + Fx hx of the analytic elliptical sine-Gaussian evaluated at the
    detector's arrival time (within 1e-3 of its peak), and its envelope peaks within one sample of it."""
    table = draw(BurstSpec(count=6, waveforms=("sine-gaussian",), margin=4.0, min_spacing=8.0), duration=64.0)
    for row in table.to_dict("records"):
        tau = row["q"] / (np.sqrt(2) * np.pi * row["f0"])
        fine = np.arange(-20 * tau, 20 * tau, 1e-6)
        ci = np.cos(row["inclination"])
        unit_p = (1 + ci * ci) / 2 * np.exp(-(fine / tau) ** 2) * np.cos(2 * np.pi * row["f0"] * fine + row["phase"])
        unit_c = ci * np.exp(-(fine / tau) ** 2) * np.sin(2 * np.pi * row["f0"] * fine + row["phase"])
        amp = row["hrss"] / np.sqrt(np.sum(unit_p**2 + unit_c**2) * 1e-6)  # independent numerical normalisation
        for ifo in IFOS:
            data = injected(row, ifo)
            assert row[f"time_{ifo}"] - row["gps_time"] == pytest.approx(
                delay(ifo, row["ra"], row["dec"], row["gps_time"]), abs=2.5e-7)  # float64 GPS
            t = T0 + np.arange(data.size) / FS - row[f"time_{ifo}"]
            fp, fc = antenna_pattern(ifo, row["ra"], row["dec"], row["polarization"], row["gps_time"])
            env = amp * np.exp(-(t / tau) ** 2)
            arg = 2 * np.pi * row["f0"] * t + row["phase"]
            expected = fp * env * (1 + ci * ci) / 2 * np.cos(arg) + fc * env * ci * np.sin(arg)
            np.testing.assert_allclose(data, expected, rtol=0, atol=1e-3 * np.abs(expected).max())
            peak = T0 + np.argmax(np.abs(hilbert(data))) / FS
            assert abs(peak - row[f"time_{ifo}"]) <= 1 / FS


def test_listed_snr_is_that_of_the_added_strain():
    """snr_<ifo> agrees within 2 % with a direct FFT of the 64 s series holding only the burst,
    against the design PSD from 20 Hz; snr is the network sum in quadrature."""
    table = draw(BurstSpec(count=5, margin=4.0, min_spacing=8.0), seed=3)
    assert set(table["waveform"]) == set(TABLE_WAVEFORMS)
    for row in table.to_dict("records"):
        for ifo in IFOS:
            assert snr_of(injected(row, ifo), ifo) == pytest.approx(row[f"snr_{ifo}"], rel=0.02)
        assert np.sqrt(sum(row[f"snr_{i}"] ** 2 for i in IFOS)) == pytest.approx(row["snr"], rel=1e-12)


def test_wnb_energy_lies_in_its_band():
    """More than 99 % of sum |h~|^2 of the added WNB (64 s FFT) lies in [f_lo, f_lo + bandwidth]."""
    spec = BurstSpec(count=4, waveforms=("white-noise-burst",), wnb=((100.0, 100.0, 0.1), (250.0, 50.0, 0.2)),
                     margin=4.0, min_spacing=8.0)
    table = draw(spec)
    assert set(table["bandwidth"]) == {100.0, 50.0}
    for row in table.to_dict("records"):
        lo = row["frequency"] - row["bandwidth"] / 2
        data = injected(row, "H1")
        power = np.abs(np.fft.rfft(data)) ** 2
        f = np.fft.rfftfreq(data.size, 1 / FS)
        assert power[(f >= lo) & (f <= lo + row["bandwidth"])].sum() > 0.99 * power.sum()
        # the energy is concentrated about the arrival time (99 % of the envelope's expected energy
        # lies within +-duration; one noise realisation: at least 95 %)
        t = T0 + np.arange(data.size) / FS - row["time_H1"]
        assert np.sum(data[np.abs(t) <= row["duration"]] ** 2) > 0.95 * np.sum(data**2)
        # sub-sample arrival: the energy centroid (exact on the samples, |h|^2 being band-limited
        # below fs/2) is moved from the buffer's centre to time_H1 within 1e-3 sample
        fp, fc = antenna_pattern("H1", row["ra"], row["dec"], row["polarization"], row["gps_time"])
        hp, hc = burst_polarisations(row, FS)
        x = fp * hp + fc * hc
        centre = np.sum((np.arange(x.size) - x.size // 2) * x**2) / np.sum(x**2) / FS
        assert np.sum(t * data**2) / np.sum(data**2) == pytest.approx(centre, abs=1e-3 / FS)


def test_same_seed_same_table_and_strain():
    spec = BurstSpec(count=4, margin=4.0, min_spacing=8.0)
    a, b, c = draw(spec, seed=11), draw(spec, seed=11), draw(spec, seed=12)
    pd.testing.assert_frame_equal(a, b)
    assert not a["gps_time"].equals(c["gps_time"])
    first = [injected(r, "L1") for r in a.to_dict("records")]
    bursts_module._polarisations_cached.cache_clear()
    bursts_module._strain_cached.cache_clear()
    again = [injected(r, "L1") for r in b.to_dict("records")]
    for x, y in zip(first, again):
        np.testing.assert_array_equal(x, y)
    # the WNB noise is the row's own: the same row drawn with another seed has other noise
    row = next(r for r in a.to_dict("records") if r["waveform"] == "wnb")
    other = dict(row, seed=12)
    assert abs(np.corrcoef(burst_polarisations(row, FS)[0], burst_polarisations(other, FS)[0])[0, 1]) < 0.9


@pytest.mark.parametrize("kwargs,message", [
    (dict(hrss=(0.0, 1e-21)), "hrss range must satisfy 0 < min <= max <= 1e-15, got 0.0, 1e-21"),
    (dict(hrss=(1e-21, 1e-22)), "got 1e-21, 1e-22"),
    (dict(waveforms=("chirp",)), r"unknown burst injection waveform\(s\) \['chirp'\]"),
    (dict(f0=(70.0, -235.0)), r"f0 must be one or more values in \(0, 1e\+06\], got \[70.0, -235.0\]"),
    (dict(q=()), r"q must be one or more values in \(0, 1000\], got \[\]"),
    (dict(wnb=((100.0, -5.0, 0.1),)), r"\(100.0, -5.0, 0.1\)"),
    (dict(count=-1), "count must be >= 0, got -1"),
    (dict(f_low=0.0), "f_low must be positive, got 0.0"),
])
def test_bad_spec_values_are_refused(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        BurstSpec(**{"count": 1, **kwargs})


def test_draw_refuses_what_cannot_be_sampled_or_placed():
    with pytest.raises(ConfigError, match="f0 554 Hz is not below the Nyquist frequency 512 Hz"):
        draw_burst_injections(BurstSpec(count=1), seed=0, start=T0, duration=SPAN, sample_rate=1024.0,
                              ifos=IFOS, psds=PSDS, delay=delay)
    with pytest.raises(ConfigError, match="WNB band up to 350 Hz exceeds the Nyquist frequency 256 Hz"):
        draw_burst_injections(BurstSpec(count=1, waveforms=("white-noise-burst",)), seed=0, start=T0,
                              duration=SPAN, sample_rate=512.0, ifos=IFOS, psds=PSDS, delay=delay)
    with pytest.raises(ConfigError, match="10 burst injections do not fit in 64.0 s"):
        draw(BurstSpec(count=10))


def test_cli_refuses_bad_burst_options(tmp_path, capsys):
    from workflow.cli import main

    base = ["simulate", "--ifos", "H1,L1", "--duration", "64", "--sample-rate", "2048", "--seed", "1",
            "--out", str(tmp_path / "x.zarr"), "--burst-injections", "2"]
    assert main([*base, "--burst-hrss", "0,1"]) == 2
    assert "burst injection hrss range must satisfy 0 < min <= max <= 1e-15, got 0.0, 1.0" in capsys.readouterr().err
    assert main([*base, "--burst-f0", "70,abc"]) == 2
    assert "--burst-f0 expects comma-separated numbers, got '70,abc'" in capsys.readouterr().err
    assert main([*base, "--burst-waveforms", "sine-gaussian,ringdown"]) == 2
    assert "['ringdown']" in capsys.readouterr().err
    assert not (tmp_path / "x.zarr").exists()


def test_simulate_store_writes_bursts_after_the_other_injections(tmp_path):
    """Bursts get the ids after the transients, are listed in the store's injection table with
    their drawn values, and the store holds noise + transients + exactly the listed bursts."""
    kw = dict(ifos=IFOS, duration=SPAN, sample_rate=FS, seed=5)
    transients = InjectionSpec(count=2, margin=4.0, min_spacing=1.0)
    spec = BurstSpec(count=2)
    path = simulate_store(tmp_path / "b.zarr", injections=transients, bursts=spec, chunk_samples=1 << 15, **kw)
    noise = simulate_store(tmp_path / "n.zarr", **kw)
    inj = read_injections(path)
    assert list(inj["id"]) == [0, 1, 2, 3]
    burst_rows = inj[inj["waveform"].isin(TABLE_WAVEFORMS)]
    assert list(burst_rows["id"]) == [2, 3]
    listed = draw_burst_injections(spec, seed=5, start=T0, duration=SPAN, sample_rate=FS, ifos=IFOS, psds=PSDS,
                                   delay=delay, first_id=2)
    pd.testing.assert_frame_equal(burst_rows[listed.columns].reset_index(drop=True), listed, check_dtype=False)
    assert read_meta(path).provenance["burst_injection_spec"]["count"] == 2
    n = read_meta(path).n_samples
    added = read_strain(open_store(path), IFOS, 0, n).astype(np.float64) - read_strain(open_store(noise), IFOS, 0, n)
    for j, ifo in enumerate(IFOS):
        expected = np.zeros(n)
        add_injections(expected, 0, T0, FS, ifo, inj[~inj["waveform"].isin(TABLE_WAVEFORMS)])
        for row in burst_rows.to_dict("records"):
            first, x = burst_strain(row, ifo, T0, FS)
            expected[first : first + x.size] += x
        np.testing.assert_allclose(added[j], expected, rtol=0, atol=1e-6 * np.abs(expected).max())
