"""Built-in TaylorF2: stationary-phase inspiral waveform with 3.5PN phase (no extra package needed).

``h~(f) = A f^(-7/6) exp(-i Psi(f))`` for an optimally oriented source at distance ``D``, with
``A = sqrt(5/24) pi^(-2/3) (c / D) (G Mc / c^3)^(5/6)`` and

    Psi(f) = 2 pi f t_c - phi_c - pi/4 + 3 / (128 eta v^5) * sum_k phi_k v^k,   v = (pi G M f / c^3)^(1/3)

with the coefficients of :func:`phase_coefficients` (non-spinning 3.5PN, aligned spins to 3.5PN),
the same expansion as LALSimulation's TaylorF2 (tests compare the two).
The waveform ends at the innermost stable circular orbit of the total mass, ``f_ISCO = 1 / (6^1.5 pi G M / c^3)``.
"""

from __future__ import annotations

import numpy as np

MSUN_S = 4.925490947641267e-06  # G M_sun / c^3 (s)
MPC_S = 1.0292712503e14  # 1 Mpc / c (s)
EULER_GAMMA = 0.5772156649015329


def isco_frequency(mass1: float, mass2: float) -> float:
    """Gravitational-wave frequency (Hz) at the Schwarzschild ISCO of the total mass."""
    return 1.0 / (6.0**1.5 * np.pi * (mass1 + mass2) * MSUN_S)


def chirp_mass(mass1: float, mass2: float) -> float:
    return (mass1 * mass2) ** 0.6 / (mass1 + mass2) ** 0.2


def _spin_orbit(m: float) -> dict:
    """Spin-orbit phase terms of one body (``m`` = its mass over the total mass), per unit aligned spin."""
    eta = m * (1.0 - m)
    return {
        3: m * (25.0 + 38.0 / 3.0 * m),
        5: -m * (1391.5 / 8.4 - m * (1.0 - m) * 10.0 / 3.0 + m * (1276.0 / 8.1 + m * (1.0 - m) * 170.0 / 9.0)),
        6: np.pi * m * (1490.0 / 3.0 + 260.0 * m),
        7: m * (-17097.8035 / 4.8384 + eta * 28764.25 / 6.72 + eta**2 * 47.35 / 1.44
                + m * (-7189.233785 / 1.524096 + eta * 458.555 / 3.024 - eta**2 * 534.5 / 7.2)),
    }


def phase_coefficients(mass1: float, mass2: float, spin1z: float = 0.0, spin2z: float = 0.0) -> dict:
    """PN phase coefficients ``phi_k`` and the log coefficients at 2.5PN and 3PN.

    Non-spinning terms: BIOPS (2009) eq. 3.18.  Aligned spins (black-hole spin-induced quadrupole):
    spin-orbit at 1.5, 2.5, 3 and 3.5PN and spin-spin, quadrupole-monopole and self-spin terms at
    2PN and 3PN, with the coefficients LALSimulation's TaylorF2 uses (Bohe et al. 2013,
    arXiv:1303.7412; Mishra et al. 2016, arXiv:1601.05588; LIGO-T1800298).
    """
    m = mass1 + mass2
    eta = mass1 * mass2 / m**2
    m1, m2 = mass1 / m, mass2 / m
    c = {
        "eta": eta,
        0: 1.0,
        1: 0.0,
        2: 3715.0 / 756.0 + 55.0 / 9.0 * eta,
        3: -16.0 * np.pi,
        4: 15293365.0 / 508032.0 + 27145.0 / 504.0 * eta + 3085.0 / 72.0 * eta**2,
        5: np.pi * (38645.0 / 756.0 - 65.0 / 9.0 * eta),
        6: (11583231236531.0 / 4694215680.0 - 640.0 / 3.0 * np.pi**2 - 6848.0 / 21.0 * EULER_GAMMA
            + eta * (-15737765635.0 / 3048192.0 + 2255.0 / 12.0 * np.pi**2)
            + 76055.0 / 1728.0 * eta**2 - 127825.0 / 1296.0 * eta**3 - 6848.0 / 21.0 * np.log(4.0)),
        "6log": -6848.0 / 21.0,
        7: np.pi * (77096675.0 / 254016.0 + 378515.0 / 1512.0 * eta - 74045.0 / 756.0 * eta**2),
    }
    so1, so2 = _spin_orbit(m1), _spin_orbit(m2)
    for k in (3, 5, 6, 7):
        c[k] += so1[k] * spin1z + so2[k] * spin2z
    c["5log"] = 3.0 * c[5]
    # 2PN: spin1-spin2 (247/4.8 - 721/4.8) eta and, per body, quadrupole-monopole + self-spin
    # (-720/9.6 + 1/9.6 + 240/9.6 - 7/9.6) m_i^2 for aligned spins.
    c[4] += -474.0 / 4.8 * eta * spin1z * spin2z - 50.625 * (m1**2 * spin1z**2 + m2**2 * spin2z**2)
    # 3PN spin-spin.
    c[6] += (326.75 / 1.12 + 557.5 / 1.8 * eta) * eta * spin1z * spin2z
    for mi, chi in ((m1, spin1z), (m2, spin2z)):
        self2 = (-4108.25 / 6.72 - 108.5 / 1.2 * mi + 125.5 / 3.6 * mi**2) * mi**2
        qm2 = (4703.5 / 8.4 + 2935.0 / 6.0 * mi - 120.0 * mi**2) * mi**2
        c[6] += (self2 + qm2) * chi**2
    return c


def taylorf2(f: np.ndarray, mass1: float, mass2: float, spin1z: float = 0.0, spin2z: float = 0.0,
             distance_mpc: float = 1.0) -> np.ndarray:
    """Frequency-domain strain ``h~(f)`` (1/Hz) at ``f`` (Hz); zero above ISCO and at ``f <= 0``.

    Coalescence time and phase are zero, so in the time domain the chirp ends at ``t = 0``.
    """
    f = np.asarray(f, dtype=np.float64)
    out = np.zeros(f.shape, dtype=np.complex128)
    band = (f > 0) & (f <= isco_frequency(mass1, mass2))
    if not band.any():
        return out
    fb = f[band]
    m_s = (mass1 + mass2) * MSUN_S
    c = phase_coefficients(mass1, mass2, spin1z, spin2z)
    v = (np.pi * m_s * fb) ** (1.0 / 3.0)
    logv = np.log(v)
    series = (c[0] + c[2] * v**2 + c[3] * v**3 + c[4] * v**4 + (c[5] + c["5log"] * logv) * v**5
              + (c[6] + c["6log"] * logv) * v**6 + c[7] * v**7)
    psi = -np.pi / 4.0 + 3.0 / (128.0 * c["eta"] * v**5) * series
    amp = np.sqrt(5.0 / 24.0) * np.pi ** (-2.0 / 3.0) * (chirp_mass(mass1, mass2) * MSUN_S) ** (5.0 / 6.0)
    amp /= distance_mpc * MPC_S
    out[band] = amp * fb ** (-7.0 / 6.0) * np.exp(-1j * psi)
    return out


def chirp_time(mass1: float, mass2: float, f_low: float) -> float:
    """Newtonian time (s) from ``f_low`` to coalescence (a length estimate for buffers)."""
    m_s = (mass1 + mass2) * MSUN_S
    eta = mass1 * mass2 / (mass1 + mass2) ** 2
    return 5.0 * m_s / (256.0 * eta) * (np.pi * m_s * f_low) ** (-8.0 / 3.0)
