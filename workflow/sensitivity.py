"""``gwbatch vt RUN``: the sensitive volume-time of a finished run's searches (:mod:`gwbatch.sensitivity`).

A run of one search has ``manifest.json`` and ``injections.parquet`` in its directory; a campaign of
several has a ``members`` list in its manifest and each member's outputs in ``RUN/<name>/``, and
gets a row per search and one for their union.  The table is printed and written as JSON
(``RUN/vt.json`` unless ``--out`` says otherwise).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from gwbatch.errors import DataError, OutputError
from gwbatch.io.tables import write_json
from gwbatch.sensitivity import sensitive_vt, union_found


def _read_member(folder: Path) -> tuple[pd.DataFrame, float]:
    manifest, table = folder / "manifest.json", folder / "injections.parquet"
    if not manifest.exists():
        raise DataError(f"{folder} is not a finished run: no manifest.json")
    m = json.loads(manifest.read_text())
    if m.get("status") != "complete":
        raise DataError(f"{folder}: the run's status is {m.get('status')!r}, not complete; VT needs a complete run")
    if not table.exists():
        raise DataError(f"{folder}: no injections.parquet; VT needs a run over a store with injections")
    return pd.read_parquet(table), float(m["livetime"]["zero_lag_seconds"])


def _search_kind(manifest: dict) -> str:
    """The row name of a one-search run: its search's kind (``spiir``, ``burst``, ...)."""
    search = (manifest.get("campaign") or {}).get("search") or {}
    return str(search.get("kind") or "search")


def run_vt(run: Path, thresholds, *, bootstrap: int = 1000, out: Path | None = None) -> int:
    manifest = run / "manifest.json"
    if not manifest.exists():
        raise DataError(f"{run} is not a finished run: no manifest.json")
    record = json.loads(manifest.read_text())
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
    target = out or run / "vt.json"
    try:
        write_json({"method": "VT = T mean_i[found_i V_i / (1 + z_i)] over analysed injections "
                              "uniform in comoving volume (gwbatch.sensitivity)",
                    "bootstrap": bootstrap, "rows": table.to_dict(orient="records")}, target)
    except OSError as exc:
        raise OutputError(f"cannot write {target}: {exc.strerror or exc}") from None
    print(f"wrote {target}")
    return 0
