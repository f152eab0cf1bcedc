"""Running chunk tasks: in this process, or as Dask futures streamed back as they finish."""

from __future__ import annotations

import contextlib
import itertools
import logging
import sys
import threading
import time
import uuid
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
    what it is for (returned with its result); ``need`` is the memory it holds while it runs
    (:func:`workflow.memory.task_need`), against the budget of a worker that runs several tasks."""

    key: str
    fn: Callable
    args: tuple
    item: object = None
    priority: float = 0.0
    need: dict | None = None


#: Tasks in the cluster at once (submitted, running or finished but not yet collected): enough to
#: keep hundreds of workers fed, few enough that a year of chunks costs the client no more than this.
WINDOW = 1000


@dataclass(frozen=True)
class TaskFailed:
    """What :func:`run_calls` yields, with ``keep_going``, for a call that failed every attempt."""

    error: GwbatchError


def run_calls(cluster: Cluster, calls: Sequence[Call], *, failure: Callable[[Call, BaseException], GwbatchError],
              desc: str, progress: bool = True, deadline: float | None = None, retries: int = 0,
              keep_going: bool = False, window: int = WINDOW) -> Iterator[tuple[Call, object]]:
    """Yield ``(call, result)`` for every call as it completes: in this process in priority order, or
    submitted in priority order to the Dask cluster, which runs higher priorities first (the longest
    tasks first, so the last ones to finish are short and no worker idles at the end).  At most
    ``window`` tasks are in the cluster at once (refilled when half have finished), so the
    client's and the scheduler's memory do not grow with the length of the campaign.

    A task that raises is run again, up to ``retries`` times (Dask may run it on another worker); a
    worker that dies is replaced and its task rerun by Dask (``distributed.scheduler.allowed-failures``
    times).  A task that still fails gives a :class:`GwbatchError` (its own, or ``failure(call,
    exc)`` for any other exception): raised at once, or with ``keep_going`` yielded as
    ``(call, TaskFailed(error))`` while the other tasks go on.  At ``deadline`` (a
    :func:`time.perf_counter` value) no further task starts: the tasks running then finish and are
    yielded, the others are not run (the caller sees which calls are missing).
    """
    bar = progress_meter(len(calls), desc, progress)
    ordered = sorted(calls, key=lambda c: -c.priority)

    def failed(call: Call, exc: BaseException):
        error = exc if isinstance(exc, GwbatchError) and not keep_going else failure(call, exc)
        if not keep_going:
            raise error from (None if error is exc else exc)
        bar.update()
        return call, TaskFailed(error)

    try:
        if cluster.client is None:
            for call in ordered:
                if deadline is not None and time.perf_counter() >= deadline:
                    return
                outcome = _attempts(call, retries)
                if isinstance(outcome, _Raised):
                    yield failed(call, outcome.exc)
                else:
                    bar.update()
                    yield call, outcome
            return
        for call, future in _on_dask(cluster.client, ordered, deadline, retries, window):
            if future.status == "error":
                yield failed(call, future.exception())
            else:
                bar.update()
                yield call, future.result()
    finally:
        bar.close()


#: Seconds between progress lines when stderr is not a terminal.
PROGRESS_EVERY = 30.0


class ProgressLines:
    """Progress as timestamped log lines (for pipes and batch jobs, where a bar is not drawn): what is
    done and left, the rate and the time to go, every :data:`PROGRESS_EVERY` seconds and at the end."""

    def __init__(self, total: int, desc: str, every: float = PROGRESS_EVERY):
        self.total, self.desc, self.every = total, desc, every
        self.done, self.start = 0, time.perf_counter()
        self.last = self.start

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.perf_counter()
        if now - self.last >= self.every or self.done == self.total:
            self.last = now
            log.info("%s", self.line(now))

    def line(self, now: float) -> str:
        elapsed = max(now - self.start, 1e-9)
        rate = self.done / elapsed
        left = self.total - self.done
        eta = f", {_clock(left / rate)} to go" if rate > 0 and left else ""
        return f"{self.desc}: {self.done}/{self.total} done, {left} left, {rate:.3g}/s{eta} ({_clock(elapsed)} so far)"

    def close(self) -> None:
        pass


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}h{rest // 60:02d}m{rest % 60:02d}s" if h else f"{rest // 60}m{rest % 60:02d}s"


def is_terminal(stream) -> bool:
    """Whether ``stream`` is a terminal (False for anything without ``isatty``)."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty()) if callable(isatty) else False


def progress_meter(total: int, desc: str, enabled: bool):
    """A progress bar on a terminal, timestamped lines elsewhere (:class:`ProgressLines`), nothing when
    not ``enabled``: an object with ``update()`` and ``close()``."""
    if enabled and not is_terminal(sys.stderr):
        return ProgressLines(total, desc)
    return tqdm(total=total, desc=desc, unit=desc.rstrip("s"), disable=not enabled, leave=True)


class _Skipped:
    """The result of a task that found the stop flag set when it started (see :func:`_in_worker`)."""


def _in_worker(flag: str | None, need: dict | None, fn: Callable, *args):
    """``fn(*args)`` in a Dask worker: once the worker's running tasks leave it ``need`` in the
    worker's memory budget (:class:`workflow.memory.Ledger`), and unless by then the cluster-wide
    stop flag ``flag`` (a :class:`distributed.Event`) is set."""
    held = contextlib.nullcontext()
    if need:
        from workflow.memory import LEDGER, worker_budget

        held = LEDGER.hold(need, worker_budget())
    with held:
        if flag is not None:
            from distributed import Event

            if Event(flag).is_set():
                return _Skipped()
        return fn(*args)


def _on_dask(client, ordered: Sequence[Call], deadline: float | None, retries: int, window: int):
    """Yield ``(call, future)`` for each finished or failed future (cancelled and skipped ones are
    dropped), keeping at most ``window`` tasks in the cluster and refilling in priority order when
    half have finished.  Each task waits in its worker until its memory fits beside the worker's
    running tasks (:func:`_in_worker`).  With a ``deadline`` every task, once it may start, looks at
    a cluster-wide stop flag: at the deadline the flag is set, nothing more is submitted and what is
    not executing is cancelled.  A task that starts after that (one the cancellation missed, or one
    that was waiting for memory) sees the flag and does nothing, and one that started before is
    executing and is waited for, so no task's work is thrown away."""
    from distributed import Event, as_completed

    queue, futures = iter(ordered), {}  # in flight: future -> call
    lock, stopped, completed = threading.Lock(), threading.Event(), as_completed()
    flag = Event(f"gwbatch-stop-{uuid.uuid4().hex}", client=client) if deadline is not None else None

    def submit(n: int) -> None:
        with lock:
            for c in itertools.islice(queue, 0 if stopped.is_set() else n):
                future = client.submit(_in_worker, None if flag is None else flag.name, c.need, c.fn, *c.args,
                                       key=c.key, pure=False, priority=c.priority, retries=retries)
                futures[future] = c
                completed.add(future)

    def stop() -> None:
        flag.set()  # first: whatever starts from now on does nothing
        with lock:
            stopped.set()
            waiting = list(futures)
        _cancel_waiting(client, waiting)

    timer = None
    if deadline is not None:
        timer = threading.Timer(max(0.0, deadline - time.perf_counter()), stop)
        timer.daemon = True
        timer.start()
    submit(window)
    try:
        for future in completed:
            with lock:
                call = futures.pop(future)
                refill = window - len(futures) if len(futures) <= window // 2 else 0
            if refill:  # in batches: one submission per finished task costs the scheduler more
                submit(refill)
            if future.status == "cancelled" or (future.status == "finished" and isinstance(future.result(), _Skipped)):
                continue
            yield call, future
    finally:
        if timer is not None:
            timer.cancel()
        stopped.set()
        client.cancel(list(futures))


@dataclass(frozen=True)
class _Raised:
    exc: Exception


def _attempts(call: Call, retries: int):
    """``call``'s result, or (as :class:`_Raised`) the exception of its last of ``retries + 1`` attempts."""
    for _ in range(retries + 1):
        try:
            return call.fn(*call.args)
        except Exception as exc:
            raised = _Raised(exc)
    return raised


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
    return ChunkFailed(f"{where}chunk {spec.index} (samples {spec.start}..{spec.stop}) failed: {type(exc).__name__}: {exc}")


def chunks_failed(errors: list[GwbatchError], shown: int = 5) -> ChunkFailed:
    """One error for every chunk that failed in a run that finished the others."""
    lines = [str(e) for e in errors[:shown]] + ([f"... and {len(errors) - shown} more"] if len(errors) > shown else [])
    return ChunkFailed(
        f"{len(errors)} chunk(s) failed; the others are done and checkpointed, and the manifest lists the "
        "failures (status: failed):\n  " + "\n  ".join(lines) + "\nrerun with --resume after fixing the cause"
    )
