"""Loading campaigns and banks: files and ``--set`` overrides read (:mod:`gwbatch.config.yamlfile`),
validated against the schema, and every refusal said in lines that name the key, what is wrong or
allowed, and the value given."""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from pydantic import BaseModel, ValidationError

from gwbatch.config.limits import (
    MAX_ERROR_LINES,
    MAX_TEXT,
    MAX_YAML_DEPTH,
    NAME_PATTERN,
    RESERVED_NAMES,
)
from gwbatch.config.schema import (
    BankConfig,
    ClusterConfig,
    campaign_model,
    search_sections,
    shared_sections_model,
)
from gwbatch.config.text import clip, key_text, short
from gwbatch.config.yamlfile import read_yaml, read_yaml_file
from gwbatch.errors import ConfigError

if TYPE_CHECKING:
    from gwbatch.config.schema import Campaign


def load_bank_config(path: str | Path, overrides: Iterable[str] = ()) -> BankConfig:
    """Read a bank YAML file (the ``bank:`` mapping or the file's top level)."""
    raw = read_yaml_file(path, "bank file")
    source = clip(str(path), 200)
    if isinstance(raw, dict) and set(raw) == {"bank"}:
        raw = raw["bank"]
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: a bank must be a mapping of keys (name, approximant, mass1, ...)")
    for item in overrides:
        apply_override(raw, item)
    try:
        return BankConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source, BankConfig)) from None


#: Sections a member of a multi-search campaign may set for itself; the rest are shared.
MEMBER_SECTIONS = ("search", "conditioning", "coincidence", "background", "plan")
#: A member's name: its outputs go to ``<output>/<member>/`` and its campaign is ``<name>-<member>``.
MAX_MEMBER_NAME = 64


@dataclass(frozen=True)
class Suite:
    """A campaign that runs several searches over the same data (``searches:`` in the YAML).

    Each member is a whole :class:`Campaign`: the shared sections with the member's own
    ``search`` and any of ``conditioning``, ``coincidence``, ``background`` and ``plan`` it sets.
    Its outputs go to ``<output_dir>/<member>/``; the suite writes a combined candidate table,
    manifest and report at the top.
    """

    name: str
    description: str
    members: dict[str, Campaign]
    cluster: ClusterConfig
    backend: str
    output_dir: Path


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def check_member_name(member: Any, source: str) -> None:
    """A member name is a directory of the run: letters, digits, '_', '.', '-' (not first), at most
    :data:`MAX_MEMBER_NAME` characters, and none of :data:`RESERVED_NAMES` (any case)."""
    if not isinstance(member, str) or not re.fullmatch(NAME_PATTERN, member) or len(member) > MAX_MEMBER_NAME:
        raise ConfigError(f"{source}: searches.{key_text(member)}: a member name is letters, digits, '_', '.', '-', "
                          f"not starting with '.', '_' or '-', at most {MAX_MEMBER_NAME} characters (got {short(member)})")
    if member.lower() in {n.lower() for n in RESERVED_NAMES}:
        raise ConfigError(f"{source}: searches.{member}: {member!r} is a name of the run directory's own, where the "
                          f"member's outputs would go; choose another (reserved: {', '.join(RESERVED_NAMES)})")


def validate_suite(raw: dict, source: str = "campaign") -> Suite:
    """A multi-search campaign: ``searches`` maps member names to their own sections."""
    searches = raw.get("searches")
    if "search" in raw:
        raise ConfigError(f"{source}: give either search (one search) or searches (several), not both")
    if not isinstance(searches, dict) or not searches:
        raise ConfigError(f"{source}: searches must map member names to their sections, e.g. "
                          f"searches: {{burst: {{search: {{kind: burst}}}}}}; got {short(searches)}")
    shared = {k: v for k, v in raw.items() if k != "searches"}
    try:
        top = shared_sections_model().model_validate(shared)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from None
    members = {}
    for member, sections in searches.items():
        check_member_name(member, source)
        where = f"searches.{member}"
        if not isinstance(sections, dict) or "search" not in sections:
            raise ConfigError(f"{source}: {where} must be a mapping with at least a search section "
                              f"(got {short(sections)})")
        unknown = [k for k in sections if k not in MEMBER_SECTIONS]
        if unknown:
            raise ConfigError(f"{source}: {where}.{key_text(unknown[0])}: unknown key (allowed here: "
                              f"{', '.join(MEMBER_SECTIONS)}; cluster, backend, data and output are shared by all members)")
        member_raw = _merge(shared, sections)
        member_raw["name"] = f"{top.name}-{member}"
        member_raw["output"] = {"dir": str(top.output_dir / member)}
        members[member] = validate_campaign(member_raw, f"{source} ({where})")
    return Suite(top.name, top.description, members, top.cluster, top.backend, top.output_dir)


def load_run(path: str | Path, overrides: Iterable[str] = ()) -> Campaign | Suite:
    """Read a campaign YAML file with one search (:class:`Campaign`) or several (:class:`Suite`)."""
    raw = _read_campaign_yaml(path, overrides)
    source = clip(str(path), 200)
    return validate_suite(raw, source) if "searches" in raw else validate_campaign(raw, source=source)


def load_campaign(path: str | Path, overrides: Iterable[str] = ()) -> Campaign:
    """Read a one-search campaign YAML file, apply ``key=value`` overrides and validate it."""
    raw = _read_campaign_yaml(path, overrides)
    source = clip(str(path), 200)
    if "searches" in raw:
        raise ConfigError(f"{source} runs several searches (searches:); load it with load_run")
    return validate_campaign(raw, source=source)


def _read_campaign_yaml(path: str | Path, overrides: Iterable[str]) -> dict:
    raw = read_yaml_file(path, "campaign file")
    if not isinstance(raw, dict):
        raise ConfigError(f"{clip(str(path), 200)}: a campaign must be a mapping of keys (name, data, search, ...), "
                          f"got {type(raw).__name__}")
    for item in overrides:
        apply_override(raw, item)
    return raw


def validate_campaign(raw: dict, source: str = "campaign") -> Campaign:
    try:
        return campaign_model().model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from None


def apply_override(raw: dict, item: str) -> None:
    """Apply one ``dotted.key=value`` override; the value is read as YAML (numbers, lists, null) by
    :func:`read_yaml`, with its limits."""
    if "=" not in item:
        raise ConfigError(f"--set expects key=value, got {short(item)}")
    key, _, value = item.partition("=")
    parts = key.strip().split(".")
    if not all(parts) or len(key) > MAX_TEXT or len(parts) > MAX_YAML_DEPTH:
        raise ConfigError(f"--set: bad key {short(key)}")
    shown = key_text(key.strip())
    parsed = read_yaml(value, f"--set {shown}: value {short(value, 80)}") if value.strip() else None
    node = raw
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            prefix = key_text(".".join(parts[: depth + 1]))
            raise ConfigError(f"--set {shown}: {prefix} is a value ({short(child)}), not a section")
        node = child
    node[parts[-1]] = parsed


# Messages


def _is_search_tag(loc: tuple, i: int) -> bool:
    return i > 0 and loc[i - 1] == "search" and loc[i] in search_sections()


#: How pydantic names the member of a union (``int | Literal["auto"]``) an error is about, as the
#: last part of its location: ``constrained-int``, ``literal['auto']``, ``int``...
UNION_MEMBER = re.compile(r"(constrained-)?(int|float|str|bool|none)|literal\[.*\]")


def _union_member_key(err: dict) -> tuple | None:
    """The key of an error about one member of a union (its location less the member's name), else None."""
    loc = tuple(err["loc"])
    if (err["type"] not in ("extra_forbidden", "missing") and loc and isinstance(loc[-1], str)
            and UNION_MEMBER.fullmatch(loc[-1])):
        return loc[:-1]
    return None


def _merged_unions(errors: list[dict]) -> list[dict]:
    """The errors with those of one key's union members (``dm_batch: 0`` fails both ``int >= 1`` and
    ``'auto'``: two errors in a row, each at the key plus the member's name) merged into one error at
    the key, its messages joined by "or"."""
    keys = [_union_member_key(e) for e in errors]
    out: list[dict] = []
    for i, err in enumerate(errors):
        key = keys[i]
        if key is None or not ((i > 0 and keys[i - 1] == key) or (i + 1 < len(errors) and keys[i + 1] == key)):
            out.append(err)
        elif i > 0 and keys[i - 1] == key:  # the next member of the union just added
            out[-1]["msg"] += f", or {err['msg'][0].lower()}{err['msg'][1:]}"
        else:
            out.append({**err, "loc": key})
    return out


def _model_at(loc: tuple, root: type[BaseModel] | None = None) -> type[BaseModel] | None:
    """The model class that owns the last element of a validation-error location (with its search
    kind tag, if any)."""
    model: Any = root or campaign_model()
    for i, part in enumerate(loc[:-1]):
        if _is_search_tag(loc, i):
            model = search_sections()[part]
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or part not in model.model_fields:
            return None
        model = _model_of(model.model_fields[part].annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _model_of(annotation: Any) -> Any:
    for arg in (annotation, *typing.get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return annotation


def format_validation_error(exc: ValidationError, source: str, root: type[BaseModel] | None = None) -> str:
    """The header and one line per bad key (at most :data:`MAX_ERROR_LINES`), each naming the key, what
    is wrong or allowed, and the value it got, cut short."""
    lines = [f"{source}: invalid {'campaign' if root is None else 'bank'}"]
    errors = _merged_unions(exc.errors())
    for err in errors[:MAX_ERROR_LINES]:
        tagged = tuple(err["loc"])
        loc = tuple(p for i, p in enumerate(tagged) if not _is_search_tag(tagged, i))
        key = key_text(".".join(p if isinstance(p, str) else short(p, 40) for p in loc) or "(top level)")
        kind = err["type"]
        if kind == "extra_forbidden":
            owner = _model_at(tagged, root)
            allowed = ", ".join(owner.model_fields) if owner else "see the documentation"
            lines.append(f"  {key}: unknown key (allowed here: {allowed})")
        elif kind == "missing":
            lines.append(f"  {key}: required key is missing")
        elif kind in ("union_tag_invalid", "union_tag_not_found"):  # search.kind
            ctx = err.get("ctx") or {}
            allowed = ", ".join(repr(k) for k in search_sections())
            got = "required key is missing" if kind == "union_tag_not_found" else f"{short(ctx.get('tag'))} is not known"
            lines.append(f"  {key}.kind: {got} (allowed: {allowed})")
        else:
            msg = clip(err["msg"].removeprefix("Value error, "), 300)
            got = err.get("input")
            # a section-wide check (its message names the keys) would otherwise echo the whole section
            shown = "" if isinstance(got, dict) and kind == "value_error" else f" (got {short(got)})"
            lines.append(f"  {key}: {msg}{shown}")
    if len(errors) > MAX_ERROR_LINES:
        lines.append(f"  ... and {len(errors) - MAX_ERROR_LINES} more")
    return "\n".join(lines)


