"""The output contract's tables: candidates, background, injections (DESIGN.md "Data model").

``candidates``: one row per zero-lag candidate.  Common columns for every search: ``search``,
``gps_time`` (s, the loudest member's time), ``ifos`` (comma-separated members), ``snr`` (the
search's ranking statistic; for coincidences the quadrature sum of member SNRs), ``far`` (Hz,
inclusive, after hierarchical removal), ``ifar_years``, ``far_kind`` (``counted``, ``extrapolated``
from the background's tail fit, or ``bound``: an upper limit), ``far_upper`` (the fit's 1-sigma upper
FAR), ``far_exclusive``, ``ifar_exclusive_years``, ``far_exclusive_kind``, ``n_louder``,
``n_louder_exclusive``, ``far_no_removal``, ``removal_round`` (k > 0: removed from the background in
round k; :mod:`gwbatch.background.significance`); then per detector ``time_<ifo>``, ``snr_<ifo>`` and the search's own
fields (pulse: ``rho_<ifo>``, ``duration_<ifo>``; SPIIR: ``template``, ``chisq_<ifo>``, ``rank_<ifo>``,
``phase_<ifo>``), NaN where the detector is not a member.

``background``: one row per clustered time-slide event: ``slide``, ``snr``, ``ifos``,
``ring_time`` (s from the span start, after shifting) and per detector the unshifted trigger
``time_<ifo>``, ``snr_<ifo>`` and ``shift_<ifo>``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: The significance columns every candidate table carries (gwbatch.background.significance).
FAR_COLUMNS = ("far", "ifar_years", "far_kind", "far_upper", "far_exclusive", "ifar_exclusive_years",
               "far_exclusive_kind", "n_louder", "n_louder_exclusive", "far_no_removal", "removal_round")


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
    for c in FAR_COLUMNS:
        table[c] = fg[c].to_numpy() if len(fg) else np.zeros(0, dtype=object if c.endswith("_kind") else np.float64)
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


def _detector_columns(events: pd.DataFrame, ifos: tuple[str, ...], t0, sample_rate: float) -> tuple[dict, list[str]]:
    """``time_<ifo>`` (GPS of the sample read), ``snr_``, ``phase_``, ``chisq_``, ``sigma_<ifo>`` (NaN where
    the detector was not analysing) and the member list of coherent events."""
    from gwbatch.gpstime import sample_times

    cols, seen = {}, []
    for ifo in ifos:
        snr = events[f"snr_{ifo}"].to_numpy(np.float64)
        seen.append(np.isfinite(snr))
        cols[f"time_{ifo}"] = np.where(seen[-1], sample_times(t0, events[f"sample_{ifo}"].to_numpy(np.float64),
                                                              sample_rate), np.nan)
        cols[f"snr_{ifo}"] = snr
        for field in ("phase", "chisq", "sigma"):
            if f"{field}_{ifo}" in events:
                cols[f"{field}_{ifo}"] = events[f"{field}_{ifo}"].to_numpy(np.float64)
    names = np.array(ifos)
    members = [",".join(names[[s[i] for s in seen]]) for i in range(len(events))]
    return cols, members


def skymap_name(gps_time: float) -> str:
    """File name of a candidate's skymap, by its GPS time (ms)."""
    return f"skymaps/{gps_time:.3f}.fits"


def coherent_candidate_table(fg: pd.DataFrame, ifos: tuple[str, ...], t0, sample_rate: float,
                             skymaps: np.ndarray) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """Coherent zero-lag events in the output format, most significant first, and the skymaps of
    those that have one by file name.

    ``gps_time`` is the geocentric merger time at the best direction; ``snr`` the network coherent
    SNR; ``rank`` the ranking statistic the FAR is of; ``null_snr``, ``chisq`` (network), ``ra``,
    ``dec`` (rad), ``pivot`` (the detector whose trigger formed it), ``template``, ``mass1``,
    ``mass2``, ``spin1z``, ``spin2z``; per detector also ``sigma_<ifo>``, the template's optimal SNR at
    1 Mpc (its effective distance is ``sigma / snr``); ``skymap`` (file, empty without one) and
    ``area90`` (deg²).
    """
    return network_candidate_table("spiir", fg, ifos, t0, sample_rate, skymaps,
                                   ("null_snr", "chisq", "ra", "dec", "pivot", "template", "mass1", "mass2",
                                    "spin1z", "spin2z"))


def burst_candidate_table(fg: pd.DataFrame, ifos: tuple[str, ...], t0, sample_rate: float,
                          skymaps: np.ndarray) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """Burst zero-lag events in the output format (:mod:`gwbatch.burst.chunk`), most significant
    first, and their skymaps by file name.

    ``gps_time``: geocentric, the energy-weighted centre of the cluster at the best direction;
    ``snr`` = ``rank`` = ``rho``; ``cc`` (network correlation), ``energy``, ``likelihood``,
    ``coherent_energy``, ``null_energy``, ``chisq``; ``frequency`` (energy-weighted), ``f_min``,
    ``f_max``, ``duration`` (s), ``resolution`` (pixel bandwidth, Hz), ``n_pixels``; ``ra``,
    ``dec`` (rad), ``pivot`` (the detector with most energy); per detector the arrival time and the
    excess-energy SNR ``snr_<ifo>``; ``skymap`` and ``area90`` (deg²).
    """
    return network_candidate_table("burst", fg.assign(snr=fg["rho"]), ifos, t0, sample_rate, skymaps,
                                   ("rho", "cc", "energy", "likelihood", "coherent_energy", "null_energy", "chisq",
                                    "frequency", "f_min", "f_max", "duration", "resolution", "n_pixels", "ra",
                                    "dec", "pivot"))


def network_candidate_table(search: str, fg: pd.DataFrame, ifos: tuple[str, ...], t0, sample_rate: float,
                            skymaps: np.ndarray, fields: tuple[str, ...]) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """Zero-lag network events (``gps_time``, ``n_ifos``, ``snr``, ``rank``, FARs, ``fields``, per
    detector ``sample_``/``snr_<ifo>``, ``skymap`` row) in the output format, and their skymaps."""
    from gwbatch.sky.skymap import credible_area

    cols, members = _detector_columns(fg, ifos, t0, sample_rate)
    table = pd.DataFrame({
        "search": search, "gps_time": fg["gps_time"].to_numpy(np.float64), "ifos": members,
        "n_ifos": np.array([len(m.split(",")) if m else 0 for m in members], dtype=np.int64),
        "snr": fg["snr"].to_numpy(np.float64), "rank": fg["rank"].to_numpy(np.float64),
    })
    for name in fields:
        values = fg[name].to_numpy()
        table[name] = np.array(ifos, dtype=object)[values.astype(np.int64)] if name == "pivot" and len(fg) else values
    for c in FAR_COLUMNS:
        table[c] = fg[c].to_numpy()
    for name, values in cols.items():
        table[name] = values
    index = fg["skymap"].to_numpy(np.int64)
    named = {}
    files, areas = [], []
    for gps, k in zip(table["gps_time"], index):
        if k < 0:
            files.append("")
            areas.append(np.nan)
            continue
        files.append(skymap_name(gps))
        named[files[-1]] = skymaps[k]
        areas.append(credible_area(skymaps[k], 0.9))
    table["skymap"] = files
    table["area90"] = np.asarray(areas, dtype=np.float64)
    table = table.sort_values(["far", "rank"], ascending=[True, False], kind="stable").reset_index(drop=True)
    return table, named


def coherent_background_table(trials: pd.DataFrame, ifos: tuple[str, ...], t0, sample_rate: float,
                              step: float) -> pd.DataFrame:
    """Trial events: ``slide`` (the trial), ``snr``, ``rank``, ``null_snr``, ``chisq``, ``ifos``,
    ``pivot`` (the detector whose unshifted trigger formed it), ``chunk``, and per detector the time
    read (``time_<ifo>``, unshifted), ``snr_<ifo>`` and its shift relative to the first detector
    ``shift_<ifo>`` (s)."""
    return network_background_table(trials, ifos, t0, sample_rate, step, ("null_snr", "chisq"))


def burst_background_table(lags: pd.DataFrame, ifos: tuple[str, ...], t0, sample_rate: float,
                           step: float) -> pd.DataFrame:
    """Lag events: ``slide`` (the lag), ``snr`` = ``rank`` = ``rho``, ``cc``, ``chisq``,
    ``frequency``, ``duration``, ``ifos``, ``pivot`` (the detector with most energy), ``chunk``, and
    per detector the time read (unshifted), ``snr_<ifo>`` and ``shift_<ifo>`` (s)."""
    return network_background_table(lags.assign(snr=lags["rho"]), ifos, t0, sample_rate, step,
                                    ("cc", "chisq", "frequency", "duration"))


def network_background_table(trials: pd.DataFrame, ifos: tuple[str, ...], t0, sample_rate: float, step: float,
                             fields: tuple[str, ...]) -> pd.DataFrame:
    """Trial (lag) events of a search whose chunks run their own trials, loudest first."""
    cols, members = _detector_columns(trials, ifos, t0, sample_rate)
    slide = trials["trial"].to_numpy(np.int64)
    table = pd.DataFrame({"slide": slide, "snr": trials["snr"].to_numpy(np.float64),
                          "rank": trials["rank"].to_numpy(np.float64)})
    for name in fields:
        table[name] = trials[name].to_numpy(np.float64)
    table["ifos"] = members
    table["pivot"] = np.array(ifos, dtype=object)[trials["pivot"].to_numpy(np.int64)] if len(trials) else []
    table["chunk"] = trials["chunk"].to_numpy(np.int64)
    for name in (f"{f}_{ifo}" for ifo in ifos for f in ("time", "snr")):
        table[name] = cols[name]
    for j, ifo in enumerate(ifos):
        table[f"shift_{ifo}"] = slide * step * j
    return table.sort_values("rank", ascending=False, kind="stable").reset_index(drop=True)
