"""Exact GPS times.

A store's start time ``t0`` is kept exactly, as integer seconds plus integer nanoseconds, and
written as a decimal string (``"1126259446.000000000"``).  Sample ``i`` of a series at rate ``fs``
is at ``t0 + i / fs``; :func:`sample_times` returns float64 GPS seconds, which resolve 0.25 µs at
the present epoch, far below any sample spacing used here.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

import numpy as np

from gwbatch.errors import DataError

_NS = 1_000_000_000
#: GPS times gwbatch accepts: [0, 2**32) s (1980 to 2116).  Beyond 2**32 s a float64 GPS time
#: resolves worse than 1 µs (at 2**62 s, 1024 s), so candidate times would be rounded.
GPS_MAX = 2**32


@dataclass(frozen=True, order=True)
class GPSTime:
    """A GPS time as whole seconds and nanoseconds (0 <= nanoseconds < 1e9)."""

    seconds: int
    nanoseconds: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.nanoseconds < _NS:
            raise ValueError(f"nanoseconds must be in [0, 1e9), got {self.nanoseconds}")

    @classmethod
    def parse(cls, value: "GPSTime | str | int | float | Decimal") -> "GPSTime":
        """From a decimal string, an int, a Decimal, LAL's ``LIGOTimeGPS`` (exactly), a numpy
        scalar or (rounded to the nanosecond) a float."""
        if isinstance(value, GPSTime):
            return value
        if hasattr(value, "gpsSeconds") and hasattr(value, "gpsNanoSeconds"):  # lal.LIGOTimeGPS
            return cls(0, 0).add_ns(int(value.gpsSeconds) * _NS + int(value.gpsNanoSeconds))
        if isinstance(value, (np.generic, np.ndarray)) and np.ndim(value) == 0:
            value = value.item()
        if isinstance(value, bool):
            raise DataError(f"not a GPS time: {value!r} (expected e.g. '1126259446.0')")
        try:
            d = Decimal(str(value)) if not isinstance(value, Decimal) else value
        except InvalidOperation as exc:
            raise DataError(f"not a GPS time: {value!r} (expected e.g. '1126259446.0')") from exc
        if not d.is_finite():
            raise DataError(f"not a finite GPS time: {value!r}")
        total_ns = int((d * _NS).to_integral_value())
        return cls(total_ns // _NS, total_ns % _NS)

    @property
    def total_ns(self) -> int:
        return self.seconds * _NS + self.nanoseconds

    def __float__(self) -> float:
        return self.seconds + self.nanoseconds / _NS

    def __str__(self) -> str:
        return f"{self.seconds}.{self.nanoseconds:09d}"

    def add_ns(self, ns: int) -> "GPSTime":
        t = self.total_ns + int(ns)
        return GPSTime(t // _NS, t % _NS)

    def add_samples(self, n: int, sample_rate: float) -> "GPSTime":
        """The time ``n`` samples later, rounded to the nanosecond."""
        return self.add_ns(round(Decimal(int(n)) * _NS / Decimal(repr(float(sample_rate)))))

    def minus(self, other: "GPSTime") -> float:
        """``self - other`` in seconds (float64)."""
        return (self.total_ns - other.total_ns) / _NS


def check_gps_range(t: GPSTime, what: str) -> GPSTime:
    """``t`` if it lies in ``[0, GPS_MAX)`` s, else a :class:`DataError` naming ``what``."""
    if not 0 <= t.seconds < GPS_MAX:
        shown = str(t) if len(str(t)) <= 40 else f"{str(t)[:20]}... ({len(str(abs(t.seconds)))} digits)"
        raise DataError(f"{what} {shown} is outside the GPS times gwbatch handles, [0, 2**32) s "
                        f"(1980-01-06 to 2116); a float64 time there would not resolve a sample")
    return t


def sample_times(t0: GPSTime, index, sample_rate: float) -> np.ndarray:
    """Float64 GPS times of (possibly fractional) sample indices."""
    frac = t0.nanoseconds / _NS
    return t0.seconds + (frac + np.asarray(index, dtype=np.float64) / float(sample_rate))


def time_to_index(t0: GPSTime, gps: float | GPSTime, sample_rate: float) -> float:
    """Fractional sample index of a GPS time."""
    g = GPSTime.parse(gps)
    return (g.total_ns - t0.total_ns) / _NS * float(sample_rate)
