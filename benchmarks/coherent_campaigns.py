"""Campaigns of the coherent SPIIR search on simulated H1-L1-V1 data (issue 4 acceptance).

``injections``: binaries injected at network SNR 8-30 into design noise, searched with a bank
(default: the narrow BNS bank, 566 templates from 40 Hz); reports the detection efficiency against
injected network SNR, the P-P test of the skymaps (KS p-value over the found injections' credible
levels), the median 90% area, searched area and angular error.

``noise``: noise-only data at low thresholds; the zero-lag counts with FAR <= F over the zero-lag
livetime T against F*T (Poisson, 3 sigma) for F*T = 1, 10, 100, inclusive and exclusive FAR.

usage:
  python benchmarks/coherent_campaigns.py injections [--count 100] [--duration 2400] [--bank ...]
  python benchmarks/coherent_campaigns.py noise [--seeds 7 8] [--duration 2048]
Both take --backend/--cluster (default: numpy in-process; on a GPU machine: cupy local-cuda),
--out DIR (kept) and --json FILE.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from gwbatch.config import validate_campaign  # noqa: E402
from gwbatch.io.store import read_injections  # noqa: E402
from gwbatch.simulate import simulate_store  # noqa: E402
from gwbatch.simulate.cbc import CbcSpec  # noqa: E402
from workflow.campaign import run_campaign  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
IFOS = ("H1", "L1", "V1")


def campaign(store: Path, out: Path, args, **search):
    return validate_campaign({
        "name": out.name,
        "data": {"store": str(store)},
        "search": {"kind": "spiir", "bank": str(args.bank), "threshold": args.threshold, "psd_seconds": 256.0,
                   "batch": args.batch,
                   "coherent": {"sky_order": args.sky_order, "ifo_snr": args.ifo_snr,
                                "skymap_threshold": args.skymap_threshold,
                                **({"skymap_temperature": args.skymap_temperature} if args.skymap_temperature else {})},
                   **search},
        "coincidence": {"cluster_window": args.cluster_window},
        "background": {"slides": args.slides, "slide_step": args.slide_step},
        "plan": {"chunk": args.chunk},
        "cluster": {"kind": args.cluster},
        "backend": args.backend,
        "output": {"dir": str(out)},
    })


def injections(args, work: Path) -> dict:
    from gwbatch.config import load_bank_config
    from gwbatch.sky.skymap import pp_test

    bank = load_bank_config(args.bank)
    spec = CbcSpec(count=args.count, mass1=tuple(bank.mass1), mass2=tuple(bank.mass2), snr=(8.0, 30.0),
                   f_low=bank.f_low, min_spacing=args.spacing)
    started = time.perf_counter()
    store = simulate_store(work / "injections.zarr", ifos=IFOS, duration=args.duration, sample_rate=bank.sample_rate,
                           seed=args.seed, cbc=spec)
    simulated = time.perf_counter() - started
    logging.getLogger("gwbatch").info("simulated %d injections in %.0f s", args.count, simulated)
    run = run_campaign(campaign(store, work / "injections-run", args), progress=False)
    inj = run.reduced.injections
    analysed = inj[inj["analysed"]]
    edges = [8, 10, 12, 15, 20, 25, 30.01]
    which = np.digitize(analysed["snr"], edges) - 1
    bound = run.manifest["background"]["far_bound_hz"]
    efficiency = []
    for b in range(len(edges) - 1):
        sel = analysed[which == b]
        quiet = sel["found"] & (sel["found_far"] <= bound * (1 + 1e-9))
        efficiency.append({"snr": [edges[b], round(edges[b + 1], 2)], "injections": len(sel),
                           "found": int(sel["found"].sum()), "louder_than_all_background": int(quiet.sum())})
    clean = clean_background(run, read_injections(store), args.clean_window)
    for row, b in zip(efficiency, range(len(edges) - 1)):
        sel = analysed[(which == b) & analysed["found"]]
        row["louder_than_injection_free_background"] = int((sel["found_rank"] > clean["loudest_rank"]).sum())
    levels = analysed["credible_level"].dropna().to_numpy()
    ks, pvalue = pp_test(levels) if levels.size else (np.nan, np.nan)
    found = analysed[analysed["found"]]
    return {
        "bank": str(args.bank), "count": len(inj), "analysed": len(analysed), "found": int(analysed["found"].sum()),
        "efficiency": efficiency, "injection_free_background": clean,
        "with_skymap": int(levels.size), "pp_ks": ks, "pp_pvalue": pvalue,
        "temperature_scan": temperature_scan(run, analysed, args.temperatures),
        "median_area90_deg2": float(np.nanmedian(analysed["area90"])) if levels.size else None,
        "median_searched_area_deg2": float(np.nanmedian(analysed["searched_area"])) if levels.size else None,
        "median_sky_error_deg": float(np.nanmedian(found["sky_error_deg"])) if len(found) else None,
        "median_snr_ratio": float(np.median(found["found_snr"] / found["snr"])) if len(found) else None,
        "livetime_s": run.manifest["livetime"]["zero_lag_seconds"],
        "background_s": run.manifest["livetime"]["background_seconds"],
        "simulate_s": simulated, "run_wall_s": run.manifest["timing"]["wall_seconds"],
        "devices": run.manifest["devices"], "report": str(run.out / "report.html"),
    }


def clean_background(run, table, window: float) -> dict:
    """Trial events that read no detector within ``window`` s of an injection's arrival there: the
    background an injection-free stretch of the same data would give.  The loud trial events of an
    injection campaign are one detector's injection against shifted noise; a search's sensitivity is
    quoted against noise, as when injections are searched with the full data's background."""
    bg = run.reduced.background_events
    near = np.zeros(len(bg), bool)
    for ifo in IFOS:
        arrival = np.sort(table[f"time_{ifo}"].to_numpy())
        t = bg[f"time_{ifo}"].to_numpy()
        k = np.clip(np.searchsorted(arrival, t), 1, arrival.size - 1)
        gap = np.minimum(np.abs(t - arrival[k - 1]), np.abs(t - arrival[k]))
        near |= np.nan_to_num(gap, nan=np.inf) <= window
    kept = bg[~near]
    # time within the window of an injection in any detector is removed from the trials' livetime
    excluded = min(1.0, len(table) * len(IFOS) * 2 * window / run.manifest["livetime"]["zero_lag_seconds"])
    t_bg = run.manifest["livetime"]["background_seconds"] * (1 - excluded)
    return {"events": int(len(kept)), "of": int(len(bg)), "window_s": window, "livetime_s": t_bg,
            "loudest_rank": float(kept["rank"].max()) if len(kept) else 0.0,
            "far_bound_per_year": 365.25 * 86400 / t_bg if t_bg > 0 else None}


def temperature_scan(run, injections, temperatures) -> list[dict]:
    """P-P test and median 90% area of the found injections' skymaps re-widened to other
    temperatures: a map at T is ``exp(rho^2 / 2T)``, so the map at T' is the one at T to the power
    ``T / T'``, renormalised."""
    from gwbatch.io.skymaps import read_skymap
    from gwbatch.sky.grid import pixel_of
    from gwbatch.sky.skymap import credible_area, credible_level, pp_test

    base = run.reduced  # candidates and their maps, by file name
    t0 = run.manifest["campaign"]["search"]["coherent"]["skymap_temperature"]
    pairs = []
    for _, row in injections[injections["found"]].iterrows():
        name = base.candidates["skymap"].iat[int(row["candidate"])]
        if name:
            prob, _ = read_skymap(run.out / name)
            order = int(round(np.log2(np.sqrt(prob.size / 12))))
            pairs.append((np.log(np.maximum(prob, 1e-300)), int(pixel_of(order, row["ra"], row["dec"]))))
    out = []
    for t in temperatures:
        levels, areas = [], []
        for log_p, pixel in pairs:
            q = np.exp((log_p - log_p.max()) * t0 / t)
            q /= q.sum()
            levels.append(credible_level(q, pixel))
            areas.append(credible_area(q, 0.9))
        ks, pvalue = pp_test(levels) if levels else (np.nan, np.nan)
        out.append({"temperature": t, "ks": ks, "pvalue": pvalue,
                    "median_area90_deg2": float(np.median(areas)) if areas else None})
    return out


def noise(args, work: Path) -> dict:
    from gwbatch.config import load_bank_config

    fs = load_bank_config(args.bank).sample_rate
    rows, all_ok = [], True
    for seed in args.seeds:
        store = simulate_store(work / f"noise{seed}.zarr", ifos=IFOS, duration=args.duration, sample_rate=fs, seed=seed)
        run = run_campaign(campaign(store, work / f"noise{seed}-run", args), progress=False)
        cands = run.reduced.candidates
        live = run.manifest["livetime"]["zero_lag_seconds"]
        row = {"seed": seed, "livetime_s": live, "candidates": len(cands),
               "background_s": run.manifest["livetime"]["background_seconds"], "counts": {}}
        for ft in (1, 10, 100):
            counts = [int((cands[c] <= ft / live).sum()) for c in ("far", "far_exclusive")]
            ok = all(abs(n - ft) <= 3 * np.sqrt(ft) for n in counts)
            row["counts"][str(ft)] = {"inclusive": counts[0], "exclusive": counts[1], "within_3_sigma": ok}
            all_ok &= ok
        rows.append(row)
        print(f"seed {seed}: T {live:.0f} s, {len(cands)} candidates; " + ", ".join(
            f"F*T={k}: {v['inclusive']}/{v['exclusive']}" for k, v in row["counts"].items()), flush=True)
    return {"bank": str(args.bank), "seeds": rows, "all_within_3_sigma": bool(all_ok)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["injections", "noise"])
    ap.add_argument("--bank", type=Path, default=None, help="bank YAML (injections: bns-narrow; noise: bbh-small)")
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--duration", type=float, default=None, help="seconds (injections: 2400; noise: 2048)")
    ap.add_argument("--spacing", type=float, default=16.0, help="seconds between injected mergers")
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--seeds", type=int, nargs="+", default=[7, 8])
    ap.add_argument("--threshold", type=float, default=None, help="pivot trigger threshold (5.5; noise: 5.0)")
    ap.add_argument("--ifo-snr", type=float, default=None, help="coherent.ifo_snr (4.0; noise: 3.5)")
    ap.add_argument("--skymap-threshold", type=float, default=7.0)
    ap.add_argument("--sky-order", type=int, default=5)
    ap.add_argument("--slides", type=int, default=100)
    ap.add_argument("--slide-step", type=float, default=0.1)
    ap.add_argument("--cluster-window", type=float, default=0.5)
    ap.add_argument("--chunk", type=float, default=512.0)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--clean-window", type=float, default=1.0,
                    help="injections: seconds around each arrival that the injection-free background leaves out")
    ap.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0])
    ap.add_argument("--skymap-temperature", type=float, default=None, help="coherent.skymap_temperature")
    ap.add_argument("--backend", default="numpy")
    ap.add_argument("--cluster", default="in-process")
    ap.add_argument("--out", type=Path, default=None, help="keep stores and runs here (default: a temporary dir)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    is_noise = args.what == "noise"
    args.bank = args.bank or ROOT / "configs" / "banks" / ("bbh-small.yaml" if is_noise else "bns-narrow.yaml")
    args.duration = args.duration or (2048.0 if is_noise else 2400.0)
    args.threshold = args.threshold or (5.0 if is_noise else 5.5)
    args.ifo_snr = args.ifo_snr or (3.5 if is_noise else 4.0)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.out or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        result = (noise if is_noise else injections)(args, work)
    result["command"] = " ".join(sys.argv)
    text = json.dumps(result, indent=1, default=float)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
