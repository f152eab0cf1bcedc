"""A campaign's injections from a file (issue 24 item 4): a sim_inspiral XML of the simulator's own
binaries, injected by LALSuite into a noise-only store as its chunks are read, is found and
recovered like the same binaries written into the store by ``gwbatch simulate --cbc-injections``.

The two stores share their noise (one seed; the simulator's noise is counter-based).  The binaries
(5-6 Msun, TaylorF2 from 30 Hz at 512 Hz) end at the Nyquist frequency before their ISCO, where
LALSuite's TaylorF2 and the project's are the same waveform (tests/test_injection_files.py).  The
full-size check (100 BNS at 4096 Hz) is benchmarks/injection_files.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from benchmarks.injection_files import compare, write_sim_inspiral
from gwbatch.config import validate_campaign
from gwbatch.errors import DataError
from gwbatch.io.store import read_injections, read_meta
from gwbatch.io.tables import read_table
from gwbatch.simulate import simulate_store
from gwbatch.simulate.cbc import CbcSpec
from workflow.campaign import run_campaign
from workflow.plan import make_plan

pytest.importorskip("lalsimulation")
FS = 512


def _campaign(store, out, bank, cache, injections=None):
    return validate_campaign({
        "name": out.name,
        "data": {"store": str(store), **({"injections": str(injections)} if injections else {})},
        "search": {"kind": "spiir", "bank": str(bank), "threshold": 5.0, "psd": "aLIGO", "bank_cache": str(cache)},
        "coincidence": {"window": 0.005},
        "background": {"slides": 10, "slide_step": 2.0},
        "plan": {"chunk": 64.0},
        "cluster": {"kind": "in-process"},
        "backend": "numpy",
        "output": {"dir": str(out)},
    })


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("inject")
    bank = tmp / "bank.yaml"
    bank.write_text(yaml.safe_dump({"name": "light", "approximant": "TaylorF2", "mass1": [5.0, 6.0],
                                    "mass2": [5.0, 6.0], "f_low": 30.0, "sample_rate": float(FS),
                                    "placement": {"minimal_match": 0.95}}))
    spec = CbcSpec(count=10, mass1=(5.0, 6.0), mass2=(5.0, 6.0), snr=(10.0, 25.0), f_low=30.0)
    a = simulate_store(tmp / "A.zarr", ifos=("H1", "L1"), duration=256, sample_rate=FS, seed=5, cbc=spec)
    b = simulate_store(tmp / "B.zarr", ifos=("H1", "L1"), duration=256, sample_rate=FS, seed=5)
    xml = write_sim_inspiral(tmp / "injections.xml.gz", read_injections(a), FS)
    run_a = run_campaign(_campaign(a, tmp / "simulator", bank, tmp / "banks"), progress=False)
    run_b = run_campaign(_campaign(b, tmp / "file", bank, tmp / "banks", xml), progress=False)
    return dict(a=run_a, b=run_b, store_b=b, xml=xml, bank=bank, tmp=tmp)


def test_file_injections_are_found_and_recovered_like_the_simulator(pair):
    sim, fil = pair["a"].reduced.injections, pair["b"].reduced.injections
    result = compare(sim, fil)
    assert result["injections"] == 10 and fil["analysed"].all()
    assert result["found_only_simulator"] == 0 and result["found_only_file"] == 0 and result["found_both"] >= 9
    # the same signal in the same noise: recovered network SNRs agree (median ratio within 2%)
    assert abs(result["recovered_snr_ratio_percentiles_5_25_50_75_95"][2] - 1.0) < 0.02, result
    # optimal SNRs measured against each chunk's own PSD, against the simulator's design-PSD figures
    assert abs(result["optimal_snr_ratio_median"] - 1.0) < 0.05, result
    # the arrivals are the injected strain's envelope peaks: the found triggers lie within a few samples
    found = fil[fil["found"]]
    for ifo in ("H1", "L1"):
        assert np.all(np.abs(found[f"dt_{ifo}"]) < 4.0 / FS), found[f"dt_{ifo}"]


def test_the_store_is_not_modified_and_the_file_counts_in_the_identity(pair):
    meta = read_meta(pair["store_b"])
    assert not meta.has_injections  # the signals were added at read, never written
    run = json.loads((pair["b"].out / "run.json").read_text())
    data = next(iter(run["members"].values()))["settings"]["data"] if "members" in run else run["settings"]["data"]
    assert "injections" not in data and len(data["injections_sha256"]) == 64
    table = read_table(pair["b"].out / "injections.parquet")
    assert len(table) == 10 and (table["waveform"] == "cbc").all()


def test_a_bad_injection_file_is_refused_before_any_task(pair, tmp_path):
    bad = tmp_path / "bad.xml"
    bad.write_text(pair["xml"].read_bytes()[:10].decode("latin-1"))
    with pytest.raises(DataError, match="bad.xml"):
        make_plan(_campaign(pair["store_b"], tmp_path / "x", pair["bank"], pair["tmp"] / "banks", bad),
                  read_meta(pair["store_b"]))
