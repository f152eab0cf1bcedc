"""The coherent stage of one chunk: pivot candidates to coherent events with time-shifted trials.

Inputs are the per-detector SNR series of the candidates' templates, aligned on the merger (sample
``k`` of every detector's series is the merger time ``k`` for that template, whatever each
detector's filter delay), and each detector's normalised autocorrelation of the same templates.

1. Sky maximum (:func:`gwbatch.coherent.statistic.sky_argmax`) for zero lag and ``K`` trials.
2. At each maximum: every detector's SNR and sample, and its autocorrelation chi-squared there
   (ALGORITHMS.md §3.5, :func:`gwbatch.spiir.triggers.chisq_at`); the network chi-squared is their
   mean (each has mean 1 in Gaussian noise).
3. Ranking statistic, the same for zero lag and trials (:func:`coherent_rank`): the coherent SNR
   reweighted by the network chi-squared in PyCBC's form (Babak et al. 2013, PRD 87, 024033,
   eq. 6), less the null SNR's excess over ``NULL_FREE``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gwbatch._xp import array_namespace, to_host
from gwbatch.coherent.network import SkyTable
from gwbatch.coherent.statistic import at_directions, sky_argmax
from gwbatch.spiir.triggers import chisq_at

#: Null SNR allowed before the rank is reduced: the null stream of three detectors carries two real
#: degrees of freedom of unit variance, so rho_null^2 > 16 has probability e^-8 in Gaussian noise.
NULL_FREE = 4.0


def coherent_rank(rho_c, chisq, rho_null):
    """``rho_c / ((1 + chisq^3) / 2)^(1/6)`` where the network reduced chi-squared exceeds 1, then
    minus ``max(0, rho_null - NULL_FREE)``; NaN chi-squared counts as 1."""
    rho_c = np.asarray(rho_c, dtype=np.float64)
    chisq = np.nan_to_num(np.asarray(chisq, dtype=np.float64), nan=1.0)
    rank = np.where(chisq > 1.0, rho_c / ((1.0 + chisq**3) / 2.0) ** (1.0 / 6.0), rho_c)
    return rank - np.maximum(0.0, np.asarray(rho_null, dtype=np.float64) - NULL_FREE)


@dataclass(frozen=True)
class CoherentEvents:
    """Per (candidate, trial), shape ``(C, K+1)`` (trial 0 is zero lag), on the host; arrays with a
    trailing detector axis are ``(C, K+1, D)``."""

    rho_c: np.ndarray
    rho_null: np.ndarray
    pixel: np.ndarray
    chisq: np.ndarray  # network (mean) reduced chi-squared
    rank: np.ndarray
    snr: np.ndarray  # per-detector complex SNR at the maximum
    sample: np.ndarray  # per-detector sample read at the maximum
    chisq_ifo: np.ndarray


def coherent_events(snr, autocorr, slot, sample, pivot, table: SkyTable, *, n_trials: int, step: int,
                    window: tuple[int, int]) -> CoherentEvents:
    """The coherent stage for candidates ``(slot, sample, pivot)`` (see the module docstring).

    ``snr``: ``(D, S, N)`` merger-aligned series; ``autocorr``: ``(D, S, 2m+1)``; ``window = (lo,
    span)``: the samples trials wrap into (the chunk's valid span).
    """
    xp = array_namespace(snr)
    _, pixel = sky_argmax(snr, slot, sample, pivot, table, n_trials, step, window)  # host pivots stay on the host
    trial = xp.broadcast_to(xp.arange(n_trials + 1)[None, :], pixel.shape)
    return events_at(snr, autocorr, slot, sample, pivot, table, pixel, trial, step, window)


def events_at(snr, autocorr, slot, sample, pivot, table: SkyTable, pixel, trial, step: int,
              window: tuple[int, int]) -> CoherentEvents:
    """Steps 2-3 for candidates ``(slot, sample, pivot)`` at sky directions ``pixel`` in trials
    ``trial`` (both ``(C, T)``, on the backend of ``snr``): the events, each array ``(C, T)``."""
    xp = array_namespace(snr)
    slot = xp.asarray(slot, dtype=xp.int64)
    sample = xp.asarray(sample, dtype=xp.int64)
    pivot = xp.asarray(pivot, dtype=xp.int64)
    at = at_directions(snr, slot, sample, pivot, table, pixel, trial, step, window)  # once, in float64
    n_det = snr.shape[0]
    rows = xp.broadcast_to(slot[:, None], pixel.shape).ravel()
    chisq = []
    for j in range(n_det):
        xi2, _ = chisq_at(snr[j], rows, at.index[..., j].ravel(), xp.asarray(autocorr[j])[rows])
        chisq.append(xi2.reshape(pixel.shape))
    chisq_ifo = to_host(xp.stack(chisq, axis=-1)).astype(np.float64)
    finite = np.isfinite(chisq_ifo)
    count = finite.sum(axis=-1)
    network = np.where(count > 0, np.where(finite, chisq_ifo, 0.0).sum(axis=-1) / np.maximum(count, 1), np.nan)
    rho_c = np.sqrt(np.maximum(to_host(at.rho_c2), 0.0))
    rho_null = np.sqrt(np.maximum(to_host(at.null2), 0.0))
    return CoherentEvents(rho_c=rho_c, rho_null=rho_null, pixel=to_host(pixel).astype(np.int64),
                          chisq=network, rank=coherent_rank(rho_c, network, rho_null),
                          snr=to_host(at.z), sample=to_host(at.index).astype(np.int64), chisq_ifo=chisq_ifo)
