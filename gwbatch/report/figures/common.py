"""What the figures share: a Matplotlib figure as inline SVG in a captioned ``<figure>``, and how many
top candidates get a panel."""

from __future__ import annotations

import io
import logging
import re

import matplotlib
from matplotlib.figure import Figure

from gwbatch.report.markup import figure, skipped

log = logging.getLogger("gwbatch")

MAX_PANELS = 5  # time series and skymaps of the top candidates


def fig_to_svg(fig: Figure, prefix: str) -> str:
    """``fig`` as an inline ``<svg>`` element: XML header and RDF metadata stripped, ids prefixed to stay unique.
    Text is drawn as paths and the id salt is fixed, so the same figure gives the same bytes."""
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "gwbatch-report"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    fig.clear()
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, count=1, flags=re.DOTALL)
    svg = re.sub(r'\bid="', f'id="{prefix}-', svg)
    svg = re.sub(r'href="#', f'href="#{prefix}-', svg)
    return re.sub(r"url\(#", f"url(#{prefix}-", svg)


def drawn(fig: Figure, fig_id: str, caption: str) -> str:
    """``fig`` as a captioned ``<figure id=fig_id>``; the SVG's own ids are prefixed with ``fig_id``."""
    return figure(fig_to_svg(fig, fig_id), caption, fig_id)


def guarded(title: str, draw, *args) -> str:
    """``draw(*args)``; if drawing fails, a warning is logged and the page says the figure is missing
    (the report, and the run, are not lost for one figure)."""
    try:
        return draw(*args)
    except Exception as exc:  # noqa: BLE001 - any failure of one figure
        log.warning("report figure %r not drawn: %s: %s", title, type(exc).__name__, exc)
        return skipped(title, f"drawing it failed ({type(exc).__name__}: {exc}).")
