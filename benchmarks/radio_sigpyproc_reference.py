"""Write sigpyproc's dedispersed series of tests/data/radio/tutorial.fil at DM 30, the reference
tests/test_dedisperse.py compares gwbatch's against (within 1e-5) when the file exists.

Needs sigpyproc (2.0 needs Python >= 3.12; not a gwbatch dependency): run it where sigpyproc is
installed, from the repository root, and commit the .npy it writes.  The series is
``FilReader(...).dedisperse(30.0)``: sigpyproc's own reading of the file and its float32 sum of the
channels at their rounded delays, ``nsamples - max_delay`` samples.

usage: python benchmarks/radio_sigpyproc_reference.py [--dm 30] [--fil PATH] [--out PATH]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RADIO = ROOT / "tests" / "data" / "radio"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dm", type=float, default=30.0)
    ap.add_argument("--fil", type=Path, default=RADIO / "tutorial.fil")
    ap.add_argument("--out", type=Path, default=RADIO / "tutorial_dm30_sigpyproc.npy")
    args = ap.parse_args()
    from importlib.metadata import version

    from sigpyproc.readers import FilReader

    series = FilReader(str(args.fil)).dedisperse(args.dm)
    values = np.asarray(getattr(series, "data", series), dtype=np.float32)  # TimeSeries holds .data in 2.x
    np.save(args.out, values)
    print(f"sigpyproc {version('sigpyproc')}: {args.fil.name} at DM {args.dm:g}: {values.size} samples "
          f"(sum {float(values.sum(dtype=np.float64)):.6g}) -> {args.out}")


if __name__ == "__main__":
    main()
