"""Sensitive volume-time of a finished SPIIR injection run against an independent estimate (issue 26).

The run's VT at an IFAR threshold (``gwbatch.sensitivity.sensitive_vt``: injections counted as
found when a candidate with that IFAR recovered them) is compared with the VT of a detection
model that uses neither the matching of candidates to injections nor their FARs: an injection
counts when its injected (optimal) network SNR exceeds the search's ranking-statistic threshold
at that IFAR (the rank of the loudest zero-lag candidate that falls short of it) and enough
detectors see it for the coherent stage.  The two agree when the search recovers the injected
SNR without bias and its noise scatters injections across the threshold as often up as down.

usage: python benchmarks/vt_check.py RUN_DIR [--ifar 1.0] [--bootstrap 1000]
       python benchmarks/vt_check.py --simulate OUT --duration 4096 --seed 5   (the BNS campaign, then the check)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from gwbatch.background.far import SECONDS_PER_YEAR  # noqa: E402
from gwbatch.sensitivity import sensitive_vt  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

#: The BNS campaign: H1-L1 design noise at 2048 Hz, 1.38-1.42 Msun binaries (TaylorF2 from 60 Hz)
#: uniform in comoving volume out to 350 Mpc, a 173-template bank built for the design PSD.
BANK = """name: bns-vt
approximant: TaylorF2
mass1: [1.36, 1.5]
mass2: [1.36, 1.5]
f_low: 60.0
sample_rate: 2048
placement: {method: stochastic, minimal_match: 0.97, seed: 1}
spiir: {overlap_target: 0.99, epsilons: [0.04, 0.02, 0.01, 0.005], least_squares: true}
"""


def rank_threshold(candidates: pd.DataFrame, ifar_years: float) -> float:
    """The search's ranking-statistic threshold at an IFAR, as measured on its own zero-lag
    candidates: the rank of the loudest candidate whose IFAR falls short of ``ifar_years`` (every
    candidate ranked above it reached the IFAR)."""
    rank = candidates["rank" if "rank" in candidates else "snr"].to_numpy(np.float64)
    short = rank[candidates["ifar_years"].to_numpy(np.float64) < ifar_years]
    return float(short.max()) if short.size else -np.inf


def optimal_vt(injections: pd.DataFrame, livetime: float, threshold: float, ifos: list[str], ifo_snr: float,
               min_ifos: int) -> tuple[float, int]:
    """VT (Mpc^3 yr) and count of the injections the detection model finds: injected network SNR
    above ``threshold`` and at least ``min_ifos`` detectors with injected SNR at least ``ifo_snr``
    (the coherent stage's own network requirement)."""
    inj = injections[injections["analysed"].to_numpy(bool)]
    weight = inj["volume"].to_numpy(np.float64) / (1.0 + inj["redshift"].to_numpy(np.float64))
    loud = np.stack([inj[f"injected_snr_{ifo}"].to_numpy(np.float64) >= ifo_snr for ifo in ifos]).sum(axis=0)
    hit = (inj["snr"].to_numpy() > threshold) & (loud >= min_ifos)
    return float(np.mean(weight * hit)) * livetime / SECONDS_PER_YEAR, int(hit.sum())


def check(run: Path, ifar: float, bootstrap: int) -> dict:
    manifest = json.loads((run / "manifest.json").read_text())
    injections = pd.read_parquet(run / "injections.parquet")
    livetime = manifest["livetime"]["zero_lag_seconds"]
    vt = sensitive_vt(injections, livetime, [ifar], bootstrap=bootstrap).iloc[0]
    x = rank_threshold(pd.read_parquet(run / "candidates.parquet"), ifar)
    search = manifest["campaign"]["search"]
    independent, n_model = optimal_vt(injections, livetime, x, manifest["plan"]["ifos"],
                                      search["coherent"]["ifo_snr"], manifest["campaign"]["coincidence"]["min_ifos"])
    out = {"run": str(run), "ifar_years": ifar, "livetime_s": livetime, "injections": int(injections["analysed"].sum()),
           "found_at_ifar": int(vt["found"]), "vt": float(vt["vt"]), "vt_error": float(vt["vt_error"]),
           "rank_threshold": x, "model_found": n_model, "vt_independent": independent,
           "ratio": float(vt["vt"]) / independent if independent > 0 else float("nan")}
    print(f"{run}: {out['injections']} injections in {livetime:.0f} s; at IFAR >= {ifar:g} yr the search found "
          f"{out['found_at_ifar']}: VT = {out['vt']:.4g} +- {out['vt_error']:.2g} Mpc^3 yr")
    print(f"  ranking threshold at that IFAR {x:.3f}; {n_model} injections have an injected network SNR above it "
          f"(and the detectors' SNR the coherent stage needs): VT = {independent:.4g} Mpc^3 yr; ratio {out['ratio']:.3f}")
    return out


def simulate_and_run(out: Path, duration: float, seed: int) -> Path:
    from gwbatch.config import validate_campaign
    from gwbatch.simulate import simulate_store
    from gwbatch.simulate.cbc import CbcSpec
    from workflow.campaign import run_campaign

    out.mkdir(parents=True, exist_ok=True)
    (out / "bank.yaml").write_text(BANK)
    store = simulate_store(out / "bns.zarr", ifos=("H1", "L1"), duration=duration, sample_rate=2048, seed=seed,
                           cbc=CbcSpec(count=int(duration // 32), mass1=(1.38, 1.42), mass2=(1.38, 1.42), f_low=60.0,
                                       min_spacing=30.0, distance=(20.0, 350.0)))
    campaign = validate_campaign({
        "name": "vt-bns", "data": {"store": str(store)},
        "search": {"kind": "spiir", "bank": str(out / "bank.yaml"), "psd": "aLIGO", "threshold": 5.0,
                   "bank_cache": str(out / "banks"), "coherent": {"sky_order": 4, "ifo_snr": 4.0}},
        "coincidence": {"cluster_window": 0.5}, "background": {"slides": 100, "slide_step": 0.5, "deep_slides": 300},
        "plan": {"chunk": 256.0}, "cluster": {"kind": "in-process"}, "backend": "numpy",
        "output": {"dir": str(out / "run")}})
    run_campaign(campaign, progress=False)
    return out / "run"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, nargs="?", help="a finished run directory")
    ap.add_argument("--simulate", type=Path, help="simulate the BNS campaign here and run it first")
    ap.add_argument("--duration", type=float, default=4096.0)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--ifar", type=float, default=1.0)
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    run = simulate_and_run(args.simulate, args.duration, args.seed) if args.simulate else args.run
    if run is None:
        ap.error("give a run directory or --simulate OUT")
    out = check(run, args.ifar, args.bootstrap)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
