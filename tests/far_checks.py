"""Shared assertion of the false-alarm calibration tests: zero-lag counts against F·T."""

from __future__ import annotations

import numpy as np


def assert_calibrated(run, products=(1, 10), columns=("far", "far_exclusive")) -> None:
    """The run's zero-lag candidates with FAR <= F over its zero-lag livetime T number F·T within
    Poisson 3 sigma at each F·T of ``products``, for the inclusive and exclusive FAR."""
    cands = run.reduced.candidates
    live = run.manifest["livetime"]["zero_lag_seconds"]
    for ft in products:
        for col in columns:
            n = int((cands[col] <= ft / live).sum())
            assert abs(n - ft) <= 3 * np.sqrt(ft), f"F*T={ft}: {n} zero-lag candidates ({col})"
