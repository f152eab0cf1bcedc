"""Template banks on disk: bank files (template parameters) and built SPIIR banks (filters + PSD).

A built bank is one HDF5 file: per-template datasets (masses, spins, filter counts, overlaps,
latencies, sigma), the padded filter arrays ``a``, ``b``, ``d``, the autocorrelations, the PSD it
was built for, and the bank configuration and fingerprint as attributes.  It is written under a
temporary name and renamed, so a half-written bank never looks usable.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import h5py
import numpy as np

from gwbatch.conditioning.psd import PSD
from gwbatch.errors import DataError
from gwbatch.io.atomic import atomic_file
from gwbatch.spiir.bank import PER_TEMPLATE, FilterBank
from gwbatch.waveforms import Template

#: 2: multi-rate filters (``level``) and the single-rate overlap (``overlap_single``); 3: sub-band
#: templates (``subband``, ``channel``).  Format 2 banks are read as banks of the ladder alone.
FORMAT = "gwbatch-spiir-bank/3"
READABLE = (FORMAT, "gwbatch-spiir-bank/2")
#: What a format-2 bank lacks.
ADDED_IN_3 = ("subband", "channel")


def read_bank_file(path: str | os.PathLike) -> list[Template]:
    """Templates from an HDF5 bank file with columns ``mass1``, ``mass2`` (and optional ``spin1z``, ``spin2z``)."""
    try:
        with h5py.File(path, "r") as fh:
            missing = [c for c in ("mass1", "mass2") if c not in fh]
            if missing:
                raise DataError(f"bank file {path} lacks column(s) {', '.join(missing)} (needs mass1, mass2; "
                                f"optional spin1z, spin2z; it has {', '.join(fh.keys())})")
            m1, m2 = np.asarray(fh["mass1"][()], float), np.asarray(fh["mass2"][()], float)
            s1 = np.asarray(fh["spin1z"][()], float) if "spin1z" in fh else np.zeros_like(m1)
            s2 = np.asarray(fh["spin2z"][()], float) if "spin2z" in fh else np.zeros_like(m1)
    except OSError as exc:
        raise DataError(f"cannot read bank file {path}: {exc}") from None
    bad = ~((m1 > 0) & (m2 > 0) & (np.abs(s1) <= 1) & (np.abs(s2) <= 1))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(f"bank file {path}: template {i} is unphysical (mass1 {m1[i]}, mass2 {m2[i]}, "
                        f"spin1z {s1[i]}, spin2z {s2[i]}); masses must be > 0 and |spin| <= 1")
    hi, lo = np.maximum(m1, m2), np.minimum(m1, m2)
    return [Template(float(a), float(b), float(c), float(d)) for a, b, c, d in zip(hi, lo, s1, s2)]


def write_bank_file(templates: list[Template], path: str | os.PathLike) -> Path:
    """Write template parameters as a bank file (columns mass1, mass2, spin1z, spin2z), atomically."""
    path = Path(path)
    with atomic_file(path) as tmp, h5py.File(tmp, "w") as fh:
        for column in ("mass1", "mass2", "spin1z", "spin2z"):
            fh[column] = np.array([getattr(t, column) for t in templates], dtype=np.float64)
    return path


def save_bank(bank: FilterBank, path: str | os.PathLike) -> Path:
    path = Path(path)
    with atomic_file(path) as tmp, h5py.File(tmp, "w") as fh:
        for key in PER_TEMPLATE:
            data = getattr(bank, key)
            # the (templates, filters) arrays are mostly padding: compressed they are ~10x smaller
            packed = {"compression": "gzip", "compression_opts": 4, "shuffle": True} if data.ndim == 2 else {}
            fh.create_dataset(key, data=data, **packed)
        fh.create_dataset("psd_frequencies", data=bank.psd.frequencies)
        fh.create_dataset("psd_values", data=bank.psd.values)
        fh.attrs.update({
            "format": FORMAT, "name": bank.name, "approximant": bank.approximant,
            "sample_rate": bank.sample_rate, "f_low": bank.f_low, "fingerprint": bank.fingerprint,
            "psd_source": bank.psd.source, "config": json.dumps(bank.config),
        })
    return path


def read_bank_psd(path: str | os.PathLike) -> PSD | None:
    """The PSD a built bank file was made for, without reading its filters; None when ``path`` is not
    a readable built bank."""
    try:
        with h5py.File(path, "r") as fh:
            if fh.attrs.get("format") not in READABLE:
                return None
            return PSD(fh["psd_frequencies"][()], fh["psd_values"][()], str(fh.attrs["psd_source"]))
    except (OSError, KeyError):
        return None


def load_bank(path: str | os.PathLike) -> FilterBank:
    try:
        with h5py.File(path, "r") as fh:
            fmt = fh.attrs.get("format")
            if fmt not in READABLE:
                raise DataError(f"{path} is not a built gwbatch SPIIR bank of format {FORMAT} (format "
                                f"{fmt!r}); delete it and the bank is built again")
            # a format-2 bank lacks what format 3 added; a format-3 bank lacking anything is damaged
            values = {k: fh[k][()] for k in PER_TEMPLATE if fmt == FORMAT or k not in ADDED_IN_3}
            psd = PSD(fh["psd_frequencies"][()], fh["psd_values"][()], str(fh.attrs["psd_source"]))
            attrs = dict(fh.attrs)
        return FilterBank(
            name=str(attrs["name"]), approximant=str(attrs["approximant"]), sample_rate=float(attrs["sample_rate"]),
            f_low=float(attrs["f_low"]), psd=psd, fingerprint=str(attrs["fingerprint"]),
            config=json.loads(attrs["config"]), **values,
        )
    except (OSError, KeyError, ValueError, TypeError) as exc:
        raise DataError(f"cannot read bank {path}: {type(exc).__name__}: {exc}") from None
