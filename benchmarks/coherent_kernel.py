"""Coherent post-processing kernel: maximum coherent SNR over the sky per (candidate, trial).

Seed configuration (seed 000 table III; P100: 9.35 ms, from 119 ms unoptimised): C = 1000
candidates x (N_bg = 100 trials + zero lag) x 12288 directions (HEALPix order 5) x 3 detectors
(H1, L1, V1), SNR series at 2048 Hz, one template per candidate.  Also: 4096 Hz series, the
196608-direction grid (order 7).  ``--backend numpy`` runs
the numba CPU twin on fewer candidates and reports the same per-evaluation rate.

"Kernel" is the launch alone, on a launch layout prepared once (candidates grouped by pivot, block
table: what each call builds from the host pivots); "with the launch layout" adds building and
uploading it.  Neither includes the null SNR at the maxima (a vectorised gather; the end-to-end
``max_over_sky`` row has it).  Times are CUDA-event medians after a warm-up; the kernel alone is
queued behind a spin kernel so that the host's launch latency is not counted
(``benchmarks.timing.median_seconds(queued=True)``), the call is not.  The GPU's clock is whatever it
runs at.

usage: python benchmarks/coherent_kernel.py [--backend cupy|numpy] [--repeat 20] [--out results.json]
       [--define TILE=256 WARPS=16,MIN_BLOCKS=2 ...]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks.timing import define_variant, median_seconds  # noqa: E402
from gwbatch._xp import device_name  # noqa: E402
from gwbatch.coherent.network import coherent_sky_table  # noqa: E402
from gwbatch.coherent.statistic import _inputs, _max_over_sky, max_over_sky, twin_tables  # noqa: E402
from gwbatch.sky.grid import sky_grid  # noqa: E402
from gwbatch.sky.network import network_geometry  # noqa: E402

GPS = 1187008882.4
IFOS = ("H1", "L1", "V1")


@functools.lru_cache(maxsize=2)
def problem(n_cand: int, order: int, fs: float, seconds: float = 32.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    n = int(seconds * fs)
    snr = (rng.standard_normal((3, n_cand, n), np.float32)
           + 1j * rng.standard_normal((3, n_cand, n), np.float32)).astype(np.complex64)
    return dict(snr=snr, slot=np.arange(n_cand), sample=rng.integers(int(fs), n - int(fs), n_cand),
                pivot=np.arange(n_cand) % 3,
                table=coherent_sky_table(network_geometry(IFOS, sky_grid(order), GPS), fs, np.array([100.0, 120.0, 60.0])))


def time_cuda(case: dict, n_trials: int, step: int, repeat: int) -> tuple[float, float]:
    """``(kernel, call)``: CUDA-event medians of the kernel launch alone (launch layout prepared
    once, as a chunk does per call) and of the whole ``max_over_sky_cuda`` call (layout built and
    uploaded from the host pivots each time)."""
    import cupy

    from gwbatch.coherent._cuda import (
        device_sky_table,
        launch,
        launch_plan,
        max_over_sky_cuda,
    )

    args = _inputs(cupy, case["snr"], case["slot"], case["sample"], case["pivot"])
    snr, slot, sample, _ = args
    span = snr.shape[2]
    table = case["table"]
    plan = launch_plan(case["pivot"], snr.shape[0], n_trials, device_sky_table(table)["rows"])
    rho_c2 = cupy.empty((slot.size, n_trials + 1), cupy.float32)
    pixel = cupy.empty((slot.size, n_trials + 1), cupy.int32)
    kernel = lambda: launch(snr, slot, sample, table, plan, n_trials, step, 0, span, rho_c2, pixel)  # noqa: E731
    call = lambda: max_over_sky_cuda(*args, table, n_trials, step, 0, span, pivot_host=case["pivot"])  # noqa: E731
    return median_seconds(kernel, repeat, cupy, queued=True), median_seconds(call, repeat, cupy)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("cupy", "numpy"), default="cupy")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--define", nargs="*", default=[], type=define_variant, metavar="NAME=V[,NAME=V]",
                    help="also time the seed and 4096 Hz configurations with these compile-time constants "
                         "(gwbatch.coherent._cuda.DEFINES), one variant per argument")
    args = ap.parse_args()
    from gwbatch.coherent._cuda import PROFILES

    for constants in args.define:
        if constants.get("PROFILE", "narrow") not in PROFILES:
            ap.error(f"--define PROFILE={constants['PROFILE']}: the profiles are {', '.join(PROFILES)}")
    rows = []
    n_trials = 100
    if args.backend == "cupy":
        import cupy

        configs = [("seed: 1000 x 101 x 12288 x 3, 2048 Hz", 1000, 5, 2048.0),
                   ("1000 x 101 x 12288 x 3, 4096 Hz", 1000, 5, 4096.0),
                   ("100 x 101 x 196608 x 3, 2048 Hz", 100, 7, 2048.0)]
        for label, n_cand, order, fs in configs:
            case = problem(n_cand, order, fs)
            t, t_call = time_cuda(case, n_trials, int(0.1 * fs), args.repeat)
            evals = n_cand * (n_trials + 1) * sky_grid(order).size
            rows.append(dict(case=label, seconds=t, evaluations_per_s=evals / t, call_seconds=t_call))
            print(f"{label:42s} {t * 1e3:8.3f} ms   {evals / t:.3e} direction-evaluations/s; "
                  f"with the launch layout: {t_call * 1e3:.3f} ms", flush=True)
        from gwbatch.coherent import _cuda

        default = dict(_cuda.DEFINES)
        for constants in args.define:  # tuning: recompile with other constants
            variant = ",".join(f"{k}={v}" for k, v in constants.items())
            _cuda.DEFINES.update(constants)
            _cuda._module.cache_clear()
            for label, fs in (("seed config", 2048.0), ("4096 Hz", 4096.0)):
                try:
                    t, _ = time_cuda(problem(1000, 5, fs), n_trials, int(0.1 * fs), args.repeat)
                except ValueError as err:  # e.g. windows too large for the variant's shared memory
                    print(f"{label + ', ' + variant:42s} not run: {err}", flush=True)
                    continue
                rows.append(dict(case=f"{label}, {variant}", seconds=t))
                print(f"{label + ', ' + variant:42s} {t * 1e3:8.3f} ms", flush=True)
            _cuda.DEFINES.clear()
            _cuda.DEFINES.update(default)
            _cuda._module.cache_clear()
        case = problem(1000, 5, 2048.0)
        snr = cupy.asarray(case["snr"])
        rest = {k: v for k, v in case.items() if k != "snr"}
        max_over_sky(snr, **rest, n_trials=n_trials, step=204)
        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        max_over_sky(snr, **rest, n_trials=n_trials, step=204)
        cupy.cuda.Device().synchronize()
        t = time.perf_counter() - t0
        rows.append(dict(case="max_over_sky() end to end (kernel + null SNR + host set-up), seed config", seconds=t))
        print(f"{'max_over_sky() end to end, seed config':42s} {t * 1e3:8.3f} ms", flush=True)
    else:
        n_cand = 8
        case = problem(n_cand, 5, 2048.0)
        snr, slot, sample, pivot = _inputs(np, case["snr"], case["slot"], case["sample"], case["pivot"])
        tab = case["table"]
        a = (snr, slot, sample, pivot, *twin_tables(tab), n_trials, 204, 0, snr.shape[2], np.zeros(slot.size, np.int64))
        out = (np.empty((n_cand, n_trials + 1)), np.empty((n_cand, n_trials + 1), np.int32))
        t = median_seconds(lambda: _max_over_sky(*a, *out), max(1, args.repeat // 5))  # the warm-up call compiles
        evals = n_cand * (n_trials + 1) * 12288
        rows.append(dict(case=f"numba twin, {n_cand} x 101 x 12288 x 3", seconds=t, evaluations_per_s=evals / t,
                         seed_config_seconds=t * 1000 / n_cand))
        print(f"numba twin {n_cand} x 101 x 12288 x 3: {t:.3f} s, {evals / t:.3e} evaluations/s; "
              f"the seed configuration would take {t * 1000 / n_cand:.0f} s")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(dict(device=device_name(args.backend), rows=rows), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
