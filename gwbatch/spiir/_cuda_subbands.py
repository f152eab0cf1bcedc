"""CUDA sub-band SPIIR: filters run in complex channels of a DFT filter bank.

What it computes is :mod:`gwbatch.spiir.subbands` (CPU twin: :func:`gwbatch.spiir.subbands.filter_subbands`):
``channelize`` cuts the whitened series into its channels; ``chan_iir<F, W>`` runs every channel row
(a template's filters of one channel); ``synthesize`` takes each template's rows back to the top rate.

``chan_iir<F, W>``: ``W`` lanes per row (``32 / W`` rows per warp), ``F`` filters per lane, the
first-order complex recurrence ``y[k] = a y[k-1] + X[k - d]`` and the row's sum ``sum_f b_f y_f[k]``
(8 FMAs per update), ``NB = 16`` samples a block, summed over the row's lanes by the transposing
shuffle butterfly of :mod:`gwbatch.spiir._cuda` (``fold`` / ``reduce``).  Input: the channels padded
in front with zeros, as two copies shifted by one sample read as ``float4`` (two complex samples),
so any delay is aligned.  A layout's launch may hold too few warps to fill the GPU, so each runs on
its own stream.

``synthesize``: a warp per template and time segment of ``SYNTH_SEGMENT`` channel samples, in tiles
of ``TJ``: the template's rows over the tile (and 4 + 5 samples either side) are staged in shared
memory, coalesced; ``U[j, q] = sum_c W_c[j] (-1)^(c j) e^{2 pi i c q / 32}`` with lanes 0-15 summing
the even channels and 16-31 the odd, swapped by one shuffle (``U[q] = E + O``, ``U[q + 16] = E - O``),
is kept for the tile in shared memory; then ``z[n D + r] = sum_m g[m D + r + H] U[n - m, (r + 16 m)
mod 32]`` (``g = D p``, ``H`` its centre, ``m`` in ``[-5, 4]``): lane ``r`` takes the even ``m`` on
column ``r``, lane ``r + 16`` the odd ones on column ``r + 16``, added by one shuffle.

Measured on one H200 (BNS, 1024 templates x 64 s, benchmarks/RESULTS.md "Sub-band SPIIR"): the
first form within 1.5e-6 of the peak of the float64 direct form but latency-bound (29.3 ms); this
form (streams, the synthesis' segments and staging, ``channelize``) within 1.6e-6, 16.7 ms against
the octave ladder's 18.3 ms in the same run (rows 7.5 ms, synthesis 9.1 ms).
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

NB = 16
THREADS = 128
#: Synthesis: output rows (low-rate samples) per shared-memory tile, and channel rows of one parity a
#: template may have (its channels of that parity, and a channel's parts beyond 32 F filters).
TJ = 40
MAX_PER_PARITY = 12  # gwbatch.spiir.subbands.MAX_ROWS_PER_PARITY (the bank keeps templates within it)
SYNTH_THREADS = 64
#: Low-rate samples of a synthesis warp (time segments fill the GPU).
SYNTH_SEGMENT = 512
#: Every layout compiled: ``(F, W)``.
LAYOUTS = tuple((f, 32) for f in (1, 2, 4, 8)) + tuple((f, w) for w in (4, 8) for f in (1, 2, 4))
OPTIONS = ("-std=c++17",)

SOURCE = r"""
// Channel rows: slot s (row rows[s] of out, channel input row chan[s]) holds W lanes of F filters;
// filter slot idx = warp * 32 F + f * 32 + lane (pack_slots' order).  y = a y + X[k - d], sum b y.
template <int F, int W>
__global__ void __launch_bounds__(128)
chan_iir(const float4* __restrict__ xs, const long long plane, const long long row4, const long long pad,
         const long long n_pad, const float2* __restrict__ a, const float2* __restrict__ b,
         const int* __restrict__ d, const int* __restrict__ chan, float2* __restrict__ out,
         const long long out_stride, const int* __restrict__ rows, const int n_slots, const long long n_valid,
         const int n_warps)
{
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (warp >= n_warps) return;
    constexpr int P = NB / W > 2 ? NB / W : 2;
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
        yr[f] = 0.0f; yi[f] = 0.0f;
        const long long base = pad - d[idx];
        const long long s = base & 1;
        at[f] = s * plane + (long long)ch * row4 + ((base - s) >> 1);
    }
    float2* dst = row >= 0 ? out + (long long)row * out_stride : nullptr;
    for (long long k0 = 0; k0 < n_pad; k0 += NB) {
        float accr[NB], acci[NB];
#pragma unroll
        for (int j = 0; j < NB; ++j) { accr[j] = 0.0f; acci[j] = 0.0f; }
#pragma unroll
        for (int f = 0; f < F; ++f) {
            float xv[2 * NB];
            const float4* src = xs + at[f] + (k0 >> 1);
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
                accr[j] = fmaf(br[f], nr, fmaf(-bi[f], ni, accr[j]));
                acci[j] = fmaf(br[f], ni, fmaf(bi[f], nr, acci[j]));
            }
        }
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

// Synthesis (module docstring): warp (template t = blockIdx.y, time segment) over its low-rate
// samples [seg0, seg1) in tiles of TJ.  rows_of / chan_of: (T, 2, MAX_PER_PARITY), the template's
// channel rows of each parity, valid ones first (-1 after), and their channels (0..31); taps g[0..160].
__global__ void __launch_bounds__(SYNTH_THREADS)
synthesize(const float2* __restrict__ w, const long long w_stride, const long long n_low,
           const int* __restrict__ rows_of, const int* __restrict__ chan_of, const float* __restrict__ taps,
           float2* __restrict__ z, const long long z_stride, const long long n_out, const long long seg_len)
{
    extern __shared__ float2 smem[];
    const int wib = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int t = blockIdx.y;
    const long long seg0 = ((long long)blockIdx.x * (SYNTH_THREADS / 32) + wib) * seg_len;
    if (seg0 >= n_low) return;
    const long long seg1 = min(n_low, seg0 + seg_len);
    constexpr int ROWS = TJ + 9;
    float2* Uw = smem + wib * (ROWS * 32 + 2 * MAX_PER_PARITY * ROWS);
    float2* Ws = Uw + ROWS * 32;  // (2 * MAX_PER_PARITY, ROWS): the template's rows over the tile
    const int half = lane >> 4, q = lane & 15;
    int row[MAX_PER_PARITY], odd[MAX_PER_PARITY];
    float twr[MAX_PER_PARITY], twi[MAX_PER_PARITY];
    int n_mine = 0, n_all = 0;
#pragma unroll
    for (int u = 0; u < MAX_PER_PARITY; ++u) {
        const int base = (t * 2 + half) * MAX_PER_PARITY + u;
        row[u] = rows_of[base];
        n_mine += row[u] >= 0;
        const int c = chan_of[base];
        odd[u] = c & 1;
        float s, co;
        sincospif((float)((c * q) & 31) / 16.0f, &s, &co);  // e^{2 pi i c q / 32}
        twr[u] = co; twi[u] = s;
    }
    n_all = n_mine + __shfl_xor_sync(FULL, n_mine, 16);
    // the rows of both parities, for the staged loads: even ones then odd ones
    const int n_even = __shfl_sync(FULL, n_mine, 0);
    float g[5];
#pragma unroll
    for (int i = 0; i < 5; ++i) {
        const int m = 2 * i - 4 - half;
        const int idx = m * 16 + q + 80;
        g[i] = (idx >= 0 && idx <= 160) ? taps[idx] : 0.0f;
    }
    float2* zt = z + (long long)t * z_stride;
    for (long long n0 = seg0; n0 < seg1; n0 += TJ) {
        // stage the template's rows for j in [n0 - 4, n0 + TJ + 5), coalesced along j
        for (int e = lane; e < n_all * ROWS; e += 32) {
            const int r = e / ROWS, jj = e - r * ROWS;
            const int par = r < n_even ? 0 : 1, u = r < n_even ? r : r - n_even;
            const int rr = rows_of[(t * 2 + par) * MAX_PER_PARITY + u];
            const long long j = n0 - 4 + jj;
            Ws[(par * MAX_PER_PARITY + u) * ROWS + jj] =
                (j >= 0 && j < n_low) ? __ldg(w + (long long)rr * w_stride + j) : make_float2(0.0f, 0.0f);
        }
        __syncwarp();
        for (int jj = 0; jj < ROWS; ++jj) {
            const int jodd = (int)((n0 - 4 + jj) & 1);
            float er = 0.0f, ei = 0.0f;
#pragma unroll
            for (int u = 0; u < MAX_PER_PARITY; ++u) {
                if (u >= n_mine) break;
                float2 v = Ws[(half * MAX_PER_PARITY + u) * ROWS + jj];
                if (odd[u] & jodd) { v.x = -v.x; v.y = -v.y; }
                er = fmaf(v.x, twr[u], fmaf(-v.y, twi[u], er));
                ei = fmaf(v.x, twi[u], fmaf(v.y, twr[u], ei));
            }
            const float pr = __shfl_xor_sync(FULL, er, 16), pi = __shfl_xor_sync(FULL, ei, 16);
            Uw[jj * 32 + lane] = half == 0 ? make_float2(er + pr, ei + pi) : make_float2(pr - er, pi - ei);
        }
        __syncwarp();
        const int tile = (int)min((long long)TJ, seg1 - n0);
        for (int nn = 0; nn < tile; ++nn) {
            float accr = 0.0f, acci = 0.0f;
#pragma unroll
            for (int i = 0; i < 5; ++i) {
                const int m = 2 * i - 4 - half;
                const float2 u = Uw[(nn + 4 - m) * 32 + lane];
                accr = fmaf(g[i], u.x, accr);
                acci = fmaf(g[i], u.y, acci);
            }
            accr += __shfl_xor_sync(FULL, accr, 16);
            acci += __shfl_xor_sync(FULL, acci, 16);
            const long long k = (n0 + nn) * 16 + q;
            if (half == 0 && k < n_out) zt[k] = make_float2(accr, acci);
        }
        __syncwarp();
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
"""


def chan_name(f: int, w: int) -> str:
    return f"chan_iir<{f}, {w}>"


NAME_EXPRESSIONS = tuple(chan_name(f, w) for f, w in LAYOUTS) + ("synthesize", "channelize")


def source() -> str:
    from gwbatch.spiir._cuda import REDUCTION

    return (REDUCTION + f"#define TJ {TJ}\n#define MAX_PER_PARITY {MAX_PER_PARITY}\n#define SYNTH_THREADS {SYNTH_THREADS}\n"
            + SOURCE)


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
class DevicePlan:
    """A :class:`~gwbatch.spiir.subbands.ChannelPlan` on the device: one launch per layout
    ``(F, W, a, b, d, channel, rows, n_slots)``, the synthesis tables and the taps."""

    launches: tuple
    rows_of: object
    chan_of: object
    taps: object
    pad: int
    n_rows: int
    streams: tuple


def device_plan(plan) -> DevicePlan:
    """The device arrays of ``plan`` (made once per plan object)."""
    import cupy

    from gwbatch.spiir._cuda import pack_slots
    from gwbatch.spiir.subbands import DECIMATION, prototype

    cached = _PLANS.get(id(plan))
    if cached is not None and cached[0] is plan:
        _PLANS.move_to_end(id(plan))
        return cached[1]
    a, b, d, source = plan.padded
    by_layout: dict = {}
    for i, row in enumerate(plan.rows):
        by_layout.setdefault(layout_for(row.a.size), []).append(i)
    launches = []
    for (f, w), members in sorted(by_layout.items()):
        members = np.array(members)
        width = min(a.shape[1], f * w)  # the layout's rows hold at most f w filters each
        packed = [cupy.asarray(pack_slots(v[members, :width], f, w, t))
                  for v, t in ((a, np.complex64), (b, np.complex64), (d, np.int32))]
        launches.append((f, w, *packed, cupy.asarray(source[members].astype(np.int32)),
                         cupy.asarray(members.astype(np.int32)), int(members.size)))
    per = plan.rows_of.shape[2]
    if per > MAX_PER_PARITY:
        raise ValueError(f"a template has {per} channel rows of one parity; the synthesis holds {MAX_PER_PARITY}")
    rows_of = np.full((plan.n_templates, 2, MAX_PER_PARITY), -1, np.int32)
    rows_of[:, :, :per] = plan.rows_of
    chan_of = np.where(rows_of >= 0, plan.row_channels[np.maximum(rows_of, 0)], 0)
    pad = int(max(int(r.d.max()) for r in plan.rows)) + NB
    dp = DevicePlan(tuple(launches), cupy.asarray(rows_of), cupy.asarray(chan_of.astype(np.int32)),
                    cupy.asarray((DECIMATION * prototype()).astype(np.float32)), pad, len(plan.rows),
                    tuple(cupy.cuda.Stream(non_blocking=True) for _ in launches))
    _PLANS[id(plan)] = (plan, dp)  # the plan is kept with its arrays, so its id is not reused meanwhile
    while len(_PLANS) > PLANS_KEPT:
        _PLANS.popitem(last=False)
    return dp


#: Device plans kept (least recently used dropped): a search filters each detector's bank in batches,
#: each batch a plan of its own, chunk after chunk.
PLANS_KEPT = 128
_PLANS: OrderedDict = OrderedDict()


def run_rows(xs, plane: int, row4: int, pad: int, n_pad: int, launches, out, n_valid: int, streams=None) -> None:
    """Every launch ``(f, w, a, b, d, channel, rows, n_slots)`` of ``chan_iir``, each on its own
    stream of ``streams`` when given (a layout's launch alone may not fill the GPU)."""
    import cupy

    mod = _module()
    current = cupy.cuda.get_current_stream()
    done = []
    for i, (f, w, a, b, d, chan, rows, n_slots) in enumerate(launches):
        n_warps = a.shape[0]
        stream = streams[i % len(streams)] if streams else current
        if streams:
            stream.wait_event(current.record())
        with stream:
            mod.get_function(chan_name(f, w))(
                (-(-n_warps * 32 // THREADS),), (THREADS,),
                (xs, cupy.int64(plane), cupy.int64(row4), cupy.int64(pad), cupy.int64(n_pad), a, b, d, chan, out,
                 cupy.int64(out.shape[1]), rows, cupy.int32(n_slots), cupy.int64(n_valid), cupy.int32(n_warps)))
        if streams:
            done.append(stream.record())
    for event in done:
        current.wait_event(event)


def synthesis_smem() -> int:
    rows = TJ + 9
    return (SYNTH_THREADS // 32) * (rows * 32 + 2 * MAX_PER_PARITY * rows) * 8


def run_synthesis(w, n_low: int, rows_of, chan_of, taps, z, n_out: int, segment: int = SYNTH_SEGMENT) -> None:
    import cupy

    n_templates = rows_of.shape[0]
    per_block = SYNTH_THREADS // 32
    segments = -(-n_low // segment)
    _module().get_function("synthesize")(
        (-(-segments // per_block), n_templates), (SYNTH_THREADS,),
        (w, cupy.int64(w.shape[1]), cupy.int64(n_low), rows_of, chan_of, taps, z, cupy.int64(z.shape[1]),
         cupy.int64(n_out), cupy.int64(segment)), shared_mem=synthesis_smem())


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


def channel_rows_cuda(xc, plan, streams: bool = True, only: int | None = None):
    """Every channel row of ``plan`` over the channels ``xc``: ``(rows, n_pad)`` complex64."""
    import cupy

    dp = device_plan(plan)
    n_low = xc.shape[1]
    n_pad = -(-n_low // NB) * NB
    xs, plane, row4 = shifted_channels(xc, dp.pad, n_pad)
    out = cupy.zeros((dp.n_rows, n_pad), dtype=cupy.complex64)
    launches = dp.launches if only is None else (dp.launches[only],)
    run_rows(xs, plane, row4, dp.pad, n_pad, launches, out, n_low, dp.streams if streams else None)
    return out


def synthesize_cuda(rows, plan, n_low: int, n_out: int, segment: int = SYNTH_SEGMENT):
    import cupy

    dp = device_plan(plan)
    z = cupy.empty((plan.n_templates, n_out), dtype=cupy.complex64)
    run_synthesis(rows, n_low, dp.rows_of, dp.chan_of, dp.taps, z, n_out, segment)
    return z


def filter_subbands_cuda(x, plan):
    """:func:`gwbatch.spiir.subbands.filter_subbands` on the GPU."""
    from gwbatch.spiir.subbands import channelize as cut

    xc = cut(x, plan.channels)
    return synthesize_cuda(channel_rows_cuda(xc, plan), plan, xc.shape[1], x.size)
