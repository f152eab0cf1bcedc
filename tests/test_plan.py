"""make_plan on real stores: detector and span checks, refusals with clear messages, dry-run text."""

from __future__ import annotations

import dataclasses

import pytest

from gwbatch.config import validate_campaign
from gwbatch.errors import ConfigError, DataError
from gwbatch.io.store import read_meta
from workflow.plan import make_plan


def campaign(store, **sections):
    raw = {"name": "t", "data": {"store": str(store)}, "search": {"kind": "pulse"}}
    for key, value in sections.items():
        raw.setdefault(key, {}).update(value)
    return validate_campaign(raw)


def test_plan_of_small_store(small_store):
    meta = read_meta(small_store)
    plan = make_plan(campaign(small_store, plan={"chunk": 64.0}), meta)
    assert plan.ifos == ("H1", "L1") and len(plan.chunks) == 4
    assert plan.travel[0][1] == pytest.approx(0.010012846, abs=1e-8)
    text = plan.describe(float(meta.t0))
    assert "4 tasks" in text and "H1, L1 at 1024 Hz" in text and "100 x 1 s" in text


def test_auto_deep_slides_fill_the_ring_up_to_the_reach_goal(small_store):
    """``background.deep_slides: auto``: the pulse search's slides of the 256 s span are as many as
    the slide check allows (one more is refused), the burst search runs none, and a number is kept
    as given."""
    meta = read_meta(small_store)
    plan = make_plan(campaign(small_store, plan={"chunk": 64.0}, background={"deep_slides": "auto"}), meta)
    assert plan.n_slides == 100 and plan.deep_slides == 156  # 256 s of data, a ring of 257.25 s
    assert "and 156 deep ones" in plan.describe(float(meta.t0))
    make_plan(campaign(small_store, plan={"chunk": 64.0}, background={"deep_slides": 156}), meta)
    with pytest.raises(ConfigError, match="257 slides .* more than the analysed span"):
        make_plan(campaign(small_store, plan={"chunk": 64.0}, background={"deep_slides": 157}), meta)
    kept = make_plan(campaign(small_store, plan={"chunk": 64.0}, background={"deep_slides": 7}), meta)
    assert kept.deep_slides == 7 and kept.settings.network.deep_slides == 7
    assert plan.settings.network.deep_slides == plan.deep_slides
    burst = make_plan(campaign(small_store, plan={"chunk": 64.0}, search={"kind": "burst", "f_high": 480.0},
                               background={"slides": 10, "deep_slides": "auto"}), meta)
    assert burst.deep_slides == 0 and burst.settings.network.deep_slides == 0
    none = make_plan(campaign(small_store, plan={"chunk": 64.0}, background={"slides": 0, "deep_slides": "auto"}), meta)
    assert none.deep_slides == 0
    # slides of 100 s: the 2 base ones are all the ring holds, so none are deep
    assert make_plan(campaign(small_store, background={"slides": 2, "slide_step": 100.0, "deep_slides": "auto"}),
                     meta).deep_slides == 0
    assert make_plan(campaign(small_store), meta).deep_slides == 156  # the default is auto


def test_dry_run_states_the_counted_reach(small_store):
    """The plan's text gives the IFAR its slides can count to at most (slides x span: 256 s x 256
    slides = 65536 s = 2.08e-3 yr; per 30 days 256 x 30 / 365.25 = 21.0 yr) and how many slides the
    10^4 yr per 30 days goal needs; a plan that has them is not told."""
    meta = read_meta(small_store)
    text = make_plan(campaign(small_store, plan={"chunk": 64.0}), meta).describe(float(meta.t0))
    line = next(x for x in text.splitlines() if x.startswith("reach"))
    assert "at most 0.00208 yr (21 yr per 30 days of data)" in line and "needs 121750 slides in all" in line
    deep = dataclasses.replace(make_plan(campaign(small_store), meta), deep_slides=121650)  # what a long span holds
    line = next(x for x in deep.describe(float(meta.t0)).splitlines() if x.startswith("reach"))
    assert "(1e4 yr per 30 days of data)" in line and "needs" not in line
    assert "reach" not in make_plan(campaign(small_store, background={"slides": 0}), meta).describe(float(meta.t0))


def test_detector_missing_from_store(small_store):
    with pytest.raises(DataError, match="data.ifos names V1, not in store .* holds: H1, L1"):
        make_plan(campaign(small_store, data={"ifos": ["H1", "V1"]}), read_meta(small_store))


def test_span_outside_store(small_store):
    with pytest.raises(DataError, match=r"data.start 1.0 is outside store .* \(GPS 1000000000.000000 .. 1000000256.000000\)"):
        make_plan(campaign(small_store, data={"start": 1.0}), read_meta(small_store))
    with pytest.raises(DataError, match="runs past the end of store"):
        make_plan(campaign(small_store, data={"duration": 1000.0}), read_meta(small_store))


def test_unknown_dq_flag(small_store):
    with pytest.raises(DataError, match="DQ flag 'SCIENCE' is not in store"):
        make_plan(campaign(small_store, data={"dq_flags": ["SCIENCE"]}), read_meta(small_store))


def test_chunk_too_short_for_psd(small_store):
    with pytest.raises(ConfigError, match="too short to estimate a PSD"):
        make_plan(campaign(small_store, plan={"chunk": 4.0}), read_meta(small_store))


def test_too_many_slides(small_store):
    with pytest.raises(ConfigError, match="more than the analysed span"):
        make_plan(campaign(small_store, background={"slides": 300}), read_meta(small_store))


def test_deep_slides_count_in_the_ring(small_store):
    meta = read_meta(small_store)
    with pytest.raises(ConfigError, match="more than the analysed span"):
        make_plan(campaign(small_store, background={"slides": 10, "deep_slides": 300}), meta)
    # trials within a chunk: base and deep together must fit the shortest chunk
    burst = {"kind": "burst", "f_high": 256.0}
    assert make_plan(campaign(small_store, search=burst, background={"slides": 2, "deep_slides": 5}), meta).n_slides == 2
    with pytest.raises(ConfigError, match="shortest chunk"):
        make_plan(campaign(small_store, search=burst, background={"slides": 2, "deep_slides": 500}), meta)
