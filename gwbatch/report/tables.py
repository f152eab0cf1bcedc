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
    missing,
    num,
    text,
)
from gwbatch.report.inputs import frame
from gwbatch.report.markup import Raw, esc, html_table, link, note, section

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


def candidates_section(candidates: pd.DataFrame, ifos: list[str], injections: pd.DataFrame | None = None,
                       details: dict[int, str] | None = None, sample_rate: float | None = None) -> str:
    """The ``MAX_CANDIDATES`` most significant zero-lag candidates, in the columns the search has: each
    row links to its skymap (FITS, relative to the run directory) and to its detail on the page
    (``details``: row position -> anchor), and says which injections it matches.  A dispersed pulse's
    DM, boxcar width (in ms where ``sample_rate``, Hz, is known, else in samples), cluster size and RFI
    flag (with its reason) are shown where the table has them."""
    n = len(candidates)
    if n == 0:
        return section("Candidates", note("No zero-lag candidates were found in this campaign."), "candidates")
    cols = [("member", "search", text), ("gps_time", "UTC", fmt_utc), ("gps_time", "GPS time", fmt_gps),
            ("ifos", "detectors", text), ("snr", "SNR", fmt_snr),
            ("dm", "DM (pc/cm\u00b3)", fmt_dm),
            ("width", "width (ms)" if sample_rate else "width (samples)", lambda v: fmt_width(v, sample_rate)),
            ("members", "members", fmt_int), ("rfi", "RFI", None),
            ("rank", "rank", fmt_snr), ("null_snr", "null SNR", fmt_snr), ("chisq", "\u03c7\u00b2", fmt_snr),
            ("rho", "rho", fmt_snr), ("far", "FAR (Hz)", fmt_far), ("ifar_years", "IFAR (yr)", fmt_ifar),
            ("far_kind", "FAR is", text), ("far_exclusive", "FAR excl. (Hz)", fmt_far),
            ("template", "template", fmt_int),
            ("ra", "RA (\u00b0)", fmt_degrees), ("dec", "Dec (\u00b0)", fmt_degrees),
            ("area90", "90% area (deg\u00b2)", fmt_area)]
    cols += [(f"snr_{ifo}", f"SNR {ifo}", fmt_snr) for ifo in ifos]
    cols += [(f"chisq_{ifo}", f"\u03c7\u00b2 {ifo}", fmt_snr) for ifo in ifos]
    cols = [c for c in cols if c[0] in candidates.columns]
    matched = injection_matches(candidates, injections)
    flagged = injections is not None or "hw_injection" in candidates.columns
    details = details or {}
    top = candidates.head(MAX_CANDIDATES)
    rows = []
    for i, (_, row) in enumerate(top.iterrows()):
        cells = [str(i + 1), candidate_links(row, details.get(i))]
        cells += [rfi_flag(row) if fmt is None else bounded(key, row, fmt(row[key])) for key, _, fmt in cols]
        if flagged:
            hardware = row.get("hw_injection")
            cells.append(injection_flag(matched.get(i, []), not missing(hardware) and bool(hardware)))
        rows.append(cells)
    header = ["#", "links"] + [c[1] for c in cols] + (["injection"] if flagged else [])
    text_columns = ("ifos", "member", "far_kind", "rfi")
    numeric = [True, False] + [key not in text_columns for key, _, _ in cols] + [False] * flagged
    shown = f"the {len(top)} most significant are listed" if n > len(top) else "all are listed"
    intro = (f"<p>{n} zero-lag candidate{'s' if n != 1 else ''} in total; {shown} (most significant first). "
             "A FAR that is a bound (no background event as loud) is shown as &lt; FAR and &gt; IFAR.</p>")
    table = f'<div class="wide">{html_table(header, rows, numeric)}</div>'
    return section("Candidates", intro + "\n" + table, "candidates")


def injection_matches(candidates: pd.DataFrame, injections: pd.DataFrame | None) -> dict[int, list[str]]:
    """Row position of each candidate that a found injection matched -> those injections' ids."""
    inj = frame(injections)
    if not len(inj) or not {"found", "candidate"} <= set(inj.columns):
        return {}
    found = inj[inj["found"].fillna(False).astype(bool) & (pd.to_numeric(inj["candidate"], errors="coerce") >= 0)]
    ids = found["id"] if "id" in found.columns else pd.Series(found.index, index=found.index)
    out: dict[int, list[str]] = {}
    for position, ident in zip(found["candidate"].astype(int), ids):
        if 0 <= position < len(candidates):
            out.setdefault(int(position), []).append(text(ident))
    return out


def injection_flag(ids: list[str], hardware: bool) -> str:
    """The injection cell: the matching injections' ids and a hardware-injection mark (empty when none)."""
    parts = ([f"injection {', '.join(ids)}"] if ids else []) + (["hardware injection"] if hardware else [])
    return Raw(f'<span class="flag">{esc("; ".join(parts))}</span>') if parts else ""


def fmt_dm(x) -> str:
    return num(x, ".2f")


def fmt_width(x, sample_rate: float | None = None) -> str:
    """A boxcar width in samples: in ms where the sample rate (Hz) is known, else in samples."""
    if missing(x):
        return num(x)
    return num(float(x) / float(sample_rate) * 1e3, ".3g") if sample_rate else fmt_int(x)


def rfi_text(row: pd.Series) -> str:
    """"RFI" and its reason (``rfi_reason``) where the candidate is flagged as RFI, else ""."""
    value = row.get("rfi")
    if missing(value) or not bool(value):
        return ""
    reason = row.get("rfi_reason")
    return f"RFI ({reason})" if isinstance(reason, str) and reason.strip() else "RFI"


def rfi_flag(row: pd.Series) -> str:
    """The RFI cell: the flag and its reason, marked (empty when not flagged)."""
    shown = rfi_text(row)
    return Raw(f'<span class="flag">{esc(shown)}</span>') if shown else ""


def candidate_links(row: pd.Series, anchor: str | None) -> str:
    """Links of one candidate: its skymap FITS (``skymap``, relative to the run directory, or to the
    member's directory in a campaign of several searches) and its detail on the page."""
    parts = []
    skymap = row.get("skymap")
    if isinstance(skymap, str) and skymap:
        member = row.get("member")
        parts.append(link(f"{member}/{skymap}" if isinstance(member, str) and member else skymap, "skymap"))
    if anchor:
        parts.append(link(f"#{anchor}", "detail"))
    parts = [p for p in parts if isinstance(p, Raw)]
    return Raw(" ".join(parts)) if parts else ""


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
