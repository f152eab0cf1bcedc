"""``configs/month.yaml`` end to end, in pieces that each end within a time limit.

    python benchmarks/month.py --store /tmp/month.zarr --out /tmp/month --stop-after 480 [--workers 16]
        [--duration S] [--set key=value ...] [--config CAMPAIGN] [--result summary.json]

Each call does what is left: simulates the store if it is missing (the command in month.yaml's
header, with ``--duration`` to try a shorter span), runs the campaign (``--resume`` once its output
exists) until ``--stop-after`` seconds, and prints one JSON summary per search once the campaign
is complete: its reach (counted, and from the tail fit), deep slides and cut, the loudest
candidates, and the injections found with their IFAR and its kind.  Exits 0 when complete, 6 when
chunks are left (as ``gwbatch run --stop-after``: call again), or with gwbatch's error code.
"""

from __future__ import annotations

import argparse
import glob
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workflow.cli import _seconds  # noqa: E402  the CLI's own positive-seconds check

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "configs/month.yaml"
#: The summary's key of the run's stage times: not a member name (those have no spaces).
RUN_TIMING = "run timing"
#: ``gwbatch run``'s exit code when ``--stop-after`` stopped it with chunks left.
STOPPED = 6


def simulate_args(config: Path = CONFIG) -> list[str]:
    """The ``gwbatch simulate`` arguments the config's header gives (its ``--out`` left out), so the
    store this script makes is the one the config describes."""
    lines = [line.lstrip("#").strip() for line in config.read_text().splitlines() if line.startswith("#")]
    first = next(i for i, line in enumerate(lines) if line.startswith("gwbatch simulate"))
    words = shlex.split(lines[first])[2:]
    for line in lines[first + 1:]:
        if not line.startswith("--"):
            break
        words += shlex.split(line)
    out = words.index("--out")
    return words[:out] + words[out + 2:]


def _with(args: list[str], key: str, value: str) -> list[str]:
    i = args.index(key)
    return args[:i + 1] + [value] + args[i + 2:]


def summarise(out: Path, top: int = 5) -> dict:
    """Per search: status, chunks, livetime, counted and tail-fit reach, deep slides and step, the
    candidates removed from the background hierarchically, the ``top`` most significant candidates
    and the injections found (how many at IFAR >= 1e4 yr, and those below); and the run's stage
    times (from the manifests and tables)."""
    import pandas as pd

    summary = {}
    top_manifest = out / "manifest.json"
    if top_manifest.exists():
        timing = json.loads(top_manifest.read_text()).get("timing", {})
        summary[RUN_TIMING] = {"wall_seconds": timing.get("wall_seconds"), "stages": timing.get("stages"),
                             "parts": timing.get("parts")}
    for manifest_path in sorted(glob.glob(str(out / "*" / "manifest.json"))):
        member = Path(manifest_path).parent
        m = json.loads(Path(manifest_path).read_text())
        bg = m.get("background", {})
        fit = bg.get("tail_fit") or {}
        row = {"status": m.get("status"), "chunks": len(m.get("chunks", [])),
               "livetime_days": m.get("livetime", {}).get("zero_lag_seconds", 0.0) / 86400.0,
               "reach_counted_years": bg.get("ifar_reach_years"), "reach_tail_fit_years": fit.get("ifar_reach_years"),
               "tail_fit_events": fit.get("events"), "deep_slides": bg.get("deep_slides"), "deep_cut": bg.get("deep_cut"),
               "slide_step": bg.get("slide_step"), "removed_from_background": bg.get("removed_from_background"),
               "chunk_stage_seconds": m.get("timing", {}).get("chunk_seconds_total")}
        cand = member / "candidates.parquet"
        if cand.exists():
            t = pd.read_parquet(cand).sort_values("far").head(top)
            cols = [c for c in ("gps_time", "snr", "rank", "ifar_years", "far_kind") if c in t]
            row["loudest"] = t[cols].to_dict("records")
        inj = member / "injections.parquet"
        if inj.exists():
            t = pd.read_parquet(inj)
            found = t[t["found"]] if "found" in t else t.iloc[:0]
            row["injections"] = {"analysed": len(t), "found": len(found)}
            if len(found) and "found_ifar_years" in found:
                row["injections"]["found_ifar_years_min"] = float(found["found_ifar_years"].min())
                row["injections"]["found_at_1e4_years"] = int((found["found_ifar_years"] >= 1e4).sum())
                row["injections"]["below_1e4_years"] = found.loc[found["found_ifar_years"] < 1e4, [
                    c for c in ("snr", "found_snr", "found_ifar_years") if c in found]].to_dict("records")
                if "found_far_kind" in found:
                    row["injections"]["found_far_kinds"] = found["found_far_kind"].value_counts().to_dict()
        summary[member.name] = row
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--stop-after", type=_seconds, default=None, help="seconds of this call's run (gwbatch run --stop-after)")
    p.add_argument("--workers", type=int, default=None, help="simulation workers")
    p.add_argument("--duration", type=_seconds, default=None, help="simulate this many seconds instead of 30 days")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--config", type=Path, default=CONFIG,
                   help="the campaign to run over month.yaml's store (default: configs/month.yaml)")
    p.add_argument("--result", type=Path, default=None)
    args = p.parse_args(argv)
    started = time.perf_counter()
    if not args.store.exists():
        sim = simulate_args()
        if args.duration:
            sim = _with(sim, "--duration", f"{args.duration:g}")
        sim += ["--out", str(args.store)] + (["--workers", str(args.workers)] if args.workers else [])
        code = subprocess.run([sys.executable, "-m", "gwbatch", "simulate", *sim], cwd=REPO).returncode
        if code != 0:  # gwbatch simulate has said why (and left no store that looks complete)
            return code
        print(f"simulated {args.store} in {time.perf_counter() - started:.0f} s", flush=True)
    run = [sys.executable, "-m", "gwbatch", "run", str(args.config), "--set", f"data.store={args.store}",
           "--out", str(args.out), "--no-progress", "--resume" if args.out.exists() else "--overwrite"]
    for kv in args.set:
        run += ["--set", kv]
    if args.stop_after:
        left = args.stop_after - (time.perf_counter() - started)
        if left <= 0:
            print("no time left for the run in this call; call again", flush=True)
            return STOPPED
        run += ["--stop-after", f"{left:.0f}"]
    code = subprocess.run(run, cwd=REPO).returncode
    if code != 0:
        return code
    summary = summarise(args.out)
    text = json.dumps(summary, indent=1, default=str)
    print(text)
    if args.result:
        args.result.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
