"""HEALPix sky grids in nested ordering (Górski et al. 2005) via astropy-healpix.

Order ``k`` has ``nside = 2**k`` and ``12 * 4**k`` equal-area pixels: order 5 is the seeds' 12288
directions, order 7 196608.  A direction is the pixel centre, as right ascension and declination
(an equatorial grid: a pixel's (ra, dec) is fixed on the sky, so the Earth-fixed geometry is
recomputed per GPS time in :mod:`gwbatch.sky.network`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from gwbatch.errors import ConfigError

MAX_ORDER = 10


@dataclass(frozen=True, eq=False)
class SkyGrid:
    order: int
    ra: np.ndarray  # (P,) radians, pixel centres in nested order
    dec: np.ndarray  # (P,) radians

    @property
    def nside(self) -> int:
        return 1 << self.order

    @property
    def size(self) -> int:
        return int(self.ra.size)

    @property
    def pixel_area_deg2(self) -> float:
        return float(4 * np.pi * (180 / np.pi) ** 2 / self.size)


@functools.lru_cache(maxsize=4)
def sky_grid(order: int) -> SkyGrid:
    """The nested HEALPix grid of ``order`` (0..10)."""
    if not (isinstance(order, (int, np.integer)) and 0 <= order <= MAX_ORDER):
        raise ConfigError(f"HEALPix order must be an integer 0..{MAX_ORDER} (5: 12288 directions, "
                          f"7: 196608), got {order!r}")
    import astropy.units as u
    from astropy_healpix import HEALPix

    hp = HEALPix(nside=1 << int(order), order="nested")
    lon, lat = hp.healpix_to_lonlat(np.arange(hp.npix))
    ra = np.ascontiguousarray(lon.to_value(u.rad), dtype=np.float64)
    dec = np.ascontiguousarray(lat.to_value(u.rad), dtype=np.float64)
    ra.setflags(write=False)
    dec.setflags(write=False)
    return SkyGrid(int(order), ra, dec)


def pixel_of(order: int, ra, dec) -> np.ndarray:
    """Nested pixel index of (ra, dec) radians."""
    import astropy.units as u
    from astropy_healpix import HEALPix

    return np.asarray(HEALPix(nside=1 << int(order), order="nested").lonlat_to_healpix(
        np.asarray(ra) * u.rad, np.asarray(dec) * u.rad))


def angular_distance(ra1, dec1, ra2, dec2) -> np.ndarray:
    """Great-circle distance (radians), haversine form."""
    s = (np.sin((dec2 - dec1) / 2) ** 2
         + np.cos(dec1) * np.cos(dec2) * np.sin((ra2 - ra1) / 2) ** 2)
    return 2 * np.arcsin(np.sqrt(np.clip(s, 0.0, 1.0)))
