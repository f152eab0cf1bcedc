"""Sub-band SPIIR (the bank setting ``spiir.subbands``, off by default): filters run in complex
channels of a DFT filter bank instead of on the octave ladder.

The octave ladder (:mod:`gwbatch.spiir.multirate`) runs a filter at the lowest real rate whose
Nyquist frequency holds it.  Here the band is cut into ``C = 2 D`` complex channels ``S = R / C``
apart (2x oversampled: each channel at rate ``R / D = 2 S``) and a filter runs in the channel nearest
its frequency, ``c = round(f / S)``, at ``1 / D`` of the rate whatever its frequency.
``benchmarks/spiir_subbands.py`` measures what that costs in overlap: at ``D = 16`` a filter that
decays within a few channel samples (a merger's) comes out distorted, so the amplitudes of those
filters are fitted again through the channels (:func:`refit_short_filters`); every template of
``bns.yaml``'s and ``bbh.yaml``'s benchmark regions then keeps (and exceeds) its single-rate overlap,
at 1/16 of the single-rate updates (BNS: 22 per top-rate sample against the ladder's 53; 9.4 with
the nested channels below).  A bank with ``spiir.subbands`` runs in channels
each template whose response there keeps its single-rate overlap within ``spiir.multirate_tolerance``
(:func:`gwbatch.spiir.bank.build_template`), the others on the ladder; both backends run the bank's
parts apart (:func:`gwbatch.spiir.filtering.filter_templates`).  The channels assume a rate of
about 4096 Hz: ``D`` is fixed at 16 (the kernels are compiled for it), so at 2048 Hz the channels
are 128 Hz and lose 0.0014 of the overlap (median) where at 4096 Hz they lose 0.0007.

With ``w_c = pi c / D`` (rad per top-rate sample) and the channel FIR ``p`` (:func:`prototype`, a
Kaiser-windowed sinc cut at the channel rate's Nyquist frequency, ``K D + 1`` taps, unit DC gain,
``H = K D / 2`` its centre):

- **analysis** (:func:`channelize`): ``X_c[j] = sum_k p[k] x[j D - H + k] e^{-i w_c (j D - H + k)}``
  (zero-phase: ``X_c[j]`` is at top-rate sample ``j D``; zeros beyond the series);
- **filters** (:func:`to_channels`): ``y[t] = sum_n b a^n x[t - d - n]`` equals
  ``e^{i w_c t} sum_n b e^{-i w_c d} (a e^{-i w_c})^n x_c[t - d - n]`` with ``x_c = x e^{-i w_c t}``,
  which at the channel rate (moved as the ladder moves filters) is ``a' = (a e^{-i w_c})^D``,
  ``d' = ceil(d / D)``, ``b' = D b e^{-i w_c d} (a e^{-i w_c})^(d' D - d)``.  A template's filters of
  one channel sum to a *channel row* ``W_c[j] = sum_f b'_f y_f[j]``, ``y_f[j] = a'_f y_f[j-1] +
  X_c[j - d'_f]`` (:func:`channel_rows`);
- **synthesis** (:func:`synthesize`): ``z[t] = sum_c e^{i w_c t} sum_j W_c[j] D p[t - j D + H]``,
  computed as the kernels compute it: with ``t = n D + r`` and ``C = 2 D``, ``e^{i w_c t} =
  (-1)^(c n) e^{2 pi i c r / C}``, so ``U[j, q] = sum_c W_c[j] (-1)^(c j) e^{2 pi i c q / C}`` (a
  ``C``-point DFT over the channels) and ``z[n D + r] = sum_m D p[m D + r + H] U[n - m, (r + D m) mod C]``.

**Nested channels.** A filter decaying more slowly than :data:`NEST_DECAY` top-rate samples per
e-folding runs in a sub-channel of its channel: the channel's series is cut by a second filter bank
of the same form (``2 E`` sub-channels ``S / E`` apart at ``1 / E`` of the channel rate, ``E =``
:data:`NEST`, FIR ``prototype(E)``), the filter moved into it by the same rule, and the template's
sub-channel rows of that channel are synthesized back at the channel rate (a *virtual row*) and added
to its first row of the channel (:func:`plan_of`, :func:`all_rows`).  BNS templates then run 9.4
updates a top-rate sample instead of 22.5, with no loss of overlap (RESULTS.md, "Nested channels").

CPU twin of :mod:`gwbatch.spiir._cuda_subbands`: :func:`filter_subbands` (float32 arithmetic, numba).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numba
import numpy as np

from gwbatch._xp import HOST_PARALLEL, array_namespace

#: Top-rate samples per channel sample (the kernels are compiled for it), and the channel FIR's taps
#: per phase and Kaiser beta.
DECIMATION = 16
TAPS_PER_PHASE = 10
KAISER_BETA = 6.0
CHANNELS = 2 * DECIMATION


@functools.cache
def prototype(decimation: int = DECIMATION, taps: int = TAPS_PER_PHASE, beta: float = KAISER_BETA) -> np.ndarray:
    """The channels' FIR at the top rate (float64, ``taps * decimation + 1`` taps, unit DC gain; made
    once per shape, read-only)."""
    n = taps * decimation + 1
    t = np.arange(n) - (n - 1) / 2
    p = np.sinc(t / decimation) * np.kaiser(n, beta)
    p = p / p.sum()
    p.setflags(write=False)
    return p


def filter_channels(a, sample_rate: float, decimation: int = DECIMATION) -> np.ndarray:
    """Each filter's channel: the nearest multiple of ``S = R / (2 D)`` to its frequency (int64)."""
    spacing = sample_rate / (2 * decimation)
    return np.round(np.angle(a) / (2 * np.pi) * sample_rate / spacing).astype(np.int64)


def to_channels(a, b, d, channel, decimation: int = DECIMATION):
    """``(a', b', d')`` of filters moved into their channels at the channel rate (module docstring),
    complex128 and int64."""
    a = np.asarray(a, np.complex128)
    b = np.asarray(b, np.complex128)
    d = np.asarray(d, np.int64)
    w = np.pi * np.asarray(channel, np.float64) / decimation
    shifted = a * np.exp(-1j * w)
    low_d = -(-d // decimation)
    return shifted ** decimation, decimation * b * np.exp(-1j * w * d) * shifted ** (low_d * decimation - d), low_d


#: Nested channels: a filter decaying more slowly than :data:`NEST_DECAY` top-rate samples per
#: e-folding runs in a sub-channel of its channel, ``NEST`` times slower again (``R / (D NEST)``,
#: 64 Hz at 4096 Hz; four samples per e-folding or more there).  The sub-channels are a second DFT
#: filter bank of the same form (``2 NEST`` channels ``S / NEST`` apart, 2x oversampled) over the
#: channel's series, and their rows are synthesized back into it at the channel rate, where they
#: join the channel's other rows (module docstring, "Nested channels").
NEST = 4
NEST_DECAY = 256
#: A nested filter's level (the bank's ``level``: the filter runs at ``R / D / 2^level``).
NEST_LEVEL = int(np.log2(NEST))


def parent_of(fine) -> np.ndarray:
    """The channel holding sub-channel ``fine`` (a channel on the grid ``S / NEST``):
    ``floor((fine + NEST / 2) / NEST)``, so a channel's sub-channels are ``k = -NEST/2 ... NEST/2 - 1``."""
    return (np.asarray(fine, np.int64) + NEST // 2) // NEST


def nested_filters(a) -> np.ndarray:
    """Which single-rate filters (pole ``a`` at the top rate) run in sub-channels (bool): those whose
    e-folding, ``-1 / log|a|``, exceeds :data:`NEST_DECAY` samples."""
    return np.log(np.maximum(np.abs(np.asarray(a)), 1e-300)) > -1.0 / NEST_DECAY


#: Filters of the widest channel row (the widest kernel layout: 32 lanes of 8), and the most rows of
#: one channel parity a template may have (the synthesis kernel keeps that many per lane).
WIDEST_ROW = 256
MAX_ROWS_PER_PARITY = 12


def row_parts(count: int) -> list[int]:
    """A channel's ``count`` filters in rows that fill the kernels' layouts: up to 64 (or exactly 128
    or 256) in one row, else a whole warp of 256, 128 or 64 and the rest again (184 filters: 128 +
    56, 192 slots instead of 256)."""
    parts = []
    while count > 0:
        size = count if count <= 64 or count in (128, WIDEST_ROW) else max(n for n in (256, 128, 64) if n <= count)
        parts.append(size)
        count -= size
    return parts


@dataclass(frozen=True)
class ChannelRow:
    """One channel row: a template's filters of one channel (or a part of them), at the channel rate;
    in a nested plan, a virtual row's filters of one sub-channel."""

    template: int  # the template (nested plan: the virtual row) it is synthesized into
    channel: int  # signed channel number in its filter bank (its modulation is ``e^{i pi c t / D}``)
    a: np.ndarray  # complex, at the channel rate
    b: np.ndarray
    d: np.ndarray  # int64, channel samples
    source: int | None = None  # the series it reads (nested rows: the fine channel); None: ``channel``

    @property
    def reads(self) -> int:
        return self.channel if self.source is None else self.source


@dataclass(frozen=True)
class ChannelPlan:
    """A bank's channel rows, the channels they read (sorted) and, per template and channel parity,
    its rows (``-1`` after the last): what both backends run.  The rows of a template's slowly
    decaying filters are a nested plan (``nested``, decimation :data:`NEST`, its templates the
    virtual rows): virtual row ``v`` of template and channel ``virtual[v]`` is synthesized at this
    plan's rate and added to row ``into[v]``, the template's first row of that channel, so the synthesis sums
    no more rows than before; a template without one there has a row of its own for it, numbered
    from ``len(rows)`` on."""

    rows: tuple[ChannelRow, ...]
    channels: tuple[int, ...]
    rows_of: np.ndarray  # (T, 2, per_parity) int32
    decimation: int = DECIMATION
    virtual: tuple[tuple[int, int], ...] = ()  # each virtual row's template and channel
    into: tuple[int, ...] = ()  # the row each virtual row is added to (from len(rows) on: rows of their own)
    nested: "ChannelPlan | None" = None

    @property
    def n_templates(self) -> int:
        return int(self.rows_of.shape[0])

    @property
    def n_rows(self) -> int:
        """Rows the synthesis reads: the filters' rows and the virtual rows of their own."""
        return max([len(self.rows) - 1, *self.into]) + 1

    @property
    def filters(self) -> int:
        return int(sum(r.a.size for r in self.rows))

    def most_rows_per_parity(self) -> int:
        """The most rows of one parity a template (or a virtual row of the nested plan) has."""
        counts = (self.rows_of >= 0).sum(axis=2)
        nested = self.nested.most_rows_per_parity() if self.nested is not None else 0
        return max(int(counts.max(initial=0)), nested)

    def updates_per_sample(self) -> float:
        """Filter updates per top-rate sample and template (the nested plan's at its rate)."""
        nested = self.nested.filters / (self.decimation * self.nested.decimation) if self.nested else 0.0
        return (self.filters / self.decimation + nested) / self.n_templates

    @functools.cached_property
    def padded(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The rows' filters as padded ``(rows, widest)`` arrays ``a``, ``b`` (complex64, padding 0)
        and ``d`` (int64), and the series each row reads as its index in :attr:`channels` (made once
        per plan: both backends read them chunk after chunk)."""
        width = max((r.a.size for r in self.rows), default=1)
        a = np.zeros((len(self.rows), width), np.complex64)
        b = np.zeros_like(a)
        d = np.zeros((len(self.rows), width), np.int64)
        for i, r in enumerate(self.rows):
            a[i, : r.a.size], b[i, : r.a.size], d[i, : r.a.size] = r.a, r.b, r.d
        index = {c: i for i, c in enumerate(self.channels)}
        return a, b, d, np.array([index[r.reads] for r in self.rows], np.int64)

    @functools.cached_property
    def row_channels(self) -> np.ndarray:
        """Each row's channel modulo ``2 D`` (the synthesis' DFT is periodic in it), the virtual rows
        after the filters' rows, int64."""
        out = np.zeros(self.n_rows, np.int64)
        out[: len(self.rows)] = [r.channel for r in self.rows]
        for (_, c), i in zip(self.virtual, self.into):
            out[i] = c
        return out % (2 * self.decimation)


def move_template(a, b, d, sample_rate: float, nest: bool = True):
    """A template's single-rate filters in their channels: ``(a', b', d', channel, level)`` (module
    docstring).  A filter that decays slowly (:func:`nested_filters`, when ``nest``) goes to its
    sub-channel: ``channel`` is then on the grid ``S / NEST`` (:func:`parent_of` its channel), its
    ``a', b', d'`` at ``R / (D NEST)`` and ``level`` :data:`NEST_LEVEL`; the others' level is 0."""
    a = np.asarray(a, np.complex128)
    b = np.asarray(b, np.complex128)
    d = np.asarray(d, np.int64)
    channel = filter_channels(a, sample_rate)
    slow = nested_filters(a) if nest else np.zeros(a.size, bool)
    fine = filter_channels(a[slow], sample_rate, DECIMATION * NEST)
    channel[slow] = parent_of(fine)
    la, lb, ld = to_channels(a, b, d, channel)
    la[slow], lb[slow], ld[slow] = to_channels(la[slow], lb[slow], ld[slow], fine - NEST * channel[slow], NEST)
    channel[slow] = fine
    return la, lb, ld, channel, np.where(slow, NEST_LEVEL, 0).astype(np.int8)


def _rows_of(rows: list, n_templates: int, extra=()) -> np.ndarray:
    """Per template and channel parity, the indices of its rows (``rows`` then the ``extra`` rows,
    each ``(template, channel)``, numbered after them), ``-1`` after the last."""
    keys = [(r.template, r.channel) for r in rows] + list(extra)
    counts = np.zeros((n_templates, 2), np.int64)
    for t, c in keys:
        counts[t, c % 2] += 1
    rows_of = np.full((n_templates, 2, max(1, int(counts.max(initial=0)))), -1, np.int32)
    fill = np.zeros_like(counts)
    for i, (t, c) in enumerate(keys):
        rows_of[t, c % 2, fill[t, c % 2]] = i
        fill[t, c % 2] += 1
    return rows_of


def _group_rows(owner: int, a, b, d, channel, source=None) -> list:
    """One owner's filters grouped by channel (and source), sorted by delay, in :func:`row_parts`."""
    rows = []
    key = channel if source is None else source
    for ch in np.unique(key).tolist():
        mine = np.flatnonzero(key == ch)
        mine = mine[np.argsort(d[mine], kind="stable")]
        lo = 0
        for size in row_parts(mine.size):
            part = mine[lo: lo + size]
            lo += size
            rows.append(ChannelRow(owner, int(channel[part[0]]), a[part], b[part], d[part].astype(np.int64),
                                   None if source is None else int(ch)))
    return rows


def plan_of(moved) -> ChannelPlan:
    """The channel rows of templates whose filters are in their channels (each ``(a', b', d',
    channel[, level])``, :func:`move_template`; padding ``b' = 0`` is left out): each template's
    filters grouped by channel, sorted by delay, in :func:`row_parts`.  Nested filters (level
    :data:`NEST_LEVEL`) make the nested plan: one virtual row per template and channel holding them
    (its ``templates``), rows by sub-channel ``k`` reading the series of their fine channel."""
    rows, sub_rows, virtual, own = [], [], [], []
    for t, entry in enumerate(moved):
        a, b, d, c = (np.asarray(v) for v in entry[:4])
        level = np.asarray(entry[4]) if len(entry) > 4 else np.zeros(a.size, np.int8)
        used = b != 0
        top = used & (level == 0)
        first_row = len(rows)
        rows.extend(_group_rows(t, a[top], b[top], d[top], c[top]))
        slow = used & (level != 0)
        if not slow.any():
            continue
        fine = c[slow].astype(np.int64)
        parent = parent_of(fine)
        for p in np.unique(parent).tolist():
            mine = parent == p
            into = next((i for i in range(first_row, len(rows)) if rows[i].channel == p), None)
            if into is None:  # no row of the template in this channel: the virtual row is one of its own
                own.append((t, int(p)))
            virtual.append((t, int(p), into))
            sub_rows.extend(_group_rows(len(virtual) - 1, a[slow][mine], b[slow][mine], d[slow][mine],
                                        fine[mine] - NEST * p, fine[mine]))
    nested = None
    if virtual:
        nested = ChannelPlan(tuple(sub_rows), tuple(sorted({r.source for r in sub_rows})),
                             _rows_of(sub_rows, len(virtual)), NEST)
    count = len(rows)
    into = []
    for *_, i in virtual:
        into.append(count if i is None else i)
        count += i is None
    channels = sorted({r.channel for r in rows} | {p for _, p, _ in virtual})
    return ChannelPlan(tuple(rows), tuple(channels), _rows_of(rows, len(moved), own), DECIMATION,
                       tuple((t, p) for t, p, _ in virtual), tuple(into), nested)


def channel_plan(templates, sample_rate: float, nest: bool = True) -> ChannelPlan:
    """:func:`plan_of` templates given by their single-rate filters at the top rate (each ``(a, b, d)``)."""
    return plan_of([move_template(a, b, d, sample_rate, nest) for a, b, d in templates])


#: The system is periodic in this many top-rate samples (the modulation ``(-1)^(c j)`` has period two
#: channel samples, and the nested channels' two sub-channel samples): a chunk's first sample must
#: sit on a multiple of it.
PERIOD = 2 * DECIMATION * NEST


#: Where the bank puts the impulse whose response it measures (on the system's period), and the most
#: samples that response starts before it (the analysis and synthesis FIRs' half lengths, and one
#: channel sample): the target it is compared with needs that much headroom.
IMPULSE_AT = PERIOD
LEAD = (TAPS_PER_PHASE + 1) * DECIMATION + (TAPS_PER_PHASE + 2) * NEST * DECIMATION


def reach() -> int:
    """Top-rate samples after a sample that its output reads: the analysis FIR's half length, the
    synthesis' half length plus one channel sample, and the same of the nested channels."""
    half = TAPS_PER_PHASE * DECIMATION // 2
    return 2 * half + 2 * DECIMATION + (TAPS_PER_PHASE + 2) * NEST * DECIMATION


# ------------------------------------------------------------------------------------------------
# The CPU twin (float32, as the kernels compute)


def channelize(x, channels, decimation: int = DECIMATION):
    """``X_c`` of the real series ``x`` for each of ``channels``, ``(len(channels), ceil(n / D))``
    complex64 (module docstring): the CUDA kernel for CuPy input, else the numba twin."""
    if array_namespace(x) is not np:
        from gwbatch.spiir._cuda_subbands import channelize as on_gpu

        return on_gpu(x, channels)
    p = prototype(decimation)
    x = np.ascontiguousarray(x, dtype=np.float32)
    n_low = -(-x.size // decimation)
    out = np.zeros((len(channels), n_low), dtype=np.complex64)
    phase = np.exp(-1j * np.pi * np.outer(np.asarray(channels), np.arange(2 * decimation)) / decimation)
    with HOST_PARALLEL:
        _channelize(x, p.astype(np.float32), phase.real.astype(np.float32), phase.imag.astype(np.float32),
                    decimation, out.view(np.float32))
    return out


@numba.njit(parallel=True, cache=True)
def _channelize(x, p, cos, sin, decimation, out):
    n, half, period = x.size, (p.size - 1) // 2, 2 * decimation
    for i in numba.prange(cos.shape[0]):
        for j in range(out.shape[1] // 2):
            t0 = j * decimation - half
            re = np.float32(0.0)
            im = np.float32(0.0)
            for k in range(max(0, -t0), min(p.size, n - t0)):
                v = p[k] * x[t0 + k]
                ph = (t0 + k) % period
                re += v * cos[i, ph]
                im += v * sin[i, ph]
            out[i, 2 * j] = re
            out[i, 2 * j + 1] = im


def channel_rows(x_channels: np.ndarray, plan: ChannelPlan) -> np.ndarray:
    """Every channel row of ``plan`` over the channels ``x_channels`` (:func:`channelize`'s output,
    rows in ``plan.channels`` order): ``(rows, n_low)`` complex64, the recurrence in float32 as
    ``chan_iir`` runs it (``y = a y + X[k - d]``, the row's sum ``sum b y``)."""
    a, b, d, source = plan.padded
    out = np.zeros((a.shape[0], x_channels.shape[1]), np.complex64)
    with HOST_PARALLEL:
        _rows(np.ascontiguousarray(x_channels, np.complex64).view(np.float32), a.view(np.float32),
              b.view(np.float32), d, source, out.view(np.float32))
    return out


@numba.njit(parallel=True, cache=True)
def _rows(x, a, b, d, source, out):
    """Each row's filters stepped together, sample by sample (their states in registers, the row's sum
    written once a sample); a filter starts at its delay."""
    n_low, width = out.shape[1] // 2, d.shape[1]
    for r in numba.prange(out.shape[0]):
        s = source[r]
        n_f = 0
        while n_f < width and (b[r, 2 * n_f] != 0 or b[r, 2 * n_f + 1] != 0):
            n_f += 1
        yr = np.zeros(width, np.float32)
        yi = np.zeros(width, np.float32)
        first = n_low
        for f in range(n_f):
            first = min(first, d[r, f])
        for k in range(first, n_low):
            accr = np.float32(0.0)
            acci = np.float32(0.0)
            for f in range(n_f):
                df = d[r, f]
                if k < df:
                    continue
                xr, xi = x[s, 2 * (k - df)], x[s, 2 * (k - df) + 1]
                ar, ai = a[r, 2 * f], a[r, 2 * f + 1]
                nr = ar * yr[f] - ai * yi[f] + xr
                ni = ar * yi[f] + ai * yr[f] + xi
                yr[f] = nr
                yi[f] = ni
                accr += b[r, 2 * f] * nr - b[r, 2 * f + 1] * ni
                acci += b[r, 2 * f] * ni + b[r, 2 * f + 1] * nr
            out[r, 2 * k] = accr
            out[r, 2 * k + 1] = acci


def synthesize(rows: np.ndarray, plan: ChannelPlan, n_out: int) -> np.ndarray:
    """Each template's output at ``plan.decimation`` times the rows' rate from its channel rows
    (module docstring's DFT form, float32): ``(templates, n_out)`` complex64."""
    dec = plan.decimation
    g = (dec * prototype(dec)).astype(np.float32)
    z = np.zeros((plan.n_templates, n_out), np.complex64)
    with HOST_PARALLEL:
        _synthesize(np.ascontiguousarray(rows, np.complex64), plan.rows_of.astype(np.int64), plan.row_channels, g, z,
                    dec)
    return z


#: Channel samples the CPU synthesis transforms at a time (its DFT rows are kept for one tile only).
SYNTH_TILE = 2048


@numba.njit(parallel=True, cache=True)
def _synthesize(rows, rows_of, chans, g, z, dec):
    """The module docstring's DFT form, in tiles of :data:`SYNTH_TILE` channel samples, with the
    kernels' split of the channels by parity: ``E`` sums the even channels and ``O`` the odd ones
    over columns ``q < C / 2``, and ``U[q] = E + O``, ``U[q + C / 2] = E - O``
    (``e^{2 pi i c (q + C/2) / C} = (-1)^c e^{2 pi i c q / C}``)."""
    n_low, n_out = rows.shape[1], z.shape[1]
    n_ch, half = 2 * dec, (g.size - 1) // 2
    h_ch = n_ch // 2
    reach = half // dec  # m in [-reach, reach]: output n reads U[n - reach ... n + reach]
    tile = SYNTH_TILE
    span = tile + 2 * reach
    tw = np.exp(2j * np.pi * np.arange(n_ch) / n_ch).astype(np.complex64)
    for t in numba.prange(z.shape[0]):
        parts = np.empty((2, span, h_ch), np.complex64)
        u = np.empty((span, n_ch), np.complex64)
        twc = np.empty(h_ch, np.complex64)
        for n0 in range(0, n_low, tile):
            j0 = n0 - reach  # u[i] is U[j0 + i]
            parts[:] = 0
            for par in range(2):
                for i in range(rows_of.shape[2]):
                    r = rows_of[t, par, i]
                    if r < 0:
                        break
                    c = chans[r]
                    for q in range(h_ch):
                        twc[q] = tw[(c * q) % n_ch]
                    for jj in range(span):
                        j = j0 + jj
                        if j < 0 or j >= n_low:
                            continue
                        v = rows[r, j]
                        if (c & 1) and (j & 1):
                            v = -v
                        for q in range(h_ch):
                            parts[par, jj, q] += v * twc[q]
            for jj in range(span):
                for q in range(h_ch):
                    u[jj, q] = parts[0, jj, q] + parts[1, jj, q]
                    u[jj, q + h_ch] = parts[0, jj, q] - parts[1, jj, q]
            for n in range(n0, min(n0 + tile, n_low)):
                for r_ in range(dec):
                    k = n * dec + r_
                    if k >= n_out:
                        break
                    acc = np.complex64(0.0)
                    for m in range(-reach, reach + 1):
                        ix = m * dec + r_ + half
                        if 0 <= ix < g.size:
                            acc += g[ix] * u[n - m - j0, (r_ + dec * m) % n_ch]
                    z[t, k] = acc


def nested_sources(plan: ChannelPlan) -> tuple[np.ndarray, np.ndarray]:
    """``(parent, sub)`` of each fine channel of ``plan.nested``: its channel's row in ``plan.channels``
    and its sub-channel within it."""
    fine = np.asarray(plan.nested.channels, np.int64)
    index = {c: i for i, c in enumerate(plan.channels)}
    parent = np.array([index[int(p)] for p in parent_of(fine)], np.int64)
    return parent, fine - NEST * parent_of(fine)


def sub_channelize(x_channels: np.ndarray, plan: ChannelPlan) -> np.ndarray:
    """The nested plan's input: each fine channel of ``plan.nested`` cut from its channel's series
    (``x_channels``, rows in ``plan.channels`` order) by the analysis at decimation :data:`NEST`,
    ``(len(plan.nested.channels), ceil(n_low / NEST))`` complex64 (the CUDA kernel for CuPy input)."""
    parent, sub = nested_sources(plan)
    if array_namespace(x_channels) is not np:
        from gwbatch.spiir._cuda_subbands import sub_channelize as on_gpu

        return on_gpu(x_channels, parent, sub)
    p = prototype(NEST).astype(np.float32)
    xc = np.ascontiguousarray(x_channels, np.complex64)
    n_low = -(-xc.shape[1] // NEST)
    phase = np.exp(-1j * np.pi * np.outer(sub, np.arange(2 * NEST)) / NEST)
    out = np.zeros((sub.size, n_low), np.complex64)
    with HOST_PARALLEL:
        _sub_channelize(xc, parent, p, phase.astype(np.complex64), NEST, out)
    return out


@numba.njit(parallel=True, cache=True)
def _sub_channelize(x, parent, p, phase, decimation, out):
    """``out[i, j] = sum_k p[k] X[j E - H + k] e^{-i pi k_i (j E - H + k) / E}`` of the complex series
    ``X = x[parent[i]]`` (zeros beyond its ends)."""
    n, half, period = x.shape[1], (p.size - 1) // 2, 2 * decimation
    for i in numba.prange(out.shape[0]):
        src = parent[i]
        for j in range(out.shape[1]):
            t0 = j * decimation - half
            acc = np.complex64(0.0)
            for k in range(max(0, -t0), min(p.size, n - t0)):
                acc += p[k] * x[src, t0 + k] * phase[i, (t0 + k) % period]
            out[i, j] = acc


def all_rows(x_channels: np.ndarray, plan: ChannelPlan) -> np.ndarray:
    """The rows the synthesis reads, ``(plan.n_rows, n_low)`` complex64: the filters' rows with the
    virtual rows (the nested plan's rows synthesized back at the channel rate) added to them."""
    n_low = x_channels.shape[1]
    out = np.zeros((plan.n_rows, n_low), np.complex64)
    if plan.rows:
        out[: len(plan.rows)] = channel_rows(x_channels, plan)
    if plan.nested is not None:
        sub = plan.nested
        virtual = synthesize(channel_rows(sub_channelize(x_channels, plan), sub), sub, n_low)
        for v, i in enumerate(plan.into):
            out[i] += virtual[v]
    return out


def filter_subbands(x, plan: ChannelPlan):
    """The templates' top-rate output for whitened ``x`` (``(templates, n)`` complex64): channels,
    rows (and the nested channels' rows), synthesis (the numba twin; CuPy input goes to
    :mod:`gwbatch.spiir._cuda_subbands`).  ``x``'s first sample is taken to be on the channels'
    period (:data:`PERIOD` samples)."""
    if array_namespace(x) is not np:
        from gwbatch.spiir._cuda_subbands import filter_subbands_cuda

        return filter_subbands_cuda(x, plan)
    xc = channelize(x, plan.channels)
    return synthesize(all_rows(xc, plan), plan, int(np.asarray(x).size))


# ------------------------------------------------------------------------------------------------
# References in float64 (the direct forms) and the response of one template


def channel_row_reference(x_channel: np.ndarray, a, b, d) -> np.ndarray:
    """One channel row in float64 by ``scipy.signal.lfilter``, one filter at a time."""
    from scipy.signal import lfilter

    n = x_channel.size
    out = np.zeros(n, dtype=np.complex128)
    for af, bf, df in zip(a, b, d):
        shifted = np.zeros(n, dtype=np.complex128)
        if df < n:
            shifted[df:] = x_channel[: n - df]
        out += bf * lfilter([1.0], [1.0, -af], shifted)
    return out


def synthesis_reference(rows, channels, n_out: int, decimation: int = DECIMATION) -> np.ndarray:
    """``z[t] = sum_c e^{i w_c t} sum_j W_c[j] D p[t - j D + H]`` (float64, the direct form)."""
    from scipy.signal import upfirdn

    p = prototype(decimation)
    half = (p.size - 1) // 2
    t = np.arange(n_out)
    z = np.zeros(n_out, dtype=np.complex128)
    for row, c in zip(rows, channels):
        y = upfirdn(decimation * p, np.asarray(row, np.complex128), decimation)[half: half + n_out]
        z[: y.size] += y * np.exp(1j * np.pi * c / decimation * t[: y.size])
    return z


def analysis_reference(x, channel: int, decimation: int = DECIMATION) -> np.ndarray:
    """``X_c[j] = sum_k p[k] x[j D - H + k] e^{-i w_c (j D - H + k)}`` of a real or complex series
    (float64, the direct form)."""
    from scipy.signal import upfirdn

    x = np.asarray(x, np.complex128)
    p = prototype(decimation)
    half = (p.size - 1) // 2
    mixed = x * np.exp(-1j * np.pi * channel / decimation * np.arange(x.size))
    full = np.convolve(mixed, p)  # full[j D + H] = X_c[j]
    n_low = -(-x.size // decimation)
    out = np.zeros(n_low, np.complex128)
    taken = full[half::decimation][:n_low]
    out[: taken.size] = taken
    return out


def template_reference(x, plan: ChannelPlan, template: int) -> np.ndarray:
    """One template's top-rate output for ``x`` in float64 by the direct forms, each row and its
    channel on its own (:func:`analysis_reference`, :func:`channel_row_reference`,
    :func:`synthesis_reference`), its nested channels' rows synthesized into their channels."""
    memo: dict = {}

    def channel(c):
        if c not in memo:
            memo[c] = analysis_reference(x, c)
        return memo[c]

    rows, chans = [], []
    for r in plan.rows:
        if r.template == template:
            rows.append(channel_row_reference(channel(r.channel), r.a, r.b, r.d))
            chans.append(r.channel)
    for v, (t, c) in enumerate(plan.virtual):
        if t != template:
            continue
        mine = [r for r in plan.nested.rows if r.template == v]
        sub = [channel_row_reference(analysis_reference(channel(c), r.channel, NEST), r.a, r.b, r.d) for r in mine]
        rows.append(synthesis_reference(sub, [r.channel for r in mine], channel(c).size, NEST))
        chans.append(c)
    return synthesis_reference(rows, chans, np.asarray(x).size)


#: Sub-band construction (in a bank's cache key when ``spiir.subbands`` is on): 1, each filter moved
#: to its channel as it is; 2, the short-lived filters' amplitudes then fitted again through the
#: channels (:func:`refit_short_filters`); 3, the slowly decaying filters in nested channels.
CONSTRUCTION_VERSION = 3
#: Filters decaying by ``e`` within this many top-rate samples (8 channel samples) are refitted: their
#: spectra are wider than a channel, so their responses there are distorted.
REFIT_DECAY = 8 * DECIMATION
#: The refit's ridge, relative to the mean energy of the refitted filters' responses, and the most
#: the largest amplitude may grow (beyond it the template is left as it is): float32 filters cannot
#: hold amplitudes that cancel.  Measured growth with this ridge: BBH median 1.3x (largest 1.8x),
#: BNS 1.9x (4.5x); without a ridge, 1e9x.
REFIT_RIDGE = 1e-2
REFIT_GROWTH = 16.0


def refit_short_filters(a, b, d, sample_rate: float, start: int, response, first: int, lag: int, target):
    """The amplitudes ``b`` with those of the short-lived filters (decay under :data:`REFIT_DECAY`
    samples) fitted by least squares so that the template's response in channels best matches
    ``target`` (the ideal response, aligned as ``response[n + lag] ~ target[n]``), the others kept:
    ``(b, response)``, the response by linearity; None when no filter is short-lived.

    A filter whose spectrum is wider than its channel comes out of the channels distorted (its
    response is sampled at the channel rate, its spectrum cut by the channel FIR).  The distortion is
    linear in ``b``, so fitting those filters' amplitudes through the channels (each filter's own
    response there, :func:`channel_columns`) recovers the overlap the single-rate least squares had
    (ALGORITHMS.md section 2, item 6, applied to the responses in channels).  BBH templates lost
    up to 0.006 of overlap without it (RESULTS.md, "Sub-band SPIIR")."""
    a = np.asarray(a, np.complex128)
    b = np.asarray(b, np.complex128)
    d = np.asarray(d, np.int64)
    free = np.flatnonzero(-1.0 / np.log(np.maximum(np.abs(a), 1e-300)) < REFIT_DECAY)
    if free.size == 0:
        return None
    columns = channel_columns(a[free], d[free], sample_rate, start)
    lo, hi = int(columns.lo.min()) - first, int(columns.hi.max()) - first
    if lo < 0 or hi > response.size:
        return None  # a filter's response outside the template's: leave the template as it is
    # normal equations with a ridge toward the amplitudes as they are: short-lived filters' responses
    # in the channels are nearly collinear, and an unregularised fit cancels amplitudes of 1e7 that
    # float32 filtering cannot hold
    gram = columns.gram()
    ridge = REFIT_RIDGE * np.trace(gram).real / free.size
    step = np.linalg.solve(gram + ridge * np.eye(free.size), columns.project(_residual(response, target, lag, lo, hi)))
    fitted = b[free] + step
    if np.abs(fitted).max() > REFIT_GROWTH * np.abs(b).max():
        return None
    out = b.copy()
    out[free] = fitted
    refitted = response.copy()
    refitted[lo:hi] += columns.combine(step)
    return out, refitted


def _residual(response: np.ndarray, target, lag: int, lo: int, hi: int) -> np.ndarray:
    """The target (aligned as ``response[n + lag] ~ target[n]``, scaled as the response matches it)
    less the response, on the response's samples ``lo ... hi - 1`` (``0 <= lo <= hi <= response.size``)."""
    t = np.asarray(target, np.complex128)
    n0, n1 = max(0, -lag), min(t.size, response.size - lag)
    scale = np.vdot(t[n0:n1], response[n0 + lag: n1 + lag]) / np.vdot(t, t)
    aligned = np.zeros(hi - lo, np.complex128)
    i0, i1 = max(lo - lag, 0), min(hi - lag, t.size)
    if i0 < i1:
        aligned[i0 + lag - lo: i1 + lag - lo] = scale * t[i0:i1]
    return aligned - response[lo:hi]


@dataclass(frozen=True)
class ChannelColumns:
    """Filters' responses in their channels to a unit impulse at top-rate sample ``start``, with
    ``b = 1`` (:func:`channel_columns`): filter ``i`` is ``rows[i, n] = b'_i a'_i^n`` (``powers[i, n]
    = a'_i^n``) at channel sample ``d[i] + n`` for ``n < tails[i]``, in channel ``channel[i]``;
    synthesized (:func:`channel_kernel`) it spans top-rate samples ``lo[i] <= t < hi[i]``.  What
    the refit's normal equations are made of, at the channel rate."""

    start: int
    channel: np.ndarray
    d: np.ndarray
    tails: np.ndarray
    b: np.ndarray
    powers: np.ndarray
    rows: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    @functools.cached_property
    def grid(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
        """``(channels, which, place, turn, span)``: the channels used, each filter's among them, where
        its samples fall in a row of ``span`` channel samples from ``d.min()`` (clipped where
        ``rows`` is zero), and the channels' modulation from top-rate sample ``lo.min()``."""
        channels, which = np.unique(self.channel, return_inverse=True)
        span = int((self.d + self.tails).max() - self.d.min())
        place = np.minimum((self.d - self.d.min())[:, None] + np.arange(self.rows.shape[1]), span - 1)
        return channels, which, place, modulation(channels, int(self.lo.min()) - self.start), span

    def gram(self) -> np.ndarray:
        """``G[p, q] = <column p, column q>`` over the top-rate samples, in closed form (:func:`_gram`)."""
        products, phase = kernel_products(self.start)
        out = np.empty((self.b.size, self.b.size), np.complex128)
        _gram(self.powers, self.b, self.d, self.tails, self.channel, products, phase, out)
        return out

    def project(self, y: np.ndarray) -> np.ndarray:
        """``<column i, y>`` for ``y`` on top-rate samples ``lo.min() ... hi.max() - 1``."""
        _, which, place, turn, span = self.grid
        _, into, phases, _ = channel_kernel(self.start)
        back = from_kernel(y, into, phases, turn, span)
        return np.sum(self.rows.conj() * back[which[:, None], place], axis=1)

    def combine(self, weights: np.ndarray) -> np.ndarray:
        """``sum_i weights[i] column i`` on top-rate samples ``lo.min() ... hi.max() - 1``."""
        channels, which, place, turn, span = self.grid
        rows = np.zeros((channels.size, span), np.complex128)
        np.add.at(rows, (np.broadcast_to(which[:, None], place.shape), place), weights[:, None] * self.rows)
        _, into, phases, size = channel_kernel(self.start)
        return through_kernel(rows, into, phases, size, turn).sum(axis=0)


def channel_columns(a, d, sample_rate: float, start: int) -> ChannelColumns:
    """Each filter's response in its channel with ``b = 1`` (:func:`impulse_response` of the filter
    alone): the geometric sequence ``b' a'^n`` from channel sample ``d'`` until it decays
    (:func:`gwbatch.spiir.construct.tail_lengths`)."""
    from gwbatch.spiir.construct import tail_lengths

    first, into, _, size = channel_kernel(start)
    channel = filter_channels(a, sample_rate)
    la, lb, ld = to_channels(a, np.ones(len(a)), d, channel)
    tails = tail_lengths(la)
    steps = np.empty((la.size, int(tails.max()) + 1), np.complex128)
    steps[:, 0] = 1.0
    steps[:, 1:] = la[:, None]
    powers = np.cumprod(steps, axis=1)
    rows = np.where(np.arange(powers.shape[1] - 1) < tails[:, None], lb[:, None] * powers[:, :-1], 0.0)
    lo = first + ld * DECIMATION
    hi = lo + (tails + into.size - 2) * DECIMATION + size
    return ChannelColumns(start, channel, ld, tails, lb, powers, rows, lo, hi)


@functools.cache
def channel_kernel(start: int, decimation: int = DECIMATION, taps: int = TAPS_PER_PHASE,
                   beta: float = KAISER_BETA) -> tuple[int, np.ndarray, np.ndarray, int]:
    """A unit impulse at top-rate sample ``start`` through a channel: ``(first, into, phases, size)``.
    In channel ``c`` the impulse is ``e^{-i w_c start} into`` (the analysis of the module docstring:
    ``p`` at ``j D - start + H`` for each channel sample ``j`` it reaches); a channel row ``r`` (the
    impulse through the filters) comes out as ``y[k] = e^{i w_c (first + k - start)} sum_j x[j] D
    p[k - j D]`` at top-rate sample ``first + k``, ``x`` the convolution of ``r`` and ``into`` (the
    synthesis); ``D p`` (``size`` taps) as its phases ``phases[L - 1 - l, q] = D p[l D + q]`` (zeros
    past its end).  Read-only, made once per shape."""
    fir = prototype(decimation, taps, beta)
    half = (fir.size - 1) // 2
    j = np.arange(-(-(start - half) // decimation), (start + half) // decimation + 1)
    into = fir[j * decimation - start + half]
    rows = -(-fir.size // decimation)
    phases = np.zeros(rows * decimation)
    phases[: fir.size] = decimation * fir
    phases = np.ascontiguousarray(phases.reshape(rows, decimation)[::-1])
    into.setflags(write=False)
    phases.setflags(write=False)
    return int(j[0]) * decimation - half, into, phases, int(fir.size)


@functools.cache
def kernel_products(start: int) -> tuple[np.ndarray, np.ndarray]:
    """What a channel sample of one channel row and one of another, ``Delta = c' - c`` channels
    (modulo ``2 D``) and ``s`` channel samples apart, sum to over the top-rate samples (:func:`_gram`):
    ``products[Delta, s + L - 1] = sum_u e^{i pi Delta u / D} g[u] g[u - s D]`` for ``|s| < L``, ``g``
    a channel sample's response to the impulse (:func:`channel_kernel`'s ``into`` at every ``D``-th
    sample convolved with ``D p``; ``L D`` taps or fewer), and ``phase[Delta] = e^{i pi Delta (first -
    start) / D}``.  Read-only, made once per ``start``."""
    first, into, _, _ = channel_kernel(start)
    g = np.zeros((into.size - 1) * DECIMATION + 1)
    g[::DECIMATION] = into
    g = np.convolve(g, DECIMATION * prototype())
    rows = -(-g.size // DECIMATION)
    u = np.arange(g.size)
    lags = np.arange(1 - rows, rows)
    shifted = u[None, :] - lags[:, None] * DECIMATION
    pairs = np.where((shifted >= 0) & (shifted < g.size), g[None, :] * g[np.clip(shifted, 0, g.size - 1)], 0.0)
    period = 2 * DECIMATION
    turn = np.exp(1j * np.pi * np.arange(period) / DECIMATION)
    delta = np.arange(period)
    products = turn[(delta[:, None] * u[None, :]) % period] @ pairs.T
    phase = turn[(delta * (first - start)) % period]
    products.setflags(write=False)
    phase.setflags(write=False)
    return products, phase


@numba.njit(cache=True)
def _gram(powers, b, start, length, channel, products, phase, out):
    """``out[p, q]``: the inner product over the top-rate samples of filters ``p`` and ``q``'s
    responses in channels, ``r_p[j] = b_p a_p^(j - start_p)`` (``a_p^n = powers[p, n]``) for
    ``start_p <= j < start_p + length_p`` in channel ``channel[p]``: ``phase[Delta] sum_s
    products[Delta, s] sum_j conj(r_p[j]) (-1)^(Delta j) r_q[j + s]`` (:func:`kernel_products`),
    the sum over ``j`` a geometric series, ``conj(r_p[j0]) r_q[j0 + s] (-1)^(Delta j0) (1 - x^m) /
    (1 - x)`` with ``x = (-1)^Delta conj(a_p) a_q`` over the ``m`` samples from ``j0`` where both are."""
    k = b.size
    period = products.shape[0]
    lags = (products.shape[1] + 1) // 2
    for p in range(k):
        for q in range(p, k):
            delta = (channel[q] - channel[p]) % period
            odd = delta % 2 == 1
            x = np.conj(powers[p, 1]) * powers[q, 1]
            if odd:
                x = -x
            acc = 0j
            for s in range(1 - lags, lags):
                j0 = max(start[p], start[q] - s)
                m = min(start[p] + length[p], start[q] + length[q] - s) - j0
                if m <= 0:
                    continue
                xm = np.conj(powers[p, m]) * powers[q, m]
                if odd and m % 2 == 1:
                    xm = -xm
                term = np.conj(powers[p, j0 - start[p]]) * powers[q, j0 + s - start[q]] * (1.0 - xm)
                if odd and j0 % 2 == 1:
                    term = -term
                acc += products[delta, s + lags - 1] * term
            out[p, q] = phase[delta] * np.conj(b[p]) * b[q] * acc / (1.0 - x)
            out[q, p] = np.conj(out[p, q])


def modulation(channel, t0, decimation: int = DECIMATION) -> np.ndarray:
    """``e^{i pi c t / D}`` over its period from ``t = t0`` as ``(..., 2, D)`` (``channel`` and ``t0``
    broadcast): ``[..., m % 2, q]`` is sample ``t0 + m D + q``'s."""
    period = 2 * decimation
    turn = np.exp(1j * np.pi * np.arange(period) / decimation)
    q = (np.asarray(channel)[..., None] * (np.asarray(t0)[..., None] + np.arange(period))) % period
    return turn[q].reshape(*q.shape[:-1], 2, decimation)


def through_kernel(rows: np.ndarray, into: np.ndarray, phases: np.ndarray, size: int, turn: np.ndarray) -> np.ndarray:
    """Channel rows (``(..., n)``) through :func:`channel_kernel`'s synthesis, modulated by ``turn``
    (:func:`modulation`'s, broadcast against the rows): ``(..., (n + J - 2) D + size)`` complex128,
    ``J`` samples ``into``.  Each row's real and imaginary parts convolved with ``into``, then ``D p``'s
    phases times the sliding windows of them (one matrix product), then modulated
    (:func:`_modulate`)."""
    taps, decimation = phases.shape
    shape = rows.shape[:-1]
    flat = rows.reshape(-1, rows.shape[-1])
    n = flat.shape[1] + into.size - 1
    padded = np.zeros((2, flat.shape[0], n + 2 * (taps - 1)))
    for i, row in enumerate(flat):
        padded[0, i, taps - 1: taps - 1 + n] = np.convolve(row.real, into)
        padded[1, i, taps - 1: taps - 1 + n] = np.convolve(row.imag, into)
    windows = np.ascontiguousarray(np.lib.stride_tricks.sliding_window_view(padded, taps, axis=-1))
    y = (windows.reshape(-1, taps) @ phases).reshape(2, flat.shape[0], -1, decimation)
    out = np.empty((flat.shape[0], (n - 1) * decimation + size), np.complex128)
    turn = np.ascontiguousarray(np.broadcast_to(turn, (*shape, 2, decimation))).reshape(-1, 2, decimation)
    _modulate(y[0], y[1], turn, out)
    return out.reshape(*shape, -1)


@numba.njit(cache=True)
def _modulate(re, im, turn, out):
    """``out[r, m D + q] = (re + i im)[r, m, q] turn[r, m % 2, q]`` (as far as ``out`` reaches)."""
    decimation = re.shape[2]
    for r in range(out.shape[0]):
        for m in range(re.shape[1]):
            for q in range(min(decimation, out.shape[1] - m * decimation)):
                out[r, m * decimation + q] = complex(re[r, m, q], im[r, m, q]) * turn[r, m % 2, q]


def from_kernel(y: np.ndarray, into: np.ndarray, phases: np.ndarray, turn: np.ndarray, n: int) -> np.ndarray:
    """The adjoint of :func:`through_kernel`: the top-rate series ``y`` (``(n + J - 2) D + size``
    samples at most) taken into each channel of ``turn`` (``(channels, 2, D)``), ``x_c[j] = sum_k
    conj(turn_c[k]) y[k] sum_i into[i] D p[k - (j + i) D]`` for ``j < n``: ``(channels, n)``
    complex128."""
    taps, decimation = phases.shape
    blocks = n + into.size + taps - 2
    z = np.zeros((blocks + blocks % 2) * decimation, np.complex128)
    z[: y.size] = y
    z = (z.reshape(1, -1, 2, decimation) * turn.conj()[:, None]).reshape(turn.shape[0], -1, decimation)
    parts = np.stack([z.real, z.imag]) @ phases[::-1].T  # [., ., m, l] = sum_q z[m, q] D p[l D + q]
    at_rate = np.zeros((turn.shape[0], n + into.size - 1), np.complex128)
    for l in range(taps):
        at_rate += parts[0, :, l: l + at_rate.shape[1], l] + 1j * parts[1, :, l: l + at_rate.shape[1], l]
    out = np.zeros((turn.shape[0], n), np.complex128)
    for i, v in enumerate(into):
        out += v * at_rate[:, i: i + n]
    return out


def impulse_response(a, b, d, sample_rate: float, start: int, decimation: int = DECIMATION,
                     taps: int = TAPS_PER_PHASE, beta: float = KAISER_BETA, nest: bool = True):
    """The top-rate response of one template's filters run in channels to a unit impulse at sample
    ``start`` (float64): ``(response, first sample)`` (channel FIR :func:`prototype` of ``taps`` and
    ``beta``; each channel's row through :func:`channel_kernel`; the slowly decaying filters in their
    nested channels when ``nest``, :func:`nested_response`).  The system is periodic in ``D`` (the
    nested channels': :data:`PERIOD`); the phase of ``start`` moves overlaps by ~1e-4."""
    from gwbatch.spiir.construct import impulse_response as response

    a = np.asarray(a, np.complex128)
    b = np.asarray(b, np.complex128)
    d = np.asarray(d, np.int64)
    first, into, phases, size = channel_kernel(start, decimation, taps, beta)
    slow = nested_filters(a) if nest and decimation == DECIMATION else np.zeros(a.size, bool)
    channel = filter_channels(a, sample_rate, decimation)
    parts = []
    for c in np.unique(channel[~slow]).tolist():
        mine = (channel == c) & ~slow
        la, lb, ld = to_channels(a[mine], b[mine], d[mine], np.full(int(mine.sum()), c), decimation)
        turn = modulation(c, first - start, decimation)
        parts.append((through_kernel(response(la, lb, ld), into, phases, size, turn), first))
    if slow.any():
        parts.append(nested_response(a[slow], b[slow], d[slow], sample_rate, start))
    lo = min(f for _, f in parts)
    out = np.zeros(max(f + y.size for y, f in parts) - lo, dtype=np.complex128)
    for y, f in parts:
        out[f - lo: f - lo + y.size] += y
    return out, lo


def nested_response(a, b, d, sample_rate: float, start: int):
    """The top-rate response of filters run in nested channels (:func:`move_template`) to a unit
    impulse at sample ``start`` (float64, the direct forms): ``(response, first sample)``.  The
    impulse in channel ``c`` (:func:`channel_kernel`'s ``into``, modulated), cut into the sub-channels,
    through each sub-channel's filters, synthesized back into the channel and then to the top rate."""
    from gwbatch.spiir.construct import impulse_response as response

    la, lb, ld, fine, _ = move_template(a, b, d, sample_rate)
    first, into, phases, size = channel_kernel(start)
    _, _, sub_phases, sub_size = channel_kernel(0, NEST)
    half = (prototype().size - 1) // 2
    j0 = (first + half) // DECIMATION  # into[i] is channel sample j0 + i
    p2 = prototype(NEST)
    h2 = (p2.size - 1) // 2
    parent = parent_of(fine)
    parts = []
    for c in np.unique(parent).tolist():
        u = np.exp(-1j * np.pi * c * start / DECIMATION) * into
        m0 = -(-(j0 - h2) // NEST)  # the first sub-channel sample the impulse reaches
        m1 = (j0 + u.size - 1 + h2) // NEST
        jj = np.arange(m0, m1 + 1)[:, None] * NEST - h2 + np.arange(p2.size)[None, :]  # channel samples read
        inside = (jj >= j0) & (jj < j0 + u.size)
        subs = np.unique(fine[parent == c])
        rows = []
        for s in subs.tolist():
            k = s - NEST * c
            x = np.sum(np.where(inside, p2 * u[np.clip(jj - j0, 0, u.size - 1)]
                                * np.exp(-1j * np.pi * k * jj / NEST), 0.0), axis=1)
            mine = fine == s
            rows.append(np.convolve(x, response(la[mine], lb[mine], ld[mine])))  # sub-channel samples m0 ...
        w = np.zeros((len(rows), max(r.size for r in rows)), np.complex128)
        for i, r in enumerate(rows):
            w[i, : r.size] = r
        # back into the channel (channel sample m0 NEST - h2 on), then to the top rate, both through
        # the synthesis' phases (channel_kernel) and the modulation over its period
        jv = m0 * NEST - h2
        v = through_kernel(w, np.ones(1), sub_phases, sub_size, modulation(subs - NEST * c, jv, NEST)).sum(axis=0)
        t0 = jv * DECIMATION - half
        parts.append((through_kernel(v[None, :], np.ones(1), phases, size, modulation(c, t0))[0], t0))
    lo = min(t for _, t in parts)
    out = np.zeros(max(t + z.size for z, t in parts) - lo, np.complex128)
    for z, t in parts:
        out[t - lo: t - lo + z.size] += z
    return out, lo
