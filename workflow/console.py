"""What ``gwbatch run`` prints when it is done: where the results are and what was found."""

from __future__ import annotations

from workflow.member import RunSummary, SuiteSummary


def summary_lines(summary: RunSummary) -> list[str]:
    m = summary.manifest
    lines = [
        f"results in {summary.out}/",
        f"  candidates.parquet  {m['counts']['candidates']} zero-lag candidates"
        f" (zero-lag livetime {m['livetime']['zero_lag_seconds']:.1f} s, background {m['livetime']['background_seconds']:.1f} s)",
        f"  background.parquet  {m['counts']['background_events']} time-slide events ({m['background']['slides']} slides"
        + (f" and {m['background']['deep_slides']} deep ones" if m["background"].get("deep_slides") else "") + ")",
        "  triggers.parquet, report.html, manifest.json, gates.parquet",
    ]
    cands = summary.reduced.candidates
    if len(cands):
        top = cands.iloc[0]
        kind = top.get("far_kind")
        ifar = f"ifar {'> ' if kind == 'bound' else ''}{top['ifar_years']:.3g} yr"
        ifar += " (extrapolated)" if kind == "extrapolated" else ""
        lines.append(f"  most significant: GPS {top['gps_time']:.4f} {top['ifos']} snr {top['snr']:.2f} {ifar}")
    inj = summary.reduced.injections
    if inj is not None:
        analysed = inj[inj["analysed"]]
        lines.append(f"  injections.parquet  {int(analysed['found'].sum())} of {len(analysed)} analysed injections found")
    return lines



def suite_lines(summary: SuiteSummary) -> list[str]:
    m = summary.manifest
    lines = [f"results in {summary.out}/",
             f"  candidates.parquet  {len(summary.candidates)} zero-lag candidates of {len(summary.members)} searches",
             "  report.html, manifest.json; each search's own outputs in its directory:"]
    for member in m["members"]:
        lines.append(f"  {member['name']}/  {member['kind']}: {member['candidates']} candidates, zero-lag livetime "
                     f"{member['livetime_s']:.1f} s, background {member['background_s']:.1f} s")
    return lines
