"""HEALPix skymaps as FITS files, in the layout LIGO/Virgo/KAGRA alerts use.

One binary table extension with a ``PROB`` column (probability per pixel, nested ordering,
equatorial coordinates), for compact-binary candidates the distance columns ``DISTMU``, ``DISTSIGMA``,
``DISTNORM`` (:mod:`gwbatch.sky.distance`), and the HEALPix keywords (``PIXTYPE``, ``ORDERING``, ``COORDSYS``, ``NSIDE``,
``INDXSCHM``), so healpy, ligo.skymap and astropy-healpix read it.  Written atomically.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from gwbatch.io.atomic import atomic_file


def write_skymap(path: str | os.PathLike, prob: np.ndarray, *, gps_time: float | None = None,
                 object_name: str = "", creator: str = "gwbatch", instruments: tuple[str, ...] = (),
                 extra: dict | None = None, distance=None) -> Path:
    """Write ``prob`` (nested HEALPix, length ``12 nside^2``) as a FITS skymap at ``path``, with the
    keywords LVK skymaps carry: ``OBJECT`` (unique per candidate), ``INSTRUME`` (its detectors),
    ``DATE`` (of the file), ``DATE-OBS``/``MJD-OBS`` (of the event), ``CREATOR`` and ``ORIGIN``.
    ``distance`` (:class:`gwbatch.sky.distance.DistanceLayers`) adds the ``DISTMU``, ``DISTSIGMA`` and
    ``DISTNORM`` columns and the ``DISTMEAN``, ``DISTSTD`` keywords."""
    from astropy.io import fits
    from astropy.time import Time

    prob = np.asarray(prob, dtype=np.float64)
    nside = int(round(np.sqrt(prob.size / 12)))
    if 12 * nside * nside != prob.size or nside & (nside - 1):
        raise ValueError(f"a HEALPix map needs 12 * nside^2 pixels with nside a power of 2, got {prob.size}")
    columns = [fits.Column(name="PROB", format="D", unit="pix-1", array=prob)]
    if distance is not None:
        columns += [fits.Column(name="DISTMU", format="D", unit="Mpc", array=np.asarray(distance.mu, np.float64)),
                    fits.Column(name="DISTSIGMA", format="D", unit="Mpc", array=np.asarray(distance.sigma, np.float64)),
                    fits.Column(name="DISTNORM", format="D", unit="Mpc-2", array=np.asarray(distance.norm, np.float64))]
    hdu = fits.BinTableHDU.from_columns(columns)
    header = hdu.header
    header["PIXTYPE"] = ("HEALPIX", "HEALPIX pixelisation")
    header["ORDERING"] = ("NESTED", "Pixel ordering scheme: RING, NESTED, or NUNIQ")
    header["COORDSYS"] = ("C", "Ecliptic, Galactic or Celestial (equatorial)")
    header["NSIDE"] = (nside, "Resolution parameter of HEALPIX")
    header["INDXSCHM"] = ("IMPLICIT", "Indexing: IMPLICIT or EXPLICIT")
    # a long identifier takes the whole card (a comment beside it would be cut, with a warning)
    header["OBJECT"] = (object_name, "Unique event identifier") if len(object_name) <= 40 else object_name
    header["CREATOR"] = (creator, "Program that created this file")
    header["ORIGIN"] = ("gwbatch", "Organization responsible for this FITS file")
    header["DATE"] = (Time.now().utc.isot.split(".")[0], "UTC date of file creation")
    if instruments:
        header["INSTRUME"] = (",".join(instruments), "Instruments that triggered this event")
    if gps_time is not None:
        t = Time(gps_time, format="gps")
        header["DATE-OBS"] = (t.utc.isot, "UTC date of the observation")
        header["MJD-OBS"] = (t.mjd, "modified Julian date of the observation")
    if distance is not None:
        header["DISTMEAN"] = (float(distance.mean), "Posterior mean distance (Mpc)")
        header["DISTSTD"] = (float(distance.std), "Posterior standard deviation of distance (Mpc)")
    for key, value in (extra or {}).items():
        header[key] = value
    path = Path(path)
    with atomic_file(path) as tmp:
        fits.HDUList([fits.PrimaryHDU(), hdu]).writeto(tmp, overwrite=True)
    return path


def read_skymap(path: str | os.PathLike) -> tuple[np.ndarray, dict]:
    """``(prob, header)`` of a nested FITS skymap written by :func:`write_skymap`."""
    from astropy.io import fits

    with fits.open(path) as hdul:
        hdu = hdul[1]
        header = dict(hdu.header)
        if header.get("ORDERING") != "NESTED":
            raise ValueError(f"{path}: expected a NESTED HEALPix map, found ORDERING={header.get('ORDERING')!r}")
        return np.asarray(hdu.data["PROB"], dtype=np.float64), header
