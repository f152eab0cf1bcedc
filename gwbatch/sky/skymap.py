"""Sky localisation from the coherent statistic (ALGORITHMS.md §3.8).

For complex detector SNRs ``Z`` with unit-variance quadratures, the likelihood ratio of a signal in
direction ``p``, maximised over the four amplitude parameters, is ``exp(rho_c^2(p) / 2)`` (the
coherent statistic is the log likelihood ratio; Harry & Fairhurst 2011, PRD 83, 084002, eq. 2.18).
The map is ``P(p) ∝ exp(rho_c^2(p) / (2 T))``, normalised with log-sum-exp.  ``T = 1`` is that
profile likelihood, and it is overconfident: SNRs are read at whole-sample offsets and with the
template's mismatch.  ``T`` is therefore calibrated by the P-P test (:func:`pp_test`); it is the
campaign setting ``search.coherent.skymap_temperature``, default ``TEMPERATURE``.  Two studies
(docs/decisions.md): 36 H1-L1-V1 binaries at 1024 Hz filtered with their own templates (KS p 1e-6
at T = 1, 0.14 at 2, 0.56 at 2.5, 0.77 at 3), and the 100-BNS campaign at 4096 Hz through the whole
search (p 2e-4 at 2.5, 0.04 at 3, 0.16 at 3.25, 0.003 at 4).  Areas are in square degrees; the
credible area at level ``q`` is the smallest set of pixels, most probable first, that holds ``q``.
"""

from __future__ import annotations

import numpy as np

#: Likelihood temperature of the skymaps, from the P-P test (module docstring).
TEMPERATURE = 3.25


def posterior(rho_c2: np.ndarray, temperature: float = TEMPERATURE) -> np.ndarray:
    """Probability per pixel (sums to one) from ``rho_c^2`` over a full equal-area grid."""
    if not temperature > 0:
        raise ValueError(f"skymap temperature must be positive, got {temperature}")
    log_l = 0.5 * np.asarray(rho_c2, dtype=np.float64) / temperature
    log_l = log_l - log_l.max()
    p = np.exp(log_l)
    return p / p.sum()


def credible_area(prob: np.ndarray, level: float = 0.9) -> float:
    """Area (deg²) of the smallest region holding ``level`` of the probability."""
    prob = np.asarray(prob, dtype=np.float64)
    if not 0.0 < level <= 1.0:
        raise ValueError(f"credible level must be in (0, 1], got {level}")
    ordered = np.sort(prob)[::-1]
    n = int(np.searchsorted(np.cumsum(ordered), level * ordered.sum())) + 1
    return min(n, prob.size) * _pixel_area(prob.size)


def searched_area(prob: np.ndarray, pixel: int) -> float:
    """Area (deg²) of the pixels at least as probable as ``pixel``: the area searched before the
    true direction is reached."""
    prob = np.asarray(prob, dtype=np.float64)
    return int(np.sum(prob >= prob[pixel])) * _pixel_area(prob.size)


def credible_level(prob: np.ndarray, pixel: int) -> float:
    """Probability in the pixels more probable than ``pixel``, plus its own: the smallest credible
    level whose region contains it (uniform in [0, 1] for a calibrated map: the P-P test)."""
    prob = np.asarray(prob, dtype=np.float64)
    return min(1.0, float(np.sum(prob[prob >= prob[pixel]]) / prob.sum()))


def _pixel_area(n_pix: int) -> float:
    return 4 * np.pi * (180.0 / np.pi) ** 2 / n_pix


def pp_test(levels) -> tuple[float, float]:
    """P-P test of sky localisation: the credible levels of the true directions
    (:func:`credible_level`) are uniform on [0, 1] for calibrated maps.  Returns the
    Kolmogorov-Smirnov statistic and p-value against the uniform distribution."""
    from scipy.stats import kstest

    levels = np.asarray(levels, dtype=np.float64)
    if levels.size == 0 or np.any((levels < 0) | (levels > 1)):
        raise ValueError("P-P test needs credible levels in [0, 1]")
    result = kstest(levels, "uniform")
    return float(result.statistic), float(result.pvalue)
