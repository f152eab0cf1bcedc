"""The single-pulse search as a campaign search: one chunk of strain in, per-detector triggers out.

Per detector: the shared front end (:mod:`gwbatch.searches.common`: read, mask, condition), the
boxcar search, and the merged triggers whose peak boxcar starts in the chunk's own samples.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gwbatch.candidates.coincidence import IfoTriggers
from gwbatch.candidates.triggers import add_trigger_times, merge_chunk_triggers
from gwbatch.conditioning import filter_half_length
from gwbatch.config import Campaign
from gwbatch.io.store import read_meta
from gwbatch.pulse.plan import boxcar_plan
from gwbatch.pulse.search import search_series
from gwbatch.searches import ChunkResult, ChunkSpec
from gwbatch.searches.common import run_chunk

TRIGGER_COLUMNS = {
    "ifo": "str",
    "sample": "int64",
    "width": "int64",
    "centre": "float64",
    "snr": "float64",
    "rho": "float64",
    "group_start": "int64",
    "group_stop": "int64",
    "members": "int64",
    "chunk": "int64",
}


#: Bytes per read sample of the boxcar search's arrays (see ``work_bytes``).
WORK_PER_SAMPLE = 320


class PulseSearch:
    kind = "pulse"
    slides_in_chunks = False

    def halo(self, campaign: Campaign, sample_rate: float) -> tuple[int, int]:
        """Samples read before and after a chunk: whitening corruption, plus the widest boxcar after."""
        pad = filter_half_length(campaign.conditioning, sample_rate)
        return pad, pad + boxcar_plan(campaign.search.decimation).max_width

    def max_uncertainty(self, campaign: Campaign, sample_rate: float) -> float:
        """Largest trigger timing uncertainty (s) used in coincidence."""
        return boxcar_plan(campaign.search.decimation).max_width / sample_rate / 4.0

    @staticmethod
    def uncertainty(triggers: pd.DataFrame, sample_rate: float) -> np.ndarray:
        """Timing uncertainty of each trigger: a quarter of its boxcar duration (s)."""
        return triggers["width"].to_numpy(dtype=np.float64) / sample_rate / 4.0

    candidate_fields = {"rho": "rho", "duration": "duration"}

    def merge(self, campaign: Campaign, triggers: pd.DataFrame, t0, sample_rate: float) -> pd.DataFrame:
        """Friends-of-friends across chunk edges; times of the excess centroids; rank = snr."""
        merged = add_trigger_times(merge_chunk_triggers(triggers), t0, sample_rate)
        return merged.assign(rank=merged["snr"])

    def coincidence_triggers(self, df: pd.DataFrame, span_start: int, sample_rate: float) -> IfoTriggers:
        return IfoTriggers(
            time=(df["centre"].to_numpy(np.float64) - span_start) / sample_rate,
            uncertainty=self.uncertainty(df, sample_rate),
            snr=df["rank"].to_numpy(np.float64),
        )

    statistic_name = "excess-energy SNR"

    def statistic_series(self, campaign: Campaign, resources: dict, series, row, spec: ChunkSpec, span):
        """The boxcar of the candidate's duration in this detector over whitened energy, as a
        Gaussian-equivalent SNR ``(S_w - w) / sqrt(2 w)`` (unit-variance samples), at its centre."""
        fs = read_meta(campaign.data.store).sample_rate
        width = row.get(f"duration_{series.ifo}", np.nan)
        w = max(1, int(round((width if np.isfinite(width) else 1.0 / fs) * fs)))
        x = np.asarray(series.cond.data, dtype=np.float64) * np.sqrt(series.cond.snr2_per_energy or 1.0)
        energy = np.where(np.asarray(series.cond.valid), x * x, 1.0)
        total = np.concatenate([[0.0], np.cumsum(energy)])
        snr = (total[w:] - total[:-w] - w) / np.sqrt(2.0 * w)
        return spec.read_start + np.arange(snr.size) + 0.5 * (w - 1), snr

    def work_bytes(self, campaign: Campaign, read_samples: int, n_ifos: int) -> int:
        """Kernel working memory of one task (upper bound): one detector at a time, its float64
        series and the float32 boxcar outputs of a decimation level with their statistics."""
        return WORK_PER_SAMPLE * read_samples

    def process(self, campaign: Campaign, ifos: tuple[str, ...], backend: str, resources: dict,
                spec: ChunkSpec) -> ChunkResult:
        def search_one(series):
            cond = series.cond
            lo, hi = series.own
            trig = search_series(cond.data, cond.valid, campaign.search, cond.snr2_per_energy)
            trig = trig.select((trig.start >= lo) & (trig.start < hi))
            frame = pd.DataFrame({
                "ifo": series.ifo,
                "sample": trig.start + spec.read_start,
                "width": trig.width,
                "centre": trig.centre + spec.read_start,
                "snr": trig.snr,
                "rho": trig.rho,
                "group_start": trig.group_start + spec.read_start,
                "group_stop": trig.group_stop + spec.read_start,
                "members": trig.members,
            })
            return frame, {"series_mean": trig.mean, "series_std": trig.std}

        return run_chunk(campaign, ifos, backend, spec, TRIGGER_COLUMNS, search_one)
