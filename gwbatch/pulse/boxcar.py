"""Per-start best boxcar SNR and width: the NumPy twin and the backend dispatch.

Contract (both backends): ``y`` holds ``n_out + last - 1`` samples; for every start
``i < n_out`` and width ``w`` in ``[first, last]`` the boxcar sum is ``B = y[i] + ... + y[i+w-1]``
and its SNR ``z`` follows from the per-width constants ``p, q, r`` (index ``w - first``):
``z = B p - q`` (amplitude) or ``z = (cbrt(B p) - q) r`` (energy).  Returns ``(best_snr float32,
best_width int32)`` per start, the width in the round's samples.
"""

from __future__ import annotations

import numpy as np

from gwbatch._xp import array_namespace


def boxcar_best_numpy(y, first: int, last: int, p, q, r, energy: bool):
    """NumPy twin of the CUDA kernel: float64 prefix sums, one vectorised pass per width."""
    y = np.asarray(y, dtype=np.float32)
    n_out = y.size - last + 1
    if n_out <= 0:
        return np.empty(0, np.float32), np.empty(0, np.int32)
    prefix = np.concatenate([[0.0], np.cumsum(y, dtype=np.float64)])
    best = np.full(n_out, -np.inf, dtype=np.float64)
    width = np.zeros(n_out, dtype=np.int32)
    for j, w in enumerate(range(first, last + 1)):
        b = prefix[w : w + n_out] - prefix[:n_out]
        z = (np.cbrt(b * p[j]) - q[j]) * r[j] if energy else b * p[j] - q[j]
        better = z > best
        best[better] = z[better]
        width[better] = w
    return best.astype(np.float32), width


def boxcar_best(y, first: int, last: int, p, q, r, energy: bool):
    """Dispatch to the CUDA kernel for CuPy input, else the NumPy twin."""
    if array_namespace(y) is np:
        return boxcar_best_numpy(y, first, last, p, q, r, energy)
    from gwbatch.pulse._cuda import boxcar_best_cuda

    return boxcar_best_cuda(y, first, last, p, q, r, energy)
