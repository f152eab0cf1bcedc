"""Per-detector SPIIR triggers: per-template peaks clustered in time, with autocorrelation chi-squared.

As in PyCBC's ``pycbc_inspiral`` (window clustering per template) rather than the quadratic
candidate-by-candidate step analysed in seed 001:

1. The bank is filtered in batches of templates; each template's ``|z|`` series (zero where the data
   are not valid) is cut into fixed windows of ``cluster_window`` samples, aligned to absolute sample
   numbers so neighbouring chunks cut the same windows.  A window's maximum is a trigger when it
   reaches the threshold and neither neighbouring window holds a louder peak within
   ``cluster_window`` of it: ``O(templates x samples)``, all on the backend.
2. Every trigger keeps its template, so coincidence can require the same template in every detector.
3. Chi-squared of ALGORITHMS.md §3.5 from the same filtered batch:
   ``xi^2 = sum_s |z(t+s) - z(t) R(s)|^2 / sum_s (2 - 2 |R(s)|^2)`` over ``s = -m..m``, with ``R`` the
   SPIIR response's own normalised autocorrelation; its mean is 1 in Gaussian noise.

Times: a peak at sample ``k`` of template ``t`` means the merger (the unwhitened template's amplitude peak) was at
``k - merger_delay[t]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gwbatch._xp import array_namespace, to_host
from gwbatch.candidates.coincidence import cluster_in_time
from gwbatch.spiir.bank import FilterBank
from gwbatch.spiir.filtering import filter_templates

_FIELDS = ("peak", "merger", "template", "snr", "phase", "chisq")


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

    @classmethod
    def concat(cls, parts: list["SpiirTriggers"]) -> "SpiirTriggers":
        if not parts:
            return cls.empty()
        return cls(*(np.concatenate([getattr(p, k) for p in parts]) for k in _FIELDS))

    def select(self, keep) -> "SpiirTriggers":
        return SpiirTriggers(*(getattr(self, k)[keep] for k in _FIELDS))

    def loudest_over_templates(self, window: float) -> "SpiirTriggers":
        """The triggers that are the loudest of any template within ``window`` samples (a
        single-detector trigger list as an analyst reads it)."""
        return self.select(cluster_in_time(self.peak.astype(np.float64), self.snr, window))


def window_maxima(mag, window: int, origin: int = 0):
    """``(val, pos)``, ``(rows, nwin)``: each window's largest ``mag`` and its first sample, windows
    starting at samples ``k`` with ``(k + origin) % window == 0`` (``mag`` ``(rows, n)``; zeros taken
    beyond its ends).  On the GPU :func:`find_triggers` forms them from ``z`` directly
    (:func:`gwbatch.spiir._cuda_peaks.window_maxima_cuda`)."""
    xp = array_namespace(mag)
    rows, n = mag.shape
    lead = origin % window  # zeros in front put window starts at absolute multiples of window
    nwin = -(-(lead + n) // window)
    padded = xp.zeros((rows, nwin * window), dtype=mag.dtype)
    padded[:, lead:lead + n] = mag
    blocks = padded.reshape(rows, nwin, window)
    arg = xp.argmax(blocks, axis=2)
    val = xp.take_along_axis(blocks, arg[:, :, None], axis=2)[:, :, 0]
    return val, arg + xp.arange(nwin)[None, :] * window - lead


def select_peaks(val, pos, threshold: float, window: int, n: int):
    """``(row, sample)`` of the window maxima (:func:`window_maxima` of rows of ``n`` samples) over
    ``threshold`` with no louder neighbouring-window maximum within ``window`` samples (ties go to
    the earlier peak)."""
    xp = array_namespace(val)
    rows = val.shape[0]
    zero_v = xp.zeros((rows, 1), dtype=val.dtype)
    far = xp.full((rows, 1), -10 * window, dtype=pos.dtype)
    left_v = xp.concatenate([zero_v, val[:, :-1]], axis=1)
    left_p = xp.concatenate([far, pos[:, :-1]], axis=1)
    right_v = xp.concatenate([val[:, 1:], zero_v], axis=1)
    right_p = xp.concatenate([pos[:, 1:], -far + n], axis=1)
    keep = (val >= threshold)
    keep &= ~((left_v >= val) & (pos - left_p <= window))
    keep &= ~((right_v > val) & (right_p - pos <= window))
    row, w = xp.nonzero(keep)
    return row, pos[row, w]


def window_peaks(mag, threshold: float, window: int, origin: int = 0):
    """``(row, sample)`` of per-row ``|z|`` peaks: window maxima over ``threshold`` with no louder
    neighbouring-window peak within ``window`` samples (ties go to the earlier peak).

    ``mag`` is ``(rows, n)``; windows start at samples ``k`` with ``(k + origin) % window == 0``.
    """
    return select_peaks(*window_maxima(mag, window, origin), threshold, window, mag.shape[1])


def chisq_at(z, row, peak, autocorr):
    """Autocorrelation chi-squared (ALGORITHMS.md §3.5) of rows ``row`` of ``z`` at samples ``peak``;
    ``autocorr`` is ``(len(row), 2m+1)``.  Peaks within ``m`` of an edge get NaN."""
    xp = array_namespace(z)
    m = (autocorr.shape[1] - 1) // 2
    lags = xp.arange(-m, m + 1)
    inside = (peak >= m) & (peak < z.shape[1] - m)
    idx = xp.clip(peak[:, None] + lags[None, :], 0, z.shape[1] - 1)
    seg = z[row[:, None], idx]
    centre = z[row, peak]
    num = xp.sum(xp.abs(seg - centre[:, None] * autocorr) ** 2, axis=1)
    den = xp.sum(2.0 - 2.0 * xp.abs(autocorr) ** 2, axis=1)
    return xp.where(inside, num / den, xp.nan), centre


#: Bytes per template and sample that one pass of :func:`find_triggers` holds at most: the complex64
#: SNR series with the float32 magnitudes, masks and peak scratch made of them (26 measured on an
#: H200); the memory plan reserves them (:meth:`gwbatch.searches.spiir.SpiirSearch.work_bytes`).
PASS_BYTES = 28


def find_triggers(x, valid, bank: FilterBank, *, threshold: float, cluster_window: int, batch: int = 256,
                  own: tuple[int, int] | None = None, origin: int = 0) -> SpiirTriggers:
    """Per-template clustered triggers of whitened series ``x`` (float32, backend array).

    ``valid`` masks samples whose ``|z|`` may peak; ``own``: keep only peaks in ``[own[0], own[1])``
    (a chunk's own samples); ``origin``: the absolute sample number of ``x[0]``, which fixes the
    clustering windows.
    """
    xp = array_namespace(x, valid)
    mask = valid.astype(xp.float32)
    autocorr = xp.asarray(bank.autocorr.astype(np.complex64))
    parts = []
    for lo in range(0, bank.size, batch):
        part = bank.batch(lo, min(lo + batch, bank.size))
        z = filter_templates(x, part, origin)
        if xp is np:
            maxima = window_maxima(xp.abs(z) * mask[None, :], cluster_window, origin)
        else:
            from gwbatch.spiir._cuda_peaks import window_maxima_cuda

            maxima = window_maxima_cuda(z, mask, cluster_window, origin)
        row, peak = select_peaks(*maxima, threshold, cluster_window, z.shape[1])
        if own is not None:
            mine = (peak >= own[0]) & (peak < own[1])
            row, peak = row[mine], peak[mine]
        if row.size == 0:
            continue
        xi2, centre = chisq_at(z, row, peak, autocorr[row + lo])
        tmpl = to_host(row).astype(np.int64) + lo
        k = to_host(peak).astype(np.int64)
        parts.append(SpiirTriggers(k, k - bank.merger_delay[tmpl], tmpl,
                                   to_host(xp.abs(centre)).astype(np.float64),
                                   to_host(xp.angle(centre)).astype(np.float64),
                                   to_host(xi2).astype(np.float64)))
    return SpiirTriggers.concat(parts)
