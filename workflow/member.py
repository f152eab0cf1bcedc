"""A run's searches as the workflow carries them: each member's campaign, plan, store and chunk
results (:class:`Member`), and what a run gives back (:class:`RunSummary`, :class:`SuiteSummary`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from gwbatch.config import Campaign
from gwbatch.io.store import StoreMeta
from gwbatch.tasks import ChunkResult, ChunkSpec
from workflow.plan import Plan
from workflow.reduce import Reduced


@dataclass
class RunSummary:
    out: Path
    plan: Plan
    reduced: Reduced
    manifest: dict
    figures: dict = field(default_factory=dict)  # the report's series and skymaps


@dataclass
class SuiteSummary:
    """A multi-search campaign's outputs: the combined ones at ``out`` and each member's own."""

    out: Path
    members: dict[str, RunSummary]
    candidates: pd.DataFrame
    manifest: dict


@dataclass
class Member:
    """One search of a run: its campaign, plan, output directory and chunk results so far."""

    name: str  # "" for a one-search campaign
    campaign: Campaign
    meta: StoreMeta
    plan: Plan
    outdir: Path
    identity: dict  # what its chunks compute (workflow.resume.run_identity), kept in run.json
    fingerprint: str
    inputs: dict[int, dict] = field(default_factory=dict)  # per chunk: the store chunks' checksums it reads
    results: dict[int, ChunkResult] = field(default_factory=dict)
    status: dict[int, str] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)  # chunks that failed in this invocation
    resources: dict = field(default_factory=dict)

    @property
    def todo(self) -> list[ChunkSpec]:
        return [spec for spec in self.plan.chunks if spec.index not in self.results]
