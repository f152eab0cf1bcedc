"""Campaign report: one self-contained ``report.html`` (the page: :mod:`gwbatch.report.html`).

- :mod:`.html`: the page (its order, navigation bar, CSS, the atomic write).
- :mod:`.summary`, :mod:`.tables`: the key/value and tabular sections, read from the manifest and tables.
- :mod:`.details`: the top candidates in detail (time series, skymaps, Q transforms, burst maps).
- :mod:`.figures`: the figures, one module per family; :mod:`.qtransform`: the constant-Q transform.
- :mod:`.markup`, :mod:`.format`, :mod:`.inputs`: HTML fragments, value formatting, tolerant input reads.
"""

from __future__ import annotations

from gwbatch.report.html import render_report, write_report

__all__ = ["render_report", "write_report"]
