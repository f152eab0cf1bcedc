"""What ``--resume`` may take over, and nothing else.

A run's identity (``run.json``, :func:`run_identity`) is everything a chunk's result depends on
apart from the strain itself: the resolved analysis settings (the plan included), the code's
:data:`~gwbatch.ANALYSIS_VERSION` and the store's identity (layout, DQ, injections).  A resume
whose identity differs is refused with a line per key that differs (:func:`identity_changes`).
The strain is bound chunk by chunk: a checkpoint is named by the exact span its chunk owns and
records the checksums of the store chunks it read (:func:`chunk_inputs`); it is taken over only
while those are the store's checksums, and the files under every checkpoint taken over are
checked against them (an edit made behind gwbatch's back changes the files, not the checksums).
"""

from __future__ import annotations

import hashlib
import json
import logging
from concurrent.futures import ThreadPoolExecutor

from gwbatch import ANALYSIS_VERSION
from gwbatch.config import Campaign
from gwbatch.errors import OutputError
from gwbatch.io.store import StoreMeta, store_identity, verify_store_chunks
from gwbatch.io.tables import DamagedCheckpoint, read_chunk
from gwbatch.searches import get_search
from gwbatch.tasks import ChunkResult, ChunkSpec
from workflow.plan import Plan
from workflow.rundir import IDENTITY, RunDirectory

log = logging.getLogger("gwbatch")


def run_identity(campaign: Campaign, meta: StoreMeta, plan: Plan) -> dict:
    """Everything a chunk's result depends on but the strain (module docstring).  Where the store
    lives and how the cluster runs do not change results and are left out, and the search says
    what of its own section does (:meth:`gwbatch.searches.base.Search.identity`: SPIIR replaces
    its bank's path by the bank's content); so are the coincidence and background sections of
    searches that form their background after the chunks (the pulse search), whose reduction
    simply runs again.  A setting left ``auto`` counts by what ``plan`` resolved it to
    (``plan.chunk``; for searches whose chunks run the trials, the step they shift by and the deep
    trials), so a resume is refused when the rules resolve it otherwise and taken when they resolve
    it as before.  The files of ``data.segments`` and ``data.vetoes`` count by what they resolve to
    (``plan.segments``, a :class:`~gwbatch.io.segments.DataSegments`), not by their paths, and the
    injection file (``plan.injections``, an :class:`~gwbatch.simulate.injection_set.InjectionSet`)
    by its SHA-256."""
    search = get_search(campaign.search.kind)
    sections = {"data", "conditioning", "search", "plan"}
    if search.slides_in_chunks:  # its chunks run the time-shifted trials too
        sections |= {"coincidence", "background"}
    settings = campaign.model_dump(mode="json", include=sections)
    resolved = {("plan", "chunk"): plan.chunk_seconds}
    if search.slides_in_chunks:
        resolved |= {("background", "slide_step"): plan.slide_step, ("background", "deep_slides"): plan.deep_slides}
    for (section, key), value in resolved.items():
        if settings[section][key] == "auto":
            settings[section][key] = value
    settings["data"].pop("store", None)
    settings["search"] = search.identity(settings["search"])
    for key in ("segments", "vetoes", "injections"):
        settings["data"].pop(key, None)
    if not plan.segments.empty:
        settings["data"]["segments_sha256"] = plan.segments.digest()
    if plan.injections is not None:
        settings["data"]["injections_sha256"] = plan.injections.sha256
    return {"analysis_version": ANALYSIS_VERSION, "settings": settings, "store": store_identity(meta)}


def fingerprint(identity: dict) -> str:
    """A short hash of a :func:`run_identity`."""
    blob = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def chunk_inputs(meta: StoreMeta, ifos: tuple[str, ...], spec: ChunkSpec) -> dict:
    """What a chunk task reads, as ``{ifo: [[store chunk, checksum], ...]}``: the store's checksums
    (0 for a store chunk never written) of the store chunks under the task's read span."""
    chunks = meta.chunk_range(spec.read_start, spec.read_stop)
    return {ifo: [[k, int(meta.checksums[row, k])] for k in chunks] for ifo, row in zip(ifos, meta.rows(ifos))}


def identity_changes(before: dict, now: dict, shown: int = 12) -> list[str]:
    """What differs between two :func:`run_identity` documents, one line per key
    (``plan.chunk: 64.0 -> 32.0``)."""
    def flat(doc, prefix=""):
        if isinstance(doc, dict):
            return {k: v for key, value in doc.items() for k, v in flat(value, f"{prefix}{key}.").items()}
        return {prefix.rstrip("."): doc}

    def label(key: str) -> str:
        if key.startswith("settings."):
            return key.removeprefix("settings.")
        if key.startswith("store."):
            return f"the store's {key.removeprefix('store.')}"
        if key == "analysis_version":
            return "analysis version (the code now computes chunks otherwise)"
        return key

    a, b = flat(before), flat(now)
    lines = [f"{label(key)}: {_brief(a.get(key, '(not set)'))} -> {_brief(b.get(key, '(not set)'))}"
             for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)]
    return lines[:shown] + ([f"... and {len(lines) - shown} more"] if len(lines) > shown else [])


def _brief(value, limit: int = 60) -> str:
    """``value`` as JSON, cut to ``limit`` characters with a short hash of the whole, so two long
    values that differ past the cut (a bank's content) are not shown alike."""
    text = json.dumps(value, default=str)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 20]} ... (sha256 {hashlib.sha256(text.encode()).hexdigest()[:8]})"


def check_identity(run: RunDirectory, name: str, identity: dict) -> None:
    """Refuse (:class:`OutputError`) to resume a run whose ``run.json`` differs from ``identity``,
    or checkpoints made before runs recorded their identity."""
    before = run.identity(name)
    directory = run.member_dir(name)
    if before is None:
        if any(directory.glob("chunks/chunk-*.json")):
            raise OutputError(f"{directory} has checkpoints but no {IDENTITY}: they were made by an earlier gwbatch "
                              "that did not record what they computed; start again with --overwrite")
        return
    if before != identity:
        where = f"searches.{name}" if name else "the run"
        raise OutputError(f"--resume: {where} in {run.path} was made with other settings or data, so its checkpoints "
                          "would not be this run's:\n  " + "\n  ".join(identity_changes(before, identity)) +
                          "\nrun with the settings and store it was made with, or start again with --overwrite "
                          "(or use another --out)")


def reusable_checkpoints(run: RunDirectory, name: str, plan: Plan, fingerprint: str, inputs: dict[int, dict],
                         threads: int = 1) -> dict[int, ChunkResult]:
    """The checkpoints of ``plan``'s chunks that still hold, by chunk index: made by this run
    (``fingerprint``) for the chunk's exact span, from the store chunks the store holds now
    (``inputs``, :func:`chunk_inputs`).  A damaged checkpoint is left out with a warning (its chunk
    runs again).  ``threads`` checkpoints are read at once.  The store files under them are checked
    by :func:`verify_reused_inputs`, once for all members."""
    who = f" {name}" if name else ""

    def read(spec):
        try:
            return read_chunk(run.chunks(name), spec, fingerprint)
        except DamagedCheckpoint as exc:
            log.warning("resume%s: checkpoint %s is damaged and chunk %d runs again", who, exc, spec.index)
            return None

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        checkpoints = list(pool.map(read, plan.chunks))
    found, stale = {}, 0
    for spec, checkpoint in zip(plan.chunks, checkpoints):
        if checkpoint is None:
            continue
        result, read_inputs = checkpoint
        if read_inputs != inputs[spec.index]:
            stale += 1
            continue
        found[spec.index] = result
    log.info("resume%s: %d of %d chunks already done%s", who, len(found), len(plan.chunks),
             f"; {stale} run again because store chunks they read were rewritten" if stale else "")
    return found


def verify_reused_inputs(members, threads: int = 1) -> None:
    """Check the store files under every checkpoint taken over against the store's checksums, each
    file once however many members read it (``members``: each with ``meta``, ``inputs`` and
    ``results``); a file that fails is a :class:`~gwbatch.errors.DataError` naming it."""
    stores: dict[str, tuple[StoreMeta, dict[str, set[int]]]] = {}
    for m in members:
        meta, wanted = stores.setdefault(str(m.meta.path), (m.meta, {}))
        for index in m.results:
            for ifo, pairs in m.inputs[index].items():
                wanted.setdefault(ifo, set()).update(k for k, _ in pairs)
    for meta, wanted in stores.values():
        verify_store_chunks(meta, {ifo: sorted(ks) for ifo, ks in wanted.items()}, threads=threads)
