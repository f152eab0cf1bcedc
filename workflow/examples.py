"""``gwbatch config example``: the example campaigns that ship with the package (the repository's
``configs/``, installed as ``gwbatch/examples``), written out with the bank files they name, in the
repository's layout, so that their relative paths hold."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import yaml

from gwbatch.errors import ConfigError, OutputError
from gwbatch.io.tables import write_bytes

PREFIX = "configs/"  # how the examples name each other's files


def _examples():
    return files("gwbatch") / "examples"


def list_examples() -> list[str]:
    """One line per example campaign: its name and the first line of its description."""
    lines = []
    for entry in sorted(_examples().iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            text = yaml.safe_load(entry.read_text()) or {}
            about = " ".join(str(text.get("description", "")).split())
            lines.append(f"{entry.name[:-5]:<16} {about[:100]}")
    return lines


def _named_files(text: dict) -> list[str]:
    """The files under ``configs/`` a campaign names (its searches' banks) and those the banks name."""
    sections = [text.get("search") or {}] + [m.get("search") or {} for m in (text.get("searches") or {}).values()]
    banks = [s["bank"] for s in sections if isinstance(s.get("bank"), str) and s["bank"].startswith(PREFIX)]
    out = list(banks)
    for bank in banks:
        inner = yaml.safe_load((_examples() / bank[len(PREFIX):]).read_text()) or {}
        if isinstance(inner.get("file"), str) and inner["file"].startswith(PREFIX):
            out.append(inner["file"])
    return out


def write_example(name: str, out: Path, *, overwrite: bool = False) -> list[str]:
    """Write example ``name`` to ``out/configs/NAME.yaml`` with the files it names; return what to
    print (what was written and the store the campaign reads)."""
    names = [line.split()[0] for line in list_examples()]
    if name not in names:  # a name, never a path: "../x" must not read or write outside
        raise ConfigError(f"no example campaign {name!r}; the examples are: {', '.join(names)}")
    source = _examples() / f"{name}.yaml"
    text = yaml.safe_load(source.read_text())
    paths = [f"{PREFIX}{name}.yaml"] + _named_files(text)
    targets = [out / p for p in paths]
    existing = [str(t) for t in targets if t.exists()]
    if existing and not overwrite:
        raise OutputError(f"{', '.join(existing)} exist(s); use --overwrite to replace, or another --out")
    blocked = [str(t) for t in targets if t.is_dir() or any(p.exists() and not p.is_dir() for p in t.parents)]
    if blocked:  # checked before anything is written, so a refusal leaves no campaign without its bank
        raise OutputError(f"cannot write {', '.join(blocked)}: a directory is in the way, or a file where a "
                          "directory must be")
    for path, target in zip(paths, targets):
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_bytes((_examples() / path[len(PREFIX):]).read_bytes(), target)  # replaces a link, never follows it
        except OSError as exc:
            raise OutputError(f"cannot write {target}: {exc.strerror or exc}") from None
    store = (text.get("data") or {}).get("store")
    lines = [f"wrote {t}" for t in targets]
    lines.append(f"the campaign reads the store {store} (relative to {out}); its header says how to make it, "
                 f"then: gwbatch run {paths[0]}" if store else f"then: gwbatch run {paths[0]}")
    return lines
