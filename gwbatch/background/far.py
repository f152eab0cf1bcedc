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
import pandas as pd

SECONDS_PER_YEAR = 365.25 * 86400.0


def n_louder(background: np.ndarray, stat: np.ndarray) -> np.ndarray:
    """For each ``stat``, the number of background values ``>=`` it."""
    bg = np.sort(np.asarray(background, dtype=np.float64))
    return bg.size - np.searchsorted(bg, np.asarray(stat, dtype=np.float64), side="left")


def far_from_counts(count: np.ndarray, time: float) -> np.ndarray:
    """FAR (Hz) from counts of louder background over ``time`` seconds, bounded below by ``1/time``."""
    if time <= 0:
        return np.full(np.shape(count), np.inf)
    return np.maximum(np.asarray(count, dtype=np.float64), 1.0) / time


def ifar_years(far: np.ndarray) -> np.ndarray:
    far = np.asarray(far, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.where(far > 0, 1.0 / (far * SECONDS_PER_YEAR), np.inf)


def shared_louder(fg: pd.DataFrame, bg: pd.DataFrame, member_cols: list[str]) -> np.ndarray:
    """Per foreground row: background rows at least as loud that share a member trigger with it."""
    counts = np.zeros(len(fg), dtype=np.int64)
    if fg.empty or bg.empty:
        return counts
    links = []
    for col in member_cols:
        f = pd.DataFrame({"fg": np.arange(len(fg)), col: fg[col].to_numpy(), "fstat": fg["stat"].to_numpy()})
        f = f[f[col] >= 0]
        b = pd.DataFrame({"bg": np.arange(len(bg)), col: bg[col].to_numpy(), "bstat": bg["stat"].to_numpy()})
        b = b[b[col] >= 0]
        links.append(f.merge(b, on=col)[["fg", "bg", "fstat", "bstat"]])
    joined = pd.concat(links, ignore_index=True).drop_duplicates(["fg", "bg"])
    joined = joined[joined["bstat"] >= joined["fstat"]]
    np.add.at(counts, joined["fg"].to_numpy(), 1)
    return counts
