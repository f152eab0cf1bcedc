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

Spins are kept at the centre of their ranges' products here (aligned-spin banks place spin through
the same metric in a later extension); :func:`fitting_factors` measures coverage with exact matches.
"""

from __future__ import annotations

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
    """The parameter space: component-mass ranges (``mass1 >= mass2``), optional total mass and mass ratio."""

    mass1: tuple[float, float]
    mass2: tuple[float, float]
    total_mass: tuple[float, float] | None = None
    mass_ratio: tuple[float, float] | None = None  # m1 / m2

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


class Metric:
    """The ``(tau0, tau3)`` match metric from an approximant's phase and a PSD."""

    def __init__(self, approximant: str, f: np.ndarray, psd: np.ndarray, f_low: float, f0: float,
                 spin1z: float = 0.0, spin2z: float = 0.0):
        self.approximant, self.f0 = approximant, f0
        self.spin = (spin1z, spin2z)
        band = (f >= f_low) & (psd > 0) & np.isfinite(psd)
        self.f, self.psd = f[band], psd[band]
        self.delta_f = f[1] - f[0]
        self.f_low = f_low

    def _phase_amp(self, tau0: float, tau3: float) -> tuple[np.ndarray, np.ndarray]:
        m1, m2 = masses(tau0, tau3, self.f0)
        n_freq = int(round(self.f[-1] / self.delta_f)) + 1
        h = frequency_domain(self.approximant, Template(float(m1), float(m2), *self.spin), n_freq, self.delta_f,
                             max(self.f_low - 3.0, 5.0))
        k = np.rint(self.f / self.delta_f).astype(int)
        h = h[k]
        return np.unwrap(np.angle(h)), np.abs(h)

    def _physical(self, tau: np.ndarray) -> bool:
        return bool(np.isfinite(masses(tau[0], tau[1], self.f0)[0]))

    def at(self, tau0: float, tau3: float) -> np.ndarray:
        """The 2x2 metric at ``(tau0, tau3)``.

        Phase derivatives by central differences; where a step would cross the equal-mass line
        (no binary beyond it) a one-sided difference from the physical side is used instead.
        """
        here = np.array([tau0, tau3], dtype=float)
        step = here * 1e-4
        psi0, amp = self._phase_amp(tau0, tau3)
        w = np.where(amp > 0, amp**2 / self.psd, 0.0)
        w = w / w.sum()
        derivs = [np.ones_like(self.f), 2.0 * _PI * self.f]  # phi_c, t_c
        for i in range(2):
            dp = np.zeros(2)
            dp[i] = step[i]
            up, down = self._physical(here + dp), self._physical(here - dp)
            # A constant 2 pi k between two unwrapped phases is projected out with phi_c.
            if up and down:
                diff = (self._phase_amp(*(here + dp))[0] - self._phase_amp(*(here - dp))[0]) / (2.0 * step[i])
            elif up:
                diff = (self._phase_amp(*(here + dp))[0] - psi0) / step[i]
            else:
                diff = (psi0 - self._phase_amp(*(here - dp))[0]) / step[i]
            derivs.append(diff)
        d = np.stack(derivs)
        fisher = (d * w) @ d.T  # PSD-weighted second moments of the phase derivatives
        # Project out phi_c and t_c (Schur complement), halved: match = 1 - g dl dl.
        a, b, c = fisher[:2, :2], fisher[:2, 2:], fisher[2:, 2:]
        return 0.5 * (c - b.T @ np.linalg.solve(a, b))


def stochastic_placement(region: Region, metric: Metric, minimal_match: float, *, seed: int = 0,
                         patience: int = 2000, max_templates: int = 100_000, initial: np.ndarray | None = None) -> np.ndarray:
    """Template points ``(n, 2)`` in ``(tau0, tau3)``; see the module docstring.

    Accepted points are binned on a grid in raw ``(tau0, tau3)``; a proposal checks the bins under
    the bounding box of its own exclusion ellipse ``dq g dq < 1 - MM`` (``g`` the local metric,
    refreshed per coarse cell), so a metric that varies across the space cannot hide a neighbour.
    """
    rng = np.random.default_rng(seed)
    lo, hi, centre = region.tau_box(metric.f0)
    radius2 = 1.0 - minimal_match
    cell = np.sqrt(radius2 * np.diag(np.linalg.inv(metric.at(*centre))))  # ellipse half-widths at the centre
    bins: dict[tuple[int, int], list[int]] = {}
    kept: list[np.ndarray] = []
    local: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    for p in (initial if initial is not None else np.zeros((0, 2))):
        bins.setdefault(tuple(np.floor((p - lo) / cell).astype(int)), []).append(len(kept))
        kept.append(np.asarray(p, float))
    misses = 0
    while misses < patience and len(kept) < max_templates:
        batch = lo + (hi - lo) * rng.random((512, 2))
        m1, m2 = masses(batch[:, 0], batch[:, 1], metric.f0)
        for p in batch[region.contains(m1, m2)]:
            key = tuple(np.floor((p - lo) / cell).astype(int))
            coarse = (key[0] // 4, key[1] // 4)
            if coarse not in local:
                g = metric.at(*p)
                local[coarse] = (g, np.ceil(np.sqrt(radius2 * np.diag(np.linalg.inv(g))) / cell).astype(int))
            g, reach = local[coarse]
            close = False
            for ix in range(key[0] - reach[0], key[0] + reach[0] + 1):
                for iy in range(key[1] - reach[1], key[1] + reach[1] + 1):
                    for idx in bins.get((ix, iy), ()):
                        dq = p - kept[idx]
                        if dq @ g @ dq < radius2:
                            close = True
                            break
                    if close:
                        break
                if close:
                    break
            if close:
                misses += 1
                continue
            misses = 0
            bins.setdefault(key, []).append(len(kept))
            kept.append(p)
            if len(kept) >= max_templates:
                break
    return np.array(kept).reshape(-1, 2)


def grid_placement(region: Region, metric: Metric, minimal_match: float, *, seed: int = 0,
                   patience: int = 2000) -> np.ndarray:
    """A2 lattice (covering radius ``sqrt(1 - MM)``) in coordinates whitened by the most demanding
    metric of the region (largest determinant over a 6x6 sample), clipped to the region, then a
    stochastic fill seeded with the lattice covers the edges the clipping left bare (and any gap a
    varying metric opens)."""
    lo, hi, centre = region.tau_box(metric.f0)
    g = metric.at(*centre)
    for t0 in np.linspace(lo[0], hi[0], 6):
        for t3 in np.linspace(lo[1], hi[1], 6):
            m1, m2 = masses(t0, t3, metric.f0)
            if region.contains(m1, m2):
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
    m1, m2 = masses(tau[:, 0], tau[:, 1], metric.f0)
    lattice = tau[region.contains(m1, m2)]
    return stochastic_placement(region, metric, minimal_match, seed=seed, patience=patience, initial=lattice)


def fitting_factors(bank: list[Template], points: list[Template], match) -> np.ndarray:
    """For each point, the best ``match(template, point)`` over the bank (exact matches)."""
    return np.array([max(match(t, p) for t in bank) for p in points])
