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


def test_spiir_defaults_reach_1e4_yr_per_30_days(small_store, tmp_path):
    """``plan.chunk`` and ``background.slide_step`` left at ``auto`` with SPIIR's deep trials ``auto``:
    the step is the next 0.01 s above twice the coincidence reach, rounded up to a whole sample, and
    every chunk holds the 125000 trials ``auto`` aims for (1e4 yr per 30 days needs 121750).  H1-L1
    at 1024 Hz: reach 10.0 ms light travel + 5 ms window + 2 x 1 ms timing = 17.0 ms, 0.04 s, so 41
    samples (0.0400391 s); a chunk needs 125000 x 41 / 1024 s + 2 x reach = 5004.92 s, and chunks are
    at least 0.75 plan.chunk, so plan.chunk is 5004.92 / 0.75 rounded up to 16 s: 6688 s.  With V1
    (H1-V1 27.3 ms: reach 34.3 ms, 0.07 s, 72 samples; detector 2 moves twice as far):
    2 x 125000 x 72 / 1024 / 0.75 -> 23440 s.  Thirty days (the store's description lengthened: the
    plan reads no strain) then reach 1.03e4 yr by counting."""
    from gwbatch.simulate import simulate_store

    def spiir(store, **sections):
        return campaign(store, search={"kind": "spiir", "bank": "configs/banks/bbh-small.yaml"}, **sections)

    meta = read_meta(small_store)
    month = dataclasses.replace(meta, n_samples=30 * 86400 * 1024)
    plan = make_plan(spiir(small_store), month)
    assert (plan.slide_step, plan.chunk_seconds) == (41 / 1024, 6688.0)
    assert plan.settings.coherent.step == 41  # the trials' own step, in samples
    assert min(c.stop - c.start for c in plan.chunks) / 1024 >= 125000 * 41 / 1024 + 2 * 0.017
    assert plan.n_slides + plan.deep_slides == 125000
    reach = next(x for x in plan.describe(float(meta.t0)).splitlines() if x.startswith("reach"))
    assert "(1.03e4 yr per 30 days of data)" in reach and "needs" not in reach
    short = make_plan(spiir(small_store), meta)  # 256 s: one chunk, as many trials as it holds
    assert len(short.chunks) == 1 and short.deep_slides == 6292 and short.slide_step == 41 / 1024
    three = simulate_store(tmp_path / "v.zarr", ifos=("H1", "L1", "V1"), duration=64, sample_rate=1024, seed=1)
    plan3 = make_plan(spiir(three), dataclasses.replace(read_meta(three), n_samples=30 * 86400 * 1024))
    assert (plan3.slide_step, plan3.chunk_seconds) == (72 / 1024, 23440.0) and plan3.deep_slides == 124900
    # what is set is kept: a step (0.05 s: 51 samples) sizes the chunk for itself; a chunk keeps its length
    assert make_plan(spiir(small_store, background={"slide_step": 0.05}), month).chunk_seconds == 8304.0
    fixed = make_plan(spiir(small_store, plan={"chunk": 512.0}), month)
    assert (fixed.chunk_seconds, fixed.slide_step, fixed.deep_slides) == (512.0, 41 / 1024, 12787 - 100)  # 512.05 s chunks
    # deep trials set: the same step, and chunks that hold the trials asked, at least 128 s
    none = make_plan(spiir(small_store, background={"deep_slides": 0}), month)
    assert (none.chunk_seconds, none.slide_step, none.deep_slides) == (128.0, 41 / 1024, 0)
    asked = make_plan(spiir(small_store, background={"deep_slides": 124900}), month)
    assert (asked.chunk_seconds, asked.slide_step) == (6688.0, 41 / 1024)
    some = make_plan(spiir(small_store, background={"deep_slides": 1000}, plan={"chunk": 256.0}), meta)
    assert (some.n_slides, some.deep_slides, some.slide_step) == (100, 1000, 41 / 1024)  # 1 s steps: 1100 s
    # no slides, or searches whose slides span the data or whose deep lags are dear: 128 s, 1 s
    for plain in (make_plan(spiir(small_store, background={"slides": 0}), month),
                  make_plan(campaign(small_store), month),
                  make_plan(campaign(small_store, search={"kind": "burst", "f_high": 480.0},
                                     background={"slides": 10}), month)):
        assert (plain.chunk_seconds, plain.slide_step) == (128.0, 1.0)


def test_slide_steps_of_whole_samples_are_checked_as_set(small_store):
    """A search that shifts its trials by whole samples (SPIIR) refuses a step under one sample
    with a ``ConfigError`` (a 0.0004 s step at 1024 Hz rounded to 0 samples and divided by zero),
    and a refused step is quoted as set, with the samples it shifts by."""
    meta = read_meta(small_store)
    spiir = {"kind": "spiir", "bank": "configs/banks/bbh-small.yaml"}
    with pytest.raises(ConfigError, match=r"slide_step \(0\.0004 s\) is less than one sample at 1024 Hz"):
        make_plan(campaign(small_store, search=spiir, background={"slide_step": 0.0004}), meta)
    with pytest.raises(ConfigError, match=r"slide_step \(0\.03 s, shifted by 31 samples = 0\.0302734 s at 1024 Hz\) "
                                          r"must exceed twice the coincidence reach"):
        make_plan(campaign(small_store, search=spiir, background={"slide_step": 0.03}), meta)


def test_resume_identity_holds_what_auto_resolved_to(small_store, monkeypatch):
    """``run.json`` records a setting left ``auto`` by the value the plan resolved it to: a pulse
    run with ``plan.chunk: auto`` is the run of 128 s chunks (so a run that set 128 resumes), and a
    SPIIR run's auto deep trials are their number, so plans whose auto rules resolve otherwise (as
    when AUTO_SLIDES moved from 121750 to 125000) refuse each other's checkpoints, naming it."""
    import workflow.plan
    from workflow.resume import identity_changes, run_identity

    meta = read_meta(small_store)

    def identity(c):
        return run_identity(c, meta, make_plan(c, meta))

    auto = identity(campaign(small_store))
    assert auto == identity(campaign(small_store, plan={"chunk": 128.0}))
    assert auto["settings"]["plan"]["chunk"] == 128.0
    spiir = campaign(small_store, search={"kind": "spiir", "bank": "configs/banks/bbh-small.yaml"})
    now = identity(spiir)
    assert now["settings"]["background"]["deep_slides"] == 6292
    assert now["settings"]["background"]["slide_step"] == 41 / 1024
    monkeypatch.setattr(workflow.plan, "AUTO_SLIDES", 3000)
    fewer = identity(spiir)  # 3000 x 41 / 1024 s + 2 x 0.017 s over 0.75, up to 16 s: 176 s chunks
    assert identity_changes(now, fewer) == ["background.deep_slides: 6292 -> 2900", "plan.chunk: 6688.0 -> 176.0"]


def test_long_identity_values_that_differ_are_shown_apart():
    """A resume refusal names what differs; two long values (a bank's content) that differ only
    past the cut are shown with a short hash each, not as the same text twice."""
    from workflow.resume import identity_changes

    a = {"settings": {"search": {"bank": {"templates": "x" * 100 + "1"}}}}
    b = {"settings": {"search": {"bank": {"templates": "x" * 100 + "2"}}}}
    (line,) = identity_changes(a, b)
    before, after = line.split(": ", 1)[1].split(" -> ")
    assert line.startswith("search.bank.templates: ") and before != after and "(sha256 " in before
