"""``gwbatch run``: plan, start a cluster, run the chunks, reduce, write the outputs.

The run's steps, each in its own module: the plan (:mod:`workflow.plan`), the run directory and
its lock (:mod:`workflow.rundir`), what a resume may take over (:mod:`workflow.resume`), what
the searches build once (:mod:`workflow.prepare`), the memory plan (:mod:`workflow.memory`), the
task order (:mod:`workflow.schedule`), the cluster (:mod:`workflow.cluster`) and the tasks on it
(:mod:`workflow.execute`), the reduction (:mod:`workflow.reduce`), the manifest
(:mod:`workflow.manifest`), the report's figures (:mod:`workflow.figures`), the outputs
(:mod:`workflow.outputs`) and what is printed at the end (:mod:`workflow.console`).
"""

from __future__ import annotations

import datetime as _dt
import logging
import time
from pathlib import Path

import pandas as pd

from gwbatch.conditioning.mask import segments_total
from gwbatch.config import Campaign, Suite
from gwbatch.errors import DataError
from gwbatch.io.store import read_dq, read_meta
from gwbatch.io.tables import write_chunk, write_json, write_table
from gwbatch.report.html import write_report
from gwbatch.searches import get_search
from workflow.cluster import start_cluster, usable_cores
from workflow.execute import Call, Stopped, TaskFailed, chunk_failure, chunks_failed, run_calls
from workflow.figures import figure_stages, top_figures
from workflow.manifest import account_parts, build_manifest, provenance, suite_manifest
from workflow.member import Member, RunSummary, SuiteSummary
from workflow.memory import check_memory, fit_memory, task_need, worker_memory
from workflow.monitor import GpuRecorder
from workflow.outputs import combined_candidates, commit_failed, write_outputs
from workflow.plan import chunk_task, member_plan
from workflow.prepare import prepare
from workflow.reduce import Reduced, reduce_results
from workflow.resume import (check_identity, chunk_inputs, fingerprint, reusable_checkpoints, run_identity,
                             verify_reused_inputs)
from workflow.rundir import RunDirectory, Staging, output_errors
from workflow.schedule import task_priorities

#: The figures of top candidates each member draws that the combined report shows too (:func:`workflow.figures.top_figures`).
PER_CANDIDATE_FIGURES = ("series", "skymaps", "qscans", "tfmaps", "waterfalls", "bowties")

log = logging.getLogger("gwbatch")


def open_member(run: RunDirectory, name: str, campaign: Campaign) -> Member:
    """Plan a search and, on --resume, take over its checkpoints that still hold
    (:mod:`workflow.resume`): a resume of another run is refused saying what differs.  The store
    files under them are checked by :func:`open_members`, once for all members."""
    meta = read_meta(campaign.data.store)
    plan = member_plan(name, campaign, meta)
    identity = run_identity(campaign, meta, plan)
    member = Member(name, campaign, meta, plan, run.member_dir(name), identity, fingerprint(identity))
    member.inputs = {spec.index: chunk_inputs(meta, plan.ifos, spec) for spec in plan.chunks}
    if run.resume:
        check_identity(run, name, identity)
        member.results = reusable_checkpoints(run, name, plan, member.fingerprint, member.inputs, threads=usable_cores())
        member.status = dict.fromkeys(member.results, "reused")
    return member


def open_members(run: RunDirectory, campaigns: dict[str, Campaign]) -> list[Member]:
    """Every member, opened (:func:`open_member`); on --resume, the store files under all the
    checkpoints they take over are then checked, each once (:func:`workflow.resume.verify_reused_inputs`)."""
    members = [open_member(run, name, c) for name, c in campaigns.items()]
    if run.resume:
        verify_reused_inputs(members, threads=usable_cores())
    return members


def run_members(run: RunDirectory, members: list[Member], cluster_cfg, backend: str, *, progress: bool,
                stages: dict, started: float, stop_after: float | None = None):
    """Run every member's remaining chunks on one cluster, checkpointing each as it finishes, and
    record this invocation in the run's parts log.

    Returns the cluster description and the GPU utilisation over the chunk stage.  Nothing of an
    earlier run in the directory is discarded before the cluster is up (:meth:`RunDirectory.begin`),
    and the memory plan is checked against the workers before any task is submitted.  With
    ``stop_after`` (seconds from ``started``, a :func:`time.perf_counter` value) no task starts
    later; if chunks are left then, :class:`Stopped` is raised once the running ones are
    checkpointed.  Chunks that failed are recorded in a ``failed`` manifest before the cluster is
    closed, and raised as one :class:`ChunkFailed`.
    """
    timer = time.perf_counter()
    prepare(members, cluster_cfg, progress)
    stages["prepare"] = time.perf_counter() - timer
    todo = sum(len(m.todo) for m in members)
    timer = time.perf_counter()
    with start_cluster(cluster_cfg, backend, max(1, todo)) as cluster:
        stages["cluster"] = time.perf_counter() - timer
        log.info(
            "cluster: %s, %d worker(s), backend %s%s", cluster.kind, cluster.workers, cluster.backend,
            f"; dashboard {cluster.dashboard}" if cluster.dashboard else "",
        )
        have = worker_memory(cluster)
        fitted = fit_memory({m.name: m.plan for m in members}, have)
        for m in members:
            m.plan = fitted[m.name]
        check_memory(fitted, have)
        run.begin({m.name: m.identity for m in members})
        by_name, priority, gpu = {m.name: m for m in members}, task_priorities(members), cluster.backend == "cupy"
        calls = [
            Call(f"{m.campaign.name}-{m.fingerprint}-chunk-{spec.index:06d}", get_search(m.plan.search).process,
                 (chunk_task(m.plan, m.meta, spec, cluster.backend), m.resources), (m.name, spec),
                 priority[m.name, spec.index], task_need(m.plan, spec, gpu))
            for m in members for spec in m.todo
        ]
        timer, recorder = time.perf_counter(), GpuRecorder(cluster, time.time())
        deadline = None if stop_after is None else started + stop_after
        gpus, ended, errors = None, "interrupted", []
        try:
            for call, result in run_calls(cluster, calls, failure=chunk_failure, desc="chunks", progress=progress,
                                          deadline=deadline, retries=TASK_RETRIES, keep_going=True):
                recorder.poll()
                m, spec = by_name[call.item[0]], call.item[1]
                if isinstance(result, TaskFailed):
                    log.warning("%s", result.error)
                    m.status[spec.index] = "failed"
                    m.errors[spec.index] = str(result.error)
                    errors.append((m.name, spec.index, result.error))
                    continue
                log.debug("%s chunk %d done on %s (%s) in %.2f s", m.name or m.plan.search, result.index,
                          result.worker, result.device, result.seconds)
                with output_errors(run.path):
                    write_chunk(run.chunks(m.name), spec, result, m.fingerprint, m.inputs[spec.index])
                m.results[result.index], m.status[result.index] = result, "done"
            gpus = recorder.finish() if calls else None
            ended = "failed" if errors else "stopped" if any(m.todo for m in members) else "complete"
        finally:  # a failed or interrupted invocation's finished chunks count too
            stages["chunks"] = time.perf_counter() - timer
            left = sum(len(m.todo) for m in members)
            run.record_part({"finished_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                             "ended": ended, "wall_seconds": time.perf_counter() - started, "stages": dict(stages),
                             "chunks_done": len(calls) - left, "chunks_left": left,
                             "chunks_failed": len(errors), "workers": cluster.workers,
                             "gpu_utilisation_mean": (gpus or {}).get("mean")})
        if errors:
            commit_failed(run, members, cluster)
            raise chunks_failed([error for *_, error in sorted(errors, key=lambda e: e[:2])])
    if left:
        total = sum(len(m.plan.chunks) for m in members)
        raise Stopped(f"--stop-after {stop_after:g} s reached: {len(calls) - left} chunks done in this run, "
                      f"{left} of {total} left; finished chunks are checkpointed, rerun with --resume to go on")
    return cluster, gpus


#: Times a failing chunk task is run again (in this process, or by Dask, possibly on another worker)
#: before its chunk is marked failed.
TASK_RETRIES = 1


def finish_member(m: Member, reduced: Reduced, reduce_seconds: float, stage: Staging, cluster, gpus, command: str,
                  started: float, stages: dict, parts: list[dict]) -> RunSummary:
    """Write a member's tables, skymaps, report and manifest into the staging area (committed with
    the others' by the caller).  ``parts``: every invocation that ran chunks for this run (the first
    and each --resume)."""
    own = {**stages, "reduce": reduce_seconds}
    timer = time.perf_counter()
    figures = top_figures(m, reduced)  # recomputed on the client, after the chunk stage
    own["figures"] = time.perf_counter() - timer
    manifest = build_manifest(m.campaign, m.plan, m.meta, reduced, m.results, m.status, cluster, command,
                              time.time() - started, m.resources, m.fingerprint)
    manifest["timing"]["stages"] = own
    manifest["timing"]["figure_stages"] = figure_stages(figures)
    if gpus is not None:
        manifest["gpu_utilisation"] = gpus
    account_parts(manifest, parts)
    manifest["provenance"] = provenance([m.campaign], manifest["devices"])
    write_outputs(stage.dir(m.name), reduced, manifest, figures)
    return RunSummary(m.outdir, m.plan, reduced, manifest, figures)


class NothingToAnalyse(DataError):
    """No second of the span could be searched (exit 3): every detector's data is missing,
    non-finite, zero or out of science, or too little of it overlaps for the search."""


def nothing_to_analyse(m: Member, seconds: dict[str, float], what: str) -> NothingToAnalyse:
    where = f"searches.{m.name}: " if m.name else ""
    need = min(m.campaign.coincidence.min_ifos, len(m.plan.ifos))
    per_ifo = ", ".join(f"{ifo} {seconds.get(ifo, 0.0):g} s" for ifo in m.plan.ifos)
    together = f" with {need} detectors at once (coincidence.min_ifos)" if need > 1 else ""
    return NothingToAnalyse(f"{where}nothing to analyse in {m.meta.path}: {what}{together} ({per_ifo} of "
                            f"{(m.plan.span_stop - m.plan.span_start) / m.plan.sample_rate:g} s)")


def check_science(m: Member) -> None:
    """Refuse, before any task runs, a span in which the store's DQ leaves no science time for
    the search (:class:`NothingToAnalyse`)."""
    fs, plan = m.meta.sample_rate, m.plan
    first, last = int(plan.span_start // fs), int(-(-plan.span_stop // fs))
    required = m.meta.dq_mask(m.campaign.data.dq_flags)
    passing = (read_dq(m.meta, plan.ifos)[:, first:last] & required) == required
    need = min(m.campaign.coincidence.min_ifos, len(plan.ifos))
    if not (passing.sum(axis=0) >= need).any():
        raise nothing_to_analyse(m, dict(zip(plan.ifos, passing.sum(axis=1).astype(float))),
                                 f"no second passes the DQ flags {', '.join(m.campaign.data.dq_flags)}")


def check_analysed(m: Member, reduced: Reduced) -> None:
    """Refuse a run whose chunks searched nothing (all data masked: missing, non-finite, zero
    runs, out of science), so no complete result claims an empty span."""
    if reduced.background.foreground_time > 0:
        return
    fs = m.plan.sample_rate
    seconds = {ifo: float(segments_total(seg) / fs) for ifo, seg in reduced.segments.items()}
    raise nothing_to_analyse(m, seconds, "no sample could be searched (missing, non-finite, runs of zeros, "
                                         "out of science, or every radio channel flagged)")


def run_campaign(
    campaign: Campaign,
    *,
    out: Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    command: str = "",
    progress: bool = True,
    stop_after: float | None = None,
) -> RunSummary:
    """Run a whole campaign and write its outputs; returns where they are and what was found.
    ``stop_after``: seconds after which no chunk task starts (:class:`Stopped` if any is left)."""
    top = Path(out) if out else campaign.output_dir
    return _run(top, {"": campaign}, campaign.cluster, campaign.backend, resume=resume, overwrite=overwrite,
                command=command, progress=progress, stop_after=stop_after)[""]


def run_suite(
    suite: Suite,
    *,
    out: Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    command: str = "",
    progress: bool = True,
    stop_after: float | None = None,
) -> SuiteSummary:
    """Run every search of a multi-search campaign on one cluster, its chunks interleaved, then
    write each member's outputs in ``<out>/<member>/`` and the combined ones in ``<out>``."""
    top = Path(out) if out else suite.output_dir
    return _run(top, suite.members, suite.cluster, suite.backend, resume=resume, overwrite=overwrite, command=command,
                progress=progress, stop_after=stop_after, suite=suite)


def _run(top: Path, campaigns: dict[str, Campaign], cluster_cfg, backend: str, *, resume: bool, overwrite: bool,
         command: str, progress: bool, stop_after: float | None, suite: Suite | None = None):
    """Lock the run directory, plan, run the chunks, reduce, and commit the final set in one step
    (``docs/reliability.md``).  Returns each member's :class:`RunSummary` by name ("" for a
    one-search campaign), or the :class:`SuiteSummary` of a multi-search one."""
    started, stages = time.time(), {}
    timer = time.perf_counter()
    members_names = tuple(name for name in campaigns if name)
    with RunDirectory.open(top, members=members_names, resume=resume, overwrite=overwrite, command=command) as run:
        members = open_members(run, campaigns)
        for m in members:
            check_science(m)
        stages["plan"] = time.perf_counter() - timer
        cluster, gpus = run_members(run, members, cluster_cfg, backend, progress=progress, stages=stages,
                                    started=timer, stop_after=stop_after)
        parts = run.parts()
        timer = time.perf_counter()
        reduced = {}
        for m in members:
            clock = time.perf_counter()
            reduced[m.name] = (reduce_results(m.plan, m.meta, list(m.results.values())), time.perf_counter() - clock)
        for m in members:
            try:
                check_analysed(m, reduced[m.name][0])
            except NothingToAnalyse as exc:
                commit_failed(run, members, cluster, reason=str(exc))
                raise
        with output_errors(run.path):
            return _finish(run, members, reduced, cluster, gpus, command, started, stages, parts, timer, suite)


def _finish(run: RunDirectory, members: list[Member], reduced: dict, cluster, gpus, command: str, started: float,
            stages: dict, parts: list[dict], timer: float, suite: Suite | None):
    """Write every member's final set (and a multi-search campaign's own) and commit them together."""
    stage = run.staging()
    done = {m.name: finish_member(m, *reduced[m.name], stage, cluster, gpus, command, started, stages, parts)
            for m in members}
    if suite is None:
        stage.commit()
        return done
    stages["members"] = time.perf_counter() - timer  # each member's reduction, figures and outputs
    candidates = combined_candidates(done)
    manifest = suite_manifest(suite, done, cluster, gpus, command, time.time() - started, stages)
    account_parts(manifest, parts)
    write_report(stage.dir() / "report.html", manifest=manifest, candidates=candidates,
                 background=pd.DataFrame(), injections=None, gates=pd.DataFrame(),
                 **{kind: [f for s in done.values() for f in s.figures.get(kind, [])] for kind in PER_CANDIDATE_FIGURES},
                 searches={name: (s.reduced.injections, float(s.manifest["livetime"]["zero_lag_seconds"]))
                           for name, s in done.items() if s.reduced.injections is not None})
    write_table(candidates, stage.dir() / "candidates.parquet")
    write_json(manifest, stage.dir() / "manifest.json")
    stage.commit()
    return SuiteSummary(run.path, done, candidates, manifest)


