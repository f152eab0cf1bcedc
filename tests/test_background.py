"""Time slides, livetime from shifted segments, FAR (inclusive/exclusive), slide settings checks."""

from __future__ import annotations

import numpy as np
import pytest

from gwbatch.background import check_slides, estimate_background
from gwbatch.background.far import far_from_counts, ifar_years, n_louder
from gwbatch.background.slides import (
    coverage_time,
    shift_segments,
    slide_livetimes,
    slide_shifts,
)
from gwbatch.candidates.coincidence import IfoTriggers
from gwbatch.errors import ConfigError


def test_slide_shifts_follow_detector_position():
    s = slide_shifts(3, 2, 1.5, 100.0)
    np.testing.assert_allclose(s, [[0, 0, 0], [0, 1.5, 3.0], [0, 3.0, 6.0]])


def test_shift_segments_wraps_without_losing_time():
    seg = np.array([[90.0, 98.0], [10.0, 20.0]])
    moved = shift_segments(seg, 5.0, 100.0)
    np.testing.assert_allclose(sorted(map(tuple, moved)), [(0.0, 3.0), (15.0, 25.0), (95.0, 100.0)])
    assert coverage_time([moved], 1) == pytest.approx(18.0)


def test_coverage_and_livetimes():
    a = np.array([[0.0, 60.0]])
    b = np.array([[40.0, 100.0]])
    assert coverage_time([a, b], 2) == pytest.approx(20.0)
    assert coverage_time([a, b], 1) == pytest.approx(100.0)
    # On a 200 s ring, b moved by 10 s is [50, 110): 10 s overlap; by 20 s, [60, 120): none.
    np.testing.assert_allclose(slide_livetimes([a, b], slide_shifts(2, 2, 10.0, 200.0), 200.0, 2), [20.0, 10.0, 0.0])
    # On a 100 s ring the shifted tail wraps to the start: [50, 100) + [0, 10) overlaps a for 20 s.
    np.testing.assert_allclose(slide_livetimes([a, b], slide_shifts(2, 1, 10.0, 100.0), 100.0, 2), [20.0, 20.0])


@pytest.mark.parametrize("n_ifos,min_ifos", [(2, 2), (3, 2), (3, 3), (2, 1)])
def test_slide_livetimes_match_one_slide_at_a_time(n_ifos, min_ifos):
    """All slides at once against shift_segments + coverage_time per slide, on segments with gaps
    that wrap at the ring's end as the shifts grow."""
    rng = np.random.default_rng(n_ifos * 10 + min_ifos)
    ring = 1000.0
    segments = []
    for _ in range(n_ifos):
        edges = np.sort(rng.choice(np.arange(1.0, ring, 0.5), 8, replace=False))
        segments.append(edges.reshape(-1, 2))
    shifts = slide_shifts(n_ifos, 400, 2.37, ring)
    want = [coverage_time([shift_segments(seg, sh, ring) for seg, sh in zip(segments, row)], min_ifos) for row in shifts]
    np.testing.assert_allclose(slide_livetimes(segments, shifts, ring, min_ifos), want, rtol=1e-12, atol=1e-9)


def test_far_counts_and_bounds():
    bg = np.array([1.0, 2.0, 3.0, 3.0, 5.0])
    np.testing.assert_array_equal(n_louder(bg, [0.5, 3.0, 4.0, 6.0]), [5, 3, 1, 0])
    np.testing.assert_allclose(far_from_counts(np.array([5, 0]), 10.0), [0.5, 0.1])  # 0 louder -> bound 1/T
    assert ifar_years(np.array([1 / (365.25 * 86400)]))[0] == pytest.approx(1.0)


def test_inclusive_and_exclusive_far():
    # Two detectors, one loud coincident pair at zero lag plus quiet noise triggers.
    ring = 100.0
    h = IfoTriggers(np.array([10.0, 30.0, 55.0]), np.zeros(3), np.array([20.0, 5.0, 5.0]))
    l = IfoTriggers(np.array([10.001, 31.0, 56.0]), np.zeros(3), np.array([20.0, 5.0, 5.0]))
    seg = [np.array([[0.0, ring]]), np.array([[0.0, ring]])]
    res = estimate_background([h, l], seg, ring=ring, travel=np.zeros((2, 2)), window=0.005, min_ifos=2,
                              cluster_window=0.1, n_slides=60, slide_step=1.0)
    fg = res.foreground
    assert len(fg) == 1 and fg.iloc[0].stat == pytest.approx(np.sqrt(800))
    assert res.background_time == pytest.approx(60 * ring)
    # L1 moves by +k s in slide k: the loud triggers pair with quiet ones in slides 54 (H1 @ 10 s +
    # L1 @ 56 s), 20 and 45 (loud L1 @ 10 s with H1 @ 30 s, 55 s), and quiet with quiet in slide 24.
    assert sorted(res.background["slide"]) == [20, 24, 45, 54]
    np.testing.assert_allclose(sorted(res.background["stat"]), [np.sqrt(50)] + [np.sqrt(425)] * 3)
    # None is as loud as the candidate, so both FARs are the bound 1/T_bg.
    assert fg.iloc[0].n_louder == 0 and fg.iloc[0].far == pytest.approx(1 / (60 * ring))
    # A loud lone L1 trigger makes background louder than a quiet candidate; exclusive removes those
    # built from the candidate's own triggers.
    h2 = IfoTriggers(np.array([10.0]), np.zeros(1), np.array([6.0]))
    l2 = IfoTriggers(np.array([10.001, 80.0]), np.zeros(2), np.array([6.0, 30.0]))
    res2 = estimate_background([h2, l2], seg, ring=ring, travel=np.zeros((2, 2)), window=0.005, min_ifos=2,
                               cluster_window=0.1, n_slides=60, slide_step=1.0)
    c = res2.foreground.iloc[0]
    assert c.n_louder == 1 and c.n_louder_exclusive == 0  # slide 30 pairs H1's own trigger with L1 @ 80 s


def test_single_series_far_is_its_own_trigger_rate():
    t = IfoTriggers(np.array([1.0, 2.0, 3.0, 4.0]), np.zeros(4), np.array([6.0, 9.0, 7.0, 12.0]))
    res = estimate_background([t], [np.array([[0.0, 10.0]])], ring=10.0, travel=np.zeros((1, 1)), window=0.0,
                              min_ifos=1, cluster_window=0.1, n_slides=0, slide_step=1.0)
    fg = res.foreground.sort_values("stat")
    np.testing.assert_array_equal(fg["n_louder"], [4, 3, 2, 1])
    np.testing.assert_allclose(fg["far"], [0.4, 0.3, 0.2, 0.1])
    assert "single series" in res.method


def test_slide_settings_refused():
    with pytest.raises(ConfigError, match="must exceed twice the coincidence reach"):
        check_slides(2, 10, 0.02, 1000.0, 0.015)
    with pytest.raises(ConfigError, match="more than the analysed span"):
        check_slides(3, 600, 1.0, 1000.0, 0.03)
    check_slides(3, 400, 1.0, 1000.0, 0.03)


@pytest.mark.parametrize("n_ifos", [2, 3])
def test_most_slides_is_the_check_s_boundary(n_ifos):
    """``most_slides`` slides pass :func:`check_slides` and one more is refused, over rings, steps and
    reaches drawn at random; one detector holds none; REACH_SLIDES is 10^4 yr per 30 days."""
    from gwbatch.background import REACH_SLIDES, check_slides, most_slides
    from gwbatch.errors import ConfigError

    rng = np.random.default_rng(n_ifos)
    for _ in range(200):
        reach = rng.uniform(0.005, 0.05)
        step = rng.uniform(2.0 * reach * 1.01, 2.0)
        ring = rng.uniform(4.0 * reach + (n_ifos - 1) * step, 5000.0)
        most = most_slides(n_ifos, step, ring, reach)
        check_slides(n_ifos, most, step, ring, reach)
        with pytest.raises(ConfigError, match="more than"):
            check_slides(n_ifos, most + 1, step, ring, reach)
    assert most_slides(1, 1.0, 100.0, 0.01) == 0
    assert REACH_SLIDES * 30 / 365.25 == pytest.approx(1e4, rel=1e-4)
