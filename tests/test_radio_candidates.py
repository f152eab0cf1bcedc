"""Radio single-pulse candidates: friends-of-friends clustering, arrival times, multibeam RFI flags,
Heimdall .cand files and false-alarm arithmetic (gwbatch.radio.candidates)."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.stats import norm

from gwbatch.radio.candidates import (
    CANDIDATE_COLUMNS,
    K_DM,
    _beam_roots,
    cluster_triggers,
    effective_trials,
    far_per_candidate,
    flag_rfi,
    noise_false_alarms,
    read_heimdall_cands,
    time_inf,
    time_top,
    write_heimdall_cands,
)


def triggers(rows, beam="01"):
    """Triggers from ``(dm_index, sample, width, snr)`` rows; DM = 0.5 * dm_index."""
    a = np.array(rows, dtype=float).reshape(-1, 4)
    return pd.DataFrame({"beam": beam, "dm_index": a[:, 0].astype(int), "dm": 0.5 * a[:, 0],
                         "sample": a[:, 1].astype(np.int64), "width": a[:, 2].astype(int), "snr": a[:, 3]})


def pulse(centre, dm_index, snr, beam="01"):
    """A pulse seen over DM trials dm_index±10, widths 2, 4, 8 and a drift of one sample per
    trial; loudest at (dm_index, width 4, boxcar centred on ``centre``)."""
    rows = []
    for d in range(dm_index - 10, dm_index + 11):
        for w in (2, 4, 8):
            loss = 0.3 * abs(d - dm_index) + (0.0 if w == 4 else 1.0)
            rows.append((d, centre + (d - dm_index) - w // 2, w, snr - loss))
    return triggers(rows, beam)


# --- clustering -------------------------------------------------------------------------------

def test_pulse_spread_over_dm_time_width_is_one_candidate():
    cands = cluster_triggers(pulse(10_000, 50, 15.0), time_tol=3, dm_tol=1)
    assert list(cands.columns) == list(CANDIDATE_COLUMNS)
    assert len(cands) == 1
    c = cands.iloc[0]
    assert (c.beam, c.snr, c["sample"], c.width, c.dm_index, c.dm) == ("01", 15.0, 9998, 4, 50, 25.0)
    assert c.members == 63
    # extent: earliest boxcar starts at 10000 - 10 - 4, latest ends at 10000 + 10 - 4 + 8 - 1
    assert (c.first_sample, c.last_sample) == (9986, 10013)
    assert (c.dm_min, c.dm_max) == (20.0, 30.0)


def test_separated_pulses_are_two_candidates():
    two = pd.concat([pulse(10_000, 50, 15.0), pulse(20_000, 50, 12.0)])
    cands = cluster_triggers(two, time_tol=3, dm_tol=1)
    assert list(cands["sample"]) == [9998, 19998] and list(cands["snr"]) == [15.0, 12.0]
    assert list(cands["members"]) == [63, 63]
    # Same time, DM trials 30 apart (beyond dm_tol): two; within dm_tol after joining trials: one.
    apart = pd.concat([pulse(10_000, 50, 15.0), pulse(10_000, 80, 9.0)])
    assert len(cluster_triggers(apart, time_tol=3, dm_tol=1)) == 2
    assert len(cluster_triggers(apart, time_tol=3, dm_tol=10)) == 1


def test_time_tolerance_scales_with_the_wider_boxcar():
    # Centres 12 samples apart: friends when 12 <= 3 * max(width); width 4 -> 12 (friends).
    pair = triggers([(5, 100, 4, 8.0), (5, 112, 4, 7.0)])
    assert len(cluster_triggers(pair, time_tol=3, dm_tol=0)) == 1
    assert len(cluster_triggers(pair, time_tol=2.9, dm_tol=0)) == 2
    # a width-1 and a width-4 boxcar: the tolerance follows the wider one
    mixed = triggers([(5, 100, 1, 8.0), (5, 110, 4, 7.0)])  # centres 100 and 112
    assert len(cluster_triggers(mixed, time_tol=3, dm_tol=0)) == 1
    assert len(cluster_triggers(mixed, time_tol=3, dm_tol=0, width_tol=2)) == 2


def test_clusters_are_per_beam():
    both = pd.concat([pulse(10_000, 50, 15.0, beam="01"), pulse(10_000, 50, 11.0, beam="02")])
    cands = cluster_triggers(both, time_tol=3, dm_tol=1)
    assert list(cands["beam"]) == ["01", "02"] and list(cands["snr"]) == [15.0, 11.0]


def test_input_order_does_not_matter():
    t = pd.concat([pulse(10_000, 50, 15.0), pulse(10_030, 52, 12.0), pulse(30_000, 5, 9.0)])
    a = cluster_triggers(t, time_tol=3, dm_tol=1)
    b = cluster_triggers(t.sample(frac=1.0, random_state=3), time_tol=3, dm_tol=1)
    pd.testing.assert_frame_equal(a, b)


def brute_force_components(t, time_tol, dm_tol, width_tol):
    """Components of the friend graph from all pairs (O(n^2)), as sorted member counts and
    sorted peak (beam, sample, dm_index, width)."""
    c = (t["sample"] + t["width"] // 2).to_numpy()
    w = t["width"].to_numpy()
    d = t["dm_index"].to_numpy()
    b = t["beam"].to_numpy()
    wide = np.maximum(w[:, None], w[None, :])
    friends = ((np.abs(c[:, None] - c[None, :]) <= time_tol * wide) & (np.abs(d[:, None] - d[None, :]) <= dm_tol)
               & (wide <= width_tol * np.minimum(w[:, None], w[None, :])) & (b[:, None] == b[None, :]))
    i, j = np.nonzero(friends)
    _, label = connected_components(coo_matrix((np.ones(i.size), (i, j)), shape=(len(t),) * 2), directed=False)
    members = sorted(np.bincount(label))
    peaks = sorted(tuple(t.iloc[np.flatnonzero(label == k)[t["snr"].to_numpy()[label == k].argmax()]]
                         [["beam", "sample", "dm_index", "width"]]) for k in range(label.max() + 1))
    return members, peaks


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_all_pairs_components(seed):
    rng = np.random.default_rng(seed)
    n = 600
    t = pd.DataFrame({"beam": rng.choice(["a", "b"], n), "dm_index": rng.integers(0, 40, n),
                      "sample": rng.integers(0, 3000, n), "width": 2 ** rng.integers(0, 5, n),
                      "snr": rng.uniform(6, 20, n)})
    t["dm"] = 0.25 * t["dm_index"]
    cands = cluster_triggers(t, time_tol=1.5, dm_tol=2, width_tol=4)
    members, peaks = brute_force_components(t, 1.5, 2, 4)
    assert sorted(cands["members"]) == members
    assert sorted(map(tuple, cands[["beam", "sample", "dm_index", "width"]].to_numpy())) == peaks
    assert 50 < len(cands) < n  # neither all merged nor all single


@pytest.mark.parametrize("method", ["sweep", "buckets"])
@pytest.mark.parametrize("seed", [3, 4])
def test_sweep_and_buckets_find_the_all_pairs_components(method, seed):
    # one beam, sorted by centre; dense enough for long chains, ties in centre included
    rng = np.random.default_rng(seed)
    n = 800
    width = 2 ** rng.integers(0, 4, n)
    centre = np.sort(rng.integers(0, 1500, n))
    dm_index = rng.integers(100, 130, n)
    t = pd.DataFrame({"beam": "a", "sample": centre - width // 2, "width": width, "dm_index": dm_index,
                      "snr": rng.uniform(6, 20, n)})
    for time_tol, dm_tol, width_tol in [(1.0, 1, np.inf), (2.5, 3, 2.0), (0.0, 0, np.inf)]:
        roots = _beam_roots(centre, width, dm_index, time_tol, dm_tol, width_tol, method=method)
        members, _ = brute_force_components(t, time_tol, dm_tol, width_tol)
        assert sorted(np.bincount(roots)[np.unique(roots)]) == members
        assert (roots <= np.arange(n)).all() and (roots[roots] == roots).all()


def compile_kernels():
    """Compile (or load from numba's cache) both clustering kernels before timing anything."""
    one = np.zeros(1, dtype=np.int64)
    for method in ("sweep", "buckets"):
        _beam_roots(one, one + 1, one, 3.0, 1, np.inf, method=method)


def test_a_broadband_burst_is_one_candidate_quickly():
    # 100 samples lit at every one of 1000 DM trials and 9 widths: 900,000 triggers in one block,
    # where the sweep would test ~4e11 pairs; the DM/width buckets take about a second.
    dm_index, log_width, offset = np.meshgrid(np.arange(1000), np.arange(9), np.arange(100), indexing="ij")
    t = pd.DataFrame({"beam": "01", "dm_index": dm_index.ravel(), "dm": 0.1 * dm_index.ravel(),
                      "sample": 50_000 + offset.ravel(), "width": 2 ** log_width.ravel(),
                      "snr": 6.0 + np.random.default_rng(2).uniform(0, 4, dm_index.size)})
    t.loc[123_456, "snr"] = 30.0
    compile_kernels()
    start = time.perf_counter()
    cands = cluster_triggers(t, time_tol=3, dm_tol=1)
    elapsed = time.perf_counter() - start
    print(f"burst of {len(t)} triggers -> {len(cands)} candidate in {elapsed:.2f} s")
    assert len(cands) == 1 and cands["members"].iloc[0] == len(t) and cands["snr"].iloc[0] == 30.0
    assert (cands["first_sample"].iloc[0], cands["last_sample"].iloc[0]) == (50_000, 50_099 + 255)
    assert elapsed < 10.0


def test_noise_triggers_give_the_expected_number_of_clusters():
    # N uniform triggers over T samples x D trials, width 1, time_tol 3, dm_tol 1.  A pair are
    # friends with p = P(|ds| <= 3) P(|dd| <= 1), P(|X - Y| <= k) = ((2k+1) M - k(k+1)) / M^2 for
    # X, Y uniform on M integers.  Clusters = N - (friend pairs) + (cycles); at this density
    # E[pairs] ~ 520 and triangles ~ 2, so clusters ~ N - E[pairs] within 5 sqrt(E[pairs]).
    n, T, D = 50_000, 1_000_000, 50

    def p_within(k, m):
        return ((2 * k + 1) * m - k * (k + 1)) / m**2

    expected_pairs = n * (n - 1) / 2 * p_within(3, T) * p_within(1, D)
    rng = np.random.default_rng(7)
    t = pd.DataFrame({"beam": "01", "dm_index": rng.integers(0, D, n), "sample": rng.integers(0, T, n),
                      "width": 1, "snr": rng.uniform(6, 8, n)})
    t["dm"] = t["dm_index"] * 1.0
    found = len(cluster_triggers(t, time_tol=3, dm_tol=1))
    print(f"noise: {found} clusters, expected {n - expected_pairs:.1f}")
    assert 500 < expected_pairs < 540
    assert abs(found - (n - expected_pairs)) < 5 * np.sqrt(expected_pairs)


def test_a_million_triggers_cluster_in_seconds():
    compile_kernels()
    rng = np.random.default_rng(11)
    n = 1_000_000
    t = pd.DataFrame({"beam": rng.choice(["01", "02", "03", "04"], n), "dm_index": rng.integers(0, 1000, n),
                      "sample": rng.integers(0, 10_000_000, n), "width": 2 ** rng.integers(0, 9, n),
                      "snr": rng.uniform(6, 10, n)})
    t["dm"] = 0.1 * t["dm_index"]
    start = time.perf_counter()
    cands = cluster_triggers(t, time_tol=3, dm_tol=1)
    elapsed = time.perf_counter() - start
    print(f"1e6 triggers -> {len(cands)} candidates in {elapsed:.2f} s")
    assert elapsed < 10.0
    assert cands["members"].sum() == n


def test_empty_and_bad_input():
    empty = cluster_triggers(triggers([]), time_tol=3, dm_tol=1)
    assert empty.empty and list(empty.columns) == list(CANDIDATE_COLUMNS)
    with pytest.raises(ValueError, match="lack columns"):
        cluster_triggers(pd.DataFrame({"snr": [1.0]}), time_tol=3, dm_tol=1)
    with pytest.raises(ValueError, match="width_tol"):
        cluster_triggers(pulse(100, 20, 9.0), time_tol=3, dm_tol=1, width_tol=0.5)


# --- times ------------------------------------------------------------------------------------

def test_time_top_and_time_inf_by_hand():
    tsamp, f_max, dm = 64e-6, 1581.8046875, 500.0
    # boxcar of 8 samples from 15625: centre 15628.5 samples = 1.000224 s after the start
    assert time_top(15625, 8, tsamp) == pytest.approx(1.000224, abs=1e-12)
    assert time_top(15625, 1, tsamp, start=1_000_000_000.0) == pytest.approx(1_000_000_001.0, abs=1e-6)
    delay = 4.148808e3 * 500.0 / 1581.8046875**2  # 2074404 / 2502106.07 = 0.8290632 s
    assert K_DM * dm / f_max**2 == pytest.approx(delay, rel=1e-15)
    assert delay == pytest.approx(0.8290632, abs=1e-7)
    assert time_inf(15625, 8, dm, tsamp, f_max) == pytest.approx(1.000224 - delay, abs=1e-12)
    # MJD start: seconds become days
    mjd = time_inf(15625, 8, dm, tsamp, f_max, start=60000.5, unit="mjd")
    assert mjd == pytest.approx(60000.5 + (1.000224 - delay) / 86400.0, abs=1e-11)
    # arrays, and DM 0 leaves the time alone
    np.testing.assert_allclose(time_inf([0, 100], [1, 2], [0.0, 0.0], 1e-3, 1400.0), [0.0, 0.1005])
    with pytest.raises(ValueError, match="unit"):
        time_top(0, 1, 1e-3, unit="jd")


# --- RFI --------------------------------------------------------------------------------------

def test_rfi_flags():
    beams = {
        # the same event in three of four beams (DM 25, sample ~10000), a bit weaker off-axis
        "01": [pulse(10_000, 50, 15.0, "01"), pulse(40_000, 80, 10.0, "01")],
        "02": [pulse(10_002, 50, 11.0, "02")],
        "03": [pulse(9_999, 51, 9.0, "03")],
        # beam 04: a single-beam event at 40000 but another DM range; a DM-0 peak at 60000
        "04": [pulse(40_000, 120, 8.0, "04"), pulse(60_000, 0, 20.0, "04")],
    }
    cands = cluster_triggers(pd.concat([p for ps in beams.values() for p in ps]), time_tol=3, dm_tol=1)
    flagged = flag_rfi(cands, n_beams=4, beam_threshold=2, dm_zero_max=0.0).set_index(["beam", "sample"])
    assert flagged.loc[("01", 9998)].coincident_beams == 3
    for key in [("01", 9998), ("02", 10000), ("03", 9997)]:
        assert flagged.loc[key].rfi and flagged.loc[key].rfi_reason == "multibeam"
    # DM extents 30-45 (beam 01) and 55-65 (beam 04) do not overlap: single-beam events
    for key in [("01", 39998), ("04", 39998)]:
        assert flagged.loc[key].coincident_beams == 1
        assert not flagged.loc[key].rfi and flagged.loc[key].rfi_reason == ""
    assert flagged.loc[("04", 59998)].rfi and flagged.loc[("04", 59998)].rfi_reason == "zero_dm"
    # with a DM tolerance bridging 45 -> 55 the 40000 events are coincident in two beams (not > 2)
    wide = flag_rfi(cands, 4, 2, 0.0, dm_tol=10.0).set_index(["beam", "sample"])
    assert wide.loc[("01", 39998)].coincident_beams == 2 and not wide.loc[("01", 39998)].rfi
    # a lower threshold flags them, and both reasons are reported together
    low = flag_rfi(cands, 4, 1, 30.0, dm_tol=10.0).set_index(["beam", "sample"])
    assert low.loc[("01", 39998)].rfi_reason == "multibeam"
    assert low.loc[("01", 9998)].rfi_reason == "multibeam,zero_dm"
    assert not flag_rfi(cands, 4, 4, 0.0)["rfi_reason"].str.contains("multibeam").any()  # 4 of 4: never
    with pytest.raises(ValueError, match="beam_threshold"):
        flag_rfi(cands, 4, 0, 0.0)


def test_rfi_time_tolerance():
    a = cluster_triggers(triggers([(50, 1000, 4, 9.0)], beam="01"), 3, 1)
    b = cluster_triggers(triggers([(50, 1010, 4, 9.0)], beam="02"), 3, 1)  # 7 samples after a's end
    both = pd.concat([a, b], ignore_index=True)
    assert list(flag_rfi(both, 2, 1, 0.0)["rfi"]) == [False, False]
    assert list(flag_rfi(both, 2, 1, 0.0, time_tol=7)["rfi"]) == [True, True]


# --- Heimdall .cand files ---------------------------------------------------------------------

def test_cand_line_matches_heimdall(tmp_path):
    cands = pd.DataFrame({"beam": ["01"], "snr": [12.345678], "sample": [102398], "width": [4],
                          "dm_index": [87], "dm": [123.45], "members": [35], "first_sample": [102390],
                          "last_sample": [102420], "dm_min": [120.0], "dm_max": [126.0]})
    # Heimdall: snr, samp_idx (boxcar centre index), samp_idx * dt, filter, dm trial, DM, members,
    # begin, end, each followed by a tab; floats as a C++ stream writes them (6 significant digits)
    path = write_heimdall_cands(cands, tmp_path / "2024-01-01-00:00:00_01.cand", tsamp=64e-6,
                                significant_digits=6)
    assert path.read_text() == "12.3457\t102400\t6.5536\t2\t87\t123.45\t35\t102390\t102420\t\n"
    back = read_heimdall_cands(path)
    assert back.iloc[0].beam == "01" and back.iloc[0].snr == 12.3457 and back.iloc[0]["sample"] == 102398
    assert back.iloc[0].time == 6.5536
    # multibeam Heimdall's tenth column
    multi = write_heimdall_cands(cands, tmp_path / "multi.cand", tsamp=64e-6, multibeam=True,
                                 significant_digits=6)
    assert multi.read_text() == "12.3457\t102400\t6.5536\t2\t87\t123.45\t35\t102390\t102420\t01\t\n"


def test_read_hand_written_heimdall_lines(tmp_path):
    path = tmp_path / "2013-05-08-12:34:56_07.cand"
    path.write_text("9.81235\t1234567\t79.0123\t3\t412\t556.78\t1201\t1234500\t1234600\t\n"
                    "6.5\t2000\t0.128\t0\t0\t0\t1\t2000\t2001\t\n")
    t = read_heimdall_cands(path)
    assert list(t["beam"]) == ["07", "07"]
    assert list(t["snr"]) == [9.81235, 6.5] and list(t["width"]) == [8, 1]
    assert list(t["sample"]) == [1234563, 2000] and list(t["dm_index"]) == [412, 0]
    assert list(t["dm"]) == [556.78, 0.0] and list(t["members"]) == [1201, 1]
    assert list(t["first_sample"]) == [1234500, 2000] and list(t["last_sample"]) == [1234600, 2001]
    assert read_heimdall_cands(path, beam="x")["beam"].tolist() == ["x", "x"]


def test_cand_round_trip_is_exact(tmp_path):
    rng = np.random.default_rng(5)
    t = pd.concat([pulse(int(s), int(d), float(x), beam=b) for s, d, x, b in
                   zip(rng.integers(1000, 10**7, 40), rng.integers(11, 900, 40), rng.uniform(7, 50, 40),
                       rng.choice(["01", "02", "13"], 40))])
    t["dm"] = t["dm_index"] * 0.1234567891
    t["snr"] += rng.normal(0, 1e-3, len(t))  # full float64 mantissas
    cands = cluster_triggers(t, time_tol=3, dm_tol=1)
    path = write_heimdall_cands(cands, tmp_path / "all.cand", tsamp=6.4e-5, multibeam=True)
    back = read_heimdall_cands(path)
    shared = [c for c in CANDIDATE_COLUMNS if c not in ("dm_min", "dm_max", "snr_zero_dm")]
    pd.testing.assert_frame_equal(back[shared], cands[shared])
    np.testing.assert_array_equal(back["time"], (cands["sample"] + cands["width"] // 2) * 6.4e-5)
    # one beam per file without the beam column; the beam comes from the file name
    one = cands[cands["beam"] == "13"].reset_index(drop=True)
    single = read_heimdall_cands(write_heimdall_cands(one, tmp_path / "2024-01-01-00:00:00_13.cand", 6.4e-5))
    pd.testing.assert_frame_equal(single[shared], one[shared])
    with pytest.raises(ValueError, match="several beams"):
        write_heimdall_cands(cands, tmp_path / "x.cand", 6.4e-5)
    with pytest.raises(ValueError, match="power-of-two"):
        write_heimdall_cands(one.assign(width=3), tmp_path / "x.cand", 6.4e-5)
    # gwbatch.pulse.plan widths (24, 34, 40): the nearest power of two in log, the centre index exact
    odd = one.iloc[:3].assign(width=[24, 34, 40])
    back = read_heimdall_cands(write_heimdall_cands(odd, tmp_path / "odd_13.cand", 6.4e-5, round_widths=True))
    assert list(back["width"]) == [32, 32, 32]
    np.testing.assert_array_equal(back["sample"] + 16, odd["sample"] + np.array([12, 17, 20]))
    empty = read_heimdall_cands(write_heimdall_cands(one.iloc[:0], tmp_path / "e_01.cand", 6.4e-5))
    assert empty.empty and list(empty.columns) == shared + ["time"]


# --- false alarms -----------------------------------------------------------------------------

def test_false_alarm_arithmetic():
    # 2^20 samples per DM trial, 1000 trials, widths 1..8: 1000 * 2^20 * (1 + 1/2 + 1/4 + 1/8)
    n_trials = effective_trials(2**20, 1000, [1, 2, 4, 8])
    assert n_trials == 1000 * 2**20 * 1.875 == 1_966_080_000
    # Q(6) = 9.8659e-10 (normal tables); ~1.94 noise events over 6 sigma
    assert norm.sf(6.0) == pytest.approx(9.865876450377e-10, rel=1e-12)
    assert noise_false_alarms(6.0, n_trials) == pytest.approx(1_966_080_000 * 9.865876450377e-10, rel=1e-12)
    assert noise_false_alarms(6.0, n_trials) == pytest.approx(1.93971, rel=1e-5)
    np.testing.assert_allclose(noise_false_alarms(np.array([5.0, 7.0]), 1e9), 1e9 * norm.sf([5.0, 7.0]))
    # the same search over 67.1 s (2^20 samples of 64 us): per-second rate of events at S/N >= 7
    duration = 2**20 * 64e-6
    assert far_per_candidate(7.0, n_trials, duration) == pytest.approx(
        1_966_080_000 * 1.279812543885835e-12 / 67.108864, rel=1e-9)
    with pytest.raises(ValueError):
        effective_trials(1000, 10, [0, 2])
    with pytest.raises(ValueError):
        far_per_candidate(7.0, n_trials, 0.0)
