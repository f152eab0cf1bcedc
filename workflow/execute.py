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
    bar = tqdm(total=len(specs), desc="chunks", unit="chunk", disable=not progress or None, leave=True)
    try:
        if cluster.client is None:
            for spec in specs:
                try:
                    result = task(*args, spec)
                except GwbatchError:
                    raise
                except Exception as exc:
                    raise _failure(spec, exc) from exc
                bar.update()
                yield result
            return
        from distributed import as_completed

        client = cluster.client
        futures = {
            client.submit(task, *args, spec, key=f"{key_prefix}-chunk-{spec.index:06d}", pure=False): spec
            for spec in specs
        }
        try:
            for future in as_completed(futures):
                spec = futures[future]
                if future.status == "error":
                    exc = future.exception()
                    if isinstance(exc, GwbatchError):
                        raise exc
                    raise _failure(spec, exc)
                result = future.result()
                log.debug("chunk %d done on %s (%s) in %.2f s", result.index, result.worker, result.device, result.seconds)
                bar.update()
                yield result
        finally:
            client.cancel(list(futures))
    finally:
        bar.close()
