"""Profile one chunk task of a campaign's search (cProfile, host view; CuPy calls synchronised).

    python benchmarks/profile_chunk.py CONFIG [--member NAME] [--chunk 0] [--set key=value ...] [--sort tottime]

Runs the chunk once to warm caches and compile kernels, then again under cProfile, and prints the
functions with the most cumulative time.  GPU work shows up where the host waits for it.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("config", type=Path)
    p.add_argument("--member", default="")
    p.add_argument("--chunk", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="run directory whose banks/ cache to use")
    p.add_argument("--backend", default="auto")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--sort", action="append", default=[], choices=("cumulative", "tottime", "ncalls", "filename"),
                   help="pstats order(s) to print, repeatable (default cumulative)")
    args = p.parse_args(argv)
    from gwbatch._xp import resolve_backend
    from gwbatch.config import Campaign, load_run
    from gwbatch.io.store import read_meta
    from gwbatch.searches import get_search
    from workflow.plan import chunk_task, make_plan
    from workflow.prepare import prepare_one

    loaded = load_run(args.config, args.set)
    campaign = loaded if isinstance(loaded, Campaign) else loaded.members[args.member]
    meta = read_meta(campaign.data.store)
    plan = make_plan(campaign, meta)
    out = args.out or Path(tempfile.mkdtemp())
    resources = prepare_one(plan, meta, out, campaign.cluster)
    backend = resolve_backend(args.backend)
    search = get_search(plan.search)
    task = chunk_task(plan, meta, plan.chunks[args.chunk], backend)
    for label in ("warm", "timed"):
        started = time.perf_counter()
        if label == "timed":
            prof = cProfile.Profile()
            result = prof.runcall(search.process, task, resources)
        else:
            result = search.process(task, resources)
        print(f"{label}: {time.perf_counter() - started:.2f} s, {len(result.triggers)} triggers, "
              f"device peak {result.device_peak_bytes / 2**30:.1f} GiB")
    for order in args.sort or ["cumulative"]:
        pstats.Stats(prof).sort_stats(order).print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
