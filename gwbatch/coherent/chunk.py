"""The coherent stage of one chunk: per-detector SPIIR triggers to network events with trials.

As gstlal-spiir's post-processing (seed 000 §III; ALGORITHMS.md §3), every detector takes its turn
as pivot:

1. **Pivot candidates**: each detector's triggers, the loudest of any template within the search's
   cluster window (:func:`pivot_candidates`).
2. **SNR series**: the candidates' templates are filtered again in every detector, masked where the
   data are not valid and aligned on the merger (sample ``k`` of every series is merger time ``k``,
   whatever each detector's filter delay; :func:`aligned_snr`).
3. **Coherent events** (:func:`gwbatch.coherent.stage.coherent_events`): the sky maximum of the
   coherent SNR for zero lag and ``K`` time-shifted trials, with null SNR, chi-squared and rank.
   In trial ``k`` detector ``j`` is read ``k * step * (j - pivot)`` samples from the pivot, wrapped
   within the chunk (its own samples plus a margin for arrival delays): relative to the first
   detector, detector ``j`` moves by ``k * step * j``, the shared time-slide convention
   (:mod:`gwbatch.background.slides`), so trial ``k`` of every pivot is one time slide of the chunk.
4. **Network consistency and clustering**: an event needs ``min_ifos`` detectors with SNR at
   least ``ifo_snr`` (the pivot is one): with three detectors the sky maximum can put almost any
   single-detector excess in the signal space, so without this one detector's glitch, or a loud
   signal in one detector shifted against noise in the others, would be a network event.  Then,
   per trial, the highest-ranked event within the cluster window of the first detector's read time
   (the same instant for every pivot in a given slide) is kept.
5. **Skymaps** for zero-lag events ranked at least the threshold
   (:func:`gwbatch.sky.skymap.posterior` over the whole grid).
6. **Deep trials** (``n_deep``): trials ``K + 1 ... K + n_deep``, each kept only where it reaches
   the chunk's cut (:func:`gwbatch.background.trials.deep_trial_cut` of the base trials seen so
   far, which only ever rises, also to the ``deep_tail + 1``-th loudest deep event so far that is
   not a louder zero-lag event's own: a chunk keeps about as many deep events as base ones in the
   tail).  The rank never exceeds the coherent SNR, nor that the network SNR, so each other
   detector's largest ``|z|^2`` over its spread of arrival offsets (a few samples per pair,
   :func:`gwbatch.coherent.statistic.spread_max`) finds the (candidate, trial) pairs that may
   reach the cut (:func:`gwbatch.coherent.statistic.trials_reaching`), and the sky maximum and
   steps 2-3 run on those alone, with the kernel of the base trials.  Tens of thousands of trials
   per candidate then cost a few reads each, and no memory beyond the batch's series.  The chunk
   reports the highest cut it applied: above it its deep events are complete.

Trial livetimes come from the detectors' analysed segments on the chunk's own samples, shifted
the same way (:func:`gwbatch.background.slides.slide_livetimes`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gwbatch._xp import array_namespace, to_host
from gwbatch.background.slides import trial_livetimes
from gwbatch.background.trials import deep_trial_cut, risen_cut
from gwbatch.candidates.coincidence import cluster_in_time, cluster_per_key
from gwbatch.coherent.network import coherent_sky_table
from gwbatch.coherent.stage import NULL_FREE, events_at
from gwbatch.coherent.statistic import BOUND_SLACK, at_directions, sky_argmax, trials_reaching
from gwbatch.sky.grid import sky_grid
from gwbatch.sky.network import network_geometry
from gwbatch.sky.skymap import posterior
from gwbatch.spiir.bank import FilterBank
from gwbatch.spiir.filtering import filter_templates
from gwbatch.spiir.triggers import PASS_BYTES

#: Bytes of merger-aligned SNR series held at once at least (templates are taken in batches to fit).
SERIES_BUDGET = {"numpy": 512 * 2**20, "cupy": 4 * 2**30}
#: Bytes per template and sample of one detector's filtering for the stage beside the series held:
#: the top-rate output (complex64) and the rung below it (half the samples).
FILTER_SCRATCH = 12

#: Deep (candidate, trial) pairs evaluated per round (:func:`_deep_trials`): the largest network-SNR
#: bounds first, so that the cut rises before the many quiet pairs are reached.
DEEP_PAIRS = 1 << 17


@dataclass(frozen=True)
class CoherentSettings:
    n_trials: int
    step: int  # samples
    cluster: int  # samples: clustering window of network events
    candidate_window: float  # samples: clustering of pivot triggers over templates
    sky_order: int
    skymap_threshold: float
    temperature: float  # skymap width (gwbatch.sky.skymap.posterior)
    ifo_snr: float  # an event needs min_ifos detectors at least this loud
    min_ifos: int
    batch: int  # most templates per pass
    n_deep: int = 0  # deep trials after the n_trials base ones (events kept above the chunk's cut)
    deep_tail: int = 100  # the chunk's cut: the (deep_tail + 1)-th loudest base trial event


@dataclass(frozen=True)
class ChunkNetwork:
    """One chunk's detectors: filter inputs and validity (backend arrays over the read span), banks,
    where the read span starts and which of its samples the chunk owns, and the geometry time."""

    ifos: tuple[str, ...]
    x: list
    valid: list
    banks: list[FilterBank]
    read_start: int
    own: tuple[int, int]
    sample_rate: float
    gps: float


def pivot_candidates(triggers: pd.DataFrame, ifos: tuple[str, ...], window: float) -> pd.DataFrame:
    """Each detector's triggers that are the loudest of any template within ``window`` samples of
    their peak: columns ``pivot`` (detector index), ``template``, ``merger`` (store sample), ``snr``."""
    out = []
    for j, ifo in enumerate(ifos):
        df = triggers[triggers["ifo"] == ifo]
        if df.empty:
            continue
        keep = cluster_in_time(df["sample"].to_numpy(np.float64), df["snr"].to_numpy(np.float64), window)
        out.append(pd.DataFrame({"pivot": j, "template": df["template"].to_numpy(np.int64)[keep],
                                 "merger": df["merger"].to_numpy(np.int64)[keep],
                                 "snr": df["snr"].to_numpy(np.float64)[keep]}))
    if not out:
        return pd.DataFrame({"pivot": np.zeros(0, np.int64), "template": np.zeros(0, np.int64),
                             "merger": np.zeros(0, np.int64), "snr": np.zeros(0)})
    return pd.concat(out, ignore_index=True)


def aligned_snr(x, valid, bank: FilterBank, templates: np.ndarray, origin: int = 0, out=None):
    """Complex SNR series of ``templates`` (``(B, N)`` complex64 on the backend of ``x``, written
    into ``out`` when given), zero where the data are not valid, shifted so that sample ``k`` is
    merger time ``k`` (zero past the ends)."""
    xp = array_namespace(x)
    part = bank.subset(np.asarray(templates, dtype=np.int64))
    z = filter_templates(x, part, origin)
    z *= valid.astype(xp.float32)[None, :]
    n = z.shape[1]
    out = xp.empty_like(z) if out is None else out
    out[...] = 0
    for row, delay in enumerate(part.merger_delay.tolist()):
        if delay >= 0:
            out[row, : n - delay] = z[row, delay:]
        else:
            out[row, -delay:] = z[row, : n + delay]
    return out


def coherent_batch(batch: int, n_det: int, n: int, backend: str) -> int:
    """Templates per pass of the coherent stage: at most ``batch``, and as many as fit in the memory
    the task's filter pass held (:data:`gwbatch.spiir.triggers.PASS_BYTES` per template and sample,
    which the memory plan reserves; at least :data:`SERIES_BUDGET`): every detector's aligned SNR
    series of a pass and one detector's filter scratch.  The deep trials' bound needs no more
    (:func:`gwbatch.coherent.statistic.spread_max`)."""
    per_template = (8 * n_det + FILTER_SCRATCH) * n
    budget = max(SERIES_BUDGET[backend], PASS_BYTES * batch * n)
    return int(max(1, min(batch, budget // per_template)))


def _margin(net: ChunkNetwork, offsets: np.ndarray) -> int:
    """Samples beyond the chunk's own that zero-lag reads may need: arrival offsets, merger delays
    and chi-squared lags."""
    delays = max(int(np.abs(b.merger_delay).max()) for b in net.banks)
    lags = max((b.autocorr.shape[1] - 1) // 2 for b in net.banks)
    return int(np.abs(offsets).max()) + delays + lags + 1


def coherent_chunk(net: ChunkNetwork, triggers: pd.DataFrame, settings: CoherentSettings):
    """``(events, skymaps, livetime, cut)`` of one chunk (module docstring): the clustered events
    of every trial as a table, the skymaps of zero-lag events ``(E, P)`` float32 (row ``skymap`` of
    the table, ``-1`` without one), the livetime of every trial (s), and the rank at and above
    which the deep trials' events are all kept (``-inf`` without deep trials: all are)."""
    n_det, fs = len(net.ifos), net.sample_rate
    xp = array_namespace(net.x[0])
    grid = sky_grid(settings.sky_order)
    geometry = network_geometry(net.ifos, grid, net.gps)
    sigma = np.array([float(np.median(b.sigma)) for b in net.banks])
    table = coherent_sky_table(geometry, fs, sigma)
    n = int(net.x[0].shape[0])
    pad = _margin(net, table.offsets)
    lo, hi = net.own[0] - pad, net.own[1] + pad
    if lo < 0 or hi + pad > n:
        raise RuntimeError(f"chunk halo too short for the coherent stage: needs {pad} samples either side")
    window = (lo, hi - lo)
    host_valid = [to_host(v).astype(bool) for v in net.valid]
    n_base, n_all = settings.n_trials, settings.n_trials + settings.n_deep
    livetime = trial_livetimes([v[net.own[0]:net.own[1]] for v in host_valid], n_all, settings.step, fs,
                               settings.min_ifos)
    cands = pivot_candidates(triggers, net.ifos, settings.candidate_window)
    cands = cands.assign(sample=cands["merger"].to_numpy() - net.read_start)
    outside = (cands["sample"] < lo) | (cands["sample"] >= hi)
    if outside.any():
        raise RuntimeError(f"{int(outside.sum())} pivot candidates outside the coherent window [{lo}, {hi})")
    unique = np.unique(cands["template"].to_numpy())
    batch = coherent_batch(settings.batch, n_det, n, "numpy" if xp is np else "cupy")
    ref = f"sample_{net.ifos[0]}"
    parts, deep_parts, maps, cut = [], [], [], -np.inf
    for first in range(0, unique.size, batch):
        templates = unique[first:first + batch]
        snr = xp.empty((n_det, templates.size, n), xp.complex64)
        for j in range(n_det):
            aligned_snr(net.x[j], net.valid[j], net.banks[j], templates, net.read_start, out=snr[j])
        autocorr = xp.stack([xp.asarray(net.banks[j].autocorr[templates]) for j in range(n_det)])
        mine = cands[cands["template"].isin(templates)]
        slot = np.searchsorted(templates, mine["template"].to_numpy())
        sample = mine["sample"].to_numpy(np.int64)
        pivot = mine["pivot"].to_numpy(np.int64)
        _, pixel = sky_argmax(snr, slot, sample, pivot, table, n_base, settings.step, window)
        trial = xp.broadcast_to(xp.arange(n_base + 1)[None, :], (slot.size, n_base + 1))
        ev = events_at(snr, autocorr, slot, sample, pivot, table, pixel, trial, settings.step, window)
        frame = _event_rows(ev, mine, net, geometry.delays, grid, host_valid)
        loud = np.flatnonzero(ev.rank[:, 0] >= settings.skymap_threshold)
        if loud.size:
            full = at_directions(snr, slot[loud], sample[loud], pivot[loud], table,
                                 xp.arange(grid.size)[None, :], 0, window=window)
            rho_c2_sky = to_host(full.rho_c2)
            maps += [posterior(r, settings.temperature).astype(np.float32) for r in rho_c2_sky]
            marker = np.full(len(frame), -1, np.int64)
            zero = np.flatnonzero(frame["trial"].to_numpy() == 0)
            marker[zero[loud]] = len(maps) - loud.size + np.arange(loud.size)
            frame["skymap"] = marker
        else:
            frame["skymap"] = -1
        parts.append(frame)
        if settings.n_deep:
            seen = _cluster_trials(pd.concat(parts, ignore_index=True), settings, ref)
            is_zero = seen["trial"].to_numpy() == 0
            zero_seen = seen[is_zero]
            cut = max(cut, deep_trial_cut(zero_seen, seen[~is_zero], net.ifos, settings.cluster, settings.deep_tail))

            def kept(cut: float, frame: pd.DataFrame) -> float:
                """Keep ``frame``'s deep events; the cut rises to the (deep_tail + 1)-th loudest deep
                event so far that is not a louder zero-lag event's own, and what falls below goes."""
                deep = _cluster_trials(pd.concat(deep_parts + [frame], ignore_index=True), settings, ref)
                cut, deep = risen_cut(cut, deep, zero_seen, net.ifos, settings.cluster, settings.deep_tail)
                deep_parts[:] = [deep]
                return cut

            cut = _deep_trials(snr, autocorr, slot, sample, pivot, table, mine, net, geometry.delays, grid, host_valid,
                               settings, window, cut, kept)
    events = pd.concat(parts + deep_parts, ignore_index=True) if parts else _empty_events(net.ifos)
    events = _cluster_trials(events, settings, ref)
    events = events[(events["trial"].to_numpy() <= n_base) | (events["rank"].to_numpy() >= cut)].reset_index(drop=True)
    used = np.unique(events["skymap"].to_numpy()[events["skymap"].to_numpy() >= 0])
    remap = np.full(len(maps) + 1, -1, np.int64)  # the extra last entry maps "no skymap" (-1) to -1
    remap[used] = np.arange(used.size)
    events["skymap"] = remap[events["skymap"].to_numpy()]
    skymaps = np.stack([maps[i] for i in used]) if used.size else np.zeros((0, grid.size), np.float32)
    return events, skymaps, livetime, (cut if settings.n_deep else -np.inf)


def _deep_trials(snr, autocorr, slot, sample, pivot, table, cands, net, delays, grid, valid,
                 settings: CoherentSettings, window, cut: float, kept) -> float:
    """The deep trials of one batch, best first: rounds of the (candidate, trial) pairs of largest
    network-SNR bound (:func:`gwbatch.coherent.statistic.trials_reaching`, at most
    :data:`DEEP_PAIRS` a round), each round's events handed to ``kept(cut, events) -> cut``, until
    no pair left can reach the (risen) cut.  Returns the cut."""
    ceiling = np.inf
    while True:
        found = trials_reaching(snr, slot, sample, pivot, table, settings.n_trials + 1, settings.n_deep, settings.step,
                                window, max(cut, 0.0) ** 2, ceiling2=ceiling, limit=DEEP_PAIRS,
                                ifo_floor2=settings.ifo_snr ** 2, min_ifos=settings.min_ifos)
        cut = kept(cut, _deep_rows(snr, autocorr, slot, sample, pivot, table, found.c, found.k, cands, net, delays,
                                   grid, valid, settings, window, cut))
        if found.c.size == 0 or found.rest2 < max(cut, 0.0) ** 2 * (1.0 - BOUND_SLACK):
            return cut
        ceiling = float(found.bound2.min())


def _deep_rows(snr, autocorr, slot, sample, pivot, table, c, k, cands, net, delays, grid, valid,
               settings: CoherentSettings, window, cut: float) -> pd.DataFrame:
    """The events of deep trials ``k`` of candidates ``c`` ranked at least ``cut``, without skymaps:
    their sky maximum (the kernel of the base trials, each pair alone), the null SNR there, and the
    chi-squared only where the coherent SNR less the null excess (a bound on the rank,
    :func:`gwbatch.coherent.stage.coherent_rank`) still reaches ``cut``."""
    xp = array_namespace(snr)
    floor = max(cut, 0.0) ** 2
    if c.size:
        rho_c2, pixel = sky_argmax(snr, slot[c], sample[c], pivot[c], table, 0, settings.step, window, first=k)
        keep = to_host(rho_c2[:, 0] >= floor)
        c, k, pixel = c[keep], k[keep], pixel[xp.asarray(keep), 0]
    if c.size:
        at = at_directions(snr, slot[c], sample[c], pivot[c], table, pixel[:, None], xp.asarray(k)[:, None],
                           settings.step, window)
        bound = xp.sqrt(xp.maximum(at.rho_c2[:, 0], 0)) - xp.maximum(xp.sqrt(xp.maximum(at.null2[:, 0], 0)) - NULL_FREE, 0)
        reach = to_host(bound >= cut)
        c, k, pixel = c[reach], k[reach], pixel[xp.asarray(reach)]
    if c.size == 0:
        return _empty_events(net.ifos)
    ev = events_at(snr, autocorr, slot[c], sample[c], pivot[c], table, pixel[:, None], xp.asarray(k)[:, None],
                   settings.step, window)
    frame = _event_rows(ev, cands.iloc[c], net, delays, grid, valid, trials=k[:, None]).assign(skymap=-1)
    return frame[frame["rank"].to_numpy() >= cut]


def _event_rows(ev, cands: pd.DataFrame, net: ChunkNetwork, delays: np.ndarray, grid, valid: list[np.ndarray],
                trials: np.ndarray | None = None) -> pd.DataFrame:
    """One row per (candidate, trial): the statistics at the sky maximum, store samples read
    (``trials``: ``(C, T)`` trial numbers, default ``0 ... T - 1`` for every candidate)."""
    n_cand, n_trial = ev.rho_c.shape
    flat = lambda a: np.asarray(a).reshape(n_cand * n_trial, *np.shape(a)[2:])  # noqa: E731
    pivot = np.repeat(cands["pivot"].to_numpy(np.int64), n_trial)
    pixel = flat(ev.pixel)
    index = flat(ev.sample)  # (rows, D), relative to the read start
    seen = np.stack([valid[j][index[:, j]] for j in range(len(net.ifos))], axis=1)
    pivot_index = index[np.arange(index.shape[0]), pivot]
    geocent = pivot_index - delays[pixel, pivot] * net.sample_rate + net.read_start
    cols = {
        "trial": (np.tile(np.arange(n_trial), n_cand) if trials is None else np.asarray(trials).ravel()).astype(np.int64),
        "candidate": np.repeat(cands.index.to_numpy(np.int64), n_trial),
        "pivot": pivot,
        "template": np.repeat(cands["template"].to_numpy(np.int64), n_trial),
        "mass1": np.repeat(net.banks[0].mass1[cands["template"].to_numpy(np.int64)], n_trial),
        "mass2": np.repeat(net.banks[0].mass2[cands["template"].to_numpy(np.int64)], n_trial),
        "spin1z": np.repeat(net.banks[0].spin1z[cands["template"].to_numpy(np.int64)], n_trial),
        "spin2z": np.repeat(net.banks[0].spin2z[cands["template"].to_numpy(np.int64)], n_trial),
        "snr": flat(ev.rho_c), "null_snr": flat(ev.rho_null), "chisq": flat(ev.chisq), "rank": flat(ev.rank),
        "pixel": pixel, "ra": grid.ra[pixel], "dec": grid.dec[pixel],
        "geocent_sample": geocent, "n_ifos": seen.sum(axis=1),
    }
    z = flat(ev.snr)
    for j, ifo in enumerate(net.ifos):
        cols[f"sample_{ifo}"] = index[:, j] + net.read_start
        cols[f"snr_{ifo}"] = np.where(seen[:, j], np.abs(z[:, j]), np.nan)
        cols[f"phase_{ifo}"] = np.where(seen[:, j], np.angle(z[:, j]), np.nan)
        cols[f"chisq_{ifo}"] = np.where(seen[:, j], flat(ev.chisq_ifo)[:, j], np.nan)
        # the template's optimal SNR at 1 Mpc in this detector's bank: the skymaps' distance layers
        cols[f"sigma_{ifo}"] = np.repeat(net.banks[j].sigma[cands["template"].to_numpy(np.int64)], n_trial)
    return pd.DataFrame(cols)


def _empty_events(ifos) -> pd.DataFrame:
    cols = {c: np.zeros(0, np.int64) for c in ("trial", "candidate", "pivot", "template", "pixel", "n_ifos", "skymap")}
    cols |= {c: np.zeros(0) for c in ("mass1", "mass2", "spin1z", "spin2z", "snr", "null_snr", "chisq", "rank", "ra", "dec",
                                      "geocent_sample")}
    for ifo in ifos:
        cols |= {f"sample_{ifo}": np.zeros(0, np.int64), f"snr_{ifo}": np.zeros(0), f"phase_{ifo}": np.zeros(0),
                 f"chisq_{ifo}": np.zeros(0), f"sigma_{ifo}": np.zeros(0)}
    return pd.DataFrame(cols)


def _cluster_trials(events: pd.DataFrame, settings: CoherentSettings, ref: str) -> pd.DataFrame:
    """Per trial, the highest-ranked event within the cluster window of the first detector's read
    time; events with fewer than ``min_ifos`` detectors at ``ifo_snr`` are dropped first."""
    loud = np.stack([events[c].to_numpy(np.float64) for c in events.columns if c.startswith("snr_")], axis=1)
    events = events[(np.nan_to_num(loud, nan=0.0) >= settings.ifo_snr).sum(axis=1) >= settings.min_ifos]
    keep = cluster_per_key(events["trial"].to_numpy(), events[ref].to_numpy(np.float64),
                           events["rank"].to_numpy(np.float64), settings.cluster)
    return events[keep].sort_values(["trial", ref], kind="stable").reset_index(drop=True)
