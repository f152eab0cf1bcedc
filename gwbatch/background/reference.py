"""FARs against the background of another run: an injection campaign measured against noise alone.

A campaign with many loud injections puts their time-shifted copies in its own background: a loud
injection slid against the other detector's noise makes loud background events, and hierarchical
removal takes them out only for candidates louder than all that remains (docs/decisions.md, "Injection
FARs come from the injection run's own background").  PyCBC's practice for injection campaigns is to
rank each injection run's candidates against the background of the same search over the data without
injections.  ``background.reference`` names such a run; the candidates' FARs are then counted (or
extrapolated, or bounded) against its background events and livetime, deep slides and cut included,
with nothing removed (the reference's events share no trigger with this run's candidates).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gwbatch.background.significance import DeepBackground, FarResult, assign_far

_NO_LINKS = pd.DataFrame({"fg": np.zeros(0, np.int64), "bg": np.zeros(0, np.int64)})


@dataclass(frozen=True)
class ReferenceBackground:
    """A finished run's background: the ranks of its base slides' events and their livetime (s), and
    of its deep slides' events (all at or above ``cut``) and theirs."""

    source: str
    ranks: np.ndarray
    time: float
    deep_ranks: np.ndarray
    deep_time: float
    cut: float

    @property
    def background_time(self) -> float:
        return self.time + self.deep_time

    def summary(self) -> dict:
        """The manifest's ``background.reference`` (a cut of -inf, every deep event kept, is null there
        as in the reference's own manifest)."""
        return {"run": self.source, "background_events": int(self.ranks.size + self.deep_ranks.size),
                "background_seconds": self.background_time,
                "deep_cut": self.cut if self.deep_time > 0 and np.isfinite(self.cut) else None}


def reference_far(stat: np.ndarray, reference: ReferenceBackground, *, tail: int) -> FarResult:
    """FARs of candidates ranked ``stat`` against ``reference`` (tail fit as
    :func:`gwbatch.background.significance.assign_far`'s, no hierarchical removal): the inclusive
    and exclusive FARs are the same."""
    deep = (DeepBackground(reference.deep_ranks, _NO_LINKS, reference.deep_time, reference.cut)
            if reference.deep_time > 0 else None)
    return assign_far(np.asarray(stat, dtype=np.float64), reference.ranks, _NO_LINKS, reference.time, tail=tail,
                      hierarchical=False, deep=deep)
