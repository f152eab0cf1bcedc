"""Each GPU's utilisation and memory over the run, sampled by the workflow's monitor."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from gwbatch.report.figures.common import drawn
from gwbatch.report.format import fmt_bytes, missing, num, text
from gwbatch.report.inputs import gpu_devices, gpu_label, gpu_mean, gpu_samples
from gwbatch.report.markup import html_table, skipped, subsection


def fig_gpu(manifest: dict) -> str:
    """``gpu_utilisation``: each GPU's utilisation (%) and memory used (GiB) against time since the start,
    and a table of their sample counts, mean utilisation and peak memory."""
    title = "GPU utilisation over the run"
    gpu = manifest.get("gpu_utilisation")
    if not isinstance(gpu, dict):
        return skipped(title, "the run recorded no GPU utilisation (a CPU run, or a manifest from before it "
                              "was sampled).")
    devices = gpu_devices(manifest)
    if not devices:
        return skipped(title, "no GPU was sampled during the run.")
    fig = Figure(figsize=(9, 5), layout="constrained")
    ax_u, ax_m = fig.subplots(2, 1, sharex=True)
    rows = []
    for k, device in enumerate(devices):
        colour, label = f"C{k % 10}", gpu_label(device)
        t, u = gpu_samples(device, "t"), gpu_samples(device, "utilisation")
        mem = gpu_samples(device, "memory_used") / 2**30
        if t.size != u.size:
            t = np.arange(u.size) * float(gpu.get("interval_s") or 1.0)
        ax_u.plot(t, u, color=colour, lw=1, label=label)
        if mem.size == t.size:
            ax_m.plot(t, mem, color=colour, lw=1, label=label)
        peak = np.nanmax(mem) * 2**30 if mem.size and np.isfinite(mem).any() else None
        rows.append([label, str(u.size), num(gpu_mean(device), ".1f"), fmt_bytes(peak)])
    ax_u.set_ylim(-2, 102)
    ax_u.set_ylabel("utilisation (%)")
    ax_u.legend(loc="upper right", fontsize="small")
    ax_m.set_ylim(bottom=0)
    ax_m.set_ylabel("memory used (GiB)")
    ax_m.set_xlabel("time since the start of the run (s)")
    interval = gpu.get("interval_s")
    caption = ("Utilisation of each GPU (top) and the memory used on it (bottom)"
               + (f", sampled every {num(interval, 'g')} s" if not missing(interval) else "")
               + (f", during {text(gpu['sampled_parts'])} invocations of the run." if gpu.get("sampled_parts") else "."))
    table = html_table(["GPU", "samples", "mean utilisation (%)", "peak memory used"], rows,
                       [False, True, True, True])
    return subsection(title, drawn(fig, "fig-gpu", caption) + table)
