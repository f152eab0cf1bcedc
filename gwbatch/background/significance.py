"""False-alarm rates of zero-lag candidates against a background: counted, extrapolated beyond the
loudest background event by a fit to its tail, or bounded; with hierarchical removal of loud
candidates from the background of quieter ones (ALGORITHMS.md §6; docs/decisions.md).

Every search's background ends here (:func:`assign_far`): the time slides of
:func:`gwbatch.background.estimate_background` and the per-chunk trials of
:mod:`gwbatch.background.trials` differ only in how a background event is *linked* to a candidate
(it shares one of the candidate's triggers), which they pass as ``links``.

- **Counted**: ``FAR = N / T_bg``, ``N`` the background events ranked at least as high.
- **Extrapolated** (``N = 0``): the loudest ``tail`` background events above the next one's
  statistic ``x0`` are fitted with an exponential, ``N(>= x) = n exp(-alpha (x - x0))``, ``alpha`` by
  maximum likelihood (``n / sum(x_i - x0)``, standard error ``alpha / sqrt(n)``), the form PyCBC's
  trigger fits use; ``FAR = N(>= x) / T_bg``, never above the bound ``1 / T_bg``; ``far_upper`` is
  the fit with ``alpha`` one standard error lower.  Gaussian-noise statistics fall faster than an
  exponential, so the extrapolation overstates their FAR (conservative).
- **Bound**: no background event is as loud and no fit is possible (fewer than
  :data:`MIN_TAIL_EVENTS` background events, or fitting off): ``FAR = 1 / T_bg`` is an upper limit,
  reported as such (``far_kind``).  A candidate louder than the fit's loudest event by more than
  :data:`EXTRAPOLATION_EFOLDS` e-foldings of its slope gets the fit's FAR at that point, also as a
  bound: the exponential is not trusted further.

**Deep background** (``deep``): further slides that keep only background events at or above a
statistic ``cut`` (:func:`gwbatch.background.estimate_background`'s ``deep_slides``).  A candidate
ranked ``x >= cut`` is counted against the base and deep events at least as loud over both
livetimes; one below ``cut`` against the base background alone (the deep slides hold nothing
there).  The tail fit then uses the loudest events of both.

**Hierarchical removal** (as ``pycbc_add_statmap`` does): while the loudest remaining zero-lag
candidate is louder than every remaining background event, it is marked (``removal_round``) and
every background event linked to it is removed from the background of all candidates (the tail fit
included).  ``far`` is the FAR after removal; ``far_no_removal`` the inclusive FAR against the whole
background.  The livetime is not reduced for the removed events (their triggers' windows are a
negligible part of it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from gwbatch.background.far import far_from_counts, ifar_years, n_louder

#: Fewest background events a tail fit uses; with fewer, FARs beyond the background are bounds.
MIN_TAIL_EVENTS = 10

#: How far past its loudest event the fit is trusted, in e-foldings of the fitted slope (a FAR
#: e^10 ~ 2.2e4 times below the fit at that event); a candidate louder still gets the fit's value
#: there as a bound (an upper limit on its FAR).
EXTRAPOLATION_EFOLDS = 10.0

FAR_KINDS = ("counted", "extrapolated", "bound")


@dataclass(frozen=True)
class TailFit:
    """``N(>= x) = count * exp(-slope (x - threshold))`` for ``x >= threshold``."""

    threshold: float  # statistic of the loudest background event not in the fit
    count: int  # background events above the threshold (those fitted)
    slope: float  # maximum-likelihood exponential slope
    slope_error: float  # its standard error, slope / sqrt(count)
    loudest: float  # the loudest event fitted
    livetime: float = 0.0  # seconds of the background fitted (set by assign_far)

    def n_louder(self, stat, slope: float | None = None) -> np.ndarray:
        slope = self.slope if slope is None else slope
        return self.count * np.exp(-slope * (np.asarray(stat, dtype=np.float64) - self.threshold))

    @property
    def upper_slope(self) -> float:
        """The slope one standard error flatter (never below 0): the fit's 1-sigma upper FARs."""
        return max(self.slope - self.slope_error, 0.0)

    @property
    def limit(self) -> float:
        """The loudest statistic the fit is trusted to (:data:`EXTRAPOLATION_EFOLDS` past its loudest event)."""
        return self.loudest + EXTRAPOLATION_EFOLDS / self.slope

    def summary(self) -> dict:
        """The fit, and the largest IFAR it can state (at :attr:`limit`; years, None without a livetime)."""
        floor = float(self.n_louder(self.limit)) / self.livetime if self.livetime > 0 else 0.0
        return {"threshold": self.threshold, "events": self.count, "slope": self.slope,
                "slope_error": self.slope_error, "loudest": self.loudest, "extrapolated_up_to": self.limit,
                "livetime_seconds": self.livetime,
                "ifar_reach_years": float(ifar_years(floor)) if floor > 0 else None}


def fit_tail(background: np.ndarray, tail: int) -> TailFit | None:
    """The exponential fit to the loudest ``tail`` values of ``background`` (all but the quietest
    when there are fewer), or None with fewer than :data:`MIN_TAIL_EVENTS` to fit."""
    values = np.sort(np.asarray(background, dtype=np.float64))[::-1]
    n = min(tail, values.size - 1)
    if tail <= 0 or n < MIN_TAIL_EVENTS:
        return None
    threshold = values[n]
    excess = values[:n] - threshold
    if not np.sum(excess) > 0:
        return None
    slope = n / float(np.sum(excess))
    return TailFit(float(threshold), int(n), slope, slope / np.sqrt(n), float(values[0]))


@dataclass(frozen=True)
class FarResult:
    """Per candidate FAR columns (:func:`assign_far`) and what they came from."""

    columns: pd.DataFrame
    fit: TailFit | None
    removed: int  # candidates removed hierarchically from the background


def _far(count: np.ndarray, stat: np.ndarray, time, fit: TailFit | None, fit_time: float = 0.0):
    """``(far, far_upper, kind)``: counted where ``count >= 1`` (over ``time``, per candidate or one
    value), else extrapolated by ``fit`` (over ``fit_time``) or the bound ``1 / time``."""
    count = np.asarray(count, dtype=np.float64)
    time = np.broadcast_to(np.asarray(time, dtype=np.float64), count.shape)
    far = far_from_counts(count, time)
    upper = far.copy()
    kind = np.where(count >= 1, "counted", "bound").astype(object)
    none = (count < 1) & (time > 0)
    if fit is not None and fit_time > 0 and none.any():
        limit = fit.limit
        x = np.minimum(stat[none], limit)
        central = np.minimum(fit.n_louder(x) / fit_time, far[none])
        high = np.minimum(fit.n_louder(x, fit.upper_slope) / fit_time, far[none])
        far[none], upper[none] = central, high
        kind[np.flatnonzero(none)[(central < 1.0 / time[none]) & (stat[none] <= limit)]] = "extrapolated"
    return far, upper, kind


@dataclass(frozen=True)
class DeepBackground:
    """Background events of further slides kept only at or above ``cut`` (their ranks, links as
    ``(fg, bg)`` pairs, and the slides' livetime)."""

    stat: np.ndarray
    links: pd.DataFrame
    time: float
    cut: float


def hierarchical_removal(stat, bg, fg_link, bg_link, reaches_deep=None, is_deep=None):
    """``(active, removal_round)``: while the loudest remaining candidate is louder than every
    active background event it is counted against, it gets the next round and its linked
    background events become inactive (module docstring)."""
    reaches_deep = np.ones(stat.size, bool) if reaches_deep is None else reaches_deep
    is_deep = np.zeros(bg.size, bool) if is_deep is None else is_deep
    active = np.ones(bg.size, dtype=bool)
    removal = np.zeros(stat.size, dtype=np.int64)
    for r, i in enumerate(np.argsort(-stat, kind="stable"), start=1):
        if np.any(active & (bg >= stat[i]) & (reaches_deep[i] | ~is_deep)):
            break
        removal[i] = r
        active[bg_link[fg_link == i]] = False
    return active, removal


def assign_far(stat: np.ndarray, background: np.ndarray, links: pd.DataFrame, time: float, *, tail: int,
               hierarchical: bool, deep: DeepBackground | None = None) -> FarResult:
    """FARs of candidates ranked ``stat`` against ``background`` ranks over ``time`` seconds of
    background; ``links``: ``(fg, bg)`` index pairs, background events built from a candidate's
    own triggers; ``tail``: background events the tail fit uses (0: none); ``hierarchical``:
    remove loud candidates from the background; ``deep``: further background above a cut (module
    docstring)."""
    stat = np.asarray(stat, dtype=np.float64)
    if deep is None:
        deep = DeepBackground(np.zeros(0), pd.DataFrame({"fg": np.zeros(0, np.int64), "bg": np.zeros(0, np.int64)}),
                              0.0, np.inf)
    base = np.asarray(background, dtype=np.float64)
    # one array of base then deep events; deep events count only for candidates at or above the cut
    bg = np.concatenate([base, np.asarray(deep.stat, dtype=np.float64)])
    is_deep = np.arange(bg.size) >= base.size
    fg_link = np.concatenate([links["fg"].to_numpy(np.int64), deep.links["fg"].to_numpy(np.int64)])
    bg_link = np.concatenate([links["bg"].to_numpy(np.int64), deep.links["bg"].to_numpy(np.int64) + base.size])
    reaches_deep = stat >= deep.cut
    active, removal = hierarchical_removal(stat, bg, fg_link, bg_link, reaches_deep, is_deep) if hierarchical else (
        np.ones(bg.size, dtype=bool), np.zeros(stat.size, dtype=np.int64))
    inclusive = n_louder(bg[active & ~is_deep], stat) + np.where(reaches_deep, n_louder(bg[active & is_deep], stat), 0)
    own = np.zeros(stat.size, dtype=np.int64)
    mine = active[bg_link] & (bg[bg_link] >= stat[fg_link]) & (reaches_deep[fg_link] | ~is_deep[bg_link])
    np.add.at(own, fg_link[mine], 1)
    exclusive = inclusive - own
    deep_time = time + deep.time
    used = np.where(reaches_deep, deep_time, time)
    # the tail fit: on the deep region (base and deep events above the cut) when it has enough
    # events, else on the base background
    fit, fit_time = fit_tail(bg[active & (is_deep | (bg >= deep.cut))], tail) if deep.time > 0 else None, deep_time
    if fit is None:
        fit, fit_time = fit_tail(bg[active & ~is_deep], tail), time
    fit = None if fit is None else replace(fit, livetime=float(fit_time))
    far, far_upper, kind = _far(inclusive, stat, used, fit, fit_time)
    far_excl, _, kind_excl = _far(exclusive, stat, used, fit, fit_time)
    plain = n_louder(base, stat) + np.where(reaches_deep, n_louder(np.asarray(deep.stat, np.float64), stat), 0)
    plain_far, _, _ = _far(plain, stat, used, None)
    columns = pd.DataFrame({
        "n_louder": inclusive, "n_louder_exclusive": exclusive,
        "far": far, "far_upper": far_upper, "far_kind": kind,
        "far_exclusive": far_excl, "far_exclusive_kind": kind_excl,
        "far_no_removal": plain_far, "removal_round": removal,
    })
    columns["ifar_years"] = ifar_years(far)
    columns["ifar_exclusive_years"] = ifar_years(far_excl)
    return FarResult(columns, fit, int(np.count_nonzero(removal)))
