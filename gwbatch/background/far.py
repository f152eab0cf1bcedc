"""False-alarm rates from time-slide background (ALGORITHMS.md §6).

``FAR(x) = N_bg(stat >= x) / T_bg``, with ``T_bg`` the summed livetime of all non-zero slides.
``n_louder`` is reported with it; when no background event is as loud, the FAR is the bound
``1 / T_bg`` (the candidate is louder than anything the background can resolve).

- inclusive: every background event counts, including those built from triggers that also form
  zero-lag candidates (conservative when a real signal is present);
- exclusive: for each candidate, background events that share a trigger with it are removed
  (the candidate's own triggers cannot be their own background).

Single-series campaigns (``min_ifos = 1``) have no time slides; their FAR is the inclusive rate of
triggers at least as loud in the same series over its livetime, an upper bound on the noise rate.
"""

from __future__ import annotations

import numpy as np

SECONDS_PER_YEAR = 365.25 * 86400.0


def n_louder(background: np.ndarray, stat: np.ndarray) -> np.ndarray:
    """For each ``stat``, the number of background values ``>=`` it."""
    bg = np.sort(np.asarray(background, dtype=np.float64))
    return bg.size - np.searchsorted(bg, np.asarray(stat, dtype=np.float64), side="left")


def far_from_counts(count: np.ndarray, time) -> np.ndarray:
    """FAR (Hz) from counts of louder background over ``time`` seconds (one value or one per count),
    bounded below by ``1/time``; infinite where there is no background time."""
    count = np.asarray(count, dtype=np.float64)
    time = np.broadcast_to(np.asarray(time, dtype=np.float64), count.shape)
    with np.errstate(divide="ignore"):
        return np.where(time > 0, np.maximum(count, 1.0) / time, np.inf)


def ifar_years(far: np.ndarray) -> np.ndarray:
    far = np.asarray(far, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.where(far > 0, 1.0 / (far * SECONDS_PER_YEAR), np.inf)
