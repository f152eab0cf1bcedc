"""Per-detector SPIIR triggers: peaks over templates, clustering in time, autocorrelation chi-squared.

1. The bank is filtered in batches of templates; a running per-sample maximum of ``|z|`` over
   templates (and which template) is kept: ``O(templates x samples)``, with no quadratic step (the
   candidate-by-candidate comparison analysed in seed 001).
2. Samples over the threshold are clustered in time: a sample survives if it is the loudest within
   ``cluster_window`` of itself (sparse-table range maximum, ``O(n log n)``).
3. Each trigger's template is filtered again around the peak for the chi-squared of
   ALGORITHMS.md §3.5: ``xi^2 = sum_s |z(t+s) - z(t) R(s)|^2 / sum_s (2 - 2 |R(s)|^2)`` over ``s = -m..m``,
   with ``R`` the SPIIR response's own normalised autocorrelation; its mean is 1 in Gaussian noise.

Times: a peak at sample ``k`` of template ``t`` means the merger (the template's amplitude peak) was at
``k - merger_delay[t]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gwbatch._xp import array_namespace, to_host
from gwbatch.candidates.coincidence import cluster_in_time
from gwbatch.spiir.bank import FilterBank
from gwbatch.spiir.filtering import filter_bank


@dataclass(frozen=True)
class SpiirTriggers:
    """Host arrays, one entry per trigger; samples relative to the filtered series' start."""

    peak: np.ndarray  # int64 sample of the |z| peak
    merger: np.ndarray  # int64 sample of the merger (peak - merger_delay)
    template: np.ndarray  # int64 template index in the bank
    snr: np.ndarray  # float64 |z|
    phase: np.ndarray  # float64 arg z (rad)
    chisq: np.ndarray  # float64 reduced autocorrelation chi-squared

    @classmethod
    def empty(cls) -> "SpiirTriggers":
        i, f = np.zeros(0, np.int64), np.zeros(0)
        return cls(i, i, i, f, f, f)

    def select(self, keep) -> "SpiirTriggers":
        return SpiirTriggers(*(getattr(self, k)[keep] for k in ("peak", "merger", "template", "snr", "phase", "chisq")))


def max_over_templates(x, bank: FilterBank, batch: int = 256):
    """Per-sample ``max_t |z_t|`` and its template (backend arrays), filtering ``batch`` templates at a time."""
    xp = array_namespace(x)
    best = xp.zeros(x.size, dtype=xp.float32)
    which = xp.full(x.size, -1, dtype=xp.int64)
    for lo in range(0, bank.size, batch):
        part = bank.subset(np.arange(lo, min(lo + batch, bank.size)))
        z = filter_bank(x, part.a, part.b, part.d)
        mag = xp.abs(z)
        arg = xp.argmax(mag, axis=0)
        top = xp.take_along_axis(mag, arg[None, :], axis=0)[0]
        better = top > best
        best = xp.where(better, top, best)
        which = xp.where(better, arg + lo, which)
    return best, which


def chisq(z: np.ndarray, peak: int, autocorr: np.ndarray) -> float:
    """Autocorrelation chi-squared of ``z`` around ``peak`` (ALGORITHMS.md §3.5)."""
    m = (autocorr.size - 1) // 2
    lo, hi = peak - m, peak + m + 1
    if lo < 0 or hi > z.size:
        return float("nan")
    diff = z[lo:hi] - z[peak] * autocorr
    return float(np.sum(np.abs(diff) ** 2) / np.sum(2.0 - 2.0 * np.abs(autocorr) ** 2))


def find_triggers(x, valid, bank: FilterBank, *, threshold: float, cluster_window: int, batch: int = 256,
                  own: tuple[int, int] | None = None) -> SpiirTriggers:
    """Clustered triggers of whitened series ``x`` (float32, backend array) whose peak is valid.

    ``own``: keep only triggers whose peak lies in ``[own[0], own[1])`` (a chunk's own samples);
    clustering looks at the whole series so the choice matches the neighbouring chunk's.
    """
    xp = array_namespace(x, valid)
    best, which = max_over_templates(x, bank, batch)
    over = xp.flatnonzero((best >= threshold) & valid)
    if over.size == 0:
        return SpiirTriggers.empty()
    k = to_host(over).astype(np.int64)
    snr = to_host(best[over]).astype(np.float64)
    tmpl = to_host(which[over]).astype(np.int64)
    keep = cluster_in_time(k.astype(np.float64), snr, float(cluster_window))
    k, snr, tmpl = k[keep], snr[keep], tmpl[keep]
    if own is not None:
        mine = (k >= own[0]) & (k < own[1])
        k, snr, tmpl = k[mine], snr[mine], tmpl[mine]
    phase = np.zeros(k.size)
    xi2 = np.zeros(k.size)
    for t in np.unique(tmpl):
        rows = np.flatnonzero(tmpl == t)
        one = bank.subset(np.array([t]))
        z = to_host(filter_bank(x, one.a, one.b, one.d)[0])
        for r in rows:
            phase[r] = np.angle(z[k[r]])
            xi2[r] = chisq(z, int(k[r]), bank.autocorr[t])
    return SpiirTriggers(k, k - bank.merger_delay[tmpl], tmpl, snr, phase, xi2)
