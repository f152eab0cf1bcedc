"""The SPIIR search's deep trials on long two-detector chunks: chunk-stage cost and counted reach.

Simulates H1-L1 design noise with a few loud binary-black-hole injections (``configs/banks/
bbh-small.yaml`` masses, network SNR 15-30), then runs the coherent SPIIR search on it with
``background.slides = 100`` and each ``--deep`` value in turn (A/B/A/B when values repeat), each
run in its own output directory.  Prints one JSON line per run: the chunk stage's seconds (sum over
chunks), the campaign's deep cut, the counted IFAR reach (``background.ifar_reach_years``) and the
same scaled to 30 days of data, the number of background events kept, and the five loudest
candidates' rank, FAR and FAR kind.

The settings are those of ``configs/month.yaml``'s SPIIR member: chunks of 8192 s and a 0.05 s
step hold 1.6e5 trials, and 100 + 125000 trials reach 1.03e4 yr per 30 days by counting.

usage: python benchmarks/deep_trials.py --backend cupy --duration 16384 --deep 0 125000 0 125000
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gwbatch.config import validate_campaign  # noqa: E402
from gwbatch.simulate import simulate_store  # noqa: E402
from gwbatch.simulate.cbc import CbcSpec  # noqa: E402
from workflow.campaign import run_campaign  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SECONDS_30_DAYS = 30 * 86400.0


def campaign(store: Path, out: Path, backend: str, chunk: float, step: float, deep: int) -> dict:
    return {
        "name": "deep-trials", "data": {"store": str(store)},
        "search": {"kind": "spiir", "bank": str(REPO / "configs/banks/bbh-small.yaml"), "threshold": 5.0,
                   "psd_seconds": 128.0, "batch": 64, "coherent": {"sky_order": 5}},
        "coincidence": {"cluster_window": 0.5},
        "background": {"slides": 100, "slide_step": step, "deep_slides": deep, "far_tail": 100},
        "plan": {"chunk": chunk}, "cluster": {"kind": "in-process"}, "backend": backend,
        "output": {"dir": str(out)},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("numpy", "cupy"), default="numpy")
    ap.add_argument("--duration", type=float, default=16384.0, help="seconds of H1-L1 data (1024 Hz)")
    ap.add_argument("--chunk", type=float, default=8192.0, help="plan.chunk (s)")
    ap.add_argument("--step", type=float, default=0.05, help="background.slide_step (s)")
    ap.add_argument("--deep", type=int, nargs="+", default=[0, 125000], help="background.deep_slides per run")
    ap.add_argument("--seed", type=int, default=9)
    ap.add_argument("--work", type=Path, help="where the store and runs go (default: a temporary directory)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        store = work / f"h1l1-{int(args.duration)}s-seed{args.seed}.zarr"
        if not store.exists():
            simulate_store(store, ifos=("H1", "L1"), duration=args.duration, sample_rate=1024.0, seed=args.seed,
                           cbc=CbcSpec(count=4, mass1=(10, 16), mass2=(10, 16), snr=(15, 30),
                                           min_spacing=min(600.0, args.duration / 8)))
        for rep, deep in enumerate(args.deep):
            cfg = validate_campaign(campaign(store, work / f"run{rep}-deep{deep}", args.backend, args.chunk, args.step,
                                             deep))
            start = time.perf_counter()
            result = run_campaign(cfg, progress=False)
            wall = time.perf_counter() - start
            m = result.manifest
            reach = m["background"]["ifar_reach_years"]
            top = result.reduced.candidates.sort_values("rank", ascending=False).head(5)
            print(json.dumps({
                "deep_slides": deep, "wall_s": round(wall, 1),
                "chunk_stage_s": round(m["timing"]["chunk_seconds_total"], 2),
                "deep_cut": m["background"]["deep_cut"], "ifar_reach_years": reach,
                "ifar_reach_years_per_30_days": reach * SECONDS_30_DAYS / m["livetime"]["zero_lag_seconds"],
                "background_events": len(result.reduced.background_events),
                "loudest": [[round(float(r), 3), float(f), k] for r, f, k in zip(top["rank"], top["far"], top["far_kind"])],
            }), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
