"""The report's figures, Matplotlib drawn to inline SVG, one module per family:

- :mod:`.candidates`: zero-lag candidates over time; cumulative IFAR against the background expectation.
- :mod:`.ranking`: the cumulative rate of the ranking statistic, zero lag and background.
- :mod:`.series`: the SNR / rho time series around the top candidates.
- :mod:`.skymaps`: the Mollweide skymaps of the top candidates (HEALPix resampled for drawing).
- :mod:`.injections`: injection recovery, detection efficiency, and the skymaps' P-P plot.
- :mod:`.sensitivity`: found/missed against distance and chirp mass, and VT, for population injections.
- :mod:`.gpu`: each GPU's utilisation and memory over the run.

Each figure function returns its title and a captioned ``<figure>`` with a stable id (``fig-time``,
``fig-ifar``, ``fig-rank``, ``fig-series``, ``fig-skymaps``, ``fig-inj``, ``fig-eff-snr``, ``fig-eff-hrss``,
``fig-vt``, ``fig-pp``, ``fig-gpu``), or a sentence saying why it is not drawn.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from gwbatch.report.figures.candidates import fig_candidates_time, fig_cumulative_ifar
from gwbatch.report.figures.gpu import fig_gpu
from gwbatch.report.figures.injections import (
    fig_efficiency,
    fig_injections,
    fig_localisation,
)
from gwbatch.report.figures.ranking import fig_ranking
from gwbatch.report.figures.sensitivity import fig_sensitivity, fig_sensitivity_searches
from gwbatch.report.figures.series import fig_series
from gwbatch.report.figures.skymaps import fig_skymaps
from gwbatch.report.markup import section


def figures_section(manifest: dict, candidates: pd.DataFrame, background: pd.DataFrame,
                    injections: pd.DataFrame | None, ifos: list[str], series: Sequence[dict] | None,
                    skymaps: Sequence[dict] | None, searches: dict | None = None) -> str:
    """Every figure, in the page's order (``searches``: a campaign of several searches' injection
    tables and livetimes, :func:`fig_sensitivity_searches`)."""
    body = "\n".join([
        fig_candidates_time(manifest, candidates, injections),
        fig_cumulative_ifar(manifest, candidates, background),
        fig_ranking(manifest, candidates, background),
        fig_series(series),
        fig_skymaps(skymaps),
        fig_injections(injections, ifos),
        fig_efficiency(manifest, injections),
        fig_efficiency(manifest, injections, "hrss", "injected hrss (strain / \u221aHz)", ".2e"),
        fig_sensitivity(manifest, injections),
        fig_sensitivity_searches(searches),
        fig_localisation(injections),
        fig_gpu(manifest),
    ])
    return section("Figures", body, "figures")
