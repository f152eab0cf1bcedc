"""Distance layers of a compact-binary skymap, in the LVK convention (Singer et al. 2016, ApJL 829, L15;
Singer & Price 2016, PRD 93, 024013).

Per pixel the distance posterior is summarised by the ansatz ``p(r | n) = DISTNORM r^2
N(r; DISTMU, DISTSIGMA)`` whose mean and standard deviation match the pixel's posterior
(:func:`moments_to_parameters`); ``DISTMEAN`` and ``DISTSTD`` of the header are the all-sky mixture's.

The pixel's posterior comes from the detectors' complex SNRs ``z_i`` (unit-variance quadratures) and
each template's optimal SNR at 1 Mpc ``sigma_i``.  A source at distance ``r``, inclination ``iota`` and
polarisation ``psi`` gives ``a_i = sigma_i / r (F+_i (1 + cos^2 iota) / 2 - i Fx_i cos iota)`` times a
common phase, so with the phase marginalised (uniform) the likelihood is
``I0(|sum_i conj(z_i) a_i|) exp(-sum_i |a_i|^2 / 2)``; it is marginalised numerically over
``cos iota`` (uniform in [-1, 1]) and ``psi`` (uniform), with the prior ``r^2`` (uniform in volume),
the distance by Laplace's method (:func:`distance_moments`).
The SNRs are those at the candidate's best direction for every pixel (their time offsets are not
re-read per direction): the antenna patterns carry the direction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import i0e, ndtr

#: Integration grid of the marginalisation over orientation: cos(iota) and polarisation points.
N_COS_IOTA, N_PSI = 64, 32
#: HEALPix order the distance posteriors are computed at, at most (3072 pixels of 13.4 deg^2).
DISTANCE_ORDER = 4
#: Pixels outside the smallest region holding this much probability get no distance (DISTMU inf).
DISTANCE_LEVEL = 0.9999


@dataclass(frozen=True)
class DistanceLayers:
    """Per pixel ``mu``, ``sigma`` (Mpc) and ``norm`` (Mpc^-2) of the ansatz, and the all-sky mean
    and standard deviation (Mpc)."""

    mu: np.ndarray
    sigma: np.ndarray
    norm: np.ndarray
    mean: float
    std: float


def _ansatz_moments(x: np.ndarray):
    """``(m2, m3, m4)``: ``int_0^inf u^k phi(u - x) du`` for k = 2, 3, 4 (phi the standard normal)."""
    cdf, pdf = ndtr(x), np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi)
    m2 = (1 + x * x) * cdf + x * pdf
    m3 = (x ** 3 + 3 * x) * cdf + (x * x + 2) * pdf
    m4 = (x ** 4 + 6 * x * x + 3) * cdf + (x ** 3 + 5 * x) * pdf
    return m2, m3, m4


_X = np.linspace(-8.0, 200.0, 20001)
_M2, _M3, _M4 = _ansatz_moments(_X)
_RATIO = _M4 * _M2 / _M3 ** 2 - 1.0  # var / mean^2 of r^2 N(r; x sigma, sigma): falls with x


def moments_to_parameters(mean, std) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(mu, sigma, norm)`` of the ansatz ``norm r^2 N(r; mu, sigma)`` with the given mean and standard
    deviation (Singer & Price 2016, eq. 11; a ratio ``std / mean`` beyond the ansatz's range is clipped
    to it)."""
    mean, std = np.asarray(mean, np.float64), np.asarray(std, np.float64)
    ratio = np.clip((std / mean) ** 2, _RATIO[-1], _RATIO[0])
    x = np.interp(ratio, _RATIO[::-1], _X[::-1])
    m2, m3, _ = _ansatz_moments(x)
    sigma = mean * m2 / m3
    return x * sigma, sigma, 1.0 / (sigma * sigma * m2)


def parameters_to_moments(mu, sigma) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, std)`` of ``r^2 N(r; mu, sigma)`` (the inverse of :func:`moments_to_parameters`)."""
    mu, sigma = np.asarray(mu, np.float64), np.asarray(sigma, np.float64)
    m2, m3, m4 = _ansatz_moments(mu / sigma)
    mean = sigma * m3 / m2
    return mean, np.sqrt(np.maximum(sigma * sigma * m4 / m2 - mean * mean, 0.0))


def distance_moments(z: np.ndarray, sigma: np.ndarray, fplus: np.ndarray, fcross: np.ndarray):
    """Per pixel the posterior mean and standard deviation of distance, from ``z`` and ``sigma`` per
    detector (``(D,)``) and the antenna patterns at polarisation 0 per pixel and detector (``(P, D)``)
    (module docstring).  The detectors enter through five numbers per pixel: ``p = sum conj(z) sigma F+``,
    ``x = sum conj(z) sigma Fx`` and the sums of ``sigma^2 F F``, which a polarisation rotates.

    For each (cos iota, psi) of the grid the likelihood in ``u = 1 / r`` is ``I0(alpha u) exp(-beta u^2)``
    with the prior ``r^2 dr = u^-4 du``; with ``I0(x) ~ e^x / sqrt(2 pi x)`` (the maps' SNRs are >= 8)
    its log is ``alpha u - beta u^2 - 4.5 ln u``, whose maximum ``u*`` and curvature give the
    evidence and the moments of ``r`` (Laplace's method); the grid points are then mixed by their
    evidence."""
    c = (np.arange(N_COS_IOTA) + 0.5) / N_COS_IOTA * 2 - 1
    psi = (np.arange(N_PSI) + 0.5) / N_PSI * (np.pi / 2)  # with the phase free, F(psi + pi/2) = -F(psi)
    cos2, sin2 = np.cos(2 * psi)[None, :], np.sin(2 * psi)[None, :]
    weighted = np.conj(z) * sigma
    p0, x0 = (fplus * weighted).sum(axis=1)[:, None], (fcross * weighted).sum(axis=1)[:, None]
    spp, sxx = ((sigma * fplus) ** 2).sum(1)[:, None], ((sigma * fcross) ** 2).sum(1)[:, None]
    spx = (sigma ** 2 * fplus * fcross).sum(1)[:, None]
    p, x = p0 * cos2 + x0 * sin2, x0 * cos2 - p0 * sin2  # (P, S)
    s_pp = spp * cos2 ** 2 + 2 * spx * cos2 * sin2 + sxx * sin2 ** 2
    s_xx = spp * sin2 ** 2 - 2 * spx * cos2 * sin2 + sxx * cos2 ** 2
    a_plus, a_cross = ((1 + c * c) / 2)[None, None, :], c[None, None, :]
    alpha = np.abs(a_plus * p[..., None] - 1j * a_cross * x[..., None])  # |sum conj(z) a| r: (P, S, C)
    beta = np.maximum(0.5 * (a_plus ** 2 * s_pp[..., None] + a_cross ** 2 * s_xx[..., None]), 1e-300)
    disc = np.maximum(alpha * alpha - 36.0 * beta, 0.0)
    u = (alpha + np.sqrt(disc)) / (4.0 * beta)  # the maximum of alpha u - beta u^2 - 4.5 ln u
    curvature = np.maximum(2.0 * beta + 4.5 / (u * u), 1e-300)  # -h''(u*)
    log_z = alpha * u - beta * u * u - 4.5 * np.log(u) - 0.5 * np.log(alpha) - 0.5 * np.log(curvature)
    log_z = np.where(disc > 0, log_z, log_z - 1e3)  # no interior maximum: a negligible share
    w = np.exp(log_z - log_z.max(axis=(1, 2), keepdims=True))
    w = w / w.sum(axis=(1, 2), keepdims=True)
    mean_r = 1.0 / u + 1.0 / (curvature * u ** 3)  # E[1/u] to second order
    var_r = 1.0 / (curvature * u ** 4)
    mean = np.sum(w * mean_r, axis=(1, 2))
    second = np.sum(w * (var_r + mean_r ** 2), axis=(1, 2))
    return mean, np.sqrt(np.maximum(second - mean * mean, 0.0))


def distance_layers(prob: np.ndarray, ra: np.ndarray, dec: np.ndarray, gps: float, ifos, z, sigma,
                    level: float = DISTANCE_LEVEL, batch: int = 256) -> DistanceLayers:
    """The skymap's distance layers (module docstring): ``prob`` per pixel of the nested grid ``ra``,
    ``dec`` (radians), ``z`` and ``sigma`` per detector of ``ifos`` at GPS ``gps``.  The posteriors are
    computed on the map's pixels at HEALPix order ``DISTANCE_ORDER`` at most (the antenna patterns change
    little across one: 3.7 degrees) and each finer pixel takes its parent's; parents outside the
    ``level`` region get ``mu = inf``, ``sigma = 1``, ``norm = 0`` (no distance), as LVK maps do."""
    from gwbatch.detectors import antenna_pattern

    z, sigma = np.asarray(z, np.complex128), np.asarray(sigma, np.float64)
    prob = np.asarray(prob, np.float64)
    order = int(round(np.log2(np.sqrt(prob.size / 12))))
    shift = 2 * max(order - DISTANCE_ORDER, 0)
    parent = np.arange(prob.size) >> shift
    coarse = np.bincount(parent, weights=prob)
    ranked = np.argsort(coarse)[::-1]
    keep = ranked[: int(np.searchsorted(np.cumsum(coarse[ranked]), level * coarse.sum())) + 1]
    centre = (keep << shift) + (1 << shift) // 2  # a child near the parent's centre
    f = [antenna_pattern(ifo, ra[centre], dec[centre], 0.0, gps) for ifo in ifos]
    fplus, fcross = np.stack([a for a, _ in f], axis=1), np.stack([b for _, b in f], axis=1)
    mean, std = np.empty(keep.size), np.empty(keep.size)
    for lo in range(0, keep.size, batch):
        mean[lo:lo + batch], std[lo:lo + batch] = distance_moments(z, sigma, fplus[lo:lo + batch], fcross[lo:lo + batch])
    mu_c, sig_c, norm_c = np.full(coarse.size, np.inf), np.ones(coarse.size), np.zeros(coarse.size)
    mu_c[keep], sig_c[keep], norm_c[keep] = moments_to_parameters(mean, std)
    w = coarse[keep] / coarse[keep].sum()
    all_mean = float(np.sum(w * mean))
    all_std = float(np.sqrt(max(np.sum(w * (std ** 2 + mean ** 2)) - all_mean ** 2, 0.0)))
    return DistanceLayers(mu_c[parent], sig_c[parent], norm_c[parent], all_mean, all_std)
