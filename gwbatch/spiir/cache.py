"""Building SPIIR banks: place, build every template (in parallel where the caller gives a map over
CPU workers), pack, cache.

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
import time
from pathlib import Path
from typing import Callable

import numpy as np

from gwbatch.conditioning import psd as psd_mod
from gwbatch.config import BankConfig
from gwbatch.errors import DataError, GwbatchError
from gwbatch.io.atomic import write_atomically
from gwbatch.io.banks import load_bank, read_bank_file, read_bank_psd, save_bank
from gwbatch.spiir.bank import FilterBank, build_template, construction_key, pack, place, template_duration
from gwbatch.waveforms import Template, load_approximant

log = logging.getLogger("gwbatch")
BATCH = 8  # templates per task: a few seconds of work for BNS, well above Dask's per-task overhead


class BankBuildFailed(GwbatchError):
    exit_code = 5


def store_psd(store, ifo: str, *, start: int = 0, seconds: float = 512.0, segment: float = 4.0,
              dq_required: int = 1, zero_gap: int | None = None,
              excluded: dict | None = None) -> psd_mod.PSD:
    """Welch-median PSD of up to ``seconds`` of a store's data for ``ifo`` (``store``: a
    :class:`~gwbatch.io.store.StoreMeta`) from sample ``start``, of the samples a chunk counts as
    data (:func:`gwbatch.io.span.read_span`: finite, the DQ bits ``dq_required`` set, not in a run
    of ``zero_gap`` exact zeros, not ``excluded`` by the campaign's segments)."""
    fs = store.sample_rate
    stop = min(store.n_samples, start + int(seconds * fs))
    from gwbatch.io.span import read_span  # zarr, xarray and pandas: only for a PSD measured from data

    span = read_span(store, [ifo], start, stop, dq_required=dq_required, zero_gap=zero_gap, excluded=excluded)
    x = span.strain[0].astype(np.float64)
    valid = span.valid[0]
    return psd_mod.estimate(np.where(valid, x, 0.0), valid, fs, segment, f"{ifo} data in {store.path}")


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
        try:
            return _read_placement(path)
        except ValueError as exc:
            log.warning("bank %s: the cached placement %s is damaged (%s); placing again", cfg.name, path, exc)
    templates = place(cfg, psd)
    if path is not None:
        rows = [[t.mass1, t.mass2, t.spin1z, t.spin2z] for t in templates]
        text = json.dumps({"bank": cfg.name, "placement_psd": psd.source, "templates": rows,
                           "sha256": _rows_digest(rows)})
        write_atomically(path, lambda fh: fh.write(text.encode()))
    return templates


def _rows_digest(rows: list) -> str:
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def _read_placement(path: Path) -> list[Template]:
    """A cached placement, checked: JSON, four finite numbers a template (masses > 0, spins in
    [-1, 1]) and, where recorded, the rows' SHA-256; anything else is a ``ValueError``."""
    try:
        doc = json.loads(path.read_text())
        rows = doc["templates"]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{type(exc).__name__}: {exc}") from None
    if "sha256" in doc and doc["sha256"] != _rows_digest(rows):
        raise ValueError("its rows do not match their recorded SHA-256")
    values = np.asarray(rows, dtype=object)
    if not rows or values.ndim != 2 or values.shape[1] != 4 or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in values.ravel()):
        raise ValueError("its templates are not rows of four numbers (mass1, mass2, spin1z, spin2z)")
    m = np.asarray(rows, dtype=np.float64)
    if not (np.isfinite(m).all() and (m[:, :2] > 0).all() and (np.abs(m[:, 2:]) <= 1).all()):
        raise ValueError("a template has a non-finite value, a mass <= 0 or a spin beyond [-1, 1]")
    return [Template(*row) for row in rows]


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


def in_process(fn: Callable, args: tuple, items: list, *, desc: str, failure: Callable):
    """``fn(*args, item)`` for each item in this process, in order (the default map of :func:`build_bank`)."""
    for item in items:
        try:
            yield fn(*args, item)
        except GwbatchError:
            raise
        except Exception as exc:
            raise failure(item, exc) from exc


def build_bank(cfg: BankConfig, psd: psd_mod.PSD, *, parallel: Callable = in_process,
               cache: str | Path | None = None, templates: list[Template] | None = None) -> tuple[FilterBank, Path | None]:
    """The built bank for ``psd`` and where it is cached: from the cache when present, else placed
    (unless ``templates`` are given) and built by ``parallel(fn, args, items, desc=, failure=)``,
    a map over CPU workers (:class:`gwbatch.searches.base.PrepareContext`; in this process by
    default)."""
    if templates is None:
        templates = place(cfg, psd, read_bank_file(cfg.file) if cfg.file else None)
    path = cached_bank_path(cfg, psd, templates, cache) if cache else None
    if path is not None and path.exists():
        try:
            bank = load_bank(path)
        except DataError as exc:  # a damaged cache entry is built again, as a damaged checkpoint is rerun
            log.warning("bank %s: %s; building it again", cfg.name, exc)
        else:
            log.info("bank %s: cached at %s", cfg.name, path)
            return bank, path
    load_approximant(cfg.approximant)  # a bad name fails here; forked workers inherit the generator
    log.info("bank %s: building %d templates for %s", cfg.name, len(templates), psd.source)
    # Longest first (the map runs items in the order given): a bank's templates differ twentyfold in
    # cost, and in placement order a long batch started last kept one worker busy while the rest idled.
    order = sorted(range(len(templates)), key=lambda i: -template_duration(templates[i], cfg))
    items = [(k, [templates[i] for i in order[j: j + BATCH]]) for k, j in enumerate(range(0, len(order), BATCH))]

    def failure(item, exc):
        t = item[1][0]
        return BankBuildFailed(f"building bank {cfg.name} failed near template ({t.mass1:.3f}, {t.mass2:.3f}): "
                               f"{type(exc).__name__}: {exc}")

    began = time.monotonic()
    done = dict(parallel(_build_batch, (cfg, psd), items, desc="templates", failure=failure))
    built = [None] * len(templates)
    for k, batch in done.items():
        for i, bt in zip(order[k * BATCH: (k + 1) * BATCH], batch):
            built[i] = bt
    bank = pack(built, cfg, psd, templates)
    log.info("bank %s: built %d templates in %.1f s", cfg.name, len(templates), time.monotonic() - began)
    if path is not None:
        save_bank(bank, path)
    return bank, path
