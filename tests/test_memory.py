"""The memory plan: task estimates against the workers, refused before any task runs with the
setting to change; the suggested setting fits."""

from __future__ import annotations

import pytest
import yaml

from gwbatch.config import validate_campaign
from gwbatch.errors import ConfigError
from gwbatch.io.store import read_meta
from workflow.cli import main
from workflow.memory import GiB, USABLE, WorkerMemory, check_memory
from workflow.plan import make_plan


def campaign(store, **search):
    return validate_campaign({"name": "m", "data": {"store": str(store)}, "search": search,
                              "plan": {"chunk": 128.0}, "background": {"slides": 10, "slide_step": 1.0}})


def test_spiir_refused_on_a_small_gpu_names_chunk_and_batch(small_store):
    c = campaign(small_store, kind="spiir", bank="configs/banks/bbh-small.yaml", batch=4096)
    plan = make_plan(c, read_meta(small_store))
    have = WorkerMemory(host=64 * GiB, device=8 * GiB)
    assert plan.task_device_bytes > USABLE * have.device  # 4096 templates x 140 s at 1024 Hz x 28 B
    with pytest.raises(ConfigError) as err:
        check_memory({"": plan}, {"": c}, have)
    msg = str(err.value)
    assert "GPU memory is 8.0 GiB" in msg and "plan.chunk (128 s)" in msg and "search.batch (4096) to about" in msg
    batch = int(msg.split("search.batch (4096) to about ")[1].split()[0])
    smaller = campaign(small_store, kind="spiir", bank="configs/banks/bbh-small.yaml", batch=batch)
    check_memory({"": make_plan(smaller, read_meta(small_store))}, {"": smaller}, have)  # the advice fits


def test_cpu_worker_needs_host_memory_for_the_kernels_too(small_store):
    c = campaign(small_store, kind="pulse")
    plan = make_plan(c, read_meta(small_store))
    cpu = WorkerMemory(host=int(plan.task_memory_bytes / USABLE) - 1, device=None)
    with pytest.raises(ConfigError, match=r"pulse tasks need .* memory limit .* lower plan\.chunk \(128 s\) .*"
                                          r"cluster\.memory_limit"):
        check_memory({"": plan}, {"": c}, cpu)
    gpu = WorkerMemory(host=cpu.host, device=64 * GiB)  # the same host memory suffices when kernels run on a GPU
    check_memory({"": plan}, {"": c}, gpu)


def test_member_settings_are_named_by_their_path(small_store):
    c = campaign(small_store, kind="pulse")
    plan = make_plan(c, read_meta(small_store))
    with pytest.raises(ConfigError, match=r"pulse tasks need .* lower searches\.pulse\.plan\.chunk \(128 s\) to about"):
        check_memory({"pulse": plan}, {"pulse": c}, WorkerMemory(host=None, device=plan.task_device_bytes // 2))


def test_no_setting_fits_is_said(small_store):
    """The burst search's fixed memory (sky tables, batches) cannot be cut by the chunk length."""
    c = campaign(small_store, kind="burst", sky_order=4, f_high=448.0)
    plan = make_plan(c, read_meta(small_store))
    with pytest.raises(ConfigError, match="no setting of this search makes it fit"):
        check_memory({"": plan}, {"": c}, WorkerMemory(host=None, device=GiB // 2))


def test_run_refused_before_any_task(small_store, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({
        "name": "m", "data": {"store": str(small_store)}, "search": {"kind": "pulse"}, "plan": {"chunk": 128.0},
        "cluster": {"kind": "local", "n_workers": 1, "memory_limit": "20MB", "dashboard_address": ":0"},
        "backend": "numpy", "output": {"dir": str(tmp_path / "out")},
    }))
    assert main(["run", str(cfg), "--no-progress"]) == 2
    assert not list((tmp_path / "out").glob("chunks/*")) and not (tmp_path / "out" / "manifest.json").exists()
