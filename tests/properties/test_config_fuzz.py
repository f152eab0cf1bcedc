"""Fuzzing the campaign schema, ``--set`` and the CLI (issue 8): every invalid campaign is refused with
a :class:`ConfigError` whose message names the key and the value it got; nothing else escapes.

Keys are drawn from the schema itself (every field of every section, each search kind's fields) and
from made-up names; values from every YAML type, including NaN, infinities, huge integers, empty
and nested containers.  About 11,000 cases in all (the ``max_examples`` below).
"""

from __future__ import annotations

import copy
import math
import types
import typing
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from gwbatch.config import Campaign, apply_override, validate_campaign, validate_suite
from gwbatch.config.text import key_text
from gwbatch.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
DEMO = yaml.safe_load((ROOT / "configs/demo.yaml").read_text())
ONE_DAY = yaml.safe_load((ROOT / "configs/one-day.yaml").read_text())
SEARCHES = {
    "pulse": DEMO["search"],
    "burst": {"kind": "burst", "f_low": 32.0, "f_high": 1024.0, "resolutions": [64.0, 32.0], "sky_order": 4},
    "spiir": {"kind": "spiir", "bank": "configs/banks/bns-day.yaml", "threshold": 5.5},
}


def _models(annotation) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through Optional, unions and Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def key_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted key of ``model``, sections and leaves."""
    paths = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        paths.append(path)
        for sub in _models(field.annotation):
            paths += key_paths(sub, f"{path}.")
    return sorted(set(paths))


KEYS = key_paths(Campaign)
assert {"search.kind", "search.coherent.sky_order", "cluster.jobqueue.memory", "plan.chunk"} <= set(KEYS)

names = st.text(st.characters(codec="ascii", categories=("L", "N", "Pc")), min_size=1, max_size=12)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0, -1, 0.0, -0.0, 1e-300, 1e300, "", "auto"]),
    st.text(max_size=16),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(names, inner, max_size=3),
                      max_leaves=8)
keys = st.one_of(st.sampled_from(KEYS), st.builds(lambda k, extra: f"{k}.{extra}", st.sampled_from(KEYS), names), names)


def set_key(raw: dict, dotted: str, value) -> None:
    """Put ``value`` at ``dotted`` in ``raw``, replacing whatever is in the way by mappings."""
    node = raw
    parts = dotted.split(".")
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value


def assert_names_the_key(message: str, dotted: str) -> None:
    """The error names the changed key, the section that holds it or a key inside it, on a line of
    its own."""
    parts = dotted.split(".")
    prefixes = {".".join(parts[: k + 1]) for k in range(len(parts))}
    prefixes |= {repr(p) for p in prefixes if not p.isprintable()}  # shown quoted
    prefixes |= {key_text(p) for p in prefixes}  # as messages show keys: quoted, a long one cut to 120 characters
    lines = message.splitlines()
    assert len(lines) >= 2 and "invalid campaign" in lines[0], message
    named = [ln for ln in lines[1:] if ln.startswith("  ")
             and (any(ln[2:].startswith(f"{k}: ") for k in prefixes) or ln[2:].startswith(dotted + ".")
                  # a check across a section or the campaign names the keys in its message
                  or (ln[2:].split(":")[0] in prefixes | {"(top level)"} and f"{dotted}" in ln[2:]))]
    assert all(len(ln) < 400 for ln in lines), message  # one paragraph, not a dump of the campaign
    assert named, f"no line names {dotted!r}:\n{message}"
    assert "Traceback" not in message


def check(raw: dict, dotted: str) -> None:
    try:
        validate_campaign(raw, source="fuzz.yaml")
    except ConfigError as exc:
        assert_names_the_key(str(exc), dotted)


@settings(max_examples=7000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(search=st.sampled_from(sorted(SEARCHES)), key=keys, value=values)
def test_any_key_any_value(search, key, value):
    """One key of a valid campaign set to anything: valid, or refused naming that key."""
    raw = copy.deepcopy(DEMO)
    raw["search"] = copy.deepcopy(SEARCHES[search])
    set_key(raw, key, value)
    check(raw, key)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(member=st.sampled_from([None, *sorted(ONE_DAY["searches"])]), key=keys, value=values)
def test_several_searches(member, key, value):
    """A key of a multi-search campaign, shared or one member's own: refused naming the member and the key."""
    raw = copy.deepcopy(ONE_DAY)
    dotted = key if member is None else f"searches.{member}.{key}"
    set_key(raw, dotted, value)
    try:
        validate_suite(raw, "fuzz.yaml")
    except ConfigError as exc:
        message = str(exc)
        header = message.splitlines()[0]
        if header.startswith("fuzz.yaml (searches."):  # one member's merged campaign: keys relative to it
            name = header.split("(searches.")[1].split(")")[0]
            assert member in (None, name), message
            assert_names_the_key(message, key)
        else:
            assert "Traceback" not in message and any(part in message for part in dotted.split(".")), message


@settings(max_examples=1500, deadline=None)
@given(key=st.sampled_from(KEYS))
def test_any_key_removed(key):
    raw = copy.deepcopy(DEMO)
    node, parts = raw, key.split(".")
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(parts[-1], None)
    check(raw, key)


override_text = st.one_of(
    st.builds(lambda k, v: f"{k}={v}", keys, st.text(max_size=20)),
    st.builds(lambda k, v: f"{k}={yaml.safe_dump(v, default_flow_style=True).strip()}", keys, values),
    st.text(max_size=30),
)


@settings(max_examples=2500, deadline=None)
@given(item=override_text)
def test_set_overrides(item):
    """``--set`` text of any shape: applied and validated, or refused naming the key or the text."""
    raw = copy.deepcopy(DEMO)
    try:
        apply_override(raw, item)
    except ConfigError as exc:
        assert "--set" in str(exc) and "Traceback" not in str(exc)
        return
    key = item.partition("=")[0].strip()
    check(raw, key)


# The CLI end to end, in this process: exit status and stderr, never a traceback.

@pytest.fixture(scope="module")
def cli_store(tmp_path_factory) -> Path:
    from gwbatch.simulate import simulate_store

    path = tmp_path_factory.mktemp("fuzz") / "s.zarr"
    return simulate_store(path, ifos=("H1", "L1"), duration=64, sample_rate=256, seed=1)


def test_cli_refuses_bad_overrides(cli_store, tmp_path_factory):
    from workflow.cli import main

    config = tmp_path_factory.mktemp("fuzz-cli") / "c.yaml"
    config.write_text(yaml.safe_dump({**DEMO, "data": {"store": str(cli_store)}, "plan": {"chunk": 32.0}}))

    @settings(max_examples=400, deadline=None)
    @given(item=override_text)
    def run(item):
        stderr = []
        with _capture(stderr):
            try:
                status = main(["run", str(config), "--dry-run", "--set", item])
            except SystemExit as exc:  # argparse itself: status 2 and its usage line
                status = exc.code
        text = "".join(stderr)
        assert "Traceback" not in text
        if status != 0:
            assert status in (2, 3) and ("gwbatch: error:" in text or "error: argument" in text), (item, status, text)

    run()


class _capture:
    """Collect what is written to sys.stderr."""

    def __init__(self, sink: list):
        self.sink = sink

    def __enter__(self):
        import sys

        self.saved = sys.stderr
        sys.stderr = types.SimpleNamespace(write=self.sink.append, flush=lambda: None)

    def __exit__(self, *exc):
        import sys

        sys.stderr = self.saved
        return False


def test_nan_and_infinity_refused_where_a_number_is_measured():
    """Non-finite numbers are never accepted silently for the plan's chunk or a threshold."""
    for key in ("plan.chunk", "search.threshold", "background.slide_step", "coincidence.window"):
        for bad in (math.nan, math.inf, -math.inf):
            raw = copy.deepcopy(DEMO)
            set_key(raw, key, bad)
            with pytest.raises(ConfigError) as exc:
                validate_campaign(raw, source="fuzz.yaml")
            assert_names_the_key(str(exc.value), key)
