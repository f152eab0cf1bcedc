"""Sensitive volume-time of a search from an injection campaign drawn from an astrophysical population.

Injections uniform in comoving volume (:mod:`gwbatch.simulate.population`) each stand for their
population's comoving volume ``V`` (column ``volume``, Mpc^3).  A source-frame rate ``R`` gives
``R T V / (1 + z)`` expected signals per injection site (the ``1 + z`` is the clock's redshift), so
the searched volume-time at an IFAR threshold is the Monte Carlo estimate

    VT(IFAR >= x) = T * mean_i [ found_i(x) V_i / (1 + z_i) ]

over the injections that arrived in analysed time, ``T`` the zero-lag livetime (years) and
``found_i(x)`` whether a candidate with IFAR ``>= x`` recovered injection ``i``.  The error is the
standard deviation over bootstrap resamplings of the injections.  For several searches, the union
finds an injection when any of them does at that threshold (the campaign's searches analyse the
same span; the union uses the shortest of their livetimes).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gwbatch.background.far import SECONDS_PER_YEAR
from gwbatch.errors import DataError

NEEDED = ("analysed", "found", "found_ifar_years", "volume", "redshift")


def _check(injections: pd.DataFrame, name: str) -> pd.DataFrame:
    missing = [c for c in NEEDED if c not in injections]
    if missing:
        raise DataError(f"{name}: the injections have no {', '.join(missing)}: VT needs injections drawn from a "
                        "population (gwbatch simulate --cbc-distance MIN,MAX)")
    return injections[injections["analysed"].to_numpy(bool)]


#: Injection indices drawn at once by the bootstrap (memory ~8 bytes each, times the thresholds).
BOOTSTRAP_DRAWS = 1 << 22


def sensitive_vt(injections: pd.DataFrame, livetime: float, thresholds, *, bootstrap: int = 1000, seed: int = 0,
                 name: str = "injections") -> pd.DataFrame:
    """VT (Mpc^3 yr) at each IFAR threshold (years), with its bootstrap error: columns ``ifar_years``,
    ``vt``, ``vt_error``, ``found``, ``injections``; ``livetime`` in seconds."""
    inj = _check(injections, name)
    if len(inj) == 0:
        raise DataError(f"{name}: no injection arrived in analysed time; VT needs some")
    weight = inj["volume"].to_numpy(np.float64) / (1.0 + inj["redshift"].to_numpy(np.float64))
    ifar = np.where(inj["found"].to_numpy(bool), inj["found_ifar_years"].to_numpy(np.float64), -np.inf)
    years = livetime / SECONDS_PER_YEAR
    xs = np.atleast_1d(np.asarray(thresholds, dtype=np.float64))
    hits = weight[None, :] * (ifar[None, :] >= xs[:, None])  # (thresholds, injections)
    means = np.empty((xs.size, bootstrap))
    rng, block = np.random.default_rng(seed), max(1, BOOTSTRAP_DRAWS // len(inj))
    for first in range(0, bootstrap, block):  # resamplings in blocks: bounded memory for any count
        draws = rng.integers(0, len(inj), size=(min(block, bootstrap - first), len(inj)))
        means[:, first: first + draws.shape[0]] = hits[:, draws].mean(axis=2)
    rows = []
    for k, x in enumerate(xs):
        error = float(np.std(means[k])) * years if bootstrap else np.nan
        rows.append({"ifar_years": x, "vt": float(hits[k].mean()) * years, "vt_error": error,
                     "found": int(np.count_nonzero(ifar >= x)), "injections": len(inj)})
    return pd.DataFrame(rows)


def union_found(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One injection table whose ``found_ifar_years`` is the largest any search found it at
    (matched on ``id``), analysed where every search analysed it."""
    names = list(tables)
    base = tables[names[0]].set_index("id")
    ifar = pd.DataFrame({n: np.where(t["found"].to_numpy(bool), t["found_ifar_years"].to_numpy(np.float64), -np.inf)
                         for n, t in ((n, tables[n].set_index("id").loc[base.index]) for n in names)},
                        index=base.index)
    analysed = np.logical_and.reduce([tables[n].set_index("id").loc[base.index, "analysed"].to_numpy(bool)
                                      for n in names])
    best = ifar.max(axis=1).to_numpy()
    out = base.copy()
    out["found"] = best > -np.inf
    out["found_ifar_years"] = np.where(out["found"], best, np.nan)
    out["analysed"] = analysed
    return out.reset_index()
