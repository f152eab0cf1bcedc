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


def _block_moments(xb, vb, xp):
    """Per-block ``(n, T, S)`` of the valid samples of ``xb`` (blocks along axis 1), float64 sums."""
    n = vb.sum(axis=1, dtype=xp.float64)
    t = xp.where(vb, xb, 0).sum(axis=1, dtype=xp.float64)
    mean = (t / xp.where(n > 0, n, 1)).astype(xb.dtype)
    dev = xp.where(vb, xb - mean[:, None], 0)
    return n, t, (dev * dev).sum(axis=1, dtype=xp.float64)


def chan_moments(x, valid=None) -> tuple[float, float, int]:
    """``(mean, std, count)`` of the valid samples of ``x`` (population std, ``sqrt(S/n)``).

    Blocks are views of ``x`` (no padded copy); sums accumulate in float64 whatever ``x``'s dtype.
    """
    xp = array_namespace(x, valid)
    if valid is None:
        valid = xp.ones(x.size, dtype=bool)
    full = x.size // BLOCK * BLOCK
    parts = []
    if full:
        parts.append(_block_moments(x[:full].reshape(-1, BLOCK), valid[:full].reshape(-1, BLOCK), xp))
    if full < x.size:
        parts.append(_block_moments(x[full:].reshape(1, -1), valid[full:].reshape(1, -1), xp))
    n, t, s = (xp.concatenate([p[k] for p in parts]) for k in range(3))
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
    """Chan moments, optionally re-estimated up to ``iterations`` times without samples beyond
    ``clip`` σ (outlier rejection as in AstroAccelerate: strong pulses would otherwise inflate σ).
    Stops early once no further sample is rejected.
    """
    xp = array_namespace(x, valid)
    mean, std, count = chan_moments(x, valid)
    if clip is None:
        return mean, std, count
    for _ in range(iterations):
        keep = valid & (xp.abs(x - mean) <= clip * std)
        mean, std, new_count = chan_moments(x, keep)
        if new_count == count:
            break
        count = new_count
    return mean, std, count
