"""SPIIR filtering: the numba twin against a float64 reference, and the CUDA kernels against the twin."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.spiir_kernel import float64_reference as reference
from gwbatch.spiir._cuda import LAYOUTS
from gwbatch.spiir.filtering import filter_bank, filter_bank_numba


def random_bank(n_templates, n_filters, max_delay, seed=0):
    rng = np.random.default_rng(seed)
    mag = rng.uniform(0.95, 0.9995, (n_templates, n_filters))
    a = (mag * np.exp(-2j * np.pi * rng.uniform(0.005, 0.25, (n_templates, n_filters)))).astype(np.complex64)
    b = (rng.standard_normal((n_templates, n_filters)) + 1j * rng.standard_normal((n_templates, n_filters))).astype(np.complex64)
    d = np.sort(rng.integers(0, max_delay, (n_templates, n_filters)), axis=1).astype(np.int32)
    b[:, -3:] = 0  # padded slots contribute nothing
    return a, b, d


def test_numba_twin_matches_float64_reference():
    x = np.random.default_rng(1).standard_normal(3000).astype(np.float32)
    a, b, d = random_bank(3, 40, 800)
    z = filter_bank_numba(x, a, b, d)
    ref = reference(x, a, b, d)
    assert z.dtype == np.complex64
    # complex64 state: relative error ~ 3e-8 / (1 - |a|) at worst (1 - |a| >= 5e-4 here)
    assert np.max(np.abs(z - ref)) / np.max(np.abs(ref)) < 1e-4
    # one template with more filters than threads: the grouped path gives the same result
    z1 = filter_bank_numba(x, a[:1], b[:1], d[:1], threads=4)
    np.testing.assert_allclose(z1[0], z[0], rtol=0, atol=1e-5 * np.abs(z[0]).max())


@pytest.mark.gpu
@pytest.mark.parametrize("n_templates,n_filters,segments", [(5, 20, None), (3, 100, 1), (3, 100, 7), (2, 300, None), (2, 700, 4)])
def test_cuda_matches_twin(n_templates, n_filters, segments):
    import cupy

    from gwbatch.spiir._cuda import filter_bank_cuda

    x = np.random.default_rng(2).standard_normal(5003).astype(np.float32)
    a, b, d = random_bank(n_templates, n_filters, 2000, seed=n_filters)
    ref = filter_bank_numba(x, a, b, d)
    got = filter_bank_cuda(cupy.asarray(x), a, b, d, segments=segments).get()
    assert got.shape == ref.shape
    assert np.max(np.abs(got - ref)) / np.max(np.abs(ref)) < 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("n_filters,segments", [(100, 5), (700, 3)])
def test_cuda_template_class_with_time_segments_matches_twin(n_filters, segments):
    """The long-input layout (each template's class, time segments) equals the twin."""
    import cupy

    from gwbatch.spiir._cuda import filter_bank_cuda, filters_per_thread

    x = np.random.default_rng(3).standard_normal(20011).astype(np.float32)
    a, b, d = random_bank(3, n_filters, 2000, seed=n_filters + 1)
    ref = filter_bank_numba(x, a, b, d)
    got = filter_bank_cuda(cupy.asarray(x), a, b, d, segments=segments, f=filters_per_thread(n_filters)).get()
    assert np.max(np.abs(got - ref)) / np.max(np.abs(ref)) < 1e-4


@pytest.mark.gpu
def test_long_input_layout_bounds_partial_outputs():
    """A few templates on a long chunk: the template's class with time segments, not one filter per
    thread (whose per-warp partial series would need tens of GB)."""
    from gwbatch.spiir._cuda import (
        PARTIAL_OUTPUT_BYTES,
        filters_per_thread,
        launch_plan,
    )

    f, segments = launch_plan(40, 700, 2**21)
    assert f == filters_per_thread(700) and segments > 1
    assert 40 * -(-700 // (32 * f)) * 2**21 * 8 <= 4 * PARTIAL_OUTPUT_BYTES


def mixed_bank(counts, max_delay, seed=0):
    """A packed bank whose templates use ``counts`` filters each (the rest of each row padding)."""
    a, b, d = random_bank(len(counts), max(counts) + 3, max_delay, seed=seed)
    for t, n in enumerate(counts):
        b[t, n:] = 0
    return a, b, d


def test_templates_grouped_by_their_own_filter_count():
    from gwbatch.spiir._cuda import filter_counts, template_groups

    counts = [20, 700, 300, 129, 64, 512, 1]
    a, b, d = mixed_bank(counts, 100)
    b[0, 5] = 0  # a zero inside the used slots does not shorten the template
    assert filter_counts(b).tolist() == counts
    assert filter_counts(np.zeros((2, 4), np.complex64)).tolist() == [1, 1]
    groups = template_groups(filter_counts(b))
    # (filters per thread, warps per template): rows
    assert [(key, rows.tolist()) for key, rows in groups] == [
        ((1, 1), [0, 6]), ((2, 1), [4]), ((8, 1), [3]), ((16, 1), [2, 5]), ((16, 2), [1])]


@pytest.mark.gpu
def test_cuda_grouped_bank_matches_twin():
    """A bank of very different template lengths, filtered class by class, equals the twin row by row."""
    import cupy

    from gwbatch.spiir._cuda import filter_bank_cuda

    x = np.random.default_rng(5).standard_normal(30011).astype(np.float32)
    counts = [20, 700, 300, 129, 64, 512, 1, 250] * 3
    a, b, d = mixed_bank(counts, 2000, seed=11)
    ref = filter_bank_numba(x, a, b, d)
    got = filter_bank_cuda(cupy.asarray(x), a, b, d).get()
    assert got.shape == ref.shape
    scale = np.abs(ref).max(axis=1)
    assert np.all(np.abs(got - ref).max(axis=1) / scale < 1e-4)


@pytest.mark.gpu
def test_dispatch_on_cupy_input():
    import cupy

    x = np.random.default_rng(3).standard_normal(1000).astype(np.float32)
    a, b, d = random_bank(2, 30, 300)
    np.testing.assert_allclose(filter_bank(cupy.asarray(x), a, b, d).get(), filter_bank(x, a, b, d), rtol=0, atol=1e-3)


@pytest.mark.gpu
def test_segmented_run_replays_as_cuda_graph():
    """With a preallocated workspace the three-launch segmented run can be captured and replayed."""
    import cupy

    from gwbatch.spiir._cuda import packed_bank, run_class, shifted_input, workspace

    x = np.random.default_rng(4).standard_normal(4096).astype(np.float32)
    a, b, d = random_bank(1, 256, 3000, seed=9)
    ref = filter_bank_numba(x, a, b, d)[0]
    pad = int(d.max()) + 16
    xs, n4 = shifted_input(cupy.asarray(x), pad, 4096)
    args = packed_bank(a, b, d, 1)
    ws = workspace(args[0].shape[0], args[0].size, 4096, 32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        run_class(xs, n4, pad, 4096, *args, 1, 32, ws)
        stream.synchronize()
        stream.begin_capture()
        run_class(xs, n4, pad, 4096, *args, 1, 32, ws)
        graph = stream.end_capture()
        ws["out"].fill(0)
        graph.launch(stream)
        stream.synchronize()
    got = ws["out"].sum(axis=0).get()
    assert np.max(np.abs(got - ref)) / np.max(np.abs(ref)) < 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("f,w", LAYOUTS)
def test_every_layout_matches_twin(f, w):
    """Each compiled layout (F filters per lane, W lanes per template), 37 templates written to
    permuted rows, equals the twin row by row (1e-4 of each row's peak)."""
    import cupy

    from gwbatch.spiir._cuda import packed_slots, run_pass, shifted_input

    rng = np.random.default_rng(f * 100 + w)
    x = rng.standard_normal(3001).astype(np.float32)
    a, b, d = (v[:, : f * w] for v in random_bank(37, f * w + 3, 900, seed=f * 100 + w))  # no padding slots
    ref = filter_bank_numba(x, a, b, d)
    rows = rng.permutation(37)
    n_pad = -(-x.size // 16) * 16
    pad = int(d.max()) + 16
    xs, n4 = shifted_input(cupy.asarray(x), pad, n_pad)
    out = cupy.zeros((37, n_pad), dtype=cupy.complex64)
    run_pass(xs, n4, pad, n_pad, packed_slots(a, b, d, f, w), f, w, out, n_pad,
             rows=cupy.asarray(rows.astype(np.int32)), n_slots=37, n_valid=x.size)
    got = out.get()
    assert np.all(got[:, x.size:] == 0)  # samples beyond the input are written as zero
    err = np.abs(got[rows, : x.size] - ref).max(axis=1) / np.abs(ref).max(axis=1)
    assert np.all(err < 1e-4), err.max()


@pytest.mark.gpu
@pytest.mark.parametrize("f,w,segments", [(4, 8, 1), (2, 32, 1), (1, 32, 5), (8, 1, 1)])
def test_epilogue_adds_the_rung_below_interpolated_and_later_parts(f, w, segments):
    """The fused ladder step: a first part of each template's filters plus the rung below through
    ``interpolate2``, then the remaining filters added by a second, accumulating pass, equals the
    twin's filters plus ``interpolate2`` of the same lower-rate series."""
    import cupy

    from gwbatch.spiir._cuda import HALO, packed_slots, run_pass, shifted_input
    from gwbatch.spiir.multirate import interpolate2

    rng = np.random.default_rng(7)
    n_templates, n = 21, 4001
    x = rng.standard_normal(n).astype(np.float32)
    a, b, d = random_bank(n_templates, 2 * f * w, 700, seed=3)
    n_low = -(-n // 2)
    low = (rng.standard_normal((n_templates, n_low)) + 1j * rng.standard_normal((n_templates, n_low))).astype(np.complex64)
    ref = filter_bank_numba(x, a, b, d) + interpolate2(low, n)
    n_pad = -(-n // 16) * 16
    low_buf = np.zeros((n_templates, -(-n_low // 16) * 16 + 2 * HALO), np.complex64)
    low_buf[:, HALO: HALO + n_low] = low
    low_buf = cupy.asarray(low_buf)
    pad = int(d.max()) + 16
    xs, n4 = shifted_input(cupy.asarray(x), pad, n_pad)
    out = cupy.empty((n_templates, n_pad), dtype=cupy.complex64)
    half = f * w
    for part, cols in enumerate((slice(0, half), slice(half, 2 * half))):
        run_pass(xs, n4, pad, n_pad, packed_slots(a[:, cols], b[:, cols], d[:, cols], f, w), f, w, out, n_pad,
                 n_slots=n_templates, low=None if part else low_buf, low_stride=low_buf.shape[1], n_valid=n,
                 accumulate=part > 0, segments=segments)
    got = out.get()[:, :n]
    err = np.abs(got - ref).max(axis=1) / np.abs(ref).max(axis=1)
    assert np.all(err < 1e-4), err.max()
