"""What a run records about itself: the manifest of a complete run, of a failed one and of a
multi-search campaign, the timing of every invocation, the versions and provenance."""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata
import json
import platform
import socket
import subprocess
from pathlib import Path

import numpy as np

import gwbatch
from gwbatch.background.far import SECONDS_PER_YEAR
from gwbatch.config import Campaign, Suite
from gwbatch.conditioning.mask import segments_total
from gwbatch.gpstime import GPSTime, sample_times
from gwbatch.searches import get_search
from workflow.member import Member, RunSummary
from workflow.reduce import Reduced
from workflow.rundir import CAND_FILE, DISPERSED_COLUMNS


FAR_CONVENTION = (
    "far = n_louder / T_bg over all non-zero-lag slides (inclusive: background built from triggers that also "
    "form zero-lag candidates is kept), after hierarchical removal of zero-lag candidates louder than all "
    "background (far_no_removal: without it); far_exclusive removes, per candidate, background events sharing "
    "one of its triggers; when no background event is as loud, FAR is extrapolated from an exponential fit to "
    "the background's tail (far_kind 'extrapolated', far_upper its 1-sigma upper value), else reported as the "
    "bound 1 / T_bg (far_kind 'bound')"
)


PACKAGES = ("numpy", "scipy", "pandas", "pyarrow", "xarray", "zarr", "h5py", "pydantic", "dask", "distributed",
            "dask-cuda", "cupy-cuda13x", "cupy-cuda12x", "astropy")



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
                    "workers_per_gpu": cluster.per_gpu,
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



def summed_stages(entries) -> dict[str, float]:
    """The ``stage_seconds`` of ``entries`` (dicts: chunks, report time series) summed per stage."""
    total: dict[str, float] = {}
    for entry in entries:
        for stage, seconds in (entry.get("stage_seconds") or {}).items():
            total[stage] = total.get(stage, 0.0) + float(seconds)
    return total



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
    far_time = reduced.reference["background_seconds"] if reduced.reference else bg.background_time
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
        # what the search built before its chunks ran, as it summarises it (SPIIR: PSD epochs and their banks)
        "resources": resources.get("summary", {}),
        "cluster": {"kind": cluster.kind, "workers": cluster.workers, "threads_per_worker": cluster.threads,
                    "workers_per_gpu": cluster.per_gpu,
                    "dashboard": cluster.dashboard, "backend": cluster.backend},
        "devices": sorted({c["device"] for c in chunks}),
        "chunks": chunks,
        "livetime": {
            "analysed_seconds": {ifo: segments_total(seg) / fs for ifo, seg in reduced.segments.items()},
            # exactly the seconds searched: each detector's analysed [start, stop) GPS segments
            "segments_gps": {ifo: sample_times(t0, np.asarray(seg, dtype=np.int64).reshape(-1, 2), fs).tolist()
                             for ifo, seg in reduced.segments.items()},
            # science time masked because the strain was not data (non-finite samples, runs of exact
            # zeros), vetoed after conditioning, or gated
            "masked_seconds": {ifo: {"nonfinite": sum(c["nonfinite_in_science"][ifo] for c in chunks) / fs,
                                     "zero_runs": sum(c["series_stats"][ifo].get("zero_samples", 0)
                                                      for c in chunks) / fs,
                                     "vetoed": sum(c["series_stats"][ifo].get("vetoed_samples", 0)
                                                   for c in chunks) / fs,
                                     "gated": sum(c["series_stats"][ifo].get("gated_samples", 0)
                                                  for c in chunks) / fs}
                               for ifo in plan.ifos},
            # the campaign's science segments and vetoes: sources, categories, seconds of the span each removes
            "segments": plan.segments.summary,
            "zero_lag_seconds": bg.foreground_time,
            "background_seconds": bg.background_time,
            "per_slide_seconds": bg.livetime[: plan.n_slides + 1].tolist(),  # zero lag and the base slides
            "deep_slides_seconds": float(bg.livetime[plan.n_slides + 1:].sum()),
            "min_ifos": campaign.coincidence.min_ifos,
        },
        "background": {
            "method": bg.method,
            "slides": plan.n_slides,
            "deep_slides": plan.deep_slides,
            "deep_cut": bg.deep_cut if bg.deep_cut is not None and np.isfinite(bg.deep_cut) else None,
            "slide_step": plan.slide_step,
            "far_convention": get_search(plan.search).far_convention or FAR_CONVENTION,
            # the bound, the reach and the tail fit are those of the background the candidates' FARs
            # are measured against: the run's own, or background.reference's (then named below)
            "far_bound_hz": (1.0 / far_time) if far_time > 0 else None,
            "far_bound_per_year": (SECONDS_PER_YEAR / far_time) if far_time > 0 else None,
            # the largest IFAR the background can state by counting (1 / the bound); the tail fit's
            # own reach (extrapolated) is tail_fit.ifar_reach_years
            "ifar_reach_years": far_time / SECONDS_PER_YEAR,
            "far_tail": campaign.background.far_tail,
            "tail_fit": reduced.reference["tail_fit"] if reduced.reference else
                        bg.fit.summary() if bg.fit is not None else None,
            "hierarchical_removal": campaign.background.hierarchical_removal,
            "removed_from_background": bg.removed,
            # background.reference: the candidates' FARs are against this run's background, not their own
            "reference": reduced.reference,
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
            **({"psd": "psd.h5"} if reduced.psds else {}),
            **({"cand": CAND_FILE} if DISPERSED_COLUMNS <= set(reduced.candidates.columns) else {}),
        },
        "timing": {"wall_seconds": wall, "chunk_seconds_total": float(sum(c["seconds"] for c in chunks)),
                   "task_stages": task_stages(chunks)},
    }



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
