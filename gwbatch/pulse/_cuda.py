"""The per-round boxcar kernel ``boxcar_round`` (seed 004, alg. 1): one launch per decimation round.

What it computes (the contract of :mod:`gwbatch.pulse.boxcar`).  For one round of widths
``FIRST..LAST`` over its series ``y`` (float32, ``n_in`` samples: the plan's series decimated by
pairwise sums) and every start ``i < n_out`` whose original sample ``valid[i * valid_stride]``
(uint8) is set: the boxcar sums ``B_w = y[i] + ... + y[i+w-1]``, each width's SNR from the
per-width constants ``consts = [T, p, q, r]`` (float32, four rows of ``LAST - FIRST + 1``):
``z = B p - q`` (``ENERGY = false``, the amplitude series) or ``z = (cbrt(B p) - q) r`` (the energy
series), and the best (SNR, width).  A start whose best SNR is at least ``threshold`` is appended,
in no particular order, at the slot the atomic counter ``count`` (one uint64) hands it:
``hit_start`` (int64, the start in the round's samples), ``hit_width`` (int32, samples of the round),
``hit_snr`` (float32); past ``capacity`` slots it is only counted (the caller runs the round again
with room for all).  The kernel also writes ``next`` (float32, ``n_next`` samples): the sums of
sample pairs of ``y``, the next round's series.

Layout.  ``THREADS`` threads a block; each thread owns ``SPT`` consecutive starts.  A block stages
``THREADS * SPT + LAST - 1`` samples of the round's series (its starts and their halo) and the
round's constants in shared memory.  The common path only decides whether a start may pass; a
start that may computes its SNRs exactly out of line (``best_width``, with ``cbrtf`` for the
energy series), keeps its best (SNR, width) and appends it to the compact list; no per-start arrays
are written.  While the tile is in shared memory the block also writes its part of ``next``.

The test is on the boxcar sum itself, ``B_w >= T_w`` with ``T_w`` the sum at which the SNR
transform reaches the threshold (the transform is increasing in ``B``).  With ``BLOCK = 1`` (the
amplitude series, whose samples may be negative) every width is tested on running sums grown
together from a window of registers (``B_w = B_{w-1} + y[i+w-1]``; one shared load serves all
``SPT`` starts; ``SPT`` is odd, so the strided loads are free of bank conflicts): one add and one
compare per width.  The energy series is non-negative, so ``B_w`` and ``T_w`` grow with ``w`` and
one test ``B_{w2} >= T_{w1}`` covers every width of a block ``w1..w2`` (it is necessary for any of
them to pass): with ``BLOCK`` widths per block (:func:`block_length`, chosen so that noise almost
never passes) the block reads ``B_{w2}`` as a difference of prefix sums of the tile (a block-wide
scan).  The prefix sums' rounding is covered by a margin; the exact path repeats the test on
running sums, so the hits are those of the per-width test.

Widths are template parameters (``boxcar_round<ENERGY, FIRST, LAST, SPT, BLOCK>``,
:func:`kernel_name`; one module per instantiation), so the loops unroll fully and widths below
``FIRST`` (those of earlier rounds) cost one add each.

CPU twin: :func:`gwbatch.pulse.boxcar.boxcar_round_numpy`.

:data:`COMMON` holds the device functions this kernel shares with the fused kernel
(:mod:`gwbatch.pulse._cuda_fused`); :mod:`gwbatch.pulse._cuda_workspace` queues every round of a plan.
The source is plain CUDA C++: ``nvcc -arch=sm_90 -cubin`` compiles it on machines without a GPU
(tests/test_cuda_compile.py, from :func:`compile_cases`).
"""

from __future__ import annotations

import functools

import numpy as np

from gwbatch._xp import to_host

#: Device functions of both boxcar kernels: the exact per-start test (``best_width``), a block-wide
#: exclusive sum and the tile's prefix sums.
COMMON = r"""
// The rare path, kept out of line with a rolled loop so the fast path's registers stay free: the SNR
// of every width of one start and the best (SNR, width), if some width's running sum reaches its
// threshold sum (the test of the common path, exactly); -3e38 otherwise.
template <bool ENERGY, int FIRST, int LAST>
__device__ __noinline__ float best_width(const float* tile, const float* s_t, const float* s_p, const float* s_q,
                                         const float* s_r, int* width)
{
    float sum = 0.0f, best = -3.0e38f;
    int best_w = 0;
    bool reached = false;
#pragma unroll 1
    for (int w = 1; w <= LAST; ++w) {
        sum += tile[w - 1];
        if (w >= FIRST) {
            const int j = w - FIRST;
            reached |= sum >= s_t[j];
            const float z = ENERGY ? (cbrtf(sum * s_p[j]) - s_q[j]) * s_r[j] : fmaf(sum, s_p[j], -s_q[j]);
            if (z > best) { best = z; best_w = w; }
        }
    }
    *width = best_w;
    return reached ? best : -3.0e38f;
}

// The sum of ``value`` over the block's threads before this one (every thread calls it; one barrier;
// warp_total holds a float per warp).
__device__ __forceinline__ float block_exclusive_sum(const float value, float* warp_total)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float incl = value;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const float v = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += v;
    }
    if (lane == 31) warp_total[warp] = incl;
    __syncthreads();
    float before = incl - value;
    for (int u = 0; u < warp; ++u) before += warp_total[u];
    return before;
}

// Prefix sums of the tile (pre[k] = tile[0] + ... + tile[k-1]) by a block-wide scan of NT threads.
template <int SPAN, int NT>
__device__ __forceinline__ void prefix_sums(const float* tile, float* pre, float* warp_total)
{
    constexpr int CH = (SPAN + NT - 1) / NT;  // samples per thread
    const int k0 = threadIdx.x * CH;
    float local = 0.0f;
#pragma unroll
    for (int j = 0; j < CH; ++j) if (k0 + j < SPAN) local += tile[k0 + j];
    float run = block_exclusive_sum(local, warp_total);
#pragma unroll
    for (int j = 0; j < CH; ++j) {
        if (k0 + j < SPAN) { run += tile[k0 + j]; pre[k0 + j + 1] = run; }
    }
    if (threadIdx.x == 0) pre[0] = 0.0f;
}

"""

SOURCE = r"""
#define THREADS 128
""" + COMMON + r"""
template <bool ENERGY, int FIRST, int LAST, int SPT, int BLOCK>
__global__ void __launch_bounds__(THREADS)
boxcar_round(const float* __restrict__ y, const long long n_in, const long long n_out,
             const unsigned char* __restrict__ valid, const long long valid_stride,
             const float* __restrict__ consts, const float threshold,
             float* __restrict__ next, const long long n_next,
             unsigned long long* __restrict__ count, const long long capacity,
             long long* __restrict__ hit_start, int* __restrict__ hit_width, float* __restrict__ hit_snr)
{
    constexpr int NW = LAST - FIRST + 1;
    constexpr int PER_BLOCK = THREADS * SPT;
    constexpr int SPAN = PER_BLOCK + LAST - 1;
    __shared__ float s_t[NW], s_p[NW], s_q[NW], s_r[NW], warp_total[THREADS / 32];
    __shared__ float tile[SPAN];
    __shared__ float pre[BLOCK > 1 ? SPAN + 1 : 1];
    const long long base = (long long)blockIdx.x * PER_BLOCK;
    const float* yb = y + base;
    if (base + SPAN <= n_in) {  // every block but the last: no bounds to check
#pragma unroll
        for (int k = threadIdx.x; k < SPAN; k += THREADS) tile[k] = __ldg(yb + k);
    } else {
        for (int k = threadIdx.x; k < SPAN; k += THREADS) tile[k] = base + k < n_in ? yb[k] : 0.0f;
    }
    for (int k = threadIdx.x; k < NW; k += THREADS) {
        s_t[k] = consts[k];
        s_p[k] = consts[NW + k];
        s_q[k] = consts[2 * NW + k];
        s_r[k] = consts[3 * NW + k];
    }
    __syncthreads();

    // The next round's series: sums of pairs of this block's samples.
    float* nb = next + base / 2;
    if (base / 2 + PER_BLOCK / 2 <= n_next) {
#pragma unroll
        for (int k = threadIdx.x; k < PER_BLOCK / 2; k += THREADS) nb[k] = tile[2 * k] + tile[2 * k + 1];
    } else {
        for (int k = threadIdx.x; k < PER_BLOCK / 2; k += THREADS)
            if (base / 2 + k < n_next) nb[k] = tile[2 * k] + tile[2 * k + 1];
    }

    const int t0 = threadIdx.x * SPT;
    bool hit[SPT];
#pragma unroll
    for (int s = 0; s < SPT; ++s) hit[s] = false;
    if (BLOCK == 1) {  // every width, on running sums
        float b[SPT];
#pragma unroll
        for (int s = 0; s < SPT; ++s) b[s] = 0.0f;
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
    } else {  // blocks of widths (non-negative samples), on prefix sums
        prefix_sums<SPAN, THREADS>(tile, pre, warp_total);
        __syncthreads();
        // |pre[a] - pre[b] - exact sum| stays under ~2e-6 pre[SPAN] (scan depth ~15 adds), the running
        // sums' own rounding under 2e-6 of the same: the margin keeps every start the exact test keeps
        const float margin = 1e-5f * pre[SPAN];
        float low[SPT];
#pragma unroll
        for (int s = 0; s < SPT; ++s) low[s] = pre[t0 + s];
#pragma unroll
        for (int w1 = FIRST; w1 <= LAST; w1 += BLOCK) {
            const int w2 = w1 + BLOCK - 1 < LAST ? w1 + BLOCK - 1 : LAST;
            const float t = s_t[w1 - FIRST] - margin;
#pragma unroll
            for (int s = 0; s < SPT; ++s) hit[s] |= pre[t0 + s + w2] - low[s] >= t;
        }
    }

#pragma unroll
    for (int s = 0; s < SPT; ++s) {
        const long long i = base + t0 + s;
        if (!hit[s] || i >= n_out || !valid[i * valid_stride]) continue;
        int best_w;
        const float best = best_width<ENERGY, FIRST, LAST>(tile + t0 + s, s_t, s_p, s_q, s_r, &best_w);
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

#: NVRTC options of every compile (the compile test passes them to nvcc as well).
OPTIONS = ("-std=c++17",)

THREADS = 128
SPT = 5  # starts per thread; odd, so stride-SPT shared loads hit distinct banks
BLOCKS = (1, 2, 4, 8, 16)  # widths per threshold test (block_length)
#: A block of widths is tested as one when noise passes that test with at most this SNR of margin:
#: the block's first threshold sum, as an SNR of its last width, is at least this (P ~ 3e-5).
BLOCK_MARGIN_SNR = 4.0


def kernel_name(energy: bool, first: int, last: int, block: int = 1) -> str:
    return f"boxcar_round<{'true' if energy else 'false'}, {first}, {last}, {SPT}, {block}>"


def block_length(energy: bool, first: int, last: int, consts: np.ndarray) -> int:
    """Widths per threshold test for a round: 1 for the amplitude series; for the energy series the
    largest of ``BLOCKS`` for which every block's first threshold sum ``T_{w1}`` is an SNR of at least
    ``BLOCK_MARGIN_SNR`` at the block's last width ``w2`` (so Gaussian noise passes a block test
    about as rarely as 4 sigma), from the round's constants ``[T, p, q, r]``."""
    if not energy:
        return 1
    return _energy_block_length(first, last, np.asarray(consts, dtype=np.float32).tobytes())


@functools.lru_cache(maxsize=256)
def _energy_block_length(first: int, last: int, consts: bytes) -> int:
    nw = last - first + 1
    c = np.frombuffer(consts, dtype=np.float32).astype(np.float64)
    t, p, q, r = c[:nw], c[nw:2 * nw], c[2 * nw:3 * nw], c[3 * nw:]
    for block in sorted(BLOCKS, reverse=True):
        if block == 1 or block > nw:
            continue
        w1 = np.arange(0, nw, block)
        w2 = np.minimum(w1 + block - 1, nw - 1)
        snr = (np.cbrt(t[w1] * p[w2]) - q[w2]) * r[w2]  # T_{w1} as an SNR of width w2
        if np.all(snr >= BLOCK_MARGIN_SNR):
            return block
    return 1


@functools.cache
def _kernel(energy: bool, first: int, last: int, block: int = 1):
    import cupy

    name = kernel_name(energy, first, last, block)
    module = cupy.RawModule(code=SOURCE, options=OPTIONS, name_expressions=(name,))
    return module.get_function(name)


def _launch(series, valid, valid_stride: int, first: int, last: int, consts, threshold: float, energy: bool,
            n_out: int, count, starts, widths, snrs, nxt, block: int = 1) -> None:
    """Queue one round: hits go to ``starts``/``widths``/``snrs`` (their length is the capacity),
    their number to ``count`` (one uint64, zeroed), the next round's series to ``nxt`` (may be empty);
    ``block`` widths per threshold test (:func:`block_length`)."""
    import cupy

    per_block = THREADS * SPT
    blocks = max(1, -(-series.size // per_block))
    _kernel(energy, first, last, block)(
        (blocks,), (THREADS,),
        (series, cupy.int64(series.size), cupy.int64(n_out), valid, cupy.int64(valid_stride), consts,
         cupy.float32(threshold), nxt, cupy.int64(nxt.size), count, cupy.int64(starts.size), starts, widths, snrs),
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


def one_round(series, valid, valid_stride: int, first: int, last: int, consts, threshold: float, energy: bool,
              n_out: int):
    """One round, synchronously: ``(start, width, snr, next_series)`` as in ``boxcar_round``."""
    import cupy

    series = cupy.ascontiguousarray(series, dtype=cupy.float32)
    nxt = cupy.empty(series.size // 2, dtype=cupy.float32)
    host = to_host(consts).astype(np.float32)
    args = (series, valid, valid_stride, first, last, cupy.asarray(host), threshold, energy, n_out)
    block = block_length(energy, first, last, host)
    room = capacity(n_out)
    while True:
        c, s, w, z = _hit_buffers([room])
        _launch(*args, c, s, w, z, nxt, block)
        found = int(c.get()[0])
        if found <= room:
            break
        room = found
    order = np.argsort(s[:found].get(), kind="stable")
    return s[:found].get()[order], w[:found].get()[order], z[:found].get()[order], nxt


#: The rounds ``(first, last)`` the compile test instantiates: those of the default plans
#: ([32, 16, ...] and [16, 8, ...]), each with every block length it may get.
COMPILE_ROUNDS = ((1, 32), (17, 32), (1, 16), (9, 16))


def compile_cases() -> list[tuple[str, str, tuple[str, ...]]]:
    """What tests/test_cuda_compile.py compiles with nvcc, as :func:`_kernel` compiles it:
    ``(label, source, name expressions)``."""
    names = tuple(kernel_name(e, f, last, b) for e in (True, False) for f, last in COMPILE_ROUNDS for b in BLOCKS
                  if b == 1 or (e and b <= last - f + 1))
    return [("boxcar_round", SOURCE, names)]
