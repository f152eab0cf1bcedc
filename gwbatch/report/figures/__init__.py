"""The report's figures, Matplotlib drawn to inline SVG, one module per family:

- :mod:`.candidates`: zero-lag candidates over time; cumulative IFAR against the background expectation.
- :mod:`.ranking`: the cumulative rate of the ranking statistic, zero lag and background.
- :mod:`.series`: the SNR / rho time series around the top candidates.
- :mod:`.skymaps`: the Mollweide skymaps of the top candidates (HEALPix resampled for drawing).
- :mod:`.injections`: injection recovery, detection efficiency, and the skymaps' P-P plot.
- :mod:`.sensitivity`: found/missed against distance and chirp mass, and VT, for population injections.
- :mod:`.gpu`: each GPU's utilisation and memory over the run.
- :mod:`.asd`: each detector's amplitude spectral density (median and 10-90 % over chunks).
- :mod:`.timeline`: the analysed segments, vetoes and gates of each detector.
- :mod:`.triggers`: the histogram of each detector's single-detector trigger SNR.
- :mod:`.qscans`: per candidate, the Q transform of each detector's whitened data and a burst
  candidate's time-frequency pixels.
- :mod:`.radio`: dispersed single pulses: every candidate's DM against time and its S/N against DM (for
  candidates with ``dm`` and ``width`` columns), and per candidate its dedispersed waterfall with the
  pulse profile and its DM-time bow-tie.

Each figure function returns its title and a captioned ``<figure>`` with a stable id (``fig-time``,
``fig-ifar``, ``fig-rank``, ``fig-series``, ``fig-skymaps``, ``fig-inj``, ``fig-eff-snr``, ``fig-eff-hrss``,
``fig-vt``, ``fig-pp``, ``fig-gpu``, ``fig-asd``, ``fig-segments``, ``fig-snr-hist``, ``fig-qscan-<n>``,
``fig-tfmap-<n>``, ``fig-dm-time``, ``fig-snr-dm``, ``fig-waterfall-<n>``, ``fig-bowtie-<n>``), or a sentence
saying why it is not drawn (the DM figures are left out altogether for candidates that are not dispersed
pulses).  :func:`figures_section` holds the single-pulse, significance and injection figures; the page
(:mod:`gwbatch.report.html`) places the others.
"""

from __future__ import annotations

import pandas as pd

from gwbatch.report.figures.candidates import fig_candidates_time, fig_cumulative_ifar
from gwbatch.report.figures.common import guarded
from gwbatch.report.figures.injections import (
    fig_efficiency,
    fig_injections,
    fig_localisation,
)
from gwbatch.report.figures.radio import fig_dm_time, fig_snr_dm
from gwbatch.report.figures.ranking import fig_ranking
from gwbatch.report.figures.sensitivity import fig_sensitivity, fig_sensitivity_searches
from gwbatch.report.markup import html_of, link, section, subsection


def figures_section(manifest: dict, candidates: pd.DataFrame, background: pd.DataFrame,
                    injections: pd.DataFrame | None, ifos: list[str], searches: dict | None = None) -> str:
    """The single-pulse figures (dispersed pulses only), then the significance and injection figures, in
    the page's order (``searches``: a campaign of several searches' injection tables and livetimes,
    :func:`fig_sensitivity_searches`); a figure that fails to draw is named as missing (:func:`guarded`)."""
    pulses = [part for part in (guarded("Single pulses over DM and time", fig_dm_time, manifest, candidates),
                                guarded("S/N against DM", fig_snr_dm, manifest, candidates)) if part]
    members = [m for m in manifest.get("members") or [] if isinstance(m, dict)]
    if members:  # each search ranks in its own statistic against its own background and injections
        reports = ", ".join(html_of(link(m.get("report"), m.get("name"))) for m in members)
        per_search = [subsection("Significance and injections, per search",
                                 '<p class="note">The ranking statistic, injection recovery, detection efficiency, '
                                 f"sensitivity and localisation figures are each search's own: {reports}.</p>")]
    else:
        per_search = [
            guarded("Ranking statistic distribution", fig_ranking, manifest, candidates, background),
            guarded("Injection recovery", fig_injections, injections, ifos),
            guarded("Detection efficiency", fig_efficiency, manifest, injections),
            guarded("Detection efficiency against hrss", fig_efficiency, manifest, injections, "hrss",
                    "injected hrss (strain / \u221aHz)", ".2e"),
            guarded("Sensitivity", fig_sensitivity, manifest, injections),
        ]
    body = "\n".join([
        *pulses,
        guarded("Candidates over time", fig_candidates_time, manifest, candidates, injections),
        guarded("Cumulative IFAR", fig_cumulative_ifar, manifest, candidates, background),
        *per_search,
        guarded("Sensitivity per search", fig_sensitivity_searches, searches),
        *([] if members else [guarded("Sky localisation", fig_localisation, injections)]),
    ])
    return section("Figures", body, "figures")
