"""CUDA maximum of the coherent SNR² over the sky: ``coherent_max<D>`` (seed 000 §III).

What it computes (the contract of :mod:`gwbatch.coherent.statistic`).  For every candidate ``c``
(``slot[c]``, its pivot detector and peak sample ``sample[c]``) and time-shifted trial ``k = 0..K``,
the maximum over the sky table's directions of ``rho_c^2``, the energy of the ``D <= 4`` detectors'
samples ``Z`` in the span of the direction's antenna patterns (SNR² units), and the direction that
reaches it (on exact ties the first in the table's evaluation order).  Detector ``j`` is read at
the pivot's sample plus the direction's arrival offset plus ``k step (j - pivot)``, wrapped into the
valid window ``[lo, lo + span)``; a candidate's column ``k`` may stand for trial ``first[c] + k``
(the deep trials, evaluated alone).  Inputs: ``snr`` (complex64, ``(D, S, N)``: detector, slot,
sample), ``slot``, ``sample`` and ``first`` (int64, ``(C,)``), the table's device layout (:func:`device_table`)
and the launch layout (:func:`launch_plan`: the candidates grouped by pivot, blocks of 32 tasks).
Outputs: ``out_rc`` (float32, ``(C, K+1)``, ``rho_c^2``) and ``out_pix`` (int32, ``(C, K+1)``, the
direction's index in the table).  Arithmetic is float32.

CPU twin: :func:`gwbatch.coherent.statistic._max_over_sky` (numba, float64; the same evaluation order).

Mapping.  One block per 32 (candidate, trial) tasks of one pivot detector, ``32 WARPS`` threads:
every warp holds the block's 32 tasks, one per lane, and the warps split the directions.  All
trials of a candidate read the same pivot sample, and each non-pivot detector ``j`` only within a
window of ``W_j`` samples (the spread of its arrival offset over the sky, at most twice the light
travel time to the pivot) that starts ``k step (j - pivot)`` later for trial ``k``.  The block first
copies these windows into shared memory, lane-fastest, so that the sky loop reads them without bank
conflicts: warps take (detector, task) windows in turn, lanes the samples (coalesced), and every
copy is issued before any is waited on (``cp.async``, no trip through registers).  ``|n . Z|^2`` and
``|Z|^2`` do not change when every sample of a task is turned by one phase, so each lane's windows
are then turned by the conjugate phase of its pivot sample: that sample becomes real, which saves a
multiply-add per direction and projection row.

Sky loop. Directions come in the groups of :class:`~gwbatch.coherent.network.DirectionGroups`:
directions that share every detector's sample offset, at most ``GROUP_MAX`` to a group, groups of
one size together. Each pivot's groups are one stream of records (the key, then the projections of
the group's directions, packed: three floats a direction for three detectors; :func:`device_table`).
Each warp takes a contiguous share of every group size and stages it in tiles in its own part of
shared memory (coalesced loads; the next tile waits in registers while this one is evaluated; no
block-wide barrier in the loop). Per group a lane reads its non-pivot samples once (one 8-byte
shared load per detector at the byte offset the key gives, the same for every lane) and forms
``|Z|^2``; per direction it reads the projection by broadcast and forms the null or signal-space
energy. A template instance per group size unrolls the directions of a group. A lane keeps the
running maximum and the evaluation position of the first group that reached it; the direction inside
that group is found at the end by evaluating the group once more. Warps are combined through shared
memory (the earliest position on ties), and the position becomes the direction through ``order``.

The compile-time constants (warps per block, resident blocks, tiles, records in flight) are a
launch profile of :data:`PROFILES`, chosen per call by :func:`profile_for`.
"""

from __future__ import annotations

import functools

import numpy as np

from gwbatch.coherent.network import GROUP_MAX

SOURCE = r"""
template <int D> struct Layout {
    static constexpr int GEO = D == 3 ? 3 : (D >= 4 ? 2 * D + 3 : 0);  // projection floats per direction
    static constexpr int KEY = D <= 2 ? 1 : (D == 3 ? 2 : 4);         // ints per group key
    // floats per direction in a record: packed for three detectors, whole float4s beyond
    static constexpr int DIR = D == 3 ? 3 : (GEO + 3) / 4 * 4;
    template <int K> static constexpr int REC = (KEY + K * DIR + 3) / 4;  // float4s per record of K directions
    // record float4s in flight per warp: half as many for four detectors (12 floats a direction)
    static constexpr int UNROLL = D >= 4 ? UNROLL_RECORDS / 2 : UNROLL_RECORDS;
};

// The block's windows (dynamic) and its warps' tiles of group records, in shared memory.  Declared
// here, not passed as pointers, so that every access is known to be a shared one (32-bit addresses).
extern __shared__ float2 win[];
__shared__ float4 tile[WARPS * WARP_TILE];

// A group record in a warp's tile (in ``tile``) or in global memory, read a float4 at a time.
struct TileRecord {
    const float4* at;
    __device__ __forceinline__ float4 operator[](const int i) const { return at[i]; }
};
struct GlobalRecord {
    const float4* at;
    __device__ __forceinline__ float4 operator[](const int i) const { return __ldg(at + i); }
};

// Float i of a record (i known at compile time once unrolled; a float4 read twice is read once).
template <typename Record>
__device__ __forceinline__ float record_float(const Record& rec, const int i)
{
    const float4 v = rec[i / 4];
    return (i & 3) == 0 ? v.x : ((i & 3) == 1 ? v.y : ((i & 3) == 2 ? v.z : v.w));
}

// One sample from global to shared memory without a trip through registers (cp.async, sm_80 on):
// the block issues all its window loads before waiting on any.
__device__ __forceinline__ void copy_async(float2* to, const float2* from)
{
    const unsigned to_shared = (unsigned)__cvta_generic_to_shared(to);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" :: "r"(to_shared), "l"(from) : "memory");
}

// What a lane's sky loop reads: the pivot's group records (global), where its warp's tile of them
// starts in ``tile``, its column of the windows, and the pivot's sample.  A group's record is its key
// (KEY ints) and the projections of its K directions (DIR floats each), in Layout::REC<K> float4s;
// records follow the evaluation order, groups of one size together.
struct Sky {
    const float4* records;
    const int* size;  // (g0, g1, q0, r0) per group size: groups, first position, first record
    int tile_at;      // the warp's tile: tile[tile_at ..]
    int lane_win;     // the lane's column of ``win`` in bytes: a group key is each detector's byte offset from here
    float zp, pivot_energy;  // the pivot's sample, real after the rotation, and |Z_pivot|^2
};

// rho_c^2 of Z (zr, zi; total = |Z|^2) in a direction with projection w (statistic._coherent_energy),
// the pivot's sample real (zi[PIV] is never read).
template <int D, int PIV>
__device__ __forceinline__ float coherent_energy(const float* w, const float* zr, const float* zi, const float total)
{
    if (D <= 2) return total;
    constexpr int J0 = PIV == 0 ? 1 : 0;  // the first detector with an imaginary part
    float ar = w[PIV] * zr[PIV], ai = w[J0] * zi[J0], br = 0.0f, bi = 0.0f;
    if (D >= 4) { br = w[D + PIV] * zr[PIV]; bi = w[D + J0] * zi[J0]; }
#pragma unroll
    for (int j = 0; j < D; ++j) {
        if (j == PIV) continue;
        ar = fmaf(w[j], zr[j], ar);
        if (D >= 4) br = fmaf(w[D + j], zr[j], br);
        if (j == J0) continue;
        ai = fmaf(w[j], zi[j], ai);
        if (D >= 4) bi = fmaf(w[D + j], zi[j], bi);
    }
    if (D == 3) return fmaf(-ai, ai, fmaf(-ar, ar, total));
    return w[2 * D] * fmaf(ar, ar, ai * ai) + 2.0f * w[2 * D + 1] * fmaf(ar, br, ai * bi) + w[2 * D + 2] * fmaf(br, br, bi * bi);
}

// rho_c^2 in the K directions of the group with record ``rec`` (TileRecord or GlobalRecord), handed to
// ``visit(d, value)`` in order.
template <int D, int PIV, int K, typename Record, typename Visit>
__device__ __forceinline__ void group_energies(const Sky& sky, const Record rec, Visit visit)
{
    constexpr int GEO = Layout<D>::GEO, DIR = Layout<D>::DIR;
    constexpr int KEY = Layout<D>::KEY;
    // packed projections are read at indices known at compile time (every direction unrolled); whole
    // float4s may be read a few directions at a time (registers)
    constexpr int DIR_UNROLL = DIR % 4 != 0 || K * DIR <= 8 * Layout<D>::UNROLL ? K : 2;
    int key[KEY];
#pragma unroll
    for (int m = 0; m < KEY; ++m) key[m] = __float_as_int(record_float(rec, m));
    float zr[D], zi[D];
    float total = sky.pivot_energy;
#pragma unroll
    for (int j = 0; j < D; ++j) {
        if (j == PIV) { zr[j] = sky.zp; zi[j] = 0.0f; continue; }
        const float2 v = *(const float2*)((const char*)win + sky.lane_win + key[j - (j > PIV ? 1 : 0)]);
        zr[j] = v.x; zi[j] = v.y;
        total = fmaf(v.x, v.x, fmaf(v.y, v.y, total));
    }
#pragma unroll DIR_UNROLL
    for (int d = 0; d < K; ++d) {
        float w[DIR > 0 ? DIR : 1];
        if constexpr (DIR % 4 == 0) {
#pragma unroll
            for (int m = 0; m < DIR / 4; ++m) {
                const float4 v = rec[(KEY + 3) / 4 + d * (DIR / 4) + m];
                w[4 * m] = v.x; w[4 * m + 1] = v.y; w[4 * m + 2] = v.z; w[4 * m + 3] = v.w;
            }
        } else {
#pragma unroll
            for (int m = 0; m < GEO; ++m) w[m] = record_float(rec, KEY + d * DIR + m);
        }
        visit(d, coherent_energy<D, PIV>(w, zr, zi, total));
    }
}

// The groups of K directions g0 .. g1 - 1 (from evaluation position q0): each warp takes a
// contiguous share of their records and stages it tile by tile in its own part of shared memory
// (coalesced loads; the next tile waits in registers while this one is evaluated; no block-wide
// barrier), keeping the running maximum of rho_c^2 and the position of the first group that reached it.
template <int D, int PIV, int K>
__device__ __forceinline__ void groups_of(const Sky& sky, const int g0, const int g1, const int q0, const int r0,
                                          float& best, int& best_q)
{
    constexpr int REC = Layout<D>::template REC<K>;        // float4s per group record
    constexpr int PER_TILE = WARP_TILE / REC;      // groups per tile
    constexpr int PF = (PER_TILE * REC + 31) / 32;  // float4s per lane and tile
    // several groups in flight where registers allow
    constexpr int GROUP_UNROLL = Layout<D>::UNROLL / REC >= 4 ? 4 : (Layout<D>::UNROLL / REC >= 2 ? 2 : 1);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int share = (g1 - g0 + WARPS - 1) / WARPS;
    const int w0 = min(g1, g0 + warp * share), w1 = min(g1, w0 + share);
    const float4* const first = sky.records + r0 + (long long)(w0 - g0) * REC;
    const int total = (w1 - w0) * REC;  // float4s of the warp's share
    // whole tiles are read and stored: the record stream is padded, the tile is the warp's own
    float4 next[PF];
    auto fetch = [&](const int e0) {
#pragma unroll
        for (int u = 0; u < PF; ++u) next[u] = __ldg(first + e0 + lane + 32 * u);
    };
    if (total > 0) fetch(0);
    for (int e0 = 0; e0 < total; e0 += PER_TILE * REC) {
        __syncwarp();  // the previous tile is consumed
#pragma unroll
        for (int u = 0; u < PF; ++u) tile[sky.tile_at + lane + 32 * u] = next[u];
        __syncwarp();
        if (e0 + PER_TILE * REC < total) fetch(e0 + PER_TILE * REC);
        // the tile's groups, counted by their first direction's position
        const int q_first = q0 + (w0 - g0 + e0 / REC) * K;
        const int q_end = q_first + min(PER_TILE * REC, total - e0) / REC * K;
        TileRecord rec{&tile[sky.tile_at]};
#pragma unroll GROUP_UNROLL
        for (int q = q_first; q < q_end; q += K, rec.at += REC) {
            float top;
            group_energies<D, PIV, K>(sky, rec, [&](int d, float coh) { top = d == 0 ? coh : fmaxf(top, coh); });
            if (top > best) { best = top; best_q = q; }
        }
    }
}

// Every group size, K = 1 .. GROUP_MAX, in evaluation order.
template <int D, int PIV, int K> struct AllSizes {
    static __device__ __forceinline__ void run(const Sky& sky, float& best, int& best_q) {
        AllSizes<D, PIV, K - 1>::run(sky, best, best_q);
        const int* const s = sky.size + 4 * (K - 1);
        groups_of<D, PIV, K>(sky, s[0], s[1], s[2], s[3], best, best_q);
    }
};
template <int D, int PIV> struct AllSizes<D, PIV, 0> {
    static __device__ __forceinline__ void run(const Sky&, float&, int&) {}
};

// The position of the first direction of the group at position q (of size K or less) whose rho_c^2 is
// ``best``: the group's energies again, in the same arithmetic, so the maximum is found bit for bit.
template <int D, int PIV, int K> struct FirstOf {
    static __device__ __noinline__ int run(const Sky& sky, const int q, const float best) {
        const int* const s = sky.size + 4 * (K - 1);
        const int g0 = s[0], g1 = s[1], q0 = s[2], r0 = s[3];
        if (q < q0 || q >= q0 + (g1 - g0) * K) return FirstOf<D, PIV, K - 1>::run(sky, q, best);
        int first = -1;
        group_energies<D, PIV, K>(sky, GlobalRecord{sky.records + r0 + (q - q0) / K * Layout<D>::template REC<K>},
                                  [&](int d, float coh) { if (first < 0 && coh == best) first = d; });
        return q + max(first, 0);
    }
};
template <int D, int PIV> struct FirstOf<D, PIV, 0> {
    static __device__ __forceinline__ int run(const Sky&, const int q, const float) { return q; }
};

// The sky loop of one block: 32 (candidate, trial) tasks with pivot PIV, one per lane.
template <int D, int PIV>
__device__ __forceinline__ void sky_block(
    long long (*row_start)[32], long long (*series)[32], float (*red_v)[32], int (*red_p)[32],
    const float2* __restrict__ snr, const long long n, const int n_slot, const int* __restrict__ cand,
    const long long* __restrict__ slot, const long long* __restrict__ sample, const long long* __restrict__ first_trial,
    const float4* __restrict__ records, const long long n_records, const int* __restrict__ size,
    const int* __restrict__ order, const int* __restrict__ win_start, const int* __restrict__ row_base,
    const int n_dir, const int n_trials1, const long long step, const long long lo,
    const long long span, const long long first, const long long n_tasks, float* __restrict__ out_rc,
    int* __restrict__ out_pix)
{
    int rb[D + 1];
#pragma unroll
    for (int j = 0; j <= D; ++j) rb[j] = row_base[PIV * (D + 1) + j];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const long long task = min(first + lane, n_tasks - 1);  // idle lanes repeat the last task
    const int c = cand[task / n_trials1];
    const long long k = task % n_trials1;
    const long long shift = (k + first_trial[c]) * step;  // trial k of candidate c is trial first_trial[c] + k
    const int s = (int)slot[c];
    const long long t = sample[c];

    // 1. where each (detector, lane) window starts, wrapped into [lo, lo + span), and its series
    if (warp == 0) {
#pragma unroll
        for (int j = 0; j < D; ++j) {
            const long long i = (t - lo + win_start[PIV * D + j] + shift * (long long)(j - PIV)) % span;
            row_start[j][lane] = lo + (i < 0 ? i + span : i);
            series[j][lane] = ((long long)j * n_slot + s) * n;
        }
    }
    __syncthreads();
    // 2. the windows, lane-fastest in shared memory: warps take (detector, task) windows in turn,
    // lanes the window's samples (coalesced reads)
#pragma unroll
    for (int j = 0; j < D; ++j) {
        if (j == PIV) continue;
        const int width = rb[j + 1] - rb[j];
        for (int kk = warp; kk < 32; kk += WARPS) {
            const float2* const from = snr + series[j][kk];
            const long long i0 = row_start[j][kk];
            float2* const to = win + rb[j] * STRIDE + kk;
            for (int r = lane; r < width; r += 32) {
                const long long i = i0 + r;
                copy_async(to + r * STRIDE, from + (i >= lo + span ? i - span : i));
            }
        }
    }
    const long long tp = (t - lo) % span;
    const float2 zp = snr[((long long)PIV * n_slot + s) * n + lo + (tp < 0 ? tp + span : tp)];
    const float pivot_energy = fmaf(zp.x, zp.x, zp.y * zp.y);
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    __syncthreads();
    // 3. each lane's windows turned by the conjugate phase of its pivot sample, which makes that
    // sample real (|n . Z| and |Z| do not change): one multiply-add less per direction and row of
    // the projection
    const float mag = sqrtf(pivot_energy);
    const float c_ = mag > 0.0f ? zp.x / mag : 1.0f, s_ = mag > 0.0f ? zp.y / mag : 0.0f;
    for (int r = warp; r < rb[D]; r += WARPS) {
        float2* const z = win + r * STRIDE + lane;
        const float2 v = *z;
        *z = make_float2(fmaf(v.x, c_, v.y * s_), fmaf(v.y, c_, -v.x * s_));
    }
    __syncthreads();

    // 4. the sky loop over the pivot's groups
    const Sky sky{records + PIV * n_records, size + PIV * 4 * GROUP_MAX, warp * WARP_TILE, 8 * lane, mag, pivot_energy};
    float best = -1.0f;
    int best_q = 0;
    AllSizes<D, PIV, GROUP_MAX>::run(sky, best, best_q);
    best_q = FirstOf<D, PIV, GROUP_MAX>::run(sky, best_q, best);

    red_v[warp][lane] = best;
    red_p[warp][lane] = best_q;
    __syncthreads();
    if (warp == 0 && first + lane < n_tasks) {
        float v = red_v[0][lane];
        int qq = red_p[0][lane];
        for (int u = 1; u < WARPS; ++u) {
            const float x = red_v[u][lane];
            const int q = red_p[u][lane];
            if (x > v || (x == v && q < qq)) { v = x; qq = q; }
        }
        const long long out = (long long)c * n_trials1 + k;
        out_rc[out] = v;
        out_pix[out] = order[(long long)PIV * n_dir + qq];
    }
}

// One launch for all pivots: block b runs tasks [block_first[b], block_first[b] + 32) of its pivot's
// flattened (candidate, trial) list (cand holds each pivot's candidates, concatenated).
template <int D>
__global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)
coherent_max(const float2* __restrict__ snr, const long long n, const int n_slot,
             const int* __restrict__ block_pivot, const long long* __restrict__ block_first,
             const long long* __restrict__ pivot_tasks, const int* __restrict__ cand,
             const long long* __restrict__ slot, const long long* __restrict__ sample,
             const long long* __restrict__ first_trial, const float4* __restrict__ records, const long long n_records, const int* __restrict__ size,
             const int* __restrict__ order, const int* __restrict__ win_start, const int* __restrict__ row_base,
             const int n_dir, const int n_trials1, const long long step,
             const long long lo, const long long span, float* __restrict__ out_rc, int* __restrict__ out_pix)
{
    __shared__ long long row_start[D][32];
    __shared__ long long series[D][32];
    __shared__ float red_v[WARPS][32];
    __shared__ int red_p[WARPS][32];
    const int piv = block_pivot[blockIdx.x];
    const long long first = block_first[blockIdx.x];
    // pivot_tasks[piv]: where the pivot's candidates start in cand (as tasks), and its task count
    const long long offset = pivot_tasks[2 * piv], n_tasks = pivot_tasks[2 * piv + 1];
    const int* cand_p = cand + offset / n_trials1;
#define SKY_CASE(P) case P: if (P < D) sky_block<D, (P < D ? P : 0)>(row_start, series, red_v, red_p, snr, n, \
        n_slot, cand_p, slot, sample, first_trial, records, n_records, size, order, win_start, row_base, n_dir, n_trials1, \
        step, lo, span, first, n_tasks, out_rc, out_pix); break;
    switch (piv) { SKY_CASE(0) SKY_CASE(1) SKY_CASE(2) SKY_CASE(3) }
#undef SKY_CASE
}
"""

STRIDE = 33  # shared-memory row length in float2: 32 lanes plus one against bank conflicts
SHARED_LIMIT = 200 * 1024  # dynamic shared memory a block may ask for (H100/H200 allow 227 KB in all)
MAX_DETECTORS = 4
INSTANTIATIONS = tuple(range(1, MAX_DETECTORS + 1))
#: Compile-time overrides of the profile's constants (benchmarks/coherent_kernel.py --define times
#: variants; PROFILE=name forces a profile).
DEFINES: dict = {}
#: Launch profiles: warps per block (they share the block's 32 tasks' windows and split the
#: directions), the resident blocks per SM the compiler must allow (registers <= 65536 / (32 WARPS
#: MIN_BLOCKS)), each warp's tile of group records in shared memory (float4s; 8 KB a block either
#: way) and the record float4s in flight per warp (groups of K directions run UNROLL_RECORDS /
#: record_float4s(D, K) at a time, 1 to 4; half that for four detectors; the most that compiles
#: without register spills).  Narrow while three blocks' windows fit in an SM's shared memory, wide
#: beyond (4096 Hz).
PROFILES = {
    "narrow": {"WARPS": 8, "MIN_BLOCKS": 3, "WARP_TILE": 64, "UNROLL_RECORDS": 8},
    "wide": {"WARPS": 16, "MIN_BLOCKS": 2, "WARP_TILE": 32, "UNROLL_RECORDS": 8},
}
RECORD_PAD = 128  # float4s after each pivot's record stream: warps read whole tiles of up to this many
SM_SHARED = 228 * 1024  # shared memory of an H100/H200 SM
STATIC_SHARED = 15 * 1024  # the kernel's own shared arrays (tiles, reductions) and the driver's, at most


def profile_for(shared: int) -> str:
    """The launch profile for windows of ``shared`` bytes per block (see ``PROFILES``); a
    ``PROFILE`` entry in ``DEFINES`` overrides."""
    if "PROFILE" in DEFINES:
        return DEFINES["PROFILE"]
    return "narrow" if 3 * (shared + STATIC_SHARED) <= SM_SHARED else "wide"


def constants(profile: str) -> dict:
    """The compile-time constants of ``profile``, with ``DEFINES`` applied."""
    overrides = {k: v for k, v in DEFINES.items() if k != "PROFILE"}
    out = {"GROUP_MAX": GROUP_MAX, "STRIDE": STRIDE} | PROFILES[profile] | overrides
    if not 32 <= out["WARP_TILE"] <= RECORD_PAD or out["WARP_TILE"] % 32:
        raise ValueError(f"WARP_TILE={out['WARP_TILE']}: a multiple of 32 from 32 to {RECORD_PAD} is allowed")
    return out


def source(profile: str = "narrow") -> str:
    """The kernel source with the compile-time constants of ``profile``."""
    return "".join(f"#define {k} {v}\n" for k, v in constants(profile).items()) + SOURCE


def kernel_name(n_det: int) -> str:
    return f"coherent_max<{n_det}>"


#: The kernels every compile instantiates: one per detector count.
NAME_EXPRESSIONS = tuple(kernel_name(d) for d in INSTANTIATIONS)
#: NVRTC options of every compile (the compile test passes them to nvcc as well).
OPTIONS = ("-std=c++17",)


def key_ints(n_det: int) -> int:
    """Ints of a group key: the byte offsets of the ``n_det - 1`` other detectors, padded to 1, 2 or 4."""
    return 1 if n_det <= 2 else (2 if n_det == 3 else 4)


def geometry_floats(n_det: int) -> int:
    """Projection floats per direction (``SkyTable.projection``'s columns)."""
    return 3 if n_det == 3 else (2 * n_det + 3 if n_det >= 4 else 0)


def direction_floats(n_det: int) -> int:
    """Floats per direction in a group record: the projection, packed for three detectors, padded to
    whole float4s beyond (so that the kernel may read a few directions at a time)."""
    geo = geometry_floats(n_det)
    return geo if n_det == 3 else -(-geo // 4) * 4


def record_float4s(n_det: int, k: int) -> int:
    """Float4s of the record of a group of ``k`` directions: its key, then the ``k`` projections."""
    return -(-(key_ints(n_det) + k * direction_floats(n_det)) // 4)


@functools.cache
def _module(profile: str):
    import cupy

    return cupy.RawModule(code=source(profile), options=OPTIONS, name_expressions=NAME_EXPRESSIONS)


def compile_cases() -> list[tuple[str, str, tuple[str, ...]]]:
    """What tests/test_cuda_compile.py compiles with nvcc, as :func:`_module` compiles it, one case
    per launch profile: ``(label, source, name expressions)``."""
    return [(f"coherent_max {profile}", source(profile), NAME_EXPRESSIONS) for profile in PROFILES]


def device_table(table) -> dict:
    """Host-side layout of a sky table for the kernel: per pivot, each detector's window start
    (``start``, ``(D, D)``), shared-memory rows (``row_base``, ``(D, D+1)``, prefix sums of the
    window widths, the pivot's own width 0), the record stream of its direction groups
    (:attr:`~gwbatch.coherent.network.SkyTable.groups`; ``records``, ``(D, R, 4)`` float32: per group
    its key, ``key_ints(D)`` int32 words holding each non-pivot detector's byte offset from a lane's
    column of the windows, then its directions' projections in evaluation order,
    ``direction_floats(D)`` each, in ``record_float4s(D, k)`` float4s), the bounds of each group
    size (``size``, ``(D, GROUP_MAX, 4)``: first and end group, first direction position, first
    record) and the order itself (``order``)."""
    offsets, groups = table.offsets, table.groups
    n_det, n_dir, _ = offsets.shape
    if n_det > MAX_DETECTORS:
        raise ValueError(f"the CUDA kernel handles up to {MAX_DETECTORS} detectors, not {n_det}")
    start = offsets.min(axis=1).astype(np.int32)  # (pivot, j)
    width = (offsets.max(axis=1) - start + 1).astype(np.int32)
    width[np.arange(n_det), np.arange(n_det)] = 0
    row_base = np.zeros((n_det, n_det + 1), np.int32)
    row_base[:, 1:] = np.cumsum(width, axis=1)
    n_key, n_dir_floats = key_ints(n_det), direction_floats(n_det)
    counts = groups.size[:, :, 1] - groups.size[:, :, 0]  # (pivot, k - 1)
    rec = np.array([record_float4s(n_det, k) for k in range(1, GROUP_MAX + 1)])
    first_record = np.zeros_like(counts)
    first_record[:, 1:] = np.cumsum(counts * rec, axis=1)[:, :-1]
    size = np.concatenate([groups.size, first_record[:, :, None]], axis=2).astype(np.int32)
    records = np.zeros((n_det, int((counts * rec).sum(axis=1).max()) + RECORD_PAD, 4), np.float32)
    for piv in range(n_det):
        others = [j for j in range(n_det) if j != piv]
        keys = (groups.offsets[piv][:, others] - start[piv, others] + row_base[piv, others]) * STRIDE * 8
        proj = np.zeros((n_dir, n_dir_floats), np.float32)
        proj[:, :table.projection.shape[1]] = table.projection[groups.order[piv]]
        for k, (g0, g1, q0, r0) in enumerate(size[piv], start=1):
            if g1 == g0:
                continue
            flat = records[piv, r0:r0 + (g1 - g0) * rec[k - 1]].reshape(g1 - g0, 4 * rec[k - 1])
            flat[:, :n_key].view(np.int32)[:, :n_det - 1] = keys[g0:g1]
            flat[:, n_key:n_key + k * n_dir_floats] = proj[q0:q0 + (g1 - g0) * k].reshape(g1 - g0, k * n_dir_floats)
    return dict(start=start, row_base=row_base, records=records, size=size, order=groups.order.astype(np.int32))


def launch_plan(pivot: np.ndarray, n_det: int, n_trials: int, rows: np.ndarray) -> dict:
    """Host-side launch layout (uploaded once per call): candidates grouped by pivot, each pivot's
    (candidate, trial) tasks in blocks of 32, the shared memory a block needs and the launch profile.  ``pivot`` is the
    host array of candidate pivots, ``rows`` the shared-memory rows per pivot."""
    import cupy

    pivot = np.asarray(pivot, dtype=np.int64)
    n_trials1 = n_trials + 1
    order = np.argsort(pivot, kind="stable").astype(np.int32)
    counts = np.bincount(pivot, minlength=n_det)
    task_offset = np.concatenate([[0], np.cumsum(counts)])[:-1] * n_trials1
    pivot_tasks = np.column_stack([task_offset, counts * n_trials1]).astype(np.int64)
    n_blocks = -(-counts * n_trials1 // 32)
    block_pivot = np.repeat(np.arange(n_det, dtype=np.int32), n_blocks)
    block_first = (np.arange(int(n_blocks.sum())) - np.repeat(np.cumsum(n_blocks) - n_blocks, n_blocks)) * 32
    shared = int(rows[np.unique(pivot)].max()) * STRIDE * 8 if pivot.size else 0
    if shared > SHARED_LIMIT:
        raise ValueError(f"the arrival windows need {shared} bytes of shared memory per block, more than "
                         f"{SHARED_LIMIT}: lower the sample rate of the SNR series")
    return dict(blocks=int(block_pivot.size), shared=shared, profile=profile_for(shared), order=cupy.asarray(order),
                pivot_tasks=cupy.asarray(pivot_tasks), block_pivot=cupy.asarray(block_pivot),
                block_first=cupy.asarray(block_first.astype(np.int64)))


def device_sky_table(table) -> dict:
    """The kernel's layout of ``table`` on the device, made once per table."""
    import cupy

    if "cuda-kernel" not in table.device:
        host = device_table(table)
        table.device["cuda-kernel"] = {k: cupy.asarray(v) for k, v in host.items()} | {"rows": host["row_base"][:, -1]}
    return table.device["cuda-kernel"]


def launch(snr, slot, sample, table, plan: dict, n_trials, step, lo, span, rho_c2, pixel, first=None) -> None:
    """The kernel alone, on a prepared :func:`launch_plan`, writing ``rho_c2`` and ``pixel``;
    ``first`` (int64 per candidate, default 0): the trial its column 0 is."""
    import cupy

    if first is None:
        first = cupy.zeros(slot.size, cupy.int64)

    n_det, n_slot, n = snr.shape
    dev = device_sky_table(table)
    kernel = _module(plan["profile"]).get_function(kernel_name(n_det))
    if plan["shared"] > 48 * 1024:  # beyond the default 48 KB a kernel opts in (cuFuncSetAttribute)
        kernel.max_dynamic_shared_size_bytes = plan["shared"]
    kernel((plan["blocks"],), (32 * constants(plan["profile"])["WARPS"],), (
        snr, cupy.int64(n), cupy.int32(n_slot), plan["block_pivot"], plan["block_first"], plan["pivot_tasks"],
        plan["order"], slot, sample, first, dev["records"], cupy.int64(dev["records"].shape[1]), dev["size"], dev["order"],
        dev["start"], dev["row_base"], cupy.int32(table.n_dir), cupy.int32(n_trials + 1),
        cupy.int64(step), cupy.int64(lo), cupy.int64(span), rho_c2, pixel),
        shared_mem=plan["shared"])


def max_over_sky_cuda(snr, slot, sample, pivot, table, n_trials, step, lo, span, pivot_host=None, first=None):
    """CuPy twin of ``statistic._max_over_sky``: ``(rho_c2, pixel)``, each ``(C, K+1)``, column ``k``
    of candidate ``c`` trial ``first[c] + k`` (``first`` int64, default 0).
    ``pivot_host``: the pivots on the host, when the caller has them (saves a copy back)."""
    import cupy

    rho_c2 = cupy.empty((slot.size, n_trials + 1), dtype=cupy.float32)
    pixel = cupy.empty((slot.size, n_trials + 1), dtype=cupy.int32)
    if slot.size == 0:
        return rho_c2, pixel
    pivots = cupy.asnumpy(pivot) if pivot_host is None else pivot_host
    plan = launch_plan(pivots, snr.shape[0], n_trials, device_sky_table(table)["rows"])
    launch(snr, slot, sample, table, plan, n_trials, step, lo, span, rho_c2, pixel, first)
    return rho_c2, pixel
