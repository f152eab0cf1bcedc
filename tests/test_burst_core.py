"""Burst search core (ALGORITHMS.md §4): the Gabor pixels (noise statistics, tight frame, circular
framing, frame validity), band-limited upsampling and delayed amplitudes, pixel clusters across
resolutions, black-pixel thresholds, the sky loop's CPU twin against a brute-force float64
reference, the event of a noise-free signal, and one chunk end to end on synthetic white noise with
an injected sine-Gaussian."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chi2

from gwbatch.burst.chunk import BurstNetwork, BurstSettings, burst_chunk, cluster_event
from gwbatch.burst.clusters import (
    Pixels,
    best_level_pixels,
    cluster_pixels,
    dilate,
    threshold,
)
from gwbatch.burst.delays import UPSAMPLE, delay_range, delayed_amplitudes, upsample
from gwbatch.burst.skyloop import (
    FIELDS,
    REJECTED,
    ClusterBatch,
    SkyLoopCuts,
    SkyTable,
    coherent_energy_bound,
    direction_statistics,
    sky_table,
    skyloop_max,
)
from gwbatch.burst.tfmap import frame_valid, resolutions, tf_map
from gwbatch.detectors import antenna_pattern, time_delay_from_earth_center
from gwbatch.sky.grid import angular_distance, sky_grid
from gwbatch.sky.network import network_geometry

FS = 1024.0
GPS = 1187008882.4
IFOS = ("H1", "L1", "V1")


def sine_gaussian(t, f0, q, phase=0.0):
    """exp(-t^2 / tau^2) cos(2 pi f0 t + phase), tau = Q / (sqrt(2) pi f0)."""
    tau = q / (np.sqrt(2.0) * np.pi * f0)
    return np.exp(-(t / tau) ** 2) * np.cos(2.0 * np.pi * f0 * t + phase)


# ---------------------------------------------------------------------------------------------
# time-frequency pixels


@pytest.mark.parametrize("df", [32.0, 16.0, 8.0])
def test_tf_map_white_noise_statistics(df):
    """Unit-variance white noise: Re a and Im a have unit variance, |a|^2 has mean 2 (chi^2_2)."""
    x = np.random.default_rng(1).normal(size=2**16).astype(np.float32)
    (res,) = resolutions(FS, [df], 32.0, 480.0)
    a = tf_map(x, res)
    assert a.dtype == np.complex64 and a.shape == (2**16 // res.hop, res.n_bins)
    # 3%; measured var(Re) 0.992 / 0.990 / 0.988, var(Im) 1.003 / 1.002 / 1.002 at 32 / 16 / 8 Hz
    assert np.var(a.real) == pytest.approx(1.0, rel=0.03)
    assert np.var(a.imag) == pytest.approx(1.0, rel=0.03)
    # 3%; measured mean |a|^2 1.995 / 1.992 / 1.990
    assert np.mean(np.abs(a) ** 2) == pytest.approx(2.0, rel=0.03)


def test_tf_map_is_a_tight_frame():
    """For a signal inside the kept band the pixel energies sum to 2 sum s^2 at every resolution."""
    n = 2**14
    t = (np.arange(n) - n / 2 - 0.3) / FS
    s = sine_gaussian(t, 200.0, 9.0, phase=0.4).astype(np.float32)
    levels = resolutions(FS, [32, 16, 8], 1.0, FS / 2 - 1)
    assert [r.length for r in levels] == [32, 64, 128]
    assert all(r.k_lo == 1 and r.k_hi == r.length // 2 - 1 for r in levels)  # every bin but DC and Nyquist
    target = 2.0 * np.sum(s.astype(np.float64) ** 2)
    for res in levels:
        energy = np.sum(np.abs(tf_map(s, res).astype(np.complex128)) ** 2)
        # 1e-3 relative; measured -3.0e-5 (32 samples), -3.7e-6 (64), -5.0e-7 (128): the leakage of
        # the sine window into the dropped DC and Nyquist bins
        assert energy == pytest.approx(target, rel=1e-3)


def test_tf_map_circular_framing():
    """Rolling the series by c hops rolls the frames by c, bit for bit (frames wrap around the window)."""
    x = np.random.default_rng(2).normal(size=4096).astype(np.float32)
    for res in resolutions(FS, [32, 16, 8], 32.0, 480.0):
        a = tf_map(x, res)
        for c in (1, 3, -5, 4096 // res.hop - 1):
            # exact: the same samples go through the same FFT (measured difference 0)
            np.testing.assert_array_equal(tf_map(np.roll(x, c * res.hop), res), np.roll(a, c, axis=0))


def test_frame_valid_marks_the_frames_over_a_bad_sample():
    """One invalid sample invalidates exactly the two frames that cover it, including the last frame
    that wraps around the end of the circular window onto sample 0."""
    n = 4096
    for res in resolutions(FS, [32, 16, 8], 32.0, 480.0):
        hop, length, n_frames = res.hop, res.length, n // res.hop
        assert frame_valid(np.ones(n, bool), res).all()
        for bad in (0, hop - 1, hop, 1234, n - hop, n - 1):
            valid = np.ones(n, bool)
            valid[bad] = False
            got = frame_valid(valid, res)
            covers = (bad - np.arange(n_frames) * hop) % n < length  # brute force, circular
            np.testing.assert_array_equal(got, ~covers)
            assert (~got).sum() == 2
        valid = np.ones(n, bool)
        valid[0] = False
        # sample 0 is read by frame 0 and by the last frame, which starts at n - hop and wraps
        assert np.flatnonzero(~frame_valid(valid, res)).tolist() == [0, n_frames - 1]


# ---------------------------------------------------------------------------------------------
# upsampling and delayed amplitudes


def test_upsample_keeps_samples_and_interpolates_sinusoids():
    n = 4096
    x = np.random.default_rng(3).normal(size=n).astype(np.float32)
    up = upsample(x)
    assert up.shape == (UPSAMPLE * n,) and up.dtype == np.float32
    # 1e-5; measured 0 (max |out[::4] - x|)
    assert np.abs(up[::UPSAMPLE] - x).max() < 1e-5
    m = np.arange(n)
    fine = np.arange(UPSAMPLE * n) / UPSAMPLE  # t = m' / (4 fs), in samples

    def series(t):  # 37 and 301 cycles over the window: 9.25 Hz and 75.3 Hz at 1024 Hz, far below Nyquist
        return np.cos(2 * np.pi * 37 * t / n + 0.3) + 0.5 * np.sin(2 * np.pi * 301 * t / n - 1.0)

    # 1e-4 absolute on unit amplitude; measured 1.4e-7 (float32 output)
    assert np.abs(upsample(series(m).astype(np.float32)) - series(fine)).max() < 1e-4


def band_limited(rng, n, n_lines=30):
    """A sum of sinusoids with whole numbers of cycles over the window (none near Nyquist), as a
    function of (fractional) sample time."""
    cycles = rng.integers(1, n // 2 - 200, size=n_lines)
    amp = rng.normal(size=n_lines)
    phase = rng.uniform(0, 2 * np.pi, n_lines)
    return lambda t: np.sum(amp[:, None] * np.cos(2 * np.pi * cycles[:, None] * np.asarray(t)[None, :] / n
                                                   + phase[:, None]), axis=0)


def test_delayed_amplitudes():
    """v[D + d] is the pixel of the data advanced by d quarter samples; ``shift`` reads the data
    ``shift`` samples later, as rolling it by -shift does."""
    n, n_delay = 4096, 10
    rng = np.random.default_rng(4)
    x = rng.normal(size=n).astype(np.float32)
    x_up = upsample(x)
    for res in resolutions(FS, [32, 16, 8], 32.0, 480.0):
        frames = rng.integers(0, n // res.hop, 25)
        frames[:2] = [0, n // res.hop - 1]  # the frames at both ends read across the wrap
        bins = rng.integers(res.k_lo, res.k_hi + 1, 25)
        col = bins - res.k_lo

        def pixels(series):
            return tf_map(series, res)[frames, col]

        v = delayed_amplitudes(x_up, res, frames, bins, 0, n_delay)
        assert v.shape == (25, 2 * n_delay + 1) and v.dtype == np.complex64
        scale = np.sqrt(np.mean(np.abs(tf_map(x, res)) ** 2))  # rms pixel amplitude
        # 1e-4 of the rms pixel amplitude; measured <= 2.4e-7 (d = 0), 1.9e-7 (d = +4), 2.2e-7 (d = -4)
        assert np.abs(v[:, n_delay] - pixels(x)).max() < 1e-4 * scale
        assert np.abs(v[:, n_delay + 4] - pixels(np.roll(x, -1))).max() < 1e-4 * scale
        assert np.abs(v[:, n_delay - 4] - pixels(np.roll(x, 1))).max() < 1e-4 * scale

        # half and quarter samples: a band-limited series known at every time
        f = band_limited(rng, n)
        m = np.arange(n)
        xb = f(m).astype(np.float32)
        vb = delayed_amplitudes(upsample(xb), res, frames, bins, 0, n_delay)
        scale_b = np.sqrt(np.mean(np.abs(tf_map(xb, res)) ** 2))
        # 1e-4 of the rms pixel amplitude; measured <= 4.0e-7 (d = +2), 2.8e-7 (d = -1)
        assert np.abs(vb[:, n_delay + 2] - pixels(f(m + 0.5).astype(np.float32))).max() < 1e-4 * scale_b
        assert np.abs(vb[:, n_delay - 1] - pixels(f(m - 0.25).astype(np.float32))).max() < 1e-4 * scale_b

        for shift in (3 * res.hop, 5, -7, n - 3):
            got = delayed_amplitudes(x_up, res, frames, bins, shift, n_delay)
            rolled = delayed_amplitudes(upsample(np.roll(x, -shift)), res, frames, bins, 0, n_delay)
            # 1e-5 of the rms amplitude; measured 0 (the same upsampled samples are read)
            assert np.abs(got - rolled).max() < 1e-5 * scale
            if shift % res.hop == 0:  # a whole number of hops: the pixels of later frames
                later = tf_map(x, res)[(frames + shift // res.hop) % (n // res.hop), col]
                assert np.abs(got[:, n_delay] - later).max() < 1e-4 * scale  # measured <= 1.9e-7


def test_delayed_amplitudes_of_pixels_sharing_frames_and_bins_are_each_pixels_own():
    """Pixels that share a frame (a cluster's bins) or a bin (its frames) share transforms; each row
    is still exactly the amplitude of its pixel computed alone, in any order."""
    rng = np.random.default_rng(9)
    x_up = upsample(rng.normal(size=4096).astype(np.float32))
    res = resolutions(FS, [16], 32.0, 480.0)[0]
    frames = np.array([5, 5, 5, 9, 9, 200, 5, 0, 255])
    bins = np.array([res.k_lo, res.k_lo + 1, res.k_hi, res.k_lo, res.k_hi, res.k_lo + 1, res.k_lo, res.k_hi, res.k_lo])
    together = delayed_amplitudes(x_up, res, frames, bins, 3 * res.hop, 6)
    alone = np.concatenate([delayed_amplitudes(x_up, res, frames[p:p + 1], bins[p:p + 1], 3 * res.hop, 6)
                            for p in range(frames.size)])
    assert np.array_equal(together, alone)
    assert np.array_equal(together[0], together[6]) and not np.array_equal(together[0], together[1])


# ---------------------------------------------------------------------------------------------
# clusters and thresholds


def pixels(rows, energy=None) -> Pixels:
    """Pixels from ``(level, frame, bin)`` rows."""
    a = np.array(rows, dtype=np.int64).reshape(-1, 3)
    e = np.ones(len(a)) if energy is None else np.asarray(energy, dtype=np.float64)
    return Pixels(a[:, 0], a[:, 1], a[:, 2], e)


def same(labels, i, j) -> bool:
    return bool(labels[i] == labels[j])


N_FRAMES = [64, 32, 16]


def test_cluster_pixels_within_a_level():
    # two 8-connected blobs: two labels
    labels = cluster_pixels(pixels([(0, 10, 5), (0, 10, 6), (0, 11, 6), (0, 20, 5), (0, 21, 5)]), N_FRAMES)
    assert labels.tolist() in ([0, 0, 0, 1, 1], [1, 1, 1, 0, 0])
    # diagonal steps join; a pixel two frames away does not
    px = pixels([(0, 10, 5), (0, 10, 6), (0, 11, 7),  # 0-2: blob A, (10, 6) -> (11, 7) diagonal
                 (0, 20, 5), (0, 21, 4),  # 3-4: blob B, anti-diagonal
                 (0, 23, 4),  # 5: two frames after (21, 4)
                 (0, 21, 6)])  # 6: two bins above (21, 4), diagonal to (20, 5)
    labels = cluster_pixels(px, N_FRAMES)
    assert len(set(labels.tolist())) == 3
    assert same(labels, 0, 1) and same(labels, 1, 2)
    assert same(labels, 3, 4) and same(labels, 3, 6)
    assert not same(labels, 0, 3) and not same(labels, 4, 5)
    # two frames apart, or two bins apart, do not join
    assert len(set(cluster_pixels(pixels([(0, 5, 5), (0, 7, 5)]), N_FRAMES).tolist())) == 2
    assert len(set(cluster_pixels(pixels([(0, 5, 5), (0, 5, 7)]), N_FRAMES).tolist())) == 2
    # the same tile at different levels is not a same-level neighbour
    assert len(set(cluster_pixels(pixels([(0, 5, 5), (2, 5, 5)]), N_FRAMES).tolist())) == 2


def test_cluster_pixels_across_levels():
    """Level r (t, k) joins level r + 1 (t // 2, 2 k); level r + 1 (t', k') joins level r
    (2 t' + 1, (k' + 1) // 2); each rule alone, for even and odd frames and bins."""
    # up rule only: from (6, 9) the down rule of (3, 18) points to (7, 9), not back to (6, 9)
    assert same(cluster_pixels(pixels([(0, 6, 9), (1, 3, 18)]), N_FRAMES), 0, 1)
    assert same(cluster_pixels(pixels([(0, 7, 9), (1, 3, 18)]), N_FRAMES), 0, 1)
    assert same(cluster_pixels(pixels([(1, 7, 20), (2, 3, 40)]), N_FRAMES), 0, 1)
    # down rule only: from (11, 4) the up rule points to (5, 8), not (5, 7)
    assert same(cluster_pixels(pixels([(1, 5, 7), (0, 11, 4)]), N_FRAMES), 0, 1)
    assert same(cluster_pixels(pixels([(1, 5, 8), (0, 11, 4)]), N_FRAMES), 0, 1)  # even k' = 8 -> 4
    # neither rule
    for rows in ([(0, 8, 9), (1, 3, 18)],  # frame 8 lies in level-1 frame 4
                 [(0, 7, 9), (1, 3, 20)],  # up -> (3, 18), down -> (7, 10)
                 [(1, 5, 7), (0, 10, 4)],  # down -> (11, 4), up -> (5, 8)
                 [(0, 7, 9), (2, 1, 36)]):  # levels 0 and 2 only meet through level 1
        assert not same(cluster_pixels(pixels(rows), N_FRAMES), 0, 1), rows
    # through level 1, levels 0 and 2 are one cluster
    labels = cluster_pixels(pixels([(0, 7, 9), (1, 3, 18), (2, 1, 36)]), N_FRAMES)
    assert len(set(labels.tolist())) == 1


def test_cluster_pixels_cross_level_key_does_not_alias():
    """Level-0 (4, 10) looks up level-1 (2, 20); level-1 (3, 7) looks down at level-0 (7, 4): the two
    are not neighbours.  With 10 the largest bin present, the lookup key of (1, 2, 20) equals the
    key of (1, 3, 7) unless the key's bin span covers bin 2k (a bug this test caught)."""
    labels = cluster_pixels(pixels([(0, 4, 10), (1, 3, 7)]), [20, 10])
    assert not same(labels, 0, 1)


def test_best_level_pixels_keeps_the_level_of_largest_excess():
    n_det = 3  # excess per pixel: energy - 6
    px = pixels([(0, 10, 5), (0, 11, 5), (0, 10, 6), (0, 11, 6),  # cluster 7, level 0: 60 in all, excess 36
                 (1, 5, 10), (1, 5, 11),  # cluster 7, level 1: 56 in all, excess 44 -> kept
                 (0, 30, 4), (2, 7, 16),  # cluster 2: level 0 excess 4 -> kept; level 2 excess -1
                 (2, 12, 40)],  # cluster 5: only level 2, excess -3 (negative, yet the only level present)
                energy=[15, 15, 15, 15, 28, 28, 10, 5, 3])
    labels = np.array([7, 7, 7, 7, 7, 7, 2, 2, 5])
    keep, cluster = best_level_pixels(px, labels, n_det)
    # grouped by cluster (labels 2, 5, 7 renumbered 0, 1, 2)
    assert keep.tolist() == [6, 8, 4, 5]
    assert cluster.tolist() == [0, 1, 2, 2]


def test_dilate_is_a_circular_running_max():
    e = np.random.default_rng(5).exponential(2.0, size=(40, 7))
    for radius in (0, 1, 3):
        ref = np.stack([np.max(e[(t + np.arange(-radius, radius + 1)) % 40], axis=0) for t in range(40)])
        np.testing.assert_array_equal(dilate(e, radius), ref)  # exact: maxima of the same numbers


def test_threshold_is_the_noise_quantile():
    rng = np.random.default_rng(6)
    # network energy of 3 detectors of white noise: a sum of 3 chi^2_2 (exponential, mean 2), chi^2_6
    energy = rng.exponential(2.0, size=(3, 20_000, 10)).sum(axis=0)
    valid = np.ones(20_000, bool)
    valid[::7] = False
    energy[~valid] = 1e6  # invalid frames are ignored
    got = threshold(energy, valid, 0.01)
    # 5%; measured ratio 1.0005 (over 171,420 valid values the quantile's noise is ~0.3%)
    assert got == pytest.approx(chi2.isf(0.01, 6), rel=0.05), got / chi2.isf(0.01, 6)
    assert threshold(energy, np.zeros(20_000, bool), 0.01) == np.inf


# ---------------------------------------------------------------------------------------------
# the sky loop


def brute_force(batch: ClusterBatch, table: SkyTable, cuts: SkyLoopCuts, cluster: int) -> dict:
    """ALGORITHMS.md §4.3 with NumPy linear algebra, one direction and pixel at a time (float64):
    the DPF basis from the SVD of F = [f+ s, fx s], P = e+ e+^T + gamma ex ex^T."""
    v, s = batch.amplitudes, np.asarray(batch.weights, np.float64)
    n_det = v.shape[0]
    rows = []
    for l in range(table.n_dir):
        eo = ls = ln = m = lo = ec = dof = 0.0
        for j in range(int(batch.offsets[cluster]), int(batch.offsets[cluster + 1])):
            a = v[np.arange(n_det), j, table.ml[:, l]].astype(np.complex128)
            e = np.abs(a) ** 2
            f = np.stack([table.fplus[:, l].astype(np.float64) * s[j], table.fcross[:, l].astype(np.float64) * s[j]],
                         axis=1)
            u, sv, _ = np.linalg.svd(f, full_matrices=False)
            gp, gx = sv ** 2  # |f+'|^2 >= |fx'|^2
            den = gx + cuts.delta * gp
            gamma = gx / den if den > 0 else 0.0
            proj = np.outer(u[:, 0], u[:, 0]) + gamma * np.outer(u[:, 1], u[:, 1])
            like = float(np.real(a.conj() @ proj @ a))
            total = e.sum()
            if total > cuts.pixel_energy:
                sub = total - e.max()
                m += 1
                eo += total
                ls += sub
                ln += total if sub > cuts.subnet_energy else 0.0
                lo += like
                ec += like - np.sum(np.diag(proj) * e)
                dof += 2 * (n_det - 1 - gamma)
        stat = REJECTED
        if m > 0 and eo - ls > 0:
            aa = ls * ln / (eo - ls)
            if (aa - m) / (aa + m) >= cuts.subcut:
                stat = aa / (abs(aa) + abs(eo - lo) + 2 * m * (eo - ln) / eo)
        rows.append((stat, eo, ls, ln, m, lo, ec, dof))
    return dict(zip(FIELDS, np.array(rows).T))


def random_sky_problem(rng, n_det, delta, n_clusters=5, n_delay=6, n_dir=40):
    """Clusters of 1-10 pixels of complex Gaussian amplitudes (unit variance per quadrature), half
    of them 3 times louder in every detector, a fifth 5 times louder in detector 0 alone, and a last
    cluster of 4 pixels loud in detector 0 and quiet elsewhere (rejected by subcut at every
    direction); random delays, antenna patterns and weights."""
    sizes = rng.integers(1, 11, size=n_clusters)
    sizes[-1] = 4
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    p = int(offsets[-1])
    v = rng.normal(size=(n_det, p, 2 * n_delay + 1)) + 1j * rng.normal(size=(n_det, p, 2 * n_delay + 1))
    v[:, rng.random(p) < 0.5] *= 3.0
    v[0, rng.random(p) < 0.2] *= 5.0
    last = v[:, offsets[-2]:]
    last[:] = rng.normal(size=last.shape) + 1j * rng.normal(size=last.shape)
    last[0] *= 6.0
    last[1:] *= 0.3
    weights = rng.uniform(0.3, 1.0, size=(p, n_det))
    ml = rng.integers(0, 2 * n_delay + 1, size=(n_det, n_dir)).astype(np.int32)
    fp, fx = rng.uniform(-1, 1, size=(2, n_det, n_dir))
    cuts = SkyLoopCuts(float(chi2.isf(0.1, 2 * n_det)), float(chi2.isf(0.1, 2 * (n_det - 1))), 0.33, delta)
    return v, offsets, weights, ml, fp, fx, n_delay, cuts


@pytest.mark.parametrize("delta", [0.0, 0.5, 1e6])
@pytest.mark.parametrize("n_det", [2, 3, 4])
def test_skyloop_matches_brute_force(n_det, delta):
    """direction_statistics and skyloop_max against the definition.  The inputs are float64 values
    held in float64 arrays, so both sides compute in float64 (the documented float32 / complex64
    inputs: test_skyloop_float32_inputs_keep_float64_accuracy)."""
    rng = np.random.default_rng(100 * n_det + int(10 * min(delta, 1.0)))
    v, offsets, weights, ml, fp, fx, n_delay, cuts = random_sky_problem(rng, n_det, delta)
    v = v.astype(np.complex64).astype(np.complex128)
    weights = weights.astype(np.float32).astype(np.float64)
    fp, fx = (a.astype(np.float32).astype(np.float64) for a in (fp, fx))
    batch = ClusterBatch(v, offsets, weights)
    table = SkyTable(ml, fp, fx, n_delay, UPSAMPLE)
    stat, best = skyloop_max(batch, table, cuts)
    accepted = rejected = 0
    for c in range(batch.n_clusters):
        got = direction_statistics(batch, c, table, cuts)
        ref = brute_force(batch, table, cuts, c)
        # the same early rejections, exactly
        np.testing.assert_array_equal(got["stat"] == REJECTED, ref["stat"] == REJECTED)
        np.testing.assert_array_equal(got["m"], ref["m"])
        # 1e-6 relative; measured over all cases <= 3.7e-12 (stat), 5.7e-16 (Eo), 3.3e-12 (Lo)
        for name in ("stat", "Eo", "Ls", "Ln", "Lo", "dof"):
            np.testing.assert_allclose(got[name], ref[name], rtol=1e-6, atol=0, err_msg=name)
        # Ec is a difference of energies (zero for two detectors at delta = 0): 1e-6 of
        # max(|Ec|, Eo); measured <= 7.9e-13
        sel = ref["m"] > 0
        err = np.abs(got["Ec"] - ref["Ec"])[sel] / np.maximum(np.abs(ref["Ec"]), ref["Eo"])[sel]
        assert np.all(err < 1e-6), err.max()
        # the maximum over the sky, lowest index on ties: exactly the first maximum of the same
        # function's values, which is the definition's maximum within 1e-6 (two detectors at
        # delta = 0 tie at stat = 1 up to rounding, so the definition's own argmax may differ)
        assert best[c] == int(np.argmax(got["stat"])) and stat[c] == got["stat"].max()
        assert ref["stat"][best[c]] == pytest.approx(ref["stat"].max(), rel=1e-6)
        accepted += int(np.sum(ref["stat"] > REJECTED))
        rejected += int(np.sum(ref["stat"] == REJECTED))
    assert stat[-1] == REJECTED and best[-1] == 0  # detector 0 alone everywhere: rejected, index 0
    assert accepted > 0 and rejected > 0  # both branches are exercised


@pytest.mark.parametrize("delta", [0.0, 0.5, 1e6])
@pytest.mark.parametrize("n_det", [2, 3, 4])
def test_coherent_energy_bound_holds_at_every_direction(n_det, delta):
    """Every cluster's Ec at every direction is at most the sum of its pixels' bound (complex64
    amplitudes as the search holds them, bound from their float32 magnitudes); a detector alone
    has none; equal amplitudes in every detector reach the smaller of its two terms."""
    rng = np.random.default_rng(7 + n_det)
    v, offsets, weights, ml, fp, fx, n_delay, cuts = random_sky_problem(rng, n_det, delta, n_clusters=12)
    v = v.astype(np.complex64)
    batch = ClusterBatch(v, offsets, weights.astype(np.float32))
    table = SkyTable(ml, fp.astype(np.float32), fx.astype(np.float32), n_delay, UPSAMPLE)
    bound = coherent_energy_bound(np.abs(v).max(axis=2))
    reach = np.add.reduceat(bound, offsets[:-1])
    tightest = 0.0
    for c in range(batch.n_clusters):
        ec = direction_statistics(batch, c, table, cuts)["Ec"]
        assert np.all(ec <= reach[c]), (c, ec.max(), reach[c])
        tightest = max(tightest, ec.max() / reach[c])
    # random amplitudes come within 0.15-0.61 of it (none for two detectors at delta = 0: Ec = 0)
    assert tightest > (0.0 if (n_det, delta) == (2, 0.0) else 0.14), tightest
    # one detector alone: no coherent energy is possible, and the bound says so
    alone = np.zeros((n_det, 3), np.float32)
    alone[0] = 10.0
    assert np.all(coherent_energy_bound(alone) == 0.0)
    # a coherent signal, the same amplitude in every detector at every delay: Ec reaches
    # (n - 1) / n of Eo = (n - 1) a^2 for aligned detectors, within the bound's pair term n (n - 1) a^2 / 2
    # (equal to it for two)
    same = np.ones((n_det, 1, 2 * n_delay + 1), np.complex64) * (3 + 4j)
    b = coherent_energy_bound(np.abs(same).max(axis=2))
    assert b[0] == pytest.approx(min(n_det, n_det * (n_det - 1) / 2) * 25.0, rel=2e-5)


def test_skyloop_float32_inputs_keep_float64_accuracy():
    """With the documented input dtypes (complex64 amplitudes, float32 weights and antenna patterns)
    the CPU twin and direction_statistics are described as float64: they should match the float64
    definition of the same values within 1e-6.

    Smallest case: two detectors at delta = 0, where the projection is the identity, so Lo = Eo and
    Ec = 0 exactly.  Products taken in float32 gave Lo = 29.99691 for Eo = 30 (1.0e-4) and
    Ec = -8.3e-4; the twin now widens its inputs first."""
    v = np.array([[[3 + 4j]], [[1 - 2j]]], np.complex64)
    batch = ClusterBatch(v, np.array([0, 1]), np.ones((1, 2), np.float32))
    table = SkyTable(np.zeros((2, 1), np.int32), np.array([[0.8], [0.7]], np.float32),
                     np.array([[0.81], [0.69]], np.float32), 0, UPSAMPLE)
    q = direction_statistics(batch, 0, table, SkyLoopCuts(0.0, 0.0, 0.33, 0.0))
    assert q["Eo"][0] == 30.0
    assert q["Lo"][0] == pytest.approx(30.0, rel=1e-6)
    assert abs(q["Ec"][0]) < 1e-6 * 30.0

    worst = 0.0
    for n_det in (2, 3, 4):
        for delta in (0.0, 0.5, 1e6):
            rng = np.random.default_rng(100 * n_det + int(10 * min(delta, 1.0)))
            v, offsets, weights, ml, fp, fx, n_delay, cuts = random_sky_problem(rng, n_det, delta)
            batch = ClusterBatch(v.astype(np.complex64), offsets, weights.astype(np.float32))
            table = SkyTable(ml, fp.astype(np.float32), fx.astype(np.float32), n_delay, UPSAMPLE)
            for c in range(batch.n_clusters):
                got = direction_statistics(batch, c, table, cuts)
                ref = brute_force(batch, table, cuts, c)
                sel = ref["m"] > 0
                for name in ("stat", "Eo", "Lo"):
                    rel = np.abs(got[name] - ref[name])[sel] / np.abs(ref[name])[sel]
                    worst = max(worst, float(rel.max(initial=0.0)))
                rel = np.abs(got["Ec"] - ref["Ec"])[sel] / np.maximum(np.abs(ref["Ec"]), ref["Eo"])[sel]
                worst = max(worst, float(rel.max(initial=0.0)))
    assert worst < 1e-6, worst


def test_skyloop_max_ties_go_to_the_lowest_index():
    """A table whose second half repeats the first: every maximum is tied, and the first copy wins
    (float32 inputs, as the search passes them)."""
    rng = np.random.default_rng(8)
    v, offsets, weights, ml, fp, fx, n_delay, cuts = random_sky_problem(rng, 3, 0.5, n_dir=20)
    batch = ClusterBatch(v.astype(np.complex64), offsets, weights.astype(np.float32))
    table = SkyTable(np.concatenate([ml, ml], axis=1), np.concatenate([fp, fp], axis=1).astype(np.float32),
                     np.concatenate([fx, fx], axis=1).astype(np.float32), n_delay, UPSAMPLE)
    stat, best = skyloop_max(batch, table, cuts)
    for c in range(batch.n_clusters):
        values = direction_statistics(batch, c, table, cuts)["stat"]
        np.testing.assert_array_equal(values[:20], values[20:])  # the copies are bit for bit the same
        assert best[c] == int(np.argmax(values)) and best[c] < 20
        assert stat[c] == values.max()  # exact: the same function of the same numbers


def test_cluster_event_of_a_noise_free_signal():
    """Amplitudes that are exactly s_i (F+_i h+ + Fx_i hx) at one direction's delays (random numbers at
    every other delay): with delta = 0 the signal lies in the plane, so the null energy is ~0 and
    cc ~ 1; every pixel is selected and Eo is their energy."""
    rng = np.random.default_rng(9)
    n_det, n_pix, l0 = 3, 12, 17
    geometry = network_geometry(IFOS, sky_grid(1), GPS)
    n_delay = delay_range(float(np.abs(geometry.delays).max()), FS)
    table = sky_table(geometry.delays, geometry.fplus, geometry.fcross, FS, n_delay, UPSAMPLE)
    s = rng.uniform(0.5, 1.0, size=(n_pix, n_det)).astype(np.float32)
    hp, hx = 10.0 * (rng.normal(size=(2, n_pix)) + 1j * rng.normal(size=(2, n_pix)))
    v = 3.0 * (rng.normal(size=(n_det, n_pix, 2 * n_delay + 1)) + 1j * rng.normal(size=(n_det, n_pix, 2 * n_delay + 1)))
    for i in range(n_det):
        v[i, :, table.ml[i, l0]] = s[:, i] * (np.float64(table.fplus[i, l0]) * hp + np.float64(table.fcross[i, l0]) * hx)
    v = v.astype(np.complex64)
    cuts = SkyLoopCuts(float(chi2.isf(0.1, 2 * n_det)), float(chi2.isf(0.1, 2 * (n_det - 1))), 0.33, 0.0)
    ev = cluster_event(v, s, table, cuts, l0)
    a = v[np.arange(n_det)[:, None], np.arange(n_pix)[None, :], table.ml[:, l0][:, None]].astype(np.complex128)
    assert ev["m_sel"] == n_pix
    assert ev["Eo"] == pytest.approx(np.sum(np.abs(a) ** 2), rel=1e-6)  # measured 1.4e-8
    # null < 1e-6 of Eo; measured 1.5e-8 of Eo (float32 amplitudes)
    assert ev["null"] < 1e-6 * ev["Eo"]
    assert abs(ev["Eo"] - ev["Lo"]) < 1e-6 * ev["Eo"]
    assert ev["cc"] > 0.999  # measured 1 - 5e-8
    assert ev["Ec"] > 0  # the coherent (cross-detector) part of the energy


# ---------------------------------------------------------------------------------------------
# one chunk end to end


def test_burst_chunk_recovers_a_sine_gaussian():
    """64 s of unit-variance white noise in H1, L1, V1 at 1024 Hz with a linearly polarised
    sine-Gaussian (150 Hz, Q = 9, network SNR 25) from the centre of an order-4 pixel (so the grid
    adds no error), projected with the antenna patterns and arrival delays: one zero-lag event at the
    injection with a skymap, lags quieter, every trial 48 s live."""
    n = int(64 * FS)
    grid = sky_grid(4)
    truth = 2462
    ra, dec, psi = float(grid.ra[truth]), float(grid.dec[truth]), 0.7
    t_geo = 30.3  # s from the start of the data
    t = np.arange(n) / FS
    # linearly polarised: with delta = 1 the regulator favours one polarisation, and a circularly
    # polarised sine-Gaussian (h+ cos, hx sin) put the sky maximum 13 degrees off in this set-up
    signal = np.zeros((3, n))
    for i, ifo in enumerate(IFOS):
        fplus, _ = antenna_pattern(ifo, ra, dec, psi, GPS)
        arrival = t_geo + float(time_delay_from_earth_center(ifo, ra, dec, GPS))
        signal[i] = fplus * sine_gaussian(t - arrival, 150.0, 9.0)  # h+ only: hx = 0
    signal *= 25.0 / np.sqrt(np.sum(signal ** 2))  # network SNR^2 = sum s^2 in unit-variance white noise
    rng = np.random.default_rng(11)
    x = [(rng.normal(size=n) + signal[i]).astype(np.float32) for i in range(3)]
    f = np.linspace(0.0, FS / 2, 257)
    net = BurstNetwork(ifos=IFOS, x=x, valid=[np.ones(n, bool)] * 3, psd=[(f, np.ones_like(f))] * 3,
                       read_start=0, own=(int(8 * FS), int(56 * FS)), sample_rate=FS, gps=GPS)
    settings = BurstSettings(
        bandwidths=(32.0, 16.0, 8.0), f_low=32.0, f_high=480.0, bpp=0.001,
        cuts=SkyLoopCuts(float(chi2.isf(0.1, 6)), float(chi2.isf(0.1, 4)), 0.33, 1.0),
        rho_min=5.0, cc_min=0.5, n_trials=4, step=int(FS), cluster=int(0.1 * FS), sky_order=4,
        skymap_threshold=8.0, temperature=1.0)
    events, skymaps, livetime, _ = burst_chunk(net, settings)

    zero = events[events["trial"] == 0]
    assert len(zero) == 1, zero
    ev = zero.iloc[0]
    # 20 ms; measured 0.016 ms
    assert abs(ev["geocent_sample"] / FS - t_geo) < 0.020, ev["geocent_sample"] / FS - t_geo
    assert ev["cc"] > 0.8  # measured 0.896
    error = np.degrees(angular_distance(ev["ra"], ev["dec"], ra, dec))
    assert error < 20.0, error  # measured 0 (the injected pixel itself)
    assert ev["skymap"] == 0 and skymaps.shape == (1, grid.size) and skymaps.dtype == np.float32
    assert skymaps[0].sum() == pytest.approx(1.0, abs=1e-5)  # float32 probabilities
    np.testing.assert_allclose(livetime, np.full(5, 48.0), rtol=0, atol=1e-9)
    lags = events[events["trial"] > 0]
    # measured: zero-lag rho 13.96, and no lag event passes rho_min and cc_min in this noise
    assert np.all(lags["rho"] <= ev["rho"])


def test_frame_synthesis_inverts_the_map_and_recovers_a_burst():
    """tf_synthesis is the tight frame's inverse over all bins (float32 round-off), and the pixels of a
    sine-Gaussian's time-frequency box give back its waveform (overlap > 0.95 in white noise)."""
    from gwbatch.burst.tfmap import Resolution, tf_map, tf_synthesis

    rng, n, length = np.random.default_rng(0), 4096, 64
    x = rng.normal(size=n)
    full = Resolution(length, 0, length // 2)
    back = tf_synthesis(np.asarray(tf_map(x.astype(np.float32), full), np.complex128), full, n)
    np.testing.assert_allclose(back, x, atol=2e-6)
    fs, res = 2048.0, Resolution(length, 1, length // 2 - 1)
    t = (np.arange(n) - n // 2) / fs
    burst = 8.0 * np.exp(-(t / 0.01) ** 2) * np.sin(2 * np.pi * 235.0 * t)
    pixels = np.asarray(tf_map((burst + rng.normal(size=n)).astype(np.float32), res))
    times = (np.arange(pixels.shape[0]) * res.hop + 0.5 * length) / fs - n // 2 / fs
    freqs = res.frequency(np.arange(res.k_lo, res.k_hi + 1), fs)
    box = (np.abs(times) < 0.04)[:, None] & ((freqs > 150) & (freqs < 320))[None, :]
    wave = tf_synthesis(np.where(box, pixels, 0), res, n)
    assert np.dot(wave, burst) / np.sqrt(np.dot(wave, wave) * np.dot(burst, burst)) > 0.95
