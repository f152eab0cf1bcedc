"""Astrophysical distances for injections: sources uniform in comoving volume.

A population between luminosity distances ``d_lo`` and ``d_hi`` (Mpc) is drawn uniform in comoving
volume of a flat cosmology (astropy's ``Planck18``): comoving distance ``r`` with ``r^3`` uniform
between the bounds' ``r^3``, redshift from ``r``, luminosity distance ``(1 + z) r``.  Each source
stands for the population's comoving volume ``4/3 pi (r_hi^3 - r_lo^3)``, recorded with it
(``volume``), which :mod:`gwbatch.sensitivity` turns into a sensitive volume-time.
"""

from __future__ import annotations

import numpy as np

from gwbatch.errors import ConfigError

COSMOLOGY = "Planck18"


def _cosmology():
    from astropy import cosmology

    return getattr(cosmology, COSMOLOGY)


def redshift_grid(d_hi: float, points: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """``(z, r)``: redshifts from 0 to past luminosity distance ``d_hi`` and their comoving distances (Mpc)."""
    cosmo = _cosmology()
    z_hi = 1.0
    while cosmo.luminosity_distance(z_hi).value < d_hi:
        z_hi *= 2.0
    z = np.linspace(0.0, z_hi, points)
    return z, cosmo.comoving_distance(z).value


def draw_distances(rng: np.random.Generator, d_lo: float, d_hi: float, size: int):
    """``(luminosity distance, redshift, volume)`` of ``size`` sources uniform in comoving volume
    between luminosity distances ``d_lo`` and ``d_hi`` (Mpc); ``volume`` (Mpc^3) is the comoving
    volume between them."""
    if not 0 < d_lo < d_hi:
        raise ConfigError(f"injection distance range must satisfy 0 < min < max (Mpc), got {d_lo}, {d_hi}")
    z, r = redshift_grid(d_hi)
    dl = (1.0 + z) * r
    r_lo, r_hi = np.interp([d_lo, d_hi], dl, r)
    drawn = np.cbrt(rng.uniform(r_lo**3, r_hi**3, size))
    redshift = np.interp(drawn, r, z)
    return (1.0 + redshift) * drawn, redshift, 4.0 / 3.0 * np.pi * (r_hi**3 - r_lo**3)
