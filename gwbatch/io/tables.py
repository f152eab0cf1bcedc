"""Result files: tables (Parquet), JSON documents and per-chunk checkpoints, all written atomically.

Every file is written under a temporary name in its final directory and renamed into place, so a
reader never sees a half-written file and an interrupted run never leaves an output that looks
complete.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gwbatch.searches import ChunkResult


def _tmp(path: Path) -> Path:
    return path.parent / f".{path.name}.tmp-{os.getpid()}"


def write_table(table: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write a DataFrame as Parquet, atomically."""
    path = Path(path)
    tmp = _tmp(path)
    pq.write_table(pa.Table.from_pandas(table, preserve_index=False), tmp)
    os.replace(tmp, path)
    return path


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
    path = Path(path)
    tmp = _tmp(path)
    tmp.write_text(json.dumps(obj, indent=2, default=_json_default) + "\n")
    os.replace(tmp, path)
    return path


def chunk_paths(directory: Path, index: int) -> tuple[Path, Path]:
    stem = directory / f"chunk-{index:06d}"
    return stem.with_suffix(".parquet"), stem.with_suffix(".json")


def _extra_path(directory: Path, index: int, name: str, suffix: str) -> Path:
    return directory / f"chunk-{index:06d}.{name}{suffix}"


def write_chunk(directory: Path, result: ChunkResult, fingerprint: str) -> None:
    """Checkpoint one chunk: triggers and the search's tables as Parquet, its arrays as ``.npy``,
    then the rest as JSON (its presence marks the chunk done)."""
    directory.mkdir(parents=True, exist_ok=True)
    table_path, doc_path = chunk_paths(directory, result.index)
    write_table(result.triggers, table_path)
    for name, table in result.tables.items():
        write_table(table, _extra_path(directory, result.index, name, ".parquet"))
    for name, array in result.arrays.items():
        path = _extra_path(directory, result.index, name, ".npy")
        tmp = _tmp(path)
        with open(tmp, "wb") as fh:
            np.save(fh, np.asarray(array), allow_pickle=False)
        os.replace(tmp, path)
    write_json(
        {
            "index": result.index,
            "fingerprint": fingerprint,
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
        doc_path,
    )


def read_chunk(directory: Path, index: int, fingerprint: str) -> ChunkResult | None:
    """A checkpointed chunk made with the same settings, or None."""
    table_path, doc_path = chunk_paths(directory, index)
    if not (doc_path.exists() and table_path.exists()):
        return None
    try:
        doc = json.loads(doc_path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if doc.get("fingerprint") != fingerprint or doc.get("index") != index:
        return None
    tables, arrays = {}, {}
    try:
        for name in doc.get("tables", []):
            tables[name] = read_table(_extra_path(directory, index, name, ".parquet"))
        for name in doc.get("arrays", []):
            arrays[name] = np.load(_extra_path(directory, index, name, ".npy"), allow_pickle=False)
    except (OSError, ValueError, pa.ArrowException):
        return None  # incomplete checkpoint: the chunk runs again
    return ChunkResult(
        index=index,
        triggers=read_table(table_path),
        segments={ifo: np.asarray(seg, dtype=np.int64).reshape(-1, 2) for ifo, seg in doc["segments"].items()},
        gates=pd.DataFrame(doc["gates"]),
        series_stats=doc["series_stats"],
        device=doc["device"],
        worker=doc["worker"],
        seconds=doc["seconds"],
        tables=tables,
        arrays=arrays,
        device_peak_bytes=int(doc.get("device_peak_bytes", 0)),
        stage_seconds={k: float(v) for k, v in (doc.get("stage_seconds") or {}).items()},
    )
