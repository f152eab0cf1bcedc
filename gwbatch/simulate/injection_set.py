"""An injection file as a campaign uses it: added to the strain when a chunk is read.

``data.injections`` names a LIGO_LW ``sim_inspiral`` / ``sim_burst`` XML or PyCBC HDF file
(:func:`gwbatch.io.injection_files.read_injection_file`).  The plan reads it once
(:func:`load_injection_set`): each row gets its arrival time in every detector (``time_<ifo>``,
the geocentric time plus the delay, as :mod:`gwbatch.simulate` lists its own injections) and the
store samples its waveform may reach (a bound from its chirp time, not a generation).  A task
receives the rows that reach its read span, and the worker adds their LALSuite strain
(:mod:`gwbatch.simulate.lalinjection`) to the samples it read, before anything is masked or
conditioned.  The store is never modified, so one store serves any number of injection sets.

Each row's optimal SNR per detector is measured by the chunk that holds its arrival, against that
chunk's own PSD (the one it was whitened with): ``snr_<ifo>`` and the network ``snr`` are what
the data made of the injection, as analysts compute them for found/missed plots.  The same chunk
measures the arrival itself: the peak of the injected strain's envelope in that detector, which is
what a search reports as the merger.  (A file's time is the approximant's reference time, LAL's
coalescence time; a TaylorF2 chirp cut at the ISCO or at Nyquist peaks up to several ms before it.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gwbatch.gpstime import GPSTime, time_to_index

#: Seconds kept beyond a waveform's chirp-time bound at each end: LALSuite's conditioning starts
#: the inspiral below ``f_low``, and the merger and ringdown follow ``gps_time``.
CBC_LEAD_MARGIN = 4.0
CBC_TAIL = 2.0
#: Half-width (s) of the stretch a burst may reach, at least; longer bursts get 8 durations.
BURST_REACH = 2.0
#: Light travel time bound (s) between the geocentre and any detector.
TRAVEL = 0.05


@dataclass(frozen=True, eq=False)
class InjectionSet:
    """The rows of an injection file (with ``time_<ifo>``, and the store samples ``first`` to
    ``last`` their strain may reach) and the file's SHA-256."""

    path: str
    table: pd.DataFrame
    sha256: str

    def reaching(self, start: int, stop: int) -> tuple[dict, ...]:
        """The rows whose strain may reach store samples ``[start, stop)``."""
        t = self.table
        hit = (t["first"].to_numpy() < stop) & (t["last"].to_numpy() >= start)
        return tuple(t[hit].to_dict("records"))


def _reach(row: dict) -> tuple[float, float]:
    """Seconds before and after ``gps_time`` that the row's strain may cover."""
    if row["waveform"] == "cbc":
        import lal
        import lalsimulation as ls

        f = max(1.0, 0.9 * float(row["f_low"]))
        chirp = ls.SimInspiralChirpTimeBound(f, row["mass1"] * lal.MSUN_SI, row["mass2"] * lal.MSUN_SI,
                                             float(row.get("spin1z", 0.0) or 0.0), float(row.get("spin2z", 0.0) or 0.0))
        return 1.5 * chirp + CBC_LEAD_MARGIN + TRAVEL, CBC_TAIL + TRAVEL
    width = max(BURST_REACH, 8.0 * float(np.nan_to_num(row.get("burst_duration", 0.0))),
                8.0 * float(np.nan_to_num(row.get("q", 0.0))) / max(1.0, float(np.nan_to_num(row.get("frequency", 1.0)))))
    return width + TRAVEL, width + TRAVEL


def load_injection_set(path, ifos: tuple[str, ...], t0: GPSTime, sample_rate: float) -> InjectionSet:
    """Read ``path`` and place its rows on the store's sample grid (see the module docstring)."""
    from gwbatch.io.injection_files import read_injection_file
    from gwbatch.io.store import file_sha256
    from gwbatch.simulate import _arrival_delay

    table = read_injection_file(path).reset_index(drop=True)
    check_generation(table, sample_rate)
    first, last = np.zeros(len(table), np.int64), np.zeros(len(table), np.int64)
    for i, row in enumerate(table.to_dict("records")):
        before, after = _reach(row)
        first[i] = int(np.floor(time_to_index(t0, row["gps_time"] - before, sample_rate)))
        last[i] = int(np.ceil(time_to_index(t0, row["gps_time"] + after, sample_rate)))
        for ifo in ifos:
            table.loc[i, f"time_{ifo}"] = row["gps_time"] + _arrival_delay(ifo, row["ra"], row["dec"], row["gps_time"])
    table["first"], table["last"] = first, last
    return InjectionSet(str(path), table, file_sha256(path))


def check_generation(table: pd.DataFrame, sample_rate: float) -> None:
    """Generate the first row of each approximant once, so one LALSuite knows by name but cannot
    make here (a ROM whose data files are not installed) is refused at plan time, naming it,
    instead of failing every chunk that holds such a row."""
    from gwbatch.simulate.lalinjection import _polarisations

    if table.empty:
        return
    for _, first in table.groupby(["waveform", "approximant"], sort=False).head(1).iterrows():
        _polarisations(first.to_dict(), sample_rate)


def add_injections(x: np.ndarray, ifo: str, start: int, rows, t0: GPSTime, sample_rate: float) -> None:
    """Add ``rows``' strain in ``ifo`` to ``x``, the float64 samples from store sample ``start``."""
    from gwbatch.simulate.lalinjection import add_injection

    for row in rows:
        add_injection(x, start, float(t0), sample_rate, ifo, row)


def envelope_peak(first: int, x: np.ndarray, t0: GPSTime, sample_rate: float) -> float:
    """GPS time of the maximum of ``x``'s analytic-signal envelope (``x`` starting at store sample
    ``first``), refined by a parabola through the three top samples."""
    from scipy.signal import hilbert

    env = np.abs(hilbert(x, 1 << int(np.ceil(np.log2(max(2, x.size))))))[: x.size]
    k = int(np.clip(np.argmax(env), 1, max(1, x.size - 2)))
    a, b, c = env[k - 1: k + 2] if x.size >= 3 else (0.0, 1.0, 0.0)
    shift = 0.5 * (a - c) / (a - 2.0 * b + c) if a - 2.0 * b + c != 0 else 0.0
    return float(t0) + (first + k + shift) / sample_rate


def injection_snrs(rows, ifo: str, own: tuple[int, int], psd, t0: GPSTime, sample_rate: float,
                   f_low: float) -> list[dict]:
    """``[{id, ifo, snr, time}]``: the optimal SNR in ``ifo`` against ``psd`` (frequencies,
    one-sided PSD) and the envelope peak's GPS time of each row whose arrival in ``ifo`` lies in the
    store samples ``own``."""
    from gwbatch.simulate.lalinjection import injection_strain, optimal_snr

    out = []
    for row in rows:
        k = time_to_index(t0, row[f"time_{ifo}"], sample_rate)
        if own[0] <= k < own[1]:
            snr = np.nan if psd is None else optimal_snr(row, ifo, float(t0), sample_rate, psd[0], psd[1], f_low)
            first, x = injection_strain(row, ifo, float(t0), sample_rate)
            out.append({"id": int(row["id"]), "ifo": ifo, "snr": float(snr),
                        "time": envelope_peak(first, x, t0, sample_rate)})
    return out


def injection_table(injections: InjectionSet, measured: pd.DataFrame, ifos: tuple[str, ...]) -> pd.DataFrame:
    """The file's rows with each detector's measured optimal SNR (``snr_<ifo>``, NaN where no chunk
    analysed the arrival), the network ``snr``, and the measured arrival (``time_<ifo>``, the
    envelope peak; the geocentric time plus the delay where no chunk measured it), for
    found/missed matching."""
    table = injections.table.drop(columns=["first", "last"])
    for ifo in ifos:
        part = measured[measured["ifo"] == ifo].drop_duplicates("id").set_index("id") if len(measured) else None
        table[f"snr_{ifo}"] = table["id"].map(part["snr"]) if part is not None else np.nan
        if part is not None:
            table[f"time_{ifo}"] = table["id"].map(part["time"]).fillna(table[f"time_{ifo}"])
    cols = [f"snr_{ifo}" for ifo in ifos]
    table["snr"] = np.sqrt((table[cols].fillna(0.0) ** 2).sum(axis=1))
    return table

