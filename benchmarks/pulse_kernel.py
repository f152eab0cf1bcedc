"""Single-pulse search throughput: boxcar kernel and whole per-series search.

Problem (issue 2): 3 series x 2^26 samples, boxcar widths 1..8192 samples through the decimation
plan [32, 16 x 8] (AstroAccelerate's scheme), threshold 6 sigma.  Reports samples/s for

- kernel: every round's pairwise decimation and boxcar launch (what the GPU kernel does),
- search: the whole per-series search (statistics, rounds, threshold, merging) as a campaign runs it,

for the amplitude and the energy series, timed with CUDA events after a warm-up (median of
repeats).  On a machine without a GPU, ``--backend numpy`` times the CPU twin (use a smaller
``--log2n``).

usage: python benchmarks/pulse_kernel.py [--backend cupy|numpy] [--log2n 26] [--series 3]
                                         [--repeat 10] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks.timing import median_seconds  # noqa: E402
from gwbatch._xp import device_name, get_xp  # noqa: E402
from gwbatch.searches.pulse import PulseSearchConfig  # noqa: E402
from gwbatch.pulse.boxcar import run_rounds  # noqa: E402
from gwbatch.pulse.plan import boxcar_plan  # noqa: E402
from gwbatch.pulse.search import search_series  # noqa: E402
from gwbatch.pulse.series import round_constants, sigma_n  # noqa: E402

PLAN = [32] + [16] * 8


def round_inputs(xp, plan, kind: str, mean: float, std: float, threshold: float):
    """Per-round kernel constants (host arrays, made once, as the search does per series)."""
    out = []
    for rnd in plan.rounds:
        widths = np.arange(rnd.first_width, rnd.last_width + 1)
        d = rnd.decimation
        consts = round_constants(kind, widths, mean * d, sigma_n(widths, std * np.sqrt(d), "white"), threshold)
        out.append((rnd, consts))
    return out


def kernel_rounds(xp, series, valid, n, rounds, kind: str, threshold: float):
    """Every round's launch (boxcars, threshold, next round's decimated series) for one series."""
    plan_rounds = [rnd for rnd, _ in rounds]
    results = run_rounds(series, valid, plan_rounds, lambda k, _s: rounds[k][1], threshold, kind == "energy", n,
                         measures_series=False)
    return sum(int(r[0].size) for r in results)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cupy", choices=("cupy", "numpy"))
    ap.add_argument("--log2n", type=int, default=26)
    ap.add_argument("--series", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    xp = get_xp(args.backend)
    n = 1 << args.log2n
    plan = boxcar_plan(PLAN)
    rng = np.random.default_rng(0)
    data = [xp.asarray(rng.standard_normal(n).astype(np.float32)) for _ in range(args.series)]
    valid = xp.ones(n, dtype=bool)
    valid_u8 = xp.ones(n, dtype=xp.uint8)
    total = args.series * n
    rows = []
    for kind in ("amplitude", "energy"):
        padded = []
        for d in data:
            y = d if kind == "amplitude" else d * d
            padded.append(xp.concatenate([y, xp.full(plan.max_width, float(y.mean()), dtype=xp.float32)]))
        mean, std = (0.0, 1.0) if kind == "amplitude" else (1.0, np.sqrt(2.0))
        rounds = round_inputs(xp, plan, kind, mean, std, 6.0)
        t_kernel = median_seconds(lambda: [kernel_rounds(xp, s, valid_u8, n, rounds, kind, 6.0) for s in padded], args.repeat, xp)
        cfg = PulseSearchConfig(series=kind, threshold=6.0, decimation=PLAN).settings()
        t_search = median_seconds(lambda: [search_series(d, valid, cfg, 1.0) for d in data], max(1, args.repeat // 3), xp)
        rows.append({"series": kind, "kernel_s": t_kernel, "kernel_samples_per_s": total / t_kernel,
                     "search_s": t_search, "search_samples_per_s": total / t_search})
    result = {
        "device": device_name(args.backend), "backend": args.backend, "samples": total,
        "series": args.series, "plan": PLAN, "max_width": plan.max_width, "rows": rows,
    }
    print(f"device {result['device']}; {args.series} x 2^{args.log2n} samples; widths 1..{plan.max_width}")
    print(f"{'series':10s} {'kernel ms':>10s} {'kernel samples/s':>17s} {'search ms':>10s} {'search samples/s':>17s}")
    for r in rows:
        print(f"{r['series']:10s} {1e3 * r['kernel_s']:10.3f} {r['kernel_samples_per_s']:17.3e} "
              f"{1e3 * r['search_s']:10.3f} {r['search_samples_per_s']:17.3e}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
