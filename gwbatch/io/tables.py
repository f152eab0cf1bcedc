"""Result files: tables (Parquet), JSON documents and per-chunk checkpoints, all written atomically.

Every file is written under a new temporary name in its final directory (created exclusively,
never through a symlink) and renamed into place, so a reader never sees a half-written file and an
interrupted run never leaves an output that looks complete.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gwbatch.io.atomic import write_atomically
from gwbatch.tasks import ChunkResult, ChunkSpec


def write_table(table: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write a DataFrame as Parquet, atomically."""
    arrow = pa.Table.from_pandas(table, preserve_index=False)
    return write_atomically(path, lambda fh: pq.write_table(arrow, fh))


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    return pq.read_table(path).to_pandas()


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def write_json(obj, path: str | os.PathLike) -> Path:
    """Write a JSON document, atomically."""
    text = json.dumps(obj, indent=2, default=_json_default) + "\n"
    return write_atomically(path, lambda fh: fh.write(text.encode()))


def write_bytes(data: bytes, path: str | os.PathLike) -> Path:
    """Write ``data``, atomically (never through a symlink at ``path``)."""
    return write_atomically(path, lambda fh: fh.write(data))


def write_array(array: np.ndarray, path: str | os.PathLike) -> Path:
    """Write an array as ``.npy`` (no pickles), atomically."""
    return write_atomically(path, lambda fh: np.save(fh, np.asarray(array), allow_pickle=False))


def checkpoint_stem(directory: Path, spec: ChunkSpec) -> Path:
    """A chunk's checkpoint files are named by the span the chunk owns (store samples), so a
    checkpoint can only ever stand for that span."""
    return Path(directory) / f"chunk-{spec.start:013d}-{spec.stop:013d}"


def _part(stem: Path, name: str, suffix: str) -> Path:
    return stem.parent / f"{stem.name}.{name}{suffix}"


def write_chunk(directory: Path, spec: ChunkSpec, result: ChunkResult, fingerprint: str, inputs: dict) -> None:
    """Checkpoint one chunk: triggers and the search's tables as Parquet, its arrays as ``.npy``,
    then the rest as JSON (its presence marks the chunk done), with the chunk's exact span, the
    run's ``fingerprint`` and ``inputs`` (what the chunk read: the store chunks' checksums), by
    which :func:`read_chunk` and the resume decide whether it still holds."""
    stem = checkpoint_stem(directory, spec)
    write_table(result.triggers, stem.with_suffix(".parquet"))
    for name, table in result.tables.items():
        write_table(table, _part(stem, name, ".parquet"))
    for name, array in result.arrays.items():
        write_array(array, _part(stem, name, ".npy"))
    write_json(
        {
            "span": [spec.start, spec.stop, spec.read_start, spec.read_stop],
            "fingerprint": fingerprint,
            "inputs": inputs,
            "segments": {ifo: seg.tolist() for ifo, seg in result.segments.items()},
            "gates": result.gates.to_dict(orient="list"),
            "series_stats": result.series_stats,
            "device": result.device,
            "worker": result.worker,
            "seconds": result.seconds,
            "device_peak_bytes": result.device_peak_bytes,
            "stage_seconds": result.stage_seconds,
            "tables": sorted(result.tables),
            "arrays": sorted(result.arrays),
        },
        stem.with_suffix(".json"),
    )


#: Columns and types of a chunk's (and the run's) gates table.
GATE_COLUMNS = {"ifo": str, "sample": np.int64, "peak": np.float64}


def gates_frame(columns: dict | None = None) -> pd.DataFrame:
    """A gates table with its fixed schema (also when empty)."""
    columns = columns or {}
    return pd.DataFrame({name: pd.Series(columns.get(name, []), dtype=dtype) for name, dtype in GATE_COLUMNS.items()})


class DamagedCheckpoint(Exception):
    """A checkpoint that cannot be read back (a truncated or corrupt file): its chunk runs again."""


def read_chunk(directory: Path, spec: ChunkSpec, fingerprint: str) -> tuple[ChunkResult, dict] | None:
    """The checkpoint of ``spec``'s exact span made with the same ``fingerprint``, as ``(result,
    inputs)``; None when there is none or it was made otherwise.  A checkpoint that cannot be read
    raises :class:`DamagedCheckpoint` saying which file."""
    stem = checkpoint_stem(directory, spec)
    doc_path, table_path = stem.with_suffix(".json"), stem.with_suffix(".parquet")
    if not doc_path.exists():
        return None
    try:
        doc = json.loads(doc_path.read_text())
        span = [spec.start, spec.stop, spec.read_start, spec.read_stop]
        if doc.get("fingerprint") != fingerprint or doc.get("span") != span:
            return None
        tables = {name: read_table(_part(stem, name, ".parquet")) for name in doc.get("tables", [])}
        arrays = {name: np.load(_part(stem, name, ".npy"), allow_pickle=False) for name in doc.get("arrays", [])}
        result = ChunkResult(
            index=spec.index,
            triggers=read_table(table_path),
            segments={ifo: np.asarray(seg, dtype=np.int64).reshape(-1, 2) for ifo, seg in doc["segments"].items()},
            gates=gates_frame(doc["gates"]),
            series_stats=doc["series_stats"],
            device=doc["device"],
            worker=doc["worker"],
            seconds=float(doc["seconds"]),
            tables=tables,
            arrays=arrays,
            device_peak_bytes=int(doc.get("device_peak_bytes", 0)),
            stage_seconds={k: float(v) for k, v in (doc.get("stage_seconds") or {}).items()},
        )
        return result, dict(doc.get("inputs") or {})
    except (OSError, ValueError, KeyError, TypeError, AttributeError, pa.ArrowException) as exc:
        raise DamagedCheckpoint(f"{stem.name}: {type(exc).__name__}: {exc}") from None
