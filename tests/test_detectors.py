"""Detector geometry: sites, response tensors, sidereal time, antenna patterns and delays.

The first group needs nothing beyond NumPy and Astropy; the second cross-checks against
LALSuite and is skipped when ``lal`` is not installed.
"""

from __future__ import annotations

import numpy as np
import pytest

from gwbatch.detectors import (
    C_SI,
    Detector,
    antenna_pattern,
    get_detector,
    gmst,
    known_detectors,
    light_travel_time,
    time_delay_from_earth_center,
)
from gwbatch.errors import ConfigError

NAMES = ("H1", "L1", "V1", "K1")
SEED = 20_240_611
N = 200

# Published in LALDetectors.h next to the site angles (LAL_<SITE>_VERTEX_LOCATION_*_SI and
# LAL_<SITE>_ARM_{X,Y}_DIRECTION_*), computed there independently of the code under test.
HEADER_LOCATION = {
    "H1": (-2.16141492636e06, -3.83469517889e06, 4.60035022664e06),
    "L1": (-7.42760447238e04, -5.49628371971e06, 3.22425701744e06),
    "V1": (4.54637409900e06, 8.42989697626e05, 4.37857696241e06),
    "K1": (-3777336.024, 3484898.411, 3765313.697),
}
HEADER_ARMS = {
    "H1": ((-0.22389266154, 0.79983062746, 0.55690487831),
           (-0.91397818574, 0.02609403989, -0.40492342125)),
    "L1": ((-0.95457412153, -0.14158077340, -0.26218911324),
           (0.29774156894, -0.48791033647, -0.82054461286)),
    "V1": ((-0.70045821479, 0.20848948619, 0.68256166277),
           (-0.05379255368, -0.96908180549, 0.24080451708)),
    "K1": ((-0.3759040, -0.8361583, 0.3994189),
           (0.7164378, 0.01114076, 0.6975620)),
}

# |r_a - r_b| / c from lal.CachedDetectors locations (lalsuite 7.7.1), seconds.
LAL_LIGHT_TRAVEL = {
    ("H1", "L1"): 10.012846152e-3,
    ("H1", "V1"): 27.287979934e-3,
    ("L1", "V1"): 26.448341017e-3,
}


def _wrap(angle):
    """Angle difference mapped into [-π, π)."""
    return np.mod(np.asarray(angle) + np.pi, 2 * np.pi) - np.pi


@pytest.fixture(scope="module")
def sky():
    """Random sky positions (isotropic), polarisations and GPS times in [1e9, 1.4e9]."""
    rng = np.random.default_rng(SEED)
    return {
        "ra": rng.uniform(0.0, 2 * np.pi, N),
        "dec": np.arcsin(rng.uniform(-1.0, 1.0, N)),
        "psi": rng.uniform(0.0, np.pi, N),
        "gps": rng.uniform(1e9, 1.4e9, N),
    }


# ---------------------------------------------------------------------------------------------
# without LAL


def test_known_detectors_and_lookup():
    assert known_detectors() == ("H1", "K1", "L1", "V1")
    for name in known_detectors():
        det = get_detector(name)
        assert isinstance(det, Detector) and det.name == name


@pytest.mark.parametrize("bad", ["X1", "h1", "", None])
def test_unknown_detector_is_a_config_error(bad):
    with pytest.raises(ConfigError) as exc:
        get_detector(bad)
    msg = str(exc.value)
    assert repr(bad) in msg and "H1" in msg and "V1" in msg


def test_unknown_detector_message_names_x1():
    with pytest.raises(ConfigError, match=r"unknown detector 'X1'; known: H1, K1, L1, V1"):
        get_detector("X1")


def test_detector_is_frozen_and_cached_arrays_read_only():
    det = get_detector("H1")
    with pytest.raises(AttributeError):
        det.latitude = 0.0
    assert det.location is det.location and det.response is det.response
    for arr in (det.location, det.response):
        with pytest.raises(ValueError):
            arr[0] = 0.0


@pytest.mark.parametrize("name", NAMES)
def test_location_on_earth_surface_and_matches_header(name):
    loc = get_detector(name).location
    assert loc.shape == (3,)
    assert 6.36e6 < np.linalg.norm(loc) < 6.39e6
    # Recomputed from the site angles; the header's KAGRA vector differs by 1.25 mm.
    np.testing.assert_allclose(loc, HEADER_LOCATION[name], rtol=0, atol=2e-3)


@pytest.mark.parametrize("name", NAMES)
def test_response_symmetric_traceless_and_matches_header_arms(name):
    d = get_detector(name).response
    assert d.shape == (3, 3) and d.dtype == np.float64
    np.testing.assert_array_equal(d, d.T)
    # Trace = (|x|² − |y|²)/2, zero but for single-precision rounding of the arm vectors.
    assert abs(np.trace(d)) < 1e-7
    x, y = (np.array(v) for v in HEADER_ARMS[name])
    # Single-precision storage (as in LAL) accounts for the ~1e-7 difference.
    np.testing.assert_allclose(d, (np.outer(x, x) - np.outer(y, y)) / 2, rtol=0, atol=2e-7)


def test_light_travel_times():
    for (a, b), expected in LAL_LIGHT_TRAVEL.items():
        t = light_travel_time(a, b)
        assert abs(t - expected) < 0.05e-3, (a, b, t)
        assert light_travel_time(b, a) == t
    assert 10.00e-3 < light_travel_time("H1", "L1") < 10.02e-3
    assert light_travel_time("K1", get_detector("K1")) == 0.0


def test_gmst_shape_range_and_sidereal_day():
    assert isinstance(gmst(1e9), float)
    t = np.linspace(1e9, 1.5e9, 12).reshape(3, 4)
    g = gmst(t)
    assert g.shape == (3, 4) and np.all((g >= 0) & (g < 2 * np.pi))
    sidereal_day = 86_164.0905  # s
    np.testing.assert_allclose(_wrap(gmst(t + sidereal_day) - g), 0.0, atol=1e-6)


def test_gmst_matches_astropy_iau1982_with_ut1_equal_utc(sky):
    from astropy.time import Time
    from astropy.utils import iers

    # No IERS tables: UT1 = UTC by construction, and never fetch an updated leap-second file.
    with iers.conf.set_temp("auto_download", False):
        t = Time(sky["gps"], format="gps")
        t.delta_ut1_utc = 0.0
        ref = t.sidereal_time("mean", "greenwich", model="IAU1982").rad
    np.testing.assert_allclose(_wrap(gmst(sky["gps"]) - ref), 0.0, atol=1e-8)


@pytest.mark.parametrize("name", NAMES)
def test_antenna_pattern_bounded(name, sky):
    fp, fc = antenna_pattern(name, sky["ra"], sky["dec"], sky["psi"], sky["gps"])
    assert fp.shape == fc.shape == (N,)
    # Equality only for a wave along the normal of level, perpendicular arms; the slack covers
    # the single-precision tensor.
    assert np.all(fp**2 + fc**2 <= 1.0 + 1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_antenna_pattern_polarisation_rotation(name, sky):
    ra, dec, psi, gps = sky["ra"], sky["dec"], sky["psi"], sky["gps"]
    fp, fc = antenna_pattern(name, ra, dec, psi, gps)
    fp45, fc45 = antenna_pattern(name, ra, dec, psi + np.pi / 4, gps)
    np.testing.assert_allclose(fp45, fc, rtol=0, atol=1e-12)
    np.testing.assert_allclose(fc45, -fp, rtol=0, atol=1e-12)
    fp90, fc90 = antenna_pattern(name, ra, dec, psi + np.pi / 2, gps)
    np.testing.assert_allclose(fp90, -fp, rtol=0, atol=1e-12)
    np.testing.assert_allclose(fc90, -fc, rtol=0, atol=1e-12)


def test_antenna_pattern_overhead_source_sees_full_response():
    # Virgo's arms are level and perpendicular: a wave from the local zenith (geodetic
    # vertical) gives F+² + F×² = 1 whatever the polarisation.
    det = get_detector("V1")
    gps = 1.2e9
    ra, dec = det.longitude + gmst(gps), det.latitude
    fp, fc = antenna_pattern(det, ra, dec, np.linspace(0, np.pi, 7), gps)
    np.testing.assert_allclose(fp**2 + fc**2, 1.0, rtol=0, atol=1e-6)


def test_antenna_pattern_broadcasts_and_returns_floats_for_scalars():
    fp, fc = antenna_pattern("L1", np.zeros((5, 1)), np.linspace(-1, 1, 4), 0.3, 1.1e9)
    assert fp.shape == fc.shape == (5, 4)
    fp, fc = antenna_pattern("L1", 1.0, 0.2, 0.3, 1.1e9)
    assert isinstance(fp, float) and isinstance(fc, float)


@pytest.mark.parametrize("name", NAMES)
def test_time_delay_bounded_and_signed(name, sky):
    det = get_detector(name)
    r = det.location
    bound = np.linalg.norm(r) / C_SI
    dt = time_delay_from_earth_center(name, sky["ra"], sky["dec"], sky["gps"])
    assert dt.shape == (N,) and np.all(np.abs(dt) <= bound)
    # A source straight above the vertex (seen from the geocentre) reaches it first, by |r|/c.
    gps = 1.3e9
    ra = np.arctan2(r[1], r[0]) + gmst(gps)
    dec = np.arcsin(r[2] / np.linalg.norm(r))
    near = time_delay_from_earth_center(det, ra, dec, gps)
    far = time_delay_from_earth_center(det, ra + np.pi, -dec, gps)
    assert near == pytest.approx(-bound, abs=1e-12)
    assert far == pytest.approx(bound, abs=1e-12)


# ---------------------------------------------------------------------------------------------
# against LALSuite


LAL_INDEX = {"H1": "LHO_4K_DETECTOR", "L1": "LLO_4K_DETECTOR", "V1": "VIRGO_DETECTOR",
             "K1": "KAGRA_DETECTOR"}


@pytest.fixture(scope="module")
def lal():
    return pytest.importorskip("lal")


def _cached(lal, name):
    return lal.CachedDetectors[getattr(lal, LAL_INDEX[name])]


def _created(lal, name):
    """XLALCreateDetector run on the cached site's FrDetector (renamed so the cache is missed)."""
    src = _cached(lal, name).frDetector
    fr = lal.FrDetector()
    for field in ("vertexLatitudeRadians", "vertexLongitudeRadians", "vertexElevation",
                  "xArmAzimuthRadians", "yArmAzimuthRadians", "xArmAltitudeRadians",
                  "yArmAltitudeRadians"):
        setattr(fr, field, getattr(src, field))
    fr.name = f"{name}-recomputed"
    return lal.CreateDetector(lal.Detector(), fr, lal.LALDETECTORTYPE_IFODIFF)


@pytest.mark.parametrize("name", NAMES)
def test_site_constants_match_lal(lal, name):
    det, fr = get_detector(name), _cached(lal, name).frDetector
    assert fr.prefix == name
    assert det.latitude == fr.vertexLatitudeRadians
    assert det.longitude == fr.vertexLongitudeRadians
    # LAL keeps these in single precision.
    for ours, theirs in [(det.elevation, fr.vertexElevation),
                         (det.xarm_azimuth, fr.xArmAzimuthRadians),
                         (det.yarm_azimuth, fr.yArmAzimuthRadians),
                         (det.xarm_altitude, fr.xArmAltitudeRadians),
                         (det.yarm_altitude, fr.yArmAltitudeRadians)]:
        assert np.float32(ours) == np.float32(theirs)


@pytest.mark.parametrize("name", NAMES)
def test_location_and_response_match_lal(lal, name):
    det = get_detector(name)
    created = _created(lal, name)
    np.testing.assert_allclose(det.location, created.location, rtol=0, atol=1e-3)
    np.testing.assert_allclose(det.response, created.response, rtol=0, atol=1e-9)
    # The cached entries come from the header's separately rounded Cartesian constants:
    # KAGRA's vector is 1.25 mm away, the tensors up to 1.1e-7.
    cached = _cached(lal, name)
    np.testing.assert_allclose(det.location, cached.location, rtol=0, atol=2e-3)
    np.testing.assert_allclose(det.response, cached.response, rtol=0, atol=2e-7)


def test_gmst_matches_lal(lal, sky):
    ref = np.array([lal.GreenwichMeanSiderealTime(t) for t in sky["gps"]])
    np.testing.assert_allclose(_wrap(gmst(sky["gps"]) - ref), 0.0, atol=1e-7)
    # LAL does not reduce the angle modulo 2π; gmst does.
    lal_1e9 = lal.GreenwichMeanSiderealTime(1e9)
    assert gmst(1e9) == pytest.approx(np.mod(lal_1e9, 2 * np.pi), abs=1e-7)


@pytest.mark.parametrize("step", [46828801, 599184013, 820108814, 914803215, 1025136016,
                                  1119744017, 1167264018])
def test_gmst_matches_lal_across_leap_seconds(lal, step):
    t = step + np.array([-2.0, -1.0, -0.5, 0.0, 0.25, 1.0])
    ref = np.array([lal.GreenwichMeanSiderealTime(float(x)) for x in t])
    np.testing.assert_allclose(_wrap(gmst(t) - ref), 0.0, atol=1e-9)


@pytest.mark.parametrize("name", NAMES)
def test_antenna_pattern_matches_lal(lal, name, sky):
    ra, dec, psi, gps = sky["ra"], sky["dec"], sky["psi"], sky["gps"]
    fp, fc = antenna_pattern(name, ra, dec, psi, gps)
    response = _cached(lal, name).response
    ref = np.array([lal.ComputeDetAMResponse(response, a, d, p, lal.GreenwichMeanSiderealTime(t))
                    for a, d, p, t in zip(ra, dec, psi, gps)])
    np.testing.assert_allclose(fp, ref[:, 0], rtol=0, atol=1e-6)
    np.testing.assert_allclose(fc, ref[:, 1], rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_time_delay_matches_lal(lal, name, sky):
    ra, dec, gps = sky["ra"], sky["dec"], sky["gps"]
    dt = time_delay_from_earth_center(name, ra, dec, gps)
    location = _cached(lal, name).location
    ref = np.array([lal.TimeDelayFromEarthCenter(location, a, d, t)
                    for a, d, t in zip(ra, dec, gps)])
    np.testing.assert_allclose(dt, ref, rtol=0, atol=1e-8)


def test_light_travel_time_matches_lal(lal):
    for a in NAMES:
        for b in NAMES:
            ra, rb = np.array(_cached(lal, a).location), np.array(_cached(lal, b).location)
            expected = np.linalg.norm(ra - rb) / lal.C_SI
            assert light_travel_time(a, b) == pytest.approx(expected, abs=1e-9)
