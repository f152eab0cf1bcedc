"""The output directory: what may be written where, and when a directory may be reused.

A run directory holds a marker file, per-chunk checkpoints in ``chunks/`` and the final outputs.
The final outputs are removed before a run starts and written at its end, ``manifest.json`` last,
so an interrupted run never leaves final outputs that look complete.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from gwbatch.errors import ConfigError, OutputError

MARKER = ".gwbatch-run"
FINAL = ("manifest.json", "candidates.parquet", "triggers.parquet", "background.parquet", "injections.parquet",
         "gates.parquet", "report.html")
CHUNKS = "chunks"
SKYMAPS = "skymaps"  # candidates' FITS skymaps, part of the final outputs
PARTS = "parts.jsonl"  # one line per invocation that ran chunks: the first, and each --resume


def prepare_output(path: Path, *, resume: bool, overwrite: bool) -> Path:
    """Make ``path`` ready for a run, refusing to clobber a finished run or a foreign directory."""
    if resume and overwrite:
        raise ConfigError("--resume and --overwrite exclude each other: choose one")
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"output {path} exists and is not a directory")
    if path.exists() and any(path.iterdir()):
        if not (path / MARKER).exists():
            raise OutputError(f"output {path} exists, is not empty and is not a gwbatch run directory; choose another --out")
        state = run_state(path)
        if not (resume or overwrite):
            what = {"complete": "a finished run", "failed": "a run with failed chunks (see its manifest.json)"}.get(
                state, "an unfinished run")
            raise OutputError(
                f"output {path} holds {what}; pass --resume to reuse its finished chunks or --overwrite to start again"
            )
        for name in FINAL:
            (path / name).unlink(missing_ok=True)
        shutil.rmtree(path / SKYMAPS, ignore_errors=True)
        if overwrite:
            shutil.rmtree(path / CHUNKS, ignore_errors=True)
            (path / PARTS).unlink(missing_ok=True)
    path.mkdir(parents=True, exist_ok=True)
    (path / MARKER).write_text("gwbatch run directory\n")
    return path


def run_state(path: Path) -> str:
    """``complete`` or ``failed`` (the manifest's status), else ``unfinished`` (no manifest yet)."""
    manifest = Path(path) / "manifest.json"
    try:
        return str(json.loads(manifest.read_text()).get("status", "complete"))
    except (OSError, ValueError, AttributeError):
        return "unfinished"


def record_part(path: Path, record: dict) -> None:
    """Append one invocation's record (its stage times and chunks done) to the run's parts log."""
    with open(Path(path) / PARTS, "a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")


def read_parts(path: Path) -> list[dict]:
    """Every invocation's record, oldest first (empty before the first)."""
    log = Path(path) / PARTS
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
