"""CuPy kernels of the radio cleaning's memory-bound steps, each one read of its array with no
temporaries: the passes of the clipped moments (float64 count, sum and sum of squares of the samples
kept, by reduction kernels) and the normalisation ``(x - baseline) * scale`` (an elementwise kernel
that interpolates the baseline between block means as it goes).

CPU twin: :func:`gwbatch.radio.condition.clipped_moments` (and :func:`gwbatch.radio.condition.normalise`),
whose NumPy expressions ``tests/test_radio_conditioning.py`` compares these with on the GPU.
"""

from __future__ import annotations

import functools

#: The test of a kept sample: valid, and within ``limit`` of ``centre``.
_SUM = "(keep && fabs((double)x - centre) <= limit)"


@functools.cache
def _reductions():
    import cupy

    total = cupy.ReductionKernel(
        "T x, bool keep, float64 centre, float64 limit", "complex128 out",
        f"{_SUM} ? thrust::complex<double>((double)x, (double)x * (double)x) : thrust::complex<double>(0.0, 0.0)",
        "a + b", "out = a", "thrust::complex<double>(0.0, 0.0)", "gwbatch_radio_clipped_sums")
    count = cupy.ReductionKernel(
        "T x, bool keep, float64 centre, float64 limit", "int64 out", f"{_SUM} ? 1 : 0", "a + b", "out = a", "0",
        "gwbatch_radio_clipped_count")
    return total, count


def clipped_moments(x, valid, passes: int, clip: float):
    """Mean and σ along the last axis of ``x`` (float64): one pass over the ``valid`` samples (all when
    None), then ``passes`` over those within ``clip`` σ of the last mean (the CPU twin's contract)."""
    import cupy

    total, count = _reductions()
    keep = valid if valid is not None else cupy.ones((1,) * x.ndim, dtype=bool)
    centre, limit = cupy.zeros(x.shape[:-1]), cupy.full(x.shape[:-1], cupy.inf)
    for _ in range(passes + 1):
        sums = total(x, keep, centre[..., None], limit[..., None], axis=-1)
        n = cupy.maximum(count(x, keep, centre[..., None], limit[..., None], axis=-1), 1)
        mean = sums.real / n
        std = cupy.sqrt(cupy.maximum(sums.imag / n - mean * mean, 0.0))
        centre, limit = mean, clip * std
    return mean, std


@functools.cache
def _normalise():
    import cupy

    return cupy.ElementwiseKernel(
        "T x, int32 left, float32 weight, raw T means, int32 nblocks, raw T scale, int64 ncols", "T out",
        "const long long row = i / ncols;"
        "const int right = left + 1 < nblocks ? left + 1 : nblocks - 1;"
        "const T base = means[row * nblocks + left] * (1 - weight) + means[row * nblocks + right] * weight;"
        "out = (x - base) * scale[row];",
        "gwbatch_radio_normalise")


def normalise(x, left, weight, means, scale):
    """``(x - baseline) * scale`` in one pass: column ``j``'s baseline is ``means[:, left[j]]`` and
    ``means[:, left[j] + 1]`` weighted ``1 - weight[j]`` and ``weight[j]``; ``scale`` one per row."""
    import cupy

    out = cupy.empty(x.shape, dtype=cupy.float32)
    _normalise()(x, cupy.asarray(left, dtype=cupy.int32), cupy.asarray(weight, dtype=cupy.float32),
                 cupy.ascontiguousarray(means, dtype=cupy.float32), means.shape[1],
                 cupy.ascontiguousarray(scale, dtype=cupy.float32).ravel(), x.shape[1], out)
    return out
