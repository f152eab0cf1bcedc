"""CUDA boxcar kernels (seed 004, alg. 1, restructured for throughput): one launch per decimation
round, and a fused kernel that runs several rounds of the energy series per launch.

Per round.  A block stages ``THREADS * SPT + LAST - 1`` samples of the round's series in shared memory.  Each
thread owns ``SPT`` consecutive boxcar starts.  The common path only decides whether a start may
pass; a start that may computes its SNRs exactly out of line (with ``cbrtf`` for the energy
series), keeps its best (SNR, width) and appends it to a compact list; no per-start arrays are
written.  While the tile is in shared memory the block also writes the next round's series, the
sums of sample pairs.

The test is on the boxcar sum itself, ``B_w >= T_w`` with ``T_w`` the sum at which the SNR
transform reaches the threshold (the transform is increasing in ``B``).  With ``BLOCK = 1`` (the
amplitude series, whose samples may be negative) every width is tested on running sums grown
together from a window of registers (``B_w = B_{w-1} + y[i+w-1]``; one shared load serves all
``SPT`` starts; ``SPT`` is odd, so the strided loads are free of bank conflicts): one add and one
compare per width.  The energy series is non-negative, so ``B_w`` and ``T_w`` grow with ``w`` and
one test ``B_{w2} >= T_{w1}`` covers every width of a block ``w1..w2`` (it is necessary for any of
them to pass): with ``BLOCK`` widths per block (:func:`block_length`, chosen so that noise almost
never passes) the block reads ``B_{w2}`` as a difference of prefix sums of the tile (a block-wide
scan) and a start costs a few instructions instead of two per width.  The prefix sums' rounding is
covered by a margin; the exact path repeats the test on running sums, so the hits are those of
the per-width test.

Widths are template parameters, so the loops unroll fully and widths below ``FIRST`` (those of
earlier rounds) cost one add each.

Fused (:data:`GROUP_SOURCE`).  A round of the energy series reads its series and writes the next
one, so nine rounds move 12 bytes per input sample, and the small late rounds are bound by launch
and latency.  The fused kernel runs ``GROUP_ROUNDS`` rounds from one tile of the first one's series:
the block builds the later rounds' series (the same pairwise sums, bit for bit) and one set of
prefix sums in shared memory, tests every round's starts in blocks of widths as above, and writes
only the series of the next group, 1/16 of its input: ~5 bytes per input sample (halos included) for the plan
[32, 16 x 8], in three launches.  It needs constants that do not measure each round's series
(``sigma: white``); otherwise, and for the amplitude series, the per-round kernel runs.

The sources are plain CUDA C++: ``nvcc -arch=sm_90 -cubin`` compiles them on machines without a
GPU (tests/test_cuda_compile.py).
"""

from __future__ import annotations

import functools
import threading

import numpy as np

from gwbatch._xp import to_host

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

# The fused kernel: rounds r0 .. r0 + R - 1 of the energy series in one pass over round r0's series
# (its "level 0").  Generated per group (group_source): R, TILE, HALO, SPAN and the rounds' tables.
GROUP_SOURCE = r"""
// Where level q < G_R (SPAN >> q samples) and its prefix sums ((SPAN >> q) + 1, each level's rows
// padded so that entry 1 is 16-byte aligned: the array starts 3 floats into an aligned buffer) start
// in shared memory.
__host__ __device__ constexpr int level_at(const int q) { int a = 0; for (int p = 0; p < q; ++p) a += G_SPAN >> p; return a; }
__host__ __device__ constexpr int prefix_at(const int q) {
    int a = 0; for (int p = 0; p < q; ++p) a += ((G_SPAN >> p) + 1 + 3) / 4 * 4; return a; }
constexpr int PREFIX_TOTAL = prefix_at(G_R);

// Every round q of the group from one tile of level 0 (G_TILE starts plus a halo): the block forms
// levels 1..G_R by pairwise sums (bit for bit the twin's decimated series, zero at and beyond each
// level's length), the prefix sums of level 0, and for each round q the blocked threshold tests on
// them (a level-q boxcar sum is the level-0 sum over 2^q times the span, which for non-negative
// samples can only be larger where a level is cut at its length).  Starts that pass get the exact
// per-width test and their SNRs on the level's own samples (best_width); level G_R is the next
// group's input.
template <int Q>
__device__ __forceinline__ void group_round(const float* lev, const float* pre, const float* cst, const float margin,
                                            const long long base, const long long n_orig, const int r0,
                                            const unsigned char* __restrict__ valid, const float threshold,
                                            unsigned long long* __restrict__ count, const long long* __restrict__ room,
                                            long long* __restrict__ hit_start, int* __restrict__ hit_width,
                                            float* __restrict__ hit_snr)
{
    constexpr int FIRST = R_FIRST[Q], LAST = R_LAST[Q], BLK = R_BLOCK[Q], NW = LAST - FIRST + 1;
    constexpr int TESTS = (NW + BLK - 1) / BLK;
    constexpr int PER = (G_TILE >> Q) / GROUP_THREADS;  // starts per thread, strided by the block size
    const float* pq = pre + prefix_at(Q);
    const float* c = cst + CONST_AT[Q];
    constexpr bool HELD = TESTS <= 8;  // thresholds in registers (beyond, read from shared memory)
    float t[HELD ? TESTS : 1];
#pragma unroll
    for (int k = 0; k < (HELD ? TESTS : 0); ++k) t[k] = c[k * BLK] - margin;
    // the common path: which of this thread's starts may pass (no calls in it; many tests per start
    // are unrolled one start at a time)
    constexpr int UNROLL_STARTS = TESTS <= 16 ? PER : 1;
    unsigned int may = 0;
#pragma unroll UNROLL_STARTS
    for (int s = 0; s < PER; ++s) {
        const int m = s * GROUP_THREADS + threadIdx.x;
        const float low = pq[m];
        bool hit = false;
#pragma unroll
        for (int k = 0; k < TESTS; ++k) {
            const int w2 = FIRST + k * BLK + BLK - 1 < LAST ? FIRST + k * BLK + BLK - 1 : LAST;
            hit |= pq[m + w2] - low >= (HELD ? t[HELD ? k : 0] : c[k * BLK] - margin);
        }
        may |= (unsigned int)hit << s;
    }
    if (may == 0) return;
    // the rare path: the exact per-width test and the SNRs, in order of the starts
    const long long d_orig = 1LL << (r0 + Q);
    const long long n_out = (n_orig + d_orig - 1) >> (r0 + Q);
    const float* lq = lev + level_at(Q);
    do {
        const int s = __ffs(may) - 1;
        may &= may - 1;
        const int m = s * GROUP_THREADS + threadIdx.x;
        const long long i = (base >> Q) + m;
        if (i >= n_out || !valid[i * d_orig]) continue;
        int best_w;
        const float best = best_width<true, FIRST, LAST>(lq + m, c, c + NW, c + 2 * NW, c + 3 * NW, &best_w);
        if (best < threshold) continue;
        const unsigned long long slot = atomicAdd(count + Q, 1ULL);
        if (slot < (unsigned long long)room[2 * Q + 1]) {
            const long long at = room[2 * Q] + slot;
            hit_start[at] = i;
            hit_width[at] = best_w;
            hit_snr[at] = best;
        }
    } while (may != 0);
}

// Level Q of a thread's chunk (samples [c0, c0 + 16) of level 0) from level Q - 1: pairwise sums,
// zero at and beyond the level's length n_in >> Q (the twin's decimated series; no sample of a FULL
// tile is); stored in shared memory below G_R, written as the next group's input at G_R (the
// tile's part only).
template <int Q, bool FULL>
__device__ __forceinline__ void level_of(const float* below, float* out, const long long base, const int c0,
                                         const long long n_in, float* lev, float* __restrict__ next)
{
    constexpr int H = 16 >> Q;
    if (FULL) {
#pragma unroll
        for (int i = 0; i < H; ++i) out[i] = below[2 * i] + below[2 * i + 1];
    } else {
        const long long len = (n_in >> Q) - ((base + c0) >> Q);
#pragma unroll
        for (int i = 0; i < H; ++i) out[i] = i < len ? below[2 * i] + below[2 * i + 1] : 0.0f;
    }
    if (Q < G_R) {
        float* dst = lev + level_at(Q) + (c0 >> Q);  // 8-byte aligned at least (level_at(Q) is a multiple of 16 >> Q)
        if (H >= 4) {
#pragma unroll
            for (int i = 0; i < H; i += 4) *(float4*)(dst + i) = make_float4(out[i], out[i + 1], out[i + 2], out[i + 3]);
        } else if (H == 2) {
            *(float2*)dst = make_float2(out[0], out[H > 1 ? 1 : 0]);
        } else {
            dst[0] = out[0];
        }
    } else if (next != nullptr && c0 < G_TILE) {
        const long long at = (base + c0) >> Q, n_next = n_in >> Q;
#pragma unroll
        for (int i = 0; i < H; ++i)
            if (FULL || at + i < n_next) next[at + i] = out[i];
    }
}

template <bool FULL>
__device__ __forceinline__ void chunk_levels(const float* v, const long long base, const int c0, const long long n_in,
                                             float* lev, float* __restrict__ next)
{
    float v1[8], v2[4], v3[2], v4[1];
    level_of<1, FULL>(v, v1, base, c0, n_in, lev, next);
    if constexpr (G_R > 1) level_of<2, FULL>(v1, v2, base, c0, n_in, lev, next);
    if constexpr (G_R > 2) level_of<3, FULL>(v2, v3, base, c0, n_in, lev, next);
    if constexpr (G_R > 3) level_of<4, FULL>(v3, v4, base, c0, n_in, lev, next);
}

extern "C" __global__ void __launch_bounds__(GROUP_THREADS, GROUP_MIN_BLOCKS)
boxcar_group(const float* __restrict__ y, const long long n_in, const long long n_orig, const int r0,
             const unsigned char* __restrict__ valid, const float* __restrict__ consts, const float threshold,
             float* __restrict__ next, unsigned long long* __restrict__ count, const long long* __restrict__ room,
             long long* __restrict__ hit_start, int* __restrict__ hit_width, float* __restrict__ hit_snr)
{
    __shared__ __align__(16) float lev[LEVEL_TOTAL];
    __shared__ __align__(16) float pre_buffer[PREFIX_TOTAL + 4];
    __shared__ float cst[CONST_TOTAL];
    __shared__ float warp_total[GROUP_THREADS / 32];
    float* pre = pre_buffer + 3;
    const long long base = (long long)blockIdx.x * G_TILE;
    for (int k = threadIdx.x; k < CONST_TOTAL; k += GROUP_THREADS) cst[k] = consts[k];

    // 1. Thread t < G_SPAN / 16 takes level-0 samples [16 t, 16 t + 16): it stores them, forms and
    // stores their levels (the G_R-th as the next group's input) and keeps their running sums.
    constexpr int CHUNKS = G_SPAN / 16;
    const int c0 = 16 * threadIdx.x;
    float run[16];
    float total = 0.0f;
    if (threadIdx.x < CHUNKS) {
        float v[16];
        const bool full = base + G_SPAN <= n_in;
        if (full) {
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const float4 x = __ldg((const float4*)(y + base + c0) + u);
                v[4 * u] = x.x; v[4 * u + 1] = x.y; v[4 * u + 2] = x.z; v[4 * u + 3] = x.w;
            }
        } else {
#pragma unroll
            for (int j = 0; j < 16; ++j) v[j] = base + c0 + j < n_in ? y[base + c0 + j] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) ((float4*)(lev + c0))[u] = make_float4(v[4 * u], v[4 * u + 1], v[4 * u + 2], v[4 * u + 3]);
#pragma unroll
        for (int j = 0; j < 16; ++j) { total += v[j]; run[j] = total; }
        if (full) chunk_levels<true>(v, base, c0, n_in, lev, next);
        else chunk_levels<false>(v, base, c0, n_in, lev, next);
    }
    // 2. the chunks' offsets: the sum of the chunks before each
    const float offset = block_exclusive_sum(total, warp_total);
    // 3. prefix sums of level 0 and, per level q < G_R, those at every 2^q-th sample
    if (threadIdx.x < CHUNKS) {
        float p[16];
#pragma unroll
        for (int j = 0; j < 16; ++j) p[j] = offset + run[j];
#pragma unroll
        for (int u = 0; u < 4; ++u) *(float4*)(pre + c0 + 1 + 4 * u) = make_float4(p[4 * u], p[4 * u + 1], p[4 * u + 2], p[4 * u + 3]);
        if constexpr (G_R > 1) {
            float* d = pre + prefix_at(1) + (c0 >> 1) + 1;
            *(float4*)d = make_float4(p[1], p[3], p[5], p[7]);
            *(float4*)(d + 4) = make_float4(p[9], p[11], p[13], p[15]);
        }
        if constexpr (G_R > 2) *(float4*)(pre + prefix_at(G_R > 2 ? 2 : 0) + (c0 >> 2) + 1) = make_float4(p[3], p[7], p[11], p[15]);
        if constexpr (G_R > 3) *(float2*)(pre + prefix_at(G_R > 3 ? 3 : 0) + (c0 >> 3) + 1) = make_float2(p[7], p[15]);
    }
    if (threadIdx.x == 0) {
#pragma unroll
        for (int q = 0; q < G_R; ++q) pre[prefix_at(q)] = 0.0f;
    }
    __syncthreads();
    // the prefix sums and the exact running sums each round off by under ~3e-6 of pre[G_SPAN] (~30
    // adds into the prefix sums, tree and running sums ~40): the margin keeps every start the
    // exact test keeps
    const float margin = 1e-5f * pre[G_SPAN];
    group_round<0>(lev, pre, cst, margin, base, n_orig, r0, valid, threshold, count, room, hit_start, hit_width, hit_snr);
    if constexpr (G_R > 1) group_round<(G_R > 1 ? 1 : 0)>(lev, pre, cst, margin, base, n_orig, r0, valid, threshold, count, room, hit_start, hit_width, hit_snr);
    if constexpr (G_R > 2) group_round<(G_R > 2 ? 2 : 0)>(lev, pre, cst, margin, base, n_orig, r0, valid, threshold, count, room, hit_start, hit_width, hit_snr);
    if constexpr (G_R > 3) group_round<(G_R > 3 ? 3 : 0)>(lev, pre, cst, margin, base, n_orig, r0, valid, threshold, count, room, hit_start, hit_width, hit_snr);
}
"""
#: The fused kernel's block: threads, level-0 starts per block, rounds per launch at most.
GROUP_THREADS = 256
GROUP_TILE = 2048
GROUP_ROUNDS = 4


def group_halo(spec: tuple[tuple[int, int, int], ...]) -> int:
    """Level-0 samples a tile needs beyond its starts for rounds ``(first, last, block)``: round q's
    widest boxcar from its last start, ``2^q (last_q - 1)``, rounded up to a multiple of 16 (a
    thread's chunk of samples)."""
    halo = max((1 << q) * (last - 1) for q, (_, last, _) in enumerate(spec))
    return max(16, -(-halo // 16) * 16)


#: Static shared memory a block may use.
GROUP_SHARED_LIMIT = 48 * 1024


def group_span(spec: tuple[tuple[int, int, int], ...]) -> int:
    """Level-0 samples in a tile of the fused kernel for rounds ``spec``: its starts and their halo."""
    return GROUP_TILE + group_halo(spec)


def group_shared_bytes(spec: tuple[tuple[int, int, int], ...]) -> int:
    """Shared memory of the fused kernel's block for rounds ``spec`` (levels, prefix sums, constants)."""
    span, r = group_span(spec), len(spec)
    levels = sum(span >> q for q in range(r))
    prefixes = sum(-(-((span >> q) + 1) // 4) * 4 for q in range(r)) + 4
    constants = sum(4 * (last - first + 1) for first, last, _ in spec)
    return 4 * (levels + prefixes + constants + GROUP_THREADS // 32)


def group_fits(spec: tuple[tuple[int, int, int], ...]) -> bool:
    """Whether the fused kernel can run rounds ``spec``: a thread per 16 samples of the tile, and
    the block's shared memory within :data:`GROUP_SHARED_LIMIT` (round widths up to ~1000 samples
    of the group's first series)."""
    return group_span(spec) <= 16 * GROUP_THREADS and group_shared_bytes(spec) <= GROUP_SHARED_LIMIT


def group_source(spec: tuple[tuple[int, int, int], ...]) -> str:
    """The fused kernel for a group of rounds ``(first, last, block)`` (at most ``GROUP_ROUNDS``)."""
    r = len(spec)
    if not 1 <= r <= GROUP_ROUNDS:
        raise ValueError(f"a group holds 1 to {GROUP_ROUNDS} rounds, not {r}")
    if not group_fits(spec):
        raise ValueError(f"rounds {spec} need more than the fused kernel's block holds (group_fits)")
    span = group_span(spec)
    levels = sum(span >> q for q in range(r))
    const_at = np.concatenate([[0], np.cumsum([4 * (last - first + 1) for first, last, _ in spec])]).tolist()

    def table(name, values):
        return f"constexpr int {name}[] = {{{', '.join(str(int(v)) for v in values)}}};\n"

    # six blocks fit an SM's shared memory at the default plans' tiles; registers for that (<= 42)
    # hold up to 8 thresholds per round; more tests per start need more registers
    tests = max(-(-(last - first + 1) // block) for first, last, block in spec)
    min_blocks = 6 if tests <= 8 else (4 if tests <= 32 else 3)
    head = (f"#define GROUP_THREADS {GROUP_THREADS}\n#define GROUP_MIN_BLOCKS {min_blocks}\n"
            f"constexpr int G_TILE = {GROUP_TILE};\nconstexpr int G_R = {r};\n"
            f"constexpr int G_SPAN = {span};\nconstexpr int LEVEL_TOTAL = {levels};\n"
            f"constexpr int CONST_TOTAL = {const_at[-1]};\n"
            + table("R_FIRST", [f for f, _, _ in spec]) + table("R_LAST", [last for _, last, _ in spec])
            + table("R_BLOCK", [b for _, _, b in spec]) + table("CONST_AT", const_at))
    return head + COMMON + GROUP_SOURCE


@functools.cache
def _group_kernel(spec: tuple[tuple[int, int, int], ...]):
    import cupy

    return cupy.RawModule(code=group_source(spec), options=("-std=c++17",)).get_function("boxcar_group")


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
    module = cupy.RawModule(code=SOURCE, options=("-std=c++17",), name_expressions=(name,))
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


class _Constants:
    """Every round's constants in one device buffer (rounds one after the other), each uploaded from
    one pinned host buffer when it is known, queued on the current stream: the host does not wait for
    the kernels before it (a pageable copy would).  Kept alive until the stream has passed the copies."""

    def __init__(self, rounds):
        import cupy
        import cupyx

        sizes = [4 * r.n_widths for r in rounds]
        self.at = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.pinned = cupyx.empty_pinned(int(self.at[-1]), np.float32)
        self.device = cupy.empty(int(self.at[-1]), np.float32)

    def _stage(self, k: int, host: np.ndarray) -> slice:
        lo, hi = self.at[k], self.at[k + 1]
        if host.size != hi - lo:
            raise ValueError(f"round {k} needs {hi - lo} constants, got {host.size}")
        self.pinned[lo:hi] = host
        return slice(lo, hi)

    def upload(self, k: int, host: np.ndarray):
        """Round ``k``'s constants, as soon as they are known (one copy each)."""
        import cupy

        at = self._stage(k, host)
        self.device[at].set(self.pinned[at], stream=cupy.cuda.get_current_stream())
        return self.device[at]

    def upload_all(self, hosts: list[np.ndarray]) -> None:
        """Every round's constants at once (one copy)."""
        import cupy

        for k, host in enumerate(hosts):
            self._stage(k, host)
        self.device.set(self.pinned, stream=cupy.cuda.get_current_stream())

    def rounds(self, k0: int, k1: int):
        """The device constants of rounds ``k0 .. k1 - 1``, one after the other."""
        return self.device[self.at[k0] : self.at[k1]]


def capacity(n_out: int) -> int:
    """Hits a round has room for before it is run again with room for all (a very loud stretch)."""
    return max(1 << 14, n_out // 32)


def _hit_buffers(sizes: list[int]):
    """Counts (zeroed) and hit lists for rounds of the given capacities, each one allocation."""
    import cupy

    total = int(sum(sizes))
    return (cupy.zeros(len(sizes), dtype=cupy.uint64), cupy.empty(total, dtype=cupy.int64),
            cupy.empty(total, dtype=cupy.int32), cupy.empty(total, dtype=cupy.float32))


def round_groups(n_rounds: int) -> list[range]:
    """The plan's rounds in launches of the fused kernel: ``GROUP_ROUNDS`` at a time."""
    return [range(k, min(k + GROUP_ROUNDS, n_rounds)) for k in range(0, n_rounds, GROUP_ROUNDS)]


#: Widths a round may have to run in the fused kernel (its tests are unrolled per start).
GROUP_MAX_WIDTHS = 64


def fused_fits(rounds) -> bool:
    """Whether every group of the plan fits the fused kernel (:func:`group_fits`), each round with
    at most ``GROUP_MAX_WIDTHS`` widths (the default plans have 8 to 32)."""
    return all(r.n_widths <= GROUP_MAX_WIDTHS for r in rounds) and all(
        group_fits(tuple((rounds[k].first_width, rounds[k].last_width, 1) for k in ks))
        for ks in round_groups(len(rounds)))


def run_rounds(series, valid, rounds, round_consts, threshold: float, energy: bool, n: int,
               measures_series: bool = True) -> list[tuple]:
    """Every round of a plan over one series (the contract of :func:`gwbatch.pulse.boxcar.run_rounds`).

    The launches are queued back to back without waiting into the thread's workspace
    (:func:`workspace`: every round's hit list, constants and series, allocated once per plan and
    length), one synchronisation reads the counts, and the hits come back in three copies.  The
    energy series, when no round's constants need its own series (``measures_series=False``), runs
    the fused kernel: ``GROUP_ROUNDS`` rounds per launch from one read of the first one's series,
    which writes only the next group's (:data:`GROUP_SOURCE`; :func:`fused_fits`); otherwise one
    launch per round, each writing the next round's series.
    """
    import cupy

    series = cupy.ascontiguousarray(series, dtype=cupy.float32)
    fused = energy and not measures_series and fused_fits(rounds)
    ws = workspace(rounds, n, series.size, fused)
    ws.zero_counts()
    launches = (_GroupLaunches if fused else _RoundLaunches)(ws, series, valid, round_consts, threshold, energy)
    counts, starts, widths, snrs = ws.hits
    caps, at = ws.caps, ws.at
    found = counts.get().astype(np.int64)
    if not found.any():
        return [(np.empty(0, np.int64), np.empty(0, np.int32), np.empty(0, np.float32)) for _ in rounds]
    kept = np.minimum(found, caps)
    pick = [slice(at[k], at[k] + kept[k]) for k in range(len(rounds)) if kept[k]]
    host = [cupy.concatenate([a[sl] for sl in pick]).get() for a in (starts, widths, snrs)]
    edges = np.concatenate([[0], np.cumsum(kept)])
    out = []
    for k in range(len(rounds)):
        if found[k] > caps[k]:  # more hits than room: run this round again with room for all
            c, s, w, z = _hit_buffers([int(found[k])])
            launches.rerun(k, c, s, w, z)
            idx, width, snr = s.get(), w.get(), z.get()
        else:
            idx, width, snr = (h[edges[k] : edges[k + 1]] for h in host)
        order = np.argsort(idx, kind="stable")  # atomics append in any order
        out.append((idx[order], width[order], snr[order]))
    return out


class _Workspace:
    """What :func:`run_rounds` launches into for one plan, original length ``n`` and series size:
    every round's hit list (one allocation per field) and count, their offsets and capacities on the
    device (``room``), the rounds' constants, and the series the launches write (each round's next
    series, or each group's)."""

    def __init__(self, rounds, n: int, size: int, fused: bool):
        import cupy

        self.key = (tuple(rounds), n, size, fused)
        self.rounds = tuple(rounds)
        self.caps = [capacity(-(-n // r.decimation)) for r in rounds]
        self.at = np.concatenate([[0], np.cumsum(self.caps)]).astype(np.int64)
        self.n_out = [-(-n // r.decimation) for r in rounds]
        self.hits = _hit_buffers(self.caps)
        self.room = cupy.asarray(np.column_stack([self.at[:-1], self.caps]).astype(np.int64).ravel())
        self.constants = _Constants(rounds)
        if fused:  # each group but the last writes the next group's series
            sizes, m = [], size
            for ks in round_groups(len(rounds)):
                m >>= len(ks)
                sizes.append(m)
            self.series = [cupy.empty(m, dtype=cupy.float32) for m in sizes[:-1]] + [None]
        else:
            n_next = [size >> k for k in range(1, len(rounds))] + [0]  # the last round writes none
            self.decimated = cupy.empty(int(sum(n_next)), dtype=cupy.float32)
            edges = np.concatenate([[0], np.cumsum(n_next)])
            self.series = [self.decimated[edges[k] : edges[k + 1]] for k in range(len(rounds))]

    def zero_counts(self) -> None:
        import cupy

        counts = self.hits[0]
        cupy.cuda.runtime.memsetAsync(counts.data.ptr, 0, counts.nbytes, cupy.cuda.get_current_stream().ptr)


_THREAD = threading.local()


def workspace(rounds, n: int, size: int, fused: bool) -> _Workspace:
    """The calling thread's workspace for this plan and length, made anew when they change.  Reusing
    it is safe: :func:`run_rounds` synchronises before it returns, so nothing queued still reads it,
    and each thread (e.g. a worker's two chunk tasks) has its own.  It saves ~0.1 ms of allocations
    and uploads per series."""
    ws = getattr(_THREAD, "workspace", None)
    if ws is None or ws.key != (tuple(rounds), n, size, fused):
        _THREAD.workspace = None  # free the old one first
        ws = _THREAD.workspace = _Workspace(rounds, n, size, fused)
    return ws


class _RoundLaunches:
    """One launch per round, queued; :meth:`rerun` runs round ``k`` alone into other hit buffers."""

    def __init__(self, ws: _Workspace, series, valid, round_consts, threshold, energy):
        counts, starts, widths, snrs = ws.hits
        self.inputs = []
        self.ws = ws
        for k, rnd in enumerate(ws.rounds):
            host = to_host(round_consts(k, series)).astype(np.float32)
            block = block_length(energy, rnd.first_width, rnd.last_width, host)
            args = (series, valid, rnd.decimation, rnd.first_width, rnd.last_width, ws.constants.upload(k, host),
                    threshold, energy, ws.n_out[k])
            lo, hi = ws.at[k], ws.at[k + 1]
            _launch(*args, counts[k : k + 1], starts[lo:hi], widths[lo:hi], snrs[lo:hi], ws.series[k], block)
            self.inputs.append((args, block))
            series = ws.series[k]

    def rerun(self, k: int, count, starts, widths, snrs) -> None:
        args, block = self.inputs[k]
        _launch(*args, count, starts, widths, snrs, self.ws.series[k][:0], block)


class _GroupLaunches:
    """The fused kernel, ``GROUP_ROUNDS`` rounds per launch (the energy series, with constants that
    need no series), queued; :meth:`rerun` runs round ``k`` alone by the per-round kernel on its own
    series (the group's input decimated by the twin's pairwise sums)."""

    def __init__(self, ws: _Workspace, series, valid, round_consts, threshold, energy):
        import cupy

        counts, starts, widths, snrs = ws.hits
        rounds = ws.rounds
        if series.data.ptr % 16:  # the kernel reads 16-byte vectors
            series = series.copy()
        self.ws, self.valid, self.threshold = ws, valid, threshold
        hosts = [to_host(round_consts(k, None)).astype(np.float32) for k in range(len(rounds))]
        self.blocks = [block_length(True, r.first_width, r.last_width, h) for r, h in zip(rounds, hosts)]
        ws.constants.upload_all(hosts)
        self.inputs = []
        n = ws.n_out[0]  # round 0 is undecimated
        for g, ks in enumerate(round_groups(len(rounds))):
            k0, k1 = ks.start, ks.stop
            spec = tuple((rounds[k].first_width, rounds[k].last_width, self.blocks[k]) for k in ks)
            grid = max(1, -(-series.size // GROUP_TILE))
            _group_kernel(spec)((grid,), (GROUP_THREADS,), (
                series, cupy.int64(series.size), cupy.int64(n), cupy.int32(k0), valid, ws.constants.rounds(k0, k1),
                cupy.float32(threshold), ws.series[g], counts[k0:k1], ws.room[2 * k0 : 2 * k1], starts, widths, snrs))
            self.inputs.append((series, k0))
            series = ws.series[g]

    def rerun(self, k: int, count, starts, widths, snrs) -> None:
        y, k0 = next((y, k0) for y, k0 in self.inputs if k0 <= k < k0 + GROUP_ROUNDS)
        for _ in range(k - k0):
            half = y.size // 2
            y = y[0 : 2 * half : 2] + y[1 : 2 * half : 2]
        rnd = self.ws.rounds[k]
        _launch(y, self.valid, rnd.decimation, rnd.first_width, rnd.last_width, self.ws.constants.rounds(k, k + 1),
                self.threshold, True, self.ws.n_out[k], count, starts, widths, snrs, y[:0], self.blocks[k])


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
