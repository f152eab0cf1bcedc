"""FARs counted, extrapolated from the background's tail, or bounded; hierarchical removal
(gwbatch.background.significance), each against a hand computation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gwbatch.background.significance import MIN_TAIL_EVENTS, assign_far, fit_tail

NO_LINKS = pd.DataFrame({"fg": np.zeros(0, np.int64), "bg": np.zeros(0, np.int64)})


def test_tail_fit_is_the_exponential_maximum_likelihood():
    bg = np.array([1.0, 2.0, 3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0, 6.5, 7.0, 7.5, 8.0])
    fit = fit_tail(bg, tail=10)
    # the 10 loudest are fitted above the 11th loudest (3.0): alpha = 10 / sum(x - 3)
    excess = np.sort(bg)[::-1][:10] - 3.0
    assert fit.threshold == 3.0 and fit.count == 10
    assert fit.slope == pytest.approx(10 / excess.sum())
    assert fit.slope_error == pytest.approx(fit.slope / np.sqrt(10))
    assert fit.n_louder(3.0) == pytest.approx(10.0)
    # fewer events than the fit needs: no fit
    assert fit_tail(bg[: MIN_TAIL_EVENTS], tail=100) is None
    assert fit_tail(bg, tail=0) is None


def test_exponential_background_is_extrapolated_within_its_error():
    """Background drawn from N(>= x) = n exp(-x) (unit slope): the fit recovers the slope and a
    candidate beyond the loudest background event gets FAR n exp(-x) / T within the fit's error."""
    rng = np.random.default_rng(3)
    bg = rng.exponential(1.0, 100_000)
    t_bg = 1e6
    stat = np.array([5.0, 16.0])
    sig = assign_far(stat, bg, NO_LINKS, t_bg, tail=2000, hierarchical=False)
    assert sig.fit.slope == pytest.approx(1.0, abs=3 * sig.fit.slope_error)
    counted, beyond = sig.columns.iloc[0], sig.columns.iloc[1]
    assert counted.far_kind == "counted" and counted.far == pytest.approx(np.sum(bg >= 5.0) / t_bg)
    assert beyond.n_louder == 0 and beyond.far_kind == "extrapolated"
    truth = 1e5 * np.exp(-16.0) / t_bg
    assert beyond.far == pytest.approx(truth, rel=0.35)
    assert beyond.far < 1 / t_bg and beyond.far_upper > beyond.far
    assert beyond.ifar_years == pytest.approx(1 / (beyond.far * 365.25 * 86400))


def test_bound_without_a_fit():
    bg = np.arange(5.0)
    sig = assign_far(np.array([2.0, 10.0]), bg, NO_LINKS, 50.0, tail=100, hierarchical=False)
    assert sig.fit is None
    assert list(sig.columns["far_kind"]) == ["counted", "bound"]
    assert sig.columns["far"].tolist() == pytest.approx([3 / 50, 1 / 50])
    # fitting off: the same bound even with plenty of background
    sig = assign_far(np.array([2000.0]), np.arange(1000.0), NO_LINKS, 50.0, tail=0, hierarchical=False)
    assert sig.columns["far_kind"].iloc[0] == "bound" and sig.columns["far"].iloc[0] == pytest.approx(1 / 50)


def test_hierarchical_removal_of_two_loud_candidates():
    """Two loud zero-lag candidates A (rank 50) and B (rank 20), and a quiet one C (rank 6).  A's
    own triggers, slid against noise, made background events of ranks 30, 25 and 8; B's made 12
    and 5.  The noise background is 1..10 (one of each).  By hand:

    - without removal, B has 2 louder (30, 25) and C has 9 (noise 6..10, A's 30, 25, 8, B's 12);
    - round 1 removes A (louder than all background), taking 30, 25 and 8 out; round 2 removes B
      (20 > 12 and every noise event), taking 12 and 5 out; C then counts only noise >= 6: 5.
    """
    noise = np.arange(1.0, 11.0)
    a_own, b_own = np.array([30.0, 25.0, 8.0]), np.array([12.0, 5.0])
    bg = np.concatenate([noise, a_own, b_own])
    links = pd.DataFrame({"fg": [0, 0, 0, 1, 1], "bg": [10, 11, 12, 13, 14]})
    stat = np.array([50.0, 20.0, 6.0])
    t_bg = 1000.0
    sig = assign_far(stat, bg, links, t_bg, tail=0, hierarchical=True)
    c = sig.columns
    assert sig.removed == 2 and list(c["removal_round"]) == [1, 2, 0]
    assert list(c["n_louder"]) == [0, 0, 5]
    assert c["far"].tolist() == pytest.approx([1 / t_bg, 1 / t_bg, 5 / t_bg])
    assert list(c["far_kind"]) == ["bound", "bound", "counted"]
    # without removal: A 0 louder, B 2 (30, 25), C 9 (30, 25, 12, 8, 10, 9, 8, 7, 6)
    assert c["far_no_removal"].tolist() == pytest.approx([1 / t_bg, 2 / t_bg, 9 / t_bg])
    assert list(c["n_louder_exclusive"]) == [0, 0, 5]
    off = assign_far(stat, bg, links, t_bg, tail=0, hierarchical=False).columns
    # B's own background events (12, 5) are quieter than B: its exclusive count is its inclusive one
    assert list(off["n_louder"]) == [0, 2, 9] and list(off["n_louder_exclusive"]) == [0, 2, 9]
    assert list(off["removal_round"]) == [0, 0, 0]


def test_removal_stops_at_the_first_candidate_within_the_background():
    bg = np.array([1.0, 2.0, 9.0])
    links = pd.DataFrame({"fg": [1], "bg": [2]})  # the 9 is B's own
    sig = assign_far(np.array([5.0, 10.0]), bg, links, 10.0, tail=0, hierarchical=True)
    # B (10) is louder than everything: removed, its 9 leaves; A (5) is then louder than all -> removed too
    assert list(sig.columns["removal_round"]) == [2, 1]
    sig = assign_far(np.array([5.0, 10.0]), bg, NO_LINKS, 10.0, tail=0, hierarchical=True)
    # without links B's removal takes nothing away: A stays below the 9 and is not removed
    assert list(sig.columns["removal_round"]) == [0, 1] and sig.columns["n_louder"].iloc[0] == 1


def _gaussian_tail_triggers(rng, n: int, ring: float, threshold: float = 5.0):
    """Triggers at random times whose SNR has a Gaussian-noise tail above ``threshold``:
    ``P(snr > x) = exp(-(x^2 - threshold^2) / 2)``."""
    from gwbatch.candidates.coincidence import IfoTriggers

    snr = np.sqrt(threshold**2 + 2.0 * rng.exponential(1.0, n))
    return IfoTriggers(np.sort(rng.uniform(0.0, ring, n)), np.full(n, 1e-3), snr)


def test_deep_slides_of_a_loud_candidate_do_not_set_the_cut():
    """A loud zero-lag pair (SNR 30 in each detector) meets the other detector's noise in many
    deep slides; those events are its own, so the cut rises to the noise's tail, not to them, and
    they are all kept; the deep events match a per-slide coincidence pass above that cut."""
    from gwbatch.background import _run_slide_above, estimate_background
    from gwbatch.candidates.coincidence import IfoTriggers

    rng = np.random.default_rng(8)
    ring = 2000.0
    a, b = (_gaussian_tail_triggers(rng, 1500, ring) for _ in range(2))
    a = IfoTriggers(np.append(a.time, 1000.0), np.append(a.uncertainty, 1e-3), np.append(a.snr, 30.0))
    b = IfoTriggers(np.append(b.time, 1000.002), np.append(b.uncertainty, 1e-3), np.append(b.snr, 30.0))
    travel = np.array([[0.0, 0.010], [0.010, 0.0]])
    common = dict(ring=ring, travel=travel, window=0.005, min_ifos=2, cluster_window=0.1, slide_step=0.1, tail=20,
                  hierarchical=True)
    res = estimate_background([a, b], [np.array([[0.0, ring]])] * 2, n_slides=20, deep_slides=3000, **common)
    deep = res.background[res.background["slide"] > 20]
    loud = (deep["i0"] == 1500) | (deep["i1"] == 1500)
    assert loud.sum() > 50 and res.deep_cut < 12.0  # measured: 162 such events, cut 8.50
    noise = np.sort(deep["stat"].to_numpy()[~loud.to_numpy()])[::-1]
    assert noise[20] == pytest.approx(res.deep_cut)
    shifts = res.shifts
    for k in rng.choice(np.arange(21, 3021), 40, replace=False):
        want = _run_slide_above([a, b], shifts[k], ring, travel, 0.005, 2, 0.1, res.deep_cut)
        got = deep[deep["slide"] == k]
        np.testing.assert_array_equal(got[["i0", "i1"]].to_numpy(), want[["i0", "i1"]].to_numpy())


def test_tail_extrapolation_is_conservative_in_gaussian_noise():
    """Two detectors of Gaussian-tail triggers (threshold a = 5): chance coincidences of
    ``rho^2 = snr_1^2 + snr_2^2`` have ``N(>= rho) = C (1 + y / 2) exp(-y / 2)``, ``y = rho^2 - 2 a^2``
    (the sum of two exponentials of mean 2).  ``C`` is measured on a 300-slide background where it
    holds 1000 events; the 10-slide background's exponential fit, extrapolated beyond its loudest
    event, must not fall below that truth (conservative; the true tail falls faster than any
    exponential), and at its loudest event agree with it within a factor 5."""
    from gwbatch.background import estimate_background

    rng = np.random.default_rng(11)
    ring, a = 20000.0, 5.0
    triggers = [_gaussian_tail_triggers(rng, 10000, ring, a) for _ in range(2)]
    segments = [np.array([[0.0, ring]])] * 2
    common = dict(ring=ring, travel=np.array([[0.0, 0.010], [0.010, 0.0]]), window=0.005, min_ifos=2,
                  cluster_window=0.1, slide_step=1.0, tail=100, hierarchical=False)
    shallow = estimate_background(triggers, segments, n_slides=10, **common)
    deep = estimate_background(triggers, segments, n_slides=300, **common)
    assert shallow.fit is not None and shallow.fit.count == 100

    def shape(x):
        y = x**2 - 2 * a**2
        return (1 + y / 2) * np.exp(-y / 2)

    reference = np.sort(deep.background["stat"].to_numpy())[::-1][999]
    scale = 1000 / deep.background_time / shape(reference)
    x = shallow.background["stat"].max() + np.array([0.0, 0.5, 1.0, 2.0])
    ratio = shallow.fit.n_louder(x) / shallow.background_time / (scale * shape(x))
    assert 0.5 <= ratio[0] <= 5.0, ratio
    assert np.all(ratio[1:] >= 1.0) and np.all(np.diff(ratio) > 0), ratio


@pytest.mark.parametrize("n_ifos", [2, 3])
def test_deep_slides_keep_exactly_the_events_above_the_cut(n_ifos):
    """The deep slides' events are those the whole slides keep at or above the cut, and candidates
    above the cut are counted over the base and deep livetimes together."""
    from gwbatch.background import deep_cut, estimate_background

    rng = np.random.default_rng(5)
    ring = 4000.0
    triggers = [_gaussian_tail_triggers(rng, 3000, ring) for _ in range(n_ifos)]
    segments = [np.array([[0.0, ring]])] * n_ifos
    travel = np.full((n_ifos, n_ifos), 0.010) - np.eye(n_ifos) * 0.010
    common = dict(ring=ring, travel=travel, window=0.005, min_ifos=2, cluster_window=0.1, slide_step=1.0,
                  tail=20, hierarchical=False)
    split = estimate_background(triggers, segments, n_slides=20, deep_slides=60, **common)
    whole = estimate_background(triggers, segments, n_slides=80, **common)
    bg_split, bg_whole = split.background, whole.background
    base_cut = deep_cut(bg_whole[bg_whole["slide"] <= 20]["stat"].to_numpy(), 20)
    cut = split.deep_cut
    if n_ifos == 2:  # loudest trigger first: the cut rises to the 21st loudest deep event
        assert cut > base_cut
    else:
        assert cut == base_cut
    cols = [f"i{k}" for k in range(n_ifos)] + ["slide"]
    deep = bg_split[bg_split["slide"] > 20].sort_values(cols).reset_index(drop=True)
    expected = bg_whole[(bg_whole["slide"] > 20) & (bg_whole["stat"] >= cut)].sort_values(cols).reset_index(drop=True)
    assert len(deep) > 20
    pd.testing.assert_frame_equal(deep[cols + ["stat"]], expected[cols + ["stat"]])
    assert split.background_time == pytest.approx(whole.background_time)
    # a candidate above the cut: every event at least as loud over all 80 slides' livetime
    fg_s, fg_w = split.foreground, whole.foreground
    above = fg_w["stat"].to_numpy() >= cut
    assert above.any() and (~above).any()
    np.testing.assert_array_equal(fg_s["n_louder"].to_numpy()[above], fg_w["n_louder"].to_numpy()[above])
    np.testing.assert_allclose(fg_s["far"].to_numpy()[above & (fg_w["n_louder"].to_numpy() > 0)],
                               fg_w["far"].to_numpy()[above & (fg_w["n_louder"].to_numpy() > 0)])
    # below it: the base slides only
    t_base = split.livetime[1:21].sum()
    below = ~above
    n_base = np.array([(bg_split[bg_split["slide"] <= 20]["stat"].to_numpy() >= x).sum()
                       for x in fg_s["stat"].to_numpy()[below]])
    np.testing.assert_allclose(fg_s["far"].to_numpy()[below], np.maximum(n_base, 1) / t_base)


def test_extrapolation_stops_ten_efoldings_past_the_loudest_fitted_event():
    from gwbatch.background.significance import EXTRAPOLATION_EFOLDS

    rng = np.random.default_rng(4)
    bg = rng.exponential(1.0, 5000)
    sig = assign_far(np.array([bg.max() + 2.0, bg.max() + 40.0]), bg, NO_LINKS, 1e4, tail=500, hierarchical=False)
    fit, c = sig.fit, sig.columns
    limit = fit.loudest + EXTRAPOLATION_EFOLDS / fit.slope
    assert bg.max() + 2.0 < limit < bg.max() + 40.0
    assert list(c["far_kind"]) == ["extrapolated", "bound"]
    assert c["far"].iloc[1] == pytest.approx(fit.n_louder(limit) / 1e4)
    assert c["far"].iloc[1] < c["far"].iloc[0] < 1e-4


def test_chunks_of_different_trial_counts_are_refused_not_summed():
    """Checkpoints of two plans (2560 and 2570 trials) must never be summed as one background:
    the reduction names the chunks and their trial counts instead of a NumPy shape error."""
    from types import SimpleNamespace

    from gwbatch.background.trials import gather_chunk_events
    from gwbatch.errors import DataError
    from gwbatch.gpstime import GPSTime

    def chunk(index, trials):
        events = pd.DataFrame({"trial": [0], "skymap": [-1], "geocent_sample": [10.0 + index]})
        return SimpleNamespace(index=index, tables={"events": events},
                               arrays={"skymaps": np.zeros((0, 12), np.float32), "livetime": np.ones(trials + 1)})

    zero, _, _, livetime = gather_chunk_events([chunk(0, 2559), chunk(1, 2559)], GPSTime.parse("1000000000"), 1024.0)
    assert len(zero) == 2 and livetime.tolist() == [2.0] * 2560
    with pytest.raises(DataError, match=r"chunk 0: 2559, chunk 1: 2569\).*--overwrite"):
        gather_chunk_events([chunk(0, 2559), chunk(1, 2569)], GPSTime.parse("1000000000"), 1024.0)
