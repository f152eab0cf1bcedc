"""The memory plan: each search's task estimate (:func:`workflow.plan.task_memory`) against what a
worker has, checked once the cluster is up and before any task is submitted.

A GPU worker needs the kernels' arrays on its GPU and the host part in its memory limit; a CPU
worker needs both in its memory limit.  A task that does not fit is refused with the setting to
change: ``plan.chunk`` (every search's memory grows with the samples a task reads) and, for SPIIR,
``search.batch`` (templates filtered per pass).

A worker that runs several tasks at once (a GPU worker runs two: :mod:`workflow.cluster`) keeps
their estimates together within the same fraction of its memory: each task holds its estimate in
the worker's :class:`Ledger` while it runs and waits, before it starts, until the tasks already
running leave room for it (:func:`workflow.execute.run_calls`).  A task alone always runs, so a
run never stalls.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from dataclasses import dataclass, replace
from typing import Iterator

from gwbatch.errors import ConfigError
from gwbatch.searches import get_search
from workflow.plan import Plan, task_memory

log = logging.getLogger("gwbatch")

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


@functools.cache
def _gpu_memory() -> int:
    """This worker's GPU memory in bytes (its first visible device), 0 without one; its share of it
    where several workers share the device (``cluster.workers_per_gpu``)."""
    from workflow.cluster import GPU_SHARE_ENV

    try:
        from distributed.diagnostics import nvml

        total = int(nvml.one_time()["memory-total"])
    except Exception:
        return 0
    return total // max(1, int(os.environ.get(GPU_SHARE_ENV, "1")))


#: Where a task's memory lives: host memory, and the GPU's memory on a GPU worker.
HOST, DEVICE = "host", "device"


def memory_need(search, settings, read_samples: int, n_ifos: int, gpu: bool) -> dict[str, int]:
    """Bytes a task reading ``read_samples`` holds, by where they live (:func:`workflow.plan.task_memory`):
    the kernels' arrays on the GPU of a GPU worker, in host memory on a CPU worker."""
    host, work = task_memory(search, settings, read_samples, n_ifos)
    return {HOST: host, DEVICE: work} if gpu else {HOST: host + work}


def plan_need(plan, settings, gpu: bool, read_samples: int | None = None) -> dict[str, int]:
    """:func:`memory_need` of a task of ``plan`` with ``settings`` reading ``read_samples`` (default:
    the plan's longest task)."""
    read = plan.read_samples if read_samples is None else read_samples
    return memory_need(get_search(plan.search), settings, read, len(plan.ifos), gpu)


def task_need(plan, spec, gpu: bool) -> dict[str, int]:
    """The memory chunk task ``spec`` holds while it runs (:func:`memory_need`)."""
    return plan_need(plan, plan.settings, gpu, spec.read_stop - spec.read_start)


def check_memory(plans: dict[str, object], have: WorkerMemory) -> None:
    """Refuse, naming the setting to change, a plan whose tasks do not fit the workers.

    ``plans`` are keyed by member name ("" for a one-search campaign).  The advice is computed from
    the same estimate (:func:`workflow.plan.task_memory`), so it fits: a shorter ``plan.chunk``,
    and each of the search's own memory settings (:meth:`gwbatch.searches.base.Search.memory_knobs`).
    """
    problems = []
    gpu = have.device is not None
    for name, plan in plans.items():
        search = get_search(plan.search)
        where = f"searches.{name}." if name else ""
        read = plan.read_samples

        def need(settings=plan.settings, n=read):  # bytes by place of a task reading n samples
            return plan_need(plan, settings, gpu, n)

        for part, limit, what in ((HOST, have.host, "memory limit"), (DEVICE, have.device, "GPU memory")):
            if limit is None or need().get(part, 0) <= USABLE * limit:
                continue
            fixes = []
            fits = _largest(lambda n: need(n=n).get(part, 0) <= USABLE * limit, read)
            if fits:
                fixes.append(f"lower {where}plan.chunk ({plan.chunk_seconds:g} s) to about "
                             f"{max(1.0, int(plan.chunk_seconds * fits / read)):g} s")
            for key, knob in search.memory_knobs(plan.settings).items():
                best = _largest(lambda v: need(settings=knob.with_value(v)).get(part, 0) <= USABLE * limit, knob.value)
                if best:
                    fixes.append(f"{where}{key} ({knob.value}) to about {best}")
            if what == "memory limit":
                fixes.append("give each worker more memory (cluster.memory_limit, or fewer workers per machine)")
            problems.append(f"{name or plan.search} tasks need ~{need()[part] / GiB:.1f} GiB but a worker's {what} "
                            f"is {limit / GiB:.1f} GiB (at most {USABLE:.0%} of it is used for one task): "
                            + (", or ".join(fixes) if fixes else "no setting of this search makes it fit"))
    if problems:
        raise ConfigError("the campaign does not fit the workers' memory:\n  " + "\n  ".join(problems))


def fit_memory(plans: dict[str, Plan], have: WorkerMemory) -> dict[str, Plan]:
    """The plans with their searches' ``auto`` memory settings sized
    (:class:`gwbatch.searches.base.MemoryKnob`): each the largest value up to its ``auto_upto``
    whose task fits :data:`USABLE` of a GPU worker's GPU memory alone, or, for knobs sized
    ``on_cpu``, of a CPU worker's memory limit.  A worker runs two tasks at once only where they fit
    together (:class:`Ledger`), so a setting sized for one task never waits for less than the whole
    memory.  Other knobs on CPU workers, and settings that do not fit even at 1
    (:func:`check_memory` then says what to change), keep the search's value."""
    gpu = have.device is not None
    part, limit, what = (DEVICE, have.device, "GPU memory") if gpu else (HOST, have.host, "memory limit")
    if limit is None:
        return plans
    share = USABLE * limit
    out = {}
    for name, plan in plans.items():
        search, settings = get_search(plan.search), plan.settings
        for key, knob in search.memory_knobs(settings).items():
            if knob.auto_upto is None or not (gpu or knob.on_cpu):
                continue
            value = _largest(lambda v: plan_need(plan, knob.with_value(v), gpu)[part] <= share, knob.auto_upto + 1)
            if value:
                settings = knob.with_value(value)
                log.info("%s: %s auto: %d (a task's usable %s: %.1f GiB)", name or plan.search, key, value, what,
                         share / GiB)
        out[name] = plan if settings is plan.settings else replace(plan, settings=settings)
    return out


def _largest(fits, upper: int) -> int:
    """The largest ``n`` in ``[1, upper)`` with ``fits(n)`` (monotone), 0 if none."""
    lo, hi = 0, upper
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo if lo and fits(lo) else 0


class Ledger:
    """The memory the running tasks of one worker process hold against its budget."""

    def __init__(self):
        self._changed = threading.Condition()
        self.held: dict[str, float] = {}

    def _fits(self, need: dict, budget: dict) -> bool:
        return all(not self.held.get(k) or self.held[k] + v <= budget.get(k, float("inf")) for k, v in need.items())

    @contextlib.contextmanager
    def hold(self, need: dict[str, float], budget: dict[str, float]) -> Iterator[None]:
        """Wait until ``need`` fits beside what is held (or nothing of its kinds is held), hold it for
        the block, then give it back."""
        with self._changed:
            self._changed.wait_for(lambda: self._fits(need, budget))
            for k, v in need.items():
                self.held[k] = self.held.get(k, 0) + v
        try:
            yield
        finally:
            with self._changed:
                for k, v in need.items():
                    self.held[k] -= v
                self._changed.notify_all()


LEDGER = Ledger()


def worker_budget() -> dict[str, float]:
    """:data:`USABLE` of this worker's memory limit and of its GPU's memory (bytes; a limit that is
    not known is not enforced)."""
    from distributed import get_worker

    budget = {}
    limit = get_worker().memory_manager.memory_limit
    if limit:
        budget[HOST] = USABLE * limit
    device = _gpu_memory()
    if device:
        budget[DEVICE] = USABLE * device
    return budget

