"""P-P test of the burst search's skymaps over injection campaigns in simulated design noise.

Each store holds ``--count`` bursts (sine-Gaussians at 70, 235 and 554 Hz with Q 3 and 9, and
white-noise bursts of 100 Hz over 100-200 and 250-350 Hz; hrss log-uniform in ``--hrss``) in
simulated H1-L1 or H1-L1-V1 design noise at 2048 Hz.  Every store is searched once per skymap
setting ``T0:k`` (``search.skymap_temperature`` and ``search.skymap_systematic``: ``T = T0 + k
max(Lo)``, :func:`gwbatch.burst.chunk.skymap_temperature`), and the found injections whose
candidate has a skymap (rho >= 8) give the credible level of their true direction and the 90%
area.  Per network and setting the table gives N, the KS p-value of the levels against the
uniform distribution (:func:`gwbatch.sky.skymap.pp_test`) and the median and 90th percentile of
the 90% areas (deg^2).

usage (the study behind the defaults, about 12 minutes on one core):
  python benchmarks/burst_pp.py --networks H1,L1:21,22,23,24,25 H1,L1,V1:31,32,33 \
      --settings 1:0 2:0 4:0.008 6:0.006 6:0.008 6:0.01 [--count 40] [--sky-order 6] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from gwbatch.config import validate_campaign  # noqa: E402
from gwbatch.simulate import simulate_store  # noqa: E402
from gwbatch.simulate.bursts import BurstSpec  # noqa: E402
from gwbatch.sky.skymap import pp_test  # noqa: E402
from workflow.campaign import run_campaign  # noqa: E402

SAMPLE_RATE = 2048.0
SPACING = 12.0  # s between injections


def burst_store(path: Path, ifos: tuple[str, ...], seed: int, count: int, hrss: tuple[float, float]) -> Path:
    return simulate_store(path, ifos=ifos, duration=SPACING * count + 20.0, sample_rate=SAMPLE_RATE, seed=seed,
                          bursts=BurstSpec(count=count, hrss=hrss, min_spacing=SPACING), overwrite=True)


def localised(store: Path, out: Path, sky_order: int, temperature: float, systematic: float):
    """Credible levels and 90% areas of the found injections with skymaps (no lags: only found-ness
    and the maps are needed)."""
    run = run_campaign(validate_campaign({
        "name": out.name, "data": {"store": str(store)},
        "search": {"kind": "burst", "sky_order": sky_order, "f_high": 1000.0,
                   "skymap_temperature": temperature, "skymap_systematic": systematic},
        "background": {"slides": 0, "slide_step": 1.0}, "plan": {"chunk": 128.0},
        "cluster": {"kind": "in-process"}, "backend": "numpy", "output": {"dir": str(out)},
    }), progress=False)
    inj = run.reduced.injections
    has = np.isfinite(inj["credible_level"].to_numpy(np.float64))
    return inj["credible_level"].to_numpy(np.float64)[has], inj["area90"].to_numpy(np.float64)[has]


def summary(levels: np.ndarray, areas: np.ndarray) -> dict:
    return {"n": int(levels.size), "ks_p": pp_test(levels)[1], "median_area90": float(np.median(areas)),
            "p90_area90": float(np.percentile(areas, 90))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--networks", nargs="+", default=["H1,L1:21,22,23,24,25", "H1,L1,V1:31,32,33"],
                    help="IFOS:SEEDS, one store per seed")
    ap.add_argument("--settings", nargs="+", default=["1:0", "2:0", "4:0.008", "6:0.006", "6:0.008", "6:0.01"],
                    help="T0:k skymap settings")
    ap.add_argument("--count", type=int, default=40, help="injections per store")
    ap.add_argument("--hrss", default="4e-23,4e-22", help="hrss range, log-uniform")
    ap.add_argument("--sky-order", type=int, default=6)
    ap.add_argument("--json", help="write the table here")
    args = ap.parse_args(argv)
    hrss = tuple(float(x) for x in args.hrss.split(","))
    settings = [tuple(float(x) for x in s.split(":")) for s in args.settings]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.networks:
            ifos, seeds = spec.split(":")
            ifos = tuple(ifos.split(","))
            stores = [burst_store(Path(tmp) / f"{''.join(ifos)}-{s}.zarr", ifos, int(s), args.count, hrss)
                      for s in seeds.split(",")]
            for t0, k in settings:
                found = [localised(s, Path(tmp) / f"run-{s.stem}-{t0:g}-{k:g}", args.sky_order, t0, k) for s in stores]
                row = {"network": "-".join(ifos), "T0": t0, "k": k,
                       **summary(np.concatenate([f[0] for f in found]), np.concatenate([f[1] for f in found]))}
                rows.append(row)
                print(f"{row['network']:9s} T0 {t0:<4g} k {k:<6g} N {row['n']:4d}  KS p {row['ks_p']:.3g}  "
                      f"90% area median {row['median_area90']:.0f}  p90 {row['p90_area90']:.0f} deg2", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
