"""From chunk results to the campaign's tables: merge chunk edges, coincide, slide, FAR, match injections."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gwbatch.background import BackgroundResult, estimate_background
from gwbatch.candidates.injections import match_injections
from gwbatch.candidates.tables import background_table, candidate_table
from gwbatch.conditioning.mask import merge_segments
from gwbatch.config import Campaign
from gwbatch.gpstime import GPSTime, sample_times
from gwbatch.io.store import StoreMeta, read_injections
from gwbatch.searches import ChunkResult, get_search
from workflow.plan import Plan


@dataclass
class Reduced:
    triggers: list[pd.DataFrame]  # per detector, final (merged) triggers with GPS times
    segments: dict[str, np.ndarray]  # per detector, analysed [start, stop) store samples
    background: BackgroundResult
    candidates: pd.DataFrame
    background_events: pd.DataFrame
    injections: pd.DataFrame | None
    gates: pd.DataFrame


def reduce_results(campaign: Campaign, plan: Plan, meta: StoreMeta, results: list[ChunkResult]) -> Reduced:
    fs = plan.sample_rate
    t0 = GPSTime.parse(plan.t0)
    search = get_search(plan.search)
    results = sorted(results, key=lambda r: r.index)
    merged = search.merge(campaign, pd.concat([r.triggers for r in results], ignore_index=True), t0, fs)
    per_ifo = [merged[merged["ifo"] == ifo].reset_index(drop=True) for ifo in plan.ifos]
    segments = {
        ifo: merge_segments(np.concatenate([r.segments[ifo].reshape(-1, 2) for r in results])).astype(np.int64)
        for ifo in plan.ifos
    }
    ring_segments = [(segments[ifo] - plan.span_start) / fs for ifo in plan.ifos]
    triggers = [search.coincidence_triggers(df, plan.span_start, fs) for df in per_ifo]
    bg = estimate_background(
        triggers, ring_segments, ring=plan.ring, travel=np.asarray(plan.travel), window=campaign.coincidence.window,
        min_ifos=campaign.coincidence.min_ifos, cluster_window=campaign.coincidence.cluster_window,
        n_slides=plan.n_slides, slide_step=plan.slide_step,
    )
    candidates = candidate_table(plan.search, bg.foreground, per_ifo, plan.ifos, search.candidate_fields)
    events = background_table(bg.background, per_ifo, plan.ifos, bg.shifts)
    injections = None
    if meta.has_injections:
        table = read_injections(meta.path)
        span_lo, span_hi = sample_times(t0, [plan.span_start, plan.span_stop], fs)
        table = table[(table["gps_time"] >= span_lo) & (table["gps_time"] < span_hi)]
        gps_segments = {ifo: sample_times(t0, segments[ifo], fs) for ifo in plan.ifos}
        injections = match_injections(table, candidates, plan.ifos, gps_segments, campaign.coincidence.min_ifos, fs)
    gates = pd.concat([r.gates for r in results], ignore_index=True)
    gates["gps_time"] = sample_times(t0, gates["sample"].to_numpy(np.float64), fs) if len(gates) else np.zeros(0)
    return Reduced(per_ifo, segments, bg, candidates, events, injections, gates)


def trigger_table(reduced: Reduced) -> pd.DataFrame:
    """Every detector's final triggers in one table (the ``triggers.parquet`` output)."""
    frames = [df for df in reduced.triggers if len(df)]
    return pd.concat(frames, ignore_index=True) if frames else reduced.triggers[0].iloc[:0].copy()
