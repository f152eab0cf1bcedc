"""The radio search as a campaign (issue 28): filterbank store -> cleaning -> dedispersion over the DM
plan -> boxcars over every trial -> clustered candidates with noise-model FARs, a Heimdall ``.cand``
file and the report; on the synthetic pulsar of ``tutorial.fil`` and on real Parkes noise."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from gwbatch.io.spectra import ingest_filterbank
from gwbatch.radio.candidates import read_heimdall_cands
from workflow.cli import main

from .conftest import DATA

ROOT = DATA.parent.parent
RADIO = DATA / "radio"
PERIOD, DM = 0.25, 30.0


@pytest.fixture(scope="module")
def tutorial_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("radio")
    ingest_filterbank([RADIO / "tutorial.fil"], tmp / "t.zarr")
    assert main(["run", str(ROOT / "configs" / "radio-tutorial.yaml"), "--set", f"data.store={tmp / 't.zarr'}",
                 "--set", f"output.dir={tmp / 'run'}", "--set", "cluster.kind=in-process"]) == 0
    return tmp / "run"


def test_tutorial_pulsar_pulses_on_its_period_at_its_dm(tutorial_run):
    """~240 pulses of a 250 ms pulsar at DM 30 in 60 s.  Single pulses have S/N ~4-8 here, and the
    band (70 MHz at 1.5 GHz) sweeps only 17 samples at DM 30 against a 30-sample pulse, so one pulse
    barely constrains its DM (its S/N changes 2% from DM 30 to 20 or 40): the train's DM is the
    median of its pulses' (one DM step of the plan is 5.4 at DM 30)."""
    c = pd.read_parquet(tutorial_run / "candidates.parquet")
    t0 = float(c["gps_time"].min())
    phase = ((c["gps_time"] - t0 + 0.5 * PERIOD) % PERIOD) - 0.5 * PERIOD  # from the first pulse
    on = (np.abs(phase) < 0.02) & ~c["rfi"]
    # 231 measured with the boxcar σ measured per trial (sigma: measured, the default; 228 with white σ)
    assert on.sum() >= 216, on.sum()  # 90 % of the ~240
    assert (~on & ~c["rfi"]).sum() <= 3  # noise: the model expects ~0.9 at S/N >= 5 (0 measured)
    steps = np.diff(np.sort(c["dm"].unique()))
    assert abs(np.median(c.loc[on, "dm"]) - DM) <= steps.max()  # 32.2 measured
    assert (c["far_kind"] == "noise model").all() and (c["far"] > 0).all()
    assert {"dm", "dm_index", "width", "members", "gps_time_inf", "beam"} <= set(c.columns)
    # arrival at infinite frequency precedes the top of the band by K_DM DM / f_max^2
    delay = 4.148808e3 * c["dm"] / 1510.0**2
    assert np.allclose(c["gps_time"] - c["gps_time_inf"], delay, atol=1e-6)


def test_tutorial_candidates_also_in_heimdall_format(tutorial_run):
    c = pd.read_parquet(tutorial_run / "candidates.parquet")
    h = read_heimdall_cands(tutorial_run / "candidates.cand", beam="Fake")
    assert len(h) == len(c)
    mine = c.sort_values("snr", ascending=False).reset_index(drop=True)
    theirs = h.sort_values("snr", ascending=False).reset_index(drop=True)
    assert np.allclose(theirs["snr"], mine["snr"], rtol=1e-5)
    assert np.array_equal(theirs["dm_index"], mine["dm_index"]) and np.array_equal(theirs["members"], mine["members"])


def parkes_expected_noise(store, threshold: float, dm_max: float) -> float:
    """Noise events at S/N >= ``threshold`` the noise model expects in the Parkes store (radio
    significance: effective trials over the DM plan's levels and the boxcar widths x Q(S/N))."""
    from scipy.stats import norm

    from gwbatch.io.store import read_meta
    from gwbatch.pulse.plan import boxcar_plan
    from gwbatch.radio.candidates import effective_trials
    from gwbatch.radio.dmplan import dm_plan
    from gwbatch.radio.pulses import DEFAULT_BOXCARS

    meta = read_meta(store)
    tsamp = 1.0 / meta.sample_rate
    plan = dm_plan(np.asarray(meta.layout.frequencies), tsamp, 0.0, dm_max, 40e-6, 1.25, True)
    widths = boxcar_plan(DEFAULT_BOXCARS).widths
    trials = sum(effective_trials(meta.n_samples / d, t.stop - t.start, widths) for d, t in plan.levels)
    return float(trials * norm.sf(threshold))


def test_parkes_noise_candidates_match_the_trial_count(tmp_path):
    """Real Parkes UWL data (832 channels, 2.1 s, no sky pulse), DM 0-250 (all the sweep the file
    holds).  Its dedispersed trials are red (a receiver's slow wander, a 150 Hz broadband line): a
    boxcar of 128 samples at DM 4.4 has σ 4.9 sqrt(128).  With the boxcar σ measured per trial
    (``sigma: measured``, the default) the candidates number what the trial count allows: none at S/N
    >= 7 (the noise model expects 7e-6; the acceptance allows at most 2) and, at S/N >= 5, no more
    than the model's 1.6 + 3 sqrt(1.6) (0 measured).  With ``sigma: white`` the same data give an
    unflagged S/N-7.7 event (DM 6.7, a 65 ms boxcar) and a broadband S/N-13.3 event that the RFI test
    flags as undispersed (S/N 12.2 at DM 0 although its sweep is 2.7 widths): the white S/N is
    inconsistent with the trial count, and the undispersed flag is kept on real data."""
    ingest_filterbank([RADIO / "parkes_8bit_1.fil"], tmp_path / "p.zarr")
    found = {}
    for sigma, threshold in (("measured", 7), ("measured", 5), ("white", 7)):
        out = tmp_path / f"run-{sigma}-{threshold}"
        assert main(["run", str(ROOT / "configs" / "radio-tutorial.yaml"), "--set", f"data.store={tmp_path / 'p.zarr'}",
                     "--set", f"output.dir={out}", "--set", "cluster.kind=in-process", "--set", f"search.sigma={sigma}",
                     "--set", f"search.threshold={threshold}", "--set", "search.dm_max=250",
                     "--set", "plan.chunk=1.0"]) == 0
        found[sigma, threshold] = pd.read_parquet(out / "candidates.parquet")
    assert parkes_expected_noise(tmp_path / "p.zarr", 7, 250) < 1e-4
    assert (~found["measured", 7]["rfi"]).sum() == 0
    expected5 = parkes_expected_noise(tmp_path / "p.zarr", 5, 250)
    assert 0.5 < expected5 < 3  # 1.57
    assert (~found["measured", 5]["rfi"]).sum() <= expected5 + 3 * np.sqrt(expected5)
    white = found["white", 7]
    assert (~white["rfi"]).sum() >= 1 and white["snr"].max() > 12  # what the white S/N makes of red noise
    assert (white.loc[white["rfi"], "rfi_reason"].str.contains("undispersed")).all() and white["rfi"].any()


@pytest.mark.gpu
def test_tutorial_on_the_gpu_finds_what_the_cpu_finds(tutorial_run, tmp_path):
    """The campaign on CuPy (CUDA dedispersion, CuPy cleaning, the boxcar kernels) against the CPU
    run of the fixture: the same candidates, S/N within 1e-3."""
    pytest.importorskip("cupy")
    from gwbatch._xp import cupy_available

    if not cupy_available():
        pytest.skip("needs CuPy and a CUDA GPU")
    store = tutorial_run.parent / "t.zarr"
    assert main(["run", str(ROOT / "configs" / "radio-tutorial.yaml"), "--set", f"data.store={store}",
                 "--set", f"output.dir={tmp_path / 'gpu'}", "--set", "cluster.kind=in-process",
                 "--set", "backend=cupy"]) == 0
    cpu = pd.read_parquet(tutorial_run / "candidates.parquet").sort_values("sample").reset_index(drop=True)
    gpu = pd.read_parquet(tmp_path / "gpu" / "candidates.parquet").sort_values("sample").reset_index(drop=True)
    assert len(gpu) == len(cpu)
    assert np.array_equal(gpu["dm_index"], cpu["dm_index"]) and np.array_equal(gpu["width"], cpu["width"])
    assert np.allclose(gpu["snr"], cpu["snr"], rtol=1e-3)


def test_noise_model_counts_gaussian_noise_false_alarms(small_filterbank, tmp_path):
    """Gaussian spectra (two beams, 200 s, 32 channels, DM 0-500): the candidates at S/N >= 4.5 number
    what the noise model expects (effective trials x Q(S/N)), within Poisson 3 sigma above and no more
    than 2x below (it counts correlated trials as independent, so it is an upper bound: 84 observed
    against 95 expected in a 300 s single-beam run of the same kind)."""
    from scipy.stats import norm

    assert main(["run", str(ROOT / "configs" / "radio-tutorial.yaml"), "--set", f"data.store={small_filterbank}",
                 "--set", f"output.dir={tmp_path / 'run'}", "--set", "cluster.kind=in-process",
                 "--set", "search.threshold=4.5", "--set", "search.dm_max=500", "--set", "plan.chunk=50"]) == 0
    c = pd.read_parquet(tmp_path / "run" / "candidates.parquet")
    expected = sum(g["effective_trials"].iloc[0] for _, g in c.groupby("beam")) * norm.sf(4.5)
    observed = int((c["snr"] >= 4.5).sum())
    assert 0.5 * expected <= observed <= expected + 3 * np.sqrt(expected), (observed, expected)
    # and each candidate's FAR is the same model: rate of noise events at least as loud in its beam
    row = c.iloc[0]
    assert row["far"] == pytest.approx(row["effective_trials"] * norm.sf(row["snr"]) / row["livetime"], rel=1e-9)


def test_pulses_at_chunk_edges_are_found_once(tmp_path):
    """Pulses arriving (at the top of the band) just before, on and just after the edges of 10 s chunks,
    at DMs whose sweep reaches well into the next chunk: each is found once, at its time and DM (the
    chunk reads the plan's largest delay and widest boxcar past its end, and keeps boxcars starting in
    its own samples)."""
    from gwbatch.io.store import SampleLayout, StoreWriter
    from gwbatch.radio.inject import Pulse, inject_pulses

    freqs, tsamp, n = 1500.0 - 2.0 * np.arange(64), 1e-3, 40_000
    rng = np.random.default_rng(3)
    spectra = rng.normal(100.0, 10.0, (64, n)).astype(np.float32)
    # the chunk edges are at 10, 20 and 30 s: a pulse just before, on and just after each (dispersed pulses
    # are kept 0.5 s apart: a bow-tie spans tens of ms over the DM trials, and closer pulses are one cluster)
    times = [9.9995, 10.5, 20.0, 20.5, 30.0012, 30.5]
    pulses = [Pulse(time=t, dm=dm, width=0.003, snr=15.0) for t, dm in zip(times, (450, 150, 300, 60, 380, 220))]
    spectra, _ = inject_pulses(spectra, freqs, tsamp, pulses)
    layout = SampleLayout("float32", tuple(freqs))
    with StoreWriter(tmp_path / "p.zarr", ifos=("B01",), sample_rate=1 / tsamp, t0="1300000000", n_samples=n,
                     chunk_samples=1 << 14, dq_bits=("DATA",), layout=layout) as writer:
        writer.write_spectra("B01", 0, spectra)
        writer.write_dq("B01", 0, np.ones(40, np.uint8))
        writer.commit()
    assert main(["run", str(ROOT / "configs" / "radio-tutorial.yaml"), "--set", f"data.store={tmp_path / 'p.zarr'}",
                 "--set", f"output.dir={tmp_path / 'run'}", "--set", "cluster.kind=in-process", "--set", "plan.chunk=10",
                 "--set", "search.dm_max=600", "--set", "search.threshold=8"]) == 0
    c = pd.read_parquet(tmp_path / "run" / "candidates.parquet")
    t = c["gps_time"].to_numpy() - 1300000000.0
    for pulse in pulses:
        near = np.abs(t - pulse.time) < 0.01
        assert near.sum() == 1, (pulse, t[near])  # once: neither lost nor doubled at the edge
        found = c[near].iloc[0]
        steps = np.diff(np.sort(c["dm"].unique()))
        assert abs(found["dm"] - pulse.dm) <= max(0.1 * pulse.dm, 3 * np.median(steps)), (pulse, found["dm"])
        assert not found["rfi"]
    assert len(c) == len(pulses)  # and nothing else at S/N 8 in Gaussian noise


def _beam_file(path, beam: int, keep_bytes: int | None = None):
    """tutorial.fil as beam ``beam`` (an ``ibeam`` header key), cut to ``keep_bytes`` of data."""
    import struct

    def text(s):
        return struct.pack("<i", len(s)) + s.encode()

    raw = (RADIO / "tutorial.fil").read_bytes()
    start, end = len(text("HEADER_START")), raw.index(b"HEADER_END") + len("HEADER_END")
    data = raw[end:] if keep_bytes is None else raw[end:end + keep_bytes]
    path.write_bytes(text("HEADER_START") + text("ibeam") + struct.pack("<i", beam) + raw[start:end] + data)
    return path


def test_a_beam_without_data_is_masked_and_a_run_with_nothing_searchable_is_refused(tmp_path, capsys):
    """A beam whose file ends early left chunks with no valid sample of it: those chunks failed and the
    run exited 5, throwing away the other beam's results.  A run whose every channel is masked ended
    'complete' with its seconds counted as searched.  Now the empty beam is masked (no livetime there),
    and a run that can search nothing is refused (exit 3).  plan.chunk must hold four SK blocks."""
    # beam 2 holds the first 20 s of the 60 s (2-bit, 64 channels: 16 bytes a sample, 3125 samples a second)
    ingest_filterbank([_beam_file(tmp_path / "b1.fil", 1), _beam_file(tmp_path / "b2.fil", 2, 62500 * 16)],
                      tmp_path / "mb.zarr")
    base = ["run", str(ROOT / "configs" / "radio-tutorial.yaml"), "--set", "cluster.kind=in-process", "--no-progress"]
    assert main([*base, "--set", f"data.store={tmp_path / 'mb.zarr'}", "--out", str(tmp_path / "mb")]) == 0
    manifest = json.loads((tmp_path / "mb" / "manifest.json").read_text())
    live = manifest["livetime"]["analysed_seconds"]
    assert sorted(live.values()) == pytest.approx([20.0, 60.0064], abs=1e-3)
    cands = pd.read_parquet(tmp_path / "mb" / "candidates.parquet")
    late = cands[cands["gps_time"] - cands["gps_time"].min() > 25.0]
    assert len(late) > 50 and late["ifo"].nunique() == 1  # after 20 s only the full beam is searched
    # the manifest lists the Heimdall file, and says how the radio FARs are made (not by time slides)
    assert manifest["outputs"]["cand"] == "candidates.cand" and (tmp_path / "mb" / "candidates.cand").is_file()
    assert manifest["background"]["far_convention"].startswith("far = effective trials")

    ingest_filterbank([RADIO / "tutorial.fil"], tmp_path / "t.zarr")
    (tmp_path / "all.txt").write_text("0:63\n")
    single = [*base, "--set", f"data.store={tmp_path / 't.zarr'}", "--set", "data.duration=12"]
    assert main([*single, "--set", f"search.rfi.mask={tmp_path / 'all.txt'}", "--out", str(tmp_path / "none")]) == 3
    assert "no sample could be searched" in capsys.readouterr().err
    assert not (tmp_path / "none" / "manifest.json").exists() or json.loads(
        (tmp_path / "none" / "manifest.json").read_text())["status"] != "complete"
    assert main([*single, "--set", "plan.chunk=0.01", "--out", str(tmp_path / "short")]) == 2
    assert "plan.chunk (0.01 s) is too short for the radio search's per-chunk statistics: at least 0.328 s" in \
        capsys.readouterr().err


def test_one_dead_channel_does_not_mask_the_beam(tmp_path):
    """A float32 filterbank (here a `simulate pulses` copy of tutorial.fil) with one channel all NaN:
    every sample was taken as missing (any channel non-finite), so the beam was never searched.  The
    dead channel is now flagged by the cleaning and the other 63 searched over the whole span."""
    import zarr

    from gwbatch.io.span import read_spectra_span
    from gwbatch.io.store import read_meta, seal

    ingest_filterbank([RADIO / "tutorial.fil"], tmp_path / "t.zarr")
    assert main(["simulate", "pulses", "--store", str(tmp_path / "t.zarr"), "--out", str(tmp_path / "f.zarr"),
                 "--count", "3", "--dm", "40,60", "--snr", "20", "--width", "0.002,0.003", "--seed", "4"]) == 0
    spectra = zarr.open_group(tmp_path / "f.zarr", mode="r+")["spectra"]
    spectra[0, 17, :] = np.nan
    seal(tmp_path / "f.zarr")
    meta = read_meta(tmp_path / "f.zarr")
    span = read_spectra_span(meta, meta.ifos[0], 0, meta.n_samples, dq_required=meta.dq_mask(["DATA"]))
    assert span.valid.all()  # one dead channel decides nothing about which samples are data
    out = tmp_path / "run"
    assert main(["run", str(ROOT / "configs" / "radio-tutorial.yaml"), "--set", f"data.store={tmp_path / 'f.zarr'}",
                 "--set", "cluster.kind=in-process", "--out", str(out), "--no-progress"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert next(iter(manifest["livetime"]["analysed_seconds"].values())) == pytest.approx(60.0064, abs=1e-3)
    assert all("dead 1" in str(c["series_stats"][meta.ifos[0]]["note"]) for c in manifest["chunks"])
    inj = pd.read_parquet(out / "injections.parquet")
    assert inj["found"].all()  # the three S/N-20 pulses
