"""Time of every compiled SPIIR kernel layout ``(F, W)`` per template and sample: the table the
multi-rate ladder groups a rung's templates by (``gwbatch.spiir._cuda_multirate.LAYOUT_PS``).

Each layout runs ``--templates`` random templates filled to its capacity (``F W`` filters, delays
up to 400 samples) over ``--samples`` samples, as one rung of the ladder does: with the rung below
added interpolated in the epilogue, and time segments as ``segments_to_fill`` sets them.  Also
printed: without the epilogue, and with one segment.  Medians of ``--repeat`` after a warm-up.

    python benchmarks/spiir_layouts.py --json benchmarks/results/spiir_layouts_h100.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--templates", type=int, default=1024)
    ap.add_argument("--samples", type=int, default=65536)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    import cupy

    from benchmarks.spiir_multirate import _gpu_median
    from gwbatch._xp import device_name
    from gwbatch.spiir._cuda import HALO, LAYOUTS, packed_slots, run_pass, shifted_input
    from gwbatch.spiir._cuda_multirate import segments_to_fill

    n_t, n = args.templates, -(-args.samples // 16) * 16
    rng = np.random.default_rng(0)
    x = cupy.asarray(rng.standard_normal(n).astype(np.float32))
    low = cupy.zeros((n_t, n // 2 + 2 * HALO), cupy.complex64)
    out = cupy.empty((n_t, n), cupy.complex64)
    rows = []
    for f, w in sorted(LAYOUTS, key=lambda lw: (lw[1], lw[0])):
        width = f * w
        a = (rng.uniform(0.95, 0.9995, (n_t, width))
             * np.exp(-2j * np.pi * rng.uniform(0.005, 0.25, (n_t, width)))).astype(np.complex64)
        b = (rng.standard_normal((n_t, width)) + 1j).astype(np.complex64)
        d = np.sort(rng.integers(0, 400, (n_t, width)), axis=1).astype(np.int32)
        packed = packed_slots(a, b, d, f, w)
        pad = int(d.max()) + 16
        xs, n4 = shifted_input(x, pad, n)
        fill = segments_to_fill(packed[0].shape[0], n, f, w)
        row = {"f": f, "w": w, "capacity": width, "segments": fill}
        for label, segments, with_low in (("rung", fill, True), ("no_epilogue", fill, False), ("one_segment", 1, True)):
            def run():
                run_pass(xs, n4, pad, n, packed, f, w, out, n, n_slots=n_t, low=low if with_low else None,
                         low_stride=low.shape[1], n_valid=n, segments=segments)
            row[f"{label}_ms"] = _gpu_median(run, args.repeat) * 1e3
        row["ps_per_template_sample"] = row["rung_ms"] * 1e9 / (n_t * n)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device_name("cupy"), "templates": n_t, "samples": n,
                                               "layouts": rows}, indent=1))


if __name__ == "__main__":
    main()
