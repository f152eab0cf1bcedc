"""One boxcar round: the NumPy twin of the CUDA kernel and the backend dispatch.

Contract (both backends), for a round of widths ``first..last`` over ``series`` (float32, at least
``n_out + last - 1`` samples): for every start ``i < n_out`` whose original sample ``i * stride``
is valid, the best SNR over the widths, where width ``w``'s SNR follows from its boxcar sum
``B = series[i] + ... + series[i+w-1]`` and the per-width constants ``consts = [T, p, q, r]``
(each of length ``last - first + 1``): ``z = B p - q`` (amplitude) or ``z = (cbrt(B p) - q) r``
(energy); ``T`` is the sum at which ``z`` reaches the threshold.  Returns the starts whose best SNR
is at least ``threshold``, sorted, as ``(start int64, width int32, snr float32, next_series)`` where
``next_series`` (float32) holds sums of sample pairs, the next round's input.
"""

from __future__ import annotations

import numpy as np

from gwbatch._xp import array_namespace


def boxcar_best_numpy(y, first: int, last: int, p, q, r, energy: bool, starts=None):
    """Best SNR (float32) and width (int32) over widths ``first..last`` per start: every start, or
    only ``starts`` (float64 prefix sums)."""
    y = np.asarray(y, dtype=np.float32)
    n_out = y.size - last + 1
    if n_out <= 0:
        return np.empty(0, np.float32), np.empty(0, np.int32)
    return _best(_prefix_sums(y), n_out, first, last, p, q, r, energy, starts)


def _prefix_sums(y) -> np.ndarray:
    return np.concatenate([[0.0], np.cumsum(y, dtype=np.float64)])


def _best(prefix, n_out: int, first: int, last: int, p, q, r, energy: bool, starts=None):
    if starts is None:
        low, at = prefix[:n_out], slice(None)
    else:
        at = np.asarray(starts, dtype=np.int64)
        low = prefix[at]
    best = np.full(low.size, -np.inf, dtype=np.float64)
    width = np.zeros(low.size, dtype=np.int32)
    for j, w in enumerate(range(first, last + 1)):
        b = (prefix[w : w + n_out] if starts is None else prefix[at + w]) - low
        z = (np.cbrt(b * p[j]) - q[j]) * r[j] if energy else b * p[j] - q[j]
        better = z > best
        best[better] = z[better]
        width[better] = w
    return best.astype(np.float32), width


def boxcar_round_numpy(series, valid, valid_stride: int, first: int, last: int, consts, threshold: float,
                       energy: bool, n_out: int):
    """The CUDA kernel's round on the host, with its two passes: a start is a candidate when some
    width's sum reaches that width's threshold sum ``T`` (one subtraction and one comparison per
    width and start); only candidates get their SNRs computed and their best width chosen."""
    series = np.asarray(series, dtype=np.float32)
    nw = last - first + 1
    consts = np.asarray(consts, dtype=np.float64)
    t, p, q, r = consts[:nw], consts[nw : 2 * nw], consts[2 * nw : 3 * nw], consts[3 * nw :]
    y = series[: n_out + last - 1]
    n_out = min(n_out, y.size - last + 1)
    if n_out > 0:
        prefix = _prefix_sums(y)
        passed = np.zeros(n_out, dtype=bool)
        for j, w in enumerate(range(first, last + 1)):
            passed |= prefix[w : w + n_out] - prefix[:n_out] >= t[j]
        candidates = np.flatnonzero(passed & np.asarray(valid)[::valid_stride][:n_out].astype(bool))
        best, width = _best(prefix, n_out, first, last, p, q, r, energy, candidates)
        keep = best >= threshold
        idx, width, best = candidates[keep], width[keep], best[keep]
    else:
        idx, width, best = np.empty(0, np.int64), np.empty(0, np.int32), np.empty(0, np.float32)
    m = series.size // 2
    nxt = series[0 : 2 * m : 2] + series[1 : 2 * m : 2]
    return idx.astype(np.int64), width, best, nxt


def run_rounds(series, valid, rounds, round_consts, threshold: float, energy: bool, n: int,
               measures_series: bool = True) -> list[tuple]:
    """All rounds of a plan over one series: host ``(start, width, snr)`` per round.

    ``rounds`` are the plan's rounds; ``round_consts(k, series_k)`` gives round ``k``'s constants from
    its input series, which it may measure; with ``measures_series=False`` it does not, and may be
    given ``None`` instead (the GPU then runs several rounds per launch without writing their
    series).  On the GPU every launch is queued without waiting and the results are read back with
    one synchronisation (:func:`gwbatch.pulse._cuda_workspace.run_rounds`); the NumPy twin runs the rounds in
    turn.
    """
    if array_namespace(series) is not np:
        from gwbatch.pulse._cuda_workspace import run_rounds as run_rounds_cuda

        return run_rounds_cuda(series, valid, rounds, round_consts, threshold, energy, n, measures_series)
    out = []
    for k, rnd in enumerate(rounds):
        d = rnd.decimation
        idx, width, snr, series = boxcar_round_numpy(series, valid, d, rnd.first_width, rnd.last_width,
                                                     round_consts(k, series), threshold, energy, -(-n // d))
        out.append((idx, width, snr))
    return out


def boxcar_round(series, valid, valid_stride: int, first: int, last: int, consts, threshold: float,
                 energy: bool, n_out: int):
    """One round on either backend (the contract above), synchronously."""
    if array_namespace(series) is np:
        return boxcar_round_numpy(series, valid, valid_stride, first, last, consts, threshold, energy, n_out)
    from gwbatch.pulse._cuda import one_round

    return one_round(series, valid, valid_stride, first, last, consts, threshold, energy, n_out)
