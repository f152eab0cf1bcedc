"""Each detector's amplitude spectral density: the median over chunks of the PSD each chunk measured
and whitened with (``psd.h5``), with the 10-90 % band over chunks."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from gwbatch.report.figures.common import drawn
from gwbatch.report.format import fmt_int, num
from gwbatch.report.markup import html_table, skipped, subsection

BAND = (10.0, 90.0)  # percentiles over chunks drawn as the shaded band
REFERENCE_HZ = 100.0  # frequency at which the table quotes each detector's ASD


def asd_bands(psd, f_low: float, f_high: float | None = None):
    """``(frequency, median, low, high)`` of one detector's ASD (strain/√Hz) over ``[f_low, f_high]``
    (the Nyquist bin left out):
    ``sqrt`` of the PSD's median and ``BAND`` percentiles over chunks, frequency by frequency."""
    f = np.asarray(psd.frequency, dtype=np.float64)
    rows = np.atleast_2d(np.asarray(psd.psd, dtype=np.float64))
    keep = (f >= f_low) & (f > 0) & (f <= (f_high if f_high else np.inf)) & (f < f.max())  # not the Nyquist bin
    asd = np.sqrt(np.clip(rows[:, keep], 0.0, None))
    low, high = np.percentile(asd, BAND, axis=0)
    return f[keep], np.median(asd, axis=0), low, high


def asd_at(frequency: np.ndarray, asd: np.ndarray, f: float) -> float:
    """``asd`` at ``f`` (log-log interpolation; NaN outside the band)."""
    if frequency.size == 0 or not frequency[0] <= f <= frequency[-1]:
        return float("nan")
    return float(np.exp(np.interp(np.log(f), np.log(frequency), np.log(np.maximum(asd, 1e-300)))))


def fig_asd(psds: dict | None, f_low: float, f_high: float | None = None) -> str:
    """sqrt(PSD) of each detector against frequency, log-log from ``f_low``: the median over chunks (line)
    and the 10-90 % band (shaded); a table of chunks, the ASD at ``REFERENCE_HZ`` and the lowest ASD."""
    title = "Amplitude spectral density"
    if psds is None:
        return skipped(title, "no PSDs were given to the report (a run from before psd.h5 was written).")
    shown = {ifo: p for ifo, p in psds.items() if len(getattr(p, "psd", ()))}
    if not shown:
        return skipped(title, "no chunk measured a PSD (the search does not whiten, or nothing was analysed).")
    fig = Figure(figsize=(9, 4.2), layout="constrained")
    ax = fig.add_subplot()
    rows = []
    for k, (ifo, psd) in enumerate(shown.items()):
        f, median, low, high = asd_bands(psd, f_low, f_high)
        if f.size == 0:
            continue
        colour = f"C{k % 10}"
        ax.fill_between(f, low, high, color=colour, alpha=0.25, lw=0)
        ax.plot(f, median, color=colour, lw=1, label=f"{ifo} ({len(psd.psd)} chunks)")
        best = int(np.argmin(median))
        rows.append([ifo, fmt_int(len(psd.psd)), num(asd_at(f, median, REFERENCE_HZ), ".3e"),
                     f"{num(asd_at(f, low, REFERENCE_HZ), '.3e')} \u2013 {num(asd_at(f, high, REFERENCE_HZ), '.3e')}",
                     num(median[best], ".3e"), num(f[best], ".1f")])
    if not rows:
        return skipped(title, f"no PSD has a frequency above f_low = {f_low:g} Hz.")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("frequency (Hz)")
    ax.set_ylabel("ASD (strain / \u221aHz)")
    ax.grid(True, which="both", lw=0.3, color="0.85")
    ax.legend(loc="upper right", fontsize="small")
    caption = (f"Square root of the PSD each chunk measured and whitened with, from f_low = {f_low:g} Hz: the median "
               f"over chunks (line) and the {BAND[0]:.0f}\u2013{BAND[1]:.0f}% range over chunks (shaded).")
    header = ["detector", "chunks", f"median ASD at {REFERENCE_HZ:g} Hz", f"{BAND[0]:.0f}\u2013{BAND[1]:.0f}% at "
              f"{REFERENCE_HZ:g} Hz", "lowest median ASD", "at (Hz)"]
    return subsection(title, drawn(fig, "fig-asd", caption)
                      + html_table(header, rows, [False, True, True, True, True, True]))
