"""Friends-of-friends merging of interval triggers (Heimdall's candidate merging, in one dimension).

Two triggers are friends when their sample intervals ``[start, stop)`` overlap or lie within
``gap`` samples of each other; groups are the connected components, found in ``O(n log n)`` by a
sweep over start-sorted intervals.  Each group is represented by its loudest member.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Groups:
    """Result of a merge: per group the index of its peak member, its extent and its size."""

    peak: np.ndarray  # int64 indices into the input arrays
    start: np.ndarray  # int64, first sample covered by any member
    stop: np.ndarray  # int64, one past the last sample covered
    members: np.ndarray  # int64
    label: np.ndarray  # int64 group of each input row


def friends_of_friends(start: np.ndarray, stop: np.ndarray, snr: np.ndarray, gap: int = 0) -> Groups:
    """Group intervals ``[start, stop)`` that overlap (or are within ``gap``); peak = highest ``snr``.

    Ties in ``snr`` go to the earliest start, so the result does not depend on input order.
    """
    start = np.asarray(start, dtype=np.int64)
    stop = np.asarray(stop, dtype=np.int64)
    snr = np.asarray(snr, dtype=np.float64)
    n = start.size
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Groups(empty, empty, empty, empty, empty)
    order = np.lexsort((stop, start))
    s, e = start[order], stop[order]
    reach = np.maximum.accumulate(e)
    new_group = np.concatenate([[True], s[1:] > reach[:-1] + gap])
    label = np.cumsum(new_group) - 1
    n_groups = int(label[-1]) + 1
    # Loudest member per group; earliest start wins ties (lexsort keys: label, -snr, start).
    by_group = np.lexsort((s, -snr[order], label))
    first_of_group = np.concatenate([[True], label[by_group][1:] != label[by_group][:-1]])
    peak = order[by_group[first_of_group]]
    g_start = s[new_group]
    g_stop = np.zeros(n_groups, dtype=np.int64)
    np.maximum.at(g_stop, label, e)
    members = np.bincount(label, minlength=n_groups).astype(np.int64)
    row_label = np.empty(n, dtype=np.int64)
    row_label[order] = label
    return Groups(peak.astype(np.int64), g_start, g_stop, members, row_label)
