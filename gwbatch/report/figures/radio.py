"""Dispersed single pulses (a search of radio spectra): per top candidate its dedispersed waterfall with
the pulse profile, and its S/N over DM trials and time (the bow-tie); for the run, every candidate over
DM and time and its S/N against DM.

The run's figures are drawn when the candidate table has ``dm`` and ``width`` columns (never by the
search's name); beyond :data:`MAX_POINTS` candidates a subsample is drawn (the loudest half of the cap
and a fixed random draw of the rest), and the captions say so.  RFI-flagged candidates (``rfi`` True)
are drawn hollow and grey.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from gwbatch.report.figures.common import drawn
from gwbatch.report.format import fmt_gps, fmt_snr, missing, num, text
from gwbatch.report.inputs import column, flag, span_start
from gwbatch.report.markup import html_table, note, subsection

#: Candidates drawn as markers at most (the rest are counted in the histograms only).
MAX_POINTS = 5000
#: Beyond this many markers a scatter is drawn as an image inside the SVG (small pages).
RASTER_POINTS = 1000
#: Marker area (pt²) of the faintest and of the loudest candidate.
MARKER_AREA = (4.0, 160.0)
#: Colour range of the waterfall: these percentiles of its pixels.
WATERFALL_RANGE = (1.0, 99.5)
#: The waterfall is averaged for drawing so that a pulse of the candidate's S/N is about this many σ
#: above each pixel's noise, with at least this many sub-bands and time bins left.
PIXEL_SNR, MIN_SHOWN_SUBBANDS, MIN_SHOWN_BINS = 1.5, 8, 64
DM_UNIT = "pc/cm\u00b3"
RFI_STYLE = {"facecolors": "none", "edgecolors": "0.55", "linewidths": 0.8}


def has_pulses(candidates: pd.DataFrame) -> bool:
    """The candidates are dispersed pulses: they have ``dm`` and ``width`` columns."""
    return {"dm", "width"} <= set(candidates.columns)


def drawn_subset(snr: np.ndarray, cap: int = MAX_POINTS) -> tuple[np.ndarray, int]:
    """Positions of the candidates drawn as markers, faintest first (the loudest on top): all of them up to
    ``cap``; beyond it the ``cap // 2`` loudest and a fixed random draw of the rest.  Also returns how many
    of the drawn were chosen at random."""
    order = np.argsort(np.where(np.isfinite(snr), snr, -np.inf), kind="stable")
    if order.size <= cap:
        return order, 0
    loud = order[-(cap // 2):]
    rest = np.random.default_rng(0).choice(order[: -(cap // 2)], cap - cap // 2, replace=False)
    chosen = np.concatenate([rest, loud])
    return chosen[np.argsort(np.where(np.isfinite(snr[chosen]), snr[chosen], -np.inf), kind="stable")], rest.size


def _marker_area(snr: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Marker area growing with S/N (quadratically: louder pulses stand out), from ``MARKER_AREA``."""
    x = np.clip((snr - lo) / (hi - lo) if hi > lo else np.ones_like(snr), 0.0, 1.0)
    return MARKER_AREA[0] + (MARKER_AREA[1] - MARKER_AREA[0]) * x**2


def _pulses(candidates: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """gps time, DM, S/N and RFI flag of the candidates with finite time, DM and S/N (None if none)."""
    t, dm, snr = column(candidates, "gps_time"), column(candidates, "dm"), column(candidates, "snr")
    if t is None or dm is None or snr is None:
        return None
    ok = np.isfinite(t) & np.isfinite(dm) & np.isfinite(snr)
    if not ok.any():
        return None
    return t[ok], dm[ok], snr[ok], flag(candidates, "rfi", False)[ok]


def _subset_note(n: int, shown: np.ndarray, random: int) -> str:
    if shown.size == n:
        return ""
    return (f" For speed {shown.size} of the {n} candidates are drawn as markers: the {shown.size - random} "
            f"loudest and {random} chosen at random among the rest.")


def _drawable(title: str, candidates: pd.DataFrame):
    """``((t, dm, snr, rfi), None)`` of the candidates, or ``(None, what to return instead)``: "" when they
    are not dispersed pulses, a note when none has a finite time, DM and S/N."""
    if not has_pulses(candidates):
        return None, ""
    pulses = _pulses(candidates)
    if pulses is None:
        return None, subsection(title, note("Not drawn: no candidate has a finite time, DM and S/N."))
    return pulses, None


def fig_dm_time(manifest: dict, candidates: pd.DataFrame) -> str:
    """The single-pulse plot: every candidate's DM against its time, marker area and colour by S/N,
    RFI-flagged candidates hollow and grey ("" when the candidates are not dispersed pulses)."""
    title = "Single pulses over DM and time"
    pulses, instead = _drawable(title, candidates)
    if pulses is None:
        return instead
    t, dm, snr, rfi = pulses
    t0 = span_start(manifest, candidates)
    shown, random = drawn_subset(snr)
    lo, hi = float(snr.min()), float(snr.max())
    fig = Figure(figsize=(10, 4.2), layout="constrained")
    ax = fig.add_subplot()
    clean, flagged = shown[~rfi[shown]], shown[rfi[shown]]
    if flagged.size:
        ax.scatter(t[flagged] - t0, dm[flagged], s=np.maximum(_marker_area(snr[flagged], lo, hi), 25.0), zorder=2,
                   label=f"RFI-flagged ({int(rfi.sum())})", rasterized=shown.size > RASTER_POINTS, **RFI_STYLE)
    sc = ax.scatter(t[clean] - t0, dm[clean], s=_marker_area(snr[clean], lo, hi), c=snr[clean], cmap="viridis",
                    vmin=lo, vmax=hi if hi > lo else lo + 1.0, alpha=0.85, linewidths=0, zorder=3,
                    rasterized=shown.size > RASTER_POINTS)
    fig.colorbar(sc, ax=ax, pad=0.01, label="S/N")
    ax.set_xlabel(f"time since GPS {t0:.4f} (s)")
    ax.set_ylabel(f"DM ({DM_UNIT})")
    ax.set_ylim(bottom=min(0.0, float(dm.min())) - 0.04 * max(float(dm.max() - min(0.0, dm.min())), 1.0))
    if flagged.size:
        ax.legend(loc="upper right", fontsize="small")
    caption = (f"Every zero-lag candidate ({t.size}): its DM against its arrival time at the top of the band "
               f"since the start of the analysed span; marker area and colour grow with S/N ({lo:.2f} to "
               f"{hi:.2f}). RFI-flagged candidates are hollow and grey.") + _subset_note(t.size, shown, random)
    return subsection(title, drawn(fig, "fig-dm-time", caption))


def _dm_edges(dm: np.ndarray, bins: int = 100) -> np.ndarray:
    """Histogram edges over DM: one bin per DM trial (halfway between trials) when there are few distinct
    DMs, else ``bins`` equal bins."""
    values = np.unique(dm)
    if values.size <= 2 * bins:
        mid = 0.5 * (values[1:] + values[:-1])
        step = np.diff(values).min() if values.size > 1 else 1.0
        return np.concatenate([[values[0] - step / 2], mid, [values[-1] + step / 2]])
    return np.linspace(float(values[0]), float(values[-1]), bins + 1)


def fig_snr_dm(manifest: dict, candidates: pd.DataFrame) -> str:
    """Above, the number of candidates in each DM trial (RFI-flagged stacked on the others); below, each
    candidate's S/N against its DM ("" when the candidates are not dispersed pulses)."""
    title = "S/N against DM"
    pulses, instead = _drawable(title, candidates)
    if pulses is None:
        return instead
    _, dm, snr, rfi = pulses
    edges = _dm_edges(dm)
    fig = Figure(figsize=(10, 4.8), layout="constrained")
    top, ax = fig.subplots(2, 1, sharex=True, height_ratios=[1, 2])
    counts = np.histogram(dm[~rfi], edges)[0]
    top.stairs(counts, edges, fill=True, color="tab:blue", alpha=0.7, label=f"candidates ({int((~rfi).sum())})")
    if rfi.any():
        top.stairs(counts + np.histogram(dm[rfi], edges)[0], edges, baseline=counts, fill=True, color="0.7",
                   label=f"RFI-flagged ({int(rfi.sum())})")
    top.set_ylabel("candidates")
    top.legend(loc="upper right", fontsize="small")
    shown, random = drawn_subset(snr)
    clean, flagged = shown[~rfi[shown]], shown[rfi[shown]]
    if flagged.size:
        ax.scatter(dm[flagged], snr[flagged], s=14, zorder=2, rasterized=shown.size > RASTER_POINTS, **RFI_STYLE)
    ax.scatter(dm[clean], snr[clean], s=10, color="tab:blue", alpha=0.7, linewidths=0, zorder=3,
               rasterized=shown.size > RASTER_POINTS)
    best = int(np.argmax(np.where(rfi, -np.inf, snr))) if (~rfi).any() else int(np.argmax(snr))
    ax.plot(dm[best], snr[best], marker="*", ms=12, color="tab:red", ls="none", zorder=4,
            label=f"loudest: S/N {snr[best]:.2f} at DM {dm[best]:.2f}")
    ax.legend(loc="upper right", fontsize="small")
    ax.set_xlabel(f"DM ({DM_UNIT})")
    ax.set_ylabel("S/N")
    caption = ("Above: the number of zero-lag candidates in each "
               + ("DM trial" if edges.size - 1 == np.unique(dm).size else f"of {edges.size - 1} DM bins")
               + (" (RFI-flagged in grey, stacked)" if rfi.any() else "")
               + ". Below: each candidate's S/N against its DM (RFI-flagged hollow and grey); the star is the "
               + ("loudest candidate not flagged as RFI." if (~rfi).any() else "loudest candidate.")
               + _subset_note(dm.size, shown, random).replace("candidates are drawn", "candidates below are drawn"))
    return subsection(title, drawn(fig, "fig-snr-dm", caption))


def _arrays(*values) -> list[np.ndarray]:
    return [np.asarray(v, dtype=np.float64) for v in values]


def _binned_profile(t: np.ndarray, y: np.ndarray, centres: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The full-rate profile summed into the waterfall's time bins, over the square root of the samples
    in each (noise of unit variance per sample stays of unit variance): ``(centres, values)`` of the bins
    with samples."""
    if centres.size > 1:
        mid = 0.5 * (centres[1:] + centres[:-1])
        edges = np.concatenate([[centres[0] - (mid[0] - centres[0])], mid, [centres[-1] + (centres[-1] - mid[-1])]])
    else:
        edges = np.array([t.min(), t.max() + 1e-12])
    ok = np.isfinite(t) & np.isfinite(y)
    total = np.histogram(t[ok], edges, weights=y[ok])[0]
    n = np.histogram(t[ok], edges)[0]
    have = n > 0
    return centres[have], total[have] / np.sqrt(n[have])


def display_factors(n_freq: int, n_time: int, samples_per_bin: float, width: float | None,
                    snr: float | None) -> tuple[int, int]:
    """How many of the waterfall's sub-bands and time bins are averaged into one drawn pixel, so that a
    pulse of the candidate's S/N stands out of each pixel's noise: time bins of about half its ``width``
    (samples), and about ``snr² / (2 PIXEL_SNR²)`` sub-bands (a pixel of half the width and 1/F of the band
    holds a pulse at S/N ``snr / sqrt(2 F)``); each factor a divisor of the count, 1 where unknown."""
    def divisor(n: int, target: float) -> int:
        return max([d for d in range(1, n + 1) if n % d == 0 and d <= max(target, 1.0)], default=1)

    time = 1
    if not missing(width) and np.isfinite(samples_per_bin) and samples_per_bin > 0:
        time = max(1, min(int(0.5 * float(width) / samples_per_bin), n_time // MIN_SHOWN_BINS))
    freq = 1
    if not missing(snr) and float(snr) > 0:
        freq = divisor(n_freq, n_freq / max(float(snr) ** 2 / (2 * PIXEL_SNR**2), MIN_SHOWN_SUBBANDS))
    return freq, time


def _rebinned(times: np.ndarray, freqs: np.ndarray, power: np.ndarray, freq: int, time: int):
    """``power`` averaged over ``freq`` sub-bands and ``time`` bins (the last bins that do not fill a
    pixel left out), with the pixels' centres."""
    nt = times.size // time
    image = power[:, : nt * time].reshape(freqs.size // freq, freq, nt, time).mean(axis=(1, 3))
    return times[: nt * time].reshape(nt, time).mean(axis=1), freqs.reshape(-1, freq).mean(axis=1), image


def fig_waterfall(entry: dict, fig_id: str, width: float | None = None, snr: float | None = None) -> str:
    """A candidate's dedispersed waterfall: the spectra shifted by its DM's delays (frequency in MHz
    against time from the candidate, colour the conditioned power), with the sum over channels (the pulse
    profile) above.  Given the candidate's boxcar ``width`` (samples) and ``snr``, the pixels are averaged
    for drawing (:func:`display_factors`) so that a pulse of its S/N is seen."""
    try:
        times, freqs = _arrays(entry["times"], entry["frequencies"])
        power = np.asarray(entry["power"], dtype=np.float64)
        pt, py = _arrays(*entry["profile"])
    except (KeyError, TypeError, ValueError):
        return note("Waterfall not drawn: the search gave no usable spectra around this candidate.")
    if (power.shape != (freqs.size, times.size) or not times.size or not np.isfinite(power).any()
            or pt.shape != py.shape):
        return note("Waterfall not drawn: the search gave no usable spectra around this candidate.")
    order = np.argsort(freqs)  # drawn with the highest frequency on top, whatever the store's channel order
    freqs, power = freqs[order], power[order]
    step = np.median(np.diff(pt)) if pt.size > 1 else np.nan
    per_bin = np.median(np.diff(times)) / step if times.size > 1 and step > 0 else np.nan
    f_factor, t_factor = display_factors(freqs.size, times.size, per_bin, width, snr)
    shown_t, shown_f, image = _rebinned(times, freqs, power, f_factor, t_factor)
    lo, hi = np.nanpercentile(image, WATERFALL_RANGE)
    fig = Figure(figsize=(7.5, 5.2), layout="constrained")
    prof, ax = fig.subplots(2, 1, sharex=True, height_ratios=[1, 2.6])
    bt, by = _binned_profile(pt, py, shown_t)
    prof.plot(pt, py, color="0.7", lw=0.6, label="each sample")
    prof.plot(bt, by, color="black", lw=1.1, label="binned as drawn")
    prof.axvline(0.0, color="tab:red", ls="--", lw=0.8)
    prof.set_ylabel("profile (\u03c3)")
    prof.legend(loc="upper right", fontsize="x-small", ncols=2)
    mesh = ax.pcolormesh(shown_t, shown_f, image, cmap="viridis", vmin=lo, vmax=hi if hi > lo else lo + 1.0,
                         shading="nearest", rasterized=True)
    ax.set_xlim(float(min(pt.min(), shown_t[0])) if pt.size else shown_t[0],
                float(max(pt.max(), shown_t[-1])) if pt.size else shown_t[-1])
    ax.set_xlabel("time from the candidate (s)")
    ax.set_ylabel("frequency (MHz)")
    bar = fig.colorbar(mesh, ax=[prof, ax], shrink=0.9, pad=0.01, extend="both")
    bar.set_label("conditioned power")
    dm = entry.get("dm")
    prof.set_title(f"{text(entry.get('label'))}  beam {text(entry.get('beam'))}  DM {num(dm, '.2f')}",
                   parse_math=False, fontsize="small")
    peak = int(np.nanargmax(by)) if by.size else None
    averaged = ""
    if f_factor > 1 or t_factor > 1:
        averaged = (f", averaged for drawing into {shown_f.size} sub-bands and {shown_t.size} bins of "
                    f"{num(per_bin * t_factor, '.0f')} samples (pixels sized to the candidate's width and S/N, so "
                    f"that its pulse stands out of each pixel's noise)")
    caption = (f"Dedispersed waterfall of {text(entry.get('label'))} (GPS {fmt_gps(entry.get('gps_time'))}, beam "
               f"{text(entry.get('beam'))}): the conditioned spectra, each channel shifted by its dispersion delay "
               f"at the candidate's DM ({num(dm, '.2f')} {DM_UNIT}), summed into {freqs.size} sub-bands and "
               f"{times.size} time bins of {num(per_bin, '.0f')} samples{averaged}; colours span the "
               f"{WATERFALL_RANGE[0]:g}-{WATERFALL_RANGE[1]:g} percentiles of the pixels. Above: the sum over "
               "channels in units of its noise \u03c3, at the full time resolution (grey) and in the time bins of the "
               "pixels drawn (black)"
               + (f", whose peak is {by[peak]:.2f} \u03c3 at {bt[peak] * 1e3:+.1f} ms" if peak is not None else "")
               + "; the dashed line marks the candidate.")
    return drawn(fig, fig_id, caption)


def bowtie_peak(entry: dict) -> tuple[int, int, float] | None:
    """DM trial and time position of the bow-tie's largest finite S/N, and that S/N (None if none)."""
    snr = np.asarray(entry.get("snr"), dtype=np.float64)
    if snr.ndim != 2 or not np.isfinite(snr).any():
        return None
    k, j = np.unravel_index(int(np.nanargmax(snr)), snr.shape)
    return int(k), int(j), float(snr[k, j])


def fig_bowtie(entry: dict, fig_id: str, dm: float | None = None, snr_value: float | None = None) -> str:
    """A candidate's bow-tie: boxcar S/N (at its width) over the DM trials around its DM and time, with a
    marker at the candidate (``dm``; time 0), beside the largest S/N over time at each DM trial; and a
    table of the candidate and of the bow-tie's maximum."""
    try:
        times, dms = _arrays(entry["times"], entry["dms"])
        snr = np.asarray(entry["snr"], dtype=np.float64)
    except (KeyError, TypeError, ValueError):
        return note("Bow-tie not drawn: the search gave no S/N over DM around this candidate.")
    peak = bowtie_peak(entry)
    if snr.shape != (dms.size, times.size) or peak is None:
        return note("Bow-tie not drawn: the search gave no S/N over DM around this candidate.")
    k, j, best = peak
    per_dm = np.nanmax(np.where(np.isfinite(snr), snr, -np.inf), axis=1)
    order = np.argsort(dms)
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    ax, side = fig.subplots(1, 2, width_ratios=[2.6, 1])
    mesh = ax.pcolormesh(times, dms[order], snr[order], cmap="magma", vmin=0.0, vmax=max(best, 1.0),
                         shading="nearest", rasterized=True)
    bar = fig.colorbar(mesh, ax=ax, pad=0.01, extend="min")
    bar.set_label("boxcar S/N")
    at_dm = float(dms[k]) if missing(dm) else float(dm)
    ax.plot([0.0], [at_dm], marker="o", ms=11, mfc="none", mec="tab:cyan", mew=1.6, ls="none")
    ax.set_xlabel("time from the candidate (s)")
    ax.set_ylabel(f"DM ({DM_UNIT})")
    ax.set_title(f"{text(entry.get('label'))}  beam {text(entry.get('beam'))}", parse_math=False, fontsize="small")
    side.plot(dms[order], per_dm[order], color="black", lw=1.1, marker=".", ms=4)
    side.axvline(at_dm, color="tab:cyan", ls="--", lw=1.2)
    side.set_xlabel(f"DM ({DM_UNIT})")
    side.set_ylabel("largest S/N over time")
    side.legend([Line2D([], [], color="tab:cyan", ls="--")], [f"candidate DM {at_dm:.2f}"], loc="lower center",
                fontsize="x-small")
    caption = (f"DM\u2013time bow-tie of {text(entry.get('label'))} (GPS {fmt_gps(entry.get('gps_time'))}, beam "
               f"{text(entry.get('beam'))}): the S/N of a boxcar of the candidate's width over {dms.size} DM trials "
               f"({dms.min():.2f} to {dms.max():.2f} {DM_UNIT}) and time from the candidate (colours from 0 to the "
               f"largest S/N); the circle marks the candidate. Right: the largest S/N over time at each DM trial; "
               f"the dashed line is the candidate's DM.")
    rows = [["candidate", num(at_dm, ".2f"), num(0.0, "+.4f"), fmt_snr(snr_value)],
            ["bow-tie maximum", num(dms[k], ".2f"), num(times[j], "+.4f"), fmt_snr(best)]]
    table = html_table([" ", f"DM ({DM_UNIT})", "time (s)", "S/N"], rows, [False, True, True, True])
    return drawn(fig, fig_id, caption) + table
