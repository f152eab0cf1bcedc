"""Property tests of the plan: chunks tile the span exactly once, halos cover what a task needs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gwbatch.config import validate_campaign
from gwbatch.gpstime import GPSTime
from gwbatch.io.store import DQ_BITS, StoreMeta
from workflow.plan import chunk_edges, make_plan


@settings(deadline=None)
@given(start=st.integers(0, 10**6), length=st.integers(1, 10**7), chunk=st.integers(1, 10**6))
def test_chunk_edges_tile_the_span(start, length, chunk):
    assume(length // chunk <= 100_000)  # campaigns have at most ~1e5 chunks; keeps examples fast
    edges = chunk_edges(start, start + length, chunk)
    assert edges[0] == start and edges[-1] == start + length
    sizes = np.diff(edges)
    assert (sizes > 0).all()  # disjoint, ordered, no empty chunk: each sample in exactly one chunk
    if length >= chunk:
        assert sizes.min() >= chunk // 2 and sizes.max() <= chunk + chunk // 2 + 1
    else:
        assert sizes.size == 1


def meta(n_samples: int, fs: float) -> StoreMeta:
    return StoreMeta(path=Path("mem.zarr"), ifos=("H1", "L1", "V1"), sample_rate=fs, t0=GPSTime(1_000_000_000),
                     n_samples=n_samples, chunk_samples=1 << 20, dq_bits=DQ_BITS)


@settings(max_examples=60, deadline=None)
@given(
    duration=st.integers(64, 20000),
    fs=st.sampled_from([512.0, 1024.0, 2048.0]),
    chunk=st.floats(32.0, 600.0),
    decimation=st.sampled_from([[16], [32, 16], [16, 8, 8, 8]]),
    filter_duration=st.sampled_from([1.0, 2.0, 4.0]),
    offset=st.floats(0.0, 0.3),
)
def test_plan_covers_every_sample_once(duration, fs, chunk, decimation, filter_duration, offset):
    n = int(duration * fs)
    start = 1_000_000_000 + offset * duration
    campaign = validate_campaign({
        "name": "p", "data": {"store": "mem.zarr", "start": start, "duration": duration * (1 - offset) * 0.99},
        "conditioning": {"filter_duration": filter_duration, "psd": {"segment": max(4.0, filter_duration)}},
        "search": {"kind": "pulse", "decimation": decimation}, "plan": {"chunk": chunk},
        "background": {"slides": 1},
    })
    try:
        plan = make_plan(campaign, meta(n, fs))
    except Exception as exc:  # only the documented refusal for chunks too short for a PSD
        assert "too short to estimate a PSD" in str(exc)
        return
    owned = np.zeros(n, dtype=np.int32)
    for c in plan.chunks:
        owned[c.start : c.stop] += 1
        assert c.read_start == c.start - plan.halo_before and c.read_stop == c.stop + plan.halo_after
    assert (owned[plan.span_start : plan.span_stop] == 1).all()
    assert owned[: plan.span_start].sum() == 0 and owned[plan.span_stop :].sum() == 0
    # The halo after holds the widest boxcar beyond the whitening corruption.
    widest = {(16,): 16, (32, 16): 64, (16, 8, 8, 8): 128}[tuple(decimation)]
    assert plan.halo_after - plan.halo_before == widest
    assert plan.halo_before == int(round(filter_duration * fs)) // 2
    assert plan.task_memory_bytes > 0 and plan.ring > (plan.span_stop - plan.span_start) / fs
