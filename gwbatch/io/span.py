"""A stretch of a store read for a search, with what says a sample is not data.

Every search reads its chunks through :func:`read_span` (and SPIIR measures the PSDs its banks
are built for through it), so a sample counts as data in exactly one way everywhere: finite, in
a second whose DQ bits include the campaign's required ones, inside the campaign's science
segments and outside its category-1 vetoes (``excluded``, :mod:`gwbatch.io.segments`), and not in a run of exact zeros of
at least ``zero_gap`` samples (a recorder or frame builder writes zeros where it had no data;
real strain and dedispersed radio series never hold that many exact zeros).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from gwbatch.conditioning.mask import edge_zeros, zero_runs
from gwbatch.io.segments import interval_mask
from gwbatch.io.store import dq_sample_mask, read_dq, read_spectra, read_strain


@dataclass(frozen=True)
class StrainSpan:
    """Samples ``[start, start + n)`` of some detectors, as float32 ``(ifo, n)``, with their masks."""

    start: int
    strain: np.ndarray
    finite: np.ndarray  # bool (ifo, n)
    science: np.ndarray  # bool (ifo, n): the DQ's required bits set, in science segments, not vetoed at category 1
    zeros: np.ndarray  # bool (ifo, n): in a run of exact zeros of at least zero_gap samples

    @property
    def valid(self) -> np.ndarray:
        """Samples that are data: finite, in science and not in a run of zeros."""
        return self.finite & self.science & ~self.zeros


def zero_gap_samples(zero_gap: float | None, sample_rate: float) -> int | None:
    """The shortest run of exact zeros (samples, at least 2) masked as a gap; None: zeros are data."""
    if zero_gap is None:
        return None
    return max(2, int(np.ceil(zero_gap * sample_rate - 1e-9)))


def zero_gap_mask(store, ifo: str, x: np.ndarray, min_length: int, start: int) -> np.ndarray:
    """:func:`~gwbatch.conditioning.mask.zero_runs` of ``x`` (``ifo``'s samples from ``start``):
    a run touching either end of ``x`` with fewer than ``min_length`` zeros inside is followed up
    to ``min_length`` samples beyond it in the store, so it is judged by its whole length and the
    mask does not depend on where chunks are cut."""
    lead, trail = edge_zeros(x)
    before = after = 0
    if 0 < lead < min_length:
        before = edge_zeros(read_strain(store, [ifo], start - (min_length - lead), start)[0])[1]
    if 0 < trail < min_length:
        stop = start + x.size
        after = edge_zeros(read_strain(store, [ifo], stop, stop + (min_length - trail))[0])[0]
    return zero_runs(x, min_length, (before, after))


def read_span(store, ifos: Iterable[str], start: int, stop: int, *, dq_required: int,
              zero_gap: int | None, excluded: dict[str, np.ndarray] | None = None) -> StrainSpan:
    """Samples ``[start, stop)`` of ``ifos`` from ``store`` (a :class:`~gwbatch.io.store.StoreMeta`
    or a task's :class:`~gwbatch.io.store.StoreSlice`, which must hold the chunks up to
    ``zero_gap`` samples beyond the span), every chunk checked against its checksum; samples
    outside the store read as NaN.  ``dq_required``: the DQ bits a second needs to be science;
    ``zero_gap``: the shortest run of exact zeros that is a gap (samples; None: zeros are data);
    ``excluded``: per detector, store-sample intervals that are not science (outside the science
    segments or in a category-1 veto)."""
    ifos = list(ifos)
    raw = read_strain(store, ifos, start, stop)
    dq = read_dq(store, ifos)
    finite = np.isfinite(raw)
    science = np.stack([dq_sample_mask(dq[i], dq_required, start, stop, store.sample_rate) for i in range(len(ifos))])
    for i, ifo in enumerate(ifos):
        if excluded and ifo in excluded and len(excluded[ifo]):
            science[i] &= ~interval_mask(excluded[ifo], start, stop)
    zeros = np.zeros(raw.shape, dtype=bool)
    if zero_gap is not None:
        for i, ifo in enumerate(ifos):
            zeros[i] = zero_gap_mask(store, ifo, raw[i], zero_gap, start)
    return StrainSpan(start, raw, finite, science, zeros)


@dataclass(frozen=True)
class SpectraSpan:
    """Samples ``[start, start + n)`` of one beam of a filterbank store: float32 ``(channel, n)`` spectra
    and which samples are data (every channel finite, the DQ's required bits set, in the science
    segments).  A channel with no finite sample in the span is a dead channel, not missing data: it
    does not decide which samples are data, and the cleaning flags it
    (:func:`gwbatch.radio.condition.condition_spectra`).  Exact zeros are data here: integer spectra
    hold them in normal noise."""

    start: int
    spectra: np.ndarray
    finite: np.ndarray  # bool (n,)
    science: np.ndarray  # bool (n,)

    @property
    def valid(self) -> np.ndarray:
        return self.finite & self.science


def read_spectra_span(store, beam: str, start: int, stop: int, *, dq_required: int,
                      excluded: dict[str, np.ndarray] | None = None) -> SpectraSpan:
    """Samples ``[start, stop)`` of ``beam`` from a filterbank store (as :func:`read_span` reads
    strain: chunks checked, samples outside the store NaN and masked)."""
    spectra = read_spectra(store, beam, start, stop)
    ok = np.isfinite(spectra)
    live = ok.any(axis=1)  # a channel never finite here is dead: one NaN channel must not mask every sample
    finite = ok[live].all(axis=0) if live.any() else np.zeros(spectra.shape[1], dtype=bool)
    science = dq_sample_mask(read_dq(store, [beam])[0], dq_required, start, stop, store.sample_rate)
    if excluded and beam in excluded and len(excluded[beam]):
        science &= ~interval_mask(excluded[beam], start, stop)
    return SpectraSpan(start, spectra, finite, science)
