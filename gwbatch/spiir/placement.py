"""Template placement in chirp-time coordinates, to a minimal match.

Templates are placed in ``(tau0, tau3)`` (Sathyaprakash 1994; Owen & Sathyaprakash 1999), the
Newtonian and 1.5PN chirp times at ``f0``, in which the inspiral match metric is nearly flat.  The
metric ``g`` comes from the approximant's own phase (so it holds for IMR waveforms too): the
Fisher matrix of ``(t_c, phi_c, tau0, tau3)`` with PSD-weighted moments, ``d Psi / d lambda`` by
central differences of the unwrapped phase of ``h~(f)``, projected over ``t_c`` and ``phi_c``.  The
match of nearby templates is ``1 - g_ij dl^i dl^j``.

- ``stochastic``: random proposals uniform in ``(tau0, tau3)`` within the mass ranges; a proposal
  is kept when its metric distance to every template exceeds ``sqrt(1 - MM)``; placement stops
  when ``patience`` proposals in a row are rejected (the space is covered).
- ``grid``: a hexagonal (A2) lattice with covering radius ``sqrt(1 - MM)`` in coordinates whitened
  by the region's most demanding metric, clipped to the mass ranges (guaranteed coverage; for wide
  regions such as BBH, where the metric varies by orders of magnitude, stochastic placement needs
  far fewer templates).

Aligned spins whose ranges have non-zero width become further coordinates (:class:`Space`), with the
metric's spin derivatives from the same phase; the A2 grid stays two-dimensional (fixed spins).
:func:`fitting_factors` measures coverage with exact matches.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from gwbatch.waveforms import Template, frequency_domain
from gwbatch.waveforms.taylorf2 import MSUN_S

_PI = np.pi


def chirp_times(m1: np.ndarray, m2: np.ndarray, f0: float) -> tuple[np.ndarray, np.ndarray]:
    """``(tau0, tau3)`` in seconds at reference frequency ``f0``."""
    m = (np.asarray(m1) + np.asarray(m2)) * MSUN_S
    eta = np.asarray(m1) * np.asarray(m2) / (np.asarray(m1) + np.asarray(m2)) ** 2
    x = _PI * m * f0
    return 5.0 / (256.0 * _PI * f0 * eta) * x ** (-5.0 / 3.0), 1.0 / (8.0 * f0 * eta) * x ** (-2.0 / 3.0)


def masses(tau0: np.ndarray, tau3: np.ndarray, f0: float, clamp: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`chirp_times`: component masses (solar), ``m1 >= m2``.

    Where ``eta > 1/4`` (no binary) the result is NaN, or equal masses with ``clamp`` (used by the
    metric's finite differences, whose steps may cross the equal-mass line).
    """
    tau0, tau3 = np.asarray(tau0, float), np.asarray(tau3, float)
    m = 5.0 / (32.0 * _PI**2 * f0) * tau3 / tau0 / MSUN_S  # total mass (solar)
    with np.errstate(invalid="ignore"):
        eta = 1.0 / (8.0 * f0 * tau3) * (_PI * m * MSUN_S * f0) ** (-2.0 / 3.0)
    disc = 1.0 - 4.0 * eta
    root = np.sqrt(np.maximum(disc, 0.0)) if clamp else np.sqrt(np.where(disc >= 0, disc, np.nan))
    return 0.5 * m * (1.0 + root), 0.5 * m * (1.0 - root)


@dataclass(frozen=True)
class Region:
    """The parameter space: component-mass ranges (``mass1 >= mass2``), optional total mass and mass
    ratio, and aligned-spin ranges (a range of zero width holds that spin fixed)."""

    mass1: tuple[float, float]
    mass2: tuple[float, float]
    total_mass: tuple[float, float] | None = None
    mass_ratio: tuple[float, float] | None = None  # m1 / m2
    spin1z: tuple[float, float] = (0.0, 0.0)
    spin2z: tuple[float, float] = (0.0, 0.0)

    def contains(self, m1: np.ndarray, m2: np.ndarray) -> np.ndarray:
        m1, m2 = np.asarray(m1, float), np.asarray(m2, float)
        ok = np.isfinite(m1) & np.isfinite(m2) & (m1 >= m2)
        ok &= (m1 >= self.mass1[0]) & (m1 <= self.mass1[1]) & (m2 >= self.mass2[0]) & (m2 <= self.mass2[1])
        if self.total_mass is not None:
            ok &= (m1 + m2 >= self.total_mass[0]) & (m1 + m2 <= self.total_mass[1])
        if self.mass_ratio is not None:
            q = m1 / np.where(m2 > 0, m2, np.nan)
            ok &= (q >= self.mass_ratio[0]) & (q <= self.mass_ratio[1])
        return ok

    def tau_box(self, f0: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Bounding box ``(lo, hi)`` of the region in ``(tau0, tau3)`` and a physical central point."""
        m1 = np.linspace(self.mass1[0], self.mass1[1], 400)
        m2 = np.linspace(self.mass2[0], self.mass2[1], 400)
        g1, g2 = np.meshgrid(m1, m2)
        ok = self.contains(g1, g2)
        if not ok.any():
            raise ValueError(f"the mass ranges {self} contain no binary with mass1 >= mass2")
        t0, t3 = chirp_times(g1[ok], g2[ok], f0)
        centre = np.argmin((t0 - np.median(t0)) ** 2 / np.var(t0) + (t3 - np.median(t3)) ** 2 / np.var(t3))
        return np.array([t0.min(), t3.min()]), np.array([t0.max(), t3.max()]), np.array([t0[centre], t3[centre]])


class Space:
    """Placement coordinates ``(tau0, tau3[, spin1z][, spin2z])`` of a region at frequency ``f0``:
    each spin whose range has non-zero width is a coordinate; the others stay fixed."""

    def __init__(self, region: Region, f0: float):
        self.region, self.f0 = region, f0
        self.spins = tuple(k for k, r in enumerate((region.spin1z, region.spin2z)) if r[1] > r[0])
        self.fixed = (region.spin1z[0], region.spin2z[0])
        self.dims = 2 + len(self.spins)

    def parameters(self, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(m1, m2, s1z, s2z)`` of points ``p`` (``(n, dims)`` or ``(dims,)``); NaN masses where
        ``tau0, tau3`` hold no binary."""
        p = np.asarray(p, float)
        m1, m2 = masses(p[..., 0], p[..., 1], self.f0)
        spin = [np.full(m1.shape, self.fixed[0]), np.full(m1.shape, self.fixed[1])]
        for axis, k in enumerate(self.spins):
            spin[k] = p[..., 2 + axis]
        return m1, m2, spin[0], spin[1]

    def contains(self, p: np.ndarray) -> np.ndarray:
        m1, m2, s1, s2 = self.parameters(p)
        r = self.region
        return (r.contains(m1, m2) & (s1 >= r.spin1z[0]) & (s1 <= r.spin1z[1])
                & (s2 >= r.spin2z[0]) & (s2 <= r.spin2z[1]))

    def physical(self, p: np.ndarray) -> bool:
        """Whether a point is a binary at all (the metric's finite differences may leave the region)."""
        m1, _, s1, s2 = self.parameters(p)
        return bool(np.isfinite(m1) and abs(s1) <= 1.0 and abs(s2) <= 1.0)

    def box(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Bounding box ``(lo, hi)`` and a central point of the region."""
        lo, hi, centre = self.region.tau_box(self.f0)
        ranges = [(self.region.spin1z, self.region.spin2z)[k] for k in self.spins]
        extra_lo = [r[0] for r in ranges]
        extra_hi = [r[1] for r in ranges]
        extra_mid = [0.5 * (r[0] + r[1]) for r in ranges]
        return np.r_[lo, extra_lo], np.r_[hi, extra_hi], np.r_[centre, extra_mid]

    def templates(self, points: np.ndarray) -> list[Template]:
        m1, m2, s1, s2 = self.parameters(np.asarray(points, float).reshape(-1, self.dims))
        order = np.lexsort((s2, s1, m2, m1))
        return [Template(float(m1[i]), float(m2[i]), float(s1[i]), float(s2[i])) for i in order]


class Metric:
    """The match metric in a :class:`Space`'s coordinates, from an approximant's phase and a PSD."""

    #: Finite-difference steps: relative for the chirp times, absolute for spins.
    TAU_STEP, SPIN_STEP = 1e-4, 1e-3

    def __init__(self, approximant: str, f: np.ndarray, psd: np.ndarray, f_low: float, space: Space):
        self.approximant, self.space, self.f0 = approximant, space, space.f0
        band = (f >= f_low) & (psd > 0) & np.isfinite(psd)
        self.f, self.psd = f[band], psd[band]
        self.delta_f = f[1] - f[0]
        self.f_low = f_low

    def _phase_amp(self, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m1, m2, s1, s2 = (float(v) for v in self.space.parameters(p))
        n_freq = int(round(self.f[-1] / self.delta_f)) + 1
        h = frequency_domain(self.approximant, Template(m1, m2, s1, s2), n_freq, self.delta_f, max(self.f_low - 3.0, 5.0))
        h = h[np.rint(self.f / self.delta_f).astype(int)]
        return np.unwrap(np.angle(h)), np.abs(h)

    def at(self, *point: float) -> np.ndarray:
        """The ``dims x dims`` metric at ``point``.

        Phase derivatives by central differences; where a step would leave the physical space
        (beyond equal masses, or ``|spin| > 1``) a one-sided difference from the physical side is
        used instead.
        """
        here = np.asarray(point, dtype=float).ravel()
        dims = here.size
        step = np.r_[np.abs(here[:2]) * self.TAU_STEP, np.full(dims - 2, self.SPIN_STEP)]
        psi0, amp = self._phase_amp(here)
        w = np.where(amp > 0, amp**2 / self.psd, 0.0)
        w = w / w.sum()
        derivs = [np.ones_like(self.f), 2.0 * _PI * self.f]  # phi_c, t_c
        for i in range(dims):
            dp = np.zeros(dims)
            dp[i] = step[i]
            up, down = self.space.physical(here + dp), self.space.physical(here - dp)
            # A constant 2 pi k between two unwrapped phases is projected out with phi_c.
            if up and down:
                diff = (self._phase_amp(here + dp)[0] - self._phase_amp(here - dp)[0]) / (2.0 * step[i])
            elif up:
                diff = (self._phase_amp(here + dp)[0] - psi0) / step[i]
            else:
                diff = (psi0 - self._phase_amp(here - dp)[0]) / step[i]
            derivs.append(diff)
        d = np.stack(derivs)
        fisher = (d * w) @ d.T  # PSD-weighted second moments of the phase derivatives
        # Project out phi_c and t_c (Schur complement), halved: match = 1 - g dl dl.
        a, b, c = fisher[:2, :2], fisher[:2, 2:], fisher[2:, 2:]
        return 0.5 * (c - b.T @ np.linalg.solve(a, b))


def regularised(g: np.ndarray, radius2: float, extent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The metric ``g`` made positive definite, and the half-widths of the bounding box of its
    exclusion ellipsoid ``dq g dq < radius2`` (at most ``extent`` per axis).

    The finite-difference Fisher matrix of an aligned-spin region is nearly singular (the phase
    depends on the spins mostly through one combination with the masses): its smallest eigenvalues
    are rounding noise of either sign, and its inverse's diagonal may come out negative.  Each
    eigenvalue is raised to at least ``radius2 / |extent|^2``, the value at which the ellipsoid
    spans the whole box along that direction; nothing inside the box is changed by more.  A metric
    whose eigenvalues are all above that is returned as it is."""
    w, v = np.linalg.eigh(0.5 * (g + g.T))
    floor = radius2 / float(np.sum(extent**2))
    if w.min() >= floor:  # well conditioned: as it is
        return g, np.minimum(np.sqrt(radius2 * np.diag(np.linalg.inv(g))), extent)
    w = np.maximum(w, floor)
    return (v * w) @ v.T, np.minimum(np.sqrt(radius2 * (v**2 @ (1.0 / w))), extent)


def stochastic_placement(space: Space, metric: Metric, minimal_match: float, *, seed: int = 0,
                         patience: int = 2000, max_templates: int = 100_000, initial: np.ndarray | None = None) -> np.ndarray:
    """Template points ``(n, dims)``; see the module docstring.

    Accepted points are binned on a grid in raw coordinates; a proposal checks the bins under the
    bounding box of its own exclusion ellipsoid ``dq g dq < 1 - MM`` (``g`` the local metric,
    refreshed per coarse cell), so a metric that varies across the space cannot hide a neighbour.
    """
    rng = np.random.default_rng(seed)
    dims = space.dims
    lo, hi, centre = space.box()
    radius2 = 1.0 - minimal_match
    extent = np.maximum(hi - lo, 1e-300)
    cell = regularised(metric.at(*centre), radius2, extent)[1]  # ellipsoid half-widths at the centre
    bins: dict[tuple[int, ...], list[int]] = {}
    kept = np.zeros((0, dims))
    count = 0
    local: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}

    occupied: list[tuple[int, ...]] = []  # bin keys in order of first use, for scanning

    def add(p):
        nonlocal kept, count
        if count == kept.shape[0]:
            kept = np.concatenate([kept, np.zeros((max(64, count), dims))])
        key = tuple(np.floor((p - lo) / cell).astype(int))
        if key not in bins:
            bins[key] = []
            occupied.append(key)
        bins[key].append(count)
        kept[count] = p
        count += 1

    def neighbours(key: np.ndarray, reach: np.ndarray) -> list[int]:
        """Indices of kept points in bins within ``reach`` of ``key``: by looking the bins up, or,
        when there are fewer occupied bins than bins to look up, by scanning the occupied ones."""
        if np.prod(2 * reach + 1) <= len(occupied):
            return [i for offset in itertools.product(*(range(-r, r + 1) for r in reach))
                    for i in bins.get(tuple(key + np.asarray(offset)), ())]
        keys = np.array(occupied).reshape(-1, dims)
        hit = np.flatnonzero((np.abs(keys - key) <= reach).all(axis=1))
        return [i for h in hit for i in bins[occupied[h]]]

    for p in (initial if initial is not None else np.zeros((0, dims))):
        add(np.asarray(p, float))
    misses = 0
    while misses < patience and count < max_templates:
        batch = lo + (hi - lo) * rng.random((512, dims))
        for p in batch[space.contains(batch)]:
            key = np.floor((p - lo) / cell).astype(int)
            coarse = tuple(key // 4)
            if coarse not in local:
                g, widths = regularised(metric.at(*p), radius2, extent)
                local[coarse] = (g, np.ceil(widths / cell).astype(int))
            g, reach = local[coarse]
            near = neighbours(key, reach)
            if near:
                dq = p - kept[near]
                if (np.einsum("ni,ij,nj->n", dq, g, dq) < radius2).any():
                    misses += 1
                    continue
            misses = 0
            add(p)
            if count >= max_templates:
                break
    return kept[:count].copy()


def grid_placement(space: Space, metric: Metric, minimal_match: float, *, seed: int = 0,
                   patience: int = 2000) -> np.ndarray:
    """A2 lattice (covering radius ``sqrt(1 - MM)``) in coordinates whitened by the most demanding
    metric of the region (largest determinant over a 6x6 sample), clipped to the region, then a
    stochastic fill seeded with the lattice covers the edges the clipping left bare (and any gap a
    varying metric opens).  The lattice is two-dimensional: spins must be fixed."""
    if space.dims != 2:
        raise ValueError("grid placement covers the mass plane at fixed spins; use placement method "
                         "'stochastic' for aligned-spin ranges")
    lo, hi, centre = space.box()
    g = metric.at(*centre)
    for t0 in np.linspace(lo[0], hi[0], 6):
        for t3 in np.linspace(lo[1], hi[1], 6):
            if space.contains(np.array([t0, t3])):
                gl = metric.at(t0, t3)
                if np.linalg.det(gl) > np.linalg.det(g):
                    g = gl
    chol = np.linalg.cholesky(g)
    to_u, to_tau = chol.T, np.linalg.inv(chol.T)
    corners = np.array([[lo[0], lo[1]], [lo[0], hi[1]], [hi[0], lo[1]], [hi[0], hi[1]]]) @ to_u.T
    umin, umax = corners.min(axis=0), corners.max(axis=0)
    side = np.sqrt(3.0) * np.sqrt(1.0 - minimal_match)  # A2 lattice constant for covering radius r: r sqrt(3)
    rows = np.arange(umin[1], umax[1] + side, side * np.sqrt(3.0) / 2.0)
    pts = []
    for i, y in enumerate(rows):
        xs = np.arange(umin[0] + (side / 2.0 if i % 2 else 0.0), umax[0] + side, side)
        pts.append(np.stack([xs, np.full(xs.size, y)], axis=1))
    tau = np.concatenate(pts) @ to_tau.T
    lattice = tau[space.contains(tau)]
    return stochastic_placement(space, metric, minimal_match, seed=seed, patience=patience, initial=lattice)


def fitting_factors(bank: list[Template], points: list[Template], match) -> np.ndarray:
    """For each point, the best ``match(template, point)`` over the bank (exact matches)."""
    return np.array([max(match(t, p) for t in bank) for p in points])
