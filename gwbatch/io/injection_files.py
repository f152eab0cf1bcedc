"""Injection files: LIGO_LW XML ``sim_inspiral`` / ``sim_burst`` tables and PyCBC's HDF format.

The format is told by the content, not the name: the HDF5 signature, the gzip signature (then
the decompressed text) or XML text naming ``LIGO_LW``.  LIGO_LW (LIGO Light-Weight XML) documents are read
with ``igwn_ligolw`` (only the sim tables are loaded); PyCBC injection files
hold one 1-D root dataset per varying parameter and the fixed ones as root attributes (which PyCBC
lists in ``static_args``); the root attribute ``injtype`` must be ``cbc`` (or absent).

One row per injection, in file order, with the project's column names:

- all: ``id`` (0..n-1), ``waveform``, ``gps_time`` (float64 geocentric reference time), ``gps_ns``
  (the same, exact int64 nanoseconds), ``ra``, ``dec``, ``polarization``, ``approximant``,
  ``duration`` (the matching tolerance of :mod:`gwbatch.candidates.injections`), ``simulation_id``
  (the file's, or the index), ``source_file``;
- CBC (``waveform == "cbc"``): ``inclination``, ``phase``, ``mass1``, ``mass2``, ``spin1x`` ..
  ``spin2z``, ``distance`` (Mpc), ``f_low``, ``f_ref``.  sim_inspiral: time ``geocent_end_time`` +
  ``_ns``, ``ra``/``dec`` from ``longitude``/``latitude``, ``phase`` from ``coa_phase``, ``f_low``
  from ``f_lower``, ``approximant`` from ``waveform`` (as written, e.g. ``TaylorF2threePointFivePN``);
  there is no f_ref column, so ``f_ref`` is 0 (LAL's "reference at coalescence").  PyCBC: ``tc``,
  ``mass1``, ``mass2``, ``distance``, ``ra``, ``dec``, ``polarization``, ``approximant``, ``f_lower``
  are required; ``inclination``, ``coa_phase``, ``spin1x`` .. ``spin2z``, ``f_ref`` default to 0 as
  in PyCBC.  Other keys are ignored, as are sim_inspiral's ``taper``, ``amp_order`` and ``f_final``
  (``SimInspiralTD`` tapers every waveform).  ``duration`` is the CBC matching window, 10 ms.
- burst (sim_burst): ``waveform`` is the LAL name mapped (``SineGaussian`` -> ``sine-gaussian``,
  ``Gaussian`` -> ``gaussian``, others lower-cased) and ``approximant`` keeps the LAL name;
  ``frequency``, ``q``, ``burst_duration`` (the table's ``duration``), ``bandwidth``, ``hrss``,
  ``amplitude``, ``pol_ellipse_e``, ``pol_ellipse_angle``, ``psi`` (also ``polarization``),
  ``egw_over_rsquared``, ``waveform_number``.  ``duration`` holds 99 % of a sine-Gaussian's
  energy (as :func:`gwbatch.simulate.bursts.match_tolerance`), else the burst duration, at least 0.1 s.

Times are the file's: for a CBC the approximant's reference time in LAL's convention (TaylorF2:
the formal coalescence), which :mod:`gwbatch.simulate.lalinjection` uses as is; the project
simulator's ``gps_time`` is the amplitude peak instead, about 1 ms earlier for a BNS (see there).  Every value is range checked before anything is generated;
a bad one is a one-line :class:`~gwbatch.errors.DataError` naming the file, the row (simulation id
or index), the column, the value and what is allowed.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
import pandas as pd

from gwbatch.errors import DataError
from gwbatch.gpstime import GPS_MAX

MAX_ROWS = 1_000_000
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
GZIP_MAGIC = b"\x1f\x8b"
BURST_NAMES = {"SineGaussian": "sine-gaussian", "Gaussian": "gaussian"}
_NS = 1_000_000_000
_SPINS = tuple(f"spin{k}{a}" for k in (1, 2) for a in "xyz")
# project column -> sim_inspiral column; PyCBC key
_SIM_INSPIRAL = {"ra": "longitude", "dec": "latitude", "polarization": "polarization",
                 "inclination": "inclination", "phase": "coa_phase", "mass1": "mass1", "mass2": "mass2",
                 "distance": "distance", "f_low": "f_lower", **{s: s for s in _SPINS}}
_PYCBC = {"ra": "ra", "dec": "dec", "polarization": "polarization", "inclination": "inclination",
          "phase": "coa_phase", "mass1": "mass1", "mass2": "mass2", "distance": "distance", "f_low": "f_lower",
          "f_ref": "f_ref", **{s: s for s in _SPINS}}
_PYCBC_REQUIRED = ("tc", "mass1", "mass2", "distance", "ra", "dec", "polarization", "approximant", "f_lower")
_SIM_BURST = {"ra": "ra", "dec": "dec", "psi": "psi", "frequency": "frequency", "q": "q",
              "burst_duration": "duration", "bandwidth": "bandwidth", "hrss": "hrss", "amplitude": "amplitude",
              "pol_ellipse_e": "pol_ellipse_e", "pol_ellipse_angle": "pol_ellipse_angle",
              "egw_over_rsquared": "egw_over_rsquared", "waveform_number": "waveform_number"}
# (column, low, high, closed low?) checked on every CBC row
_CBC_RANGES = (("mass1", 0.0, 1000.0, False), ("mass2", 0.0, 1000.0, False), ("distance", 0.0, 1e6, False),
               ("f_low", 0.0, 1e4, False), ("f_ref", 0.0, 1e4, True))


def _needs_lal(what: str):
    try:
        import lal  # noqa: F401
        import lalsimulation
    except ImportError:
        raise DataError(f"reading {what} injection files needs lalsuite: pip install 'gwbatch[lal]'") from None
    return lalsimulation


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def _sniff(path: Path) -> str:
    """``"hdf5"`` or ``"xml"`` from the first bytes (gzip is looked through)."""
    try:
        with open(path, "rb") as f:
            head = f.read(1024)
        if head.startswith(GZIP_MAGIC):
            with gzip.open(path, "rb") as f:
                head = f.read(1024)
    except (OSError, EOFError) as exc:
        raise DataError(f"cannot read injection file {path}: {_one_line(exc)}") from None
    if head.startswith(HDF5_MAGIC) or (not head.startswith(b"<") and _is_hdf5(path)):
        return "hdf5"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"<") and b"LIGO_LW" in head:
        return "xml"
    raise DataError(f"{path} is not an injection file: neither LIGO_LW XML (plain or gzip) nor HDF5 "
                    f"(starts with {head[:16]!r})")


def _is_hdf5(path: Path) -> bool:
    """HDF5 with a user block (signature at 512, 1024, ... bytes)."""
    import h5py

    try:
        return bool(h5py.is_hdf5(path))
    except OSError:
        return False


def _floats(values, null: float = np.nan) -> np.ndarray:
    return np.array([null if v is None else v for v in values], dtype=np.float64)


def _read_xml(path: Path) -> tuple[str, dict, list, str]:
    _needs_lal("LIGO_LW")
    try:
        from igwn_ligolw import ligolw, lsctables, utils
    except ImportError:
        raise DataError("reading LIGO_LW injection files needs lalsuite: pip install 'gwbatch[lal]'") from None
    names = (lsctables.SimInspiralTable.tableName, lsctables.SimBurstTable.tableName)

    def handler(doc):
        return ligolw.PartialLIGOLWContentHandler(
            doc, lambda name, attrs: name == ligolw.Table.tagName and ligolw.Table.TableName(attrs["Name"]) in names)

    try:
        doc = utils.load_filename(str(path), contenthandler=handler)
    except Exception as exc:  # expat, gzip, igwn_ligolw and type errors: all mean an unreadable file
        raise DataError(f"{path}: not a readable LIGO_LW document ({_one_line(exc)})") from None
    found = {n: ligolw.Table.getTablesByName(doc, n) for n in names}
    if sum(len(t) for t in found.values()) != 1:
        have = [f"{len(t)} {n}" for n, t in found.items()]
        raise DataError(f"{path}: an injection file needs exactly one sim_inspiral or sim_burst table, "
                        f"it has {' and '.join(have)}")
    cls = lsctables.SimInspiralTable if found[names[0]] else lsctables.SimBurstTable
    table = cls.get_table(doc)
    _check_size(path, cls.tableName, len(table))
    present = set(table.columnnames)

    def column(name, default=None):
        """Values as float64: nulls are NaN, or ``default`` where one is given (also for an absent column)."""
        if name not in present:
            if default is None:
                raise DataError(f"{path}: {cls.tableName} has no {name} column; it is needed")
            return np.full(len(table), default, dtype=np.float64)
        return _floats(table.getColumnByName(name), np.nan if default is None else default)

    def values(name, default):
        return list(table.getColumnByName(name)) if name in present else [default] * len(table)

    ids = [k if i is None else int(i) for k, i in enumerate(values("simulation_id", None))]
    if "waveform" not in present:
        raise DataError(f"{path}: {cls.tableName} has no waveform column; it is needed")
    cols = {"approximant": [str(w or "") for w in table.getColumnByName("waveform")]}
    if cls is lsctables.SimInspiralTable:
        seconds, nanos = column("geocent_end_time"), column("geocent_end_time_ns", 0.0)
        cols |= {k: column(v, 0.0 if k.startswith("spin") else None) for k, v in _SIM_INSPIRAL.items()}
        cols["f_ref"] = np.zeros(len(table))
        kind = "sim_inspiral"
    else:
        seconds, nanos = column("time_geocent_gps"), column("time_geocent_gps_ns", 0.0)
        cols |= {k: column(v, np.nan) for k, v in _SIM_BURST.items() if k != "waveform_number"}
        cols["waveform_number"] = np.array([int(v or 0) for v in values("waveform_number", 0)], dtype=np.uint64)
        kind = "sim_burst"
    cols["time"] = (seconds, nanos)
    return kind, cols, ids, "simulation_id"


def _read_hdf(path: Path) -> tuple[str, dict, list, str]:
    import h5py

    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise DataError(f"{path}: cannot open HDF5 file ({_one_line(exc)})") from None
    try:
        with f:
            return _pycbc_columns(path, f)
    except (OSError, KeyError, TypeError, ValueError) as exc:  # damaged or misshapen datasets and attributes
        raise DataError(f"{path}: cannot read PyCBC injection file ({_one_line(exc)})") from None


def _pycbc_columns(path: Path, f) -> tuple[str, dict, list, str]:
    import h5py

    injtype = f.attrs.get("injtype", "cbc")
    injtype = injtype.decode() if isinstance(injtype, bytes) else str(injtype)
    if injtype != "cbc":
        raise DataError(f"{path}: PyCBC injtype {injtype!r} is not supported; allowed: 'cbc'")
    keys = ("tc", "approximant", *_PYCBC.values())
    missing = [k for k in _PYCBC_REQUIRED if k not in f and k not in f.attrs]
    if missing:
        raise DataError(f"{path}: PyCBC injection file lacks {', '.join(missing)} (a root dataset or a static "
                        f"attribute); needed: {', '.join(_PYCBC_REQUIRED)}")
    for key in keys:
        if key in f and (not isinstance(f[key], h5py.Dataset) or f[key].ndim != 1):
            raise DataError(f"{path}: {key} must be a 1-D dataset of one value per injection")
    n = max((f[k].shape[0] for k in keys if k in f), default=1)  # all static: one injection
    _check_size(path, "PyCBC injection file", n)
    data = {k: f[k][()] if k in f else f.attrs[k] for k in keys if k in f or k in f.attrs}
    cols = {}
    for key, value in data.items():
        if np.ndim(value) == 1 and np.size(value) != n:
            raise DataError(f"{path}: dataset {key} has {np.size(value)} values, others have {n}")
        if key == "approximant":
            values = np.broadcast_to(np.asarray(value), (n,))
            cols["approximant"] = [v.decode() if isinstance(v, bytes) else str(v) for v in values.tolist()]
            continue
        try:
            cols[key] = np.broadcast_to(np.asarray(value, dtype=np.float64), (n,)).copy()
        except (TypeError, ValueError):
            raise DataError(f"{path}: {key} must hold one number per injection (a dataset) or one for all (an "
                            f"attribute), got {np.asarray(value).dtype} of shape {np.shape(value)}") from None
    out = {k: cols.get(v, np.zeros(n)) for k, v in _PYCBC.items()}
    out["approximant"] = cols["approximant"]
    out["time"] = cols["tc"]
    return "PyCBC", out, list(range(n)), "index"


def _check_size(path: Path, what: str, n: int) -> None:
    if n == 0:
        raise DataError(f"{path}: the {what} table is empty; an injection file needs 1 to {MAX_ROWS} rows")
    if n > MAX_ROWS:
        raise DataError(f"{path}: the {what} table has {n} rows; at most {MAX_ROWS} are read")


def _refuse(path: Path, kind: str, labels: list, bad: np.ndarray, column: str, values, allowed: str):
    if np.any(bad):
        i = int(np.argmax(bad))
        value = values[i].item() if isinstance(values[i], np.generic) else values[i]
        raise DataError(f"{path}: {kind} row {labels[i]} {column} = {value!r}; allowed: {allowed}")


def _exact_ns(path: Path, kind: str, labels: list, time) -> np.ndarray:
    """int64 nanoseconds from (seconds, ns) columns or float seconds, checked in [0, 2**32) s."""
    if isinstance(time, tuple):
        seconds, nanos = time
        for name, v in (("time seconds", seconds), ("time nanoseconds", nanos)):
            _refuse(path, kind, labels, ~np.isfinite(v), name, v, "finite values")
        _refuse(path, kind, labels, (seconds < 0) | (seconds >= GPS_MAX), "time", seconds,
                "[0, 2**32) s")
        _refuse(path, kind, labels, (nanos < 0) | (nanos >= _NS), "time nanoseconds", nanos, "[0, 1e9)")
        return seconds.astype(np.int64) * _NS + nanos.astype(np.int64)
    _refuse(path, kind, labels, ~np.isfinite(time), "tc", time, "finite values")
    _refuse(path, kind, labels, (time < 0) | (time >= GPS_MAX), "tc", time, "[0, 2**32) s")
    whole = np.floor(time)
    return whole.astype(np.int64) * _NS + np.round((time - whole) * _NS).astype(np.int64)


def _check_approximants(path: Path, kind: str, labels: list, names: list) -> None:
    from gwbatch.simulate.lalinjection import quietly

    lal_sim = _needs_lal(kind)
    for name in dict.fromkeys(names):
        try:
            quietly(lal_sim.GetApproximantFromString, name)
        except RuntimeError:
            raise DataError(f"{path}: {kind} row {labels[names.index(name)]} approximant = {name!r} is not a "
                            f"LALSimulation approximant (e.g. TaylorF2, IMRPhenomD, SEOBNRv4_ROM)") from None


def _cbc_frame(path: Path, kind: str, cols: dict, labels: list) -> dict:
    for name in ("ra", "dec", "polarization", "inclination", "phase", "mass1", "mass2", "distance", "f_low",
                 "f_ref", *_SPINS):
        _refuse(path, kind, labels, ~np.isfinite(cols[name]), name, cols[name], "finite values")
    _refuse(path, kind, labels, np.abs(cols["dec"]) > np.pi / 2, "dec", cols["dec"], "[-pi/2, pi/2]")
    for name, lo, hi, closed in _CBC_RANGES:
        v = cols[name]
        bad = ((v < lo) if closed else (v <= lo)) | (v > hi)
        _refuse(path, kind, labels, bad, name, v, f"{'[' if closed else '('}{lo:g}, {hi:g}]")
    for k in (1, 2):
        norm = np.sqrt(sum(cols[f"spin{k}{a}"] ** 2 for a in "xyz"))
        _refuse(path, kind, labels, norm > 1.0, f"spin{k} magnitude", norm, "[0, 1]")
    _check_approximants(path, kind, labels, cols["approximant"])
    from gwbatch.simulate.cbc import MATCH_WINDOW

    return {"waveform": "cbc", **{k: cols[k] for k in ("ra", "dec", "polarization")},
            "approximant": cols["approximant"], "duration": MATCH_WINDOW,
            **{k: cols[k] for k in ("inclination", "phase", "mass1", "mass2", *_SPINS, "distance", "f_low", "f_ref")}}


def _burst_frame(path: Path, kind: str, cols: dict, labels: list) -> dict:
    from gwbatch.simulate.bursts import ENERGY_99, MIN_MATCH_WINDOW, sg_tau
    from gwbatch.simulate.lalinjection import BURST_PARAMETERS

    names = cols["approximant"]
    for i, name in enumerate(names):
        if name not in BURST_PARAMETERS:
            raise DataError(f"{path}: {kind} row {labels[i]} waveform = {name!r} is not a burst waveform "
                            f"gwbatch generates; allowed: {', '.join(BURST_PARAMETERS)}")
    for name in ("ra", "dec", "psi"):
        _refuse(path, kind, labels, ~np.isfinite(cols[name]), name, cols[name], "finite values")
    _refuse(path, kind, labels, np.abs(cols["dec"]) > np.pi / 2, "dec", cols["dec"], "[-pi/2, pi/2]")
    for wave, needed in BURST_PARAMETERS.items():
        rows = np.array([n == wave for n in names])
        for column in needed:
            v = cols[column]
            _refuse(path, kind, labels, rows & ~((v > 0) & np.isfinite(v)), column, v,
                    f"positive finite values (needed by {wave})")
    sg = np.array([n == "SineGaussian" for n in names])
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = np.where(sg, sg_tau(cols["frequency"], cols["q"]), np.nan)
    tol = np.where(sg, ENERGY_99 * tau / 2.0, np.nan_to_num(cols["burst_duration"], nan=0.0))
    return {"waveform": [BURST_NAMES.get(n, n.lower()) for n in names], "ra": cols["ra"], "dec": cols["dec"],
            "polarization": cols["psi"], "approximant": names, "duration": np.maximum(MIN_MATCH_WINDOW, tol),
            **{k: cols[k] for k in _SIM_BURST if k not in ("ra", "dec")}}


def read_injection_file(path: str | os.PathLike) -> pd.DataFrame:
    """The injections of a LIGO_LW (plain or gzip) or PyCBC HDF file as a table (module docstring)."""
    path = Path(path)
    fmt = _sniff(path)
    kind, cols, ids, id_name = _read_hdf(path) if fmt == "hdf5" else _read_xml(path)
    labels = [f"{id_name} {i}" for i in ids]
    ns = _exact_ns(path, kind, labels, cols["time"])
    body = _burst_frame(path, kind, cols, labels) if kind == "sim_burst" else _cbc_frame(path, kind, cols, labels)
    waveform = body.pop("waveform")
    return pd.DataFrame({"id": np.arange(len(ids), dtype=np.int64), "waveform": waveform,
                         "gps_time": (ns // _NS) + (ns % _NS) / _NS, "gps_ns": ns, **body,
                         "simulation_id": np.array(ids, dtype=np.int64), "source_file": str(path)})
