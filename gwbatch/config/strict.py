"""Strict types: one check over every field of the schema, driven by its annotation, before pydantic
converts anything (a boolean or a text is never a number, only ``true``/``false`` is a boolean, a
path is one every file system takes)."""

from __future__ import annotations

import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import annotated_types
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from gwbatch.config.limits import (
    MAX_FREQUENCY,
    MAX_PATH,
    MAX_PATH_COMPONENT,
    MAX_SECONDS,
    MAX_SNR,
    MAX_TEXT,
)
from gwbatch.config.text import short


def _options(annotation: Any) -> list:
    """The types an annotation admits, through ``Annotated``, ``Optional`` and unions (None left out)."""
    if typing.get_origin(annotation) is Annotated:
        return _options(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [t for arg in typing.get_args(annotation) for t in _options(arg)]
    return [] if annotation is type(None) else [annotation]


def _constraints(annotation: Any) -> list:
    """``annotated_types`` constraints inside an annotation (e.g. ``PositiveFloat``'s ``Gt(0)``)."""
    if typing.get_origin(annotation) is Annotated:
        args = typing.get_args(annotation)
        inner = [c for m in args[1:] for c in (getattr(m, "metadata", None) or [m])]
        return inner + _constraints(args[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [c for arg in typing.get_args(annotation) for c in _constraints(arg)]
    return []


def _number(x: float) -> str:
    """A bound as a message shows it (``4294967296``, ``0.5``)."""
    return f"{x:.12g}"


def _range_text(constraints: list) -> str:
    """`` in (0, 1000]``, `` >= 0`` or ``''`` from Gt/Ge/Lt/Le constraints."""
    lo = hi = None
    for c in constraints:
        if isinstance(c, annotated_types.Gt):
            lo = f"({_number(c.gt)}"
        elif isinstance(c, annotated_types.Ge):
            lo = f"[{_number(c.ge)}"
        elif isinstance(c, annotated_types.Lt):
            hi = f"{_number(c.lt)})"
        elif isinstance(c, annotated_types.Le):
            hi = f"{_number(c.le)}]"
    if lo and hi:
        return f" in {lo}, {hi}"
    if lo:
        return f" {'>' if lo[0] == '(' else '>='} {lo[1:]}"
    if hi:
        return f" {'<' if hi[-1] == ')' else '<='} {hi[:-1]}"
    return ""


@dataclass(frozen=True)
class _Expect:
    """What a field takes, for the strict check: ``number``, ``numbers`` (a list), ``bool``, ``path`` or
    ``other``; ``noun`` says it in a message (``a number in (0, 1000]``)."""

    kind: str
    noun: str = ""


def _expectation(field) -> _Expect:
    """The strict check's view of a pydantic field, from its annotation and constraints."""
    options = _options(field.annotation)
    if options and all(t in (int, float) for t in options):
        noun = "a whole number" if all(t is int for t in options) else "a number"
        return _Expect("number", noun + _range_text([*field.metadata, *_constraints(field.annotation)]))
    if options and all(typing.get_origin(t) is list for t in options):
        inner = [a for t in options for a in typing.get_args(t)]
        items = [t for a in inner for t in _options(a)]
        if items and all(t in (int, float) for t in items):
            noun = "whole numbers" if all(t is int for t in items) else "numbers"
            return _Expect("numbers", f"a list of {noun}{_range_text([c for a in inner for c in _constraints(a)])}")
    if options == [bool]:
        return _Expect("bool")
    if options and all(t is Path for t in options):
        return _Expect("path")
    return _Expect("other")


_EXPECTATIONS: dict[tuple[type, str], _Expect] = {}


def _kind_of(value: Any) -> str | None:
    """Why ``value`` is not a number, or None if it is one."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (str, bytes)):
        return "text"
    if isinstance(value, int) and abs(value) > 2**1023:
        return "an integer too large for a number"
    return None


def _strict(value: Any, expect: _Expect) -> Any:
    """``value`` if it suits ``expect``; else a ValueError saying what is allowed."""
    if expect.kind == "number":
        why = _kind_of(value)
        if why:
            raise ValueError(f"must be {expect.noun}, not {why}")
    elif expect.kind == "numbers" and isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            why = _kind_of(item)
            if why:
                raise ValueError(f"must be {expect.noun}; item {i} is {why}")
    elif expect.kind == "bool":
        if not isinstance(value, bool):
            raise ValueError("must be true or false")
    elif expect.kind == "path":
        return check_path(value)
    return value  # other fields: pydantic refuses a boolean for a text, a choice or a section itself


def check_path(value: Any) -> Any:
    """A path that every file system takes: text without control characters, at most
    :data:`MAX_PATH` characters, each component at most :data:`MAX_PATH_COMPONENT` bytes."""
    if isinstance(value, Path):
        value = str(value)
    if not isinstance(value, str):
        return value  # pydantic says it is not a path
    if not value:
        raise ValueError("must be a path, not empty")
    bad = re.search(r"[\x00-\x1f\x7f]", value)
    if bad:
        raise ValueError(f"a path cannot hold the control character {bad.group()!r} (at character {bad.start()})")
    if len(value) > MAX_PATH:
        raise ValueError(f"a path has at most {MAX_PATH} characters, this one {len(value)}")
    for part in value.split("/"):
        size = len(part.encode("utf-8", "surrogatepass"))
        if size > MAX_PATH_COMPONENT:
            raise ValueError(f"each part of a path has at most {MAX_PATH_COMPONENT} bytes; {short(part, 40)} has {size}")
    return value


class StrictModel(BaseModel):
    """Unknown keys refused, NaN and infinities refused, no text over :data:`MAX_TEXT` characters;
    every field checked by :func:`_strict` against its annotation before pydantic converts it."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False,
                              str_max_length=MAX_TEXT)

    @field_validator("*", mode="before")
    @classmethod
    def _strict_types(cls, value: Any, info: ValidationInfo) -> Any:
        key = (cls, info.field_name)
        if key not in _EXPECTATIONS:
            _EXPECTATIONS[key] = _expectation(cls.model_fields[info.field_name])
        return _strict(value, _EXPECTATIONS[key])


Seconds = Annotated[float, Field(gt=0, le=MAX_SECONDS)]
Hertz = Annotated[float, Field(gt=0, le=MAX_FREQUENCY)]
Snr = Annotated[float, Field(gt=0, le=MAX_SNR)]

