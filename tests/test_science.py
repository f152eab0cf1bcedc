"""Science acceptance checks, each with its stated tolerance and seed:

- the demo (seed 1, 60 injections) recovers >= 95% of injections with SNR >= 8, each within its
  pulse width of the injected time, with the detected SNR calibrated to the injected one;
- on noise only (seed 7) the number of zero-lag candidates with FAR <= F over livetime T agrees
  with F T within 3 sigma (Poisson) for F T = 1, 10, 100;
- the real pulsar J1807-0847: >= 120 of its 131 pulses at S/N >= 6, spaced by its period;
- GW150914 in the SPIIR search: per-detector SNRs, times and arrival difference (issue 3).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from gwbatch.config import load_campaign
from gwbatch.io.sigproc import ingest_sigproc
from gwbatch.simulate import simulate_store
from tests.far_checks import assert_calibrated
from workflow.campaign import run_campaign

from .conftest import DATA, REPO


def demo_campaign(store, out, *overrides):
    return load_campaign(REPO / "configs" / "demo.yaml",
                         [f"data.store={store}", f"output.dir={out}", "cluster.kind=in-process", *overrides])


@pytest.fixture(scope="module")
def demo_run(demo_store, tmp_path_factory):
    return run_campaign(demo_campaign(demo_store, tmp_path_factory.mktemp("runs") / "demo"), progress=False)


def test_demo_recovers_injections(demo_run):
    inj = demo_run.reduced.injections
    target = inj[inj["analysed"] & (inj["snr"] >= 8)]
    assert len(target) == 60
    found = target["found"].mean()
    assert found >= 0.95, f"found {found:.3f}"
    hit = target[target["found"]]
    for ifo in ("H1", "L1", "V1"):
        member = hit[hit[f"dt_{ifo}"].notna()]  # candidates this detector is part of
        assert len(member) >= 0.9 * len(hit)
        # within the pulse width (energy FWHM) of the injected arrival time
        assert (np.abs(member[f"dt_{ifo}"]) <= np.maximum(member["duration"], 1 / 2048)).all()
        ratio = member[f"found_rho_{ifo}"] / member[f"injected_snr_{ifo}"]
        # SNR calibration: median within 5% of 1; most within 15% (noise alone spreads an SNR-8
        # estimate by ~1/8 = 12.5%, so "every one within 15%" is not attainable at SNR 8).
        assert abs(np.median(ratio) - 1) < 0.05
        assert np.mean(np.abs(ratio - 1) <= 0.15) >= 0.85


def test_demo_candidates_are_the_injections(demo_run):
    cands = demo_run.reduced.candidates
    inj = demo_run.reduced.injections
    # Every candidate louder than all background is an injection.
    loud = cands[cands["n_louder"] == 0]
    assert set(loud.index) <= set(inj.loc[inj["found"], "candidate"])


@pytest.mark.slow
def test_false_alarm_rate_calibration(tmp_path):
    store = simulate_store(tmp_path / "noise.zarr", ifos=("H1", "L1", "V1"), duration=2048, sample_rate=2048, seed=7)
    run = run_campaign(demo_campaign(store, tmp_path / "run", "search.threshold=3.5"), progress=False)
    assert len(run.reduced.candidates) > 150
    assert_calibrated(run, (1, 10, 100))


@pytest.mark.slow
def test_false_alarm_rates_stay_conservative_with_glitches(tmp_path):
    """Noise with loud single-detector glitches (blips and sine-Gaussians, SNR 6-100, one per 50 s in
    each detector): the zero-lag candidates at FAR <= F over the zero-lag livetime T are no more
    than Poisson allows above F T (3 sigma), counted, extrapolated and bounded FARs alike."""
    from gwbatch.simulate.glitches import GlitchSpec

    store = simulate_store(tmp_path / "glitchy.zarr", ifos=("H1", "L1", "V1"), duration=2048, sample_rate=2048,
                           seed=8, glitches=GlitchSpec(rate=0.02))
    run = run_campaign(demo_campaign(store, tmp_path / "run", "search.threshold=3.5"), progress=False)
    cands = run.reduced.candidates
    live = run.manifest["livetime"]["zero_lag_seconds"]
    assert len(cands) > 150
    for ft in (0.1, 1, 10, 100):
        for col in ("far", "far_exclusive"):
            n = int((cands[col] <= ft / live).sum())
            assert n <= ft + 3 * np.sqrt(ft) + (1 if ft < 1 else 0), f"F*T={ft}: {n} zero-lag candidates ({col})"


def test_real_pulsar(tmp_path):
    store = ingest_sigproc(DATA / "pulsar-j1807" / "GBT_J1807-0847.tim", tmp_path / "psr.zarr")
    campaign = load_campaign(REPO / "configs" / "pulsar-j1807.yaml",
                             [f"data.store={store}", f"output.dir={tmp_path / 'run'}", "cluster.kind=in-process"])
    run = run_campaign(campaign, progress=False)
    cands = run.reduced.candidates.sort_values("gps_time")
    pulses = cands[cands["snr"] >= 6]
    assert len(pulses) >= 120
    fs = 1 / 0.00016384
    spacing = np.diff(pulses["gps_time"].to_numpy()) * fs
    # The median spacing is the period to within 2 samples; single pulses jitter within the
    # profile (W50 ~ 19 samples), so individual spacings scatter by several samples.
    assert abs(np.median(spacing) - 0.16372 * fs) <= 2
    first = pulses["gps_time"].iloc[0] - float(run.manifest["store"]["t0"])
    assert first == pytest.approx(0.073, abs=0.003)


def test_gw150914_is_the_loudest_transient(tmp_path):
    """Real GWOSC data: the excess-energy search finds GW150914 (GPS 1126259462.4) as its loudest
    candidate in both detectors, louder than every time-slide background event."""
    from gwbatch.io.gwosc import ingest_gwosc

    files = sorted((DATA / "gw150914").glob("*_LOSC_4_V2-1126259446-32.hdf5"))
    store = ingest_gwosc(files, tmp_path / "gw150914.zarr")
    campaign = load_campaign(REPO / "configs" / "gw150914-pulse.yaml",
                             [f"data.store={store}", f"output.dir={tmp_path / 'run'}", "cluster.kind=in-process",
                              "backend=numpy"])
    run = run_campaign(campaign, progress=False)
    top = run.reduced.candidates.iloc[0]
    assert top["ifos"] == "H1,L1" and top["n_louder"] == 0
    assert abs(top["gps_time"] - 1126259462.42) < 0.05
    assert top["rho_H1"] > 12 and top["rho_L1"] > 7
    assert top["snr"] > 2 * run.reduced.candidates.iloc[1]["snr"]


def restricted_bbh_bank(path: Path, **changes) -> Path:
    """The shipped BBH bank spec with some keys changed (a smaller region builds in seconds)."""
    spec = yaml.safe_load((REPO / "configs" / "banks" / "bbh.yaml").read_text())
    spec.update(changes)
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.slow
def test_gw150914_spiir_triggers(tmp_path):
    """Real GWOSC data through the SPIIR search (issue 3 acceptance, with the BBH bank restricted to
    total mass 50-90 Msun, q <= 3 so CI builds it in seconds; benchmarks/gw150914.py runs the
    full bank): H1 SNR >= 16.5 and L1 >= 11.5 within 10 ms of 1126259462.42, H1 - L1 = +7 +- 1.5 ms
    in the same template, no other trigger louder than 8, and the coincidence louder than every
    time-slide event."""
    pytest.importorskip("lalsimulation")
    from gwbatch.io.gwosc import ingest_gwosc
    from gwbatch.searches.spiir import loudest_over_templates
    from workflow.reduce import trigger_table

    files = sorted((DATA / "gw150914").glob("*_LOSC_4_V2-1126259446-32.hdf5"))
    store = ingest_gwosc(files, tmp_path / "gw150914.zarr")
    run = run_event_config(store, tmp_path)
    event = 1126259462.42
    loud = loudest_over_templates(trigger_table(run.reduced), 0.1)
    for ifo, least in (("H1", 16.5), ("L1", 11.5)):
        mine = loud[loud["ifo"] == ifo]
        top = mine.iloc[0]
        assert top["snr"] >= least and abs(top["gps_time"] - event) <= 0.010, top.to_dict()
        assert (mine["snr"].iloc[1:] <= 8).all(), mine.head(3).to_dict("records")
    # issue 4: the most significant coherent candidate is the event, louder than all 100 trials,
    # with its skymap written
    cand = run.reduced.candidates.iloc[0]
    assert cand["ifos"] == "H1,L1" and cand["n_louder"] == 0
    assert abs(cand["gps_time"] - event) <= 0.020 and cand["snr"] >= 20.0
    assert (cand["time_H1"] - cand["time_L1"]) * 1e3 == pytest.approx(7.0, abs=1.5)
    assert (run.out / cand["skymap"]).exists() and 10.0 < cand["area90"] < 20000.0


def run_event_config(store: Path, tmp_path: Path):
    """`configs/gw150914.yaml` on ``store`` as a user would run it on any event file (`--set`
    overrides only), with the BBH bank restricted to total mass 50-90 Msun, q <= 3 so CI builds it
    in seconds."""
    bank = restricted_bbh_bank(tmp_path / "bbh-ci.yaml", name="bbh-ci", total_mass=[50.0, 90.0], mass_ratio=[1.0, 3.0])
    campaign = load_campaign(REPO / "configs" / "gw150914.yaml",
                             [f"data.store={store}", f"output.dir={tmp_path / 'run'}", "cluster.kind=in-process",
                              "backend=numpy", f"search.bank={bank}"])
    return run_campaign(campaign, progress=False)


def _gwosc_like(src: Path, dst: Path, strain: np.ndarray, gps_start: int) -> Path:
    """A GWOSC-layout file (``src``'s groups, quality masks and metadata) holding ``strain`` from
    ``gps_start``: another 32 s event file, as GWOSC would serve it."""
    import h5py

    with h5py.File(src, "r") as s, h5py.File(dst, "w") as d:
        for key in s:
            s.copy(s[key], d, name=key)
        attrs = dict(d["strain/Strain"].attrs)
        del d["strain/Strain"]
        d["strain/Strain"] = strain.astype(np.float64)
        d["strain/Strain"].attrs.update({**attrs, "Xstart": gps_start})
        del d["meta/GPSstart"]
        d["meta/GPSstart"] = np.int64(gps_start)
    return dst


@pytest.mark.slow
def test_gw150914_config_on_another_event_file(tmp_path):
    """`configs/gw150914.yaml` runs unchanged on another 32 s GWOSC file (`--set data.store=...`):
    here a binary black hole (38 + 29 Msun, network SNR 22) in simulated design noise, written in
    the GWOSC layout at another GPS time.  The loudest candidate is the binary, louder than every
    trial, with its skymap."""
    pytest.importorskip("lalsimulation")
    from gwbatch.io.gwosc import ingest_gwosc
    from gwbatch.io.store import open_store, read_injections, read_strain
    from gwbatch.simulate.cbc import CbcSpec

    gps = 1187008866
    sim = simulate_store(tmp_path / "sim.zarr", ifos=("H1", "L1"), duration=32, sample_rate=4096, seed=17,
                         gps_start=gps, cbc=CbcSpec(count=1, mass1=(37, 39), mass2=(28, 30), snr=(22, 22),
                                                    approximant="IMRPhenomD", f_low=20.0, margin=6.0))
    injection = read_injections(sim).iloc[0]
    strain = read_strain(open_store(sim), ("H1", "L1"), 0, 32 * 4096)
    files = [_gwosc_like(DATA / "gw150914" / f"{ifo[0]}-{ifo}_LOSC_4_V2-1126259446-32.hdf5",
                         tmp_path / f"{ifo[0]}-{ifo}_GWOSC_4_V1-{gps}-32.hdf5", strain[k], gps)
             for k, ifo in enumerate(("H1", "L1"))]
    store = ingest_gwosc(files, tmp_path / "event.zarr")
    run = run_event_config(store, tmp_path)
    cand = run.reduced.candidates.iloc[0]
    assert cand["ifos"] == "H1,L1" and cand["n_louder"] == 0
    # arrival in each detector within 5 ms (measured, the bank in sub-bands: H1 -1.7 ms, L1 -2.0 ms;
    # on the ladder -1.0 and -1.1 ms).  Two detectors fix the sky only to a ring, along which a
    # detector's delay from the geocentre ranges over +-21.3 ms (the Earth's radius): the injection's
    # direction has H1 21.1 ms before the geocentre, the candidate's 16.4 ms after in sub-bands, so the
    # geocentric times differ by 39 ms (3.2 ms on the ladder, whose maximum fell near the injection's)
    for ifo in ("H1", "L1"):
        assert abs(cand[f"time_{ifo}"] - injection[f"time_{ifo}"]) <= 0.005, ifo
    assert abs(cand["gps_time"] - injection["gps_time"]) <= 2 * 0.0213 + 0.005
    # measured: coherent SNR 22.8 (rank 20.1; the ladder 22.6, rank 19.8), 90% area 2612 deg^2 on the ladder
    assert cand["snr"] == pytest.approx(22.0, abs=4.0)  # noise moves it by ~1; template mismatch lowers it
    assert (run.out / cand["skymap"]).exists() and cand["area90"] > 0


def test_gw150914_burst_search(tmp_path):
    """Real GWOSC data through the unmodelled burst search (issue 5 acceptance), with
    `configs/gw150914-burst.yaml` as shipped: the most significant event is GW150914, within 50 ms of
    1126259462.42 (measured 14 ms), network correlation cc >= 0.7 (measured 0.91), louder than every
    one of the 50 lags' events (measured rho 9.27 against 7.00), seen first in L1 (H1 - L1 = +7.3 ms
    measured; +7 +- 3 ms asserted), between 35 and 250 Hz, with its skymap."""
    from gwbatch.io.gwosc import ingest_gwosc

    files = sorted((DATA / "gw150914").glob("*_LOSC_4_V2-1126259446-32.hdf5"))
    store = ingest_gwosc(files, tmp_path / "gw150914.zarr")
    campaign = load_campaign(REPO / "configs" / "gw150914-burst.yaml",
                             [f"data.store={store}", f"output.dir={tmp_path / 'run'}", "cluster.kind=in-process",
                              "backend=numpy"])
    run = run_campaign(campaign, progress=False)
    top = run.reduced.candidates.iloc[0]
    assert abs(top["gps_time"] - 1126259462.42) <= 0.050
    assert top["cc"] >= 0.7 and top["n_louder"] == 0
    assert top["rho"] > run.reduced.background_events["rank"].max()
    assert abs(1e3 * (top["time_H1"] - top["time_L1"]) - 7.0) <= 3.0
    assert 35.0 <= top["frequency"] <= 250.0
    assert top["skymap"] and (run.out / top["skymap"]).exists()
