"""Run the shipped campaigns on the CPU and compare their tables between two versions of gwbatch.

A refactor must not change results.  ``run`` makes the stores the campaigns need (simulated, or
ingested from the bundled real data) and runs each campaign with the NumPy backend into
``OUT/<campaign>/``; ``compare`` checks that two such directories hold bit-identical
``candidates.parquet``, ``background.parquet`` and ``triggers.parquet`` (for a multi-search
campaign, each member's too)::

    python benchmarks/compare_tables.py run --out /tmp/before          # on the old version
    python benchmarks/compare_tables.py run --out /tmp/after           # on the new one
    python benchmarks/compare_tables.py compare /tmp/before /tmp/after

The campaigns are those of ``configs/`` that run on two cores: every one but the campaigns of
production-size banks and days of 4096 Hz data (``gw150914.yaml``'s 2901-template BBH bank and
``one-day.yaml``), whose SPIIR search is covered by ``gw150914.yaml`` with the 37-template
``banks/bbh-small.yaml`` on a simulated store of binaries.  ``week.yaml`` runs on two hours of
its kind of data instead of a week.  About ten minutes on the 2-core development machine.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
GW150914 = [str(ROOT / "tests/data/gw150914" / f) for f in
            ("H-H1_LOSC_4_V2-1126259446-32.hdf5", "L-L1_LOSC_4_V2-1126259446-32.hdf5")]
PULSAR = str(ROOT / "tests/data/pulsar-j1807/GBT_J1807-0847.tim")

#: Stores by name: the ``gwbatch`` arguments that make them (``--out`` added).
STORES = {
    "demo": ["simulate", "--ifos", "H1,L1,V1", "--duration", "1024", "--sample-rate", "2048", "--seed", "1",
             "--injections", "60"],
    "week-2h": ["simulate", "--ifos", "H1,L1,V1", "--duration", "7200", "--sample-rate", "1024", "--seed", "11"],
    "binaries": ["simulate", "--ifos", "H1,L1", "--duration", "256", "--sample-rate", "1024", "--seed", "5",
                 "--cbc-injections", "6", "--cbc-mass1", "10,16", "--cbc-mass2", "10,16", "--cbc-snr", "12,25",
                 "--cbc-f-low", "30"],
    "gw150914": ["ingest", "gwosc", *GW150914],
    "pulsar": ["ingest", "sigproc", PULSAR],
}
#: Campaigns by name: config, store, extra ``--set`` items.
CAMPAIGNS = {
    "demo": ("configs/demo.yaml", "demo", []),
    "pulsar-j1807": ("configs/pulsar-j1807.yaml", "pulsar", []),
    "gw150914-pulse": ("configs/gw150914-pulse.yaml", "gw150914", []),
    "gw150914-burst": ("configs/gw150914-burst.yaml", "gw150914", []),
    "week": ("configs/week.yaml", "week-2h", []),
    "spiir-small": ("configs/gw150914.yaml", "binaries", ["search.bank=configs/banks/bbh-small.yaml"]),
}
TABLES = ("candidates.parquet", "background.parquet", "triggers.parquet")


def gwbatch(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "gwbatch", *args], cwd=ROOT, check=True)


def run(out: Path, only: list[str] | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    names = only or list(CAMPAIGNS)
    for store in sorted({CAMPAIGNS[n][1] for n in names}):
        gwbatch(*STORES[store], "--out", str(out / "stores" / f"{store}.zarr"), "--overwrite")
    for name in names:
        config, store, sets = CAMPAIGNS[name]
        started = time.perf_counter()
        gwbatch("run", config, "--out", str(out / name), "--overwrite", "--no-progress",
                "--set", f"data.store={out / 'stores' / f'{store}.zarr'}", "--set", "backend=numpy",
                *[a for item in sets for a in ("--set", item)])
        print(f"{name}: {time.perf_counter() - started:.0f} s", flush=True)


def tables(directory: Path) -> list[Path]:
    """The compared tables under a campaign's output directory (its members' too), relative."""
    return sorted(p.relative_to(directory) for name in TABLES for p in directory.rglob(name)
                  if ".staging" not in p.parts)


def compare(before: Path, after: Path) -> int:
    """Every table of every campaign in ``before`` against ``after``: 0 when all are identical."""
    differ = 0
    for campaign in sorted(p.name for p in before.iterdir() if p.is_dir() and p.name != "stores"):
        for rel in tables(before / campaign):
            a, b = before / campaign / rel, after / campaign / rel
            try:
                pd.testing.assert_frame_equal(pd.read_parquet(a), pd.read_parquet(b), check_exact=True)
                print(f"{campaign}/{rel}: identical ({len(pd.read_parquet(a))} rows)")
            except (AssertionError, FileNotFoundError) as exc:
                differ += 1
                print(f"{campaign}/{rel}: DIFFERS: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run", help="make the stores and run every campaign into OUT")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--only", nargs="+", choices=sorted(CAMPAIGNS))
    c = sub.add_parser("compare", help="compare the tables of two runs")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.what == "run":
        run(args.out, args.only)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
