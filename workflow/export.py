"""``gwbatch export RUN --format coinc``: a finished run's candidates as LIGO_LW coinc files with their
PSDs (:mod:`gwbatch.io.coinc`), one directory per candidate, as GraceDB uploads and BAYESTAR take them.

Which candidates: those with ``far <= --far`` (Hz), else the ``--top`` most significant (default 1),
or the one nearest ``--gps`` (within :data:`GPS_REACH`).  Each gets ``OUT/<search>-<GPS>/coinc.xml``
(``<member>-<GPS>`` in a campaign of several searches; the candidate's tables,
the PSDs of the chunk that owns it and, for a compact-binary candidate, each detector's complex SNR
series) and ``psd.xml.gz`` (the PSDs alone).  The PSDs are the ones the chunk measured and whitened
with (the run's ``psd.h5``).

The SNR series are recomputed: the run's campaign is planned again over its store (which must be the
one the run read: its identity is checked), the chunk that owns the candidate is read and conditioned
as the search did, and the candidate's template is filtered (:meth:`SpiirSearch.snr_series`).  They
are centred on each detector's peak sample, ``SNR_SERIES_S`` either side, as BAYESTAR expects.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

import gwbatch
from gwbatch.errors import ConfigError, DataError, OutputError
from gwbatch.io.coinc import Candidate, Single, coinc_document, psd_document, write_document
from gwbatch.io.psds import FILE as PSD_FILE
from gwbatch.io.psds import read_psds
from gwbatch.searches import get_search
from workflow.rundir import finished_manifest, reading_finished_run, run_table

#: Seconds of SNR series either side of each detector's peak (BAYESTAR trims to what it needs: the
#: light travel time plus the template's autocorrelation length).
SNR_SERIES_S = 0.1
FORMATS = ("coinc",)
#: ``--gps`` takes the nearest candidate within this many seconds, else refuses.
GPS_REACH = 1.0


@dataclass
class RunMember:
    """One search's finished outputs in a run directory."""

    name: str
    folder: Path
    manifest: dict
    candidates: pd.DataFrame


def run_members(run: Path) -> list[RunMember]:
    """The run's searches (one, or each member of a campaign of several), each complete."""
    manifest = finished_manifest(run, "export")
    names = [m["name"] for m in manifest.get("members") or []]
    folders = [(n, run / n) for n in names] if names else [("", run)]
    out = []
    for name, folder in folders:
        m = manifest if not names else finished_manifest(folder, "export")
        table = folder / "candidates.parquet"
        if not table.exists():
            raise DataError(f"{folder}: no candidates.parquet")
        out.append(RunMember(name, folder, m, run_table(table)))
    return out


def select(candidates: pd.DataFrame, *, far: float | None = None, top: int | None = None,
           gps: float | None = None) -> pd.DataFrame:
    """The candidates to export (module docstring), most significant first; for ``gps``, the
    nearest within :data:`GPS_REACH` s (none if no candidate is that near)."""
    if gps is not None:
        if not np.isfinite(gps):
            raise ConfigError(f"--gps must be a finite GPS time, got {gps!r}")
        if not len(candidates):
            return candidates
        apart = np.abs(candidates["gps_time"].to_numpy(np.float64) - gps)
        nearest = int(np.argmin(apart))
        return candidates.iloc[[nearest]] if apart[nearest] <= GPS_REACH else candidates.iloc[:0]
    if far is not None:
        return candidates[candidates["far"].to_numpy(np.float64) <= far]
    return candidates.head(1 if top is None else top)


def export_run(run: Path, out: Path, *, fmt: str = "coinc", far: float | None = None, top: int | None = None,
               gps: float | None = None, overwrite: bool = False) -> list[Path]:
    """Write the selected candidates of ``run`` under ``out``; returns the directories written.  The
    run's lock is held throughout (:func:`workflow.rundir.reading_finished_run`): recomputing the SNR
    series may rebuild the run's bank cache."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    with reading_finished_run(run, "gwbatch export"):
        return _export(run, out, fmt, far, top, gps, overwrite)


def _export(run: Path, out: Path, fmt: str, far: float | None, top: int | None, gps: float | None,
            overwrite: bool) -> list[Path]:
    members = run_members(run)
    work = []  # (member, its chosen rows, their target directories): every target checked before any is written
    for member in members:
        chosen = select(member.candidates, far=far, top=top, gps=gps)
        if not len(chosen):
            continue
        psd_path = member.folder / PSD_FILE
        if not psd_path.exists():
            raise DataError(f"{member.folder}: no {PSD_FILE} (runs made before gwbatch wrote the PSDs it whitened "
                            "with cannot be exported with PSDs: run the campaign again)")
        # a campaign of several searches (two of one kind, say) names each directory by its member
        targets = [out / f"{member.name or row['search']}-{float(row['gps_time']):.4f}" for _, row in chosen.iterrows()]
        work.append((member, chosen, targets))
    if gps is not None and not work:
        raise DataError(f"no candidate of {run} within {GPS_REACH:g} s of GPS {gps:.4f}")
    targets = [t for _, _, ts in work for t in ts]
    for t in targets:
        if t.exists() and not t.is_dir() or (t / "coinc.xml").is_dir() or any(q.exists() and not q.is_dir()
                                                                              for q in t.parents):
            raise OutputError(f"cannot write {t / 'coinc.xml'}: a file or directory is in the way")
    existing = [str(t / "coinc.xml") for t in targets if (t / "coinc.xml").exists()]
    if existing and not overwrite:
        raise OutputError(f"{', '.join(existing[:3])}{' ...' if len(existing) > 3 else ''} exist(s); pass --overwrite "
                          "to replace")
    written = []
    for member, chosen, member_targets in work:
        psds = read_psds(member.folder / PSD_FILE)
        series = SnrSeries(member) if get_search(member.manifest["campaign"]["search"]["kind"]).modelled else None
        for (_, row), target in zip(chosen.iterrows(), member_targets):
            try:
                written.append(write_candidate(target, member, row, psds, series))
            except OSError as exc:
                raise OutputError(f"cannot write {target}: {exc.strerror or exc}") from None
    return written


def write_candidate(target: Path, member: RunMember, row: pd.Series, psds: dict, series) -> Path:
    """``coinc.xml`` and ``psd.xml.gz`` of one candidate in ``target``."""
    campaign = member.manifest["campaign"]
    gps = float(row["gps_time"])
    at = {ifo: (p.frequency, p.at(gps)) for ifo, p in psds.items()}
    candidate = candidate_from_row(row, campaign)
    doc = coinc_document(candidate, at, f_low=float(campaign["conditioning"]["f_low"]), version=gwbatch.__version__, campaign=campaign.get("name", ""))
    if series is not None:
        from gwbatch.io.coinc import append_snr_series

        append_snr_series(doc, series.around(row, candidate))
    write_document(doc, target / "coinc.xml")
    write_document(psd_document(at, gps), target / "psd.xml.gz")
    return target


def candidate_from_row(row: pd.Series, campaign: dict) -> Candidate:
    """A candidate table row as :class:`~gwbatch.io.coinc.Candidate` (its detectors: those with a
    finite SNR)."""
    ifos = [c[4:] for c in row.index if c.startswith("snr_")]
    value = lambda key: float(row[key]) if key in row and pd.notna(row[key]) else float("nan")  # noqa: E731
    singles = tuple(Single(ifo, value(f"time_{ifo}"), value(f"snr_{ifo}"), value(f"phase_{ifo}"),
                           value(f"chisq_{ifo}"), value(f"duration_{ifo}"))
                    for ifo in ifos if np.isfinite(value(f"snr_{ifo}")))
    kind = campaign["search"]["kind"]
    template = None
    if get_search(kind).modelled:
        template = {k: value(k) if np.isfinite(value(k)) else 0.0 for k in ("mass1", "mass2", "spin1z", "spin2z")}
    band = None
    if "f_min" in row and "f_max" in row:
        band = (value("f_min"), value("f_max"))
    ra, dec = (value("ra"), value("dec")) if "ra" in row and "dec" in row else (None, None)
    rank = value("rank") if "rank" in row else value("rho") if "rho" in row else None
    return Candidate(kind, float(row["gps_time"]), float(row["snr"]), float(row["far"]), singles, template, band,
                     ra, dec, rank)


class SnrSeries:
    """The complex SNR series of a template search's candidates (:meth:`SpiirSearch.snr_series`), from
    its campaign planned again."""

    def __init__(self, member: RunMember) -> None:
        from gwbatch.config import validate_campaign
        from gwbatch.io.store import read_meta
        from workflow.plan import member_plan
        from workflow.prepare import prepare_one
        from gwbatch.io.store import store_identity

        campaign = validate_campaign(member.manifest["campaign"])
        self.meta = read_meta(campaign.data.store)
        self.folder = member.folder
        recorded = _recorded_store(member.folder)
        if recorded is not None and recorded != store_identity(self.meta):
            raise DataError(f"store {campaign.data.store} is not the one the run read (its identity differs from "
                            "the run's run.json): the SNR series cannot be recomputed")
        self.plan = member_plan(member.name, campaign, self.meta)
        recorded_settings = (_recorded_identity(member.folder) or {}).get("settings")
        if recorded_settings is not None:
            from workflow.resume import identity_changes, run_identity

            now = run_identity(campaign, self.meta, self.plan)["settings"]["search"]
            if now != recorded_settings.get("search"):
                raise DataError(f"{member.folder}: the search settings now differ from the run's run.json (its bank "
                                "file edited since?), so the SNR series would be of other templates:\n  "
                                + "\n  ".join(identity_changes({"search": recorded_settings.get("search")},
                                                                {"search": now})))
        self.resources = prepare_one(self.plan, self.meta, member.folder, campaign.cluster, progress=False)

    def around(self, row: pd.Series, candidate: Candidate) -> dict[str, tuple[float, float, np.ndarray]]:
        """Per detector of ``candidate``: ``(epoch GPS, sample interval, complex SNR)`` of an odd number
        of samples centred on the detector's peak sample."""
        from gwbatch.gpstime import GPSTime, sample_times, time_to_index
        from gwbatch.searches.common import conditioned_series
        from workflow.plan import chunk_task

        plan, fs = self.plan, self.plan.sample_rate
        t0, half = GPSTime.parse(plan.t0), int(np.ceil(SNR_SERIES_S * fs))
        centre = time_to_index(t0, float(row["gps_time"]), fs)
        spec = next((c for c in plan.chunks if c.start <= centre < c.stop), None)
        if spec is None:
            raise DataError(f"no chunk of the plan owns the candidate at GPS {row['gps_time']:.4f}")
        self._check_chunk(spec)
        peaks = {s.ifo: int(round(time_to_index(t0, s.time, fs))) for s in candidate.singles}
        search, out = get_search(plan.search), {}
        for series in conditioned_series(chunk_task(plan, self.meta, spec, "numpy")):
            if series.ifo not in peaks:
                continue
            peak = peaks[series.ifo]
            samples, z = search.snr_series(plan.settings, self.resources, series, row, spec, (peak - half, peak + half + 1))
            keep = (samples >= peak - half) & (samples <= peak + half)
            if keep.sum() != 2 * half + 1 or not np.all(np.isfinite(z[keep])):
                raise DataError(f"{series.ifo}: the SNR series around GPS {row['gps_time']:.4f} is not all valid data")
            out[series.ifo] = (float(sample_times(t0, np.array([peak - half], np.float64), fs)[0]), 1.0 / fs,
                               np.asarray(z[keep], np.complex64))
        return out

    def _check_chunk(self, spec) -> None:
        """The store chunks ``spec`` reads hold what they held when the run read them (their checksums)."""
        from gwbatch.io.tables import checkpoint_stem
        from workflow.resume import chunk_inputs
        from workflow.rundir import CHUNKS

        doc = checkpoint_stem(self.folder / CHUNKS, spec).with_suffix(".json")
        if doc.exists() and json.loads(doc.read_text()).get("inputs") != chunk_inputs(self.meta, self.plan.ifos, spec):
            raise DataError(f"the store's data of chunk {spec.index} changed since the run read them: the SNR series "
                            "cannot be recomputed")


def _recorded_identity(folder: Path) -> dict | None:
    """What the run recorded it computes (its ``run.json``), or None."""
    path = folder / "run.json"
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"{path} cannot be read ({type(exc).__name__}): the run's outputs are damaged") from None
    return doc if isinstance(doc, dict) else None


def _recorded_store(folder: Path) -> dict | None:
    """The store identity the run recorded (its ``run.json``, or the campaign's above a member)."""
    for path in (folder / "run.json", folder.parent / "run.json"):
        if path.exists():
            doc = _recorded_identity(path.parent) or {}
            return doc.get("store") or (doc.get("members") or {}).get(folder.name, {}).get("store")
    return None
