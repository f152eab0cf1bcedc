"""The order chunk tasks are submitted in: each search's longest first, the searches interleaved."""

from __future__ import annotations

from gwbatch.searches import get_search
from workflow.member import Member


def task_cost(member: Member, spec) -> float:
    """Relative cost of a chunk task (:meth:`gwbatch.searches.base.Search.task_cost`)."""
    return get_search(member.plan.search).task_cost(member.plan.settings, spec.read_stop - spec.read_start)


def task_priorities(members: list[Member]) -> dict[tuple[str, int], float]:
    """Priorities (higher runs first) of the chunk tasks left, keyed ``(member name, chunk index)``:
    each search's tasks longest first (:func:`task_cost`), and the searches interleaved in
    proportion to their task counts.  A worker that runs two tasks at once then mostly runs two
    searches side by side (a GPU-bound SPIIR task beside a burst or pulse task, whose host steps
    leave the GPU to it) rather than two tasks of one search that may wait for each other's memory."""
    ranked = []
    for m in members:
        todo = sorted(m.todo, key=lambda s: -task_cost(m, s))
        ranked += [((i + 0.5) / len(todo), -task_cost(m, s), m.name, s.index) for i, s in enumerate(todo)]
    ranked.sort()
    return {(name, index): float(len(ranked) - k) for k, (*_, name, index) in enumerate(ranked)}
