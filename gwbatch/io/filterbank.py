"""Read SIGPROC filterbank files (``.fil``): the radio search's input (issue 28, first part).

The header is SIGPROC's (:func:`gwbatch.io.sigproc.parse_sigproc_header`); the data follow it as
spectra, one per sample time, each ``nifs`` blocks of ``nchans`` channels (``fch1`` first, then
steps of ``foff`` MHz).  Samples are ``nbits`` each: 32-bit little-endian floats, 8- or 16-bit
unsigned integers, or 1, 2 and 4 bits packed into bytes with the first sample in the least
significant bits (SIGPROC's and sigpyproc's order: the 4-bit Parkes UWL file of the shared data
correlates at 0.975 per channel with the same data at 8 bits in this order, 0.02 in the other; and ``tutorial.fil`` read so, dedispersed at DM 30, equals
sigpyproc 2.0's series exactly).  Values are kept at the recorded precision
(uint8 for 1-8 bits, uint16, float32); nothing is rescaled.  Files of 8 bits and more are
memory-mapped (an archive file is read a block at a time by whoever slices ``data``); 1, 2 and 4-bit
files are unpacked whole, one byte per sample.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gwbatch.errors import DataError
from gwbatch.io.sigproc import _MAX_HEADER, SigprocData, check_tsamp, parse_sigproc_header, tstart_gps

#: Bits per sample gwbatch reads, and the dtype each is kept as.
NBITS = {1: np.uint8, 2: np.uint8, 4: np.uint8, 8: np.uint8, 16: np.dtype("<u2"), 32: np.dtype("<f4")}


@dataclass(frozen=True, eq=False)
class Filterbank(SigprocData):
    """A SIGPROC filterbank (or a PSRFITS file read to its keys): its header and its spectra
    ``(samples, nifs, nchans)``."""

    @property
    def frequencies(self) -> np.ndarray:
        """Channel centre frequencies (MHz), in file order."""
        h = self.header
        return float(h["fch1"]) + float(h["foff"]) * np.arange(int(h["nchans"]))


def unpack(raw: np.ndarray, nbits: int) -> np.ndarray:
    """Bytes of ``nbits``-bit samples (1, 2 or 4) to one uint8 per sample, the first sample in the
    least significant bits of each byte."""
    per_byte = 8 // nbits
    shifts = (np.arange(per_byte, dtype=np.uint8) * nbits)[None, :]
    mask = np.uint8((1 << nbits) - 1)
    return ((raw[:, None] >> shifts) & mask).reshape(-1)


def _header_checks(header: dict, path: Path) -> tuple[int, int, int]:
    for key in ("nchans", "nbits", "tsamp", "fch1", "foff", "tstart"):
        if key not in header:
            raise DataError(f"{path}: SIGPROC filterbank header has no {key!r} (it holds: {', '.join(header)})")
    nchans, nbits, nifs = int(header["nchans"]), int(header["nbits"]), int(header.get("nifs", 1))
    if not 1 <= nchans <= 1 << 20:
        raise DataError(f"{path}: nchans={nchans}; expected 1 to {1 << 20}")
    if nbits not in NBITS:
        raise DataError(f"{path}: nbits={nbits} is not supported; expected one of {sorted(NBITS)}")
    if not 1 <= nifs <= 4:
        raise DataError(f"{path}: nifs={nifs}; expected 1 to 4")
    if not (np.isfinite(header["foff"]) and header["foff"] != 0):
        raise DataError(f"{path}: foff={header['foff']} MHz; a channel width must be finite and non-zero")
    if not (np.isfinite(header["fch1"]) and header["fch1"] > 0):
        raise DataError(f"{path}: fch1={header['fch1']} MHz; expected a positive frequency")
    low = header["fch1"] + header["foff"] * (nchans - 1)
    if low <= 0:
        raise DataError(f"{path}: the last channel is at {low} MHz (fch1 {header['fch1']}, foff {header['foff']}, "
                        f"{nchans} channels); every channel must be above 0 MHz")
    check_tsamp(header["tsamp"], path)
    tstart_gps(header["tstart"], path)
    return nchans, nbits, nifs


def read_filterbank(path: str | os.PathLike) -> Filterbank:
    """Read a SIGPROC filterbank (module docstring).

    Raises
    ------
    DataError
        Not a SIGPROC file, a header without the filterbank keys or with values out of range (named),
        or data that are not a whole number of spectra (the file is truncated or not a filterbank).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"input file {path} does not exist (expected a SIGPROC filterbank .fil)")
    with open(path, "rb") as fh:
        header, offset = parse_sigproc_header(fh.read(_MAX_HEADER), path)
    nchans, nbits, nifs = _header_checks(header, path)
    values_per_spectrum = nchans * nifs
    bytes_per_spectrum = values_per_spectrum * nbits / 8
    size = path.stat().st_size - offset
    # 8 bits and more are mapped, not read: an archive file is ingested a block at a time
    raw = (np.memmap(path, dtype=np.uint8 if nbits <= 8 else NBITS[nbits], mode="r", offset=offset)
           if size > 0 else np.empty(0, np.uint8))
    if size % bytes_per_spectrum:
        raise DataError(f"{path}: {size} data bytes are not a whole number of spectra of {nifs} x {nchans} "
                        f"{nbits}-bit samples ({bytes_per_spectrum:g} bytes each): truncated?")
    if "nsamples" in header and header["nsamples"] and int(header["nsamples"]) != size // bytes_per_spectrum:
        raise DataError(f"{path}: the header says nsamples={header['nsamples']} but the file holds "
                        f"{int(size // bytes_per_spectrum)} spectra")
    values = unpack(raw, nbits) if nbits < 8 else raw
    if values.size == 0:
        raise DataError(f"{path}: the filterbank holds no spectra")
    return Filterbank(path, header, values.reshape(-1, nifs, nchans))
