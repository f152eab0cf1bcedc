"""CUDA multi-rate SPIIR: the rate ladder with each rung's interpolation fused into its filter kernel.

What it computes is :func:`gwbatch.spiir.multirate.filter_multirate` with the numba kernel per rung
(CPU twin: :func:`gwbatch.spiir.multirate.filter_multirate`): the whitened chunk goes down the
ladder (:func:`~gwbatch.spiir.multirate.decimate_ladder`; here the CUDA ``decimate2``), and from the
lowest rung up each rung's output is its filters' sum plus the rung below interpolated by
:func:`~gwbatch.spiir.multirate.interpolate2`.  Here the interpolation and the sum
happen in the epilogue of the rung's ``spiir_pass`` (:mod:`gwbatch.spiir._cuda`): each rung's output
is written once and read once by the rung above, with no ``(templates, samples)`` intermediates
(interpolated copies, sums) between rungs.

Layout.  A template has few filters on most rungs (BBH: a median of 1 to 12 per rung; BNS: 18 to
120), so one warp per template would leave most lanes idle.  Each rung's templates are grouped by
their count on that rung, each group in the layout ``(F, W)`` that holds its largest count at the
least measured cost (``W`` lanes per template, ``F`` filters per lane, 32 / W templates per warp;
:func:`group_by_layout`).  Beyond 512 filters a template's filters go to several launches, the
later ones adding to the first's output.  A launch with far fewer warps than the GPU keeps resident
is split into time segments (:func:`segments_to_fill`).

The packed device arrays of a bank are built once per filter content and cached (:func:`device_plan`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from gwbatch.spiir import _cuda
from gwbatch.spiir._cuda import HALO, LAYOUTS, NB, filter_counts, packed_slots

#: Time per template and sample of each layout filled to its capacity, with the interpolating
#: epilogue, time segments as :func:`segments_to_fill` sets them (ps; one H200, 1024 templates,
#: 65536 samples: ``python benchmarks/spiir_layouts.py``, benchmarks/RESULTS.md).
LAYOUT_PS = {
    (1, 1): 11.7, (2, 1): 9.2, (4, 1): 10.9, (8, 1): 14.9,
    (1, 2): 8.6, (2, 2): 10.3, (4, 2): 12.9, (8, 2): 18.8,
    (1, 4): 10.5, (2, 4): 13.6, (4, 4): 19.0, (8, 4): 28.8,
    (1, 8): 17.8, (2, 8): 23.2, (4, 8): 34.4, (8, 8): 54.2,
    (1, 16): 28.3, (2, 16): 38.6, (4, 16): 61.0, (8, 16): 94.2,
    (1, 32): 62.5, (2, 32): 69.8, (4, 32): 92.8, (8, 32): 134.5, (16, 32): 228.1,
}
#: What a launch costs beyond its templates' time (the scan, the first pass of segments, a launch
#: that does not fill the GPU), in ps: a group of templates is worth its own launch only when it
#: saves more than this.
LAUNCH_PS = 40e6
#: Samples of the rung at the top rate the grouping is planned for (2^18: 64 s at 4096 Hz).
PLANNED_SAMPLES = 1 << 18


def cheapest_layout(count: int) -> tuple[int, int]:
    """The layout ``(F, W)`` of least :data:`LAYOUT_PS` that holds ``count`` filters (beyond 512: the
    widest, in several parts)."""
    fits = [lw for lw in LAYOUTS if lw[0] * lw[1] >= count]
    return min(fits, key=LAYOUT_PS.__getitem__) if fits else (16, 32)


def group_by_layout(counts: np.ndarray, samples: int) -> list[tuple[tuple[int, int], np.ndarray]]:
    """Templates (by their filter count on a rung) in groups of one layout each, ``(layout, rows)``:
    the partition of the templates sorted by count into consecutive groups, each run in the layout
    its largest count needs, of least modelled time (:data:`LAYOUT_PS` per template and sample,
    :data:`LAUNCH_PS` per launch), by dynamic programming over the distinct counts."""
    values, inverse, mult = np.unique(counts, return_inverse=True, return_counts=True)
    cum = np.concatenate([[0], np.cumsum(mult)])
    best = np.full(values.size + 1, np.inf)
    best[0] = 0.0
    cut = np.zeros(values.size + 1, dtype=np.int64)
    for i in range(1, values.size + 1):
        layout = cheapest_layout(int(values[i - 1]))
        parts = -(-int(values[i - 1]) // (layout[0] * layout[1]))
        per_template = LAYOUT_PS[layout] * samples * parts
        for j in range(i):
            cost = best[j] + LAUNCH_PS * parts + (cum[i] - cum[j]) * per_template
            if cost < best[i]:
                best[i], cut[i] = cost, j
    groups, i = [], values.size
    while i > 0:
        j = int(cut[i])
        rows = np.flatnonzero((inverse >= j) & (inverse < i))
        groups.append((cheapest_layout(int(values[i - 1])), rows))
        i = j
    return groups[::-1]


@dataclass(frozen=True)
class Launch:
    """One ``spiir_pass<F, W>`` of a rung: packed filters of ``n_slots`` templates (device rows ``rows``)."""

    f: int
    w: int
    packed: tuple
    rows: object
    n_slots: int
    accumulate: bool  # a later part of its templates' filters: adds to the first part's output


@dataclass(frozen=True)
class Rung:
    level: int
    launches: tuple[Launch, ...]
    pad: int  # zeros in front of the input: the rung's longest delay and a block


def _launches(a, b, d, samples: int) -> list[Launch]:
    import cupy

    counts = filter_counts(b)
    first, later = [], []
    for (f, w), rows in group_by_layout(counts, samples):
        width = int(counts[rows].max())
        per = f * w
        for part, lo in enumerate(range(0, width, per)):
            cols = slice(lo, min(lo + per, width))
            packed = packed_slots(a[rows, cols], b[rows, cols], d[rows, cols], f, w)
            launch = Launch(f, w, packed, cupy.asarray(rows.astype(np.int32)), int(rows.size), part > 0)
            (later if part else first).append(launch)
    return first + later


def _plan(bank) -> tuple[Rung, ...]:
    sets = bank.level_sets
    rungs = []
    for k in range(bank.levels, -1, -1):
        if k in sets:
            a, b, d = sets[k]
        else:  # no filter of the bank on this rung: interpolation only
            a = b = np.zeros((bank.size, 1), np.complex64)
            d = np.zeros((bank.size, 1), np.int32)
        rungs.append(Rung(k, tuple(_launches(a, b, d, PLANNED_SAMPLES >> k)), int(d.max()) + NB))
    return tuple(rungs)


#: Plans kept (least recently used dropped): the searches filter a bank in batches of templates,
#: each a new subset object, so plans are keyed by content, not identity.  Enough for every batch
#: of every detector's bank to stay, chunk after chunk: the production bank (`bns-nsbh`, 38928
#: templates) in batches of 256 for three detectors makes 456.
PLANS_KEPT = 512
_PLANS: OrderedDict = OrderedDict()


def device_plan(bank) -> tuple[Rung, ...]:
    """The bank's rungs, lowest first, with their packed device arrays; built once per filter
    content (:attr:`~gwbatch.spiir.bank.FilterBank.filters_digest`, hashed once per bank object)
    and device (the last :data:`PLANS_KEPT` kept)."""
    import cupy

    key = (cupy.cuda.Device().id, bank.filters_digest)
    if key in _PLANS:
        _PLANS.move_to_end(key)
    else:
        _PLANS[key] = _plan(bank)
        while len(_PLANS) > PLANS_KEPT:
            _PLANS.popitem(last=False)
    return _PLANS[key]


#: A launch is split into time segments only when its warps fill less than this fraction of what the
#: GPU keeps resident: each segment's states cost a first pass over the filters (measured,
#: benchmarks/spiir_layouts.py: at a third of the resident warps one pass is still faster; at a
#: quarter, segments are).
SEGMENT_BELOW = 0.25


def segments_to_fill(n_warps: int, n_pad: int, f: int, w: int) -> int:
    """Time segments for a launch of ``n_warps`` warps: none when it fills at least
    :data:`SEGMENT_BELOW` of the blocks the GPU keeps resident for the layout's register budget
    (``spiir_pass``'s launch bounds), else as many as fill one wave of them, each at least 256 samples.  A warp
    holds up to 32 templates, so a rung's launch may have few warps; its segments run as two passes
    and a scan (:func:`gwbatch.spiir._cuda.run_pass`)."""
    resident = _cuda.blocks_per_sm(f, w) * _cuda._sm_count()  # blocks
    blocks = -(-max(n_warps, 1) * 32 // _cuda.THREADS)
    if blocks >= SEGMENT_BELOW * resident:
        return 1
    # whole blocks per wave: one block more than the GPU holds would take a second wave
    return int(max(1, min(resident // blocks, n_pad // 256)))


def filter_multirate_cuda(x, bank):
    """``bank``'s top-rate output for whitened ``x`` (CuPy, float32, first sample on the ladder's
    period): ``(templates, x.size)`` complex64, equal to the CPU twin within the kernels' float32
    tolerance."""
    import cupy

    plan = device_plan(bank)
    n_templates = bank.size
    xs = [cupy.ascontiguousarray(x, dtype=cupy.float32)]
    for _ in range(bank.levels):
        xs.append(_cuda.decimate2(xs[-1]))
    below = None  # the rung below's output: (templates, HALO + n_pad + HALO), HALO zeros each side
    for rung in plan:
        xk = xs[rung.level]
        n_pad = -(-xk.size // NB) * NB
        shifted, n4 = _cuda.shifted_input(xk, rung.pad, n_pad)
        if rung.level:
            buf = cupy.empty((n_templates, n_pad + 2 * HALO), dtype=cupy.complex64)
            buf[:, :HALO] = 0
            buf[:, HALO + n_pad:] = 0
            out, stride = buf[:, HALO:], buf.shape[1]
        else:
            buf = out = cupy.empty((n_templates, n_pad), dtype=cupy.complex64)
            stride = n_pad
        for launch in rung.launches:
            low = None if (below is None or launch.accumulate) else below
            _cuda.run_pass(shifted, n4, rung.pad, n_pad, launch.packed, launch.f, launch.w, out, stride,
                           rows=launch.rows, n_slots=launch.n_slots, low=low,
                           low_stride=0 if low is None else low.shape[1], n_valid=xk.size,
                           accumulate=launch.accumulate,
                           segments=segments_to_fill(launch.packed[0].shape[0], n_pad, launch.f, launch.w))
        below = buf
        del shifted
    return below[:, : xs[0].size]
