"""Analytic design noise curves, picked by name.

- ``aLIGO``: Advanced LIGO design sensitivity, zero-detuned high-power configuration
  (LIGO-T0900288-v3 ``ZERO_DET_high_P``, the curve LALSimulation calls
  ``aLIGOZeroDetHighPower``), tabulated in ``data/aLIGO_ZeroDetHighPower_asd.txt`` and
  interpolated log-log (error below 1e-4 in ASD between 10 Hz and 4 kHz).
- ``AdVirgo``: Advanced Virgo design, the phenomenological fit of Manzotti & Dietz (2012),
  arXiv:1202.4031, eq. 6 (LALSimulation's ``XLALSimNoisePSDAdvVirgo``).
- ``KAGRA``: Manzotti & Dietz (2012) eq. 5 (``XLALSimNoisePSDKAGRA``).

The fits hold above ~10 Hz.  Below ``f_min`` the curve is held at its ``f_min`` value, so coloured
noise stays finite and its colouring filter short; nothing below the analysis band depends on it.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Callable

import numpy as np

from gwbatch.errors import ConfigError


@functools.cache
def _aligo_table() -> tuple[np.ndarray, np.ndarray]:
    text = resources.files("gwbatch.conditioning").joinpath("data/aLIGO_ZeroDetHighPower_asd.txt").read_text()
    table = np.loadtxt(text.splitlines())
    return np.log(table[:, 0]), np.log(table[:, 1])


def aligo_design(f: np.ndarray) -> np.ndarray:
    log_f, log_asd = _aligo_table()
    return np.exp(2.0 * np.interp(np.log(np.asarray(f, dtype=np.float64)), log_f, log_asd))


def advirgo_design(f: np.ndarray) -> np.ndarray:
    x = np.log(np.asarray(f, dtype=np.float64) / 300.0)
    x2 = x * x
    asd = 1.259e-24 * (
        0.07 * np.exp(-0.142 - 1.437 * x + 0.407 * x2)
        + 3.1 * np.exp(-0.466 - 1.043 * x - 0.548 * x2)
        + 0.4 * np.exp(-0.304 + 2.896 * x - 0.293 * x2)
        + 0.09 * np.exp(1.466 + 3.722 * x - 0.984 * x2)
    )
    return asd * asd


def kagra_design(f: np.ndarray) -> np.ndarray:
    x = np.log(np.asarray(f, dtype=np.float64) / 100.0)
    x2 = x * x
    asd = 6.499e-25 * (
        9.72e-9 * np.exp(-1.43 - 9.88 * x - 0.23 * x2)
        + 1.17 * np.exp(0.14 - 3.10 * x - 0.26 * x2)
        + 1.70 * np.exp(0.14 + 1.09 * x - 0.013 * x2)
        + 1.25 * np.exp(0.071 + 2.83 * x - 4.91 * x2)
    )
    return asd * asd


PSD_MODELS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "aLIGO": aligo_design,
    "AdVirgo": advirgo_design,
    "KAGRA": kagra_design,
}

#: Design curve used for each detector when simulating.
DETECTOR_PSD = {"H1": "aLIGO", "L1": "aLIGO", "V1": "AdVirgo", "K1": "KAGRA"}


def design_psd(name: str, f: np.ndarray, f_min: float = 10.0) -> np.ndarray:
    """One-sided PSD (strain²/Hz) of model ``name`` at frequencies ``f`` (Hz), held flat below ``f_min``."""
    try:
        model = PSD_MODELS[name]
    except KeyError:
        raise ConfigError(f"unknown PSD model {name!r}; known: {', '.join(PSD_MODELS)}") from None
    f = np.asarray(f, dtype=np.float64)
    return model(np.maximum(f, f_min))


def detector_psd_model(ifo: str) -> str:
    try:
        return DETECTOR_PSD[ifo]
    except KeyError:
        raise ConfigError(
            f"no design noise curve for detector {ifo!r}; simulate supports: {', '.join(DETECTOR_PSD)}"
        ) from None
