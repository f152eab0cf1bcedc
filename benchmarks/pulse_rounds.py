"""Kernel-only time of each boxcar round at the suite's pulse configuration (issue 7).

    python benchmarks/pulse_rounds.py [--compare OTHER_CUDA_PY] [--spt 5,7,9] [--log2n 26]

For the energy and the amplitude series of 2^26 samples and the decimation plan [32, 16 x 8], each
round's kernel is launched 20 times back to back and timed with CUDA events around them (its inputs,
the decimated series, are made beforehand), so the figures hold no host work.  ``--compare`` times
the kernel of another version of ``gwbatch/pulse/_cuda.py`` (a file) beside the current one;
``--spt`` sets the starts per thread to try.  Prints per series the total and each round's time.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks.pulse_kernel import PLAN, round_inputs  # noqa: E402
from gwbatch.pulse.plan import boxcar_plan  # noqa: E402

REPEAT = 20


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def round_ms(cupy, mod, kind: str, series, valid, n: int, rnd, consts, threshold: float) -> float:
    """Mean ms of one round's kernel over ``REPEAT`` queued launches."""
    d = rnd.decimation
    n_out = -(-n // d)
    nxt = cupy.empty(series.size // 2, cupy.float32)
    count = cupy.zeros(1, cupy.uint64)
    cap = max(1 << 14, n_out // 32)
    hits = cupy.empty(cap, cupy.int64), cupy.empty(cap, cupy.int32), cupy.empty(cap, cupy.float32)
    energy = kind == "energy"
    block = mod.block_length(energy, rnd.first_width, rnd.last_width, consts) if hasattr(mod, "block_length") else 1
    args = (series, valid, d, rnd.first_width, rnd.last_width, cupy.asarray(consts), threshold, energy, n_out, count,
            *hits, nxt)

    def launch():
        count.fill(0)
        mod._launch(*args, block) if block > 1 else mod._launch(*args)

    launch()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(REPEAT):
        launch()
    stop.record()
    stop.synchronize()
    return cupy.cuda.get_elapsed_time(start, stop) / REPEAT


def main(argv=None) -> int:
    import cupy

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--compare", type=Path, help="another version of gwbatch/pulse/_cuda.py to time as well")
    p.add_argument("--spt", default="5", help="starts per thread to try, comma-separated")
    p.add_argument("--log2n", type=int, default=26)
    args = p.parse_args(argv)
    here = Path(__file__).resolve().parent.parent / "gwbatch" / "pulse" / "_cuda.py"
    versions = [("current", load(here, "pulse_cuda_current"))]
    if args.compare:
        versions.append((str(args.compare), load(args.compare, "pulse_cuda_other")))
    plan, n = boxcar_plan(PLAN), 1 << args.log2n
    rng = np.random.default_rng(0)
    valid = cupy.ones(n, dtype=cupy.uint8)
    for kind in ("energy", "amplitude"):
        x = rng.standard_normal(n).astype(np.float32)
        pad = np.full(plan.max_width, 1.0 if kind == "energy" else 0.0, np.float32)
        inputs = [cupy.asarray(np.concatenate([x * x if kind == "energy" else x, pad]))]
        for _ in plan.rounds[1:]:
            prev = inputs[-1]
            inputs.append(prev[: 2 * (prev.size // 2)].reshape(-1, 2).sum(axis=1))
        mean, std = (1.0, np.sqrt(2.0)) if kind == "energy" else (0.0, 1.0)
        rounds = round_inputs(cupy, plan, kind, mean, std, 6.0)
        for label, mod in versions:
            for spt in (int(v) for v in args.spt.split(",")):
                mod.SPT = spt
                mod._kernel.cache_clear()
                blocks = [mod.block_length(kind == "energy", r.first_width, r.last_width, c)
                          if hasattr(mod, "block_length") else 1 for r, c in rounds]
                per = [round_ms(cupy, mod, kind, inputs[k], valid, n, rnd, consts, 6.0)
                       for k, (rnd, consts) in enumerate(rounds)]
                total = sum(per)
                print(f"{kind:9s} {label} SPT {spt}: {total:.3f} ms per series, {n / (total * 1e-3):.3e} samples/s; "
                      f"rounds (us) {[round(1e3 * t) for t in per]}, widths per test {blocks}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
