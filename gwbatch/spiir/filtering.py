"""Running a SPIIR filter bank over whitened data: the CPU twin (numba) and the backend dispatch.

Contract (every backend): for whitened data ``x`` (float32, length ``n``) and a packed bank of
``T`` templates with up to ``L`` filters each (``a``, ``b`` complex64 and ``d`` int32 arrays of shape
``(T, L)``, unused slots with ``b = 0``), return ``z`` (complex64, ``(T, n)``) with

    y_l[k] = a_l y_l[k-1] + b_l x[k - d_l]   (x before sample 0 taken as zero),   z_t[k] = sum_l y_l[k].

The state starts at zero, so the first ``max(d) + decay`` samples are warm-up: chunks carry a halo
at least one template long.  Both backends run each filter as the real second-order recurrence of
its poles ``a`` and ``conj(a)`` in float32 (:func:`coefficients`): 6 FP32 instructions per update
instead of the complex recurrence's 8, within ~3e-5 of the output's peak of a float64 filter (the
complex recurrence in complex64: ~4e-7; benchmarks/RESULTS.md), well below the construction's own
~1% mismatch.
"""

from __future__ import annotations

import os

import numba
import numpy as np

from gwbatch._xp import HOST_PARALLEL, array_namespace


def coefficients(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The form both backends run filters ``y[k] = a y[k-1] + b x[k-d]`` in (ALGORITHMS.md §2): the
    real second-order recurrence ``s[k] = c1 s[k-1] + c2 s[k-2] + x[k-d]`` with ``c1 = 2 Re a``,
    ``c2 = -|a|^2`` (the poles ``a`` and ``conj(a)``), and ``y[k] = b s[k] + g s[k-1]`` with
    ``g = -b conj(a)``: 6 FP32 instructions per update against the complex form's 8.  Returns ``c``
    (``c1 + i c2``) and ``g``, complex64, computed in float64 from the complex64 ``a`` and ``b``."""
    a64 = np.asarray(a).astype(np.complex128)
    b64 = np.asarray(b).astype(np.complex128)
    c = (2.0 * a64.real - 1j * (a64.real**2 + a64.imag**2)).astype(np.complex64)
    return c, (-b64 * np.conj(a64)).astype(np.complex64)


@numba.njit(parallel=True, cache=True)
def _filter_units(x, c1, c2, b, g, d, unit_template, unit_first, unit_last, partial):
    n = x.size
    for u in numba.prange(unit_template.size):
        t = unit_template[u]
        for l in range(unit_first[u], unit_last[u]):
            if b[t, l] == 0:
                continue
            k1, k2, dl = c1[t, l], c2[t, l], d[t, l]
            br, bi, gr, gi = b[t, l].real, b[t, l].imag, g[t, l].real, g[t, l].imag
            s1 = np.float32(0)
            s2 = np.float32(0)
            for k in range(dl, n):
                s = k1 * s1 + (k2 * s2 + x[k - dl])
                partial[u, k] += np.complex64(complex(br * s + gr * s1, bi * s + gi * s1))
                s2 = s1
                s1 = s


def filter_bank_numba(x, a, b, d, threads: int | None = None) -> np.ndarray:
    """CPU twin: templates (and, when there are fewer templates than cores, groups of filters) in
    parallel, in the GPU kernel's arithmetic (float32, the second-order form of
    :func:`coefficients`)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    a = np.ascontiguousarray(a, dtype=np.complex64)
    b = np.ascontiguousarray(b, dtype=np.complex64)
    d = np.ascontiguousarray(d, dtype=np.int64)
    c, g = coefficients(a, b)
    c1, c2 = np.ascontiguousarray(c.real), np.ascontiguousarray(c.imag)
    n_templates, n_slots = a.shape
    threads = threads or numba.get_num_threads() or os.cpu_count() or 1
    groups = max(1, min(n_slots, -(-threads // n_templates)))
    edges = np.linspace(0, n_slots, groups + 1).astype(np.int64)
    unit_template = np.repeat(np.arange(n_templates, dtype=np.int64), groups)
    unit_first = np.tile(edges[:-1], n_templates)
    unit_last = np.tile(edges[1:], n_templates)
    partial = np.zeros((unit_template.size, x.size), dtype=np.complex64)
    with HOST_PARALLEL:
        _filter_units(x, c1, c2, b, g, d, unit_template, unit_first, unit_last, partial)
    return partial.reshape(n_templates, groups, x.size).sum(axis=1, dtype=np.complex64)


def filter_templates(x, bank, origin: int = 0):
    """A packed bank's (:class:`~gwbatch.spiir.bank.FilterBank`) top-rate output for ``x``:
    multi-rate when its filters use lower rates (:func:`gwbatch.spiir.multirate.filter_multirate`
    with the numba kernel per rung; on the GPU its fused twin,
    :func:`gwbatch.spiir._cuda_multirate.filter_multirate_cuda`); its sub-band templates through
    :func:`gwbatch.spiir.subbands.filter_subbands`.

    ``origin``: the absolute sample number of ``x[0]``.  The multi-rate ladder is periodic in time
    (period ``2^K``), so its rungs sit on absolute multiples of ``2^k``, and so are the sub-band
    channels (period :data:`gwbatch.spiir.subbands.PERIOD`): ``x`` gets ``origin`` modulo the period
    zeros in front (zeros are what the contract takes before ``x``), and any two chunks of one stream
    give the same output where both are warm."""
    parts = bank.parts
    if len(parts) == 1:
        return _filter_part(x, parts[0][1], origin)
    xp = array_namespace(x)
    out = xp.empty((bank.size, x.shape[-1]), dtype=xp.complex64)
    for rows, part in parts:
        out[xp.asarray(rows)] = _filter_part(x, part, origin)
    return out


def _filter_part(x, bank, origin: int):
    """:func:`filter_templates` of a bank whose templates are all on the ladder or all in sub-bands."""
    if bank.subband.any():
        from gwbatch.spiir.subbands import PERIOD, filter_subbands

        return _from_origin(x, origin, PERIOD, lambda y: filter_subbands(y, bank.channel_plan))
    if not bank.levels:
        return filter_bank(x, bank.a, bank.b, bank.d)
    from gwbatch.spiir.multirate import filter_multirate

    if array_namespace(x) is np:
        return _from_origin(x, origin, 1 << bank.levels, lambda y: filter_multirate(y, bank.level_sets, filter_bank))
    from gwbatch.spiir._cuda_multirate import filter_multirate_cuda

    return _from_origin(x, origin, 1 << bank.levels, lambda y: filter_multirate_cuda(y, bank))


def _from_origin(x, origin: int, period: int, run):
    """``run`` over ``x`` preceded by ``origin mod period`` zeros, the output's first samples dropped."""
    pad = int(origin) % period
    if pad:
        xp = array_namespace(x)
        x = xp.concatenate([xp.zeros(pad, dtype=x.dtype), x])
    return run(x)[..., pad:]


def filter_bank(x, a, b, d):
    """Dispatch: the CUDA kernel for CuPy input, else the numba twin."""
    if array_namespace(x) is np:
        return filter_bank_numba(x, a, b, d)
    from gwbatch.spiir._cuda import filter_bank_cuda

    return filter_bank_cuda(x, a, b, d)
