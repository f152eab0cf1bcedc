"""CUDA sub-band SPIIR: filters run in complex channels of a DFT filter bank.

What it computes is :mod:`gwbatch.spiir.subbands` (CPU twin: :func:`gwbatch.spiir.subbands.filter_subbands`):
``channelize`` cuts the whitened series into its channels; ``chan_ring<F, W>`` (and ``chan_iir<F, W>``
where a ring does not fit) run every channel row (a template's filters of one channel);
``synthesize`` takes each template's rows back to the top rate.

``chan_iir<F, W>``: ``W`` lanes per row (``32 / W`` rows per warp), ``F`` filters per lane, the
first-order complex recurrence ``y[k] = a y[k-1] + X[k - d]`` and the row's sum ``sum_f b_f y_f[k]``
(8 FMAs per update), ``NB = 16`` samples a block, summed over the row's lanes by the transposing
shuffle butterfly of :mod:`gwbatch.spiir._cuda` (``fold`` / ``reduce``).  Input: the channels padded
in front with zeros, as two copies shifted by one sample read as ``float4`` (two complex samples),
so any delay is aligned.  A layout's launch may hold too few warps to fill the GPU, so each runs on
its own stream, and one with few warps in time segments (:func:`segments_for`), each started from
its true state by a warm-up (it starts from zero the warp's slowest filter's 18 e-foldings early and
drops those outputs) or, where that would be long, by the scan: ``chan_iir<F, W, false>`` makes each
segment's end states from zero, ``chan_scan`` carries them across the segments (float64), and
``chan_iir<F, W, true>`` runs every segment from its true state (the ladder's scan,
:mod:`gwbatch.spiir._cuda`).

``chan_ring<F, W>``: the same rows with their input from shared memory.  A row's lanes read one
channel at delays up to thousands of samples apart, so each of ``chan_iir``'s loads touches a cache
line per lane (L1 throughput 87% for 33% of issue slots, ncu).  A block holds rows of one channel
(four warps) and keeps the samples they read in a ring in shared memory (``RING`` >= their delays'
span + 2 ``NB``); each block of samples adds ``NB`` to it in one coalesced load, and the lanes read
their blocks from it, samples outer and filters inner.  A wide row's filters (``W = 32``) are dealt
to lanes so a half-warp's delays differ modulo 16 where they can (:func:`ring_order`: distinct
banks); a narrow row's empty slots read an address of their half-warp (a broadcast).  Same
arithmetic as ``chan_iir<F, W>``, filters summed in another order (within 2e-7 of the peak of its
output).  Every row kernel is bound by its loads and shuffles (one shared-memory wavefront a cycle):
ncu counts 3.6 ring wavefronts and 2.1 shuffles per warp and sample for a wide row of 27 filters.

``synthesize<R>``: a warp per template and time segment of ``SYNTH_SEGMENT`` channel samples, one
launch per row count ``R`` of :data:`SYNTH_ROWS` (the templates with at most ``R`` rows of any class
of channels modulo 4, :func:`class_tables`; every step sums ``R``, and the rows have
:data:`ROW_MARGIN` zeros each side, so no load is conditional and the loop's loads are issued
ahead).  The channel DFT is split radix 4: lane ``l`` of quarter ``k`` of half ``h`` sums the rows of
class ``h + 2 k`` at column ``l`` (``l < 8``), ``P_c[l] = sum W_c[j] e^{2 pi i c l / 32}``; as
``P_c[l + 8] = i^c P_c[l]``, a shuffle across the quarters gives each half's columns ``l`` and
``l + 8`` (``E = P_0 +- P_2``, ``O = (-1)^j (P_1 + P_3)`` and ``(-1)^j i (P_1 - P_3)``), and one across
the halves ``U[j, q] = E + O`` (half 0) and ``U[j, q + 16] = E - O`` (half 1), kept in a ring of
registers over the ten channel samples the outputs read.  Then
``z[n D + r] = sum_m g[m D + r + H] U[n - m, (r + 16 m) mod 32]`` (``g = D p``, ``H`` its centre,
``m`` in ``[-5, 4]``): lane ``r`` takes the even ``m`` on column ``r``, lane ``r + 16`` the odd ones
on column ``r + 16``, added by one shuffle.  Both halves keep ``U`` in the same slots, so half 1's
part of an output comes a step after half 0's, which holds its own for it: no slot depends on the
lane.  No shared memory and no barrier: 48 instructions a step of 16 outputs (SASS, R = 3; 57 for
the split by parity alone at R = 6, which it replaced).

Nested channels (:mod:`gwbatch.spiir.subbands`, "Nested channels"): ``sub_channelize`` cuts the
channels' series into their sub-channels, the nested plan's rows run through the same row kernels on
their own streams beside the others, and ``sub_synthesize`` adds them back into their template's
rows at the channel rate (a thread per sub-channel sample and its ``NEST`` outputs, a launch per
count of a virtual row's rows, :data:`SUB_ROWS`, unrolled; the taps compile-time constants).

CUDA graphs (:class:`GraphSpace`): from a plan's second call at a length on, its channels and rows
are one graph launch, the synthesis launched behind it into a new output.

Measured on one H200 (BNS, 1024 templates x 64 s, benchmarks/RESULTS.md "Sub-band SPIIR" and the
sections after it): within 4.4e-7 of the peak of the float64 direct form; the synthesis 1.75 ms
against 1.98 with the parity split, the whole 5.2 ms (6.4-6.8 before the warm-ups, the narrow rings
and the synthesis without bounds checks).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from functools import partial

import numpy as np

NB = 16
THREADS = 128
#: Synthesis: channel rows of one parity a template may have (its channels of that parity, and a
#: channel's parts beyond 32 F filters).
MAX_PER_PARITY = 12  # gwbatch.spiir.subbands.MAX_ROWS_PER_PARITY (the bank keeps templates within it)
SYNTH_THREADS = 128
#: Channel samples of a synthesis warp (time segments fill the GPU; each starts nine samples early).
SYNTH_SEGMENT = 256
#: Every layout compiled: ``(F, W)``.
LAYOUTS = tuple((f, 32) for f in (1, 2, 4, 8)) + tuple((f, w) for w in (4, 8) for f in (1, 2, 4))
#: The layouts that read their input through the ring (``chan_ring<8, 32>`` would spill registers
#: at its launch bounds; rows of 129-256 filters, none in the benchmark banks, stay on ``chan_iir``).
RING_LAYOUTS = tuple((f, w) for f, w in LAYOUTS if f < 8)
OPTIONS = ("-std=c++17",)

SOURCE = r"""
// Channel rows: slot s (row rows[s] of out, channel input row chan[s]) holds W lanes of F filters;
// filter slot idx = warp * 32 F + f * 32 + lane (pack_slots' order).  y = a y + X[k - d], sum b y.
// Time segment blockIdx.y of seg_len samples, from the states ``init`` (null: zero); with OUT false
// only the states at the segment's end are made (``end_state``), for chan_scan.
template <int F, int W, bool OUT>
__global__ void __launch_bounds__(128)
chan_iir(const float4* __restrict__ xs, const long long plane, const long long row4, const long long pad,
         const long long n_pad, const long long seg_len, const int* __restrict__ warm, const float2* __restrict__ a,
         const float2* __restrict__ b, const int* __restrict__ d, const int* __restrict__ chan,
         const float2* __restrict__ init, float2* __restrict__ end_state, float2* __restrict__ out,
         const long long out_stride, const int* __restrict__ rows, const int n_slots, const long long n_valid,
         const int n_warps, const int n_seg)
{
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (warp >= n_warps) return;
    constexpr int P = NB / W > 2 ? NB / W : 2;
    const int seg = blockIdx.y;
    const long long k_begin = (long long)seg * seg_len, k_end = min(n_pad, k_begin + seg_len);
    const long long k_first = warm != nullptr ? max(0LL, k_begin - warm[warp]) : k_begin;  // warm-up from zero
    const int slot = warp * (32 / W) + lane / W;
    const int row = slot < n_slots ? rows[slot] : -1;
    const int ch = slot < n_slots ? chan[slot] : 0;
    const int first = first_sample<W>(lane);
    const bool writer = row >= 0 && (W < 16 || ((lane & 1) == 0 && (W < 32 || lane < 16)));
    float ar[F], ai[F], br[F], bi[F], yr[F], yi[F];
    long long at[F];
#pragma unroll
    for (int f = 0; f < F; ++f) {
        const long long idx = (long long)warp * 32 * F + f * 32 + lane;
        const float2 av = a[idx], bv = b[idx];
        ar[f] = av.x; ai[f] = av.y; br[f] = bv.x; bi[f] = bv.y;
        const float2 y0 = init != nullptr ? init[idx * n_seg + seg] : make_float2(0.0f, 0.0f);
        yr[f] = y0.x; yi[f] = y0.y;
        const long long base = pad - d[idx] + k_first;
        const long long s = base & 1;
        at[f] = s * plane + (long long)ch * row4 + ((base - s) >> 1);
    }
    float2* dst = OUT && row >= 0 ? out + (long long)row * out_stride : nullptr;
    for (long long k0 = k_first; k0 < k_end; k0 += NB) {
        float accr[NB], acci[NB];
#pragma unroll
        for (int j = 0; j < NB; ++j) { accr[j] = 0.0f; acci[j] = 0.0f; }
#pragma unroll
        for (int f = 0; f < F; ++f) {
            float xv[2 * NB];
            const float4* src = xs + at[f] + ((k0 - k_first) >> 1);
#pragma unroll
            for (int q = 0; q < NB / 2; ++q) {
                const float4 v = __ldg(src + q);
                xv[4 * q] = v.x; xv[4 * q + 1] = v.y; xv[4 * q + 2] = v.z; xv[4 * q + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < NB; ++j) {
                const float tr = fmaf(-ai[f], yi[f], xv[2 * j]);
                const float ti = fmaf(ai[f], yr[f], xv[2 * j + 1]);
                const float nr = fmaf(ar[f], yr[f], tr);
                const float ni = fmaf(ar[f], yi[f], ti);
                yr[f] = nr; yi[f] = ni;
                if constexpr (OUT) {
                    accr[j] = fmaf(br[f], nr, fmaf(-bi[f], ni, accr[j]));
                    acci[j] = fmaf(br[f], ni, fmaf(bi[f], nr, acci[j]));
                }
            }
        }
        if constexpr (OUT) {
            if (k0 < k_begin) continue;  // warming up: the warp's blocks before its segment (uniform)
            reduce<W>(accr, acci, lane);
            if (!writer) continue;
            const long long k = k0 + first;
#pragma unroll
            for (int j = 0; j < P; j += 2) {
                float4 v = make_float4(accr[j], acci[j], accr[j + 1], acci[j + 1]);
                if (k + j >= n_valid) { v.x = 0.0f; v.y = 0.0f; }
                if (k + j + 1 >= n_valid) { v.z = 0.0f; v.w = 0.0f; }
                __stwb(reinterpret_cast<float4*>(dst + k + j), v);
            }
        }
    }
    if (end_state != nullptr) {
#pragma unroll
        for (int f = 0; f < F; ++f) {
            const long long idx = (long long)warp * 32 * F + f * 32 + lane;
            end_state[idx * n_seg + seg] = make_float2(yr[f], yi[f]);
        }
    }
}

// Wide channel rows (W = 32: a warp a row) with their input from a ring in shared memory.  The
// lanes of a wide row read one channel at delays hundreds of samples apart, so each of their loads
// from global memory touches a line per lane.  Here a block's warps are rows of one channel, and
// the block keeps the samples they read, [k - dhi, k - dlo + NB) for block k of NB samples, in a
// ring of RING (a power of two, at least dhi - dlo + 2 NB) complex samples and NB more (a copy of
// the ring's first NB, so a lane's block is contiguous).  Each block of samples adds NB samples by
// one coalesced load (the next block's, stored while the current one is read), and the lanes read
// their blocks from shared memory; one barrier a block.  The host orders each row's filters so the
// 16 lanes of each half-warp and register have distinct delays modulo 16 (distinct banks,
// :func:`ring_order`).  The arithmetic is chan_iir<F, 32>'s.
template <int F, int W, bool OUT>
__global__ void __launch_bounds__(128)
chan_ring(const float2* __restrict__ xs, const long long row_len, const long long pad,
          const long long n_pad, const long long seg_len, const int* __restrict__ warm, const float2* __restrict__ a,
          const float2* __restrict__ b, const int* __restrict__ d, const int* __restrict__ chan,
          const int* __restrict__ dlo, const int* __restrict__ dhi, const int ring_mask,
          const float2* __restrict__ init, float2* __restrict__ end_state, float2* __restrict__ out,
          const long long out_stride, const int* __restrict__ rows, const int n_slots, const long long n_valid,
          const int n_warps, const int n_seg)
{
    extern __shared__ float2 ring[];
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;  // every block is whole (host)
    const int lane = threadIdx.x & 31;
    const int seg = blockIdx.y;
    const long long k_begin = (long long)seg * seg_len, k_end = min(n_pad, k_begin + seg_len);
    // warm-up from zero: the same for every warp of the block (host), so the barriers stay uniform
    const long long k_first = warm != nullptr ? max(0LL, k_begin - warm[warp]) : k_begin;
    constexpr int P = NB / W > 2 ? NB / W : 2;
    const int slot = warp * (32 / W) + lane / W;
    const int row = slot < n_slots ? rows[slot] : -1;
    const float2* x = xs + (long long)chan[warp] * row_len;  // one channel a block
    const int lo = dlo[blockIdx.x], hi = dhi[blockIdx.x];
    const bool writer = row >= 0 && (W < 16 || ((lane & 1) == 0 && (W < 32 || lane < 16)));
    const int first = first_sample<W>(lane);
    // channel sample p (padded coordinates: pad + k - d) lives at p & ring_mask, the first NB also
    // at RING + (p & ring_mask)
    auto put = [&](const long long p, const float2 v) {
        const int q = (int)(p & ring_mask);
        ring[q] = v;
        if (q < NB) ring[q + ring_mask + 1] = v;
    };
    for (long long p = pad + k_first - hi + threadIdx.x; p < pad + k_first - lo + NB; p += blockDim.x) put(p, x[p]);
    float ar[F], ai[F], br[F], bi[F], yr[F], yi[F];
    int pos[F];
#pragma unroll
    for (int f = 0; f < F; ++f) {
        const long long idx = (long long)warp * 32 * F + f * 32 + lane;
        const float2 av = a[idx], bv = b[idx];
        ar[f] = av.x; ai[f] = av.y; br[f] = bv.x; bi[f] = bv.y;
        const float2 y0 = init != nullptr ? init[idx * n_seg + seg] : make_float2(0.0f, 0.0f);
        yr[f] = y0.x; yi[f] = y0.y;
        pos[f] = (int)((pad + k_first - d[idx]) & ring_mask);
    }
    __syncthreads();
    float2* dst = OUT && row >= 0 ? out + (long long)row * out_stride : nullptr;
    for (long long k0 = k_first; k0 < k_end; k0 += NB) {
        const long long p_next = pad + k0 + NB - lo + threadIdx.x;  // the next block's new samples
        const float2 next = threadIdx.x < NB ? x[p_next] : make_float2(0.0f, 0.0f);
        float accr[NB], acci[NB];
#pragma unroll
        for (int j = 0; j < NB; ++j) { accr[j] = 0.0f; acci[j] = 0.0f; }
#pragma unroll
        for (int jj = 0; jj < NB; jj += 4) {
            float2 v[F][4];
#pragma unroll
            for (int f = 0; f < F; ++f)
#pragma unroll
                for (int t = 0; t < 4; ++t) v[f][t] = ring[pos[f] + jj + t];
#pragma unroll
            for (int t = 0; t < 4; ++t) {
#pragma unroll
                for (int f = 0; f < F; ++f) {
                    const int j = jj + t;
                    const float tr = fmaf(-ai[f], yi[f], v[f][t].x);
                    const float ti = fmaf(ai[f], yr[f], v[f][t].y);
                    const float nr = fmaf(ar[f], yr[f], tr);
                    const float ni = fmaf(ar[f], yi[f], ti);
                    yr[f] = nr; yi[f] = ni;
                    if constexpr (OUT) {
                        accr[j] = fmaf(br[f], nr, fmaf(-bi[f], ni, accr[j]));
                        acci[j] = fmaf(br[f], ni, fmaf(bi[f], nr, acci[j]));
                    }
                }
            }
        }
#pragma unroll
        for (int f = 0; f < F; ++f) pos[f] = (pos[f] + NB) & ring_mask;
        // the ring holds at least the window and two blocks, so the next block's samples overwrite
        // none this block reads; the barrier makes them visible before the next block reads them
        if (threadIdx.x < NB) put(p_next, next);
        __syncthreads();
        if constexpr (OUT) {
            if (k0 < k_begin) continue;  // warming up
            reduce<W>(accr, acci, lane);
            if (!writer) continue;
            const long long k = k0 + first;
#pragma unroll
            for (int j = 0; j < P; j += 2) {
                float4 v = make_float4(accr[j], acci[j], accr[j + 1], acci[j + 1]);
                if (k + j >= n_valid) { v.x = 0.0f; v.y = 0.0f; }
                if (k + j + 1 >= n_valid) { v.z = 0.0f; v.w = 0.0f; }
                __stwb(reinterpret_cast<float4*>(dst + k + j), v);
            }
        }
    }
    if (end_state != nullptr) {
#pragma unroll
        for (int f = 0; f < F; ++f) {
            const long long idx = (long long)warp * 32 * F + f * 32 + lane;
            end_state[idx * n_seg + seg] = make_float2(yr[f], yi[f]);
        }
    }
}

// The states across time segments, one thread per filter slot: y before segment 0 is 0, and before
// segment s + 1 it is a^m y_s + e_s for segments of m samples, e_s the segment's end from zero (float64).
__global__ void chan_scan(const float2* __restrict__ a, const float2* __restrict__ end_state,
                          float2* __restrict__ init, const long long n_filters, const int n_seg,
                          const long long seg_len)
{
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n_filters) return;
    double pr = 1.0, pi = 0.0, qr = a[idx].x, qi = a[idx].y;  // p = a^m by repeated squaring
    for (long long m = seg_len; m > 0; m >>= 1) {
        if (m & 1) { const double t = pr * qr - pi * qi; pi = pr * qi + pi * qr; pr = t; }
        const double t = qr * qr - qi * qi; qi = 2.0 * qr * qi; qr = t;
    }
    double vr = 0.0, vi = 0.0;
    for (int s = 0; s < n_seg; ++s) {
        init[idx * n_seg + s] = make_float2((float)vr, (float)vi);
        const float2 e = end_state[idx * n_seg + s];
        const double t = pr * vr - pi * vi + e.x;
        vi = pr * vi + pi * vr + e.y;
        vr = t;
    }
}

// Synthesis (module docstring): a warp per template t = blockIdx.y and time segment of seg_len
// low-rate samples.  Lane r of half h holds column r + 16 h of U in a ring of registers over the
// ten low-rate samples its outputs read; each step makes U one sample further and gives 16 top-rate
// outputs.  The DFT is split by the channel modulo 4 (radix 4): lane l of quarter k (l = lane & 7,
// k = (lane >> 3) & 1) of half h sums the rows of class h + 2 k at column l,
// P_c[l] = sum_{c = h + 2k mod 4} W_c[j] e^{2 pi i c l / 32}; since P_c[l + 8] = i^c P_c[l], one
// shuffle across the quarters gives each half's columns l and l + 8 (even: P_0 + P_2, P_0 - P_2;
// odd: P_1 + P_3, i (P_1 - P_3)), and one across the halves U = E + O, E - O.  rows_of / chan_of:
// (T, 4, MAX_PER_PARITY), the template's channel rows of each class, valid ones first (-1 after),
// and their channels (0..31); taps g[0..160].  The templates ``which[blockIdx.y]`` have at most R
// rows of any class, and every step sums R rows (empty ones weighted 0) in a loop the compiler
// unrolls, so the steps' loads are issued ahead (a loop stopping at each template's count was 2.6x
// slower on an H200).
template <int R>
// (R = 1 with no minimum of blocks spilled to keep 64 registers; six blocks allow 80, as R > 1 takes)
__global__ void __launch_bounds__(SYNTH_THREADS, R == 1 ? 6 : 0)
synthesize(const float2* __restrict__ w, const long long w_stride, const long long n_low,
           const int* __restrict__ rows_of, const int* __restrict__ chan_of, const float* __restrict__ taps,
           float2* __restrict__ z, const long long z_stride, const long long n_out, const long long seg_len,
           const int* __restrict__ which)
{
    const int lane = threadIdx.x & 31, half = lane >> 4, q = lane & 15, quarter = (lane >> 3) & 1, l = lane & 7;
    const int t = which[blockIdx.y];
    // a warp past the series runs an empty segment at 0 (it writes nothing), so no lane leaves early
    // and the shuffles need no divergence check
    const long long first = ((long long)blockIdx.x * (SYNTH_THREADS / 32) + (threadIdx.x >> 5)) * seg_len;
    const long long seg0 = first < n_low ? first : 0, seg1 = first < n_low ? min(n_low, seg0 + seg_len) : 0;
    const float2* src[R];
    float twr[R], twi[R];
#pragma unroll
    for (int u = 0; u < R; ++u) {
        const int base = (t * 4 + half + 2 * quarter) * MAX_PER_PARITY + u;
        const int r = rows_of[base];
        src[u] = w + (long long)(r >= 0 ? r : 0) * w_stride;  // an empty slot reads row 0, weighted 0
        float s = 0.0f, co = 0.0f;
        if (r >= 0) sincospif((float)((chan_of[base] * l) & 31) / 16.0f, &s, &co);  // e^{2 pi i c l / 32}
        twr[u] = co; twi[u] = s;
    }
    // Output n reads U[n - m] with m = 2 i - 4 - h (i < 5): half 0 U[n + 4 - 2 i], half 1
    // U[n + 5 - 2 i].  Both halves keep U[j] in ring slot (s + 9) mod 10 at step s of a round of ten
    // and read slots (s + 8 - 2 i) mod 10, U[n + 4 - 2 i]: half 0's part of output n, half 1's of
    // output n - 1.  Half 0 holds its part a step and adds half 1's: output n - 1 is written at step
    // n.  Slots are known at compile time, and nothing depends on the lane but the taps and constants.
    float g[5];
#pragma unroll
    for (int i = 0; i < 5; ++i) {
        const int idx = (2 * i - 4 - half) * 16 + q + 80;
        g[i] = (idx >= 0 && idx <= 160) ? taps[idx] : 0.0f;
    }
    const float sign = half ? -1.0f : 1.0f;  // U = E + O (half 0), E - O (half 1)
    const float turn = quarter ? -1.0f : 1.0f;  // quarter 0: own + other's; quarter 1: other's - own
    // the odd half's factor on its part: (-1)^j, and i on columns 8..15; even steps (t0) and odd (t1)
    const float t0r = (half && quarter) ? 0.0f : 1.0f, t0i = (half && quarter) ? 1.0f : 0.0f;
    const float t1r = half ? -t0r : t0r, t1i = half ? -t0i : t0i;
    float ur[10], ui[10];
#pragma unroll
    for (int k = 0; k < 10; ++k) { ur[k] = 0.0f; ui[k] = 0.0f; }
    float held_r = 0.0f, held_i = 0.0f;
    // Step n writes output (n - 1) 16 + q (half 0) for seg0 < n <= last: the segment's end, or the
    // last step whose output of column q is in the series; i = n - seg0 counts the steps (32 bits).
    const long long in_series = max(0LL, (n_out - q + 15) / 16);
    const int span = half == 0 ? (int)(min(seg1, in_series) - seg0) : 0;
    float2* o = z + (long long)t * z_stride + (seg0 - 10) * 16 + q;  // output of step seg0 - 9, + 16 s
    // Steps n from seg0 - 9 to seg1: the first nine only fill the ring (U[seg0 - 4 ...]); seg_len is
    // even, so j = n + 5 has the parity of s.
    for (long long n0 = seg0 - 9; n0 <= seg1; n0 += 10, o += 160) {
        const int i0 = (int)(n0 - seg0);
#pragma unroll
        for (int s = 0; s < 10; ++s) {
            const long long n = n0 + s, j = n + 5;
            float er = 0.0f, ei = 0.0f, fr = 0.0f, fi = 0.0f;
            // no bounds check: the rows have ROW_MARGIN zeros each side (j in [seg0 - 4, seg1 + 14]),
            // so every load of the round is unconditional and issued ahead
#pragma unroll
            for (int u = 0; u < R; ++u) {
                const float2 v = __ldg(src[u] + j);
                if (R >= 4 && (u & 1)) {  // two sums for four rows or more (a shorter chain)
                    fr = fmaf(v.x, twr[u], fmaf(-v.y, twi[u], fr));
                    fi = fmaf(v.x, twi[u], fmaf(v.y, twr[u], fi));
                } else {
                    er = fmaf(v.x, twr[u], fmaf(-v.y, twi[u], er));
                    ei = fmaf(v.x, twi[u], fmaf(v.y, twr[u], ei));
                }
            }
            if (R >= 4) { er += fr; ei += fi; }
            const float qr = __shfl_xor_sync(FULL, er, 8), qi = __shfl_xor_sync(FULL, ei, 8);
            const float vr = fmaf(turn, er, qr), vi = fmaf(turn, ei, qi);
            const float cr = (s & 1) ? t1r : t0r, ci = (s & 1) ? t1i : t0i;  // registers chosen at compile time
            er = fmaf(cr, vr, -ci * vi);
            ei = fmaf(ci, vr, cr * vi);
            const float pr = __shfl_xor_sync(FULL, er, 16), pi = __shfl_xor_sync(FULL, ei, 16);
            ur[(s + 9) % 10] = fmaf(sign, er, pr);
            ui[(s + 9) % 10] = fmaf(sign, ei, pi);
            float accr = 0.0f, acci = 0.0f;
#pragma unroll
            for (int i = 0; i < 5; ++i) {
                const int slot = (s + 8 - 2 * i + 10) % 10;
                accr = fmaf(g[i], ur[slot], accr);
                acci = fmaf(g[i], ui[slot], acci);
            }
            const float or_ = __shfl_xor_sync(FULL, accr, 16), oi = __shfl_xor_sync(FULL, acci, 16);
            if ((unsigned)(i0 + s - 1) < (unsigned)span) o[16 * s] = make_float2(held_r + or_, held_i + oi);
            held_r = accr; held_i = acci;
        }
    }
}

// The channels of the real series x: X[i, j] = sum_k p[k] x[j D - H + k] e^{-i pi c_i (j D - H + k) / D}
// (D = 16, H = 80, 161 taps; zeros beyond the ends), one thread per (channel, j).
__global__ void channelize(const float* __restrict__ x, const long long n, const int* __restrict__ channels,
                           const int n_channels, const float* __restrict__ p, float2* __restrict__ out,
                           const long long n_low)
{
    const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y;
    const int c = channels[i];
    __shared__ float cs[32], sn[32];
    if (threadIdx.x < 32) {
        float s, co;
        sincospif(-(float)((c * (int)threadIdx.x) & 31) / 16.0f, &s, &co);  // e^{-i pi c t / 16}, t mod 32
        cs[threadIdx.x] = co; sn[threadIdx.x] = s;
    }
    __syncthreads();  // every thread of the block reaches it (those past the series return after)
    if (j >= n_low) return;
    const long long t0 = j * 16 - 80;
    float re = 0.0f, im = 0.0f;
    for (int k = 0; k <= 160; ++k) {
        const long long tk = t0 + k;
        if (tk < 0 || tk >= n) continue;
        const float v = p[k] * __ldg(x + tk);
        const int ph = (int)(tk & 31);
        re = fmaf(v, cs[ph], re);
        im = fmaf(v, sn[ph], im);
    }
    out[(long long)i * n_low + j] = make_float2(re, im);
}

// Nested channels, analysis: the sub-channels of complex channel series (module docstring):
// out[i, m] = sum_k p[k] X[m E - H + k] e^{-i pi s_i (m E - H + k) / E}, X = x[parent[i]] (rows of
// x_stride samples, n valid), s_i the sub-channel, one thread per (i, m).
__global__ void sub_channelize(const float2* __restrict__ x, const long long x_stride, const long long n,
                               const int* __restrict__ parent, const int* __restrict__ sub,
                               const float* __restrict__ p, const int n_taps, const int E,
                               float2* __restrict__ out, const long long n_low)
{
    const long long m = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y;
    if (m >= n_low) return;
    const float2* src = x + (long long)parent[i] * x_stride;
    const int s = sub[i], period = 2 * E, half = (n_taps - 1) / 2;
    const long long t0 = m * E - half;
    float re = 0.0f, im = 0.0f;
    for (int k = 0; k < n_taps; ++k) {
        const long long tk = t0 + k;
        if (tk < 0 || tk >= n) continue;
        const float2 v = __ldg(src + tk);
        float sn, co;
        sincospif(-(float)((((int)(tk % period)) * s % period + period) % period) / (float)E, &sn, &co);
        const float vr = p[k] * v.x, vi = p[k] * v.y;
        re = fmaf(vr, co, fmaf(-vi, sn, re));
        im = fmaf(vr, sn, fmaf(vi, co, im));
    }
    out[(long long)i * n_low + m] = make_float2(re, im);
}

// Nested channels, synthesis: virtual row v = which[blockIdx.y]'s sub-channel rows (rows_of / chan_of:
// (V, FLAT_ROWS), its rows in a list, -1 after the last, at most K of them; chan_of the sub-channel
// mod 2E) back at the channel rate, added to row into[v] of out:
// out[into[v], j] += sum_r e^{i pi s_r j / E} sum_m W_r[m] g[j - m E + H] (g = E p, 2 H + 1 taps,
// NEST_TAPS).  One thread per (v, sub-channel sample n) makes the E outputs j = n E + q: they read
// W_r[n - 5 ... n + 5] (m = n - i, tap i E + q + H), loaded once for all E, and the modulation is
// (-1)^(s n) e^{i pi s q / E} (NEST_TURN_*[s E + q]).  The K rows are unrolled and the rows have
// ROW_MARGIN zeros each side, so every load (the outputs' old values too) is issued at once (a loop
// that stopped at each row count waited on each row's index before its loads).
template <int K>
__global__ void __launch_bounds__(128)
sub_synthesize(const float2* __restrict__ w, const long long w_stride, const long long n_sub,
               const int* __restrict__ rows_of, const int* __restrict__ chan_of,
               const int* __restrict__ into, float2* __restrict__ out, const long long out_stride,
               const long long n_out, const int* __restrict__ which)
{
    constexpr int E = NEST, H = NEST_HALF, M = H / E;  // i in [-M, M]
    const long long n = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int v = which[blockIdx.y];
    if (n * E >= n_out) return;
    float2* dst = out + (long long)into[v] * out_stride + n * E;
    float2 before[E];
#pragma unroll
    for (int q = 0; q < E; ++q) before[q] = n * E + q < n_out ? dst[q] : make_float2(0.0f, 0.0f);
    float zr[E], zi[E];
#pragma unroll
    for (int q = 0; q < E; ++q) { zr[q] = 0.0f; zi[q] = 0.0f; }
#pragma unroll
    for (int u = 0; u < K; ++u) {
        const int r = rows_of[v * FLAT_ROWS + u];
        const int s = r >= 0 ? chan_of[v * FLAT_ROWS + u] : 0;
        const float weight = r >= 0 ? 1.0f : 0.0f;  // an empty slot reads row 0, weighted 0
        const float2* src = w + (long long)(r >= 0 ? r : 0) * w_stride;
        float2 win[2 * M + 1];
#pragma unroll
        for (int i = -M; i <= M; ++i) win[i + M] = __ldg(src + n - i);  // inside the margins
        const float flip = ((s & 1) && (n & 1)) ? -weight : weight;  // (-1)^(s n)
#pragma unroll
        for (int q = 0; q < E; ++q) {
            float sr = 0.0f, si = 0.0f;
#pragma unroll
            for (int i = -M; i <= M; ++i) {
                const int idx = i * E + q + H;  // known at compile time: the tap is an operand
                if (idx < 0 || idx > 2 * H) continue;
                sr = fmaf(NEST_TAPS[idx], win[i + M].x, sr);
                si = fmaf(NEST_TAPS[idx], win[i + M].y, si);
            }
            const float co = flip * NEST_TURN_RE[s * E + q], sn = flip * NEST_TURN_IM[s * E + q];
            zr[q] = fmaf(sr, co, fmaf(-si, sn, zr[q]));
            zi[q] = fmaf(sr, sn, fmaf(si, co, zi[q]));
        }
    }
#pragma unroll
    for (int q = 0; q < E; ++q) {
        if (n * E + q >= n_out) break;
        dst[q] = make_float2(before[q].x + zr[q], before[q].y + zi[q]);
    }
}
"""


def chan_name(f: int, w: int, out: bool = True) -> str:
    return f"chan_iir<{f}, {w}, {'true' if out else 'false'}>"


def ring_name(f: int, w: int, out: bool = True) -> str:
    return f"chan_ring<{f}, {w}, {'true' if out else 'false'}>"


#: The synthesis's row counts (per class, :func:`class_tables`) a launch is compiled for: each
#: template goes to the smallest that holds its rows.
SYNTH_ROWS = (1, 2, 3, 4, 6, 8, MAX_PER_PARITY)


def synth_name(r: int) -> str:
    return f"synthesize<{r}>"


#: The nested synthesis's list of a virtual row's rows (both parities), and the row counts a launch
#: of ``sub_synthesize<K>`` is compiled for (each virtual row goes to the smallest that holds it).
FLAT_ROWS = 2 * MAX_PER_PARITY
SUB_ROWS = (1, 2, 3, 4, 5, 6, 8, 12, FLAT_ROWS)


def sub_synth_name(k: int) -> str:
    return f"sub_synthesize<{k}>"


NAME_EXPRESSIONS = (tuple(chan_name(f, w, o) for f, w in LAYOUTS for o in (True, False))
                    + tuple(ring_name(f, w, o) for f, w in RING_LAYOUTS for o in (True, False))
                    + ("chan_scan", "channelize", "sub_channelize")
                    + tuple(synth_name(r) for r in SYNTH_ROWS) + tuple(sub_synth_name(k) for k in SUB_ROWS))


def source() -> str:
    from gwbatch.spiir._cuda import REDUCTION
    from gwbatch.spiir.subbands import NEST, TAPS_PER_PHASE, prototype

    def table(name: str, values) -> str:
        body = ", ".join(f"{float(v):.9e}f" for v in np.asarray(values, np.float32))
        return f"__constant__ float {name}[{len(values)}] = {{{body}}};\n"

    turn = np.exp(1j * np.pi * np.outer(np.arange(2 * NEST), np.arange(NEST)) / NEST).ravel()  # [s E + q]
    return (REDUCTION + f"#define MAX_PER_PARITY {MAX_PER_PARITY}\n#define SYNTH_THREADS {SYNTH_THREADS}\n"
            f"#define FLAT_ROWS {FLAT_ROWS}\n"
            f"#define NEST {NEST}\n#define NEST_HALF {TAPS_PER_PHASE * NEST // 2}\n"
            + table("NEST_TAPS", NEST * prototype(NEST)) + table("NEST_TURN_RE", turn.real)
            + table("NEST_TURN_IM", turn.imag) + SOURCE)


@functools.cache
def _module():
    import cupy

    return cupy.RawModule(code=source(), options=OPTIONS, name_expressions=NAME_EXPRESSIONS)


def compile_cases() -> list[tuple[str, str, tuple[str, ...]]]:
    return [("chan_iir + synthesize", source(), NAME_EXPRESSIONS)]


def shifted_channels(x, pad: int, n_pad: int):
    """Two copies of each channel row ``[zeros(pad), X, zeros]`` shifted by 0 and 1 samples, as
    float4 (two complex samples): ``(copies * rows * row4, 4)`` float32, the float4s per copy and per row."""
    import cupy

    n_rows = x.shape[0]
    total = pad + n_pad + 2 * NB
    total += total % 2
    padded = cupy.zeros((n_rows, total + 2), dtype=cupy.complex64)
    padded[:, pad: pad + x.shape[1]] = x
    copies = cupy.stack([padded[:, s: s + total] for s in range(2)])
    row4 = total // 2
    return cupy.ascontiguousarray(copies).view(cupy.float32).reshape(-1, 4), n_rows * row4, row4


def layout_for(count: int) -> tuple[int, int]:
    """The layout ``(F, W)`` holding ``count`` filters: least capacity, then fewest filters per lane."""
    fits = [lw for lw in LAYOUTS if lw[0] * lw[1] >= count]
    return min(fits, key=lambda lw: (lw[0] * lw[1], lw[0]))


@dataclass(frozen=True)
class RingSpec:
    """The input ring of a ``chan_ring<F, W>`` launch: its size (complex samples, a power of two), the
    warps (rows) of a block, which share it, and each block's delays ``[dlo, dhi]`` (device arrays)."""

    size: int
    warps: int
    dlo: object
    dhi: object


@dataclass(frozen=True)
class RowLaunch:
    """One launch of channel rows of layout ``(f, w)``: the packed filters ``a``, ``b``, ``d``
    (:func:`~gwbatch.spiir._cuda.pack_slots`' order, or :func:`ring_order`'s), each slot's channel
    input row ``chan`` and output row ``rows`` (-1: an empty slot); ``ring`` for ``chan_ring``
    (None: ``chan_iir``), whose ``n_slots`` counts the empty warps that fill its blocks."""

    f: int
    w: int
    a: object
    b: object
    d: object
    chan: object
    rows: object
    n_slots: int
    ring: RingSpec | None = None
    warm: object = None  # each warp's warm-up (int32 samples, :func:`warm_samples`; block-uniform for the ring)
    warm_max: int = 0


#: A segment's warm-up: it starts from zero this many e-foldings of its slowest filter early, so the
#: state it misses is e^-18 (1.5e-8) of the state it has, below float32's resolution.
WARM_EFOLDINGS = 18


def warm_samples(a_abs_max: np.ndarray) -> np.ndarray:
    """The warm-up (samples, a multiple of :data:`NB`) of filters whose largest ``|a|`` is ``a_abs_max``:
    :data:`WARM_EFOLDINGS` e-foldings of ``-1 / log|a|`` (0 for none; capped for ``|a|`` near 1)."""
    a_abs_max = np.asarray(a_abs_max, np.float64)
    tau = np.zeros(a_abs_max.shape)
    live = a_abs_max > 0
    tau[live] = -1.0 / np.log(np.minimum(a_abs_max[live], 1.0 - 1e-12))
    return (np.ceil(np.minimum(WARM_EFOLDINGS * tau, 1 << 30) / NB) * NB).astype(np.int32)


@dataclass(frozen=True)
class DevicePlan:
    """A :class:`~gwbatch.spiir.subbands.ChannelPlan` on the device: its row launches
    (:class:`RowLaunch`), the synthesis tables, its launches ``(R, which)`` (the templates by
    :data:`SYNTH_ROWS`) and the taps."""

    launches: tuple
    rows_of: object
    chan_of: object
    taps: object
    pad: int
    n_rows: int
    streams: tuple
    synth_launches: tuple
    into: object = None  # the rows the nested plan's virtual rows are added to (int32)
    flat_rows: object = None  # each template's rows in a list, (T, FLAT_ROWS), and their channels,
    flat_chan: object = None  # for sub_synthesize
    flat_launches: tuple = ()  # its launches (K, which) by SUB_ROWS


#: Wide rows (W = 32) read their input through a shared-memory ring (``chan_ring``) when their
#: block's delays span at most this many samples less two blocks (the ring's largest size: 64 KiB
#: a block, three blocks an SM).
RING_MAX = 8192
#: Rows of one channel a ``chan_ring`` block holds (a warp each), sharing its ring.
RING_WARPS = THREADS // 32


def ring_order(d: np.ndarray, f: int) -> tuple[np.ndarray, np.ndarray]:
    """The slots of a wide row's ``n <= 32 f`` filters of delays ``d``: ``(filter, delay)`` per slot
    ``f' * 32 + lane`` (filter -1: an empty slot, given a delay too).  Each half-warp of each
    register is a group of 16 slots, and a ring read of a group hits 16 banks when its delays are
    distinct modulo 16: the filters, ordered by that residue, are dealt to the ``2 f`` groups in
    turn (a residue held by at most ``2 f`` filters lands in distinct groups), and the empty slots
    take the residues left, within 15 of the least delay."""
    groups = 2 * f
    residue = d % 16
    order = np.lexsort((d, residue))
    lo = int(d.min())
    slot_filter = np.full(32 * f, -1, np.int64)
    slot_delay = np.empty(32 * f, np.int64)
    for g in range(groups):
        members = order[g::groups]
        base = (g // 2) * 32 + (g % 2) * 16
        slot_filter[base: base + members.size] = members
        slot_delay[base: base + members.size] = d[members]
        taken = np.zeros(16, bool)
        taken[residue[members]] = True
        left = np.flatnonzero(~taken) if not taken.all() else np.arange(16)
        empty = 16 - members.size
        slot_delay[base + members.size: base + 16] = lo + (left[np.arange(empty) % left.size] - lo) % 16
    return slot_filter, slot_delay


#: The least ring (smaller windows share its launch: fewer launches, each fuller).
RING_MIN = 1024


def _ring_size(span: int) -> int:
    return max(RING_MIN, 1 << int(np.ceil(np.log2(span + 2 * NB))))


def _ring_slots(f: int, w: int, rows: list, d: np.ndarray, counts, order: dict) -> tuple[np.ndarray, np.ndarray]:
    """One ``chan_ring<f, w>`` block's slots: ``(filter, delay)`` of shape ``(RING_WARPS, 32 f)``, the
    filter as ``row * width + column`` of the plan's padded arrays (-1: an empty slot).  Wide rows
    (``w = 32``, a warp each) take :func:`ring_order`'s slots; narrow ones ``32 / w`` a warp in
    :func:`~gwbatch.spiir._cuda.pack_slots`' order, each empty slot given a delay of its half-warp's
    first filter (the same address: a broadcast, no bank conflict)."""
    from gwbatch.spiir._cuda import pack_slots

    per_warp, width = 32 // w, d.shape[1]
    lo = min(int(order[m][1].min()) if w == 32 else int(d[m, : counts[m]].min()) for m in rows)
    slot_filter = np.full((RING_WARPS, 32 * f), -1, np.int64)
    slot_delay = np.full((RING_WARPS, 32 * f), lo, np.int64)
    if w == 32:
        for i, m in enumerate(rows):
            filt, delay = order[m]
            slot_filter[i] = np.where(filt >= 0, m * width + filt, -1)
            slot_delay[i] = delay
        return slot_filter, slot_delay
    index = np.full((RING_WARPS * per_warp, f * w), -1, np.int64)
    for i, m in enumerate(rows):
        index[i, : counts[m]] = m * width + np.arange(counts[m])
    slot_filter[:] = pack_slots(index + 1, f, w, np.int64) - 1  # pack_slots pads with 0: shift by one
    used = slot_filter >= 0
    slot_delay[used] = d.ravel()[slot_filter[used]]
    halves = slot_delay.reshape(-1, 16)
    live = used.reshape(-1, 16)
    for h in np.flatnonzero(live.any(axis=1) & ~live.all(axis=1)):
        halves[h, ~live[h]] = halves[h, np.argmax(live[h])]
    return slot_filter, slot_delay


def _ring_launches(f: int, w: int, members: np.ndarray, a, b, d, source, counts) -> list[RowLaunch]:
    """The rows ``members`` (layout ``(f, w)``; ``counts`` their filters) as ``chan_ring<f, w>``
    launches: rows of one channel in blocks of :data:`RING_WARPS` warps (``32 / w`` rows a warp) by
    their least delay, each block's ring the window of its rows' delays; a launch per ring size
    (blocks whose ring would exceed :data:`RING_MAX` go to ``chan_iir``)."""
    import cupy

    per_block = RING_WARPS * (32 // w)
    order = {m: ring_order(d[m, : counts[m]], f) for m in members.tolist()} if w == 32 else {}
    least = {m: int(d[m, : counts[m]].min()) for m in members.tolist()}
    blocks = []  # (rows, slot_filter, slot_delay)
    for c in np.unique(source[members]).tolist():
        mine = sorted((m for m in members.tolist() if source[m] == c), key=least.get)
        for i in range(0, len(mine), per_block):
            rows = mine[i: i + per_block]
            blocks.append((rows, *_ring_slots(f, w, rows, d, counts, order)))
    sizes = np.array([_ring_size(int(delay.max() - delay.min())) for _, _, delay in blocks])
    out = []
    for size in np.unique(sizes).tolist():
        picked = [blocks[i] for i in np.flatnonzero(sizes == size)]
        if size > RING_MAX:
            out.extend(_slot_launches(f, w, np.array([m for rows, _, _ in picked for m in rows]), a, b, d, source))
            continue
        slot_filter = np.concatenate([filt for _, filt, _ in picked])
        used = slot_filter >= 0
        packed_a = np.zeros(slot_filter.shape, np.complex64)
        packed_b = np.zeros_like(packed_a)
        packed_a[used], packed_b[used] = a.ravel()[slot_filter[used]], b.ravel()[slot_filter[used]]
        packed_d = np.concatenate([delay for _, _, delay in picked]).astype(np.int32)
        chan = np.repeat([source[rows[0]] for rows, _, _ in picked], RING_WARPS).astype(np.int32)
        rows_out = np.full(len(picked) * per_block, -1, np.int32)
        for k, (rows, _, _) in enumerate(picked):
            rows_out[k * per_block: k * per_block + len(rows)] = rows
        warm = np.repeat(warm_samples(np.abs(packed_a).reshape(len(picked), -1).max(axis=1)), RING_WARPS)
        out.append(RowLaunch(f, w, cupy.asarray(packed_a), cupy.asarray(packed_b), cupy.asarray(packed_d),
                             cupy.asarray(chan), cupy.asarray(rows_out), rows_out.size,
                             RingSpec(int(size), RING_WARPS,
                                      cupy.asarray(np.array([delay.min() for _, _, delay in picked], np.int32)),
                                      cupy.asarray(np.array([delay.max() for _, _, delay in picked], np.int32))),
                             cupy.asarray(warm), int(warm.max())))
    return out


def _slot_launches(f: int, w: int, members: np.ndarray, a, b, d, source, counts=None) -> list[RowLaunch]:
    """The rows ``members`` as one ``chan_iir<f, w>`` launch, the slowest-decaying rows first (warps
    of like warm-up)."""
    import cupy

    from gwbatch.spiir._cuda import pack_slots

    width = min(a.shape[1], f * w)  # the layout's rows hold at most f w filters each
    members = members[np.argsort(-np.abs(a[members, :width]).max(axis=1), kind="stable")]
    packed = [pack_slots(v[members, :width], f, w, t) for v, t in ((a, np.complex64), (b, np.complex64), (d, np.int32))]
    warm = warm_samples(np.abs(packed[0]).max(axis=1))
    return [RowLaunch(f, w, *(cupy.asarray(v) for v in packed), cupy.asarray(source[members].astype(np.int32)),
                      cupy.asarray(members.astype(np.int32)), int(members.size), None, cupy.asarray(warm),
                      int(warm.max()))]


def _valid_first(rows: np.ndarray, keep: np.ndarray, width: int) -> np.ndarray:
    """Each template's (first axis) entries of ``rows`` where ``keep``, in their order, then -1:
    ``(T, width)`` int32."""
    order = np.argsort(~keep, axis=1, kind="stable")
    packed = np.where(np.take_along_axis(keep, order, 1), np.take_along_axis(rows, order, 1), -1)
    out = np.full((rows.shape[0], width), -1, np.int32)
    n = min(width, rows.shape[1])
    out[:, :n] = packed[:, :n]
    return out


def _channels_of(table: np.ndarray, row_channels: np.ndarray) -> np.ndarray:
    """The channels of a table's rows (0 where empty), int32."""
    return np.where(table >= 0, np.asarray(row_channels)[np.maximum(table, 0)], 0).astype(np.int32)


def _by_count(table: np.ndarray, sizes: tuple) -> tuple:
    """Launches ``(size, which)``: each template of ``table`` (rows on the last axes, -1 empty) with
    the smallest of ``sizes`` that holds its most rows on the last axis (``which`` on the device)."""
    import cupy

    counts = (table >= 0).sum(axis=-1).reshape(table.shape[0], -1).max(axis=1)
    bucket = np.searchsorted(np.asarray(sizes), counts)
    return tuple((sizes[k], cupy.asarray(np.flatnonzero(bucket == k).astype(np.int32))) for k in np.unique(bucket))


def class_tables(rows_of: np.ndarray, row_channels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The synthesis's tables of a plan's ``rows_of`` ``(T, 2, per)`` (each template's rows by channel
    parity, -1 after the last): ``(T, 4, MAX_PER_PARITY)`` int32, its rows by channel modulo 4 (the
    class a quarter-warp sums), valid ones first in their order, and their channels (0 where empty)."""
    per = rows_of.shape[2]
    if per > MAX_PER_PARITY:
        raise ValueError(f"a template has {per} channel rows of one parity; the synthesis holds {MAX_PER_PARITY}")
    row_channels = np.asarray(row_channels)
    by_class = np.stack([_valid_first(rows_of[:, c % 2], (rows_of[:, c % 2] >= 0)
                                      & (row_channels[np.maximum(rows_of[:, c % 2], 0)] % 4 == c), MAX_PER_PARITY)
                         for c in range(4)], axis=1)
    if (by_class >= 0).sum() != (rows_of >= 0).sum():
        raise ValueError("a row of one channel parity is listed under the other")
    return by_class, _channels_of(by_class, row_channels)


def flat_table(rows_of: np.ndarray) -> np.ndarray:
    """The nested synthesis's table of a plan's ``rows_of`` ``(T, 2, per)``: ``(T, FLAT_ROWS)`` int32,
    each template's rows in one list (parity 0's, then parity 1's), -1 after the last."""
    listed = rows_of.reshape(rows_of.shape[0], -1)
    return _valid_first(listed, listed >= 0, FLAT_ROWS)


def device_plan(plan, ring: bool = True) -> DevicePlan:
    """The device arrays of ``plan`` (made once per plan object and ``ring``: wide rows through
    ``chan_ring``, else all through ``chan_iir``)."""
    import cupy

    from gwbatch.spiir.subbands import prototype

    key = (id(plan), ring)
    cached = _PLANS.get(key)
    if cached is not None and cached[0] is plan:
        _PLANS.move_to_end(key)
        return cached[1]
    a, b, d, source = plan.padded
    by_layout: dict = {}
    for i, row in enumerate(plan.rows):
        by_layout.setdefault(layout_for(row.a.size), []).append(i)
    counts = np.array([r.a.size for r in plan.rows])
    launches = []
    for (f, w), members in sorted(by_layout.items()):
        make = partial(_ring_launches, w=w) if ring and (f, w) in RING_LAYOUTS else partial(_slot_launches, w=w)
        launches.extend(make(f, members=np.array(members), a=a, b=b, d=d, source=source, counts=counts))
    rows_of, chan_of = class_tables(plan.rows_of, plan.row_channels)
    pad = int(max((int(r.d.max()) for r in plan.rows), default=0)) + NB
    flat = flat_table(plan.rows_of)
    dp = DevicePlan(tuple(launches), cupy.asarray(rows_of), cupy.asarray(chan_of),
                    cupy.asarray((plan.decimation * prototype(plan.decimation)).astype(np.float32)), pad, plan.n_rows,
                    tuple(cupy.cuda.Stream(non_blocking=True) for _ in launches), _by_count(rows_of, SYNTH_ROWS),
                    cupy.asarray(np.asarray(plan.into, np.int32)) if plan.into else None,
                    cupy.asarray(flat), cupy.asarray(_channels_of(flat, plan.row_channels)),
                    _by_count(flat, SUB_ROWS))
    _PLANS[key] = (plan, dp)  # the plan is kept with its arrays, so its id is not reused meanwhile
    while len(_PLANS) > PLANS_KEPT:
        _PLANS.popitem(last=False)
    return dp


#: Device plans kept (least recently used dropped): a search filters each detector's bank in batches,
#: each batch a plan of its own, chunk after chunk; as many as :mod:`gwbatch.spiir._cuda_multirate`
#: keeps (a plan of 256 BNS templates is made in about 0.12 s of host time and holds 2.2 MB).
PLANS_KEPT = 512
_PLANS: OrderedDict = OrderedDict()


#: Time segments: a launch of ``n_warps`` warps of ``F`` filters a lane that holds too few warps to
#: fill the GPU (``gain = ROW_WARPS / (n_warps F)``) is cut into segments of the series, each started
#: from its true state one of two ways:
#:
#: - warm-up: the segment starts ``warm`` samples early from zero (its slowest filter's
#:   :data:`WARM_EFOLDINGS` e-foldings, :func:`warm_samples`) and drops their outputs; used when the
#:   gain is at least ``WARM_GAIN`` and segments of ``WARM_SHARE`` warm-ups (and ``MIN_SEGMENT``) give
#:   two or more;
#: - the scan: ``chan_iir<F, W, false>`` makes each segment's end state from zero, ``chan_scan``
#:   carries them across, and every segment runs from its true state: the recurrence twice, so it is
#:   used when the gain is at least ``MIN_GAIN``.  On one H200 (BNS, benchmarks/RESULTS.md "Sub-band
#:   SPIIR"), scanning every launch to 8192 warps made F = 1, W = 4/8 rows 2-2.7x faster and F = 2/4,
#:   W = 32 rows (4672-4864 filter-warps) 1.4-1.6x slower; its first pass took 60-75% of the second's
#:   time (Nsight Compute, benchmarks/RESULTS.md "Warm-ups").
ROW_WARPS = 8192
MIN_GAIN = 4
MIN_SEGMENT = 1024
WARM_GAIN = 2
WARM_SHARE = 4


def segments_for(n_warps: int, f: int, n_pad: int, target: int = ROW_WARPS,
                 warm: int | None = None) -> tuple[int, int, bool]:
    """``(segments, seg_len, scan)`` of a launch of ``n_warps`` warps of ``f`` filters a lane over
    ``n_pad`` samples whose slowest warp warms up over ``warm`` samples (None: no warm-up);
    ``seg_len`` a multiple of :data:`NB`, one segment when cutting does not pay, ``scan`` whether the
    segments start from scanned states (else from their warm-ups)."""
    gain = _ceil_div(target, max(1, n_warps * f))
    if warm is not None and gain >= WARM_GAIN:
        segments = min(gain, n_pad // max(MIN_SEGMENT, WARM_SHARE * warm))
        if segments >= 2:
            seg_len = _ceil_div(_ceil_div(n_pad, segments), NB) * NB
            return _ceil_div(n_pad, seg_len), seg_len, False
    segments = max(1, min(gain, n_pad // MIN_SEGMENT)) if gain >= MIN_GAIN else 1
    seg_len = _ceil_div(_ceil_div(n_pad, segments), NB) * NB
    segments = _ceil_div(n_pad, seg_len)
    return segments, seg_len, segments > 1


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def run_rows(xs, plane: int, row4: int, pad: int, n_pad: int, launches, out, n_valid: int, streams=None,
             target: int = ROW_WARPS, join: bool = True, warmup: bool = True) -> list:
    """Every :class:`RowLaunch` (``chan_iir`` or ``chan_ring``), each on its own stream of
    ``streams`` when given, in time segments (:func:`segments_for`; ``warmup`` False: scanned
    segments only).  ``join``: the current stream waits for them; else their streams' events are
    returned for the caller to wait on."""
    import cupy

    mod = _module()
    current = cupy.cuda.get_current_stream()
    out_stride = out.strides[0] // out.itemsize
    done = []
    for i, launch in enumerate(launches):
        f, w, a = launch.f, launch.w, launch.a
        n_warps = a.shape[0]
        warm = launch.warm_max if warmup and launch.warm is not None else None
        segments, seg_len, scan = segments_for(n_warps, f, n_pad, target, warm)
        stream = streams[i % len(streams)] if streams else current
        if streams:
            stream.wait_event(current.record())
        tail = (cupy.int64(out_stride), launch.rows, cupy.int32(launch.n_slots), cupy.int64(n_valid),
                cupy.int32(n_warps), cupy.int32(segments))
        if launch.ring is None:  # the arguments before and after the warm-ups
            name, threads, shared = partial(chan_name, f, w), THREADS, 0
            before = (xs, cupy.int64(plane), cupy.int64(row4), cupy.int64(pad), cupy.int64(n_pad), cupy.int64(seg_len))
            after = (a, launch.b, launch.d, launch.chan)
        else:
            ring = launch.ring
            threads, shared = 32 * ring.warps, (ring.size + NB) * 8
            name = partial(ring_name, f, w)
            before = (xs, cupy.int64(2 * row4), cupy.int64(pad), cupy.int64(n_pad), cupy.int64(seg_len))
            after = (a, launch.b, launch.d, launch.chan, ring.dlo, ring.dhi, cupy.int32(ring.size - 1))
        grid = (-(-n_warps * 32 // threads), segments)
        with stream:
            init = None
            if scan:
                end = cupy.empty((a.size, segments), dtype=cupy.complex64)
                init = cupy.empty_like(end)
                _kernel(mod, name(False), shared)(grid, (threads,), (*before, None, *after, None, end, None, *tail),
                                                  shared_mem=shared)
                mod.get_function("chan_scan")((-(-a.size // 256),), (256,),
                                              (a, end, init, cupy.int64(a.size), cupy.int32(segments),
                                               cupy.int64(seg_len)))
            warm_up = launch.warm if segments > 1 and not scan else None
            _kernel(mod, name(True), shared)(grid, (threads,), (*before, warm_up, *after, init, None, out, *tail),
                                             shared_mem=shared)
        if streams:
            done.append(stream.record())
    if not join:
        return done
    for event in done:
        current.wait_event(event)
    return []


def _kernel(mod, name: str, shared: int):
    fn = mod.get_function(name)
    if shared > 48 * 1024 and fn.max_dynamic_shared_size_bytes < shared:
        fn.max_dynamic_shared_size_bytes = shared
    return fn


#: Zeros each side of every channel row on the device (:func:`row_buffer`): the synthesis reads up to
#: 4 samples before a row and 14 after its ``n_low``, and needs no bounds check.
ROW_MARGIN = 16


def row_buffer(n_rows: int, n_pad: int):
    """``(n_rows, n_pad)`` complex64 rows, a view into a buffer with :data:`ROW_MARGIN` zeros each side
    of each row (the rows themselves uninitialised)."""
    import cupy

    full = cupy.empty((n_rows, n_pad + 2 * ROW_MARGIN), dtype=cupy.complex64)
    full[:, :ROW_MARGIN] = 0
    full[:, ROW_MARGIN + n_pad:] = 0
    return full[:, ROW_MARGIN: ROW_MARGIN + n_pad]


def _with_margins(w):
    """``w`` itself when it is a :func:`row_buffer` view, else a copy in one."""
    base = w.base
    if (base is not None and base.ndim == 2 and w.strides[0] == base.strides[0]
            and base.shape[1] >= w.shape[1] + 2 * ROW_MARGIN
            and w.data.ptr - base.data.ptr == ROW_MARGIN * w.itemsize):
        return w
    rows = row_buffer(*w.shape)
    rows[...] = w
    return rows


def run_synthesis(w, n_low: int, dp: DevicePlan, z, n_out: int, segment: int = SYNTH_SEGMENT) -> None:
    """``synthesize<R>`` of every launch ``(R, which)`` of ``dp`` over the rows ``w`` (copied into a
    :func:`row_buffer` unless they are in one)."""
    import cupy

    if segment % 2:
        raise ValueError(f"a synthesis segment of {segment} channel samples: it must be even")
    w = _with_margins(w)
    per_block = SYNTH_THREADS // 32
    segments = -(-n_low // segment)
    mod = _module()
    for r, which in dp.synth_launches:
        mod.get_function(synth_name(r))(
            (-(-segments // per_block), which.size), (SYNTH_THREADS,),
            (w, cupy.int64(w.strides[0] // w.itemsize), cupy.int64(n_low), dp.rows_of, dp.chan_of, dp.taps, z,
             cupy.int64(z.shape[1]), cupy.int64(n_out), cupy.int64(segment), which))


@functools.lru_cache(maxsize=64)
def _channel_constants(channels: tuple[int, ...], device: int):
    """The channels and the channel FIR (float32) on ``device``, uploaded once per channel set: a
    search channelizes every batch of every chunk."""
    import cupy

    from gwbatch.spiir.subbands import prototype

    with cupy.cuda.Device(device):
        return cupy.asarray(np.asarray(channels, np.int32)), cupy.asarray(prototype().astype(np.float32))


def channelize(x, channels):
    """:func:`gwbatch.spiir.subbands.channelize` of a CuPy series (``D = 16``): ``(C, n_low)`` complex64."""
    import cupy

    x = cupy.ascontiguousarray(x, dtype=cupy.float32)
    n = x.size
    n_low = -(-n // 16)
    on_device, taps = _channel_constants(tuple(int(c) for c in channels), cupy.cuda.Device().id)
    out = cupy.empty((len(channels), n_low), dtype=cupy.complex64)
    _module().get_function("channelize")(
        (-(-n_low // 256), len(channels)), (256,),
        (x, cupy.int64(n), on_device, cupy.int32(len(channels)), taps, out, cupy.int64(n_low)))
    return out


def sub_channelize(xc, parent: np.ndarray, sub: np.ndarray):
    """:func:`gwbatch.spiir.subbands.sub_channelize` on the GPU: the sub-channels ``sub`` of the
    channel rows ``parent`` of ``xc`` at decimation :data:`~gwbatch.spiir.subbands.NEST`."""
    import cupy

    from gwbatch.spiir.subbands import NEST

    xc = cupy.ascontiguousarray(xc, dtype=cupy.complex64)
    n = xc.shape[1]
    n_low = -(-n // NEST)
    on_device, taps = _nested_constants(tuple(int(v) for v in parent), tuple(int(v) for v in sub),
                                        cupy.cuda.Device().id)
    out = cupy.empty((len(sub), n_low), dtype=cupy.complex64)
    _module().get_function("sub_channelize")(
        (-(-n_low // 256), len(sub)), (256,),
        (xc, cupy.int64(n), cupy.int64(n), on_device[0], on_device[1], taps, cupy.int32(taps.size), cupy.int32(NEST),
         out, cupy.int64(n_low)))
    return out


@functools.lru_cache(maxsize=64)
def _nested_constants(parent: tuple[int, ...], sub: tuple[int, ...], device: int):
    """The nested analysis's parents and sub-channels and its FIR (float32) on ``device``."""
    import cupy

    from gwbatch.spiir.subbands import NEST, prototype

    with cupy.cuda.Device(device):
        return ((cupy.asarray(np.asarray(parent, np.int32)), cupy.asarray(np.asarray(sub, np.int32))),
                cupy.asarray(prototype(NEST).astype(np.float32)))


def run_sub_synthesis(w, n_sub: int, sub_plan, into, out, n_out: int) -> None:
    """``sub_synthesize<K>``: the nested plan's rows ``w`` (copied into a :func:`row_buffer` unless they
    are in one) added at the channel rate to rows ``into`` of ``out``."""
    import cupy

    dp = device_plan(sub_plan)
    w = _with_margins(w)
    n_blocks = -(-n_out // sub_plan.decimation)
    mod = _module()
    for k, which in dp.flat_launches:
        mod.get_function(sub_synth_name(k))(
            (-(-n_blocks // 128), which.size), (128,),
            (w, cupy.int64(w.strides[0] // w.itemsize), cupy.int64(n_sub), dp.flat_rows, dp.flat_chan, into, out,
             cupy.int64(out.strides[0] // out.itemsize), cupy.int64(n_out), which))


def channel_rows_cuda(xc, plan, streams: bool = True, only: int | None = None, target: int = ROW_WARPS,
                      ring: bool = True, warmup: bool = True, side: tuple | None = None):
    """Every channel row of ``plan`` over the channels ``xc``, the nested channels' rows added
    (:func:`gwbatch.spiir.subbands.all_rows`): ``(plan.n_rows, n_pad)`` complex64 (every sample of
    every row is written: zeros from ``n_low`` on; a :func:`row_buffer` view; ``ring`` False: every
    row through ``chan_iir``; ``warmup`` False: scanned segments only; ``only``: that launch alone,
    no nested rows).  The nested rows run on their own streams beside
    the others; their synthesis adds them once both are done.  ``side``: the streams the launches
    run on, top rows first, then nested (default: each device plan's own; ``streams`` False: the
    current stream)."""
    import cupy

    from gwbatch.spiir.subbands import sub_channelize

    dp = device_plan(plan, ring)
    nested = plan.nested is not None and only is None
    sub_dp = device_plan(plan.nested, ring) if nested else None
    xs_sub = sub_channelize(xc, plan) if nested else None
    top_side = sub_side = None
    if streams:
        side = side if side is not None else dp.streams + (sub_dp.streams if nested else ())
        top_side, sub_side = side[: len(dp.launches)], side[len(dp.launches):]
    # the inputs the launches read stay referenced until the current stream has waited for them (the
    # memory pool would otherwise give their memory to the next allocation on the current stream)
    out, done, inputs = _launch_rows(xc, plan, dp, top_side, only, target, warmup)
    current = cupy.cuda.get_current_stream()
    if nested:
        sub_rows, sub_done, sub_inputs = _launch_rows(xs_sub, plan.nested, sub_dp, sub_side, None, target, warmup)
        for event in done + sub_done:
            current.wait_event(event)
        run_sub_synthesis(sub_rows, xs_sub.shape[1], plan.nested, dp.into, out, xc.shape[1])
        del sub_inputs
    else:
        for event in done:
            current.wait_event(event)
    del inputs
    return out


def _launch_rows(xc, plan, dp: DevicePlan, streams: tuple | None, only, target: int, warmup: bool = True):
    """The rows of ``plan`` launched (launch ``i`` on ``streams[i]``; None: all on the current stream):
    ``(out, events, input)``, the current stream to wait on the events before it reads ``out`` or
    lets the input go."""

    n_low = xc.shape[1]
    n_pad = -(-n_low // NB) * NB
    out = row_buffer(dp.n_rows, n_pad)
    if dp.n_rows > len(plan.rows):
        out[len(plan.rows):] = 0  # the virtual rows of their own
    if not plan.rows:
        return out, [], None
    xs, plane, row4 = shifted_channels(xc, dp.pad, n_pad)
    launches = dp.launches if only is None else (dp.launches[only],)
    done = run_rows(xs, plane, row4, dp.pad, n_pad, launches, out, n_low, streams, target, join=False, warmup=warmup)
    return out, done, xs


def synthesize_cuda(rows, plan, n_low: int, n_out: int, segment: int = SYNTH_SEGMENT):
    import cupy

    dp = device_plan(plan)
    z = cupy.empty((plan.n_templates, n_out), dtype=cupy.complex64)
    run_synthesis(rows, n_low, dp, z, n_out, segment)
    return z


def filter_subbands_cuda(x, plan, graph: bool | None = None):
    """:func:`gwbatch.spiir.subbands.filter_subbands` on the GPU: the channels and rows replayed from
    a CUDA graph from a plan's second call at a length on (:class:`GraphSpace`; ``graph`` False:
    launched one by one; None: :data:`GRAPHS`), the synthesis launched into a new output."""
    import cupy

    from gwbatch.spiir.subbands import DECIMATION, channelize as cut

    x = cupy.ascontiguousarray(x, dtype=cupy.float32)
    rows = graph_rows(x, plan) if (GRAPHS if graph is None else graph) else None
    if rows is None:
        rows = channel_rows_cuda(cut(x, plan.channels), plan)
    return synthesize_cuda(rows, plan, -(-x.size // DECIMATION), x.size)


# ------------------------------------------------------------------------------------------------
# CUDA graphs of the channels and rows

#: Replay a plan's channels and rows from a CUDA graph (:class:`GraphSpace`): about 60 host
#: operations a call (input copies, row buffers, every launch with its stream events) become one
#: graph launch, which BBH plans need (their rows are issued about as fast as the GPU runs them,
#: benchmarks/RESULTS.md "A radix-4 synthesis").
GRAPHS = True
#: Graphs kept per launch stream (least recently used dropped), as many as the device plans.
GRAPHS_KEPT = 512
#: Bytes per template and sample a launch stream's graphs hold for as long as it is used (their
#: channels, shifted inputs and rows; 6.6 measured for 1024 BNS templates on an H200, 1.8 for BBH,
#: benchmarks/RESULTS.md "CUDA graphs"): the memory plan reserves them beside the pass's own
#: (:meth:`gwbatch.searches.spiir.SpiirSearch.work_bytes`).
GRAPH_BYTES = 8


@dataclass
class _Graph:
    plan: object
    graph: object
    rows: object  # the rows the graph leaves, a view of its working memory
    keep: tuple  # the device arrays its launches read (device plans, channel constants)


class GraphSpace:
    """The CUDA graphs replayed on one launch stream of one device, each a plan's channels and rows
    (top and nested, with the nested synthesis) at one series length, captured on the plan's
    second call at that length (a plan called once, as the coherent stage's candidate subsets are,
    is never captured).

    Their working memory is one private memory pool (every graph's channels, shifted inputs, scan
    states and rows), shared by every graph of the stream: graphs launched on one stream run one
    after another, and the only memory read after a graph ends is its rows, by the synthesis queued
    behind it on the same stream, before the next graph can start.  The pool holds the largest
    plan's working memory for as long as the stream is used, as the eager launches' pool caches it.
    Each length's input is a buffer the series is copied into before the launch."""

    def __init__(self, device: int):
        import cupy

        self.device = device
        self.pool = cupy.cuda.MemoryPool()
        self.capture = cupy.cuda.Stream(non_blocking=True)
        self.side: list = []
        self.inputs: dict = {}
        self.graphs: OrderedDict = OrderedDict()
        self.seen: OrderedDict = OrderedDict()
        self.failed: dict = {}
        self.lock = threading.Lock()

    def rows(self, x, plan, stream):
        """The rows of ``plan`` for the float32 series ``x`` queued on ``stream`` by the graph (None:
        not captured, the caller launches them)."""
        key = (id(plan), x.size)
        with self.lock:
            entry = self.graphs.get(key)
            if entry is None or entry.plan is not plan:
                if self.failed.get(key) is plan or self._first_call(key, plan):
                    return None
                entry = self._capture(plan, x.size, key)
                if entry is None:
                    return None
            self.graphs.move_to_end(key)
            x_in = self.inputs[x.size]
            x_in.data.copy_from_device_async(x.data, x.nbytes, stream)
            entry.graph.launch(stream)
            return entry.rows

    def _first_call(self, key, plan) -> bool:
        seen = self.seen.get(key)
        if seen is not None and seen() is plan:
            return False
        self.seen[key] = weakref.ref(plan)  # a plan seen once is not kept alive for it
        while len(self.seen) > GRAPHS_KEPT:
            self.seen.popitem(last=False)
        return True

    def _side_streams(self, count: int) -> tuple:
        import cupy

        while len(self.side) < count:
            self.side.append(cupy.cuda.Stream(non_blocking=True))
        return tuple(self.side[:count])

    def _capture(self, plan, n: int, key):
        """Capture ``plan``'s channels and rows at length ``n`` (None, and the plan marked, if the
        capture fails: it then runs launch by launch)."""
        import cupy

        from gwbatch.spiir.subbands import channelize as cut, nested_sources

        dp = device_plan(plan)
        sub_dp = device_plan(plan.nested) if plan.nested is not None else None
        side = self._side_streams(len(dp.launches) + (len(sub_dp.launches) if sub_dp is not None else 0))
        keep = [dp, sub_dp, _channel_constants(tuple(int(c) for c in plan.channels), self.device)]
        if plan.nested is not None:
            parent, sub = nested_sources(plan)
            keep.append(_nested_constants(tuple(int(v) for v in parent), tuple(int(v) for v in sub), self.device))
        with cupy.cuda.using_allocator(self.pool.malloc):
            if n not in self.inputs:
                self.inputs[n] = cupy.zeros(n, dtype=cupy.float32)
            x_in = self.inputs[n]
            with self.capture:
                self.capture.begin_capture()
                try:
                    rows = channel_rows_cuda(cut(x_in, plan.channels), plan, side=side)
                except Exception as exc:
                    with contextlib.suppress(Exception):
                        self.capture.end_capture()
                    return self._fail(key, plan, exc)
                try:
                    graph = self.capture.end_capture()
                except Exception as exc:  # the capture was invalidated
                    return self._fail(key, plan, exc)
        full = rows.base
        memory = cupy.cuda.UnownedMemory(full.data.ptr, full.nbytes, self, self.device)
        view = cupy.ndarray(full.shape, full.dtype, cupy.cuda.MemoryPointer(memory, 0), full.strides)
        entry = _Graph(plan, graph, view[:, ROW_MARGIN: ROW_MARGIN + rows.shape[1]], tuple(keep))
        del rows, full  # their memory goes back to the pool: the next capture of the stream may use it
        self.graphs[key] = entry
        while len(self.graphs) > GRAPHS_KEPT:
            self.graphs.popitem(last=False)
        return entry

    def _fail(self, key, plan, exc) -> None:
        self.failed[key] = plan
        logging.getLogger(__name__).warning("sub-band rows not captured in a CUDA graph (launched one by one): %s", exc)


_SPACES: dict = {}


def graph_space(device: int, stream_ptr: int) -> GraphSpace:
    """The :class:`GraphSpace` of a launch stream (one per device and stream, made on first use)."""
    key = (device, stream_ptr)
    space = _SPACES.get(key)
    if space is None:
        space = _SPACES.setdefault(key, GraphSpace(device))
    return space


def graph_rows(x, plan):
    """The rows of ``plan`` for the float32 CuPy series ``x`` from its CUDA graph on the current
    stream (None where it has none yet: the caller launches them)."""
    import cupy

    stream = cupy.cuda.get_current_stream()
    return graph_space(cupy.cuda.Device().id, stream.ptr).rows(x, plan, stream)
