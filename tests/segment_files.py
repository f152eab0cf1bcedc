"""Writers of LIGO_LW segment and veto-definer XML for the tests (igwn-ligolw), so readers are
checked against files made the way the segment database tools make them."""

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
