"""Injections from a file against the same injections from the simulator (issue 24 acceptance).

The simulator writes two stores from one seed (its noise is counter-based, so the noise is the
same): ``A`` with ``--count`` binaries injected (``gwbatch simulate --cbc-injections``) and ``B``
with none.  A's injection table is written as a LIGO_LW ``sim_inspiral`` file (igwn-ligolw) with
the two conventions converted (time: the simulator lists the amplitude peak, a file LAL's
coalescence time, so ``geocent_end_time = gps_time - merger_offset``; phase: ``coa_phase = phase +
pi/2``).  The same SPIIR campaign runs on A, and on B with ``data.injections`` naming the file
(LALSuite generates the signals as the chunks are read).  Reported: found/missed agreement, the
per-injection ratio of recovered network SNRs (file / simulator, median and spread), the measured
optimal SNRs against the simulator's, and each run's time.

usage:
  python benchmarks/injection_files.py [--count 100] [--duration 1100] [--bank configs/banks/bns-narrow.yaml]
      [--backend numpy|cupy] [--cluster in-process|local|local-cuda] [--out DIR] [--json FILE]
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

from gwbatch.config import load_bank_config, validate_campaign  # noqa: E402
from gwbatch.io.store import read_injections  # noqa: E402
from gwbatch.simulate import simulate_store  # noqa: E402
from gwbatch.simulate.cbc import CbcSpec, merger_offset  # noqa: E402
from workflow.campaign import run_campaign  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
IFOS = ("H1", "L1")


def write_sim_inspiral(path: Path, table, sample_rate: float) -> Path:
    """The simulator's CBC rows as a ``sim_inspiral`` table, conventions converted (module docstring)."""
    from igwn_ligolw import ligolw, lsctables, utils

    from gwbatch.gpstime import GPSTime

    doc = ligolw.Document()
    root = doc.appendChild(ligolw.LIGO_LW())
    cols = ["process:process_id", "simulation_id", "waveform", "geocent_end_time", "geocent_end_time_ns", "mass1",
            "mass2", "spin1z", "spin2z", "distance", "longitude", "latitude", "inclination", "coa_phase",
            "polarization", "f_lower"]
    sim = root.appendChild(lsctables.SimInspiralTable.new(cols))
    for i, r in enumerate(table.to_dict("records")):
        row = sim.RowType()
        end = GPSTime.parse(r["gps_time"] - merger_offset(r["approximant"], r["mass1"], r["mass2"], r["spin1z"],
                                                          r["spin2z"], r["f_low"], sample_rate))
        row.process_id, row.simulation_id, row.waveform = 0, i, "TaylorF2threePointFivePN"
        row.geocent_end_time, row.geocent_end_time_ns = end.seconds, end.nanoseconds
        row.mass1, row.mass2, row.spin1z, row.spin2z = r["mass1"], r["mass2"], r["spin1z"], r["spin2z"]
        row.distance, row.longitude, row.latitude = r["distance"], r["ra"], r["dec"]
        row.inclination, row.coa_phase = r["inclination"], (r["phase"] + np.pi / 2) % (2 * np.pi)
        row.polarization, row.f_lower = r["polarization"], r["f_low"]
        sim.append(row)
    utils.write_filename(doc, str(path))
    return path


def campaign(store: Path, out: Path, args, injections: Path | None = None):
    return validate_campaign({
        "name": out.name,
        "data": {"store": str(store), **({"injections": str(injections)} if injections else {})},
        "search": {"kind": "spiir", "bank": str(args.bank), "threshold": args.threshold, "psd_seconds": 256.0,
                   "psd": "aLIGO", "bank_cache": str(out.parent / "banks")},
        "background": {"slides": 10, "slide_step": 2.0},
        "plan": {"chunk": args.chunk},
        "cluster": {"kind": args.cluster},
        "backend": args.backend,
        "output": {"dir": str(out)},
    })


def compare(sim, fil) -> dict:
    """Found/missed and recovered-SNR agreement of two injection tables of the same injections."""
    both = sim["found"].to_numpy() & fil["found"].to_numpy()
    ratio = fil["found_snr"].to_numpy()[both] / sim["found_snr"].to_numpy()[both]
    optimal = fil["snr"].to_numpy() / sim["snr"].to_numpy()
    q = np.percentile(ratio, [5, 25, 50, 75, 95]) if both.any() else [np.nan] * 5
    return {
        "injections": int(len(sim)),
        "found_simulator": int(sim["found"].sum()), "found_file": int(fil["found"].sum()),
        "found_both": int(both.sum()), "found_only_simulator": int((sim["found"] & ~fil["found"]).sum()),
        "found_only_file": int((~sim["found"] & fil["found"]).sum()),
        "recovered_snr_ratio_percentiles_5_25_50_75_95": [float(v) for v in q],
        "optimal_snr_ratio_median": float(np.nanmedian(optimal)),
        "missed_snr_simulator": sorted(float(v) for v in sim.loc[~sim["found"], "snr"]),
        "missed_snr_file": sorted(float(v) for v in fil.loc[~fil["found"], "snr"]),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--duration", type=float, default=1100.0)
    p.add_argument("--bank", type=Path, default=ROOT / "configs/banks/bns-narrow.yaml")
    p.add_argument("--seed", type=int, default=24)
    p.add_argument("--threshold", type=float, default=5.0)
    p.add_argument("--chunk", type=float, default=128.0)
    p.add_argument("--backend", default="numpy")
    p.add_argument("--cluster", default="in-process")
    p.add_argument("--workers", type=int, default=1, help="processes simulating the stores")
    p.add_argument("--out", type=Path)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    work = args.out or Path(tempfile.mkdtemp(prefix="injection-files-"))
    work.mkdir(parents=True, exist_ok=True)
    bank = load_bank_config(args.bank)
    spec = CbcSpec(count=args.count, mass1=tuple(bank.mass1), mass2=tuple(bank.mass2), snr=(8.0, 30.0),
                   f_low=bank.f_low)
    fs = bank.sample_rate
    t = time.perf_counter()
    a = simulate_store(work / "A.zarr", ifos=IFOS, duration=args.duration, sample_rate=fs, seed=args.seed, cbc=spec,
                       overwrite=True, workers=args.workers)
    b = simulate_store(work / "B.zarr", ifos=IFOS, duration=args.duration, sample_rate=fs, seed=args.seed,
                       overwrite=True, workers=args.workers)
    simulated = time.perf_counter() - t
    xml = write_sim_inspiral(work / "injections.xml.gz", read_injections(a), fs)
    seconds = {"simulate_both_stores": simulated}
    t = time.perf_counter()
    run_a = run_campaign(campaign(a, work / "run-simulator", args), overwrite=True, progress=False)
    seconds["simulator_run"] = time.perf_counter() - t
    t = time.perf_counter()
    run_b = run_campaign(campaign(b, work / "run-file", args, xml), overwrite=True, progress=False)
    seconds["file_run"] = time.perf_counter() - t
    result = {"command": " ".join(sys.argv), "bank": str(args.bank), "sample_rate": fs, "duration": args.duration,
              "devices": run_b.manifest["devices"], "seconds": seconds,
              **compare(run_a.reduced.injections, run_b.reduced.injections)}
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
