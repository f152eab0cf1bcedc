"""Science segments and vetoes (issue 24 item 3): the readers (LIGO_LW segment XML, veto definer,
segwizard text, GWOSC timeline JSON, GWOSC HDF5 bits), exact sample membership, and campaigns
in which category 1 removes data before conditioning, sub-second category 2 removes triggers and
livetime (per slide, equal to an independent sample count), and hardware injections are flagged
or vetoed."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gwbatch.errors import DataError
from gwbatch.gpstime import GPSTime
from gwbatch.io.segments import (
    complement,
    interval_mask,
    read_flag,
    read_veto_definer,
    to_samples,
    union,
)
from gwbatch.io.store import read_injections, read_meta
from gwbatch.io.tables import read_table
from tests.ligolw_files import write_segment_xml, write_veto_definer
from tests.test_campaign import make_campaign
from workflow.campaign import run_campaign
from workflow.plan import make_plan

pytest.importorskip("lal")
GW150914_H1 = Path(__file__).parent / "data" / "gw150914" / "H-H1_LOSC_4_V2-1126259446-32.hdf5"
NS = 1_000_000_000
HALF = 1024  # whitening filter half-length of the small campaign: 1 s at 1024 Hz


# --- readers -----------------------------------------------------------------------------------


def test_readers_agree_on_the_same_segments(tmp_path):
    segs = [("1000000000", "1000000010.25"), ("1000000020.000000001", "1000000030")]
    expect = np.array([[1000000000 * NS, 1000000010250000000], [1000000020000000001, 1000000030 * NS]])
    xml = write_segment_xml(tmp_path / "s.xml", {"H1:DMT-ANALYSIS_READY:1": segs, "L1:OTHER:2": [(5, 6)]})
    text = tmp_path / "s.txt"
    text.write_text("# seg start stop duration\n" + "".join(
        f"{i} {a} {b} {Decimal(b) - Decimal(a)}\n" for i, (a, b) in enumerate(segs)))
    two = tmp_path / "two.txt"
    two.write_text("\n".join(f"{a} {b}  # comment" for a, b in segs) + "\n\n")
    gwosc = tmp_path / "H1_DATA.json"
    gwosc.write_text(json.dumps({"dataset": "O1", "id": "H1_DATA", "start": 0, "end": 2,
                                 "segments": [[float(a), float(b)] for a, b in segs[:1]]}))
    assert np.array_equal(read_flag(xml, flag="H1:DMT-ANALYSIS_READY:1")[1], expect)
    assert read_flag(xml, flag="H1:DMT-ANALYSIS_READY")[0] == "H1"  # version optional when only one exists
    assert np.array_equal(read_flag(text, ifo="H1")[1], expect)
    assert np.array_equal(read_flag(two, ifo="H1")[1], expect)
    ifo, seg = read_flag(gwosc)
    assert ifo == "H1" and np.array_equal(seg, expect[:1])


def test_gwosc_hdf5_bits_as_segments():
    ifo, on = read_flag(GW150914_H1, flag="NO_CBC_HW_INJ")  # set in every second: no CBC hardware injection
    assert ifo == "H1" and np.array_equal(on, [[1126259446 * NS, 1126259478 * NS]])
    ifo, data = read_flag(GW150914_H1, flag="CBC_CAT2")
    assert np.array_equal(data, on)
    with pytest.raises(DataError, match="no bit 'CAT9'.*DATA, CBC_CAT1"):
        read_flag(GW150914_H1, flag="CAT9")


def test_veto_definer_rows(tmp_path):
    path = write_veto_definer(tmp_path / "v.xml", [
        dict(ifo="H1", name="BAD", version=2, category=2, start_time=100, end_time=0, start_pad=-1, end_pad=3),
        dict(ifo="L1", name="HW", version=1, category=3, start_time=0, end_time=500, start_pad=0, end_pad=0)])
    rows = read_veto_definer(path)
    assert [(r.flag, r.category, r.start, r.stop, r.start_pad, r.end_pad) for r in rows] == [
        ("H1:BAD:2", 2, 100 * NS, None, -NS, 3 * NS), ("L1:HW:1", 3, 0, 500 * NS, 0, 0)]
    bad = write_veto_definer(tmp_path / "bad.xml", [dict(ifo="H1", name="X", version=1, category=7)])
    with pytest.raises(DataError, match="category 7; allowed: 1, 2, 3, 4"):
        read_veto_definer(bad)


def test_sample_membership_is_exact():
    """Sample k (at t0 + k / fs) is in [a, b) when a <= t0 + k / fs < b."""
    t0, fs = GPSTime.parse("1000000000.5"), 1024.0
    seg = np.array([[1000000001 * NS, 1000000001 * NS + 250_000_001]])  # [t0 + 0.5, t0 + 0.750000001)
    k = to_samples(seg, t0, fs)
    assert k.tolist() == [[512, 769]]  # 768 / 1024 = 0.75 < 0.750000001: sample 768 is inside
    assert to_samples(np.array([[1000000001 * NS, 1000000001 * NS + 250_000_000]]), t0, fs).tolist() == [[512, 768]]
    # before t0 (negative samples, outside the store): [t0 - 0.5, t0 - 0.5 + 1 ns) holds sample -512 alone
    assert to_samples(np.array([[1000000000 * NS, 1000000000 * NS + 1]]), t0, fs).tolist() == [[-512, -511]]
    assert union(np.array([[-9, -7], [-8, -6]])).tolist() == [[-9, -6]]
    assert union(np.array([[5, 7], [1, 3], [3, 4], [6, 9]])).tolist() == [[1, 4], [5, 9]]
    assert complement(np.array([[2, 4]]), 0, 10).tolist() == [[0, 2], [4, 10]]
    assert interval_mask(np.array([[2, 4], [8, 20]]), 1, 10).tolist() == [False, True, True, False, False, False, False,
                                                                          True, True]


@pytest.mark.parametrize("text, message", [
    ("1 100 90 -10\n", "ends before it starts"),
    ("1 100 110 11\n", "duration 11 is not stop - start"),
    ("100 110 120\n", "3 columns"),
    ("abc def\n", "is not a GPS time"),
    ("1e20 1e21\n", "outside \\[0, 2\\*\\*32\\)"),
    ("nan 5\n", "outside"),
])
def test_bad_segwizard_lines_refused(tmp_path, text, message):
    path = tmp_path / "s.txt"
    path.write_text(text)
    with pytest.raises(DataError, match=message) as err:
        read_flag(path, ifo="H1")
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_times_and_detectors_of_segment_files_are_checked(tmp_path, monkeypatch):
    """LIGO_LW nanoseconds outside [0, 10^9) are refused (1.5e9 ns read as 0.15 s, 10^10 ns as
    0.1 s); a GWOSC-style JSON naming its flag ``L1:...`` is an L1 file, so ``ifo: H1`` is refused."""
    import tests.ligolw_files as files

    for ns, words in ((1_500_000_000, "start_time_ns is 1500000000"), (-1, "start_time_ns is -1")):
        monkeypatch.setattr(files, "_split", lambda t, ns=ns: (int(t), ns) if t == 10 else (int(t), 0))
        xml = files.write_segment_xml(tmp_path / "ns.xml", {"H1:A:1": [(10, 20)]})
        with pytest.raises(DataError, match=rf"segment row 0 {words}; nanoseconds must lie in \[0, 999999999\]"):
            read_flag(xml)
    named = tmp_path / "l1.json"
    named.write_text(json.dumps({"flag": "L1:DMT-ANALYSIS_READY:1", "segments": [[1126259446, 1126259450]]}))
    assert read_flag(named)[0] == "L1"
    with pytest.raises(DataError, match="is for L1, but ifo: H1"):
        read_flag(named, ifo="H1")


def test_bad_sources_refused(tmp_path):
    xml = write_segment_xml(tmp_path / "s.xml", {"H1:A:1": [(10, 20)], "H1:A:2": [(10, 21)], "L1:B:1": []})
    with pytest.raises(DataError, match="holds 3 flags; name one"):
        read_flag(xml)
    with pytest.raises(DataError, match="several versions of flag H1:A; name the version"):
        read_flag(xml, flag="H1:A")
    with pytest.raises(DataError, match="no flag H1:C:1 \\(it holds: H1:A:1, H1:A:2, L1:B:1\\)"):
        read_flag(xml, flag="H1:C:1")
    with pytest.raises(DataError, match="is for L1, but ifo: H1"):
        read_flag(xml, flag="L1:B:1", ifo="H1")
    text = tmp_path / "t.txt"
    text.write_text("10 20\n")
    with pytest.raises(DataError, match="does not name its detector: give ifo:"):
        read_flag(text)
    broken = tmp_path / "b.xml"
    broken.write_bytes(xml.read_bytes()[:300])
    with pytest.raises(DataError, match="not a readable LIGO_LW document"):
        read_flag(broken)
    with pytest.raises(DataError, match="cannot be read"):
        read_flag(tmp_path / "missing.xml")
    (tmp_path / "j.json").write_text('{"segments": [[1, 2, 3]]}')
    with pytest.raises(DataError, match=r"segments\[0\] is \[1, 2, 3\], not \[start, stop\]"):
        read_flag(tmp_path / "j.json", ifo="H1")


# --- campaigns -----------------------------------------------------------------------------------


def _in(t: np.ndarray, a: float, b: float) -> np.ndarray:
    return (t >= a) & (t < b)


def _mask(n: int, t0: float, fs: float, drop: list[tuple[float, float]], dilate: int = 0) -> np.ndarray:
    """Independent truth: samples [HALF, n - HALF) minus each ``[a, b)`` (GPS) widened by ``dilate``."""
    keep = np.zeros(n, dtype=bool)
    keep[HALF:n - HALF] = True
    k = np.arange(n)
    times = t0 + k / fs
    for a, b in drop:
        inside = np.flatnonzero(_in(times, a, b))
        if inside.size:
            keep[max(0, inside[0] - dilate):inside[-1] + 1 + dilate] = False
    return keep


@pytest.fixture(scope="module")
def vetoed_run(small_store, tmp_path_factory):
    """CAT1 on L1 (whole seconds, padded) and sub-second CAT2 on H1 around a loud injection and on L1."""
    tmp = tmp_path_factory.mktemp("vetoes")
    meta = read_meta(small_store)
    t0 = float(meta.t0)
    inj = read_injections(small_store).sort_values("gps_time").reset_index(drop=True)
    th = float(inj["time_H1"].iloc[3])
    cat2_h1 = (f"{th - 0.30007:.5f}", f"{th + 0.25013:.5f}")
    cat1_l1 = (t0 + 100, t0 + 108)  # padded by <-1:+2> in the definer: [t0 + 99, t0 + 110)
    cat2_l1 = (f"{t0 + 150.123456:.6f}", f"{t0 + 150.9:.6f}")
    segs = write_segment_xml(tmp / "flags.xml", {"H1:GLITCH:1": [cat2_h1], "L1:BAD:1": [cat1_l1],
                                                "L1:GLITCH:1": [cat2_l1], "H1:UNUSED:1": [(t0, t0 + 256)]})
    definer = write_veto_definer(tmp / "veto_definer.xml", [
        dict(ifo="H1", name="GLITCH", version=1, category=2),
        dict(ifo="L1", name="BAD", version=1, category=1, start_pad=-1, end_pad=2),
        dict(ifo="L1", name="GLITCH", version=1, category=2),
        dict(ifo="H1", name="UNUSED", version=1, category=4),  # category 4 not applied (categories: [1, 2])
        dict(ifo="V1", name="ELSEWHERE", version=1, category=2)])  # a detector not analysed: ignored
    vetoes = {"definer": str(definer), "files": [str(segs)], "categories": [1, 2]}
    vetoed = run_campaign(make_campaign(small_store, tmp / "vetoed", data__vetoes=vetoes), progress=False)
    plain = run_campaign(make_campaign(small_store, tmp / "plain"), progress=False)
    cfg = make_campaign(small_store, tmp / "plan", data__vetoes=vetoes)
    return dict(meta=meta, t0=t0, vetoed=vetoed, plain=plain, plan=make_plan(cfg, meta), cat2_h1=cat2_h1,
                cat1_l1=(cat1_l1[0] - 1, cat1_l1[1] + 2), cat2_l1=cat2_l1, th=th)


def test_category_2_removes_triggers_and_category_1_data(vetoed_run):
    r = vetoed_run
    a, b = map(float, r["cat2_h1"])
    trig = read_table(r["vetoed"].out / "triggers.parquet")
    plain = read_table(r["plain"].out / "triggers.parquet")
    h1, h1_plain = trig[trig["ifo"] == "H1"], plain[plain["ifo"] == "H1"]
    assert _in(h1_plain["gps_time"].to_numpy(), a, b).sum() > 0  # the loud injection made H1 triggers there
    assert _in(h1["gps_time"].to_numpy(), a, b).sum() == 0  # none survive the veto
    l1 = trig[trig["ifo"] == "L1"]["gps_time"].to_numpy()
    c, d = r["cat1_l1"]
    assert _in(l1, c - 1.0, d + 1.0).sum() == 0  # category 1 (and the whitening edge around it)
    # away from the vetoes the same triggers; their SNRs move by under 1%, since the chunks holding a veto
    # estimate their PSD and noise statistics without the removed samples
    far = lambda df: df[~_in(df["gps_time"].to_numpy(), a - 2, b + 2) & ~_in(df["gps_time"].to_numpy(), c - 2, d + 2)  # noqa: E731
                        & ~_in(df["gps_time"].to_numpy(), *(float(x) - 2 + 4 * i for i, x in enumerate(r["cat2_l1"])))]
    kept, before = far(trig).reset_index(drop=True), far(plain).reset_index(drop=True)
    pd.testing.assert_frame_equal(kept[["ifo", "gps_time"]], before[["ifo", "gps_time"]])
    np.testing.assert_allclose(kept["snr"], before["snr"], rtol=0.01)
    cands = read_table(r["vetoed"].out / "candidates.parquet")
    assert _in(cands["time_H1"].to_numpy(), a, b).sum() == 0


def test_livetime_per_slide_is_the_exact_sample_count(vetoed_run):
    r = vetoed_run
    meta, plan, t0 = r["meta"], r["plan"], r["t0"]
    fs, n = meta.sample_rate, meta.n_samples
    manifest = json.loads((r["vetoed"].out / "manifest.json").read_text())
    h1 = _mask(n, t0, fs, [tuple(map(float, r["cat2_h1"]))])
    l1 = _mask(n, t0, fs, [r["cat1_l1"]], dilate=HALF) & _mask(n, t0, fs, [tuple(map(float, r["cat2_l1"]))])
    live = manifest["livetime"]
    assert live["analysed_seconds"]["H1"] == h1.sum() / fs and live["analysed_seconds"]["L1"] == l1.sum() / fs
    ring = int(round(plan.ring * fs))
    H, L = np.zeros(ring, bool), np.zeros(ring, bool)
    H[:n], L[:n] = h1, l1
    step = int(round(plan.slide_step * fs))
    expect = [np.count_nonzero(H & np.roll(L, (k * step) % ring)) / fs for k in range(plan.n_slides + 1)]
    assert np.array_equal(np.array(live["per_slide_seconds"]), np.array(expect))  # exact, to the sample
    seconds = live["segments"]["seconds_in_span"]
    assert seconds["L1"]["category_1"] == 11.0 and seconds["H1"]["category_1"] == 0.0
    assert seconds["H1"]["vetoed_after_conditioning"] == np.count_nonzero(~h1[HALF:n - HALF]) / fs
    assert live["masked_seconds"]["H1"]["vetoed"] == seconds["H1"]["vetoed_after_conditioning"]


def test_science_segments_and_hardware_injections(small_store, tmp_path):
    meta = read_meta(small_store)
    t0 = float(meta.t0)
    inj = read_injections(small_store).sort_values("gps_time").reset_index(drop=True)
    th = float(inj["time_H1"].iloc[5])
    text = tmp_path / "H1-science.txt"
    text.write_text(f"0 {t0} {t0 + 60.5} 60.5\n1 {t0 + 70} {t0 + 256} 186\n")
    gwosc = tmp_path / "L1_DATA.json"
    gwosc.write_text(json.dumps({"id": "L1_DATA", "segments": [[t0, t0 + 256]]}))
    hw = write_segment_xml(tmp_path / "hw.xml", {"H1:INJ:1": [(th - 0.5, th + 0.5)]})
    definer = write_veto_definer(tmp_path / "vd.xml", [dict(ifo="H1", name="INJ", version=1, category=3)])
    science = [{"file": str(text), "ifo": "H1"}, {"file": str(gwosc)}]
    vetoes = {"definer": str(definer), "files": [str(hw)]}
    flagged = run_campaign(make_campaign(small_store, tmp_path / "flag", data__segments=science, data__vetoes=vetoes),
                           progress=False)
    manifest = json.loads((flagged.out / "manifest.json").read_text())
    gps = np.array(manifest["livetime"]["segments_gps"]["H1"])
    assert gps[0, 1] == pytest.approx(t0 + 60.5 - 1.0) and gps[1, 0] == pytest.approx(t0 + 70 + 1.0)
    cands = read_table(flagged.out / "candidates.parquet")
    hit = _in(cands["time_H1"].to_numpy(), th - 0.5, th + 0.5)
    assert hit.any() and cands["hw_injection"][hit].all() and not cands["hw_injection"][~hit].any()
    vetoed = run_campaign(make_campaign(small_store, tmp_path / "veto", data__segments=science, data__vetoes=vetoes,
                                        data__hardware_injections="veto"), progress=False)
    trig = read_table(vetoed.out / "triggers.parquet")
    assert not _in(trig[trig["ifo"] == "H1"]["gps_time"].to_numpy(), th - 0.5, th + 0.5).any()


def test_campaign_refusals(small_store, tmp_path):
    meta = read_meta(small_store)
    t0 = float(meta.t0)
    text = tmp_path / "H1.txt"
    text.write_text(f"{t0} {t0 + 256}\n")
    with pytest.raises(DataError, match="no science segments for L1"):
        make_plan(make_campaign(small_store, tmp_path, data__segments=[{"file": str(text), "ifo": "H1"}]), meta)
    segs = write_segment_xml(tmp_path / "f.xml", {"H1:A:1": []})
    definer = write_veto_definer(tmp_path / "vd.xml", [dict(ifo="L1", name="B", version=3, category=2)])
    with pytest.raises(DataError, match="flag L1:B:3 \\(category 2\\) is in none of data.vetoes.files"):
        make_plan(make_campaign(small_store, tmp_path, data__vetoes={"definer": str(definer), "files": [str(segs)]}), meta)
    with pytest.raises(DataError, match="store_dq 'NOPE' is not a DQ bit of the store \\(its bits: DATA, CBC_CAT1"):
        make_plan(make_campaign(small_store, tmp_path, data__vetoes={
            "extra": [{"category": 2, "store_dq": "NOPE", "ifo": "H1"}]}), meta)


def test_sources_for_detectors_not_analysed_are_said(small_store, tmp_path, caplog):
    """A science or veto source for a detector the campaign does not analyse (V1 on an H1-L1
    store) is not used, and the plan says so instead of dropping it silently."""
    meta = read_meta(small_store)
    t0 = float(meta.t0)
    text = tmp_path / "V1.txt"
    text.write_text(f"{t0 + 10} {t0 + 20}\n")
    with caplog.at_level("WARNING", logger="gwbatch"):
        plan = make_plan(make_campaign(small_store, tmp_path, data__vetoes={
            "extra": [{"category": 2, "file": str(text), "ifo": "V1"}]}), meta)
    assert "data.vetoes.extra:" in caplog.text and "is for V1, which this campaign does not analyse (H1, L1)" in caplog.text
    assert not any(s["ifo"] == "V1" for s in plan.segments.summary["sources"])


def test_store_dq_bits_as_vetoes():
    """GWOSC's 'passes' bits: a store DQ bit unset in a second vetoes that second's samples."""
    from gwbatch.config.schema import DataConfig
    from gwbatch.io.segments import resolve_segments

    cfg = DataConfig.model_validate({"store": "x", "vetoes": {"extra": [
        {"category": 2, "store_dq": "CBC_CAT2", "ifo": "H1"}, {"category": 1, "store_dq": "CBC_CAT1", "ifo": "L1"}]}})
    dq = {"H1": np.array([3, 3, 1, 1, 3, 3], np.uint8), "L1": np.array([3, 2, 3, 3, 3, 3], np.uint8)}
    seg = resolve_segments(cfg, ("H1", "L1"), GPSTime.parse(1000), 2.5, (0, 15), (dq, ("CBC_CAT1", "CBC_CAT2")))
    # second k holds samples [ceil(2.5 k), ceil(2.5 (k + 1))): seconds 2-3 are samples 5..9, second 1 is 3..4
    assert seg.vetoed["H1"].tolist() == [[5, 10]] and seg.excluded["L1"].tolist() == [[3, 5]]
    assert seg.excluded["H1"].tolist() == [] and seg.vetoed["L1"].tolist() == []
