"""The one place that decides between NumPy and CuPy.

Kernels receive arrays and ask :func:`array_namespace` which module they belong to; they never
import CuPy themselves.  CuPy is imported lazily, so ``import gwbatch`` works on a machine with no
GPU and no CuPy.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from types import ModuleType
from typing import Any, Iterator

import numpy as np

from gwbatch.errors import ConfigError

BACKENDS = ("numpy", "cupy")

#: Held around every call of a parallel numba kernel: the tasks one worker runs in threads take
#: turns there, because numba's workqueue threading layer (its fallback without TBB or OpenMP)
#: aborts the process when two threads enter parallel code at once; each region already uses the
#: worker's share of the cores.
HOST_PARALLEL = threading.Lock()


@functools.cache
def _cupy() -> ModuleType | None:
    try:
        import cupy
    except Exception:  # ImportError, or a CUDA runtime that fails to load
        return None
    return cupy


@functools.cache
def cupy_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    cp = _cupy()
    if cp is None:
        return False
    try:
        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def resolve_backend(name: str) -> str:
    """Turn ``auto``/``numpy``/``cupy`` into a concrete backend name, or explain why not."""
    if name == "auto":
        return "cupy" if cupy_available() else "numpy"
    if name == "numpy":
        return "numpy"
    if name == "cupy":
        if not cupy_available():
            raise ConfigError(
                "backend 'cupy' was requested but CuPy is not installed or sees no CUDA device; "
                "install the gpu extra (pip install 'gwbatch[gpu]') or use backend: numpy"
            )
        return "cupy"
    raise ConfigError(f"unknown backend {name!r}; allowed: auto, {', '.join(BACKENDS)}")


def get_xp(backend: str) -> ModuleType:
    """Array module for a resolved backend name."""
    if resolve_backend(backend) == "cupy":
        return _cupy()
    return np


def array_namespace(*arrays: Any) -> ModuleType:
    """NumPy or CuPy, whichever owns the arrays; mixed inputs are refused."""
    cp = _cupy()
    kinds = set()
    for a in arrays:
        if a is None or np.isscalar(a):
            continue
        if cp is not None and isinstance(a, cp.ndarray):
            kinds.add("cupy")
        else:
            kinds.add("numpy")
    if len(kinds) > 1:
        raise TypeError("mixed NumPy and CuPy arrays; move them to one device first")
    return cp if kinds == {"cupy"} else np


@contextlib.contextmanager
def shared_device(key: int) -> Iterator[None]:
    """Make GPU ``key`` modulo the GPUs visible current in this thread for the block: CPU worker
    processes that share a host's GPUs (``gwbatch ingest --backend cupy``) spread over them by their
    worker number.  dask-cuda's workers each see one GPU, so for them it is always that one."""
    cp = _cupy()
    with cp.cuda.Device(key % cp.cuda.runtime.getDeviceCount()):
        yield


def to_host(a: Any) -> np.ndarray:
    """A NumPy copy (or view) of a NumPy or CuPy array."""
    if isinstance(a, np.ndarray):
        return a
    get = getattr(a, "get", None)
    return get() if get is not None else np.asarray(a)


#: Each thread's own CUDA stream per device (:func:`task_stream`).
_STREAMS = threading.local()


@contextlib.contextmanager
def task_stream(backend: str) -> Iterator[None]:
    """Run the block on this thread's own non-blocking CUDA stream (CuPy's current stream is per
    thread), created once per thread and device; a no-op on NumPy.  The chunk tasks a GPU worker
    runs in its threads then queue, overlap and wait for their own work only, not each other's, as
    they would on the legacy default stream that every thread shares.  Nothing a task leaves on
    the device may be used by another task before it synchronises its stream (its stages do)."""
    cp = _cupy() if backend == "cupy" else None
    if cp is None:
        yield
        return
    streams = _STREAMS.__dict__.setdefault("by_device", {})
    device = cp.cuda.Device().id
    if device not in streams:
        streams[device] = cp.cuda.Stream(non_blocking=True)
    with streams[device]:
        yield


class StageTimer:
    """Seconds per named stage of a task, summed over its entries (``with timer("read"): ...``).
    On CuPy each stage ends by synchronising the current stream (the task's, :func:`task_stream`),
    so its GPU work is charged to it and not to the stage that next waits on the device."""

    def __init__(self, backend: str):
        self.seconds: dict[str, float] = {}
        cp = _cupy() if backend == "cupy" else None
        self._sync = (lambda: cp.cuda.get_current_stream().synchronize()) if cp is not None else None

    @contextlib.contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            if self._sync is not None:
                self._sync()
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - started


def device_name(backend: str) -> str:
    """Human-readable description of where ``backend`` runs, for logs and the manifest."""
    if backend != "cupy":
        return "cpu"
    cp = _cupy()
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return f"cuda:{dev.id} {name} (pci {dev.pci_bus_id})"


@contextlib.contextmanager
def device_memory_peak(backend: str) -> Iterator[list[int]]:
    """The most CuPy memory-pool bytes the block had in use beyond those in use when it began
    (``peak[0]`` afterwards; 0 on NumPy): the task's own working memory, not what earlier tasks of
    the worker left cached.  This thread's allocations go through the pool via a wrapper for the
    duration (``cupy.cuda.using_allocator`` is per thread); the pool is the process's, so with
    several tasks on one GPU each sees the pool's peak while it ran."""
    peak = [0]
    cp = _cupy() if backend == "cupy" else None
    if cp is None:
        yield peak
        return
    pool = cp.get_default_memory_pool()
    base = pool.used_bytes()
    top = [base]

    def malloc(size: int):
        mem = pool.malloc(size)
        top[0] = max(top[0], pool.used_bytes())
        return mem

    try:
        with cp.cuda.using_allocator(malloc):
            yield peak
    finally:
        peak[0] = top[0] - base
