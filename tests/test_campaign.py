"""Whole campaigns on a small simulated store: the output contract, identical results in-process and
on a 2-worker LocalCluster, resume after a failed chunk, refusals, bad strain, and the CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zarr

from gwbatch.config import validate_campaign
from gwbatch.errors import OutputError
from gwbatch.io.tables import read_table
from gwbatch.searches.pulse import PulseSearch
from workflow.campaign import run_campaign
from workflow.cli import main
from workflow.execute import ChunkFailed

REPO = Path(__file__).parent.parent


def make_campaign(store, out, **overrides):
    raw = {
        "name": "small",
        "data": {"store": str(store)},
        "search": {"kind": "pulse", "series": "energy", "threshold": 5.0, "decimation": [16, 8, 8]},
        "background": {"slides": 50},
        "plan": {"chunk": 64.0},
        "cluster": {"kind": "in-process", "dashboard_address": ":0"},
        "backend": "numpy",
        "output": {"dir": str(out)},
    }
    for dotted, value in overrides.items():
        node = raw
        *path, last = dotted.split("__")
        for p in path:
            node = node.setdefault(p, {})
        node[last] = value
    return validate_campaign(raw)


@pytest.fixture(scope="module")
def reference_run(small_store, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "ref"
    return run_campaign(make_campaign(small_store, out), progress=False)


def test_output_contract(reference_run):
    out = reference_run.out
    for name in ("candidates.parquet", "triggers.parquet", "background.parquet", "manifest.json", "report.html",
                 "injections.parquet", "gates.parquet"):
        assert (out / name).is_file(), name
    cands = read_table(out / "candidates.parquet")
    for col in ("search", "gps_time", "ifos", "snr", "far", "ifar_years", "far_exclusive", "time_H1", "snr_L1", "rho_H1"):
        assert col in cands.columns
    assert (cands["search"] == "pulse").all() and (cands["far"] > 0).all()
    assert cands["far"].is_monotonic_increasing
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["counts"]["candidates"] == len(cands)
    assert len(manifest["livetime"]["per_slide_seconds"]) == 51
    # the default deep slides (auto: as many as the 256 s span holds) add their livetime to the base slides'
    live = manifest["livetime"]
    assert manifest["background"]["deep_slides"] > 0 and live["deep_slides_seconds"] > 0
    assert live["background_seconds"] == pytest.approx(sum(live["per_slide_seconds"][1:]) + live["deep_slides_seconds"])
    assert {c["status"] for c in manifest["chunks"]} == {"done"} and len(manifest["chunks"]) == 4
    assert manifest["devices"] == ["cpu"] and manifest["campaign"]["name"] == "small"
    assert "dask" in manifest["versions"] and "inclusive" in manifest["background"]["far_convention"]
    # Livetime: 256 s minus the whitening filter's half-length at each end of the store.
    assert manifest["livetime"]["analysed_seconds"]["H1"] == pytest.approx(254.0)
    html = (out / "report.html").read_text()
    assert "<svg" in html and "small" in html
    # time inside the tasks per stage: each chunk's stages within its time, their sums in the timing
    for c in manifest["chunks"]:
        assert set(c["stage_seconds"]) == {"read", "condition", "search"}  # the pulse search has no network stage
        assert all(v > 0 for v in c["stage_seconds"].values()) and sum(c["stage_seconds"].values()) <= c["seconds"]
    timing = manifest["timing"]
    assert sum(timing["task_stages"].values()) == pytest.approx(timing["chunk_seconds_total"])
    assert timing["task_stages"]["read"] == pytest.approx(sum(c["stage_seconds"]["read"] for c in manifest["chunks"]))
    assert "inside the chunk tasks: search" in html


def test_loud_injections_found(reference_run):
    inj = reference_run.reduced.injections
    assert len(inj) == 8 and inj["analysed"].all() and inj["found"].all()
    for ifo in ("H1", "L1"):
        ratio = inj[f"found_rho_{ifo}"] / inj[f"injected_snr_{ifo}"]
        assert np.median(ratio) == pytest.approx(1.0, abs=0.15)
        assert (np.abs(inj[f"dt_{ifo}"]) <= np.maximum(inj["duration"], 1 / 1024)).all()


def test_local_cluster_gives_identical_tables(reference_run, small_store, tmp_path):
    campaign = make_campaign(small_store, tmp_path / "dist", cluster__kind="local", cluster__n_workers=2)
    dist = run_campaign(campaign, progress=False)
    assert dist.manifest["cluster"]["kind"] == "local" and dist.manifest["cluster"]["workers"] == 2
    pd.testing.assert_frame_equal(dist.reduced.candidates, reference_run.reduced.candidates, check_exact=True)
    pd.testing.assert_frame_equal(dist.reduced.background_events, reference_run.reduced.background_events,
                                  check_exact=True)


def test_resume_after_failed_chunk(reference_run, small_store, tmp_path, monkeypatch):
    out = tmp_path / "run"
    campaign = make_campaign(small_store, out)
    original = PulseSearch.process

    def fail_on_chunk_2(self, task, resources):
        if task.spec.index == 2:
            raise RuntimeError("worker lost")
        return original(self, task, resources)

    monkeypatch.setattr(PulseSearch, "process", fail_on_chunk_2)
    with pytest.raises(ChunkFailed, match=r"1 chunk\(s\) failed; the others are done(.|\n)*chunk 2 .* failed: "
                                          r"RuntimeError: worker lost(.|\n)*rerun with --resume"):
        run_campaign(campaign, progress=False)
    # The other chunks ran and are checkpointed; the manifest says which failed, and nothing final
    # that looks complete is written.
    assert not (out / "candidates.parquet").exists() and not (out / "report.html").exists()
    span = 64 * 1024  # checkpoints are named by the samples their chunk owns
    assert sorted(p.name for p in (out / "chunks").glob("*.json")) == [
        f"chunk-{k * span:013d}-{(k + 1) * span:013d}.json" for k in (0, 1, 3)]
    failed = json.loads((out / "manifest.json").read_text())
    assert failed["status"] == "failed" and [c["status"] for c in failed["chunks"]] == ["done", "done", "failed", "done"]
    assert failed["failed"][0]["index"] == 2 and "RuntimeError: worker lost" in failed["failed"][0]["error"]
    assert failed["timing"]["parts"][0]["ended"] == "failed" and failed["timing"]["parts"][0]["chunks_failed"] == 1
    with pytest.raises(OutputError, match="holds a run with failed chunks .see its manifest.json.; pass --resume"):
        run_campaign(campaign, progress=False)
    monkeypatch.setattr(PulseSearch, "process", original)
    resumed = run_campaign(campaign, resume=True, progress=False)
    assert [c["status"] for c in resumed.manifest["chunks"]] == ["reused", "reused", "done", "reused"]
    assert resumed.manifest["status"] == "complete"
    # a reused chunk keeps the stage times it was checkpointed with
    first = json.loads((out / "chunks" / f"chunk-{0:013d}-{span:013d}.json").read_text())
    assert resumed.manifest["chunks"][0]["stage_seconds"] == first["stage_seconds"] and first["stage_seconds"]["read"] > 0
    pd.testing.assert_frame_equal(resumed.reduced.candidates, reference_run.reduced.candidates, check_exact=True)


def test_finished_and_foreign_directories(small_store, tmp_path):
    out = tmp_path / "run"
    campaign = make_campaign(small_store, out, background__slides=5)
    first = run_campaign(campaign, progress=False)
    first_tables = {t: read_table(out / t) for t in ("candidates.parquet", "background.parquet", "triggers.parquet")}
    with pytest.raises(OutputError, match="holds a finished run; pass --resume .* or --overwrite"):
        run_campaign(campaign, progress=False)
    again = run_campaign(campaign, resume=True, progress=False)
    assert {c["status"] for c in again.manifest["chunks"]} == {"reused"}
    pd.testing.assert_frame_equal(again.reduced.candidates, first.reduced.candidates)
    fresh = run_campaign(campaign, overwrite=True, progress=False)
    assert {c["status"] for c in fresh.manifest["chunks"]} == {"done"}
    # the same configuration and store run again from nothing: bit-identical tables
    for table in ("candidates.parquet", "background.parquet", "triggers.parquet"):
        pd.testing.assert_frame_equal(read_table(out / table), first_tables[table], check_exact=True, obj=table)
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(OutputError, match="not a gwbatch run directory"):
        run_campaign(make_campaign(small_store, foreign), overwrite=True, progress=False)
    assert (foreign / "notes.txt").read_text() == "keep me"


def test_nonfinite_strain_and_dq_gaps_are_masked(small_store, tmp_path):
    store = tmp_path / "bad.zarr"
    shutil.copytree(small_store, store)
    group = zarr.open_group(store, mode="r+")
    fs = 1024
    group["strain"][0, 100 * fs : 100 * fs + 50] = np.nan  # H1: NaN in science time
    group["strain"][0, 150 * fs] = np.inf
    dq = group["dq"][:]
    dq[1, 200:210] = 0  # L1: ten seconds out of science
    group["dq"][:] = dq
    from gwbatch.io.store import seal

    seal(store)  # a deliberate edit: without the seal the edited chunk fails its checksum
    run = run_campaign(make_campaign(store, tmp_path / "run", background__slides=5), progress=False)
    chunks = run.manifest["chunks"]
    assert sum(c["nonfinite_in_science"]["H1"] for c in chunks) == 51
    analysed = run.manifest["livetime"]["analysed_seconds"]
    # H1 loses 2 x 1 s whitening pad around each bad stretch; L1 loses its 10 s plus 2 x 1 s.
    assert analysed["H1"] == pytest.approx(254.0 - (50 / fs + 2.0) - (1 / fs + 2.0), abs=2 / fs)
    assert analysed["L1"] == pytest.approx(254.0 - 12.0, abs=2 / fs)
    trig = run.reduced.triggers
    h1 = trig[0]["gps_time"] - 1e9
    l1 = trig[1]["gps_time"] - 1e9
    assert not ((h1 > 99) & (h1 < 101.05)).any() and not ((l1 > 199) & (l1 < 211)).any()


def test_cli_exit_codes_and_messages(small_store, tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"name: cli\ndata: {{store: {small_store}}}\nsearch: {{kind: pulse}}\n"
                   f"cluster: {{kind: in-process}}\nbackend: numpy\noutput: {{dir: {tmp_path / 'out'}}}\nplan: {{chunk: 64}}\n")
    assert main(["run", str(cfg), "--dry-run"]) == 0
    assert "4 tasks" in capsys.readouterr().out
    assert main(["run", str(cfg), "--set", "search.threshold=-1"]) == 2
    assert "search.threshold: Input should be greater than 0 (got -1)" in capsys.readouterr().err
    assert main(["run", str(cfg), "--set", "data.ifos=[H1, V1]"]) == 3
    assert "V1, not in store" in capsys.readouterr().err
    assert main(["run", str(cfg), "--set", f"data.store={tmp_path / 'nothing.zarr'}"]) == 3
    assert main(["run", str(cfg), "--no-progress", "--set", "background.slides=3"]) == 0
    assert "results in" in capsys.readouterr().out
    assert main(["run", str(cfg), "--no-progress"]) == 4
    assert "holds a finished run" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # refused by the command line itself, as argparse refuses
        main(["run", str(cfg), "--resume", "--overwrite"])
    assert exit_.value.code == 2 and "not allowed with argument --resume" in capsys.readouterr().err


def test_python_m_gwbatch_is_the_cli():
    out = subprocess.run([sys.executable, "-m", "gwbatch", "--help"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0 and "simulate" in out.stdout and "ingest" in out.stdout and "run" in out.stdout
    script = shutil.which("gwbatch", path=str(REPO / ".venv" / "bin")) or shutil.which("gwbatch")
    if script:
        assert subprocess.run([script, "--help"], capture_output=True).returncode == 0


def test_no_candidates_still_writes_complete_outputs(small_store, tmp_path):
    run = run_campaign(make_campaign(small_store, tmp_path / "run", search__threshold=200.0, background__slides=5),
                       progress=False)
    cands = read_table(run.out / "candidates.parquet")
    assert len(cands) == 0 and {"gps_time", "snr", "far", "ifar_years", "snr_H1", "time_L1"} <= set(cands.columns)
    assert len(read_table(run.out / "background.parquet")) == 0
    assert json.loads((run.out / "manifest.json").read_text())["counts"]["candidates"] == 0
    assert "no" in (run.out / "report.html").read_text().lower()


def test_address_cluster_kind(reference_run, small_store, tmp_path):
    """cluster.kind 'address' connects to a running scheduler and gives the same tables."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        campaign = make_campaign(small_store, tmp_path / "addr", cluster__kind="address",
                                 cluster__address=cluster.scheduler_address)
        run = run_campaign(campaign, progress=False)
    assert run.manifest["cluster"]["kind"] == "address" and run.manifest["cluster"]["workers"] == 1
    pd.testing.assert_frame_equal(run.reduced.candidates, reference_run.reduced.candidates)


def test_code_version_names_only_gwbatch_own_checkout(tmp_path):
    """Provenance gives a commit only when gwbatch's own directory is the top of a git checkout: a
    copy of the code inside another repository (an unpacked release in a project tree) gets none,
    not that repository's commit."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "outer"
    for package in ("gwbatch", "workflow"):
        shutil.copytree(Path(__file__).resolve().parents[1] / package, repo / "vendored" / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "outer"], check=True)
    probe = "import gwbatch; from workflow.manifest import code_version; print(gwbatch.__file__, code_version())"
    out = subprocess.run([sys.executable, "-c", probe], cwd=repo / "vendored", capture_output=True, text=True,
                         check=True).stdout.strip()
    where, version = out.split(" ", 1)
    assert Path(where).resolve().is_relative_to(repo.resolve()), where  # the copy, not this checkout
    assert version.endswith(", None)"), version


def test_searches_tasks_are_interleaved_each_longest_first():
    """Chunk tasks of a multi-search campaign alternate between the searches in proportion to
    their counts (so a worker running two tasks at once mostly runs two searches side by side),
    and each search's own tasks keep their longest-first order."""
    from types import SimpleNamespace

    from workflow.schedule import task_priorities

    def member(name, kind, reads):
        specs = [SimpleNamespace(index=i, read_start=0, read_stop=n) for i, n in enumerate(reads)]
        settings = SimpleNamespace(ifos=("H1", "L1"), network=SimpleNamespace(slides=10))
        return SimpleNamespace(name=name, todo=specs, plan=SimpleNamespace(search=kind, settings=settings))

    members = [member("spiir", "spiir", [100, 120, 100, 100]), member("pulse", "pulse", [100, 100])]
    priority = task_priorities(members)
    order = [key for key, _ in sorted(priority.items(), key=lambda kv: -kv[1])]
    assert [name for name, _ in order] == ["spiir", "pulse", "spiir", "spiir", "pulse", "spiir"]
    assert [i for name, i in order if name == "spiir"][0] == 1  # its longest task first
    assert len(set(priority.values())) == len(priority)
