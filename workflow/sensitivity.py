"""``gwbatch vt RUN``: the sensitive volume-time of a finished run's searches (:mod:`gwbatch.sensitivity`).

A run of one search has ``manifest.json`` and ``injections.parquet`` in its directory; a campaign of
several has a ``members`` list in its manifest and each member's outputs in ``RUN/<name>/``, and
gets a row per search and one for their union.  The table is printed and written as JSON
(``RUN/vt.json`` unless ``--out`` says otherwise).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from gwbatch.errors import DataError, OutputError
from gwbatch.io.tables import write_json
from gwbatch.sensitivity import sensitive_vt, union_found
from workflow.rundir import VT_FILE, finished_manifest, reading_finished_run, run_table


def _read_member(folder: Path) -> tuple[pd.DataFrame, float]:
    m, table = finished_manifest(folder, "VT"), folder / "injections.parquet"
    if not table.exists():
        raise DataError(f"{folder}: no injections.parquet; VT needs a run over a store with injections")
    try:
        live = float((m.get("livetime") or {})["zero_lag_seconds"])
    except (KeyError, TypeError, ValueError):
        raise DataError(f"{folder}/manifest.json holds no zero-lag livetime (livetime.zero_lag_seconds): damaged") from None
    return run_table(table), live


METHOD = "VT = T mean_i[found_i V_i / (1 + z_i)] over analysed injections uniform in comoving volume (gwbatch.sensitivity)"


def _is_vt_table(path: Path) -> bool:
    """Whether ``path`` holds a VT table this command wrote (what it may replace)."""
    try:
        return json.loads(path.read_text()).get("method") == METHOD
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return False


def _search_kind(manifest: dict) -> str:
    """The row name of a one-search run: its search's kind (``spiir``, ``burst``, ...)."""
    search = (manifest.get("campaign") or {}).get("search") or {}
    return str(search.get("kind") or "search")


def run_vt(run: Path, thresholds, *, bootstrap: int = 1000, out: Path | None = None) -> int:
    """Print and write (``vt.json`` in the run, or ``out``) the sensitive volume-time of finished run
    ``run`` at each IFAR threshold, holding the run's lock (:func:`workflow.rundir.reading_finished_run`)."""
    with reading_finished_run(run, "gwbatch vt"):
        return _run_vt(run, thresholds, bootstrap, out)


def _run_vt(run: Path, thresholds, bootstrap: int, out: Path | None) -> int:
    target = out or run / VT_FILE
    if target.is_dir() or target.exists() and not _is_vt_table(target):
        raise OutputError(f"{target} exists and is not a gwbatch VT table: it is never replaced; choose another --out")
    record = finished_manifest(run, "VT")
    members = record.get("members") or []
    searches = {m["name"]: _read_member(run / m["name"]) for m in members} if members else {
        _search_kind(record): _read_member(run)}
    rows = []
    for name, (table, live) in searches.items():
        rows.append(sensitive_vt(table, live, thresholds, bootstrap=bootstrap, name=name).assign(search=name))
    if len(searches) > 1:
        union = union_found({n: t for n, (t, _) in searches.items()})
        live = min(lt for _, lt in searches.values())
        rows.append(sensitive_vt(union, live, thresholds, bootstrap=bootstrap, name="union").assign(search="union"))
    table = pd.concat(rows, ignore_index=True)[["search", "ifar_years", "vt", "vt_error", "found", "injections"]]
    print("search        IFAR >= (yr)   VT (Mpc^3 yr)          found / injections")
    for r in table.itertuples():
        print(f"{r.search:<13} {r.ifar_years:>11.3g}   {r.vt:10.4g} +- {r.vt_error:<9.3g} {r.found:>6d} / {r.injections}")
    target = out or run / VT_FILE
    rows = [{k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in r.items()}
            for r in table.to_dict(orient="records")]  # no bootstrap: the error is null (JSON has no NaN)
    try:
        write_json({"method": METHOD, "bootstrap": bootstrap, "rows": rows}, target)
    except OSError as exc:
        raise OutputError(f"cannot write {target}: {exc.strerror or exc}") from None
    print(f"wrote {target}")
    return 0
