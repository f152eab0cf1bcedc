"""Reading YAML: one reader for campaign files, bank files and ``--set`` values, within limits
checked before anything is built: size, strict UTF-8 without control characters, nesting depth,
values once aliases are expanded (a "billion laughs" file stops in milliseconds), safe tags only
and no key given twice."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from gwbatch.config.limits import MAX_YAML_BYTES, MAX_YAML_DEPTH, MAX_YAML_NODES
from gwbatch.config.text import clip, short
from gwbatch.errors import ConfigError

#: Characters YAML allows (its reader's own rule); anything else is a control character or not text.
_NON_PRINTABLE = re.compile("[^\x09\x0A\x0D\x20-\x7E\x85\xA0-\uD7FF\uE000-\uFFFD\U00010000-\U0010FFFF]")
#: Byte-order marks of encodings that are not UTF-8 (UTF-32 first: its mark starts like UTF-16's).
_BOMS = {b"\xff\xfe\x00\x00": "UTF-32", b"\x00\x00\xfe\xff": "UTF-32", b"\xff\xfe": "UTF-16", b"\xfe\xff": "UTF-16"}
#: libyaml's parser where PyYAML has it (fast, and like PyYAML's own, iterative).
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Refused(Exception):
    """A YAML text the reader refuses; the message is one line, without the source."""


class _Loader(_FAST_LOADER):
    """Safe tags only; a key given twice in one mapping is refused (YAML would silently keep the
    last); a value that cannot be built (a date out of range, an integer of more than 4300 digits)
    is a YAML error at its line; ``1e3`` is a number as in YAML 1.2 (YAML 1.1 reads it as text,
    which strict types would then refuse)."""

    def construct_mapping(self, node, deep=False):
        _no_duplicate_keys(self, node)
        return super().construct_mapping(node, deep=deep)

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError) as exc:
            raise yaml.constructor.ConstructorError(None, None, clip(str(exc), 120), node.start_mark) from None


_Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$"),
                              list("-+0123456789."))


def _no_duplicate_keys(loader: _Loader, node) -> None:
    """Refuse a mapping node that gives a key twice (``<<`` merge keys aside: explicit keys override them)."""
    seen: dict = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node)
        try:
            first = seen.setdefault(key, key_node)
        except TypeError:  # unhashable: the constructor refuses it
            continue
        if first is not key_node:
            raise _Refused(f"key {short(key, 80)} is given twice in one mapping (lines {first.start_mark.line + 1} "
                           f"and {key_node.start_mark.line + 1}); keep one")


def _decode(data: bytes) -> str:
    """Strict UTF-8 (a UTF-8 byte-order mark is dropped); otherwise say where and what to do."""
    for bom, name in _BOMS.items():
        if data.startswith(bom):
            raise _Refused(f"the file is {name} (it starts with a {name} byte-order mark); save it as UTF-8")
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        guess = "UTF-16 or UTF-32 without a byte-order mark" if data.count(b"\x00") * 4 > len(data) else "Latin-1?"
        raise _Refused(f"not UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start} (line {line}) is not UTF-8 "
                       f"text ({guess}); save the file as UTF-8") from None


def _check_characters(text: str) -> None:
    """Refuse NUL and other control characters (and lone surrogates), naming the line and column."""
    bad = _NON_PRINTABLE.search(text)
    if bad:
        at = bad.start()
        line, column = text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at)
        hint = " (the file looks like UTF-16: save it as UTF-8)" if text.count("\x00") * 4 > len(text) else ""
        raise _Refused(f"line {line}, column {column}: control character U+{ord(bad.group()):04X} is not allowed in "
                       f"a campaign; remove it{hint}")


def _check_structure(text: str) -> None:
    """Refuse, from the parser's events alone (before anything is built, and without recursion),
    nesting deeper than :data:`MAX_YAML_DEPTH` and more than :data:`MAX_YAML_NODES` values once
    aliases are expanded (an alias counts as the whole node it names: a "billion laughs" file
    stops here after a few thousand events)."""
    total, sizes, stack = 0, {}, []  # values so far; expanded size per anchor; open collections (anchor, start)
    try:
        for event in yaml.parse(text, Loader=_FAST_LOADER):
            total = _count_event(event, total, sizes, stack)
    except yaml.YAMLError as exc:  # libyaml's scanner reads ahead and stops flow nesting at 1000 levels itself
        if "maximum nesting depth" not in str(exc):
            raise
        mark = getattr(exc, "problem_mark", None)
        raise _Refused(f"line {mark.line + 1 if mark else 1}: nested more than {MAX_YAML_DEPTH} levels deep "
                       "(a campaign needs a few)") from None


def _count_event(event, total: int, sizes: dict, stack: list) -> int:
    """One parser event of :func:`_check_structure`: the values counted after it (``sizes``: expanded
    size of each complete anchor; ``stack``: open collections as (anchor, count at their start))."""
    line = event.start_mark.line + 1 if event.start_mark else 0
    if isinstance(event, yaml.AliasEvent):
        if event.anchor not in sizes:
            raise _Refused(f"line {line}: alias *{clip(event.anchor, 40)} names no complete node before it "
                           "(an undefined or recursive alias)")
        total += sizes[event.anchor]
    elif isinstance(event, yaml.CollectionStartEvent):
        total += 1
        sizes.pop(event.anchor, None)
        stack.append((event.anchor, total - 1))
        if len(stack) > MAX_YAML_DEPTH:
            raise _Refused(f"line {line}: nested more than {MAX_YAML_DEPTH} levels deep (a campaign needs a few)")
    elif isinstance(event, yaml.CollectionEndEvent):
        anchor, start = stack.pop()
        if anchor is not None:
            sizes[anchor] = total - start
    elif isinstance(event, yaml.ScalarEvent):
        total += 1
        if event.anchor is not None:
            sizes[event.anchor] = 1
    if total > MAX_YAML_NODES:
        raise _Refused(f"line {line}: more than {MAX_YAML_NODES} values once aliases are expanded (a campaign "
                       "has a few hundred); is it an alias bomb?")
    return total


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """One line: where the YAML error is and what it is."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    what = " ".join(str(p) for p in (getattr(exc, "context", None), getattr(exc, "problem", None)) if p) or str(exc)
    return clip(f"{where}: {' '.join(what.split())}", 300)


def read_yaml(text: str | bytes, source: str) -> Any:
    """The value of one YAML document (bytes: a file's content; str: a ``--set`` value), read within
    every limit of this module; otherwise a one-line :class:`ConfigError` that starts with ``source``."""
    try:
        if len(text) > MAX_YAML_BYTES:
            raise _Refused(f"larger than {MAX_YAML_BYTES} bytes (a campaign is a few kB)")
        if isinstance(text, bytes):
            text = _decode(text)
        _check_characters(text)
        _check_structure(text)
        return yaml.load(text, Loader=_Loader)
    except _Refused as exc:
        raise ConfigError(f"{source}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML{_yaml_problem(exc)}") from None


def read_yaml_file(path: str | Path, what: str) -> Any:
    """:func:`read_yaml` of a file; ``what`` names it in messages (``campaign file``, ``bank file``)."""
    name = clip(str(path), 200)
    try:
        with open(path, "rb") as stream:
            data = stream.read(MAX_YAML_BYTES + 1)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {what} {name}: {getattr(exc, 'strerror', None) or clip(str(exc), 100)}") from None
    return read_yaml(data, name)

