"""The one timing loop of the benchmarks."""

from __future__ import annotations

import argparse
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


def define_variant(text: str) -> dict:
    """``NAME=V[,NAME=V]`` (integers) for ``--define``: one variant of compile-time constants."""
    out = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        if not name or not value.strip().lstrip("-").isdigit():
            raise argparse.ArgumentTypeError(f"{item!r} is not NAME=INTEGER (e.g. TILE=256)")
        out[name] = int(value)
    return out
