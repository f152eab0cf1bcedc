"""``benchmarks/month.py``: the store it simulates is the one ``configs/month.yaml``'s header gives,
and its summary reads each search's reach, candidates and injections from a finished campaign."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from benchmarks.month import simulate_args, summarise
from gwbatch.config import load_run
from workflow.campaign import run_suite

SECONDS_PER_YEAR = 31557600.0


def test_simulation_is_the_configs_own():
    assert simulate_args() == ["--ifos", "H1,L1", "--duration", "2592000", "--sample-rate", "1024", "--seed", "13",
                               "--cbc-injections", "30", "--cbc-mass1", "10,16", "--cbc-mass2", "10,16",
                               "--cbc-snr", "12,40", "--cbc-spacing", "3600"]


def test_summary_of_a_finished_two_search_campaign(small_store, tmp_path):
    config = tmp_path / "two.yaml"
    config.write_text(yaml.safe_dump({
        "name": "two", "data": {"store": str(small_store)},
        "searches": {"loose": {"search": {"kind": "pulse", "threshold": 4.0},
                               "background": {"slides": 40, "slide_step": 1.0, "deep_slides": 0}},
                     "strict": {"search": {"kind": "pulse", "threshold": 6.0},
                                "background": {"slides": 40, "slide_step": 1.0}}},
        "plan": {"chunk": 64.0}, "cluster": {"kind": "in-process"}, "backend": "numpy"}))
    out = tmp_path / "run"
    run_suite(load_run(config), out=out, progress=False)
    got = summarise(out, top=3)
    assert sorted(got) == ["loose", "run timing", "strict"]
    timing = json.loads((out / "manifest.json").read_text())["timing"]
    assert got.pop("run timing")["stages"] == timing["stages"] and timing["stages"]["chunks"] > 0
    for name, row in got.items():
        manifest = json.loads((out / name / "manifest.json").read_text())
        candidates = pd.read_parquet(out / name / "candidates.parquet").sort_values("far")
        injections = pd.read_parquet(out / name / "injections.parquet")
        assert row["status"] == "complete" and row["chunks"] == 4
        assert row["livetime_days"] == pytest.approx(manifest["livetime"]["zero_lag_seconds"] / 86400.0)
        assert row["reach_counted_years"] == pytest.approx(manifest["livetime"]["background_seconds"] / SECONDS_PER_YEAR)
        assert [c["gps_time"] for c in row["loudest"]] == list(candidates["gps_time"].head(3))
        assert row["injections"]["analysed"] == 8 and row["injections"]["found"] == int(injections["found"].sum())
        assert row["removed_from_background"] == manifest["background"]["removed_from_background"]
        assert row["slide_step"] == 1.0 and row["chunk_stage_seconds"] == manifest["timing"]["chunk_seconds_total"]
        found = injections[injections["found"]]
        assert row["injections"]["found_at_1e4_years"] == int((found["found_ifar_years"] >= 1e4).sum())
        assert len(row["injections"]["below_1e4_years"]) == int((found["found_ifar_years"] < 1e4).sum()) > 0
    assert got["loose"]["deep_slides"] == 0 and got["strict"]["deep_slides"] > 0
    assert got["loose"]["injections"]["found"] >= got["strict"]["injections"]["found"] >= 5
