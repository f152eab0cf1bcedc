"""Running chunk tasks: in this process, or as Dask futures streamed back as they finish."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from tqdm.auto import tqdm

from gwbatch.errors import GwbatchError
from workflow.cluster import Cluster

log = logging.getLogger("gwbatch")


class ChunkFailed(GwbatchError):
    """A chunk task raised; finished chunks stay checkpointed for --resume."""

    exit_code = 5


class Stopped(GwbatchError):
    """The run reached ``--stop-after`` before every chunk was done; finished chunks are
    checkpointed and no final output was written."""

    exit_code = 6


def run_tasks(
    cluster: Cluster,
    task: Callable,
    args: tuple,
    items: Sequence,
    *,
    key: Callable[[object], str],
    failure: Callable[[object, BaseException], GwbatchError],
    desc: str,
    progress: bool = True,
) -> Iterator:
    """Yield ``task(*args, item)`` for every item as it completes (in this process or as Dask futures).

    A task that raises stops the run: a :class:`GwbatchError` passes through, anything else is
    wrapped by ``failure(item, exc)``.
    """
    calls = [Call(key(item), task, (*args, item), item) for item in items]
    for _, result in run_calls(cluster, calls, failure=lambda call, exc: failure(call.item, exc), desc=desc,
                               progress=progress):
        yield result


@dataclass(frozen=True)
class Call:
    """One task: ``fn(*args)`` under Dask key ``key``; higher ``priority`` runs first; ``item`` says
    what it is for (returned with its result)."""

    key: str
    fn: Callable
    args: tuple
    item: object = None
    priority: float = 0.0


def run_calls(cluster: Cluster, calls: Sequence[Call], *, failure: Callable[[Call, BaseException], GwbatchError],
              desc: str, progress: bool = True, deadline: float | None = None) -> Iterator[tuple[Call, object]]:
    """Yield ``(call, result)`` for every call as it completes: in this process in priority order, or
    all submitted at once to the Dask cluster, which runs higher priorities first (the longest
    tasks first, so the last ones to finish are short and no worker idles at the end).

    A task that raises stops the run: a :class:`GwbatchError` passes through, anything else is
    wrapped by ``failure(call, exc)``.  A worker that dies is replaced and its task rerun by Dask.
    At ``deadline`` (a :func:`time.perf_counter` value) no further task starts: the tasks running
    then finish and are yielded, the others are not run (the caller sees which calls are missing).
    """
    bar = tqdm(total=len(calls), desc=desc, unit=desc.rstrip("s"), disable=not progress or None, leave=True)
    ordered = sorted(calls, key=lambda c: -c.priority)
    try:
        if cluster.client is None:
            for call in ordered:
                if deadline is not None and time.perf_counter() >= deadline:
                    return
                try:
                    result = call.fn(*call.args)
                except GwbatchError:
                    raise
                except Exception as exc:
                    raise failure(call, exc) from exc
                bar.update()
                yield call, result
            return
        from distributed import as_completed

        client = cluster.client
        futures = {client.submit(c.fn, *c.args, key=c.key, pure=False, priority=c.priority): c for c in ordered}
        timer = None
        if deadline is not None:
            timer = threading.Timer(max(0.0, deadline - time.perf_counter()), _cancel_waiting, (client, list(futures)))
            timer.daemon = True
            timer.start()
        try:
            for future in as_completed(futures):
                call = futures[future]
                if future.status == "cancelled":
                    continue
                if future.status == "error":
                    exc = future.exception()
                    if isinstance(exc, GwbatchError):
                        raise exc
                    raise failure(call, exc)
                bar.update()
                yield call, future.result()
        finally:
            if timer is not None:
                timer.cancel()
            client.cancel(list(futures))
    finally:
        bar.close()


def _cancel_waiting(client, futures: list) -> None:
    """Cancel every future whose task is not executing on a worker now (``--stop-after``)."""
    running = executing_keys(client)
    client.cancel([f for f in futures if f.key not in running and not f.done()])


def executing_keys(client) -> set:
    """Keys of the tasks the workers are executing now."""

    def executing(dask_worker) -> list:
        return [ts.key for ts in dask_worker.state.executing]

    try:
        return {key for keys in client.run(executing).values() for key in keys}
    except Exception:  # a worker without ``state.executing``: what the scheduler has assigned to workers
        return {key for keys in client.processing().values() for key in keys}


def chunk_failure(call: Call, exc: BaseException) -> ChunkFailed:
    """The error of a chunk call whose ``item`` is ``(member name, ChunkSpec)``."""
    member, spec = call.item
    where = f"{member} " if member else ""
    return ChunkFailed(
        f"{where}chunk {spec.index} (samples {spec.start}..{spec.stop}) failed: {type(exc).__name__}: {exc}\n"
        "finished chunks are checkpointed; rerun with --resume after fixing the cause"
    )
