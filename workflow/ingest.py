"""``gwbatch ingest frames``: channel files (GWF frames, gwpy HDF5) into a store, on the Dask cluster.

Three passes, each a set of tasks with a progress bar:

1. **scan**: one task per file lists what it holds of the channels (headers only), verifies a
   frame file's own checksums and computes its SHA-256 for the store's provenance;
2. **compare**: one task per overlap of two files of a detector reads both and refuses them if
   they differ;
3. **write**: one task per block of store chunks (:func:`gwbatch.io.channels.ingest_block`).

Resumable: the store is written as ``.NAME.resume-KEY`` (KEY: a digest of the input files' paths,
sizes and modification times, the channels, the rate and the filter) with a journal of finished
blocks; an interrupted ingest (Ctrl-C, SIGTERM, a killed job) rerun with the same command takes it
over and writes only the blocks not in the journal.  Bad input removes it.

Appendable (``--append``): an archive grows, so a store made by this command keeps each detector's
last native samples (its tail, twice the resampling filter's reach) and can be extended with later
files of the same channels.  The extended store is written beside it as above: the old chunk files
are hard-linked (no sample copied, their digests carried), the chunks next to the old end are
computed again from the tail and the new files and merged with the old ones (where both hold a
sample they must be equal), DQ is the old DQ OR the new, and the provenance lists every file
with the date of each append.  It replaces the old store only when complete; the result equals
one ingest of all the files, chunk file for chunk file.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from gwbatch import __version__
from gwbatch._xp import resolve_backend, shared_device
from gwbatch.config import ClusterConfig
from gwbatch.errors import ConfigError, DataError, GwbatchError, OutputError
from gwbatch.io.channels import (IngestPlan, PieceReader, compare_overlap, ingest_block, native_tail, plan_ingest,
                                 store_base, unpack_seconds)
from gwbatch.io.frames import (Channel, FileScan, channel_sources, expand_inputs, parse_channels, probe_channel,
                                scan_file, with_frame_pieces)
from gwbatch.io.resample import ATTENUATION_DB, PASSBAND
from gwbatch.io.store import DEFAULT_CHUNK_SAMPLES, MAX_SAMPLE_RATE, StoreMeta, StoreWriter, read_dq
from workflow.cluster import start_cluster
from workflow.execute import Call, run_calls

log = logging.getLogger("gwbatch")
JOURNAL = "ingest-journal.jsonl"
#: DQ bits of a store made from channel files: bit 0 set where the detector has data.
FRAME_DQ_BITS = ("DATA",)


@dataclass(frozen=True)
class IngestSummary:
    path: Path
    plan: IngestPlan
    files: int
    bytes_read: int
    blocks_written: int
    blocks_resumed: int


def resume_key(files: Sequence[Path], channels: Sequence[Channel], sample_rate: int | None, chunk: int,
               base: StoreMeta | None = None, backend: str = "numpy") -> str:
    """What the store is made from: the files as they are now, the channels, rate and filter (and
    where it runs), and for an append the store it extends (its checksum table and attributes)."""
    stats = []
    for f in files:
        st = f.stat()
        stats.append([str(f.resolve()), st.st_size, st.st_mtime_ns])
    extends = None
    if base is not None:
        extends = [str(base.t0), base.n_samples, base.chunk_samples,
                   hashlib.sha256(np.ascontiguousarray(base.checksums).tobytes()).hexdigest()]
    blob = json.dumps({"files": stats, "channels": [c.name for c in channels], "rate": sample_rate, "chunk": chunk,
                       "filter": [ATTENUATION_DB, PASSBAND, backend], "version": __version__, "extends": extends},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _provenance(plan: IngestPlan, scans: Sequence[FileScan]) -> dict:
    return {
        "source": "channel files",
        "channels": plan.channels,
        "native_rates": plan.native_rates,
        "resampling": {ifo: r.describe() for ifo, r in plan.resamplers.items()},
        "resampled_on": plan.backend,
        "files": [
            {"name": s.path.name, "path": str(s.path.resolve()), "format": s.format, "size": s.size,
             "sha256": s.sha256, "channels": sorted({p.channel for p in s.pieces}),
             "gps_start": str(min(p.t0 for p in s.pieces)),
             "samples": {p.channel: sum(q.n_samples for q in s.pieces if q.channel == p.channel) for p in s.pieces}}
            for s in scans
        ],
    }


def _block_key(block) -> tuple[int, int, int]:
    """A written block by what it covers (store row, chunks ``[first, stop)``), not by its number:
    the blocks' layout follows the workers, which a resumed ingest may not have again."""
    return (block.row, block.first, block.stop)


def _journal(path: Path) -> dict[tuple[int, int, int], list]:
    done: dict[tuple[int, int, int], list] = {}
    try:
        lines = (path / JOURNAL).read_text().splitlines()
    except FileNotFoundError:
        return done
    for line in lines:
        try:
            entry = json.loads(line)
            row, first, stop = (int(v) for v in entry["block"])
            done[(row, first, stop)] = [(int(a), int(n), bytes.fromhex(h)) for a, n, h in entry["seconds"]]
        except (ValueError, KeyError, TypeError):
            continue  # a line cut by the interruption: that block is written again
    return done


def worker_number() -> int:
    """This Dask worker's number (a local cluster names its workers 0, 1, ...), or 0 outside a
    worker or for a worker named otherwise."""
    from distributed import get_worker

    try:
        return int(get_worker().name)
    except (ValueError, TypeError):
        return 0


def write_block(plan: IngestPlan, *args) -> list[tuple[int, int, bytes]]:
    """:func:`~gwbatch.io.channels.ingest_block` as a cluster task; with ``--backend cupy`` on GPU
    ``worker number mod GPUs``, so that the CPU workers spread the resampling over all of a host's
    GPUs instead of all using the first."""
    if plan.backend != "cupy":
        return ingest_block(plan, *args)
    with shared_device(worker_number()):
        return ingest_block(plan, *args)


def _failure(what: str):
    def failure(call: Call, exc: BaseException) -> GwbatchError:
        return DataError(f"{what} {call.key}: {type(exc).__name__}: {exc}")
    return failure


def _appended_provenance(base: dict, new: dict) -> dict:
    """The provenance of an extended store: the first ingest's, every file of both, each append dated."""
    merged = dict(base)
    merged["files"] = list(base.get("files", [])) + new["files"]
    merged["appends"] = list(base.get("appends", [])) + [{
        "utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "files": len(new["files"]), "gwbatch": __version__}]
    return merged


def ingest_channels(inputs: Sequence[str | os.PathLike], channels: Sequence[str], out: str | os.PathLike, *,
                    sample_rate: int | None = None, overwrite: bool = False, append: bool = False,
                    workers: int | None = None, cluster_kind: str = "local", backend: str = "numpy",
                    chunk_samples: int = DEFAULT_CHUNK_SAMPLES, progress: bool = True) -> IngestSummary:
    """Ingest ``channels`` (``IFO:NAME``) from frame/gwpy files, globs or LAL caches into store ``out``
    at ``sample_rate`` Hz (None: the files' common rate).  ``cluster_kind``: ``local`` (``workers``
    processes, default one per core) or ``in-process``; ``backend``: where the resampling filter runs,
    ``numpy`` (CPU) or ``cupy`` (the GPU, shared by the worker processes; reading frames stays on
    the CPU).

    ``append``: extend the store ``out`` (made by this command) with later data of the same
    channels, as one ingest of all the files would have written it: its chunk files are linked,
    not copied, the chunks next to its old end are computed again from its kept native tail and
    merged, and the extended store replaces it only when complete."""
    out = Path(out)
    wanted = parse_channels(channels)
    if backend not in ("numpy", "cupy"):
        raise ConfigError(f"ingest backend {backend!r} is not one of numpy, cupy")
    if sample_rate is not None:
        if not (isinstance(sample_rate, (int, float, np.integer, np.floating)) and not isinstance(sample_rate, bool)
                and 1 <= sample_rate <= MAX_SAMPLE_RATE and float(sample_rate).is_integer()):
            raise ConfigError(f"--sample-rate must be a whole number of Hz in [1, {MAX_SAMPLE_RATE:.0f}], "
                              f"got {sample_rate!r}")
        sample_rate = int(sample_rate)
    resolve_backend(backend)  # cupy without a GPU: one line now, not a failed task later
    if append and overwrite:
        raise OutputError("--append extends a store and --overwrite replaces it; pass one of them")
    if out.exists() and not (overwrite or append):
        raise OutputError(f"{out} already exists; pass --overwrite to replace it or --append to extend it")
    base, base_meta = store_base(out) if append else (None, None)
    files = expand_inputs(inputs)
    key = resume_key(files, wanted, sample_rate, chunk_samples, base_meta, backend)
    names = [c.name for c in wanted]
    reader = PieceReader({base.tail_piece(ifo): t.values for ifo, t in base.tails.items() if t.values.size}
                         if base is not None else None)
    cfg = ClusterConfig(kind=cluster_kind, n_workers=workers, dashboard_address=":0")
    with start_cluster(cfg, "numpy", len(files)) as cluster:
        scans = [scan for _, scan in run_calls(
            cluster, [Call(str(f), scan_file, (f, names), f) for f in files], failure=_failure("scanning"),
            desc="files", progress=progress)]
        scans.sort(key=lambda s: files.index(s.path))
        sources = channel_sources(scans)
        probes = run_calls(cluster, [Call(f"probe-{c}", probe_channel, (p, c), c) for c, p in sources.items()],
                           failure=_failure("probing"), desc="channels", progress=False)
        scans = with_frame_pieces(scans, {call.item: fmt for call, fmt in probes})
        plan = plan_ingest(scans, wanted, sample_rate, chunk_samples=chunk_samples,
                           tasks=4 * max(1, cluster.workers), base=base, backend=backend)
        if plan.overlaps:
            list(run_calls(cluster, [Call(f"overlap-{i}", compare_overlap, (o,), o) for i, o in enumerate(plan.overlaps)],
                           failure=_failure("comparing overlap"), desc="overlaps", progress=progress))
        writer = StoreWriter(out, ifos=plan.ifos, sample_rate=plan.sample_rate, t0=plan.t0, n_samples=plan.n_samples,
                             chunk_samples=plan.chunk_samples, dq_bits=FRAME_DQ_BITS, overwrite=overwrite or append,
                             resume_key=key)
        with writer:
            written = _journal(writer.partial) if writer.resumed else {}
            done = {b.index: written[_block_key(b)] for b in plan.blocks if _block_key(b) in written}
            if written:
                log.info("resuming %s: %d of %d blocks already written", out, len(done), len(plan.blocks))
            if base_meta is not None:
                carried = writer.carry_chunks(base_meta, {(b.row, c) for b in plan.blocks for c in range(b.first, b.stop)})
                log.info("extending %s: %d chunks kept as they are", out, carried)
            todo = [b for b in plan.blocks if b.index not in done]
            calls = [Call(f"{b.ifo}-chunks-{b.first}-{b.stop}", write_block,
                          (plan, b, writer.strain_path, reader, base_meta), b, priority=b.stop - b.first)
                     for b in todo]
            with open(writer.partial / JOURNAL, "a") as journal:
                for call, seconds in run_calls(cluster, calls, failure=_failure("writing"), desc="blocks",
                                               progress=progress):
                    done[call.item.index] = seconds
                    journal.write(json.dumps({"block": list(_block_key(call.item)),
                                              "seconds": [[a, n, h.hex()] for a, n, h in seconds]}) + "\n")
                    journal.flush()
            dq = np.zeros((len(plan.ifos), plan.n_seconds), dtype=np.uint8)
            if base_meta is not None:
                old = read_dq(base_meta, plan.ifos)
                dq[:, : old.shape[1]] = old
            for block in plan.blocks:
                for entry in done[block.index]:
                    first, bits = unpack_seconds(*entry)
                    dq[block.row, first: first + bits.size] |= bits.astype(np.uint8)
            for row, ifo in enumerate(plan.ifos):
                writer.write_dq(ifo, 0, dq[row])
            for call, tail in run_calls(cluster, [Call(f"tail-{ifo}", native_tail, (plan, ifo, reader), ifo)
                                                  for ifo in plan.ifos], failure=_failure("reading the end of"),
                                        desc="tails", progress=False):
                writer.write_native_tail(tail)
            provenance = _provenance(plan, scans)
            writer.set_provenance(provenance if base_meta is None else
                                  _appended_provenance(base_meta.provenance, provenance))
            (writer.partial / JOURNAL).unlink(missing_ok=True)
            path = writer.commit()
    return IngestSummary(path, plan, len(scans), sum(s.size for s in scans), len(todo), len(plan.blocks) - len(todo))
