"""The PSDs a run whitened with: one per detector per chunk, as ``psd.h5`` in the run's final set.

Every chunk measures each detector's one-sided PSD over the span it reads (median Welch,
:func:`gwbatch.conditioning.psd.welch_median`) and whitens with it; that measured PSD, not a bank's
design PSD, is what a candidate was found in, so it is the one a re-localisation (BAYESTAR) and the
report's ASD use.  Layout (HDF5, gzip)::

    /<IFO>/frequency   (F,)     Hz
    /<IFO>/psd         (C, F)   strain^2/Hz, one row per chunk whose PSD was measured
    /<IFO>/start       (C,)     GPS seconds of the first sample the chunk owns
    /<IFO>/stop        (C,)     GPS seconds after its last
    /<IFO>/segments    (C,)     Welch segments averaged

with the attributes ``format``, ``method`` and ``segment_seconds``.  Chunks whose PSD could not be
measured (too little valid data: they were not analysed) have no row.  Written atomically.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from gwbatch.errors import DataError
from gwbatch.io.atomic import atomic_file

FORMAT = "gwbatch-psd/1"
FILE = "psd.h5"


@dataclass(frozen=True)
class ChunkPSDs:
    """One detector's measured PSDs, one row per chunk, in time order."""

    frequency: np.ndarray  # (F,) Hz
    psd: np.ndarray  # (C, F) strain^2/Hz
    start: np.ndarray  # (C,) GPS
    stop: np.ndarray  # (C,) GPS
    segments: np.ndarray  # (C,) Welch segments averaged

    def at(self, gps: float) -> np.ndarray:
        """The PSD of the chunk that owns ``gps`` (else the chunk whose centre is nearest)."""
        if not len(self.psd):
            raise DataError("no PSD was measured for this detector")
        inside = np.flatnonzero((self.start <= gps) & (gps < self.stop))
        i = int(inside[0]) if inside.size else int(np.argmin(np.abs(0.5 * (self.start + self.stop) - gps)))
        return self.psd[i]

    def median(self) -> np.ndarray:
        """The median PSD over chunks, frequency by frequency."""
        return np.median(self.psd, axis=0)


def write_psds(path: str | os.PathLike, psds: dict[str, ChunkPSDs], *, method: str = "median-welch",
               segment_seconds: float | None = None) -> Path:
    """Write ``psds`` (detector -> :class:`ChunkPSDs`) to ``path``, atomically."""
    path = Path(path)
    with atomic_file(path) as tmp, h5py.File(tmp, "w") as fh:
        fh.attrs["format"] = FORMAT
        fh.attrs["method"] = method
        if segment_seconds is not None:
            fh.attrs["segment_seconds"] = float(segment_seconds)
        for ifo, p in psds.items():
            g = fh.create_group(ifo)
            g["frequency"] = np.asarray(p.frequency, np.float64)
            g.create_dataset("psd", data=np.asarray(p.psd, np.float64), compression="gzip", shuffle=True)
            g["start"], g["stop"] = np.asarray(p.start, np.float64), np.asarray(p.stop, np.float64)
            g["segments"] = np.asarray(p.segments, np.int64)
    return path


def read_psds(path: str | os.PathLike) -> dict[str, ChunkPSDs]:
    """The detectors' PSDs from a ``psd.h5`` written by :func:`write_psds`."""
    try:
        with h5py.File(path, "r") as fh:
            if fh.attrs.get("format") != FORMAT:
                raise DataError(f"{path} is not a gwbatch PSD file (format {fh.attrs.get('format')!r}, "
                                f"expected {FORMAT!r})")
            return {ifo: ChunkPSDs(*(np.asarray(g[k][()]) for k in ("frequency", "psd", "start", "stop", "segments")))
                    for ifo, g in fh.items()}
    except OSError as exc:
        raise DataError(f"cannot read PSD file {path}: {exc}") from None


def chunk_psds(rows: list[tuple[float, float, int, np.ndarray, np.ndarray]]) -> ChunkPSDs:
    """One detector's :class:`ChunkPSDs` from ``(start, stop, segments, frequency, psd)`` per chunk
    (any order); every chunk must share one frequency grid."""
    rows = sorted(rows, key=lambda r: r[0])
    if not rows:
        return ChunkPSDs(np.zeros(0), np.zeros((0, 0)), np.zeros(0), np.zeros(0), np.zeros(0, np.int64))
    freq = np.asarray(rows[0][3], np.float64)
    for r in rows[1:]:
        if r[3].shape != freq.shape or not np.array_equal(r[3], freq):
            raise DataError(f"chunks measured their PSDs on different frequency grids ({freq.size} and {r[3].size} bins)")
    return ChunkPSDs(freq, np.stack([np.asarray(r[4], np.float64) for r in rows]),
                     np.array([r[0] for r in rows], np.float64), np.array([r[1] for r in rows], np.float64),
                     np.array([r[2] for r in rows], np.int64))
