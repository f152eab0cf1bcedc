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

from gwbatch.background.deep import deep_pairs
from gwbatch.background.significance import DeepBackground, TailFit, assign_far, hierarchical_removal
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
    deep_cut: float | None = None  # deep slides' events are kept at or above this rank (None: no deep slides)

    @property
    def foreground_time(self) -> float:
        return float(self.livetime[0])

    @property
    def background_time(self) -> float:
        return float(self.livetime[1:].sum())


#: Slides (base and deep) whose counted reach is an IFAR of 10^4 yr per 30 days: every slide's
#: livetime is the zero lag's, so the background time is this many times the data's, whatever its length.
REACH_SLIDES = 121_750
#: The slides ``deep_slides: auto`` aims for: :data:`REACH_SLIDES` and 2.7% more, since 121750
#: slides of exactly 30 days are exactly 10^4 Julian years and any livetime lost (chunk edges,
#: gates, vetoes; up to 18 hours of 30 days) would leave the reach just short of it.
AUTO_SLIDES = 125_000


def most_slides(n_ifos: int, step: float, ring: float, coincidence_reach: float) -> int:
    """The most slides of ``step`` s that :func:`check_slides` allows on a ring of ``ring`` s (0 when
    none fits, or with one detector)."""
    if n_ifos < 2:
        return 0
    room = (ring - 2.0 * coincidence_reach) / ((n_ifos - 1) * step)
    return max(int(np.ceil(room)) - 1, 0)


def ring_holding(n_ifos: int, n_slides: int, step: float, coincidence_reach: float) -> float:
    """The ring length (s) ``n_slides`` slides of ``step`` s must exceed to pass :func:`check_slides`
    (the inverse of :func:`most_slides`)."""
    return (n_ifos - 1) * n_slides * step + 2.0 * coincidence_reach


def check_slides(n_ifos: int, n_slides: int, step: float, ring: float, coincidence_reach: float,
                 ring_name: str = "the analysed span", step_label: str | None = None) -> None:
    """Refuse slide settings that would mix zero lag into background or reuse an alignment (PyCBC #4754);
    slides wrap on a circle of ``ring`` seconds (``ring_name`` says what it is; ``step_label`` how
    the messages quote the step, by default ``step`` s)."""
    if n_ifos < 2 or n_slides == 0:
        return
    label = step_label or f"{step:g} s"
    if step <= 2 * coincidence_reach:
        raise ConfigError(
            f"background.slide_step ({label}) must exceed twice the coincidence reach "
            f"({coincidence_reach:.4g} s: light travel time + window + trigger durations)"
        )
    largest = (n_ifos - 1) * n_slides * step
    if largest + coincidence_reach >= ring - coincidence_reach:
        raise ConfigError(
            f"{n_slides} slides (background.slides + background.deep_slides) of {label} need "
            f"(n_ifos - 1) x slides x step = {largest:g} s, more than "
            f"{ring_name} of {ring:g} s allows; use fewer slides, a smaller step or more data"
        )


def _run_slide(triggers, shift_row, ring, travel, window, min_ifos, cluster_window) -> pd.DataFrame:
    moved = [IfoTriggers(np.mod(t.time + s, ring), t.uncertainty, t.snr, t.key) for t, s in zip(triggers, shift_row)]
    coincs = find_coincidences(moved, travel, window, ring, min_ifos)
    keep = cluster_in_time(coincs["time"].to_numpy(), coincs["stat"].to_numpy(), cluster_window)
    return coincs[keep].reset_index(drop=True)


def _subset(t: IfoTriggers, keep: np.ndarray) -> IfoTriggers:
    return IfoTriggers(t.time[keep], t.uncertainty[keep], t.snr[keep], None if t.key is None else t.key[keep])


def _run_slide_above(triggers, shift_row, ring, travel, window, min_ifos, cluster_window, cut) -> pd.DataFrame:
    """The clustered events of one slide ranked at least ``cut``, as :func:`_run_slide` finds them,
    from only the triggers that can make one: an event of ``m`` members with ``stat >= cut`` (a
    quadrature sum) has a member of SNR ``>= cut / sqrt(m)``, so pass ``j`` keeps detector ``j``'s
    triggers of SNR ``>= cut / sqrt(n)`` and every other detector's.  Clustering keeps an event when
    nothing louder is within the window, and anything louder is above the cut too, so the events
    kept are those the whole slide keeps."""
    n = len(triggers)
    cols = [f"i{k}" for k in range(n)]
    moved = [IfoTriggers(np.mod(t.time + s, ring), t.uncertainty, t.snr, t.key) for t, s in zip(triggers, shift_row)]
    frames = []
    for j in range(n):
        loud = np.flatnonzero(moved[j].snr >= cut / np.sqrt(n))
        if loud.size == 0:
            continue
        part = find_coincidences([*moved[:j], _subset(moved[j], loud), *moved[j + 1:]], travel, window, ring, min_ifos)
        part = part[part["stat"].to_numpy() >= cut]
        member = part[cols[j]].to_numpy()
        frames.append(part.assign(**{cols[j]: np.where(member >= 0, loud[np.maximum(member, 0)], -1)}))
    if not frames:
        return find_coincidences([_subset(t, np.zeros(0, np.int64)) for t in moved], travel, window, ring, min_ifos)
    coincs = pd.concat(frames, ignore_index=True).drop_duplicates(subset=cols).sort_values(cols, kind="stable")
    keep = cluster_in_time(coincs["time"].to_numpy(), coincs["stat"].to_numpy(), cluster_window)
    return coincs[keep].reset_index(drop=True)


def deep_cut(background: np.ndarray, tail: int) -> float:
    """The rank above which deep slides keep their events: that of the base background's
    ``tail + 1``-th loudest event (the tail fit's threshold), or of its quietest when it has fewer;
    every event (-inf) when it is empty."""
    values = np.sort(np.asarray(background, dtype=np.float64))[::-1]
    return float(values[min(max(tail, 1), values.size - 1)]) if values.size else -np.inf


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
    deep_slides: int = 0,
) -> BackgroundResult:
    """Zero-lag candidates with FARs (:func:`gwbatch.background.significance.assign_far`; ``tail``
    and ``hierarchical`` as there), and the slide background they are measured against.

    ``deep_slides``: slides ``n_slides + 1 ...`` after the base ones, keeping only events ranked at
    or above :func:`deep_cut` of the base background left after hierarchical removal (when on)
    (:func:`_run_slide_above`); their events join the background (slide numbers above
    ``n_slides``) and their livetime the background's."""
    n = len(triggers)
    member_cols = [f"i{k}" for k in range(n)]
    if min_ifos == 1:
        return _single_series(triggers, segments, ring, travel, window, cluster_window)
    if n < min_ifos:
        raise ConfigError(f"coincidence.min_ifos is {min_ifos} but only {n} detector(s) are analysed")
    shifts = slide_shifts(n, n_slides + deep_slides, slide_step, ring)
    livetime = slide_livetimes(segments, shifts, ring, min_ifos)
    events = [
        _run_slide(triggers, row, ring, travel, window, min_ifos, cluster_window).assign(slide=k)
        for k, row in enumerate(shifts[: n_slides + 1])
    ]
    fg = events[0]
    bg = pd.concat(events[1:], ignore_index=True) if n_slides else fg.iloc[:0].copy()
    deep = None
    if deep_slides:
        # the cut is set on the background left after hierarchical removal: the deep slides are for
        # the noise's tail, not for background events built from loud candidates' own triggers
        stats = bg["stat"].to_numpy()
        if hierarchical:
            links = shared_triggers(fg, bg, member_cols)
            active, _ = hierarchical_removal(fg["stat"].to_numpy(), stats, links["fg"].to_numpy(),
                                             links["bg"].to_numpy())
            stats = stats[active]
        cut = deep_cut(stats, tail)
        if n == 2 and min_ifos == 2:  # loudest trigger first, the cut rising as deep events come (gwbatch.background.deep)
            fg_stat = fg["stat"].to_numpy()

            def own(events):
                links = shared_triggers(fg, events, member_cols)
                fg_i, bg_i = links["fg"].to_numpy(), links["bg"].to_numpy()
                mask = np.zeros(len(events), bool)
                mask[bg_i[fg_stat[fg_i] >= events["stat"].to_numpy()[bg_i]]] = True
                return mask

            extra, cut = deep_pairs(*triggers, shifts[n_slides + 1:], n_slides + 1, ring=ring,
                                    max_dt=float(travel[0, 1]) + window, cluster_window=cluster_window, cut=cut,
                                    tail=tail, own=own)
        else:
            found = [_run_slide_above(triggers, row, ring, travel, window, min_ifos, cluster_window, cut).assign(slide=k)
                     for k, row in enumerate(shifts[n_slides + 1:], start=n_slides + 1)]
            extra = pd.concat(found, ignore_index=True)
        deep = DeepBackground(extra["stat"].to_numpy(), shared_triggers(fg, extra, member_cols),
                              float(livetime[n_slides + 1:].sum()), cut)
        bg = pd.concat([bg, extra], ignore_index=True)
    base_time = float(livetime[1: n_slides + 1].sum())
    base = bg[bg["slide"].to_numpy() <= n_slides] if deep_slides else bg
    sig = assign_far(fg["stat"].to_numpy(), base["stat"].to_numpy(), shared_triggers(fg, base, member_cols),
                     base_time, tail=tail, hierarchical=hierarchical, deep=deep)
    fg = pd.concat([fg.reset_index(drop=True), sig.columns], axis=1)
    method = f"time slides: {n_slides} circular slides of {slide_step:g} s x detector position"
    if deep_slides:
        method += f", and {deep_slides} more keeping events ranked >= {deep.cut:.4g}"
    return BackgroundResult(fg, bg, shifts, livetime, method, sig.fit, sig.removed,
                            deep.cut if deep is not None else None)


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
