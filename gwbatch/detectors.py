"""Gravitational-wave detector geometry: sites, response tensors, antenna patterns, delays.

Everything here reproduces LALSuite's conventions so that results can be checked against
``lal`` without importing it (LALSuite is optional):

* site constants are copied from ``lal/lib/tools/LALDetectors.h``;
* :attr:`Detector.location` and :attr:`Detector.response` are built the way
  ``XLALCreateDetector`` (``lal/lib/tools/CreateDetector.c``) builds them, including its
  single-precision storage of the response tensor;
* :func:`gmst` follows ``XLALGreenwichMeanSiderealTime`` (UT1 taken equal to UTC);
* :func:`antenna_pattern` follows ``XLALComputeDetAMResponse`` and
  :func:`time_delay_from_earth_center` follows ``XLALTimeDelayFromEarthCenter``.

Coordinates are Earth-centred Earth-fixed (ECEF): x through the equator at the prime meridian,
z through the North pole, metres.  Sky positions are equatorial (right ascension, declination,
radians); the polarisation angle ``psi`` has the convention of Anderson et al. 2001,
PRD 63, 042003 (appendix B), as LAL does.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from gwbatch.errors import ConfigError

C_SI = 299_792_458.0  # speed of light in vacuum, m/s
WGS84_A = 6_378_137.0  # WGS-84 equatorial radius, m
# WGS-84 polar radius a(1 − f), f = 1/298.257223563, rounded to the millimetre as LAL's
# LAL_BWGS84_SI is; the exact value would move locations by up to 3e-4 m away from LAL's.
WGS84_B = 6_356_752.314

_TWO_PI = 2.0 * np.pi


@dataclass(frozen=True)
class Detector:
    """An interferometer in differential mode, described as in a frame file's FrDetector.

    Angles in radians, elevation in metres.  Latitude and longitude are geodetic (WGS-84);
    azimuths are measured clockwise from local North, altitudes up from the local tangent
    plane of the ellipsoid (``LALFrDetector`` conventions, LALDetectors.h).
    """

    name: str
    latitude: float
    longitude: float
    elevation: float
    xarm_azimuth: float
    yarm_azimuth: float
    xarm_altitude: float
    yarm_altitude: float

    @cached_property
    def location(self) -> np.ndarray:
        """Vertex position in ECEF metres, shape (3,), read-only.

        Geodetic to Cartesian on the WGS-84 ellipsoid as in ``XLALCreateDetector``.  LAL's
        precomputed ``lalCachedDetectors`` vectors agree to 2e-5 m, except KAGRA's (1.3 mm).
        """
        loc = _geodetic_to_ecef(self.latitude, self.longitude, _f32(self.elevation))
        loc.setflags(write=False)
        return loc

    @cached_property
    def response(self) -> np.ndarray:
        """Response tensor D = (x xᵀ − y yᵀ)/2 in ECEF, shape (3, 3), symmetric, read-only.

        x and y are the unit vectors along the arms (Anderson et al. 2001, PRD 63, 042003,
        appendix B).  Arm vectors and tensor are rounded to single precision where
        ``XLALCreateDetector`` rounds them, so the result equals what it returns for the same
        site bit for bit; LAL's precomputed ``lalCachedDetectors`` tensors, built from
        separately rounded constants, differ by up to 1.1e-7.
        """
        x = _arm_unit_vector(self.xarm_altitude, self.xarm_azimuth, self.latitude, self.longitude)
        y = _arm_unit_vector(self.yarm_altitude, self.yarm_azimuth, self.latitude, self.longitude)
        d = (np.outer(x, x) - np.outer(y, y)) / np.float32(2)
        d = d.astype(np.float64)
        d.setflags(write=False)
        return d


def _f32(value: float) -> float:
    # LALFrDetector stores elevation and arm angles as REAL4; XLALCreateDetector sees those.
    return float(np.float32(value))


def _geodetic_to_ecef(lat: float, lon: float, height: float) -> np.ndarray:
    cos_lat, sin_lat = np.cos(lat), np.sin(lat)
    denom = np.sqrt(
        WGS84_A * WGS84_A * (cos_lat * cos_lat) + WGS84_B * WGS84_B * (sin_lat * sin_lat)
    )
    rho = cos_lat * (WGS84_A * WGS84_A / denom + height)
    z = sin_lat * (WGS84_B * WGS84_B / denom + height)
    return np.array([rho * np.cos(lon), rho * np.sin(lon), z])


def _arm_unit_vector(altitude: float, azimuth: float, lat: float, lon: float) -> np.ndarray:
    """ECEF unit vector of an arm, float32 (``getCartesianComponents`` in CreateDetector.c)."""
    alt, az = _f32(altitude), _f32(azimuth)
    u_north = np.cos(alt) * np.cos(az)
    u_east = np.cos(alt) * np.sin(az)
    u_up = np.sin(alt)
    u_rho = -np.sin(lat) * u_north + np.cos(lat) * u_up  # away from the Earth's axis
    u = np.array(
        [
            np.cos(lon) * u_rho - np.sin(lon) * u_east,
            np.sin(lon) * u_rho + np.cos(lon) * u_east,
            np.cos(lat) * u_north + np.sin(lat) * u_up,
        ]
    )
    return u.astype(np.float32)


# Site constants from LALSuite, lal/lib/tools/LALDetectors.h (LAL_LHO_4K_*, LAL_LLO_4K_*,
# LAL_VIRGO_*, LAL_KAGRA_*: DETECTOR_LATITUDE_RAD, _LONGITUDE_RAD, _ELEVATION_SI,
# _ARM_{X,Y}_AZIMUTH_RAD, _ARM_{X,Y}_ALTITUDE_RAD), keyed by the channel prefix.
_DETECTORS: dict[str, Detector] = {
    d.name: d
    for d in (
        Detector(  # LHO_4k
            "H1",
            latitude=0.81079526383,
            longitude=-2.08405676917,
            elevation=142.554,
            xarm_azimuth=5.65487724844,
            yarm_azimuth=4.08408092164,
            xarm_altitude=-0.00061950000,
            yarm_altitude=0.00001250000,
        ),
        Detector(  # LLO_4k
            "L1",
            latitude=0.53342313506,
            longitude=-1.58430937078,
            elevation=-6.574,
            xarm_azimuth=4.40317772346,
            yarm_azimuth=2.83238139666,
            xarm_altitude=-0.00031210000,
            yarm_altitude=-0.00061070000,
        ),
        Detector(  # VIRGO
            "V1",
            latitude=0.76151183984,
            longitude=0.18333805213,
            elevation=51.884,
            xarm_azimuth=0.33916285222,
            yarm_azimuth=5.05155183261,
            xarm_altitude=0.0,
            yarm_altitude=0.0,
        ),
        Detector(  # KAGRA
            "K1",
            latitude=0.6355068497,
            longitude=2.396441015,
            elevation=414.181,
            xarm_azimuth=1.054113,
            yarm_azimuth=-0.5166798,
            xarm_altitude=0.0031414,
            yarm_altitude=-0.0036270,
        ),
    )
}


def known_detectors() -> tuple[str, ...]:
    """Names accepted by :func:`get_detector`, sorted."""
    return tuple(sorted(_DETECTORS))


def get_detector(name: str) -> Detector:
    """The :class:`Detector` for a two-character prefix such as ``"H1"``.

    Raises
    ------
    ConfigError
        If the name is not one of :func:`known_detectors`.
    """
    try:
        return _DETECTORS[name]
    except (KeyError, TypeError):
        raise ConfigError(
            f"unknown detector {name!r}; known: {', '.join(known_detectors())}"
        ) from None


def _as_detector(detector: str | Detector) -> Detector:
    return detector if isinstance(detector, Detector) else get_detector(detector)


# Leap seconds: (first UTC month with the new offset, TAI − UTC from then on), as in LAL's
# lal/lib/date/XLALLeapSeconds.h and the IERS Bulletin C.  GPS − UTC = TAI − UTC − 19 s.
# Add a row here when the IERS announces a new leap second.
_LEAP_SECONDS = (
    ((1972, 1), 10), ((1972, 7), 11), ((1973, 1), 12), ((1974, 1), 13), ((1975, 1), 14),
    ((1976, 1), 15), ((1977, 1), 16), ((1978, 1), 17), ((1979, 1), 18), ((1980, 1), 19),
    ((1981, 7), 20), ((1982, 7), 21), ((1983, 7), 22), ((1985, 7), 23), ((1988, 1), 24),
    ((1990, 1), 25), ((1991, 1), 26), ((1992, 7), 27), ((1993, 7), 28), ((1994, 7), 29),
    ((1996, 1), 30), ((1997, 7), 31), ((1999, 1), 32), ((2006, 1), 33), ((2009, 1), 34),
    ((2012, 7), 35), ((2015, 7), 36), ((2017, 1), 37),
)
_GPS_EPOCH_UNIX = 315_964_800  # 1980-01-06T00:00:00 UTC
_GPS_EPOCH_JD = 2_444_244.5
_J2000_JD = 2_451_545.0
_GPS_MINUS_UTC = np.array([tai_utc - 19 for _, tai_utc in _LEAP_SECONDS], dtype=np.int64)
# GPS second at which each offset starts to apply (the first second of the new UTC month).
_LEAP_GPS = np.array(
    [calendar.timegm((y, m, 1, 0, 0, 0)) - _GPS_EPOCH_UNIX for (y, m), _ in _LEAP_SECONDS],
    dtype=np.int64,
) + _GPS_MINUS_UTC


def _scalar_or_array(x: np.ndarray) -> float | np.ndarray:
    return float(x) if np.ndim(x) == 0 else x


def gmst(gps) -> float | np.ndarray:
    """Greenwich mean sidereal time, radians in [0, 2π).

    Parameters
    ----------
    gps : float or array_like
        GPS seconds, any shape.

    Returns
    -------
    float or ndarray
        Same shape as ``gps``.

    Notes
    -----
    Follows ``XLALGreenwichMeanSiderealTime`` (LAL, XLALSiderealTime.c; IAU 1982 GMST of
    Aoki et al. 1982): GPS is turned into UTC with leap seconds, UT1 is taken equal to UTC
    (|UT1 − UTC| < 0.9 s, so the angle is off by up to 7e-5 rad, identically in LAL), and the
    whole and fractional seconds are kept apart for precision.  LAL returns the angle
    unwrapped; it is reduced modulo 2π here, so compare the two modulo 2π.  Valid from 1972.
    """
    gps = np.asarray(gps, dtype=np.float64)
    whole = np.floor(gps)
    frac = gps - whole
    whole = whole.astype(np.int64)
    # During a leap second this gives the first second of the next day, as LAL's 23:59:60 does.
    step = np.clip(np.searchsorted(_LEAP_GPS, whole, side="right") - 1, 0, None)
    utc = whole - _GPS_MINUS_UTC[step]  # UTC seconds since the GPS epoch, no leap seconds
    days, sec = np.divmod(utc, 86_400)
    # Same rounding as XLALConvertCivilTimeToJD: a noon-based day number plus the day fraction.
    jd = (_GPS_EPOCH_JD + 0.5 + days) + (sec / 86_400.0 - 0.5)
    t_hi = (jd - _J2000_JD) / 36_525.0
    t_lo = frac / (36_525.0 * 86_400.0)
    t = t_hi + t_lo
    # Sidereal seconds, summed in LAL's order (small terms first) to keep its rounding.
    st = (-6.2e-6 * t + 0.093104) * t * t + 67_310.54841
    st = st + 8_640_184.812866 * t_lo
    st = st + 3_155_760_000.0 * t_lo
    st = st + 8_640_184.812866 * t_hi
    st = st + 3_155_760_000.0 * t_hi
    return _scalar_or_array(np.mod(st * (np.pi / 43_200.0), _TWO_PI))


def _polarisation_basis(gha, dec, psi) -> tuple[np.ndarray, np.ndarray]:
    """Wave-frame axes X, Y in ECEF, each shape (..., 3) (Anderson et al. 2001, eqs. B4–B5)."""
    cos_gha, sin_gha = np.cos(gha), np.sin(gha)
    cos_dec, sin_dec = np.cos(dec), np.sin(dec)
    cos_psi, sin_psi = np.cos(psi), np.sin(psi)
    x = np.stack(
        np.broadcast_arrays(
            -cos_psi * sin_gha - sin_psi * cos_gha * sin_dec,
            -cos_psi * cos_gha + sin_psi * sin_gha * sin_dec,
            sin_psi * cos_dec,
        ),
        axis=-1,
    )
    y = np.stack(
        np.broadcast_arrays(
            sin_psi * sin_gha - cos_psi * cos_gha * sin_dec,
            sin_psi * cos_gha + cos_psi * sin_gha * sin_dec,
            cos_psi * cos_dec,
        ),
        axis=-1,
    )
    return x, y


def antenna_pattern(
    detector: str | Detector, ra, dec, psi, gps
) -> tuple[float | np.ndarray, float | np.ndarray]:
    """Antenna pattern functions F+ = e+ : D and F× = e× : D.

    Parameters
    ----------
    detector : str or Detector
        Detector name (see :func:`known_detectors`) or a :class:`Detector`.
    ra, dec : float or array_like
        Right ascension and declination of the source, radians.
    psi : float or array_like
        Polarisation angle, radians.
    gps : float or array_like
        GPS time, seconds.  All four arguments broadcast together.

    Returns
    -------
    fplus, fcross : float or ndarray
        Dimensionless, of the broadcast shape; F+² + F×² ≤ 1.

    Notes
    -----
    Same convention as ``XLALComputeDetAMResponse(D, ra, dec, psi, gmst(gps))``: with wave
    axes X, Y (Anderson et al. 2001, PRD 63, 042003, eqs. B4–B5), e+ = XXᵀ − YYᵀ and
    e× = XYᵀ + YXᵀ.  Increasing ``psi`` by π/4 maps (F+, F×) to (F×, −F+).
    """
    d = _as_detector(detector).response
    gha = gmst(gps) - np.asarray(ra, dtype=np.float64)
    x, y = _polarisation_basis(gha, dec, psi)
    dx = x @ d  # D is symmetric, so row vectors times D are D times the vectors
    dy = y @ d
    fplus = np.sum(x * dx - y * dy, axis=-1)
    fcross = np.sum(x * dy + y * dx, axis=-1)
    return _scalar_or_array(fplus), _scalar_or_array(fcross)


def time_delay_from_earth_center(detector: str | Detector, ra, dec, gps) -> float | np.ndarray:
    """Arrival time at the detector minus arrival time at the geocentre, seconds.

    Parameters
    ----------
    detector : str or Detector
        Detector name or a :class:`Detector`.
    ra, dec : float or array_like
        Right ascension and declination of the source, radians.
    gps : float or array_like
        GPS time, seconds.  ``ra``, ``dec`` and ``gps`` broadcast together.

    Returns
    -------
    float or ndarray
        Of the broadcast shape; |delay| ≤ |location| / c (about 21 ms).

    Notes
    -----
    As ``XLALTimeDelayFromEarthCenter``: −n̂ · r / c with n̂ the unit vector towards the source
    in ECEF and r the vertex location; the Earth's rotation during the delay is neglected.
    """
    r = _as_detector(detector).location
    gha = gmst(gps) - np.asarray(ra, dtype=np.float64)
    cos_dec = np.cos(dec)
    # ECEF direction to the source: longitude of the sub-source point is −gha.
    n_dot_r = cos_dec * np.cos(gha) * r[0] - cos_dec * np.sin(gha) * r[1] + np.sin(dec) * r[2]
    return _scalar_or_array(np.asarray(-n_dot_r / C_SI))


def light_travel_time(a: str | Detector, b: str | Detector) -> float:
    """Light travel time between two detector vertices, seconds: |r_a − r_b| / c."""
    ra, rb = _as_detector(a).location, _as_detector(b).location
    return float(np.linalg.norm(ra - rb) / C_SI)
