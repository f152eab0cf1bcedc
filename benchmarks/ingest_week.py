"""A week of simulated H1-L1-V1 frames into one 4096 Hz store, day by day with ``--append``.

LIGO at 16384 Hz and Virgo at 20000 Hz, REAL4 (as S5/S6-era ``LDAS-STRAIN`` frames), one file of
``--file-seconds`` per stretch holding all three detectors, written by LALFrame (gzip, its
default).  The layout has gaps (one inside a batch, one short, one exactly at a batch seam) and
one file that overlaps the one before it by ``--overlap`` s with the same samples.  A week of
such frames (127 GB) is more than the disk of the machines here, so the files are made and
ingested in batches of ``--batch-files`` (about a day): the first batch creates the store
(``ingest frames``), each later one extends it (``ingest frames --append``), and a batch's
frames are deleted once ingested.  Only ingest is timed (generation is reported apart).  On a
machine with the disk for all of them, ``--pregenerate`` makes every batch's frames first, with
all cores, so that no generation competes with the timed ingest.

Checks, on the finished store (noise is seeded per second, so any stretch is made again):

- **seams and the overlap**: every output sample within ``--check-seconds`` of each batch seam
  and of the overlap equals the original samples resampled by the stated filter (float32, exact;
  with ``--backend cupy`` within 1e-6 of the largest);
- **spectra**: Welch spectra of 256 s of resampled H1 and V1 that cross a seam equal the
  original's below 0.9 × the new Nyquist frequency within 1%;
- **gaps**: no output within the filter's reach of a gap is finite, every output beyond it is,
  and the DQ ``DATA`` bit is clear exactly over the gaps' seconds.

    python benchmarks/ingest_week.py --days 7 --workers 16 --backend cupy --dir /tmp/week --out week.json
    python benchmarks/ingest_week.py --days 7 --workers 64 --backend cupy --pregenerate --out week.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RATES = {"H1": 16384, "L1": 16384, "V1": 20000}
CHANNELS = [f"{ifo}:SIM-STRAIN" for ifo in RATES]
T0 = 1_200_000_000
FS = 4096


def layout(n_files: int, seconds: int, batch: int, overlap: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """``(start, duration)`` of each file relative to :data:`T0`, and the gaps ``(start, stop)``:
    100 s after the 11th file, 7 s after the 51st, 1000 s before the first file of the 6th batch
    (a seam with a gap), and the file in the middle of the 4th batch starting ``overlap`` s early."""
    gaps_after = {10: 100, 50: 7, 5 * batch - 1: 1000}
    overlapping = 3 * batch + batch // 2
    files, gaps, t = [], [], 0
    for k in range(n_files):
        if k == overlapping:
            t -= overlap
        files.append((t, seconds))
        t += seconds
        if k in gaps_after and k + 1 < n_files:
            gaps.append((t, t + gaps_after[k]))
            t += gaps_after[k]
    return files, gaps


def series(ifo: str, start: int, seconds: int, dtype=np.float32) -> np.ndarray:
    """The detector's samples over ``[start, start + seconds)`` (``dtype``: float32 for REAL4
    frames, float64 for REAL8), the same for any file or check that asks for them (noise seeded per
    second, so overlapping files agree)."""
    rate = RATES[ifo]
    out = np.empty(seconds * rate, dtype=dtype)
    for s in range(seconds):
        rng = np.random.default_rng([start + s, list(RATES).index(ifo)])
        out[s * rate: (s + 1) * rate] = rng.standard_normal(rate, dtype=dtype) * dtype(1e-21)
    return out


def write_file(directory: str, start: int, seconds: int, dtype=np.float32) -> str:
    """One frame file of all three detectors over ``[start, start + seconds)`` (from T0)."""
    from gwbatch.io.frames import write_gwf

    path = Path(directory) / f"HLV-SIM-{T0 + start}-{seconds}.gwf"
    write_gwf(path, T0 + start, seconds, {f"{ifo}:SIM-STRAIN": (T0 + start, rate, series(ifo, start, seconds, dtype))
                                          for ifo, rate in RATES.items()})
    return str(path)


def expected(ifo: str, a: int, b: int, gaps) -> np.ndarray:
    """Outputs ``[a, b)`` (4096 Hz samples from T0) as one resampling of the original data gives
    them (NaN within the filter's reach of a gap), float32."""
    from gwbatch.io.resample import Resampler

    r = Resampler(RATES[ifo], FS)
    i0 = r.in_position(a) - r.halo
    i1 = r.in_position(b) + r.halo
    s0, s1 = math.floor(i0 / RATES[ifo]), math.ceil(i1 / RATES[ifo])
    x = series(ifo, s0, s1 - s0).astype(np.float64)
    for g0, g1 in gaps:  # the gaps hold no data
        lo, hi = max(g0, s0), min(g1, s1)
        if lo < hi:
            x[(lo - s0) * RATES[ifo]: (hi - s0) * RATES[ifo]] = np.nan
    x = x[i0 - s0 * RATES[ifo]: i1 - s0 * RATES[ifo]]
    return r.block(x)[: b - a].astype(np.float32)


def _same(got: np.ndarray, want: np.ndarray, tolerance: float) -> bool:
    """Equal NaN masks, and values equal (``tolerance`` 0) or within ``tolerance`` of the largest."""
    finite = np.isfinite(want)
    if not np.array_equal(np.isfinite(got), finite):
        return False
    scale = float(np.max(np.abs(want[finite]), initial=0.0))
    return bool(np.all(np.abs(got[finite] - want[finite]) <= tolerance * scale))


def checks(store: Path, files, gaps, seams: list[int], overlap_at: int, check_seconds: int,
           tolerance: float = 0.0) -> dict:
    from scipy.signal import welch

    from gwbatch.io.resample import PASSBAND, Resampler
    from gwbatch.io.store import read_dq, read_meta, read_strain

    meta = read_meta(store)
    rows = {ifo: i for i, ifo in enumerate(meta.ifos)}
    out: dict = {"n_samples": meta.n_samples, "span_s": meta.n_samples / FS}
    exact = {}
    for where in seams + [overlap_at]:
        a, b = (where - check_seconds) * FS, (where + check_seconds) * FS
        got = read_strain(meta, meta.ifos, a, b)
        exact[str(where)] = {ifo: _same(got[rows[ifo]], expected(ifo, a, b, gaps), tolerance) for ifo in RATES}
    out["exact_near_seams_and_overlap"] = exact
    worst = {}
    a = seams[0] - 128
    for ifo in ("H1", "V1"):
        y = read_strain(meta, [ifo], a * FS, (a + 256) * FS)[0].astype(np.float64)
        x = series(ifo, a, 256).astype(np.float64)
        f1, p1 = welch(x, fs=RATES[ifo], nperseg=RATES[ifo])
        f2, p2 = welch(y, fs=FS, nperseg=FS)
        band = (f2 > 10) & (f2 < PASSBAND * FS / 2)
        worst[ifo] = float(np.max(np.abs(p2[band] / np.interp(f2[band], f1, p1) - 1)))
    out["spectrum_worst_ratio_error"] = worst
    gap_checks = []
    dq = read_dq(meta, meta.ifos)
    for g0, g1 in gaps:
        for ifo in RATES:
            r = Resampler(RATES[ifo], FS)
            reach = (r.taps.size - 1) / 2 / (RATES[ifo] * r.up)
            a, b = (g0 - 2) * FS, (g1 + 2) * FS
            y = read_strain(meta, [ifo], a, b)[0]
            t = g0 - 2 + np.arange(y.size) / FS
            near = (t > g0 - reach) & (t < g1 + reach)
            margin = 2 / FS
            far = (t < g0 - reach - margin) | (t > g1 + reach + margin)
            gap_checks.append({"gap": [g0, g1], "ifo": ifo, "finite_near": int(np.isfinite(y[near]).sum()),
                               "nan_far": int((~np.isfinite(y[far])).sum()),
                               "dq_set_in_gap": int(dq[rows[ifo], g0:g1].sum()),
                               "dq_clear_beside": int((dq[rows[ifo], [g0 - 1, g1]] == 0).sum())})
    out["gaps"] = gap_checks
    out["passed"] = (all(all(v.values()) for v in exact.values()) and max(worst.values()) < 0.01
                     and all(g["finite_near"] == 0 and g["nan_far"] == 0 and g["dq_set_in_gap"] == 0
                             and g["dq_clear_beside"] == 0 for g in gap_checks))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--file-seconds", type=int, default=4096)
    ap.add_argument("--batch-files", type=int, default=21, help="files per append (21 x 4096 s: about a day)")
    ap.add_argument("--overlap", type=int, default=16)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--check-seconds", type=int, default=8)
    ap.add_argument("--generate-workers", type=int, default=None, help="processes writing frames (default --workers)")
    ap.add_argument("--pregenerate", action="store_true",
                    help="write every batch's frames before the first ingest (needs the disk for the whole span)")
    ap.add_argument("--backend", choices=("numpy", "cupy"), default="numpy", help="where the resampling filter runs")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/gwbatch-week"))
    ap.add_argument("--out", type=Path, help="write the figures as JSON here (also after each batch)")
    ap.add_argument("--keep", action="store_true", help="keep the store")
    args = ap.parse_args(argv)

    from workflow.ingest import ingest_channels

    n_files = math.ceil(args.days * 86400 / args.file_seconds)
    files, gaps = layout(n_files, args.file_seconds, args.batch_files, args.overlap)
    batches = [list(range(k, min(k + args.batch_files, n_files))) for k in range(0, n_files, args.batch_files)]
    seams = [files[b[0]][0] for b in batches[1:] if files[b[0]][0] == files[b[0] - 1][0] + args.file_seconds]
    overlap_at = files[3 * args.batch_files + args.batch_files // 2][0] if len(batches) > 3 else files[-1][0]
    shutil.rmtree(args.dir, ignore_errors=True)
    frames, store = args.dir / "frames", args.dir / "week.zarr"
    frames.mkdir(parents=True)
    free = shutil.disk_usage(args.dir).free
    result = {"days": args.days, "files": n_files, "file_seconds": args.file_seconds, "workers": args.workers,
              "backend": args.backend, "cpus": os.cpu_count(),
              "gaps": gaps, "seams": seams, "overlap_at": overlap_at, "disk_free_gb": free / 1e9, "batches": []}

    def save():
        if args.out:
            args.out.write_text(json.dumps(result, indent=1))

    def generate(batch: list[int]) -> tuple[list[str], float]:
        t = time.perf_counter()
        with ProcessPoolExecutor(args.generate_workers or args.workers) as pool:
            paths = list(pool.map(write_file, [str(frames)] * len(batch), *zip(*(files[i] for i in batch))))
        return paths, time.perf_counter() - t

    made_ahead: dict[int, str] = {}  # file index -> path, with --pregenerate
    if args.pregenerate:
        need = sum(d for _, d in files) * sum(RATES.values()) * 4
        if need > 0.9 * free:
            raise SystemExit(f"--pregenerate needs about {need / 1e9:.0f} GB of frames; {free / 1e9:.0f} GB free in {args.dir}")
        paths, made = generate(list(range(n_files)))
        made_ahead = dict(enumerate(paths))
        result["pregenerate_s"] = made
        print(json.dumps({"pregenerated_files": len(paths), "generate_s": made}), flush=True)

    for k, batch in enumerate(batches):
        paths, made = ([made_ahead[i] for i in batch], 0.0) if made_ahead else generate(batch)
        size = sum(Path(p).stat().st_size for p in paths)
        t = time.perf_counter()
        summary = ingest_channels(paths, CHANNELS, store, sample_rate=FS, append=k > 0, workers=args.workers,
                                  backend=args.backend, progress=False)
        took = time.perf_counter() - t
        data_s = sum(files[i][1] for i in batch)
        entry = {"batch": k, "files": len(batch), "frame_bytes": size, "generate_s": made, "ingest_s": took,
                 "mb_per_s": size / 1e6 / took, "data_s_per_s": data_s / took,
                 "store_gb": sum(f.stat().st_size for f in store.rglob("*") if f.is_file()) / 1e9,
                 "disk_free_gb": shutil.disk_usage(args.dir).free / 1e9, "blocks": len(summary.plan.blocks)}
        result["batches"].append(entry)
        print(json.dumps(entry), flush=True)
        save()
        for p in paths:
            os.unlink(p)
    total_bytes = sum(b["frame_bytes"] for b in result["batches"])
    total_s = sum(b["ingest_s"] for b in result["batches"])
    result.update({"frame_gb": total_bytes / 1e9, "ingest_s": total_s, "mb_per_s": total_bytes / 1e6 / total_s,
                   "data_s_per_s": sum(d for _, d in files) / total_s,
                   "generate_s": result.get("pregenerate_s", sum(b["generate_s"] for b in result["batches"]))})
    t = time.perf_counter()
    # the GPU's filter equals the CPU's to float32 rounding, not bit for bit
    result["checks"] = checks(store, files, gaps, seams, overlap_at, args.check_seconds,
                              tolerance=1e-6 if args.backend == "cupy" else 0.0)
    result["checks_s"] = time.perf_counter() - t
    print(json.dumps({k: v for k, v in result.items() if k != "batches"}), flush=True)
    save()
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
