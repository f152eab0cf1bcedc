"""Writing a run's final set into the staging area (tables, skymaps, report, manifest) and the
``failed`` manifests of a run that did not complete; :mod:`workflow.rundir` commits them."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

import numpy as np
import pandas as pd

import gwbatch
from gwbatch.io.psds import FILE as PSD_FILE
from gwbatch.io.psds import write_psds
from gwbatch.io.skymaps import write_skymap
from gwbatch.io.tables import write_json, write_table
from gwbatch.report.html import write_report
from workflow.manifest import failed_manifest
from workflow.member import Member, RunSummary
from workflow.reduce import Reduced, trigger_table
from workflow.rundir import CAND_FILE, DISPERSED_COLUMNS, RunDirectory, output_errors

#: Candidate columns of dispersed pulses (the radio search): such a table is also written as Heimdall ``.cand`` text.


def commit_failed(run: RunDirectory, members: list[Member], cluster, reason: str | None = None) -> None:
    """Replace the directory's final set by ``failed`` manifests (each member's, and a
    multi-search campaign's own), which list every chunk's status and error."""
    with output_errors(run.path):
        _commit_failed(run, members, cluster, reason)



def _commit_failed(run: RunDirectory, members: list[Member], cluster, reason: str | None) -> None:
    parts = run.parts()
    stage = run.staging()
    for m in members:
        write_json(failed_manifest(m, cluster, parts, reason), stage.dir(m.name) / "manifest.json")
    if run.members:
        write_json({"gwbatch_version": gwbatch.__version__, "status": "failed",
                    "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    **({"reason": reason} if reason else {}),
                    "members": {m.name: {"failed": sorted(m.errors), "manifest": f"{m.name}/manifest.json"}
                                for m in members},
                    "timing": {"parts": parts}}, stage.dir() / "manifest.json")
    stage.commit()



def write_outputs(outdir: Path, reduced: Reduced, manifest: dict, figures: dict | None = None) -> None:
    """A member's final outputs, written into ``outdir`` (its staging directory, committed with
    the others' by :meth:`~workflow.rundir.Staging.commit`).  ``figures``: what the report draws beyond
    the tables (:func:`workflow.figures.top_figures`); the report's ASD is drawn from ``reduced.psds``."""
    write_table(trigger_table(reduced), outdir / "triggers.parquet")
    write_table(reduced.background_events, outdir / "background.parquet")
    write_table(reduced.gates, outdir / "gates.parquet")
    if reduced.injections is not None:
        write_table(reduced.injections, outdir / "injections.parquet")
    write_skymaps(outdir, reduced, manifest.get("campaign", {}).get("name", "gwbatch"))
    if reduced.psds:
        write_psds(outdir / PSD_FILE, reduced.psds, segment_seconds=manifest.get("campaign", {}).get("conditioning", {}).get("psd", {}).get("segment"))
    write_report(
        outdir / "report.html", manifest=manifest, candidates=reduced.candidates,
        background=reduced.background_events, injections=reduced.injections, gates=reduced.gates,
        psds=reduced.psds, **(figures or {}),
    )
    write_table(reduced.candidates, outdir / "candidates.parquet")
    if DISPERSED_COLUMNS <= set(reduced.candidates.columns):  # dispersed pulses: also Heimdall's text format
        from gwbatch.radio.candidates import write_heimdall_cands

        write_heimdall_cands(reduced.candidates, outdir / CAND_FILE, 1.0 / float(manifest["store"]["sample_rate"]),
                             multibeam=len(manifest["store"]["ifos"]) > 1, round_widths=True)
    write_json(manifest, outdir / "manifest.json")



def write_skymaps(outdir: Path, reduced: Reduced, campaign: str) -> None:
    """Each candidate's skymap as a FITS file (``skymap`` column), written before the candidate table;
    ``OBJECT`` names the campaign, the search and the candidate's GPS time (unique within a run).  A
    candidate with amplitudes (``sigma_<ifo>``: the compact-binary search) gets distance layers."""
    if not reduced.skymaps:
        return
    by_file = reduced.candidates.set_index("skymap")
    for name, prob in reduced.skymaps.items():
        path = outdir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        row = by_file.loc[name]
        ifos = tuple(i for i in str(row.get("ifos", "")).split(",") if i)
        write_skymap(path, prob, gps_time=float(row["gps_time"]),
                     object_name=f"{campaign}:{row['search']}:{float(row['gps_time']):.4f}", instruments=ifos,
                     extra={"SNR": float(row["snr"]), **({"FAR": float(row["far"])} if np.isfinite(row["far"]) else {})},
                     distance=skymap_distance(prob, row))


def skymap_distance(prob: np.ndarray, row: pd.Series):
    """The distance layers of a candidate's skymap (:func:`gwbatch.sky.distance.distance_layers`) from
    its detectors' complex SNRs and templates' ``sigma``; None for a search without amplitudes."""
    from gwbatch.sky.distance import distance_layers
    from gwbatch.sky.grid import sky_grid

    ifos = [c[6:] for c in row.index if c.startswith("sigma_")]
    seen = [i for i in ifos if np.isfinite(row.get(f"snr_{i}", np.nan)) and np.isfinite(row.get(f"phase_{i}", np.nan))
            and row[f"sigma_{i}"] > 0]
    if not seen:
        return None
    grid = sky_grid(int(round(np.log2(np.sqrt(prob.size / 12)))))
    z = np.array([row[f"snr_{i}"] * np.exp(1j * row[f"phase_{i}"]) for i in seen])
    return distance_layers(prob, grid.ra, grid.dec, float(row["gps_time"]), seen, z,
                           np.array([row[f"sigma_{i}"] for i in seen], np.float64))


def combined_candidates(done: dict[str, RunSummary]) -> pd.DataFrame:
    """Every member's candidates in one table (``member`` names the search), most significant first:
    each keeps the FAR against its own search's background."""
    frames = [s.reduced.candidates.assign(member=name) for name, s in done.items() if len(s.reduced.candidates)]
    if not frames:
        return pd.DataFrame({"member": pd.Series(dtype=str), "search": pd.Series(dtype=str),
                             "gps_time": pd.Series(dtype=float), "snr": pd.Series(dtype=float),
                             "far": pd.Series(dtype=float), "ifar_years": pd.Series(dtype=float)})
    table = pd.concat(frames, ignore_index=True)
    return table.sort_values(["far", "snr"], ascending=[True, False], kind="stable").reset_index(drop=True)
