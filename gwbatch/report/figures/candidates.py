"""Zero-lag candidates over time, and their cumulative IFAR against the background expectation."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.transforms import blended_transform_factory
from scipy.stats import norm, poisson

from gwbatch.background.far import SECONDS_PER_YEAR
from gwbatch.report.figures.common import drawn
from gwbatch.report.inputs import column, flag, frame, livetime, span_start
from gwbatch.report.markup import skipped, subsection


def fig_candidates_time(manifest: dict, candidates: pd.DataFrame, injections: pd.DataFrame | None) -> str:
    """Ranking statistic of each zero-lag candidate against time since the span's start, coloured by
    log10 FAR, with the found and missed injections marked along the bottom."""
    title = "Candidates over time"
    t0 = span_start(manifest, candidates)
    t = column(candidates, "gps_time")
    snr = column(candidates, "snr")
    have_cands = t is not None and snr is not None and np.isfinite(t).any()
    inj = frame(injections)
    have_inj = len(inj) > 0 and "gps_time" in inj.columns
    if not have_cands and not have_inj:
        return skipped(title, "there are no zero-lag candidates and no injections.")
    fig = Figure(figsize=(9, 4), layout="constrained")
    ax = fig.add_subplot()
    if have_cands:
        far = column(candidates, "far")
        far = far if far is not None else np.full(t.size, np.nan)
        good = np.isfinite(far) & (far > 0) & np.isfinite(snr)
        if good.any():
            sc = ax.scatter(t[good] - t0, snr[good], c=np.log10(far[good]), cmap="viridis_r", s=18, zorder=3)
            fig.colorbar(sc, ax=ax, label="log10 FAR (Hz)")
        if (~good & np.isfinite(snr)).any():
            rest = ~good & np.isfinite(snr)
            ax.scatter(t[rest] - t0, snr[rest], c="grey", s=18, zorder=3, label="no finite FAR")
        pos = snr[np.isfinite(snr) & (snr > 0)]
        if pos.size and pos.max() > 20 * pos.min():
            ax.set_yscale("log")
    if have_inj:
        _mark_injections(ax, inj, t0)
    ax.set_xlabel(f"time since GPS {t0:.4f} (s)")
    ax.set_ylabel("ranking statistic (SNR)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper right", fontsize="small")
    caption = ("Zero-lag candidates: ranking statistic against time since the start of the analysed span, "
               "coloured by log10 FAR" + ("; injections are marked along the bottom axis." if have_inj else "."))
    return subsection(title, drawn(fig, "fig-time", caption))


def _mark_injections(ax, inj: pd.DataFrame, t0: float) -> None:
    """Found (green triangles) and missed-but-analysed (red crosses) injection times, along the x axis."""
    trans = blended_transform_factory(ax.transData, ax.transAxes)
    t = column(inj, "gps_time") - t0
    found = flag(inj, "found", False)
    analysed = flag(inj, "analysed", True)
    missed = analysed & ~found
    if found.any():
        ax.plot(t[found], np.full(found.sum(), 0.03), "^", color="tab:green", ms=6, transform=trans,
                label=f"found injection ({found.sum()})", clip_on=False)
    if missed.any():
        ax.plot(t[missed], np.full(missed.sum(), 0.03), "x", color="tab:red", ms=6, transform=trans,
                label=f"missed injection ({missed.sum()})", clip_on=False)


def fig_cumulative_ifar(manifest: dict, candidates: pd.DataFrame, background: pd.DataFrame) -> str:
    """Number of zero-lag candidates with IFAR at least x against the expectation T_fg / x with Poisson
    bands; for a campaign of several searches, see :func:`_fig_members_ifar`."""
    title = "Cumulative IFAR"
    members = [m for m in (manifest.get("members") or []) if isinstance(m, dict)]
    if members and "member" in candidates.columns:
        return _fig_members_ifar(title, members, candidates)
    t_fg, t_bg = livetime(manifest, "zero_lag_seconds"), livetime(manifest, "background_seconds")
    if len(candidates) == 0:
        return skipped(title, "there are no zero-lag candidates.")
    if len(background) == 0 or t_bg <= 0:
        return skipped(title, "there is no time-slide background (single-series campaign or no slides).")
    if t_fg <= 0:
        return skipped(title, "the zero-lag livetime is zero.")
    ifar, n_clipped = _ifar_for_plot(candidates, t_bg)
    if ifar.size == 0:
        return skipped(title, "no candidate has a usable IFAR.")
    fig = _draw_cumulative_ifar([("zero-lag candidates", ifar)], t_fg)
    caption = (f"Number of zero-lag candidates with IFAR at least x, against the background expectation "
               f"T_fg / x (T_fg = {t_fg:.6g} s) with Poisson 1/2/3\u03c3 bands.")
    if n_clipped:
        caption += f" {n_clipped} infinite IFAR(s) drawn at {ifar.max():.3g} years."
    return subsection(title, drawn(fig, "fig-ifar", caption))


def _fig_members_ifar(title: str, members: list[dict], candidates: pd.DataFrame) -> str:
    """A campaign of several searches: each search's candidates against its own background, and all
    of them together against the sum of the searches' expectations, sum_s T_fg,s / x (each search's
    FAR is its own; counting every search's candidates is a trials factor of their number)."""
    curves, t_fg, clipped = [], 0.0, 0
    for m in members:
        own = candidates[candidates["member"].astype(str) == str(m.get("name"))]
        live, bg = float(m.get("livetime_s") or 0.0), float(m.get("background_s") or 0.0)
        if live <= 0 or bg <= 0:
            continue
        t_fg += live
        ifar, n_clipped = _ifar_for_plot(own, bg)
        clipped += n_clipped
        if ifar.size:
            curves.append((f"{m.get('name')} ({ifar.size})", ifar))
    if not curves:
        return skipped(title, "no search has zero-lag candidates with a time-slide background.")
    every = np.concatenate([c[1] for c in curves])
    fig = _draw_cumulative_ifar([(f"all searches ({every.size})", every), *curves], t_fg)
    caption = (f"Number of zero-lag candidates with IFAR at least x, all searches together (black) and each "
               f"search (colours), against the expectation of all searches together, \u03a3 T_fg / x "
               f"(\u03a3 T_fg = {t_fg:.6g} s over {len(curves)} searches with candidates and a background), "
               f"with Poisson 1/2/3\u03c3 bands. Each search's IFAR is against its own background.")
    if clipped:
        caption += (f" {clipped} infinite IFAR(s) drawn at the background time of their search (or at its "
                    "largest finite IFAR, if larger).")
    return subsection(title, drawn(fig, "fig-ifar", caption))


def _ifar_for_plot(candidates: pd.DataFrame, t_bg: float) -> tuple[np.ndarray, int]:
    """Finite IFARs (years), from ``ifar_years`` or else ``far``; infinities clipped to the larger of the
    largest finite one and ``T_bg``.  Also returns how many were clipped."""
    ifar = column(candidates, "ifar_years")
    far = column(candidates, "far")
    if ifar is None and far is None:
        return np.zeros(0), 0
    if ifar is None:
        with np.errstate(divide="ignore", invalid="ignore"):
            ifar = np.where(far > 0, 1.0 / (far * SECONDS_PER_YEAR), np.where(far == 0, np.inf, np.nan))
    ifar = ifar[~np.isnan(ifar)]
    inf = np.isinf(ifar)
    finite = ifar[~inf & (ifar > 0)]
    bound = max(finite.max() if finite.size else 0.0, t_bg / SECONDS_PER_YEAR)
    return np.concatenate([finite, np.full(int(inf.sum()), bound)]), int(inf.sum())


def _poisson_bands(mu: np.ndarray) -> list[tuple[float, np.ndarray, np.ndarray]]:
    """Central Poisson intervals at 1, 2, 3 sigma around ``mu``."""
    bands = []
    for k in (1, 2, 3):
        tail = norm.sf(k)
        bands.append((k, poisson.ppf(tail, mu), poisson.ppf(1 - tail, mu)))
    return bands


def _draw_cumulative_ifar(curves: list[tuple[str, np.ndarray]], t_fg: float) -> Figure:
    """Counts N(IFAR >= x) of each ``(label, ifar_years)`` (the first in black, the rest in colours)
    over the expectation ``t_fg / x`` and its Poisson bands."""
    lo_x = min(c[1].min() for c in curves) / 3
    hi_x = max(c[1].max() for c in curves) * 3
    grid = np.geomspace(lo_x, hi_x, 300)
    mu = t_fg / (grid * SECONDS_PER_YEAR)
    floor = 0.1
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for k, lo, hi in reversed(_poisson_bands(mu)):
        ax.fill_between(grid, np.maximum(lo, floor / 2), np.maximum(hi, floor / 2), step="mid",
                        color="tab:blue", alpha=0.12 + 0.08 * (3 - k), lw=0, label=f"{k}\u03c3")
    ax.plot(grid, mu, "--", color="tab:blue", label="background expectation")
    top = 1
    colours = iter(["tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive"])
    for i, (label, ifar) in enumerate(curves):
        x = np.sort(ifar)
        n = np.arange(x.size, 0, -1)
        top = max(top, int(n.max()))
        # N(>= x) holds n[i] on (x[i-1], x[i]]; start at the grid's left edge and drop below the axis after the last
        ax.step(np.r_[grid[0], x, x[-1]], np.r_[n[0], n, floor / 2], where="pre",
                color="black" if i == 0 else next(colours, "tab:gray"), lw=1.5 if i == 0 else 1.0, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(grid[0], grid[-1])
    ax.set_ylim(floor, max(top, mu.max()) * 2)
    ax.set_xlabel("IFAR (years)")
    ax.set_ylabel("number of candidates with IFAR \u2265 x")
    ax.legend(loc="upper right", fontsize="small")
    return fig
