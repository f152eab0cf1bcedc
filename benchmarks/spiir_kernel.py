"""SPIIR filtering throughput (issue 3), with the seeds' synthetic banks.

(a) 1024 templates x 512 filters x 4096 samples, mean delay step 20 (seed 000 table II; P100 21.4 ms)
(b) 1 template x 32..512 filters x 4096 samples (seed 002 fine-grained; Pascal 0.124-0.149 ms)
(c) the same 1024-template bank by FFT matched filtering with cuFFT (overlap-save; time per 4096
    output samples with long segments, what many analysts would run instead)
(d) --backend numpy: the numba CPU twin against scipy.signal.lfilter, one template per call

Synthetic filters: |a| in [0.995, 0.9999], random phases (frequencies 20-1000 Hz at 4096 Hz), random
complex b, delays d_l = 20 l.  Times are CUDA-event medians after a warm-up.

(e) the precision of the kernel's arithmetic (the real second-order form) against float64 filters,
    on this synthetic bank and, with ``--bank FILE``, on a built bank (each template's largest error
    relative to its output's peak, white noise input)

usage: python benchmarks/spiir_kernel.py [--backend cupy|numpy] [--repeat 20] [--out results.json]
                                         [--define GROUP=1 GROUP=4 ...] [--bank FILE.h5]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from benchmarks.timing import define_variant, median_seconds  # noqa: E402
from gwbatch._xp import device_name  # noqa: E402

FS = 4096


def synthetic_bank(n_templates: int, n_filters: int, step: int = 20, seed: int = 0):
    rng = np.random.default_rng(seed)
    mag = rng.uniform(0.995, 0.9999, (n_templates, n_filters))
    freq = rng.uniform(20.0, 1000.0, (n_templates, n_filters)) / FS
    a = (mag * np.exp(-2j * np.pi * freq)).astype(np.complex64)
    b = (rng.standard_normal((n_templates, n_filters)) + 1j * rng.standard_normal((n_templates, n_filters))).astype(np.complex64)
    d = np.broadcast_to(np.arange(n_filters, dtype=np.int32) * step, (n_templates, n_filters)).copy()
    return a, b, d


def graphed(fn):
    """Capture ``fn``'s launches once as a CUDA graph; return a function that replays it."""
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        fn()  # warm-up: compile kernels, fill caches outside the capture
        stream.synchronize()
        stream.begin_capture()
        fn()
        graph = stream.end_capture()

    def replay():
        graph.launch(stream)

    replay.stream = stream
    return replay


def cuda_median(fn, repeat: int) -> float:
    """Median ms of ``fn()`` on the GPU, timed on ``fn.stream`` when it has one."""
    import cupy

    return median_seconds(fn, repeat, cupy, stream=getattr(fn, "stream", None), queued=True) * 1e3


def gpu(repeat: int, defines: list[dict]) -> dict:
    import cupy

    from gwbatch.spiir import _cuda
    from gwbatch.spiir._cuda import (
        filter_bank_cuda,
        launch_plan,
        packed_bank,
        run_class,
        shifted_input,
        workspace,
    )

    rows = {}
    x = cupy.asarray(np.random.default_rng(1).standard_normal(4096).astype(np.float32))

    def prepared(a, b, d, f, segments=1, graph=False):
        """Pack once (as a campaign does per bank), then time only the kernels (optionally as a
        replayed CUDA graph, which removes the host's launch overhead for tiny problems)."""
        pad = int(d.max()) + 16
        xs, n4 = shifted_input(x, pad, 4096)
        args = packed_bank(a, b, d, f)
        ws = workspace(args[0].shape[0], args[0].size, 4096, segments)
        fn = lambda: run_class(xs, n4, pad, 4096, *args, f, segments, ws)  # noqa: E731
        return graphed(fn) if graph else fn

    a, b, d = synthetic_bank(1024, 512)
    updates = 1024 * 512 * 4096
    plan = launch_plan(1024, 512, 4096)
    for f in (16, 8, 4):
        t = cuda_median(prepared(a, b, d, f=f), repeat)
        rows[f"a_1024x512x4096_F{f}"] = {"ms": t, "filter_updates_per_s": updates / (t * 1e-3), "planned": f == plan[0]}
    default = dict(_cuda.DEFINES)
    for constants in defines:  # tuning: the kernel recompiled with other constants
        _cuda.DEFINES.update(constants)
        t = cuda_median(prepared(a, b, d, f=16), repeat)
        variant = ",".join(f"{k}={v}" for k, v in constants.items())
        rows[f"a_1024x512x4096_F16_{variant}"] = {"ms": t, "filter_updates_per_s": updates / (t * 1e-3)}
        _cuda.DEFINES.clear()
        _cuda.DEFINES.update(default)
    # correctness of this configuration against the CPU twin on a subset
    from gwbatch.spiir.filtering import filter_bank_numba

    sub = slice(0, 8)
    ref = filter_bank_numba(cupy.asnumpy(x), a[sub], b[sub], d[sub])
    got = filter_bank_cuda(x, a[sub], b[sub], d[sub], f=16).get()
    rows["a_max_rel_err_vs_cpu"] = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
    for n_f in (32, 64, 128, 256, 512):
        a, b, d = synthetic_bank(1, n_f, seed=n_f)
        f, seg = launch_plan(1, n_f, 4096)
        rows[f"b_1x{n_f}x4096"] = {
            "ms_graph": cuda_median(prepared(a, b, d, f=f, segments=seg, graph=True), repeat),
            "ms_launches": cuda_median(prepared(a, b, d, f=f, segments=seg), repeat),
            "F": f, "segments": seg,
        }
        for alt in (16, 32, 128):
            rows[f"b_1x{n_f}x4096"][f"ms_graph_segments_{alt}"] = cuda_median(
                prepared(a, b, d, f=1, segments=alt, graph=True), repeat)
    rows["c_fft_1024_templates"] = fft_matched_filter(repeat)
    return rows


def fft_matched_filter(repeat: int) -> dict:
    """1024 templates of 10240 + 2048 samples (the synthetic bank's impulse-response length), matched by
    FFT overlap-save over a segment of ``seg`` seconds; cost per 4096 output samples."""
    import cupy

    n_t, tmpl = 1024, 12288
    out = {}
    for seg_s in (8, 64):
        seg = seg_s * FS
        n_fft = 1 << int(np.ceil(np.log2(seg + tmpl)))
        rng = np.random.default_rng(2)
        data = cupy.asarray(rng.standard_normal(n_fft).astype(np.float32))
        tf = cupy.asarray((rng.standard_normal((n_t, n_fft // 2 + 1)) + 1j * rng.standard_normal((n_t, n_fft // 2 + 1))).astype(np.complex64))
        work = cupy.empty((n_t, n_fft), dtype=cupy.complex64)

        def run():
            xf = cupy.fft.rfft(data)
            spec = cupy.zeros((n_t, n_fft), dtype=cupy.complex64)
            spec[:, : n_fft // 2 + 1] = xf[None, :] * tf  # positive frequencies: complex SNR
            work[...] = cupy.fft.ifft(spec, axis=1)

        t = cuda_median(run, max(3, repeat // 4))
        valid = n_fft - tmpl
        out[f"{seg_s}s_segments"] = {"ms_per_call": t, "ms_per_4096_samples": t * 4096 / valid, "fft_size": n_fft}
    return out


def float64_reference(x: np.ndarray, a: np.ndarray, b: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``(T, n)`` complex128: every filter by ``scipy.signal.lfilter`` in float64."""
    from scipy.signal import lfilter

    z = np.zeros((a.shape[0], x.size), np.complex128)
    for t in range(a.shape[0]):
        for al, bl, dl in zip(a[t].astype(np.complex128), b[t].astype(np.complex128), d[t]):
            if bl != 0 and dl < x.size:
                z[t, dl:] += lfilter([bl], [1.0, -al], x[: x.size - dl].astype(np.float64))
    return z


def complex_form(x: np.ndarray, a: np.ndarray, b: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``(T, n)`` complex64: the complex recurrence ``y = a y + b x`` in complex64 (the form the
    kernels ran before the second-order one), for the precision comparison."""
    z = np.zeros((a.shape[0], x.size), np.complex64)
    y = np.zeros(a.shape, np.complex64)
    xp = np.concatenate([np.zeros(int(d.max()), np.float32), x])
    for k in range(x.size):
        y = a * y + b * xp[k + int(d.max()) - d]
        z[:, k] = y.sum(axis=1)
    return z


def precision(a: np.ndarray, b: np.ndarray, d: np.ndarray, n: int = 4096, templates: int = 4) -> dict:
    """Largest error of each form relative to its template's peak |z| (worst template), white noise."""
    from gwbatch.spiir.filtering import filter_bank_numba

    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    pick = np.linspace(0, a.shape[0] - 1, min(templates, a.shape[0])).astype(int)
    a, b, d = a[pick], b[pick], d[pick]
    ref = float64_reference(x, a, b, d)
    scale = np.abs(ref).max(axis=1)

    def worst(z):
        return float(np.max(np.abs(z - ref).max(axis=1) / scale))

    return {"templates": pick.tolist(), "samples": n, "second_order_float32": worst(filter_bank_numba(x, a, b, d)),
            "complex64": worst(complex_form(x, a, b, d))}


def cpu(repeat: int) -> dict:
    from scipy.signal import lfilter

    from gwbatch.spiir.filtering import filter_bank_numba

    rows = {}
    x = np.random.default_rng(1).standard_normal(4096).astype(np.float32)
    for n_f in (32, 512):
        a, b, d = synthetic_bank(1, n_f, seed=n_f)
        filter_bank_numba(x, a, b, d)
        t0 = time.perf_counter()
        for _ in range(repeat):
            filter_bank_numba(x, a, b, d)
        t_numba = (time.perf_counter() - t0) / repeat
        t0 = time.perf_counter()
        for _ in range(max(1, repeat // 4)):
            z = np.zeros(x.size, np.complex128)
            for al, bl, dl in zip(a[0], b[0], d[0]):
                if dl < x.size:
                    z[dl:] += lfilter([bl], [1.0, -al], x[: x.size - dl].astype(np.float64))
        t_scipy = (time.perf_counter() - t0) / max(1, repeat // 4)
        done = int(np.sum(np.maximum(x.size - d[0], 0)))  # filters with d >= n see no data and are skipped
        rows[f"1x{n_f}x4096"] = {"numba_ms": 1e3 * t_numba, "scipy_lfilter_ms": 1e3 * t_scipy,
                                 "updates": done, "numba_updates_per_s": done / t_numba}
    a, b, d = synthetic_bank(64, 512)
    filter_bank_numba(x, a, b, d)
    t0 = time.perf_counter()
    filter_bank_numba(x, a, b, d)
    t = time.perf_counter() - t0
    done = 64 * int(np.sum(np.maximum(x.size - d[0], 0)))
    rows["64x512x4096"] = {"numba_ms": 1e3 * t, "updates": done, "numba_updates_per_s": done / t}
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cupy", choices=("cupy", "numpy"))
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--define", nargs="*", default=[], type=define_variant, metavar="NAME=V[,NAME=V]",
                    help="also time (a) with these compile-time constants (gwbatch.spiir._cuda.DEFINES), "
                         "one variant per argument (GPU)")
    ap.add_argument("--bank", type=Path, help="a built bank (HDF5) whose precision to measure too")
    args = ap.parse_args()
    bank = None
    if args.bank:  # read first: a bad file is refused before any timing
        from gwbatch.errors import DataError
        from gwbatch.io.banks import load_bank

        try:
            bank = load_bank(args.bank)
        except DataError as exc:
            ap.error(f"--bank {args.bank}: {exc}")
    rows = gpu(args.repeat, args.define) if args.backend == "cupy" else cpu(args.repeat)
    rows["e_precision_synthetic"] = precision(*synthetic_bank(64, 512))
    if bank is not None:
        rows["e_precision_bank"] = {"bank": str(args.bank), **precision(bank.a, bank.b, bank.d, n=1 << 15)}
    result = {"device": device_name(args.backend), "rows": rows}
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
