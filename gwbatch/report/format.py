"""Values as the report prints them: a dash for a missing value, "inf" for an infinity."""

from __future__ import annotations

import math

import pandas as pd

DASH = "\u2013"


def missing(x) -> bool:
    """None, NaN or NA (a value that is not a scalar counts as present)."""
    if x is None:
        return True
    try:
        return bool(pd.isna(x))
    except (TypeError, ValueError):
        return False


def num(x, spec: str = ".6g") -> str:
    """A number with ``spec``; "inf" for infinities and a dash for missing values."""
    if missing(x):
        return DASH
    try:
        x = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return format(x, spec)


def fmt_gps(x) -> str:
    return num(x, ".4f")


def fmt_utc(gps) -> str:
    """A GPS time as UTC, ``YYYY-MM-DD HH:MM:SS.sss`` (leap seconds applied by astropy)."""
    if missing(gps):
        return DASH
    from astropy.time import Time

    return Time(float(gps), format="gps").utc.iso


def fmt_snr(x) -> str:
    return num(x, ".2f")


def fmt_far(x) -> str:
    return num(x, ".3e")


def fmt_ifar(x) -> str:
    return num(x, ".3g")


def fmt_int(x) -> str:
    return DASH if missing(x) else f"{int(x):d}"


def fmt_degrees(radians) -> str:
    return DASH if missing(radians) else f"{math.degrees(float(radians)):.1f}"


def fmt_area(x) -> str:
    return DASH if missing(x) else f"{float(x):.0f}"


def fmt_sky_area(area: float) -> str:
    """A credible area (deg²): one decimal below 10 deg², none above."""
    return f"{area:.1f}" if area < 10 else f"{area:.0f}"


def fmt_seconds(x) -> str:
    """Seconds, with h:mm:ss from a minute up, and in µs below a millisecond."""
    if missing(x):
        return DASH
    s = float(x)
    if math.isfinite(s) and 0 < abs(s) < 1e-3:
        return f"{num(s * 1e6, '.3g')} \u00b5s"
    if not math.isfinite(s) or s < 60:
        return f"{num(s, '.6g')} s"
    h, rest = divmod(round(s), 3600)
    return f"{num(s, '.6g')} s ({h:d}:{rest // 60:02d}:{rest % 60:02d})"


def fmt_bytes(x) -> str:
    """Bytes in the largest binary unit (KiB ... TiB) that keeps the number below 1024."""
    if missing(x):
        return DASH
    value = float(x)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return DASH  # pragma: no cover


def fmt_fraction(hits: int, total: int) -> str:
    """``hits/total = fraction`` (a dash when there are none)."""
    return f"{hits}/{total} = {hits / total:.3f}" if total else DASH


def text(x) -> str:
    """Any value as text; lists joined with commas."""
    if missing(x):
        return DASH
    if isinstance(x, (list, tuple)):
        return ", ".join(str(v) for v in x) or DASH
    return str(x)
