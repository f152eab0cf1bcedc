"""CUDA boxcar kernel: one launch per decimation round (seed 004, alg. 1, restructured for throughput).

A block stages ``blockDim * SPT + LAST - 1`` samples of the round's series in shared memory.  Each
thread owns ``SPT`` consecutive boxcar starts and grows their ``SPT`` running sums together from a
window of registers (``B_w = B_{w-1} + y[i+w-1]``; one shared load serves all ``SPT`` starts; ``SPT``
is odd, so the strided loads are free of bank conflicts).  The threshold test is done on the sum
itself, ``B_w >= T_w`` with ``T_w`` the sum at which the SNR transform reaches the threshold (the
transform is increasing in ``B``), so the common path is one add and one compare per width.  Only a
start that passes computes SNRs (with ``cbrtf`` for the energy series), keeps its best (SNR, width)
and appends it to a compact list; no per-start arrays are written.  While the tile is in shared
memory the block also writes the next round's series, the sums of sample pairs.

Widths are template parameters, so the loops unroll fully and widths below ``FIRST`` (those of
earlier rounds) cost one add each.  The source is plain CUDA C++: ``nvcc -arch=sm_90 -cubin``
compiles it on machines without a GPU (tests/test_cuda_compile.py).
"""

from __future__ import annotations

import functools

import numpy as np

SOURCE = r"""
// The rare path, kept out of line with a rolled loop so the fast path's registers stay free:
// the SNR of every width of one start, and the best (SNR, width).
template <bool ENERGY, int FIRST, int LAST>
__device__ __noinline__ float best_width(const float* tile, const float* s_p, const float* s_q,
                                         const float* s_r, int* width)
{
    float sum = 0.0f, best = -3.0e38f;
    int best_w = 0;
#pragma unroll 1
    for (int w = 1; w <= LAST; ++w) {
        sum += tile[w - 1];
        if (w >= FIRST) {
            const int j = w - FIRST;
            const float z = ENERGY ? (cbrtf(sum * s_p[j]) - s_q[j]) * s_r[j] : fmaf(sum, s_p[j], -s_q[j]);
            if (z > best) { best = z; best_w = w; }
        }
    }
    *width = best_w;
    return best;
}

template <bool ENERGY, int FIRST, int LAST, int SPT>
__global__ void __launch_bounds__(128)
boxcar_round(const float* __restrict__ y, const long long n_in, const long long n_out,
             const unsigned char* __restrict__ valid, const long long valid_stride,
             const float* __restrict__ consts, const float threshold,
             float* __restrict__ next, const long long n_next,
             unsigned long long* __restrict__ count, const long long capacity,
             long long* __restrict__ hit_start, int* __restrict__ hit_width, float* __restrict__ hit_snr)
{
    constexpr int NW = LAST - FIRST + 1;
    __shared__ float s_t[NW], s_p[NW], s_q[NW], s_r[NW];
    extern __shared__ float tile[];
    const int per_block = blockDim.x * SPT;
    const long long base = (long long)blockIdx.x * per_block;
    const int span = per_block + LAST - 1;
    for (int k = threadIdx.x; k < span; k += blockDim.x) {
        const long long idx = base + k;
        tile[k] = idx < n_in ? y[idx] : 0.0f;
    }
    for (int k = threadIdx.x; k < NW; k += blockDim.x) {
        s_t[k] = consts[k];
        s_p[k] = consts[NW + k];
        s_q[k] = consts[2 * NW + k];
        s_r[k] = consts[3 * NW + k];
    }
    __syncthreads();

    // The next round's series: sums of pairs of this block's samples.
    for (int k = threadIdx.x; k < per_block / 2; k += blockDim.x) {
        const long long j = base / 2 + k;
        if (j < n_next) next[j] = tile[2 * k] + tile[2 * k + 1];
    }

    const int t0 = threadIdx.x * SPT;
    float b[SPT];
    bool hit[SPT];
#pragma unroll
    for (int s = 0; s < SPT; ++s) { b[s] = 0.0f; hit[s] = false; }
#pragma unroll
    for (int w = 1; w <= LAST; ++w) {
#pragma unroll
        for (int s = 0; s < SPT; ++s) b[s] += tile[t0 + s + w - 1];
        if (w >= FIRST) {
            const float t = s_t[w - FIRST];
#pragma unroll
            for (int s = 0; s < SPT; ++s) hit[s] |= b[s] >= t;
        }
    }

#pragma unroll
    for (int s = 0; s < SPT; ++s) {
        const long long i = base + t0 + s;
        if (!hit[s] || i >= n_out || !valid[i * valid_stride]) continue;
        int best_w;
        const float best = best_width<ENERGY, FIRST, LAST>(tile + t0 + s, s_p, s_q, s_r, &best_w);
        if (best < threshold) continue;
        const unsigned long long slot = atomicAdd(count, 1ULL);
        if (slot < (unsigned long long)capacity) {
            hit_start[slot] = i;
            hit_width[slot] = best_w;
            hit_snr[slot] = best;
        }
    }
}
"""

THREADS = 128
SPT = 5  # starts per thread; odd, so stride-SPT shared loads hit distinct banks


def kernel_name(energy: bool, first: int, last: int) -> str:
    return f"boxcar_round<{'true' if energy else 'false'}, {first}, {last}, {SPT}>"


@functools.cache
def _kernel(energy: bool, first: int, last: int):
    import cupy

    name = kernel_name(energy, first, last)
    module = cupy.RawModule(code=SOURCE, options=("-std=c++17",), name_expressions=(name,))
    return module.get_function(name)


def launch_round(series, valid, valid_stride: int, first: int, last: int, consts, threshold: float,
                 energy: bool, n_out: int, capacity: int | None = None):
    """Launch one round without waiting; returns ``(pending, next_series)``.

    ``pending`` holds the device buffers; :func:`collect_rounds` reads all rounds' counts with a
    single synchronisation, so successive rounds (and series) queue back to back on the GPU.
    """
    import cupy

    series = cupy.ascontiguousarray(series, dtype=cupy.float32)
    n_in = series.size
    n_next = n_in // 2
    nxt = cupy.empty(n_next, dtype=cupy.float32)
    capacity = capacity or max(1 << 14, n_out // 32)
    count = cupy.zeros(1, dtype=cupy.uint64)
    starts = cupy.empty(capacity, dtype=cupy.int64)
    widths = cupy.empty(capacity, dtype=cupy.int32)
    snrs = cupy.empty(capacity, dtype=cupy.float32)
    consts = cupy.asarray(consts, dtype=cupy.float32)
    per_block = THREADS * SPT
    blocks = max(1, -(-n_in // per_block))
    shared = (per_block + last - 1) * 4
    _kernel(energy, first, last)(
        (blocks,), (THREADS,),
        (series, cupy.int64(n_in), cupy.int64(n_out), valid, cupy.int64(valid_stride), consts,
         cupy.float32(threshold), nxt, cupy.int64(n_next), count, cupy.int64(capacity), starts, widths, snrs),
        shared_mem=shared,
    )
    args = (series, valid, valid_stride, first, last, consts, threshold, energy, n_out)
    return (count, capacity, starts, widths, snrs, args), nxt


def collect_rounds(pending: list) -> list[tuple]:
    """Host ``(start, width, snr)`` per launched round, sorted by start; one sync for all rounds."""
    import cupy

    if not pending:
        return []
    counts = cupy.concatenate([p[0] for p in pending]).get()
    out = []
    for found, (count, capacity, starts, widths, snrs, args) in zip(counts.astype(np.int64), pending):
        if found > capacity:  # more hits than room (a very loud stretch): run it again with room for all
            (count, capacity, starts, widths, snrs, _), _ = launch_round(*args, capacity=int(found))
        order = np.argsort(starts[:found].get(), kind="stable")  # atomics append in any order
        out.append((starts[:found].get()[order], widths[:found].get()[order], snrs[:found].get()[order]))
    return out
