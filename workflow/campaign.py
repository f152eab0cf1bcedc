"""``gwbatch run``: plan, start a cluster, run the chunks, reduce, estimate background, write outputs."""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import logging
import platform
import time
from dataclasses import dataclass
from pathlib import Path


import numpy as np

import gwbatch
from gwbatch.background.far import SECONDS_PER_YEAR
from gwbatch.config import Campaign
from gwbatch.conditioning.mask import segments_total
from gwbatch.gpstime import GPSTime, sample_times
from gwbatch.io.skymaps import write_skymap
from gwbatch.io.store import read_meta
from gwbatch.io.tables import read_chunk, write_chunk, write_json, write_table
from gwbatch.report.html import write_report
from gwbatch.searches import get_search
from workflow.cluster import start_cluster
from workflow.execute import run_chunks
from workflow.outputs import CHUNKS, prepare_output
from workflow.plan import Plan, make_plan
from workflow.prepare import prepare
from workflow.reduce import Reduced, reduce_results, trigger_table

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


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "gwbatch": gwbatch.__version__}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def run_campaign(
    campaign: Campaign,
    *,
    out: Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    command: str = "",
    progress: bool = True,
) -> RunSummary:
    """Run a whole campaign and write its outputs; returns where they are and what was found."""
    started = time.time()
    meta = read_meta(campaign.data.store)
    plan = make_plan(campaign, meta)
    outdir = prepare_output(Path(out) if out else campaign.output_dir, resume=resume, overwrite=overwrite)
    chunkdir = outdir / CHUNKS
    results, status = {}, {}
    if resume:
        for spec in plan.chunks:
            found = read_chunk(chunkdir, spec.index, plan.fingerprint)
            if found is not None:
                results[spec.index], status[spec.index] = found, "reused"
        log.info("resume: %d of %d chunks already done", len(results), len(plan.chunks))
    todo = [spec for spec in plan.chunks if spec.index not in results]
    search = get_search(plan.search)
    resources = prepare(campaign, plan, meta, outdir, progress)
    with start_cluster(campaign.cluster, campaign.backend, max(1, len(todo))) as cluster:
        log.info(
            "cluster: %s, %d worker(s), backend %s%s", cluster.kind, cluster.workers, cluster.backend,
            f"; dashboard {cluster.dashboard}" if cluster.dashboard else "",
        )
        for result in run_chunks(
            cluster, search.process, (campaign, plan.ifos, cluster.backend, resources), todo,
            key_prefix=f"{campaign.name}-{plan.fingerprint}", progress=progress,
        ):
            write_chunk(chunkdir, result, plan.fingerprint)
            results[result.index], status[result.index] = result, "done"
    reduced = reduce_results(campaign, plan, meta, list(results.values()))
    manifest = build_manifest(campaign, plan, meta, reduced, results, status, cluster, command, time.time() - started,
                              resources)
    write_outputs(outdir, reduced, manifest)
    return RunSummary(outdir, plan, reduced, manifest)


def build_manifest(campaign, plan, meta, reduced: Reduced, results, status, cluster, command, wall,
                   resources: dict) -> dict:
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
            "fingerprint": plan.fingerprint,
            "ifos": list(plan.ifos),
        },
        "resources": {
            "banks": {ifo: {"file": path, "fingerprint": fp} for ifo, (path, fp) in resources.get("banks", {}).items()},
        },
        "cluster": {"kind": cluster.kind, "workers": cluster.workers, "dashboard": cluster.dashboard, "backend": cluster.backend},
        "devices": sorted({c["device"] for c in chunks}),
        "chunks": chunks,
        "livetime": {
            "analysed_seconds": {ifo: segments_total(seg) / fs for ifo, seg in reduced.segments.items()},
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
        "timing": {"wall_seconds": wall, "chunk_seconds_total": float(sum(c["seconds"] for c in chunks))},
    }


def write_outputs(outdir: Path, reduced: Reduced, manifest: dict) -> None:
    """Final outputs, each written atomically; the manifest last marks the run complete."""
    write_table(trigger_table(reduced), outdir / "triggers.parquet")
    write_table(reduced.background_events, outdir / "background.parquet")
    write_table(reduced.gates, outdir / "gates.parquet")
    if reduced.injections is not None:
        write_table(reduced.injections, outdir / "injections.parquet")
    write_skymaps(outdir, reduced)
    write_report(
        outdir / "report.html", manifest=manifest, candidates=reduced.candidates,
        background=reduced.background_events, injections=reduced.injections, gates=reduced.gates,
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
