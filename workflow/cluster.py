"""Cluster creation from the campaign's ``cluster`` section.

Kinds: ``in-process`` (no Dask: tasks run one after another in this process, for tiny runs and
tests), ``local`` (``distributed.LocalCluster``, one single-threaded worker process per core),
``local-cuda`` (``dask_cuda.LocalCUDACluster``, one worker per visible GPU; with
``cluster.workers_per_gpu`` k > 1, k worker processes on each GPU: :func:`shared_gpu_cluster`), ``address`` (connect
to a running scheduler) and ``auto``: ``local-cuda`` when NVML reports GPUs and dask-cuda is
installed, else ``local``.  ``slurm``, ``pbs`` and ``htcondor`` submit batch jobs through
dask-jobqueue (``cluster.jobqueue``): the scheduler runs in this process, each job runs
``cluster.jobqueue.processes`` workers, and the number of jobs adapts to the pending tasks between
``minimum_jobs`` and ``maximum_jobs``.  GPU jobs run ``dask cuda worker``: one worker per GPU.

Tasks per worker: a GPU worker runs :data:`GPU_TASKS_PER_WORKER` tasks at once (``cluster.
threads_per_worker`` overrides it), so that one task's reading, conditioning and host steps overlap
another's kernels; the tasks of a worker together stay within its memory
(:class:`workflow.memory.Ledger`).  A CPU worker runs one task: its kernels already use the
worker's share of the cores.

Host threads: Dask already starts workers with one BLAS/OpenMP thread; the numba kernels (CPU
twins, and the host steps of the GPU searches) would otherwise each start a thread per core in
every worker, so several workers on one node oversubscribe it.  Each worker gets
``NUMBA_NUM_THREADS`` = its share of the node's cores (:func:`host_threads`) unless the
environment sets it; the client's own environment is left as it is.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import shutil
import socket
import sys
import threading
import warnings
from dataclasses import dataclass
from typing import Iterator

from gwbatch._xp import cupy_available
from gwbatch.config import JOBQUEUE_KINDS, ClusterConfig
from gwbatch.errors import ConfigError, GwbatchError

log = logging.getLogger("gwbatch")


@dataclass
class Cluster:
    """A running cluster: its client (None in-process), resolved kind, workers (batch kinds: the most
    adaptive scaling may start), dashboard, backend and tasks per worker."""

    client: object | None
    kind: str
    workers: int
    dashboard: str | None
    backend: str
    threads: int = 1  # tasks a worker runs at once (the most of any worker)
    per_gpu: int = 1  # local GPU workers on each GPU (cluster.workers_per_gpu)


def quiet_dask_logs() -> None:
    """Keep Dask's start/stop chatter off the terminal unless gwbatch runs with --verbose."""
    if log.isEnabledFor(logging.DEBUG):
        return
    for name in list(logging.root.manager.loggerDict):
        if name.split(".")[0] in ("distributed", "dask_cuda", "bokeh", "tornado"):
            logging.getLogger(name).setLevel(logging.ERROR)


def worker_log_level() -> int:
    """Local workers log only critical events unless gwbatch runs with --verbose: a task's failure
    is reported by the run itself (the chunk, the error), not as a worker's traceback."""
    return logging.WARNING if log.isEnabledFor(logging.DEBUG) else logging.CRITICAL


def host_threads(cores: int, workers: int) -> int:
    """Threads one worker's parallel host kernels may use: the node's cores shared evenly."""
    return max(1, cores // max(1, workers))


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS reports one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else (os.cpu_count() or 1)


def visible_gpus() -> int:
    """GPUs a local CUDA cluster would use: those in CUDA_VISIBLE_DEVICES, else all NVML sees."""
    return len(gpu_devices())


def gpu_devices() -> list[str]:
    """The devices a local CUDA cluster uses, as CUDA_VISIBLE_DEVICES names them (indices or UUIDs),
    else NVML's indices."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip()]
    return [str(i) for i in range(gpu_count())]


#: Set in each worker of :func:`shared_gpu_cluster`: how many workers share its GPU, so that its
#: memory plan counts its share of the GPU's memory (:func:`workflow.memory.worker_budget`).
GPU_SHARE_ENV = "GWBATCH_WORKERS_PER_GPU"

#: The part of a shared GPU's memory the k processes' CuPy memory pools may hold together (each
#: ``1 / k`` of it): above the memory plan's :data:`workflow.memory.USABLE`, below the whole so
#: that the CUDA contexts and cuFFT's own plan memory, which bypass the pools, always find room.
SHARED_POOL_FRACTION = 0.9


def pool_limit(per_gpu: int) -> str:
    """``CUPY_GPU_MEMORY_LIMIT`` of one of ``per_gpu`` processes sharing a GPU.

    A CuPy pool keeps the blocks its tasks freed; without a limit, the pools of processes running
    different searches grow into each other's memory until an allocation outside them fails (cuFFT
    plan creation: ``CUFFT_INTERNAL_ERROR``, one chunk in 2848 of ``configs/month.yaml``'s 30 days).
    At its limit a pool first returns its cached blocks to the device, then allocates."""
    return f"{100.0 * SHARED_POOL_FRACTION / per_gpu:.6g}%"


def shared_gpu_cluster(devices: list[str], per_gpu: int, **options):
    """A local cluster of ``per_gpu`` worker processes on each of ``devices``: each process sees
    only its device (``CUDA_VISIBLE_DEVICES``) and knows how many share it (:data:`GPU_SHARE_ENV`).

    One GPU worker runs its tasks in threads of one Python process, so a campaign of many short
    chunks with small kernels waits on that process's interpreter while the GPU idles; processes
    sharing the GPU each bring their own (RESULTS.md, "Several workers per GPU").  Kernels of
    different processes time-share the device; the memory plan gives each process ``1 / per_gpu``
    of it, and its CuPy pool is held to that share (:func:`pool_limit`; a ``CUPY_GPU_MEMORY_LIMIT``
    already in the environment is kept).  The same options as :class:`distributed.LocalCluster`'s
    local workers."""
    from distributed import Nanny, Scheduler, SpecCluster

    host = "127.0.0.1"
    scheduler = {"cls": Scheduler, "options": {"host": host, "protocol": "tcp://", "dashboard": True,
                                              "dashboard_address": options["dashboard_address"]}}
    workers, limit = {}, pool_limit(per_gpu)
    for i, device in enumerate(devices):
        for j in range(per_gpu):
            workers[f"gpu{i}-{j}"] = {"cls": Nanny, "options": {
                "host": host, "protocol": "tcp://", "nthreads": options["threads_per_worker"],
                "memory_limit": options["memory_limit"], "dashboard": False,
                "silence_logs": options["silence_logs"],
                "env": {"CUDA_VISIBLE_DEVICES": device, GPU_SHARE_ENV: str(per_gpu),
                        "CUPY_GPU_MEMORY_LIMIT": os.environ.get("CUPY_GPU_MEMORY_LIMIT", limit)}}}
    return SpecCluster(workers=workers, scheduler=scheduler, silence_logs=options["silence_logs"],
                       name="gwbatch-shared-gpu")


#: glibc's malloc settings for local worker processes (read when a process starts, so they are
#: set before the nanny spawns it).  Dask sets only ``MALLOC_TRIM_THRESHOLD_`` (64 KiB), which
#: also turns off glibc's adaptive mmap threshold: every array of 128 KiB or more then comes from a
#: fresh mmap whose pages the kernel zeroes on first touch, and bank construction spent 45% of
#: its time in the kernel (2-core machine: 242 BBH templates 52 s, 42 s of it system time).  With
#: arrays up to 64 MiB served from the heap and up to 256 MiB of free heap kept: 25-29 s, 2 s.
WORKER_MALLOC = {"MALLOC_MMAP_THRESHOLD_": 64 << 20, "MALLOC_TRIM_THRESHOLD_": 256 << 20}


@contextlib.contextmanager
def worker_environment(workers: int) -> Iterator[None]:
    """Start local workers with :data:`WORKER_MALLOC` and their share of the cores for numba
    (``NUMBA_NUM_THREADS``, unless the environment already chooses)."""
    import dask

    settings = {f"distributed.nanny.pre-spawn-environ.{k}": v for k, v in WORKER_MALLOC.items()}
    if "NUMBA_NUM_THREADS" not in os.environ:
        # ``nanny.environ`` is applied inside each worker process (before any task imports numba,
        # which reads it when it first starts its threads); ``pre-spawn-environ`` would also be
        # written into this process's environment, changing its own numba's setting under it.
        settings["distributed.nanny.environ.NUMBA_NUM_THREADS"] = str(host_threads(usable_cores(), workers))
    with dask.config.set(settings):
        yield


#: Tasks a local GPU worker runs at once.  A chunk task's GPU is idle while it reads and conditions
#: the strain and while its host steps (trigger clustering, the burst search's per-cluster sums) run;
#: a second task fills those gaps with its kernels.  Measured on the one-day campaign: RESULTS.md.
GPU_TASKS_PER_WORKER = 2


def tasks_per_worker(cfg: ClusterConfig, kind: str) -> int:
    """Threads (tasks at once) of each local worker: ``cluster.threads_per_worker``, else
    :data:`GPU_TASKS_PER_WORKER` on ``local-cuda`` and 1 on ``local``."""
    if cfg.threads_per_worker is not None:
        return cfg.threads_per_worker
    return GPU_TASKS_PER_WORKER if kind == "local-cuda" else 1


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
            importlib.import_module("dask_cuda")
            return "local-cuda"
        except ImportError:
            log.warning("GPUs are visible but dask-cuda is not installed; using CPU workers (pip install 'gwbatch[gpu]')")
    return "local"


def cpu_cluster_config(cfg: ClusterConfig) -> ClusterConfig:
    """The cluster for CPU-bound preparation (building banks): the configured scheduler when given
    by address, in-process when so configured, the same batch jobs for slurm/pbs/htcondor (nothing
    heavy on the submit host), else local CPU workers, one per core (a GPU cluster has only one
    worker per GPU)."""
    if cfg.kind in ("address", "in-process", *JOBQUEUE_KINDS):
        return cfg
    return cfg.model_copy(update={"kind": "local", "n_workers": None if cfg.kind != "local" else cfg.n_workers,
                                  "workers_per_gpu": 1,
                                  "dashboard_address": ":0"})


def resolve_backend(requested: str, kind: str, gpus: int = 0) -> str:
    """The array backend the tasks use: CuPy on GPU clusters, NumPy on CPU ones, unless fixed
    (``gpus``: GPUs per batch job for the jobqueue kinds)."""
    if requested != "auto":
        return requested
    if kind == "local-cuda":
        return "cupy"
    if kind in JOBQUEUE_KINDS:
        return "cupy" if gpus > 0 else "numpy"
    if kind == "in-process":
        return "cupy" if cupy_available() else "numpy"
    if kind == "address":
        return "auto"  # each worker decides for itself
    return "numpy"


# The dask-jobqueue cluster class of each batch kind (a dotted name, imported when a cluster starts).
JOBQUEUE_CLASSES = {
    "slurm": "dask_jobqueue.SLURMCluster",
    "pbs": "dask_jobqueue.PBSCluster",
    "htcondor": "dask_jobqueue.HTCondorCluster",
}

GPU_WORKER_COMMAND = "dask cuda worker"  # run as `python -m dask cuda worker`: one worker per visible GPU


def _bytes(text: str) -> int:
    from dask.utils import parse_bytes

    return parse_bytes(text)


def jobqueue_cluster_kwargs(cfg: ClusterConfig) -> tuple[str, dict]:
    """The dask-jobqueue cluster class (dotted name) for ``cfg.kind`` and its constructor keywords.

    GPU jobs ask the batch system for ``gpus`` GPUs (SLURM ``--gres=gpu:N``, PBS ``ngpus=N`` in the
    select line, HTCondor ``request_gpus``) and start ``dask cuda worker``, which runs one worker per
    GPU in CUDA_VISIBLE_DEVICES, each pinned to its own GPU.
    """
    kind = cfg.kind
    if kind not in JOBQUEUE_CLASSES:
        raise ConfigError(f"cluster.kind {kind!r} is not a batch system (allowed: {', '.join(JOBQUEUE_CLASSES)})")
    jq = cfg.jobqueue
    prologue = list(jq.job_script_prologue)
    directives = list(jq.job_extra_directives)
    kwargs: dict = {
        "cores": jq.cores,
        "processes": jq.processes,
        "memory": jq.memory,
        "job_name": "gwbatch",
        "python": jq.python or sys.executable,
        "scheduler_options": {"dashboard_address": dashboard_bind(cfg.dashboard_address)},
    }
    if jq.gpus > 0:
        kwargs["worker_command"] = GPU_WORKER_COMMAND
        # dask-cuda starts one worker per device in CUDA_VISIBLE_DEVICES; batch systems set it to the
        # job's GPUs, and where one does not, the job's first `gpus` devices are used.
        prologue.append(f"export CUDA_VISIBLE_DEVICES=${{CUDA_VISIBLE_DEVICES:-{','.join(map(str, range(jq.gpus)))}}}")
    per_job = jq.gpus if jq.gpus > 0 else jq.processes
    prologue.append(f"export NUMBA_NUM_THREADS=${{NUMBA_NUM_THREADS:-{host_threads(jq.cores, per_job)}}}")
    for key in ("local_directory", "log_directory", "interface"):
        if getattr(jq, key) is not None:
            kwargs[key] = getattr(jq, key)
    if kind == "htcondor":
        submit = {"MY.MaxRuntime": jq.walltime_seconds()}
        if jq.account is not None:
            submit["accounting_group"] = jq.account
        if jq.gpus > 0:
            submit["request_gpus"] = jq.gpus
        for item in directives:
            key, _, value = item.partition("=")
            submit[key.strip()] = value.strip()
        kwargs.update(disk=jq.disk or jq.memory, job_extra_directives=submit)
    else:
        kwargs["walltime"] = jq.walltime
        for key in ("queue", "account"):
            if getattr(jq, key) is not None:
                kwargs[key] = getattr(jq, key)
        if kind == "slurm" and jq.gpus > 0:
            directives.insert(0, f"--gres=gpu:{jq.gpus}")
        if kind == "pbs" and jq.gpus > 0:
            from dask_jobqueue.pbs import pbs_format_bytes_ceil

            kwargs["resource_spec"] = (f"select=1:ncpus={jq.cores}:ngpus={jq.gpus}"
                                       f":mem={pbs_format_bytes_ceil(_bytes(jq.memory))}")
        kwargs["job_extra_directives"] = directives
    kwargs["job_script_prologue"] = prologue
    return JOBQUEUE_CLASSES[kind], kwargs


def _jobqueue_class(name: str) -> type:
    module, _, attr = name.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except ImportError:
        raise ConfigError(f"batch clusters need dask-jobqueue: pip install 'dask-jobqueue>=0.9' ({name})") from None


def job_script(cfg: ClusterConfig) -> str:
    """The job script the cluster would submit for ``cfg`` (dask-jobqueue's ``job_script()``).

    A scheduler has to exist for its address to appear: one is started without a dashboard and
    closed at once; no job is submitted.
    """
    name, kwargs = jobqueue_cluster_kwargs(cfg)
    kwargs["scheduler_options"] = {**kwargs["scheduler_options"], "dashboard": False}
    with _new_jobqueue_cluster(cfg.kind, _jobqueue_class(name), kwargs) as cluster:
        return cluster.job_script()


def _new_jobqueue_cluster(kind: str, cls: type, kwargs: dict):
    """``cls(**kwargs)`` with no job yet; a scheduler that cannot start is a configuration error."""
    quiet_dask_logs()
    try:
        return cls(n_workers=0, **kwargs)
    except (ValueError, OSError, RuntimeError) as exc:
        raise ConfigError(f"cluster.kind {kind!r}: cannot start the scheduler: {exc}") from None


@contextlib.contextmanager
def _jobqueue_cluster(cfg: ClusterConfig, resolved_backend: str) -> Iterator[Cluster]:
    """Start the batch cluster, adapt it between minimum_jobs and maximum_jobs, wait for a worker."""
    from distributed import Client

    jq = cfg.jobqueue
    name, kwargs = jobqueue_cluster_kwargs(cfg)
    cls = _jobqueue_class(name)
    submit = getattr(getattr(cls, "job_cls", None), "submit_command", None)
    if submit and shutil.which(submit.split()[0]) is None:
        raise ConfigError(f"cluster.kind {cfg.kind!r} submits jobs with {submit.split()[0]}, which is not on PATH here; "
                          "run gwbatch where jobs can be submitted (a login node)")
    cluster = _new_jobqueue_cluster(cfg.kind, cls, kwargs)
    try:
        with Client(cluster) as client:
            # Adaptive scaling asks for jobs only when tasks are pending: hold one job until the
            # first worker has arrived, then honour minimum_jobs.
            cluster.adapt(minimum_jobs=max(1, jq.minimum_jobs), maximum_jobs=jq.maximum_jobs)
            try:
                client.wait_for_workers(1, timeout=jq.start_timeout)
            except TimeoutError:
                raise GwbatchError(
                    f"cluster.kind {cfg.kind!r}: no worker joined within cluster.jobqueue.start_timeout "
                    f"({jq.start_timeout:g} s); check the queue, the job logs (cluster.jobqueue.log_directory) "
                    "and the job script (gwbatch run CAMPAIGN --dry-run)") from None
            cluster.adapt(minimum_jobs=jq.minimum_jobs, maximum_jobs=jq.maximum_jobs)
            quiet_dask_logs()
            yield Cluster(client, cfg.kind, jq.maximum_jobs * jq.processes, listening_link(cluster, client),
                          resolved_backend,
                          max(1, jq.cores // jq.processes))
    except BaseException:
        with contextlib.suppress(Exception):  # cancelling jobs that never started must not hide the cause
            close_bounded(None, cluster)
        raise
    close_bounded(None, cluster)


@contextlib.contextmanager
def start_cluster(cfg: ClusterConfig, backend: str, n_tasks: int) -> Iterator[Cluster]:
    """Start (or connect to) the cluster for a run and close it afterwards."""
    kind = resolve_kind(cfg)
    resolved_backend = resolve_backend(backend, kind, cfg.jobqueue.gpus)
    if kind == "in-process":
        yield Cluster(None, kind, 1, None, resolved_backend)
        return
    if kind in JOBQUEUE_KINDS:
        with _jobqueue_cluster(cfg, resolved_backend) as cluster:
            yield cluster
        return
    from distributed import Client

    quiet_dask_logs()
    if kind == "address":
        try:
            client = Client(cfg.address, timeout="30s")
        except (OSError, ValueError, TypeError) as exc:
            raise ConfigError(f"cannot connect to scheduler at cluster.address {cfg.address!r}: {exc}") from None
        with client:
            found = client.scheduler_info(n_workers=-1).get("workers", {}).values()
            yield Cluster(client, kind, len(found), client.dashboard_link, resolved_backend,
                          max((int(w.get("nthreads", 1)) for w in found), default=1))
        return
    options = dict(threads_per_worker=tasks_per_worker(cfg, kind), memory_limit=cfg.memory_limit,
                   dashboard_address=dashboard_bind(cfg.dashboard_address), silence_logs=worker_log_level())
    if kind == "local-cuda":
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError:
            raise ConfigError("cluster.kind 'local-cuda' needs dask-cuda: pip install 'gwbatch[gpu]'") from None
        if gpu_count() == 0:
            raise ConfigError("cluster.kind 'local-cuda' but NVML reports no GPU; use kind: local")
        if cfg.workers_per_gpu == 1:
            with worker_environment(cfg.n_workers or visible_gpus()):
                cluster = _started(kind, LocalCUDACluster, n_workers=cfg.n_workers, **options)
        else:
            devices = gpu_devices()[:cfg.n_workers] if cfg.n_workers else gpu_devices()
            with worker_environment(len(devices) * cfg.workers_per_gpu):
                cluster = _started(kind, shared_gpu_cluster, devices=devices, per_gpu=cfg.workers_per_gpu,
                                   **options)
    else:
        if cfg.workers_per_gpu > 1:
            log.info("cluster: no GPU here, so cluster.workers_per_gpu (%d) is not used", cfg.workers_per_gpu)
        n_workers = cfg.n_workers or max(1, min(os.cpu_count() or 1, n_tasks))
        from distributed import LocalCluster

        with worker_environment(n_workers):
            cluster = _started(kind, LocalCluster, n_workers=n_workers, processes=True, **options)
    quiet_dask_logs()
    try:
        client = Client(cluster)
    except BaseException:
        close_bounded(None, cluster)
        raise
    try:
        yield Cluster(client, kind, len(cluster.workers), listening_link(cluster, client), resolved_backend,
                      tasks_per_worker(cfg, kind), cfg.workers_per_gpu if kind == "local-cuda" else 1)
    finally:
        close_bounded(client, cluster)


@contextlib.contextmanager
def closed_if_cut_short():
    """Close the local clusters a block starts if it is cut short (Ctrl-C, SIGTERM) before it
    returns them: half-started, nothing else holds them, and Dask's own exit hook then failed on
    them with a traceback after gwbatch's one-line message."""
    from distributed.deploy.spec import SpecCluster

    before = set(SpecCluster._instances)
    try:
        yield
    except BaseException:
        for cluster in set(SpecCluster._instances) - before:
            SpecCluster._instances.discard(cluster)
            with contextlib.suppress(BaseException):
                close_bounded(None, cluster)
        raise


def _started(kind: str, cls: type, **options):
    """``cls(**options)``: a local cluster whose settings its workers refuse is a configuration error.
    What Dask warns of while it starts (a busy dashboard port and the one it took instead) becomes
    one gwbatch line each, not a raw Python warning."""
    try:
        with warnings.catch_warnings(record=True) as caught, closed_if_cut_short():
            warnings.simplefilter("always", UserWarning)
            cluster = cls(**options)
        for w in caught:
            if issubclass(w.category, UserWarning):
                log.info("cluster: %s", " ".join(str(w.message).split()))
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return cluster
    except (ValueError, TypeError, OSError, RuntimeError) as exc:
        raise ConfigError(f"cluster.kind {kind!r}: the local cluster cannot start ({type(exc).__name__}: {exc}); "
                          "check cluster.memory_limit, cluster.n_workers and cluster.dashboard_address") from None


#: Seconds a local cluster may take to close before its worker processes are killed: after a storm
#: of worker deaths a nanny can be restarting its worker while the cluster closes, and the close
#: then waits for it indefinitely.
TEARDOWN_SECONDS = 20.0


def close_bounded(client, cluster) -> None:
    """Close ``client`` and ``cluster``, waiting at most :data:`TEARDOWN_SECONDS` (in a thread of
    its own, so a close that ignores its timeout cannot hold the run), then kill what is left of
    the cluster's worker processes, so a run always ends."""
    failed: list[BaseException] = []

    def close() -> None:
        try:
            if client is not None:
                client.close(timeout=TEARDOWN_SECONDS / 4)
            cluster.close(timeout=TEARDOWN_SECONDS)
        except Exception as exc:
            failed.append(exc)

    closing = threading.Thread(target=close, name="gwbatch-cluster-close", daemon=True)
    closing.start()
    closing.join(TEARDOWN_SECONDS + 5.0)
    if closing.is_alive() or failed:
        why = type(failed[0]).__name__ if failed else "it did not return"
        log.warning("the cluster did not close within %g s (%s); stopping its worker processes", TEARDOWN_SECONDS, why)
        kill_workers(cluster)


def kill_workers(cluster) -> None:
    """SIGKILL every worker process of a local cluster (and the processes they started)."""
    import psutil

    for nanny in list(getattr(cluster, "workers", {}).values()):
        pid = getattr(getattr(nanny, "process", None), "pid", None)
        if not pid:
            continue
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            for proc in [*process.children(recursive=True), process]:
                with contextlib.suppress(psutil.Error):
                    proc.kill()


def dashboard_bind(address: str) -> str:
    """Where the dashboard listens: ``cluster.dashboard_address`` with no host (``:8787``) means
    127.0.0.1, so on a shared login node only this machine's users reach it through a tunnel; a
    named host (``0.0.0.0:8787``, an interface's address) is taken as given."""
    host, sep, port = address.rpartition(":")
    if not sep:  # a bare port
        host, port = "", address
    return f"{host or '127.0.0.1'}:{port}"


def listening_link(cluster, client) -> str | None:
    """The dashboard's link for the address it really listens on (all interfaces: this host's name)."""
    server = getattr(getattr(cluster, "scheduler", None), "http_server", None)
    sockets = list(getattr(server, "_sockets", {}).values())
    if not sockets:
        return client.dashboard_link
    host, port = sockets[0].getsockname()[:2]
    if host in ("0.0.0.0", "::"):
        return f"http://{socket.gethostname()}:{port}/status (listening on every interface)"
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}/status"
