"""False-alarm calibration on noise-only simulations (issue 2 acceptance).

For each seed: simulate noise-only H1/L1/V1 data (design PSDs), run the demo campaign at a low
per-detector threshold, and compare the number of zero-lag candidates with FAR <= F over the
zero-lag livetime T against F*T (Poisson; 3 sigma) for F*T = 1, 10, 100, for the inclusive and
the exclusive FAR.

usage: python benchmarks/far_calibration.py [--seeds 7 8 9 10] [--duration 2048] [--threshold 3.5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from gwbatch.config import load_campaign  # noqa: E402
from gwbatch.simulate import simulate_store  # noqa: E402
from workflow.campaign import run_campaign  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[7, 8, 9, 10])
    ap.add_argument("--duration", type=float, default=2048.0)
    ap.add_argument("--threshold", type=float, default=3.5)
    args = ap.parse_args()
    print(f"{'seed':>4s} {'T (s)':>7s} {'cands':>6s}  " + "  ".join(f"F*T={ft:<3d} incl/excl" for ft in (1, 10, 100)) + "  within 3 sigma")
    all_ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            store = simulate_store(Path(tmp) / f"noise{seed}.zarr", ifos=("H1", "L1", "V1"), duration=args.duration,
                                   sample_rate=2048, seed=seed)
            campaign = load_campaign(ROOT / "configs" / "demo.yaml", [
                f"data.store={store}", f"output.dir={Path(tmp) / f'run{seed}'}", "cluster.kind=in-process",
                "backend=numpy", f"search.threshold={args.threshold}"])
            run = run_campaign(campaign, progress=False)
            cands = run.reduced.candidates
            live = run.manifest["livetime"]["zero_lag_seconds"]
            cells, ok = [], True
            for ft in (1, 10, 100):
                counts = [int((cands[c] <= ft / live).sum()) for c in ("far", "far_exclusive")]
                ok &= all(abs(n - ft) <= 3 * np.sqrt(ft) for n in counts)
                cells.append(f"{counts[0]:>6d}/{counts[1]:<6d}")
            all_ok &= ok
            print(f"{seed:4d} {live:7.0f} {len(cands):6d}  " + "  ".join(cells) + f"  {'yes' if ok else 'NO'}")
    print("all within 3 sigma" if all_ok else "SOME OUTSIDE 3 sigma")


if __name__ == "__main__":
    main()
