"""CUDA sky loop over many clusters: ``skyloop<N>`` and ``reduce_clusters`` (seed 003 algorithm 1).

What it computes (the contract of :mod:`gwbatch.burst.skyloop`).  For every cluster of a batch and
every sky direction, the sky statistic ``AA`` of the cluster's pixels in that direction (``-1`` for
a rejected direction), and per cluster the largest one and its direction (ties to the lowest
index).  Inputs: the pixels' delayed amplitudes ``v`` (complex64, ``(N, P_total, 2 D + 1)``:
detector, pixel, delay), the clusters' pixel ``offsets`` (int32, ``(C + 1,)``), the relative
sensitivities ``s`` (float32, ``(P_total, N)``), the sky table's delay indices ``ml`` (int32) and
antenna patterns ``fp``, ``fx`` (float32), each ``(N, n_dir)``, and the cuts (``En``, ``Es``,
``subcut``, ``delta``).  ``skyloop`` writes ``partial`` (uint64, ``(C, warps)``, each warp's best
key), ``reduce_clusters`` the cluster's best key ``best`` (uint64, ``(C,)``), which :func:`unpack`
turns into the statistic (float32) and the direction (int64).  ``N = 2..MAX_DETECTORS`` detectors
is a template parameter.

CPU twin: :func:`gwbatch.burst.skyloop.skyloop_max` (numba, float64).

Mapping (seed 003 §3.2): one thread per sky direction; every thread walks all the clusters of the
launch, so a direction's delay indices and antenna patterns are read once, coalesced, and stay in
registers.  A pixel's relative sensitivities are the same for every thread (broadcast loads); its
delayed amplitudes are gathered at ``v[i, j, ml[i, l]]``: neighbouring directions of the nested
HEALPix order have neighbouring delays, so a warp's gathers fall in a few cache sectors of a
``2 D + 1`` row.  The rejection of a direction and the running maximum are predicates, not
branches (the seed's ``msh = (AA > stat)`` blend).

Per cluster the best (statistic, direction) is one 64-bit key, ``orderable(stat) << 32 |
~direction`` (the largest statistic, then the lowest direction), reduced over the warp with
shuffles and written once per warp; a second kernel reduces a cluster's warps.  The DPF likelihood
is evaluated without rotating the patterns: with ``A = (f+.u)^2 + (f+.w)^2``, ``B`` the same for
``fx`` and ``C = (f+.u)(fx.u) + (f+.w)(fx.w)``, the DPF projections are
``(A + B)/2 +/- T``, ``T = ((gpp - gxx)(A - B)/2 + 2 gpx C) / r``.  Arithmetic is float32.
"""

from __future__ import annotations

import functools

import numpy as np

BLOCK = 256

SOURCE = r"""
__device__ __forceinline__ unsigned int orderable(float f) {
    const unsigned int b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ unsigned long long warp_max(unsigned long long key) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long other = __shfl_xor_sync(0xffffffffu, key, o);
        key = other > key ? other : key;
    }
    return key;
}

template <int N>
__global__ void __launch_bounds__(256) skyloop(
    const float2* __restrict__ v, const int* __restrict__ offsets, const float* __restrict__ s,
    const int* __restrict__ ml, const float* __restrict__ fp, const float* __restrict__ fx,
    const int n_clusters, const int n_pix, const int n_lag, const int n_dir,
    const float en, const float es, const float subcut, const float delta,
    unsigned long long* __restrict__ partial, const int n_warps)
{
    const int l0 = blockIdx.x * blockDim.x + threadIdx.x;
    const bool live = l0 < n_dir;
    const int l = live ? l0 : n_dir - 1;
    long long base[N];
    float p[N], x[N];
#pragma unroll
    for (int i = 0; i < N; ++i) {
        base[i] = (long long)i * n_pix * n_lag + ml[i * n_dir + l];
        p[i] = fp[i * n_dir + l];
        x[i] = fx[i * n_dir + l];
    }
    const int warp = l0 >> 5;
    for (int c = 0; c < n_clusters; ++c) {
        const int first = offsets[c], last = offsets[c + 1];
        float eo = 0.f, ls = 0.f, ln = 0.f, m = 0.f, lo = 0.f;
        for (int j = first; j < last; ++j) {
            float e_sum = 0.f, e_max = 0.f, gpp = 0.f, gxx = 0.f, gpx = 0.f;
            float pu = 0.f, pw = 0.f, xu = 0.f, xw = 0.f;
#pragma unroll
            for (int i = 0; i < N; ++i) {
                const float2 a = v[base[i] + (long long)j * n_lag];
                const float e = a.x * a.x + a.y * a.y;
                e_sum += e;
                e_max = fmaxf(e_max, e);
                const float w = __ldg(s + j * N + i);
                const float pi = p[i] * w, xi = x[i] * w;
                gpp += pi * pi; gxx += xi * xi; gpx += pi * xi;
                pu += pi * a.x; pw += pi * a.y; xu += xi * a.x; xw += xi * a.y;
            }
            const float c2 = gpp - gxx, s2 = 2.f * gpx;
            const float r = sqrtf(c2 * c2 + s2 * s2);
            const float A = pu * pu + pw * pw, B = xu * xu + xw * xw, C = pu * xu + pw * xw;
            const float T = r > 0.f ? (0.5f * c2 * (A - B) + s2 * C) / r : 0.5f * (A - B);
            const float npp = 0.5f * (gpp + gxx + r);
            const float nxx = fmaxf(0.5f * (gpp + gxx - r), 0.f);
            const float dp = npp > 0.f ? npp : 1.f;
            const float dx0 = nxx + delta * npp;
            const float dx = dx0 > 0.f ? dx0 : 1.f;
            const float like = (0.5f * (A + B) + T) / dp + (0.5f * (A + B) - T) / dx;
            const float sel = e_sum > en ? 1.f : 0.f;
            const float sub = e_sum - e_max;
            m += sel;
            eo += sel * e_sum;
            ls += sel * sub;
            ln += (sub > es ? sel : 0.f) * e_sum;
            lo += sel * like;
        }
        const float lsum = eo - ls;
        const float aa = ls * ln / (lsum > 0.f ? lsum : 1.f);
        const bool pass = m > 0.f && lsum > 0.f && (aa - m) / (aa + m) >= subcut;
        const float stat = pass ? aa / (fabsf(aa) + fabsf(eo - lo) + 2.f * m * (eo - ln) / eo) : -1.f;
        unsigned long long key = live ? (((unsigned long long)orderable(stat) << 32) | (0xffffffffu - (unsigned int)l)) : 0ull;
        key = warp_max(key);
        if ((threadIdx.x & 31) == 0) partial[(long long)c * n_warps + warp] = key;
    }
}

extern "C" __global__ void reduce_clusters(const unsigned long long* __restrict__ partial, const int n_warps,
                                           unsigned long long* __restrict__ best)
{
    __shared__ unsigned long long red[32];
    const int c = blockIdx.x;
    unsigned long long key = 0ull;
    for (int w = threadIdx.x; w < n_warps; w += blockDim.x) {
        const unsigned long long k = partial[(long long)c * n_warps + w];
        key = k > key ? k : key;
    }
    key = warp_max(key);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = key;
    __syncthreads();
    if (threadIdx.x < 32) {
        key = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : 0ull;
        key = warp_max(key);
        if (threadIdx.x == 0) best[c] = key;
    }
}
"""

MAX_DETECTORS = 6
#: The kernels every compile instantiates: one sky loop per detector count (``reduce_clusters`` is
#: ``extern "C"``).
NAME_EXPRESSIONS = tuple(f"skyloop<{n}>" for n in range(2, MAX_DETECTORS + 1))
#: NVRTC options of every compile (the compile test passes them to nvcc as well).
OPTIONS = ("-std=c++17",)


@functools.lru_cache(maxsize=None)
def _module():
    import cupy

    return cupy.RawModule(code=SOURCE, options=OPTIONS, name_expressions=NAME_EXPRESSIONS)


def compile_cases() -> list[tuple[str, str, tuple[str, ...]]]:
    """What tests/test_cuda_compile.py compiles with nvcc, as :func:`_module` compiles it:
    ``(label, source, name expressions)``."""
    return [("skyloop + reduce_clusters", SOURCE, NAME_EXPRESSIONS)]


def device_table(table) -> dict:
    """The sky table's device copies, made once per table."""
    import cupy

    if "ml" not in table.device:
        table.device.update(ml=cupy.asarray(table.ml, dtype=cupy.int32),
                            fp=cupy.asarray(table.fplus, dtype=cupy.float32),
                            fx=cupy.asarray(table.fcross, dtype=cupy.float32))
    return table.device


def unpack(keys):
    """``(stat, direction)`` from the reduced keys (device arrays)."""
    import cupy

    hi = (keys >> 32).astype(cupy.uint32)
    bits = cupy.where(hi & cupy.uint32(0x80000000), hi & cupy.uint32(0x7FFFFFFF), ~hi)
    stat = bits.view(cupy.float32)
    direction = (cupy.uint32(0xFFFFFFFF) - (keys & cupy.uint64(0xFFFFFFFF)).astype(cupy.uint32)).astype(cupy.int64)
    return stat, direction


def launch(amplitudes, offsets, weights, table, cuts, keys, partial) -> None:
    """Run the sky loop into ``keys`` (uint64 ``(C,)``), with ``partial`` scratch (uint64 ``(C, warps)``)."""
    n_det, n_pix, n_lag = (int(d) for d in amplitudes.shape)
    if not 2 <= n_det <= MAX_DETECTORS:
        raise ValueError(f"the CUDA sky loop takes 2 to {MAX_DETECTORS} detectors, got {n_det}")
    dev = device_table(table)
    n_dir = table.n_dir
    n_cl = int(offsets.shape[0]) - 1
    blocks = (n_dir + BLOCK - 1) // BLOCK
    n_warps = blocks * (BLOCK // 32)
    kernel = _module().get_function(f"skyloop<{n_det}>")
    kernel((blocks,), (BLOCK,), (
        amplitudes, offsets, weights, dev["ml"], dev["fp"], dev["fx"], np.int32(n_cl), np.int32(n_pix),
        np.int32(n_lag), np.int32(n_dir), np.float32(cuts.pixel_energy), np.float32(cuts.subnet_energy),
        np.float32(cuts.subcut), np.float32(cuts.delta), partial, np.int32(n_warps)))
    _module().get_function("reduce_clusters")((n_cl,), (256,), (partial, np.int32(n_warps), keys))


def skyloop_max_cuda(batch, table, cuts):
    """Per cluster the largest sky statistic and its direction (device arrays; float32 statistic)."""
    import cupy

    n_cl = batch.n_clusters
    if n_cl == 0:
        return cupy.zeros(0, cupy.float32), cupy.zeros(0, cupy.int64)
    amplitudes = cupy.ascontiguousarray(cupy.asarray(batch.amplitudes, dtype=cupy.complex64))
    offsets = cupy.asarray(np.asarray(batch.offsets), dtype=cupy.int32)
    weights = cupy.ascontiguousarray(cupy.asarray(batch.weights, dtype=cupy.float32))
    n_warps = ((table.n_dir + BLOCK - 1) // BLOCK) * (BLOCK // 32)
    keys = cupy.empty(n_cl, dtype=cupy.uint64)
    partial = cupy.empty((n_cl, n_warps), dtype=cupy.uint64)
    launch(amplitudes, offsets, weights, table, cuts, keys, partial)
    return unpack(keys)
