"""The memory plan: each search's task estimate (:func:`workflow.plan.task_memory`) against what a
worker has, checked once the cluster is up and before any task is submitted.

A GPU worker needs the kernels' arrays on its GPU and the host part in its memory limit; a CPU
worker needs both in its memory limit.  A task that does not fit is refused with the setting to
change: ``plan.chunk`` (every search's memory grows with the samples a task reads) and, for SPIIR,
``search.batch`` (templates filtered per pass).
"""

from __future__ import annotations

from dataclasses import dataclass

from gwbatch.errors import ConfigError

GiB = 2**30
#: A task may use this fraction of a worker's memory: the rest is Dask's, the allocator's and
#: fragmentation's (Dask pauses a worker at 80% of its limit by default).
USABLE = 0.7


@dataclass(frozen=True)
class WorkerMemory:
    """The smallest memory limit (bytes) and GPU memory (bytes; None without GPUs) of the workers."""

    host: int | None
    device: int | None


def worker_memory(cluster) -> WorkerMemory:
    """What the cluster's smallest worker has (in-process: this machine)."""
    if cluster.client is None:
        import psutil

        device = None
        if cluster.backend == "cupy":
            from gwbatch._xp import get_xp

            device = int(get_xp("cupy").cuda.Device().mem_info[1])
        return WorkerMemory(int(psutil.virtual_memory().total), device)
    workers = cluster.client.scheduler_info(n_workers=-1).get("workers", {}).values()
    hosts = [int(w["memory_limit"]) for w in workers if w.get("memory_limit")]
    gpus = [] if cluster.backend == "numpy" else [g for g in cluster.client.run(_gpu_memory).values() if g]
    return WorkerMemory(min(hosts) if hosts else None, min(gpus) if gpus else None)


def _gpu_memory() -> int:
    """This worker's GPU memory in bytes (its first visible device), 0 without one."""
    try:
        from distributed.diagnostics import nvml

        return int(nvml.one_time()["memory-total"])
    except Exception:
        return 0


def check_memory(plans: dict[str, object], campaigns: dict[str, object], have: WorkerMemory) -> None:
    """Refuse, naming the setting to change, a plan whose tasks do not fit the workers.

    ``plans`` and ``campaigns`` are keyed by member name ("" for a one-search campaign).
    """
    problems = []
    for name, plan in plans.items():
        campaign = campaigns[name]
        where = f"searches.{name}." if name else ""
        gpu = have.device is not None
        need_host = plan.task_memory_bytes - plan.task_device_bytes if gpu else plan.task_memory_bytes
        for need, limit, what in ((need_host, have.host, "memory limit"),
                                  (plan.task_device_bytes if gpu else 0, have.device, "GPU memory")):
            if limit is None or need <= USABLE * limit:
                continue
            fix = f"lower {where}plan.chunk ({campaign.plan.chunk:g} s) to about {_fit(campaign.plan.chunk, need, limit):g} s"
            if campaign.search.kind == "spiir" and what == "GPU memory":
                batch = campaign.search.batch
                fix += f", or {where}search.batch ({batch}) to about {max(1, int(batch * USABLE * limit / need))}"
            if what == "memory limit":
                fix += ", or give each worker more memory (cluster.memory_limit, or fewer workers per machine)"
            problems.append(f"{name or plan.search} tasks need ~{need / GiB:.1f} GiB but a worker's {what} is "
                            f"{limit / GiB:.1f} GiB (at most {USABLE:.0%} of it is used for one task): {fix}")
    if problems:
        raise ConfigError("the campaign does not fit the workers' memory:\n  " + "\n  ".join(problems))


def _fit(chunk: float, need: int, limit: int) -> float:
    """A chunk length whose tasks fit (memory grows about linearly with the chunk), rounded down to 16 s."""
    return max(16.0, 16.0 * int(chunk * USABLE * limit / need / 16.0))
