"""Writers of LIGO_LW segment, veto-definer and sim_inspiral XML for the tests (igwn-ligolw), so
the readers are checked against files made the way the field's tools make them."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path


def _split(t) -> tuple[int, int]:
    ns = int((Decimal(str(t)) * 1_000_000_000).to_integral_value())
    return ns // 1_000_000_000, ns % 1_000_000_000


def write_segment_xml(path: Path, flags: dict[str, list[tuple]]) -> Path:
    """``flags``: ``{"H1:NAME:1": [(start, stop), ...]}`` (GPS seconds, numbers or decimal strings)."""
    from igwn_ligolw import ligolw, lsctables, utils

    doc = ligolw.Document()
    root = doc.appendChild(ligolw.LIGO_LW())
    definer = root.appendChild(lsctables.SegmentDefTable.new(
                                             ["process:process_id", "segment_def_id", "ifos", "name", "version", "comment"]))
    table = root.appendChild(lsctables.SegmentTable.new(
                                           ["process:process_id", "segment_id", "start_time", "start_time_ns", "end_time",
                                            "end_time_ns", "segment_definer:segment_def_id"]))
    seg_id = 0
    for def_id, (flag, segments) in enumerate(flags.items()):
        ifo, name, version = flag.split(":")
        row = definer.RowType()
        row.process_id, row.segment_def_id, row.ifos, row.name, row.version, row.comment = 0, def_id, ifo, name, int(version), ""
        definer.append(row)
        for a, b in segments:
            r = table.RowType()
            r.process_id, r.segment_id, r.segment_def_id = 0, seg_id, def_id
            r.start_time, r.start_time_ns = _split(a)
            r.end_time, r.end_time_ns = _split(b)
            table.append(r)
            seg_id += 1
    utils.write_filename(doc, str(path))
    return Path(path)


def write_veto_definer(path: Path, rows: list[dict]) -> Path:
    """``rows``: dicts with ifo, name, version, category, start_time, end_time, start_pad, end_pad."""
    from igwn_ligolw import ligolw, lsctables, utils

    doc = ligolw.Document()
    root = doc.appendChild(ligolw.LIGO_LW())
    cols = ["process:process_id", "ifo", "name", "version", "category", "start_time", "end_time", "start_pad",
            "end_pad", "comment"]
    table = root.appendChild(lsctables.VetoDefTable.new(cols))
    for d in rows:
        r = table.RowType()
        r.process_id, r.comment = 0, ""
        for k in ("ifo", "name", "version", "category", "start_time", "end_time", "start_pad", "end_pad"):
            setattr(r, k, d.get(k, 0))
        table.append(r)
    utils.write_filename(doc, str(path))
    return Path(path)


def write_sim_inspiral(path: Path, rows: list[dict]) -> Path:
    """``rows``: dicts with the project's column names (gps_time as a decimal string or number,
    mass1, mass2, spin1z, spin2z, distance, ra, dec, inclination, phase, polarization, f_low,
    approximant), written as a ``sim_inspiral`` table."""
    from igwn_ligolw import ligolw, lsctables, utils

    doc = ligolw.Document()
    root = doc.appendChild(ligolw.LIGO_LW())
    cols = ["process:process_id", "simulation_id", "waveform", "geocent_end_time", "geocent_end_time_ns", "mass1",
            "mass2", "spin1x", "spin1y", "spin1z", "spin2x", "spin2y", "spin2z", "distance", "longitude", "latitude",
            "inclination", "coa_phase", "polarization", "f_lower", "f_final", "taper"]
    table = root.appendChild(lsctables.SimInspiralTable.new(cols))
    for i, d in enumerate(rows):
        r = table.RowType()
        r.process_id, r.simulation_id, r.waveform, r.taper, r.f_final = 0, i, d["approximant"], "TAPER_NONE", 0.0
        r.geocent_end_time, r.geocent_end_time_ns = _split(d["gps_time"])
        r.mass1, r.mass2, r.distance, r.f_lower = d["mass1"], d["mass2"], d["distance"], d["f_low"]
        r.spin1x = r.spin1y = r.spin2x = r.spin2y = 0.0
        r.spin1z, r.spin2z = d.get("spin1z", 0.0), d.get("spin2z", 0.0)
        r.longitude, r.latitude, r.inclination = d["ra"], d["dec"], d["inclination"]
        r.coa_phase, r.polarization = d["phase"], d["polarization"]
        table.append(r)
    utils.write_filename(doc, str(path))
    return Path(path)
