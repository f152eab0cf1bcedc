"""Batch clusters through dask-jobqueue (cluster.kind slurm, pbs, htcondor): the job script a dry run
prints, refusals of bad cluster.jobqueue settings, and a whole campaign on jobs started as local
processes (dask-jobqueue's LocalCluster) giving the in-process tables."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from gwbatch.config import load_campaign
from gwbatch.errors import ConfigError, GwbatchError
from tests.test_campaign import make_campaign
from workflow import cluster as cluster_mod
from workflow.campaign import run_campaign
from workflow.cli import main

DEMO = Path(__file__).parent.parent / "configs" / "demo.yaml"

JOB = {"account": "ligo", "walltime": "02:30:00", "memory": "12GiB",
       "job_script_prologue": "[module load gcc, source /opt/env.sh]"}
CPU = {"cores": 4, "processes": 2}
GPU = {"cores": 8, "processes": 2, "gpus": 2}


def dry_run(capsys, store, kind, settings: dict) -> str:
    argv = ["run", str(DEMO), "--dry-run", "--set", f"data.store={store}", "--set", "cluster.kind=local"]
    for key, value in settings.items():
        argv += ["--set", f"cluster.jobqueue.{key}={value}"]
    assert main(argv + ["--cluster", kind]) == 0  # --cluster comes after the --set items
    out = capsys.readouterr().out
    assert "2 tasks" in out and f"job script ({kind}; adaptive, 0 to 1 jobs of {settings['processes']} worker(s)" in out
    return out.split("\njob script", 1)[1].split("\n", 1)[1]


@pytest.mark.parametrize("gpus", [False, True], ids=["cpu", "gpu"])
@pytest.mark.parametrize("kind", ["slurm", "pbs", "htcondor"])
def test_dry_run_prints_job_script(kind, gpus, small_store, capsys, tmp_path):
    settings = {**JOB, **(GPU if gpus else CPU), **({} if kind == "htcondor" else {"queue": "gpuq"})}
    script = dry_run(capsys, small_store, kind, settings)
    threads = settings["cores"] // settings["processes"]
    if gpus:  # one dask-cuda worker per GPU, each with cores / gpus threads
        assert re.search(r"-m dask cuda worker tcp://[\w.\-]+:\d+ ", script)
        assert f"--nthreads {threads} " in script and "--nworkers" not in script
        assert "export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0,1}" in script
    else:
        assert re.search(r"-m distributed.cli.dask_worker tcp://[\w.\-]+:\d+ ", script)
        assert f"--nthreads {threads} " in script and "--nworkers 2 " in script
    assert "--memory-limit 6.00GiB" in script  # memory / processes
    per_worker = settings["cores"] // (settings["gpus"] if gpus else settings["processes"])
    assert f"export NUMBA_NUM_THREADS=${{NUMBA_NUM_THREADS:-{per_worker}}}" in script  # the job's cores shared
    assert "module load gcc" in script and "source /opt/env.sh" in script
    lines = script.splitlines()
    if kind == "slurm":
        for line in ("#SBATCH -p gpuq", "#SBATCH -A ligo", "#SBATCH -t 02:30:00", "#SBATCH --mem=12G",
                     f"#SBATCH --cpus-per-task={settings['cores']}"):
            assert line in lines
        assert ("#SBATCH --gres=gpu:2" in lines) == gpus
    elif kind == "pbs":
        select = "select=1:ncpus=8:ngpus=2:mem=12GB" if gpus else "select=1:ncpus=4:mem=12GB"
        for line in ("#PBS -q gpuq", "#PBS -A ligo", "#PBS -l walltime=02:30:00", f"#PBS -l {select}"):
            assert line in lines
    else:
        for line in ("MY.DaskWorkerMemory = 12884901888", "RequestMemory = floor(MY.DaskWorkerMemory / 1048576)",
                     f"MY.DaskWorkerCores = {settings['cores']}", "MY.MaxRuntime = 9000", "accounting_group = ligo",
                     "Executable = /bin/sh", "Queue"):
            assert line in lines
        assert ("request_gpus = 2" in lines) == gpus
        assert re.search(r"Arguments = \"-c 'module load gcc; source /opt/env.sh; .*-m ", script)
    if kind != "htcondor":
        assert lines[0] == "#!/usr/bin/env bash"
        path = tmp_path / "job.sh"
        path.write_text(script)
        check = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr


def test_dry_run_of_other_kinds_has_no_job_script(small_store, capsys):
    assert main(["run", str(DEMO), "--dry-run", "--set", f"data.store={small_store}", "--cluster", "in-process"]) == 0
    assert "job script" not in capsys.readouterr().out


@pytest.mark.parametrize("settings, message", [
    ({}, "cluster: kind 'slurm' needs cluster.jobqueue.memory"),
    ({"memory": "lots"}, "cluster.jobqueue.memory: must be an amount of memory such as '16GiB'"),
    ({"memory": "8GiB", "gpus": 2}, "cluster.jobqueue: processes (1) must equal gpus (2) when gpus > 0"),
    ({"memory": "8GiB", "minimum_jobs": 3, "maximum_jobs": 2},
     "cluster.jobqueue: maximum_jobs (2) must be at least minimum_jobs (3)"),
    ({"memory": "8GiB", "walltime": "4h"}, "cluster.jobqueue.walltime: must be a positive time HH:MM:SS"),
    ({"memory": "8GiB", "cores": 2, "processes": 4}, "cluster.jobqueue: cores (2) must be at least processes (4)"),
], ids=["no-memory", "bad-memory", "processes-not-gpus", "max-below-min", "bad-walltime", "cores-below-processes"])
def test_bad_jobqueue_settings_refused(settings, message, small_store, capsys):
    argv = ["run", str(DEMO), "--dry-run", "--cluster", "slurm", "--set", f"data.store={small_store}"]
    for key, value in settings.items():
        argv += ["--set", f"cluster.jobqueue.{key}={value}"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err and "\n\n" not in captured.err.strip()
    assert "job script" not in captured.out


def test_htcondor_settings_checked(tmp_path):
    base = ["cluster.kind=htcondor", "cluster.jobqueue.memory=8GiB"]
    with pytest.raises(ConfigError, match=r"cluster.jobqueue.queue \('gpuq'\) has no HTCondor equivalent"):
        load_campaign(DEMO, [*base, "cluster.jobqueue.queue=gpuq"])
    with pytest.raises(ConfigError, match="HTCondor takes 'key = value' submit commands, got '--exclusive'"):
        load_campaign(DEMO, [*base, "cluster.jobqueue.job_extra_directives=[--exclusive]"])


def test_yaml_walltime_and_defaults(tmp_path):
    """An unquoted 12:00:00 is an integer to YAML (base 60); it is read back as HH:MM:SS."""
    path = tmp_path / "c.yaml"
    path.write_text("name: t\ndata: {store: x.zarr}\nsearch: {kind: pulse}\n"
                    "cluster:\n  kind: pbs\n  jobqueue:\n    memory: 16GiB\n    walltime: 12:00:00\n")
    jq = load_campaign(path).cluster.jobqueue
    assert jq.walltime == "12:00:00" and jq.walltime_seconds() == 43200
    assert (jq.cores, jq.processes, jq.gpus, jq.minimum_jobs, jq.maximum_jobs, jq.start_timeout) == (1, 1, 0, 0, 1, 600.0)
    assert cluster_mod.resolve_backend("auto", "pbs", 0) == "numpy"
    assert cluster_mod.resolve_backend("auto", "slurm", 2) == "cupy"
    assert cluster_mod.resolve_backend("numpy", "slurm", 2) == "numpy"


def test_missing_submit_command_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    cfg = load_campaign(DEMO, ["cluster.kind=slurm", "cluster.jobqueue.memory=1GiB"]).cluster
    with pytest.raises(ConfigError, match="cluster.kind 'slurm' submits jobs with sbatch, which is not on PATH"):
        with cluster_mod.start_cluster(cfg, "auto", 4):
            pass


@pytest.fixture
def local_jobs(monkeypatch):
    """cluster.kind slurm submits its job scripts as local processes (dask-jobqueue's LocalCluster);
    records the adaptive limits each cluster is given."""
    from dask_jobqueue.local import LocalCluster

    monkeypatch.setitem(cluster_mod.JOBQUEUE_CLASSES, "slurm", "dask_jobqueue.local.LocalCluster")
    kwargs_of = cluster_mod.jobqueue_cluster_kwargs

    def without_prologue(cfg):  # the stand-in runs the job's command without a shell (prologues: script tests)
        name, kwargs = kwargs_of(cfg)
        return name, {**kwargs, "job_script_prologue": []}

    monkeypatch.setattr(cluster_mod, "jobqueue_cluster_kwargs", without_prologue)
    calls = []
    adapt = LocalCluster.adapt

    def recording_adapt(self, *args, **kwargs):
        calls.append(kwargs)
        return adapt(self, *args, **kwargs)

    monkeypatch.setattr(LocalCluster, "adapt", recording_adapt)
    return calls


def test_campaign_on_adaptive_local_jobs_matches_in_process(local_jobs, small_store, tmp_path):
    low = {"search__threshold": 4.0}  # low enough for a background
    reference = run_campaign(make_campaign(small_store, tmp_path / "ref", **low), progress=False)
    jobqueue = {"memory": "1GiB", "maximum_jobs": 2, "start_timeout": 60, "walltime": "00:10:00"}
    campaign = make_campaign(small_store, tmp_path / "jobs", cluster__kind="slurm", cluster__jobqueue=jobqueue, **low)
    run = run_campaign(campaign, progress=False)
    assert run.manifest["cluster"] == {**run.manifest["cluster"], "kind": "slurm", "workers": 2, "backend": "numpy"}
    # One job until the first worker arrives, then the configured limits.
    assert local_jobs == [{"minimum_jobs": 1, "maximum_jobs": 2}, {"minimum_jobs": 0, "maximum_jobs": 2}]
    workers = {c["worker"] for c in run.manifest["chunks"]}
    assert 1 <= len(workers) <= 2 and not any(w.endswith(f":{os.getpid()}") for w in workers)
    pd.testing.assert_frame_equal(run.reduced.candidates, reference.reduced.candidates)
    pd.testing.assert_frame_equal(run.reduced.background_events, reference.reduced.background_events)
    assert len(reference.reduced.candidates) > 0 and len(reference.reduced.background_events) > 0


def test_no_worker_within_start_timeout(local_jobs, monkeypatch):
    """Jobs whose worker never starts: the run stops after start_timeout with a message naming the kind."""
    from dask_jobqueue.local import LocalJob

    async def cancel(cls, job_id, cancel_command):  # as batch jobs do: nothing to cancel without a job id
        if job_id:
            os.kill(int(job_id), 9)

    monkeypatch.setattr(LocalJob, "_close_job", classmethod(cancel))
    cfg = load_campaign(DEMO, ["cluster.kind=slurm", "cluster.jobqueue.memory=1GiB", "cluster.jobqueue.python=/bin/false",
                               "cluster.jobqueue.start_timeout=3", "cluster.dashboard_address=:0"]).cluster
    with pytest.raises(GwbatchError, match=r"cluster.kind 'slurm': no worker joined within "
                                           r"cluster.jobqueue.start_timeout \(3 s\)"):
        with cluster_mod.start_cluster(cfg, "auto", 4):
            pass
