"""Memory over a long campaign: a week of simulated H1-L1-V1 data, host and GPU memory sampled
while it runs (issue 8).

    python benchmarks/week.py [--config configs/week.yaml] [--days 7] [--sample-rate 1024]
                              [--store data/week.zarr] [--out runs/week] [--result week.json]

Simulates the store when it is missing, runs ``gwbatch run`` on it (``--set`` overrides pass
through), and every ``--interval`` seconds samples the resident memory of the run's whole process
tree (client, scheduler, workers) and the GPU memory in use (``nvidia-smi``, when there is one).
Memory is flat when it stops growing once the workers are warm: over the chunk stage (its end is
the ``finished_utc`` of the run's last part, its length the manifest's chunk stage), the result
gives each series' range, and over the stage's second half the least-squares slope in MiB per hour
and the range, and the change that slope makes over the half.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil

MiB = 2**20


def tree_rss(proc: psutil.Process) -> int:
    """Resident bytes of ``proc`` and all its descendants (processes that end meanwhile count 0)."""
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def gpu_used() -> list[int] | None:
    """Bytes in use on each GPU, or None without ``nvidia-smi``."""
    if shutil.which("nvidia-smi") is None:
        return None
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True)
    return [int(v) * MiB for v in out.stdout.split()] if out.returncode == 0 else None


def trend(t: np.ndarray, y: np.ndarray, window: tuple[float, float]) -> dict:
    """Range of ``y`` (bytes) within ``window`` of ``t`` (seconds), and over the window's second half
    its least-squares slope (MiB per hour) and range (MiB)."""
    lo, hi = window
    inside = (t >= lo) & (t <= hi)
    half = inside & (t >= (lo + hi) / 2)
    slope = float(np.polyfit(t[half], y[half], 1)[0]) * 3600 / MiB if half.sum() >= 3 else float("nan")
    return {"window_s": [lo, hi], "min_mib": float(y[inside].min() / MiB), "max_mib": float(y[inside].max() / MiB),
            "second_half_slope_mib_per_hour": slope,
            "second_half_fitted_change_mib": slope * (hi - lo) / 2 / 3600,
            "second_half_range_mib": float(y[half].max() - y[half].min()) / MiB if half.any() else float("nan")}


def chunk_window(out: Path, manifest: dict, started_unix: float) -> tuple[float, float]:
    """The chunk stage in seconds from ``started_unix``: it ends when the run's last part finished."""
    last = [json.loads(line) for line in (out / "parts.jsonl").read_text().splitlines() if line.strip()][-1]
    end = datetime.datetime.fromisoformat(last["finished_utc"]).timestamp() - started_unix
    return end - manifest["timing"]["stages"]["chunks"], end


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", type=Path, default=Path("configs/week.yaml"))
    p.add_argument("--days", type=float, default=7.0)
    p.add_argument("--sample-rate", type=float, default=1024.0)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--store", type=Path, default=Path("data/week.zarr"))
    p.add_argument("--out", type=Path, default=Path("runs/week"))
    p.add_argument("--workers", type=int, default=psutil.cpu_count() or 1, help="processes that simulate the store")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between memory samples")
    p.add_argument("--set", action="append", default=[], help="extra campaign overrides")
    p.add_argument("--result", type=Path, help="JSON file to write")
    args = p.parse_args(argv)
    for name in ("days", "sample_rate", "interval"):
        value = getattr(args, name)
        if not (value > 0 and np.isfinite(value)):
            p.error(f"--{name.replace('_', '-')} must be a positive number of {'seconds' if name == 'interval' else 'days' if name == 'days' else 'Hz'}, not {value:g}")
    record = {"config": str(args.config), "days": args.days, "sample_rate": args.sample_rate,
              "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv)}
    if not (args.store / "zarr.json").exists():
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "gwbatch", "simulate", "--ifos", "H1,L1,V1", "--duration",
                        str(args.days * 86400), "--sample-rate", str(args.sample_rate), "--seed", str(args.seed),
                        "--out", str(args.store), "--overwrite", "--workers", str(args.workers)], check=True)
        record["simulate_seconds"] = time.perf_counter() - started
    argv_run = [sys.executable, "-m", "gwbatch", "run", str(args.config), "--out", str(args.out), "--overwrite",
                "--no-progress", "--set", f"data.store={args.store}"]
    for s in args.set:
        argv_run += ["--set", s]
    started, started_unix = time.perf_counter(), time.time()
    run = subprocess.Popen(argv_run)
    proc = psutil.Process(run.pid)
    t, host, gpu = [], [], []
    while run.poll() is None:
        t.append(time.perf_counter() - started)
        host.append(tree_rss(proc))
        gpu.append(gpu_used())
        time.sleep(args.interval)
    record["exit_status"] = run.returncode
    record["wall_seconds"] = time.perf_counter() - started
    if run.returncode != 0:
        raise SystemExit(f"gwbatch run exited with status {run.returncode}: {' '.join(argv_run)}")
    manifest = json.loads((args.out / "manifest.json").read_text())
    t_arr = np.asarray(t)
    window = chunk_window(args.out, manifest, started_unix)
    record["samples"] = {"t": t, "host_rss_bytes": host, "gpu_used_bytes": gpu}
    record["host"] = trend(t_arr, np.asarray(host, dtype=float), window)
    if gpu and all(g is not None for g in gpu):
        used = np.asarray(gpu, dtype=float).sum(axis=1)
        record["gpu"] = trend(t_arr, used, window)
    record["chunks"] = len(manifest["chunks"])
    record["candidates"] = manifest["counts"]["candidates"]
    record["analysed_seconds"] = manifest["livetime"]["analysed_seconds"]
    record["stages"] = manifest["timing"]["stages"]
    record["devices"] = manifest["devices"]
    if args.result:
        args.result.write_text(json.dumps(record, indent=1))
    print(f"{record['chunks']} chunks in {record['wall_seconds']:.0f} s on {', '.join(record['devices'])}")
    for name in ("host", "gpu"):
        if name in record:
            r = record[name]
            print(f"{name} memory over the chunk stage: {r['min_mib']:.0f}..{r['max_mib']:.0f} MiB; its second "
                  f"half: slope {r['second_half_slope_mib_per_hour']:+.1f} MiB/h, range {r['second_half_range_mib']:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
