"""The figures of Nsight Compute profiles (``benchmarks/ncu.sh``) as one Markdown table.

    python benchmarks/ncu_summary.py OUTDIR/ncu_*.csv

Reads ncu's ``--csv --page details`` output (one row per metric) and prints, per profiled kernel,
its duration, registers, occupancy, the SM and memory throughput, the issue-slot and FMA-pipe
utilisation, and the shared-memory wavefronts and bank conflicts.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

#: (column title, ncu metric name) in the order printed.
FIGURES = (
    ("duration", "Duration"),
    ("registers / thread", "Registers Per Thread"),
    ("theoretical occupancy", "Theoretical Occupancy"),
    ("achieved occupancy", "Achieved Occupancy"),
    ("SM throughput", "Compute (SM) Throughput"),
    ("memory throughput", "Memory Throughput"),
    ("DRAM throughput", "DRAM Throughput"),
    ("issue slots busy", "smsp__issue_active.avg.pct_of_peak_sustained_active"),
    ("FMA pipe", "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"),
    ("ALU pipe", "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active"),
    ("warp instructions", "smsp__inst_executed.sum"),
    ("FFMA thread instructions", "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"),
    ("shared wavefronts", "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum"),
    ("shared bank conflicts", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"),
)


def read_profile(path: Path) -> dict[str, dict[str, str]]:
    """``{kernel: {metric: "value unit"}}`` from one CSV; ncu's own messages before the header are skipped."""
    lines = path.read_text(errors="replace").splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise SystemExit(f"{path}: no ncu CSV table in it (see the .log beside it)")
    kernels: dict[str, dict[str, str]] = {}
    for row in csv.DictReader(lines[start:]):
        unit = row.get("Metric Unit") or ""
        name = f"{row['Kernel Name'].split('(')[0]} [{row['ID']}]"
        kernels.setdefault(name, {})[row["Metric Name"]] = f"{row['Metric Value']} {unit}".strip()
    return kernels


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    kernels = {}
    for path in argv:
        kernels.update(read_profile(Path(path)))
    names = list(kernels)
    print("| figure | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for title, metric in FIGURES:
        print(f"| {title} | " + " | ".join(kernels[k].get(metric, "n/a") for k in names) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
