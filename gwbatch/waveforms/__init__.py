"""Template waveforms in the frequency domain, picked by approximant name.

- ``TaylorF2``: built in (:mod:`gwbatch.waveforms.taylorf2`), no extra package;
- any other LALSimulation frequency-domain approximant (``IMRPhenomD``, ``IMRPhenomXAS``,
  ``SEOBNRv4_ROM``, ...) when the optional ``lalsuite`` package is installed;
- a time-domain template read from an HDF5 file (:func:`gwbatch.io.templates.read_hdf5_template`),
  e.g. the GWOSC event tutorial's ``GW150914_4_template.hdf5``.

Every waveform is ``h~(f)`` (1/Hz) of an optimally oriented source at 1 Mpc, sampled on the
rfft grid ``f_k = k * delta_f``, so SNR normalisation and horizon distances follow from it.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass

import numpy as np

from gwbatch.errors import ConfigError
from gwbatch.waveforms.taylorf2 import isco_frequency, taylorf2

BUILTIN = ("TaylorF2",)


@dataclass(frozen=True)
class Template:
    """A point of a template bank: component masses (solar) and aligned spins."""

    mass1: float
    mass2: float
    spin1z: float = 0.0
    spin2z: float = 0.0

    @property
    def total_mass(self) -> float:
        return self.mass1 + self.mass2

    @property
    def chirp_mass(self) -> float:
        return (self.mass1 * self.mass2) ** 0.6 / self.total_mass**0.2


def lal_available() -> bool:
    try:
        importlib.import_module("lalsimulation")
    except ImportError:
        return False
    return True


def frequency_domain(approximant: str, template: Template, n_freq: int, delta_f: float, f_low: float) -> np.ndarray:
    """``h~`` on ``f_k = k delta_f``, ``k < n_freq`` (complex128), zero below the waveform's start.

    ``f_low`` is where the waveform generator starts; callers taper below their analysis band.
    """
    f = np.arange(n_freq) * delta_f
    if approximant == "TaylorF2":
        h = taylorf2(f, template.mass1, template.mass2, template.spin1z, template.spin2z)
        h[f < f_low] = 0.0
        return h
    return _lal_frequency_domain(approximant, template, n_freq, delta_f, f_low)


def load_approximant(approximant: str):
    """Check ``approximant`` and load its generator once per process: None for the built-in ones,
    else ``(lal, lalsimulation, code)``.  A bank build calls it before starting its workers, so a
    bad name fails at once and forked workers inherit LALSimulation instead of each importing it."""
    if approximant in BUILTIN:
        return None
    return _lal_approximant(approximant)


@functools.cache
def _lal_approximant(approximant: str):
    try:
        import lal
        import lalsimulation as ls
    except ImportError:
        raise ConfigError(
            f"approximant {approximant!r} needs lalsuite (pip install lalsuite); built in: {', '.join(BUILTIN)}"
        ) from None
    try:
        code = ls.GetApproximantFromString(approximant)
    except RuntimeError:
        raise ConfigError(f"unknown approximant {approximant!r} (not built in, not known to LALSimulation)") from None
    if not ls.SimInspiralImplementedFDApproximants(code):
        raise ConfigError(f"approximant {approximant!r} is not a LALSimulation frequency-domain approximant")
    return lal, ls, code


def _lal_frequency_domain(approximant: str, t: Template, n_freq: int, delta_f: float, f_low: float) -> np.ndarray:
    lal, ls, code = _lal_approximant(approximant)
    f_max = (n_freq - 1) * delta_f
    hp, _ = ls.SimInspiralChooseFDWaveform(
        t.mass1 * lal.MSUN_SI, t.mass2 * lal.MSUN_SI, 0.0, 0.0, t.spin1z, 0.0, 0.0, t.spin2z,
        1e6 * lal.PC_SI, 0.0, 0.0, 0.0, 0.0, 0.0, delta_f, f_low, f_max, f_low, None, code,
    )
    out = np.zeros(n_freq, dtype=np.complex128)
    m = min(n_freq, hp.data.length)
    out[:m] = hp.data.data[:m]
    return out


__all__ = ["Template", "frequency_domain", "isco_frequency", "lal_available", "load_approximant"]
