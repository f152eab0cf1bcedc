"""The campaign report page: one self-contained ``report.html``.

The page shows, in order: the campaign (name, description, status, version, command); for a campaign
that runs several searches, one row per search with a link to its own report; the summary
(:mod:`.summary`); the most significant zero-lag candidates (:mod:`.tables`); the figures
(:mod:`.figures`); the chunks; the gates; the provenance; and the FAR convention.

Nothing is loaded from elsewhere: the CSS is inline and the figures are inline SVG.  Every string taken
from the inputs is HTML-escaped (:mod:`.markup`), and manifests from before a key existed still render.
The file is written atomically.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence

import pandas as pd

from gwbatch.report.figures import figures_section
from gwbatch.report.format import text
from gwbatch.report.inputs import detectors, frame
from gwbatch.report.markup import esc
from gwbatch.report.summary import provenance_section, summary_section
from gwbatch.report.tables import (
    candidates_section,
    chunks_section,
    gates_section,
    members_section,
)

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1100px;
       padding: 0 1em; color: #222; line-height: 1.4; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.2em 0.6em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; } td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.kv th { width: 16em; font-weight: normal; background: #fafafa; }
code, pre { background: #f6f6f6; padding: 0.1em 0.3em; }
pre { padding: 0.5em; overflow-x: auto; white-space: pre-wrap; }
figure { margin: 1em 0 2em; } figcaption { font-size: 0.9em; color: #444; margin-top: 0.3em; }
figure svg { max-width: 100%; height: auto; }
p.note { color: #666; font-style: italic; } .meta { color: #555; }
footer { margin-top: 3em; border-top: 1px solid #ccc; padding-top: 0.5em; font-size: 0.85em; color: #555; }
"""


def render_report(*, manifest: dict, candidates: pd.DataFrame, background: pd.DataFrame,
                  injections: pd.DataFrame | None, gates: pd.DataFrame, series: Sequence[dict] | None = None,
                  skymaps: Sequence[dict] | None = None, searches: dict | None = None) -> str:
    """The report as an HTML string (see the module docstring for its content).

    ``series``: one dict per top candidate, most significant first: ``label``, ``gps_time``, ``statistic``
    (its name, e.g. "SNR" or "ρ") and ``curves``, ``{ifo: (t, y)}`` with ``t`` in seconds relative to
    ``gps_time``.  ``skymaps``: one dict per top candidate: ``label``, ``gps_time``, ``prob`` (nested HEALPix
    probability per pixel) and ``ra``, ``dec`` (radians, the best direction, or None).  Up to
    ``figures.common.MAX_PANELS`` of each are drawn; None says that the run gave none.  ``searches``:
    for a campaign of several searches, each one's injection table and zero-lag livetime (s), for
    found/missed and VT per search and for their union.
    """
    manifest = manifest or {}
    candidates, background = frame(candidates), frame(background)
    ifos = detectors(manifest, candidates, background)
    body = "\n".join(part for part in [
        _title(manifest),
        members_section(manifest),
        summary_section(manifest),
        candidates_section(candidates, ifos),
        figures_section(manifest, candidates, background, injections, ifos, series, skymaps, searches),
        chunks_section(manifest, ifos),
        gates_section(gates),
        provenance_section(manifest),
        _footer(manifest),
    ] if part)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{esc(_name(manifest))} \u2013 gwbatch report</title>\n<style>{CSS}</style>\n</head>\n"
            f"<body>\n{body}\n</body>\n</html>\n")


def write_report(path, *, manifest: dict, candidates: pd.DataFrame, background: pd.DataFrame,
                 injections: pd.DataFrame | None, gates: pd.DataFrame, series: Sequence[dict] | None = None,
                 skymaps: Sequence[dict] | None = None, searches: dict | None = None) -> pathlib.Path:
    """Write the self-contained campaign report to ``path`` atomically and return its path
    (``series``, ``skymaps`` and ``searches``: see :func:`render_report`)."""
    path = pathlib.Path(path)
    page = render_report(manifest=manifest, candidates=candidates, background=background,
                         injections=injections, gates=gates, series=series, skymaps=skymaps, searches=searches)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(page, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _name(manifest: dict) -> str:
    return (manifest.get("campaign") or {}).get("name") or "gwbatch campaign"


def _title(manifest: dict) -> str:
    """The campaign's name, description, status, creation time, gwbatch version and command."""
    campaign = manifest.get("campaign") or {}
    meta = [
        ("status", text(manifest.get("status"))),
        ("created (UTC)", text(manifest.get("created_utc"))),
        ("gwbatch", text(manifest.get("gwbatch_version"))),
    ]
    parts = [f"<h1>{esc(_name(manifest))}</h1>"]
    if campaign.get("description"):
        parts.append(f"<p>{esc(campaign['description'])}</p>")
    items = " &middot; ".join(f"{esc(k)}: <strong>{esc(v)}</strong>" for k, v in meta)
    parts.append(f'<p class="meta">{items}</p>')
    if manifest.get("command"):
        parts.append(f"<pre><code>{esc(manifest['command'])}</code></pre>")
    return "\n".join(parts)


def _footer(manifest: dict) -> str:
    """The FAR convention and the gwbatch version."""
    convention = (manifest.get("background") or {}).get("far_convention") or "not recorded"
    version = manifest.get("gwbatch_version") or "unknown"
    return (f"<footer>\n<p><strong>FAR convention:</strong> {esc(convention)}</p>\n"
            f"<p>Written by gwbatch {esc(version)}.</p>\n</footer>")
