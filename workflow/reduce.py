"""From chunk results to the campaign's tables: merged triggers and segments, the search's significance, injections."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gwbatch.background import BackgroundResult
from gwbatch.background.reference import reference_far
from gwbatch.candidates.injections import in_segments, match_injections
from gwbatch.conditioning.mask import merge_segments
from gwbatch.gpstime import GPSTime, sample_times
from gwbatch.io.psds import ChunkPSDs, chunk_psds
from gwbatch.io.store import StoreMeta, read_injections
from gwbatch.searches import get_search
from gwbatch.searches.base import Reduction
from gwbatch.searches.common import INJECTED, PSD, PSD_FREQUENCY
from gwbatch.simulate.injection_set import injection_table
from gwbatch.tasks import ChunkResult
from workflow.plan import Plan
from workflow.reference import read_reference


@dataclass
class Reduced:
    triggers: list[pd.DataFrame]  # per detector, final (merged) triggers with GPS times
    segments: dict[str, np.ndarray]  # per detector, analysed [start, stop) store samples
    background: BackgroundResult
    candidates: pd.DataFrame
    background_events: pd.DataFrame
    injections: pd.DataFrame | None
    gates: pd.DataFrame
    skymaps: dict[str, np.ndarray]  # candidates' skymaps by file name (relative to the run directory)
    reference: dict | None = None  # background.reference's summary, when the FARs are against it
    psds: dict[str, ChunkPSDs] = field(default_factory=dict)  # per detector, the PSD of each chunk (psd.h5)


def reduce_results(plan: Plan, meta: StoreMeta, results: list[ChunkResult]) -> Reduced:
    """Every chunk's results to the run's tables: each detector's merged triggers and analysed
    segments, the search's candidates and background (:meth:`gwbatch.searches.base.Search.significance`),
    the injections found and missed, and the gates."""
    fs = plan.sample_rate
    t0 = GPSTime.parse(plan.t0)
    search = get_search(plan.search)
    results = sorted(results, key=lambda r: r.index)
    merged = search.merge_triggers(plan.settings, pd.concat([r.triggers for r in results], ignore_index=True), t0, fs)
    per_ifo = [outside(merged[merged["ifo"] == ifo], plan, ifo, plan.segments.vetoed) for ifo in plan.ifos]
    segments = {
        ifo: merge_segments(np.concatenate([r.segments[ifo].reshape(-1, 2) for r in results])).astype(np.int64)
        for ifo in plan.ifos
    }
    found = search.significance(plan.settings, Reduction(plan.ifos, fs, plan.t0, plan.span_start, plan.ring,
                                                         np.asarray(plan.travel), results, per_ifo, segments))
    bg, candidates, events = found.background, found.candidates, found.background_events
    reference = None
    if plan.reference is not None:
        ref = read_reference(plan.reference, search.rank_column)
        candidates, fit = against_reference(candidates, ref, search.rank_column, plan.settings.network.far_tail)
        reference = {**ref.summary(), "tail_fit": fit.summary() if fit is not None else None}
    injections = None
    table = injection_rows(plan, meta, results)
    if table is not None:
        span_lo, span_hi = sample_times(t0, [plan.span_start, plan.span_stop], fs)
        table = table[(table["gps_time"] >= span_lo) & (table["gps_time"] < span_hi)]
        gps_segments = {ifo: sample_times(t0, segments[ifo], fs) for ifo in plan.ifos}
        injections = match_injections(table, candidates, plan.ifos, gps_segments, plan.settings.network.min_ifos, fs,
                                      timing=search.max_uncertainty(plan.settings))
        if "skymap" in candidates:
            injections = localisation(injections, candidates, found.skymaps)
    candidates = flag_hardware_injections(candidates, plan)
    gates = pd.concat([r.gates for r in results], ignore_index=True)
    gates["gps_time"] = sample_times(t0, gates["sample"].to_numpy(np.float64), fs) if len(gates) else np.zeros(0)
    return Reduced(per_ifo, segments, bg, candidates, events, injections, gates, found.skymaps, reference,
                   measured_psds(plan, results))


def measured_psds(plan: Plan, results: list[ChunkResult]) -> dict[str, ChunkPSDs]:
    """Per detector, the PSD each chunk measured and whitened with (:mod:`gwbatch.io.psds`), with the
    GPS span the chunk owns; empty for a search that does not whiten."""
    fs, t0 = plan.sample_rate, GPSTime.parse(plan.t0)
    spans = {c.index: sample_times(t0, [c.start, c.stop], fs) for c in plan.chunks}
    rows: dict[str, list] = {ifo: [] for ifo in plan.ifos}
    for r in results:
        if PSD not in r.arrays:
            continue
        for i, ifo in enumerate(plan.ifos):
            if np.isfinite(r.arrays[PSD][i]).all():
                start, stop = spans[r.index]
                segments = int((r.series_stats.get(ifo) or {}).get("psd_segments", 0))
                rows[ifo].append((float(start), float(stop), segments, r.arrays[PSD_FREQUENCY], r.arrays[PSD][i]))
    return {ifo: chunk_psds(found) for ifo, found in rows.items() if found}


def against_reference(candidates: pd.DataFrame, reference, rank_column: str, tail: int):
    """``(candidates, fit)``: the candidates with their FAR columns measured against ``reference``'s
    background (:func:`gwbatch.background.reference.reference_far`), most significant first, and the
    tail fit to that background (None without one)."""
    result = reference_far(candidates[rank_column].to_numpy(np.float64), reference, tail=tail)
    far = result.columns
    out = pd.concat([candidates.drop(columns=[c for c in far.columns if c in candidates]).reset_index(drop=True),
                     far.reset_index(drop=True)], axis=1)
    return (out.sort_values(["far", rank_column], ascending=[True, False], kind="stable").reset_index(drop=True),
            result.fit)


def injection_rows(plan: Plan, meta: StoreMeta, results: list[ChunkResult]) -> pd.DataFrame | None:
    """The injections to match: the store's table and the campaign's file's (with the optimal SNRs
    the chunks measured; their ids follow the store's), or None when there are none."""
    tables = [read_injections(meta.path)] if meta.has_injections else []
    if plan.injections is not None:
        measured = [r.tables[INJECTED] for r in results if INJECTED in r.tables]
        measured = pd.concat(measured, ignore_index=True) if measured else pd.DataFrame(columns=["id", "ifo", "snr", "time"])
        table = injection_table(plan.injections, measured, plan.ifos)
        offset = int(tables[0]["id"].max()) + 1 if tables and len(tables[0]) else 0
        tables.append(table.assign(id=table["id"] + offset))
    return pd.concat(tables, ignore_index=True) if tables else None


def in_gps_segments(t: np.ndarray, segments: np.ndarray, plan: Plan) -> np.ndarray:
    """Which GPS times ``t`` lie in store-sample intervals ``segments`` (``[start, stop)``)."""
    return in_segments(t, sample_times(GPSTime.parse(plan.t0), np.asarray(segments, dtype=np.int64),
                                       plan.sample_rate).reshape(-1, 2))


def outside(triggers: pd.DataFrame, plan: Plan, ifo: str, vetoed: dict) -> pd.DataFrame:
    """``ifo``'s triggers whose time is not in its vetoed intervals.  The mask applied after
    conditioning already keeps a vetoed sample from peaking; this also drops a trigger whose
    window starts before a veto but whose time (e.g. a boxcar's centre) falls inside it."""
    seg = vetoed.get(ifo)
    if seg is None or not len(seg) or not len(triggers):
        return triggers.reset_index(drop=True)
    keep = ~in_gps_segments(triggers["gps_time"].to_numpy(dtype=np.float64), seg, plan)
    return triggers[keep].reset_index(drop=True)


def flag_hardware_injections(candidates: pd.DataFrame, plan: Plan) -> pd.DataFrame:
    """``hw_injection``: True for a candidate whose time in any of its detectors lies in that
    detector's hardware-injection segments (category 3 of the vetoes, when flagged, not vetoed)."""
    hardware = plan.segments.hardware
    if not any(len(v) for v in hardware.values()):
        return candidates
    flag = np.zeros(len(candidates), dtype=bool)
    for ifo, seg in hardware.items():
        if f"time_{ifo}" in candidates and len(seg):
            flag |= in_gps_segments(candidates[f"time_{ifo}"].to_numpy(dtype=np.float64), seg, plan)
    return candidates.assign(hw_injection=flag)


def localisation(injections: pd.DataFrame, candidates: pd.DataFrame, skymaps: dict[str, np.ndarray]) -> pd.DataFrame:
    """Sky localisation of found injections: the angular error of the best direction
    (``sky_error_deg``) and, where the candidate has a skymap, the 90% area, the searched area and
    the credible level of the true direction (P-P test: uniform for calibrated maps)."""
    from gwbatch.sky.grid import angular_distance, pixel_of
    from gwbatch.sky.skymap import credible_level, searched_area

    out = injections.copy()
    n = len(out)
    error, level, searched, area = (np.full(n, np.nan) for _ in range(4))
    if "ra" in out and len(candidates):
        for i in np.flatnonzero(out["found"].to_numpy()):
            cand = candidates.iloc[int(out["candidate"].iat[i])]
            ra, dec = float(out["ra"].iat[i]), float(out["dec"].iat[i])
            error[i] = np.degrees(angular_distance(cand["ra"], cand["dec"], ra, dec))
            prob = skymaps.get(cand["skymap"])
            if prob is not None:
                order = int(round(np.log2(np.sqrt(prob.size / 12))))
                pixel = int(pixel_of(order, ra, dec))
                level[i], searched[i], area[i] = credible_level(prob, pixel), searched_area(prob, pixel), cand["area90"]
    return out.assign(sky_error_deg=error, credible_level=level, searched_area=searched, area90=area)


def trigger_table(reduced: Reduced) -> pd.DataFrame:
    """Every detector's final triggers in one table (the ``triggers.parquet`` output)."""
    frames = [df for df in reduced.triggers if len(df)]
    return pd.concat(frames, ignore_index=True) if frames else reduced.triggers[0].iloc[:0].copy()
