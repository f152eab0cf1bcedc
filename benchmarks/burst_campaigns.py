"""Campaigns of the burst search on simulated H1-L1-V1 design noise (issue 5 acceptance).

``noise``: noise-only data searched with many lags.  Reports the zero-lag counts with FAR <= F over
the zero-lag livetime T against F*T (Poisson, 3 sigma) for F*T = 1, 10, 100 (inclusive and
exclusive FAR), and keeps the lag events' ``rho`` as an injection-free background (``--out``).

``injections``: sine-Gaussians (70, 235, 554 Hz; Q 3 and 9) and white-noise bursts (100-200 and
250-350 Hz, 0.1 s) at hrss log-uniform in ``--hrss``; reports the detection efficiency against
hrss and network SNR, the median angular error, and the fraction of injections with network SNR
>= 20 found with FAR <= 1 per 100 days, the FAR taken against the injection-free background of
``noise`` runs (``--background DIR [DIR ...]``, pooled: their livetime must reach 100 days) and
against the campaign's own lags.

usage:
  python benchmarks/burst_campaigns.py noise [--duration 8192] [--slides 1000] [--out DIR]
  python benchmarks/burst_campaigns.py injections [--count 200] [--background DIR] [--out DIR]
Both take --backend/--cluster (default numpy in-process; on a GPU machine cupy local-cuda),
--sample-rate (2048), --sky-order and --json FILE.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from gwbatch.config import validate_campaign  # noqa: E402
from gwbatch.simulate import simulate_store  # noqa: E402
from gwbatch.simulate.bursts import BurstSpec  # noqa: E402
from workflow.campaign import run_campaign  # noqa: E402

IFOS = ("H1", "L1", "V1")
DAY = 86400.0


def campaign(store: Path, out: Path, args, **search):
    return validate_campaign({
        "name": out.name,
        "data": {"store": str(store)},
        "search": {"kind": "burst", "sky_order": args.sky_order, "f_high": min(1024.0, args.sample_rate / 2 - 32),
                   "rho_min": args.rho_min, "cc_min": args.cc_min, **search},
        "background": {"slides": args.slides, "slide_step": args.slide_step},
        "plan": {"chunk": args.chunk},
        "cluster": {"kind": args.cluster},
        "backend": args.backend,
        "output": {"dir": str(out)},
    })


def poisson_check(far: np.ndarray, t_zero: float, products=(1, 10, 100)) -> list[dict]:
    rows = []
    for ft in products:
        n = int(np.count_nonzero(far <= ft / t_zero))
        rows.append({"F_T": ft, "count": n, "sigma": (n - ft) / np.sqrt(ft), "within_3_sigma": abs(n - ft) <= 3 * np.sqrt(ft)})
    return rows


def noise(args, work: Path) -> dict:
    store = simulate_store(work / "noise.zarr", ifos=IFOS, duration=args.duration, sample_rate=args.sample_rate,
                           seed=args.seed, overwrite=True)
    started = time.perf_counter()
    run = run_campaign(campaign(store, work / "noise-run", args), progress=False, overwrite=True)
    seconds = time.perf_counter() - started
    live = run.manifest["livetime"]
    cands = run.reduced.candidates
    t_zero, t_bg = live["zero_lag_seconds"], live["background_seconds"]
    return {
        "mode": "noise", "duration_s": args.duration, "sample_rate": args.sample_rate, "slides": args.slides,
        "slide_step": args.slide_step, "chunk": args.chunk, "rho_min": args.rho_min, "cc_min": args.cc_min,
        "sky_order": args.sky_order, "backend": args.backend, "cluster": args.cluster, "seconds": seconds,
        "zero_lag_s": t_zero, "background_s": t_bg, "background_days": t_bg / DAY,
        "zero_lag_events": len(cands), "lag_events": len(run.reduced.background_events),
        "inclusive": poisson_check(cands["far"].to_numpy(), t_zero),
        "exclusive": poisson_check(cands["far_exclusive"].to_numpy(), t_zero),
        "background_rho_max": float(run.reduced.background_events["rank"].max()) if len(run.reduced.background_events) else None,
        "run": str(work / "noise-run"),
    }


def injection_free_far(rho: np.ndarray, backgrounds: list[Path]) -> tuple[np.ndarray, float]:
    """FAR (Hz) of each ``rho`` against noise runs' lag events (pooled), and their total livetime."""
    bg = np.sort(np.concatenate([pd.read_parquet(d / "background.parquet")["rank"].to_numpy() for d in backgrounds]))
    t_bg = sum(json.loads((d / "manifest.json").read_text())["livetime"]["background_seconds"] for d in backgrounds)
    louder = len(bg) - np.searchsorted(bg, rho, side="left")
    return louder / t_bg, t_bg


def injections(args, work: Path) -> dict:
    spec = BurstSpec(count=args.count, hrss=tuple(args.hrss), min_spacing=args.spacing)
    store = simulate_store(work / "inj.zarr", ifos=IFOS, duration=args.duration, sample_rate=args.sample_rate,
                           seed=args.seed, bursts=spec, overwrite=True)
    started = time.perf_counter()
    run = run_campaign(campaign(store, work / "inj-run", args), progress=False, overwrite=True)
    seconds = time.perf_counter() - started
    inj = run.reduced.injections
    inj = inj[inj["analysed"]].reset_index(drop=True)
    from gwbatch.io.store import read_injections

    table = read_injections(store).set_index("id")
    inj["hrss"] = table.loc[inj["id"], "hrss"].to_numpy()
    result = {"mode": "injections", "count": len(inj), "duration_s": args.duration, "sample_rate": args.sample_rate,
              "hrss_range": list(args.hrss), "sky_order": args.sky_order, "slides": args.slides,
              "backend": args.backend, "cluster": args.cluster, "seconds": seconds}
    edges = np.geomspace(args.hrss[0], args.hrss[1], 9)
    rows = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        part = inj[(inj["hrss"] >= lo) & (inj["hrss"] < hi)]
        rows.append({"hrss_lo": lo, "hrss_hi": hi, "n": len(part), "found": int(part["found"].sum()),
                     "median_network_snr": float(part["snr"].median()) if len(part) else None})
    result["efficiency_hrss"] = rows
    snr_edges = [0, 5, 10, 15, 20, 30, 50, np.inf]
    result["efficiency_snr"] = [{"snr_lo": lo, "snr_hi": hi, "n": int(((inj["snr"] >= lo) & (inj["snr"] < hi)).sum()),
                                 "found": int((inj["found"] & (inj["snr"] >= lo) & (inj["snr"] < hi)).sum())}
                                for lo, hi in zip(snr_edges[:-1], snr_edges[1:])]
    found = inj[inj["found"]]
    result["median_sky_error_deg"] = float(found["sky_error_deg"].median())
    result["sky_error_deg_quantiles"] = [float(q) for q in found["sky_error_deg"].quantile([0.1, 0.5, 0.9])]
    loud = inj[inj["snr"] >= 20]
    limit = 1.0 / (100 * DAY)
    result["snr20"] = {"n": len(loud), "found": int(loud["found"].sum()),
                       "found_far_own_lags": int((loud["found"] & (loud["found_far"] <= limit)).sum()),
                       "own_lags_background_days": run.manifest["livetime"]["background_seconds"] / DAY}
    if args.background:
        far, t_bg = injection_free_far(loud["found_snr"].fillna(-np.inf).to_numpy(), args.background)
        ok = loud["found"].to_numpy() & (far <= limit)
        result["snr20"] |= {"injection_free_background_days": t_bg / DAY, "found_far_le_1_per_100_days": int(ok.sum()),
                            "fraction": float(ok.mean()) if len(loud) else None,
                            "background_rho_max": float(max(pd.read_parquet(d / "background.parquet")["rank"].max()
                                                            for d in args.background))}
    result["run"] = str(work / "inj-run")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("noise", "injections"))
    ap.add_argument("--duration", type=float, default=None)
    ap.add_argument("--sample-rate", type=float, default=2048.0)
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--hrss", type=float, nargs=2, default=[1.5e-23, 3e-22])
    ap.add_argument("--spacing", type=float, default=10.0)
    ap.add_argument("--slides", type=int, default=None)
    ap.add_argument("--slide-step", type=float, default=0.5)
    ap.add_argument("--chunk", type=float, default=1024.0)
    ap.add_argument("--rho-min", type=float, default=None)
    ap.add_argument("--cc-min", type=float, default=0.5)
    ap.add_argument("--sky-order", type=int, default=None)
    ap.add_argument("--background", type=Path, nargs="+",
                    help="noise runs' directories (their lag events pooled: the injection-free background)")
    ap.add_argument("--backend", default="numpy")
    ap.add_argument("--cluster", default="in-process")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    noisy = args.mode == "noise"
    args.duration = args.duration or (8192.0 if noisy else 2048.0)
    args.slides = args.slides if args.slides is not None else (1000 if noisy else 100)
    args.rho_min = args.rho_min or (3.5 if noisy else 5.0)
    args.sky_order = args.sky_order if args.sky_order is not None else (5 if noisy else 6)
    work = args.out or Path(tempfile.mkdtemp(prefix="burst-"))
    work.mkdir(parents=True, exist_ok=True)
    result = noise(args, work) if noisy else injections(args, work)
    print(json.dumps(result, indent=1, default=float))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=float) + "\n")


if __name__ == "__main__":
    main()
