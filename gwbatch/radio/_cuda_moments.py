"""CuPy kernels of the radio cleaning's two memory-bound steps, each one read of the spectra with no
temporaries: the sums of a clipped-moment pass (:func:`gwbatch.radio.condition.moments`) and the
normalisation (:func:`gwbatch.radio.condition.normalise`).  Their NumPy twins are the array
expressions those functions use on the host; ``tests/test_radio_conditioning.py`` compares them."""

from __future__ import annotations

import functools

import cupy as cp


@functools.cache
def _sums():
    """Per row: ``(count, sum, sum of squares)`` of ``x`` where ``keep`` and ``|x - centre| <= limit``
    (float64 accumulation), as a complex128 whose real part is the sum and imaginary the sum of squares
    (one pass; the count is a second kernel)."""
    total = cp.ReductionKernel(
        "T x, bool keep, float64 centre, float64 limit", "complex128 out",
        "(keep && fabs((double)x - centre) <= limit) ? thrust::complex<double>((double)x, (double)x * (double)x)"
        " : thrust::complex<double>(0.0, 0.0)",
        "a + b", "out = a", "thrust::complex<double>(0.0, 0.0)", "gwbatch_radio_clipped_sums")
    count = cp.ReductionKernel(
        "T x, bool keep, float64 centre, float64 limit", "int64 out",
        "(keep && fabs((double)x - centre) <= limit) ? 1 : 0", "a + b", "out = a", "0", "gwbatch_radio_clipped_count")
    return total, count


def clipped_sums(x, keep, centre, limit):
    """``(count, sum, sum of squares)`` along the last axis of the samples of ``x`` (float32) that are
    ``keep`` and within ``limit`` of ``centre`` (both broadcast against ``x`` without its last axis)."""
    total, count = _sums()
    centre = cp.asarray(centre, dtype=cp.float64)[..., None]
    limit = cp.asarray(limit, dtype=cp.float64)[..., None]
    sums = total(x, keep, centre, limit, axis=-1)
    return count(x, keep, centre, limit, axis=-1), sums.real, sums.imag


@functools.cache
def _normalise():
    return cp.ElementwiseKernel(
        "T x, int32 left, float32 weight, raw T means, int32 nblocks, raw T scale, int64 ncols", "T out",
        "const long long row = i / ncols;"
        "const int right = left + 1 < nblocks ? left + 1 : nblocks - 1;"
        "const T base = means[row * nblocks + left] * (1 - weight) + means[row * nblocks + right] * weight;"
        "out = (x - base) * scale[row];",
        "gwbatch_radio_normalise")


def normalise(x, left, weight, means, scale):
    """``(x - baseline) * scale`` in one pass: the baseline of column ``j`` is ``means[:, left[j]]`` and
    ``means[:, left[j] + 1]`` weighted ``1 - weight[j]`` and ``weight[j]``; ``scale`` per row."""
    out = cp.empty(x.shape, dtype=cp.float32)
    _normalise()(x, cp.asarray(left, dtype=cp.int32), cp.asarray(weight, dtype=cp.float32),
                 cp.ascontiguousarray(means, dtype=cp.float32), means.shape[1],
                 cp.ascontiguousarray(scale, dtype=cp.float32).ravel(), x.shape[1], out)
    return out
