"""What the searches build once before their chunks run (:meth:`gwbatch.searches.base.Search.prepare`:
SPIIR's banks; nothing for most searches), with CPU workers started only if a search asks for them.

A GPU cluster has one worker per GPU; building banks is CPU work, so :func:`cpu_workers` starts CPU
workers of their own (:func:`workflow.cluster.cpu_cluster_config`) the first time a search maps
work over them, and closes them when every search is prepared.  On one host they are forked from
this process where that is safe (:mod:`workflow.forked`: no Dask start-up), else a Dask cluster.
"""

from __future__ import annotations

import contextlib
import itertools
import uuid
from pathlib import Path
from typing import Callable, Iterator

from gwbatch.searches import get_search
from gwbatch.searches.base import PrepareContext
from workflow.cluster import cpu_cluster_config, start_cluster, usable_cores
from workflow.execute import Call, run_calls
from workflow.forked import can_fork, forked_map
from workflow.member import Member
from workflow.rundir import BANKS, no_link


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


def prepare_context(plan, meta, outdir: Path, parallel: Callable, progress: bool = True) -> PrepareContext:
    """What a search's ``prepare`` sees for ``plan`` on store ``meta``: its cache is ``outdir/banks``."""
    return PrepareContext(store=meta, ifos=plan.ifos, span_start=plan.span_start, chunks=plan.chunks,
                          dq_required=plan.dq_required,
                          zero_gap=plan.zero_gap, conditioning=plan.conditioning, excluded=plan.segments.excluded, cache=no_link(Path(outdir) / BANKS),
                          parallel=parallel, progress=progress)


def prepare(members: list[Member], cluster_cfg, progress: bool = True) -> None:
    """Each member's ``resources``: what its search builds once, in the member's own cache
    directory (``<member>/banks``) unless its settings name another."""
    with cpu_workers(cluster_cfg, progress) as parallel:
        for m in members:
            context = prepare_context(m.plan, m.meta, m.outdir, parallel, progress)
            m.resources = get_search(m.plan.search).prepare(m.plan.settings, context)


def prepare_one(plan, meta, outdir: Path, cluster_cfg, progress: bool = False) -> dict:
    """The resources of one plan's search (for scripts that run chunk tasks themselves)."""
    with cpu_workers(cluster_cfg, progress) as parallel:
        return get_search(plan.search).prepare(plan.settings, prepare_context(plan, meta, outdir, parallel, progress))
