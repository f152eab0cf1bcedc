"""What the searches build once before their chunks run (:meth:`gwbatch.searches.base.Search.prepare`:
SPIIR's banks; nothing for most searches), with CPU workers started only if a search asks for them.

A GPU cluster has one worker per GPU; building banks is CPU work, so :func:`cpu_workers` starts CPU
workers of their own (:func:`workflow.cluster.cpu_cluster_config`) the first time a search maps
work over them, and closes them when every search is prepared (:mod:`workflow.cpu_workers`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

from gwbatch.searches import get_search
from gwbatch.searches.base import PrepareContext
from workflow.cluster import usable_cores
from workflow.cpu_workers import cpu_workers
from workflow.member import Member
from workflow.rundir import BANKS, no_link


def prepare_context(plan, meta, outdir: Path, parallel: Callable, progress: bool = True) -> PrepareContext:
    """What a search's ``prepare`` sees for ``plan`` on store ``meta``: its cache is ``outdir/banks``."""
    return PrepareContext(store=meta, ifos=plan.ifos, span_start=plan.span_start, chunks=plan.chunks,
                          dq_required=plan.dq_required,
                          zero_gap=plan.zero_gap, conditioning=plan.conditioning, excluded=plan.segments.excluded,
                          cache=no_link(Path(outdir) / BANKS), parallel=parallel, progress=progress,
                          threads=usable_cores())


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
