"""CPU workers for preparation (bank builds): :func:`cpu_workers`, forked from this process on one
host where that is safe, else a Dask cluster.

A Dask local cluster spawns its workers: each starts a fresh interpreter, imports gwbatch and its
dependencies and registers with the scheduler.  On the GPU machine's 16 cores that took 5.4-7.0 s
before the first template was built (benchmarks/RESULTS.md, "Bank build on the GPU host"), a third
of the BBH bank's build.  Forked children start with everything this process has imported, in
milliseconds.  They are used only where forking is safe: on a platform with ``fork`` and while this
process runs no other thread (a thread holding a lock when the process forks leaves it held forever
in the child).  Elsewhere (and for remote, batch or in-process clusters) preparation runs on Dask.

Each child gets what a Dask local worker gets: glibc's malloc settings of
:data:`workflow.cluster.WORKER_MALLOC` (set with ``mallopt``, since a forked child does not read its
environment again), one BLAS thread, and its share of the cores for numba's parallel kernels.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import itertools
import logging
import multiprocessing
import threading
import uuid
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Iterator

from gwbatch.errors import GwbatchError
from workflow.cluster import WORKER_MALLOC, cpu_cluster_config, host_threads, start_cluster, usable_cores
from workflow.execute import Call, progress_meter, run_calls

log = logging.getLogger("gwbatch")

#: glibc's ``mallopt`` parameters for the :data:`~workflow.cluster.WORKER_MALLOC` variables.
MALLOPT_PARAMS = {"MALLOC_TRIM_THRESHOLD_": -1, "MALLOC_MMAP_THRESHOLD_": -3}


def can_fork() -> bool:
    """Whether local workers can be forked from this process: ``fork`` exists and no other thread runs."""
    return "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1


def _init_child(numba_threads: int) -> None:
    """A forked worker's settings (those a Dask local worker has from its environment)."""
    path = ctypes.util.find_library("c")
    mallopt = getattr(ctypes.CDLL(path), "mallopt", None) if path else None
    if mallopt is not None:
        for name, value in WORKER_MALLOC.items():
            mallopt(MALLOPT_PARAMS[name], int(value))
    from threadpoolctl import threadpool_limits

    threadpool_limits(1, user_api="blas")
    with contextlib.suppress(Exception):  # numba threads: only for parallel kernels, set where loaded
        import numba

        numba.set_num_threads(min(numba_threads, numba.config.NUMBA_NUM_THREADS))


def forked_map(n_workers: int, fn: Callable, args: tuple, items: list, *, desc: str, failure: Callable,
               progress: bool = True) -> Iterator:
    """Yield ``fn(*args, item)`` for every item as it completes on ``n_workers`` forked children,
    the items started in the order given.  A task that raises ends the map: a :class:`GwbatchError`
    passes through, anything else is ``failure(item, exc)``; tasks not yet started are cancelled."""
    context = multiprocessing.get_context("fork")
    numba_threads = host_threads(usable_cores(), n_workers)
    pool = ProcessPoolExecutor(n_workers, mp_context=context, initializer=_init_child, initargs=(numba_threads,))
    log.info("%s: %d local CPU workers, forked", desc, n_workers)
    bar = None
    try:
        pending = {pool.submit(fn, *args, item): item for item in items}
        bar = progress_meter(len(items), desc, progress)
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                item = pending.pop(future)
                try:
                    result = future.result()
                except GwbatchError:
                    raise
                except BrokenProcessPool as exc:
                    raise failure(item, RuntimeError(f"a forked worker died ({exc})")) from exc
                except Exception as exc:
                    raise failure(item, exc) from exc
                bar.update()
                yield result
    finally:
        if bar is not None:
            bar.close()
        pool.shutdown(wait=True, cancel_futures=True)


@contextlib.contextmanager
def cpu_workers(cluster_cfg, progress: bool = True) -> Iterator[Callable]:
    """``parallel(fn, args, items, *, desc, failure)``: yields ``fn(*args, item)`` for every item as
    it completes on CPU workers, started on first use, the items started in the order given (a
    task that raises is ``failure(item, exc)``)."""
    cpu_cfg = cpu_cluster_config(cluster_cfg)
    with contextlib.ExitStack() as stack:
        cluster = None

        def parallel(fn: Callable, args: tuple, items: list, *, desc: str, failure: Callable):
            nonlocal cluster
            if cluster is None and cpu_cfg.kind == "local" and can_fork():
                n_workers = cpu_cfg.n_workers or max(1, min(usable_cores(), len(items)))
                yield from forked_map(n_workers, fn, args, items, desc=desc, failure=failure, progress=progress)
                return
            if cluster is None:
                cluster = stack.enter_context(start_cluster(cpu_cfg, "numpy", len(items)))
            token = uuid.uuid4().hex[:8]
            calls = [Call(f"{desc}-{token}-{k}", fn, (*args, item), item, priority=-k)
                     for k, item in zip(itertools.count(), items)]
            for _, result in run_calls(cluster, calls, failure=lambda call, exc: failure(call.item, exc), desc=desc,
                                       progress=progress):
                yield result

        yield parallel
