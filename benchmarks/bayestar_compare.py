"""SPIIR skymaps beside BAYESTAR's on the same candidates (issue 27).

Exports the top candidates of a finished SPIIR run (``gwbatch export``: coinc.xml with the PSDs and
SNR series), localises each with BAYESTAR (ligo.skymap) and prints, per candidate, the 90% areas of
both maps, their mean distances and, where the run has injections, the credible level of the true
direction in each (the searched probability) and the injected distance; with ``--ra --dec``
(degrees) that direction instead of an injection's.

usage: python benchmarks/bayestar_compare.py RUN [--top 10] [--waveform IMRPhenomD] [--f-low 20]
                                              [--ra DEG --dec DEG] [--json FILE]
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--waveform", default="IMRPhenomD", help="BAYESTAR's template approximant")
    ap.add_argument("--f-low", type=float, default=20.0)
    ap.add_argument("--ra", type=float, help="true right ascension (deg), instead of the injections'")
    ap.add_argument("--dec", type=float, help="true declination (deg)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import astropy.units as u
    from astropy.coordinates import SkyCoord
    from ligo.skymap.bayestar import localize
    from ligo.skymap.io import events, read_sky_map
    from ligo.skymap.postprocess.crossmatch import crossmatch

    from gwbatch.io.coinc import register_with_ligo_skymap
    from gwbatch.sky.grid import pixel_of
    from gwbatch.sky.skymap import credible_area, credible_level
    from workflow.export import export_run

    register_with_ligo_skymap()
    candidates = pd.read_parquet(args.run / "candidates.parquet")
    injections = pd.read_parquet(args.run / "injections.parquet") if (args.run / "injections.parquet").exists() else None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folders = export_run(args.run, Path(tmp), top=args.top)
        for (_, cand), folder in zip(candidates.head(args.top).iterrows(), folders):
            coinc = str(folder / "coinc.xml")
            event, = events.open(coinc, psd_file=coinc).values()
            started = time.perf_counter()
            sky = localize(event, waveform=args.waveform, f_low=args.f_low)
            seconds = time.perf_counter() - started
            truth, distance = None, float("nan")
            if args.ra is not None:
                truth = (np.radians(args.ra), np.radians(args.dec))
            elif injections is not None and len(injections):
                inj = injections.loc[(injections["gps_time"] - cand["gps_time"]).abs().idxmin()]
                if abs(inj["gps_time"] - cand["gps_time"]) < 0.1:
                    truth, distance = (float(inj["ra"]), float(inj["dec"])), float(inj.get("distance", np.nan))
            match = crossmatch(sky, SkyCoord(*(truth or (0.0, 0.0)), unit=u.rad), contours=(0.9,))
            row = {"gps_time": float(cand["gps_time"]), "snr": float(cand["snr"]),
                   "bayestar_area90": float(match.contour_areas[0]), "bayestar_distmean": float(sky.meta["distmean"]),
                   "bayestar_seconds": seconds, "distance": distance}
            if cand.get("skymap"):
                (prob, *_), meta = read_sky_map(str(args.run / cand["skymap"]), distances=True, nest=True)
                order = int(round(np.log2(np.sqrt(prob.size / 12))))
                row |= {"gwbatch_area90": credible_area(prob, 0.9), "gwbatch_distmean": float(meta.get("distmean", np.nan)),
                        "sky_order": order}
                if truth is not None:
                    row["gwbatch_level"] = credible_level(prob, int(pixel_of(order, *truth)))
            if truth is not None:
                row["bayestar_level"] = float(match.searched_prob)
            rows.append(row)
    table = pd.DataFrame(rows)
    table["gps_time"] = table["gps_time"].map("{:.3f}".format)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.round(3).to_string(index=False))
    if args.json:
        args.json.write_text(json.dumps({"run": str(args.run), "waveform": args.waveform, "f_low": args.f_low,
                                         "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
