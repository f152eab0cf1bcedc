"""Campaign report: one self-contained ``report.html`` (see :mod:`gwbatch.report.html`)."""

from __future__ import annotations

from gwbatch.report.html import write_report

__all__ = ["write_report"]
