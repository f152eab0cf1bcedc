"""CUDA SPIIR filtering: ``spiir_pass<F, W>`` (``W`` lanes per template, ``F`` filters per lane, one
time segment), ``spiir_scan`` (the states carried across time segments) and ``decimate2`` (the
multi-rate ladder's factor-2 decimator).

What it computes (the contract of :mod:`gwbatch.spiir.filtering`).  For whitened data ``x``
(float32, ``n`` samples) and a packed bank of ``T`` templates of up to ``L`` filters (``a``, ``b``
complex64 and ``d`` int32, ``(T, L)``; unused slots have ``b = 0``), the bank's output ``z``
(complex64, ``(T, n)``) with ``y_l[k] = a_l y_l[k-1] + b_l x[k - d_l]`` (zero state and zero ``x``
before sample 0) and ``z_t[k] = sum_l y_l[k]``.  The kernel's arrays are the bank
packed per warp part (:func:`packed_bank`: ``c``, ``b``, ``g`` complex64 and ``d`` int32, ``(W, 32 F)``),
the four shifted copies of ``x`` (:func:`shifted_input`) and ``out`` (complex64, ``(W, n_pad)``, one
row per warp part; a template's parts are summed afterwards).

CPU twin: :func:`gwbatch.spiir.filtering.filter_bank_numba` (float32, the same second-order form).

Arithmetic.  Each filter ``y[k] = a y[k-1] + b x[k-d]`` runs as the real second-order recurrence
of its two poles ``a``, ``conj(a)`` (:func:`~gwbatch.spiir.filtering.coefficients`):
``s[k] = c1 s[k-1] + c2 s[k-2] + x[k-d]``, ``y[k] = b s[k] + g s[k-1]``.  An update is then 2 fused multiply-adds for the state and 4 for the
template's sum, 6 FP32 instructions against the complex recurrence's 8 (2 multiplies for ``b x``, 4
for ``a y``, 2 adds), and the state's dependency chain is one FMA per sample instead of two.  The
price is precision: rounding ``c1`` (close to 2 for slow, low-frequency poles) moves the pole by
~6e-8 / sin(arg a), so a filter's relative error grows to ~6e-8 / (sin(arg a) (1 - |a|)) against the
complex form's ~3e-8 / (1 - |a|) (whole-bank figures: benchmarks/RESULTS.md).

Layout.  A template's filters are spread over a warp, ``F`` per thread (``F`` = 1..16, a template
class), so a warp holds up to ``32 F`` filters.  Each thread keeps its filters' coefficients, input
offsets and states in registers and advances them ``NB = 16`` samples at a time, summing the ``F``
outputs per sample in registers; the warp then reduces the ``16`` per-sample sums across its 32
lanes with a transposing shuffle butterfly (8, 4, 2, 1, then 16), so the cross-filter reduction
costs about ``8 / F`` instructions per filter update instead of the ~20 of a per-sample warp
reduction.  One warp per template means no block synchronisation and no atomics; a template with
more than ``32 F`` filters gets two parts whose outputs are summed afterwards.  A bank's templates
are filtered in groups of one layout each (:func:`template_groups`), each group packed to its own
longest template, so short templates do not run the padding of the longest.

Narrow layouts (``W`` < 32: 32 / W templates per warp, :func:`pack_slots`) serve the few filters a
template has on one rung of the multi-rate ladder (:mod:`gwbatch.spiir._cuda_multirate`): the
butterfly folds over the template's ``W`` lanes only, leaving each lane ``16 / W`` consecutive
samples (a pair for ``W`` >= 16).  Slot ``s`` writes row ``rows[s]`` of the output.  Its epilogue can
add the rung below interpolated by the ladder's half-band FIR (polyphase: one even tap, 13
symmetric odd pairs, float32 constants; each lane reads its pairs' window once) and can add to what
the row holds (a template's later filter parts).  Layouts with ``W`` <= 4 hold 8 to 32 rows per warp:
they load the rung below and store their output through a shared tile, consecutive lanes on one row,
so a request touches a few whole lines instead of one line per row (the L1 tag requests that bound
them).

Input.  ``x[k - d]`` for 16 consecutive ``k`` is read as four aligned ``float4`` loads through the
read-only path (seed 000's vectorised loads) from one of four copies of ``x`` shifted by 0..3
samples, so any delay stays aligned; each filter's offset into them is computed once, and a block of
samples costs one address instruction per filter.  ``x`` is padded in front with zeros (the state
before the first sample is zero) and at the back to a multiple of 16.

Time parallelism (seed 002's fine-grained recurrence, as an associative scan on segments).  With few
templates the time axis is split into ``S`` segments: pass 1 runs every (filter, segment) from a
zero state and keeps the end state ``(s[k], s[k-1])``; a small scan kernel carries states across
segments, ``v_i = M^m v_{i-1} + e_{i-1}`` with the recurrence's companion matrix ``M`` (in float64);
pass 2 reruns each segment from its true start state
and writes the outputs.  With ``S = 1`` only pass 2 runs.
"""

from __future__ import annotations

import functools

import numpy as np

from gwbatch.spiir.filtering import coefficients

#: The transposing shuffle reduction of a block of per-sample sums over a template's lanes
#: (``fold``, ``reduce<W>``, ``first_sample<W>``), shared with :mod:`gwbatch.spiir._cuda_subbands`.
REDUCTION = r"""
#define FULL 0xffffffffu
#define NB 16

// One folding step of the transposing reduction: the lane's first 2H sums become H, each summed with
// the lane OFF apart.  Lanes with bit OFF set keep the upper half [H, 2H) and send the lower.
template <int OFF, int H>
__device__ __forceinline__ void fold(float (&r)[NB], float (&i)[NB], const int lane)
{
    const bool upper = (lane & OFF) != 0;
#pragma unroll
    for (int k = 0; k < H; ++k) {
        const float sr = upper ? r[k] : r[k + H];
        const float si = upper ? i[k] : i[k + H];
        const float kr = upper ? r[k + H] : r[k];
        const float ki = upper ? i[k + H] : i[k];
        r[k] = kr + __shfl_xor_sync(FULL, sr, OFF);
        i[k] = ki + __shfl_xor_sync(FULL, si, OFF);
    }
}

// Sum NB per-sample sums over the W lanes of a template.  Afterwards the lane holds P = max(2, NB / W)
// consecutive samples, from sample ``first_sample<W>(lane)`` of the block, in r[0..P), i[0..P);
// for W >= 16 the lanes of a pair (and for W = 32 the two half-warps) hold the same samples.
template <int W>
__device__ __forceinline__ void reduce(float (&r)[NB], float (&i)[NB], const int lane)
{
    if (W == 2) { fold<1, 8>(r, i, lane); }
    if (W == 4) { fold<2, 8>(r, i, lane); fold<1, 4>(r, i, lane); }
    if (W == 8) { fold<4, 8>(r, i, lane); fold<2, 4>(r, i, lane); fold<1, 2>(r, i, lane); }
    if (W >= 16) {
        fold<8, 8>(r, i, lane); fold<4, 4>(r, i, lane); fold<2, 2>(r, i, lane);
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            r[k] += __shfl_xor_sync(FULL, r[k], 1);
            i[k] += __shfl_xor_sync(FULL, i[k], 1);
            if (W == 32) {
                r[k] += __shfl_xor_sync(FULL, r[k], 16);
                i[k] += __shfl_xor_sync(FULL, i[k], 16);
            }
        }
    }
}

// Samples k, k + 1 of an output row (k even, so 16-byte aligned) as one float4: added to what the row
// holds with ``accumulate``, zero from n_valid on.
__device__ __forceinline__ void store_pair(float2* row, const long long k, float4 v, const long long n_valid,
                                           const int accumulate)
{
    float4* p = reinterpret_cast<float4*>(row + k);
    if (accumulate) {
        const float4 old = *p;
        v.x += old.x; v.y += old.y; v.z += old.z; v.w += old.w;
    }
    if (k >= n_valid) { v.x = 0.0f; v.y = 0.0f; }
    if (k + 1 >= n_valid) { v.z = 0.0f; v.w = 0.0f; }
    __stwb(p, v);
}

template <int W>
__device__ __forceinline__ int first_sample(const int lane)
{
    if (W == 1) return 0;
    if (W == 2) return 8 * (lane & 1);
    if (W == 4) return 8 * ((lane >> 1) & 1) + 4 * (lane & 1);
    return 8 * ((lane >> (W >= 16 ? 3 : 2)) & 1) + 4 * ((lane >> (W >= 16 ? 2 : 1)) & 1)
           + 2 * ((lane >> (W >= 16 ? 1 : 0)) & 1);
}
"""

SOURCE = REDUCTION + r"""
// Register budget: MIN_BLOCKS(F, W) blocks of 128 threads per SM (gwbatch.spiir._cuda.blocks_per_sm).
//
// A warp holds 32 / W templates ("slots"), W lanes each, F filters per lane.  Slot s's output row is
// rows[s] (s itself when rows is null; a negative row is an empty slot).  With ``low`` (the ladder's
// rung below, ``low_stride`` apart, HALO zeros each side) the output adds ``low`` interpolated to this
// rate by the half-band FIR (gwbatch.spiir.multirate.interpolate2): sample 2m gets EVEN_GAIN low[m],
// sample 2m + 1 the odd phase sum_i ODD[i] (low[m - i] + low[m + 1 + i]), i < ODD_TAPS.  With ``accumulate`` the
// output adds what ``out`` holds (a template's later filter parts).  Samples from n_valid on are 0.
template <int F, int W>
__global__ void __launch_bounds__(128, MIN_BLOCKS(F, W))
spiir_pass(const float4* __restrict__ xs, const int n4, const long long pad,
           const long long n_pad, const long long seg_len,
           const float2* __restrict__ c, const float2* __restrict__ b, const float2* __restrict__ g,
           const int* __restrict__ d, const float2* __restrict__ init, float2* __restrict__ end_state,
           float2* __restrict__ out, const long long out_stride, const int* __restrict__ rows,
           const int n_slots, const float2* __restrict__ low, const long long low_stride,
           const long long n_valid, const int accumulate, const int n_warps, const int n_seg)
{
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (warp >= n_warps) return;
    constexpr int G = F < GROUP ? F : GROUP;  // filters stepped together
    constexpr int P = NB / W > 2 ? NB / W : 2;  // samples a lane holds after the reduction
    const int seg = blockIdx.y;
    const long long k_begin = (long long)seg * seg_len;
    const long long k_end = min(n_pad, k_begin + seg_len);
    const int slot = warp * (32 / W) + lane / W;
    const int row = slot < n_slots ? (rows != nullptr ? rows[slot] : slot) : -1;
    const int first = first_sample<W>(lane);
    const bool writer = row >= 0 && (W < 16 || ((lane & 1) == 0 && (W < 32 || lane < 16)));

    // Per filter: s[k] = c1 s[k-1] + c2 s[k-2] + x[k - d], y[k] = b s[k] + g s[k-1]; ``at`` is the
    // float4 index of x[k_begin - d ...] in the copy shifted by (pad - d) mod 4, so the input of the
    // block of NB samples starting at k0 is at xs + at + (k0 - k_begin) / 4.
    float c1[F], c2[F], br[F], bi[F], gr[F], gi[F], s1[F], s2[F];
    int at[F];
#pragma unroll
    for (int f = 0; f < F; ++f) {
        const long long idx = (long long)warp * 32 * F + f * 32 + lane;
        const float2 cv = c[idx], bv = b[idx], gv = g[idx];
        c1[f] = cv.x; c2[f] = cv.y; br[f] = bv.x; bi[f] = bv.y; gr[f] = gv.x; gi[f] = gv.y;
        const long long base = k_begin - d[idx] + pad;
        const int s = (int)(base & 3);
        at[f] = s * n4 + (int)((base - s) >> 2);
        if (init != nullptr) {
            const float2 v = init[idx * n_seg + seg];
            s1[f] = v.x; s2[f] = v.y;
        } else {
            s1[f] = 0.0f; s2[f] = 0.0f;
        }
    }
    // W <= 4: a warp holds 8 to 32 rows and each lane reads and writes its own row, so every load of
    // the rung below and every store would touch as many lines as the warp has rows (L1 tag requests
    // bound these layouts: ncu, benchmarks/RESULTS.md).  They go through a per-warp shared tile
    // instead: consecutive lanes load each row's window of the rung below (low[m0 - 16, m0 + 24),
    // LOW_PITCH float4s, m0 = k0 / 2), and the block's output is stored by 8 lanes per row, whole
    // 128-byte lines.  (Not for F = 8, whose registers would spill at its launch bounds.)
    constexpr bool STAGED = STAGE && W <= 4 && F < 8;
    constexpr int SLOTS = 32 / W, PITCH = NB / 2 + 1, LOW_PITCH = 20;  // float4s per staged row
    __shared__ float4 stage[STAGED ? (128 / 32) * SLOTS * LOW_PITCH : 1];
    float4* const tile = stage + (threadIdx.x >> 5) * (STAGED ? SLOTS * LOW_PITCH : 0);
    float2* dst = out != nullptr && row >= 0 ? out + (long long)row * out_stride : nullptr;
    const float2* src_low = low != nullptr && row >= 0 ? low + (long long)row * low_stride + HALO : nullptr;

    const float4* xk = xs;
    for (long long k0 = k_begin; k0 < k_end; k0 += NB, xk += NB / 4) {
        float accr[NB], acci[NB];
#pragma unroll
        for (int j = 0; j < NB; ++j) { accr[j] = 0.0f; acci[j] = 0.0f; }
        // Filters in groups of G: load G x-windows, then step time with G independent recurrences
        // in flight.
#pragma unroll
        for (int h0 = 0; h0 < F; h0 += G) {
            float xv[G][NB];
#pragma unroll
            for (int f = 0; f < G; ++f) {
                const float4* src = xk + at[h0 + f];
#pragma unroll
                for (int q = 0; q < NB / 4; ++q) {
                    const float4 v = __ldg(src + q);
                    xv[f][4 * q] = v.x; xv[f][4 * q + 1] = v.y; xv[f][4 * q + 2] = v.z; xv[f][4 * q + 3] = v.w;
                }
            }
#pragma unroll
            for (int j = 0; j < NB; ++j) {
#pragma unroll
                for (int f = 0; f < G; ++f) {
                    const int h = h0 + f;
                    const float sn = fmaf(c1[h], s1[h], fmaf(c2[h], s2[h], xv[f][j]));
                    accr[j] = fmaf(br[h], sn, fmaf(gr[h], s1[h], accr[j]));
                    acci[j] = fmaf(bi[h], sn, fmaf(gi[h], s1[h], acci[j]));
                    s2[h] = s1[h]; s1[h] = sn;
                }
            }
        }
        if (out == nullptr) continue;
        reduce<W>(accr, acci, lane);
        if constexpr (!STAGED) {
            if (!writer) continue;
        }
        const long long k = k0 + first;  // even: the lane's samples come in (even, odd) pairs
        if constexpr (STAGED) {
            if (low != nullptr) {
#pragma unroll
                for (int it = 0; it < SLOTS * LOW_PITCH / 32; ++it) {
                    const int idx = 32 * it + lane, s = idx / LOW_PITCH;
                    const int r = __shfl_sync(FULL, row, s * W);
                    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    if (r >= 0)
                        v = __ldg(reinterpret_cast<const float4*>(low + (long long)r * low_stride + HALO + (k0 >> 1) - 16)
                                  + (idx - s * LOW_PITCH));
                    tile[idx] = v;
                }
                __syncwarp();
            }
        }
        if (src_low != nullptr) {
            // The rung below interpolated: pair j (samples k + 2j, k + 2j + 1) needs low[m + j - 12 ...
            // m + j + 13] (m = k / 2); the lane's pairs share one window of P / 2 + 25 values, each
            // loaded once and added with the taps it meets (indices fixed at compile time).
            constexpr int NP = P / 2, WIN = NP + 2 * ODD_TAPS - 1;
            const float2* window = src_low + (k >> 1) - (ODD_TAPS - 1);
            // For W <= 4 a lane's pairs start on an even m (k0 / 2 is a multiple of 8, ``first`` of 4),
            // so the window starts 16-byte aligned and loads as float4s (two values each; the last
            // may read one value past the window, inside the row's zero halo).
            constexpr bool WIDE = W <= 4;
            constexpr int STEP = WIDE ? 2 : 1;
#pragma unroll
            for (int q0 = 0; q0 < WIN; q0 += STEP) {
                float2 vs[2];
                if (WIDE) {
                    // staged: the lane's window starts at value 4 + first / 2 of its slot's tile row
                    const float4 v4 = STAGED ? tile[(lane / W) * LOW_PITCH + 2 + first / 4 + q0 / 2]
                                             : __ldg(reinterpret_cast<const float4*>(window + q0));
                    vs[0] = make_float2(v4.x, v4.y); vs[1] = make_float2(v4.z, v4.w);
                } else {
                    vs[0] = __ldg(window + q0);
                }
#pragma unroll
                for (int h = 0; h < STEP; ++h) {
                    const int q = q0 + h;
                    const float2 v = vs[h];
#pragma unroll
                    for (int j = 0; j < NP; ++j) {
                        if (q == ODD_TAPS - 1 + j) {
                            accr[2 * j] = fmaf(EVEN_GAIN, v.x, accr[2 * j]);
                            acci[2 * j] = fmaf(EVEN_GAIN, v.y, acci[2 * j]);
                        }
                        const int below = ODD_TAPS - 1 + j - q, above = q - ODD_TAPS - j;
                        if (below >= 0 && below < ODD_TAPS) {
                            accr[2 * j + 1] = fmaf(ODD[below], v.x, accr[2 * j + 1]);
                            acci[2 * j + 1] = fmaf(ODD[below], v.y, acci[2 * j + 1]);
                        }
                        if (above >= 0 && above < ODD_TAPS) {
                            accr[2 * j + 1] = fmaf(ODD[above], v.x, accr[2 * j + 1]);
                            acci[2 * j + 1] = fmaf(ODD[above], v.y, acci[2 * j + 1]);
                        }
                    }
                }
            }
        }
        if constexpr (STAGED) {
            __syncwarp();  // the tile now takes the block's output
#pragma unroll
            for (int j = 0; j < P; j += 2)
                tile[(lane / W) * PITCH + (first + j) / 2] = make_float4(accr[j], acci[j], accr[j + 1], acci[j + 1]);
            __syncwarp();
#pragma unroll
            for (int it = 0; it < SLOTS / 4; ++it) {
                const int s = 4 * it + (lane >> 3), pair = 2 * (lane & 7);
                const int r = __shfl_sync(FULL, row, s * W);
                const float4 v = tile[s * PITCH + (lane & 7)];
                if (r < 0) continue;
                store_pair(out + (long long)r * out_stride, k0 + pair, v, n_valid, accumulate);
            }
            __syncwarp();
        } else {
#pragma unroll
            for (int j = 0; j < P; j += 2) {
                store_pair(dst, k + j, make_float4(accr[j], acci[j], accr[j + 1], acci[j + 1]), n_valid, accumulate);
            }
        }
    }
    if (end_state != nullptr) {
#pragma unroll
        for (int f = 0; f < F; ++f) {
            const long long idx = (long long)warp * 32 * F + f * 32 + lane;
            end_state[idx * n_seg + seg] = make_float2(s1[f], s2[f]);
        }
    }
}

// Carry states across segments, one thread per filter: with v = (s[k], s[k-1]) and M = [[c1, c2], [1, 0]],
// v_0 = 0 and v_i = M^m v_{i-1} + e_{i-1} for segments of m samples (float64).
__global__ void spiir_scan(const float2* __restrict__ c, const float2* __restrict__ end_state,
                           float2* __restrict__ init, const long long n_filters, const int n_seg,
                           const long long seg_len)
{
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n_filters) return;
    // P = M^m by repeated squaring
    double p00 = 1.0, p01 = 0.0, p10 = 0.0, p11 = 1.0;
    double q00 = c[idx].x, q01 = c[idx].y, q10 = 1.0, q11 = 0.0;
    for (long long m = seg_len; m > 0; m >>= 1) {
        if (m & 1) {
            const double r00 = p00 * q00 + p01 * q10, r01 = p00 * q01 + p01 * q11;
            const double r10 = p10 * q00 + p11 * q10, r11 = p10 * q01 + p11 * q11;
            p00 = r00; p01 = r01; p10 = r10; p11 = r11;
        }
        const double r00 = q00 * q00 + q01 * q10, r01 = q00 * q01 + q01 * q11;
        const double r10 = q10 * q00 + q11 * q10, r11 = q10 * q01 + q11 * q11;
        q00 = r00; q01 = r01; q10 = r10; q11 = r11;
    }
    double v0 = 0.0, v1 = 0.0;
    for (int s = 0; s < n_seg; ++s) {
        init[idx * n_seg + s] = make_float2((float)v0, (float)v1);
        const float2 e = end_state[idx * n_seg + s];
        const double t = p00 * v0 + p01 * v1 + e.x;
        v1 = p10 * v0 + p11 * v1 + e.y;
        v0 = t;
    }
}

// The ladder's factor-2 decimation (gwbatch.spiir.multirate.decimate2), one thread per output:
// y[j] = EVEN_GAIN / 2 x[2j] + sum_i ODD[i] / 2 (x[2j - 1 - 2i] + x[2j + 1 + 2i]), zeros beyond the ends.
__global__ void decimate2(const float* __restrict__ x, const long long n, float* __restrict__ y,
                          const long long n_out)
{
    const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_out) return;
    const long long c = 2 * j;
    float acc = 0.0f;
#pragma unroll
    for (int t = ODD_TAPS - 1; t >= 0; --t) {
        const long long lo = c - 1 - 2 * t, hi = c + 1 + 2 * t;
        const float u = lo >= 0 ? __ldg(x + lo) : 0.0f;
        const float w = hi < n ? __ldg(x + hi) : 0.0f;
        acc = fmaf(0.5f * ODD[t], u + w, acc);
    }
    y[j] = fmaf(0.5f * EVEN_GAIN, __ldg(x + c), acc);
}
"""

NB = 16
THREADS = 128
CLASSES = (1, 2, 4, 8, 16)  # filters per thread of the one-template-per-warp layouts
#: Every layout ``(F, W)`` compiled: ``W`` lanes per template (32 / W templates per warp), ``F``
#: filters per lane.  W = 32 are the classes; the narrower ones hold the few filters a template has
#: on one rung of the multi-rate ladder (gwbatch.spiir._cuda_multirate).
LAYOUTS = tuple((f, 32) for f in CLASSES) + tuple((f, w) for w in (1, 2, 4, 8, 16) for f in (1, 2, 4, 8))
#: Zero samples each side of a rung's output row, so the interpolating epilogue reads no bounds.
HALO = 32
#: NVRTC options of every compile (the compile test passes them to nvcc as well).
OPTIONS = ("-std=c++17",)


def pass_name(f: int, w: int = 32) -> str:
    return f"spiir_pass<{f}, {w}>"


#: The kernels every compile instantiates: one pass per layout, the scan and the ladder's decimator.
NAME_EXPRESSIONS = tuple(pass_name(f, w) for f, w in LAYOUTS) + ("spiir_scan", "decimate2")


#: Compile-time tuning (benchmarks/spiir_kernel.py --define times others): GROUP, the filters whose
#: recurrences a thread steps together (their input windows are in registers at once);
#: STAGE, whether the narrow layouts (W <= 4) load the rung below and store their output through a
#: shared tile, whole lines per request (1), or each lane its own row (0).
DEFINES = {"GROUP": 2, "STAGE": 1}


def interpolation_taps() -> tuple[np.float32, np.ndarray]:
    """The factor-2 interpolator of :func:`gwbatch.spiir.multirate.interpolate2` in polyphase form,
    float32 as the CPU twin applies it: the even phase's single tap and the odd phase's distinct
    taps (the filter is symmetric, so ``odd[i]`` weighs ``low[m - i] + low[m + 1 + i]``)."""
    from gwbatch.spiir.multirate import _CENTRE, HALF_BAND

    taps = (2.0 * HALF_BAND).astype(np.float32)
    return taps[_CENTRE], taps[_CENTRE + 1 :: 2]


#: Blocks per SM the launch bounds ask of the narrow layouts whose registers allow more than the
#: default (the most that compile without spills for sm_90, within the shared tile's 228 KB per SM:
#: (1, 1)'s tile is 40 KB a block); more resident warps hide the latency of their short blocks.
NARROW_BLOCKS = {(1, 1): 5, (1, 2): 6, (2, 2): 6, (1, 4): 6, (2, 4): 6, (4, 2): 5, (4, 4): 5}


def blocks_per_sm(f: int, w: int) -> int:
    """Blocks of :data:`THREADS` threads per SM that ``spiir_pass<F, W>``'s launch bounds keep
    resident: 2 for F = 16 (up to 255 registers), 3 for F = 8, :data:`NARROW_BLOCKS`, else 4."""
    if f >= 16:
        return 2
    if f >= 8:
        return 3
    return NARROW_BLOCKS.get((f, w), 4)


def _min_blocks_macro() -> str:
    cases = "".join(f"(F) == {f} && (W) == {w} ? {n} : " for (f, w), n in sorted(NARROW_BLOCKS.items()))
    return f"#define MIN_BLOCKS(F, W) ({cases}(F) >= 16 ? 2 : ((F) >= 8 ? 3 : 4))\n"


def source() -> str:
    return _source(tuple(DEFINES.items()), tuple(sorted(NARROW_BLOCKS.items())))


@functools.cache
def _source(defines: tuple, narrow: tuple) -> str:
    """The module's source for these compile-time settings (made once: every launch asks for it)."""
    even, odd = interpolation_taps()
    constants = (f"#define HALO {HALO}\n#define EVEN_GAIN {float(even)!r}f\n#define ODD_TAPS {odd.size}\n"
                 "__constant__ float ODD[ODD_TAPS] = {" + ", ".join(f"{float(v)!r}f" for v in odd) + "};\n")
    return "".join(f"#define {k} {v}\n" for k, v in defines) + _min_blocks_macro() + constants + SOURCE


@functools.cache
def _compiled(text: str):
    import cupy

    return cupy.RawModule(code=text, options=OPTIONS, name_expressions=NAME_EXPRESSIONS)


def _module():
    return _compiled(source())


def compile_cases() -> list[tuple[str, str, tuple[str, ...]]]:
    """What tests/test_cuda_compile.py compiles with nvcc, as :func:`_module` compiles it:
    ``(label, source, name expressions)``."""
    return [("spiir_pass + spiir_scan", source(), NAME_EXPRESSIONS)]


def filters_per_thread(n_filters: int) -> int:
    """Smallest class that fits ``n_filters`` in one warp (16 beyond 512 filters: two parts)."""
    for f in CLASSES:
        if n_filters <= 32 * f:
            return f
    return CLASSES[-1]


#: Most bytes of per-warp partial SNR series (summed over a template's warps afterwards) the
#: few-template layout may allocate; beyond it, one warp per template (a chunk of 2^21 samples and
#: 256 templates of 700 filters would otherwise need 90 GB).
PARTIAL_OUTPUT_BYTES = 2**30


@functools.cache
def _sm_count() -> int:
    import cupy

    return int(cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["multiProcessorCount"])


def launch_plan(n_templates: int, n_filters: int, n_pad: int) -> tuple[int, int]:
    """``(F, segments)`` for a bank.  With enough templates to fill the GPU (>= 4 warps per SM),
    one warp per template of the smallest fitting class and no time segments.  Otherwise one filter
    per thread (the most warps) and time segments (two passes and a scan), down to 128 samples, until
    the GPU is filled.  When the per-warp partial outputs of that layout would exceed
    ``PARTIAL_OUTPUT_BYTES`` (long chunks), the template's class instead (one warp per template or
    two), with time segments of at least 4096 samples until ~8 warps per SM."""
    sms = _sm_count()
    if n_templates >= 4 * sms:
        return filters_per_thread(n_filters), 1
    warps = n_templates * -(-n_filters // 32)
    if warps * n_pad * 8 > PARTIAL_OUTPUT_BYTES:  # long input: few warps per template, time segments
        f = filters_per_thread(n_filters)
        warps = n_templates * -(-n_filters // (32 * f))
        return f, int(max(1, min(-(-8 * sms // warps), n_pad // 4096)))
    return 1, int(max(1, min(-(-4 * sms // warps), n_pad // 128)))


def run_class(xs, n4: int, pad: int, n_pad: int, c, b, g, d, f: int, segments: int = 1, workspace: dict | None = None):
    """Run packed warp-parts of class ``F`` (``(W, 32 F)`` arrays of :func:`packed_bank`), one per
    warp; returns ``(W, n_pad)`` complex64.

    ``workspace`` may hold preallocated ``out`` (and ``end``, ``init`` when segmented) arrays, so the
    launch sequence allocates nothing and can be captured in a CUDA graph and replayed.
    """
    import cupy

    ws = workspace if workspace is not None else {}
    out = ws.get("out")
    if out is None:
        out = cupy.empty((c.shape[0], n_pad), dtype=cupy.complex64)
    run_pass(xs, n4, pad, n_pad, (c, b, g, d), f, 32, out, n_pad, segments=segments, workspace=ws)
    return out


def run_pass(xs, n4: int, pad: int, n_pad: int, packed: tuple, f: int, w: int, out, out_stride: int, *,
             rows=None, n_slots: int | None = None, low=None, low_stride: int = 0, n_valid: int | None = None,
             accumulate: bool = False, segments: int = 1, workspace: dict | None = None) -> None:
    """One ``spiir_pass<F, W>`` over ``n_pad`` samples (and, with ``segments``, the scan and the first
    pass before it), writing slot ``s``'s output to row ``rows[s]`` of ``out`` (``out_stride``
    elements apart; ``rows`` None: row ``s``).

    ``packed``: ``(c, b, g, d)`` in the layout's order (:func:`pack_slots`).  ``low``: the rung below's
    output buffer (rows ``low_stride`` apart, :data:`HALO` zeros each side), added interpolated to this
    rate; ``accumulate``: add to what ``out`` holds; samples from ``n_valid`` on are written as 0.
    ``workspace`` may hold ``end`` and ``init`` for the segmented passes."""
    import cupy

    if 4 * n4 >= 2**31:
        raise ValueError(f"input of {4 * n4} float4s is beyond the kernel's int32 offsets (< 2^31)")
    c, b, g, d = packed
    n_warps = c.shape[0]
    n_slots = n_warps * (32 // w) if n_slots is None else n_slots
    seg_len = -(-n_pad // segments)
    seg_len = -(-seg_len // NB) * NB
    segments = -(-n_pad // seg_len)
    mod = _module()
    kernel = mod.get_function(pass_name(f, w))
    grid = (-(-n_warps * 32 // THREADS), segments)
    head = (xs, cupy.int32(n4), cupy.int64(pad), cupy.int64(n_pad), cupy.int64(seg_len), c, b, g, d)
    tail = (out, cupy.int64(out_stride), rows, cupy.int32(n_slots), low, cupy.int64(low_stride),
            cupy.int64(n_pad if n_valid is None else n_valid), cupy.int32(bool(accumulate)), cupy.int32(n_warps))
    if segments == 1:
        kernel(grid, (THREADS,), (*head, None, None, *tail, cupy.int32(1)))
        return
    ws = workspace if workspace is not None else {}
    n_filters = c.size
    end = ws.get("end")
    init = ws.get("init")
    if end is None:
        end = cupy.empty((n_filters, segments), dtype=cupy.complex64)
        init = cupy.empty((n_filters, segments), dtype=cupy.complex64)
    states = (None, cupy.int64(0), None, cupy.int32(n_slots), None, cupy.int64(0), cupy.int64(0), cupy.int32(0),
              cupy.int32(n_warps))
    kernel(grid, (THREADS,), (*head, None, end, *states, cupy.int32(segments)))
    mod.get_function("spiir_scan")((-(-n_filters // 256),), (256,),
                                   (c, end, init, cupy.int64(n_filters), cupy.int32(segments), cupy.int64(seg_len)))
    kernel(grid, (THREADS,), (*head, init, None, *tail, cupy.int32(segments)))


def decimate2(x):
    """:func:`gwbatch.spiir.multirate.decimate2` of a float32 CuPy series (its taps, in float32)."""
    import cupy

    n_out = -(-x.size // 2)
    y = cupy.empty(n_out, dtype=cupy.float32)
    _module().get_function("decimate2")((-(-n_out // 256),), (256,), (x, cupy.int64(x.size), y, cupy.int64(n_out)))
    return y


def workspace(n_warps: int, n_filters: int, n_pad: int, segments: int) -> dict:
    """Preallocated buffers for :func:`run_class` (see there)."""
    import cupy

    ws = {"out": cupy.empty((n_warps, n_pad), dtype=cupy.complex64)}
    if segments > 1:
        seg_len = -(-(-(-n_pad // segments)) // NB) * NB
        segments = -(-n_pad // seg_len)
        ws["end"] = cupy.empty((n_filters, segments), dtype=cupy.complex64)
        ws["init"] = cupy.empty((n_filters, segments), dtype=cupy.complex64)
    return ws


def shifted_input(x, pad: int, n_pad: int):
    """Four copies of ``[zeros(pad), x, zeros]`` shifted by 0..3 samples, as float4 rows."""
    import cupy

    total = pad + n_pad + 4 * NB
    total = -(-total // 4) * 4
    padded = cupy.zeros(total + 4, dtype=cupy.float32)
    padded[pad : pad + x.size] = x
    xs = cupy.stack([padded[s : s + total] for s in range(4)])
    return cupy.ascontiguousarray(xs), total // 4


def pack(v: np.ndarray, f: int, dtype) -> np.ndarray:
    """``(T, L)`` -> ``(T * parts, 32 F)``: warp part ``p`` of template ``t`` holds filters ``[p 32F, (p+1) 32F)``."""
    n_templates, n_slots = v.shape
    per_warp = 32 * f
    parts = -(-n_slots // per_warp)
    full = np.zeros((n_templates, parts * per_warp), dtype=dtype)
    full[:, :n_slots] = v
    return full.reshape(n_templates * parts, per_warp)


def pack_slots(v: np.ndarray, f: int, w: int, dtype) -> np.ndarray:
    """``(S, L)`` with ``L <= W F`` -> ``(warps, 32 F)`` for layout ``(F, W)``: slot ``s`` (template row
    ``s``) is warp ``s // (32 / W)``, lanes ``[(s mod 32/W) W, ... + W)``; its filter ``j`` is in lane
    ``j mod W``, register ``j // W`` (neighbouring filters, sorted by delay, on neighbouring lanes).
    For ``W = 32`` this is :func:`pack` of one part."""
    per_warp = 32 // w
    n_slots, n_cols = v.shape
    if n_cols > w * f:
        raise ValueError(f"{n_cols} filters per template do not fit layout (F={f}, W={w}): at most {w * f}")
    n_warps = -(-n_slots // per_warp)
    full = np.zeros((n_warps * per_warp, f * w), dtype=dtype)
    full[:n_slots, :n_cols] = v
    return np.ascontiguousarray(full.reshape(n_warps, per_warp, f, w).transpose(0, 2, 1, 3).reshape(n_warps, 32 * f))


def packed_slots(a: np.ndarray, b: np.ndarray, d: np.ndarray, f: int, w: int) -> tuple:
    """Host ``(S, L <= W F)`` filters as the device arrays ``spiir_pass<F, W>`` takes, ``(c, b, g, d)``
    in the layout's order (:func:`~gwbatch.spiir.filtering.coefficients`, :func:`pack_slots`)."""
    import cupy

    c, g = coefficients(a, b)
    return tuple(cupy.asarray(pack_slots(v, f, w, t)) for v, t in
                 ((c, np.complex64), (b, np.complex64), (g, np.complex64), (d, np.int32)))


def packed_bank(a: np.ndarray, b: np.ndarray, d: np.ndarray, f: int) -> tuple:
    """Host ``(T, L)`` filters as the device arrays :func:`run_class` takes, ``(c, b, g, d)`` packed
    for class ``F`` (:func:`~gwbatch.spiir.filtering.coefficients`, :func:`pack`)."""
    import cupy

    c, g = coefficients(a, b)
    return tuple(cupy.asarray(pack(v, f, t)) for v, t in
                 ((c, np.complex64), (b, np.complex64), (g, np.complex64), (d, np.int32)))


def filter_counts(b: np.ndarray) -> np.ndarray:
    """Filters each template of a packed bank uses: slots up to its last non-zero ``b`` (at least 1)."""
    used = b != 0
    last = used.shape[1] - np.argmax(used[:, ::-1], axis=1)
    return np.where(used.any(axis=1), last, 1).astype(np.int64)


def template_groups(counts: np.ndarray) -> list[tuple[tuple[int, int], np.ndarray]]:
    """Templates grouped by the layout that holds their own filters, ``((F, warps), template rows)``
    per layout in use: the smallest class :func:`filters_per_thread`, and the warps of ``32 F``
    filters a template needs (more than one only beyond 512 filters).  A bank is packed to its
    longest template, typically twice its mean (BNS: ~700 slots, ~320 filters on average);
    filtering each group packed to its own longest template spends no warps on the others'
    padding."""
    classes = [filters_per_thread(int(n)) for n in counts]
    keys = [(f, -(-int(n) // (32 * f))) for n, f in zip(counts, classes)]
    order = sorted(set(keys))
    index = np.array([order.index(k) for k in keys])
    return [(k, np.flatnonzero(index == i)) for i, k in enumerate(order)]


def _run_packed(xs, n4: int, pad: int, n_pad: int, a, b, d, f: int | None, segments: int | None):
    """``(T, n_pad)`` complex64 for packed host arrays ``(T, L)``, in the layout :func:`launch_plan`
    picks unless ``f`` / ``segments`` force one."""
    n_templates, n_slots = a.shape
    plan_f, plan_segments = launch_plan(n_templates, n_slots, n_pad)
    f = f or plan_f
    segments = segments or (plan_segments if f == plan_f else 1)
    parts = -(-n_slots // (32 * f))
    out = run_class(xs, n4, pad, n_pad, *packed_bank(a, b, d, f), f, segments)
    return out if parts == 1 else out.reshape(n_templates, parts, n_pad).sum(axis=1)


def filter_bank_cuda(x, a, b, d, segments: int | None = None, f: int | None = None):
    """CuPy twin of :func:`gwbatch.spiir.filtering.filter_bank_numba` for one packed bank (T, L).

    Templates are filtered in groups of one layout each (:func:`template_groups`), unless ``f`` or
    ``segments`` force one layout for the whole bank (tests and benchmarks)."""
    import cupy

    x = cupy.asarray(x, dtype=cupy.float32)
    a_h, b_h, d_h = (cupy.asnumpy(v) if isinstance(v, cupy.ndarray) else np.asarray(v) for v in (a, b, d))
    n_templates = a_h.shape[0]
    n_pad = -(-x.size // NB) * NB
    pad = int(d_h.max()) + NB
    xs, n4 = shifted_input(x, pad, n_pad)
    counts = filter_counts(b_h)
    groups = [(None, np.arange(n_templates))] if (f or segments) else template_groups(counts)
    if len(groups) == 1:
        w = int(counts.max())
        return _run_packed(xs, n4, pad, n_pad, a_h[:, :w], b_h[:, :w], d_h[:, :w], f, segments)[:, : x.size]
    out = cupy.empty((n_templates, x.size), dtype=cupy.complex64)
    for _, rows in groups:
        w = int(counts[rows].max())
        z = _run_packed(xs, n4, pad, n_pad, a_h[rows, :w], b_h[rows, :w], d_h[rows, :w], None, None)
        out[cupy.asarray(rows)] = z[:, : x.size]
        del z
    return out
