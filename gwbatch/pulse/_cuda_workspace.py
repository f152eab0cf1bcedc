"""Every round of a boxcar plan on the GPU: the calling thread's workspace (hit lists, counts,
constants, the series the launches write) and the queued launches of the two kernels, the
per-round one (:mod:`gwbatch.pulse._cuda`) and the fused one (:mod:`gwbatch.pulse._cuda_fused`).

No kernel of its own.  CPU twin: :func:`gwbatch.pulse.boxcar.run_rounds`.
"""

from __future__ import annotations

import threading

import numpy as np

from gwbatch._xp import to_host
from gwbatch.pulse._cuda import _hit_buffers, _launch, block_length, capacity
from gwbatch.pulse._cuda_fused import GROUP_ROUNDS, fused_fits, round_groups
from gwbatch.pulse._cuda_fused import launch as launch_group


class _Constants:
    """Every round's constants in one device buffer (rounds one after the other), each uploaded from
    one pinned host buffer when it is known, queued on the current stream: the host does not wait for
    the kernels before it (a pageable copy would).  Kept alive until the stream has passed the copies."""

    def __init__(self, rounds):
        import cupy
        import cupyx

        sizes = [4 * r.n_widths for r in rounds]
        self.at = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.pinned = cupyx.empty_pinned(int(self.at[-1]), np.float32)
        self.device = cupy.empty(int(self.at[-1]), np.float32)

    def _stage(self, k: int, host: np.ndarray) -> slice:
        lo, hi = self.at[k], self.at[k + 1]
        if host.size != hi - lo:
            raise ValueError(f"round {k} needs {hi - lo} constants, got {host.size}")
        self.pinned[lo:hi] = host
        return slice(lo, hi)

    def upload(self, k: int, host: np.ndarray):
        """Round ``k``'s constants, as soon as they are known (one copy each)."""
        import cupy

        at = self._stage(k, host)
        self.device[at].set(self.pinned[at], stream=cupy.cuda.get_current_stream())
        return self.device[at]

    def upload_all(self, hosts: list[np.ndarray]) -> None:
        """Every round's constants at once (one copy)."""
        import cupy

        for k, host in enumerate(hosts):
            self._stage(k, host)
        self.device.set(self.pinned, stream=cupy.cuda.get_current_stream())

    def rounds(self, k0: int, k1: int):
        """The device constants of rounds ``k0 .. k1 - 1``, one after the other."""
        return self.device[self.at[k0] : self.at[k1]]


def run_rounds(series, valid, rounds, round_consts, threshold: float, energy: bool, n: int,
               measures_series: bool = True) -> list[tuple]:
    """Every round of a plan over one series (the contract of :func:`gwbatch.pulse.boxcar.run_rounds`).

    The launches are queued back to back without waiting into the thread's workspace
    (:func:`workspace`: every round's hit list, constants and series, allocated once per plan and
    length), one synchronisation reads the counts, and the hits come back in three copies.  The
    energy series, when no round's constants need its own series (``measures_series=False``), runs
    the fused kernel: ``GROUP_ROUNDS`` rounds per launch from one read of the first one's series,
    which writes only the next group's (:mod:`gwbatch.pulse._cuda_fused`; :func:`fused_fits`); otherwise one
    launch per round, each writing the next round's series.
    """
    import cupy

    series = cupy.ascontiguousarray(series, dtype=cupy.float32)
    fused = energy and not measures_series and fused_fits(rounds)
    ws = workspace(rounds, n, series.size, fused)
    ws.zero_counts()
    launches = (_GroupLaunches if fused else _RoundLaunches)(ws, series, valid, round_consts, threshold, energy)
    counts, starts, widths, snrs = ws.hits
    caps, at = ws.caps, ws.at
    found = counts.get().astype(np.int64)
    if not found.any():
        return [(np.empty(0, np.int64), np.empty(0, np.int32), np.empty(0, np.float32)) for _ in rounds]
    kept = np.minimum(found, caps)
    pick = [slice(at[k], at[k] + kept[k]) for k in range(len(rounds)) if kept[k]]
    host = [cupy.concatenate([a[sl] for sl in pick]).get() for a in (starts, widths, snrs)]
    edges = np.concatenate([[0], np.cumsum(kept)])
    out = []
    for k in range(len(rounds)):
        if found[k] > caps[k]:  # more hits than room: run this round again with room for all
            c, s, w, z = _hit_buffers([int(found[k])])
            launches.rerun(k, c, s, w, z)
            idx, width, snr = s.get(), w.get(), z.get()
        else:
            idx, width, snr = (h[edges[k] : edges[k + 1]] for h in host)
        order = np.argsort(idx, kind="stable")  # atomics append in any order
        out.append((idx[order], width[order], snr[order]))
    return out


class _Workspace:
    """What :func:`run_rounds` launches into for one plan, original length ``n`` and series size:
    every round's hit list (one allocation per field) and count, their offsets and capacities on the
    device (``room``), the rounds' constants, and the series the launches write (each round's next
    series, or each group's)."""

    def __init__(self, rounds, n: int, size: int, fused: bool):
        import cupy

        self.key = (tuple(rounds), n, size, fused)
        self.rounds = tuple(rounds)
        self.caps = [capacity(-(-n // r.decimation)) for r in rounds]
        self.at = np.concatenate([[0], np.cumsum(self.caps)]).astype(np.int64)
        self.n_out = [-(-n // r.decimation) for r in rounds]
        self.hits = _hit_buffers(self.caps)
        self.room = cupy.asarray(np.column_stack([self.at[:-1], self.caps]).astype(np.int64).ravel())
        self.constants = _Constants(rounds)
        if fused:  # each group but the last writes the next group's series
            sizes, m = [], size
            for ks in round_groups(len(rounds)):
                m >>= len(ks)
                sizes.append(m)
            self.series = [cupy.empty(m, dtype=cupy.float32) for m in sizes[:-1]] + [None]
        else:
            n_next = [size >> k for k in range(1, len(rounds))] + [0]  # the last round writes none
            self.decimated = cupy.empty(int(sum(n_next)), dtype=cupy.float32)
            edges = np.concatenate([[0], np.cumsum(n_next)])
            self.series = [self.decimated[edges[k] : edges[k + 1]] for k in range(len(rounds))]

    def zero_counts(self) -> None:
        import cupy

        counts = self.hits[0]
        cupy.cuda.runtime.memsetAsync(counts.data.ptr, 0, counts.nbytes, cupy.cuda.get_current_stream().ptr)


_THREAD = threading.local()


def workspace(rounds, n: int, size: int, fused: bool) -> _Workspace:
    """The calling thread's workspace for this plan and length, made anew when they change.  Reusing
    it is safe: :func:`run_rounds` synchronises before it returns, so nothing queued still reads it,
    and each thread (e.g. a worker's two chunk tasks) has its own: allocations and the upload of
    the hit lists' offsets (``room``) happen once per plan and length, not per series."""
    ws = getattr(_THREAD, "workspace", None)
    if ws is None or ws.key != (tuple(rounds), n, size, fused):
        _THREAD.workspace = None  # free the old one first
        ws = _THREAD.workspace = _Workspace(rounds, n, size, fused)
    return ws


class _RoundLaunches:
    """One launch per round, queued; :meth:`rerun` runs round ``k`` alone into other hit buffers."""

    def __init__(self, ws: _Workspace, series, valid, round_consts, threshold, energy):
        counts, starts, widths, snrs = ws.hits
        self.inputs = []
        self.ws = ws
        for k, rnd in enumerate(ws.rounds):
            host = to_host(round_consts(k, series)).astype(np.float32)
            block = block_length(energy, rnd.first_width, rnd.last_width, host)
            args = (series, valid, rnd.decimation, rnd.first_width, rnd.last_width, ws.constants.upload(k, host),
                    threshold, energy, ws.n_out[k])
            lo, hi = ws.at[k], ws.at[k + 1]
            _launch(*args, counts[k : k + 1], starts[lo:hi], widths[lo:hi], snrs[lo:hi], ws.series[k], block)
            self.inputs.append((args, block))
            series = ws.series[k]

    def rerun(self, k: int, count, starts, widths, snrs) -> None:
        args, block = self.inputs[k]
        _launch(*args, count, starts, widths, snrs, self.ws.series[k][:0], block)


class _GroupLaunches:
    """The fused kernel, ``GROUP_ROUNDS`` rounds per launch (the energy series, with constants that
    need no series), queued; :meth:`rerun` runs round ``k`` alone by the per-round kernel on its own
    series (the group's input decimated by the twin's pairwise sums)."""

    def __init__(self, ws: _Workspace, series, valid, round_consts, threshold, energy):
        counts, starts, widths, snrs = ws.hits
        rounds = ws.rounds
        if series.data.ptr % 16:  # the kernel reads 16-byte vectors
            series = series.copy()
        self.ws, self.valid, self.threshold = ws, valid, threshold
        hosts = [to_host(round_consts(k, None)).astype(np.float32) for k in range(len(rounds))]
        self.blocks = [block_length(True, r.first_width, r.last_width, h) for r, h in zip(rounds, hosts)]
        ws.constants.upload_all(hosts)
        self.inputs = []
        n = ws.n_out[0]  # round 0 is undecimated
        for g, ks in enumerate(round_groups(len(rounds))):
            k0, k1 = ks.start, ks.stop
            spec = tuple((rounds[k].first_width, rounds[k].last_width, self.blocks[k]) for k in ks)
            launch_group(spec, series, n, k0, valid, ws.constants.rounds(k0, k1), threshold, ws.series[g],
                         counts[k0:k1], ws.room[2 * k0 : 2 * k1], starts, widths, snrs)
            self.inputs.append((series, k0))
            series = ws.series[g]

    def rerun(self, k: int, count, starts, widths, snrs) -> None:
        y, k0 = next((y, k0) for y, k0 in self.inputs if k0 <= k < k0 + GROUP_ROUNDS)
        for _ in range(k - k0):
            half = y.size // 2
            y = y[0 : 2 * half : 2] + y[1 : 2 * half : 2]
        rnd = self.ws.rounds[k]
        _launch(y, self.valid, rnd.decimation, rnd.first_width, rnd.last_width, self.ws.constants.rounds(k, k + 1),
                self.threshold, True, self.ws.n_out[k], count, starts, widths, snrs, y[:0], self.blocks[k])


