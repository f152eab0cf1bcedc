"""Load: a plan of many chunks built and scheduled on a local Dask cluster (issue 8).

    python benchmarks/load.py [--chunks 10000] [--workers 2] [--out load.json]

Plans ``configs/one-day.yaml``'s pulse search over a store of ``chunks`` 512-s chunks of H1-L1-V1
at 4096 Hz (metadata only: ``make_plan`` never reads strain), then submits one task per chunk with
the arguments a real chunk task gets (campaign, detectors, backend, resources, chunk) through
``workflow.execute.run_calls``, each task returning a small record instead of searching.  It
records the plan's build time and size, the pickled size of the task arguments, the client's
resident memory before, at the peak and after, the scheduler's, and the wall time.  What it
measures is the orchestration alone: the graph and the client's bookkeeping for N chunks.
"""

from __future__ import annotations

import argparse
import json
import pickle
import threading
import time
from pathlib import Path

import psutil

from gwbatch.config import ClusterConfig, load_run
from gwbatch.gpstime import GPSTime
from gwbatch.io.store import DQ_BITS, StoreMeta
from workflow.cluster import start_cluster
from workflow.execute import Call, chunk_failure, run_calls
from workflow.plan import make_plan

MiB = 2**20


def record(campaign, ifos, backend, resources, spec) -> dict:
    """What a finished chunk sends back, in size: a few numbers (real tasks add small tables)."""
    return {"index": spec.index, "samples": spec.stop - spec.start}


def scheduler_rss(dask_scheduler=None) -> int:
    return psutil.Process().memory_info().rss


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chunks", type=int, default=10_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--config", type=Path, default=Path("configs/one-day.yaml"))
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    campaign = load_run(args.config).members["pulse"]
    fs, chunk = 4096.0, campaign.plan.chunk
    meta = StoreMeta(path=Path("load.zarr"), ifos=("H1", "L1", "V1"), sample_rate=fs, t0=GPSTime(1_000_000_000),
                     n_samples=int(args.chunks * chunk * fs), chunk_samples=1 << 20, dq_bits=DQ_BITS)
    client_proc = psutil.Process()
    rss0 = client_proc.memory_info().rss
    started = time.perf_counter()
    plan = make_plan(campaign, meta)
    plan_seconds = time.perf_counter() - started
    calls = [Call(f"load-{spec.index:06d}", record, (campaign, plan.ifos, "numpy", {}, spec), spec.index)
             for spec in plan.chunks]
    args_bytes = sum(len(pickle.dumps(c.args)) for c in calls)
    rss_plan = client_proc.memory_info().rss
    peak = [rss_plan]
    done = threading.Event()

    def sample():
        while not done.wait(0.05):
            peak[0] = max(peak[0], client_proc.memory_info().rss)

    cfg = ClusterConfig(kind="local", n_workers=args.workers, dashboard_address=":0")
    with start_cluster(cfg, "numpy", len(calls)) as cluster:
        sched0 = cluster.client.run_on_scheduler(scheduler_rss)
        watcher = threading.Thread(target=sample, daemon=True)
        watcher.start()
        started = time.perf_counter()
        results = [r for _, r in run_calls(cluster, calls, failure=chunk_failure, desc="chunks", progress=False)]
        schedule_seconds = time.perf_counter() - started
        sched1 = cluster.client.run_on_scheduler(scheduler_rss)
        done.set()
        watcher.join()
    rss_after = client_proc.memory_info().rss
    assert sorted(r["index"] for r in results) == list(range(len(plan.chunks)))
    out = {
        "date": time.strftime("%Y-%m-%d"), "command": "python benchmarks/load.py " + " ".join(argv or []),
        "chunks": len(plan.chunks), "workers": args.workers, "cores": psutil.cpu_count(),
        "plan_seconds": plan_seconds, "task_argument_bytes": args_bytes,
        "task_argument_bytes_per_chunk": args_bytes / len(calls),
        "client_rss_mib": {"start": rss0 / MiB, "after_plan": rss_plan / MiB, "peak": peak[0] / MiB,
                           "after": rss_after / MiB},
        "scheduler_rss_mib": {"before": sched0 / MiB, "after": sched1 / MiB},
        "schedule_seconds": schedule_seconds, "tasks_per_second": len(calls) / schedule_seconds,
    }
    print(json.dumps(out, indent=1))
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
