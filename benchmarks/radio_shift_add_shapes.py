"""The dedispersion kernel's shape on the GPU: every shape runs the sub-band scheme of the
SKA-MID-like plan (benchmarks/radio_dedisperse.py's defaults) and is timed against the library's.

A shape is ``THREADS,SPT,TILE,CH,MAX_SPREAD,MIN_BLOCKS`` (:mod:`gwbatch.radio._cuda`: threads a
block, samples a thread, outputs a tile, rows a staged chunk, the widest delay spread of a tile,
and the blocks ``__launch_bounds__`` asks a multiprocessor to hold).  The kernel source is the
library's with those constants; each shape's series must equal the library's bit for bit (the
additions are the same, in the same order).  Per shape: seconds per block, x real time, and the two
stages' seconds summed over the decimation levels.

The default block is 8 s of new output: the whole plan's series are held three times (the library's
reference, the library's timed run and a shape's), and with 32 s blocks that passes an H200's memory.

usage: python benchmarks/radio_shift_add_shapes.py [--seconds 8] [--repeat 5]
           [--shape 128,4,16,8,128,5 --shape 256,2,16,8,128,4 ...] [--out shapes.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks.timing import median_seconds  # noqa: E402
from gwbatch._xp import device_name  # noqa: E402
from gwbatch.radio import _cuda  # noqa: E402
from gwbatch.radio.dedisperse import decimate_pairs, dedisperse, level_passes  # noqa: E402
from gwbatch.radio.dmplan import dm_plan, subband_plan  # noqa: E402

#: The library's shape first, then the one it replaced and some neighbours.
SHAPES = ("128,4,16,8,128,5", "256,2,16,8,128,4", "128,4,16,8,128,4", "128,4,16,8,128,6", "128,4,16,4,128,5",
          "128,4,16,8,256,5", "256,2,16,8,256,4", "64,4,16,4,128,5")


def kernel(cp, threads: int, spt: int, tile: int, ch: int, spread: int, blocks: int):
    """The library's source compiled with this shape's constants."""
    source = (_cuda.SOURCE.replace(f"#define THREADS {_cuda.THREADS}", f"#define THREADS {threads}")
              .replace(f"#define MAX_SPREAD {_cuda.MAX_SPREAD}", f"#define MAX_SPREAD {spread}")
              .replace(f"#define MIN_BLOCKS {_cuda.MIN_BLOCKS}", f"#define MIN_BLOCKS {blocks}"))
    name = _cuda.kernel_name(tile, spt, ch)
    return cp.RawModule(code=source, options=_cuda.OPTIONS, name_expressions=(name,)).get_function(name)


def shaped_pass(cp, fn, shape, inp, step, n_out: int, tables: dict):
    """One pass as :func:`gwbatch.radio._cuda.shift_add` launches it, with ``shape``."""
    threads, spt, tile, ch, spread, _ = shape
    key = (id(step), tile, spread)
    if key not in tables:
        table, widest = _cuda.tiles(step.row_base, step.delays, tile, spread)
        tables[key] = (cp.asarray(table), cp.asarray(np.ascontiguousarray(step.delays, np.int32)), widest, step)
    table, delays, widest, _ = tables[key]
    out = cp.empty((delays.shape[0], n_out), dtype=cp.float32)
    seg_len = -(-(threads * spt + widest) // 4) * 4
    shared = 4 * 2 * (ch * seg_len + ch * tile + ch)
    if shared > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = shared
    time_tiles = -(-n_out // (threads * spt))
    for first in range(0, time_tiles, _cuda.MAX_GRID_Y):
        fn((table.shape[0], min(_cuda.MAX_GRID_Y, time_tiles - first)), (threads,),
           (inp, cp.int64(inp.shape[1]), cp.int32(step.row_stride), table, delays, cp.int32(delays.shape[1]),
            cp.int32(seg_len), out, cp.int64(n_out), cp.int64(first)), shared_mem=shared)
    return out


def main() -> None:
    import cupy as cp

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="new output per block, s")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--shape", action="append", help="THREADS,SPT,TILE,CH,MAX_SPREAD,MIN_BLOCKS (repeatable)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    nchan, tsamp = 4096, 64e-6
    freqs = 1670.0 - 810.0 / nchan * np.arange(nchan)
    plan = dm_plan(freqs, tsamp, 0.0, 3000.0, 40e-6, 1.25)
    scheme = subband_plan(plan, None, 1.1)
    step = 1 << int(np.log2(plan.decimation.max()))
    n_new = -(-int(round(args.seconds / tsamp)) // step) * step
    span = n_new * tsamp
    x = cp.random.default_rng(0).standard_normal((nchan, plan.overlap + n_new), dtype=cp.float32)
    ladder = {1: x}
    for d, _, _ in level_passes(plan, scheme):
        while max(ladder) < d:
            ladder[2 * max(ladder)] = decimate_pairs(ladder[max(ladder)])
    reference = [b.series for b in dedisperse(x, freqs, tsamp, plan, scheme)]
    library = median_seconds(lambda: dedisperse(x, freqs, tsamp, plan, scheme), args.repeat, cp)
    rows = [{"shape": "library", "seconds": library, "x_real_time": span / library}]
    tables: dict = {}
    for text in args.shape or SHAPES:
        shape = tuple(int(v) for v in text.split(","))
        fn = kernel(cp, *shape)

        def passes(stage=None, shape=shape, fn=fn):
            outs = []
            for d, _, steps in level_passes(plan, scheme):
                series = ladder[d]
                for i, one in enumerate(steps):
                    if stage is None or i <= stage:
                        series = shaped_pass(cp, fn, shape, series, one, plan.n_out(x.shape[1], d) + one.extra, tables)
                outs.append(series)
            return outs

        equal = all(bool(cp.array_equal(a, b)) for a, b in zip(passes(), reference))
        seconds = median_seconds(passes, args.repeat, cp)
        stage1 = median_seconds(lambda: passes(0), args.repeat, cp)
        rows.append({"shape": text, "seconds": seconds, "x_real_time": span / seconds, "stage1_s": stage1,
                     "stage2_s": seconds - stage1, "equal": equal})
    print(f"device {device_name('cupy')}; {plan.ndm} trials, {scheme.nsub} sub-bands, block {span:.2f} s new")
    print(f"{'THREADS,SPT,TILE,CH,SPREAD,BLOCKS':34s} {'s per block':>11s} {'x real time':>11s} {'stage 1':>8s} "
          f"{'stage 2':>8s} equal")
    for r in rows:
        print(f"{r['shape']:34s} {r['seconds']:11.4f} {r['x_real_time']:11.1f} {r.get('stage1_s', float('nan')):8.4f} "
              f"{r.get('stage2_s', float('nan')):8.4f} {r.get('equal', '')}")
    if args.out:
        args.out.write_text(json.dumps({"device": device_name("cupy"), "span_s": span, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
