"""Sub-band SPIIR (gwbatch.spiir.subbands): the numba twin against the float64 direct
forms, the DFT synthesis against its definition, the decomposition's overlap, and the CUDA kernels
against the twin on a GPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gwbatch.conditioning.psd import design
from gwbatch.config import load_bank_config
from gwbatch.spiir import subbands as S
from gwbatch.spiir.bank import build_template, frequency_grid, taper_end
from gwbatch.spiir.construct import Target, whitened_template
from gwbatch.waveforms import Template, frequency_domain

ROOT = Path(__file__).resolve().parents[1]

FS = 4096.0


def _bns(m1: float, m2: float):
    """Single-rate filters of a bns.yaml template and its whitened template."""
    cfg = load_bank_config(ROOT / "configs/banks/bns.yaml")
    cfg = cfg.model_copy(update={"spiir": cfg.spiir.model_copy(update={"multirate": False})})
    psd = design("aLIGO", FS)
    t = Template(m1, m2)
    built = build_template(t, cfg, psd)
    n, df = frequency_grid(t, cfg)
    f = np.arange(n // 2 + 1) * df
    h = whitened_template(frequency_domain("TaylorF2", t, f.size, df, cfg.f_low - 3.0), psd(np.maximum(f, 1.0)), df,
                          FS, cfg.f_low, taper_end(t, cfg)).h
    return built, h


@pytest.fixture(scope="module")
def templates():
    return [_bns(1.9, 1.7), _bns(1.5, 1.3)]


def test_row_parts_fill_the_layouts():
    assert S.row_parts(29) == [29] and S.row_parts(128) == [128] and S.row_parts(184) == [128, 56]
    assert S.row_parts(600) == [256, 256, 64, 24] and sum(S.row_parts(1001)) == 1001


def test_channels_and_coefficients_follow_the_filters_frequency():
    """A filter of 700 Hz goes to channel round(700 / 128) = 5; moved there, its response sampled
    every D samples is the top-rate response heterodyned by the channel centre (times D)."""
    a = np.array([0.999 * np.exp(2j * np.pi * 700.0 / FS)])
    b, d = np.array([0.3 - 0.1j]), np.array([37])
    c = S.filter_channels(a, FS)
    assert c.tolist() == [5]
    la, lb, ld = S.to_channels(a, b, d, c)
    w = np.pi * 5 / S.DECIMATION
    for j in range(int(ld[0]), int(ld[0]) + 6):
        top = b[0] * a[0] ** (j * S.DECIMATION - d[0]) * np.exp(-1j * w * j * S.DECIMATION)
        assert lb[0] * la[0] ** (j - ld[0]) == pytest.approx(S.DECIMATION * top, rel=1e-12)


def test_the_dft_synthesis_is_the_direct_form():
    """The float32 DFT-and-polyphase synthesis the kernels run equals z[t] = sum_c e^{i w_c t}
    sum_j W_c[j] D p[t - j D + H] in float64 within 1e-5 of the peak, channels of both signs and
    parities, a channel of two rows included."""
    rng = np.random.default_rng(4)
    n_low = 300
    channels = [0, 1, 2, 5, -3, 2]
    rows = (rng.standard_normal((len(channels), n_low)) + 1j * rng.standard_normal((len(channels), n_low)))
    plan = S.ChannelPlan(tuple(S.ChannelRow(0, c, np.zeros(1), np.zeros(1), np.zeros(1, np.int64)) for c in channels),
                         tuple(sorted(set(channels))),
                         np.array([[[0, 2, 5, -1], [1, 3, 4, -1]]], np.int32))
    z = S.synthesize(rows.astype(np.complex64), plan, n_low * S.DECIMATION)[0]
    ref = S.synthesis_reference(rows, channels, n_low * S.DECIMATION)
    assert np.abs(z - ref).max() <= 1e-5 * np.abs(ref).max()


def test_twin_equals_the_float64_direct_forms(templates):
    """Two BNS templates over 96 s of white noise (their filters reach 40-60 s back): channels, rows
    and synthesis of the twin (float32) within 1e-5 of the peak of the float64 references (measured
    1.6e-6), and the decomposition itself close to the single-rate filters (correlation over 0.99 in
    noise)."""
    from gwbatch.spiir.filtering import filter_bank_numba

    x = np.random.default_rng(3).standard_normal(int(96 * FS)).astype(np.float32)
    filters = [(bt.a, bt.b, bt.d) for bt, _ in templates]
    plan = S.channel_plan(filters, FS)
    z = S.filter_subbands(x, plan)
    assert plan.nested is not None and plan.virtual  # the slowly decaying filters in nested channels
    for t, (a, b, d) in enumerate(filters):
        ref = S.template_reference(x, plan, t)
        inner = slice(int(d.max()) + 4096, x.size - 4096)
        assert np.abs(z[t, inner] - ref[inner]).max() <= 1e-5 * np.abs(ref[inner]).max()
        single = filter_bank_numba(x, a[None, :], b[None, :], d[None, :])[0][inner]
        assert abs(np.vdot(single, ref[inner])) / np.linalg.norm(single) / np.linalg.norm(ref[inner]) > 0.99


def test_the_decomposition_keeps_the_overlap(templates):
    """benchmarks/spiir_subbands.py's finding on two templates: the response run in channels of D = 16
    (the slowly decaying filters nested at 64) loses at most 0.002 of the single-rate overlap, at any
    phase of the impulse, with 16x fewer updates than the single-rate filters without nesting and
    about 2x fewer again with it."""
    for built, h in templates:
        start = 4 * (S.TAPS_PER_PHASE * S.DECIMATION + 1)
        target = Target(h, headroom=start)
        for phase in (0, 5, 11):
            r, first = S.impulse_response(built.a, built.b, built.d, FS, start + phase)
            ov = target.overlap(r, lead=start + phase - first)[0]
            assert built.overlap_single - 0.002 <= ov <= built.overlap_single + 0.002, (phase, ov)
    filters = [(bt.a, bt.b, bt.d) for bt, _ in templates]
    single = np.mean([bt.a.size for bt, _ in templates])
    assert S.channel_plan(filters, FS, nest=False).updates_per_sample() == pytest.approx(single / 16)
    plan = S.channel_plan(filters, FS)
    slow = np.mean([S.nested_filters(a).mean() for a, _, _ in filters])
    assert 0.6 < slow < 0.9  # BNS filters decaying over 256 samples (benchmark region: 0.76-0.80)
    assert plan.updates_per_sample() == pytest.approx(single * (1 - slow + slow / S.NEST) / 16, rel=0.02)


def test_nested_channels_hold_the_slow_filters_and_the_response_is_the_twins(templates):
    """The slowly decaying filters run in sub-channels of their channel (``k = -2 ... 1``, at 1/64 of
    the rate, the others at 1/16); the float64 response the bank measures (with the nested channels'
    direct forms) equals the twin's output for the impulse within 1e-6 of its peak (measured 1.6e-7),
    and the nested rows are added to the template's rows of their channel, so the synthesis sums no
    more rows than without them."""
    built, _ = templates[0]
    a, b, d, channel, level = S.move_template(built.a, built.b, built.d, FS)
    slow = S.nested_filters(built.a)
    assert np.array_equal(level != 0, slow) and set(level[slow].tolist()) == {S.NEST_LEVEL}
    sub = channel[slow] - S.NEST * S.parent_of(channel[slow])
    assert sub.min() >= -S.NEST // 2 and sub.max() < S.NEST // 2
    freq = np.angle(built.a[slow]) / (2 * np.pi) * FS
    assert np.abs(freq - channel[slow] * FS / (2 * S.DECIMATION * S.NEST)).max() <= FS / (4 * S.DECIMATION * S.NEST)
    start = 8 * S.PERIOD  # on the period, late enough that the response starts in the series
    r, first = S.impulse_response(built.a, built.b, built.d, FS, start)
    assert 0 < start - first <= S.LEAD
    n = first + r.size + 4096
    n += -n % S.PERIOD
    x = np.zeros(n, np.float32)
    x[start] = 1.0
    plan = S.plan_of([(a, b, d, channel, level)])
    z = S.filter_subbands(x, plan)[0]
    assert np.abs(z[first: first + r.size] - r).max() <= 1e-6 * np.abs(r).max()
    flat = S.channel_plan([(built.a, built.b, built.d)], FS, nest=False)
    assert plan.most_rows_per_parity() <= flat.most_rows_per_parity()
    assert len(plan.virtual) == np.unique(S.parent_of(channel[slow])).size


@pytest.mark.gpu
def test_kernels_equal_the_twin(templates):
    """The CUDA channels, rows (every layout, each on its stream) and synthesis (every row-count
    launch) equal the twin within 1e-4 of each template's peak (float32 both)."""
    cupy = pytest.importorskip("cupy")
    x = np.random.default_rng(5).standard_normal(int(40 * FS)).astype(np.float32)
    plan = S.channel_plan([(bt.a, bt.b, bt.d) for bt, _ in templates] * 3, FS)
    z = cupy.asnumpy(S.filter_subbands(cupy.asarray(x), plan))
    twin = S.filter_subbands(x, plan)
    peak = np.abs(twin).max(axis=1, keepdims=True)
    assert (np.abs(z - twin) <= 1e-4 * peak).all()


@pytest.mark.gpu
def test_wide_rows_through_the_ring_equal_the_direct_loads(templates):
    """``chan_ring`` (wide rows, input from a shared-memory ring, filters reordered) equals
    ``chan_iir`` on the same rows within 1e-5 of the peak, with and without time segments."""
    cupy = pytest.importorskip("cupy")
    from gwbatch.spiir import _cuda_subbands as K

    x = np.random.default_rng(9).standard_normal(int(40 * FS)).astype(np.float32)
    plan = S.channel_plan([(bt.a, bt.b, bt.d) for bt, _ in templates] * 3, FS)
    xc = S.channelize(cupy.asarray(x), plan.channels)
    assert any(launch.ring is not None for launch in K.device_plan(plan, True).launches)
    direct = K.channel_rows_cuda(xc, plan, ring=False)
    peak = float(cupy.abs(direct).max())
    for target in (K.ROW_WARPS, 1 << 20):  # the second cuts every launch into segments
        ring = K.channel_rows_cuda(xc, plan, target=target, ring=True)
        assert float(cupy.abs(ring - direct).max()) <= 1e-5 * peak


@pytest.mark.gpu
def test_warmed_up_segments_equal_the_scanned_and_the_whole(templates):
    """Time segments started from a warm-up (18 e-foldings of the warp's slowest filter from zero)
    equal the scanned segments and one segment over the whole series within 1e-6 of the peak, for
    the top rows and the nested ones; the synthesis is the same on rows with or without margins."""
    cupy = pytest.importorskip("cupy")
    from gwbatch.spiir import _cuda_subbands as K

    x = np.random.default_rng(11).standard_normal(int(40 * FS)).astype(np.float32)
    plan = S.channel_plan([(bt.a, bt.b, bt.d) for bt, _ in templates] * 3, FS)
    xc = S.channelize(cupy.asarray(x), plan.channels)
    whole = K.channel_rows_cuda(xc, plan, target=1)  # one segment every launch
    peak = float(cupy.abs(whole).max())
    cut = 1 << 20  # every launch cut into segments
    n_pad = whole.shape[1]
    assert any(not K.segments_for(L.a.shape[0], L.f, n_pad, cut, L.warm_max)[2]
               for L in K.device_plan(plan).launches)  # some launch warms up
    for warmup in (True, False):
        rows = K.channel_rows_cuda(xc, plan, target=cut, warmup=warmup)
        assert float(cupy.abs(rows - whole).max()) <= 1e-6 * peak
    z = K.synthesize_cuda(whole, plan, xc.shape[1], x.size)
    z_copy = K.synthesize_cuda(cupy.ascontiguousarray(whole), plan, xc.shape[1], x.size)  # copied into margins
    assert bool((z == z_copy).all())


@pytest.mark.gpu
def test_graphs_replay_the_launches_bit_for_bit(templates):
    """From a plan's second call at a length on, its channels and rows are replayed from a CUDA graph:
    the output equals the launches one by one bit for bit, for two plans (one with nested channels)
    and two lengths alternating on one stream (their graphs share one working memory), a new series
    of a length already captured, on the legacy stream and on a task's own."""
    cupy = pytest.importorskip("cupy")
    from gwbatch.spiir import _cuda_subbands as K

    rng = np.random.default_rng(13)
    plans = [S.channel_plan([(bt.a, bt.b, bt.d) for bt, _ in templates] * 3, FS),
             S.channel_plan([(bt.a, bt.b, bt.d) for bt, _ in templates[1:]], FS, nest=False)]
    assert plans[0].nested is not None and plans[1].nested is None
    series = [cupy.asarray(rng.standard_normal(n).astype(np.float32)) for n in (int(40 * FS), int(33 * FS) + 5)]
    for stream in (cupy.cuda.Stream.null, cupy.cuda.Stream(non_blocking=True)):
        with stream:
            cases = [(plan, x) for plan in plans for x in series]
            eager = [K.filter_subbands_cuda(x, plan, graph=False) for plan, x in cases]
            for _ in range(3):  # the first call of each launches, the second captures, the third replays
                for (plan, x), want in zip(cases, eager):
                    assert bool((K.filter_subbands_cuda(x, plan, graph=True) == want).all())
            space = K.graph_space(cupy.cuda.Device().id, stream.ptr)
            assert {(id(plan), x.size) for plan, x in cases} <= set(space.graphs)
            fresh = cupy.asarray(rng.standard_normal(series[0].size).astype(np.float32))
            assert bool((K.filter_subbands_cuda(fresh, plans[0]) == K.filter_subbands_cuda(fresh, plans[0], False)).all())
            stream.synchronize()


def test_ring_blocks_of_narrow_rows_hold_every_filter_once_and_broadcast_their_empty_slots():
    """``_ring_slots`` for narrow rows (``32 / W`` a warp): every filter of the block's rows in one slot
    with its delay, each in its row's lanes; an empty slot reads the address of a filter of its half-warp."""
    from gwbatch.spiir import _cuda_subbands as K

    rng = np.random.default_rng(6)
    for f, w in ((1, 4), (2, 4), (1, 8), (2, 8), (4, 8)):
        per_warp = 32 // w
        n_rows = K.RING_WARPS * per_warp - 3  # the block's last slots empty
        counts = rng.integers(1, f * w + 1, n_rows)
        d = np.zeros((n_rows, f * w), np.int64)
        for m, c in enumerate(counts):
            d[m, :c] = np.sort(rng.integers(100, 900, c))
        filt, delay = K._ring_slots(f, w, list(range(n_rows)), d, counts, {})
        assert filt.shape == (K.RING_WARPS, 32 * f)
        used = filt >= 0
        assert sorted(filt[used].tolist()) == sorted(m * d.shape[1] + j for m in range(n_rows) for j in range(counts[m]))
        assert np.array_equal(delay[used], d.ravel()[filt[used]])
        warp, slot = np.nonzero(used)
        lane = slot % 32
        assert np.array_equal(warp * per_warp + lane // w, filt[used] // d.shape[1])  # each row in its lanes
        for h_delay, h_used in zip(delay.reshape(-1, 16), used.reshape(-1, 16)):
            if h_used.any():
                assert set(h_delay[~h_used]) <= set(h_delay[h_used])


def test_segments_warm_up_where_it_is_short_and_scan_where_it_is_long():
    """``segments_for``: a launch short of warps warms up when segments of four warm-ups still cut
    it, else it scans (and only when cutting gains ``MIN_GAIN``); ``warm_samples`` is 18 e-foldings
    rounded up to a block."""
    from gwbatch.spiir import _cuda_subbands as K

    assert K.warm_samples(np.array([np.exp(-1 / 15.9), np.exp(-1 / 16.1), 0.0])).tolist() == [288, 304, 0]
    assert K.warm_samples(np.array([1.0]))[0] >= 1 << 29  # an undamped pole never warms up
    n_pad = 16384
    segments, seg_len, scan = K.segments_for(608, 1, n_pad, warm=288)  # gain 14, segments >= 1152
    assert not scan and segments == 14 and segments * seg_len >= n_pad and seg_len >= 4 * 288
    segments, seg_len, scan = K.segments_for(608, 1, n_pad, warm=4096)  # warm-ups too long: scanned
    assert scan and segments == 14
    assert K.segments_for(608, 1, n_pad, warm=None)[2]
    assert K.segments_for(4096, 1, n_pad, warm=288) == (2, n_pad // 2, False)  # gain 2: worth a warm-up
    assert K.segments_for(4096, 1, n_pad, warm=None) == (1, n_pad, False)  # but not a scan
    assert K.segments_for(8192, 1, n_pad, warm=288) == (1, n_pad, False)  # full: not cut


def test_ring_order_puts_distinct_residues_in_each_half_warp():
    """``ring_order``: every filter in one slot with its delay; each half-warp group of 16 slots has
    at most ``ceil(c / groups)`` delays of one residue modulo 16 (``c`` the filters of that residue:
    the least possible), and empty slots lie within 15 of the least delay."""
    from gwbatch.spiir import _cuda_subbands as K

    rng = np.random.default_rng(4)
    for f, n in ((1, 32), (1, 17), (2, 60), (4, 128), (4, 70), (8, 256)):
        d = np.sort(rng.integers(3, 5000, n))
        order, delay = K.ring_order(d, f)
        used = order >= 0
        assert sorted(order[used].tolist()) == list(range(n))
        assert np.array_equal(delay[used], d[order[used]])
        assert np.all((delay[~used] >= d.min()) & (delay[~used] <= d.min() + 15))
        bound = max(-(-c // (2 * f)) for c in np.bincount(d % 16, minlength=16))
        for g in range(2 * f):
            base = (g // 2) * 32 + (g % 2) * 16
            assert np.bincount(delay[base: base + 16] % 16, minlength=16).max() <= max(bound, 1)


# ------------------------------------------------------------------------------------------------
# Sub-band templates in a bank (spiir.subbands)


@pytest.fixture(scope="module")
def subband_bank():
    from gwbatch.spiir.bank import pack

    cfg = load_bank_config(ROOT / "configs/banks/bns.yaml")
    cfg = cfg.model_copy(update={"spiir": cfg.spiir.model_copy(update={"subbands": True})})
    psd = design("aLIGO", FS)
    points = [Template(1.9, 1.7), Template(1.5, 1.3), Template(1.3, 1.2), Template(2.0, 1.9)]
    built = [build_template(t, cfg, psd) for t in points]
    # a mixed bank: the first template as a bank without sub-bands builds it (the ladder)
    ladder = cfg.model_copy(update={"spiir": cfg.spiir.model_copy(update={"subbands": False})})
    mixed = [build_template(points[0], ladder, psd), *built[1:]]
    return pack(mixed, cfg, psd, points), built


def test_a_bank_runs_in_sub_bands_the_templates_they_keep(subband_bank):
    """spiir.subbands: a template whose sub-band response keeps its single-rate overlap within
    multirate_tolerance (0.001) runs in channels, at 1/16 of the rate (its slowly decaying filters at
    1/64, nested), the others on the ladder.  With
    the short-lived filters refitted every one of these four keeps it (and gains); the bank packs the
    first as built without sub-bands, so it is mixed.  The summary says how many are in sub-bands."""
    bank, built = subband_bank
    assert all(bt.subband for bt in built)
    assert bank.subband.tolist() == [False, True, True, True]
    for bt in built:
        assert bt.overlap >= bt.overlap_single - 0.001
    sub = bank.subband
    used = bank.b[sub] != 0
    nested = (bank.level[sub] == S.NEST_LEVEL) & used
    assert set(np.unique(bank.level[sub][used]).tolist()) == {0, S.NEST_LEVEL}
    assert np.allclose(bank.updates_per_sample()[sub], (used.sum(axis=1) - nested.sum(axis=1) * (1 - 1 / S.NEST)) / 16)
    assert (bank.n_filters[sub] / 16 / bank.updates_per_sample()[sub] > 1.5).all()  # nesting: 1.9-2.2x fewer
    assert (bank.channel[~sub] == 0).all()
    assert "6 rates, 128-4096 Hz; 3 of 4 templates in 32 sub-band channels at 256 Hz" in bank.summary()
    assert "of their filters in nested channels at 64 Hz" in bank.summary()


def test_sub_band_banks_are_saved_and_read_and_older_banks_still_read(subband_bank, tmp_path):
    """The bank file (format 3) keeps each template's decomposition and each filter's channel; a format-2
    file (made before sub-bands) is read as a bank of the ladder alone."""
    import h5py

    from gwbatch.errors import DataError
    from gwbatch.io.banks import load_bank, save_bank

    bank, _ = subband_bank
    back = load_bank(save_bank(bank, tmp_path / "b.h5"))
    assert np.array_equal(back.subband, bank.subband) and np.array_equal(back.channel, bank.channel)
    assert back.filters_digest == bank.filters_digest
    ladder = bank.subset(np.array([0]))
    path = save_bank(ladder, tmp_path / "old.h5")
    with h5py.File(path, "r+") as fh:
        del fh["subband"], fh["channel"]
        fh.attrs["format"] = "gwbatch-spiir-bank/2"
    old = load_bank(path)
    assert not old.subband.any() and not old.channel.any() and old.filters_digest == ladder.filters_digest
    # a format-3 file without them is damaged, not a ladder bank
    with h5py.File(path, "r+") as fh:
        fh.attrs["format"] = "gwbatch-spiir-bank/3"
    with pytest.raises(DataError, match="cannot read bank .*KeyError"):
        load_bank(path)


def test_chunks_of_one_stream_agree_where_both_are_warm(subband_bank):
    """filter_templates puts the channels on absolute multiples of their period (32 samples) whatever
    a chunk's first sample, so two overlapping chunks of one stream (starting 1000 and 3333 samples
    in) give the same output where both are warm, for the ladder's templates and the sub-band ones;
    a mixed bank's rows are its parts' rows.  Warm is 16 s past the longest template: the 30 Hz
    filters' memory outlasts the template (the zero start still shows at 1e-3 of the peak 1 s past it,
    on the ladder as in sub-bands, and falls by e every ~3.5 s)."""
    from gwbatch.spiir.filtering import filter_templates

    bank, _ = subband_bank
    x = np.random.default_rng(8).standard_normal(int(140 * FS)).astype(np.float32)
    a0, b0 = 1000, 3333
    za = filter_templates(x[a0:], bank, origin=a0)
    zb = filter_templates(x[b0:], bank, origin=b0)
    warm = int(bank.length.max()) + int(16 * FS)
    common = slice(b0 + warm, x.size - 4096)
    for t in range(bank.size):
        ya, yb = za[t, common.start - a0: common.stop - a0], zb[t, common.start - b0: common.stop - b0]
        assert np.abs(ya - yb).max() <= 1e-4 * np.abs(ya).max(), t
    for rows, part in bank.parts:
        assert np.array_equal(filter_templates(x[a0:], part, origin=a0), za[rows])


def test_refitting_the_short_lived_filters_recovers_the_overlap(monkeypatch):
    """1.9 + 1.7 Msun (bns.yaml): moved to the channels as they are, its filters lose more than the
    bank's tolerance (0.001) of the single-rate overlap and the template stays on the ladder; with the
    amplitudes of the filters decaying within REFIT_DECAY samples fitted again through the channels it
    runs in sub-bands at an overlap above the single-rate one.  Only those filters' b change, within a
    few times the largest amplitude (the ridge), and the
    refit's response (by linearity) is the channels' response of the new filters (within 2e-6 of
    the peak)."""
    from gwbatch.spiir import bank as B

    cfg = load_bank_config(ROOT / "configs/banks/bns.yaml")
    psd = design("aLIGO", FS)
    t = Template(1.9, 1.7)
    refitted = build_template(t, cfg, psd)
    assert refitted.subband and refitted.overlap > refitted.overlap_single
    monkeypatch.setattr(S, "refit_short_filters", lambda *args: None)
    as_they_are = build_template(t, cfg, psd)
    assert not as_they_are.subband  # on the ladder: the channels lost more than 0.001
    monkeypatch.undo()

    seen = {}
    original = S.refit_short_filters

    def spy(a, b, d, fs, start, response, first, lag, target):
        out = original(a, b, d, fs, start, response, first, lag, target)
        seen.update(a=np.asarray(a), b=np.asarray(b), d=np.asarray(d), start=start, first=first, out=out)
        return out

    monkeypatch.setattr(S, "refit_short_filters", spy)
    B.build_template(t, cfg, psd)
    b_new, response = seen["out"]
    short = -1.0 / np.log(np.abs(seen["a"])) < S.REFIT_DECAY
    assert 0 < short.sum() < short.size / 4
    assert np.array_equal(b_new[~short], seen["b"][~short]) and not np.allclose(b_new[short], seen["b"][short])
    assert np.abs(b_new).max() <= 8 * np.abs(seen["b"]).max()  # the ridge keeps amplitudes float32 can hold
    direct, first = S.impulse_response(seen["a"], b_new, seen["d"], FS, seen["start"])
    assert first == seen["first"] and direct.size == response.size
    # 5e-7 of the peak: the responses' rounding, summed in another order
    assert np.abs(direct - response).max() <= 2e-6 * np.abs(direct).max()


def test_channel_columns_equal_each_filters_response_alone():
    """The refit's least squares at the channel rate (the Gram matrix in closed form, a series taken
    into the channels, amplitudes' changes synthesized) equals it on each filter's top-rate response
    from :func:`impulse_response` of the filter alone, within 1e-12: channels of both signs and
    parities, decays from half a sample to REFIT_DECAY, the impulse on and off the channels' period."""
    rng = np.random.default_rng(3)
    n = 14
    freq = rng.uniform(-1500.0, 1500.0, n)
    decay = rng.uniform(0.5, S.REFIT_DECAY, n)
    a = np.exp(-1.0 / decay + 2j * np.pi * freq / FS)
    d = rng.integers(0, 400, n)
    for start in (S.IMPULSE_AT, S.IMPULSE_AT + 5):
        columns = S.channel_columns(a, d, FS, start)
        lo, hi = int(columns.lo.min()), int(columns.hi.max())
        dense = np.zeros((n, hi - lo), np.complex128)
        for i in range(n):
            r, first = S.impulse_response(a[i: i + 1], np.ones(1), d[i: i + 1], FS, start)
            nonzero = np.flatnonzero(r)
            assert (first + nonzero[0], first + nonzero[-1] + 1) == (columns.lo[i], columns.hi[i])
            dense[i, first + nonzero[0] - lo: first + nonzero[-1] + 1 - lo] = r[nonzero[0]: nonzero[-1] + 1]
        gram = dense.conj() @ dense.T
        assert np.abs(columns.gram() - gram).max() <= 1e-12 * np.abs(gram).max()
        y = rng.standard_normal(hi - lo) + 1j * rng.standard_normal(hi - lo)
        assert np.abs(columns.project(y) - dense.conj() @ y).max() <= 1e-12 * np.abs(dense.conj() @ y).max()
        w = rng.standard_normal(n) + 1j * rng.standard_normal(n)
        assert np.abs(columns.combine(w) - w @ dense).max() <= 1e-12 * np.abs(w @ dense).max()


def test_sub_bands_need_the_multirate_setting():
    from gwbatch.config import BankConfig

    with pytest.raises(ValueError, match="subbands is a multi-rate method: it needs multirate: true"):
        BankConfig(name="x", approximant="TaylorF2", mass1=[1.2, 2.0], mass2=[1.2, 2.0], f_low=30.0,
                   spiir={"multirate": False, "subbands": True})


@pytest.mark.gpu
def test_a_sub_band_bank_on_the_gpu_equals_the_cpu(subband_bank):
    """filter_templates of the mixed bank (the ladder's template and three sub-band ones) on CuPy and
    NumPy, within 1e-4 of each template's peak."""
    cupy = pytest.importorskip("cupy")
    from gwbatch.spiir.filtering import filter_templates

    bank, _ = subband_bank
    x = np.random.default_rng(9).standard_normal(int(100 * FS)).astype(np.float32)
    z = cupy.asnumpy(filter_templates(cupy.asarray(x), bank, origin=77))
    twin = filter_templates(x, bank, origin=77)
    assert (np.abs(z - twin) <= 1e-4 * np.abs(twin).max(axis=1, keepdims=True)).all()


@pytest.mark.gpu
def test_graphs_on_the_task_streams_of_threads_equal_the_launches(subband_bank, monkeypatch):
    """Four threads, each on its task stream (as a GPU worker's), filter their own series with the
    same bank three times (launched, captured, replayed): every output equals the launches one by
    one bit for bit."""
    cupy = pytest.importorskip("cupy")
    from concurrent.futures import ThreadPoolExecutor

    from gwbatch._xp import task_stream
    from gwbatch.spiir import _cuda_subbands as K
    from gwbatch.spiir.filtering import filter_templates

    bank, _ = subband_bank
    rng = np.random.default_rng(21)
    xs = [cupy.asarray(rng.standard_normal(int(60 * FS)).astype(np.float32)) for _ in range(4)]
    monkeypatch.setattr(K, "GRAPHS", False)
    want = [cupy.asnumpy(filter_templates(x, bank, origin=5)) for x in xs]
    monkeypatch.setattr(K, "GRAPHS", True)

    def run(i):
        with task_stream("cupy"):
            return [cupy.asnumpy(filter_templates(xs[i], bank, origin=5)) for _ in range(3)]

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(run, range(4)))
    for outs, w in zip(got, want):
        for z in outs:
            assert (z == w).all()


@pytest.mark.slow
def test_a_campaign_with_a_sub_band_bank_finds_its_injections(tmp_path):
    """The whole SPIIR search (triggers, chi-squared, coherent stage, background, report) with a bank
    whose every template runs in sub-bands: 512 s of H1-L1 at 4096 Hz with three 1.4 + 1.4 Msun
    injections at network SNR 20-25.  Each is found within 1 ms in both detectors at 85% of its
    injected SNR or more (the 65-template bank is placed to a minimal match of 0.9; measured 0.89-0.97,
    and on the ladder the same bank gives the same candidates within 0.5% of their SNR)."""
    import json

    import pandas as pd
    import yaml

    from gwbatch.io.banks import load_bank
    from workflow.cli import main

    store = tmp_path / "s.zarr"
    assert main(["simulate", "--ifos", "H1,L1", "--duration", "512", "--sample-rate", "4096", "--seed", "3",
                 "--cbc-injections", "3", "--cbc-mass1", "1.39,1.41", "--cbc-mass2", "1.39,1.41", "--cbc-snr", "20,25",
                 "--out", str(store)]) == 0
    bank = tmp_path / "bank.yaml"
    bank.write_text(yaml.safe_dump({"name": "bns-sub", "approximant": "TaylorF2", "mass1": [1.38, 1.42],
                                    "mass2": [1.38, 1.42], "f_low": 40.0, "sample_rate": 4096,
                                    "placement": {"method": "stochastic", "minimal_match": 0.9, "seed": 1},
                                    "spiir": {"subbands": True, "multirate_tolerance": 0.002}}))
    campaign = tmp_path / "c.yaml"
    campaign.write_text(yaml.safe_dump({
        "name": "sub", "data": {"store": str(store)},
        "search": {"kind": "spiir", "bank": str(bank), "threshold": 5.5, "psd": "aLIGO"},
        "background": {"slides": 10, "deep_slides": 0}, "plan": {"chunk": 256.0},
        "cluster": {"kind": "in-process"}, "output": {"dir": str(tmp_path / "run")}}))
    assert main(["run", str(campaign), "--no-progress"]) == 0
    built = load_bank(next((tmp_path / "run" / "banks").glob("bns-sub-*.h5")))
    assert built.subband.all() and built.size == 65
    inj = pd.read_parquet(tmp_path / "run" / "injections.parquet")
    assert inj["found"].all() and (inj["found_snr"] >= 0.85 * inj["snr"]).all(), inj
    assert (inj[["dt_H1", "dt_L1"]].abs() <= 1e-3).all().all(), inj
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["status"] == "complete"


def test_the_kernels_limit_on_rows_is_the_banks(monkeypatch):
    """The synthesis kernel holds MAX_ROWS_PER_PARITY rows of a channel parity per template; the bank
    keeps sub-band templates within it (and the kernel module states the same number)."""
    from gwbatch.spiir import _cuda_subbands as K

    assert K.MAX_PER_PARITY == S.MAX_ROWS_PER_PARITY
    cfg = load_bank_config(ROOT / "configs/banks/bns.yaml")
    cfg = cfg.model_copy(update={"spiir": cfg.spiir.model_copy(update={"subbands": True, "multirate_tolerance": 1.0})})
    psd = design("aLIGO", FS)
    assert build_template(Template(1.5, 1.3), cfg, psd).subband
    monkeypatch.setattr(S, "MAX_ROWS_PER_PARITY", 3)  # the template's 12 channels need 6-7 of each parity
    assert not build_template(Template(1.5, 1.3), cfg, psd).subband
    # 14 channels of 300 filters each: two rows a channel (256 + 44), 14 of each parity
    a = np.concatenate([np.full(300, 0.99 * np.exp(2j * np.pi * 128.0 * c / FS)) for c in range(14)])
    b, d = np.ones(a.size, complex), np.arange(a.size)
    assert S.channel_plan([(a, b, d)], FS).rows_of.shape[2] == 14 > S.MAX_ROWS_PER_PARITY


def _synthesis_kernel_emulated(rows, rows_of, chans, taps, n_out, seg_len):
    """The ``synthesize`` kernel of gwbatch.spiir._cuda_subbands step by step on the host, lanes as
    array axes, with its index expressions (each quarter's class of rows at its column ``lane & 7``,
    the shuffle across the quarters and the odd half's factors, the shuffle across the halves, the
    register ring's slots, half 1's part of each output a step late and half 0's held for it, the
    nine filling steps, each lane's taps): the GPU's arithmetic apart from rounding."""
    assert seg_len % 2 == 0
    n_low = rows.shape[1]
    lane = np.arange(32)
    half, q, quarter, col = lane >> 4, lane & 15, (lane >> 3) & 1, lane & 7
    cls = half + 2 * quarter
    sign = np.where(half == 0, 1.0, -1.0)
    turn = np.where(quarter == 0, 1.0, -1.0)
    even_factor = np.where((half == 1) & (quarter == 1), 1j, 1.0)
    odd_factor = np.where(half == 1, -even_factor, even_factor)
    z = np.zeros((rows_of.shape[0], n_out), np.complex128)
    idx = (2 * np.arange(5)[:, None] - 4 - half[None, :]) * 16 + q[None, :] + 80  # (5, 32)
    g = np.where((idx >= 0) & (idx <= 160), taps[np.clip(idx, 0, 160)], 0.0)
    for t in range(rows_of.shape[0]):
        mine = [[r for r in rows_of[t, k] if r >= 0] for k in range(4)]
        for seg0 in range(0, n_low, seg_len):
            seg1 = min(n_low, seg0 + seg_len)
            ring = np.zeros((10, 32), np.complex128)
            held = np.zeros(32, np.complex128)
            for n0 in range(seg0 - 9, seg1 + 1, 10):
                for s in range(10):
                    n = n0 + s
                    j = n + 5
                    own = np.zeros(32, np.complex128)
                    if 0 <= j < n_low:
                        for L in lane:
                            for r in mine[cls[L]]:
                                own[L] += rows[r, j] * np.exp(1j * np.pi * ((chans[r] * col[L]) & 31) / 16.0)
                    v = own[lane ^ 8] + turn * own
                    v = v * (odd_factor if s & 1 else even_factor)
                    ring[(s + 9) % 10] = sign * v + v[lane ^ 16]
                    acc = np.sum(g * ring[(s + 8 - 2 * np.arange(5) + 10) % 10], axis=0)
                    other = acc[lane ^ 16]
                    k = (n - 1) * 16 + q[:16]
                    if seg0 < n <= seg1:
                        ok = k < n_out
                        z[t, k[ok]] = (held + other)[:16][ok]
                    held = acc
    return z


@pytest.mark.parametrize("n_low", [1000, 999])
def test_the_synthesis_kernels_indexing_is_the_twins(templates, n_low):
    """The synthesis kernel's steps, emulated on the host with its own index expressions (register
    ring, filling steps, segments that do not divide the series, a last segment of odd length, a
    series that ends inside a channel sample), give the twin's output: CI's check of the kernel's
    arithmetic, which the GPU tests check on the device."""
    from gwbatch.spiir import _cuda_subbands as K

    x = np.random.default_rng(6).standard_normal(int(70 * FS)).astype(np.float32)
    plan = S.channel_plan([(bt.a, bt.b, bt.d) for bt, _ in templates], FS)
    rows = np.ascontiguousarray(S.all_rows(S.channelize(x, plan.channels), plan)[:, :n_low])
    n_out = n_low * S.DECIMATION - 5
    rows_of, _ = K.class_tables(plan.rows_of, plan.row_channels)
    chans = plan.row_channels
    emulated = _synthesis_kernel_emulated(rows, rows_of, chans, S.DECIMATION * S.prototype(), n_out, 300)
    twin = S.synthesize(rows, plan, n_out)
    assert np.abs(emulated - twin).max() <= 1e-5 * np.abs(twin).max()


def test_the_rows_time_segments_and_their_scan_give_the_whole_recursion():
    """``run_rows``' segmentation on the host: the segments tile the padded series in blocks of NB,
    and each segment run from ``chan_scan``'s state (a^m y_s + e_s, e_s its end from zero, float64)
    gives the recursion of the whole series, as ``chan_iir<F, W, true>`` does from its ``init``; run
    from zero over its warm-up before it (``warm_samples``), it gives the same within 1e-7."""
    from gwbatch.spiir import _cuda_subbands as K

    for n_warps, f, n_pad in ((3, 1, 10240), (580, 1, 16384), (9000, 1, 16384), (40, 2, 2048), (40, 4, 1000 * K.NB)):
        segments, seg_len, scan = K.segments_for(n_warps, f, n_pad)
        assert scan == (segments > 1) and seg_len % K.NB == 0 and (segments - 1) * seg_len < n_pad <= segments * seg_len
        assert segments == 1 or seg_len >= K.MIN_SEGMENT - K.NB
    # cut only where it gains MIN_GAIN in parallelism: the H200's F = 1, W = 4 launch (580 warps) is
    # cut into 15, its F = 2, W = 32 one (2336 warps) and F = 4, W = 32 one (1216) are not
    assert K.segments_for(580, 1, 16384)[0] == 15
    assert K.segments_for(2336, 2, 16384)[0] == 1 and K.segments_for(1216, 4, 16384)[0] == 1
    rng = np.random.default_rng(8)
    n_pad = 10240
    segments, seg_len, _ = K.segments_for(3, 1, n_pad)
    assert segments == 10
    a = np.exp(-1 / rng.uniform(5, 400, 6) + 2j * np.pi * rng.uniform(-0.3, 0.3, 6))
    x = rng.standard_normal((6, n_pad)) + 1j * rng.standard_normal((6, n_pad))

    def run(af, xf, y):
        out = np.empty(xf.size, complex)
        for k, v in enumerate(xf):
            y = af * y + v
            out[k] = y
        return out

    for af, xf in zip(a, x):
        whole = run(af, xf, 0.0)
        ends = [run(af, xf[s * seg_len: (s + 1) * seg_len], 0.0)[-1] for s in range(segments)]
        init, v = [], 0.0
        for s in range(segments):  # chan_scan
            init.append(v)
            v = af ** seg_len * v + ends[s]
        pieces = np.concatenate([run(af, xf[s * seg_len: (s + 1) * seg_len], init[s]) for s in range(segments)])
        assert np.abs(pieces - whole).max() <= 1e-9 * np.abs(whole).max()
        warm = int(K.warm_samples(np.array([abs(af)]))[0])
        assert warm % K.NB == 0 and warm >= 18 / -np.log(abs(af))
        starts = [max(0, s * seg_len - warm) for s in range(segments)]
        warmed = np.concatenate([run(af, xf[k: (s + 1) * seg_len], 0.0)[s * seg_len - k:]
                                 for s, k in enumerate(starts)])
        assert np.abs(warmed - whole).max() <= 1e-7 * np.abs(whole).max()
