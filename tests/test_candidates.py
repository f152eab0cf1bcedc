"""Friends-of-friends, chunk-edge merging, coincidence (with ring wrap) and time clustering."""

from __future__ import annotations

import numpy as np
import pytest
import pandas as pd

from gwbatch.candidates.coincidence import (
    IfoTriggers,
    cluster_in_time,
    cluster_per_key,
    coincident_pairs,
    find_coincidences,
)
from gwbatch.candidates.fof import friends_of_friends
from gwbatch.candidates.triggers import merge_chunk_triggers


def test_fof_groups_and_peaks():
    start = np.array([10, 12, 40, 14, 41, 100])
    stop = start + np.array([5, 5, 3, 2, 2, 1])
    snr = np.array([5.0, 9.0, 6.0, 7.0, 6.5, 8.0])
    g = friends_of_friends(start, stop, snr)
    assert list(g.peak) == [1, 4, 5]
    assert list(g.start) == [10, 40, 100] and list(g.stop) == [17, 43, 101] and list(g.members) == [3, 2, 1]
    # order independence
    perm = np.array([5, 3, 0, 4, 2, 1])
    gp = friends_of_friends(start[perm], stop[perm], snr[perm])
    assert sorted(perm[gp.peak]) == [1, 4, 5]
    # gap joins nearby groups
    assert friends_of_friends(start, stop, snr, gap=23).peak.size == 2


def test_fof_ties_go_to_earliest():
    g = friends_of_friends(np.array([5, 0]), np.array([8, 6]), np.array([3.0, 3.0]))
    assert list(g.peak) == [1]


def test_merge_across_chunk_edge():
    # The same pulse seen by two chunks as two groups meeting at the edge (sample 1000).
    t = pd.DataFrame({
        "ifo": ["H1", "H1", "H1", "L1"], "sample": [995, 1000, 5000, 996],
        "width": [8, 4, 2, 8], "centre": [998.0, 1001.5, 5000.5, 999.0], "snr": [9.0, 7.0, 6.0, 8.0],
        "rho": [9.0, 7.0, 6.0, 8.0], "group_start": [990, 1000, 5000, 990], "group_stop": [1000, 1010, 5002, 1004],
        "members": [5, 3, 1, 4], "chunk": [0, 1, 4, 0],
    })
    m = merge_chunk_triggers(t)
    h1 = m[m.ifo == "H1"]
    assert list(h1["sample"]) == [995, 5000] and list(h1["members"]) == [8, 1]
    assert list(h1["group_start"]) == [990, 5000] and list(h1["group_stop"]) == [1010, 5002]
    assert len(m[m.ifo == "L1"]) == 1


def trig(times, snr=None, unc=0.0):
    times = np.asarray(times, float)
    return IfoTriggers(times, np.full(times.size, unc), np.asarray(snr if snr is not None else np.full(times.size, 5.0), float))


def test_pairs_with_window_and_uncertainty():
    a = trig([1.0, 5.0, 9.0], unc=0.001)
    b = trig([1.012, 5.020, 8.0], unc=0.001)
    ia, jb = coincident_pairs(a, b, 0.010 + 0.001, 100.0)  # travel 10 ms + window 1 ms (+2 ms uncertainty)
    assert list(zip(ia, jb)) == [(0, 0)]


def test_pairs_across_the_ring_wrap():
    a = trig([0.002])
    b = trig([99.999])
    ia, jb = coincident_pairs(a, b, 0.005, 100.0)
    assert list(zip(ia, jb)) == [(0, 0)]
    ia, _ = coincident_pairs(a, trig([99.990]), 0.005, 100.0)
    assert ia.size == 0


def test_triples_and_min_ifos():
    travel = np.zeros((3, 3))
    h = trig([10.000, 20.0], snr=[6, 5])
    l = trig([10.003, 30.0], snr=[8, 5])
    v = trig([10.004, 20.002], snr=[4, 7])
    co = find_coincidences([h, l, v], travel, 0.005, 100.0, min_ifos=2)
    got = {tuple(r) for r in co[["i0", "i1", "i2"]].to_numpy()}
    assert got == {(0, 0, -1), (0, -1, 0), (-1, 0, 0), (0, 0, 0), (1, -1, 1)}
    triple = co[(co.i0 == 0) & (co.i1 == 0) & (co.i2 == 0)].iloc[0]
    assert triple.n_ifos == 3 and triple.stat == np.sqrt(36 + 64 + 16) and triple.time == 10.003  # loudest: L1
    co3 = find_coincidences([h, l, v], travel, 0.005, 100.0, min_ifos=3)
    assert len(co3) == 1
    # After clustering only the triple survives near t = 10 s, and the H1-V1 pair at 20 s.
    keep = cluster_in_time(co.time.to_numpy(), co.stat.to_numpy(), 0.1)
    assert sorted(co[keep].n_ifos) == [2, 3]


def test_clustering_keeps_local_maxima_and_breaks_ties_by_time():
    t = np.array([0.0, 0.05, 0.3, 0.32, 1.0, 1.05])
    s = np.array([5.0, 7.0, 6.0, 6.0, 4.0, 4.0])
    keep = cluster_in_time(t, s, 0.1)
    assert list(keep) == [False, True, True, False, True, False]
    perm = np.array([3, 1, 5, 0, 4, 2])
    assert list(cluster_in_time(t[perm], s[perm], 0.1)) == list(keep[perm])


def test_clustering_per_key_in_one_pass_equals_each_key_alone():
    """Every key (a slide, a trial) clustered in one pass equals :func:`cluster_in_time` run on each
    key's events alone, with ties in the statistic, equal times, events exactly one window apart
    (times on a grid of the window), negative keys and empty input."""
    rng = np.random.default_rng(3)
    assert cluster_per_key(np.zeros(0, int), np.zeros(0), np.zeros(0), 1.0).size == 0
    for case in range(400):
        n, window = int(rng.integers(1, 200)), float(rng.choice([0.1, 0.5, 2.0]))
        key = rng.integers(-3, int(rng.integers(1, 15)), n)
        time = rng.integers(0, 40, n) * 0.5 if case % 2 else rng.uniform(0, 50, n)
        stat = rng.integers(0, 4, n).astype(float) if case % 3 else rng.normal(size=n)
        want = np.zeros(n, bool)
        for k in np.unique(key):
            rows = np.flatnonzero(key == k)
            want[rows] = cluster_in_time(time[rows], stat[rows], window)
        assert np.array_equal(cluster_per_key(key, time, stat, window), want), case


def test_keyed_pairs_equal_brute_force():
    """Same-template coincidence: the sorted key/time search finds exactly the brute-force pairs,
    across the ring's wrap too."""
    rng = np.random.default_rng(3)
    ring, max_dt = 50.0, 0.012

    def keyed(n):
        return IfoTriggers(rng.uniform(0, ring, n), rng.uniform(0, 0.002, n), rng.uniform(5, 9, n),
                           rng.integers(0, 30, n))

    a, b = keyed(4000), keyed(4000)
    ia, jb = coincident_pairs(a, b, max_dt, ring)
    d = np.abs(a.time[:, None] - b.time[None, :])
    d = np.minimum(d, ring - d)
    ok = (d <= max_dt + a.uncertainty[:, None] + b.uncertainty[None, :]) & (a.key[:, None] == b.key[None, :])
    want = set(zip(*np.nonzero(ok)))
    assert len(want) > 20
    assert set(zip(ia.tolist(), jb.tolist())) == {(int(i), int(j)) for i, j in want}


def test_injection_found_within_the_search_timing_when_wider_than_its_window():
    """A binary's 10 ms match window against a burst candidate 40 ms off in H1 and 20 ms in L1: missed
    with a search timing under 10 ms, found with the burst search's 62.5 ms; a candidate 70 ms off
    stays missed; a candidate's own duration widens its window."""
    from gwbatch.candidates.injections import match_injections

    inj = pd.DataFrame({"id": [0, 1], "waveform": "IMRPhenomD", "gps_time": [1000.0, 2000.0], "snr": [30.0, 30.0],
                        "duration": [0.010, 0.010], "time_H1": [1000.000, 2000.0], "time_L1": [1000.005, 2000.005],
                        "snr_H1": [20.0, 20.0], "snr_L1": [22.0, 22.0]})
    cand = pd.DataFrame({"gps_time": [1000.04, 2000.07], "snr": [18.0, 17.0], "far": [1e-8, 1e-8],
                         "ifar_years": [3.2, 3.2], "time_H1": [1000.040, 2000.070], "time_L1": [1000.025, 2000.075],
                         "snr_H1": [12.0, 12.0], "snr_L1": [13.0, 13.0]})
    segs = {ifo: np.array([[0.0, 3000.0]]) for ifo in ("H1", "L1")}
    narrow = match_injections(inj, cand, ("H1", "L1"), segs, 2, 1024.0, timing=0.001)
    wide = match_injections(inj, cand, ("H1", "L1"), segs, 2, 1024.0, timing=0.0625)
    assert narrow["found"].tolist() == [False, False]
    assert wide["found"].tolist() == [True, False]
    assert wide["dt_H1"].iloc[0] == pytest.approx(0.040) and wide["found_snr"].iloc[0] == 18.0
    # a burst cluster of 0.875 s whose energy-weighted time is 0.18 s before the merger (measured on
    # simulated H1-L1 with configs/month.yaml's burst search) holds the merger; one of 0.1 s does not
    long = cand.assign(time_H1=[999.82, 1999.82], time_L1=[999.83, 1999.83], duration=[0.875, 0.1])
    assert match_injections(inj, long, ("H1", "L1"), segs, 2, 1024.0, timing=0.0625)["found"].tolist() == [True, False]


def test_a_candidate_flagged_as_interference_finds_no_injection():
    """Radio candidates of one beam each (column ``ifo``): an injection held only by an RFI-flagged
    candidate (a pulse merged into an undispersed cluster) is missed; where a clean candidate also
    matches, it is the one taken even when the flagged one is louder."""
    from gwbatch.candidates.injections import match_injections

    inj = pd.DataFrame({"id": [0, 1], "waveform": "dispersed-pulse", "gps_time": [10.0, 20.0], "snr": [10.0, 10.0],
                        "duration": [0.004, 0.004], "time_B0": [10.0, 20.0], "snr_B0": [10.0, 10.0]})
    cand = pd.DataFrame({"ifo": "B0", "gps_time": [10.001, 20.001, 20.002], "snr": [14.0, 15.0, 9.5],
                         "far": [1e-6, 1e-6, 1e-5], "ifar_years": [1.0, 1.0, 0.1], "rfi": [True, True, False]})
    segs = {"B0": np.array([[0.0, 30.0]])}
    out = match_injections(inj, cand, ("B0",), segs, 1, 3125.0)
    assert out["found"].tolist() == [False, True]
    assert out["candidate"].tolist() == [-1, 2] and out["found_snr"].iloc[1] == 9.5
    # without the flag both are found by the loudest match
    clean = match_injections(inj, cand.drop(columns="rfi"), ("B0",), segs, 1, 3125.0)
    assert clean["candidate"].tolist() == [0, 1]
