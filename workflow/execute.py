"""Running chunk tasks: in this process, or as Dask futures streamed back as they finish."""

from __future__ import annotations

import logging
from typing import Callable, Iterator, Sequence

from tqdm.auto import tqdm

from gwbatch.errors import GwbatchError
from gwbatch.searches import ChunkResult, ChunkSpec
from workflow.cluster import Cluster

log = logging.getLogger("gwbatch")


class ChunkFailed(GwbatchError):
    """A chunk task raised; finished chunks stay checkpointed for --resume."""

    exit_code = 5


def _failure(spec: ChunkSpec, exc: BaseException) -> ChunkFailed:
    return ChunkFailed(
        f"chunk {spec.index} (samples {spec.start}..{spec.stop}) failed: {type(exc).__name__}: {exc}\n"
        "finished chunks are checkpointed; rerun with --resume after fixing the cause"
    )


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
    bar = tqdm(total=len(items), desc=desc, unit=desc.rstrip("s"), disable=not progress or None, leave=True)
    try:
        if cluster.client is None:
            for item in items:
                try:
                    result = task(*args, item)
                except GwbatchError:
                    raise
                except Exception as exc:
                    raise failure(item, exc) from exc
                bar.update()
                yield result
            return
        from distributed import as_completed

        client = cluster.client
        futures = {client.submit(task, *args, item, key=key(item), pure=False): item for item in items}
        try:
            for future in as_completed(futures):
                item = futures[future]
                if future.status == "error":
                    exc = future.exception()
                    if isinstance(exc, GwbatchError):
                        raise exc
                    raise failure(item, exc)
                bar.update()
                yield future.result()
        finally:
            client.cancel(list(futures))
    finally:
        bar.close()


def run_chunks(
    cluster: Cluster,
    task: Callable[..., ChunkResult],
    args: tuple,
    specs: Sequence[ChunkSpec],
    *,
    key_prefix: str,
    progress: bool = True,
) -> Iterator[ChunkResult]:
    """Yield each chunk's result as it completes; ``task(*args, spec)`` does the work."""
    for result in run_tasks(cluster, task, args, specs, key=lambda s: f"{key_prefix}-chunk-{s.index:06d}",
                            failure=_failure, desc="chunks", progress=progress):
        log.debug("chunk %d done on %s (%s) in %.2f s", result.index, result.worker, result.device, result.seconds)
        yield result
