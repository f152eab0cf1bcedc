"""Mean and standard deviation by Chan, Golub & LeVeque's pairwise updates (seed 004 eqs. 1-2).

Each block of ``BLOCK`` samples gives ``(n, T, S)`` = (count, sum, sum of squared deviations);
blocks are merged pairwise in a tree with

    S = S_a + S_b + m / (n (m + n)) * ((n / m) T_a - T_b)^2,   T = T_a + T_b,

for ``m = n_a``, ``n = n_b``; pairwise summation keeps float rounding small.  Only valid samples
count.  Works on NumPy and CuPy arrays alike (float64 accumulation).
"""

from __future__ import annotations

from gwbatch._xp import array_namespace

BLOCK = 4096


def _merge(n_a, t_a, s_a, n_b, t_b, s_b, xp):
    n = n_a + n_b
    safe_a = xp.where(n_a > 0, n_a, 1)
    safe_b = xp.where(n_b > 0, n_b, 1)
    delta = (n_b / safe_a) * t_a - t_b
    cross = xp.where((n_a > 0) & (n_b > 0), (n_a / (safe_b * xp.where(n > 0, n, 1))) * delta * delta, 0.0)
    return n, t_a + t_b, s_a + s_b + cross


def chan_moments(x, valid=None) -> tuple[float, float, int]:
    """``(mean, std, count)`` of the valid samples of ``x`` (population std, ``sqrt(S/n)``)."""
    xp = array_namespace(x, valid)
    x = x.astype(xp.float64, copy=False)
    if valid is None:
        valid = xp.ones(x.size, dtype=bool)
    nblocks = max(1, -(-x.size // BLOCK))
    pad = nblocks * BLOCK - x.size
    xb = xp.concatenate([xp.where(valid, x, 0.0), xp.zeros(pad)]).reshape(nblocks, BLOCK)
    vb = xp.concatenate([valid, xp.zeros(pad, dtype=bool)]).reshape(nblocks, BLOCK)
    n = vb.sum(axis=1).astype(xp.float64)
    t = xb.sum(axis=1)
    mean_b = t / xp.where(n > 0, n, 1)
    s = xp.where(vb, (xb - mean_b[:, None]) ** 2, 0.0).sum(axis=1)
    while n.size > 1:
        if n.size % 2:
            zero = xp.zeros(1)
            n, t, s = (xp.concatenate([a, zero]) for a in (n, t, s))
        n, t, s = _merge(n[0::2], t[0::2], s[0::2], n[1::2], t[1::2], s[1::2], xp)
    count = int(n[0])
    if count == 0:
        return float("nan"), float("nan"), 0
    return float(t[0] / n[0]), float(xp.sqrt(s[0] / n[0])), count


def robust_moments(x, valid, clip: float | None, iterations: int) -> tuple[float, float, int]:
    """Chan moments, optionally re-estimated ``iterations`` times without samples beyond ``clip`` σ.

    Outlier rejection as in AstroAccelerate: strong pulses would otherwise inflate σ.
    """
    xp = array_namespace(x, valid)
    mean, std, count = chan_moments(x, valid)
    if clip is None:
        return mean, std, count
    for _ in range(iterations):
        keep = valid & (xp.abs(x - mean) <= clip * std)
        mean, std, count = chan_moments(x, keep)
    return mean, std, count
