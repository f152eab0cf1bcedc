"""The report's key/value sections, read from the manifest: the configuration and timing (search, data,
plan, execution, livetime and background, counts) and the Provenance."""

from __future__ import annotations

import math

from gwbatch.report.format import (
    DASH,
    fmt_bytes,
    fmt_gps,
    fmt_ifar,
    fmt_int,
    fmt_seconds,
    missing,
    num,
    text,
)
from gwbatch.report.inputs import gpu_devices, gpu_label, gpu_mean
from gwbatch.report.markup import kv_table, note, section, subsection

Rows = list[tuple[str, str]]


def summary_section(manifest: dict, intro: str = "", extra: str = "") -> str:
    """``Configuration and timing``: ``intro`` (the description and command), the search, data, plan,
    execution, livetime and count tables, then ``extra`` (the GPU figure); a campaign of several searches
    keeps only Data and Execution (each search's own report has its search, plan and livetime)."""
    groups = [
        ("Search", _search_rows(manifest)),
        ("Data", _data_rows(manifest)),
        ("Plan", _plan_rows(manifest)),
        ("Execution", _execution_rows(manifest)),
        ("Livetime and background", _livetime_rows(manifest)),
        ("Counts", _count_rows(manifest)),
    ]
    if manifest.get("members"):
        groups = [g for g in groups if g[0] in ("Data", "Execution")]
    body = "\n".join([intro] + [subsection(title, kv_table(rows)) for title, rows in groups if rows] + [extra])
    return section("Configuration and timing", body, "summary")


def provenance_section(manifest: dict) -> str:
    """``provenance``: what made the results (configuration hash, code, host, devices, packages).
    Manifests from before it was recorded show their package versions, if any."""
    prov = manifest.get("provenance")
    if not isinstance(prov, dict):
        body = note("This manifest records no provenance (configuration hash, code version, host).")
        if manifest.get("versions"):
            body += "\n" + kv_table([("packages", _packages_text(manifest.get("versions")))])
        return section("Provenance", body, "provenance")
    commit = prov.get("git_commit")
    rows = [
        ("configuration SHA-256", text(prov.get("config_sha256"))),
        ("code version", text(prov.get("code_version"))),
        ("git commit", text(commit) if not missing(commit) else "none recorded (not run from a git checkout)"),
        ("host", text(prov.get("host"))),
        ("devices", text(prov.get("devices"))),
        ("packages", _packages_text(prov.get("packages") or manifest.get("versions"))),
    ]
    return section("Provenance", kv_table(rows), "provenance")


def _packages_text(packages) -> str:
    if not isinstance(packages, dict) or not packages:
        return DASH
    return ", ".join(f"{name} {version}" for name, version in packages.items())


def _search_rows(manifest: dict) -> Rows:
    """The search and coincidence settings (nested settings left out) and each detector's bank file."""
    campaign = manifest.get("campaign") or {}
    search = campaign.get("search") or {}
    coinc = campaign.get("coincidence") or {}
    rows = [("search", text(search.get("kind")))]
    rows += [(f"search.{k}", text(v)) for k, v in search.items() if k != "kind" and not isinstance(v, dict)]
    rows += [(f"coincidence.{k}", text(v)) for k, v in coinc.items() if not isinstance(v, dict)]
    resources = manifest.get("resources") or {}
    for ifo, files in (resources.get("banks") or {}).items():
        rows.append((f"banks for {ifo}", text(files)))
    epochs = resources.get("psd_epochs") or []
    if len(epochs) > 1:
        losses = [b["snr_loss"] for e in epochs for b in e["banks"].values() if b.get("snr_loss") is not None]
        rows.append(("PSD epochs", f"{len(epochs)}; largest SNR loss from a shared bank "
                                   f"{num(max(losses) if losses else None, '.4f')}"))
    return rows


def _data_rows(manifest: dict) -> Rows:
    store = manifest.get("store") or {}
    plan = manifest.get("plan") or {}
    start, span = plan.get("span_start_gps"), plan.get("span_duration")
    stop = float(start) + float(span) if not (missing(start) or missing(span)) else None
    return [
        ("store", text(store.get("path"))),
        ("detectors", text(store.get("ifos"))),
        ("sample rate", f"{num(store.get('sample_rate'), 'g')} Hz"),
        ("store start (GPS) / duration", f"{text(store.get('t0'))} / {fmt_seconds(store.get('duration'))}"),
        ("analysed span (GPS)", f"{fmt_gps(start)} {DASH} {fmt_gps(stop)}"),
        ("span duration", fmt_seconds(span)),
    ]


def _plan_rows(manifest: dict) -> Rows:
    plan = manifest.get("plan") or {}
    return [
        ("chunks", fmt_int(plan.get("chunks"))),
        ("halo before / after", f"{num(plan.get('halo_before_s'), 'g')} s / {num(plan.get('halo_after_s'), 'g')} s"),
        ("memory per task", fmt_bytes(plan.get("task_memory_bytes"))),
    ]


def _execution_rows(manifest: dict) -> Rows:
    """Where and how long the run ran: cluster, devices, wall and chunk time, invocations, stage times and
    each GPU's mean utilisation."""
    cluster = manifest.get("cluster") or {}
    timing = manifest.get("timing") or {}
    return [
        ("cluster", text(cluster.get("kind"))),
        ("workers", fmt_int(cluster.get("workers"))),
        ("backend", text(cluster.get("backend"))),
        ("devices", text(manifest.get("devices"))),
        ("dashboard", text(cluster.get("dashboard"))),
        ("wall time", fmt_seconds(timing.get("wall_seconds"))),
        ("summed chunk time", fmt_seconds(timing.get("chunk_seconds_total"))),
    ] + _parts_rows(timing) + _stage_rows(timing) + _gpu_rows(manifest)


def _parts_rows(timing: dict) -> Rows:
    """``timing.parts``: a run finished over several invocations (--stop-after, a failure, a kill, then
    --resume); the wall time and stage times above are then their sums."""
    parts = timing.get("parts")
    if not isinstance(parts, list) or len(parts) < 2:
        return []
    done = ", ".join(fmt_int(p.get("chunks_done")) if isinstance(p, dict) else DASH for p in parts)
    return [("invocations", f"{len(parts)} (chunks done in each: {done}); wall and stage times are their sums")]


def _stage_rows(timing: dict) -> Rows:
    """``timing.stages``: seconds per stage of the run, with its share of the wall time; and
    ``timing.task_stages``: seconds per stage inside the chunk tasks, with its share of their sum."""
    stages = timing.get("stages") or {}
    if not isinstance(stages, dict):
        return []
    try:
        wall = float(timing.get("wall_seconds"))
    except (TypeError, ValueError):
        wall = math.nan
    rows = []
    for name, seconds in stages.items():
        value = fmt_seconds(seconds)
        if not missing(seconds) and math.isfinite(wall) and wall > 0:
            share = float(seconds) / wall
            value += f", {'<1%' if 0 <= share < 0.005 else format(share, '.0%')} of the wall time"
        rows.append((f"time per stage: {name}", value))
    tasks = timing.get("task_stages") or {}
    if isinstance(tasks, dict) and tasks:
        try:
            total = sum(float(v) for v in tasks.values())
        except (TypeError, ValueError):
            total = math.nan
        for name, seconds in tasks.items():
            value = fmt_seconds(seconds)
            if not missing(seconds) and math.isfinite(total) and total > 0:
                value += f", {float(seconds) / total:.0%} of the chunk tasks' time"
            rows.append((f"inside the chunk tasks: {name}", value))
    return rows


def _gpu_rows(manifest: dict) -> Rows:
    """Each sampled GPU's mean utilisation; for a run of several invocations, the last one's, and the mean
    over all of them."""
    rows = [(f"mean utilisation, {gpu_label(d)}", f"{num(gpu_mean(d), '.1f')} %") for d in gpu_devices(manifest)]
    gpu = manifest.get("gpu_utilisation")
    if rows and isinstance(gpu, dict) and gpu.get("sampled_parts"):
        rows = [(f"{name} (the last invocation)", value) for name, value in rows]
        rows.append(("mean utilisation over every invocation", f"{num(gpu.get('mean'), '.1f')} %"))
    return rows


def _livetime_rows(manifest: dict) -> Rows:
    live = manifest.get("livetime") or {}
    bg = manifest.get("background") or {}
    rows = [(f"analysed {ifo}", fmt_seconds(s)) for ifo, s in (live.get("analysed_seconds") or {}).items()]
    slides = bg.get("slides")
    if slides is None and live.get("per_slide_seconds"):
        slides = len(live["per_slide_seconds"]) - 1
    rows += [
        ("minimum detectors", fmt_int(live.get("min_ifos"))),
        ("zero-lag livetime", fmt_seconds(live.get("zero_lag_seconds"))),
        ("background livetime", fmt_seconds(live.get("background_seconds"))),
        ("time slides", f"{fmt_int(slides)} (step {num(bg.get('slide_step'), 'g')} s)"),
    ]
    if bg.get("deep_slides"):
        cut = bg.get("deep_cut")
        rows.append(("deep slides", f"{fmt_int(bg['deep_slides'])}, keeping events ranked "
                     + (f">= {num(cut, '.4g')}" if cut is not None else "at any rank")))
    reference = bg.get("reference") if isinstance(bg.get("reference"), dict) else None
    if reference:
        rows.append(("FARs measured against", f"the background of {text(reference.get('run'))}: "
                     f"{fmt_int(reference.get('background_events'))} events in "
                     f"{fmt_seconds(reference.get('background_seconds'))} (background.reference), not this run's"))
    if bg.get("ifar_reach_years") is not None:
        fit = bg.get("tail_fit") or {}
        reach = f"{fmt_ifar(bg['ifar_reach_years'])} yr counted"
        if fit.get("ifar_reach_years") is not None:
            reach += f"; {fmt_ifar(fit['ifar_reach_years'])} yr from the tail fit (up to rank {num(fit.get('extrapolated_up_to'), '.4g')})"
        rows.append(("IFAR reach" + (" (of the reference's background)" if reference else ""), reach))
    rows += [
        ("background method", text(bg.get("method"))),
        ("FAR convention", text(bg.get("far_convention"))),
    ]
    return rows


def _count_rows(manifest: dict) -> Rows:
    counts = manifest.get("counts") or {}
    rows = [(f"triggers {ifo}", fmt_int(n)) for ifo, n in (counts.get("triggers") or {}).items()]
    rows += [(k.replace("_", " "), fmt_int(counts.get(k)))
             for k in ("candidates", "background_events", "gates", "injections", "injections_found") if k in counts]
    return rows
