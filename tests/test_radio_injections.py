"""Radio pulse injections (gwbatch.radio.inject, ``gwbatch simulate pulses``): the pulse's physics, its
S/N calibration on Gaussian noise, the injected store, and the radio search's efficiency on real
Parkes noise (parkes_8bit_1.fil)."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gwbatch.errors import DataError
from gwbatch.io.store import read_dq, read_injections, read_meta, read_spectra
from gwbatch.radio.condition import condition_spectra, RadioConditioning
from gwbatch.radio.dedisperse import K_DM, dedisperse
from gwbatch.radio.dmplan import DMPlan, dm_plan
from gwbatch.radio.inject import (
    TRIAL_BASELINE, Pulse, add_pulses, best_boxcar, dispersion_delays, draw_pulses, inject_pulses, largest_dm,
    noise_window, pulse_extent, pulse_profile, smearing_edges,
)
from gwbatch.radio.pulses import normalise_trials
from workflow.cli import main

PARKES = Path(__file__).parent / "data" / "radio" / "parkes_8bit_1.fil"
#: A small L-band: 256 channels of 1 MHz from 1499.5 MHz down, 256 µs samples.
L_BAND, TSAMP = 1499.5 - np.arange(256.0), 256e-6


@pytest.fixture(scope="module")
def parkes_store(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("parkes") / "parkes.zarr"
    assert main(["ingest", "filterbank", str(PARKES), "--out", str(out)]) == 0
    return out


def gaussian_spectra(seed: int, seconds: float) -> np.ndarray:
    """Gaussian noise ``(channel, time)``, float32, with a bandpass: channel means 50 to 150 and σ 5 to 20."""
    rng = np.random.default_rng(seed)
    n = int(round(seconds / TSAMP))
    mean, sigma = rng.uniform(50, 150, L_BAND.size), rng.uniform(5, 20, L_BAND.size)
    return (mean[:, None] + sigma[:, None] * rng.standard_normal((L_BAND.size, n))).astype(np.float32)


def test_pulse_keeps_its_fluence_and_arrives_at_the_dispersion_delays():
    """Each channel's samples sum to its fluence ((f / f_centre)^index, to 1e-6; 5e-5 of a scattering
    tail is cut), and its centroid is the Gaussian's peak at the channel's delay, plus the mean of
    the intra-channel sweep and the scattering time τ(f) = τ_ref (f / f_ref)^-4, within 0.02 samples."""
    for pulse in (Pulse(0.3, 300.0, 2e-3, 10.0, spectral_index=-1.5),
                  Pulse(0.3, 300.0, 1e-3, 10.0, scatter=2e-3, scatter_frequency=1000.0)):
        profile = pulse_profile(pulse, L_BAND, TSAMP)
        spectrum = (L_BAND / (0.5 * (L_BAND.max() + L_BAND.min()))) ** pulse.spectral_index
        np.testing.assert_allclose(profile.values.sum(axis=1), spectrum, rtol=5e-5 if pulse.scatter else 1e-6)
        samples = profile.first[:, None] + np.arange(profile.values.shape[1])
        centroid = (samples * profile.values).sum(axis=1) / profile.values.sum(axis=1) * TSAMP
        upper, lower = smearing_edges(L_BAND, pulse.dm)
        tau = pulse.scatter * (L_BAND / pulse.scatter_frequency) ** -4.0
        expected = pulse.time + dispersion_delays(L_BAND, pulse.dm) + 0.5 * (upper + lower) + tau
        assert np.abs(centroid - expected).max() < 0.02 * TSAMP
    delays = dispersion_delays(L_BAND, 300.0)
    assert delays[0] == 0 and math.isclose(delays[-1], K_DM * 300 * (1244.5 ** -2 - 1499.5 ** -2))


def measured_snr(spectra: np.ndarray, pulse: Pulse, start: int) -> float:
    """The S/N the radio search's chain measures: the spectra conditioned (default cleaning), dedispersed
    at the pulse's DM, each trial normalised (``normalise_trials``), and the best boxcar of 1 to 64
    samples starting within its width of ``start`` (the optimal boxcar's first sample)."""
    cond = condition_spectra(spectra, RadioConditioning(), TSAMP)
    series = dedisperse(cond.spectra, L_BAND, TSAMP, DMPlan.fixed(L_BAND, TSAMP, [pulse.dm]))[0].series
    z, _ = normalise_trials(series, np.ones(series.shape, dtype=bool), int(round(TRIAL_BASELINE / TSAMP)))
    csum = np.concatenate([[0.0], np.cumsum(z[0], dtype=np.float64)])
    best = -np.inf
    for w in range(1, 65):
        box = (csum[w:] - csum[:-w]) / math.sqrt(w)
        best = max(best, box[max(0, start - w) : start + w + 1].max())
    return float(best)


def test_injected_snr_on_gaussian_noise():
    """Six pulses (DM 50 to 450, FWHM 0.5 to 5 ms, one scattered, one of spectral index -2) at optimal
    S/N 30 in Gaussian noise with a bandpass.  Without noise, the pulse dedispersed by the search's
    ``dedisperse`` gives exactly the optimal S/N (to 1e-4).  In the noise, the search's chain
    measures each within 10 % of 30 (the boxcar S/N carries unit noise, 3.3 % at S/N 30, and picks
    the best of many boxcars) and their mean within 4 %.  Measured: 29.6 to 31.6, mean 30.3 (noise
    seeds 8 and 9: 28.1 to 31.0, means 29.8 and 30.0); σ_DM, the search's estimate of the
    dedispersed noise, 0.91 to 1.02 sqrt(n_good)."""
    pulses = [Pulse(0.5, 50.0, 0.5e-3, 30.0), Pulse(1.3, 150.0, 2e-3, 30.0), Pulse(2.1, 300.0, 5e-3, 30.0),
              Pulse(2.9, 450.0, 1e-3, 30.0), Pulse(3.7, 200.0, 1e-3, 30.0, scatter=3e-3, scatter_frequency=1000.0),
              Pulse(4.5, 250.0, 2e-3, 30.0, spectral_index=-2.0)]
    noise = gaussian_spectra(7, 6.0)
    spectra, injected = inject_pulses(noise, L_BAND, TSAMP, pulses)
    assert spectra.dtype == np.float32 and spectra.shape == noise.shape
    found = []
    for pulse, inj in zip(pulses, injected):
        alone = add_pulses(np.zeros_like(noise), [inj.pulse]) / inj.noise.sigma[:, None].astype(np.float32)
        alone *= inj.noise.good[:, None]
        series = dedisperse(alone, L_BAND, TSAMP, DMPlan.fixed(L_BAND, TSAMP, [pulse.dm]))[0].series[0]
        lit = np.flatnonzero(series)
        best = best_boxcar(series[lit[0] : lit[-1] + 1].astype(np.float64), inj.noise.excess)[0]
        assert math.isclose(best / inj.noise.series_sigma, 30.0, rel_tol=1e-4)
        # Gaussian noise is white to the MAD's error over the noise window (~0.5 s: 5 % at 16 samples)
        assert 1.0 <= inj.noise.excess(np.array([inj.boxcar_width]))[0] < 1.1
        assert inj.noise.n_good >= 250 and abs(inj.noise.series_sigma / math.sqrt(inj.noise.n_good) - 1) < 0.10
        a, b = noise_window(pulse, L_BAND, TSAMP, 0, noise.shape[1])
        found.append(measured_snr(spectra[:, a:b], pulse, inj.boxcar_start - a))
    found = np.array(found)
    assert np.all(np.abs(found / 30.0 - 1) < 0.10), found
    assert abs(found.mean() / 30.0 - 1) < 0.04, found


def test_draw_pulses_fit_the_data_and_keep_apart():
    """Drawn pulses lie in their ranges, each whole sweep inside the valid data, at least the spacing
    apart; a DM whose sweep exceeds the data is refused naming the largest DM that fits, and a crowd
    that cannot keep the spacing is refused."""
    rng = np.random.default_rng(3)
    intervals = [(0.0, 4.0), (6.0, 9.5)]
    pulses = draw_pulses(rng, 8, L_BAND, intervals, dm=(100, 400), snr=(8, 12), width=(1e-3, 3e-3), spacing=0.5,
                         spectral_index=(-2, 0))
    times = np.array([p.time for p in pulses])
    assert len(pulses) == 8 and np.all(np.diff(times) >= 0.5)
    for p in pulses:
        assert 100 <= p.dm <= 400 and 8 <= p.snr <= 12 and 1e-3 <= p.width <= 3e-3 and -2 <= p.spectral_index <= 0
        before, after = pulse_extent(p, L_BAND)
        assert any(a <= p.time - before and p.time + after <= b for a, b in intervals)
    fits = largest_dm(L_BAND, 4.0, 3e-3)  # the longest interval
    with pytest.raises(DataError, match=rf"the largest DM that fits \(width 0.003 s\) is {fits:.0f} pc cm\^-3"):
        draw_pulses(rng, 1, L_BAND, intervals, dm=(100, fits + 1), snr=10, width=(1e-3, 3e-3), spacing=0.5)
    with pytest.raises(DataError, match="do not fit 0.5 s apart"):
        draw_pulses(rng, 30, L_BAND, intervals, dm=(100, 400), snr=10, width=(1e-3, 3e-3), spacing=0.5)


def test_cli_refuses_dms_whose_sweep_exceeds_the_file(parkes_store, tmp_path, capsys):
    """parkes_8bit_1.fil is 2.1 s of 4032 to 704 MHz: DM 1000 sweeps 8.12 s across the band, and only
    DM 256 (with pulses up to 4 ms wide) fits."""
    out = tmp_path / "x.zarr"
    args = ["simulate", "pulses", "--store", str(parkes_store), "--out", str(out), "--count", "3", "--snr", "10",
            "--width", "0.001,0.004", "--seed", "1"]
    assert main([*args, "--dm", "100,1000"]) == 3
    err = capsys.readouterr().err
    assert "sweep 8.12 s across the band (4032 to 704 MHz)" in err
    assert "the largest DM that fits (width 0.004 s) is 256 pc cm^-3" in err and not out.exists()
    assert main([*args, "--dm", "100,250", "--scatter", "0.001"]) == 2
    assert "--scatter expects TAU,FREF (s, MHz), got '0.001'" in capsys.readouterr().err
    assert main([*args, "--dm", "100,250", "--boxcars", "31,16"]) == 2
    err = capsys.readouterr().err
    assert "--boxcars '31,16' is not a boxcar plan" in err and "multiple of 2 samples" in err and not out.exists()


def test_simulated_store_is_the_original_plus_the_listed_pulses(parkes_store, tmp_path):
    """The copy keeps the grid, channels, DQ and provenance, holds float32 spectra equal to the original
    except where the listed pulses are, and lists them with the columns found/missed matching reads."""
    out = tmp_path / "pulses.zarr"
    assert main(["simulate", "pulses", "--store", str(parkes_store), "--out", str(out), "--count", "3",
                 "--dm", "100,200", "--snr", "8,12", "--width", "0.001,0.004", "--seed", "2", "--spacing", "0.2",
                 "--scatter", "0.001,1000", "--spectral-index", "-1.5"]) == 0
    base, meta = read_meta(parkes_store), read_meta(out)
    grid = ("ifos", "sample_rate", "t0", "n_samples")
    assert [getattr(meta, k) for k in grid] == [getattr(base, k) for k in grid]
    assert meta.layout.frequencies == base.layout.frequencies and meta.layout.dtype == "float32"
    np.testing.assert_array_equal(read_dq(meta, meta.ifos), read_dq(base, base.ifos))
    assert meta.provenance["base"] == base.provenance and "recorded precision" in meta.provenance["note"]
    table = read_injections(out)
    assert len(table) == 3 and set(table["waveform"]) == {"scattered-gaussian"}
    assert {"id", "gps_time", "gps_time_inf", "dm", "width", "snr", "duration", "time_Parkes", "snr_Parkes", "ifo",
            "beam"} <= set(table.columns)
    assert table["snr"].between(8, 12).all() and (table["spectral_index"] == -1.5).all()
    f_max = max(meta.layout.frequencies)
    np.testing.assert_allclose(table["gps_time"] - table["gps_time_inf"], K_DM * table["dm"] / f_max ** 2, rtol=0,
                               atol=1e-6)  # float64 GPS times resolve 0.24 µs
    diff = read_spectra(meta, "Parkes", 0, meta.n_samples) - read_spectra(base, "Parkes", 0, base.n_samples)
    assert np.abs(diff).max() > 0
    first = int(np.floor((table["gps_time"].min() - 0.02 - float(meta.t0)) * meta.sample_rate))
    assert first > 0 and not diff[:, :first].any()  # nothing 20 ms before the first pulse reaches the top


def nearest_trial(freqs, tsamp: float, dm_max: float, dms) -> np.ndarray:
    """The index of the search plan's trial nearest each DM."""
    plan = dm_plan(freqs, tsamp, 0.0, dm_max)
    return np.abs(plan.dms[None, :] - np.asarray(dms, dtype=np.float64)[:, None]).argmin(axis=1)


def consecutive_copies(path: Path, out: Path, count: int) -> list[Path]:
    """``count`` copies of the filterbank ``path`` whose headers start each where the one before ends
    (only ``tstart`` rewritten): ``count`` times the file's own noise, as files in time order."""
    from gwbatch.io.filterbank import read_filterbank

    raw = path.read_bytes()
    key = struct.pack("<i", 6) + b"tstart"
    at = raw.index(key) + len(key)
    start = struct.unpack("<d", raw[at : at + 8])[0]
    fb = read_filterbank(path)
    days = fb.data.shape[0] * fb.tsamp / 86400.0
    copies = []
    for k in range(count):
        copies.append(out / f"copy{k}.fil")
        copies[-1].write_bytes(raw[:at] + struct.pack("<d", start + k * days) + raw[at + 8 :])
    return copies


@pytest.mark.slow
def test_radio_search_finds_pulses_in_real_parkes_noise(tmp_path):
    """The acceptance run: 24 pulses at optimal S/N 10, DM 100 to 1000, FWHM 1 to 4 ms, injected into
    parkes_8bit_1.fil's real Parkes UWL noise with its RFI (754 of 832 channels good, an undispersed
    150 Hz broadband line) in three stores of eight (seeds 2, 3, 4), each searched by the real CLI.
    DM 1000 sweeps 8.1 s across the band and the file is 2.1 s, so the store is five copies of the
    file ingested as files in time order (10.5 s; its noise repeats every 2.1 s, which no DM
    trial sees as a pulse: every channel is shifted by its own delay).

    Settings (beyond dm_max 1100, above the pulses, and plan.chunk 2.0, so that pulses fall in
    several chunks):

    - ``threshold`` 7: the noise model expects 3e-4 noise events per run at S/N >= 7; an S/N-10
      pulse measures below 7 with a probability under 1 %.
    - ``baseline`` 0.1 s: with the default 2 s the real data's slow wander lifts boxcars of ~80 ms
      in a cluster reaching from DM 0 to 160 that swallows pulses; 0.1 s is 195 samples, ten times the
      widest pulse's optimal boxcar.  The pulses are scaled with the same window (``--baseline 0.1``)
      and the search's boxcar σ (``--sigma measured``, the default), since their S/N is the search's.
    - ``cluster_dm`` 20 trials: with Heimdall's 200 the cluster of the undispersed interference,
      which spans the file, reaches far in DM and a pulse that joins it takes its time and DM.

    Asserted: at least 90 % found (matched within the optimal boxcar's duration of the top-of-band
    arrival, and not flagged RFI); at least 90 % of the found within one DM step: their candidate's
    trial is the plan's trial nearest the injected DM or one of its two neighbours; the median
    recovered / injected S/N within 15 %, and every pulse within 35 % (3.5 σ: a boxcar S/N carries
    unit noise, 10 % at S/N 10); no other candidate but RFI.  Measured: 24 of 24 found (DM 101 to 972),
    besides them one candidate, S/N 7.0 at DM 1.5 (flagged ``zero_dm``); recovered / injected S/N
    median 0.96, 0.80 to 1.23."""
    base = tmp_path / "parkes5.zarr"
    assert main(["ingest", "filterbank", *map(str, consecutive_copies(PARKES, tmp_path, 5)), "--out", str(base)]) == 0
    runs = []
    for seed in (2, 3, 4):
        store, run = tmp_path / f"pulses{seed}.zarr", tmp_path / f"run{seed}"
        assert main(["simulate", "pulses", "--store", str(base), "--out", str(store), "--count", "8",
                     "--dm", "100,1000", "--snr", "10", "--width", "0.001,0.004", "--seed", str(seed),
                     "--spacing", "0.2", "--baseline", "0.1"]) == 0
        assert main(["run", "configs/radio-tutorial.yaml", "--set", f"data.store={store}", "--set", "search.dm_max=1100",
                     "--set", "plan.chunk=2.0", "--set", "search.threshold=7", "--set", "search.baseline=0.1",
                     "--set", "search.cluster_dm=20", "--set", "cluster.kind=in-process", "--out", str(run),
                     "--no-progress"]) == 0
        injections = pd.read_parquet(run / "injections.parquet").merge(
            read_injections(store)[["id", "dm"]], on="id", validate="one_to_one")
        candidates = pd.read_parquet(run / "candidates.parquet")
        assert (~candidates["rfi"]).sum() == injections["found"].sum()  # nothing but the pulses and RFI
        matched = candidates.iloc[injections["candidate"].clip(lower=0)].reset_index(drop=True)
        runs.append(injections.assign(found_dm=matched["dm"].where(injections["found"]),
                                      found_trial=matched["dm_index"].where(injections["found"]),
                                      rfi=matched["rfi"].where(injections["found"], False).astype(bool)))
    inj = pd.concat(runs, ignore_index=True)
    meta = read_meta(base)
    assert len(inj) == 24 and inj["analysed"].all() and inj["dm"].max() > 900
    found = inj[inj["found"] & ~inj["rfi"]]
    assert len(found) >= 0.9 * len(inj), inj
    nearest = nearest_trial(np.asarray(meta.layout.frequencies), 1.0 / meta.sample_rate, 1100.0, found["dm"])
    trials_off = np.abs(found["found_trial"].to_numpy() - nearest)
    assert (trials_off <= 1).mean() >= 0.9, trials_off
    ratio = found["found_snr"] / found["snr"]
    assert abs(ratio.median() - 1) <= 0.15 and (np.abs(ratio - 1) <= 0.35).all(), ratio
    assert (np.abs(found["dt_Parkes"]) <= found["duration"]).all()
