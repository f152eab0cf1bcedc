"""Read channel masks: which channels of a filterbank to flag as bad (True) before a radio search.

Two formats, told apart by the HDF5 signature:

- sigpyproc's HDF5 mask (``RFIMask.to_file`` in sigpyproc3's ``sigpyproc/core/rfi.py``): dataset
  ``chan_mask``, one boolean per channel in the filterbank's channel order, True for a masked
  channel (the union of its ``stats_mask``, ``user_mask`` and ``custom_mask``); the filterbank's
  header is kept as file attributes and the channel statistics as other datasets, neither read here.
- Text zap lists (PRESTO and Heimdall style): one channel index per line, counted from 0, or an
  inclusive range ``a:b``; blank lines and lines starting with ``#`` are ignored.
"""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np

from gwbatch.errors import DataError

#: The dataset of a sigpyproc mask file that holds the final mask.
SIGPYPROC_MASK = "chan_mask"


def _hdf5_mask(path: Path, nchans: int) -> np.ndarray:
    with h5py.File(path, "r") as fh:
        if SIGPYPROC_MASK not in fh:
            raise DataError(f"{path}: no {SIGPYPROC_MASK!r} dataset (it holds: {', '.join(fh)}); expected "
                            f"a sigpyproc mask file")
        dataset = fh[SIGPYPROC_MASK]
        if not isinstance(dataset, h5py.Dataset) or dataset.dtype != np.bool_:
            raise DataError(f"{path}: {SIGPYPROC_MASK!r} is {getattr(dataset, 'dtype', 'a group')}; expected "
                            f"booleans (True = masked channel)")
        if dataset.shape != (nchans,):
            raise DataError(f"{path}: {SIGPYPROC_MASK!r} has shape {dataset.shape}; expected one boolean per "
                            f"channel, ({nchans},)")
        return dataset[()]


def _channels(entry: str, line: int, path: Path, nchans: int) -> range:
    """The channels of one zap-list entry, ``i`` or ``a:b`` (inclusive)."""
    parts = entry.split(":")
    try:
        if len(parts) > 2:
            raise ValueError
        first, last = int(parts[0]), int(parts[-1])
    except ValueError:
        raise DataError(f"{path}, line {line}: {entry!r} is not a channel index or an a:b range of them") from None
    if not 0 <= first <= last < nchans:
        raise DataError(f"{path}, line {line}: channels {entry!r} are outside 0..{nchans - 1} or not in "
                        f"increasing order")
    return range(first, last + 1)


def _text_mask(path: Path, nchans: int) -> np.ndarray:
    try:
        lines = path.read_text().splitlines()
    except UnicodeDecodeError:
        raise DataError(f"{path}: neither an HDF5 file nor a text list of channels") from None
    mask = np.zeros(nchans, dtype=bool)
    for number, text in enumerate(lines, start=1):
        entry = text.strip()
        if entry and not entry.startswith("#"):
            mask[_channels(entry, number, path, nchans)] = True
    return mask


def read_channel_mask(path: str | os.PathLike, nchans: int) -> np.ndarray:
    """The channel mask of ``path`` for a filterbank of ``nchans`` channels: a bool array of
    ``nchans``, True where a channel is flagged as bad (module docstring: the formats).

    Raises
    ------
    DataError
        A missing file; an HDF5 file without a boolean ``chan_mask`` of ``nchans`` values; a text
        entry that is not an index or range, or a channel outside ``0 .. nchans - 1``.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"channel mask {path} does not exist (expected a sigpyproc .h5 mask or a text list)")
    if h5py.is_hdf5(path):
        return _hdf5_mask(path, nchans)
    return _text_mask(path, nchans)
