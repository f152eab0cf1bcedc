"""What the GPUs did during a run: each Dask worker's own system monitor samples its GPU's
utilisation and memory through NVML (every 0.5 s by default); after the chunks ran, the samples of
that stretch are collected into the manifest (``gpu_utilisation``)."""

from __future__ import annotations

import os

import numpy as np


def _worker_gpu(dask_worker, since: float, until: float) -> dict | None:
    """This worker's GPU samples between ``since`` and ``until`` (Unix times), or None without a GPU."""
    monitor = getattr(dask_worker, "monitor", None)
    if monitor is None or not getattr(monitor, "gpu_name", None):
        return None
    q = monitor.quantities
    t = np.asarray(q["time"], dtype=float)
    n = min(len(t), len(q["gpu_utilization"]), len(q["gpu_memory_used"]))
    t = t[-n:] if n else t[:0]
    util = np.asarray(q["gpu_utilization"], dtype=float)[-n:] if n else np.zeros(0)
    mem = np.asarray(q["gpu_memory_used"], dtype=float)[-n:] if n else np.zeros(0)
    keep = (t >= since) & (t <= until)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    return {"index": int(visible) if visible.isdigit() else visible, "name": monitor.gpu_name,
            "t": t[keep], "utilisation": util[keep], "memory_used": mem[keep]}


def gpu_utilisation(cluster, since: float, until: float) -> dict | None:
    """Per GPU: utilisation (%) and memory used (bytes) against seconds from ``since``, and the mean
    utilisation; None for in-process runs and clusters without GPUs."""
    if cluster.client is None:
        return None
    try:
        found = cluster.client.run(_worker_gpu, since=since, until=until)
    except Exception:  # a worker that left; the run itself is unaffected
        return None
    devices = []
    for worker, h in sorted(found.items()):
        if h is None or len(h["t"]) == 0:
            continue
        devices.append({
            "index": h["index"], "name": h["name"], "worker": worker,
            "t": [round(float(x - since), 3) for x in h["t"]],
            "utilisation": [float(x) for x in h["utilisation"]],
            "memory_used": [int(x) for x in h["memory_used"]],
            "mean": float(np.mean(h["utilisation"])),
        })
    if not devices:
        return None
    intervals = np.diff(devices[0]["t"]) if len(devices[0]["t"]) > 1 else np.array([0.5])
    return {"interval_s": float(np.median(intervals)), "seconds": until - since, "devices": devices,
            "mean": float(np.mean([d["mean"] for d in devices]))}
