"""The report's tabular sections: the member searches, the top candidates, the chunks and the gates."""

from __future__ import annotations

import pandas as pd

from gwbatch.report.format import (
    fmt_area,
    fmt_degrees,
    fmt_far,
    fmt_gps,
    fmt_ifar,
    fmt_int,
    fmt_seconds,
    fmt_snr,
    fmt_utc,
    num,
    text,
)
from gwbatch.report.inputs import frame
from gwbatch.report.markup import html_table, link, note, section

MAX_CANDIDATES = 25
MAX_GATES = 100


def members_section(manifest: dict) -> str:
    """``members``: the searches of a campaign that runs several, each linked to its own report
    (empty for a campaign of one search)."""
    members = [m for m in (manifest.get("members") or []) if isinstance(m, dict)]
    if not members:
        return ""
    header = ["search", "kind", "candidates", "livetime", "background livetime", "report"]
    rows = [[text(m.get("name")), text(m.get("kind")), fmt_int(m.get("candidates")),
             fmt_seconds(m.get("livetime_s")), fmt_seconds(m.get("background_s")),
             link(m.get("report"))] for m in members]
    intro = f"<p>This campaign runs {len(members)} search{'es' if len(members) != 1 else ''}; each has its own report.</p>"
    return section("Searches", intro + "\n" + html_table(header, rows, [False, False, True, True, True, False]),
                   "searches")


def candidates_section(candidates: pd.DataFrame, ifos: list[str]) -> str:
    """The ``MAX_CANDIDATES`` most significant zero-lag candidates, in the columns the search has."""
    n = len(candidates)
    if n == 0:
        return section("Candidates", note("No zero-lag candidates were found in this campaign."), "candidates")
    cols = [("gps_time", "GPS time", fmt_gps), ("gps_time", "UTC", fmt_utc), ("ifos", "detectors", text),
            ("snr", "SNR", fmt_snr),
            ("rank", "rank", fmt_snr), ("null_snr", "null SNR", fmt_snr), ("chisq", "\u03c7\u00b2", fmt_snr),
            ("rho", "rho", fmt_snr), ("far", "FAR (Hz)", fmt_far), ("ifar_years", "IFAR (yr)", fmt_ifar),
            ("far_kind", "FAR is", text), ("far_exclusive", "FAR excl. (Hz)", fmt_far),
            ("template", "template", fmt_int),
            ("ra", "RA (\u00b0)", fmt_degrees), ("dec", "Dec (\u00b0)", fmt_degrees),
            ("area90", "90% area (deg\u00b2)", fmt_area)]
    cols += [(f"snr_{ifo}", f"SNR {ifo}", fmt_snr) for ifo in ifos]
    cols += [(f"chisq_{ifo}", f"\u03c7\u00b2 {ifo}", fmt_snr) for ifo in ifos]
    cols = [c for c in cols if c[0] in candidates.columns]
    top = candidates.head(MAX_CANDIDATES)
    rows = [[str(i + 1)] + [bounded(key, row, fmt(row[key])) for key, _, fmt in cols]
            for i, (_, row) in enumerate(top.iterrows())]
    numeric = [True] + [key != "ifos" for key, _, _ in cols]
    shown = f"the {len(top)} most significant are listed" if n > len(top) else "all are listed"
    intro = f"<p>{n} zero-lag candidate{'s' if n != 1 else ''} in total; {shown} (most significant first).</p>"
    return section("Candidates", intro + "\n" + html_table(["#"] + [c[1] for c in cols], rows, numeric), "candidates")


#: FAR columns and the column saying whether each is a bound (an upper limit on the FAR, a lower
#: one on the IFAR).
BOUND_OF = {"far": ("far_kind", "< "), "ifar_years": ("far_kind", "> "),
            "far_exclusive": ("far_exclusive_kind", "< "), "ifar_exclusive_years": ("far_exclusive_kind", "> ")}


def bounded(key: str, row: pd.Series, shown: str) -> str:
    """``shown``, prefixed with "<" (FAR) or ">" (IFAR) where the row's FAR is a bound."""
    kind_col, prefix = BOUND_OF.get(key, (None, ""))
    return prefix + shown if kind_col is not None and row.get(kind_col) == "bound" else shown


def chunks_section(manifest: dict, ifos: list[str]) -> str:
    """One row per chunk: span, status, where it ran, its time and its trigger counts."""
    chunks = manifest.get("chunks") or []
    if not chunks:
        return section("Chunks", note("No chunk records in the manifest."), "chunks")
    keys = list(ifos)
    for c in chunks:
        keys += [k for k in (c.get("triggers") or {}) if k not in keys]
    header = ["index", "GPS start", "GPS stop", "status", "device", "worker", "seconds"]
    header += [f"triggers {k}" for k in keys]
    rows = [
        [fmt_int(c.get("index")), fmt_gps(c.get("gps_start")), fmt_gps(c.get("gps_stop")), text(c.get("status")),
         text(c.get("device")), text(c.get("worker")), num(c.get("seconds"), ".2f")]
        + [fmt_int((c.get("triggers") or {}).get(k)) for k in keys]
        for c in chunks
    ]
    numeric = [True, True, True, False, False, False, True] + [True] * len(keys)
    return section("Chunks", f"<p>{len(chunks)} chunk(s).</p>\n" + html_table(header, rows, numeric), "chunks")


def gates_section(gates: pd.DataFrame | None) -> str:
    """The first ``MAX_GATES`` gates (whitened samples over the gating threshold)."""
    gates = frame(gates)
    if len(gates) == 0:
        return section("Gates", note("No gates: no whitened sample exceeded the gating threshold."), "gates")
    top = gates.head(MAX_GATES)
    rows = [[text(r.get("ifo")), fmt_int(r.get("sample")), fmt_gps(r.get("gps_time")), num(r.get("peak"), ".2f")]
            for _, r in top.iterrows()]
    shown = f"; the first {len(top)} are listed" if len(gates) > len(top) else ""
    intro = f"<p>{len(gates)} gate(s){shown}.</p>\n"
    return section("Gates", intro + html_table(["detector", "sample", "GPS time", "peak (\u03c3)"], rows,
                                               [False, True, True, True]), "gates")
