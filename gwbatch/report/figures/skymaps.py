"""Mollweide skymaps of the top candidates: HEALPix maps resampled onto a longitude/latitude grid, with
their credible contours and areas."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

from gwbatch.report.figures.common import MAX_PANELS, drawn
from gwbatch.report.format import (
    DASH,
    fmt_degrees,
    fmt_gps,
    fmt_sky_area,
    missing,
    text,
)
from gwbatch.report.markup import html_table, note, skipped, subsection
from gwbatch.sky.grid import pixel_of
from gwbatch.sky.skymap import credible_area

SKY_GRID = (480, 240)  # longitude x latitude cells a HEALPix map is resampled to for drawing
FULL_SKY_DEG2 = 4 * math.pi * (180 / math.pi) ** 2
TABLE_HEADER = ["candidate", "GPS time", "pixels", "50% area (deg\u00b2)", "90% area (deg\u00b2)", "RA (\u00b0)",
                "Dec (\u00b0)"]


def fig_skymaps(skymaps: Sequence[dict] | None) -> str:
    """Mollweide skymaps of the top candidates (up to ``MAX_PANELS``), with the 50 % and 90 % credible
    contours and the best direction, and a table of their areas (and of the maps that cannot be read)."""
    title = "Skymaps of the top candidates"
    if skymaps is None:
        return skipped(title, "no skymaps were given to the report (this search makes none, or no candidate "
                              "was ranked high enough).")
    entries = [s for s in skymaps if isinstance(s, dict)]
    if not entries:
        return skipped(title, "no candidate has a skymap.")
    maps, rows = [], []
    for entry in entries[:MAX_PANELS]:
        prob = np.asarray(entry.get("prob") if entry.get("prob") is not None else [], dtype=np.float64).ravel()
        prob = np.where(np.isfinite(prob) & (prob > 0), prob, 0.0)
        order = _healpix_order(prob.size)
        reason = ("not a full HEALPix map (12\u00b74^order pixels)" if order is None
                  else "the map holds no probability" if prob.sum() <= 0 else None)
        row = [text(entry.get("label")), fmt_gps(entry.get("gps_time")),
               f"{prob.size} (order {order})" if order is not None else str(prob.size)]
        if reason:
            rows.append(row + [f"not drawn: {reason}", DASH, DASH, DASH])
        else:
            maps.append((entry, prob / prob.sum(), order, row))
    if not maps:
        return subsection(title, note("Not drawn: no map could be read.") + html_table(TABLE_HEADER, rows))
    ncols = min(len(maps), 2)
    nrows = -(-len(maps) // ncols)
    fig = Figure(figsize=(5.2 * ncols, 3.6 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, subplot_kw={"projection": "mollweide"}).ravel()
    for ax in axes[len(maps):]:
        ax.set_visible(False)
    shown = []
    for k, (ax, (entry, prob, order, row)) in enumerate(zip(axes, maps)):
        a50, a90 = _skymap_panel(ax, entry, prob, order, k)
        shown.append(row + [fmt_sky_area(a50), fmt_sky_area(a90), fmt_degrees(entry.get("ra")),
                            fmt_degrees(entry.get("dec"))])
    caption = ("Probability per deg\u00b2 in equatorial coordinates (Mollweide projection, right ascension increasing "
               "to the left, 180\u00b0 in the centre), with the 50% (solid) and 90% (dashed) credible contours and "
               "the best direction (star).")
    if len(entries) > MAX_PANELS:
        caption += f" The first {MAX_PANELS} of {len(entries)} are drawn."
    table = html_table(TABLE_HEADER, shown + rows, [False, True, True, True, True, True, True])
    return subsection(title, drawn(fig, "fig-skymaps", caption) + table)


def _skymap_panel(ax, entry: dict, prob: np.ndarray, order: int, k: int) -> tuple[float, float]:
    """Draw one map (probability per deg², 50 % and 90 % contours, best direction); returns its 50 % and
    90 % credible areas (deg²)."""
    x_edges, y_edges, x, y, density, levels = _skymap_on_grid(prob, order)
    mesh = ax.pcolormesh(x_edges, y_edges, density, cmap="OrRd", shading="flat", rasterized=True)
    # Contours are traced on the grid already projected (so the geographic transform does not interpolate
    # every segment of them, which would make the SVG megabytes long).
    projected = ax.transProjection.transform(np.column_stack([np.broadcast_to(x, levels.shape).ravel(),
                                                              np.broadcast_to(y[:, None], levels.shape).ravel()]))
    px, py = (projected[:, i].reshape(levels.shape) for i in (0, 1))
    for level, style in ((0.5, "-"), (0.9, "--")):
        contour = ax.contour(px, py, levels, levels=[level], colors="tab:blue", linewidths=1.0, linestyles=style,
                             transform=ax.transAffine + ax.transAxes)
        contour.set_gid(f"sky{k}-c{round(level * 100)}")
    ra, dec = entry.get("ra"), entry.get("dec")
    if not (missing(ra) or missing(dec)) and math.isfinite(float(ra)) and math.isfinite(float(dec)):
        (best,) = ax.plot(_sky_x(float(ra)), float(dec), "*", ms=11, color="black", mec="white", mew=0.6)
        best.set_gid(f"sky{k}-best")
    a50, a90 = credible_area(prob, 0.5), credible_area(prob, 0.9)
    ax.set_title(f"{text(entry.get('label'))}  GPS {fmt_gps(entry.get('gps_time'))}\n"
                 f"90% area {fmt_sky_area(a90)} deg\u00b2", parse_math=False, fontsize="small")
    ticks = np.radians([-120, -60, 0, 60, 120])
    ax.set_xticks(ticks, [f"{180 - d:.0f}\u00b0" for d in np.degrees(ticks)], fontsize="x-small")
    ax.set_yticks(np.radians([-60, -30, 0, 30, 60]), [f"{d}\u00b0" for d in (-60, -30, 0, 30, 60)],
                  fontsize="x-small")
    ax.grid(True, lw=0.3, color="0.6")
    ax.set_xlabel("right ascension", fontsize="small")
    ax.set_ylabel("declination", fontsize="small")
    bar = ax.figure.colorbar(mesh, ax=ax, orientation="horizontal", shrink=0.6, pad=0.08, aspect=30)
    bar.set_label("probability per deg\u00b2", fontsize="x-small")
    bar.ax.tick_params(labelsize="x-small")
    return a50, a90


def _healpix_order(npix: int) -> int | None:
    """The order of a full HEALPix map of ``npix`` pixels (12 * 4**order), None if it is not one."""
    if npix < 12 or npix % 12:
        return None
    nside = math.isqrt(npix // 12)
    if nside * nside != npix // 12 or nside & (nside - 1):
        return None
    return nside.bit_length() - 1


def _levels(prob: np.ndarray) -> np.ndarray:
    """Per pixel, the probability in the pixels strictly more probable: the pixel lies in every credible
    region of a higher level (ties share a level, so a uniform patch is all in or all out)."""
    order = np.argsort(-prob, kind="stable")
    ranked = prob[order]
    before = np.cumsum(ranked) - ranked
    first = np.searchsorted(-ranked, -ranked, side="left")
    levels = np.empty_like(prob)
    levels[order] = before[first]
    return levels


def _skymap_on_grid(prob: np.ndarray, order: int, nx: int = SKY_GRID[0], ny: int = SKY_GRID[1]):
    """Probability per deg² and credible level on a (ny, nx) lon/lat grid of Mollweide x (-pi..pi, RA = pi - x,
    so that RA increases to the left) and declination.  Returns the cell edges, centres and the two grids."""
    x_edges = np.linspace(-np.pi, np.pi, nx + 1)
    y_edges = np.linspace(-np.pi / 2, np.pi / 2, ny + 1)
    x, y = 0.5 * (x_edges[1:] + x_edges[:-1]), 0.5 * (y_edges[1:] + y_edges[:-1])
    ra = np.mod(np.pi - x, 2 * np.pi)
    pix = pixel_of(order, np.broadcast_to(ra, (ny, nx)), np.broadcast_to(y[:, None], (ny, nx)))
    density = prob / (FULL_SKY_DEG2 / prob.size)
    return x_edges, y_edges, x, y, density[pix], _levels(prob)[pix]


def _sky_x(ra: float) -> float:
    """Mollweide x of a right ascension (radians): pi - RA wrapped into [-pi, pi), so that RA increases to
    the left with 180 deg in the centre."""
    return float(np.mod(2 * np.pi - ra, 2 * np.pi) - np.pi)
