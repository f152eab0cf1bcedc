"""The fused boxcar kernel ``boxcar_group``: up to ``GROUP_ROUNDS`` rounds of the energy series per
launch, from one pass over the first one's series.

What it computes.  Rounds ``r0 .. r0 + R - 1`` of a plan (``R <= GROUP_ROUNDS``), each exactly as
the per-round kernel (:mod:`gwbatch.pulse._cuda`) and the twin compute it, from round ``r0``'s
series ``y`` (float32, ``n_in`` samples; "level 0").  The block builds the later rounds' series
(levels 1..R: the same pairwise sums as the twin's, bit for bit, zero at and beyond each level's
length ``n_in >> q``) and their prefix sums in shared memory, tests every round's starts in blocks
of widths as the per-round kernel does (``R_BLOCK[q]`` widths per test, from
:func:`gwbatch.pulse._cuda.block_length`), and gives the starts that may pass the exact per-width
test and their SNRs (``best_width``).  Inputs besides ``y``: ``n_orig`` (samples of the plan's
undecimated series), ``r0``, ``valid`` (uint8, per undecimated sample), ``consts`` (float32, each
round's ``[T, p, q, r]`` one after the other, at ``CONST_AT[q]``) and ``threshold``.  Outputs: round
``q``'s hits at ``room[2 q] + slot`` for the slot its atomic counter ``count[q]`` (uint64) hands
out, up to ``room[2 q + 1]`` (then only counted): ``hit_start`` (int64, the start in round
``r0 + q``'s samples), ``hit_width`` (int32), ``hit_snr`` (float32); and ``next`` (float32, level R:
the next group's input, written for the block's starts only; null for a plan's last group).  Only
the series of the next group leave the block, ``1 / 2^R`` of its input.

Layout.  ``GROUP_THREADS`` threads a block and ``GROUP_TILE`` level-0 starts a block, plus a halo
(:func:`group_halo`): thread ``t < G_SPAN / 16`` loads level-0 samples ``[16 t, 16 t + 16)`` of the
tile (16-byte vectors) and forms their levels; the prefix sums' chunk offsets come from a
block-wide scan; round ``q``'s ``GROUP_TILE >> q`` starts are strided over the threads.  The source
is generated per group (:func:`group_source`): ``R``, the tile, its span and the rounds' widths,
blocks and constant offsets are compile-time constants.  It needs constants that do not measure
each round's series (``sigma: white``); otherwise, and for the amplitude series, the per-round
kernel runs (:func:`fused_fits` says which plans fit).

CPU twin: :func:`gwbatch.pulse.boxcar.run_rounds` (its NumPy path: round after round of
:func:`~gwbatch.pulse.boxcar.boxcar_round_numpy`, each on the pairwise sums of the one before).
"""

from __future__ import annotations

import functools

import numpy as np

from gwbatch.pulse._cuda import COMMON, OPTIONS

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

    return cupy.RawModule(code=group_source(spec), options=OPTIONS).get_function("boxcar_group")


def launch(spec: tuple[tuple[int, int, int], ...], series, n: int, r0: int, valid, consts, threshold: float, nxt,
           counts, room, starts, widths, snrs) -> None:
    """Queue one group of rounds ``spec`` (``(first, last, block)`` each) over round ``r0``'s
    ``series`` (16-byte aligned), ``n`` samples of the undecimated series: hits into ``starts``,
    ``widths``, ``snrs`` at the rounds' ``room`` (offset, capacity per round), their numbers to
    ``counts`` (one uint64 per round, zeroed), the next group's series to ``nxt`` (``None`` for the
    last group)."""
    import cupy

    grid = max(1, -(-series.size // GROUP_TILE))
    _group_kernel(spec)((grid,), (GROUP_THREADS,), (
        series, cupy.int64(series.size), cupy.int64(n), cupy.int32(r0), valid, consts,
        cupy.float32(threshold), nxt, counts, room, starts, widths, snrs))


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


#: The groups ``(first, last, block)`` the compile test builds: the suite's plan [32, 16 x 8]
#: (first group), the one-day campaign's [16, 8, 8], a group of one, unblocked tests, and 64 widths.
COMPILE_GROUPS = (((1, 32, 8), (17, 32, 8), (17, 32, 8), (17, 32, 4)), ((1, 16, 4), (9, 16, 2), (9, 16, 2)),
                  ((17, 32, 1),), ((1, 32, 1), (17, 32, 1)), ((1, 64, 1), (33, 64, 1), (33, 64, 1), (33, 64, 1)))


def compile_cases() -> list[tuple[str, str, tuple[str, ...]]]:
    """What tests/test_cuda_compile.py compiles with nvcc, as :func:`_group_kernel` compiles it:
    ``(label, source, name expressions)`` (``boxcar_group`` is ``extern "C"``: none)."""
    return [(f"boxcar_group {spec}", group_source(spec), ()) for spec in COMPILE_GROUPS]
