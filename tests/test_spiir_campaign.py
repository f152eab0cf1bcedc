"""The SPIIR search as a campaign on a small simulated store: chunking, the trigger table,
same-template coincidences and cached banks."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from gwbatch.config import validate_campaign
from gwbatch.searches.spiir import TRIGGER_COLUMNS
from workflow.campaign import run_campaign
from workflow.reduce import trigger_table


@pytest.fixture(scope="module")
def bank_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("banks") / "small-bbh.yaml"
    path.write_text(yaml.safe_dump({
        "name": "small-bbh", "approximant": "TaylorF2", "mass1": [10.0, 16.0], "mass2": [10.0, 16.0],
        "f_low": 30.0, "sample_rate": 1024.0, "placement": {"minimal_match": 0.95},
    }))
    return path


def spiir_campaign(store, bank, out, chunk: float):
    return validate_campaign({
        "name": "small-spiir",
        "data": {"store": str(store)},
        "search": {"kind": "spiir", "bank": str(bank), "threshold": 5.0, "psd_seconds": 128.0},
        "coincidence": {"window": 0.005},
        "background": {"slides": 20, "slide_step": 2.0},
        "plan": {"chunk": chunk},
        "cluster": {"kind": "in-process"},
        "backend": "numpy",
        "output": {"dir": str(out)},
    })


@pytest.fixture(scope="module")
def runs(small_store, bank_file, tmp_path_factory):
    base = tmp_path_factory.mktemp("spiir-runs")
    return {chunk: run_campaign(spiir_campaign(small_store, bank_file, base / f"c{int(chunk)}", chunk), progress=False)
            for chunk in (64.0, 256.0)}


def test_chunked_campaign_finds_what_one_chunk_finds(runs):
    """Chunks filter exactly what the whole stream would (tests/test_spiir_triggers.py); here each
    chunk also whitens with its own PSD estimate, which moves SNRs by ~1% (measured: median 1.3%,
    95th percentile 3.6% for 64 s against 256 s), so the tables agree to that."""
    many, one = runs[64.0], runs[256.0]
    assert len(many.plan.chunks) == 4 and len(one.plan.chunks) == 1
    a, b = trigger_table(many.reduced), trigger_table(one.reduced)
    both = a.merge(b, on=["ifo", "sample", "template"], suffixes=("_c", "_w"))
    assert len(b) > 100 and len(both) >= 0.8 * min(len(a), len(b))
    ratio = both["snr_c"] / both["snr_w"]
    assert np.median(np.abs(ratio - 1)) < 0.03 and np.percentile(np.abs(ratio - 1), 95) < 0.08
    top_a, top_b = a.loc[a["snr"].idxmax()], b.loc[b["snr"].idxmax()]
    assert top_a["ifo"] == top_b["ifo"] and abs(top_a["sample"] - top_b["sample"]) <= 8


def test_trigger_table_contract_and_same_template_coincidences(runs):
    run = runs[64.0]
    table = trigger_table(run.reduced)
    assert {*TRIGGER_COLUMNS, "gps_time"} <= set(table.columns)
    assert (table["snr"] >= 5.0).all() and np.isfinite(table["chisq"]).all()
    # The store holds sine-Gaussian and Gaussian pulses, glitches to a CBC search: away from them the
    # triggers are Gaussian noise with a reduced chi-squared near 1; the loud ones are pulses, which
    # the chi-squared flags and the reweighted SNR drops back into the noise.
    pulses = run.reduced.injections["gps_time"].to_numpy()
    near = np.abs(table["gps_time"].to_numpy()[:, None] - pulses[None, :]).min(axis=1) < 1.0
    assert (~near).sum() > 20 and 0.8 < table.loc[~near, "chisq"].median() < 1.25  # measured: 28, median 0.89
    loud = table[table["snr"] > 8.0]
    assert len(loud) and (loud["chisq"] > 2.0).all() and (loud["rank"] < 7.0).all()  # measured: >= 2.7, <= 5.5
    # candidates are coherent events (gwbatch.coherent.chunk): both detectors read with one template,
    # within the light travel time of each other (10.0 ms, plus half a sample of rounding), both at
    # least coherent.ifo_snr; two detectors have no null stream
    cands = run.reduced.candidates
    assert len(cands)
    assert {"snr", "rank", "null_snr", "chisq", "ra", "dec", "template", "mass1", "pivot", "skymap", "area90",
            "far", "ifar_years", "far_exclusive", "snr_H1", "time_L1", "chisq_L1"} <= set(cands.columns)
    assert (np.abs(cands["time_H1"] - cands["time_L1"]) <= 0.0101 + 0.5 / 1024).all()
    assert (cands[["snr_H1", "snr_L1"]].min(axis=1) >= 4.0).all()
    assert np.allclose(cands["snr"] ** 2, cands["snr_H1"] ** 2 + cands["snr_L1"] ** 2, rtol=1e-5)
    assert (cands["null_snr"] < 1e-3).all() and (cands["rank"] <= cands["snr"] + 1e-9).all()
    # the coherent stage is timed apart from the per-detector search
    for c in run.manifest["chunks"]:
        assert set(c["stage_seconds"]) == {"read", "condition", "search", "network"} and c["stage_seconds"]["network"] > 0


def test_report_series_around_top_candidates(runs):
    """The report's time series are recomputed for the top candidates (workflow.figures.top_figures):
    each detector's |z| of the candidate's template peaks at that detector's time of the candidate
    (within 2 samples) and reaches its SNR there within 2%."""
    run = runs[64.0]
    series = run.figures["series"]
    top = run.reduced.candidates.head(len(series))
    assert len(series) == min(3, len(run.reduced.candidates)) >= 1
    for fig, (_, cand) in zip(series, top.iterrows()):
        assert fig["gps_time"] == cand["gps_time"] and set(fig["curves"]) == {"H1", "L1"}
        for ifo, (t, z) in fig["curves"].items():
            assert np.abs(t).max() <= 1.0 and t.size > 1000
            at = np.abs(t - (cand[f"time_{ifo}"] - cand["gps_time"])) <= 2.5 / 1024
            assert np.nanmax(z[at]) == pytest.approx(cand[f"snr_{ifo}"], rel=0.02), ifo
    # the manifest times the series' parts, within the figures stage
    timing = run.manifest["timing"]
    parts = timing["figure_stages"]
    assert set(parts) == {"read", "condition", "statistic"} and min(parts.values()) > 0
    assert sum(parts.values()) <= timing["stages"]["figures"]


def test_report_series_filter_only_around_the_candidate(runs, small_store, bank_file):
    """The report's |z| is filtered from the bank's longest template before its window, not from
    the chunk's start, and equals the whole chunk's |z| there to 1e-5 of its peak."""
    from gwbatch.gpstime import GPSTime, time_to_index
    from gwbatch.io.store import read_meta
    from workflow.figures import candidate_series
    from workflow.member import Member
    from workflow.prepare import prepare

    run = runs[64.0]
    campaign = spiir_campaign(small_store, bank_file, run.out, 64.0)
    member = Member("", campaign, read_meta(small_store), run.plan, run.out, {}, "")
    prepare([member], campaign.cluster, progress=False)  # the banks, from the run's cache
    cand = run.reduced.candidates.iloc[0]
    sample = time_to_index(GPSTime.parse(run.plan.t0), float(cand["gps_time"]), run.plan.sample_rate)
    spec = next(c for c in run.plan.chunks if c.start <= sample < c.stop)
    near = candidate_series(member, spec, cand)["curves"]
    whole = candidate_series(member, spec, cand, half_width=1e4)["curves"]
    for ifo, (t, z) in near.items():
        tw, zw = whole[ifo]
        assert tw.size > 4 * t.size  # the whole chunk: 64 s and its halo
        at = np.searchsorted(tw, t)
        assert np.allclose(tw[at], t, rtol=0, atol=1e-9)
        assert np.nanmax(np.abs(z - zw[at])) < 1e-5 * np.nanmax(zw[at]), ifo


def test_banks_are_cached_per_detector(runs, small_store, bank_file, monkeypatch):
    run = runs[64.0]
    banks = sorted((run.out / "banks").glob("small-bbh-*.h5"))
    assert len(banks) == 2  # one per detector (each built for its own PSD)
    # the placement is cached too: the same points come back without placing again
    from gwbatch.conditioning.psd import design
    from gwbatch.config import load_bank_config
    from gwbatch.spiir.bank import place
    from gwbatch.spiir import cache as bank_mod

    cfg = load_bank_config(bank_file)
    psd = design(spiir_campaign(small_store, bank_file, run.out, 64.0).search.placement_psd, cfg.sample_rate)
    assert len(list((run.out / "banks").glob("small-bbh-placement-*.json"))) == 1
    monkeypatch.setattr(bank_mod, "place", lambda *a: pytest.fail("placed again"))
    assert bank_mod.placed_templates(cfg, psd, run.out / "banks") == place(cfg, psd)


def test_campaigns_share_a_bank_cache(runs, small_store, bank_file, tmp_path, monkeypatch):
    """With ``search.bank_cache`` a new campaign (a new output directory) takes the placed
    templates and the built banks of an earlier one from that directory: nothing is placed or built
    again, the manifest names the shared files, and the candidates are the same."""
    import gwbatch.searches.spiir as spiir_mod
    from gwbatch.spiir import cache as bank_mod

    first = runs[256.0]
    shared = first.out / "banks"
    monkeypatch.setattr(bank_mod, "place", lambda *a: pytest.fail("placed again"))
    monkeypatch.setattr(spiir_mod, "build_bank", lambda *a, **k: pytest.fail("built again"))
    campaign = spiir_campaign(small_store, bank_file, tmp_path / "again", 256.0)
    campaign = campaign.model_copy(update={"search": campaign.search.model_copy(update={"bank_cache": shared})})
    again = run_campaign(campaign, progress=False)
    assert not (again.out / "banks").exists()
    files = {f for fs in again.manifest["resources"]["banks"].values() for f in fs}
    assert len(files) == 2 and all(str(shared) in f for f in files)
    a, b = first.reduced.candidates, again.reduced.candidates
    assert len(a) == len(b) and np.array_equal(a["gps_time"].to_numpy(), b["gps_time"].to_numpy())


def test_bank_cache_serves_a_psd_within_tolerance(runs, small_store, bank_file):
    """A cached bank is found for a PSD that differs from its own in the last bits (as the same
    data's PSD does between NumPy and SciPy builds), and not for one that differs measurably."""
    from gwbatch.conditioning.psd import PSD, design
    from gwbatch.config import load_bank_config
    from gwbatch.io.banks import read_bank_psd
    from gwbatch.spiir import cache as bank_mod

    run = runs[64.0]
    cache = run.out / "banks"
    cfg = load_bank_config(bank_file)
    placement = design(spiir_campaign(small_store, bank_file, run.out, 64.0).search.placement_psd, cfg.sample_rate)
    templates = bank_mod.placed_templates(cfg, placement, cache)
    rng = np.random.default_rng(1)
    built = sorted(cache.glob("small-bbh-*.h5"))
    assert len(built) == 2
    for path in built:
        psd = read_bank_psd(path)
        assert bank_mod.cached_bank_path(cfg, psd, templates, cache) == path
        nudged = PSD(psd.frequencies, psd.values * (1 + 1e-13 * rng.standard_normal(psd.values.size)), psd.source)
        assert nudged.fingerprint() != psd.fingerprint()
        assert bank_mod.cached_bank_path(cfg, nudged, templates, cache) == path
        moved = PSD(psd.frequencies, psd.values * 1.001, psd.source)
        new = bank_mod.cached_bank_path(cfg, moved, templates, cache)
        assert new.parent == cache and not new.exists()
    assert read_bank_psd(cache / "missing.h5") is None


def test_bank_cache_benchmark_finds_the_cached_banks(runs, small_store, bank_file, tmp_path):
    """benchmarks/bank_cache.py looks a campaign's banks up as its prepare step does: it finds both
    detectors' banks in the campaign's cache (the same PSD bytes), and exits 1 naming them for an
    empty cache, building nothing."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    run = runs[64.0]
    config = tmp_path / "small.yaml"
    config.write_text(yaml.safe_dump(spiir_campaign(small_store, bank_file, run.out, 64.0).model_dump(mode="json")))
    script = [sys.executable, str(root / "benchmarks" / "bank_cache.py"), str(small_store)]
    found = subprocess.run(script + [str(run.out / "banks"), "--campaign", str(config), "--out", str(tmp_path / "r.json")],
                           capture_output=True, text=True, timeout=600, cwd=root)
    assert found.returncode == 0, found.stderr
    banks = json.loads((tmp_path / "r.json").read_text())["banks"]
    assert set(banks) == {"H1", "L1"}
    assert all(b["same_bytes"] and b["max_relative_difference"] == 0.0 for b in banks.values())
    (tmp_path / "empty").mkdir()
    missing = subprocess.run(script + [str(tmp_path / "empty"), "--campaign", str(config)],
                             capture_output=True, text=True, timeout=600, cwd=root)
    assert missing.returncode == 1 and "no bank in" in missing.stdout and "H1, L1" in missing.stdout
    assert not list((tmp_path / "empty").glob("*.h5"))
    bad = subprocess.run([sys.executable, str(root / "benchmarks" / "bank_cache.py"), str(tmp_path / "nowhere.zarr"),
                          str(run.out / "banks"), "--campaign", str(config)], capture_output=True, text=True,
                         timeout=120, cwd=root)
    assert bad.returncode == 2 and "nowhere.zarr does not exist" in bad.stderr and "Traceback" not in bad.stderr


def test_bank_cache_that_is_a_file_is_refused(small_store, bank_file, tmp_path):
    """A bank cache that cannot be a directory is a configuration error naming it, before any task."""
    from gwbatch.errors import ConfigError

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    campaign = spiir_campaign(small_store, bank_file, tmp_path / "out", 256.0)
    campaign = campaign.model_copy(update={"search": campaign.search.model_copy(update={"bank_cache": blocker})})
    with pytest.raises(ConfigError, match="search.bank_cache .*not-a-dir"):
        run_campaign(campaign, progress=False)
    assert not list((tmp_path / "out").glob("chunks/*")) and not (tmp_path / "out" / "candidates.parquet").exists()


def test_bank_cli_place_build_summary(bank_file, tmp_path, capsys):
    """`gwbatch bank place` writes the placed points as a bank file; `bank build` from that file
    builds the same bank the YAML spec would; `bank summary` reports its filters and overlaps."""
    from gwbatch.io.banks import load_bank, read_bank_file, write_bank_file
    from workflow.cli import main

    points = tmp_path / "points.h5"
    assert main(["bank", "place", str(bank_file), "--psd", "aLIGO", "--out", str(points)]) == 0
    templates = read_bank_file(points)
    assert len(templates) >= 3 and all(10.0 <= t.mass2 <= t.mass1 <= 16.0 for t in templates)
    assert main(["bank", "place", str(bank_file), "--out", str(points)]) != 0  # refuses to overwrite

    spec = yaml.safe_load(bank_file.read_text())
    spec.pop("placement")
    subset = tmp_path / "three.h5"
    write_bank_file(templates[:3], subset)
    spec["file"] = str(subset)
    from_file = tmp_path / "from-file.yaml"
    from_file.write_text(yaml.safe_dump(spec))
    built = tmp_path / "built.h5"
    assert main(["bank", "build", str(from_file), "--cluster", "in-process", "--no-progress",
                 "--out", str(built)]) == 0
    bank = load_bank(built)
    assert np.allclose(bank.mass1, [t.mass1 for t in templates[:3]])
    assert np.allclose(bank.mass2, [t.mass2 for t in templates[:3]])
    capsys.readouterr()
    assert main(["bank", "summary", str(built)]) == 0
    text = capsys.readouterr().out
    assert "3 templates" in text and "overlap with the exact whitened template" in text
    assert bank.overlap.min() >= 0.95


def test_cbc_injections_from_simulate_are_found(bank_file, tmp_path):
    """Binaries injected by `gwbatch simulate` (projected on H1 and L1, network SNR 10-25) are found
    by the SPIIR campaign at their merger times with their per-detector SNRs."""
    from gwbatch.simulate import simulate_store
    from gwbatch.simulate.cbc import CbcSpec

    store = simulate_store(tmp_path / "cbc.zarr", ifos=("H1", "L1"), duration=256, sample_rate=1024, seed=9,
                           cbc=CbcSpec(count=12, mass1=(10, 16), mass2=(10, 16), snr=(10, 25), min_spacing=8))
    run = run_campaign(spiir_campaign(store, bank_file, tmp_path / "run", 128.0), progress=False)
    inj = run.reduced.injections
    assert len(inj) == 12 and inj["analysed"].all()
    visible = np.minimum(inj["injected_snr_H1"], inj["injected_snr_L1"]) >= 6.0
    assert visible.sum() >= 10 and inj.loc[visible, "found"].all()  # measured: 11 of 12 visible, all found
    found = inj[inj["found"]]
    assert found["sky_error_deg"].notna().all()  # coherent candidates carry a direction
    for ifo in ("H1", "L1"):
        ratio = found[f"found_snr_{ifo}"] / found[f"injected_snr_{ifo}"]
        assert abs(np.median(ratio) - 1) < 0.1 and ratio.between(0.6, 1.4).all()  # noise: +-1 in SNR
        assert (np.abs(found[f"dt_{ifo}"]) <= 0.005).all()  # measured: |dt| <= 3.4 ms, centred on 0


def test_bank_templates_built_longest_first_and_packed_in_placement_order(bank_file):
    """``build_bank`` hands the map its batches longest template first (chirp time from
    ``f_low - 2 Hz``) and packs the built templates back in placement order: each row is the
    template placed there, with the filters a build of that template alone gives."""
    from gwbatch.conditioning.psd import design
    from gwbatch.config import load_bank_config
    from gwbatch.spiir.bank import build_template, place, template_duration
    from gwbatch.spiir.cache import build_bank, in_process

    cfg = load_bank_config(bank_file)
    psd = design("aLIGO", sample_rate=cfg.sample_rate)
    templates = place(cfg, psd)
    assert len(templates) > 8  # several batches
    handed = []

    def recording(fn, args, items, **kw):
        handed.extend(items)
        yield from reversed(list(in_process(fn, args, items, **kw)))  # results in any order

    bank, _ = build_bank(cfg, psd, parallel=recording, templates=templates)
    durations = [template_duration(t, cfg) for _, batch in handed for t in batch]
    assert durations == sorted(durations, reverse=True)
    assert durations != [template_duration(t, cfg) for t in templates]  # the order was changed
    assert np.array_equal(bank.mass1, [t.mass1 for t in templates])
    assert np.array_equal(bank.mass2, [t.mass2 for t in templates])
    for i in (0, len(templates) // 2, len(templates) - 1):
        alone = build_template(templates[i], cfg, psd)
        assert bank.n_filters[i] == alone.a.size
        assert np.allclose(bank.a[i, : alone.a.size], alone.a, rtol=1e-6, atol=0)
