"""The memory plan: task estimates against the workers, refused before any task runs with the
setting to change; the suggested setting fits."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from gwbatch.config import validate_campaign
from gwbatch.errors import ConfigError
from gwbatch.io.store import read_meta
from workflow.cli import main
from workflow.memory import USABLE, GiB, WorkerMemory, check_memory
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
        check_memory({"": plan}, have)
    msg = str(err.value)
    assert "GPU memory is 8.0 GiB" in msg and "plan.chunk (128 s)" in msg and "search.batch (4096) to about" in msg
    batch = int(msg.split("search.batch (4096) to about ")[1].split()[0])
    smaller = campaign(small_store, kind="spiir", bank="configs/banks/bbh-small.yaml", batch=batch)
    check_memory({"": make_plan(smaller, read_meta(small_store))}, have)  # the advice fits


def test_cpu_worker_needs_host_memory_for_the_kernels_too(small_store):
    c = campaign(small_store, kind="pulse")
    plan = make_plan(c, read_meta(small_store))
    cpu = WorkerMemory(host=int(plan.task_memory_bytes / USABLE) - 1, device=None)
    with pytest.raises(ConfigError, match=r"pulse tasks need .* memory limit .* lower plan\.chunk \(128 s\) .*"
                                          r"cluster\.memory_limit"):
        check_memory({"": plan}, cpu)
    gpu = WorkerMemory(host=cpu.host, device=64 * GiB)  # the same host memory suffices when kernels run on a GPU
    check_memory({"": plan}, gpu)


def test_member_settings_are_named_by_their_path(small_store):
    c = campaign(small_store, kind="pulse")
    plan = make_plan(c, read_meta(small_store))
    with pytest.raises(ConfigError, match=r"pulse tasks need .* lower searches\.pulse\.plan\.chunk \(128 s\) to about"):
        check_memory({"pulse": plan}, WorkerMemory(host=None, device=plan.task_device_bytes // 2))


def test_no_setting_fits_is_said(small_store):
    """The burst search's fixed memory (sky tables, batches) cannot be cut by the chunk length."""
    c = campaign(small_store, kind="burst", sky_order=4, f_high=448.0)
    plan = make_plan(c, read_meta(small_store))
    with pytest.raises(ConfigError, match="no setting of this search makes it fit"):
        check_memory({"": plan}, WorkerMemory(host=None, device=GiB // 2))


def test_run_refused_before_any_task(small_store, tmp_path, capsys):
    """A worker memory limit too small for any task (20 MB) is refused before a cluster starts."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({
        "name": "m", "data": {"store": str(small_store)}, "search": {"kind": "pulse"}, "plan": {"chunk": 128.0},
        "cluster": {"kind": "local", "n_workers": 1, "memory_limit": "20MB", "dashboard_address": ":0"},
        "backend": "numpy", "output": {"dir": str(tmp_path / "out")},
    }))
    assert main(["run", str(cfg), "--no-progress"]) == 2
    assert "cluster.memory_limit" in capsys.readouterr().err
    assert not list((tmp_path / "out").glob("chunks/*")) and not (tmp_path / "out" / "manifest.json").exists()


def _hold_and_record(ledger, need, budget, log, name, seconds):
    import time

    with ledger.hold(need, budget):
        log.append(("start", name, time.perf_counter()))
        time.sleep(seconds)
        log.append(("end", name, time.perf_counter()))


def _intervals(log):
    start = {n: t for kind, n, t in log if kind == "start"}
    return {n: (start[n], t) for kind, n, t in log if kind == "end"}


def _overlap(a, b):
    return a[0] < b[1] and b[0] < a[1]


def test_ledger_runs_together_only_what_fits_and_a_task_alone_always():
    """Two 7-unit tasks in a 10-unit budget take turns; a 2-unit task runs beside either; a task
    larger than the whole budget runs once nothing of its kind is held (never stalls)."""
    import threading

    from workflow.memory import Ledger

    ledger, log, budget = Ledger(), [], {"device": 10.0}
    tasks = [("big1", 7.0, 0.0), ("big2", 7.0, 0.05), ("small", 2.0, 0.1), ("huge", 20.0, 0.15)]
    threads = []
    for name, need, delay in tasks:
        t = threading.Timer(delay, _hold_and_record, (ledger, {"device": need}, budget, log, name, 0.4))
        t.start()
        threads.append(t)
    for t in threads:
        t.join(timeout=30)
    span = _intervals(log)
    assert set(span) == {"big1", "big2", "small", "huge"}
    assert not _overlap(span["big1"], span["big2"])
    assert _overlap(span["big1"], span["small"])  # 7 + 2 <= 10
    assert all(not _overlap(span["huge"], span[n]) for n in ("big1", "big2", "small"))
    assert ledger.held == {"device": 0.0}


def test_a_two_thread_worker_runs_tasks_together_only_within_its_budget(tmp_path):
    """On a worker with two threads and a 1 GiB memory limit (budget 0.7 GiB), two tasks needing
    0.5 GiB each never run at the same time, while two needing 0.1 GiB do."""
    from distributed import LocalCluster

    from workflow.cluster import Cluster
    from workflow.execute import Call, run_calls
    from workflow.memory import HOST

    def calls(prefix, need, n, priority):
        return [Call(f"{prefix}-{i}", _timed_sleep, (0.6,), f"{prefix}{i}", priority=priority, need={HOST: need})
                for i in range(n)]

    with LocalCluster(n_workers=1, threads_per_worker=2, memory_limit="1GiB", processes=True,
                      dashboard_address=":0") as lc:
        from distributed import Client

        with Client(lc) as client:
            cluster = Cluster(client, "address", 1, None, "numpy", 2)
            done = run_calls(cluster, calls("big", 0.5 * GiB, 2, 0) + calls("small", 0.1 * GiB, 2, 1),
                             failure=None, desc="tasks", progress=False)
            by = {call.item: span for call, span in done}
    assert not _overlap(by["big0"], by["big1"])
    assert _overlap(by["small0"], by["small1"])


def _timed_sleep(seconds: float):
    import time

    start = time.time()
    time.sleep(seconds)
    return start, time.time()


def radio_plan(store, **search):
    c = validate_campaign({"name": "r", "data": {"store": str(store)}, "plan": {"chunk": 50.0},
                           "search": {"kind": "radio", "dm_max": 2000.0, "decimate": False, **search}})
    return make_plan(c, read_meta(store))


def test_radio_dm_batch_auto_is_sized_to_the_gpu(small_filterbank):
    """``search.dm_batch: auto`` (the default): on a GPU worker the largest batch whose task fits
    the GPU's usable memory, the whole plan where it all fits; on a CPU worker, and where set, the
    value stays."""
    from gwbatch.searches import get_search
    from workflow.memory import DEVICE, fit_memory, memory_need

    plan = radio_plan(small_filterbank)
    settings, search = plan.settings, get_search("radio")
    ndm = settings.dm_plan.ndm
    assert settings.dm_batch_auto and settings.dm_batch == 512 and ndm >= 20  # measured: 40 trials
    read = max(c.read_stop - c.read_start for c in plan.chunks)

    def need(batch):  # device bytes of one task
        return memory_need(search, search.memory_knobs(settings)["search.dm_batch"].with_value(batch), read,
                           len(plan.ifos), True)[DEVICE]

    whole = fit_memory({"": plan}, WorkerMemory(host=None, device=64 * GiB))[""]
    assert whole.settings.dm_batch == ndm and whole.task_device_bytes == need(ndm)
    # a GPU whose usable memory holds exactly half the trials
    half = ndm // 2
    device = int(need(half) / USABLE) + 2
    fitted = fit_memory({"": plan}, WorkerMemory(host=None, device=device))[""]
    assert fitted.settings.dm_batch == half and need(half + 1) > USABLE * device
    assert fitted.task_device_bytes == need(half) < whole.task_device_bytes
    check_memory({"": fitted}, WorkerMemory(host=None, device=device))
    assert fit_memory({"": plan}, WorkerMemory(host=64 * GiB, device=None))[""].settings.dm_batch == 512
    fixed = radio_plan(small_filterbank, dm_batch=7)
    assert fit_memory({"": fixed}, WorkerMemory(host=None, device=64 * GiB))[""].settings.dm_batch == 7


def test_radio_work_counts_the_measured_boxcar_sigma(small_filterbank):
    """``search.sigma: measured`` (the default) adds one group of measured trials' temporaries to a
    task's work (tests/test_radio_boxcar_sigma.py holds the measurement within it); ``white`` none."""
    from gwbatch.radio.pulses import SIGMA_BYTES, SIGMA_GROUP_SAMPLES
    from gwbatch.searches import get_search

    measured, white = radio_plan(small_filterbank), radio_plan(small_filterbank, sigma="white")
    search = get_search("radio")
    read = max(c.read_stop - c.read_start for c in measured.chunks)
    extra = search.work_bytes(measured.settings, read) - search.work_bytes(white.settings, read)
    assert extra == SIGMA_BYTES * SIGMA_GROUP_SAMPLES


def test_radio_dm_batch_refuses_other_words(small_filterbank):
    with pytest.raises(Exception, match="dm_batch"):
        radio_plan(small_filterbank, dm_batch="all")


def test_spiir_batch_auto_is_sized_to_cpu_and_gpu_workers(small_store):
    """``search.batch: auto`` (the default): the most templates per pass, up to 256, whose task fits
    70% of a CPU worker's memory limit or of a GPU worker's GPU, so a long chunk runs with fewer
    templates a pass instead of being refused; the coherent stage's batch follows; a number is kept."""
    from workflow.memory import DEVICE, HOST, fit_memory, memory_need
    from gwbatch.searches import get_search

    c = campaign(small_store, kind="spiir", bank="configs/banks/bbh-small.yaml")
    plan = make_plan(c, read_meta(small_store))
    assert plan.settings.batch == 256 and plan.settings.batch_auto
    search = get_search("spiir")
    assert fit_memory({"": plan}, WorkerMemory(host=64 * GiB, device=None))[""].settings.batch == 256
    for part, gpu, room in ((HOST, False, 100), (DEVICE, True, 40)):  # memory for exactly `room` templates a pass
        limit = int(memory_need(search, replace(plan.settings, batch=room), plan.read_samples, 2, gpu)[part] / USABLE) + 1
        have = WorkerMemory(host=limit if not gpu else 64 * GiB, device=limit if gpu else None)
        fitted = fit_memory({"": plan}, have)[""].settings
        assert fitted.batch == room and fitted.coherent.batch == room
        check_memory({"": replace(plan, settings=fitted)}, have)
    fixed = make_plan(campaign(small_store, kind="spiir", bank="configs/banks/bbh-small.yaml", batch=256),
                      read_meta(small_store))
    small = WorkerMemory(host=int(memory_need(search, replace(fixed.settings, batch=100), fixed.read_samples, 2,
                                              False)[HOST] / USABLE) + 1, device=None)
    assert fit_memory({"": fixed}, small)[""].settings.batch == 256  # a number is the user's: refused instead
    with pytest.raises(ConfigError, match=r"search\.batch \(256\) to about 100\b"):
        check_memory({"": fixed}, small)
