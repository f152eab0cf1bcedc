"""Running a SPIIR filter bank over whitened data: the CPU twin (numba) and the backend dispatch.

Contract (every backend): for whitened data ``x`` (float32, length ``n``) and a packed bank of
``T`` templates with up to ``L`` filters each (``a``, ``b`` complex64 and ``d`` int32 arrays of shape
``(T, L)``, unused slots with ``b = 0``), return ``z`` (complex64, ``(T, n)``) with

    y_l[k] = a_l y_l[k-1] + b_l x[k - d_l]   (x before sample 0 taken as zero),   z_t[k] = sum_l y_l[k].

The state starts at zero, so the first ``max(d) + decay`` samples are warm-up: chunks carry a halo
at least one template long.  State and arithmetic are complex64, as on the GPU; rounding ``a`` to
float32 limits the response's relative accuracy to ~3e-8 / (1 - |a|) (ALGORITHMS.md §2), ~3e-4 for
the slowest BNS filters, well below the construction's own ~1% mismatch.
"""

from __future__ import annotations

import os

import numba
import numpy as np

from gwbatch._xp import HOST_PARALLEL, array_namespace


@numba.njit(parallel=True, cache=True)
def _filter_units(x, a, b, d, unit_template, unit_first, unit_last, partial):
    n = x.size
    for u in numba.prange(unit_template.size):
        t = unit_template[u]
        for l in range(unit_first[u], unit_last[u]):
            al = a[t, l]
            bl = b[t, l]
            dl = d[t, l]
            if bl == 0:
                continue
            y = np.complex64(0)
            for k in range(dl, n):
                y = al * y + bl * x[k - dl]
                partial[u, k] += y


def filter_bank_numba(x, a, b, d, threads: int | None = None) -> np.ndarray:
    """CPU twin: templates (and, when there are fewer templates than cores, groups of filters) in parallel."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    a = np.ascontiguousarray(a, dtype=np.complex64)
    b = np.ascontiguousarray(b, dtype=np.complex64)
    d = np.ascontiguousarray(d, dtype=np.int64)
    n_templates, n_slots = a.shape
    threads = threads or numba.get_num_threads() or os.cpu_count() or 1
    groups = max(1, min(n_slots, -(-threads // n_templates)))
    edges = np.linspace(0, n_slots, groups + 1).astype(np.int64)
    unit_template = np.repeat(np.arange(n_templates, dtype=np.int64), groups)
    unit_first = np.tile(edges[:-1], n_templates)
    unit_last = np.tile(edges[1:], n_templates)
    partial = np.zeros((unit_template.size, x.size), dtype=np.complex64)
    with HOST_PARALLEL:
        _filter_units(x, a, b, d, unit_template, unit_first, unit_last, partial)
    return partial.reshape(n_templates, groups, x.size).sum(axis=1, dtype=np.complex64)


def filter_bank(x, a, b, d):
    """Dispatch: the CUDA kernel for CuPy input, else the numba twin."""
    if array_namespace(x) is np:
        return filter_bank_numba(x, a, b, d)
    from gwbatch.spiir._cuda import filter_bank_cuda

    return filter_bank_cuda(x, a, b, d)
