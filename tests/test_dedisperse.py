"""The radio search's DM plan and dedispersion (issue 28): delays, Levin's DM list, decimation,
brute force and the two-stage sub-band scheme on the CPU twin, against sigpyproc where its series is
in the shared data; the CUDA kernel against the twin on the GPU machine (pytest -m gpu).

Tolerances.  The CUDA kernel makes the twin's float32 additions in the twin's order: results are
bitwise equal.  Against sigpyproc (float32 sums of integer samples, exact): 1e-5.  The sub-band
scheme's S/N against brute force: see :func:`test_subband_scheme_within_its_stated_loss`.
"""

from __future__ import annotations

import numpy as np
import pytest

from gwbatch.errors import ConfigError, DataError
from gwbatch.io.filterbank import read_filterbank
from gwbatch.radio._cuda import MAX_SPREAD, TILE, tiles
from gwbatch.radio.dedisperse import K_DM, decimate_pairs, dedisperse, dm_delays, level_passes, shift_add_numpy
from gwbatch.radio.dmplan import DMPlan, dm_plan, effective_width, subband_plan

from .conftest import DATA

TUTORIAL = DATA / "radio" / "tutorial.fil"
SIGPYPROC_DM30 = DATA / "radio" / "tutorial_dm30_sigpyproc.npy"

#: A small band with three decimation levels below DM 300: 256 channels of 1 MHz from 1500 MHz.
SMALL = 1500.0 - np.arange(256.0), 128e-6
SKA_MID = 1670.0 - 810.0 / 4096 * np.arange(4096), 64e-6


@pytest.fixture(scope="module")
def tutorial():
    fb = read_filterbank(TUTORIAL)
    return fb.data[:, 0, :].T.astype(np.float32), fb.frequencies, fb.tsamp


def inject(freqs, tsamp, dm, start, width, ntime, height=1.0, rng=None):
    """Spectra ``(nchan, ntime)``: unit Gaussian noise (none without ``rng``) and in every channel a
    boxcar of ``width`` samples and ``height`` arriving ``start`` plus that channel's delay at
    ``dm`` (the dedispersion's own rounding), so the trial at ``dm`` lines it up exactly."""
    x = np.zeros((freqs.size, ntime), np.float32) if rng is None else rng.standard_normal((freqs.size, ntime), np.float32)
    for c, d in enumerate(dm_delays(freqs, dm, tsamp)):
        x[c, start + d : start + d + width] += height
    return x


def sampled_pulse(freqs, tsamp, dm, start, width, ntime):
    """Noise-free spectra of a boxcar pulse of ``width`` samples arriving at the continuous time
    ``start`` plus each channel's exact delay at ``dm``, integrated over each sample."""
    arrival = start + dm * K_DM * (freqs ** -2.0 - freqs.max() ** -2.0) / tsamp
    k = np.arange(ntime)
    x = np.minimum(k + 1, arrival[:, None] + width) - np.maximum(k, arrival[:, None])
    return np.clip(x, 0, None).astype(np.float32)


def best_boxcar_snr(blocks, nchan, widths=(1, 2, 3, 4, 6, 8)):
    """The largest S/N over trials, starts and boxcar widths of noise-free or unit-noise series
    (a sample of a trial at decimation d sums nchan * d unit-variance values): (snr, dm, start, width)."""
    best = (-np.inf, None, None, None)
    for b in blocks:
        prefix = np.concatenate([np.zeros((b.series.shape[0], 1)), np.cumsum(b.series, axis=1, dtype=np.float64)], 1)
        for w in widths:
            snr = (prefix[:, w:] - prefix[:, :-w]) / np.sqrt(nchan * b.decimation * w)
            i, t = np.unravel_index(np.argmax(snr), snr.shape)
            if snr[i, t] > best[0]:
                best = (snr[i, t], b.dms[i], t * b.decimation, w * b.decimation)
    return best


# --- delays and the plan ---------------------------------------------------------------------------


def test_delays_equal_a_hand_computation_and_round_half_to_even(tutorial):
    _, freqs, tsamp = tutorial
    # 4148.808 * 30 * (1441.33^-2 - 1510^-2) / 320e-6 = 16.6417 -> 17; 1499.10 MHz: 2.4897 -> 2
    exact = 30 * K_DM * (freqs ** -2.0 - 1510.0 ** -2.0) / tsamp
    assert exact[63] == pytest.approx(16.64174, abs=1e-5) and exact[10] == pytest.approx(2.48967, abs=1e-5)
    delays = dm_delays(freqs, 30.0, tsamp)
    assert delays[[0, 1, 10, 31, 63]].tolist() == [0, 0, 2, 8, 17]
    # sigpyproc 2.0's arithmetic: float32 channel frequencies, fch1 the reference, numpy's round
    f32 = np.arange(64, dtype=np.float32) * np.float32(-1.09) + np.float32(1510.0)
    sigpyproc = (np.atleast_1d(30.0)[:, None] * K_DM * (f32 ** -2 - 1510.0 ** -2) / tsamp).round().astype(np.int32)
    np.testing.assert_array_equal(delays, sigpyproc[0])
    # referred to the highest channel whatever the order; exact halves go to even (0.5 -> 0, 1.5 -> 2)
    np.testing.assert_array_equal(dm_delays(freqs[::-1], 30.0, tsamp), delays[::-1])
    two = np.array([2.0, 1.0])  # K_DM dm (1 - 1/4) / (0.75 K_DM) = dm exactly
    assert [int(dm_delays(two, dm, 0.75 * K_DM)[1]) for dm in (0.5, 1.5)] == [0, 2]


def test_dm_list_is_dedisps():
    """Levin's list as dedisp makes it: 5697 trials to DM 3000 on the SKA-MID-like band; 19 trials
    to DM 100 on tutorial.fil's band, the first step 5.36."""
    freqs, tsamp = SKA_MID
    plan = dm_plan(freqs, tsamp, 0.0, 3000.0)
    assert plan.ndm == 5697 and plan.dms[0] == 0.0 and plan.dms[-2] < 3000.0 <= plan.dms[-1]
    assert plan.dms[1] == pytest.approx(0.0681893, rel=1e-6) and plan.dms[-1] == pytest.approx(3000.0322, rel=1e-7)
    assert np.all(plan.dms == plan.dms.astype(np.float32))  # stored as float32, as dedisp does
    small = dm_plan(1510.0 - 1.09 * np.arange(64), 320e-6, 0.0, 100.0)
    assert small.ndm == 19 and small.dms[1] == pytest.approx(5.35883, abs=1e-5)
    assert np.all(small.decimation == 1)
    # the band's order does not matter
    np.testing.assert_array_equal(dm_plan(freqs[::-1], tsamp, 0.0, 3000.0).dms, plan.dms)


def test_decimation_is_the_largest_within_the_tolerance():
    freqs, tsamp = SKA_MID
    plan = dm_plan(freqs, tsamp, 0.0, 3000.0)
    assert [(d, s.stop - s.start) for d, s in plan.levels] == [(1, 1767), (2, 1181), (4, 996), (8, 959), (16, 794)]
    args = (tsamp, plan.pulse_width, freqs[0], freqs[1] - freqs[0], freqs.size)
    full = effective_width(plan.dms, 1, *args)
    assert np.all(effective_width(plan.dms, plan.decimation, *args) <= 1.25 * full)
    assert np.all(effective_width(plan.dms, 2 * plan.decimation, *args) > 1.25 * full)
    assert plan.adds_per_second == pytest.approx(1.78e11, rel=0.01)
    assert np.all(dm_plan(freqs, tsamp, 0.0, 3000.0, decimate=False).decimation == 1)


@pytest.mark.parametrize("change, message", [
    ({"dm_min": -1.0}, "dm_min: -1.0; expected a DM >= 0"),
    ({"dm_max": 0.0}, r"dm_max: 0.0; expected a DM > dm_min \(0.0\)"),
    ({"tolerance": 1.0}, "tolerance: 1.0; expected a ratio > 1"),
    ({"pulse_width": -1e-6}, "pulse_width: -1e-06; expected a width >= 0 s"),
    ({"tsamp": 0.0}, "tsamp: 0.0 s; expected a sample time > 0"),
    ({"freqs": np.array([1500.0, 1499.0, 1497.0])}, "freqs: the channels must be evenly spaced"),
    ({"freqs": np.array([1500.0])}, "freqs: 1 channel"),
])
def test_dm_plan_refuses_bad_input(change, message):
    args = {"freqs": SMALL[0], "tsamp": SMALL[1], "dm_min": 0.0, "dm_max": 100.0, **change}
    with pytest.raises(ConfigError, match=message):
        dm_plan(**args)


def test_plan_overlap_and_output_length(tutorial):
    x, freqs, tsamp = tutorial
    plan = DMPlan.fixed(freqs, tsamp, 30.0)
    assert plan.overlap == 17 and plan.n_out(x.shape[1], 1) == x.shape[1] - 17  # sigpyproc's length
    small = dm_plan(*SMALL, 0.0, 300.0)
    top = small.dms[-1]
    assert small.overlap == max(d * int(small.delays(top, d).max()) for d in (1, 2, 4))
    assert small.n_out(10_000, 4) == (10_000 - small.overlap) // 4
    with pytest.raises(ConfigError, match="decimation"):
        DMPlan(np.array([0.0, 1.0]), np.array([2, 1]), 1.25, 40e-6, *SMALL)
    with pytest.raises(ConfigError, match="dms"):
        DMPlan.fixed(*SMALL, [2.0, 1.0])


# --- dedispersion on the CPU twin ------------------------------------------------------------------


def test_tutorial_dm30_is_sigpyproc_arithmetic_and_shows_the_pulsar(tutorial):
    """The DM-30 series is the float32 channel sum at the integer delays (sigpyproc's kernel), and
    its autocorrelation peaks at the fake pulsar's 0.25 s period (781.25 samples), higher than
    the DM-0 series' does (measured 1.13 times)."""
    x, freqs, tsamp = tutorial
    (block,) = dedisperse(x, freqs, tsamp, DMPlan.fixed(freqs, tsamp, 30.0))
    delays = dm_delays(freqs, 30.0, tsamp)
    n = x.shape[1] - delays.max()
    expected = np.zeros(n, np.float32)
    for c in range(freqs.size):
        expected += x[c, delays[c] : delays[c] + n]
    assert block.decimation == 1 and block.series.shape == (1, n) and block.series.dtype == np.float32
    np.testing.assert_array_equal(block.series[0], expected)

    def autocorrelation(s):
        s = s.astype(np.float64) - s.mean()
        spectrum = np.fft.rfft(s, 2 * s.size)
        acf = np.fft.irfft(spectrum * np.conj(spectrum))[: s.size]
        return acf / acf[0]

    acf = autocorrelation(block.series[0])
    peak = 100 + int(np.argmax(acf[100:2000]))
    assert abs(peak * tsamp - 0.25) < 0.0025
    (zero,) = dedisperse(x, freqs, tsamp, DMPlan.fixed(freqs, tsamp, 0.0))
    assert acf[peak] > 1.08 * autocorrelation(zero.series[0])[700:860].max()


def test_tutorial_dm30_equals_sigpyproc(tutorial):
    # the reference is bundled; benchmarks/radio_sigpyproc_reference.py remakes it where sigpyproc runs
    x, freqs, tsamp = tutorial
    reference = np.load(SIGPYPROC_DM30)
    (block,) = dedisperse(x, freqs, tsamp, DMPlan.fixed(freqs, tsamp, 30.0))
    assert block.series.shape == (1, reference.size)
    diff = np.abs(block.series[0].astype(np.float64) - reference).max()
    assert diff <= 1e-5, f"max |gwbatch - sigpyproc| = {diff}"  # 0 measured: the same 2-bit reading and sums


def test_dispersed_pulse_found_at_its_dm_time_and_snr():
    """A one-sample pulse of height 1.5 per channel in unit noise at a full-rate trial's DM: the
    largest S/N over the plan is at that trial and time, 1.5 sqrt(256) = 24 within 3 (3 sigma of
    the noise of one S/N value); the sub-band scheme finds it there too, within its stated loss
    (:func:`test_subband_scheme_within_its_stated_loss`)."""
    freqs, tsamp = SMALL
    plan = dm_plan(freqs, tsamp, 0.0, 300.0)
    dm, start = plan.dms[57], 3000
    x = inject(freqs, tsamp, dm, start, 1, plan.overlap + 8192, 1.5, np.random.default_rng(1))
    snr, found_dm, found_start, width = best_boxcar_snr(dedisperse(x, freqs, tsamp, plan), freqs.size)
    assert (found_dm, found_start, width) == (dm, start, 1)
    assert snr == pytest.approx(1.5 * np.sqrt(256), abs=3.0)
    two_stage = best_boxcar_snr(dedisperse(x, freqs, tsamp, plan, subband_plan(plan, 32)), freqs.size)
    assert two_stage[1:] == (dm, start, 1) and two_stage[0] >= (1 - 0.16) * snr - 3.0


def test_decimated_trials_equal_brute_force_on_presummed_spectra():
    freqs, tsamp = SMALL
    plan = dm_plan(freqs, tsamp, 0.0, 300.0)
    ntime = plan.overlap + 4096 + 5  # not a multiple of the decimation
    x = np.random.default_rng(2).standard_normal((freqs.size, ntime), np.float32)
    blocks = dedisperse(x, freqs, tsamp, plan)
    assert [(b.decimation, b.trials) for b in blocks] == [(d, trials) for d, trials in plan.levels]
    assert [b.decimation for b in blocks] == [1, 2, 4]
    presummed = x
    for block in blocks:
        d = block.decimation
        while presummed.shape[1] > ntime // d:
            presummed = decimate_pairs(presummed)
        direct = dedisperse(presummed, freqs, tsamp * d, DMPlan.fixed(freqs, tsamp * d, block.dms))[0].series
        n = plan.n_out(ntime, d)
        assert block.series.shape == (block.dms.size, n) and block.tsamp == tsamp * d
        np.testing.assert_array_equal(block.series, direct[:, :n])
    # pairs are summed, not averaged
    np.testing.assert_array_equal(decimate_pairs(x[:, :4]), x[:, 0:4:2] + x[:, 1:4:2])


def test_subband_channel_delays_stay_within_brute_forces_span():
    """Per trial, the delay a channel gets through the two stages lies between 0 and brute force's
    delay of its sub-band's lowest channel, and differs from brute force's own by at most the
    sweep of the DM difference across the sub-band plus one and a half samples (the two stages'
    roundings and brute force's own)."""
    freqs, tsamp = SKA_MID
    plan = dm_plan(freqs, tsamp, 0.0, 3000.0)
    scheme = subband_plan(plan, 256)
    per = scheme.channels_per_subband
    for d, trials, (stage1, stage2) in level_passes(plan, scheme):
        n_nominal = stage1.delays.shape[0] // scheme.nsub
        for i in range(trials.start, trials.stop, 97):
            k = i - trials.start
            n = int(stage2.row_base[k])
            through = (stage2.delays[k][:, None] + stage1.delays[np.arange(scheme.nsub) * n_nominal + n]).ravel()
            brute = plan.delays(plan.dms[i], d)
            lowest = brute.reshape(scheme.nsub, per)[:, -1]
            assert np.all(through >= 0) and np.all(through <= np.repeat(lowest, per))
            sweep = (plan.dms[i] - scheme.nominal_dms[scheme.nominal[i]]) * scheme.sweep_per_dm / (tsamp * d)
            assert np.all(np.abs(through - brute) <= sweep + 1.5)


def test_subband_scheme_within_its_stated_loss():
    """Noise-free pulses 1, 2 and 4 samples (of the level) wide, arriving half a sample apart, at
    the trials farthest from their nominal DMs (the last of the first groups of every decimation
    level): the best S/N of the sub-band scheme (tolerance 1.1) against brute force's.  Stated
    loss: at most 16% (mean 10%) for one-sample pulses, 10% (5%) for two and 6% (2%) for four.
    The sweep alone would cost 4.7% (1 - 1.1^-1/2); the rest is the second rounding of the delays,
    which can move a channel by one sample where brute force moves it by half of one."""
    freqs, tsamp = SMALL
    plan = dm_plan(freqs, tsamp, 0.0, 300.0)
    scheme = subband_plan(plan, None, 1.1)
    assert scheme.nsub == 32 and plan.adds_per_second / scheme.adds_per_second > 3.0
    ntime = plan.overlap + 4096
    losses = {1: [], 2: [], 4: []}
    for d, trials in plan.levels:
        ends = [i for i in range(trials.start, trials.stop - 1) if scheme.nominal[i + 1] != scheme.nominal[i]]
        for i in ends[:3]:
            for w in losses:
                for phase in (0.0, 0.5):
                    x = sampled_pulse(freqs, tsamp, plan.dms[i], 1000 + phase, w * d, ntime)
                    brute = best_boxcar_snr(dedisperse(x, freqs, tsamp, plan), freqs.size)[0]
                    two_stage = best_boxcar_snr(dedisperse(x, freqs, tsamp, plan, scheme), freqs.size)[0]
                    losses[w].append(1.0 - two_stage / brute)
    stated = {1: (0.16, 0.10), 2: (0.10, 0.05), 4: (0.06, 0.02)}
    for w, values in losses.items():
        assert max(values) <= stated[w][0] and np.mean(values) <= stated[w][1], (w, values)


def test_batches_with_a_limit_and_a_shared_ladder_equal_the_whole_plan():
    """The radio search's path: the plan in batches (dm_batches, brute force and sub-bands), the
    decimated spectra shared (ladder), outputs limited to what the chunk needs: ceil(limit / d)
    samples a trial, every trial equal to the whole plan's, bit for bit (the batches' sub-band
    schemes are the whole plan's, restricted)."""
    from gwbatch.radio.dmplan import dm_batches

    rng = np.random.default_rng(3)
    freqs = 1500.0 - 2.0 * np.arange(64)
    tsamp = 256e-6
    plan = dm_plan(freqs, tsamp, 0.0, 400.0)
    assert len(plan.levels) >= 3
    x = rng.standard_normal((64, plan.overlap + 3000)).astype(np.float32)
    limit = 2900
    for subbands in (None, 8):
        whole = {b.decimation: b.series for b in dedisperse(x, freqs, tsamp, plan,
                                                            None if subbands is None else subband_plan(plan, 8))}
        ladder = {}
        batches = dm_batches(plan, 7, subbands)
        assert len(batches) > len(plan.levels)
        for first, part, scheme in batches:
            for block in dedisperse(x, freqs, tsamp, part, scheme, ladder, limit):
                d = block.decimation
                assert block.series.shape[1] == -(-limit // d)
                start = first - dict(plan.levels)[d].start
                rows = slice(start, start + part.ndm)
                np.testing.assert_array_equal(block.series, whole[d][rows, : block.series.shape[1]])
        assert set(ladder) >= {d for d, _ in plan.levels}


@pytest.mark.parametrize("subbands", ["auto", None])
def test_memory_estimate_is_the_largest_batch_s_buffers(subbands):
    """The radio search's memory estimate of a batch: its dedispersed trials and (sub-bands) its
    stage-1 buffer, as dedisperse makes them for a chunk that needs ``needed`` outputs: at least the
    largest batch's, and within 5% of it."""
    from gwbatch.radio.dmplan import batch_bytes, dm_batches

    freqs = 1670.0 - 810.0 / 256 * np.arange(256)
    plan = dm_plan(freqs, 64e-6, 0.0, 1000.0)
    assert len(plan.levels) >= 3
    batches = dm_batches(plan, 64, subbands)
    needed = 5000
    x = np.zeros((freqs.size, plan.overlap + needed + 50), np.float32)
    made = []
    for _, part, scheme in batches:
        (d, _, passes), = level_passes(part, scheme)
        (block,) = dedisperse(x, freqs, 64e-6, part, scheme, limit=needed)
        stage1 = passes[0].delays.shape[0] * (block.series.shape[1] + passes[0].extra) if scheme is not None else 0
        made.append(16 * block.series.size + 4 * stage1)
    assert batch_bytes(batches, needed, 16) >= max(made) > 0
    assert batch_bytes(batches, needed, 16) <= 1.05 * max(made)


def test_dedisperse_refuses_spectra_that_do_not_fit_the_plan(tutorial):
    x, freqs, tsamp = tutorial
    plan = DMPlan.fixed(freqs, tsamp, 30.0)
    with pytest.raises(DataError, match="not the plan's 64"):
        dedisperse(x[:32], freqs[:32], tsamp, plan)
    with pytest.raises(DataError, match="sample time"):
        dedisperse(x, freqs, 2 * tsamp, plan)
    with pytest.raises(DataError, match="above the plan's overlap of 17 samples"):
        dedisperse(x[:, :17], freqs, tsamp, plan)
    small = dm_plan(freqs, tsamp, 0.0, 50.0)
    with pytest.raises(DataError, match="another DM plan"):
        dedisperse(x, freqs, tsamp, small, subband_plan(dm_plan(freqs, tsamp, 0.0, 50.0), 8))
    with pytest.raises(ConfigError, match="nsub: 7"):
        subband_plan(dm_plan(freqs, tsamp, 0.0, 50.0), 7)


def test_kernel_tiles_share_rows_and_bound_their_spread():
    rng = np.random.default_rng(3)
    delays = np.sort(rng.integers(0, 3000, (50, 16)), axis=0).astype(np.int32)
    row_base = np.repeat(np.arange(5), 10).astype(np.int32)
    table, widest = tiles(row_base, delays)
    assert table[:, 2].sum() == 50 and np.all(table[:, 2] <= TILE) and widest <= MAX_SPREAD
    assert np.all(np.diff(table[:, 1]) == table[:-1, 2]) and table[0, 1] == 0
    for base, first, count in table:
        rows = slice(first, first + count)
        assert np.all(row_base[rows] == base) and np.ptp(delays[rows], axis=0).max() <= widest


def test_shift_add_twin_reads_past_the_end_as_zero():
    inp = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = shift_add_numpy(inp, np.array([0, 1]), 1, np.array([[0, 2], [3, 1]]), 3)
    np.testing.assert_array_equal(out, [[0 + 6, 1 + 7, 2 + 0], [7 + 9, 0 + 10, 0 + 11]])


# --- the CUDA kernel against the twin (GPU machine) ------------------------------------------------


@pytest.mark.gpu
def test_cuda_shift_add_equals_the_twin():
    """Random passes: rows strided, delays spread wider than a tile may hold (tiles split), tiles of
    fewer outputs than TILE, reads past the end of a row, lengths off the time tile, rows in several
    staged chunks with a partial last one."""
    import cupy

    from gwbatch.radio._cuda import shift_add
    from gwbatch.radio.dedisperse import ShiftAdd

    rng = np.random.default_rng(4)
    inp = rng.standard_normal((24, 5000), np.float32)
    for stride, spread, n_out, rows in ((1, 40, 4000, 8), (3, 2 * MAX_SPREAD, 3000, 7), (1, 1000, 4990, 8),
                                        (1, 300, 4321, 21)):
        delays = np.sort(rng.integers(0, spread, (21, rows)), axis=0).astype(np.int32)
        row_base = np.repeat([0, 1, 2], 7).astype(np.int32)
        step = ShiftAdd(row_base, stride, delays)
        expected = shift_add_numpy(inp, row_base, stride, delays, n_out)
        np.testing.assert_array_equal(shift_add(cupy.asarray(inp), step, n_out).get(), expected)


@pytest.mark.gpu
@pytest.mark.parametrize("nsub", [None, 32])
def test_cuda_dedisperse_equals_the_twin(nsub):
    import cupy

    freqs, tsamp = SMALL
    plan = dm_plan(freqs, tsamp, 0.0, 300.0)
    scheme = None if nsub is None else subband_plan(plan, nsub)
    x = np.random.default_rng(5).standard_normal((freqs.size, plan.overlap + 20_000), np.float32)
    cpu = dedisperse(x, freqs, tsamp, plan, scheme)
    gpu = dedisperse(cupy.asarray(x), freqs, tsamp, plan, scheme)
    for a, b in zip(cpu, gpu):
        assert isinstance(b.series, cupy.ndarray) and b.decimation == a.decimation
        np.testing.assert_array_equal(b.series.get(), a.series)
