"""Multi-detector coincidence and time clustering (ALGORITHMS.md §6), used by every search.

Triggers of detectors ``a`` and ``b`` (times already shifted for the slide, on the ring ``[0, L)``)
coincide when ``|t_a - t_b| <= T_ab + window + u_a + u_b``, with ``T_ab`` the light travel time
and ``u`` each trigger's own timing uncertainty (the pulse search uses a quarter of the boxcar
duration), and, when the triggers carry keys, when their keys are equal (matched-filter searches
require the same template in every detector).  Coincidences of more detectors are cliques: every pair of members coincides.  All
coincidences of ``min_ifos`` or more detectors are kept and then clustered in time, keeping each
one that is the loudest within ``cluster_window`` of itself; zero lag and every slide go through
exactly the same steps (PyCBC #4302).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class IfoTriggers:
    """One detector's triggers for coincidence: ring time (s), timing uncertainty (s), ranking SNR,
    and optionally a key that coincident triggers must share (the template, for matched filters)."""

    time: np.ndarray
    uncertainty: np.ndarray
    snr: np.ndarray
    key: np.ndarray | None = None


def coincident_pairs(a: IfoTriggers, b: IfoTriggers, max_dt: float, ring: float) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs ``(i, j)`` with ``|t_a[i] - t_b[j]|`` (on the ring) within the allowed window and,
    for keyed triggers, equal keys.

    Keys become blocks of a combined coordinate ``key * stride + t`` with ``stride`` wider than the
    ring plus both reaches, so one sorted search finds same-key neighbours only.
    """
    if a.time.size == 0 or b.time.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    reach = max_dt + a.uncertainty.max() + b.uncertainty.max()
    keyed = a.key is not None and b.key is not None
    stride = ring + 4.0 * reach + 1.0
    base_a = a.key.astype(np.float64) * stride if keyed else 0.0
    base_b = b.key.astype(np.float64) * stride if keyed else np.zeros(b.time.size)
    # Copies of b's triggers shifted by -L and +L catch pairs across the ring's wrap.
    lo_wrap = b.time > ring - reach
    hi_wrap = b.time < reach
    times = np.concatenate([b.time[lo_wrap] - ring, b.time, b.time[hi_wrap] + ring])
    coord = times + np.concatenate([base_b[lo_wrap], base_b, base_b[hi_wrap]])
    index = np.concatenate([np.flatnonzero(lo_wrap), np.arange(b.time.size), np.flatnonzero(hi_wrap)])
    order = np.argsort(coord, kind="stable")
    coord, times, index = coord[order], times[order], index[order]
    ca = a.time + base_a
    left = np.searchsorted(coord, ca - reach, side="left")
    right = np.searchsorted(coord, ca + reach, side="right")
    counts = right - left
    ia = np.repeat(np.arange(a.time.size), counts)
    pos = np.repeat(left - np.cumsum(np.concatenate([[0], counts[:-1]])), counts) + np.arange(counts.sum())
    jb = index[pos]
    dt = np.abs(a.time[ia] - times[pos])
    ok = dt <= max_dt + a.uncertainty[ia] + b.uncertainty[jb]
    return ia[ok], jb[ok]


def find_coincidences(
    triggers: list[IfoTriggers], travel: np.ndarray, window: float, ring: float, min_ifos: int
) -> pd.DataFrame:
    """All cliques of >= ``min_ifos`` mutually coincident triggers.

    Returns a frame with one column ``i{k}`` per detector (trigger index, -1 if absent),
    ``n_ifos``, ``stat`` (quadrature sum of member SNRs) and ``time`` (ring time of the loudest
    member).
    """
    n = len(triggers)
    cols = [f"i{k}" for k in range(n)]
    pairs = {}
    for a, b in combinations(range(n), 2):
        ia, jb = coincident_pairs(triggers[a], triggers[b], travel[a, b] + window, ring)
        pairs[a, b] = pd.DataFrame({cols[a]: ia, cols[b]: jb})
    found = []
    level = [(((a, b)), df) for (a, b), df in pairs.items() if not df.empty]
    size = 2
    while level:
        if size >= min_ifos:
            found += level
        nxt = []
        for members, df in level:
            for c in range(members[-1] + 1, n):
                ext = df.merge(pairs[members[0], c], on=cols[members[0]])
                for m in members[1:]:
                    if ext.empty:
                        break
                    ext = ext.merge(pairs[m, c], on=[cols[m], cols[c]])
                if not ext.empty:
                    nxt.append(((*members, c), ext))
        level = nxt
        size += 1
    if min_ifos <= 1:
        for k in range(n):
            if triggers[k].time.size:
                found.append(((k,), pd.DataFrame({cols[k]: np.arange(triggers[k].time.size)})))
    if not found:
        return pd.DataFrame({**{c: np.zeros(0, np.int64) for c in cols}, "n_ifos": np.zeros(0, np.int64),
                             "stat": np.zeros(0), "time": np.zeros(0)})
    frames = []
    for members, df in found:
        full = pd.DataFrame({c: np.full(len(df), -1, np.int64) for c in cols})
        for m in members:
            full[cols[m]] = df[cols[m]].to_numpy()
        frames.append(full.assign(n_ifos=len(members)))
    coincs = pd.concat(frames, ignore_index=True)
    snr2 = np.zeros(len(coincs))
    loudest = np.full(len(coincs), -np.inf)
    ref_time = np.zeros(len(coincs))
    for k, c in enumerate(cols):
        idx = coincs[c].to_numpy()
        has = idx >= 0
        s = np.where(has, triggers[k].snr[np.where(has, idx, 0)] if triggers[k].snr.size else 0.0, 0.0)
        snr2 += s * s
        louder = has & (s > loudest)
        ref_time[louder] = triggers[k].time[idx[louder]]
        loudest[louder] = s[louder]
    return coincs.assign(stat=np.sqrt(snr2), time=ref_time)


def _range_max(values: np.ndarray, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """``max(values[left[i]:right[i]])`` for non-empty ranges, by a sparse table (O(n log n))."""
    table = [values]
    span = 1
    while 2 * span <= values.size:
        prev = table[-1]
        table.append(np.maximum(prev[:-span], prev[span:]))
        span *= 2
    length = right - left
    level = np.floor(np.log2(np.maximum(length, 1))).astype(np.int64)
    out = np.empty(left.size)
    for lv in np.unique(level):
        sel = level == lv
        tab = table[lv]
        out[sel] = np.maximum(tab[left[sel]], tab[right[sel] - (1 << lv)])
    return out


def cluster_per_key(key: np.ndarray, time: np.ndarray, stat: np.ndarray, window: float) -> np.ndarray:
    """:func:`cluster_in_time` within each value of ``key`` (a slide, a trial), every group in one
    pass: events are searched as (group, time) pairs, complex numbers that sort lexicographically,
    so no arithmetic mixes a group with the times (events exactly a window apart stay so)."""
    time, stat = np.asarray(time, dtype=np.float64), np.asarray(stat, dtype=np.float64)
    if time.size == 0:
        return np.zeros(0, dtype=bool)
    group = np.unique(np.asarray(key), return_inverse=True)[1].astype(np.float64)
    order = np.lexsort((np.arange(time.size), time, group))
    g, t = group[order], time[order]
    return _loudest_in_window(time, stat, order, _pairs(g, t), _pairs(g, t - window), _pairs(g, t + window))


def cluster_in_time(time: np.ndarray, stat: np.ndarray, window: float) -> np.ndarray:
    """Boolean mask of events that are the loudest within ``window`` seconds of themselves.

    Events are ranked by (stat descending, time, position), so exact ties resolve to the
    earliest event and the result does not depend on input order beyond that.
    """
    if time.size == 0:
        return np.zeros(0, dtype=bool)
    order = np.lexsort((np.arange(time.size), time))
    t = time[order]
    return _loudest_in_window(time, stat, order, t, t - window, t + window)


def _pairs(group: np.ndarray, time: np.ndarray) -> np.ndarray:
    """``group + i time`` built part by part (exact), for a lexicographic search."""
    out = np.empty(time.size, dtype=np.complex128)
    out.real, out.imag = group, time
    return out


def _loudest_in_window(time, stat, order, at, lo, hi) -> np.ndarray:
    """The events ranked first (stat descending, time, position) among those whose sorted keys
    ``at`` (``order`` sorts the events) lie within ``[lo, hi]`` of their own."""
    n = time.size
    priority = np.empty(n)
    priority[np.lexsort((np.arange(n), time, -stat))] = np.arange(n, 0, -1, dtype=np.float64)
    pr = priority[order]
    left = np.searchsorted(at, lo, side="left")
    right = np.searchsorted(at, hi, side="right")
    keep = np.zeros(n, dtype=bool)
    keep[order] = pr >= _range_max(pr, left, right)
    return keep
