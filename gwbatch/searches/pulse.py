"""The single-pulse search as a campaign search: one chunk of strain in, per-detector triggers out.

Per detector: read the chunk and its halo, mask non-finite samples and DQ-failing seconds (a
non-finite value never reaches a kernel: it is counted, masked and replaced by zero for the FFT),
condition (PSD, whitening or baseline, gating), run the boxcar search, and keep the merged
triggers whose peak boxcar starts in the chunk proper; the chunk's analysed segments are the valid
starts of its proper part.
"""

from __future__ import annotations

import os
import socket
import time

import numpy as np
import pandas as pd

from gwbatch._xp import device_name, get_xp, resolve_backend, to_host
from gwbatch.conditioning import condition, filter_half_length
from gwbatch.conditioning.mask import mask_to_segments
from gwbatch.config import Campaign
from gwbatch.io.store import dq_sample_mask, open_store, read_dq, read_meta, read_strain
from gwbatch.pulse.plan import boxcar_plan
from gwbatch.pulse.search import search_series
from gwbatch.searches import ChunkResult, ChunkSpec

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


class PulseSearch:
    kind = "pulse"

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

    def process(self, campaign: Campaign, ifos: tuple[str, ...], backend: str, spec: ChunkSpec) -> ChunkResult:
        started = time.perf_counter()
        backend = resolve_backend(backend)
        xp = get_xp(backend)
        meta = read_meta(campaign.data.store)
        fs = meta.sample_rate
        ds = open_store(campaign.data.store)
        raw = read_strain(ds, ifos, spec.read_start, spec.read_stop)
        dq = read_dq(ds, ifos)
        required = meta.dq_mask(campaign.data.dq_flags)
        lo, hi = spec.start - spec.read_start, spec.stop - spec.read_start
        frames, segments, gates, stats = [], {}, [], {}
        for i, ifo in enumerate(ifos):
            x = raw[i]
            finite = np.isfinite(x)
            science = dq_sample_mask(dq[i], required, spec.read_start, spec.read_stop, fs)
            valid = finite & science
            host = np.where(finite, x, 0.0).astype(np.float64)
            cond = condition(xp.asarray(host), xp.asarray(valid), campaign.conditioning, fs)
            trig = search_series(cond.data, cond.valid, campaign.search, cond.snr2_per_energy)
            trig = trig.select((trig.start >= lo) & (trig.start < hi))
            frames.append(
                pd.DataFrame(
                    {
                        "ifo": ifo,
                        "sample": trig.start + spec.read_start,
                        "width": trig.width,
                        "centre": trig.centre + spec.read_start,
                        "snr": trig.snr,
                        "rho": trig.rho,
                        "group_start": trig.group_start + spec.read_start,
                        "group_stop": trig.group_stop + spec.read_start,
                        "members": trig.members,
                        "chunk": spec.index,
                    }
                )
            )
            proper_valid = to_host(cond.valid[lo:hi])
            segments[ifo] = mask_to_segments(proper_valid, offset=spec.start)
            inside = (cond.gate_peaks >= lo) & (cond.gate_peaks < hi)
            if inside.any():
                gates.append(pd.DataFrame(
                    {"ifo": ifo, "sample": cond.gate_peaks[inside] + spec.read_start, "peak": cond.gate_values[inside]}
                ))
            stats[ifo] = {
                "series_mean": trig.mean,
                "series_std": trig.std,
                "psd_segments": cond.psd_segments,
                "nonfinite_in_science": int(np.count_nonzero(~finite[lo:hi] & science[lo:hi])),
                "science_samples": int(np.count_nonzero(science[lo:hi])),
                "analysed_samples": int(proper_valid.sum()),
                "triggers": int(trig.start.size),
                "note": cond.note,
            }
        triggers = pd.concat(frames, ignore_index=True).astype(TRIGGER_COLUMNS)
        gate_table = pd.concat(gates, ignore_index=True) if gates else pd.DataFrame(
            {"ifo": pd.Series(dtype=str), "sample": pd.Series(dtype=np.int64), "peak": pd.Series(dtype=np.float64)}
        )
        return ChunkResult(
            index=spec.index,
            triggers=triggers,
            segments=segments,
            gates=gate_table,
            series_stats=stats,
            device=device_name(backend),
            worker=f"{socket.gethostname()}:{os.getpid()}",
            seconds=time.perf_counter() - started,
        )
