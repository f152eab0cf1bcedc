"""Deep slides of two detectors' triggers, loudest trigger first (the pulse search's deep background).

A deep slide keeps only its events ranked at or above a cut (:mod:`gwbatch.background.significance`);
an event of two triggers ranked ``sqrt(s_a^2 + s_b^2) >= cut`` has a member of SNR
``>= cut / sqrt(2)``.  So instead of one coincidence pass per slide (each over every trigger),
every trigger in turn, loudest first, is a *pivot*: the other detector's triggers that coincide
with it in each deep slide are found by two sorted searches per (pivot, slide), vectorised over the
slides, and checked exactly as :func:`gwbatch.candidates.coincidence.coincident_pairs` checks them.
After each block of pivots the cut rises to the ``tail + 1``-th loudest deep event so far that is
not a louder zero-lag candidate's own (they share a trigger): a campaign keeps about ``tail`` deep
events however many slides it runs.  Pivots stop once they are quieter than ``cut / sqrt(2)``: no
pair left can reach the cut.  The events at or above the final cut are then clustered per slide
exactly as a whole slide clusters them, so they are the events the whole slides keep above that
cut (``tests/test_significance.py``); the cost is set by the loud triggers, not by the slides.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gwbatch.candidates.coincidence import IfoTriggers, cluster_per_key

#: (pivot, slide) searches formed at once.
QUERY_BLOCK = 1 << 22


def _sorted_with_wrap(t: np.ndarray, ring: float):
    """``t`` sorted, with copies at ``-ring`` and ``+ring`` (for searches across the wrap): times and
    the trigger each came from."""
    order = np.argsort(t, kind="stable")
    times = np.concatenate([t[order] - ring, t[order], t[order] + ring])
    return times, np.tile(order, 3)


def _partners(center: np.ndarray, times: np.ndarray, index: np.ndarray, reach: float):
    """Per row of ``center`` (pivot, slide), the triggers of ``times`` within ``reach`` (a superset
    of the coincident ones): ``(row, column, trigger)``."""
    slack = 1e-9 * (1.0 + np.abs(times).max(initial=0.0))
    left = np.searchsorted(times, center - reach - slack, side="left")
    right = np.searchsorted(times, center + reach + slack, side="right")
    count = (right - left).ravel()
    flat = np.repeat(np.arange(count.size), count)
    pos = np.repeat(left.ravel() - np.concatenate([[0], np.cumsum(count)[:-1]]), count) + np.arange(count.sum())
    row, col = np.divmod(flat, center.shape[1])
    return row, col, index[pos]


def _coincident(ta, tb_moved, ua, ub, max_dt: float, reach: float, ring: float) -> np.ndarray:
    """``coincident_pairs``'s test on pairs, with its copies of ``b`` across the wrap."""
    ok = np.abs(ta - tb_moved) <= max_dt + ua + ub
    low = tb_moved > ring - reach
    ok |= low & (np.abs(ta - (tb_moved - ring)) <= max_dt + ua + ub)
    high = tb_moved < reach
    ok |= high & (np.abs(ta - (tb_moved + ring)) <= max_dt + ua + ub)
    return ok


def deep_pairs(a: IfoTriggers, b: IfoTriggers, shifts: np.ndarray, first_slide: int, *, ring: float, max_dt: float,
               cluster_window: float, cut: float, tail: int, own=None) -> tuple[pd.DataFrame, float]:
    """The clustered events of two-detector deep slides ranked at least the returned cut, and that cut.

    ``shifts``: ``(D, 2)`` seconds (:func:`gwbatch.background.slides.slide_shifts`' rows of the deep
    slides, numbered from ``first_slide``); ``max_dt``: light travel time plus window; ``cut``: the
    starting cut; ``own(events) -> mask``: the events that are a louder zero-lag candidate's own
    (left out when the cut rises; None: none are).  Columns as the slides' events: ``i0``, ``i1``,
    ``n_ifos``, ``stat``, ``time``, ``slide``.
    """
    empty = pd.DataFrame({"i0": np.zeros(0, np.int64), "i1": np.zeros(0, np.int64), "n_ifos": np.zeros(0, np.int64),
                          "stat": np.zeros(0), "time": np.zeros(0), "slide": np.zeros(0, np.int64)})
    if a.time.size == 0 or b.time.size == 0 or shifts.shape[0] == 0:
        return empty, cut
    if (a.key is None) != (b.key is None):
        raise ValueError("both detectors' triggers carry keys or neither does")
    reach = max_dt + a.uncertainty.max() + b.uncertainty.max()
    shift_a, shift_b = shifts[:, 0], shifts[:, 1]
    sorted_a, sorted_b = _sorted_with_wrap(a.time, ring), _sorted_with_wrap(b.time, ring)
    pivots = np.concatenate([np.stack([np.zeros(a.time.size), np.arange(a.time.size), a.snr], axis=1),
                             np.stack([np.ones(b.time.size), np.arange(b.time.size), b.snr], axis=1)])
    pivots = pivots[np.lexsort((pivots[:, 1], pivots[:, 0], -pivots[:, 2]))]
    block = max(1, QUERY_BLOCK // shifts.shape[0])
    found: list[pd.DataFrame] = [empty]
    for first in range(0, pivots.shape[0], block):
        part = pivots[first:first + block]
        live = 2.0 * part[:, 2] ** 2 >= cut * cut * (1.0 - 1e-12) if cut > 0 else np.ones(part.shape[0], bool)
        if not live.any():
            break
        part = part[live]
        pairs = []
        for side in (0, 1):
            idx = part[part[:, 0] == side, 1].astype(np.int64)
            if idx.size == 0:
                continue
            if side == 0:  # pivots of a: b's triggers moved into their windows
                center = np.mod(np.mod(a.time[idx, None] + shift_a[None, :], ring) - shift_b[None, :], ring)
                row, col, other = _partners(center, *sorted_b, reach)
                pairs.append((idx[row], other, col))
            else:  # pivots of b: a's triggers near b's moved times
                center = np.mod(np.mod(b.time[idx, None] + shift_b[None, :], ring) - shift_a[None, :], ring)
                row, col, other = _partners(center, *sorted_a, reach)
                pairs.append((other, idx[row], col))
        if pairs:
            ia, ib, col = (np.concatenate(x) for x in zip(*pairs))
            ta = np.mod(a.time[ia] + shift_a[col], ring)
            tb = np.mod(b.time[ib] + shift_b[col], ring)
            ok = _coincident(ta, tb, a.uncertainty[ia], b.uncertainty[ib], max_dt, reach, ring)
            if a.key is not None:
                ok &= a.key[ia] == b.key[ib]
            sa, sb = a.snr[ia], b.snr[ib]
            snr2 = np.zeros(ia.size) + sa * sa
            snr2 = snr2 + sb * sb
            stat = np.sqrt(snr2)
            ok &= stat >= cut
            time = np.where(sb > sa, tb, ta)
            found.append(pd.DataFrame({"i0": ia[ok], "i1": ib[ok], "n_ifos": 2, "stat": stat[ok], "time": time[ok],
                                       "slide": first_slide + col[ok]}))
        events = _clustered(found, cut, cluster_window)
        noise = events["stat"].to_numpy()
        if own is not None and noise.size:
            noise = noise[~own(events)]
        if noise.size > tail:
            cut = max(cut, float(np.sort(noise)[::-1][tail]))
        found = [events[events["stat"].to_numpy() >= cut]]
    return _clustered(found, cut, cluster_window), cut


def _clustered(frames: list[pd.DataFrame], cut: float, window: float) -> pd.DataFrame:
    """Distinct events at or above ``cut``, clustered per slide as a whole slide clusters them (in
    member order, loudest within ``window`` kept)."""
    events = pd.concat(frames, ignore_index=True).drop_duplicates(subset=["slide", "i0", "i1"])
    events = events[events["stat"].to_numpy() >= cut].sort_values(["slide", "i0", "i1"], kind="stable")
    keep = cluster_per_key(events["slide"].to_numpy(), events["time"].to_numpy(), events["stat"].to_numpy(), window)
    return events[keep].reset_index(drop=True)
