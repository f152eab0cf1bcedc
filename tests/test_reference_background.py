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
    # half the reference's slides: the run's own background is half as long as the one its FARs use
    measured = run_campaign(_campaign(loud, base / "inj-run", slides=20, reference=str(base / "noise-run")),
                            progress=False)
    own = run_campaign(_campaign(loud, base / "inj-own", slides=20), progress=False)
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
        "deep_cut": None, "tail_fit": None}
    # the bound and the reach stated are those of the background the FARs come from: the reference's
    # (they were the run's own, 15x shorter in one probe, while every FAR came from the reference)
    bg = measured.manifest["background"]
    assert bg["far_bound_hz"] == pytest.approx(1.0 / t_ref, rel=1e-12)
    assert bg["ifar_reach_years"] == pytest.approx(t_ref / (365.25 * 86400.0), rel=1e-12)
    assert measured.manifest["livetime"]["background_seconds"] == pytest.approx(t_ref / 2, rel=0.01)
    report = (base / "inj-run" / "report.html").read_text()
    assert f"the background of {base / 'noise-run'}" in report and "IFAR reach (of the reference&#x27;s background)" in report
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


def test_a_reference_whose_deep_slides_kept_every_event_counts_them(tmp_path):
    """A reference run whose deep slides kept every event (a cut of -inf, null in its manifest, as
    when its base slides found nothing) counts its deep events and livetime.  The null was read as a
    cut of +inf: the deep background was ignored, and a candidate below four deep events got the
    bound 1 / (base livetime), 25% below its counted FAR, labelled a bound."""
    from gwbatch.background.reference import reference_far
    from workflow.reference import read_reference

    (tmp_path / "manifest.json").write_text(json.dumps({
        "status": "complete", "background": {"slides": 2, "deep_slides": 10, "deep_cut": None},
        "livetime": {"per_slide_seconds": [100.0, 50.0, 50.0], "deep_slides_seconds": 1000.0}}))
    pd.DataFrame({"slide": [1, 3, 5, 8, 12], "snr": [5.0, 6.9, 7.3, 12.4, 14.2]}).to_parquet(
        tmp_path / "background.parquet")
    ref = read_reference(str(tmp_path), "snr")
    assert ref.cut == -np.inf and ref.deep_time == 1000.0 and ref.background_time == 1100.0
    far = reference_far(np.array([6.28, 20.0]), ref, tail=0).columns
    assert far["far"].tolist() == pytest.approx([4 / 1100.0, 1 / 1100.0], rel=1e-12)
    assert far["far_kind"].tolist() == ["counted", "bound"]
    json.dumps(ref.summary(), allow_nan=False)  # valid JSON: the cut of -inf is null, never -Infinity
    assert ref.summary()["deep_cut"] is None


def test_gated_time_is_counted_in_masked_seconds(tmp_path):
    """``livetime.masked_seconds.gated``: each gate takes 2 x half_width + 2 x taper of a detector's
    time (0.7 s here) out of the livetime, and the manifest counts it (it counted only non-finite
    samples, zero runs and vetoes)."""
    from gwbatch.simulate.glitches import GlitchSpec

    store = simulate_store(tmp_path / "g.zarr", ifos=("H1", "L1"), duration=256, sample_rate=2048, seed=5,
                           glitches=GlitchSpec(rate=0.02, snr=(400.0, 600.0), kinds=("blip",)))
    campaign = validate_campaign({**_campaign(store, tmp_path / "run").model_dump(mode="json"),
                                  "conditioning": {"gating": {"threshold": 50.0, "half_width": 0.25, "taper": 0.1}}})
    run = run_campaign(campaign, progress=False)
    gates = run.reduced.gates
    masked = run.manifest["livetime"]["masked_seconds"]
    assert len(gates) >= 3
    for ifo in ("H1", "L1"):
        n = int((gates["ifo"] == ifo).sum())
        assert masked[ifo]["gated"] == pytest.approx(0.7 * n, abs=n * 4 / 2048)  # a sample or two per edge
