"""Cluster creation from the campaign's ``cluster`` section.

Kinds: ``in-process`` (no Dask: tasks run one after another in this process, for tiny runs and
tests), ``local`` (``distributed.LocalCluster``, one single-threaded worker process per core),
``local-cuda`` (``dask_cuda.LocalCUDACluster``, one worker per visible GPU), ``address`` (connect
to a running scheduler) and ``auto``: ``local-cuda`` when NVML reports GPUs and dask-cuda is
installed, else ``local``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from typing import Iterator

from gwbatch._xp import cupy_available
from gwbatch.config import ClusterConfig
from gwbatch.errors import ConfigError

log = logging.getLogger("gwbatch")


@dataclass
class Cluster:
    """A running cluster: its client (None in-process), resolved kind, workers, dashboard and backend."""

    client: object | None
    kind: str
    workers: int
    dashboard: str | None
    backend: str


def quiet_dask_logs() -> None:
    """Keep Dask's start/stop chatter off the terminal unless gwbatch runs with --verbose."""
    if log.isEnabledFor(logging.DEBUG):
        return
    for name in list(logging.root.manager.loggerDict):
        if name.split(".")[0] in ("distributed", "dask_cuda", "bokeh", "tornado"):
            logging.getLogger(name).setLevel(logging.ERROR)


def gpu_count() -> int:
    """GPUs NVML can see (0 without NVML or a driver)."""
    try:
        from distributed.diagnostics.nvml import device_get_count

        return int(device_get_count())
    except Exception:
        return 0


def resolve_kind(cfg: ClusterConfig) -> str:
    if cfg.kind != "auto":
        return cfg.kind
    if gpu_count() > 0:
        try:
            import dask_cuda  # noqa: F401

            return "local-cuda"
        except ImportError:
            log.warning("GPUs are visible but dask-cuda is not installed; using CPU workers (pip install 'gwbatch[gpu]')")
    return "local"


def cpu_cluster_config(cfg: ClusterConfig) -> ClusterConfig:
    """The cluster for CPU-bound preparation (building banks): the configured scheduler when given
    by address, in-process when so configured, else local CPU workers, one per core (a GPU cluster
    has only one worker per GPU)."""
    if cfg.kind in ("address", "in-process"):
        return cfg
    return cfg.model_copy(update={"kind": "local", "n_workers": None if cfg.kind != "local" else cfg.n_workers,
                                  "dashboard_address": ":0"})


def resolve_backend(requested: str, kind: str) -> str:
    """The array backend the tasks use: CuPy on GPU clusters, NumPy on CPU ones, unless fixed."""
    if requested != "auto":
        return requested
    if kind == "local-cuda":
        return "cupy"
    if kind == "in-process":
        return "cupy" if cupy_available() else "numpy"
    if kind == "address":
        return "auto"  # each worker decides for itself
    return "numpy"


@contextlib.contextmanager
def start_cluster(cfg: ClusterConfig, backend: str, n_tasks: int) -> Iterator[Cluster]:
    """Start (or connect to) the cluster for a run and close it afterwards."""
    kind = resolve_kind(cfg)
    resolved_backend = resolve_backend(backend, kind)
    if kind == "in-process":
        yield Cluster(None, kind, 1, None, resolved_backend)
        return
    from distributed import Client

    quiet_dask_logs()
    if kind == "address":
        try:
            client = Client(cfg.address, timeout="30s")
        except OSError as exc:
            raise ConfigError(f"cannot connect to scheduler at cluster.address {cfg.address!r}: {exc}") from None
        with client:
            workers = len(client.scheduler_info().get("workers", {}))
            yield Cluster(client, kind, workers, client.dashboard_link, resolved_backend)
        return
    if kind == "local-cuda":
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError:
            raise ConfigError("cluster.kind 'local-cuda' needs dask-cuda: pip install 'gwbatch[gpu]'") from None
        if gpu_count() == 0:
            raise ConfigError("cluster.kind 'local-cuda' but NVML reports no GPU; use kind: local")
        cluster = LocalCUDACluster(
            n_workers=cfg.n_workers, threads_per_worker=cfg.threads_per_worker,
            memory_limit=cfg.memory_limit, dashboard_address=cfg.dashboard_address, silence_logs=logging.WARNING,
        )
    else:
        n_workers = cfg.n_workers or max(1, min(os.cpu_count() or 1, n_tasks))
        from distributed import LocalCluster

        cluster = LocalCluster(
            n_workers=n_workers, threads_per_worker=cfg.threads_per_worker, processes=True,
            memory_limit=cfg.memory_limit, dashboard_address=cfg.dashboard_address, silence_logs=logging.WARNING,
        )
    quiet_dask_logs()
    with cluster, Client(cluster) as client:
        workers = len(cluster.workers)
        yield Cluster(client, kind, workers, client.dashboard_link, resolved_backend)
