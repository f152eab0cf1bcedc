"""CUDA spread maxima of one detector's ``|z|^2`` for the network-SNR bound of the deep trials.

CPU twin: :func:`gwbatch.coherent.statistic._spread_max` (numba; the same float32 values).

What it computes (:func:`gwbatch.coherent.statistic.trials_reaching`).  For candidate ``c`` (its
template row ``slot[c]`` of one detector's series ``z``, ``(S, N)`` complex64) and trial
``k = k0 + i``, ``i < n_k``: the largest ``|z|^2 = re^2 + im^2`` (float32, each product and the sum
rounded on its own, as NumPy forms them) over the ``width`` samples that start ``base[c] + k delta``
into the ring ``[lo, lo + span)``, wrapped.  These are the samples the detector may be read at over
the whole sky for that trial, so the sky maximum's ``|Z|^2`` is at most the pivot's ``|z|^2`` plus
these maxima.

Mapping.  One warp per (candidate, trial): the lanes stride over the window (consecutive samples,
coalesced), and a shuffle reduction keeps the largest.  A deep-trial batch reads
``C x n_k x width`` samples (a few per candidate's trial) instead of forming ``|z|^2`` and a sliding
maximum over every template's whole series.
"""

from __future__ import annotations

import functools

import numpy as np

#: NVRTC options of every compile (the compile test passes them to nvcc as well).
OPTIONS = ("-std=c++17",)
#: Warps (candidate, trial pairs) per block.
WARPS = 8
KERNEL = "spread_max"

SOURCE = r"""
#define FULL 0xffffffffu
extern "C" __global__ void __launch_bounds__(256)
spread_max(const float2* __restrict__ z, const long long n, const long long* __restrict__ slot,
           const long long* __restrict__ base, const long long k0, const long long n_k, const long long delta,
           const long long lo, const long long span, const int width, const long long n_c, float* __restrict__ out)
{
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (warp >= n_c * n_k) return;
    const long long c = warp / n_k, i = warp - c * n_k;
    const float2* const row = z + slot[c] * n + lo;
    long long r = (base[c] + (k0 + i) * delta) % span;
    if (r < 0) r += span;
    float best = -1.0f;
    for (int u = lane; u < width; u += 32) {
        long long q = r + u;
        if (q >= span) q -= span;
        const float2 v = __ldg(row + q);
        best = fmaxf(best, __fadd_rn(__fmul_rn(v.x, v.x), __fmul_rn(v.y, v.y)));
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) best = fmaxf(best, __shfl_xor_sync(FULL, best, off));
    if (lane == 0) out[warp] = best;
}
"""


@functools.cache
def _compiled():
    import cupy

    return cupy.RawModule(code=SOURCE, options=OPTIONS)


def compile_cases() -> list[tuple[str, str, tuple[str, ...]]]:
    """What tests/test_cuda_compile.py compiles with nvcc (``extern "C"``: no name expressions)."""
    return [(KERNEL, SOURCE, ())]


def spread_max_cuda(z, slot, base, k0: int, n_k: int, delta: int, lo: int, span: int, width: int):
    """``(C, n_k)`` float32 (CuPy): the spread maxima of the module docstring, for ``z`` ``(S, N)``
    complex64 C-contiguous, ``slot`` and ``base`` int64 ``(C,)``."""
    import cupy

    z = cupy.ascontiguousarray(z, dtype=cupy.complex64)
    slot = cupy.ascontiguousarray(slot, dtype=cupy.int64)
    base = cupy.ascontiguousarray(base, dtype=cupy.int64)
    out = cupy.empty((slot.size, n_k), dtype=cupy.float32)
    warps = slot.size * n_k
    if warps:
        _compiled().get_function(KERNEL)(
            (-(-warps // WARPS),), (32 * WARPS,),
            (z, np.int64(z.shape[1]), slot, base, np.int64(k0), np.int64(n_k), np.int64(delta), np.int64(lo),
             np.int64(span), np.int32(width), np.int64(slot.size), out))
    return out
