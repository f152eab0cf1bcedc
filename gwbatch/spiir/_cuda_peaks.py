"""CUDA window maxima of a batch's SNR series, straight from the complex filter output.

CPU twin: :func:`gwbatch.spiir.triggers.window_maxima` (of ``|z| * mask``).

What it computes: per row and window of ``window`` samples (windows
start where ``(k + origin) % window == 0``), the largest ``|z[k]| mask[k]`` and its first sample.
One warp per (row, window): the lanes stride over the window's samples, keep their first maximum,
and a shuffle reduction keeps the largest, the earlier sample on a tie.  The series is read once
(8 bytes a sample) instead of forming ``|z| * mask`` and its zero-padded copy (about 28 bytes a
sample over five array passes).  A window with no sample above zero reports 0 at its first sample
(the twin reports a position inside its zero padding there; such windows are never peaks).
``|z|`` is CUDA's ``hypotf``, as CuPy's ``abs`` computes it (within an ulp of NumPy's).
"""

from __future__ import annotations

import functools

import numpy as np

#: NVRTC options of every compile (the compile test passes them to nvcc as well).
OPTIONS = ("-std=c++17",)
#: Warps (windows) per block.
WARPS = 8
KERNEL = "window_maxima"

SOURCE = r"""
#define FULL 0xffffffffu
extern "C" __global__ void __launch_bounds__(256)
window_maxima(const float2* __restrict__ z, const long long stride, const float* __restrict__ mask,
              const long long n, const long long rows, const long long window, const long long lead,
              const long long nwin, float* __restrict__ val, long long* __restrict__ pos)
{
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (warp >= rows * nwin) return;
    const long long row = warp / nwin, w = warp - row * nwin;
    const long long lo = max(0LL, w * window - lead), hi = min(n, (w + 1) * window - lead);
    const float2* const zr = z + row * stride;
    float best = -1.0f;
    long long at = lo;
    for (long long k = lo + lane; k < hi; k += 32) {
        const float2 v = __ldcs(zr + k);
        const float m = hypotf(v.x, v.y) * __ldg(mask + k);
        if (m > best) { best = m; at = k; }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float ob = __shfl_xor_sync(FULL, best, off);
        const long long oa = __shfl_xor_sync(FULL, at, off);
        if (ob > best || (ob == best && oa < at)) { best = ob; at = oa; }
    }
    if (lane == 0) {
        val[warp] = best > 0.0f ? best : 0.0f;
        pos[warp] = at;
    }
}
"""


@functools.cache
def _compiled():
    import cupy

    return cupy.RawModule(code=SOURCE, options=OPTIONS)


def compile_cases() -> list[tuple[str, str, tuple[str, ...]]]:
    """What tests/test_cuda_compile.py compiles with nvcc (``extern "C"``: no name expressions)."""
    return [(KERNEL, SOURCE, ())]


def window_maxima_cuda(z, mask, window: int, origin: int = 0):
    """``(val, pos)``, ``(rows, nwin)`` float32 and int64 (CuPy): each window's largest
    ``|z| * mask`` and its sample (module docstring), for ``z`` ``(rows, n)`` complex64 (rows may be
    strided) and ``mask`` float32 ``(n,)``."""
    import cupy

    rows, n = z.shape
    if z.dtype != cupy.complex64 or z.strides[1] != 8:
        z = cupy.ascontiguousarray(z, dtype=cupy.complex64)
    mask = cupy.ascontiguousarray(mask, dtype=cupy.float32)
    lead = origin % window
    nwin = -(-(lead + n) // window)
    val = cupy.empty((rows, nwin), dtype=cupy.float32)
    pos = cupy.empty((rows, nwin), dtype=cupy.int64)
    warps = rows * nwin
    if warps:
        _compiled().get_function(KERNEL)(
            (-(-warps // WARPS),), (32 * WARPS,),
            (z, np.int64(z.strides[0] // 8), mask, np.int64(n), np.int64(rows), np.int64(window), np.int64(lead),
             np.int64(nwin), val, pos))
    return val, pos
