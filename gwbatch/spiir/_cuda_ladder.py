"""CUDA multi-rate SPIIR in one kernel: every rung of the rate ladder of a template, tile by tile, on chip.

What it computes is :func:`gwbatch.spiir.multirate.filter_multirate` (CPU twin:
:func:`gwbatch.spiir.multirate.filter_multirate` with the numba kernel per rung): the whitened chunk
down the ladder (``x_k``, the CUDA ``decimate2`` of :mod:`gwbatch.spiir._cuda`), rung ``k``'s filters
``y[t] = a y[t-1] + b x_k[t - d]`` (zero state and input before sample 0) summed into ``Y_k``, and
from the lowest rung ``K`` up ``acc_k = Y_k + interpolate2(acc_{k+1})`` (zero beyond ``[0, n_k)``),
``acc_0`` the output.  The per-rung kernels of :mod:`gwbatch.spiir._cuda_multirate` write each rung's
``acc_k`` to memory and read it back; here only ``acc_0`` leaves the chip.

Layout.  One warp per template.  Time goes in tiles of ``T_0`` = :data:`TILE` top-rate samples,
``T_k = T_0 / 2^k`` at rung ``k``, the rungs from ``K`` to 0 in each tile.  Rung ``k``'s tile ``i``
is samples ``[i T_k + L_k, (i+1) T_k + L_k)``: each rung runs ``L_k`` samples ahead of the one above
(:func:`leads`: ``L_{k+1} >= L_k / 2 + ODD_TAPS``, even), so the interpolation of a tile of rung
``k`` finds every sample of ``acc_{k+1}`` it needs in rung ``k+1``'s shared buffer: the tile just
made and the :data:`HISTORY` samples before it.  The tiles start at ``i = -1`` (the samples
``[0, L_k)``), where rung 0 has nothing to write.

A rung's filters are spread over the warp as ``GF = 32 / GT`` filter lanes times ``GT`` time lanes,
each time lane ``M = T_k / GT`` consecutive samples (chosen per rung and template by a cost model,
:func:`lane_shapes`: few filters and many samples split time, many filters and few samples split
filters).  With ``GT > 1`` a filter's tile is the first-order recurrence solved in parallel in time
(seed 002): each time lane runs its samples from a zero state to its end state, a warp scan of
``s_p = a^M s_{p-1} + e_p`` (the carried state of the previous tile entering at lane 0) gives
every lane its true start state, and the samples are run again from it, summed over the lane's
filters; the filter lanes' sums are then added by shuffles.  Filter states between tiles live in
global memory, coefficients too (read once per tile).  The interpolation runs with its own lane
map: each lane one (even, odd) pair of output samples, its 26-sample window read from shared memory.
"""

from __future__ import annotations

import functools

import numpy as np

from gwbatch.spiir import _cuda

#: Top-rate samples per tile: a tile of rung k is TILE >> k samples (at least 2 on the lowest rung,
#: so ladders of up to 8 rungs below the top; at most 16 samples a lane at the top rate).
TILE = 512
#: Samples of rung k+1 kept before its tile for rung k's interpolation (at least 26: checked by
#: :func:`leads`).
HISTORY = 32
#: Templates (warps) per block.
WARPS = 4
#: Rungs at most (the top and 8 below: TILE >> 8 = 2 samples a tile on the lowest).
MAX_RUNGS = 9
OPTIONS = _cuda.OPTIONS
#: Time lanes a rung may use: 2^0 .. 2^5.
LOG_LANES = tuple(range(6))

SOURCE = r"""
#define FULL 0xffffffffu

// Rung filters of one template for one tile: Y[p M + j] (shared, T_k = GT M samples) = sum over the
// template's filters f0 <= f < f1 of y_f at the tile's samples t_tile + p M + j; states[f] carries
// y_f from tile to tile.  Lane = g GT + p: filter lane g (filters f0 + g, f0 + g + GF, ...), time lane p.
template <int M, int GT>
__device__ __forceinline__ void rung_filters(const float* __restrict__ xk, const long long nk, const long long t_tile,
                                             const float2* __restrict__ fa, const float2* __restrict__ fb,
                                             const int* __restrict__ fd, float2* __restrict__ states,
                                             const long long f0, const long long f1, float2* __restrict__ Y,
                                             const int lane)
{
    constexpr int GF = 32 / GT;
    const int p = lane % GT, g = lane / GT;
    const long long tb = t_tile + (long long)p * M;
    float accr[M], acci[M];
#pragma unroll
    for (int j = 0; j < M; ++j) { accr[j] = 0.0f; acci[j] = 0.0f; }
    for (long long base = f0; base < f1; base += GF) {
        const long long f = base + g;
        const bool ok = f < f1;
        const float2 a = ok ? fa[f] : make_float2(0.0f, 0.0f);
        const float2 b = ok ? fb[f] : make_float2(0.0f, 0.0f);
        const int d = ok ? fd[f] : 0;
        const float2 carry = ok ? states[f] : make_float2(0.0f, 0.0f);
        float xv[M];
#pragma unroll
        for (int j = 0; j < M; ++j) {
            const long long t = tb + j - d;
            xv[j] = (t >= 0 && t < nk) ? __ldg(xk + t) : 0.0f;
        }
        float sr = carry.x, si = carry.y;  // the lane's start state
        if (GT > 1) {
            float er = 0.0f, ei = 0.0f;  // pass 1: the lane's samples from a zero state
#pragma unroll
            for (int j = 0; j < M; ++j) {
                const float nr = fmaf(a.x, er, fmaf(-a.y, ei, b.x * xv[j]));
                const float ni = fmaf(a.x, ei, fmaf(a.y, er, b.y * xv[j]));
                er = nr; ei = ni;
            }
            float pr = a.x, pi = a.y;  // a^M
#pragma unroll
            for (int m = 1; m < M; m <<= 1) {
                const float qr = pr * pr - pi * pi, qi = 2.0f * pr * pi;
                pr = qr; pi = qi;
            }
            if (p == 0) {  // the state carried from the previous tile enters at lane 0
                er = fmaf(pr, carry.x, fmaf(-pi, carry.y, er));
                ei = fmaf(pr, carry.y, fmaf(pi, carry.x, ei));
            }
#pragma unroll
            for (int off = 1; off < GT; off <<= 1) {  // inclusive scan: s_p = a^M s_{p-1} + e_p
                const float ur = __shfl_up_sync(FULL, er, off, GT), ui = __shfl_up_sync(FULL, ei, off, GT);
                if (p >= off) {
                    er = fmaf(pr, ur, fmaf(-pi, ui, er));
                    ei = fmaf(pr, ui, fmaf(pi, ur, ei));
                }
                const float qr = pr * pr - pi * pi, qi = 2.0f * pr * pi;
                pr = qr; pi = qi;
            }
            const float ur = __shfl_up_sync(FULL, er, 1, GT), ui = __shfl_up_sync(FULL, ei, 1, GT);
            if (p > 0) { sr = ur; si = ui; }
            if (ok && p == GT - 1) states[f] = make_float2(er, ei);
        }
#pragma unroll
        for (int j = 0; j < M; ++j) {  // pass 2: the lane's samples from its true start state
            const float nr = fmaf(a.x, sr, fmaf(-a.y, si, b.x * xv[j]));
            const float ni = fmaf(a.x, si, fmaf(a.y, sr, b.y * xv[j]));
            sr = nr; si = ni;
            accr[j] += sr; acci[j] += si;
        }
        if (GT == 1 && ok) states[f] = make_float2(sr, si);
    }
#pragma unroll
    for (int off = GT; off < 32; off <<= 1) {  // the filter lanes' sums
#pragma unroll
        for (int j = 0; j < M; ++j) {
            accr[j] += __shfl_xor_sync(FULL, accr[j], off);
            acci[j] += __shfl_xor_sync(FULL, acci[j], off);
        }
    }
#pragma unroll
    for (int j = 0; j < M; ++j)
        if (j % GF == g) Y[p * M + j] = make_float2(accr[j], acci[j]);
}

#define RUNG_CASE(M, LG) case (M) * 64 + (LG): rung_filters<(M), (1 << (LG))>(xk, nk, t_tile, fa, fb, fd, states, f0, f1, Y, lane); break;
#define RUNG_CASES(M) RUNG_CASE(M, 0) RUNG_CASE(M, 1) RUNG_CASE(M, 2) RUNG_CASE(M, 3) RUNG_CASE(M, 4) RUNG_CASE(M, 5)

__device__ __forceinline__ void run_rung(const int m, const int lg, const float* __restrict__ xk, const long long nk,
                                         const long long t_tile, const float2* __restrict__ fa,
                                         const float2* __restrict__ fb, const int* __restrict__ fd,
                                         float2* __restrict__ states, const long long f0, const long long f1,
                                         float2* __restrict__ Y, const int lane)
{
    switch (m * 64 + lg) {
        RUNG_CASES(1) RUNG_CASES(2) RUNG_CASES(4) RUNG_CASES(8) RUNG_CASES(16)
        default: break;
    }
}

// One warp per template (rows[w]); rungs 0..K, TILE top-rate samples a tile (module docstring).
// Per rung k: x_k at xs + xoff[k] (nk[k] samples), lead lk[k], the template's filters
// [foff[k (T + 1) + row], foff[k (T + 1) + row + 1]) of fa, fb, fd, states; lane shape log2(GT) in
// shape[k T + row].  Output: out[row * out_stride + t], t < n0.
extern "C" __global__ void __launch_bounds__(32 * WARPS)
spiir_ladder(const float* __restrict__ xs, const long long* __restrict__ xoff, const long long* __restrict__ nk,
             const int* __restrict__ lk, const float2* __restrict__ fa, const float2* __restrict__ fb,
             const int* __restrict__ fd, float2* __restrict__ states, const long long* __restrict__ foff,
             const unsigned char* __restrict__ shape, const int* __restrict__ rows, const int n_templates,
             const int K, const long long n_tiles, float2* __restrict__ out, const long long out_stride,
             const long long n0)
{
    extern __shared__ float2 smem[];
    const int lane = threadIdx.x & 31;
    const int w = blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (w >= n_templates) return;
    const int row = rows[w];
    int per_warp = TILE;
    for (int k = 1; k <= K; ++k) per_warp += (TILE >> k) + HISTORY;
    float2* const base = smem + (threadIdx.x >> 5) * per_warp;
    for (int i = lane; i < per_warp; i += 32) base[i] = make_float2(0.0f, 0.0f);
    // the template's per-rung tables, read once: filter range, lane shape, lead, length, input offset
    __shared__ long long rung_f0[WARPS][MAX_RUNGS], rung_f1[WARPS][MAX_RUNGS], rung_n[WARPS][MAX_RUNGS];
    __shared__ long long rung_x[WARPS][MAX_RUNGS];
    __shared__ int rung_lg[WARPS][MAX_RUNGS], rung_lead[WARPS][MAX_RUNGS];
    const int wb = threadIdx.x >> 5;
    if (lane <= K) {
        const long long fi = (long long)lane * (n_templates + 1) + row;
        rung_f0[wb][lane] = foff[fi];
        rung_f1[wb][lane] = foff[fi + 1];
        rung_n[wb][lane] = nk[lane];
        rung_x[wb][lane] = xoff[lane];
        rung_lg[wb][lane] = shape[(long long)lane * n_templates + row];
        rung_lead[wb][lane] = lk[lane];
    }
    __syncwarp();
    // from the first tile in which every rung's samples start at or before 0
    long long first = -1;
    for (int k = 1; k <= K; ++k) first = min(first, -(long long)((rung_lead[wb][k] + (TILE >> k) - 1) / (TILE >> k)));
    for (long long tile = first; tile < n_tiles; ++tile) {
        int at = per_warp;  // rung k's buffer starts at ``at``: rung K's last, rung 0's first
        for (int k = K; k >= 0; --k) {
            const int Tk = TILE >> k;
            at -= k ? Tk + HISTORY : Tk;
            float2* const buf = base + at;
            float2* const Y = k ? buf + HISTORY : buf;
            if (k) {  // keep the last HISTORY samples of the previous tile in front
                const float2 v = buf[Tk + lane];
                __syncwarp();
                buf[lane] = v;
                __syncwarp();
            } else if (tile < 0) {
                continue;
            }
            const long long t_tile = tile * Tk + rung_lead[wb][k];
            const long long n_k = rung_n[wb][k];
            const int lg = rung_lg[wb][k];
            run_rung(Tk >> lg, lg, xs + rung_x[wb][k], n_k, t_tile, fa, fb, fd, states, rung_f0[wb][k], rung_f1[wb][k],
                     Y, lane);
            __syncwarp();
            if (k == K) {  // acc_K = Y_K, zero beyond [0, n_K)
                for (int q = lane; q < Tk; q += 32) {
                    const long long t = t_tile + q;
                    if (t < 0 || t >= n_k) Y[q] = make_float2(0.0f, 0.0f);
                }
            } else {  // acc_k = Y_k + acc_{k+1} interpolated, one (even, odd) pair a lane
                const float2* const below = base + at + (k ? Tk + HISTORY : Tk);  // rung k+1's buffer
                // acc_{k+1}[j] is at below[j - jb]; the tile's pair q is samples 2j, 2j + 1 with j = t_tile / 2 + q
                const long long jb = tile * (Tk >> 1) + rung_lead[wb][k + 1] - HISTORY;
                const int c0 = (int)(t_tile / 2 - jb);
                for (int q = lane; q < (Tk >> 1); q += 32) {
                    const long long t = t_tile + 2 * q;
                    const float2* const win = below + c0 + q;
                    float2 e = Y[2 * q], o = Y[2 * q + 1];
                    const float2 m = win[0];
                    e.x = fmaf(EVEN_GAIN, m.x, e.x);
                    e.y = fmaf(EVEN_GAIN, m.y, e.y);
#pragma unroll
                    for (int i = 0; i < ODD_TAPS; ++i) {
                        const float2 lo = win[-i], hi = win[1 + i];
                        o.x = fmaf(ODD[i], lo.x + hi.x, o.x);
                        o.y = fmaf(ODD[i], lo.y + hi.y, o.y);
                    }
                    if (t < 0 || t >= n_k) e = make_float2(0.0f, 0.0f);
                    if (t + 1 < 0 || t + 1 >= n_k) o = make_float2(0.0f, 0.0f);
                    if (k) {
                        Y[2 * q] = e;
                        Y[2 * q + 1] = o;
                    } else if (t < n0) {
                        float2* const dst = out + (long long)row * out_stride + t;
                        if (t + 1 < n0) {
                            __stcs(reinterpret_cast<float4*>(dst), make_float4(e.x, e.y, o.x, o.y));
                        } else {
                            *dst = e;
                        }
                    }
                }
            }
            __syncwarp();
        }
    }
}
"""

KERNEL = "spiir_ladder"


def source() -> str:
    even, odd = _cuda.interpolation_taps()
    constants = (f"#define TILE {TILE}\n#define HISTORY {HISTORY}\n#define WARPS {WARPS}\n#define MAX_RUNGS {MAX_RUNGS}\n"
                 f"#define EVEN_GAIN {float(even)!r}f\n#define ODD_TAPS {odd.size}\n"
                 "__constant__ float ODD[ODD_TAPS] = {" + ", ".join(f"{float(v)!r}f" for v in odd) + "};\n")
    return constants + SOURCE


@functools.cache
def _compiled(text: str):
    import cupy

    return cupy.RawModule(code=text, options=OPTIONS)


def _kernel():
    return _compiled(source()).get_function(KERNEL)


def compile_cases() -> list[tuple[str, str, tuple[str, ...]]]:
    """What tests/test_cuda_compile.py compiles with nvcc (``extern "C"``: no name expressions)."""
    return [("spiir_ladder", source(), ())]


def leads(levels: int) -> np.ndarray:
    """``L_k``: how many samples rung ``k``'s tiles run ahead (``L_0 = 0``; each the even number at
    least ``L_{k-1} / 2 + ODD_TAPS``), so that a tile's interpolation reads rung ``k``'s samples
    ``[i T_k + L_{k-1} / 2 - ODD_TAPS + 1, (i + 1) T_k + L_k)``, all in its buffer."""
    odd = _cuda.interpolation_taps()[1].size
    lk = [0]
    for _ in range(levels):
        need = lk[-1] // 2 + odd
        lk.append(need + need % 2)
    lk = np.asarray(lk, dtype=np.int32)
    assert HISTORY == 32  # the kernel moves the history one sample a lane
    if levels and int(np.max(lk[1:] - lk[:-1] // 2 + odd - 1)) > HISTORY:
        raise ValueError(f"the ladder's interpolation reaches further back than HISTORY ({HISTORY}) samples")
    return lk


def lane_shapes(counts: np.ndarray, tile: int) -> np.ndarray:
    """log2 of the time lanes ``GT`` per template for a rung of ``tile`` samples a tile, from the
    templates' filter counts on it: the shape of least modelled instructions per lane (a filter
    costs its samples once with ``GT = 1``, twice plus a scan of ``log2 GT`` steps otherwise; the
    filter lanes' sums cost a shuffle step per doubling), with at most 16 samples a lane."""
    best = np.zeros(counts.shape, dtype=np.uint8)
    cost = np.full(counts.shape, np.inf)
    for lg in LOG_LANES:
        gt = 1 << lg
        m = tile // gt
        if m < 1 or m > 16 or m * gt != tile:
            continue
        iters = -(-counts // (32 // gt))
        per = (12 * m + 14 * lg + 6 * int(np.log2(m)) + 16) if gt > 1 else (6 * m + 12)
        c = iters * per + 4 * m * (5 - lg)
        better = c < cost
        best[better], cost[better] = lg, c[better]
    return best


class LadderPlan:
    """A bank's filters packed for :func:`filter_ladder_cuda` on the current device: per rung the
    templates' filters one after the other (``a``, ``b``, ``d``), their offsets, the lane shapes and
    the order of the templates (most work first, so a block's warps finish together)."""

    def __init__(self, bank):
        import cupy

        sets, levels, n = bank.level_sets, bank.levels, bank.size
        if levels < 1 or (TILE >> levels) < 2:
            raise ValueError(f"the fused ladder takes 1 to {int(np.log2(TILE)) - 1} rungs below the top, not {levels}")
        a_parts, b_parts, d_parts, offsets, shapes, work = [], [], [], [], [], np.zeros(n)
        start = 0
        for k in range(levels + 1):
            if k in sets:
                a, b, d = sets[k]
                counts = (b != 0).sum(axis=1)
                keep = np.arange(a.shape[1])[None, :] < counts[:, None]
                a_parts.append(a[keep])
                b_parts.append(b[keep])
                d_parts.append(d[keep])
            else:
                counts = np.zeros(n, dtype=np.int64)
            offsets.append(start + np.concatenate([[0], np.cumsum(counts)]))
            start += int(counts.sum())
            shape = lane_shapes(counts, TILE >> k)
            shapes.append(shape)
            work += counts * (TILE >> k)
        self.levels = levels
        self.n_filters = start
        self.a = cupy.asarray(np.concatenate(a_parts).astype(np.complex64))
        self.b = cupy.asarray(np.concatenate(b_parts).astype(np.complex64))
        self.d = cupy.asarray(np.concatenate(d_parts).astype(np.int32))
        self.offsets = cupy.asarray(np.concatenate(offsets).astype(np.int64))
        self.shapes = cupy.asarray(np.concatenate(shapes).astype(np.uint8))
        self.rows = cupy.asarray(np.argsort(-work, kind="stable").astype(np.int32))
        self.leads = cupy.asarray(leads(levels))


def shared_bytes(levels: int) -> int:
    """Dynamic shared memory of a block: each warp's rung buffers."""
    per_warp = TILE + sum((TILE >> k) + HISTORY for k in range(1, levels + 1))
    return WARPS * per_warp * 8


def filter_ladder_cuda(x, bank, plan: LadderPlan | None = None):
    """``bank``'s top-rate output for whitened ``x`` (CuPy float32): ``(templates, x.size)``
    complex64, :func:`gwbatch.spiir.multirate.filter_multirate` within float32 rounding."""
    import cupy

    plan = LadderPlan(bank) if plan is None else plan
    xs = [cupy.ascontiguousarray(x, dtype=cupy.float32)]
    for _ in range(plan.levels):
        xs.append(_cuda.decimate2(xs[-1]))
    sizes = np.array([v.size for v in xs], dtype=np.int64)
    flat = cupy.concatenate(xs)
    n0 = int(sizes[0])
    n_templates = bank.size
    stride = n0 + n0 % 2
    out = cupy.empty((n_templates, stride), dtype=cupy.complex64)
    states = cupy.zeros(plan.n_filters, dtype=cupy.complex64)
    n_tiles = -(-n0 // TILE)
    _kernel()((-(-n_templates // WARPS),), (32 * WARPS,),
              (flat, cupy.asarray(np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)),
               cupy.asarray(sizes), plan.leads, plan.a, plan.b, plan.d, states, plan.offsets, plan.shapes,
               plan.rows, np.int32(n_templates), np.int32(plan.levels), np.int64(n_tiles), out, np.int64(stride),
               np.int64(n0)),
              shared_mem=shared_bytes(plan.levels))
    return out[:, :n0]
