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
def test_local_workers_get_their_share(preset, monkeypatch):
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
        calls = [Call(f"sleep-{i}", _sleep_and_mark, (str(tmp_path), f"t{i}", 1.0), i) for i in range(8)]
        done = [item for call, item in run_calls(cluster, calls, failure=None, desc="tasks", progress=False,
                                                 deadline=time.perf_counter() + 1.5)]
    started = sorted(p.name for p in tmp_path.iterdir())
    assert 2 <= len(done) <= 6, done
    assert sorted(done) == started  # every task that started was waited for; none started later
