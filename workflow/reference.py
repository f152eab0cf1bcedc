"""``background.reference``: the finished run whose background this run's candidates are measured
against (:mod:`gwbatch.background.reference`).  Checked when the campaign is planned, read when it
is reduced."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from gwbatch.background.reference import ReferenceBackground
from gwbatch.errors import ConfigError

#: Sections a reference run must share with this one: they decide what is ranked, and how.
SHARED = ("search", "coincidence", "conditioning")


def _manifest(path: Path) -> dict:
    where = f"background.reference ({path})"
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except FileNotFoundError:
        raise ConfigError(f"{where} is not a finished run: no manifest.json there") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{where}: cannot read its manifest.json: {exc}") from None
    if manifest.get("members"):
        names = ", ".join(m.get("name", "?") for m in manifest["members"])
        raise ConfigError(f"{where} is a campaign of several searches; name one of its searches' directories "
                          f"({names})")
    if manifest.get("status") != "complete":
        raise ConfigError(f"{where}: the run's status is {manifest.get('status')!r}; a reference must be complete")
    return manifest


def check_reference(path: str, campaign, ifos: tuple[str, ...]) -> str:
    """The reference run's path, after checking that it is a complete run of the same search over the
    same detectors, with the same search, coincidence and conditioning sections; ConfigError naming
    what differs otherwise."""
    root = Path(path)
    manifest = _manifest(root)
    ours = campaign.model_dump(mode="json")
    theirs = manifest.get("campaign", {})
    for key in SHARED:
        if theirs.get(key) != ours.get(key):
            diff = sorted(k for k in set(ours.get(key) or {}) | set(theirs.get(key) or {})
                          if (ours.get(key) or {}).get(k) != (theirs.get(key) or {}).get(k))
            raise ConfigError(f"background.reference ({path}) ran with another {key} section (differs in "
                              f"{', '.join(diff) or key}); its background ranks events differently")
    their_ifos = tuple(manifest.get("plan", {}).get("ifos") or ())
    if their_ifos != tuple(ifos):
        raise ConfigError(f"background.reference ({path}) analysed {', '.join(their_ifos) or 'no detectors'}, "
                          f"this campaign {', '.join(ifos)}")
    if not (root / "background.parquet").exists():
        raise ConfigError(f"background.reference ({path}): no background.parquet")
    return str(root)


def read_reference(path: str, rank_column: str) -> ReferenceBackground:
    """The reference run's background: base and deep slides' ranks and livetimes, and the deep cut."""
    root = Path(path)
    manifest = _manifest(root)
    events = pd.read_parquet(root / "background.parquet")
    n_slides = int(manifest["background"]["slides"])
    live = manifest["livetime"]
    base = events["slide"].to_numpy() <= n_slides
    ranks = events[rank_column].to_numpy(np.float64)
    deep_time = float(live.get("deep_slides_seconds") or 0.0)
    # the manifest's null cut: no deep slides, or deep slides that kept every event (a cut of -inf)
    cut = manifest["background"].get("deep_cut")
    return ReferenceBackground(str(root), ranks[base], float(np.sum(live["per_slide_seconds"][1:])), ranks[~base],
                               deep_time, float(cut) if cut is not None else -np.inf)
