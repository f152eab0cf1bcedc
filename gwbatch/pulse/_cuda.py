"""CUDA boxcar kernel: boxcars, SNR and the per-start best (SNR, width) in one pass (seed 004, alg. 1).

One thread per boxcar start.  A block stages its ``blockDim + last - 1`` input samples in shared
memory once, then each thread grows its boxcar sum one sample at a time (``B_w = B_{w-1} +
y[i+w-1]``), turns it into an SNR with the per-width constants (see :mod:`gwbatch.pulse.series`)
and keeps the best.  Widths below ``first`` are summed but not evaluated: decimated rounds
continue where the previous round stopped.

The source is plain CUDA C++ so ``nvcc -arch=sm_90 -cubin`` can compile it on machines without a
GPU (tests/test_cuda_compile.py); CuPy compiles the two instantiations at first use.
"""

from __future__ import annotations

import functools

SOURCE = r"""
template <bool ENERGY>
__global__ void boxcar_best(const float* __restrict__ y, const long long n_out,
                            const int first, const int last,
                            const float* __restrict__ p, const float* __restrict__ q,
                            const float* __restrict__ r,
                            float* __restrict__ best_snr, int* __restrict__ best_width)
{
    extern __shared__ float tile[];
    const long long base = (long long)blockIdx.x * blockDim.x;
    const int span = blockDim.x + last - 1;
    const long long n_in = n_out + last - 1;
    for (int k = threadIdx.x; k < span; k += blockDim.x) {
        const long long idx = base + k;
        tile[k] = idx < n_in ? y[idx] : 0.0f;
    }
    __syncthreads();
    const long long i = base + threadIdx.x;
    if (i >= n_out) return;
    float b = 0.0f;
    float best = -3.0e38f;
    int best_w = 0;
    for (int w = 1; w <= last; ++w) {
        b += tile[threadIdx.x + w - 1];
        if (w >= first) {
            const int j = w - first;
            const float z = ENERGY ? (cbrtf(b * __ldg(p + j)) - __ldg(q + j)) * __ldg(r + j)
                                   : fmaf(b, __ldg(p + j), -__ldg(q + j));
            if (z > best) { best = z; best_w = w; }
        }
    }
    best_snr[i] = best;
    best_width[i] = best_w;
}
"""

KERNELS = ("boxcar_best<true>", "boxcar_best<false>")
THREADS = 256


@functools.cache
def _module():
    import cupy

    return cupy.RawModule(code=SOURCE, options=("-std=c++17",), name_expressions=KERNELS)


def boxcar_best_cuda(y, first: int, last: int, p, q, r, energy: bool):
    """CuPy launcher; same contract as :func:`gwbatch.pulse.boxcar.boxcar_best_numpy`."""
    import cupy

    y = cupy.ascontiguousarray(y, dtype=cupy.float32)
    n_out = y.size - last + 1
    best = cupy.empty(max(n_out, 0), dtype=cupy.float32)
    width = cupy.empty(max(n_out, 0), dtype=cupy.int32)
    if n_out <= 0:
        return best, width
    kernel = _module().get_function(KERNELS[0] if energy else KERNELS[1])
    consts = [cupy.asarray(a, dtype=cupy.float32) for a in (p, q, r)]
    blocks = (n_out + THREADS - 1) // THREADS
    shared = (THREADS + last - 1) * 4
    kernel(
        (blocks,), (THREADS,),
        (y, cupy.int64(n_out), cupy.int32(first), cupy.int32(last), *consts, best, width),
        shared_mem=shared,
    )
    return best, width
