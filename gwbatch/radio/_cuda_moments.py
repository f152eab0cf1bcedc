"""CUDA kernels of the radio search's memory-bound steps, each one read of its input with no
temporaries of its size (issue 28's throughput):

- ``segment_moments``: clipped moments of segments of rows (the cleaning's block means and σ, the
  dedispersed trials' block moments).  One thread block per (row, segment) runs every pass, so a
  segment is read from memory once and again from L2; the unclipped first pass is returned too.
- ``normalise_rows``: ``(x - baseline) * scale`` (or ``/ scale``) with the baseline interpolated
  between block means as it goes, from a strided view, into rows of any pitch, invalid samples and
  the columns past the input 0.
- ``sk_sums``: sums of ``z²`` and ``z⁴`` of the normalised samples of spectral-kurtosis blocks,
  read from the spectra directly.
- ``boxcar_mad``: the median absolute deviation of a trial's boxcar sums at chosen starts (the
  measured boxcar σ, :func:`gwbatch.radio.pulses.boxcar_excess`): one thread block per (width, row)
  gathers them from prefix sums into shared memory and sorts them there (bitonic), twice.

CPU twin: :func:`gwbatch.radio.condition.clipped_moments` (and :func:`gwbatch.radio.condition.normalise`,
:func:`gwbatch.radio.condition.sk_sums`, :func:`gwbatch.radio.pulses.block_moments`,
:func:`gwbatch.radio.pulses.normalise_trials`), whose NumPy expressions
``tests/test_radio_conditioning.py`` compares these with on the GPU.
"""

from __future__ import annotations

import functools

import numpy as np

THREADS = 256
ROWS = 8  # rows per thread of normalise_rows
OPTIONS = ("-std=c++17",)

SOURCE = r"""
#define THREADS 256

// Sums of three doubles over the block (every thread gets them).
__device__ __forceinline__ void block_sum3(double& a, double& b, double& c)
{
    __shared__ double part[3][THREADS / 32];
    for (int off = 16; off > 0; off >>= 1) {
        a += __shfl_down_sync(0xffffffffu, a, off);
        b += __shfl_down_sync(0xffffffffu, b, off);
        c += __shfl_down_sync(0xffffffffu, c, off);
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) { part[0][warp] = a; part[1][warp] = b; part[2][warp] = c; }
    __syncthreads();
    a = 0.0; b = 0.0; c = 0.0;
    for (int w = 0; w < THREADS / 32; ++w) { a += part[0][w]; b += part[1][w]; c += part[2][w]; }
    __syncthreads();
}

// Where sample t (an exact integer in double) lies between block centres c (nb of them): the block
// on the right (its left neighbour is right - 1) and its weight, in the arithmetic of
// gwbatch.radio.condition.interpolation (searchsorted side right, clipped; the weight in double,
// clipped to [0, 1], cast to float), so that the baseline equals the CPU twin's bit for bit.
__device__ __forceinline__ void locate(const double* __restrict__ c, int nb, double t, int& right, float& weight)
{
    if (nb == 1) { right = 0; weight = 0.0f; return; }
    int lo = 0, hi = nb;  // lo: how many centres are <= t
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (c[mid] <= t) lo = mid + 1; else hi = mid;
    }
    right = lo < 1 ? 1 : (lo > nb - 1 ? nb - 1 : lo);
    double w = __ddiv_rn(__dsub_rn(t, c[right - 1]), __dsub_rn(c[right], c[right - 1]));
    weight = (float)(w < 0.0 ? 0.0 : (w > 1.0 ? 1.0 : w));
}

// The baseline of a row's block means mr between blocks right - 1 and right (baseline_at: float32,
// no contraction; one block: its mean).
__device__ __forceinline__ float baseline(const float* __restrict__ mr, int right, float weight)
{
    const int left = right > 0 ? right - 1 : 0;
    return __fadd_rn(__fmul_rn(mr[left], __fsub_rn(1.0f, weight)), __fmul_rn(mr[right], weight));
}

// Clipped moments of segment blockIdx.x of row blockIdx.y: element i of the segment is
// x[row * x_pitch + (start + i) * x_step], valid where valid[row * valid_pitch + start + i] (all when
// valid is null).  Pass 0 takes every valid sample; pass p > 0 those within clip sigma of pass p-1's
// mean.  mean = s1 / max(n, 1), sd = sqrt(max(s2 / n - mean^2, 0)) in float64.
extern "C" __global__ void segment_moments(
    const float* __restrict__ x, long long x_pitch, long long x_step,
    const unsigned char* __restrict__ valid, long long valid_pitch,
    const long long* __restrict__ seg_start, const int* __restrict__ seg_len, int n_seg,
    int passes, double clip,
    double* __restrict__ mean_out, double* __restrict__ sd_out,
    double* __restrict__ plain_mean, double* __restrict__ plain_sd, long long* __restrict__ count_out)
{
    const long long row = blockIdx.y;
    const int seg = blockIdx.x;
    const long long start = seg_start[seg];
    const int len = seg_len[seg];
    const float* xr = x + row * x_pitch + start * x_step;
    const unsigned char* vr = valid ? valid + row * valid_pitch + start : nullptr;
    double centre = 0.0, limit = 0.0, mean = 0.0, sd = 0.0;
    for (int p = 0; p <= passes; ++p) {
        double n = 0.0, s1 = 0.0, s2 = 0.0;
        int i = threadIdx.x;
        for (; i + 3 * THREADS < len; i += 4 * THREADS) {  // four loads in flight before any is used
            float v[4];
            bool ok[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                v[u] = __ldg(xr + (long long)(i + u * THREADS) * x_step);
                ok[u] = vr == nullptr || vr[i + u * THREADS];
            }
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const double d = (double)v[u];
                if (ok[u] && (p == 0 || fabs(d - centre) <= limit)) { n += 1.0; s1 += d; s2 += d * d; }
            }
        }
        for (; i < len; i += THREADS) {
            const double d = (double)__ldg(xr + (long long)i * x_step);
            if ((vr == nullptr || vr[i]) && (p == 0 || fabs(d - centre) <= limit)) { n += 1.0; s1 += d; s2 += d * d; }
        }
        block_sum3(n, s1, s2);
        const double m = n > 1.0 ? n : 1.0;
        mean = s1 / m;
        sd = sqrt(fmax(s2 / m - mean * mean, 0.0));
        if (p == 0 && threadIdx.x == 0) {
            const long long k = row * n_seg + seg;
            if (plain_mean) { plain_mean[k] = mean; plain_sd[k] = sd; }
            if (count_out) count_out[k] = (long long)n;
        }
        centre = mean;
        limit = clip * sd;
    }
    if (threadIdx.x == 0) {
        mean_out[row * n_seg + seg] = mean;
        sd_out[row * n_seg + seg] = sd;
    }
}

// out[row, j] for j < out_cols: for j < n_cols and valid, (x - base) * scale[row] (or / scale[row]
// with divide) where x = x[row * x_pitch + j * x_step] and base is the row's block means at centres
// interpolated at j; else 0.  valid_out (when given) gets the same layout: 1 where a sample was
// valid.  A thread takes one column of ROWS rows: where j lies between the centres is found once.
#define ROWS 8
extern "C" __global__ void normalise_rows(
    const float* __restrict__ x, long long x_pitch, long long x_step,
    const unsigned char* __restrict__ valid, long long valid_pitch,
    const double* __restrict__ centres, const float* __restrict__ means, int n_blocks,
    const float* __restrict__ scale, int divide, int n_rows,
    int n_cols, float* __restrict__ out, long long out_pitch, int out_cols, unsigned char* __restrict__ valid_out)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= out_cols) return;
    int right = 0;
    float weight = 0.0f;
    if (j < n_cols) locate(centres, n_blocks, (double)j, right, weight);
    const long long first = (long long)blockIdx.y * ROWS;
    unsigned char ok[ROWS];
    float xv[ROWS];
#pragma unroll
    for (int k = 0; k < ROWS; ++k)  // every row's loads in flight before any is used
        ok[k] = first + k < n_rows && j < n_cols ? (valid ? valid[(first + k) * valid_pitch + j] : 1) : 0;
#pragma unroll
    for (int k = 0; k < ROWS; ++k)
        xv[k] = ok[k] ? __ldg(x + (first + k) * x_pitch + (long long)j * x_step) : 0.0f;
#pragma unroll
    for (int k = 0; k < ROWS; ++k) {
        const long long row = first + k;
        if (row < n_rows) {
            float v = 0.0f;
            if (ok[k]) {
                const float d = __fsub_rn(xv[k], baseline(means + row * n_blocks, right, weight));
                v = divide ? __fdiv_rn(d, scale[row]) : __fmul_rn(d, scale[row]);
            }
            out[row * out_pitch + j] = v;
            if (valid_out) valid_out[row * out_pitch + j] = ok[k];
        }
    }
}

// Spectral-kurtosis sums of row blockIdx.x, one warp per block b of m samples t from block_start[b]:
// p = z * z (float32), z = (x - baseline(t)) * inv[row] as normalise_rows makes it; s1 = sum p,
// s2 = sum p * p in float64.
extern "C" __global__ void sk_sums(
    const float* __restrict__ x, long long x_pitch, const long long* __restrict__ block_start, int m,
    const double* __restrict__ centres, const float* __restrict__ means, int n_blocks,
    const float* __restrict__ inv, int n_sk, double* __restrict__ s1_out, double* __restrict__ s2_out)
{
    const long long row = blockIdx.x;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float* mr = means + row * n_blocks;
    const float* xr = x + row * x_pitch;
    const float s = inv[row];
    for (int b = warp; b < n_sk; b += THREADS / 32) {
        const long long t0 = block_start[b];
        double s1 = 0.0, s2 = 0.0;
        for (int i = lane; i < m; i += 32) {
            const long long t = t0 + i;
            int right;
            float weight;
            locate(centres, n_blocks, (double)t, right, weight);
            const float z = __fmul_rn(__fsub_rn(__ldg(xr + t), baseline(mr, right, weight)), s);
            const float p = __fmul_rn(z, z);
            s1 += (double)p;
            s2 += (double)__fmul_rn(p, p);
        }
        for (int off = 16; off > 0; off >>= 1) {
            s1 += __shfl_down_sync(0xffffffffu, s1, off);
            s2 += __shfl_down_sync(0xffffffffu, s2, off);
        }
        if (lane == 0) {
            s1_out[row * n_sk + b] = s1;
            s2_out[row * n_sk + b] = s2;
        }
    }
}

#define MAD_BOXCARS 8192

// Ascending bitonic sort of v[0, n) in shared memory (n a power of two) by the whole thread block.
__device__ void bitonic_sort(float* v, int n)
{
    for (int k = 2; k <= n; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                const int p = i ^ j;
                if (p > i) {
                    const float a = v[i], b = v[p];
                    if ((a > b) == ((i & k) == 0)) { v[i] = b; v[p] = a; }
                }
            }
            __syncthreads();
        }
    }
}

// Median of the n smallest of v (sorted), as the twin takes it: half the sum of the two middle ones.
__device__ __forceinline__ float middle(const float* v, int n)
{
    return 0.5f * (v[(n - 1) / 2] + v[n / 2]);
}

// One block per (width 2^w, row): the boxcar sums prefix[s + width] - prefix[s] (double, then float)
// at min(n - width + 1, MAD_BOXCARS) starts s = k (n - width + 1) / count spread over the row's n
// samples, those whose samples are all valid (holes[s + width] == holes[s]); their median absolute
// deviation (float) and how many there were.
extern "C" __global__ void boxcar_mad(
    const double* __restrict__ prefix, const double* __restrict__ holes, long long pitch, long long n,
    int n_widths, float* __restrict__ mad, int* __restrict__ valid)
{
    __shared__ float v[MAD_BOXCARS];
    __shared__ int n_valid;
    const float inf = __int_as_float(0x7f800000);
    const int w = blockIdx.x;
    const long long row = blockIdx.y;
    const double* pr = prefix + row * pitch;
    const double* hr = holes + row * pitch;
    const long long width = 1LL << w;
    const long long positions = n - width + 1;
    const int c = positions < MAD_BOXCARS ? (int)positions : MAD_BOXCARS;
    int size = 1;
    while (size < c) size <<= 1;
    if (threadIdx.x == 0) n_valid = 0;
    __syncthreads();
    int mine = 0;
    for (int k = threadIdx.x; k < size; k += blockDim.x) {
        float x = inf;
        if (k < c) {
            const long long s = (long long)k * positions / c;
            if (hr[s + width] == hr[s]) { x = (float)(pr[s + width] - pr[s]); ++mine; }
        }
        v[k] = x;
    }
    atomicAdd(&n_valid, mine);
    __syncthreads();
    bitonic_sort(v, size);
    const int m = n_valid;
    const float centre = m > 0 ? middle(v, m) : 0.0f;
    __syncthreads();
    for (int k = threadIdx.x; k < size; k += blockDim.x) v[k] = k < m ? fabsf(v[k] - centre) : inf;
    __syncthreads();
    bitonic_sort(v, size);
    if (threadIdx.x == 0) {
        mad[row * n_widths + w] = m > 0 ? middle(v, m) : __int_as_float(0x7fffffff);
        valid[row * n_widths + w] = m;
    }
}
"""

#: Boxcar starts per (row, width) that :func:`boxcar_mad` sorts in shared memory at most.
MAD_BOXCARS = 8192
MAD_THREADS = 1024


@functools.cache
def _module():
    import cupy

    return cupy.RawModule(code=SOURCE, options=OPTIONS)


def _kernel(name: str):
    return _module().get_function(name)


def _device(a, dtype):
    """``a`` (NumPy or CuPy) as a C-contiguous CuPy array of ``dtype``."""
    import cupy

    return cupy.ascontiguousarray(cupy.asarray(a, dtype=dtype))


def _rows(x):
    """``x`` (2-D CuPy float32) as (pointer array, row pitch, element step) in elements."""
    item = x.dtype.itemsize
    if x.ndim != 2 or x.dtype.kind != "f" or item != 4 or x.strides[0] % item or x.strides[1] % item:
        raise ValueError(f"expected a 2-D float32 array with whole-element strides, got {x.dtype} {x.shape}")
    return x, x.strides[0] // item, x.strides[1] // item


def segment_moments(x, starts: np.ndarray, lengths: np.ndarray, passes: int, clip: float, valid=None):
    """Clipped moments of segments ``[starts[s], starts[s] + lengths[s])`` of every row of ``x``
    (2-D float32, any strides; ``valid``: a C-contiguous bool array of ``x``'s shape or None):
    ``(mean, sd, plain_mean, plain_sd, count)``, float64 ``(rows, segments)`` and the valid count."""
    import cupy

    x, pitch, step = _rows(x)
    rows, n_seg = x.shape[0], int(len(starts))
    if valid is not None and (valid.shape != x.shape or not valid.flags.c_contiguous):
        raise ValueError("valid must be C-contiguous and of the series' shape")
    mean, sd, plain_mean, plain_sd = (cupy.empty((rows, n_seg), cupy.float64) for _ in range(4))
    count = cupy.empty((rows, n_seg), cupy.int64)
    _kernel("segment_moments")(
        (n_seg, rows), (THREADS,),
        (x, np.int64(pitch), np.int64(step), valid, np.int64(0 if valid is None else valid.shape[1]),
         cupy.asarray(starts, dtype=cupy.int64), cupy.asarray(lengths, dtype=cupy.int32), np.int32(n_seg),
         np.int32(passes), np.float64(clip), mean, sd, plain_mean, plain_sd, count))
    return mean, sd, plain_mean, plain_sd, count


def clipped_moments(x, valid, passes: int, clip: float):
    """Clipped and plain (first-pass) moments along the last axis of ``x`` (``valid``: broadcastable
    to ``x``, or None), float64: ``(mean, sd, plain_mean, plain_sd)`` (the CPU twin's contract)."""
    import cupy

    n = x.shape[-1]
    rows = x.reshape(-1, n)
    keep = None if valid is None else cupy.ascontiguousarray(cupy.broadcast_to(valid, x.shape).reshape(-1, n), dtype=bool)
    mean, sd, plain_mean, plain_sd, _ = segment_moments(rows, np.zeros(1, np.int64), np.array([n]), passes, clip,
                                                        valid=keep)
    shape = x.shape[:-1]
    return mean.reshape(shape), sd.reshape(shape), plain_mean.reshape(shape), plain_sd.reshape(shape)


def normalise_rows(x, centres: np.ndarray, means, scale, *, divide: bool = False, valid=None, out=None,
                   valid_out=None):
    """``(x - baseline) * scale`` (``/ scale`` with ``divide``) of every row of ``x`` (2-D float32, any
    strides), the baseline of column ``j`` being the row's block ``means`` at ``centres`` (host,
    columns of ``x``) interpolated at ``j`` as :func:`gwbatch.radio.condition.baseline_at` does;
    ``scale`` one per row; invalid samples 0.  Written into ``out`` (2-D float32, unit element step,
    at least ``x``'s columns: the rest set to 0), a new array by default; ``valid_out`` (uint8,
    ``out``'s layout) gets the valid mask when given."""
    import cupy

    x, pitch, step = _rows(x)
    rows, n_cols = x.shape
    if out is None:
        out = cupy.empty((rows, n_cols), dtype=cupy.float32)
    if out.ndim != 2 or out.dtype != cupy.float32 or out.strides[1] != 4 or out.shape[0] != rows or out.shape[1] < n_cols:
        raise ValueError("out must be float32 (rows, >= columns) with unit element step")
    out_pitch = out.strides[0] // 4
    if valid_out is not None and (valid_out.dtype != cupy.uint8 or valid_out.strides != (out_pitch, 1)
                                  or valid_out.shape != out.shape):
        raise ValueError("valid_out must be uint8 in out's layout")
    if valid is not None and (valid.shape != x.shape or not valid.flags.c_contiguous):
        raise ValueError("valid must be C-contiguous and of the series' shape")
    means = _device(means, cupy.float32)
    _kernel("normalise_rows")(
        (-(-out.shape[1] // THREADS), -(-rows // ROWS)), (THREADS,),
        (x, np.int64(pitch), np.int64(step), valid, np.int64(0 if valid is None else valid.shape[1]),
         _device(centres, cupy.float64), means, np.int32(means.shape[1]), _device(scale, cupy.float32).ravel(),
         np.int32(divide), np.int32(rows), np.int32(n_cols), out, np.int64(out_pitch), np.int32(out.shape[1]), valid_out))
    return out


def sk_sums(x, block_starts: np.ndarray, m: int, centres: np.ndarray, means, inverse):
    """Spectral-kurtosis sums ``(s1, s2)``, float64 ``(rows, blocks)``, of the ``m`` samples from each
    of ``block_starts`` of every row of C-contiguous float32 ``x``, normalised as :func:`normalise_rows`
    does (block ``means`` at ``centres``, times ``inverse``)."""
    import cupy

    x, pitch, step = _rows(x)
    if step != 1:
        raise ValueError("sk_sums reads rows with unit element step")
    rows, n_sk = x.shape[0], int(len(block_starts))
    means = _device(means, cupy.float32)
    s1, s2 = cupy.empty((rows, n_sk), cupy.float64), cupy.empty((rows, n_sk), cupy.float64)
    _kernel("sk_sums")(
        (rows,), (THREADS,),
        (x, np.int64(pitch), _device(block_starts, cupy.int64), np.int32(m), _device(centres, cupy.float64), means,
         np.int32(means.shape[1]), _device(inverse, cupy.float32).ravel(), np.int32(n_sk), s1, s2))
    return s1, s2


def compile_cases() -> list[tuple[str, str, tuple[str, ...]]]:
    """What tests/test_cuda_compile.py compiles with nvcc: ``(label, source, name expressions)``."""
    return [("moments", SOURCE, ())]


def boxcar_mad(prefix, holes, n_widths: int):
    """For every row of the prefix sums ``prefix`` and ``holes`` (2-D float64 CuPy, C order: values
    and invalid samples of ``n = columns - 1`` samples, a leading 0 column) and each width ``2^w``,
    ``w < n_widths`` (at most ``n``): the median absolute deviation (float32) of the boxcar sums at
    up to :data:`MAD_BOXCARS` starts spread evenly over the row (``k (n - 2^w + 1) // count``) whose
    samples are all valid, and their number (int32), both ``(rows, n_widths)``."""
    import cupy

    rows, pitch = prefix.shape
    if holes.shape != prefix.shape or not (prefix.flags.c_contiguous and holes.flags.c_contiguous):
        raise ValueError("need C-ordered prefix sums of one shape")
    if (1 << (n_widths - 1)) > pitch - 1:
        raise ValueError(f"a boxcar of {1 << (n_widths - 1)} samples does not fit in {pitch - 1}")
    mad = cupy.empty((rows, n_widths), cupy.float32)
    valid = cupy.empty((rows, n_widths), cupy.int32)
    _kernel("boxcar_mad")((n_widths, rows), (MAD_THREADS,),
                          (prefix, holes, np.int64(pitch), np.int64(pitch - 1), np.int32(n_widths), mad, valid))
    return mad, valid
