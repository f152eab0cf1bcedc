"""Coherent post-processing: response basis, the sky maximum against a brute-force float64 loop,
and recovery of a simulated network signal (ALGORITHMS.md §3)."""

from __future__ import annotations

import numpy as np
import pytest

from gwbatch.coherent.network import coherent_sky_table
from gwbatch.coherent.statistic import at_directions, max_over_sky, sky_argmax, spread_max, trials_reaching
from gwbatch.errors import ConfigError
from gwbatch.sky.grid import angular_distance, pixel_of, sky_grid
from gwbatch.sky.network import network_geometry

GPS = 1187008882.4
FS = 2048.0
IFOS3 = ("H1", "L1", "V1")


def test_sky_grid_orders():
    assert sky_grid(5).size == 12288 and sky_grid(7).size == 196608
    g = sky_grid(3)
    assert g.size * g.pixel_area_deg2 == pytest.approx(41252.96, rel=1e-6)
    assert np.all(pixel_of(3, g.ra, g.dec) == np.arange(g.size))  # nested pixel centres round-trip
    with pytest.raises(ConfigError, match="order"):
        sky_grid(11)


def svd_basis(table):
    """U of the SVD of A_p = [sigma F+, sigma Fx] (the seed's definition), float64 (P, D, D)."""
    a = table.sigma[None, :, None] * np.stack([table.fplus, table.fcross], axis=-1).astype(np.float64)
    return np.linalg.svd(a, full_matrices=True)[0]


def brute_force(snr, slot, sample, pivot, offsets, basis, n_trials, step, lo, span):
    """The definition, one (candidate, trial, direction) at a time, in float64: gather Z at the
    rounded arrival offsets, w = U^T Z, coherent = |w_0|^2 + |w_1|^2, null = the rest."""
    snr = snr.astype(np.complex128)
    n_det = snr.shape[0]
    out = np.zeros((len(slot), n_trials + 1, basis.shape[0], 2))
    for c in range(len(slot)):
        s, piv, t = slot[c], pivot[c], sample[c]
        for k in range(n_trials + 1):
            for p in range(basis.shape[0]):
                z = np.array([snr[j, s, lo + (t + offsets[piv, p, j] + k * step * (j - piv) - lo) % span]
                              for j in range(n_det)])
                w = basis[p].T @ z
                out[c, k, p] = np.sum(np.abs(w[:2]) ** 2), np.sum(np.abs(w[2:]) ** 2)
    return out


def test_offsets_are_rounded_delay_differences():
    geo = network_geometry(IFOS3, sky_grid(3), GPS)
    off = coherent_sky_table(geo, FS, np.ones(3)).offsets
    exact = (geo.delays[None, :, :] - geo.delays.T[:, :, None]) * FS  # [pivot, p, j]
    assert np.all(np.abs(off - exact) <= 0.5 + 1e-4) and np.all(off[[0, 1, 2], :, [0, 1, 2]] == 0)
    # H1-V1 is the longest baseline: 27.3 ms
    assert np.abs(off[0, :, 2]).max() == pytest.approx(0.0273 * FS, abs=1.0)


@pytest.mark.parametrize("ifos", [IFOS3, ("H1", "L1"), ("H1", "L1", "V1", "K1")])
def test_max_over_sky_matches_brute_force(ifos):
    rng = np.random.default_rng(5)
    n_det, n_slot, n = len(ifos), 3, 3000
    snr = (rng.normal(size=(n_det, n_slot, n)) + 1j * rng.normal(size=(n_det, n_slot, n))).astype(np.complex64)
    geo = network_geometry(ifos, sky_grid(2), GPS)
    table = coherent_sky_table(geo, FS, rng.uniform(20, 200, size=n_det))
    slot = np.array([0, 1, 2, 1, 0])
    pivot = np.arange(5) % n_det
    lo, span = 200, 2500
    sample = np.array([250, 1000, 2690, 1500, 2000])  # near both ends of the window: trials wrap
    n_trials, step = 6, 205
    got = max_over_sky(snr, slot, sample, pivot, table, n_trials, step, (lo, span))
    ref = brute_force(snr, slot, sample, pivot, table.offsets, svd_basis(table), n_trials, step, lo, span)
    # the sky table holds the projection in float32: agreement to ~1e-6 (required: 1e-4)
    best = ref[..., 0].max(axis=2)
    np.testing.assert_allclose(got.rho_c2, best, rtol=1e-5)
    at_pixel = np.take_along_axis(ref, got.pixel[..., None, None].astype(int), axis=2)[:, :, 0]
    np.testing.assert_allclose(at_pixel[..., 0], best, rtol=1e-5)  # the argmax, or a tie within that
    np.testing.assert_allclose(got.null2, at_pixel[..., 1], rtol=1e-4, atol=1e-5 * best.max())
    if n_det == 2:  # two detectors: the coherent SNR is all of |Z|^2, the null stream is empty
        assert np.all(got.null2 == 0)
    # full-sky maps at zero lag
    maps = at_directions(snr, slot, sample, pivot, table, np.arange(table.n_dir)[None, :], 0,
                         window=(lo, span))
    np.testing.assert_allclose(maps.rho_c2, ref[:, 0, :, 0], rtol=1e-5)
    np.testing.assert_allclose(maps.null2, ref[:, 0, :, 1], rtol=1e-4, atol=1e-5 * best.max())


@pytest.mark.parametrize("width", [1, 2, 31, 32, 33, 70])
def test_spread_max_is_the_wrapped_window_maximum(width):
    """Each (candidate, trial)'s largest ``|z|^2`` over its window of the ring, wrapped, by brute force."""
    rng = np.random.default_rng(width)
    z = (rng.normal(size=(3, 500)) + 1j * rng.normal(size=(3, 500))).astype(np.complex64)
    slot, base = np.array([0, 2, 1, 2]), np.array([-40, 3, 190, 250])
    lo, span, k0, n_k, delta = 50, 400, 5, 9, -37
    power = z.real * z.real + z.imag * z.imag
    ref = np.empty((slot.size, n_k), np.float32)
    for c in range(slot.size):
        for i in range(n_k):
            start = base[c] + (k0 + i) * delta
            ref[c, i] = power[slot[c], lo + (start + np.arange(width)) % span].max()
    np.testing.assert_array_equal(spread_max(z, slot, base, k0, n_k, delta, lo, span, width), ref)
    with pytest.raises(ValueError, match="401 samples on a ring of 400"):
        spread_max(z, slot, base, k0, n_k, delta, lo, span, 401)


@pytest.mark.parametrize("ifos", [("H1", "L1"), IFOS3])
def test_deep_trials_alone_match_the_run_of_all_trials(ifos):
    """The network-SNR bound keeps every (candidate, trial) whose sky maximum reaches the floor
    (and few others), and the kernel run on those pairs alone (``first``) gives the values a run
    of all trials gives, bit for bit."""
    rng = np.random.default_rng(11)
    n_det, n_slot, n = len(ifos), 4, 6000
    snr = (rng.normal(size=(n_det, n_slot, n)) + 1j * rng.normal(size=(n_det, n_slot, n))).astype(np.complex64)
    snr[:, :, 3000:3004] *= 3.0  # a loud stretch in every detector: some trials line loud samples up
    table = coherent_sky_table(network_geometry(ifos, sky_grid(3), GPS), FS, rng.uniform(20, 200, size=n_det))
    slot = np.array([0, 1, 2, 3, 1, 2])
    pivot = np.arange(6) % n_det
    sample = np.array([3001, 3002, 400, 5700, 3000, 3003])
    window, step, n_trials = (100, 5800), 23, 240
    rho_c2, pixel = sky_argmax(snr, slot, sample, pivot, table, n_trials, step, window)
    floor = float(np.quantile(rho_c2[:, 1:], 0.97))
    found = trials_reaching(snr, slot, sample, pivot, table, 1, n_trials, step, window, floor)
    c, k = found.c, found.k
    assert found.rest2 == -np.inf
    reach = set(zip(*np.nonzero(rho_c2 >= floor)))
    reach = {(a, b) for a, b in reach if b >= 1}
    kept = set(zip(c.tolist(), k.tolist()))
    assert reach <= kept and len(reach) > 0
    assert len(kept) < 0.5 * len(slot) * n_trials  # far fewer than all pairs
    alone_rc, alone_pix = sky_argmax(snr, slot[c], sample[c], pivot[c], table, 0, step, window, first=k)
    np.testing.assert_array_equal(alone_rc[:, 0], rho_c2[c, k])
    np.testing.assert_array_equal(alone_pix[:, 0], pixel[c, k])
    # in rounds of 20 pairs (and ties), largest bounds first: the same pairs, each once
    rounds, ceiling = [], np.inf
    while True:
        part = trials_reaching(snr, slot, sample, pivot, table, 1, n_trials, step, window, floor, ceiling2=ceiling,
                               limit=20)
        assert part.c.size >= min(20, len(kept) - sum(len(r) for r in rounds))
        assert part.rest2 < part.bound2.min()
        rounds.append(list(zip(part.c.tolist(), part.k.tolist())))
        if part.rest2 == -np.inf:
            break
        ceiling = part.bound2.min()
    flat = [pair for r in rounds for pair in r]
    assert len(flat) == len(set(flat)) and set(flat) == kept and len(rounds) > 1


def network_signal(rng, ifos, ra, dec, sigma, amplitude, n=4096, t_geo=2000):
    """SNR series with a network signal: in detector j the complex SNR of the source is
    ``sigma_j (F+ h+ + Fx hx)`` at its arrival sample, with a peak a few samples wide, in unit
    complex Gaussian noise (E|z|^2 = 2)."""
    from gwbatch.detectors import antenna_pattern, time_delay_from_earth_center

    snr = (rng.normal(size=(len(ifos), 1, n)) + 1j * rng.normal(size=(len(ifos), 1, n))).astype(np.complex64)
    lags = np.arange(-8, 9)
    shape = np.exp(-0.5 * (lags / 2.0) ** 2)
    expected = []
    for j, ifo in enumerate(ifos):
        fp, fc = antenna_pattern(ifo, ra, dec, 0.0, GPS)
        zj = sigma[j] * (fp * amplitude[0] + fc * amplitude[1])
        t = t_geo + int(np.floor(time_delay_from_earth_center(ifo, ra, dec, GPS) * FS + 0.5))
        snr[j, 0, t + lags] += (zj * shape).astype(np.complex64)
        expected.append((t, zj))
    return snr, expected


def test_recovers_a_network_signal():
    rng = np.random.default_rng(2)
    ra, dec = 1.95, -0.41
    sigma = np.array([1.0, 1.2, 0.6])
    amplitude = np.array([28.0 + 12.0j, -10.0 + 22.0j])
    snr, expected = network_signal(rng, IFOS3, ra, dec, sigma, amplitude)
    grid = sky_grid(5)
    geo = network_geometry(IFOS3, grid, GPS)
    table = coherent_sky_table(geo, FS, sigma)
    t_h1 = expected[0][0]
    got = max_over_sky(snr, [0], [t_h1], [0], table, n_trials=8, step=int(0.1 * FS))
    network = np.sqrt(sum(abs(z) ** 2 for _, z in expected))  # measured 16.9
    # zero lag: the coherent SNR carries the signal, within the noise (4 real dof, unit variance)
    assert abs(np.sqrt(got.rho_c2[0, 0]) - network) < 1.5, (np.sqrt(got.rho_c2[0, 0]), network)
    assert got.null2[0, 0] < 12.0  # chi^2 with 2 dof (complex null stream): p ~ 0.0025
    maps = at_directions(snr, [0], [t_h1], [0], table, np.arange(grid.size)[None, :], 0)
    rc2 = maps.rho_c2[0]
    assert rc2[got.pixel[0, 0]] == pytest.approx(rc2.max(), rel=1e-9)
    truth = int(pixel_of(5, ra, dec))
    # the true direction's pixel is inside the peak (its centre is up to a degree off the source and
    # its delays round differently, which costs a few percent of a detector's peak)
    assert rc2[truth] > 0.9 * rc2.max()
    error = np.degrees(angular_distance(grid.ra[got.pixel[0, 0]], grid.dec[got.pixel[0, 0]], ra, dec))
    assert error < 5.0, error
    # time-shifted trials keep the pivot's own SNR and see noise elsewhere: |z_H1|^2 plus the sky
    # maximum of noise in L1 and V1 (measured 62-74, against 293 at zero lag)
    assert np.all(got.rho_c2[0, 1:] < abs(snr[0, 0, t_h1]) ** 2 + 30.0)
    # the per-detector SNRs at the best direction are the injected ones, within the noise
    z = maps.z[0, got.pixel[0, 0]]
    assert np.all(np.abs(np.abs(z) - [abs(e[1]) for e in expected]) < 3.0)


@pytest.mark.parametrize("ifos", [("H1",), ("H1", "L1"), IFOS3, ("H1", "L1", "V1", "K1")])
@pytest.mark.parametrize("order", [3, 5])
def test_direction_groups_hold_every_direction_once(ifos, order):
    """Every direction is evaluated once per pivot, in groups of 1..GROUP_MAX directions that share
    every detector's offset; sets of equal offsets are cut only at GROUP_MAX."""
    from gwbatch.coherent.network import GROUP_MAX

    table = coherent_sky_table(network_geometry(ifos, sky_grid(order), GPS), 2048.0, np.linspace(1.0, 2.0, len(ifos)))
    groups = table.groups
    for piv in range(len(ifos)):
        order_ = groups.order[piv]
        np.testing.assert_array_equal(np.sort(order_), np.arange(table.n_dir))
        seen = {}
        for k in range(1, GROUP_MAX + 1):
            g0, g1, q0 = groups.size[piv, k - 1]
            if k > 1:
                assert g0 == groups.size[piv, k - 2, 1] and q0 == groups.size[piv, k - 2, 2] + (g0 - groups.size[piv, k - 2, 0]) * (k - 1)
            for g in range(g0, g1):
                members = order_[q0 + (g - g0) * k: q0 + (g - g0 + 1) * k]
                np.testing.assert_array_equal(table.offsets[piv, members], np.broadcast_to(groups.offsets[piv, g], (k, len(ifos))))
                key = tuple(groups.offsets[piv, g])
                seen[key] = seen.get(key, 0) + k
        last = groups.size[piv, -1]
        assert last[2] + (last[1] - last[0]) * GROUP_MAX == table.n_dir
        # each set of directions with equal offsets is gathered whole
        _, counts = np.unique(table.offsets[piv], axis=0, return_counts=True)
        assert sorted(seen.values()) == sorted(counts.tolist())


@pytest.mark.parametrize("ifos", [("H1",), ("H1", "L1"), IFOS3, ("H1", "L1", "V1", "K1")])
def test_cuda_group_records_decode(ifos):
    """The CUDA kernel's group records (the key, whose words are each non-pivot detector's byte
    offset into the shared-memory windows, then the group's projections in evaluation order, packed)
    hold the sky table: decoded here as the kernel reads them."""
    from gwbatch.coherent._cuda import (
        RECORD_PAD,
        STRIDE,
        device_table,
        direction_floats,
        key_ints,
        record_float4s,
    )

    table = coherent_sky_table(network_geometry(ifos, sky_grid(3), GPS), 4096.0, np.linspace(1.0, 2.0, len(ifos)))
    dev = device_table(table)
    n_det = len(ifos)
    n_key, n_floats = key_ints(n_det), direction_floats(n_det)
    groups = table.groups
    for piv in range(n_det):
        others = [j for j in range(n_det) if j != piv]
        keys, proj = [], []
        end = 0
        for k, (g0, g1, q0, r0) in enumerate(dev["size"][piv], start=1):
            assert r0 == end  # the sizes' records follow one another
            rec = record_float4s(n_det, k)
            for g in range(g0, g1):
                flat = dev["records"][piv, r0 + (g - g0) * rec:r0 + (g - g0 + 1) * rec].ravel()
                keys.append(flat[:n_key].view(np.int32))
                proj.append(flat[n_key:n_key + k * n_floats].reshape(k, n_floats))
            end = r0 + (g1 - g0) * rec
        assert dev["records"].shape[1] >= end + RECORD_PAD
        n_groups = int(dev["size"][piv, -1, 1])
        assert len(keys) == n_groups
        keys, proj = np.array(keys), np.concatenate(proj)
        for m, j in enumerate(others):
            row = keys[:, m] // (STRIDE * 8)  # bytes from a lane's column to its row
            assert np.all(keys[:, m] % (STRIDE * 8) == 0)
            rel = row - dev["row_base"][piv, j]
            np.testing.assert_array_equal(rel + dev["start"][piv, j], groups.offsets[piv, :n_groups, j])
            width = dev["row_base"][piv, j + 1] - dev["row_base"][piv, j]
            assert rel.min() >= 0 and rel.max() < width
        assert dev["row_base"][piv, piv + 1] == dev["row_base"][piv, piv]  # the pivot has no window
        n_geo = table.projection.shape[1]
        np.testing.assert_array_equal(proj[:, :n_geo], table.projection[groups.order[piv]])
        assert not proj[:, n_geo:].any()


def test_sky_maximum_ties_go_to_the_first_direction_in_evaluation_order():
    """With no signal anywhere every direction ties at zero: the maximum is the first direction of
    the table's evaluation order (the same rule as the CUDA kernel's)."""
    table = coherent_sky_table(network_geometry(IFOS3, sky_grid(3), GPS), 2048.0, np.array([1.0, 1.2, 0.6]))
    snr = np.zeros((3, 1, 4096), np.complex64)
    got = max_over_sky(snr, [0, 0, 0], [2000, 2000, 2000], [0, 1, 2], table, n_trials=2, step=100)
    assert np.all(got.rho_c2 == 0.0)
    np.testing.assert_array_equal(got.pixel, np.repeat(table.groups.order[:, :1], 3, axis=1))


def test_posterior_and_areas():
    from gwbatch.sky.skymap import (
        credible_area,
        credible_level,
        posterior,
        searched_area,
    )

    grid = sky_grid(4)
    ra0, dec0 = 2.0, 0.3
    dist = angular_distance(grid.ra, grid.dec, ra0, dec0)
    # rho_c^2 / 2 = -(dist / width)^2 / 2 gives a Gaussian blob of angular width 5 degrees at
    # temperature 1, sqrt(T) times wider at temperature T
    width = np.radians(5.0)
    prob = posterior(-(dist / width) ** 2, temperature=1.0)
    wide = posterior(-(dist / width) ** 2, temperature=4.0)
    assert credible_area(wide, 0.9) == pytest.approx(4.0 * credible_area(prob, 0.9), rel=0.1)
    with pytest.raises(ValueError, match="temperature"):
        posterior(dist, temperature=0.0)
    assert prob.sum() == pytest.approx(1.0, abs=1e-12)
    # a 2-D Gaussian of width s holds 90% within 2.146 s: area pi (2.146 s)^2
    expected = np.pi * (2.146 * 5.0) ** 2
    assert credible_area(prob, 0.9) == pytest.approx(expected, rel=0.08)
    assert credible_area(np.full(grid.size, 1.0 / grid.size), 0.9) == pytest.approx(0.9 * 41252.96, rel=1e-3)
    peak = int(np.argmax(prob))
    assert searched_area(prob, peak) == pytest.approx(grid.pixel_area_deg2)
    assert credible_level(prob, peak) == pytest.approx(prob[peak])
    far = int(np.argmax(dist))
    assert credible_level(prob, far) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="credible level"):
        credible_area(prob, 1.5)


def test_skymap_fits_roundtrip(tmp_path):
    from astropy.io import fits
    from astropy_healpix import HEALPix

    from gwbatch.io.skymaps import read_skymap, write_skymap
    from gwbatch.sky.skymap import posterior

    grid = sky_grid(3)
    prob = posterior(np.random.default_rng(0).normal(size=grid.size) * 4)
    path = write_skymap(tmp_path / "maps" / "cand.fits", prob, gps_time=1126259462.42, object_name="cand-1")
    back, header = read_skymap(path)
    np.testing.assert_array_equal(back, prob)
    assert header["NSIDE"] == 8 and header["ORDERING"] == "NESTED" and header["COORDSYS"] == "C"
    assert header["DATE-OBS"].startswith("2015-09-14T09:50:45")
    assert not list(tmp_path.glob("maps/.*"))  # no temporary left behind
    # an independent reader: astropy-healpix maps the most probable pixel to the same direction
    with fits.open(path) as hdul:
        data = hdul[1].data["PROB"]
    hp = HEALPix(nside=8, order="nested")
    lon, lat = hp.healpix_to_lonlat([int(np.argmax(data))])
    assert lon[0].rad == pytest.approx(grid.ra[np.argmax(prob)]) and lat[0].rad == pytest.approx(grid.dec[np.argmax(prob)])
    with pytest.raises(ValueError, match="12 \\* nside"):
        write_skymap(tmp_path / "bad.fits", np.ones(100))


def test_pp_test_accepts_calibrated_and_rejects_overconfident_maps():
    """Truths drawn from the maps themselves give uniform credible levels (p > 0.01); the same
    truths judged by maps four times too narrow do not."""
    from gwbatch.sky.skymap import credible_level, posterior, pp_test

    rng = np.random.default_rng(7)
    grid = sky_grid(3)
    calibrated, narrow = [], []
    for _ in range(200):
        centre = rng.integers(grid.size)
        dist = angular_distance(grid.ra, grid.dec, grid.ra[centre], grid.dec[centre])
        log_l = -(dist / np.radians(15.0)) ** 2
        prob = posterior(log_l)
        truth = rng.choice(grid.size, p=prob)
        calibrated.append(credible_level(prob, truth))
        narrow.append(credible_level(posterior(16.0 * log_l), truth))
    assert pp_test(calibrated)[1] > 0.01
    assert pp_test(narrow)[1] < 1e-6
    with pytest.raises(ValueError, match="credible levels"):
        pp_test([1.5])


def test_coherent_batch_fits_in_the_filter_pass_memory():
    """Templates per coherent pass: the filter pass's reserved 28 bytes per template and sample
    hold 8 per detector plus 12 of filter scratch (the one-day chunk: 906 of a 1165-template pass,
    so its ~460 candidate templates go at once); never more than the search's batch, never none."""
    from gwbatch.coherent.chunk import FILTER_SCRATCH, coherent_batch
    from gwbatch.spiir.triggers import PASS_BYTES

    assert (PASS_BYTES, FILTER_SCRATCH) == (28, 12)
    assert coherent_batch(1165, 3, 2_300_000, "cupy") == 906
    assert coherent_batch(64, 3, 10**7, "numpy") == 49
    assert coherent_batch(8, 2, 1000, "numpy") == 8  # the host's 512 MiB floor holds far more
    assert coherent_batch(1, 4, 10**10, "cupy") == 1
