"""The one timing loop of the benchmarks."""

from __future__ import annotations

import statistics
import time

import numpy as np


def median_seconds(fn, repeat: int, xp=np, stream=None) -> float:
    """Median seconds of ``fn()`` over ``repeat`` calls after a warm-up call.  On CuPy the device is
    synchronised after the warm-up and each call is timed with CUDA events recorded on ``stream``
    (the current stream by default); on NumPy with the wall clock."""
    fn()
    cuda = xp is not np
    if cuda:
        xp.cuda.Device().synchronize()
        stream = stream or xp.cuda.get_current_stream()
    times = []
    for _ in range(max(1, repeat)):
        if cuda:
            start, stop = xp.cuda.Event(), xp.cuda.Event()
            start.record(stream)
            fn()
            stop.record(stream)
            stop.synchronize()
            times.append(xp.cuda.get_elapsed_time(start, stop) * 1e-3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)
