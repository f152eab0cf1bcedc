"""The campaign report page: one self-contained ``report.html``, laid out for analysts.

The page opens with a title line and a sticky navigation bar, then, in order: the most significant
zero-lag candidates (:mod:`.tables`: UTC, FAR and IFAR with bounds marked, injection flags, links to each
candidate's skymap FITS and detail); for a campaign that runs several searches, one row per search
with a link to its own report; the top candidates in detail (:mod:`.details`: time series, skymaps,
Q transforms, burst time-frequency maps); the significance and injection figures (:mod:`.figures`);
(for dispersed pulses, the candidates' dedispersed waterfalls and DM-time bow-ties, and every candidate
over DM and time); each detector's ASD, its analysed segments, vetoes and gates, and its trigger SNR histogram; the
chunks; the gates; the configuration and timing (:mod:`.summary`, with the GPU figure); the provenance;
and the FAR convention.

Nothing is loaded from elsewhere: the CSS is inline and the figures are inline SVG.  Every string taken
from the inputs is HTML-escaped (:mod:`.markup`), and manifests from before a key existed still render.
The file is written atomically.
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Sequence

import pandas as pd

from gwbatch.io.atomic import write_atomically
from gwbatch.report.details import detail_anchors, details_section
from gwbatch.report.figures import figures_section
from gwbatch.report.figures.asd import fig_asd
from gwbatch.report.figures.common import guarded
from gwbatch.report.figures.gpu import fig_gpu
from gwbatch.report.figures.timeline import fig_timeline
from gwbatch.report.figures.triggers import fig_snr_histograms
from gwbatch.report.format import missing, text
from gwbatch.report.inputs import detectors, frame
from gwbatch.report.markup import esc, section
from gwbatch.report.summary import provenance_section, summary_section
from gwbatch.report.tables import (
    candidates_section,
    chunks_section,
    gates_section,
    members_section,
)

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto 2em; max-width: 1240px;
       padding: 0 1em; color: #222; line-height: 1.4; }
header.title { display: flex; flex-wrap: wrap; align-items: baseline; gap: 0 1em; padding-top: 0.6em; }
header.title h1 { font-size: 1.4em; margin: 0; } header.title .meta { margin: 0; font-size: 0.9em; }
nav { position: sticky; top: 0; z-index: 10; background: #fff; border-bottom: 1px solid #ccc; padding: 0.35em 0;
      font-size: 0.9em; } nav a { margin-right: 1.1em; white-space: nowrap; }
section, .cand, figure { scroll-margin-top: 2.6em; }
h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 1.6em; }
section#candidates h2 { margin-top: 0.6em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.2em 0.6em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; } td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
div.wide { overflow-x: auto; } div.wide table { font-size: 0.82em; } div.wide td { white-space: nowrap; }
span.flag { color: #8a3b00; font-weight: 600; }
table.kv th { width: 16em; font-weight: normal; background: #fafafa; }
.cand { border-left: 3px solid #9ab; padding-left: 0.8em; margin: 1.5em 0; } .cand table.kv th { width: 8em; }
code, pre { background: #f6f6f6; padding: 0.1em 0.3em; }
pre { padding: 0.5em; overflow-x: auto; white-space: pre-wrap; }
figure { margin: 1em 0 2em; } figcaption { font-size: 0.9em; color: #444; margin-top: 0.3em; }
figure svg { max-width: 100%; height: auto; }
p.note { color: #666; font-style: italic; } .meta { color: #555; }
footer { margin-top: 3em; border-top: 1px solid #ccc; padding-top: 0.5em; font-size: 0.85em; color: #555; }
"""

#: The navigation bar's label of each section (by id), in the page's order.
NAV = {"candidates": "Candidates", "searches": "Searches", "details": "Top candidates", "figures": "Figures",
       "asd": "ASD", "segments": "Segments", "triggers": "Triggers", "chunks": "Chunks", "gates": "Gates",
       "summary": "Configuration and timing", "provenance": "Provenance"}


def render_report(*, manifest: dict, candidates: pd.DataFrame, background: pd.DataFrame,
                  injections: pd.DataFrame | None, gates: pd.DataFrame, series: Sequence[dict] | None = None,
                  skymaps: Sequence[dict] | None = None, searches: dict | None = None, psds: dict | None = None,
                  segments: dict | None = None, triggers: dict | None = None,
                  qscans: Sequence[dict] | None = None, tfmaps: Sequence[dict] | None = None,
                  waterfalls: Sequence[dict] | None = None, bowties: Sequence[dict] | None = None) -> str:
    """The report as an HTML string (see the module docstring for its content).

    ``series``: one dict per top candidate, most significant first: ``label``, ``gps_time``, ``statistic``
    (its name, e.g. "SNR" or "ρ") and ``curves``, ``{ifo: (t, y)}`` with ``t`` in seconds relative to
    ``gps_time``.  ``skymaps``: one dict per top candidate: ``label``, ``gps_time``, ``prob`` (nested HEALPix
    probability per pixel) and ``ra``, ``dec`` (radians, the best direction, or None).  Up to
    ``figures.common.MAX_PANELS`` of each are drawn; None says that the run gave none.  ``searches``:
    for a campaign of several searches, each one's injection table and zero-lag livetime (s), for
    found/missed and VT per search and for their union.  ``psds``: per detector, the PSDs the chunks
    measured (:class:`gwbatch.io.psds.ChunkPSDs`).  ``segments``: ``analysed`` and ``vetoed``, per detector
    GPS ``[start, stop)`` intervals, and ``span`` (GPS start, stop).  ``triggers``: ``statistic`` (its name)
    and ``values``, per detector the final triggers' SNRs.  ``qscans``: per top candidate ``label``,
    ``gps_time`` and ``scans``, per detector a :class:`gwbatch.report.qtransform.QScan` with times from the
    candidate.  ``tfmaps``: per burst candidate ``label``, ``gps_time``, ``resolution`` (Hz), ``box``
    (time from the candidate and frequency extent: t0, t1, f0, f1) and ``maps``, per detector
    ``(times, frequencies, energy (F, T))``.  ``waterfalls``: per dispersed-pulse candidate ``label``,
    ``gps_time``, ``beam``, ``dm``, ``times`` (s from the candidate, bin centres), ``frequencies`` (MHz,
    sub-band centres, any order), ``power`` (``(n_freq, n_time)``, the conditioned spectra shifted by the
    candidate's DM delays and summed into bins) and ``profile``, ``(times, values)``: the dedispersed sum
    over channels at full time resolution in units of its noise σ.  ``bowties``: per dispersed-pulse
    candidate ``label``, ``gps_time``, ``beam``, ``times`` (s), ``dms`` (the DM trials around the
    candidate's) and ``snr`` (``(n_dm, n_time)``, boxcar S/N at the candidate's width).  The candidates'
    DM-time figures are drawn from the candidate table itself, when it has ``dm`` and ``width`` columns.
    """
    manifest = manifest or {}
    candidates, background = frame(candidates), frame(background)
    ifos = detectors(manifest, candidates, background)
    anchors = detail_anchors(candidates, series, skymaps, qscans, tfmaps, waterfalls, bowties)
    f_low, f_high = band(manifest)
    rate = sample_rate(manifest)
    sections = [
        candidates_section(candidates, ifos, injections, anchors, rate),
        members_section(manifest),
        details_section(candidates, anchors, series, skymaps, qscans, tfmaps, waterfalls, bowties, rate)
        if len(candidates) or any(x is not None for x in (series, skymaps, qscans, tfmaps, waterfalls, bowties))
        else "",
        figures_section(manifest, candidates, background, injections, ifos, searches),
        section("Detector noise", guarded("Amplitude spectral density", fig_asd, psds, f_low, f_high),
                "asd") if psds is not None or not manifest.get("members") else "",
        section("Segments and vetoes", guarded("Analysed segments, vetoes and gates", fig_timeline, segments, gates),
                "segments") if segments is not None or not manifest.get("members") else "",
        section("Single-detector triggers", guarded("Single-detector trigger SNR", fig_snr_histograms, triggers),
                "triggers") if triggers is not None or not manifest.get("members") else "",
        chunks_section(manifest, ifos),
        gates_section(gates),
        summary_section(manifest, _configuration(manifest), guarded("GPU utilisation over the run", fig_gpu, manifest)),
        provenance_section(manifest),
    ]
    sections = [part for part in sections if part]
    body = "\n".join([_title(manifest), _nav(sections), *sections, _footer(manifest)])
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{esc(_name(manifest))} \u2013 gwbatch report</title>\n<style>{CSS}</style>\n</head>\n"
            f"<body>\n{body}\n</body>\n</html>\n")


def write_report(path, *, manifest: dict, candidates: pd.DataFrame, background: pd.DataFrame,
                 injections: pd.DataFrame | None, gates: pd.DataFrame, **figures) -> pathlib.Path:
    """Write the self-contained campaign report to ``path`` atomically and return its path (``figures``:
    ``series``, ``skymaps``, ``searches``, ``psds``, ``segments``, ``triggers``, ``qscans``, ``tfmaps``,
    ``waterfalls``, ``bowties``; see :func:`render_report`)."""
    path = pathlib.Path(path)
    page = render_report(manifest=manifest, candidates=candidates, background=background,
                         injections=injections, gates=gates, **figures)
    return write_atomically(path, lambda fh: fh.write(page.encode("utf-8")))


def band(manifest: dict) -> tuple[float, float | None]:
    """The search's band for the ASD: the search's own ``f_low`` / ``f_high`` where it has them, else the
    conditioning's (``f_low`` 10 Hz when neither says)."""
    campaign = manifest.get("campaign") or {}
    search, cond = campaign.get("search") or {}, campaign.get("conditioning") or {}
    low = search.get("f_low") if not missing(search.get("f_low")) else cond.get("f_low")
    high = search.get("f_high") if not missing(search.get("f_high")) else cond.get("f_high")
    try:
        return float(low) if not missing(low) else 10.0, float(high) if not missing(high) else None
    except (TypeError, ValueError):
        return 10.0, None


def sample_rate(manifest: dict) -> float | None:
    """The store's sample rate (Hz), None where the manifest does not say (a campaign of several searches)."""
    try:
        rate = float((manifest.get("store") or {}).get("sample_rate"))
    except (TypeError, ValueError):
        return None
    return rate if rate > 0 and rate != float("inf") else None


def _name(manifest: dict) -> str:
    return (manifest.get("campaign") or {}).get("name") or "gwbatch campaign"


def _title(manifest: dict) -> str:
    """One line: the campaign's name, status, creation time and gwbatch version."""
    meta = [
        ("status", text(manifest.get("status"))),
        ("created (UTC)", text(manifest.get("created_utc"))),
        ("gwbatch", text(manifest.get("gwbatch_version"))),
    ]
    items = " &middot; ".join(f"{esc(k)}: <strong>{esc(v)}</strong>" for k, v in meta)
    return f'<header class="title">\n<h1>{esc(_name(manifest))}</h1>\n<p class="meta">{items}</p>\n</header>'


def _nav(sections: list[str]) -> str:
    """Links to each section on the page (by its id), in order."""
    ids = [m.group(1) for part in sections for m in [re.match(r'<section id="([^"]+)"', part)] if m]
    links = "".join(f'<a href="#{esc(i)}">{esc(NAV.get(i, i))}</a>' for i in ids)
    return f'<nav aria-label="sections">{links}</nav>'


def _configuration(manifest: dict) -> str:
    """The campaign's description and the command that ran it."""
    campaign = manifest.get("campaign") or {}
    parts = []
    if campaign.get("description"):
        parts.append(f"<p>{esc(campaign['description'])}</p>")
    if manifest.get("command"):
        parts.append(f"<pre><code>{esc(manifest['command'])}</code></pre>")
    return "\n".join(parts)


def _footer(manifest: dict) -> str:
    """The FAR convention and the gwbatch version."""
    convention = (manifest.get("background") or {}).get("far_convention") or "not recorded"
    version = manifest.get("gwbatch_version") or "unknown"
    return (f"<footer>\n<p><strong>FAR convention:</strong> {esc(convention)}</p>\n"
            f"<p>Written by gwbatch {esc(version)}.</p>\n</footer>")
