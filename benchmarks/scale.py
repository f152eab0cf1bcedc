"""Scaling of a whole campaign over GPUs: the one-day, three-search campaign on 1, 2, 4... GPUs.

    python benchmarks/scale.py --gpus 4,2,1 [--duration 86400] [--config configs/one-day.yaml]
    python benchmarks/scale.py --gpus 1 --stop-after 540 [--resume]   # a run longer than one sitting

Simulates the store when it is missing (``--workers`` processes), then runs ``gwbatch run`` once per
GPU count with ``CUDA_VISIBLE_DEVICES`` set to that many GPUs (``LocalCUDACluster``: one worker per
GPU), into the same output directory (``--overwrite``).  The SPIIR members keep their placed
templates and built banks in ``--bank-cache`` (default ``<out>.banks``, outside the output directory
that ``--overwrite`` replaces), so only the first run places and builds them and every run's
preparation is the same: measuring each detector's PSD and loading its bank.  Per run it records the wall time of each stage, the strain-seconds searched per
GPU-second of the chunk stage, the GPU utilisation the workers sampled, and the largest GPU memory a
task of each search used against the plan's estimate.  Scaling efficiency against the smallest GPU
count is T_small * n_small / (T_n * n) for the chunk stage (the part that runs on the GPUs) and for
the whole run.  Results: JSON (``--result``) and a Markdown table on stdout.

A run may take several invocations: ``--stop-after S`` is passed to ``gwbatch run``, which then
starts no chunk task after S seconds and exits with status 6 (so does this script, recording
nothing); ``--resume`` goes on from the checkpoints.  The finished run's manifest lists every part
(``timing.parts``): its stage times are summed, so the chunk stage counts every part's wall time,
including the tail of each part where the last tasks finish on some GPUs while the others idle.
``--first-gpu K`` uses GPUs K, K+1, ... so that runs of different sizes can share a node.

``--warm-up S`` first runs the campaign over the store's first S seconds on one GPU, untimed, into
``<out>.warm-up``: CuPy compiles each GPU kernel the first time a process needs it and keeps it in
its kernel cache (``~/.cupy/kernel_cache``), and a machine's first campaign pays those compiles
(~25 s of an idle GPU at the start of the one-day run on a fresh H200).  Without a warm-up the first
timed run pays them and the later ones do not.  The warm-up's wall time is recorded
(``warm_up``); ``--resume`` goes on without one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def simulate(store: Path, duration: float, sample_rate: float, seed: int, workers: int) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gwbatch", "simulate", "--ifos", "H1,L1,V1", "--duration", str(duration),
                    "--sample-rate", str(sample_rate), "--seed", str(seed), "--out", str(store), "--overwrite",
                    "--workers", str(workers)], check=True)
    return time.perf_counter() - started


#: ``gwbatch run``'s exit status when ``--stop-after`` stopped it with chunks left.
STOPPED = 6


def bank_cache_sets(config: Path, cache: Path) -> list[str]:
    """``--set`` items that point every SPIIR search of ``config`` at the bank cache ``cache``."""
    import yaml

    spec = yaml.safe_load(config.read_text())
    if "searches" in spec:
        return [f"searches.{name}.search.bank_cache={cache}" for name, member in spec["searches"].items()
                if member.get("search", {}).get("kind") == "spiir"]
    return [f"search.bank_cache={cache}"] if spec.get("search", {}).get("kind") == "spiir" else []


def run(config: Path, out: Path, gpus: int, sets: list[str], *, first_gpu: int = 0, resume: bool = False,
        stop_after: float | None = None) -> dict | None:
    """One campaign on ``gpus`` GPUs; None when ``stop_after`` stopped it (go on with ``resume``)."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(str(i) for i in range(first_gpu, first_gpu + gpus)))
    argv = [sys.executable, "-m", "gwbatch", "run", str(config), "--out", str(out), "--no-progress",
            "--resume" if resume else "--overwrite", "--set", "cluster.kind=local-cuda"]
    if stop_after is not None:
        argv += ["--stop-after", str(stop_after)]
    for s in sets:
        argv += ["--set", s]
    started = time.perf_counter()
    status = subprocess.run(argv, env=env).returncode
    wall = time.perf_counter() - started
    if status == STOPPED:
        return None
    if status != 0:
        raise SystemExit(f"gwbatch run exited with status {status}: {' '.join(argv)}")
    manifest = json.loads((out / "manifest.json").read_text())
    parts = manifest["timing"].get("parts") or [{"stages": manifest["timing"]["stages"]}]
    stages: dict[str, float] = {}
    for part in parts:
        for name, seconds in part["stages"].items():
            stages[name] = stages.get(name, 0.0) + seconds
    # every part's stages, then what the last invocation did after its chunk stage (reduce, report)
    wall = sum(stages.values()) + wall - sum(parts[-1]["stages"].values())
    members = {}
    strain_seconds = 0.0
    for m in manifest["members"]:
        own = json.loads((out / m["manifest"]).read_text())
        analysed = sum(own["livetime"]["analysed_seconds"].values())
        strain_seconds = max(strain_seconds, analysed)
        peaks = [c.get("device_peak_bytes", 0) for c in own["chunks"]]
        members[m["name"]] = {
            "kind": m["kind"], "chunks": m["chunks"], "chunk_seconds_total": m["chunk_seconds"],
            "candidates": m["candidates"], "analysed_strain_seconds": analysed,
            "device_peak_bytes_max": max(peaks) if peaks else 0,
            "task_device_bytes_estimate": own["plan"]["task_device_bytes"],
            "tasks": [[c.get("worker"), c.get("seconds")] for c in own["chunks"]],
        }
    gpu = manifest.get("gpu_utilisation") or {}
    chunk_wall = stages["chunks"]
    util = gpu.get("mean")
    if len(parts) > 1 and all(p.get("gpu_utilisation_mean") is not None for p in parts):
        util = sum(p["gpu_utilisation_mean"] * p["stages"]["chunks"] for p in parts) / chunk_wall
    return {
        "gpus": gpus, "wall_seconds": wall, "stages": stages, "devices": manifest["devices"],
        "parts": parts,
        "strain_seconds": strain_seconds,
        "strain_seconds_per_gpu_second": strain_seconds / (gpus * chunk_wall),
        "gpu_utilisation_mean": util,
        "gpu_utilisation_per_device": [d["mean"] for d in gpu.get("devices", [])],
        "members": members,
        "provenance": manifest.get("provenance"),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", type=Path, default=Path("configs/one-day.yaml"))
    p.add_argument("--store", type=Path, default=Path("data/one-day.zarr"))
    p.add_argument("--out", type=Path, default=Path("runs/scale"))
    p.add_argument("--gpus", default="4,2,1", help="GPU counts to run, in order")
    p.add_argument("--duration", type=float, default=86400.0)
    p.add_argument("--sample-rate", type=float, default=4096.0)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes that simulate the store")
    p.add_argument("--set", action="append", default=[], help="extra campaign overrides")
    p.add_argument("--bank-cache", type=Path, help="SPIIR bank cache shared by the runs (default: <out>.banks)")
    p.add_argument("--result", type=Path, help="JSON file to write")
    p.add_argument("--first-gpu", type=int, default=0, help="use GPUs from this index on (default 0)")
    p.add_argument("--stop-after", type=float, help="passed to gwbatch run: start no chunk task after this many seconds")
    p.add_argument("--resume", action="store_true", help="go on with the checkpoints of a stopped run")
    p.add_argument("--merge", type=Path, nargs="+", help="combine the runs of earlier result files (no run)")
    p.add_argument("--warm-up", type=float, default=0.0, metavar="SECONDS",
                   help="first run the campaign untimed over this many seconds of the store on one GPU, so that "
                        "every timed run finds the GPU kernels compiled (default 0: no warm-up)")
    args = p.parse_args(argv)
    if not args.warm_up >= 0:
        p.error(f"--warm-up must be seconds >= 0, got {args.warm_up:g}")
    if args.resume and "," in args.gpus:
        p.error(f"--resume goes on with one run: give one GPU count, not --gpus {args.gpus}")
    if args.merge:
        records = [json.loads(f.read_text()) for f in args.merge]
        record = scaling({**records[0], "runs": [r for rec in records for r in rec["runs"]],
                          "merged_from": [str(f) for f in args.merge]})
        if args.result:
            args.result.write_text(json.dumps(record, indent=1))
        print(markdown(record))
        return 0
    record = {"config": str(args.config), "duration": args.duration, "sample_rate": args.sample_rate,
              "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv), "runs": []}
    if not (args.store / "zarr.json").exists():
        record["simulate_seconds"] = simulate(args.store, args.duration, args.sample_rate, args.seed, args.workers)
    cache = args.bank_cache or args.out.with_name(args.out.name + ".banks")
    sets = [f"data.store={args.store}", *bank_cache_sets(args.config, cache), *args.set]
    if args.warm_up > 0 and not args.resume:
        started = time.perf_counter()
        run(args.config, args.out.with_name(args.out.name + ".warm-up"), 1, [*sets, f"data.duration={args.warm_up}"],
            first_gpu=args.first_gpu)
        record["warm_up"] = {"store_seconds": args.warm_up, "wall_seconds": time.perf_counter() - started}
    for n in [int(g) for g in args.gpus.split(",")]:
        done = run(args.config, args.out, n, sets, first_gpu=args.first_gpu, resume=args.resume,
                   stop_after=args.stop_after)
        if done is None:
            print(f"the {n}-GPU run stopped at --stop-after {args.stop_after:g} s; rerun with --resume", file=sys.stderr)
            return STOPPED
        record["runs"].append(done)
        if args.result:
            args.result.write_text(json.dumps(scaling(record), indent=1))
    record = scaling(record)
    print(markdown(record))
    return 0


def scaling(record: dict) -> dict:
    runs = record["runs"]
    if runs:
        base = min(runs, key=lambda r: r["gpus"])
        for r in runs:
            r["scaling_chunks"] = base["stages"]["chunks"] * base["gpus"] / (r["stages"]["chunks"] * r["gpus"])
            r["scaling_wall"] = base["wall_seconds"] * base["gpus"] / (r["wall_seconds"] * r["gpus"])
    return record


def markdown(record: dict) -> str:
    lines = ["| GPUs | chunk stage (s) | whole run (s) | strain-s per GPU-s | scaling (chunks) | scaling (run) | "
             "GPU utilisation |", "|---|---|---|---|---|---|---|"]
    for r in sorted(record["runs"], key=lambda r: r["gpus"]):
        util = r["gpu_utilisation_mean"]
        lines.append(f"| {r['gpus']} | {r['stages']['chunks']:.1f} | {r['wall_seconds']:.1f} | "
                     f"{r['strain_seconds_per_gpu_second']:.0f} | {r['scaling_chunks']:.2f} | {r['scaling_wall']:.2f} | "
                     f"{'n/a' if util is None else f'{util:.0f}%'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
