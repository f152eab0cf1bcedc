"""The one timing loop of the benchmarks."""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import numpy as np

#: How long the device spins before a queued timing (seconds): longer than the host takes to queue
#: the launches of any timed call here.
QUEUE_SECONDS = 2e-3

_SPIN = r"""
__device__ __forceinline__ long long globaltimer()
{
    long long ns;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    return ns;
}

extern "C" __global__ void spin(const long long ns)
{
    const long long t0 = globaltimer();
    while (globaltimer() - t0 < ns) {}
}
"""


def median_seconds(fn, repeat: int, xp=np, stream=None, queued: bool = False) -> float:
    """Median seconds of ``fn()`` over ``repeat`` calls after a warm-up call.  On CuPy the device is
    synchronised after the warm-up and each call is timed with CUDA events recorded on ``stream``
    (the current stream by default); on NumPy with the wall clock.

    ``queued`` (CuPy): the device time of ``fn``'s launches alone.  The stream first runs a kernel
    that spins for ``QUEUE_SECONDS`` while the host queues the start event, ``fn``'s launches and
    the stop event behind it, so the host's launch latency (tens of microseconds a launch) is not
    counted: the way a kernel runs inside a pipeline that keeps the device fed.  Only for ``fn``
    that never waits on the device."""
    fn()
    cuda = xp is not np
    if cuda:
        xp.cuda.Device().synchronize()
        stream = stream or xp.cuda.get_current_stream()
        spin = _spin_kernel(xp) if queued else None
    times = []
    for _ in range(max(1, repeat)):
        if cuda:
            start, stop = xp.cuda.Event(), xp.cuda.Event()
            if spin is not None:
                spin((1,), (1,), (np.int64(QUEUE_SECONDS * 1e9),), stream=stream)
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


@functools.cache
def _spin_kernel(cupy):
    return cupy.RawKernel(_SPIN, "spin")


def define_variant(text: str) -> dict:
    """``NAME=V[,NAME=V]`` for ``--define``: one variant of compile-time constants (integers, or a
    name such as a launch profile's)."""
    out = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        value = value.strip()
        if value.lstrip("-").isdigit():
            out[name] = int(value)
        elif name and value.isidentifier():
            out[name] = value
        else:
            raise argparse.ArgumentTypeError(f"{item!r} is not NAME=INTEGER or NAME=WORD (e.g. TILE=256)")
    return out
