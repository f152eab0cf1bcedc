"""Candidates as LIGO_LW coinc documents with their PSDs: the exchange format of GraceDB uploads and
the input of BAYESTAR (ligo.skymap), written with igwn-ligolw.

A compact-binary candidate (the SPIIR search) becomes ``process``, ``coinc_definer``,
``time_slide``, ``coinc_event``, ``coinc_event_map``, ``coinc_inspiral`` and one ``sngl_inspiral``
per detector that saw it (SNR, phase of the complex SNR, arrival time of the template's merger,
masses and aligned spins of the template).  An unmodelled candidate (the burst and pulse searches)
becomes one ``sngl_burst`` per detector (peak time, SNR, duration, frequency band) and, since
igwn-ligolw has no ``multi_burst`` table, a ``LIGO_LW Name="gwbatch:network"`` element of parameters
(network SNR, FAR, peak time, band, best direction in radians).  Each document also holds the detectors' PSDs in the LAL PSD layout
(``LIGO_LW Name="psd"`` of ``REAL8FrequencySeries``, what ``lal.series.make_psd_xmldoc`` writes and
``lal.series.read_psd_xmldoc`` reads), so one file is enough to relocalise.

Phases follow the FINDCHIRP convention (``z = <d, h>`` with ``h = h_+ - i h_x`` correlated as
``4 Re ∫ d̃ h̃*/S``), as PyCBC writes them.  ligo.skymap chooses the convention from the ``process``
table's ``program``; :func:`register_with_ligo_skymap` tells it gwbatch's.

igwn-ligolw's tables need lalsuite (``pip install 'gwbatch[lal]'``).
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gwbatch.errors import DataError
from gwbatch.io.atomic import atomic_file

#: ``process.program`` of the documents gwbatch writes.
PROGRAM = "gwbatch"
#: The ``process`` row's ``comment``, and ligo.skymap's reading of the phases (FINDCHIRP: not inverted).
INVERT_PHASES = False
#: ``coinc_definer`` rows: (search, search_coinc_type, description), as lalinspiral's and lalburst's.
INSPIRAL_COINC = ("inspiral", 0, "sngl_inspiral<-->sngl_inspiral coincidences")
BURST_COINC = ("burst", 0, "sngl_burst<-->sngl_burst coincidences")


@dataclass(frozen=True)
class Single:
    """One detector's part of a candidate."""

    ifo: str
    time: float  # GPS: the template's merger (CBC) or the peak (burst) in this detector
    snr: float
    phase: float = float("nan")  # argument of the complex SNR (CBC)
    chisq: float = float("nan")
    duration: float = float("nan")  # burst: the event's duration (s)


@dataclass(frozen=True)
class Candidate:
    """What a coinc document says about one candidate (:func:`coinc_document`)."""

    search: str  # gwbatch's search kind: spiir, burst or pulse
    gps_time: float
    snr: float  # network SNR
    far: float  # Hz
    singles: tuple[Single, ...]
    template: dict | None = None  # CBC: mass1, mass2, spin1z, spin2z (solar masses)
    band: tuple[float, float] | None = None  # burst: (f_low, f_high) Hz
    ra: float | None = None  # radians, the search's best direction
    dec: float | None = None
    rank: float | None = None  # the search's ranking statistic (coinc_event.likelihood)

    @property
    def is_cbc(self) -> bool:
        return self.template is not None


#: Units of the burst network parameters.
NETWORK_UNITS = {"peak_time": "s", "false_alarm_rate": "Hz", "central_freq": "Hz", "bandwidth": "Hz", "ra": "rad",
                 "dec": "rad"}


def _lal():
    try:
        import lal  # noqa: F401
        from igwn_ligolw import ligolw, lsctables
    except ImportError:
        raise DataError("writing LIGO_LW coinc files needs lalsuite (igwn-ligolw's tables use it): "
                        "pip install 'gwbatch[lal]'") from None
    return ligolw, lsctables


def _gps(t: float):
    import lal

    seconds = int(np.floor(t))
    return lal.LIGOTimeGPS(seconds, int(round((t - seconds) * 1e9)))


def _row(table, **values):
    """A row of ``table`` with every column null except ``values``."""
    return table.RowType(**{**dict.fromkeys(table.columnnames, None), **values})


def chirp_mass(m1: float, m2: float) -> float:
    return (m1 * m2) ** 0.6 / (m1 + m2) ** 0.2


def coinc_document(candidate: Candidate, psds: dict[str, tuple[np.ndarray, np.ndarray]], *, f_low: float,
                   version: str, campaign: str = "", channels: dict[str, str] | None = None):
    """The LIGO_LW document of one candidate and its detectors' PSDs (``{ifo: (frequency, psd)}``,
    one-sided, strain²/Hz, on a uniform grid from 0 Hz)."""
    ligolw, lsctables = _lal()
    channels = channels or {}
    if not candidate.singles:
        raise DataError(f"candidate at GPS {candidate.gps_time:.4f} has no detector with an SNR")
    doc = ligolw.Document()
    root = doc.appendChild(ligolw.LIGO_LW())
    ifos = sorted(s.ifo for s in candidate.singles)
    process = _process(root, lsctables, version, ifos, campaign, candidate)
    time_slide = root.appendChild(lsctables.TimeSlideTable.new())
    slide_id = time_slide.get_next_id()
    for ifo in ifos:  # zero lag (rows written directly: the table's own helper needs lalburst)
        time_slide.append(_row(time_slide, time_slide_id=slide_id, instrument=ifo, offset=0.0,
                               process_id=process.process_id))
    definer = root.appendChild(lsctables.CoincDefTable.new())
    search, coinc_type, description = INSPIRAL_COINC if candidate.is_cbc else BURST_COINC
    coinc_def = _row(definer, coinc_def_id=definer.get_next_id(), search=search, search_coinc_type=coinc_type,
                     description=description)
    definer.append(coinc_def)
    coincs = root.appendChild(lsctables.CoincTable.new())
    coinc = _row(coincs, coinc_event_id=coincs.get_next_id(), process_id=process.process_id,
                 coinc_def_id=coinc_def.coinc_def_id, time_slide_id=slide_id, nevents=len(ifos),
                 likelihood=None if candidate.rank is None else float(candidate.rank))
    coinc.instruments = ifos
    coincs.append(coinc)
    mapping = root.appendChild(lsctables.CoincMapTable.new())
    writer = _inspiral_tables if candidate.is_cbc else _burst_tables
    for table_name, event_id in writer(root, lsctables, candidate, process, coinc, f_low, channels):
        mapping.append(_row(mapping, coinc_event_id=coinc.coinc_event_id, table_name=table_name, event_id=event_id))
    append_psds(doc, psds, candidate.gps_time)
    return doc


def _process(root, lsctables, version: str, ifos: list[str], campaign: str, candidate: Candidate):
    table = root.appendChild(lsctables.ProcessTable.new())
    now = int(_gps_now())
    process = _row(table, process_id=table.get_next_id(), program=PROGRAM, version=version, cvs_repository="",
                   cvs_entry_time=None, comment=f"{candidate.search} search" + (f" of campaign {campaign}" if campaign else ""),
                   is_online=0, node=None, username=None, unix_procid=os.getpid(), start_time=now, end_time=now,
                   jobid=0, domain="gwbatch")
    process.instruments = ifos
    table.append(process)
    return process


def _gps_now() -> float:
    from astropy.time import Time

    return float(Time.now().gps)


def _inspiral_tables(root, lsctables, c: Candidate, process, coinc, f_low: float, channels: dict):
    sngls = root.appendChild(lsctables.SnglInspiralTable.new())
    t = c.template
    m1, m2 = float(t["mass1"]), float(t["mass2"])
    mchirp, eta = chirp_mass(m1, m2), m1 * m2 / (m1 + m2) ** 2
    for s in c.singles:
        row = _row(sngls, process_id=process.process_id, event_id=sngls.get_next_id(), ifo=s.ifo,
                   search=f"gwbatch-{c.search}", channel=channels.get(s.ifo, ""), end=_gps(s.time), snr=float(s.snr),
                   coa_phase=float(s.phase), mass1=m1, mass2=m2, mchirp=mchirp, mtotal=m1 + m2, eta=eta,
                   spin1x=0.0, spin1y=0.0, spin1z=float(t.get("spin1z", 0.0)),
                   spin2x=0.0, spin2y=0.0, spin2z=float(t.get("spin2z", 0.0)), f_final=float(t.get("f_final", 0.0)),
                   chisq=None if not np.isfinite(s.chisq) else float(s.chisq), eff_distance=None)
        sngls.append(row)
        yield sngls.tableName, row.event_id
    inspirals = root.appendChild(lsctables.CoincInspiralTable.new())
    row = _row(inspirals, coinc_event_id=coinc.coinc_event_id, end=_gps(c.gps_time), mass=m1 + m2, mchirp=mchirp,
               snr=float(c.snr), false_alarm_rate=float(c.far), combined_far=float(c.far), minimum_duration=None)
    row.instruments = [s.ifo for s in c.singles]
    inspirals.append(row)


def _burst_tables(root, lsctables, c: Candidate, process, coinc, f_low: float, channels: dict):
    sngls = root.appendChild(lsctables.SnglBurstTable.new())
    lo, hi = c.band or (f_low, float("nan"))
    centre, width = 0.5 * (lo + hi), hi - lo
    for s in c.singles:
        duration = float(s.duration) if np.isfinite(s.duration) else None
        start = s.time - 0.5 * (duration or 0.0)
        row = _row(sngls, process_id=process.process_id, event_id=sngls.get_next_id(), ifo=s.ifo,
                   search=f"gwbatch-{c.search}", channel=channels.get(s.ifo, ""), peak=_gps(s.time), start=_gps(start),
                   duration=duration, central_freq=centre if np.isfinite(centre) else None,
                   bandwidth=width if np.isfinite(width) else None, snr=float(s.snr), confidence=None)
        sngls.append(row)
        yield sngls.tableName, row.event_id
    # igwn-ligolw has no multi_burst table (it went with glue): the network's values are parameters
    ligolw, _ = _lal()
    attrs = ligolw.sax.xmlreader.AttributesImpl
    network = root.appendChild(ligolw.LIGO_LW(attrs({"Name": "gwbatch:network"})))
    values = {"coinc_event_id": int(coinc.coinc_event_id), "peak_time": float(c.gps_time), "snr": float(c.snr),
              "false_alarm_rate": float(c.far), "central_freq": centre, "bandwidth": width,
              "ra": c.ra, "dec": c.dec}
    for name, value in values.items():
        if value is not None and np.isfinite(value):
            network.appendChild(ligolw.Param.from_pyvalue(name, value, unit=NETWORK_UNITS.get(name)))


def append_psds(doc, psds: dict[str, tuple[np.ndarray, np.ndarray]], gps_time: float) -> None:
    """Append ``psds`` to ``doc`` as LAL's PSD document part: a ``LIGO_LW Name="psd"`` element of one
    ``REAL8FrequencySeries`` per detector (``epoch``, ``f0``, the ``PSD`` array of (frequency, value)
    rows with ``deltaF`` as the first dimension's scale, and the ``instrument`` parameter)."""
    ligolw, _ = _lal()
    attrs = ligolw.sax.xmlreader.AttributesImpl
    holder = doc.childNodes[0].appendChild(ligolw.LIGO_LW(attrs({"Name": "psd"})))
    for ifo, (freq, psd) in sorted(psds.items()):
        freq, psd = np.asarray(freq, np.float64), np.asarray(psd, np.float64)
        df = float(freq[1] - freq[0]) if freq.size > 1 else 0.0
        if freq.size < 2 or abs(freq[0]) > 1e-9 * df or not np.allclose(np.diff(freq), df, rtol=1e-9, atol=0):
            raise DataError(f"{ifo}: a LAL PSD needs a uniform frequency grid from 0 Hz")
        if not np.all(np.isfinite(psd)) or np.any(psd < 0):
            raise DataError(f"{ifo}: the PSD has negative or non-finite values")
        series = holder.appendChild(ligolw.LIGO_LW(attrs({"Name": "REAL8FrequencySeries"})))
        series.appendChild(ligolw.Time.from_gps(_gps(np.floor(gps_time)), "epoch"))
        series.appendChild(ligolw.Param.from_pyvalue("f0", 0.0, unit="s^-1"))
        array = ligolw.Array.build("PSD", np.vstack([np.arange(psd.size) * df, psd]),
                                   dim_names=("Frequency,Real", "Frequency"), encoding="Text")
        array.Unit = "s strain^2"
        dim = array.getElementsByTagName(ligolw.Dim.tagName)[0]
        dim.Unit, dim.Start, dim.Scale = "s^-1", 0.0, df
        series.appendChild(array)
        series.appendChild(ligolw.Param.from_pyvalue("instrument", ifo))


def append_snr_series(doc, series: dict[str, tuple[float, float, np.ndarray]]) -> None:
    """Append each detector's complex SNR series (``{ifo: (epoch GPS, sample interval, z)}``, an odd
    number of samples centred on the detector's peak) as LAL's ``COMPLEX8TimeSeries`` named ``snr``,
    tied to the detector's ``sngl_inspiral`` row by an ``event_id`` parameter, as BAYESTAR reads them."""
    ligolw, lsctables = _lal()
    attrs = ligolw.sax.xmlreader.AttributesImpl
    root = doc.childNodes[0]
    rows = {row.ifo: row for row in lsctables.SnglInspiralTable.get_table(doc)}
    for ifo, (epoch, dt, z) in sorted(series.items()):
        z = np.asarray(z, np.complex64)
        if ifo not in rows:
            raise DataError(f"{ifo}: an SNR series for a detector without a sngl_inspiral row")
        if z.size % 2 == 0 or not np.all(np.isfinite(z)):
            raise DataError(f"{ifo}: an SNR series needs an odd number of finite samples, got {z.size}")
        elem = root.appendChild(ligolw.LIGO_LW(attrs({"Name": "COMPLEX8TimeSeries"})))
        elem.appendChild(ligolw.Time.from_gps(_gps(epoch), "epoch"))
        elem.appendChild(ligolw.Param.from_pyvalue("f0", 0.0, unit="s^-1"))
        array = ligolw.Array.build("snr", np.vstack([np.arange(z.size) * dt, z.real, z.imag]),
                                   dim_names=("Time,Real,Imaginary", "Time"), encoding="Text")
        array.Unit = ""
        dim = array.getElementsByTagName(ligolw.Dim.tagName)[0]
        dim.Unit, dim.Start, dim.Scale = "s", 0.0, float(dt)
        elem.appendChild(array)
        elem.appendChild(ligolw.Param.from_pyvalue("event_id", rows[ifo].event_id))


def psd_document(psds: dict[str, tuple[np.ndarray, np.ndarray]], gps_time: float):
    """A LAL PSD XML document alone (``psd.xml.gz``)."""
    ligolw, _ = _lal()
    doc = ligolw.Document()
    doc.appendChild(ligolw.LIGO_LW())
    append_psds(doc, psds, gps_time)
    return doc


def write_document(doc, path: str | os.PathLike) -> Path:
    """Write a LIGO_LW document to ``path`` (gzipped when it ends in ``.gz``), atomically."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with atomic_file(path) as tmp, opener(tmp, "wt", encoding="utf-8") as fh:
        doc.write(fh)
    return path


def register_with_ligo_skymap() -> None:
    """Tell ligo.skymap's LIGO_LW reader how gwbatch writes phases (it refuses a pipeline it does not
    know); call before ``ligo.skymap.io.events.open`` on a gwbatch coinc file."""
    from ligo.skymap.io.events.ligolw import LigoLWEventSource

    LigoLWEventSource._invert_phases.setdefault(PROGRAM, INVERT_PHASES)
