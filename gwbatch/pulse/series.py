"""Detection series and their boxcar SNR transforms, picked by name (``search.series``).

- ``amplitude``: the conditioned series itself (dedispersed radio series, SNR series).  The SNR of
  an ``N``-sample boxcar sum ``B`` is Adámek & Armour's ``(B - N mu) / sigma_N``.
- ``energy``: the whitened power ``x^2``, for strain, where transients of any shape (oscillating
  sine-Gaussians average to ~0 in a linear boxcar) add energy.  ``B`` is then a scaled chi-squared
  variable; with mean ``N mu`` and standard deviation ``sigma_N`` (eq. 4/5), moment matching gives
  ``k = 2 (N mu)^2 / sigma_N^2`` degrees of freedom and the Wilson-Hilferty transform
  ``z = ((B / (N mu))^(1/3) - (1 - 2/(9k))) / sqrt(2/(9k))`` a Gaussian-equivalent SNR whose false-alarm
  probability is the same at every width (the plain ``(B - N mu)/sigma_N`` would let the heavy chi-squared
  tail of narrow boxcars dominate).  For white Gaussian noise ``k = N`` exactly.

Both are ``z = f(B * p_w) ...`` with three per-width constants, so one kernel serves both:
``amplitude: z = B p - q``; ``energy: z = (cbrt(B p) - q) r``.

``sigma_N`` (Adámek & Armour 2018): ``white`` is eq. 4, ``sqrt(N) sigma``; ``linear`` is eq. 5 read
as the linear blend that is exact at ``N = 1`` and at the round's widest boxcar ``N_max``, where
``sigma_Nmax`` is measured: ``sigma_N = sqrt(N) sigma + (N - 1)/(N_max - 1) (sigma_Nmax - sqrt(N_max) sigma)``.
"""

from __future__ import annotations

import numpy as np

from gwbatch.errors import ConfigError

SERIES = ("energy", "amplitude")


def detection_series(kind: str, data):
    """The series the boxcars run over (same backend and length as ``data``)."""
    if kind == "amplitude":
        return data
    if kind == "energy":
        return data * data
    raise ConfigError(f"unknown detection series {kind!r}; known: {', '.join(SERIES)}")


def sigma_n(widths: np.ndarray, sigma: float, model: str, sigma_nmax: float | None = None) -> np.ndarray:
    """``sigma_N`` for boxcar widths ``widths`` (in the round's samples) from the round's ``sigma``."""
    widths = np.asarray(widths, dtype=np.float64)
    base = np.sqrt(widths) * sigma
    if model == "white":
        return base
    if model == "linear":
        n_max = widths.max()
        if n_max <= 1 or sigma_nmax is None:
            return base
        return base + (widths - 1.0) / (n_max - 1.0) * (sigma_nmax - np.sqrt(n_max) * sigma)
    raise ConfigError(f"unknown sigma model {model!r}; known: white, linear")


def transform_constants(kind: str, widths: np.ndarray, mean: float, sig_n: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per-width ``(p, q, r)`` (float32) so the kernel computes z from ``B``; see the module docstring."""
    n = np.asarray(widths, dtype=np.float64)
    if kind == "amplitude":
        p, q, r = 1.0 / sig_n, n * mean / sig_n, np.ones_like(n)
    else:
        k = 2.0 * (n * mean) ** 2 / sig_n**2
        p = 1.0 / (n * mean)
        q = 1.0 - 2.0 / (9.0 * k)
        r = 1.0 / np.sqrt(2.0 / (9.0 * k))
    return tuple(a.astype(np.float32) for a in (p, q, r))


def round_constants(kind: str, widths: np.ndarray, mean: float, sig_n: np.ndarray, threshold: float) -> np.ndarray:
    """Kernel constants ``[T, p, q, r]`` (float32, concatenated) for one round.

    ``T_w`` is the boxcar sum at which width ``w``'s SNR reaches ``threshold``; the kernel tests
    ``B >= T`` first and computes the SNR only where that holds.  ``T`` is rounded down by one part
    in 1e6 so float32 rounding never hides a start that the exact SNR would keep.
    """
    p, q, r = transform_constants(kind, widths, mean, sig_n)
    t = boxcar_sum(kind, np.full(len(widths), threshold), p, q, r)
    t = t - 1e-6 * np.abs(t)
    return np.concatenate([t, p, q, r]).astype(np.float32)


def boxcar_sum(kind: str, z: np.ndarray, p: np.ndarray, q: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Invert the transform: the boxcar sum ``B`` behind SNR ``z`` (float64)."""
    z, p, q, r = (np.asarray(a, dtype=np.float64) for a in (z, p, q, r))
    if kind == "amplitude":
        return (z + q) / p
    return (z / r + q) ** 3 / p
