"""PSD epochs of a SPIIR campaign: which bank each chunk's filters are built for.

SPIIR filters are whitened templates built for one PSD (:mod:`gwbatch.spiir.bank`), while each
chunk is whitened with its own PSD estimate.  Over a long span the noise drifts and a bank built
for an earlier PSD loses SNR on later data.  The span is therefore cut into *epochs* of whole
chunks (about ``psd_epoch`` seconds each); each epoch's PSD is measured from its first
``psd_seconds``, and each detector's epoch reuses the bank of an earlier epoch when that bank loses
at most ``psd_tolerance`` of the optimal SNR on it, else it gets a bank of its own.

SNR lost to a PSD mismatch.  A filter built for ``S_b`` and run on data whitened by ``S_d`` sees the
signal ``h / sqrt(S_d)`` through the template ``h / sqrt(S_b)``; its SNR, over the optimal one, is
the match of the two whitened templates::

    m = int |h|^2 / sqrt(S_b S_d) df  /  sqrt( int |h|^2 / S_b df  *  int |h|^2 / S_d df ),

which is 1 only when the PSDs agree up to a constant (Cauchy-Schwarz).  Only the template's
amplitude enters, so the Newtonian stationary-phase amplitude ``|h(f)|^2 ~ f^(-7/3)`` (Cutler &
Flanagan 1994) from the bank's ``f_low`` stands for every template, cut at frequencies that span
the bank (its lowest ISCO frequency up to Nyquist); the loss is the worst over those cuts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from gwbatch.conditioning.psd import PSD

#: Frequency step of the mismatch integrals (Hz): the grid of the effective PSDs banks are built for.
DELTA_F = 0.125
#: Template cut-off frequencies the loss is evaluated at, log-spaced from the bank's lowest ISCO to Nyquist.
CUTOFFS = 16


@dataclass(frozen=True)
class Epoch:
    """Consecutive chunks whose filters share one PSD: the chunks' own samples ``[start, stop)``
    (store samples) and their indices."""

    index: int
    start: int
    stop: int
    chunks: tuple[int, ...]


def plan_epochs(chunks: Sequence, seconds: float | None, sample_rate: float) -> list[Epoch]:
    """The chunks (:class:`gwbatch.tasks.ChunkSpec`, in order) in nearly equal epochs of about
    ``seconds`` (``None``: one epoch): a chunk belongs to the epoch its own samples' midpoint falls in,
    so epochs hold whole chunks; epochs left without a chunk are dropped."""
    if not chunks:
        return []
    start, stop = chunks[0].start, chunks[-1].stop
    n = 1 if seconds is None else max(1, int(round((stop - start) / (seconds * sample_rate))))
    edges = start + (stop - start) * np.arange(n + 1) // n
    which = np.clip(np.searchsorted(edges, [(c.start + c.stop) // 2 for c in chunks], side="right") - 1, 0, n - 1)
    epochs = []
    for k in np.unique(which):
        members = [c for c, w in zip(chunks, which) if w == k]
        epochs.append(Epoch(len(epochs), members[0].start, members[-1].stop, tuple(c.index for c in members)))
    return epochs


def mismatch_loss(built_for: PSD, data: PSD, f_low: float, cutoffs: np.ndarray) -> float:
    """Fraction of the optimal SNR lost by filters built for ``built_for`` on data of PSD ``data``
    (the module docstring's ``1 - m``), worst over the template cut-off frequencies ``cutoffs``;
    symmetric in the two PSDs."""
    cutoffs = np.asarray(cutoffs, dtype=np.float64)
    f = np.arange(int(np.ceil(f_low / DELTA_F)), int(np.floor(cutoffs.max() / DELTA_F)) + 1) * DELTA_F
    if f.size < 2:
        raise ValueError(f"no frequencies between f_low {f_low:g} Hz and the highest cut-off {cutoffs.max():g} Hz")
    w = f ** (-7.0 / 3.0)
    sb, sd = built_for(f), data(f)
    cross, nb, nd = np.cumsum(w / np.sqrt(sb * sd)), np.cumsum(w / sb), np.cumsum(w / sd)
    k = np.clip(np.searchsorted(f, cutoffs, side="right") - 1, 1, f.size - 1)
    return float(np.clip(1.0 - np.min(cross[k] / np.sqrt(nb[k] * nd[k])), 0.0, 1.0))


def template_cutoffs(isco: np.ndarray, sample_rate: float) -> np.ndarray:
    """``CUTOFFS`` cut-off frequencies spanning a bank: from its lowest ISCO frequency (Hz; capped at
    Nyquist) to Nyquist."""
    nyquist = 0.5 * sample_rate
    return np.geomspace(min(float(np.min(isco)), nyquist), nyquist, CUTOFFS)


@dataclass(frozen=True)
class Sharing:
    """One detector's banks over the epochs: ``owner[k]`` is the epoch whose PSD epoch ``k``'s bank
    is built for; ``loss[k]`` the SNR fraction that bank loses on epoch ``k``'s PSD (0 for its own,
    NaN where epoch ``k`` had too little data for a PSD and borrows its nearest neighbour's bank)."""

    owner: tuple[int, ...]
    loss: tuple[float, ...]


def share_banks(psds: Sequence[PSD | None], loss: Callable[[PSD, PSD], float], tolerance: float) -> Sharing:
    """Which epochs get a bank of their own: in order, an epoch reuses the built bank that loses least
    on its PSD when that loss (``loss(built_for, data)``) is at most ``tolerance``, else its own is
    built.  An epoch without a PSD (``None``) takes the bank of the nearest epoch with one, the
    earlier at equal distance."""
    measured = [k for k, p in enumerate(psds) if p is not None]
    if not measured:
        raise ValueError("no epoch has a PSD")
    built: list[int] = []
    owner: list[int | None] = [None] * len(psds)
    lost = [float("nan")] * len(psds)
    for k in measured:
        losses = [loss(psds[j], psds[k]) for j in built]
        best = int(np.argmin(losses)) if losses else -1
        if best >= 0 and losses[best] <= tolerance:
            owner[k], lost[k] = built[best], losses[best]
        else:
            built.append(k)
            owner[k], lost[k] = k, 0.0
    for k in range(len(psds)):
        if owner[k] is None:
            nearest = min(measured, key=lambda j: (abs(j - k), j))
            owner[k] = owner[nearest]
    return Sharing(tuple(int(o) for o in owner), tuple(lost))
