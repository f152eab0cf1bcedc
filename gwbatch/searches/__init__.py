"""The searches, by ``search.kind``: ``gwbatch/searches/<kind>.py`` holds one search whole: its
campaign section (a pydantic model, ``section``), the class that implements the search interface
(:class:`gwbatch.searches.base.Search`) and ``SEARCH``, that class.

The registry is this package's modules: a new search is a new module here and its kernel room under
``gwbatch/``.  The campaign schema takes its ``search`` union from :func:`search_sections`, and the
workflow asks only the interface, so neither changes (``tests/test_searches.py`` checks each
module).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from gwbatch.errors import ConfigError

#: Modules of this package that are not searches: the interface and the shared front end.
NOT_SEARCHES = frozenset({"base", "common"})


def _kinds() -> tuple[str, ...]:
    """The search modules of this package, in alphabetical order."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__)
                        if not m.ispkg and m.name not in NOT_SEARCHES and not m.name.startswith("_")))


#: The registered kinds: one module each, ``gwbatch.searches.<kind>`` (imported on first use: a
#: search pulls in its kernels and their compilers).
REGISTRY: dict[str, str] = {kind: f"{__name__}.{kind}" for kind in _kinds()}


@functools.cache
def search_class(kind: str) -> type:
    """The class that implements the search registered as ``kind``; an unknown kind is a
    :class:`ConfigError` naming the known ones."""
    try:
        module = importlib.import_module(REGISTRY[kind])
    except KeyError:
        raise ConfigError(f"unknown search kind {kind!r}; known: {', '.join(REGISTRY)}") from None
    cls = getattr(module, "SEARCH", None)
    if cls is None or getattr(cls, "kind", None) != kind:
        raise AssertionError(f"{module.__name__} must set SEARCH to its search class, whose kind is {kind!r}")
    return cls


@functools.cache
def get_search(kind: str):
    """The search registered as ``kind`` (one instance per process)."""
    return search_class(kind)()


def search_sections() -> dict:
    """Each registered search's campaign section by kind: the schema's ``search`` union."""
    return {kind: search_class(kind).section for kind in REGISTRY}
