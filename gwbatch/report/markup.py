"""HTML fragments of the report.  Every string from the inputs is escaped here; the only markup that
passes through unescaped is :class:`Raw`, which this module makes (relative links)."""

from __future__ import annotations

import html
import re
import urllib.parse
from collections.abc import Iterable, Sequence

from gwbatch.report.format import DASH, missing


def esc(value) -> str:
    return html.escape(str(value), quote=True)


class Raw(str):
    """Markup built here from escaped parts (a link); :func:`html_table` puts it in a cell as it is."""


def html_of(value) -> str:
    """``value`` as markup: :class:`Raw` markup (a :func:`link`) as it is, anything else escaped."""
    return value if isinstance(value, Raw) else esc(value)


def link(href, text=None) -> str:
    """A link to a relative path (``burst/report.html``).  Anything with a scheme, an absolute path or a
    parent-directory step is shown as plain text, so the report never points outside its campaign."""
    href = "" if missing(href) else str(href)
    label = href if text is None else str(text)
    if not href or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", href) or href.startswith(("/", "\\")) or ".." in href:
        return label or DASH
    return Raw(f'<a href="{esc(urllib.parse.quote(href, safe="/#"))}">{esc(label)}</a>')


def html_table(header: Sequence[str], rows: Iterable[Sequence], numeric: Sequence[bool] | None = None) -> str:
    """A table with a header row; every cell is escaped (except :class:`Raw` markup made here);
    ``numeric`` columns are right-aligned."""
    numeric = list(numeric) if numeric is not None else [False] * len(header)
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{html_of(c)}</td>' if (i < len(numeric) and numeric[i]) else f"<td>{html_of(c)}</td>"
            for i, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n" + "\n".join(body) + "\n</tbody>\n</table>"


def kv_table(pairs: Iterable[tuple[str, str]]) -> str:
    """A two-column table of (name, value) rows, the names as row headers."""
    rows = "\n".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in pairs)
    return f'<table class="kv">\n<tbody>\n{rows}\n</tbody>\n</table>'


def note(text: str) -> str:
    return f'<p class="note">{esc(text)}</p>'


def section(title: str, body: str, anchor: str) -> str:
    """A top-level ``<section id=anchor>`` with an ``<h2>`` title."""
    return f'<section id="{esc(anchor)}">\n<h2>{esc(title)}</h2>\n{body}\n</section>'


def subsection(title: str, body: str) -> str:
    """An ``<h3>`` title followed by ``body``."""
    return f"<h3>{esc(title)}</h3>\n{body}"


def figure(svg: str, caption: str, fig_id: str | None = None) -> str:
    """An inline ``<svg>`` as a captioned ``<figure>``."""
    ident = f' id="{esc(fig_id)}"' if fig_id else ""
    return f"<figure{ident}>\n{svg}\n<figcaption>{esc(caption)}</figcaption>\n</figure>"


def skipped(title: str, reason: str) -> str:
    """A figure's title and the sentence that says why it is not drawn."""
    return subsection(title, note(f"Not drawn: {reason}"))
