"""The campaign report: one self-contained ``report.html``.

The page shows, in order: the campaign (name, description, status, version, command); for a campaign
that runs several searches, one row per search with a link to its own report; a summary of the search
settings, the data, the plan, the execution (wall, chunk and per-stage times, each GPU's mean
utilisation), the livetime and the counts; the most significant zero-lag candidates; figures
(candidates over time, cumulative IFAR against the background expectation with Poisson bands, the
cumulative rate of the ranking statistic, the SNR / rho time series and the Mollweide skymaps of the
top candidates, injection recovery with its table, detection efficiency against injected SNR, for
searches with sky directions the P-P plot of the skymaps, and GPU utilisation over the run); the
chunks; the gates; the provenance (configuration hash, code version, git commit, host, devices,
packages); and the FAR convention.

Nothing is loaded from elsewhere: the CSS is inline and the figures are inline SVG drawn with
:class:`matplotlib.figure.Figure` (no pyplot, so no global figure state); each ``<figure>`` has a
stable id (``fig-time``, ``fig-ifar``, ``fig-rank``, ``fig-series``, ``fig-skymaps``, ``fig-inj``,
``fig-eff-snr``, ``fig-eff-hrss``, ``fig-pp``, ``fig-gpu``), and the skymaps' colour layer is an
embedded PNG inside the SVG.  Every string taken from the inputs is HTML-escaped; links (to member
searches' reports) are relative paths only.  A figure that cannot be drawn (no candidates, no
background, no injections, no time series or skymaps given, no GPU samples) is replaced by a
sentence saying why, and manifests from before a key existed still render.  The file is written
atomically.
"""

from __future__ import annotations

import html
import io
import math
import os
import pathlib
import re
import urllib.parse
from collections.abc import Iterable, Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import LogFormatter
from matplotlib.transforms import blended_transform_factory
from scipy.stats import norm, poisson

from gwbatch.background.far import SECONDS_PER_YEAR

MAX_CANDIDATES = 25
MAX_GATES = 100
RECOVERY_SNR = 8.0  # injected network SNR above which the found fraction is quoted
RECOVERY_TOLERANCE = 0.15  # the +-15 % band of recovered / injected SNR
MAX_PANELS = 5  # time series and skymaps of the top candidates
SKY_GRID = (480, 240)  # longitude x latitude cells a HEALPix map is resampled to for drawing
FULL_SKY_DEG2 = 4 * math.pi * (180 / math.pi) ** 2
DASH = "\u2013"

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1100px;
       padding: 0 1em; color: #222; line-height: 1.4; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.2em 0.6em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.kv th { width: 16em; font-weight: normal; background: #fafafa; }
code, pre { background: #f6f6f6; padding: 0.1em 0.3em; }
pre { padding: 0.5em; overflow-x: auto; white-space: pre-wrap; }
figure { margin: 1em 0 2em; } figcaption { font-size: 0.9em; color: #444; margin-top: 0.3em; }
figure svg { max-width: 100%; height: auto; }
p.note { color: #666; font-style: italic; } .meta { color: #555; }
footer { margin-top: 3em; border-top: 1px solid #ccc; padding-top: 0.5em; font-size: 0.85em; color: #555; }
"""


# ----------------------------------------------------------------------------------------------
# formatting and HTML helpers


def _esc(value) -> str:
    return html.escape(str(value), quote=True)


def _missing(x) -> bool:
    if x is None:
        return True
    try:
        return bool(pd.isna(x))
    except (TypeError, ValueError):
        return False


def _num(x, spec: str = ".6g") -> str:
    """A number with ``spec``; "inf" for infinities and a dash for missing values."""
    if _missing(x):
        return DASH
    try:
        x = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return format(x, spec)


def fmt_gps(x) -> str:
    return _num(x, ".4f")


def fmt_snr(x) -> str:
    return _num(x, ".2f")


def fmt_far(x) -> str:
    return _num(x, ".3e")


def fmt_ifar(x) -> str:
    return _num(x, ".3g")


def _fmt_int(x) -> str:
    return DASH if _missing(x) else f"{int(x):d}"


def _fmt_degrees(x) -> str:
    return DASH if _missing(x) else f"{math.degrees(float(x)):.1f}"


def _fmt_area(x) -> str:
    return DASH if _missing(x) else f"{float(x):.0f}"


def _fmt_seconds(x) -> str:
    if _missing(x):
        return DASH
    s = float(x)
    if not math.isfinite(s) or s < 60:
        return f"{_num(s, '.6g')} s"
    h, rest = divmod(int(round(s)), 3600)
    return f"{_num(s, '.6g')} s ({h:d}:{rest // 60:02d}:{rest % 60:02d})"


def _fmt_bytes(x) -> str:
    if _missing(x):
        return DASH
    value = float(x)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return DASH  # pragma: no cover


def _text(x) -> str:
    if _missing(x):
        return DASH
    if isinstance(x, (list, tuple)):
        return ", ".join(str(v) for v in x) or DASH
    return str(x)


class _Raw(str):
    """Markup built here from escaped parts (a link); :func:`html_table` puts it in a cell as it is."""


def _cell(value) -> str:
    return value if isinstance(value, _Raw) else _esc(value)


def _link(href, text=None) -> str:
    """A link to a relative path (``burst/report.html``).  Anything with a scheme, an absolute path or a
    parent-directory step is shown as plain text, so the report never points outside its campaign."""
    href = "" if _missing(href) else str(href)
    label = href if text is None else str(text)
    if not href or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", href) or href.startswith(("/", "\\")) or ".." in href:
        return label or DASH
    return _Raw(f'<a href="{_esc(urllib.parse.quote(href, safe="/#"))}">{_esc(label)}</a>')


def html_table(header: Sequence[str], rows: Iterable[Sequence], numeric: Sequence[bool] | None = None) -> str:
    """A table with a header row; every cell is escaped (except :class:`_Raw` markup made here);
    ``numeric`` columns are right-aligned."""
    numeric = list(numeric) if numeric is not None else [False] * len(header)
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{_cell(c)}</td>' if (i < len(numeric) and numeric[i]) else f"<td>{_cell(c)}</td>"
            for i, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n" + "\n".join(body) + "\n</tbody>\n</table>"


def _kv_table(pairs: Iterable[tuple[str, str]]) -> str:
    rows = "\n".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in pairs)
    return f'<table class="kv">\n<tbody>\n{rows}\n</tbody>\n</table>'


def _note(text: str) -> str:
    return f'<p class="note">{_esc(text)}</p>'


def _section(title: str, body: str, anchor: str) -> str:
    return f'<section id="{_esc(anchor)}">\n<h2>{_esc(title)}</h2>\n{body}\n</section>'


def fig_to_svg(fig: Figure, prefix: str) -> str:
    """``fig`` as an inline ``<svg>`` element: XML header and RDF metadata stripped, ids prefixed to stay unique."""
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "gwbatch-report"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    fig.clear()
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, count=1, flags=re.S)
    svg = re.sub(r'\bid="', f'id="{prefix}-', svg)
    svg = re.sub(r'href="#', f'href="#{prefix}-', svg)
    return re.sub(r"url\(#", f"url(#{prefix}-", svg)


def _figure(svg: str, caption: str, fig_id: str | None = None) -> str:
    ident = f' id="{_esc(fig_id)}"' if fig_id else ""
    return f"<figure{ident}>\n{svg}\n<figcaption>{_esc(caption)}</figcaption>\n</figure>"


def _drawn(fig: Figure, fig_id: str, caption: str) -> str:
    """``fig`` as a captioned ``<figure id=fig_id>``; the SVG's own ids are prefixed with ``fig_id``."""
    return _figure(fig_to_svg(fig, fig_id), caption, fig_id)


def _skipped(title: str, reason: str) -> str:
    return f"<h3>{_esc(title)}</h3>\n" + _note(f"Not drawn: {reason}")


# ----------------------------------------------------------------------------------------------
# input access


def _frame(df: pd.DataFrame | None) -> pd.DataFrame:
    return df if df is not None else pd.DataFrame()


def _column(df: pd.DataFrame, name: str) -> np.ndarray | None:
    """``df[name]`` as float64 (None when the column is absent)."""
    if name not in df.columns:
        return None
    return pd.to_numeric(df[name], errors="coerce").to_numpy(dtype=np.float64)


def _flag(df: pd.DataFrame, name: str, default: bool) -> np.ndarray:
    """A boolean column (missing values False); ``default`` everywhere when the column is absent."""
    if name not in df.columns:
        return np.full(len(df), default, dtype=bool)
    return df[name].fillna(False).astype(bool).to_numpy()


def _ifos(manifest: dict, *frames: pd.DataFrame) -> list[str]:
    """Detectors: the store's list, else those with ``snr_<ifo>`` columns in the candidates/background."""
    ifos = list((manifest.get("store") or {}).get("ifos") or [])
    if ifos:
        return [str(i) for i in ifos]
    found: list[str] = []
    for df in frames:
        for c in df.columns:
            if isinstance(c, str) and c.startswith("snr_") and c[4:] not in found:
                found.append(c[4:])
    return found


def _span_start(manifest: dict, candidates: pd.DataFrame) -> float:
    start = (manifest.get("plan") or {}).get("span_start_gps")
    if start is None:
        start = (manifest.get("store") or {}).get("t0")
    try:
        return float(start)
    except (TypeError, ValueError):
        t = _column(candidates, "gps_time")
        return float(np.nanmin(t)) if t is not None and np.isfinite(t).any() else 0.0


def _livetime(manifest: dict, key: str) -> float:
    try:
        return float((manifest.get("livetime") or {}).get(key) or 0.0)
    except (TypeError, ValueError):
        return 0.0


# ----------------------------------------------------------------------------------------------
# sections


def _title(manifest: dict) -> str:
    campaign = manifest.get("campaign") or {}
    name = campaign.get("name") or "gwbatch campaign"
    meta = [
        ("status", _text(manifest.get("status"))),
        ("created (UTC)", _text(manifest.get("created_utc"))),
        ("gwbatch", _text(manifest.get("gwbatch_version"))),
    ]
    parts = [f"<h1>{_esc(name)}</h1>"]
    if campaign.get("description"):
        parts.append(f"<p>{_esc(campaign['description'])}</p>")
    items = " &middot; ".join(f"{_esc(k)}: <strong>{_esc(v)}</strong>" for k, v in meta)
    parts.append(f'<p class="meta">{items}</p>')
    if manifest.get("command"):
        parts.append(f"<pre><code>{_esc(manifest['command'])}</code></pre>")
    return "\n".join(parts)


def _search_rows(manifest: dict) -> list[tuple[str, str]]:
    campaign = manifest.get("campaign") or {}
    search = campaign.get("search") or {}
    coinc = campaign.get("coincidence") or {}
    rows = [("search", _text(search.get("kind")))]
    rows += [(f"search.{k}", _text(v)) for k, v in search.items() if k != "kind" and not isinstance(v, dict)]
    rows += [(f"coincidence.{k}", _text(v)) for k, v in coinc.items() if not isinstance(v, dict)]
    banks = (manifest.get("resources") or {}).get("banks") or {}
    rows += [(f"bank for {ifo}", _text(b.get("file"))) for ifo, b in banks.items()]
    return rows


def _data_rows(manifest: dict) -> list[tuple[str, str]]:
    store = manifest.get("store") or {}
    plan = manifest.get("plan") or {}
    start, span = plan.get("span_start_gps"), plan.get("span_duration")
    stop = float(start) + float(span) if not (_missing(start) or _missing(span)) else None
    return [
        ("store", _text(store.get("path"))),
        ("detectors", _text(store.get("ifos"))),
        ("sample rate", f"{_num(store.get('sample_rate'), 'g')} Hz"),
        ("store start (GPS) / duration", f"{_text(store.get('t0'))} / {_fmt_seconds(store.get('duration'))}"),
        ("analysed span (GPS)", f"{fmt_gps(start)} \u2013 {fmt_gps(stop)}"),
        ("span duration", _fmt_seconds(span)),
    ]


def _plan_rows(manifest: dict) -> list[tuple[str, str]]:
    plan = manifest.get("plan") or {}
    return [
        ("chunks", _fmt_int(plan.get("chunks"))),
        ("halo before / after", f"{_num(plan.get('halo_before_s'), 'g')} s / {_num(plan.get('halo_after_s'), 'g')} s"),
        ("memory per task", _fmt_bytes(plan.get("task_memory_bytes"))),
    ]


def _execution_rows(manifest: dict) -> list[tuple[str, str]]:
    cluster = manifest.get("cluster") or {}
    timing = manifest.get("timing") or {}
    return [
        ("cluster", _text(cluster.get("kind"))),
        ("workers", _fmt_int(cluster.get("workers"))),
        ("backend", _text(cluster.get("backend"))),
        ("devices", _text(manifest.get("devices"))),
        ("dashboard", _text(cluster.get("dashboard"))),
        ("wall time", _fmt_seconds(timing.get("wall_seconds"))),
        ("summed chunk time", _fmt_seconds(timing.get("chunk_seconds_total"))),
    ] + _parts_rows(timing) + _stage_rows(timing) + _gpu_rows(manifest)


def _parts_rows(timing: dict) -> list[tuple[str, str]]:
    """``timing.parts``: a run finished over several invocations (--stop-after, a failure, a kill, then
    --resume); the wall time and stage times above are then their sums."""
    parts = timing.get("parts")
    if not isinstance(parts, list) or len(parts) < 2:
        return []
    done = ", ".join(_fmt_int(p.get("chunks_done")) if isinstance(p, dict) else DASH for p in parts)
    return [("invocations", f"{len(parts)} (chunks done in each: {done}); wall and stage times are their sums")]


def _stage_rows(timing: dict) -> list[tuple[str, str]]:
    """``timing.stages``: seconds per stage of the run, with its share of the wall time."""
    stages = timing.get("stages") or {}
    if not isinstance(stages, dict):
        return []
    try:
        wall = float(timing.get("wall_seconds"))
    except (TypeError, ValueError):
        wall = math.nan
    rows = []
    for name, seconds in stages.items():
        value = _fmt_seconds(seconds)
        if not _missing(seconds) and math.isfinite(wall) and wall > 0:
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
            value = _fmt_seconds(seconds)
            if not _missing(seconds) and math.isfinite(total) and total > 0:
                value += f", {float(seconds) / total:.0%} of the chunk tasks' time"
            rows.append((f"inside the chunk tasks: {name}", value))
    return rows


def _gpu_devices(manifest: dict) -> list[dict]:
    """``gpu_utilisation.devices`` with at least one utilisation sample."""
    gpu = manifest.get("gpu_utilisation")
    if not isinstance(gpu, dict):
        return []
    return [d for d in (gpu.get("devices") or []) if isinstance(d, dict) and _samples(d, "utilisation").size > 0]


def _samples(device: dict, key: str) -> np.ndarray:
    """One sampled quantity of a GPU (a list, or an array) as float64; empty when absent or unreadable."""
    value = device.get(key)
    try:
        return np.asarray([] if value is None else value, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        return np.zeros(0)


def _gpu_label(device: dict) -> str:
    name = device.get("name")
    return f"GPU {_text(device.get('index'))}" + (f" ({name})" if name else "")


def _gpu_mean(device: dict) -> float:
    """The recorded mean utilisation (%), else the mean of the samples."""
    mean = device.get("mean")
    if not _missing(mean):
        return float(mean)
    u = _samples(device, "utilisation")
    return float(np.nanmean(u)) if np.isfinite(u).any() else math.nan


def _gpu_rows(manifest: dict) -> list[tuple[str, str]]:
    rows = [(f"mean utilisation, {_gpu_label(d)}", f"{_num(_gpu_mean(d), '.1f')} %") for d in _gpu_devices(manifest)]
    gpu = manifest.get("gpu_utilisation")
    if rows and isinstance(gpu, dict) and gpu.get("sampled_parts"):
        rows = [(f"{name} (the last invocation)", value) for name, value in rows]
        rows.append(("mean utilisation over every invocation", f"{_num(gpu.get('mean'), '.1f')} %"))
    return rows


def _livetime_rows(manifest: dict) -> list[tuple[str, str]]:
    live = manifest.get("livetime") or {}
    bg = manifest.get("background") or {}
    rows = [(f"analysed {ifo}", _fmt_seconds(s)) for ifo, s in (live.get("analysed_seconds") or {}).items()]
    slides = bg.get("slides")
    if slides is None and live.get("per_slide_seconds"):
        slides = len(live["per_slide_seconds"]) - 1
    rows += [
        ("minimum detectors", _fmt_int(live.get("min_ifos"))),
        ("zero-lag livetime", _fmt_seconds(live.get("zero_lag_seconds"))),
        ("background livetime", _fmt_seconds(live.get("background_seconds"))),
        ("time slides", f"{_fmt_int(slides)} (step {_num(bg.get('slide_step'), 'g')} s)"),
        ("background method", _text(bg.get("method"))),
        ("FAR convention", _text(bg.get("far_convention"))),
    ]
    return rows


def _count_rows(manifest: dict) -> list[tuple[str, str]]:
    counts = manifest.get("counts") or {}
    rows = [(f"triggers {ifo}", _fmt_int(n)) for ifo, n in (counts.get("triggers") or {}).items()]
    rows += [(k.replace("_", " "), _fmt_int(counts.get(k)))
             for k in ("candidates", "background_events", "gates", "injections", "injections_found") if k in counts]
    return rows


def _summary(manifest: dict) -> str:
    groups = [
        ("Search", _search_rows(manifest)),
        ("Data", _data_rows(manifest)),
        ("Plan", _plan_rows(manifest)),
        ("Execution", _execution_rows(manifest)),
        ("Livetime and background", _livetime_rows(manifest)),
        ("Counts", _count_rows(manifest)),
    ]
    if manifest.get("members"):  # several searches: each member's report has its own search, plan and livetime
        groups = [g for g in groups if g[0] in ("Data", "Execution")]
    body = "\n".join(f"<h3>{_esc(title)}</h3>\n{_kv_table(rows)}" for title, rows in groups if rows)
    return _section("Summary", body, "summary")


def _members_section(manifest: dict) -> str:
    """``members``: the searches of a campaign that runs several, each linked to its own report."""
    members = [m for m in (manifest.get("members") or []) if isinstance(m, dict)]
    if not members:
        return ""
    header = ["search", "kind", "candidates", "livetime", "background livetime", "report"]
    rows = [[_text(m.get("name")), _text(m.get("kind")), _fmt_int(m.get("candidates")),
             _fmt_seconds(m.get("livetime_s")), _fmt_seconds(m.get("background_s")),
             _link(m.get("report"))] for m in members]
    intro = f"<p>This campaign runs {len(members)} search{'es' if len(members) != 1 else ''}; each has its own report.</p>"
    return _section("Searches", intro + "\n" + html_table(header, rows, [False, False, True, True, True, False]),
                    "searches")


def _packages_text(packages) -> str:
    if not isinstance(packages, dict) or not packages:
        return DASH
    return ", ".join(f"{name} {version}" for name, version in packages.items())


def _provenance_section(manifest: dict) -> str:
    """``provenance``: what made the results (configuration hash, code, host, devices, packages).
    Manifests from before it was recorded show their package versions, if any."""
    prov = manifest.get("provenance")
    if not isinstance(prov, dict):
        body = _note("This manifest records no provenance (configuration hash, code version, host).")
        if manifest.get("versions"):
            body += "\n" + _kv_table([("packages", _packages_text(manifest.get("versions")))])
        return _section("Provenance", body, "provenance")
    commit = prov.get("git_commit")
    rows = [
        ("configuration SHA-256", _text(prov.get("config_sha256"))),
        ("code version", _text(prov.get("code_version"))),
        ("git commit", _text(commit) if not _missing(commit) else "none recorded (not run from a git checkout)"),
        ("host", _text(prov.get("host"))),
        ("devices", _text(prov.get("devices"))),
        ("packages", _packages_text(prov.get("packages") or manifest.get("versions"))),
    ]
    return _section("Provenance", _kv_table(rows), "provenance")


def _candidates_section(candidates: pd.DataFrame, ifos: list[str]) -> str:
    n = len(candidates)
    if n == 0:
        return _section("Candidates", _note("No zero-lag candidates were found in this campaign."), "candidates")
    cols = [("gps_time", "GPS time", fmt_gps), ("ifos", "detectors", _text), ("snr", "SNR", fmt_snr),
            ("rank", "rank", fmt_snr), ("null_snr", "null SNR", fmt_snr), ("chisq", "\u03c7\u00b2", fmt_snr),
            ("rho", "rho", fmt_snr), ("far", "FAR (Hz)", fmt_far), ("ifar_years", "IFAR (yr)", fmt_ifar),
            ("far_exclusive", "FAR excl. (Hz)", fmt_far), ("template", "template", _fmt_int),
            ("ra", "RA (\u00b0)", _fmt_degrees), ("dec", "Dec (\u00b0)", _fmt_degrees),
            ("area90", "90% area (deg\u00b2)", _fmt_area)]
    cols += [(f"snr_{ifo}", f"SNR {ifo}", fmt_snr) for ifo in ifos]
    cols += [(f"chisq_{ifo}", f"\u03c7\u00b2 {ifo}", fmt_snr) for ifo in ifos]
    cols = [c for c in cols if c[0] in candidates.columns]
    top = candidates.head(MAX_CANDIDATES)
    rows = [[str(i + 1)] + [fmt(row[key]) for key, _, fmt in cols] for i, (_, row) in enumerate(top.iterrows())]
    numeric = [True] + [key != "ifos" for key, _, _ in cols]
    shown = f"the {len(top)} most significant are listed" if n > len(top) else "all are listed"
    intro = f"<p>{n} zero-lag candidate{'s' if n != 1 else ''} in total; {shown} (most significant first).</p>"
    return _section("Candidates", intro + "\n" + html_table(["#"] + [c[1] for c in cols], rows, numeric), "candidates")


# ----------------------------------------------------------------------------------------------
# figures


def _fig_candidates_time(manifest: dict, candidates: pd.DataFrame, injections: pd.DataFrame | None) -> str:
    title = "Candidates over time"
    t0 = _span_start(manifest, candidates)
    t = _column(candidates, "gps_time")
    snr = _column(candidates, "snr")
    have_cands = t is not None and snr is not None and np.isfinite(t).any()
    inj = _frame(injections)
    have_inj = len(inj) > 0 and "gps_time" in inj.columns
    if not have_cands and not have_inj:
        return _skipped(title, "there are no zero-lag candidates and no injections.")
    fig = Figure(figsize=(9, 4), layout="constrained")
    ax = fig.add_subplot()
    if have_cands:
        far = _column(candidates, "far")
        far = far if far is not None else np.full(t.size, np.nan)
        good = np.isfinite(far) & (far > 0) & np.isfinite(snr)
        if good.any():
            sc = ax.scatter(t[good] - t0, snr[good], c=np.log10(far[good]), cmap="viridis_r", s=18, zorder=3)
            fig.colorbar(sc, ax=ax, label="log10 FAR (Hz)")
        if (~good & np.isfinite(snr)).any():
            rest = ~good & np.isfinite(snr)
            ax.scatter(t[rest] - t0, snr[rest], c="grey", s=18, zorder=3, label="no finite FAR")
        pos = snr[np.isfinite(snr) & (snr > 0)]
        if pos.size and pos.max() > 20 * pos.min():
            ax.set_yscale("log")
    if have_inj:
        _mark_injections(ax, inj, t0)
    ax.set_xlabel(f"time since GPS {t0:.4f} (s)")
    ax.set_ylabel("ranking statistic (SNR)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper right", fontsize="small")
    caption = ("Zero-lag candidates: ranking statistic against time since the start of the analysed span, "
               "coloured by log10 FAR; injections are marked along the bottom axis.")
    return f"<h3>{_esc(title)}</h3>\n" + _drawn(fig, "fig-time", caption)


def _mark_injections(ax, inj: pd.DataFrame, t0: float) -> None:
    """Found (green triangles) and missed-but-analysed (red crosses) injection times, along the x axis."""
    trans = blended_transform_factory(ax.transData, ax.transAxes)
    t = _column(inj, "gps_time") - t0
    found = _flag(inj, "found", False)
    analysed = _flag(inj, "analysed", True)
    missed = analysed & ~found
    if found.any():
        ax.plot(t[found], np.full(found.sum(), 0.03), "^", color="tab:green", ms=6, transform=trans,
                label=f"found injection ({found.sum()})", clip_on=False)
    if missed.any():
        ax.plot(t[missed], np.full(missed.sum(), 0.03), "x", color="tab:red", ms=6, transform=trans,
                label=f"missed injection ({missed.sum()})", clip_on=False)


def _ifar_for_plot(candidates: pd.DataFrame, t_bg: float) -> tuple[np.ndarray, int]:
    """Finite IFARs (years); infinities clipped to the larger of the largest finite one and ``T_bg``."""
    ifar = _column(candidates, "ifar_years")
    far = _column(candidates, "far")
    if ifar is None and far is None:
        return np.zeros(0), 0
    if ifar is None:
        with np.errstate(divide="ignore", invalid="ignore"):
            ifar = np.where(far > 0, 1.0 / (far * SECONDS_PER_YEAR), np.where(far == 0, np.inf, np.nan))
    ifar = ifar[~np.isnan(ifar)]
    inf = np.isinf(ifar)
    finite = ifar[~inf & (ifar > 0)]
    bound = max(finite.max() if finite.size else 0.0, t_bg / SECONDS_PER_YEAR)
    return np.concatenate([finite, np.full(int(inf.sum()), bound)]), int(inf.sum())


def _poisson_bands(mu: np.ndarray) -> list[tuple[float, np.ndarray, np.ndarray]]:
    """Central Poisson intervals at 1, 2, 3 sigma around ``mu``."""
    bands = []
    for k in (1, 2, 3):
        tail = norm.sf(k)
        bands.append((k, poisson.ppf(tail, mu), poisson.ppf(1 - tail, mu)))
    return bands


def _fig_cumulative_ifar(manifest: dict, candidates: pd.DataFrame, background: pd.DataFrame) -> str:
    title = "Cumulative IFAR"
    members = [m for m in (manifest.get("members") or []) if isinstance(m, dict)]
    if members and "member" in candidates.columns:
        return _fig_members_ifar(title, members, candidates)
    t_fg, t_bg = _livetime(manifest, "zero_lag_seconds"), _livetime(manifest, "background_seconds")
    if len(candidates) == 0:
        return _skipped(title, "there are no zero-lag candidates.")
    if len(background) == 0 or t_bg <= 0:
        return _skipped(title, "there is no time-slide background (single-series campaign or no slides).")
    if t_fg <= 0:
        return _skipped(title, "the zero-lag livetime is zero.")
    ifar, n_clipped = _ifar_for_plot(candidates, t_bg)
    if ifar.size == 0:
        return _skipped(title, "no candidate has a usable IFAR.")
    fig = _draw_cumulative_ifar([("zero-lag candidates", ifar)], t_fg)
    caption = (f"Number of zero-lag candidates with IFAR at least x, against the background expectation "
               f"T_fg / x (T_fg = {t_fg:.6g} s) with Poisson 1/2/3\u03c3 bands.")
    if n_clipped:
        caption += f" {n_clipped} infinite IFAR(s) drawn at {ifar.max():.3g} years."
    return f"<h3>{_esc(title)}</h3>\n" + _drawn(fig, "fig-ifar", caption)


def _fig_members_ifar(title: str, members: list[dict], candidates: pd.DataFrame) -> str:
    """A campaign of several searches: each search's candidates against its own background, and all
    of them together against the sum of the searches' expectations, sum_s T_fg,s / x (each search's
    FAR is its own; counting every search's candidates is a trials factor of their number)."""
    curves, t_fg, clipped = [], 0.0, 0
    for m in members:
        own = candidates[candidates["member"].astype(str) == str(m.get("name"))]
        live, bg = float(m.get("livetime_s") or 0.0), float(m.get("background_s") or 0.0)
        if live <= 0 or bg <= 0:
            continue
        t_fg += live
        ifar, n_clipped = _ifar_for_plot(own, bg)
        clipped += n_clipped
        if ifar.size:
            curves.append((f"{m.get('name')} ({ifar.size})", ifar))
    if not curves:
        return _skipped(title, "no search has zero-lag candidates with a time-slide background.")
    every = np.concatenate([c[1] for c in curves])
    fig = _draw_cumulative_ifar([(f"all searches ({every.size})", every), *curves], t_fg)
    caption = (f"Number of zero-lag candidates with IFAR at least x, all searches together (black) and each "
               f"search (colours), against the expectation of all searches together, \u03a3 T_fg / x "
               f"(\u03a3 T_fg = {t_fg:.6g} s over {len(curves)} searches with candidates and a background), "
               f"with Poisson 1/2/3\u03c3 bands. Each search's IFAR is against its own background.")
    if clipped:
        caption += (f" {clipped} infinite IFAR(s) drawn at the background time of their search (or at its "
                    "largest finite IFAR, if larger).")
    return f"<h3>{_esc(title)}</h3>\n" + _drawn(fig, "fig-ifar", caption)


def _draw_cumulative_ifar(curves: list[tuple[str, np.ndarray]], t_fg: float) -> Figure:
    """Counts N(IFAR >= x) of each ``(label, ifar_years)`` (the first in black, the rest in colours)
    over the expectation ``t_fg / x`` and its Poisson bands."""
    lo_x = min(c[1].min() for c in curves) / 3
    hi_x = max(c[1].max() for c in curves) * 3
    grid = np.geomspace(lo_x, hi_x, 300)
    mu = t_fg / (grid * SECONDS_PER_YEAR)
    floor = 0.1
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for k, lo, hi in reversed(_poisson_bands(mu)):
        ax.fill_between(grid, np.maximum(lo, floor / 2), np.maximum(hi, floor / 2), step="mid",
                        color="tab:blue", alpha=0.12 + 0.08 * (3 - k), lw=0, label=f"{k}\u03c3")
    ax.plot(grid, mu, "--", color="tab:blue", label="background expectation")
    top = 1
    colours = iter(["tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive"])
    for i, (label, ifar) in enumerate(curves):
        x = np.sort(ifar)
        n = np.arange(x.size, 0, -1)
        top = max(top, int(n.max()))
        # N(>= x) holds n[i] on (x[i-1], x[i]]; start at the grid's left edge and drop below the axis after the last
        ax.step(np.r_[grid[0], x, x[-1]], np.r_[n[0], n, floor / 2], where="pre",
                color="black" if i == 0 else next(colours, "tab:gray"), lw=1.5 if i == 0 else 1.0, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(grid[0], grid[-1])
    ax.set_ylim(floor, max(top, mu.max()) * 2)
    ax.set_xlabel("IFAR (years)")
    ax.set_ylabel("number of candidates with IFAR \u2265 x")
    ax.legend(loc="upper right", fontsize="small")
    return fig


def _cumulative_rate(values: np.ndarray | None, time: float) -> tuple[np.ndarray, np.ndarray] | None:
    if values is None or time <= 0:
        return None
    v = np.sort(values[np.isfinite(values)])
    if v.size == 0:
        return None
    return v, np.arange(v.size, 0, -1) / time


def _ranking_column(*frames: pd.DataFrame) -> str:
    """The column FARs are computed from: ``rank`` where the search has one, else ``snr``."""
    return "rank" if all("rank" in f.columns for f in frames if len(f.columns)) else "snr"


def _fig_ranking(manifest: dict, candidates: pd.DataFrame, background: pd.DataFrame) -> str:
    title = "Ranking statistic distribution"
    stat = _ranking_column(candidates, background)
    bg = _cumulative_rate(_column(background, stat), _livetime(manifest, "background_seconds"))
    fg = _cumulative_rate(_column(candidates, stat), _livetime(manifest, "zero_lag_seconds"))
    if bg is None and fg is None:
        return _skipped(title, "there are no events with livetime to plot (no candidates and no background).")
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.add_subplot()
    if bg is not None:
        ax.step(*bg, where="post", color="tab:blue", label=f"time-slide background ({bg[0].size})")
    if fg is not None:
        ax.step(*fg, where="post", color="black", label=f"zero lag ({fg[0].size})")
    ax.set_yscale("log")
    ax.set_xlabel(f"ranking statistic x ({stat})")
    ax.set_ylabel(f"rate of events with {stat} \u2265 x (Hz)")
    ax.legend(loc="upper right", fontsize="small")
    caption = ("Cumulative rate of events at least as loud as x: background count over the background livetime "
               "and zero-lag count over the zero-lag livetime.")
    if bg is None:
        caption += " No time-slide background is available."
    return f"<h3>{_esc(title)}</h3>\n" + _drawn(fig, "fig-rank", caption)


def _recovered_column(inj: pd.DataFrame, ifo: str) -> tuple[np.ndarray | None, str]:
    rho = _column(inj, f"found_rho_{ifo}")
    if rho is not None:
        return rho, "rho"
    return _column(inj, f"found_snr_{ifo}"), "SNR"


def _fig_injections(injections: pd.DataFrame | None, ifos: list[str]) -> str:
    title = "Injection recovery"
    if injections is None:
        return _skipped(title, "this campaign has no injections.")
    if len(injections) == 0:
        return _skipped(title, "the injection set is empty.")
    plotted = [ifo for ifo in ifos if f"injected_snr_{ifo}" in injections.columns]
    parts = [f"<h3>{_esc(title)}</h3>"]
    if plotted:
        parts.append(_figure(_recovery_svg(injections, plotted),
                             "Recovered against injected SNR per detector for found injections, with y = x and a "
                             f"\u00b1{RECOVERY_TOLERANCE:.0%} band.", "fig-inj"))
    else:
        parts.append(_note("No per-detector injected SNRs to plot."))
    parts.append(_recovery_tables(injections, plotted))
    return "\n".join(parts)


def _recovery_svg(inj: pd.DataFrame, ifos: list[str]) -> str:
    fig = Figure(figsize=(3.6 * len(ifos) + 0.8, 3.8), layout="constrained")
    axes = fig.subplots(1, len(ifos), squeeze=False)[0]
    found = _flag(inj, "found", False)
    for ax, ifo in zip(axes, ifos):
        x = _column(inj, f"injected_snr_{ifo}")
        y, label = _recovered_column(inj, ifo)
        y = y if y is not None else np.full(x.size, np.nan)
        ok = found & np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
        ax.set_title(ifo, parse_math=False)
        ax.set_xlabel("injected SNR")
        ax.set_ylabel(f"recovered {label}")
        if not ok.any():
            ax.text(0.5, 0.5, "no found injections", ha="center", va="center", transform=ax.transAxes)
            continue
        lim = np.array([min(x[ok].min(), y[ok].min()) / 1.5, max(x[ok].max(), y[ok].max()) * 1.5])
        ax.fill_between(lim, lim * (1 - RECOVERY_TOLERANCE), lim * (1 + RECOVERY_TOLERANCE), color="tab:green",
                        alpha=0.2, lw=0, label=f"\u00b1{RECOVERY_TOLERANCE:.0%}")
        ax.plot(lim, lim, "-", color="tab:green", lw=1, label="y = x")
        ax.scatter(x[ok], y[ok], s=12, color="black", zorder=3, label=f"found ({ok.sum()})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):  # plain numbers (6, 20) rather than 6x10^0, 2x10^1
            axis.set_major_formatter(LogFormatter())
            axis.set_minor_formatter(LogFormatter(labelOnlyBase=False))
        ax.set_xlim(*lim)
        ax.set_ylim(*lim)
        ax.legend(loc="upper left", fontsize="small")
    return fig_to_svg(fig, "fig-inj")


def _fig_efficiency(manifest: dict, injections: pd.DataFrame | None, column: str = "snr",
                    quantity: str = "injected network SNR", fmt: str = ".3g") -> str:
    """Found fraction against an injected quantity (network SNR; hrss for burst injections), with
    binomial 1-sigma errors: found by any candidate, and found louder than every background event
    (FAR at the background's bound)."""
    title = "Detection efficiency" + ("" if column == "snr" else f" against {quantity}")
    inj = _frame(injections)
    snr = _column(inj, column)
    if snr is None or len(inj) == 0:
        return "" if column != "snr" else _skipped(title, "this campaign has no injections.")
    analysed = _flag(inj, "analysed", True) & np.isfinite(snr) & (snr > 0)
    if analysed.sum() < 2:
        return _skipped(title, "fewer than two injections were analysed.")
    found = _flag(inj, "found", False)
    far = _column(inj, "found_far")
    bound = (manifest.get("background") or {}).get("far_bound_hz")
    edges = np.unique(np.quantile(snr[analysed], np.linspace(0, 1, min(10, int(analysed.sum()) // 5 + 2))))
    if edges.size < 2:
        edges = np.array([snr[analysed].min() * 0.99, snr[analysed].max() * 1.01])
    which = np.clip(np.searchsorted(edges, snr, side="right") - 1, 0, edges.size - 2)
    centre = np.sqrt(edges[:-1] * edges[1:])
    fig = Figure(figsize=(7, 4.2), layout="constrained")
    ax = fig.add_subplot()
    curves = [("found", found, "black")]
    if far is not None and bound:
        curves.append(("louder than all background", found & (np.nan_to_num(far, nan=np.inf) <= bound * (1 + 1e-9)),
                       "tab:blue"))
    rows = []
    for label, hit, colour in curves:
        n = np.bincount(which[analysed], minlength=centre.size)
        k = np.bincount(which[analysed], weights=hit[analysed].astype(float), minlength=centre.size)
        eff = np.divide(k, n, out=np.full(centre.size, np.nan), where=n > 0)
        err = np.sqrt(np.maximum(eff * (1 - eff), 0.25 / np.maximum(n, 1)) / np.maximum(n, 1))
        ax.errorbar(centre, eff, yerr=err, fmt="o-", color=colour, ms=4, capsize=2, label=label)
        rows.append((label, k, n))
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(LogFormatter())
    ax.xaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False))
    ax.set_ylim(-0.03, 1.05)
    ax.set_xlabel(quantity)
    ax.set_ylabel("fraction found")
    ax.legend(loc="lower right", fontsize="small")
    header = [f"{quantity} bin"] + [label for label, _, _ in rows]
    table = [[f"{edges[i]:{fmt}}\u2013{edges[i + 1]:{fmt}}"] + [_fraction(int(k[i]), int(n[i])) for _, k, n in rows]
             for i in range(centre.size)]
    caption = (f"Fraction of analysed injections found, per bin of {quantity} (equal-count bins), "
               "with binomial 1\u03c3 errors.")
    return (f"<h3>{_esc(title)}</h3>\n" + _drawn(fig, f"fig-eff-{column}", caption)
            + html_table(header, table, [False] + [True] * len(rows)))


def _fig_localisation(injections: pd.DataFrame | None) -> str:
    """P-P plot of the true directions' credible levels in the skymaps, with the KS test, and the
    localisation figures of merit."""
    title = "Sky localisation"
    inj = _frame(injections)
    level = _column(inj, "credible_level")
    if level is None or not np.isfinite(level).any():
        return _skipped(title, "no found injection has a skymap (no injections, or no sky directions).")
    from gwbatch.coherent.skymap import pp_test

    p = np.sort(level[np.isfinite(level)])
    n = p.size
    ks, pvalue = pp_test(p)
    fig = Figure(figsize=(4.6, 4.4), layout="constrained")
    ax = fig.add_subplot()
    grid = np.linspace(0, 1, 101)
    band = 1.36 / np.sqrt(n)  # 95% Kolmogorov-Smirnov band
    ax.fill_between(grid, np.clip(grid - band, 0, 1), np.clip(grid + band, 0, 1), color="tab:blue", alpha=0.15, lw=0,
                    label="95% KS band")
    ax.plot(grid, grid, "--", color="tab:blue", lw=1)
    ax.step(np.r_[0, p, 1], np.r_[0, np.arange(1, n + 1) / n, 1], where="post", color="black",
            label=f"{n} injections")
    ax.set_xlabel("credible level")
    ax.set_ylabel("fraction of injections within it")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(loc="upper left", fontsize="small")
    rows = [("injections with a skymap", str(n)), ("KS statistic, p-value", f"{ks:.3f}, {pvalue:.3g}")]
    for key, label in (("area90", "median 90% credible area (deg\u00b2)"),
                       ("searched_area", "median searched area (deg\u00b2)"),
                       ("sky_error_deg", "median angular error of the best direction (\u00b0)")):
        values = _column(inj, key)
        if values is not None and np.isfinite(values).any():
            rows.append((label, f"{np.nanmedian(values):.3g}"))
    caption = ("P-P plot: the fraction of found injections whose true direction lies within each credible level "
               "of its skymap; calibrated maps follow the diagonal.")
    return f"<h3>{_esc(title)}</h3>\n" + _drawn(fig, "fig-pp", caption) + _kv_table(rows)


# ----------------------------------------------------------------------------------------------
# top candidates: time series and skymaps; GPU utilisation


def _curve(curve) -> tuple[np.ndarray, np.ndarray] | None:
    """A ``(t, y)`` pair as float arrays of the same length, finite samples only (None if none)."""
    try:
        t, y = (np.asarray(c, dtype=np.float64).ravel() for c in curve)
    except (TypeError, ValueError):
        return None
    if t.size != y.size:
        return None
    ok = np.isfinite(t) & np.isfinite(y)
    return (t[ok], y[ok]) if ok.any() else None


def _fig_series(series: Sequence[dict] | None) -> str:
    """One small panel per top candidate (up to ``MAX_PANELS``): the statistic against time relative to
    the candidate, one line per detector, with a marker at zero."""
    title = "SNR / \u03c1 time series around the top candidates"
    if series is None:
        return _skipped(title, "no time series were given to the report (this search does not record them).")
    entries = [s for s in series if isinstance(s, dict)]
    if not entries:
        return _skipped(title, "no candidate has a time series.")
    shown = entries[:MAX_PANELS]
    ifos: list[str] = []
    for entry in shown:
        ifos += [str(k) for k in (entry.get("curves") or {}) if str(k) not in ifos]
    colours = {ifo: f"C{k % 10}" for k, ifo in enumerate(ifos)}
    ncols = min(len(shown), 3)
    nrows = -(-len(shown) // ncols)
    fig = Figure(figsize=(3.5 * ncols + 0.4, 2.7 * nrows + 0.5), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[len(shown):]:
        ax.set_visible(False)
    for ax, entry in zip(axes, shown):
        drawn = 0
        for ifo, curve in (entry.get("curves") or {}).items():
            ty = _curve(curve)
            if ty is not None:
                ax.plot(*ty, color=colours[str(ifo)], lw=1)
                drawn += 1
        ax.axvline(0.0, color="0.3", ls="--", lw=0.8)
        ax.set_title(f"{_text(entry.get('label'))}  GPS {fmt_gps(entry.get('gps_time'))}", parse_math=False,
                     fontsize="small")
        ax.set_xlabel("time from the candidate (s)")
        ax.set_ylabel(_text(entry.get("statistic") or "SNR"), parse_math=False)
        if not drawn:
            ax.text(0.5, 0.5, "no finite samples", ha="center", va="center", transform=ax.transAxes)
    if ifos:
        handles = [Line2D([], [], color=colours[ifo], lw=1.5) for ifo in ifos]
        fig.legend(handles, ifos, loc="outside lower center", ncols=len(ifos), fontsize="small")
    caption = ("The search's statistic against time relative to each top candidate (most significant first), one "
               "line per detector; the dashed line marks the candidate's time.")
    if len(entries) > len(shown):
        caption += f" The first {len(shown)} of {len(entries)} are drawn."
    return f"<h3>{_esc(title)}</h3>\n" + _drawn(fig, "fig-series", caption)


def _healpix_order(npix: int) -> int | None:
    """The order of a full HEALPix map of ``npix`` pixels (12 * 4**order), None if it is not one."""
    if npix < 12 or npix % 12:
        return None
    nside = math.isqrt(npix // 12)
    if nside * nside != npix // 12 or nside & (nside - 1):
        return None
    return nside.bit_length() - 1


def _levels(prob: np.ndarray) -> np.ndarray:
    """Per pixel, the probability in the pixels strictly more probable: the pixel lies in every credible
    region of a higher level (ties share a level, so a uniform patch is all in or all out)."""
    order = np.argsort(-prob, kind="stable")
    ranked = prob[order]
    before = np.cumsum(ranked) - ranked
    first = np.searchsorted(-ranked, -ranked, side="left")
    levels = np.empty_like(prob)
    levels[order] = before[first]
    return levels


def _skymap_on_grid(prob: np.ndarray, order: int, nx: int = SKY_GRID[0], ny: int = SKY_GRID[1]):
    """Probability per deg² and credible level on a (ny, nx) lon/lat grid of Mollweide x (-pi..pi, RA = pi - x,
    so that RA increases to the left) and declination.  Returns the cell edges, centres and the two grids."""
    import astropy.units as u
    from astropy_healpix import HEALPix

    x_edges = np.linspace(-np.pi, np.pi, nx + 1)
    y_edges = np.linspace(-np.pi / 2, np.pi / 2, ny + 1)
    x, y = 0.5 * (x_edges[1:] + x_edges[:-1]), 0.5 * (y_edges[1:] + y_edges[:-1])
    ra = np.mod(np.pi - x, 2 * np.pi)
    hp = HEALPix(nside=1 << order, order="nested")
    pix = np.asarray(hp.lonlat_to_healpix(np.broadcast_to(ra, (ny, nx)) * u.rad,
                                          np.broadcast_to(y[:, None], (ny, nx)) * u.rad))
    density = prob / (FULL_SKY_DEG2 / prob.size)
    return x_edges, y_edges, x, y, density[pix], _levels(prob)[pix]


def _sky_x(ra: float) -> float:
    """Mollweide x of a right ascension (radians): pi - RA wrapped into [-pi, pi), so that RA increases to
    the left with 180 deg in the centre."""
    return float(np.mod(2 * np.pi - ra, 2 * np.pi) - np.pi)


def _fmt_sky_area(area: float) -> str:
    return f"{area:.1f}" if area < 10 else f"{area:.0f}"


def _skymap_panel(ax, entry: dict, prob: np.ndarray, order: int, k: int) -> tuple[float, float]:
    """Draw one map; returns its 50 % and 90 % credible areas (deg²)."""
    from gwbatch.coherent.skymap import credible_area

    x_edges, y_edges, x, y, density, levels = _skymap_on_grid(prob, order)
    mesh = ax.pcolormesh(x_edges, y_edges, density, cmap="OrRd", shading="flat", rasterized=True)
    # Contours are traced on the grid already projected (so the geographic transform does not interpolate
    # every segment of them, which would make the SVG megabytes long).
    projected = ax.transProjection.transform(np.column_stack([np.broadcast_to(x, levels.shape).ravel(),
                                                              np.broadcast_to(y[:, None], levels.shape).ravel()]))
    px, py = (projected[:, i].reshape(levels.shape) for i in (0, 1))
    for level, style in ((0.5, "-"), (0.9, "--")):
        contour = ax.contour(px, py, levels, levels=[level], colors="tab:blue", linewidths=1.0, linestyles=style,
                             transform=ax.transAffine + ax.transAxes)
        contour.set_gid(f"sky{k}-c{round(level * 100)}")
    ra, dec = entry.get("ra"), entry.get("dec")
    if not (_missing(ra) or _missing(dec)) and math.isfinite(float(ra)) and math.isfinite(float(dec)):
        (best,) = ax.plot(_sky_x(float(ra)), float(dec), "*", ms=11, color="black", mec="white", mew=0.6)
        best.set_gid(f"sky{k}-best")
    a50, a90 = credible_area(prob, 0.5), credible_area(prob, 0.9)
    ax.set_title(f"{_text(entry.get('label'))}  GPS {fmt_gps(entry.get('gps_time'))}\n"
                 f"90% area {_fmt_sky_area(a90)} deg\u00b2", parse_math=False, fontsize="small")
    ticks = np.radians([-120, -60, 0, 60, 120])
    ax.set_xticks(ticks, [f"{180 - d:.0f}\u00b0" for d in np.degrees(ticks)], fontsize="x-small")
    ax.set_yticks(np.radians([-60, -30, 0, 30, 60]), [f"{d}\u00b0" for d in (-60, -30, 0, 30, 60)],
                  fontsize="x-small")
    ax.grid(True, lw=0.3, color="0.6")
    ax.set_xlabel("right ascension", fontsize="small")
    ax.set_ylabel("declination", fontsize="small")
    bar = ax.figure.colorbar(mesh, ax=ax, orientation="horizontal", shrink=0.6, pad=0.08, aspect=30)
    bar.set_label("probability per deg\u00b2", fontsize="x-small")
    bar.ax.tick_params(labelsize="x-small")
    return a50, a90


def _fig_skymaps(skymaps: Sequence[dict] | None) -> str:
    """Mollweide skymaps of the top candidates (up to ``MAX_PANELS``), with the 50 % and 90 % credible
    contours and the best direction, and a table of their areas."""
    title = "Skymaps of the top candidates"
    if skymaps is None:
        return _skipped(title, "no skymaps were given to the report (this search makes none, or no candidate "
                               "was ranked high enough).")
    entries = [s for s in skymaps if isinstance(s, dict)]
    if not entries:
        return _skipped(title, "no candidate has a skymap.")
    maps, rows = [], []
    for entry in entries[:MAX_PANELS]:
        prob = np.asarray(entry.get("prob") if entry.get("prob") is not None else [], dtype=np.float64).ravel()
        prob = np.where(np.isfinite(prob) & (prob > 0), prob, 0.0)
        order = _healpix_order(prob.size)
        reason = ("not a full HEALPix map (12\u00b74^order pixels)" if order is None
                  else "the map holds no probability" if prob.sum() <= 0 else None)
        row = [_text(entry.get("label")), fmt_gps(entry.get("gps_time")),
               f"{prob.size} (order {order})" if order is not None else str(prob.size)]
        if reason:
            rows.append(row + [f"not drawn: {reason}", DASH, DASH, DASH])
        else:
            maps.append((entry, prob / prob.sum(), order, row))
    if not maps:
        return (f"<h3>{_esc(title)}</h3>\n" + _note("Not drawn: no map could be read.")
                + html_table(["candidate", "GPS time", "pixels", "50% area (deg\u00b2)", "90% area (deg\u00b2)",
                              "RA (\u00b0)", "Dec (\u00b0)"], rows))
    ncols = min(len(maps), 2)
    nrows = -(-len(maps) // ncols)
    fig = Figure(figsize=(5.2 * ncols, 3.6 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, subplot_kw={"projection": "mollweide"}).ravel()
    for ax in axes[len(maps):]:
        ax.set_visible(False)
    drawn = []
    for k, (ax, (entry, prob, order, row)) in enumerate(zip(axes, maps)):
        a50, a90 = _skymap_panel(ax, entry, prob, order, k)
        drawn.append(row + [_fmt_sky_area(a50), _fmt_sky_area(a90), _fmt_degrees(entry.get("ra")),
                            _fmt_degrees(entry.get("dec"))])
    caption = ("Probability per deg\u00b2 in equatorial coordinates (Mollweide projection, right ascension increasing "
               "to the left, 180\u00b0 in the centre), with the 50% (solid) and 90% (dashed) credible contours and "
               "the best direction (star).")
    if len(entries) > MAX_PANELS:
        caption += f" The first {MAX_PANELS} of {len(entries)} are drawn."
    table = html_table(["candidate", "GPS time", "pixels", "50% area (deg\u00b2)", "90% area (deg\u00b2)", "RA (\u00b0)",
                        "Dec (\u00b0)"], drawn + rows, [False, True, True, True, True, True, True])
    return f"<h3>{_esc(title)}</h3>\n" + _drawn(fig, "fig-skymaps", caption) + table


def _fig_gpu(manifest: dict) -> str:
    """``gpu_utilisation``: each GPU's utilisation (%) and memory used (GiB) against time since the start."""
    title = "GPU utilisation over the run"
    gpu = manifest.get("gpu_utilisation")
    if not isinstance(gpu, dict):
        return _skipped(title, "the run recorded no GPU utilisation (a CPU run, or a manifest from before it "
                               "was sampled).")
    devices = _gpu_devices(manifest)
    if not devices:
        return _skipped(title, "no GPU was sampled during the run.")
    fig = Figure(figsize=(9, 5), layout="constrained")
    ax_u, ax_m = fig.subplots(2, 1, sharex=True)
    rows = []
    for k, device in enumerate(devices):
        colour, label = f"C{k % 10}", _gpu_label(device)
        t, u, mem = _samples(device, "t"), _samples(device, "utilisation"), _samples(device, "memory_used") / 2**30
        if t.size != u.size:
            t = np.arange(u.size) * float(gpu.get("interval_s") or 1.0)
        ax_u.plot(t, u, color=colour, lw=1, label=label)
        if mem.size == t.size:
            ax_m.plot(t, mem, color=colour, lw=1, label=label)
        peak = np.nanmax(mem) * 2**30 if mem.size and np.isfinite(mem).any() else None
        rows.append([label, str(u.size), _num(_gpu_mean(device), ".1f"), _fmt_bytes(peak)])
    ax_u.set_ylim(-2, 102)
    ax_u.set_ylabel("utilisation (%)")
    ax_u.legend(loc="upper right", fontsize="small")
    ax_m.set_ylim(bottom=0)
    ax_m.set_ylabel("memory used (GiB)")
    ax_m.set_xlabel("time since the start of the run (s)")
    interval = gpu.get("interval_s")
    caption = ("Utilisation of each GPU (top) and the memory used on it (bottom)"
               + (f", sampled every {_num(interval, 'g')} s" if not _missing(interval) else "")
               + (f", during {_text(gpu['sampled_parts'])} invocations of the run." if gpu.get("sampled_parts") else "."))
    table = html_table(["GPU", "samples", "mean utilisation (%)", "peak memory used"], rows,
                       [False, True, True, True])
    return f"<h3>{_esc(title)}</h3>\n" + _drawn(fig, "fig-gpu", caption) + table


def _fraction(num: int, den: int) -> str:
    return f"{num}/{den} = {num / den:.3f}" if den else DASH


def _recovery_tables(inj: pd.DataFrame, ifos: list[str]) -> str:
    found = _flag(inj, "found", False)
    analysed = _flag(inj, "analysed", True)
    snr = _column(inj, "snr")
    loud = analysed & (snr >= RECOVERY_SNR) if snr is not None else np.zeros(len(inj), bool)
    overall = _kv_table([
        ("injections", str(len(inj))),
        ("analysed", str(int(analysed.sum()))),
        ("found", str(int((found & analysed).sum()))),
        (f"found among analysed with injected SNR \u2265 {RECOVERY_SNR:g}",
         _fraction(int((found & loud).sum()), int(loud.sum()))),
    ])
    rows = []
    for ifo in ifos:
        x = _column(inj, f"injected_snr_{ifo}")
        y, _ = _recovered_column(inj, ifo)
        dt = _column(inj, f"dt_{ifo}")
        ok = found & np.isfinite(x) & (x > 0) & (np.isfinite(y) if y is not None else False)
        ratio = y[ok] / x[ok] if ok.any() else np.zeros(0)
        within = np.abs(ratio - 1) <= RECOVERY_TOLERANCE
        adt = np.abs(dt[found & np.isfinite(dt)]) * 1e3 if dt is not None else np.zeros(0)
        rows.append([ifo, str(int(ok.sum())), _num(np.median(ratio), ".3f") if ratio.size else DASH,
                     _num(within.mean(), ".3f") if ratio.size else DASH,
                     _num(np.median(adt), ".3g") if adt.size else DASH])
    header = ["detector", "found (plotted)", "median recovered / injected",
              f"fraction within \u00b1{RECOVERY_TOLERANCE:.0%}", "median |dt| (ms)"]
    per_ifo = html_table(header, rows, [False, True, True, True, True]) if rows else ""
    return overall + "\n" + per_ifo


def _figures(manifest: dict, candidates: pd.DataFrame, background: pd.DataFrame,
             injections: pd.DataFrame | None, ifos: list[str], series: Sequence[dict] | None,
             skymaps: Sequence[dict] | None) -> str:
    body = "\n".join([
        _fig_candidates_time(manifest, candidates, injections),
        _fig_cumulative_ifar(manifest, candidates, background),
        _fig_ranking(manifest, candidates, background),
        _fig_series(series),
        _fig_skymaps(skymaps),
        _fig_injections(injections, ifos),
        _fig_efficiency(manifest, injections),
        _fig_efficiency(manifest, injections, "hrss", "injected hrss (strain / \u221aHz)", ".2e"),
        _fig_localisation(injections),
        _fig_gpu(manifest),
    ])
    return _section("Figures", body, "figures")


# ----------------------------------------------------------------------------------------------
# chunks, gates, footer


def _chunks_section(manifest: dict, ifos: list[str]) -> str:
    chunks = manifest.get("chunks") or []
    if not chunks:
        return _section("Chunks", _note("No chunk records in the manifest."), "chunks")
    keys = list(ifos)
    for c in chunks:
        keys += [k for k in (c.get("triggers") or {}) if k not in keys]
    header = ["index", "GPS start", "GPS stop", "status", "device", "worker", "seconds"]
    header += [f"triggers {k}" for k in keys]
    rows = [
        [_fmt_int(c.get("index")), fmt_gps(c.get("gps_start")), fmt_gps(c.get("gps_stop")), _text(c.get("status")),
         _text(c.get("device")), _text(c.get("worker")), _num(c.get("seconds"), ".2f")]
        + [_fmt_int((c.get("triggers") or {}).get(k)) for k in keys]
        for c in chunks
    ]
    numeric = [True, True, True, False, False, False, True] + [True] * len(keys)
    return _section("Chunks", f"<p>{len(chunks)} chunk(s).</p>\n" + html_table(header, rows, numeric), "chunks")


def _gates_section(gates: pd.DataFrame | None) -> str:
    gates = _frame(gates)
    if len(gates) == 0:
        return _section("Gates", _note("No gates: no whitened sample exceeded the gating threshold."), "gates")
    top = gates.head(MAX_GATES)
    rows = [[_text(r.get("ifo")), _fmt_int(r.get("sample")), fmt_gps(r.get("gps_time")), _num(r.get("peak"), ".2f")]
            for _, r in top.iterrows()]
    shown = f"; the first {len(top)} are listed" if len(gates) > len(top) else ""
    intro = f"<p>{len(gates)} gate(s){shown}.</p>\n"
    return _section("Gates", intro + html_table(["detector", "sample", "GPS time", "peak (\u03c3)"], rows,
                                                [False, True, True, True]), "gates")


def _footer(manifest: dict) -> str:
    convention = (manifest.get("background") or {}).get("far_convention") or "not recorded"
    version = manifest.get("gwbatch_version") or "unknown"
    return (f"<footer>\n<p><strong>FAR convention:</strong> {_esc(convention)}</p>\n"
            f"<p>Written by gwbatch {_esc(version)}.</p>\n</footer>")


# ----------------------------------------------------------------------------------------------
# public API


def render_report(*, manifest: dict, candidates: pd.DataFrame, background: pd.DataFrame,
                  injections: pd.DataFrame | None, gates: pd.DataFrame, series: Sequence[dict] | None = None,
                  skymaps: Sequence[dict] | None = None) -> str:
    """The report as an HTML string (see the module docstring for its content).

    ``series``: one dict per top candidate, most significant first: ``label``, ``gps_time``, ``statistic``
    (its name, e.g. "SNR" or "ρ") and ``curves``, ``{ifo: (t, y)}`` with ``t`` in seconds relative to
    ``gps_time``.  ``skymaps``: one dict per top candidate: ``label``, ``gps_time``, ``prob`` (nested HEALPix
    probability per pixel) and ``ra``, ``dec`` (radians, the best direction, or None).  Up to
    ``MAX_PANELS`` of each are drawn; None says that the run gave none.
    """
    manifest = manifest or {}
    candidates, background = _frame(candidates), _frame(background)
    ifos = _ifos(manifest, candidates, background)
    name = (manifest.get("campaign") or {}).get("name") or "gwbatch campaign"
    body = "\n".join(part for part in [
        _title(manifest),
        _members_section(manifest),
        _summary(manifest),
        _candidates_section(candidates, ifos),
        _figures(manifest, candidates, background, injections, ifos, series, skymaps),
        _chunks_section(manifest, ifos),
        _gates_section(gates),
        _provenance_section(manifest),
        _footer(manifest),
    ] if part)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{_esc(name)} \u2013 gwbatch report</title>\n<style>{CSS}</style>\n</head>\n"
            f"<body>\n{body}\n</body>\n</html>\n")


def write_report(path, *, manifest: dict, candidates: pd.DataFrame, background: pd.DataFrame,
                 injections: pd.DataFrame | None, gates: pd.DataFrame, series: Sequence[dict] | None = None,
                 skymaps: Sequence[dict] | None = None) -> pathlib.Path:
    """Write the self-contained campaign report to ``path`` atomically and return its path
    (``series`` and ``skymaps``: see :func:`render_report`)."""
    path = pathlib.Path(path)
    text = render_report(manifest=manifest, candidates=candidates, background=background,
                         injections=injections, gates=gates, series=series, skymaps=skymaps)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
