"""Background and significance shared by every search: slides, livetime, coincidence, FAR.

:func:`estimate_background` takes per-detector triggers and analysed segments (seconds from the
start of the analysed span, the ring), runs zero lag and every slide through the same
coincidence and clustering, and returns the clustered zero-lag candidates with inclusive and
exclusive FARs, the background events and the livetime of each slide.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gwbatch.background.significance import TailFit, assign_far
from gwbatch.background.slides import coverage_time, slide_livetimes, slide_shifts
from gwbatch.candidates.coincidence import (
    IfoTriggers,
    cluster_in_time,
    find_coincidences,
)
from gwbatch.errors import ConfigError


@dataclass(frozen=True)
class BackgroundResult:
    foreground: pd.DataFrame  # zero-lag candidates: member columns, stat, time, far, ...
    background: pd.DataFrame  # clustered slide events with their slide number
    shifts: np.ndarray  # (n_slides + 1, n_ifos) seconds; row 0 is zero lag
    livetime: np.ndarray  # per slide (s); [0] is the zero-lag livetime
    method: str
    fit: TailFit | None = None  # the background's tail fit (gwbatch.background.significance)
    removed: int = 0  # zero-lag candidates removed hierarchically from the background

    @property
    def foreground_time(self) -> float:
        return float(self.livetime[0])

    @property
    def background_time(self) -> float:
        return float(self.livetime[1:].sum())


def check_slides(n_ifos: int, n_slides: int, step: float, ring: float, coincidence_reach: float,
                 ring_name: str = "the analysed span") -> None:
    """Refuse slide settings that would mix zero lag into background or reuse an alignment (PyCBC #4754);
    slides wrap on a circle of ``ring`` seconds (``ring_name`` says what it is)."""
    if n_ifos < 2 or n_slides == 0:
        return
    if step <= 2 * coincidence_reach:
        raise ConfigError(
            f"background.slide_step ({step} s) must exceed twice the coincidence reach "
            f"({coincidence_reach:.4g} s: light travel time + window + trigger durations)"
        )
    largest = (n_ifos - 1) * n_slides * step
    if largest + coincidence_reach >= ring - coincidence_reach:
        raise ConfigError(
            f"{n_slides} slides of {step} s need (n_ifos - 1) x slides x step = {largest:g} s, more than "
            f"{ring_name} of {ring:g} s allows; use fewer slides, a smaller step or more data"
        )


def _run_slide(triggers, shift_row, ring, travel, window, min_ifos, cluster_window) -> pd.DataFrame:
    moved = [IfoTriggers(np.mod(t.time + s, ring), t.uncertainty, t.snr, t.key) for t, s in zip(triggers, shift_row)]
    coincs = find_coincidences(moved, travel, window, ring, min_ifos)
    keep = cluster_in_time(coincs["time"].to_numpy(), coincs["stat"].to_numpy(), cluster_window)
    return coincs[keep].reset_index(drop=True)


def estimate_background(
    triggers: list[IfoTriggers],
    segments: list[np.ndarray],
    *,
    ring: float,
    travel: np.ndarray,
    window: float,
    min_ifos: int,
    cluster_window: float,
    n_slides: int,
    slide_step: float,
    tail: int = 0,
    hierarchical: bool = False,
) -> BackgroundResult:
    """Zero-lag candidates with FARs (:func:`gwbatch.background.significance.assign_far`; ``tail``
    and ``hierarchical`` as there), and the slide background they are measured against."""
    n = len(triggers)
    member_cols = [f"i{k}" for k in range(n)]
    if min_ifos == 1:
        return _single_series(triggers, segments, ring, travel, window, cluster_window)
    if n < min_ifos:
        raise ConfigError(f"coincidence.min_ifos is {min_ifos} but only {n} detector(s) are analysed")
    shifts = slide_shifts(n, n_slides, slide_step, ring)
    livetime = slide_livetimes(segments, shifts, ring, min_ifos)
    events = [
        _run_slide(triggers, row, ring, travel, window, min_ifos, cluster_window).assign(slide=k)
        for k, row in enumerate(shifts)
    ]
    fg = events[0]
    bg = pd.concat(events[1:], ignore_index=True) if n_slides else fg.iloc[:0].copy()
    sig = assign_far(fg["stat"].to_numpy(), bg["stat"].to_numpy(), shared_triggers(fg, bg, member_cols),
                     float(livetime[1:].sum()), tail=tail, hierarchical=hierarchical)
    fg = pd.concat([fg.reset_index(drop=True), sig.columns], axis=1)
    method = f"time slides: {n_slides} circular slides of {slide_step:g} s x detector position"
    return BackgroundResult(fg, bg, shifts, livetime, method, sig.fit, sig.removed)


def shared_triggers(fg: pd.DataFrame, bg: pd.DataFrame, member_cols: list[str]) -> pd.DataFrame:
    """``(fg, bg)`` row pairs whose events share a member trigger (the same trigger of a detector)."""
    links = [pd.DataFrame({"fg": np.zeros(0, np.int64), "bg": np.zeros(0, np.int64)})]
    for col in member_cols:
        f = pd.DataFrame({"fg": np.arange(len(fg)), col: fg[col].to_numpy()})
        b = pd.DataFrame({"bg": np.arange(len(bg)), col: bg[col].to_numpy()})
        links.append(f[f[col] >= 0].merge(b[b[col] >= 0], on=col)[["fg", "bg"]])
    return pd.concat(links, ignore_index=True).drop_duplicates(ignore_index=True)


def _single_series(triggers, segments, ring, travel, window, cluster_window) -> BackgroundResult:
    """Each series on its own: FAR from the rate of its own triggers at least as loud (inclusive)."""
    frames = []
    livetime = np.array([coverage_time([s], 1) for s in segments])
    for k, trig in enumerate(triggers):
        keep = cluster_in_time(trig.time, trig.snr, cluster_window)
        idx = np.flatnonzero(keep)
        stat = trig.snr[idx]
        own = pd.DataFrame({"fg": np.arange(idx.size), "bg": np.arange(idx.size)})
        sig = assign_far(stat, stat, own, livetime[k], tail=0, hierarchical=False)
        df = pd.DataFrame({f"i{j}": (idx if j == k else np.full(idx.size, -1)) for j in range(len(triggers))})
        df = pd.concat([df.assign(n_ifos=1, stat=stat, time=trig.time[idx], slide=0), sig.columns], axis=1)
        frames.append(df)
    fg = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    method = "single series: inclusive rate of the series' own triggers at least as loud (no time slides)"
    total = np.array([coverage_time(list(segments), 1)])
    return BackgroundResult(fg, fg.iloc[:0].copy(), np.zeros((1, len(triggers))), total, method)
