"""Template waveforms stored in files."""

from __future__ import annotations

import os

import h5py
import numpy as np

from gwbatch.errors import DataError


def read_hdf5_template(path: str | os.PathLike, dataset: str = "template") -> tuple[np.ndarray, float | None]:
    """A time-domain template ``(h_plus, sample_rate or None)`` from an HDF5 file.

    The dataset may be 1-D (``h_plus``) or 2-D (``[h_plus, h_cross]``, as in the GWOSC tutorial's
    template file); a ``sample_rate`` or ``Xspacing`` attribute is used when present.
    """
    try:
        with h5py.File(path, "r") as fh:
            if dataset not in fh:
                raise DataError(f"{path} has no dataset {dataset!r} (datasets: {', '.join(fh.keys())})")
            ds = fh[dataset]
            data = np.asarray(ds[()], dtype=np.float64)
            fs = ds.attrs.get("sample_rate")
            if fs is None and "Xspacing" in ds.attrs:
                fs = 1.0 / float(ds.attrs["Xspacing"])
    except OSError as exc:
        raise DataError(f"cannot read template file {path}: {exc}") from None
    if data.ndim == 2:
        data = data[0]
    if data.ndim != 1 or data.size < 2:
        raise DataError(f"{path}:{dataset} is not a 1-D time series or a (2, n) plus/cross array")
    return data, (float(fs) if fs is not None else None)
