"""Frame ingest throughput: simulated H1/L1 (16384 Hz) and V1 (20000 Hz) GWF frames to 4096 Hz.

Writes ``--files`` frame files of ``--file-seconds`` each per detector set (one file holds all
three detectors, REAL8 as LIGO's h(t) frames are), with one gap of ``--gap`` s after the first
file and the third file starting ``--overlap`` s early (its overlap holds the same samples), then
times ``gwbatch ingest frames`` on them (scan with checksums and SHA-256, overlap comparison,
resampling and writing) on a local Dask cluster of ``--workers`` processes.  Prints MB/s of frame
files read and seconds of data per second, and checks the resampled spectrum and the gap's mask
on one stretch.

    python benchmarks/ingest_frames.py --files 4 --file-seconds 4096 --workers 2 --dir /tmp/frames
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.ingest_week import RATES, series, write_file  # noqa: E402



def _layout(files: int, seconds: int, gap: int, overlap: int) -> list[tuple[int, int]]:
    """(start, duration) of each file relative to T0."""
    starts, t = [], 0
    for k in range(files):
        if k == 1:
            t += gap
        if k == 2:
            t -= overlap
        starts.append((t, seconds))
        t += seconds
    return starts


def _write(directory: str, start: int, seconds: int) -> str:
    return write_file(directory, start, seconds, np.float64)  # REAL8, as LIGO's h(t) frames are


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--file-seconds", type=int, default=4096)
    ap.add_argument("--gap", type=int, default=100)
    ap.add_argument("--overlap", type=int, default=16)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--dir", type=Path, default=Path("/tmp/gwbatch-frames"))
    ap.add_argument("--keep", action="store_true", help="keep the frames and the store")
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = ap.parse_args(argv)

    from gwbatch.io.resample import PASSBAND
    from gwbatch.io.store import read_meta, read_strain
    from workflow.ingest import ingest_channels

    frames = args.dir / "frames"
    shutil.rmtree(args.dir, ignore_errors=True)
    frames.mkdir(parents=True)
    layout = _layout(args.files, args.file_seconds, args.gap, args.overlap)
    t = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        paths = list(pool.map(_write, [str(frames)] * len(layout), *zip(*layout)))
    made = time.perf_counter() - t
    size = sum(Path(p).stat().st_size for p in paths)
    print(f"wrote {len(paths)} frame files, {size / 1e9:.2f} GB, in {made:.1f} s")

    store = args.dir / "store.zarr"
    t = time.perf_counter()
    summary = ingest_channels([str(frames / "*.gwf")], [f"{ifo}:SIM-STRAIN" for ifo in RATES], store,
                              sample_rate=4096, workers=args.workers, progress=False)
    seconds = time.perf_counter() - t
    span = summary.plan.n_samples / 4096
    print(f"ingested {span:.0f} s of H1/L1/V1 in {seconds:.1f} s on {args.workers} workers: "
          f"{size / 1e6 / seconds:.1f} MB/s of frames, {span / seconds:.0f} s of data per second")

    # checks on the second file: spectrum below 0.9 Nyquist, and the gap masked
    from scipy.signal import welch

    meta = read_meta(store)
    a = layout[1][0] + 64
    y = read_strain(meta, ["V1"], a * 4096, (a + 256) * 4096)[0].astype(np.float64)
    x = series("V1", a, 256, np.float64)
    f1, p1 = welch(x, fs=20000, nperseg=20000)
    f2, p2 = welch(y, fs=4096, nperseg=4096)
    band = (f2 > 10) & (f2 < PASSBAND * 2048)
    worst = float(np.max(np.abs(p2[band] / np.interp(f2[band], f1, p1) - 1)))
    gap = read_strain(meta, meta.ifos, args.file_seconds * 4096, (args.file_seconds + args.gap) * 4096)
    print(f"spectrum below {PASSBAND} x Nyquist: worst ratio error {worst:.2e}; "
          f"gap finite samples: {int(np.isfinite(gap).sum())}")
    figures = {"files": len(paths), "frame_bytes": size, "span_s": span, "workers": args.workers,
               "ingest_s": seconds, "mb_per_s": size / 1e6 / seconds, "data_s_per_s": span / seconds,
               "spectrum_worst": worst, "gap_finite": int(np.isfinite(gap).sum())}
    if args.out:
        args.out.write_text(json.dumps(figures, indent=1))
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
