"""The campaign report: one self-contained ``report.html``.

The page shows, in order: the campaign (name, description, status, version, command); a summary of
the search settings, the data, the plan, the execution, the livetime and the counts; the most
significant zero-lag candidates; figures (candidates over time, cumulative IFAR against the
background expectation with Poisson bands, the cumulative rate of the ranking statistic, injection
recovery with its table, detection efficiency against injected SNR, and for searches with sky
directions the P-P plot of the skymaps); the chunks; the gates; and the FAR convention.

Nothing is loaded from elsewhere: the CSS is inline and the figures are inline SVG drawn with
:class:`matplotlib.figure.Figure` (no pyplot, so no global figure state).  Every string taken
from the inputs is HTML-escaped.  A figure that cannot be drawn (no candidates, no background,
no injections) is replaced by a sentence saying why.  The file is written atomically.
"""

from __future__ import annotations

import html
import io
import math
import os
import pathlib
import re
from collections.abc import Iterable, Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter
from matplotlib.transforms import blended_transform_factory
from scipy.stats import norm, poisson

from gwbatch.background.far import SECONDS_PER_YEAR

MAX_CANDIDATES = 25
MAX_GATES = 100
RECOVERY_SNR = 8.0  # injected network SNR above which the found fraction is quoted
RECOVERY_TOLERANCE = 0.15  # the +-15 % band of recovered / injected SNR
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


def html_table(header: Sequence[str], rows: Iterable[Sequence], numeric: Sequence[bool] | None = None) -> str:
    """A table with a header row; every cell is escaped; ``numeric`` columns are right-aligned."""
    numeric = list(numeric) if numeric is not None else [False] * len(header)
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{_esc(c)}</td>' if (i < len(numeric) and numeric[i]) else f"<td>{_esc(c)}</td>"
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


def _figure(svg: str, caption: str) -> str:
    return f"<figure>\n{svg}\n<figcaption>{_esc(caption)}</figcaption>\n</figure>"


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
    ]


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
    body = "\n".join(f"<h3>{_esc(title)}</h3>\n{_kv_table(rows)}" for title, rows in groups if rows)
    return _section("Summary", body, "summary")


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
    return f"<h3>{_esc(title)}</h3>\n" + _figure(fig_to_svg(fig, "fig-time"), caption)


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
    x = np.sort(ifar)
    n = np.arange(x.size, 0, -1)
    grid = np.geomspace(x.min() / 3, x.max() * 3, 300)
    mu = t_fg / (grid * SECONDS_PER_YEAR)
    floor = 0.1
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for k, lo, hi in reversed(_poisson_bands(mu)):
        ax.fill_between(grid, np.maximum(lo, floor / 2), np.maximum(hi, floor / 2), step="mid",
                        color="tab:blue", alpha=0.12 + 0.08 * (3 - k), lw=0, label=f"{k}\u03c3")
    ax.plot(grid, mu, "--", color="tab:blue", label="background expectation")
    # N(>= x) holds n[i] on (x[i-1], x[i]]; start at the grid's left edge and drop below the axis after the last
    ax.step(np.r_[grid[0], x, x[-1]], np.r_[n[0], n, floor / 2], where="pre", color="black", lw=1.5,
            label="zero-lag candidates")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(grid[0], grid[-1])
    ax.set_ylim(floor, max(n.max(), mu.max()) * 2)
    ax.set_xlabel("IFAR (years)")
    ax.set_ylabel("number of candidates with IFAR \u2265 x")
    ax.legend(loc="upper right", fontsize="small")
    caption = (f"Number of zero-lag candidates with IFAR at least x, against the background expectation "
               f"T_fg / x (T_fg = {t_fg:.6g} s) with Poisson 1/2/3\u03c3 bands.")
    if n_clipped:
        caption += f" {n_clipped} infinite IFAR(s) drawn at {x.max():.3g} years."
    return f"<h3>{_esc(title)}</h3>\n" + _figure(fig_to_svg(fig, "fig-ifar"), caption)


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
    return f"<h3>{_esc(title)}</h3>\n" + _figure(fig_to_svg(fig, "fig-rank"), caption)


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
                             f"\u00b1{RECOVERY_TOLERANCE:.0%} band."))
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
    return (f"<h3>{_esc(title)}</h3>\n" + _figure(fig_to_svg(fig, f"fig-eff-{column}"), caption)
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
    return f"<h3>{_esc(title)}</h3>\n" + _figure(fig_to_svg(fig, "fig-pp"), caption) + _kv_table(rows)


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
             injections: pd.DataFrame | None, ifos: list[str]) -> str:
    body = "\n".join([
        _fig_candidates_time(manifest, candidates, injections),
        _fig_cumulative_ifar(manifest, candidates, background),
        _fig_ranking(manifest, candidates, background),
        _fig_injections(injections, ifos),
        _fig_efficiency(manifest, injections),
        _fig_efficiency(manifest, injections, "hrss", "injected hrss (strain / \u221aHz)", ".2e"),
        _fig_localisation(injections),
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
                  injections: pd.DataFrame | None, gates: pd.DataFrame) -> str:
    """The report as an HTML string (see the module docstring for its content)."""
    manifest = manifest or {}
    candidates, background = _frame(candidates), _frame(background)
    ifos = _ifos(manifest, candidates, background)
    name = (manifest.get("campaign") or {}).get("name") or "gwbatch campaign"
    body = "\n".join([
        _title(manifest),
        _summary(manifest),
        _candidates_section(candidates, ifos),
        _figures(manifest, candidates, background, injections, ifos),
        _chunks_section(manifest, ifos),
        _gates_section(gates),
        _footer(manifest),
    ])
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{_esc(name)} \u2013 gwbatch report</title>\n<style>{CSS}</style>\n</head>\n"
            f"<body>\n{body}\n</body>\n</html>\n")


def write_report(path, *, manifest: dict, candidates: pd.DataFrame, background: pd.DataFrame,
                 injections: pd.DataFrame | None, gates: pd.DataFrame) -> pathlib.Path:
    """Write the self-contained campaign report to ``path`` atomically and return its path."""
    path = pathlib.Path(path)
    text = render_report(manifest=manifest, candidates=candidates, background=background,
                         injections=injections, gates=gates)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
