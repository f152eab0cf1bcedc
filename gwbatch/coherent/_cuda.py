"""CUDA maximum of the coherent SNR over the sky (seed 000 §III; twin of ``statistic._max_over_sky``).

Mapping.  One block per (candidate, group of ``32 TPT`` trials).  All trials of a candidate read the
same pivot sample, and each non-pivot detector ``j`` only within a window of ``W_j`` samples (the
spread of its arrival offset over the sky, at most twice the light travel time to the pivot) that
starts ``k step (j - pivot)`` later for trial ``k``.  The block first copies these windows into
shared memory, trial-fastest, so that the main loop reads them without bank conflicts.

Lanes are trials, warps take directions.  A direction's record (the non-pivot detectors' window
offsets as 16-bit fields, then the ``F+ x Fx`` null vector for three detectors or ``F+``, ``Fx`` for
more; one ``float4`` for two or three detectors) is uniform across a warp: the block stages tiles of
256 records in shared memory with coalesced loads and every lane reads them by broadcast, so the
sky table is read once per block for ``32 TPT`` trials rather than once per (candidate, trial) as
in the seed's warp-per-trial layout.  Each lane keeps the running maximum of its trials in
registers (first direction on ties); warps are combined through shared memory at the end.
Arithmetic is float32.
"""

from __future__ import annotations

import functools

import numpy as np

SOURCE = r"""
#define WARPS 8
#define TILE (32 * WARPS)
#define STRIDE 33

template <int D> struct Layout {
    static constexpr int WORDS = D / 2;                                // offsets of the D - 1 others
    static constexpr int GEO = D == 3 ? 3 : (D >= 4 ? 2 * D + 3 : 0);  // the projection
    static constexpr int NREC = (WORDS + GEO + 3) / 4 > 0 ? (WORDS + GEO + 3) / 4 : 1;
};

// The sky loop of one block: 32 (candidate, trial) tasks with pivot PIV, one per lane.
template <int D, int PIV>
__device__ __forceinline__ void sky_block(
    float2* win, long long (*row_start)[32], long long (*series)[32], float4* tile, float (*red_v)[32], int (*red_p)[32],
    const float2* __restrict__ snr, const long long n, const int n_slot, const int* __restrict__ cand,
    const long long* __restrict__ slot, const long long* __restrict__ sample,
    const float4* __restrict__ records, const int* __restrict__ win_start, const int* __restrict__ row_base,
    const int n_dir, const int n_trials1, const long long step, const long long lo, const long long span,
    const long long first, const long long n_tasks, float* __restrict__ out_rc, int* __restrict__ out_pix)
{
    constexpr int NREC = Layout<D>::NREC;
    constexpr int WORDS = Layout<D>::WORDS;
    int rb[D + 1];
#pragma unroll
    for (int j = 0; j <= D; ++j) rb[j] = row_base[PIV * (D + 1) + j];
    const int rows = rb[D];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const long long task = min(first + lane, n_tasks - 1);  // idle lanes repeat the last task
    const int c = cand[task / n_trials1];
    const long long k = task % n_trials1;
    const int s = (int)slot[c];
    const long long t = sample[c];

    // 1. where each (detector, lane) window starts, wrapped into [lo, lo + span), and its series
    if (warp == 0) {
#pragma unroll
        for (int j = 0; j < D; ++j) {
            const long long i = (t - lo + win_start[PIV * D + j] + k * step * (long long)(j - PIV)) % span;
            row_start[j][lane] = lo + (i < 0 ? i + span : i) - rb[j];
            series[j][lane] = ((long long)j * n_slot + s) * n;
        }
    }
    __syncthreads();
    // 2. the windows, lane-fastest in shared memory, row-fastest in the reads
    for (int e = threadIdx.x; e < rows * 32; e += blockDim.x) {
        const int r = e % rows, kk = e / rows;
        int j = 0;
#pragma unroll
        for (int q = 1; q < D; ++q) j += (r >= rb[q]) ? 1 : 0;
        long long i = row_start[j][kk] + r;
        if (i >= lo + span) i -= span;
        win[r * STRIDE + kk] = snr[series[j][kk] + i];
    }
    const long long tp = (t - lo) % span;
    const float2 zp = snr[((long long)PIV * n_slot + s) * n + lo + (tp < 0 ? tp + span : tp)];
    const float pivot_energy = zp.x * zp.x + zp.y * zp.y;
    int row0[D];
#pragma unroll
    for (int j = 0; j < D; ++j) row0[j] = rb[j] * STRIDE + lane;
    float best = -1.0f;
    int best_p = 0;

    const float4* rec = records + (long long)PIV * n_dir * NREC;
    for (int base_p = 0; base_p < n_dir; base_p += TILE) {
        __syncthreads();  // the windows are complete / the previous tile is consumed
        for (int e = threadIdx.x; e < TILE * NREC; e += blockDim.x) {
            const int p = base_p + e / NREC;
            tile[e] = p < n_dir ? __ldg(rec + (long long)base_p * NREC + e) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        __syncthreads();
        const int count = min(32, n_dir - base_p - warp * 32);
        const float4* mine = tile + warp * 32 * NREC;
#pragma unroll 2
        for (int q = 0; q < count; ++q) {
            float w[4 * NREC];
#pragma unroll
            for (int m = 0; m < NREC; ++m) {
                const float4 v = mine[q * NREC + m];
                w[4 * m] = v.x; w[4 * m + 1] = v.y; w[4 * m + 2] = v.z; w[4 * m + 3] = v.w;
            }
            const float* g = w + WORDS;
            float total = pivot_energy, ar = 0.0f, ai = 0.0f, br = 0.0f, bi = 0.0f;
#pragma unroll
            for (int j = 0; j < D; ++j) {
                float zr = zp.x, zi = zp.y;
                if (j != PIV) {
                    const int m = j - (j > PIV ? 1 : 0);  // index among the non-pivot detectors
                    const unsigned word = __float_as_uint(w[m >> 1]);
                    const float2 v = win[((m & 1) ? (word >> 16) : (word & 0xffffu)) + row0[j]];
                    zr = v.x; zi = v.y;
                    total = fmaf(zr, zr, fmaf(zi, zi, total));
                }
                if (D >= 3) { ar = fmaf(g[j], zr, ar); ai = fmaf(g[j], zi, ai); }
                if (D >= 4) { br = fmaf(g[D + j], zr, br); bi = fmaf(g[D + j], zi, bi); }
            }
            float coh = total;
            if (D == 3) coh = total - fmaf(ar, ar, ai * ai);
            if (D >= 4) coh = g[2 * D] * fmaf(ar, ar, ai * ai) + 2.0f * g[2 * D + 1] * fmaf(ar, br, ai * bi)
                              + g[2 * D + 2] * fmaf(br, br, bi * bi);
            if (coh > best) { best = coh; best_p = base_p + warp * 32 + q; }
        }
    }

    red_v[warp][lane] = best;
    red_p[warp][lane] = best_p;
    __syncthreads();
    if (warp == 0 && first + lane < n_tasks) {
        float v = red_v[0][lane];
        int pp = red_p[0][lane];
        for (int u = 1; u < WARPS; ++u) {
            const float x = red_v[u][lane];
            const int q = red_p[u][lane];
            if (x > v || (x == v && q < pp)) { v = x; pp = q; }
        }
        const long long out = (long long)c * n_trials1 + k;
        out_rc[out] = v;
        out_pix[out] = pp;
    }
}

// One launch for all pivots: block b runs tasks [block_first[b], block_first[b] + 32) of its pivot's
// flattened (candidate, trial) list (cand holds each pivot's candidates, concatenated).
template <int D>
__global__ void __launch_bounds__(TILE, MIN_BLOCKS)
coherent_max(const float2* __restrict__ snr, const long long n, const int n_slot,
             const int* __restrict__ block_pivot, const long long* __restrict__ block_first,
             const long long* __restrict__ pivot_tasks, const int* __restrict__ cand,
             const long long* __restrict__ slot, const long long* __restrict__ sample,
             const float4* __restrict__ records, const int* __restrict__ win_start,
             const int* __restrict__ row_base, const int n_dir, const int n_trials1, const long long step,
             const long long lo, const long long span, float* __restrict__ out_rc, int* __restrict__ out_pix)
{
    extern __shared__ float2 win[];
    __shared__ long long row_start[D][32];
    __shared__ long long series[D][32];
    __shared__ float4 tile[TILE * Layout<D>::NREC];
    __shared__ float red_v[WARPS][32];
    __shared__ int red_p[WARPS][32];
    const int piv = block_pivot[blockIdx.x];
    const long long first = block_first[blockIdx.x];
    // pivot_tasks[piv]: where the pivot's candidates start in cand (as tasks), and its task count
    const long long offset = pivot_tasks[2 * piv], n_tasks = pivot_tasks[2 * piv + 1];
    const int* cand_p = cand + offset / n_trials1;
#define SKY_CASE(P) case P: if (P < D) sky_block<D, (P < D ? P : 0)>(win, row_start, series, tile, red_v, red_p, snr, n, \
        n_slot, cand_p, slot, sample, records, win_start, row_base, n_dir, n_trials1, step, lo, span, first, \
        n_tasks, out_rc, out_pix); break;
    switch (piv) { SKY_CASE(0) SKY_CASE(1) SKY_CASE(2) SKY_CASE(3) }
#undef SKY_CASE
}
"""

WARPS = 8
MIN_BLOCKS = 2  # resident blocks per SM the compiler must allow (caps registers at 65536 / (256 x MIN_BLOCKS))
STRIDE = 33  # shared-memory row length in float2: 32 lanes plus one against bank conflicts
SHARED_LIMIT = 200 * 1024  # dynamic shared memory a block may ask for (H100/H200 allow 227 KB in all)
MAX_DETECTORS = 4
INSTANTIATIONS = tuple(range(1, MAX_DETECTORS + 1))


def kernel_name(n_det: int) -> str:
    return f"coherent_max<{n_det}>"


def record_floats(n_det: int) -> int:
    """Floats per direction record (a multiple of 4): offsets (16-bit pairs), then the projection."""
    geo = 3 if n_det == 3 else (2 * n_det + 3 if n_det >= 4 else 0)
    return 4 * max(1, -(-(n_det // 2 + geo) // 4))


@functools.cache
def _module():
    import cupy

    return cupy.RawModule(code=f"#define MIN_BLOCKS {MIN_BLOCKS}\n" + SOURCE, options=("-std=c++17",),
                          name_expressions=tuple(kernel_name(d) for d in INSTANTIATIONS))


def device_table(offsets: np.ndarray, projection: np.ndarray) -> dict:
    """Host-side layout of a sky table for the kernel: per pivot, each detector's window start
    (``start``, ``(D, D)``), shared-memory rows (``row_base``, ``(D, D+1)``, prefix sums of the
    window widths, the pivot's own width 0) and one record per direction (``records``,
    ``(D, P, record_floats(D))`` float32): the non-pivot detectors' row offsets within their
    windows, times ``STRIDE``, as 16-bit fields in the leading words, then the projection."""
    n_det, n_dir, _ = offsets.shape
    if n_det > MAX_DETECTORS:
        raise ValueError(f"the CUDA kernel handles up to {MAX_DETECTORS} detectors, not {n_det}")
    start = offsets.min(axis=1).astype(np.int32)  # (pivot, j)
    width = (offsets.max(axis=1) - start + 1).astype(np.int32)
    width[np.arange(n_det), np.arange(n_det)] = 0
    if width.max() * STRIDE >= 1 << 16:
        raise ValueError(f"arrival windows of {width.max()} samples exceed the kernel's 16-bit offsets: "
                         f"lower the sample rate of the SNR series")
    row_base = np.zeros((n_det, n_det + 1), np.int32)
    row_base[:, 1:] = np.cumsum(width, axis=1)
    words = n_det // 2
    records = np.zeros((n_det, n_dir, record_floats(n_det)), np.float32)
    for piv in range(n_det):
        rel = (offsets[piv] - start[piv]).astype(np.uint32)[:, [j for j in range(n_det) if j != piv]] * STRIDE
        packed = np.zeros((n_dir, max(words, 1)), np.uint32)
        for m in range(n_det - 1):
            packed[:, m >> 1] |= rel[:, m] << (16 * (m & 1))
        records[piv, :, :words].view(np.uint32)[:] = packed[:, :words]
        records[piv, :, words:words + projection.shape[1]] = projection
    return dict(start=start, row_base=row_base, records=records)


def launch_plan(pivot: np.ndarray, n_det: int, n_trials: int, rows: np.ndarray) -> dict:
    """Host-side launch layout (uploaded once per call): candidates grouped by pivot, each pivot's
    (candidate, trial) tasks in blocks of 32, and the shared memory a block needs.  ``pivot`` is the
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
    return dict(blocks=int(block_pivot.size), shared=shared, order=cupy.asarray(order),
                pivot_tasks=cupy.asarray(pivot_tasks), block_pivot=cupy.asarray(block_pivot),
                block_first=cupy.asarray(block_first.astype(np.int64)))


def device_sky_table(table) -> dict:
    """The kernel's layout of ``table`` on the device, made once per table."""
    import cupy

    if "cuda-kernel" not in table.device:
        host = device_table(table.offsets, table.projection)
        table.device["cuda-kernel"] = {k: cupy.asarray(v) for k, v in host.items()} | {"rows": host["row_base"][:, -1]}
    return table.device["cuda-kernel"]


def launch(snr, slot, sample, table, plan: dict, n_trials, step, lo, span, rho_c2, pixel) -> None:
    """The kernel alone, on a prepared :func:`launch_plan`, writing ``rho_c2`` and ``pixel``."""
    import cupy

    n_det, n_slot, n = snr.shape
    dev = device_sky_table(table)
    kernel = _module().get_function(kernel_name(n_det))
    if plan["shared"] > 48 * 1024:  # beyond the default 48 KB a kernel opts in (cuFuncSetAttribute)
        kernel.max_dynamic_shared_size_bytes = plan["shared"]
    kernel((plan["blocks"],), (32 * WARPS,), (
        snr, cupy.int64(n), cupy.int32(n_slot), plan["block_pivot"], plan["block_first"], plan["pivot_tasks"],
        plan["order"], slot, sample, dev["records"], dev["start"], dev["row_base"], cupy.int32(table.n_dir),
        cupy.int32(n_trials + 1), cupy.int64(step), cupy.int64(lo), cupy.int64(span), rho_c2, pixel),
        shared_mem=plan["shared"])


def max_over_sky_cuda(snr, slot, sample, pivot, table, n_trials, step, lo, span, pivot_host=None):
    """CuPy twin of ``statistic._max_over_sky``: ``(rho_c2, pixel)``, each ``(C, K+1)``.
    ``pivot_host``: the pivots on the host, when the caller has them (saves a copy back)."""
    import cupy

    rho_c2 = cupy.empty((slot.size, n_trials + 1), dtype=cupy.float32)
    pixel = cupy.empty((slot.size, n_trials + 1), dtype=cupy.int32)
    if slot.size == 0:
        return rho_c2, pixel
    pivots = cupy.asnumpy(pivot) if pivot_host is None else pivot_host
    plan = launch_plan(pivots, snr.shape[0], n_trials, device_sky_table(table)["rows"])
    launch(snr, slot, sample, table, plan, n_trials, step, lo, span, rho_c2, pixel)
    return rho_c2, pixel
