"""Sub-band SPIIR's kernel variants in one process (issue 25): warm-ups against scans, narrow rows
through the ring against ``chan_iir``, and optionally an earlier copy of the kernel module.

Builds ``--distinct`` single-rate templates of the bank's benchmark region (as
``benchmarks/spiir_subband_kernels.py``), repeats them to ``--templates``, and over ``--seconds`` of
noise times, medians of 7 by CUDA events, three rounds alternating:

- ``filter_subbands`` (the channels, every row, the synthesis) and its rows and synthesis alone;
- the same launched one by one (``graph=False``) and from its CUDA graph, also by wall clock per
  call alone and four in a row;
- the rows with scanned segments only (``warmup=False``), and with the narrow rows on ``chan_iir``;
- each group of ``--pipeline`` templates' plan in turn, its synthesis on a side stream while the
  next group's rows run;
- with ``--before PATH`` (a copy of ``gwbatch/spiir/_cuda_subbands.py`` from an earlier commit,
  ``git show REV:gwbatch/spiir/_cuda_subbands.py > PATH``) the same through that module.

It reports each variant's largest difference from the current kernels (of the peak), then every row
launch alone with its segmentation.  ``--launches-once`` runs each launch once and exits, for
Nsight Compute:

    python benchmarks/spiir_subband_variants.py --bank bns --json benchmarks/results/spiir_warmup_ab_h200.json
    ncu --clock-control none -k 'regex:chan_|synthesize|sub_' --section SpeedOfLight ... \\
        python benchmarks/spiir_subband_variants.py --bank bns --launches-once
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _events_median(fn, n: int = 7) -> float:
    import cupy

    fn()
    fn()  # twice: a sub-band plan's CUDA graph is captured on its second call
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(n):
        a, b = cupy.cuda.Event(), cupy.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(cupy.cuda.get_elapsed_time(a, b))
    return float(np.median(times))


def _module_from(path: str):
    spec = importlib.util.spec_from_file_location("cuda_subbands_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _pipelined(x, plans, side):
    """``filter_subbands_cuda`` of each plan in turn, each plan's synthesis on ``side`` while the next
    plan's rows run: whether the synthesis (issue-bound) and the rows (shared-memory-bound) share
    the GPU better than they follow each other."""
    import cupy

    from gwbatch.spiir import _cuda_subbands as K
    from gwbatch.spiir import subbands as S

    current = cupy.cuda.get_current_stream()
    outs = []
    for plan in plans:
        xc = S.channelize(x, plan.channels)
        rows = K.channel_rows_cuda(xc, plan)
        side.wait_event(current.record())
        with side:
            outs.append((K.synthesize_cuda(rows, plan, xc.shape[1], x.size), rows))
    current.wait_event(side.record())
    return outs


def main(argv=None) -> int:
    import cupy

    from benchmarks.spiir_multirate import BANKS, _build, _gpu_median, bank_region
    from gwbatch.spiir import _cuda_subbands as K
    from gwbatch.spiir import subbands as S

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bank", choices=sorted(BANKS), default="bns")
    ap.add_argument("--distinct", type=int, default=32)
    ap.add_argument("--templates", type=int, default=1024)
    ap.add_argument("--seconds", type=int, default=64)
    ap.add_argument("--before", help="an earlier copy of gwbatch/spiir/_cuda_subbands.py to time beside")
    ap.add_argument("--launches-once", action="store_true", help="each row launch once, then the synthesis (ncu)")
    ap.add_argument("--pipeline", default="2,4", help="template groups for the pipelined variant (0: none)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(1)  # the kernel benchmark's region and seed
    path, masses, _, fs, _, _ = bank_region(args.bank, args.distinct, args.templates, rng)
    with ProcessPoolExecutor() as pool:
        single = list(pool.map(_build, [(path, m1, m2, False) for m1, m2 in masses]))
    distinct = [(bt.a, bt.b, bt.d) for bt in single]
    filters = (distinct * -(-args.templates // len(distinct)))[: args.templates]
    plan = S.channel_plan(filters, fs)
    wide_only = S.channel_plan(filters, fs)  # the same plan with its narrow rows on chan_iir
    rings = K.RING_LAYOUTS
    K.RING_LAYOUTS = tuple(layout for layout in rings if layout[1] == 32)
    try:
        K.device_plan(wide_only)
        if wide_only.nested is not None:
            K.device_plan(wide_only.nested)
    finally:
        K.RING_LAYOUTS = rings
    x = cupy.asarray(np.random.default_rng(1).standard_normal(args.seconds * int(fs)).astype(np.float32))
    xc = S.channelize(x, plan.channels)
    xs = S.sub_channelize(xc, plan) if plan.nested is not None else None
    levels = [("top", plan, xc)] + ([("nested", plan.nested, xs)] if xs is not None else [])
    if args.launches_once:
        for _, level, xin in levels:
            for i in range(len(K.device_plan(level).launches)):
                K.channel_rows_cuda(xin, level, False, i)
        K.synthesize_cuda(K.channel_rows_cuda(xc, plan), plan, xc.shape[1], x.size)
        cupy.cuda.Device().synchronize()
        return 0
    before = _module_from(args.before) if args.before else None
    rows = K.channel_rows_cuda(xc, plan)
    peak = float(cupy.abs(rows).max())
    z = K.filter_subbands_cuda(x, plan)
    z_peak = float(cupy.abs(z).max())
    out = {"bank": args.bank, "distinct": args.distinct, "templates": args.templates, "seconds": args.seconds,
           "updates_per_sample": plan.updates_per_sample(), "differences": {
               "rows_scans_only": float(cupy.abs(K.channel_rows_cuda(xc, plan, warmup=False) - rows).max()) / peak,
               "rows_narrow_on_chan_iir": float(cupy.abs(K.channel_rows_cuda(xc, wide_only) - rows).max()) / peak}}
    out["differences"]["whole_launched"] = float(cupy.abs(K.filter_subbands_cuda(x, plan, False) - z).max()) / z_peak
    variants = {
        "whole": lambda: K.filter_subbands_cuda(x, plan),
        "whole_launched": lambda: K.filter_subbands_cuda(x, plan, False),
        "rows": lambda: K.channel_rows_cuda(xc, plan),
        "rows_scans_only": lambda: K.channel_rows_cuda(xc, plan, warmup=False),
        "rows_narrow_on_chan_iir": lambda: K.channel_rows_cuda(xc, wide_only),
        "whole_narrow_on_chan_iir": lambda: K.filter_subbands_cuda(x, wide_only),
        "synthesis": lambda: K.synthesize_cuda(rows, plan, xc.shape[1], x.size),
    }
    side = cupy.cuda.Stream(non_blocking=True)
    for groups in (int(g) for g in args.pipeline.split(",") if int(g) > 1):
        size = -(-len(filters) // groups)
        parts = [S.channel_plan(filters[i: i + size], fs) for i in range(0, len(filters), size)]
        got = cupy.concatenate([z for z, _ in _pipelined(x, parts, side)])
        out["differences"][f"whole_pipelined_{groups}"] = float(cupy.abs(got - z).max()) / z_peak
        variants[f"whole_pipelined_{groups}"] = partial(_pipelined, x, parts, side)
    if before is not None:
        old_rows = before.channel_rows_cuda(xc, plan)
        out["differences"]["rows_before"] = float(cupy.abs(old_rows - rows).max()) / peak
        out["differences"]["whole_before"] = float(cupy.abs(before.filter_subbands_cuda(x, plan) - z).max()) / z_peak
        variants.update({"whole_before": lambda: before.filter_subbands_cuda(x, plan),
                         "rows_before": lambda: before.channel_rows_cuda(xc, plan),
                         "synthesis_before": lambda: before.synthesize_cuda(old_rows, plan, xc.shape[1], x.size)})
    out["rounds_ms"] = [{name: _events_median(fn) for name, fn in variants.items()} for _ in range(3)]
    walls = [name for name in ("whole", "whole_launched", "whole_before") if name in variants]
    out["wall_ms"] = [{f"{name}{'' if calls == 1 else '_x4'}": 1e3 * _gpu_median(variants[name], 7, calls)
                       for name in walls for calls in (1, 4)} for _ in range(3)]
    space = K.graph_space(cupy.cuda.Device().id, cupy.cuda.get_current_stream().ptr)
    out["graph_pool_bytes_per_template_sample"] = space.pool.total_bytes() / (args.templates * x.size)
    out["launches"] = {}
    for name, level, xin in levels:
        n_pad = -(-xin.shape[1] // K.NB) * K.NB
        for i, launch in enumerate(K.device_plan(level).launches):
            key = f"{name} F{launch.f} W{launch.w}" + (f" ring{launch.ring.size}" if launch.ring else "") + f" #{i}"
            out["launches"][key] = {
                "warps": int(launch.a.shape[0]), "warm_max": launch.warm_max,
                "segments": K.segments_for(launch.a.shape[0], launch.f, n_pad, K.ROW_WARPS, launch.warm_max),
                "ms": _events_median(lambda xin=xin, level=level, i=i: K.channel_rows_cuda(xin, level, False, i)),
                "ms_scans_only": _events_median(
                    lambda xin=xin, level=level, i=i: K.channel_rows_cuda(xin, level, False, i, warmup=False))}
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
