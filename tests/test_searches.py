"""The search interface (``gwbatch/searches/base.py``): every registered search implements all of it,
the registry and the campaign schema name the same kinds, and what goes to a worker is frozen
facts, never the YAML model."""

from __future__ import annotations

import dataclasses
import pickle
import typing
from pathlib import Path

import numpy as np
import pytest
from pydantic import BaseModel

from gwbatch.config import Campaign, validate_campaign
from gwbatch.searches import REGISTRY, get_search, search_sections
from gwbatch.searches.base import Search

ROOT = Path(__file__).resolve().parents[1]
METHODS = [name for name, value in vars(Search).items() if callable(value) and not name.startswith("_")]


def test_the_registry_is_the_search_modules_and_the_schema_takes_their_sections():
    """Every module of ``gwbatch/searches/`` but the interface and the front end is a search named by
    its file, and the campaign's search union is exactly their sections, each tagged by its kind."""
    modules = {p.stem for p in (ROOT / "gwbatch/searches").glob("*.py")} - {"__init__", "base", "common"}
    assert set(REGISTRY) == modules == {"burst", "pulse", "radio", "spiir"}
    sections = search_sections()
    assert list(sections) == sorted(REGISTRY)
    for kind, section in sections.items():
        assert section.model_fields["kind"].default == kind and isinstance(section.needs_whitening, bool)
    union = typing.get_args(Campaign.model_fields["search"].annotation)
    assert {typing.get_args(a)[0] for a in union} == set(sections.values())
    assert validate_campaign({"name": "c", "data": {"store": "s.zarr"},
                              "search": {"kind": "burst"}}).search.__class__ is sections["burst"]


def test_an_unknown_kind_names_the_registered_ones():
    from gwbatch.errors import ConfigError

    with pytest.raises(ConfigError, match=r"unknown search kind 'radar'; known: burst, pulse, radio, spiir"):
        get_search("radar")


@pytest.mark.parametrize("kind", sorted(REGISTRY))
def test_every_search_implements_the_whole_interface(kind):
    search = get_search(kind)
    assert isinstance(search, Search) and search.kind == kind
    assert isinstance(search.slides_in_chunks, bool) and search.statistic_name
    missing = [m for m in METHODS if m not in vars(type(search))]
    assert missing == [], f"{kind} does not implement {missing}"


def campaign(kind: str, store) -> Campaign:
    search = {"pulse": {"kind": "pulse"},
              "spiir": {"kind": "spiir", "bank": "configs/banks/bbh-small.yaml"},
              "burst": {"kind": "burst", "f_high": 448.0, "sky_order": 4},
              "radio": {"kind": "radio", "dm_max": 300.0}}[kind]
    radio = kind == "radio"
    return validate_campaign({"name": "c", "data": {"store": str(store)}, "search": search,
                              "conditioning": {"whiten": not radio},
                              "coincidence": {"min_ifos": 1 if radio else 2},
                              "background": {"slides": 0 if radio else 4, "slide_step": 1.0}, "plan": {"chunk": 64.0}})


def models_inside(value, seen=None) -> list[str]:
    """Paths to every pydantic model inside ``value`` (dataclasses, tuples, lists, dicts)."""
    if isinstance(value, BaseModel):
        return [type(value).__name__]
    if dataclasses.is_dataclass(value):
        return [f"{f.name}.{p}" for f in dataclasses.fields(value) for p in models_inside(getattr(value, f.name))]
    if isinstance(value, (list, tuple)):
        return [p for v in value for p in models_inside(v)]
    if isinstance(value, dict):
        return [p for v in value.values() for p in models_inside(v)]
    return []


@pytest.mark.parametrize("kind", sorted(REGISTRY))
def test_a_task_carries_frozen_facts_and_no_config_model(kind, small_store, small_filterbank):
    from gwbatch.io.store import read_meta
    from workflow.plan import chunk_task, make_plan

    store = small_filterbank if kind == "radio" else small_store
    meta = read_meta(store)
    plan = make_plan(campaign(kind, store), meta)
    task = chunk_task(plan, meta, plan.chunks[1], "numpy")
    assert models_inside(task) == []
    for part in (task, task.settings, task.conditioning, task.store, task.spec):
        assert dataclasses.is_dataclass(part) and type(part).__dataclass_params__.frozen, type(part)
    # the store chunks it reads (and a zero gap beyond), with their checksums, and no other
    reads = meta.chunk_range(task.spec.read_start - plan.zero_gap, task.spec.read_stop + plan.zero_gap)
    assert task.store.first == reads.start and task.store.checksums.shape == (2, len(reads))
    assert np.array_equal(task.store.checksums, meta.checksums[:, reads.start:reads.stop])
    assert len(pickle.dumps(task)) < 20_000
