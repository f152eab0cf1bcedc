"""Per candidate, time-frequency maps of each detector's whitened data: the Q transform
(:mod:`gwbatch.report.qtransform`) and, for a burst candidate, the search's own pixel energies."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import NullFormatter

from gwbatch.report.figures.common import drawn
from gwbatch.report.format import fmt_gps, num, text
from gwbatch.report.markup import html_table, note

ENERGY_RANGE = (0.0, 25.5)  # the colour scale of normalised energy, Omega's default (louder tiles saturate)
FREQUENCY_TICKS = (10, 20, 50, 100, 200, 500, 1000, 2000, 5000)


def _plain_frequency_axis(ax, low: float, high: float) -> None:
    """A log frequency axis labelled with plain numbers (20, 50, 100 Hz)."""
    ax.set_yscale("log")
    ax.set_yticks([f for f in FREQUENCY_TICKS if low <= f <= high], [f"{f:g}" for f in FREQUENCY_TICKS
                                                                     if low <= f <= high])
    ax.yaxis.set_minor_formatter(NullFormatter())


def _panels(n: int, height: float = 2.8) -> tuple[Figure, np.ndarray]:
    fig = Figure(figsize=(min(3.6 * n, 11.0) + 0.8, height), layout="constrained")
    return fig, fig.subplots(1, n, squeeze=False, sharey=True)[0]


def fig_qscan(entry: dict, fig_id: str) -> str:
    """One panel per detector: the normalised energy of its loudest Q plane around the candidate (time
    from the candidate, log frequency), a shared colour bar, and a table of each plane's Q and loudest tile."""
    scans = {str(ifo): s for ifo, s in (entry.get("scans") or {}).items() if s is not None}
    if not scans:
        return note("Q transform not drawn: no detector had whitened data around this candidate.")
    fig, axes = _panels(len(scans))
    mesh, rows = None, []
    for ax, (ifo, s) in zip(axes, scans.items()):
        mesh = ax.pcolormesh(s.times, s.frequencies, s.energy, vmin=ENERGY_RANGE[0], vmax=ENERGY_RANGE[1],
                             cmap="viridis", shading="nearest", rasterized=True)
        _plain_frequency_axis(ax, float(s.frequencies[0]), float(s.frequencies[-1]))
        ax.set_title(f"{ifo}  Q = {s.q:.1f}", parse_math=False, fontsize="small")
        ax.set_xlabel("time from the candidate (s)")
        rows.append([ifo, num(s.q, ".1f"), num(s.peak_time, "+.4f"), num(s.peak_frequency, ".1f"),
                     num(s.peak_energy, ".1f")])
    axes[0].set_ylabel("frequency (Hz)")
    bar = fig.colorbar(mesh, ax=list(axes), shrink=0.9, pad=0.01, extend="max")
    bar.set_label("normalised energy")
    caption = (f"Q transform of each detector's whitened data around {text(entry.get('label'))} "
               f"(GPS {fmt_gps(entry.get('gps_time'))}): the Q plane with the loudest tile near the candidate, "
               f"energy normalised to a noise mean of 1 (colours saturate at {ENERGY_RANGE[1]:g}).")
    table = html_table(["detector", "Q", "loudest tile: time (s)", "frequency (Hz)", "normalised energy"], rows,
                       [False, True, True, True, True])
    return drawn(fig, fig_id, caption) + table


def fig_tfmap(entry: dict, fig_id: str) -> str:
    """A burst candidate: one panel per detector of the search's pixel energy ``|a|^2 / 2`` at the
    candidate's resolution around it, with its time-frequency extent outlined."""
    maps = {str(ifo): m for ifo, m in (entry.get("maps") or {}).items() if m is not None}
    if not maps:
        return note("Time-frequency map not drawn: no detector had data around this candidate.")
    fig, axes = _panels(len(maps))
    mesh = None
    box = entry.get("box")
    for ax, (ifo, (t, f, energy)) in zip(axes, maps.items()):
        mesh = ax.pcolormesh(t, f, energy, vmin=ENERGY_RANGE[0], vmax=ENERGY_RANGE[1], cmap="magma",
                             shading="nearest", rasterized=True)
        if box is not None:
            t0, t1, f0, f1 = (float(v) for v in box)
            ax.add_patch(Rectangle((t0, f0), t1 - t0, f1 - f0, fill=False, ec="tab:cyan", lw=1.2))
        ax.set_title(ifo, parse_math=False, fontsize="small")
        ax.set_xlabel("time from the candidate (s)")
    axes[0].set_ylabel("frequency (Hz)")
    bar = fig.colorbar(mesh, ax=list(axes), shrink=0.9, pad=0.01, extend="max")
    bar.set_label("pixel energy |a|\u00b2 / 2")
    caption = (f"The burst search's time-frequency pixels of each detector around {text(entry.get('label'))} "
               f"(GPS {fmt_gps(entry.get('gps_time'))}) at the candidate's resolution "
               f"({num(entry.get('resolution'), 'g')} Hz pixels; noise has mean 1, colours saturate at "
               f"{ENERGY_RANGE[1]:g}); the outline is the "
               "candidate's time and frequency extent.")
    return drawn(fig, fig_id, caption)


def fig_burst_waveform(entry: dict, fig_id: str) -> str:
    """A burst candidate's waveform in each detector: the pixels inside its time-frequency extent
    synthesised back to time (whitened, unit noise variance per sample)."""
    waves = {str(ifo): w for ifo, w in (entry.get("waveforms") or {}).items() if w is not None}
    if not waves:
        return note("Waveform not drawn: no detector had data around this candidate.")
    fig, axes = _panels(len(waves), height=2.2)
    for ax, (ifo, (t, x)) in zip(axes, waves.items()):
        ax.plot(t, x, lw=0.8, color="tab:blue")
        ax.set_title(ifo, parse_math=False, fontsize="small")
        ax.set_xlabel("time from the candidate (s)")
    axes[0].set_ylabel("whitened strain (\u03c3)")
    caption = (f"The burst search's view of {text(entry.get('label'))} (GPS {fmt_gps(entry.get('gps_time'))}) in "
               "each detector: the time-frequency pixels inside the candidate's extent (the outline above) "
               "synthesised back to time, in units of the whitened noise's standard deviation; the noise "
               "of those pixels is in it too.")
    return drawn(fig, fig_id, caption)
