"""What the GPUs did during a run: each Dask worker's own system monitor samples its GPU's
utilisation and memory through NVML (every 0.5 s by default); the samples of the chunk stage are
collected into the manifest (``gpu_utilisation``).  A worker keeps only its last 7200 samples (an
hour; distributed's ``admin.system-monitor.log-length``), so :class:`GpuRecorder` collects them in
pieces while the chunks run."""

from __future__ import annotations

import os
import time

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


class GpuRecorder:
    """The workers' GPU samples over a chunk stage of any length: :meth:`poll` (called as results
    come in) collects what accumulated when ``every`` seconds have passed since the last piece, well
    inside the hour a worker keeps; :meth:`finish` collects the rest and joins the pieces per worker,
    with times from the stage's start."""

    def __init__(self, cluster, since: float, every: float = 1200.0):
        self.cluster, self.since, self.every = cluster, since, every
        self.last, self.pieces = since, []

    def poll(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        if now - self.last >= self.every:
            self._collect(now)

    def _collect(self, until: float) -> None:
        piece = gpu_utilisation(self.cluster, self.last, until)
        if piece is not None:
            self.pieces.append((self.last - self.since, piece))
        self.last = until

    def finish(self, now: float | None = None) -> dict | None:
        self._collect(time.time() if now is None else now)
        return join_pieces(self.pieces, self.last - self.since)


def join_pieces(pieces: list[tuple[float, dict]], seconds: float) -> dict | None:
    """One ``gpu_utilisation`` record from pieces ``(offset, record)`` whose times count from their
    own start: per worker, the samples end to end, times shifted by each piece's offset (a sample on
    the boundary of two pieces, in both, is kept once)."""
    if not pieces:
        return None
    devices: dict[str, dict] = {}
    for i, (offset, piece) in enumerate(pieces):
        for d in piece["devices"]:
            joined = devices.setdefault(d["worker"], {k: d[k] for k in ("index", "name", "worker")}
                                        | {"t": [], "utilisation": [], "memory_used": []})
            keep = [j for j, t in enumerate(d["t"]) if i == 0 or t > 0]
            joined["t"] += [round(offset + d["t"][j], 3) for j in keep]
            joined["utilisation"] += [d["utilisation"][j] for j in keep]
            joined["memory_used"] += [d["memory_used"][j] for j in keep]
    out = [d | {"mean": float(np.mean(d["utilisation"]))} for d in devices.values() if d["utilisation"]]
    if not out:
        return None
    return {"interval_s": pieces[0][1]["interval_s"], "seconds": seconds, "devices": out,
            "mean": float(np.mean([d["mean"] for d in out]))}
