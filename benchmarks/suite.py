"""The kernel suite (issue 7): every GPU kernel at its seed's configuration, beside the seed's
published figure, its CPU twin, the peer a user would run instead, and the hardware's own limits
measured in the same run.

    python -m benchmarks [--backend auto|cupy|numpy] [--repeat 20] [--quick] [--only spiir,pulse]
                         [--campaign CONFIG] [--set key=value] [--campaign-out DIR]
                         [--out benchmarks/results/suite_<device>.json]

Limits, measured first: the FP32 rate (a kernel of independent fused multiply-adds; numba on the
CPU) in FP32 instructions per second, and the memory bandwidth (a device-to-device copy; a parallel
numba copy on the CPU), bytes read plus written per second.  Each row's ideal time comes from its
kernel's cost model and the limit that binds it:

- SPIIR filtering: 6 FP32 instructions per filter update in the real second-order form both
  backends run (the state ``s = c1 s1 + c2 s2 + x``: 2 fused multiply-adds; the template's sum
  ``b s + g s1``, complex: 4), ALGORITHMS.md §2 (the complex recurrence needs 8: ``b x``, 2
  multiplies; ``a y``, 4; the sum, 2 adds);
- coherent sky maximum: ``4 N_d + 5`` FP32 instructions per (candidate, trial, direction) (the two
  signal-space projections of ``N_d`` complex SNRs, ``|w0|^2 + |w1|^2`` and the comparison), §3.4;
- burst sky loop: 37 bytes per (direction, pixel), PycWB's bandwidth model, §4.5;
- single-pulse boxcars: 4 bytes per input sample, the series read once (the fused kernel reads
  each sample once plus its tile's halo, ~1.13 times, and writes 1/16 of it per group of rounds;
  one launch per round moved 12: 4 B x (1 + 1/2 + 1/2 + ...) read and written), §5.

The end-to-end row runs a whole campaign (``--campaign``, default ``configs/demo.yaml``; on the GPU
machine the one-day campaign of the scale benchmark) and compares the time its kernels ran with the
whole run's wall time (the manifest's ``timing.wall_seconds``: plan, bank preparation, cluster
start, chunk stage, reduction and figures; ``extra.chunk_stage_fraction`` is the share of the chunk
stage alone).  On GPUs that is the time each GPU had a kernel executing, which the
workers sample through NVML (the manifest's ``gpu_utilisation``, mean over GPUs): reading,
conditioning on the host, transfers, Python and idle workers all count against it.  On CPUs it is
the time the chunk tasks spent in their kernels' stages (``search`` and ``network``, from the
manifest's ``timing.task_stages``, shared among the workers); on GPUs that figure is kept in
``extra`` (with two tasks per GPU their stages overlap, so it can exceed the wall time).

``fraction`` is ideal / measured.  On the CPU backend the row's own time is the twin's; on the GPU
the twin and the CPU peers run on a smaller problem and are scaled linearly to the row's size (the
``*_scale`` fields say by how much).  ``--quick`` shrinks every problem (a smoke run for tests).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.timing import median_seconds  # noqa: E402


@dataclass
class Row:
    kernel: str
    config: str
    ms: float  # median time of the backend's kernel
    work: float  # units of work in the configuration
    unit: str  # what one unit of work is
    limit: str  # "fp32" or "bandwidth"
    ideal_ms: float  # the work at the measured limit
    seed: str  # the seed's published figure and its GPU
    twin_ms: float | None = None  # the CPU twin at this size (scaled when twin_scale > 1)
    twin_scale: float = 1.0
    peer: str = ""
    peer_ms: float | None = None
    peer_scale: float = 1.0
    extra: dict = field(default_factory=dict)

    @property
    def throughput(self) -> float:
        return self.work / (self.ms * 1e-3)

    @property
    def fraction(self) -> float:
        return self.ideal_ms / self.ms


# ------------------------------------------------------------------------------------------------
# hardware limits

FMA_SOURCE = r"""
extern "C" __global__ void fma_rate(float* out, const int iters, const float b, const float c)
{
    float v0 = threadIdx.x, v1 = v0 + 1, v2 = v0 + 2, v3 = v0 + 3, v4 = v0 + 4, v5 = v0 + 5, v6 = v0 + 6, v7 = v0 + 7;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int k = 0; k < 16; ++k) {
            v0 = fmaf(v0, b, c); v1 = fmaf(v1, b, c); v2 = fmaf(v2, b, c); v3 = fmaf(v3, b, c);
            v4 = fmaf(v4, b, c); v5 = fmaf(v5, b, c); v6 = fmaf(v6, b, c); v7 = fmaf(v7, b, c);
        }
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = v0 + v1 + v2 + v3 + v4 + v5 + v6 + v7;
}
"""


def gpu_limits(repeat: int, quick: bool) -> dict:
    import cupy

    kernel = cupy.RawKernel(FMA_SOURCE, "fma_rate")
    sms = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["multiProcessorCount"]
    blocks, threads, iters = sms * 8, 256, 256 if quick else 4096
    out = cupy.empty(blocks * threads, cupy.float32)
    t = median_seconds(lambda: kernel((blocks,), (threads,), (out, np.int32(iters), np.float32(0.999), np.float32(1e-3))),
                       repeat, cupy, queued=True)
    fma = blocks * threads * iters * 16 * 8
    n = (1 << 24) if quick else (1 << 29)  # 2 GiB of float32 per array
    src, dst = cupy.ones(n, cupy.float32), cupy.empty(n, cupy.float32)
    t_copy = median_seconds(lambda: cupy.copyto(dst, src), repeat, cupy, queued=True)
    return {"fp32_per_s": fma / t, "bandwidth_bytes_per_s": 2 * 4 * n / t_copy, "fp32_kind": "FMA instructions"}


def cpu_limits(repeat: int, quick: bool) -> dict:
    import numba

    @numba.njit(parallel=True, fastmath=True, cache=False)
    def fma_rate(out, iters, b, c):
        for t in numba.prange(out.shape[0]):
            v = np.arange(64).astype(np.float32) + np.float32(t)
            for _ in range(iters):
                for k in range(64):
                    v[k] = v[k] * b + c
            out[t] = v.sum()

    @numba.njit(parallel=True, cache=False)
    def copy(dst, src):
        for i in numba.prange(src.size):
            dst[i] = src[i]

    lanes = numba.get_num_threads() * 8
    out = np.empty(lanes, np.float32)
    iters = 2000 if quick else 50000
    t = median_seconds(lambda: fma_rate(out, iters, np.float32(0.999), np.float32(1e-3)), repeat)
    n = (1 << 22) if quick else (1 << 27)
    src, dst = np.ones(n, np.float32), np.empty(n, np.float32)
    t_copy = median_seconds(lambda: copy(dst, src), repeat)
    return {"fp32_per_s": lanes * iters * 64 / t, "bandwidth_bytes_per_s": 2 * 4 * n / t_copy,
            "fp32_kind": "multiply-adds (numba, fastmath)"}


# ------------------------------------------------------------------------------------------------
# kernels


#: FP32 instructions per SPIIR filter update in the form the kernel runs (gwbatch.spiir.filtering.coefficients:
#: 2 fused multiply-adds for the state, 4 for the template's sum; the complex recurrence needs 8).
SPIIR_FP32_PER_UPDATE = 6


def spiir_row(backend: str, repeat: int, quick: bool, limits: dict) -> Row:
    """Seed 000 table II: 1024 templates x 512 filters x 4096 samples."""
    from benchmarks.spiir_kernel import cuda_median, fft_matched_filter, synthetic_bank
    from gwbatch.spiir.filtering import filter_bank_numba

    n_t, n_f, n = (64 if quick else 1024), 512, 4096
    a, b, d = synthetic_bank(n_t, n_f)
    # every filter is updated at every sample, as the seed and the issue count them (with this bank's
    # delays, 0..10220 samples, a filter delayed by d >= n sees only the zeros before the data)
    updates = float(n_t * n_f * n)
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    sub = max(1, n_t // 16)  # the twin on a slice of the bank, scaled
    twin = median_seconds(lambda: filter_bank_numba(x, a[:sub], b[:sub], d[:sub]), max(1, repeat // 5)) * n_t / sub
    from scipy.signal import lfilter

    def scipy_one():
        z = np.zeros(n, np.complex128)
        for al, bl, dl in zip(a[0], b[0], d[0]):
            if dl < n:
                z[dl:] += lfilter([bl], [1.0, -al], x[: n - dl].astype(np.float64))

    peer_ms, peer, peer_scale = median_seconds(scipy_one, 1) * 1e3 * n_t, "scipy.signal.lfilter, one filter per call", n_t
    extra = {}
    if backend == "cupy":
        import cupy

        from gwbatch.spiir._cuda import packed_bank, run_class, shifted_input, workspace

        pad = int(d.max()) + 16
        xs, n4 = shifted_input(cupy.asarray(x), pad, n)
        packed = packed_bank(a, b, d, 16)
        ws = workspace(packed[0].shape[0], packed[0].size, n, 1)
        ms = cuda_median(lambda: run_class(xs, n4, pad, n, *packed, 16, 1, ws), repeat)
        fft = fft_matched_filter(repeat)["64s_segments"]
        extra["scipy_lfilter_ms"] = peer_ms
        peer, peer_ms, peer_scale = ("cuFFT matched filtering of 1024 templates, 64 s segments, per 4096 samples",
                                     fft["ms_per_4096_samples"] * n_t / 1024, 1.0)
    else:
        ms = twin * 1e3
    return Row("SPIIR filtering", f"{n_t} templates x {n_f} filters x {n} samples", ms, updates, "filter updates",
               "fp32", SPIIR_FP32_PER_UPDATE * updates / limits["fp32_per_s"] * 1e3, "21.4 ms on a P100 (seed 000, table II)",
               twin * 1e3, n_t / sub, peer, peer_ms, peer_scale, extra)


def coherent_row(backend: str, repeat: int, quick: bool, limits: dict) -> Row:
    """Seed 000 table III: 1000 candidates x (100 trials + zero lag) x 12288 directions x 3 detectors."""
    from benchmarks.coherent_kernel import problem, time_cuda
    from gwbatch.coherent.statistic import _inputs, _max_over_sky, twin_tables

    n_cand, n_trials, order, fs = (50 if quick else 1000), 100, 5, 2048.0
    n_dir = 12 * 4**order
    evals = float(n_cand * (n_trials + 1) * n_dir)
    sub = 8
    small = problem(sub, order, fs)
    snr, slot, sample, pivot = _inputs(np, small["snr"], small["slot"], small["sample"], small["pivot"])
    tab = small["table"]
    out = (np.empty((sub, n_trials + 1)), np.empty((sub, n_trials + 1), np.int32))
    args = (snr, slot, sample, pivot, *twin_tables(tab), n_trials, int(0.1 * fs), 0, snr.shape[2], np.zeros(sub, np.int64))
    twin = median_seconds(lambda: _max_over_sky(*args, *out), max(1, repeat // 5)) * n_cand / sub
    if backend == "cupy":
        ms = time_cuda(problem(n_cand, order, fs), n_trials, int(0.1 * fs), repeat)[0] * 1e3
    else:
        ms = twin * 1e3
    return Row("coherent sky maximum", f"{n_cand} candidates x {n_trials + 1} trials x {n_dir} directions x 3 detectors",
               ms, evals, "direction evaluations", "fp32", (4 * 3 + 5) * evals / limits["fp32_per_s"] * 1e3,
               "9.35 ms on a P100 (seed 000, table III; 119 ms before optimisation)", twin * 1e3, n_cand / sub,
               "none: gstlal-spiir's postcoh is the seed itself", None)


def skyloop_row(backend: str, repeat: int, quick: bool, limits: dict) -> Row:
    """Issue 7: 196608 directions x 1000 pixels x 3 detectors (4 pixels per cluster)."""
    from benchmarks.burst_skyloop import problem, time_cuda, time_numpy

    order, n_pix = (5 if quick else 7), 1000
    n_dir = 12 * 4**order
    twin_order = 5
    small_table, small_batch = problem(twin_order, n_pix, 4)
    twin = time_numpy(small_table, small_batch, max(1, repeat // 10))["kernel_ms"] * n_dir / small_table.n_dir
    if backend == "cupy":
        table, batch = problem(order, n_pix, 4)
        ms = time_cuda(table, batch, repeat)["kernel_ms"]
    else:
        ms = twin
    work = float(n_dir * n_pix)
    return Row("burst sky loop", f"{n_dir} directions x {n_pix} pixels x 3 detectors", ms, work, "direction-pixels",
               "bandwidth", 37 * work / limits["bandwidth_bytes_per_s"] * 1e3,
               "PycWB's estimate 3.6 ms on an A100 (bandwidth model); seed 003: 15-21x over an SSE CPU (GTX 480)",
               twin, n_dir / small_table.n_dir, "none: cWB's CPU sky loop is the seed's baseline", None)


def pulse_row(backend: str, repeat: int, quick: bool, limits: dict) -> Row:
    """Issue 2 / 7: 3 series x 2^26 samples, boxcar widths to 8192 through decimation [32, 16 x 8]."""
    from benchmarks.pulse_kernel import PLAN, kernel_rounds, round_inputs
    from gwbatch._xp import get_xp
    from gwbatch.pulse.plan import boxcar_plan

    log2n = 20 if quick else 26
    n, series = 1 << log2n, 3
    plan = boxcar_plan(PLAN)

    def time_on(xp, n_samples: int, repeat_: int) -> float:
        rng = np.random.default_rng(0)
        data = [xp.asarray(rng.standard_normal(n_samples).astype(np.float32)) for _ in range(series)]
        valid = xp.ones(n_samples, dtype=xp.uint8)
        padded = [xp.concatenate([y * y, xp.full(plan.max_width, 1.0, dtype=xp.float32)]) for y in data]
        rounds = round_inputs(xp, plan, "energy", 1.0, np.sqrt(2.0), 6.0)
        return median_seconds(lambda: [kernel_rounds(xp, s, valid, n_samples, rounds, "energy", 6.0) for s in padded],
                              repeat_, xp)

    twin_n = min(n, 1 << 22)
    twin = time_on(np, twin_n, max(1, repeat // 5)) * n / twin_n

    def numpy_boxcars(y: np.ndarray, widths: np.ndarray) -> np.ndarray:
        c = np.concatenate([[0.0], np.cumsum(y, dtype=np.float64)])
        best = np.zeros(y.size - widths.max())
        for w in widths:
            np.maximum(best, c[w:w + best.size] - c[:best.size], out=best)
        return best

    peer_n = min(n, 1 << 18)
    y = np.random.default_rng(1).standard_normal(peer_n + 8192).astype(np.float32) ** 2
    widths = np.unique(np.round(np.geomspace(1, 8192, 64)).astype(int))  # a user's log-spaced widths
    peer_ms = median_seconds(lambda: numpy_boxcars(y, widths), 1) * 1e3 * series * n / peer_n
    ms = time_on(get_xp("cupy"), n, repeat) * 1e3 if backend == "cupy" else twin * 1e3
    work = float(series * n)
    return Row("single-pulse boxcars", f"{series} series x 2^{log2n} samples, widths 1..{plan.max_width}", ms, work,
               "samples", "bandwidth", 4 * work / limits["bandwidth_bytes_per_s"] * 1e3,
               "seed 004: 17x over an OpenMP CPU (Titan XP); issue 7 asks >= 1.5e11 samples/s", twin * 1e3,
               n / twin_n, f"numpy cumulative-sum boxcars, {widths.size} log-spaced widths, no decimation", peer_ms,
               series * n / peer_n)


#: The campaign the end-to-end row runs (``--campaign``, ``--set``); on the GPU machine the one-day
#: campaign of the scale benchmark, e.g. ``--campaign configs/one-day.yaml --set data.store=S``.
CAMPAIGN = {"config": ROOT / "configs" / "demo.yaml", "sets": []}


def campaign_row(backend: str, repeat: int, quick: bool, limits: dict) -> Row:
    """End to end: a whole campaign on the backend's local cluster.  Its "ideal" is the time its
    kernels ran: on GPUs the chunk stage times the GPUs' sampled utilisation (NVML: the fraction of
    time a kernel was executing), on CPUs the time the chunk tasks spent in their kernels' stages
    (``search`` and ``network``, summed over tasks and shared among the workers); the fraction says
    how much of the whole run that is, i.e. what preparation, reading, conditioning, transfers,
    orchestration, idle workers and the reduction leave to the kernels."""
    import subprocess
    import tempfile

    config = Path(CAMPAIGN["config"])
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(CAMPAIGN.get("out") or tmp)
        argv = [sys.executable, "-m", "gwbatch", "run", str(config), "--out", str(out), "--overwrite", "--no-progress",
                "--set", f"backend={backend}"]
        for item in CAMPAIGN["sets"]:
            argv += ["--set", item]
        run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(f"campaign {config} failed (exit {run.returncode}): {run.stderr.strip()[-800:]}")
        manifest = json.loads((out / "manifest.json").read_text())
    stages = {}
    for m in manifest.get("members") or [manifest["timing"]]:  # a campaign of several searches: each one's
        for k, v in m["task_stages"].items():
            stages[k] = stages.get(k, 0.0) + v
    workers = int(manifest["cluster"]["workers"])
    chunk_wall = float(manifest["timing"]["stages"]["chunks"])
    kernels = stages.get("search", 0.0) + stages.get("network", 0.0)
    span = float(manifest["plan"]["span_duration"]) * len(manifest["plan"]["ifos"])  # every search reads it
    busy = (manifest.get("gpu_utilisation") or {}).get("mean")
    ideal, limit = ((chunk_wall * busy / 100, "GPU kernel time (NVML)") if backend == "cupy" and busy is not None
                    else (kernels / workers, "kernel stages' time"))
    wall = float(manifest["timing"]["wall_seconds"])
    return Row("end to end", f"{manifest['campaign']['name']} ({config.name}), {workers} worker(s)", wall * 1e3,
               span, "detector-seconds searched", limit, ideal * 1e3,
               "issue 7 asks the kernels >= 80% of the run",
               extra={"task_stages": stages, "kernel_stage_fraction": kernels / workers / chunk_wall,
                      "chunk_stage_fraction": ideal / chunk_wall,
                      "gpu_utilisation_mean": busy, "threads_per_worker": manifest["cluster"].get("threads_per_worker"),
                      "wall_seconds": wall, "run_stages": manifest["timing"]["stages"]})


ROWS = {"spiir": spiir_row, "coherent": coherent_row, "skyloop": skyloop_row, "pulse": pulse_row,
        "campaign": campaign_row}


def markdown(record: dict) -> str:
    lim = record["limits"]
    lines = [f"Device: {record['device']}; FP32 {lim['fp32_per_s']:.3e} {lim['fp32_kind']}/s, memory "
             f"{lim['bandwidth_bytes_per_s'] / 1e12:.2f} TB/s (measured in this run).", "",
             "| kernel | configuration | median (ms) | throughput | fraction of limit | seed | CPU twin (ms) | peer (ms) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in record["rows"]:
        twin = "n/a" if r["twin_ms"] is None else f"{r['twin_ms']:.4g}" + (" (scaled)" if r["twin_scale"] > 1 else "")
        peer = r["peer"] if r["peer_ms"] is None else (
            f"{r['peer_ms']:.4g}" + (" (scaled)" if r["peer_scale"] > 1 else "") + f": {r['peer']}")
        lines.append(f"| {r['kernel']} | {r['config']} | {r['ms']:.4g} | {r['throughput']:.3e} {r['unit']}/s | "
                     f"{r['fraction']:.0%} of {r['limit']} | {r['seed']} | {twin} | {peer} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="auto", choices=("auto", "cupy", "numpy"))
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="small problems (a smoke run)")
    p.add_argument("--only", default=",".join(ROWS), help=f"comma-separated rows of {', '.join(ROWS)}")
    p.add_argument("--campaign", type=Path, default=CAMPAIGN["config"], help="the end-to-end row's campaign")
    p.add_argument("--set", action="append", default=[], help="overrides for that campaign (key=value)")
    p.add_argument("--campaign-out", type=Path, help="keep that campaign's outputs here (default: a temporary "
                                                       "directory, removed)")
    p.add_argument("--out", type=Path, help="JSON file to write")
    args = p.parse_args(argv)
    CAMPAIGN.update(config=args.campaign, sets=args.set, out=args.campaign_out)
    from gwbatch._xp import device_name, resolve_backend

    chosen = [k.strip() for k in args.only.split(",") if k.strip()]
    unknown = [k for k in chosen if k not in ROWS]
    if unknown:
        p.error(f"--only {','.join(unknown)}: unknown row(s); allowed: {', '.join(ROWS)}")
    backend = resolve_backend(args.backend)
    limits = (gpu_limits if backend == "cupy" else cpu_limits)(args.repeat, args.quick)
    record = {"date": time.strftime("%Y-%m-%d"), "command": "python -m benchmarks " + " ".join(argv or sys.argv[1:]),
              "device": device_name(backend), "backend": backend, "cores": os.cpu_count(), "quick": args.quick,
              "limits": limits, "rows": []}
    for key in chosen:
        row = ROWS[key](backend, args.repeat, args.quick, limits)
        record["rows"].append({**asdict(row), "throughput": row.throughput, "fraction": row.fraction})
        print(f"{row.kernel}: {row.ms:.4g} ms, {row.throughput:.3e} {row.unit}/s, {row.fraction:.0%} of {row.limit}",
              flush=True)
    print(markdown(record))
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0
