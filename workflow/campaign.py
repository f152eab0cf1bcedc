"""``gwbatch run``: plan, start a cluster, run the chunks, reduce, estimate background, write outputs."""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata
import json
import logging
import platform
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

import gwbatch
from gwbatch.background.far import SECONDS_PER_YEAR
from gwbatch.config import Campaign, Suite
from gwbatch.conditioning.mask import segments_total
from gwbatch.gpstime import GPSTime, sample_times, time_to_index
from gwbatch.io.skymaps import write_skymap
from gwbatch.io.store import StoreMeta, read_dq, read_meta
from gwbatch.errors import DataError
from gwbatch.io.tables import write_chunk, write_json, write_table
from gwbatch.report.html import write_report
from gwbatch.searches import ChunkResult, ChunkSpec, get_search
from gwbatch.searches.common import candidate_series
from workflow.cluster import start_cluster
from workflow.execute import Call, Stopped, TaskFailed, chunk_failure, chunks_failed, run_calls
from workflow.memory import check_memory, task_need, worker_memory
from workflow.monitor import GpuRecorder
from workflow.rundir import RunDirectory, Staging, output_errors
from workflow.plan import Plan, member_plan
from workflow.prepare import prepare
from workflow.reduce import Reduced, reduce_results, trigger_table
from workflow.resume import check_identity, chunk_inputs, fingerprint, reusable_checkpoints, run_identity

log = logging.getLogger("gwbatch")

FAR_CONVENTION = (
    "far = n_louder / T_bg over all non-zero-lag slides (inclusive: background built from triggers that also "
    "form zero-lag candidates is kept); far_exclusive removes, per candidate, background events sharing one of "
    "its triggers; when no background event is as loud, FAR is reported as the bound 1 / T_bg"
)
PACKAGES = ("numpy", "scipy", "pandas", "pyarrow", "xarray", "zarr", "h5py", "pydantic", "dask", "distributed",
            "dask-cuda", "cupy-cuda13x", "cupy-cuda12x", "astropy")


@dataclass
class RunSummary:
    out: Path
    plan: Plan
    reduced: Reduced
    manifest: dict
    figures: dict = field(default_factory=dict)  # the report's series and skymaps


@dataclass
class SuiteSummary:
    """A multi-search campaign's outputs: the combined ones at ``out`` and each member's own."""

    out: Path
    members: dict[str, RunSummary]
    candidates: pd.DataFrame
    manifest: dict


@dataclass
class Member:
    """One search of a run: its campaign, plan, output directory and chunk results so far."""

    name: str  # "" for a one-search campaign
    campaign: Campaign
    meta: StoreMeta
    plan: Plan
    outdir: Path
    identity: dict  # what its chunks compute (workflow.resume.run_identity), kept in run.json
    fingerprint: str
    inputs: dict[int, dict] = field(default_factory=dict)  # per chunk: the store chunks' checksums it reads
    results: dict[int, ChunkResult] = field(default_factory=dict)
    status: dict[int, str] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)  # chunks that failed in this invocation
    resources: dict = field(default_factory=dict)

    @property
    def todo(self) -> list[ChunkSpec]:
        return [spec for spec in self.plan.chunks if spec.index not in self.results]


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "gwbatch": gwbatch.__version__}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def code_version() -> tuple[str, str | None]:
    """gwbatch's version and, when it runs from a git checkout, the commit (``+dirty`` with local changes)."""
    root = Path(gwbatch.__file__).resolve().parent.parent
    try:
        top, commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel", "HEAD"],
                                     capture_output=True, text=True, timeout=10, check=True).stdout.splitlines()
        if Path(top).resolve() != root:  # a copy of gwbatch inside another repository: not its commit
            return gwbatch.__version__, None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return gwbatch.__version__, None
    commit += "+dirty" if dirty else ""
    return f"{gwbatch.__version__}+g{commit[:12]}{'.dirty' if dirty else ''}", commit


def config_hash(*campaigns: Campaign) -> str:
    """SHA-256 of the resolved configuration (every member's, in order)."""
    blob = json.dumps([c.model_dump(mode="json") for c in campaigns], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def provenance(campaigns: list[Campaign], devices: list[str]) -> dict:
    version, commit = code_version()
    return {"config_sha256": config_hash(*campaigns), "code_version": version, "git_commit": commit,
            "host": socket.gethostname(), "devices": devices, "packages": package_versions()}


def open_member(run: RunDirectory, name: str, campaign: Campaign) -> Member:
    """Plan a search and, on --resume, take over its checkpoints that still hold
    (:mod:`workflow.resume`): a resume of another run is refused saying what differs."""
    meta = read_meta(campaign.data.store)
    plan = member_plan(name, campaign, meta)
    identity = run_identity(campaign, meta)
    member = Member(name, campaign, meta, plan, run.member_dir(name), identity, fingerprint(identity))
    member.inputs = {spec.index: chunk_inputs(meta, plan.ifos, spec) for spec in plan.chunks}
    if run.resume:
        check_identity(run, name, identity)
        member.results = reusable_checkpoints(run, name, plan, meta, member.fingerprint, member.inputs)
        member.status = dict.fromkeys(member.results, "reused")
    return member


def task_cost(member: Member, spec: ChunkSpec) -> float:
    """Relative cost of a chunk task, for ordering: each search's longest tasks are submitted first."""
    samples = (spec.read_stop - spec.read_start) * len(member.plan.ifos)
    search = member.campaign.search
    if search.kind == "spiir":
        return samples * 100.0 * (1 + member.plan.n_slides / 100)
    if search.kind == "burst":
        return samples * 10.0 * (1 + member.plan.n_slides / 10)
    return float(samples)


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
    for m in members:
        m.resources = prepare(m.campaign, m.plan, m.meta, m.outdir, progress)
    stages["prepare"] = time.perf_counter() - timer
    todo = sum(len(m.todo) for m in members)
    timer = time.perf_counter()
    with start_cluster(cluster_cfg, backend, max(1, todo)) as cluster:
        stages["cluster"] = time.perf_counter() - timer
        log.info(
            "cluster: %s, %d worker(s), backend %s%s", cluster.kind, cluster.workers, cluster.backend,
            f"; dashboard {cluster.dashboard}" if cluster.dashboard else "",
        )
        check_memory({m.name: m.plan for m in members}, {m.name: m.campaign for m in members}, worker_memory(cluster))
        run.begin({m.name: m.identity for m in members})
        by_name, priority, gpu = {m.name: m for m in members}, task_priorities(members), cluster.backend == "cupy"
        calls = [
            Call(f"{m.campaign.name}-{m.fingerprint}-chunk-{spec.index:06d}", get_search(m.plan.search).process,
                 (m.campaign, m.plan.ifos, cluster.backend, m.resources, spec), (m.name, spec),
                 priority[m.name, spec.index], task_need(m.campaign, m.plan, spec, gpu))
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


def commit_failed(run: RunDirectory, members: list[Member], cluster, reason: str | None = None) -> None:
    """Replace the directory's final set by ``failed`` manifests (each member's, and a
    multi-search campaign's own), which list every chunk's status and error."""
    with output_errors(run.path):
        _commit_failed(run, members, cluster, reason)


def _commit_failed(run: RunDirectory, members: list[Member], cluster, reason: str | None) -> None:
    parts = run.parts()
    stage = run.staging()
    for m in members:
        write_json(failed_manifest(m, cluster, parts, reason), stage.dir(m.name) / "manifest.json")
    if run.members:
        write_json({"gwbatch_version": gwbatch.__version__, "status": "failed",
                    "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    **({"reason": reason} if reason else {}),
                    "members": {m.name: {"failed": sorted(m.errors), "manifest": f"{m.name}/manifest.json"}
                                for m in members},
                    "timing": {"parts": parts}}, stage.dir() / "manifest.json")
    stage.commit()


#: Times a failing chunk task is run again (in this process, or by Dask, possibly on another worker)
#: before its chunk is marked failed.
TASK_RETRIES = 1


def failed_manifest(m: Member, cluster, parts: list[dict], reason: str | None = None) -> dict:
    """The manifest of a run whose chunks did not all succeed, or that had nothing to analyse
    (``reason``): ``status: failed``, every chunk's status (``done``, ``reused``, ``failed`` with
    its error, or ``not run``) and no results; the final tables are not written, and ``--resume``
    reruns what is missing."""
    chunks = [{"index": spec.index, "start": spec.start, "stop": spec.stop,
               "status": m.status.get(spec.index, "not run"),
               **({"error": m.errors[spec.index]} if spec.index in m.errors else {})} for spec in m.plan.chunks]
    return {
        "gwbatch_version": gwbatch.__version__,
        "status": "failed",
        **({"reason": reason} if reason else {}),
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "campaign": m.campaign.model_dump(mode="json"),
        "plan": {"fingerprint": m.fingerprint, "chunks": len(m.plan.chunks)},
        "failed": [c for c in chunks if c["status"] == "failed"],
        "chunks": chunks,
        "cluster": {"kind": cluster.kind, "workers": cluster.workers, "threads_per_worker": cluster.threads,
                    "backend": cluster.backend},
        "timing": {"parts": parts},
    }


def account_parts(manifest: dict, parts: list[dict]) -> None:
    """Make a manifest cover every invocation of its run (``timing.parts``: the first, and each one
    --resume continued after --stop-after, a failed chunk or a kill).

    With several parts, ``timing.stages`` and ``timing.wall_seconds`` are summed over them (an
    invocation killed before it could record itself is not counted), and ``gpu_utilisation.mean`` is
    the parts' means weighted by their chunk stages; the utilisation samples stay those of the last
    invocation (``gpu_utilisation.sampled_parts`` says so).
    """
    timing = manifest["timing"]
    timing["parts"] = parts
    earlier = parts[:-1]
    if not earlier:
        return
    stages = dict(timing["stages"])  # this invocation's, with what ran after its chunk stage
    for part in earlier:
        for name, seconds in part["stages"].items():
            stages[name] = stages.get(name, 0.0) + seconds
    timing["stages"] = stages
    timing["wall_seconds"] += sum(part.get("wall_seconds", 0.0) for part in earlier)
    gpu = manifest.get("gpu_utilisation")
    weights = [part["stages"].get("chunks", 0.0) for part in parts]
    means = [part.get("gpu_utilisation_mean") for part in parts]
    if isinstance(gpu, dict) and None not in means and sum(weights) > 0:
        gpu["mean_last_part"] = gpu.get("mean")
        gpu["mean"] = float(np.dot(means, weights) / sum(weights))
        gpu["sampled_parts"] = f"the last of {len(parts)}"


#: Client-side stages of :func:`finish_member`, after the chunk stage.
FINISH_STAGES = ("reduce", "figures")


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
    raise nothing_to_analyse(m, seconds, "no sample could be searched (missing, non-finite, runs of zeros, or "
                                         "out of science)")


def summed_stages(entries) -> dict[str, float]:
    """The ``stage_seconds`` of ``entries`` (dicts: chunks, report time series) summed per stage."""
    total: dict[str, float] = {}
    for entry in entries:
        for stage, seconds in (entry.get("stage_seconds") or {}).items():
            total[stage] = total.get(stage, 0.0) + float(seconds)
    return total


def figure_stages(figures: dict) -> dict[str, float]:
    """Seconds of the report's time series per stage (read, condition, statistic), summed over
    the candidates."""
    return summed_stages(figures.get("series", []))


#: Candidates per search whose statistic time series and skymaps the report draws.
TOP_FIGURES = 3


def top_figures(m: Member, reduced: Reduced, top: int = TOP_FIGURES) -> dict:
    """The report's ``series`` (the search's statistic around each of the ``top`` most significant
    candidates, recomputed on the chunk that owns it) and ``skymaps`` (their probability maps)."""
    series, skymaps = [], []
    search, t0, fs = get_search(m.plan.search), GPSTime.parse(m.plan.t0), m.plan.sample_rate
    for _, row in reduced.candidates.head(top).iterrows():
        sample = time_to_index(t0, float(row["gps_time"]), fs)
        spec = next((c for c in m.plan.chunks if c.start <= sample < c.stop), None)
        if spec is not None:
            try:
                series.append(candidate_series(search, m.campaign, m.plan.ifos, m.resources, spec, row))
            except Exception as exc:  # the figure is lost, not the run; the report says it is missing
                log.warning("no time series for the candidate at GPS %.3f: %s: %s", row["gps_time"],
                            type(exc).__name__, exc)
        prob = reduced.skymaps.get(row.get("skymap")) if isinstance(row.get("skymap"), str) else None
        if prob is not None:
            skymaps.append({"label": str(row["search"]),
                            "gps_time": float(row["gps_time"]), "prob": prob,
                            "ra": float(row["ra"]), "dec": float(row["dec"])})
    return {"series": series, "skymaps": skymaps}


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
        members = [open_member(run, name, c) for name, c in campaigns.items()]
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
            reduced[m.name] = (reduce_results(m.campaign, m.plan, m.meta, list(m.results.values())),
                               time.perf_counter() - clock)
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
                 series=[f for s in done.values() for f in s.figures.get("series", [])],
                 skymaps=[f for s in done.values() for f in s.figures.get("skymaps", [])])
    write_table(candidates, stage.dir() / "candidates.parquet")
    write_json(manifest, stage.dir() / "manifest.json")
    stage.commit()
    return SuiteSummary(run.path, done, candidates, manifest)


def combined_candidates(done: dict[str, RunSummary]) -> pd.DataFrame:
    """Every member's candidates in one table (``member`` names the search), most significant first:
    each keeps the FAR against its own search's background."""
    frames = [s.reduced.candidates.assign(member=name) for name, s in done.items() if len(s.reduced.candidates)]
    if not frames:
        return pd.DataFrame({"member": pd.Series(dtype=str), "search": pd.Series(dtype=str),
                             "gps_time": pd.Series(dtype=float), "snr": pd.Series(dtype=float),
                             "far": pd.Series(dtype=float), "ifar_years": pd.Series(dtype=float)})
    table = pd.concat(frames, ignore_index=True)
    return table.sort_values(["far", "snr"], ascending=[True, False], kind="stable").reset_index(drop=True)


def suite_manifest(suite: Suite, done: dict[str, RunSummary], cluster, gpus, command: str, wall: float,
                   stages: dict) -> dict:
    first = next(iter(done.values())).manifest
    devices = sorted({d for s in done.values() for d in s.manifest["devices"]})
    members = []
    for name, s in done.items():
        live = s.manifest["livetime"]
        members.append({"name": name, "kind": s.plan.search, "candidates": s.manifest["counts"]["candidates"],
                        "report": f"{name}/report.html", "manifest": f"{name}/manifest.json",
                        "livetime_s": live["zero_lag_seconds"], "background_s": live["background_seconds"],
                        "chunks": len(s.plan.chunks), "fingerprint": s.manifest["plan"]["fingerprint"],
                        "chunk_seconds": s.manifest["timing"]["chunk_seconds_total"],
                        "task_stages": s.manifest["timing"].get("task_stages", {}),
                        "finish_stages": {k: s.manifest["timing"]["stages"][k] for k in FINISH_STAGES}})
    span = first["plan"]
    return {
        "gwbatch_version": gwbatch.__version__,
        "status": "complete",
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "campaign": {"name": suite.name, "description": suite.description,
                     "searches": {n: c.model_dump(mode="json") for n, c in suite.members.items()}},
        "versions": package_versions(),
        "store": first["store"],
        "plan": {"span_start_gps": span["span_start_gps"], "span_duration": span["span_duration"],
                 "chunks": sum(m["chunks"] for m in members), "ifos": span["ifos"]},
        "members": members,
        "cluster": first["cluster"],
        "devices": devices,
        "counts": {"candidates": sum(m["candidates"] for m in members)},
        "timing": {"wall_seconds": wall, "chunk_seconds_total": float(sum(m["chunk_seconds"] for m in members)),
                   "stages": stages},
        **({"gpu_utilisation": gpus} if gpus is not None else {}),
        "provenance": provenance(list(suite.members.values()), devices),
        "outputs": {"candidates": "candidates.parquet", "report": "report.html",
                    **{m["name"]: m["manifest"] for m in members}},
    }


def task_stages(chunks: list[dict]) -> dict[str, float]:
    """Seconds inside the chunk tasks per stage (read, condition, search, network), summed over
    chunks; ``other`` is the rest of the tasks' time (bookkeeping, tables)."""
    total = summed_stages(chunks)
    total["other"] = max(0.0, float(sum(c["seconds"] for c in chunks)) - sum(total.values()))
    return total


def build_manifest(campaign, plan, meta, reduced: Reduced, results, status, cluster, command, wall,
                   resources: dict, fingerprint: str) -> dict:
    fs = plan.sample_rate
    t0 = GPSTime.parse(plan.t0)
    chunks = []
    for spec in plan.chunks:
        r = results[spec.index]
        start, stop = sample_times(t0, [spec.start, spec.stop], fs)
        chunks.append(
            {
                "index": spec.index,
                "gps_start": float(start),
                "gps_stop": float(stop),
                "status": status[spec.index],
                "device": r.device,
                "worker": r.worker,
                "seconds": r.seconds,
                "device_peak_bytes": r.device_peak_bytes,
                "stage_seconds": r.stage_seconds,
                "triggers": {ifo: int(s["triggers"]) for ifo, s in r.series_stats.items()},
                "analysed_seconds": {ifo: segments_total(seg) / fs for ifo, seg in r.segments.items()},
                "nonfinite_in_science": {ifo: int(s["nonfinite_in_science"]) for ifo, s in r.series_stats.items()},
                "series_stats": r.series_stats,
            }
        )
    bg = reduced.background
    injections = reduced.injections
    return {
        "gwbatch_version": gwbatch.__version__,
        "status": "complete",
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "campaign": campaign.model_dump(mode="json"),
        "versions": package_versions(),
        "store": {
            "path": str(meta.path), "ifos": list(meta.ifos), "sample_rate": meta.sample_rate, "t0": str(meta.t0),
            "duration": meta.duration, "provenance": meta.provenance,
        },
        "plan": {
            "span_start_gps": float(sample_times(t0, plan.span_start, fs)),
            "span_duration": (plan.span_stop - plan.span_start) / fs,
            "chunks": len(plan.chunks),
            "halo_before_s": plan.halo_before / fs,
            "halo_after_s": plan.halo_after / fs,
            "task_memory_bytes": plan.task_memory_bytes,
            "task_device_bytes": plan.task_device_bytes,
            "fingerprint": fingerprint,
            "ifos": list(plan.ifos),
        },
        "resources": {
            "banks": {ifo: {"file": path, "fingerprint": fp} for ifo, (path, fp) in resources.get("banks", {}).items()},
        },
        "cluster": {"kind": cluster.kind, "workers": cluster.workers, "threads_per_worker": cluster.threads,
                    "dashboard": cluster.dashboard, "backend": cluster.backend},
        "devices": sorted({c["device"] for c in chunks}),
        "chunks": chunks,
        "livetime": {
            "analysed_seconds": {ifo: segments_total(seg) / fs for ifo, seg in reduced.segments.items()},
            # exactly the seconds searched: each detector's analysed [start, stop) GPS segments
            "segments_gps": {ifo: sample_times(t0, np.asarray(seg, dtype=np.int64).reshape(-1, 2), fs).tolist()
                             for ifo, seg in reduced.segments.items()},
            # science time masked because the strain was not data: non-finite samples, runs of exact zeros
            "masked_seconds": {ifo: {"nonfinite": sum(c["nonfinite_in_science"][ifo] for c in chunks) / fs,
                                     "zero_runs": sum(c["series_stats"][ifo].get("zero_samples", 0)
                                                      for c in chunks) / fs}
                               for ifo in plan.ifos},
            "zero_lag_seconds": bg.foreground_time,
            "background_seconds": bg.background_time,
            "per_slide_seconds": bg.livetime.tolist(),
            "min_ifos": campaign.coincidence.min_ifos,
        },
        "background": {
            "method": bg.method,
            "slides": plan.n_slides,
            "slide_step": plan.slide_step,
            "far_convention": FAR_CONVENTION,
            "far_bound_hz": (1.0 / bg.background_time) if bg.background_time > 0 else None,
            "far_bound_per_year": (SECONDS_PER_YEAR / bg.background_time) if bg.background_time > 0 else None,
        },
        "counts": {
            "triggers": {ifo: len(df) for ifo, df in zip(plan.ifos, reduced.triggers)},
            "candidates": len(reduced.candidates),
            "background_events": len(reduced.background_events),
            "gates": len(reduced.gates),
            "injections": 0 if injections is None else len(injections),
            "injections_found": 0 if injections is None else int(injections["found"].sum()),
        },
        "outputs": {
            "candidates": "candidates.parquet", "triggers": "triggers.parquet", "background": "background.parquet",
            "gates": "gates.parquet",
            "report": "report.html", **({"injections": "injections.parquet"} if injections is not None else {}),
            **({"skymaps": sorted(reduced.skymaps)} if reduced.skymaps else {}),
        },
        "timing": {"wall_seconds": wall, "chunk_seconds_total": float(sum(c["seconds"] for c in chunks)),
                   "task_stages": task_stages(chunks)},
    }


def write_outputs(outdir: Path, reduced: Reduced, manifest: dict, figures: dict | None = None) -> None:
    """A member's final outputs, written into ``outdir`` (its staging directory, committed with
    the others' by :meth:`~workflow.rundir.Staging.commit`).  ``figures``: the report's ``series``
    and ``skymaps`` of the top candidates (:func:`top_figures`)."""
    write_table(trigger_table(reduced), outdir / "triggers.parquet")
    write_table(reduced.background_events, outdir / "background.parquet")
    write_table(reduced.gates, outdir / "gates.parquet")
    if reduced.injections is not None:
        write_table(reduced.injections, outdir / "injections.parquet")
    write_skymaps(outdir, reduced)
    write_report(
        outdir / "report.html", manifest=manifest, candidates=reduced.candidates,
        background=reduced.background_events, injections=reduced.injections, gates=reduced.gates, **(figures or {}),
    )
    write_table(reduced.candidates, outdir / "candidates.parquet")
    write_json(manifest, outdir / "manifest.json")


def write_skymaps(outdir: Path, reduced: Reduced) -> None:
    """Each candidate's skymap as a FITS file (``skymap`` column), written before the candidate table."""
    if not reduced.skymaps:
        return
    by_file = reduced.candidates.set_index("skymap")
    for name, prob in reduced.skymaps.items():
        path = outdir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        row = by_file.loc[name]
        write_skymap(path, prob, gps_time=float(row["gps_time"]), object_name=f"{row['search']} candidate",
                     extra={"SNR": float(row["snr"]), **({"FAR": float(row["far"])} if np.isfinite(row["far"]) else {})})


def summary_lines(summary: RunSummary) -> list[str]:
    m = summary.manifest
    lines = [
        f"results in {summary.out}/",
        f"  candidates.parquet  {m['counts']['candidates']} zero-lag candidates"
        f" (zero-lag livetime {m['livetime']['zero_lag_seconds']:.1f} s, background {m['livetime']['background_seconds']:.1f} s)",
        f"  background.parquet  {m['counts']['background_events']} time-slide events ({m['background']['slides']} slides)",
        "  triggers.parquet, report.html, manifest.json, gates.parquet",
    ]
    cands = summary.reduced.candidates
    if len(cands):
        top = cands.iloc[0]
        lines.append(f"  most significant: GPS {top['gps_time']:.4f} {top['ifos']} snr {top['snr']:.2f} ifar {top['ifar_years']:.3g} yr")
    inj = summary.reduced.injections
    if inj is not None:
        analysed = inj[inj["analysed"]]
        lines.append(f"  injections.parquet  {int(analysed['found'].sum())} of {len(analysed)} analysed injections found")
    return lines


def suite_lines(summary: SuiteSummary) -> list[str]:
    m = summary.manifest
    lines = [f"results in {summary.out}/",
             f"  candidates.parquet  {len(summary.candidates)} zero-lag candidates of {len(summary.members)} searches",
             "  report.html, manifest.json; each search's own outputs in its directory:"]
    for member in m["members"]:
        lines.append(f"  {member['name']}/  {member['kind']}: {member['candidates']} candidates, zero-lag livetime "
                     f"{member['livetime_s']:.1f} s, background {member['background_s']:.1f} s")
    return lines
