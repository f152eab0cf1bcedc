"""How a chunk task's time changes when several GPU workers run at once, and where it goes.

    python benchmarks/concurrency.py CONFIG [--levels 1,2,4] [--repeats 2] [--result F.json]

Starts the campaign's cluster (``LocalCUDACluster``, one worker per visible GPU; CPU workers without
one), warms every worker on each search of the campaign, then for each concurrency level ``K`` runs
the same kind of chunk task on ``K`` workers at once (distinct chunks, one per worker), under
cProfile.  Per search and level it records the median task wall time, the process CPU time during
the task (all threads: host threads that spin or oversubscribe the cores show up here), and the
functions whose own time grows most from the lowest to the highest level.  Each worker also reports
its CPU affinity, thread count and thread-pool sizes, the usual suspects of host contention.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path


def thread_picture() -> dict:
    """The host-thread picture of this worker process."""
    info = {"pid": os.getpid(), "affinity": len(os.sched_getaffinity(0)), "cpu_count": os.cpu_count(),
            "env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES") if k in os.environ}}
    try:
        import numba

        info["numba_threads"] = numba.get_num_threads()
    except Exception:  # numba missing: nothing to report
        pass
    try:
        from threadpoolctl import threadpool_info

        info["threadpools"] = [(p["internal_api"], p["num_threads"]) for p in threadpool_info()]
    except Exception:  # threadpoolctl missing
        pass
    with open("/proc/self/status") as f:
        info["threads"] = next((int(line.split()[1]) for line in f if line.startswith("Threads:")), None)
    return info


def profiled_task(search_kind: str, task, resources, top: int = 40) -> dict:
    """Run one chunk task under cProfile; wall and process CPU seconds and the top functions."""
    from gwbatch.searches import get_search

    search = get_search(search_kind)
    prof = cProfile.Profile()
    wall, cpu = time.perf_counter(), time.process_time()
    prof.runcall(search.process, task, resources)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    stats = pstats.Stats(prof).stats
    rows = sorted(((f"{Path(k[0]).name}:{k[1]}:{k[2]}", v[2], v[3]) for k, v in stats.items()),
                  key=lambda r: -r[1])[:top]
    return {"wall": wall, "cpu": cpu, "functions": {name: [own, cum] for name, own, cum in rows},
            "threads": thread_picture()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config", type=Path)
    p.add_argument("--levels", default="1,2,4")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", type=Path, default=None, help="run directory whose banks/ cache to use")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--result", type=Path)
    p.add_argument("--cluster", default="auto", help="cluster.kind (auto: local-cuda with GPUs, else local)")
    p.add_argument("--workers", type=int, default=0, help="CPU workers when there is no GPU")
    args = p.parse_args(argv)

    from gwbatch.config import Campaign, load_run
    from gwbatch.io.store import read_meta
    from workflow.cluster import start_cluster
    from workflow.plan import chunk_task, member_plan
    from workflow.prepare import prepare_one

    loaded = load_run(args.config, [f"cluster.kind={args.cluster}", *args.set])
    members = {"": loaded} if isinstance(loaded, Campaign) else dict(loaded.members)
    out = args.out or Path(tempfile.mkdtemp())
    levels = [int(k) for k in args.levels.split(",")]
    jobs = {}
    for name, campaign in members.items():
        meta = read_meta(campaign.data.store)
        plan = member_plan(name, campaign, meta)
        if len(plan.chunks) < max(levels):
            raise SystemExit(f"{name or 'campaign'} has {len(plan.chunks)} chunks; levels need {max(levels)}")
        resources = prepare_one(plan, meta, out / (name or "run"), campaign.cluster)
        jobs[name or campaign.search.kind] = (meta, plan, resources)
    first = next(iter(members.values()))
    cfg = first.cluster.model_copy(update={"n_workers": args.workers or first.cluster.n_workers})
    record = {"config": str(args.config), "levels": levels, "repeats": args.repeats,
              "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv), "searches": {}}
    with start_cluster(cfg, "auto", max(levels)) as cluster:
        client = cluster.client
        workers = sorted(client.scheduler_info()["workers"])
        if len(workers) < max(levels):
            raise SystemExit(f"{len(workers)} workers; levels need {max(levels)}")
        record["backend"], record["workers"] = cluster.backend, len(workers)
        record["threads"] = client.run(thread_picture)

        def wave(label, k, meta, plan, resources):
            futures = [client.submit(profiled_task, plan.search, chunk_task(plan, meta, plan.chunks[i], cluster.backend),
                                     resources, workers=[workers[i]], allow_other_workers=False, pure=False,
                                     key=f"{label}-{k}-{i}-{time.monotonic_ns()}")
                       for i in range(k)]
            return client.gather(futures)

        for label, (meta, plan, resources) in jobs.items():
            wave(label, len(workers), meta, plan, resources)  # compile kernels, load banks on every worker
            per_level = {}
            for k in levels:
                runs = [r for _ in range(args.repeats) for r in wave(label, k, meta, plan, resources)]
                per_level[k] = {"wall": statistics.median(r["wall"] for r in runs),
                                "cpu": statistics.median(r["cpu"] for r in runs),
                                "functions": _median_functions(runs)}
                print(f"{label}: {k} at once: task {per_level[k]['wall']:.2f} s wall, "
                      f"{per_level[k]['cpu']:.2f} s CPU", flush=True)
            record["searches"][label] = {"levels": {str(k): {"wall": v["wall"], "cpu": v["cpu"]}
                                                    for k, v in per_level.items()},
                                         "growth": _growth(per_level[levels[0]]["functions"],
                                                           per_level[levels[-1]]["functions"])}
    for label, s in record["searches"].items():
        print(f"\n{label}: functions whose own time grows most from {levels[0]} to {levels[-1]} at once")
        for name, lo, hi in s["growth"][:12]:
            print(f"  {hi - lo:+7.3f} s  ({lo:.3f} -> {hi:.3f})  {name}")
    if args.result:
        args.result.write_text(json.dumps(record, indent=1))
    return 0


def _median_functions(runs: list[dict]) -> dict:
    names = {n for r in runs for n in r["functions"]}
    return {n: statistics.median(r["functions"].get(n, [0.0, 0.0])[0] for r in runs) for n in names}


def _growth(low: dict, high: dict) -> list:
    rows = [(n, low.get(n, 0.0), high.get(n, 0.0)) for n in set(low) | set(high)]
    return sorted(rows, key=lambda r: -(r[2] - r[1]))


if __name__ == "__main__":
    sys.exit(main())
