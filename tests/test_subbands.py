"""Sub-band SPIIR (gwbatch.spiir.subbands, experimental): the numba twin against the float64 direct
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
                         np.array([[[0, 2, 5, -1], [1, 3, 4, -1]]], np.int32), FS)
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
    xc = S.channelize(x, plan.channels).astype(np.complex128)
    index = {c: i for i, c in enumerate(plan.channels)}
    for t, (a, b, d) in enumerate(filters):
        mine = [r for r in plan.rows if r.template == t]
        rows = [S.channel_row_reference(xc[index[r.channel]], r.a, r.b, r.d) for r in mine]
        ref = S.synthesis_reference(rows, [r.channel for r in mine], x.size)
        inner = slice(int(d.max()) + 4096, x.size - 4096)
        assert np.abs(z[t, inner] - ref[inner]).max() <= 1e-5 * np.abs(ref[inner]).max()
        single = filter_bank_numba(x, a[None, :], b[None, :], d[None, :])[0][inner]
        assert abs(np.vdot(single, ref[inner])) / np.linalg.norm(single) / np.linalg.norm(ref[inner]) > 0.99


def test_the_decomposition_keeps_the_overlap(templates):
    """benchmarks/spiir_subbands.py's finding on two templates: the response run in channels of D = 16
    loses at most 0.002 of the single-rate overlap, at any phase of the impulse, with 16x fewer
    updates than the single-rate filters."""
    for built, h in templates:
        start = 4 * (S.TAPS_PER_PHASE * S.DECIMATION + 1)
        target = Target(h, headroom=start)
        for phase in (0, 5, 11):
            r, first = S.impulse_response(built.a, built.b, built.d, FS, start + phase)
            ov = target.overlap(r, lead=start + phase - first)[0]
            assert built.overlap_single - 0.002 <= ov <= built.overlap_single + 0.002, (phase, ov)
    plan = S.channel_plan([(bt.a, bt.b, bt.d) for bt, _ in templates], FS)
    assert plan.updates_per_sample() == pytest.approx(np.mean([bt.a.size for bt, _ in templates]) / 16)


@pytest.mark.gpu
def test_kernels_equal_the_twin(templates):
    """The CUDA channels, rows (every layout, each on its stream) and synthesis equal the twin
    within 1e-4 of each template's peak (float32 both)."""
    cupy = pytest.importorskip("cupy")
    x = np.random.default_rng(5).standard_normal(int(40 * FS)).astype(np.float32)
    plan = S.channel_plan([(bt.a, bt.b, bt.d) for bt, _ in templates] * 3, FS)
    z = cupy.asnumpy(S.filter_subbands(cupy.asarray(x), plan))
    twin = S.filter_subbands(x, plan)
    peak = np.abs(twin).max(axis=1, keepdims=True)
    assert (np.abs(z - twin) <= 1e-4 * peak).all()
