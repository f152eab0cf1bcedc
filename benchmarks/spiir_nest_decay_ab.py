"""Nested channels' threshold (``subbands.NEST_DECAY``) A/B on the GPU: one process, each threshold's
plan of the same BNS templates (``--distinct`` of the benchmark region, repeated to ``--templates``),
``filter_subbands`` over ``--seconds`` of noise, medians of 7, three rounds alternating; and the GPU
against the twin for each threshold on 4 templates x 40 s.

    python benchmarks/spiir_nest_decay_ab.py --json benchmarks/results/spiir_nest_decay_ab_h200.json
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None) -> int:
    import cupy

    from benchmarks.spiir_multirate import _build, bank_region
    from gwbatch.spiir import subbands as S

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--distinct", type=int, default=32)
    ap.add_argument("--templates", type=int, default=1024)
    ap.add_argument("--seconds", type=int, default=64)
    ap.add_argument("--thresholds", default="512,256,384")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(1)  # the kernel benchmark's region and seed
    path, masses, _, fs, _, _ = bank_region("bns", args.distinct, args.templates, rng)
    with ProcessPoolExecutor() as pool:
        single = list(pool.map(_build, [(path, m1, m2, False) for m1, m2 in masses]))
    distinct = [(bt.a, bt.b, bt.d) for bt in single]
    filters = (distinct * -(-args.templates // len(distinct)))[: args.templates]
    x = cupy.asarray(np.random.default_rng(1).standard_normal(args.seconds * int(fs)).astype(np.float32))
    xs = np.random.default_rng(5).standard_normal(40 * int(fs)).astype(np.float32)
    plans, out = {}, {}
    for nd in (int(v) for v in args.thresholds.split(",")):
        S.NEST_DECAY = nd
        plans[nd] = S.channel_plan(filters, fs)
        small = S.channel_plan(distinct[:4], fs)
        z, twin = cupy.asnumpy(S.filter_subbands(cupy.asarray(xs), small)), S.filter_subbands(xs, small)
        out[nd] = {"updates_per_sample": plans[nd].updates_per_sample(), "s": [],
                   "gpu_vs_twin": float((np.abs(z - twin).max(axis=1) / np.abs(twin).max(axis=1)).max())}
        S.filter_subbands(x, plans[nd])

    def median(plan) -> float:
        times = []
        for _ in range(7):
            a, b = cupy.cuda.Event(), cupy.cuda.Event()
            a.record()
            S.filter_subbands(x, plan)
            b.record()
            b.synchronize()
            times.append(cupy.cuda.get_elapsed_time(a, b) / 1e3)
        return float(np.median(times))

    for _ in range(3):
        for nd, plan in plans.items():
            out[nd]["s"].append(median(plan))
    print(json.dumps(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
