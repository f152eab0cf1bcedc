"""What the injections show: recovered against injected SNR, detection efficiency, and the calibration of
the skymaps (P-P plot)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter

from gwbatch.report.figures.common import drawn
from gwbatch.report.format import DASH, fmt_fraction, num
from gwbatch.report.inputs import column, flag, frame
from gwbatch.report.markup import html_table, kv_table, note, skipped, subsection
from gwbatch.sky.skymap import pp_test

RECOVERY_SNR = 8.0  # injected network SNR above which the found fraction is quoted
RECOVERY_TOLERANCE = 0.15  # the +-15 % band of recovered / injected SNR


def fig_injections(injections: pd.DataFrame | None, ifos: list[str]) -> str:
    """Recovered against injected SNR per detector for the found injections, and tables of the found
    fractions and per-detector SNR and timing accuracy."""
    title = "Injection recovery"
    if injections is None:
        return skipped(title, "this campaign has no injections.")
    if len(injections) == 0:
        return skipped(title, "the injection set is empty.")
    plotted = [ifo for ifo in ifos if f"injected_snr_{ifo}" in injections.columns]
    if plotted:
        caption = ("Recovered against injected SNR per detector for found injections, with y = x and a "
                   f"\u00b1{RECOVERY_TOLERANCE:.0%} band.")
        shown = drawn(_draw_recovery(injections, plotted), "fig-inj", caption)
    else:
        shown = note("No per-detector injected SNRs to plot.")
    return subsection(title, shown + "\n" + _recovery_tables(injections, plotted))


def _recovered_column(inj: pd.DataFrame, ifo: str) -> tuple[np.ndarray | None, str]:
    """The recovered statistic of ``ifo``: rho where the search records it, else SNR; and its name."""
    rho = column(inj, f"found_rho_{ifo}")
    if rho is not None:
        return rho, "rho"
    return column(inj, f"found_snr_{ifo}"), "SNR"


def _plain_log_ticks(axis) -> None:
    """Plain numbers (6, 20) on a log axis rather than 6x10^0, 2x10^1."""
    axis.set_major_formatter(LogFormatter())
    axis.set_minor_formatter(LogFormatter(labelOnlyBase=False))


def _draw_recovery(inj: pd.DataFrame, ifos: list[str]) -> Figure:
    fig = Figure(figsize=(3.6 * len(ifos) + 0.8, 3.8), layout="constrained")
    axes = fig.subplots(1, len(ifos), squeeze=False)[0]
    found = flag(inj, "found", False)
    for ax, ifo in zip(axes, ifos):
        x = column(inj, f"injected_snr_{ifo}")
        y, label = _recovered_column(inj, ifo)
        y = y if y is not None else np.full(x.size, np.nan)
        ok = found & np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
        ax.set_title(ifo, parse_math=False)
        ax.set_xlabel("injected SNR")
        ax.set_ylabel(f"recovered {label}")
        if not ok.any():
            ax.text(0.5, 0.5, "no found injections", ha="center", va="center", transform=ax.transAxes)
            continue
        lim = np.array([min(x[ok].min(), y[ok].min()) / 1.5, max(x[ok].max(), y[ok].max()) * 1.5])
        ax.fill_between(lim, lim * (1 - RECOVERY_TOLERANCE), lim * (1 + RECOVERY_TOLERANCE), color="tab:green",
                        alpha=0.2, lw=0, label=f"\u00b1{RECOVERY_TOLERANCE:.0%}")
        ax.plot(lim, lim, "-", color="tab:green", lw=1, label="y = x")
        ax.scatter(x[ok], y[ok], s=12, color="black", zorder=3, label=f"found ({ok.sum()})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            _plain_log_ticks(axis)
        ax.set_xlim(*lim)
        ax.set_ylim(*lim)
        ax.legend(loc="upper left", fontsize="small")
    return fig


def _recovery_tables(inj: pd.DataFrame, ifos: list[str]) -> str:
    """Injections analysed and found (the found fraction above ``RECOVERY_SNR``), and per detector the
    median recovered / injected SNR, the fraction within ``RECOVERY_TOLERANCE`` and the median timing error."""
    found = flag(inj, "found", False)
    analysed = flag(inj, "analysed", True)
    snr = column(inj, "snr")
    loud = analysed & (snr >= RECOVERY_SNR) if snr is not None else np.zeros(len(inj), bool)
    overall = kv_table([
        ("injections", str(len(inj))),
        ("analysed", str(int(analysed.sum()))),
        ("found", str(int((found & analysed).sum()))),
        (f"found among analysed with injected SNR \u2265 {RECOVERY_SNR:g}",
         fmt_fraction(int((found & loud).sum()), int(loud.sum()))),
    ])
    rows = []
    for ifo in ifos:
        x = column(inj, f"injected_snr_{ifo}")
        y, _ = _recovered_column(inj, ifo)
        dt = column(inj, f"dt_{ifo}")
        ok = found & np.isfinite(x) & (x > 0) & (np.isfinite(y) if y is not None else False)
        ratio = y[ok] / x[ok] if ok.any() else np.zeros(0)
        within = np.abs(ratio - 1) <= RECOVERY_TOLERANCE
        adt = np.abs(dt[found & np.isfinite(dt)]) * 1e3 if dt is not None else np.zeros(0)
        rows.append([ifo, str(int(ok.sum())), num(np.median(ratio), ".3f") if ratio.size else DASH,
                     num(within.mean(), ".3f") if ratio.size else DASH,
                     num(np.median(adt), ".3g") if adt.size else DASH])
    header = ["detector", "found (plotted)", "median recovered / injected",
              f"fraction within \u00b1{RECOVERY_TOLERANCE:.0%}", "median |dt| (ms)"]
    per_ifo = html_table(header, rows, [False, True, True, True, True]) if rows else ""
    return overall + "\n" + per_ifo


def fig_efficiency(manifest: dict, injections: pd.DataFrame | None, column_name: str = "snr",
                   quantity: str = "injected network SNR", fmt: str = ".3g") -> str:
    """Found fraction against an injected quantity (network SNR; hrss for burst injections), with
    binomial 1-sigma errors: found by any candidate, and found louder than every background event
    (FAR at the background's bound)."""
    title = "Detection efficiency" + ("" if column_name == "snr" else f" against {quantity}")
    inj = frame(injections)
    values = column(inj, column_name)
    if values is None or len(inj) == 0:
        return "" if column_name != "snr" else skipped(title, "this campaign has no injections.")
    analysed = flag(inj, "analysed", True) & np.isfinite(values) & (values > 0)
    if analysed.sum() < 2:
        return skipped(title, "fewer than two injections were analysed.")
    found = flag(inj, "found", False)
    far = column(inj, "found_far")
    bound = (manifest.get("background") or {}).get("far_bound_hz")
    edges = np.unique(np.quantile(values[analysed], np.linspace(0, 1, min(10, int(analysed.sum()) // 5 + 2))))
    if edges.size < 2:
        edges = np.array([values[analysed].min() * 0.99, values[analysed].max() * 1.01])
    which = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, edges.size - 2)
    centre = np.sqrt(edges[:-1] * edges[1:])
    fig = Figure(figsize=(7, 4.2), layout="constrained")
    ax = fig.add_subplot()
    curves = [("found", found, "black")]
    if far is not None and bound:
        curves.append(("louder than all background", found & (np.nan_to_num(far, nan=np.inf) <= bound * (1 + 1e-9)),
                       "tab:blue"))
    rows = []
    for label, hit, colour in curves:
        n = np.bincount(which[analysed], minlength=centre.size)
        k = np.bincount(which[analysed], weights=hit[analysed].astype(float), minlength=centre.size)
        eff = np.divide(k, n, out=np.full(centre.size, np.nan), where=n > 0)
        err = np.sqrt(np.maximum(eff * (1 - eff), 0.25 / np.maximum(n, 1)) / np.maximum(n, 1))
        ax.errorbar(centre, eff, yerr=err, fmt="o-", color=colour, ms=4, capsize=2, label=label)
        rows.append((label, k, n))
    ax.set_xscale("log")
    _plain_log_ticks(ax.xaxis)
    ax.set_ylim(-0.03, 1.05)
    ax.set_xlabel(quantity)
    ax.set_ylabel("fraction found")
    ax.legend(loc="lower right", fontsize="small")
    header = [f"{quantity} bin"] + [label for label, _, _ in rows]
    table = [[f"{edges[i]:{fmt}}\u2013{edges[i + 1]:{fmt}}"] + [fmt_fraction(int(k[i]), int(n[i])) for _, k, n in rows]
             for i in range(centre.size)]
    caption = (f"Fraction of analysed injections found, per bin of {quantity} (equal-count bins), "
               "with binomial 1\u03c3 errors.")
    return subsection(title, drawn(fig, f"fig-eff-{column_name}", caption)
                      + html_table(header, table, [False] + [True] * len(rows)))


def fig_localisation(injections: pd.DataFrame | None) -> str:
    """P-P plot of the true directions' credible levels in the skymaps, with the KS test, and the
    localisation figures of merit."""
    title = "Sky localisation"
    inj = frame(injections)
    level = column(inj, "credible_level")
    if level is None or not np.isfinite(level).any():
        return skipped(title, "no found injection has a skymap (no injections, or no sky directions).")
    p = np.sort(level[np.isfinite(level)])
    n = p.size
    ks, pvalue = pp_test(p)
    fig = Figure(figsize=(4.6, 4.4), layout="constrained")
    ax = fig.add_subplot()
    grid = np.linspace(0, 1, 101)
    band = 1.36 / np.sqrt(n)  # 95% Kolmogorov-Smirnov band
    ax.fill_between(grid, np.clip(grid - band, 0, 1), np.clip(grid + band, 0, 1), color="tab:blue", alpha=0.15, lw=0,
                    label="95% KS band")
    ax.plot(grid, grid, "--", color="tab:blue", lw=1)
    ax.step(np.r_[0, p, 1], np.r_[0, np.arange(1, n + 1) / n, 1], where="post", color="black",
            label=f"{n} injections")
    ax.set_xlabel("credible level")
    ax.set_ylabel("fraction of injections within it")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(loc="upper left", fontsize="small")
    rows = [("injections with a skymap", str(n)), ("KS statistic, p-value", f"{ks:.3f}, {pvalue:.3g}")]
    for key, label in (("area90", "median 90% credible area (deg\u00b2)"),
                       ("searched_area", "median searched area (deg\u00b2)"),
                       ("sky_error_deg", "median angular error of the best direction (\u00b0)")):
        values = column(inj, key)
        if values is not None and np.isfinite(values).any():
            rows.append((label, f"{np.nanmedian(values):.3g}"))
    caption = ("P-P plot: the fraction of found injections whose true direction lies within each credible level "
               "of its skymap; calibrated maps follow the diagonal.")
    return subsection(title, drawn(fig, "fig-pp", caption) + kv_table(rows))
