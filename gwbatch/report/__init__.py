"""Campaign report: one self-contained ``report.html`` (see :mod:`gwbatch.report.html`)."""

from __future__ import annotations

from gwbatch.report.html import render_report, write_report

__all__ = ["render_report", "write_report"]
