"""Simulated multi-detector strain: design-PSD Gaussian noise plus listed injections.

The same arguments give the same bytes.  Data is generated and written one store chunk at a time,
so a day of three-detector data at 16 kHz never needs to be in memory.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

import gwbatch
from gwbatch.errors import ConfigError
from gwbatch.gpstime import GPSTime
from gwbatch.io.store import DEFAULT_CHUNK_SAMPLES, MAX_SAMPLE_RATE, MAX_STORE_SECONDS, StoreWriter
from gwbatch.simulate.bursts import BurstSpec, draw_burst_injections
from gwbatch.simulate.cbc import CbcSpec, draw_cbc_injections
from gwbatch.simulate.glitches import GlitchSpec, add_glitches, draw_glitches
from gwbatch.simulate.injections import InjectionSpec, add_injections, draw_injections
from gwbatch.simulate.noise import coloured_noise, colouring_filter, stream_id
from gwbatch.conditioning.design import design_psd, detector_psd_model

DQ_ALL_PASS = 127


def _arrival_delay(ifo: str, ra: float, dec: float, gps: float) -> float:
    from gwbatch.detectors import get_detector, time_delay_from_earth_center

    return float(time_delay_from_earth_center(get_detector(ifo), ra, dec, gps))


def _piece(item: tuple[str, int, int], *, seed: int, taps: dict, t0: float, sample_rate: float,
           table: pd.DataFrame | None, glitches: pd.DataFrame | None = None) -> np.ndarray:
    """One detector's samples ``[start, stop)``: coloured noise plus the injections and glitches that reach them."""
    ifo, start, stop = item
    data = coloured_noise(seed, stream_id(ifo), start, stop, taps[ifo])
    add_injections(data, start, t0, sample_rate, ifo, table)
    add_glitches(data, start, t0, sample_rate, ifo, glitches)
    return data


def simulate_store(
    out: str | os.PathLike,
    *,
    ifos: Iterable[str],
    duration: float,
    sample_rate: float,
    seed: int,
    gps_start: float | str = 1_000_000_000,
    injections: InjectionSpec | None = None,
    cbc: CbcSpec | None = None,
    bursts: BurstSpec | None = None,
    glitches: GlitchSpec | None = None,
    chunk_samples: int = DEFAULT_CHUNK_SAMPLES,
    overwrite: bool = False,
    progress=None,
    workers: int = 1,
) -> Path:
    """Write a simulated store and return its path.

    ``progress``, if given, is called with the fraction done after each chunk.  ``workers``
    processes make the pieces in parallel; the store is the same for any number.
    """
    ifos = tuple(ifos)
    if not 0 < duration <= MAX_STORE_SECONDS:
        raise ConfigError(f"--duration must be positive, got {duration}" if not duration > 0 else
                          f"--duration must be at most {MAX_STORE_SECONDS:.0f} s (4 years), got {duration:g}")
    if not (1 <= sample_rate <= MAX_SAMPLE_RATE and sample_rate == int(sample_rate)):
        raise ConfigError(f"--sample-rate must be a whole number of Hz in [1, {MAX_SAMPLE_RATE:.0f}], got {sample_rate}")
    if seed < 0:
        raise ConfigError(f"--seed must be >= 0, got {seed}")
    if workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    n_samples = int(round(duration * sample_rate))
    t0 = GPSTime.parse(gps_start)
    models = {ifo: detector_psd_model(ifo) for ifo in ifos}
    psds = {ifo: (lambda f, m=models[ifo]: design_psd(m, f)) for ifo in ifos}
    tables = []
    if injections is not None and injections.count:
        tables.append(draw_injections(
            injections, seed=seed, start=float(t0), duration=n_samples / sample_rate,
            sample_rate=sample_rate, ifos=ifos, psds=psds, delay=_arrival_delay,
        ))
    if cbc is not None and cbc.count:
        tables.append(draw_cbc_injections(
            cbc, seed=seed, start=float(t0), duration=n_samples / sample_rate, sample_rate=sample_rate,
            ifos=ifos, psds=psds, delay=_arrival_delay, first_id=sum(len(t) for t in tables),
        ))
    if bursts is not None and bursts.count:
        tables.append(draw_burst_injections(
            bursts, seed=seed, start=float(t0), duration=n_samples / sample_rate, sample_rate=sample_rate,
            ifos=ifos, psds=psds, delay=_arrival_delay, first_id=sum(len(t) for t in tables),
        ))
    table = pd.concat(tables, ignore_index=True) if tables else None
    glitch_table = None
    if glitches is not None and glitches.rate > 0:
        glitch_table = draw_glitches(glitches, seed=seed, start=float(t0), duration=n_samples / sample_rate,
                                     sample_rate=sample_rate, ifos=ifos, psds=psds)
    provenance = {
        "source": "simulate",
        "gwbatch": gwbatch.__version__,
        "seed": seed,
        "psd_models": models,
        "injections": 0 if table is None else len(table),
    }
    if injections is not None:
        provenance["injection_spec"] = {k: v for k, v in injections.__dict__.items()}
    if cbc is not None:
        provenance["cbc_injection_spec"] = {k: v for k, v in cbc.__dict__.items()}
    if bursts is not None:
        provenance["burst_injection_spec"] = {k: v for k, v in bursts.__dict__.items()}
    if glitch_table is not None:  # not listed in the store: draw_glitches gives them again from seed and spec
        provenance["glitch_spec"] = {k: v for k, v in glitches.__dict__.items()}
        provenance["glitches"] = {ifo: int((glitch_table["ifo"] == ifo).sum()) for ifo in ifos}
    taps = {ifo: colouring_filter(psds[ifo], sample_rate) for ifo in ifos}
    with StoreWriter(
        out, ifos=ifos, sample_rate=sample_rate, t0=t0, n_samples=n_samples,
        chunk_samples=chunk_samples, provenance=provenance, overwrite=overwrite,
    ) as writer:
        n_sec = int(np.ceil(n_samples / sample_rate))
        for ifo in ifos:
            writer.write_dq(ifo, 0, np.full(n_sec, DQ_ALL_PASS, dtype=np.uint8))
        step = min(chunk_samples, n_samples)
        pieces = [(ifo, start, min(start + step, n_samples)) for start in range(0, n_samples, step) for ifo in ifos]
        make = functools.partial(_piece, seed=seed, taps=taps, t0=float(t0), sample_rate=sample_rate, table=table,
                                 glitches=glitch_table)
        with contextlib.ExitStack() as stack:
            if workers > 1 and len(pieces) > 1:  # every piece is independent (counter-based noise)
                pool = stack.enter_context(ProcessPoolExecutor(min(workers, len(pieces)),
                                                               mp_context=multiprocessing.get_context("spawn")))
                made = pool.map(make, pieces, chunksize=1)
            else:
                made = map(make, pieces)
            for done, ((ifo, start, stop), data) in enumerate(zip(pieces, made), 1):
                writer.write_strain(ifo, start, data)
                if progress is not None and done % len(ifos) == 0:
                    progress(stop / n_samples)
        if table is not None:
            writer.write_injections(table)
        return writer.commit()
