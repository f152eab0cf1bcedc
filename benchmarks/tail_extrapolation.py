"""How far a search's tail fit may be trusted: FARs extrapolated from a few time slides against
those counted with many more, on the same noise (issue 26).

A search states FARs beyond its loudest background event by an exponential fit to the tail of its
background (:func:`gwbatch.background.significance.fit_tail`; PyCBC's trigger-fit form).  This
runs one search on noise-only data with ``--base`` slides (lags, trials) and ``--deep`` more, fits
the tail of the base slides' events alone, as a campaign with only the base slides would, and
compares its prediction with the counts of base and deep events together, at the ranks where the
base slides hold no event (where the fit is all a campaign with them would have).  For each of the
``k``-th loudest events of the whole background: the fit's expected count above that rank over
the whole background livetime, the ``k`` counted, how many decades beyond the base slides' bound
that is, and whether the count is within the fit's Poisson 3σ (more events than that would make
the extrapolated FAR too small: anti-conservative).

usage: python benchmarks/tail_extrapolation.py --search burst [--seed 5] [--duration 1024]
       [--base 10] [--deep 400] [--tail 100] [--set KEY=VALUE ...] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from scipy.stats import poisson  # noqa: E402

from benchmarks.far_calibration import SEARCHES, campaign_for  # noqa: E402
from gwbatch.background.significance import fit_tail  # noqa: E402
from gwbatch.simulate import simulate_store  # noqa: E402
from workflow.campaign import run_campaign  # noqa: E402

#: The counts compared (the k-th loudest event of the whole background).
RANKS = (300, 100, 30, 10, 5, 3, 2, 1)
#: One-sided 3σ.
P3 = 0.00135


def compare(base: np.ndarray, deep: np.ndarray, base_time: float, deep_time: float, cut: float, tail: int):
    """Rows comparing the fit to ``base`` (its ``tail`` loudest) with the counts of ``base`` and
    ``deep`` together over both livetimes, at each of :data:`RANKS` that lies above the loudest
    base event and at or above ``cut`` (where ``deep`` is complete); and the fit."""
    fit = fit_tail(base, tail)
    if fit is None:
        raise SystemExit(f"too few base events to fit ({base.size})")
    total = base_time + deep_time
    every = np.sort(np.concatenate([base, deep[deep >= cut]]))[::-1]
    rows = []
    for k in RANKS:
        if k > every.size:
            continue
        x = float(every[k - 1])
        if x <= fit.loudest or x < cut:
            continue
        expected = float(fit.n_louder(x)) * total / base_time
        upper = float(fit.n_louder(x, fit.upper_slope)) * total / base_time
        rows.append({"k": k, "rank": x, "expected": expected, "expected_1sigma_up": upper,
                     "ratio": expected / k, "decades": float(np.log10((1.0 / base_time) / (k / total))),
                     "within_fit_limit": bool(x <= fit.limit),
                     # anti-conservative only if this many or more is improbable under the fit
                     "conservative": bool(poisson.sf(k - 1, expected) > P3)})
    return rows, fit


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--search", choices=sorted(SEARCHES), default="burst")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--duration", type=float, default=1024.0)
    ap.add_argument("--base", type=int, default=10, help="slides the fit sees")
    ap.add_argument("--deep", type=int, default=400, help="further slides, counted above their cut")
    ap.add_argument("--tail", type=int, default=100, help="background events fitted (background.far_tail)")
    ap.add_argument("--set", action="append", default=[], help="campaign overrides KEY=VALUE")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    spec = SEARCHES[args.search]
    sets = [f"background.slides={args.base}", f"background.deep_slides={args.deep}",
            f"background.far_tail={args.tail}", *args.set]
    with tempfile.TemporaryDirectory() as tmp:
        store = simulate_store(Path(tmp) / "noise.zarr", ifos=spec["ifos"], duration=args.duration,
                               sample_rate=spec["rate"], seed=args.seed)
        started = time.perf_counter()
        run = run_campaign(campaign_for(args.search, store, Path(tmp) / "run", sets), progress=False)
        seconds = time.perf_counter() - started
    live, bg = run.manifest["livetime"], run.manifest["background"]
    base_time = float(np.sum(live["per_slide_seconds"][1:]))
    deep_time = float(live["deep_slides_seconds"])
    cut = bg["deep_cut"] if bg["deep_cut"] is not None else -np.inf
    events = run.reduced.background_events
    slide = events["slide"].to_numpy()
    rank = events["rank"].to_numpy(np.float64)
    rows, fit = compare(rank[slide <= args.base], rank[slide > args.base], base_time, deep_time, cut, args.tail)
    print(f"{args.search}, seed {args.seed}, {args.duration:g} s: {args.base} + {args.deep} slides, run {seconds:.0f} s; "
          f"base {int(np.sum(slide <= args.base))} events over {base_time:.4g} s (bound {1 / base_time:.3g} Hz), "
          f"deep {int(np.sum(slide > args.base))} at or above {cut:.4g} over {deep_time:.4g} s; "
          f"fit to the base's {fit.count} loudest above {fit.threshold:.4g}: slope {fit.slope:.3g} ± {fit.slope_error:.2g}, "
          f"loudest {fit.loudest:.4g}, trusted to {fit.limit:.4g}; overrides: {' '.join(args.set) or 'none'}")
    print("| k-th loudest of all | rank | counted | fit's expectation (1σ up) | expected / counted | decades past the base bound | within the fit's limit | conservative (3σ) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['k']} | {r['rank']:.3f} | {r['k']} | {r['expected']:.3g} ({r['expected_1sigma_up']:.3g}) | "
              f"{r['ratio']:.2f} | {r['decades']:.2f} | {'yes' if r['within_fit_limit'] else 'no'} | "
              f"{'yes' if r['conservative'] else '**no**'} |")
    if args.json:
        args.json.write_text(json.dumps({"command": " ".join(sys.argv), "seconds": seconds, "base_time": base_time,
                                         "deep_time": deep_time, "cut": cut, "fit": replace(fit, livetime=base_time).summary(),
                                         "rows": rows}, indent=1, default=float))
    return 0 if all(r["conservative"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
