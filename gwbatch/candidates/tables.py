"""The output contract's tables: candidates, background, injections (DESIGN.md "Data model").

``candidates``: one row per zero-lag candidate.  Common columns for every search: ``search``,
``gps_time`` (s, the loudest member's time), ``ifos`` (comma-separated members), ``snr`` (the
search's ranking statistic; for coincidences the quadrature sum of member SNRs), ``far`` (Hz,
inclusive), ``ifar_years``, ``far_exclusive``, ``ifar_exclusive_years``, ``n_louder``,
``n_louder_exclusive``; then per detector ``time_<ifo>``, ``snr_<ifo>`` and the search's own
fields (pulse: ``rho_<ifo>``, ``duration_<ifo>``; SPIIR: ``template``, ``chisq_<ifo>``, ``rank_<ifo>``,
``phase_<ifo>``), NaN where the detector is not a member.

``background``: one row per clustered time-slide event: ``slide``, ``snr``, ``ifos``,
``ring_time`` (s from the span start, after shifting) and per detector the unshifted trigger
``time_<ifo>``, ``snr_<ifo>`` and ``shift_<ifo>``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def _member_fields(events: pd.DataFrame, per_ifo: list[pd.DataFrame], ifos: tuple[str, ...], fields: dict[str, str]):
    """Per detector columns gathered from the member triggers (NaN where absent)."""
    cols: dict[str, np.ndarray] = {}
    present = []
    for k, ifo in enumerate(ifos):
        idx = events[f"i{k}"].to_numpy()
        has = idx >= 0
        present.append(has)
        table = per_ifo[k]
        for out, src in fields.items():
            values = np.full(len(events), np.nan)
            if has.any():
                values[has] = table[src].to_numpy(dtype=np.float64)[idx[has]]
            cols[f"{out}_{ifo}"] = values
    names = np.array(ifos)
    members = [",".join(names[[p[i] for p in present]]) for i in range(len(events))]
    return cols, members


def candidate_table(search: str, fg: pd.DataFrame, per_ifo: list[pd.DataFrame], ifos: tuple[str, ...],
                    extra_fields: dict[str, str]) -> pd.DataFrame:
    """Zero-lag candidates in the output format, most significant first."""
    fields = {"time": "gps_time", "snr": "snr", **extra_fields}
    cols, members = _member_fields(fg, per_ifo, ifos, fields)
    snr_cols = np.stack([cols[f"snr_{i}"] for i in ifos], axis=1) if len(fg) else np.zeros((0, len(ifos)))
    loudest = np.argmax(np.nan_to_num(snr_cols, nan=-np.inf), axis=1) if len(fg) else np.zeros(0, int)
    times = np.stack([cols[f"time_{i}"] for i in ifos], axis=1) if len(fg) else np.zeros((0, len(ifos)))
    table = pd.DataFrame(
        {
            "search": search,
            "gps_time": times[np.arange(len(fg)), loudest] if len(fg) else np.zeros(0),
            "ifos": members,
            "n_ifos": fg["n_ifos"].to_numpy() if len(fg) else np.zeros(0, np.int64),
            "snr": fg["stat"].to_numpy() if len(fg) else np.zeros(0),
        }
    )
    if "rho" in extra_fields:
        rho = np.stack([cols[f"rho_{i}"] for i in ifos], axis=1) if len(fg) else np.zeros((0, len(ifos)))
        table["rho"] = np.sqrt(np.nansum(rho**2, axis=1))
    if "template" in extra_fields:  # matched filters: every member has the same template
        tmpl = np.stack([cols[f"template_{i}"] for i in ifos], axis=1) if len(fg) else np.zeros((0, len(ifos)))
        table["template"] = np.nanmax(np.where(np.isnan(tmpl), -1, tmpl), axis=1).astype(np.int64) if len(fg) else np.zeros(0, np.int64)
    for c in ("far", "ifar_years", "far_exclusive", "ifar_exclusive_years", "n_louder", "n_louder_exclusive"):
        table[c] = fg[c].to_numpy() if len(fg) else np.zeros(0)
    for name, values in cols.items():
        table[name] = values
    return table.sort_values(["far", "snr"], ascending=[True, False], kind="stable").reset_index(drop=True)


def background_table(bg: pd.DataFrame, per_ifo: list[pd.DataFrame], ifos: tuple[str, ...], shifts: np.ndarray) -> pd.DataFrame:
    """Time-slide background events with their unshifted member triggers and shifts."""
    cols, members = _member_fields(bg, per_ifo, ifos, {"time": "gps_time", "snr": "snr"})
    slide = bg["slide"].to_numpy().astype(np.int64) if len(bg) else np.zeros(0, np.int64)
    table = pd.DataFrame(
        {
            "slide": slide,
            "snr": bg["stat"].to_numpy() if len(bg) else np.zeros(0),
            "ifos": members,
            "ring_time": bg["time"].to_numpy() if len(bg) else np.zeros(0),
        }
    )
    for name, values in cols.items():
        table[name] = values
    for k, ifo in enumerate(ifos):
        table[f"shift_{ifo}"] = shifts[slide, k] if len(bg) else np.zeros(0)
    return table.sort_values("snr", ascending=False, kind="stable").reset_index(drop=True)
