"""A detector network's geometry over a sky grid: arrival delays and antenna patterns per direction.

Shared by the coherent SPIIR stage (:mod:`gwbatch.coherent.network` builds its kernel table from
it) and the burst sky loop.  Geometry is evaluated at one GPS time per chunk (its midpoint); the
Earth turns 0.25 degrees per minute, so chunks up to 30 minutes are within gstlal's refresh
interval of 1800 s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gwbatch.detectors import antenna_pattern, time_delay_from_earth_center
from gwbatch.sky.grid import SkyGrid


@dataclass(frozen=True, eq=False)
class NetworkGeometry:
    """Per direction ``p`` of a grid and detector ``j``: arrival delay after the geocentre (s) and
    antenna patterns at polarisation angle 0, at GPS time ``gps``."""

    ifos: tuple[str, ...]
    gps: float
    delays: np.ndarray  # (P, D) float64 seconds, arrival minus geocentre
    fplus: np.ndarray  # (P, D)
    fcross: np.ndarray  # (P, D)

    def delay_samples(self, sample_rate: float) -> np.ndarray:
        """Delays in (fractional) samples, float32 ``(P, D)``: what the kernels read."""
        return np.ascontiguousarray(self.delays * sample_rate, dtype=np.float32)


def network_geometry(ifos: tuple[str, ...], grid: SkyGrid, gps: float) -> NetworkGeometry:
    """Delays and antenna patterns of ``ifos`` over ``grid`` at ``gps``."""
    ra, dec = grid.ra[:, None], grid.dec[:, None]
    delays = np.stack([time_delay_from_earth_center(ifo, grid.ra, grid.dec, gps) for ifo in ifos], axis=-1)
    fp, fc = zip(*(antenna_pattern(ifo, ra[:, 0], dec[:, 0], 0.0, gps) for ifo in ifos))
    return NetworkGeometry(tuple(ifos), float(gps), np.asarray(delays, dtype=np.float64),
                           np.stack(fp, axis=-1), np.stack(fc, axis=-1))
