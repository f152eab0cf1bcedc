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


def _launch(series, valid, valid_stride: int, first: int, last: int, consts, threshold: float, energy: bool,
            n_out: int, count, starts, widths, snrs, nxt) -> None:
    """Queue one round: hits go to ``starts``/``widths``/``snrs`` (their length is the capacity),
    their number to ``count`` (one uint64, zeroed), the next round's series to ``nxt`` (may be empty)."""
    import cupy

    per_block = THREADS * SPT
    blocks = max(1, -(-series.size // per_block))
    _kernel(energy, first, last)(
        (blocks,), (THREADS,),
        (series, cupy.int64(series.size), cupy.int64(n_out), valid, cupy.int64(valid_stride), consts,
         cupy.float32(threshold), nxt, cupy.int64(nxt.size), count, cupy.int64(starts.size), starts, widths, snrs),
        shared_mem=(per_block + last - 1) * 4,
    )


def capacity(n_out: int) -> int:
    """Hits a round has room for before it is run again with room for all (a very loud stretch)."""
    return max(1 << 14, n_out // 32)


def _hit_buffers(sizes: list[int]):
    """Counts (zeroed) and hit lists for rounds of the given capacities, each one allocation."""
    import cupy

    total = int(sum(sizes))
    return (cupy.zeros(len(sizes), dtype=cupy.uint64), cupy.empty(total, dtype=cupy.int64),
            cupy.empty(total, dtype=cupy.int32), cupy.empty(total, dtype=cupy.float32))


def run_rounds(series, valid, rounds, round_consts, threshold: float, energy: bool, n: int) -> list[tuple]:
    """Every round of a plan over one series (the contract of :func:`gwbatch.pulse.boxcar.run_rounds`).

    The rounds are queued back to back without waiting: one workspace holds every round's hit list
    and decimated series (four allocations, not six per round), one synchronisation reads the counts,
    and the hits come back in three copies.  The host work per series is then small against the
    kernels' (it was ~1 ms for 9 rounds, more than the kernels of a 2^26-sample series).
    """
    import cupy

    series = cupy.ascontiguousarray(series, dtype=cupy.float32)
    n_in = [series.size >> k for k in range(len(rounds))]
    n_next = n_in[1:] + [0]  # the last round writes no next series
    n_out = [-(-n // r.decimation) for r in rounds]
    caps = [capacity(m) for m in n_out]
    at = np.concatenate([[0], np.cumsum(caps)]).astype(np.int64)
    counts, starts, widths, snrs = _hit_buffers(caps)
    decimated = cupy.empty(int(sum(n_next)), dtype=cupy.float32)
    next_at = np.concatenate([[0], np.cumsum(n_next)]).astype(np.int64)
    inputs = []
    for k, rnd in enumerate(rounds):
        consts = cupy.asarray(round_consts(k, series), dtype=cupy.float32)
        args = (series, valid, rnd.decimation, rnd.first_width, rnd.last_width, consts, threshold, energy, n_out[k])
        lo, hi = at[k], at[k + 1]
        _launch(*args, counts[k : k + 1], starts[lo:hi], widths[lo:hi], snrs[lo:hi],
                decimated[next_at[k] : next_at[k + 1]])
        inputs.append(args)
        series = decimated[next_at[k] : next_at[k + 1]]
    found = counts.get().astype(np.int64)
    kept = np.minimum(found, caps)
    host = [np.empty(0, np.int64), np.empty(0, np.int32), np.empty(0, np.float32)]
    if kept.any():
        pick = [slice(at[k], at[k] + kept[k]) for k in range(len(rounds)) if kept[k]]
        host = [cupy.concatenate([a[sl] for sl in pick]).get() for a in (starts, widths, snrs)]
    edges = np.concatenate([[0], np.cumsum(kept)])
    out = []
    for k in range(len(rounds)):
        if found[k] > caps[k]:  # more hits than room: run this round again with room for all
            c, s, w, z = _hit_buffers([int(found[k])])
            _launch(*inputs[k], c, s, w, z, decimated[:0])
            idx, width, snr = s.get(), w.get(), z.get()
        else:
            idx, width, snr = (h[edges[k] : edges[k + 1]] for h in host)
        order = np.argsort(idx, kind="stable")  # atomics append in any order
        out.append((idx[order], width[order], snr[order]))
    return out


def one_round(series, valid, valid_stride: int, first: int, last: int, consts, threshold: float, energy: bool,
              n_out: int):
    """One round, synchronously: ``(start, width, snr, next_series)`` as in ``boxcar_round``."""
    import cupy

    series = cupy.ascontiguousarray(series, dtype=cupy.float32)
    nxt = cupy.empty(series.size // 2, dtype=cupy.float32)
    consts = cupy.asarray(consts, dtype=cupy.float32)
    args = (series, valid, valid_stride, first, last, consts, threshold, energy, n_out)
    room = capacity(n_out)
    while True:
        c, s, w, z = _hit_buffers([room])
        _launch(*args, c, s, w, z, nxt)
        found = int(c.get()[0])
        if found <= room:
            break
        room = found
    order = np.argsort(s[:found].get(), kind="stable")
    return s[:found].get()[order], w[:found].get()[order], z[:found].get()[order], nxt
