"""Waveforms: the built-in TaylorF2 against LALSimulation, and reading templates from HDF5."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gwbatch.conditioning.design import design_psd
from gwbatch.io.templates import read_hdf5_template
from gwbatch.waveforms import Template, frequency_domain
from gwbatch.waveforms.taylorf2 import chirp_time, isco_frequency, taylorf2

DATA = Path(__file__).parent / "data"


def test_chirp_time_and_isco():
    # A 1.4 + 1.4 binary sweeps from 30 Hz to coalescence in about 54 s (Newtonian).
    assert chirp_time(1.4, 1.4, 30.0) == pytest.approx(54.2, rel=0.02)
    assert isco_frequency(1.4, 1.4) == pytest.approx(1571, rel=0.01)


def test_taylorf2_amplitude_and_band():
    f = np.linspace(0, 2000, 4001)
    h = taylorf2(f, 1.4, 1.4)
    assert h[0] == 0 and np.all(h[f > isco_frequency(1.4, 1.4)] == 0)
    # |h~| falls as f^(-7/6)
    k1, k2 = np.searchsorted(f, 100.0), np.searchsorted(f, 200.0)
    assert abs(h[k2]) / abs(h[k1]) == pytest.approx(2.0 ** (-7.0 / 6.0), rel=1e-9)


@pytest.mark.parametrize("m1,m2,s1,s2", [(1.4, 1.4, 0, 0), (1.9, 1.2, 0.05, -0.03), (10, 8, 0.3, 0.1), (30, 5, 0.9, -0.9)])
def test_taylorf2_matches_lalsimulation(m1, m2, s1, s2):
    lal = pytest.importorskip("lal")
    ls = pytest.importorskip("lalsimulation")
    df, fmin = 1 / 256, 30.0
    hp, _ = ls.SimInspiralChooseFDWaveform(m1 * lal.MSUN_SI, m2 * lal.MSUN_SI, 0, 0, s1, 0, 0, s2, 1e6 * lal.PC_SI,
                                           0.0, 0.0, 0, 0, 0, df, fmin, 0, fmin, None, ls.TaylorF2)
    ref = hp.data.data
    f = np.arange(ref.size) * df
    ours = taylorf2(f, m1, m2, s1, s2)
    band = (f >= fmin) & (f < isco_frequency(m1, m2))
    w = np.where(band, 1.0 / design_psd("aLIGO", np.maximum(f, 1.0)), 0.0)
    n = 1 << 21
    c = np.fft.ifft(np.conj(ref) * ours * w, n)
    match = np.abs(c).max() * n / np.sqrt(np.sum(np.abs(ref) ** 2 * w) * np.sum(np.abs(ours) ** 2 * w))
    assert match > 1 - 1e-6
    np.testing.assert_allclose(np.abs(ours[band]), np.abs(ref[band]), rtol=1e-6)


def test_lal_approximant_when_installed():
    pytest.importorskip("lalsimulation")
    h = frequency_domain("IMRPhenomD", Template(36.0, 29.0), 8193, 0.25, 20.0)
    f = np.arange(h.size) * 0.25
    assert np.all(h[f < 19.75] == 0) and np.abs(h[(f > 30) & (f < 300)]).min() > 0


def test_unknown_approximant():
    from gwbatch.errors import ConfigError

    with pytest.raises(ConfigError, match="approximant 'NoSuchApprox'"):
        frequency_domain("NoSuchApprox", Template(10.0, 10.0), 100, 1.0, 20.0)


def test_gwosc_tutorial_template():
    h, fs = read_hdf5_template(DATA / "gw150914" / "GW150914_4_template.hdf5")
    assert h.shape == (131072,) and fs is None and np.abs(h).max() > 1e-19
