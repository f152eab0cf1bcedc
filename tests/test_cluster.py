"""Local clusters share the node's cores between workers: each worker's numba kernels get
``cores // workers`` threads (``NUMBA_NUM_THREADS``) unless the environment chooses."""

from __future__ import annotations

import os

import pytest

from gwbatch.config import ClusterConfig
from workflow.cluster import host_threads, start_cluster, usable_cores


@pytest.mark.parametrize("cores, workers, threads", [(64, 4, 16), (16, 1, 16), (2, 2, 1), (2, 3, 1), (10, 4, 2)])
def test_host_threads_share_the_cores(cores, workers, threads):
    assert host_threads(cores, workers) == threads


def _numba_threads():
    import numba

    return os.environ.get("NUMBA_NUM_THREADS"), numba.get_num_threads()


@pytest.mark.parametrize("preset", [None, "1"], ids=["share", "environment"])
def test_local_workers_get_their_share(preset, monkeypatch, spawned_workers):
    if preset is None:
        monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("NUMBA_NUM_THREADS", preset)
    expected = int(preset) if preset else host_threads(usable_cores(), 2)
    with start_cluster(ClusterConfig(kind="local", n_workers=2, dashboard_address=":0"), "numpy", 4) as cluster:
        seen = cluster.client.run(_numba_threads)
        # the client's own environment is untouched (its numba may already run with another count)
        assert os.environ.get("NUMBA_NUM_THREADS") == preset
    assert len(seen) == 2
    assert all(env == str(expected) and threads == expected for env, threads in seen.values()), seen


def _sleep_and_mark(folder: str, name: str, seconds: float) -> str:
    import pathlib
    import time

    pathlib.Path(folder, name).touch()
    time.sleep(seconds)
    return name


def test_deadline_lets_running_tasks_finish_and_starts_no_other(tmp_path):
    """At the deadline the tasks being executed finish and are returned; no other task starts."""
    import time

    from workflow.execute import Call, run_calls

    cfg = ClusterConfig(kind="local", n_workers=2, dashboard_address=":0")
    with start_cluster(cfg, "numpy", 8) as cluster:
        cluster.client.submit(sum, [1]).result()  # workers up
        # tasks of 2 s and the deadline at 3 s: the first two start however loaded the machine is
        # (at 1 s and 1.5 s, a loaded 2-core machine once started none before the deadline)
        calls = [Call(f"sleep-{i}", _sleep_and_mark, (str(tmp_path), f"t{i}", 2.0), i) for i in range(8)]
        done = [item for call, item in run_calls(cluster, calls, failure=None, desc="tasks", progress=False,
                                                 deadline=time.perf_counter() + 3.0)]
    started = sorted(p.name for p in tmp_path.iterdir())
    assert 2 <= len(done) <= 6, done
    assert sorted(done) == started  # every task that started was waited for; none started later


def test_gpu_samples_cover_a_chunk_stage_longer_than_the_workers_history():
    """A worker's system monitor keeps its last 7200 samples (an hour at 0.5 s): collected once at
    the end, a 3-hour chunk stage would report its last hour only.  GpuRecorder, polled as results
    arrive, joins pieces of 20 minutes: every sample of the 3 hours, in order, times from the start."""
    from collections import deque
    from types import SimpleNamespace

    from workflow.monitor import GpuRecorder, gpu_utilisation

    history = {k: deque(maxlen=7200) for k in ("time", "gpu_utilization", "gpu_memory_used")}
    worker = SimpleNamespace(monitor=SimpleNamespace(gpu_name="Fake GPU", quantities=history))

    def run(fn, since, until):
        return {"tcp://w0": fn(worker, since=since, until=until)}

    cluster = SimpleNamespace(client=SimpleNamespace(run=run))
    t0, length = 1.0e9, 3 * 3600.0
    recorder = GpuRecorder(cluster, t0)
    for i in range(int(length / 0.5) + 1):
        now = t0 + 0.5 * i
        history["time"].append(now)
        history["gpu_utilization"].append(100.0 if now - t0 < 3600 else 50.0)  # busy first hour, half after
        history["gpu_memory_used"].append(1 << 30)
        if i % 20 == 0:  # a result every 10 s
            recorder.poll(now)
    whole = recorder.finish(t0 + length)
    t = whole["devices"][0]["t"]
    assert len(t) == int(length / 0.5) + 1 and t[0] == 0.0 and t[-1] == length
    assert max(b - a for a, b in zip(t, t[1:])) == 0.5
    assert whole["mean"] == pytest.approx((100 * 7200 + 50 * 14401) / 21601)
    assert whole["seconds"] == length
    once = gpu_utilisation(cluster, t0, t0 + length)  # what a single collection at the end sees
    assert len(once["devices"][0]["t"]) == 7200 and once["mean"] == 50.0


def test_a_gpu_worker_runs_two_tasks_and_a_cpu_worker_one():
    from workflow.cluster import GPU_TASKS_PER_WORKER, tasks_per_worker

    assert GPU_TASKS_PER_WORKER == 2
    assert tasks_per_worker(ClusterConfig(kind="local-cuda"), "local-cuda") == 2
    assert tasks_per_worker(ClusterConfig(kind="local"), "local") == 1
    assert tasks_per_worker(ClusterConfig(kind="local-cuda", threads_per_worker=3), "local-cuda") == 3
    assert tasks_per_worker(ClusterConfig(kind="auto", threads_per_worker=1), "local-cuda") == 1


def test_cpu_workers_share_several_gpus_by_worker_number(monkeypatch):
    """Ingest's block task (``workflow.ingest.write_block``) with ``--backend cupy`` resamples on GPU
    ``worker number mod GPUs``: on six in-process workers of a local cluster and a host of four
    (fake) GPUs, worker k works on GPU k mod 4; outside a worker, on GPU 0."""
    import threading
    from types import SimpleNamespace

    from distributed import Client, LocalCluster

    import workflow.ingest as ingest
    from gwbatch import _xp

    current = threading.local()

    class Device:
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            current.index = self.index

        def __exit__(self, *exc):
            current.index = None

    fake = SimpleNamespace(cuda=SimpleNamespace(Device=Device, runtime=SimpleNamespace(getDeviceCount=lambda: 4)))
    monkeypatch.setattr(_xp, "_cupy", lambda: fake)
    monkeypatch.setattr(ingest, "ingest_block", lambda plan, *args: getattr(current, "index", None))
    plan = SimpleNamespace(backend="cupy")
    assert ingest.write_block(plan) == 0
    assert ingest.write_block(SimpleNamespace(backend="numpy")) is None  # the CPU filter chooses no GPU
    with LocalCluster(n_workers=6, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        names = {addr: w["name"] for addr, w in client.scheduler_info()["workers"].items()}
        got = {names[addr]: client.submit(ingest.write_block, plan, workers=[addr], pure=False).result()
               for addr in names}
    assert got == {k: k % 4 for k in range(6)}


def _device_env():
    from workflow.cluster import GPU_SHARE_ENV

    return (os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get(GPU_SHARE_ENV), os.environ.get("NUMBA_NUM_THREADS"),
            os.environ.get("CUPY_GPU_MEMORY_LIMIT"))


def test_shared_gpu_cluster_gives_each_process_one_device_and_its_share(monkeypatch, spawned_workers):
    """``cluster.workers_per_gpu``: k processes on each device, each seeing only that device and told
    how many share it, its CuPy pool held to 45% of the device (90% / 2); the node's cores are
    shared between all of them.  Started without a GPU (the
    processes only carry the environment), two devices named as CUDA_VISIBLE_DEVICES names them."""
    from workflow.cluster import _started, shared_gpu_cluster, worker_environment

    monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
    monkeypatch.delenv("CUPY_GPU_MEMORY_LIMIT", raising=False)
    with worker_environment(4):
        cluster = _started("local-cuda", shared_gpu_cluster, devices=["3", "GPU-abc"], per_gpu=2,
                           threads_per_worker=2, memory_limit="auto", dashboard_address="127.0.0.1:0",
                           silence_logs=50)
    from distributed import Client

    with cluster, Client(cluster) as client:
        client.wait_for_workers(4)
        seen = client.run(_device_env)
        threads = {w["nthreads"] for w in client.scheduler_info(n_workers=-1)["workers"].values()}
    share = str(host_threads(usable_cores(), 4))
    assert sorted(seen.values()) == [("3", "2", share, "45%"), ("3", "2", share, "45%"),
                                     ("GPU-abc", "2", share, "45%"), ("GPU-abc", "2", share, "45%")]
    assert threads == {2}


def test_a_shared_gpu_counts_its_share_of_the_memory(monkeypatch):
    """The memory plan of a worker that shares its GPU with three others counts a quarter of it."""
    from distributed.diagnostics import nvml

    from workflow import memory
    from workflow.cluster import GPU_SHARE_ENV

    monkeypatch.setattr(nvml, "one_time", lambda: {"memory-total": 143_771_000_832})
    for share, expected in ((None, 143_771_000_832), ("4", 35_942_750_208)):
        if share is None:
            monkeypatch.delenv(GPU_SHARE_ENV, raising=False)
        else:
            monkeypatch.setenv(GPU_SHARE_ENV, share)
        memory._gpu_memory.cache_clear()
        assert memory._gpu_memory() == expected
    memory._gpu_memory.cache_clear()


@pytest.mark.parametrize("kind", ["local", "in-process", "address", "slurm"])
def test_workers_per_gpu_refused_where_no_local_gpu_workers_start(kind):
    from pydantic import ValidationError

    extra = {"address": "tcp://x:8786"} if kind == "address" else {}
    extra |= {"jobqueue": {"memory": "16GiB"}} if kind == "slurm" else {}
    with pytest.raises(ValidationError, match=r"cluster.workers_per_gpu \(4\) is for local GPU workers; kind "
                                              rf"'{kind}'"):
        ClusterConfig(kind=kind, workers_per_gpu=4, **extra)
    assert ClusterConfig(kind="auto", workers_per_gpu=4).workers_per_gpu == 4


def test_a_local_cluster_cut_short_while_starting_is_closed_by_gwbatch():
    """Ctrl-C or SIGTERM while a local cluster starts: the half-started cluster is closed and taken
    off Dask's list, so Dask's exit hook does not fail on it with a traceback after gwbatch's
    one-line message (``AssertionError: Status.init``)."""
    from distributed.deploy.spec import SpecCluster

    from workflow.cluster import _started

    closed, held = [], []

    class HalfStarted:
        workers: dict = {}

        def close(self, timeout=None):
            closed.append(timeout)

    def starting(**options):
        held.append(HalfStarted())
        SpecCluster._instances.add(held[-1])
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _started("local", starting)
    assert closed and held[0] not in SpecCluster._instances
