"""Baseline removal for un-whitened series (radio dedispersed time series, SNR series).

The baseline is a running median estimated cheaply: the median of each block of ``window``
samples, linearly interpolated between block centres (Heimdall and AstroAccelerate remove a
running-median baseline before the boxcar search).  A pulse much narrower than the window barely
moves a block median.  Invalid samples are ignored.
"""

from __future__ import annotations

import numpy as np

from gwbatch._xp import array_namespace, to_host

#: Fewest samples in a running-baseline block (every running baseline: this median, the radio
#: search's channel and trial means): the error of a block's level then moves sigma by about
#: 1 / (2 x 32); a block of one sample is the sample itself, and the series less its baseline is 0.
MIN_BASELINE_SAMPLES = 32


def running_median_baseline(x, valid, window: int):
    """Baseline of ``x`` (float64), same shape; samples with no valid block nearby take the nearest."""
    xp = array_namespace(x, valid)
    n = x.size
    nblocks = -(-n // window)
    padded = xp.full(nblocks * window, xp.nan)
    padded[:n] = xp.where(valid, x, xp.nan)
    blocks = padded.reshape(nblocks, window)
    has_data = to_host(xp.any(~xp.isnan(blocks), axis=1))
    if not has_data.any():
        return xp.zeros(n)
    medians = xp.nanmedian(blocks[xp.asarray(has_data)], axis=1)
    centres = (np.flatnonzero(has_data) + 0.5) * window - 0.5
    return xp.interp(xp.arange(n, dtype=xp.float64), xp.asarray(centres), medians)
