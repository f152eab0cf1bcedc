"""Values and keys as an error message shows them: cut short, and never expanded further than shown."""

from __future__ import annotations

from typing import Any, Iterable


def clip(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters."""
    return text if len(text) <= limit else text[: limit - 4] + " ..."


def key_text(key: Any) -> str:
    """A key as a message shows it: quoted when it holds control characters, cut to 120 characters."""
    text = key if isinstance(key, str) else short(key, 80)
    return clip(text if text.isprintable() else repr(text), 120)


class _Lit(str):
    """Punctuation of :func:`short`'s output (not a value to quote)."""


def _items(value) -> Iterable:
    """The pieces of a container's repr, lazily: punctuation and the values inside."""
    if isinstance(value, dict):
        yield _Lit("{")
        for i, (k, v) in enumerate(value.items()):
            yield from ((_Lit(", "),) if i else ())
            yield k
            yield _Lit(": ")
            yield v
        yield _Lit("}")
        return
    opening, closing = {list: ("[", "]"), tuple: ("(", ")"), set: ("{", "}"), frozenset: ("frozenset({", "})")}.get(
        type(value), ("[", "]"))
    yield _Lit(opening)
    for i, v in enumerate(value):
        yield from ((_Lit(", "),) if i else ())
        yield v
    yield _Lit("," + closing if isinstance(value, tuple) and len(value) == 1 else closing)


def _scalar_repr(value: Any, limit: int) -> str:
    """``repr`` of a non-container, never longer than about ``limit`` (huge integers and texts are cut first)."""
    if isinstance(value, str):
        return repr(value[: limit + 1])
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * limit:
        return f"<integer of {value.bit_length()} bits>"
    try:
        return repr(value)[: limit + 1]
    except Exception:  # a value whose repr fails is shown by its type
        return f"<{type(value).__name__}>"


_END = object()


def short(value: Any, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters, built piece by piece and stopped at the limit:
    never expands more of a value (shared or recursive parts included) than it shows."""
    pieces, size, stack = [], 0, [iter((value,))]
    while stack and size <= limit:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
            continue
        if isinstance(item, _Lit):
            piece = str(item)
        elif isinstance(item, (dict, list, tuple)) or (isinstance(item, (set, frozenset)) and item):
            stack.append(_items(item))
            continue
        else:
            piece = _scalar_repr(item, limit)
        pieces.append(piece)
        size += len(piece)
    text = "".join(pieces)
    return text if not stack and len(text) <= limit else clip(text, limit)
