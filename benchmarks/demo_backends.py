"""The demo campaign on both backends: CPU (NumPy twin, in-process) against GPU (CuPy on
LocalCUDACluster), with the candidate tables compared (issue 2 acceptance: SNR within 1e-4).

usage: python benchmarks/demo_backends.py [--store data/demo.zarr] [--workdir /tmp/demo-backends]
(simulates the `make demo` store first when it is missing)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from gwbatch.config import load_campaign  # noqa: E402
from gwbatch.simulate import simulate_store  # noqa: E402
from gwbatch.simulate.injections import InjectionSpec  # noqa: E402
from workflow.campaign import run_campaign  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def run(store: Path, out: Path, *overrides: str):
    campaign = load_campaign(ROOT / "configs" / "demo.yaml",
                             [f"data.store={store}", f"output.dir={out}", "cluster.dashboard_address=:0", *overrides])
    t0 = time.perf_counter()
    summary = run_campaign(campaign, overwrite=True, progress=False)
    return summary, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=Path("data/demo.zarr"))
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/demo-backends"))
    args = ap.parse_args()
    if not args.store.exists():
        simulate_store(args.store, ifos=("H1", "L1", "V1"), duration=1024, sample_rate=2048, seed=1,
                       injections=InjectionSpec(count=60))
    cpu, t_cpu = run(args.store, args.workdir / "cpu", "cluster.kind=in-process", "backend=numpy")
    gpu, t_gpu = run(args.store, args.workdir / "gpu", "cluster.kind=local-cuda")
    a, b = cpu.reduced.candidates, gpu.reduced.candidates
    ta, tb = a["gps_time"].to_numpy(), b["gps_time"].to_numpy()
    j = np.array([np.argmin(np.abs(tb - t)) for t in ta]) if len(tb) else np.zeros(0, int)
    matched = np.abs(tb[j] - ta) <= 1e-3 if len(tb) else np.zeros(len(ta), bool)
    rel = np.abs(b["snr"].to_numpy()[j[matched]] / a["snr"].to_numpy()[matched] - 1)
    print(f"CPU  in-process numpy : {len(a)} candidates, {int(cpu.reduced.injections['found'].sum())} injections found, {t_cpu:.1f} s")
    print(f"GPU  local-cuda cupy  : {len(b)} candidates, {int(gpu.reduced.injections['found'].sum())} injections found, "
          f"{t_gpu:.1f} s, devices {gpu.manifest['devices']}")
    print(f"matched {matched.sum()} of {len(a)}; max relative SNR difference {rel.max() if rel.size else float('nan'):.2e}; "
          f"max |dt| {np.abs(tb[j[matched]] - ta[matched]).max() if matched.any() else float('nan'):.2e} s")


if __name__ == "__main__":
    main()
