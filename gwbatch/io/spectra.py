"""Radio filterbank files (SIGPROC ``.fil``, PSRFITS search mode) into a filterbank store
(:data:`gwbatch.io.store.FILTERBANK_FORMAT`: spectra ``(beam, channel, time)`` at the recorded precision).

Rules, each a :class:`~gwbatch.errors.DataError` naming the files when broken:

- **Beams.** A file's beam is its header's ``ibeam`` (SIGPROC; PSRFITS ``IBEAM``), default 0.  A
  store of one beam names it ``--name``, else after the telescope (``Parkes``, ``Fake``); several
  beams are ``<telescope>-B<ibeam>`` (``Parkes-B01``).
- **One grid.** Every file has the same channels (``fch1``, ``foff``, ``nchans``), sample interval,
  bits and polarisation count (one: total intensity); the store starts at the earliest file.
- **Time order.** A file's first sample must fall on the store's sample grid within
  :data:`GRID_TOLERANCE` samples (``tstart`` is an MJD float, good to ~1 µs).  Files of a beam may
  leave gaps (never written: masked) and may overlap, where their samples must be identical.
- **Data quality.** Bit ``DATA`` is set for a second of a beam only when every sample of it is in a
  file: a gap masks the whole seconds it touches, so no unwritten sample (which reads as 0 in an
  integer store) is ever searched.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import numpy as np

from gwbatch.errors import ConfigError, DataError
from gwbatch.gpstime import GPSTime
from gwbatch.io.filterbank import Filterbank, read_filterbank
from gwbatch.io.sigproc import TELESCOPES, _NAME_RE, tstart_gps
from gwbatch.io.store import SampleLayout, StoreWriter, file_sha256

#: A file's start may sit this far off the store's sample grid (samples) before it is refused.
GRID_TOLERANCE = 0.05
#: Bytes of spectra per store chunk (the chunk length follows from the channels and sample size).
CHUNK_BYTES = 16 << 20
#: Samples written per block while a file is copied (bounded memory for any file size).
BLOCK_SAMPLES = 1 << 16


def read_radio_file(path: str | os.PathLike) -> Filterbank:
    """A SIGPROC filterbank or a PSRFITS search-mode file, told apart by their first bytes."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"input file {path} does not exist (expected a SIGPROC .fil or PSRFITS file)")
    with open(path, "rb") as fh:
        head = fh.read(16)
    if head.startswith(b"SIMPLE"):
        from gwbatch.io.psrfits import read_psrfits

        return read_psrfits(path)
    return read_filterbank(path)


def _sample_dtype(fb: Filterbank) -> str:
    nbits = int(fb.header["nbits"])
    return "float32" if nbits == 32 else "uint16" if nbits == 16 else "uint8"


@dataclass(frozen=True)
class _File:
    fb: Filterbank
    beam: int
    start: int  # first sample on the store grid
    n: int

    @property
    def stop(self) -> int:
        return self.start + self.n


def _grid_key(fb: Filterbank) -> tuple:
    h = fb.header
    return (int(h["nchans"]), float(h["fch1"]), float(h["foff"]), float(h["tsamp"]), int(h["nbits"]),
            int(h.get("nifs", 1)))


def _check_one_grid(files: list[Filterbank]) -> None:
    first = files[0]
    for fb in files:
        if int(fb.header.get("nifs", 1)) != 1:
            raise DataError(f"{fb.path}: nifs={fb.header['nifs']}; gwbatch searches total intensity (one "
                            "polarisation product): form Stokes I first")
        if _grid_key(fb) != _grid_key(first):
            names = ("nchans", "fch1", "foff", "tsamp", "nbits", "nifs")
            diff = [f"{k} {a} vs {b}" for k, a, b in zip(names, _grid_key(fb), _grid_key(first)) if a != b]
            raise DataError(f"{fb.path} and {first.path} do not share one grid ({', '.join(diff)}); a store holds "
                            "files of the same channels, sample interval and bits")


def _place(files: list[Filterbank]) -> tuple[GPSTime, list[_File]]:
    """The store's start (the earliest file) and each file's first sample on its grid."""
    starts = [tstart_gps(fb.header["tstart"], fb.path) for fb in files]
    t0 = min(starts, key=lambda t: t.total_ns)
    tsamp_ns = Decimal(repr(float(files[0].header["tsamp"]))) * 10**9
    placed = []
    for fb, t in zip(files, starts):
        offset = Decimal(t.total_ns - t0.total_ns) / tsamp_ns
        k = int(offset.to_integral_value())
        if abs(offset - k) > Decimal(repr(GRID_TOLERANCE)):
            raise DataError(f"{fb.path}: starts {float(offset):.4f} samples after the earliest file, not on its "
                            f"sample grid (within {GRID_TOLERANCE} samples of tsamp {float(tsamp_ns) / 1e9:g} s)")
        placed.append(_File(fb, int(fb.header.get("ibeam", 0)), k, fb.data.shape[0]))
    return t0, placed


def beam_names(beams: list[int], header: dict, name: str | None) -> dict[int, str]:
    """Store row names of the beam numbers (module docstring)."""
    if name is not None and not _NAME_RE.match(name):
        raise ConfigError(f"beam name {name!r} is not of the form [A-Za-z0-9][A-Za-z0-9_.-]*")
    if name is not None and len(beams) > 1:
        raise ConfigError(f"--name names one beam; the files hold {len(beams)} beams ({beams})")
    telescope = TELESCOPES.get(header.get("telescope_id"), "Radio")
    if len(beams) == 1:
        return {beams[0]: name or telescope}
    return {b: f"{telescope}-B{b:02d}" for b in beams}


def _check_overlap(prev: _File, cur: _File) -> None:
    lo, hi = cur.start, min(prev.stop, cur.stop)
    step = BLOCK_SAMPLES
    for a in range(lo, hi, step):
        b = min(hi, a + step)
        if not np.array_equal(prev.fb.data[a - prev.start : b - prev.start], cur.fb.data[a - cur.start : b - cur.start]):
            raise DataError(f"{cur.fb.path} overlaps {prev.fb.path} by {hi - lo} samples and their spectra differ "
                            f"(first within samples {a}..{b} of the store); an overlap must repeat the same data")


def _covered_seconds(intervals: list[tuple[int, int]], n_samples: int, rate: float) -> np.ndarray:
    """Per second of the store, whether every one of its samples is inside the union of the sample
    intervals ``[a, b)``."""
    merged: list[list[int]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    starts, stops = np.array(merged, dtype=np.int64).T
    n_sec = int(np.ceil(n_samples / rate))
    edges = np.minimum(np.ceil(np.arange(n_sec + 1) * rate - 1e-9).astype(np.int64), n_samples)
    holder = np.searchsorted(starts, edges[:-1], side="right") - 1  # the interval starting at or before
    return (holder >= 0) & (stops[np.maximum(holder, 0)] >= edges[1:])


def ingest_filterbank(paths: list[str | os.PathLike], out: str | os.PathLike, *, name: str | None = None,
                      overwrite: bool = False) -> Path:
    """Ingest filterbank files (one or many beams, many files in time order) into a filterbank store
    (module docstring for the rules).  Returns ``out`` once the store is committed."""
    if not paths:
        raise ConfigError("ingest filterbank needs at least one file")
    files = [read_radio_file(p) for p in paths]
    _check_one_grid(files)
    t0, placed = _place(files)
    first = files[0]
    beams = sorted({f.beam for f in placed})
    names = beam_names(beams, first.header, name)
    n_samples = max(f.stop for f in placed)
    rate = 1.0 / float(first.header["tsamp"])
    layout = SampleLayout(_sample_dtype(first), tuple(float(f) for f in first.frequencies))
    itemsize = np.dtype(layout.dtype).itemsize
    chunk = max(1024, 1 << int(np.log2(max(1, CHUNK_BYTES // (layout.n_channels * itemsize)))))
    provenance = {
        "source": "filterbank",
        "files": [{"file": f.fb.path.name, "sha256": file_sha256(f.fb.path), "beam": names[f.beam],
                   "first_sample": f.start, "samples": f.n,
                   "header": {k: v for k, v in f.fb.header.items() if isinstance(v, (int, float, str))}}
                  for f in placed],
    }
    with StoreWriter(out, ifos=[names[b] for b in beams], sample_rate=rate, t0=t0, n_samples=n_samples,
                     chunk_samples=chunk, dq_bits=("DATA",), provenance=provenance, overwrite=overwrite,
                     layout=layout) as writer:
        for beam in beams:
            mine = sorted((f for f in placed if f.beam == beam), key=lambda f: f.start)
            written = 0  # samples before this are in the store already
            for k, cur in enumerate(mine):
                for prev in mine[:k]:  # every earlier file reaching into it, not only the one before
                    if cur.start < prev.stop:
                        _check_overlap(prev, cur)
                for a in range(max(cur.start, written), cur.stop, BLOCK_SAMPLES):
                    b = min(cur.stop, a + BLOCK_SAMPLES)
                    block = np.asarray(cur.fb.data[a - cur.start : b - cur.start, 0, :])
                    writer.write_spectra(names[beam], a, np.ascontiguousarray(block.T))
                written = max(written, cur.stop)
            covered = _covered_seconds([(f.start, f.stop) for f in mine], n_samples, rate)
            writer.write_dq(names[beam], 0, covered.astype(np.uint8))
        return writer.commit()
