"""``background.reference``: an injection run's candidates measured against the background of the
same search over noise alone (gwbatch.background.reference), and the refusals of a reference that
does not match."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from gwbatch.config import validate_campaign
from gwbatch.errors import ConfigError
from gwbatch.simulate import simulate_store
from gwbatch.simulate.injections import InjectionSpec
from workflow.campaign import run_campaign


def _campaign(store, out, **background):
    return validate_campaign({
        "name": "ref", "data": {"store": str(store)},
        "search": {"kind": "pulse", "series": "energy", "threshold": 4.0},
        "background": {"slides": 40, "slide_step": 1.0, "deep_slides": 0, "far_tail": 0, **background},
        "plan": {"chunk": 128.0}, "cluster": {"kind": "in-process"}, "backend": "numpy",
        "output": {"dir": str(out)},
    })


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("reference")
    noise = simulate_store(base / "noise.zarr", ifos=("H1", "L1"), duration=512, sample_rate=2048, seed=21)
    loud = simulate_store(base / "inj.zarr", ifos=("H1", "L1"), duration=512, sample_rate=2048, seed=22,
                          injections=InjectionSpec(count=12, snr=(15.0, 40.0)))
    reference = run_campaign(_campaign(noise, base / "noise-run"), progress=False)
    measured = run_campaign(_campaign(loud, base / "inj-run", reference=str(base / "noise-run")), progress=False)
    own = run_campaign(_campaign(loud, base / "inj-own"), progress=False)
    return base, reference, measured, own


def test_candidates_are_counted_against_the_reference_background(runs):
    base, reference, measured, own = runs
    ref_bg = pd.read_parquet(base / "noise-run" / "background.parquet")["snr"].to_numpy()
    t_ref = reference.manifest["livetime"]["background_seconds"]
    cands = measured.reduced.candidates
    assert len(cands) >= 12 and len(ref_bg) > 10
    for _, row in cands.iterrows():
        n = int(np.sum(ref_bg >= row["snr"]))
        assert row["far"] == pytest.approx(max(n, 1) / t_ref, rel=1e-12)  # counted, or the bound 1 / T_ref
        assert row["far_kind"] == ("counted" if n else "bound")
        assert row["far_exclusive"] == row["far"]
    # the run's own background (the injections' shifted copies in it) is kept, but not used for FARs
    assert measured.manifest["background"]["reference"] == {
        "run": str(base / "noise-run"), "background_events": len(ref_bg), "background_seconds": t_ref,
        "deep_cut": None}
    assert len(measured.reduced.background_events) == len(own.reduced.background_events)
    # the injections are found at IFARs against noise alone: every loud one at the reference's bound
    inj = measured.reduced.injections
    loud = inj["found"] & (inj["found_snr"] > ref_bg.max())
    assert loud.sum() >= 6
    assert np.allclose(inj.loc[loud, "found_ifar_years"], t_ref / (365.25 * 86400.0))
    manifest = json.loads((base / "inj-run" / "manifest.json").read_text())
    assert manifest["background"]["reference"]["run"] == str(base / "noise-run")


def test_a_reference_that_does_not_match_is_refused(runs, tmp_path):
    base = runs[0]
    other = validate_campaign({**_campaign(base / "inj.zarr", tmp_path / "a").model_dump(mode="json"),
                               "search": {"kind": "pulse", "series": "energy", "threshold": 4.5},
                               "background": {"slides": 40, "slide_step": 1.0, "reference": str(base / "noise-run")}})
    with pytest.raises(ConfigError, match=r"another search section \(differs in threshold\)"):
        run_campaign(other, progress=False)
    with pytest.raises(ConfigError, match="is not a finished run: no manifest.json"):
        run_campaign(_campaign(base / "inj.zarr", tmp_path / "b", reference=str(tmp_path / "nowhere")), progress=False)
    assert not (tmp_path / "a" / "manifest.json").exists() and not (tmp_path / "b" / "manifest.json").exists()
