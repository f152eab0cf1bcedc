"""Building SPIIR banks: place, build every template on the cluster's CPU workers, pack, cache.

A built bank is cached as ``CACHE/<name>-<construction>-<PSD>.h5``: what it is built from (the bank
configuration, its templates, the construction version) and the PSD its filters are for.  A cached
bank with the same construction is reused for a PSD within ``PSD_RTOL`` of its own at every
frequency: the same data's PSD comes out different in the last bits from different NumPy and SciPy
builds, so banks built on one machine serve another.  The placed templates
(which the fingerprint needs, and which take tens of seconds to place for a thousand-template bank)
are cached as ``CACHE/<name>-placement-<key>.json``, keyed by the bank configuration and the
placement PSD.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import numpy as np

from gwbatch.conditioning import psd as psd_mod
from gwbatch.config import BankConfig
from gwbatch.errors import GwbatchError
from gwbatch.io.banks import load_bank, read_bank_file, read_bank_psd, save_bank
from gwbatch.io.store import dq_sample_mask, read_dq, read_meta, read_strain
from gwbatch.searches.common import zero_gap_mask, zero_gap_samples
from gwbatch.spiir.bank import FilterBank, build_template, construction_key, pack, place
from gwbatch.waveforms import Template
from workflow.cluster import Cluster
from workflow.execute import run_tasks

log = logging.getLogger("gwbatch")
BATCH = 8  # templates per task: a few seconds of work for BNS, well above Dask's per-task overhead


class BankBuildFailed(GwbatchError):
    exit_code = 5


def store_psd(store: str | Path, ifo: str, *, start: int = 0, seconds: float = 512.0, segment: float = 4.0,
              dq_flags: tuple[str, ...] = ("DATA",), zero_gap: float | None = 0.01) -> psd_mod.PSD:
    """Welch-median PSD of up to ``seconds`` of a store's science data for ``ifo``, from sample
    ``start``; non-finite samples and runs of exact zeros of at least ``zero_gap`` s are left out,
    as the chunks leave them out (:func:`gwbatch.searches.common.conditioned_series`)."""
    meta = read_meta(store)
    fs = meta.sample_rate
    stop = min(meta.n_samples, start + int(seconds * fs))
    x = read_strain(meta, [ifo], start, stop)[0].astype(np.float64)
    valid = np.isfinite(x) & dq_sample_mask(read_dq(meta, [ifo])[0], meta.dq_mask(dq_flags), start, stop, fs)
    shortest = zero_gap_samples(zero_gap, fs)
    if shortest is not None:
        valid &= ~zero_gap_mask(meta, ifo, x, shortest, start)
    return psd_mod.estimate(np.where(valid, x, 0.0), valid, fs, segment, f"{ifo} data in {meta.path}")


#: Changes whenever placement would place different points for the same configuration.
PLACEMENT_VERSION = 1


def placed_templates(cfg: BankConfig, psd: psd_mod.PSD, cache: str | Path | None = None) -> list[Template]:
    """The bank's templates (:func:`gwbatch.spiir.bank.place`), from ``cache`` when placed before.

    Bank files are read, never cached.  A cache file is written atomically (a temporary name, then
    a rename), so a killed run never leaves half a placement behind."""
    if cfg.file:
        return place(cfg, psd, read_bank_file(cfg.file))
    blob = json.dumps({"version": PLACEMENT_VERSION, "config": cfg.model_dump(mode="json"),
                       "psd": psd.fingerprint()}, sort_keys=True).encode()
    path = Path(cache) / f"{cfg.name}-placement-{hashlib.sha256(blob).hexdigest()[:16]}.json" if cache else None
    if path is not None and path.exists():
        rows = json.loads(path.read_text())["templates"]
        return [Template(*row) for row in rows]
    templates = place(cfg, psd)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"bank": cfg.name, "placement_psd": psd.source,
                                   "templates": [[t.mass1, t.mass2, t.spin1z, t.spin2z] for t in templates]}))
        tmp.replace(path)
    return templates


#: Relative PSD difference under which a cached bank is reused: far above the last-bit differences
#: of PSD estimates between library builds (~1e-15), far below what changes a bank's filters
#: measurably (their overlaps are quoted to 1e-4).
PSD_RTOL = 1e-6


def cached_bank_path(cfg: BankConfig, psd: psd_mod.PSD, templates: list[Template], cache: str | Path) -> Path:
    """Where the bank built from ``cfg`` for ``psd`` and ``templates`` is cached: a cached bank of the
    same construction built for a PSD within ``PSD_RTOL`` of ``psd``, else the path it is to be
    written to."""
    stem = f"{cfg.name}-{construction_key(cfg, templates)}"
    exact = Path(cache) / f"{stem}-{psd.fingerprint()}.h5"
    if exact.exists():
        return exact
    for other in sorted(Path(cache).glob(f"{stem}-*.h5")):
        built_for = read_bank_psd(other)
        if built_for is not None and built_for.matches(psd, PSD_RTOL):
            log.info("bank %s: cached at %s, built for a PSD within %g of this one", cfg.name, other, PSD_RTOL)
            return other
    return exact


def _build_batch(cfg: BankConfig, psd: psd_mod.PSD, item: tuple[int, list]):
    k, batch = item
    return k, [build_template(t, cfg, psd) for t in batch]


def build_bank(cfg: BankConfig, psd: psd_mod.PSD, *, cluster: Cluster | None = None,
               cache: str | Path | None = None, templates: list[Template] | None = None,
               progress: bool = True) -> tuple[FilterBank, Path | None]:
    """The built bank for ``psd`` and where it is cached: from the cache when present, else placed
    (unless ``templates`` are given) and built on ``cluster`` (in this process when None)."""
    if templates is None:
        templates = place(cfg, psd, read_bank_file(cfg.file) if cfg.file else None)
    path = cached_bank_path(cfg, psd, templates, cache) if cache else None
    if path is not None and path.exists():
        log.info("bank %s: cached at %s", cfg.name, path)
        return load_bank(path), path
    log.info("bank %s: building %d templates for %s", cfg.name, len(templates), psd.source)
    items = [(k, templates[i : i + BATCH]) for k, i in enumerate(range(0, len(templates), BATCH))]

    def failure(item, exc):
        t = item[1][0]
        return BankBuildFailed(f"building bank {cfg.name} failed near template ({t.mass1:.3f}, {t.mass2:.3f}): "
                               f"{type(exc).__name__}: {exc}")

    done: dict[int, list] = {}
    tasks = run_tasks(cluster or Cluster(None, "in-process", 1, None, "numpy"), _build_batch, (cfg, psd), items,
                      key=lambda item: f"bank-{cfg.name}-{item[0]}-{id(items)}", failure=failure, desc="templates",
                      progress=progress)
    for k, built in tasks:
        done[k] = built
    bank = pack([bt for k in sorted(done) for bt in done[k]], cfg, psd, templates)
    if path is not None:
        save_bank(bank, path)
    return bank, path
