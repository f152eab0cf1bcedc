"""The fused-ladder experiment (gwbatch/spiir/_cuda_ladder.py at this commit) against the per-rung
kernels of gwbatch.spiir._cuda_multirate: the same outputs (max error over each row's peak) and
their time, for the benchmark banks of benchmarks/spiir_ladder_launches.py repeated to several sizes.

    python benchmarks/spiir_fused_ladder.py
"""
import sys, time
import numpy as np
sys.path.insert(0, ".")
import cupy
from benchmarks.spiir_ladder_launches import benchmark_bank
from benchmarks.spiir_multirate import _gpu_median
from gwbatch.spiir import _cuda_multirate, _cuda_ladder

x = cupy.asarray(np.random.default_rng(0).standard_normal(64 * 4096).astype(np.float32))
for kind, distinct, sizes in (("bbh", 64, (1024, 4096, 8192)), ("bns", 8, (1024, 4096))):
    for n in sizes:
        bank = benchmark_bank(kind, distinct, n)
        old = _cuda_multirate.filter_multirate_cuda(x, bank)
        plan = _cuda_ladder.LadderPlan(bank)
        try:
            new = _cuda_ladder.filter_ladder_cuda(x, bank, plan)
            cupy.cuda.Device().synchronize()
        except Exception as e:
            print("ladder failed:", type(e).__name__, str(e)[:3000], flush=True)
            break
        peak = cupy.abs(old).max(axis=1)
        err = (cupy.abs(new - old).max(axis=1) / peak)
        print(kind, n, f"max err / row peak: max {float(err.max()):.3g} median {float(cupy.median(err)):.3g}", flush=True)
        del old, new
        t_old = _gpu_median(lambda: _cuda_multirate.filter_multirate_cuda(x, bank), 3)
        t_new = _gpu_median(lambda: _cuda_ladder.filter_ladder_cuda(x, bank, plan), 3)
        print(kind, n, f"per-rung kernels {t_old * 1e3:.2f} ms ({bank.size * 64 / t_old:.3g} template-s/s); "
              f"fused ladder {t_new * 1e3:.2f} ms ({bank.size * 64 / t_new:.3g})", flush=True)
        cupy.get_default_memory_pool().free_all_blocks()
