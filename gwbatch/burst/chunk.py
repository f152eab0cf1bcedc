"""The burst search in one chunk: pixels, clusters, sky loop and events, for zero lag and lags.

1. **Window**: the chunk's own samples plus a margin on each side (longest pixel, largest arrival
   delay), rounded to a whole number of the longest pixel step, treated as a circle.
2. **Pixels** per detector and resolution (:mod:`gwbatch.burst.tfmap`), the data upsampled four
   times for the delayed amplitudes (:mod:`gwbatch.burst.delays`).
3. **Lags**: in lag ``k`` detector ``j`` is read ``k * step * j`` samples later, wrapped within the
   window (the shared slide convention, :mod:`gwbatch.background.slides`); the step is a multiple of
   every pixel step, so a lag only rolls a detector's frames.  Lag 0 is the foreground.
4. **Clusters** of black pixels per lag (:mod:`gwbatch.burst.clusters`); a cluster goes on if its
   energy could reach the event threshold (``sum E_j >= rho_min^2``, half the ``2 rho^2`` a signal
   needs) and it lies near the chunk's own samples; after its delayed amplitudes are made, only if
   ``rho >= rho_min`` is possible at all (``rho^2 <= Ec / 2``, and ``Ec`` is at most the sum over
   pixels of :func:`gwbatch.burst.skyloop.coherent_energy_bound`).
5. **Sky loop** over all the lag's clusters in one call (:mod:`gwbatch.burst.skyloop`; the CUDA
   kernel on a GPU), then the **event** at each cluster's best direction (:func:`cluster_event`).
6. Events with ``rho >= rho_min``, ``cc >= cc_min`` whose time is in the chunk's own samples are
   kept, the loudest within the cluster window per lag; zero-lag events with ``rho`` at least the
   skymap threshold get a skymap (:func:`gwbatch.sky.skymap.posterior` of the likelihood
   ``Lo`` over the grid, ``P ~ exp(Lo / 2T)``) at the temperature of :func:`skymap_temperature`.

Livetimes are those of the chunk's own samples with every detector analysing, shifted as the data
are (:func:`gwbatch.background.slides.trial_livetimes`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gwbatch._xp import array_namespace, to_host
from gwbatch.background.slides import trial_livetimes
from gwbatch.background.trials import deep_trial_cut, risen_cut
from gwbatch.burst.clusters import (
    best_level_pixels,
    black_pixels,
    cluster_pixels,
    dilate,
    threshold,
)
from gwbatch.burst.delays import UPSAMPLE, delay_range, delayed_amplitudes, upsample
from gwbatch.burst.skyloop import (
    REJECTED,
    ClusterBatch,
    SkyLoopCuts,
    SkyTable,
    cluster_statistics,
    coherent_energy_bound,
    direction_statistics,
    sky_table,
)
from gwbatch.burst.tfmap import Resolution, frame_valid, resolutions, tf_map
from gwbatch.candidates.coincidence import cluster_per_key
from gwbatch.sky.grid import sky_grid
from gwbatch.sky.network import network_geometry
from gwbatch.sky.skymap import posterior

#: Bytes of delayed amplitudes held at once (a lag's clusters go to the sky loop in batches).
AMPLITUDE_BUDGET = {"numpy": 256 * 2**20, "cupy": 4 * 2**30}


@dataclass(frozen=True)
class BurstSettings:
    bandwidths: tuple[float, ...]  # pixel bandwidths (Hz), one per resolution
    f_low: float
    f_high: float
    bpp: float  # black-pixel probability
    cuts: SkyLoopCuts
    rho_min: float
    cc_min: float
    n_trials: int
    step: int  # samples
    cluster: int  # samples: events of one lag closer than this are one
    sky_order: int
    skymap_threshold: float
    temperature: float  # skymap temperature's base (:func:`skymap_temperature`)
    systematic: float = 0.0  # ... and its fraction of the event's largest likelihood
    n_deep: int = 0  # deep lags after the n_trials base ones (events kept above the chunk's cut)
    deep_tail: int = 100  # the chunk's cut: the (deep_tail + 1)-th loudest base lag event


@dataclass(frozen=True)
class BurstNetwork:
    """One chunk's detectors: burst inputs (:func:`gwbatch.burst.tfmap.burst_input`) and validity
    over the read span (backend arrays), the PSDs they were whitened with (host ``(f, S)``), where
    the read span starts, the chunk's own samples within it and the geometry time."""

    ifos: tuple[str, ...]
    x: list
    valid: list
    psd: list
    read_start: int
    own: tuple[int, int]
    sample_rate: float
    gps: float


def analysis_window(own: tuple[int, int], n: int, pad: int, hop: int) -> tuple[int, int]:
    """``[lo, hi)``: the own samples and ``pad`` either side, widened to a multiple of ``hop``."""
    lo = own[0] - pad
    hi = own[1] + pad
    hi += (-(hi - lo)) % hop
    if lo < 0 or hi > n:
        raise RuntimeError(f"chunk halo too short for the burst search: it needs [{lo}, {hi}) of {n} samples read")
    return lo, hi


def window_pad(levels: tuple[Resolution, ...], max_delay: float, sample_rate: float) -> int:
    """Samples beyond the own ones the window needs: the longest pixel and the largest delay."""
    return levels[-1].length + int(np.ceil(max_delay * sample_rate)) + levels[-1].hop


def sensitivities(psd: list, frequencies: np.ndarray) -> np.ndarray:
    """``s_ij``: each detector's ``1 / sqrt(S_i(f_j))`` relative to the most sensitive, ``(P, N)``."""
    amp = np.stack([1.0 / np.sqrt(np.interp(frequencies, np.asarray(to_host(f)), np.asarray(to_host(s))))
                    for f, s in psd], axis=1)
    return (amp / amp.max(axis=1, keepdims=True)).astype(np.float32)


def skymap_temperature(likelihood, base: float, systematic: float) -> float:
    """Temperature of an event's skymap, ``T = base + systematic * max(Lo)`` over the grid.

    ``Lo / 2`` would be the log likelihood ratio of independent unit-variance pixels; the frame's
    pixels overlap (energies sum to twice the SNR squared), which alone makes ``T = 2``, and noise
    in which pixels enter the sums widens it further (``base``).  The pixel model's own misfit
    (quarter-sample delays, sky grid spacing, one polarisation with two detectors) takes a fixed
    fraction of the signal's likelihood, so it grows with ``Lo`` (``systematic``).  Both are set by
    the P-P test of the sky maps over injection campaigns, as the coherent maps' temperature is
    (:func:`gwbatch.sky.skymap.pp_test`; the study is in :mod:`gwbatch.searches.burst`).
    """
    return float(base + systematic * max(float(np.max(likelihood)), 0.0))


def run_skyloop(batch: ClusterBatch, table: SkyTable, cuts: SkyLoopCuts):
    """Per cluster the best sky statistic and direction: the CUDA kernel for device arrays, else the
    CPU twin."""
    xp = array_namespace(batch.amplitudes)
    if xp is np:
        from gwbatch.burst.skyloop import skyloop_max

        return skyloop_max(batch, table, cuts)
    from gwbatch.burst._cuda import skyloop_max_cuda

    return skyloop_max_cuda(batch, table, cuts)


def network_measures(q: dict) -> dict:
    """From sky-loop sums (arrays or scalars; :data:`gwbatch.burst.skyloop.FIELDS`): null energy
    ``No = Eo - Lo``, ``chisq = No / dof`` (1 without null degrees of freedom), the network
    correlation ``cc = Ec / (|Ec| + No)`` and ``rho = sqrt(Ec / 2) / sqrt(max(chisq, 1))``
    (ALGORITHMS.md §4.4)."""
    null = np.maximum(np.asarray(q["Eo"]) - np.asarray(q["Lo"]), 0.0)
    dof = np.asarray(q["dof"])
    chisq = np.where(dof > 0, null / np.where(dof > 0, dof, 1.0), 1.0)
    ec = np.asarray(q["Ec"])
    norm = np.abs(ec) + null
    cc = np.where(norm > 0, ec / np.where(norm > 0, norm, 1.0), 0.0)
    rho = np.sqrt(np.maximum(ec, 0.0) / 2.0) / np.sqrt(np.maximum(chisq, 1.0))
    return {"null": null, "chisq": chisq, "cc": cc, "rho": rho}


def cluster_event(v: np.ndarray, s: np.ndarray, table: SkyTable, cuts: SkyLoopCuts, direction: int,
                  sums: dict | None = None) -> dict:
    """A cluster's event quantities at ``direction`` (host amplitudes ``(N, P, 2D+1)``, weights
    ``(P, N)``): the sky-loop sums (``sums`` when already computed), :func:`network_measures`, and
    per-pixel and per-detector energies of the pixels in the sums."""
    if sums is None:
        batch = ClusterBatch(v, np.array([0, v.shape[1]]), s)
        sums = {k: float(a[0]) for k, a in direction_statistics(batch, 0, table, cuts, [direction]).items()}
    q = sums
    a = v[np.arange(v.shape[0])[:, None], np.arange(v.shape[1])[None, :], table.ml[:, direction][:, None]]
    e = (a.real.astype(np.float64) ** 2 + a.imag.astype(np.float64) ** 2)  # (N, P)
    selected = e.sum(axis=0) > cuts.pixel_energy
    per_ifo = e[:, selected].sum(axis=1)
    return {**q, **{k: float(x) for k, x in network_measures(q).items()}, "selected": selected,
            "pixel_energy": e.sum(axis=0), "ifo_energy": per_ifo, "m_sel": int(selected.sum())}


def _lag_shifts(n_det: int, n_trials: int, step: int, width: int) -> np.ndarray:
    """``(K + 1, N)``: samples each detector is read later in each lag, within the window."""
    k = np.arange(n_trials + 1)[:, None]
    return (k * step * np.arange(n_det)[None, :]) % width


def burst_chunk(net: BurstNetwork, settings: BurstSettings):
    """``(events, skymaps, livetime, cut)`` of one chunk (module docstring): one row per event of
    every lag, zero-lag skymaps ``(E, S)`` float32 (row ``skymap`` of the table, ``-1`` without),
    the livetime of every lag (s), and the rank at and above which the deep lags' events are kept
    (:func:`gwbatch.background.trials.deep_trial_cut` of the base lags, risen after each deep lag
    by :func:`gwbatch.background.trials.risen_cut`; ``-inf`` without deep lags).  A deep lag skips
    the sky loop of every cluster whose coherent energy cannot reach the cut."""
    xp = array_namespace(net.x[0])
    fs, n_det = net.sample_rate, len(net.ifos)
    levels = resolutions(fs, settings.bandwidths, settings.f_low, settings.f_high)
    grid = sky_grid(settings.sky_order)
    geometry = network_geometry(net.ifos, grid, net.gps)
    max_delay = float(np.abs(geometry.delays).max())
    n_delay = delay_range(max_delay, fs)
    table = sky_table(geometry.delays, geometry.fplus, geometry.fcross, fs, n_delay, UPSAMPLE)
    lo, hi = analysis_window(net.own, int(net.x[0].shape[0]), window_pad(levels, max_delay, fs), levels[-1].hop)
    width = hi - lo
    if settings.step % levels[-1].hop:
        raise ValueError(f"lag step of {settings.step} samples is not a multiple of the longest pixel step "
                         f"{levels[-1].hop}")
    x = [xp.where(v[lo:hi], s[lo:hi], 0).astype(xp.float32) for s, v in zip(net.x, net.valid)]
    valid = [v[lo:hi].astype(bool) for v in net.valid]
    x_up = [upsample(s) for s in x]
    energy, fvalid = [], []
    for res in levels:
        radius = int(np.ceil(max_delay * fs / res.hop))
        fv = [frame_valid(v, res) for v in valid]
        energy.append([dilate(xp.abs(tf_map(s, res)) ** 2 * f[:, None], radius) for s, f in zip(x, fv)])
        fvalid.append(fv)
    zero = [(sum(e), _all(f)) for e, f in zip(energy, fvalid)]
    thresholds = [threshold(e, v, settings.bpp) for e, v in zero]
    n_all = settings.n_trials + settings.n_deep
    shifts = _lag_shifts(n_det, n_all, settings.step, width)
    host_valid = [to_host(v).astype(bool) for v in net.valid]
    livetime = trial_livetimes([v[net.own[0]:net.own[1]] for v in host_valid], n_all, settings.step,
                               fs, n_det)
    own = (net.own[0] - lo, net.own[1] - lo)
    rows, maps, deep, base, cut = [], [], [], None, -np.inf
    for lag in range(n_all + 1):
        if lag == settings.n_trials + 1:  # the base lags are done: the chunk's cut for the deep ones
            base = _cluster_lags(pd.DataFrame(rows) if rows else _empty_events(net.ifos), settings.cluster)
            is_zero = base["trial"].to_numpy() == 0
            cut = deep_trial_cut(base[is_zero], base[~is_zero], net.ifos, settings.cluster, settings.deep_tail)
        rolled = []
        for r, res in enumerate(levels):
            frames = [-int(s) // res.hop for s in shifts[lag]]
            rolled.append((sum(xp.roll(e, f, axis=0) for e, f in zip(energy[r], frames)),
                           _all([xp.roll(v, f) for v, f in zip(fvalid[r], frames)])))
        px = black_pixels(rolled, thresholds, [res.k_lo for res in levels])
        labels = cluster_pixels(px, [int(e[0].shape[0]) for e in energy])
        keep, cluster = best_level_pixels(px, labels, n_det)
        px = px.take(keep)
        hop = np.array([levels[r].hop for r in px.level])
        length = np.array([levels[r].length for r in px.level])
        centre = px.frame * hop + (length - 1) / 2.0  # window samples, detector 0's frame
        total = np.bincount(cluster, weights=px.energy)
        when = np.bincount(cluster, weights=px.energy * centre) / np.where(total > 0, total, 1.0)
        margin = settings.cluster + levels[-1].length
        ok = (total >= settings.rho_min ** 2) & (when >= own[0] - margin) & (when < own[1] + margin)
        mine = ok[cluster]
        px, cluster, centre = px.take(np.flatnonzero(mine)), cluster[mine], centre[mine]
        _, cluster = np.unique(cluster, return_inverse=True)
        # a deep lag needs only events at the cut: rank = rho, and a cluster is clustered away only
        # by a louder one, so skipping the quieter clusters keeps exactly the events above it
        floor = settings.rho_min if lag <= settings.n_trials else max(settings.rho_min, cut)
        found = _lag_events(lag, px, cluster, centre, levels, x_up, shifts[lag], n_delay, table, net, settings,
                            own, lo, width, grid, maps, floor)
        if lag <= settings.n_trials:
            rows += found
        elif found:  # a deep lag: its clustered events, all at or above the cut (rho >= floor)
            deep.append(_cluster_lags(pd.DataFrame(found), settings.cluster))
            cut, kept = risen_cut(cut, pd.concat(deep, ignore_index=True), base[is_zero], net.ifos,
                                  settings.cluster, settings.deep_tail)
            deep = [kept]
    if base is None:
        base = _cluster_lags(pd.DataFrame(rows) if rows else _empty_events(net.ifos), settings.cluster)
    events = pd.concat([base, *deep], ignore_index=True) if deep else base
    used = np.unique(events["skymap"].to_numpy()[events["skymap"].to_numpy() >= 0])
    remap = np.full(len(maps) + 1, -1, np.int64)
    remap[used] = np.arange(used.size)
    events["skymap"] = remap[events["skymap"].to_numpy()]
    skymaps = np.stack([maps[i] for i in used]) if used.size else np.zeros((0, grid.size), np.float32)
    return events, skymaps, livetime, cut


def _all(masks: list):
    out = masks[0]
    for m in masks[1:]:
        out = out & m
    return out


def _lag_events(lag, px, cluster, centre, levels, x_up, shift, n_delay, table, net, settings, own, lo, width,
                grid, maps, rho_floor: float) -> list[dict]:
    """The events of one lag's clusters with rho at least ``rho_floor`` (batched to the amplitude
    budget; the sky loop runs only for clusters whose energy can reach it)."""
    xp = array_namespace(x_up[0])
    n_det, fs = len(net.ifos), net.sample_rate
    if px.size == 0:
        return []
    bins_f = np.empty(px.size, dtype=np.float64)
    for r, res in enumerate(levels):
        at = px.level == r
        bins_f[at] = res.frequency(px.bin[at], fs)
    weights = sensitivities(net.psd, bins_f)
    per_pixel = n_det * (2 * n_delay + 1) * 8
    budget = AMPLITUDE_BUDGET["numpy" if xp is np else "cupy"]
    bounds = np.searchsorted(cluster, np.arange(int(cluster.max()) + 2))
    out = []
    first = 0
    while first < bounds.size - 1:
        last = first + 1
        while last < bounds.size - 1 and (bounds[last + 1] - bounds[first]) * per_pixel <= budget:
            last += 1
        sel = np.arange(bounds[first], bounds[last])
        amps = xp.zeros((n_det, sel.size, 2 * n_delay + 1), dtype=xp.complex64)
        for r, res in enumerate(levels):
            at = np.flatnonzero(px.level[sel] == r)
            if at.size == 0:
                continue
            for i in range(n_det):
                amps[i, xp.asarray(at)] = delayed_amplitudes(x_up[i], res, px.frame[sel][at], px.bin[sel][at],
                                                             int(shift[i]), n_delay)
        offsets = bounds[first:last + 1] - bounds[first]
        # rho^2 <= Ec / 2, and Ec is at most the clusters' coherent_energy_bound
        bound = coherent_energy_bound(to_host(xp.abs(amps).max(axis=2)))
        reach = np.add.reduceat(bound, offsets[:-1]) if sel.size else np.zeros(0)
        hopeful = np.flatnonzero(reach >= 2.0 * rho_floor ** 2)
        if hopeful.size == 0:
            first = last
            continue
        rows_kept, offsets = _clusters_subset(offsets, hopeful)
        sel = sel[rows_kept]
        amps = amps[:, xp.asarray(rows_kept)]
        batch = ClusterBatch(amps, offsets, xp.asarray(weights[sel]))
        stat, best = (to_host(a) for a in run_skyloop(batch, table, settings.cuts))
        passed = np.flatnonzero(stat > REJECTED)
        if passed.size == 0:
            first = last
            continue
        rows_kept, offsets = _clusters_subset(offsets, passed)  # only these pixels come to the host
        sel, stat, best = sel[rows_kept], stat[passed], best[passed]
        host = to_host(amps[:, xp.asarray(rows_kept)])
        q = cluster_statistics(ClusterBatch(host, offsets, weights[sel]), table, settings.cuts, best)
        m = network_measures(q)
        for c in np.flatnonzero((m["rho"] >= rho_floor) & (m["cc"] >= settings.cc_min)):
            part = slice(offsets[c], offsets[c + 1])
            rows = sel[part]
            ev = cluster_event(host[:, part], weights[rows], table, settings.cuts, int(best[c]),
                               {k: float(a[c]) for k, a in q.items()})
            row = _event_row(lag, ev, px.take(rows), centre[rows], levels, int(best[c]), float(stat[c]), table,
                             net, settings, shift, lo, width, grid)
            if not own[0] <= row["_window_time"] < own[1]:
                continue
            if lag == 0 and row["rho"] >= settings.skymap_threshold:
                full = direction_statistics(ClusterBatch(host[:, part], np.array([0, rows.size]), weights[rows]), 0,
                                            table, settings.cuts)
                temperature = skymap_temperature(full["Lo"], settings.temperature, settings.systematic)
                maps.append(posterior(full["Lo"], temperature).astype(np.float32))
                row["skymap"] = len(maps) - 1
            out.append(row)
        first = last
    return out


def _clusters_subset(offsets: np.ndarray, clusters: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pixel rows of ``clusters`` (indices into a batch with pixel ``offsets``) and their offsets."""
    rows = np.concatenate([np.arange(offsets[c], offsets[c + 1]) for c in clusters])
    return rows, np.concatenate([[0], np.cumsum(np.diff(offsets)[clusters])]).astype(np.int64)


def _event_row(lag, ev, px, centre, levels, direction, stat, table, net, settings, shift, lo, width, grid):
    """One event's table row (an event passed the cuts, so at least one pixel is in its sums)."""
    fs = net.sample_rate
    sel = ev["selected"]
    w = ev["pixel_energy"][sel]
    t = centre[sel]
    res = levels[int(px.level[0])]
    f = res.frequency(px.bin[sel], fs)
    when = float(np.sum(w * t) / np.sum(w))  # window samples, geocentric
    row = {
        "trial": lag, "rho": ev["rho"], "rank": ev["rho"], "cc": ev["cc"], "stat": stat,
        "energy": ev["Eo"], "likelihood": ev["Lo"], "coherent_energy": ev["Ec"], "null_energy": ev["null"],
        "chisq": ev["chisq"], "n_pixels": ev["m_sel"], "resolution": res.bandwidth(fs),
        "frequency": float(np.sum(w * f) / np.sum(w)),
        "f_min": float(f.min() - res.bandwidth(fs) / 2), "f_max": float(f.max() + res.bandwidth(fs) / 2),
        "duration": float((t.max() - t.min() + res.hop) / fs),
        "pixel": direction, "ra": float(grid.ra[direction]), "dec": float(grid.dec[direction]),
        "geocent_sample": net.read_start + lo + when, "_window_time": when,
        "pivot": int(np.argmax(ev["ifo_energy"])), "skymap": -1,
    }
    for i, ifo in enumerate(net.ifos):
        arrival = when + table.delay(i, direction)
        row[f"sample_{ifo}"] = net.read_start + lo + (arrival + shift[i]) % width
        row[f"snr_{ifo}"] = float(np.sqrt(max(ev["ifo_energy"][i] - 2.0 * ev["m_sel"], 0.0) / 2.0))
    return row


def _empty_events(ifos) -> pd.DataFrame:
    ints = ("trial", "n_pixels", "pixel", "pivot", "skymap")
    floats = ("rho", "rank", "cc", "stat", "energy", "likelihood", "coherent_energy", "null_energy", "chisq",
              "resolution", "frequency", "f_min", "f_max", "duration", "ra", "dec", "geocent_sample", "_window_time")
    cols = {c: np.zeros(0, np.int64) for c in ints} | {c: np.zeros(0) for c in floats}
    for ifo in ifos:
        cols |= {f"sample_{ifo}": np.zeros(0), f"snr_{ifo}": np.zeros(0)}
    return pd.DataFrame(cols)


def _cluster_lags(events: pd.DataFrame, window: int) -> pd.DataFrame:
    """Per lag, the loudest event (``rho``) within ``window`` samples of geocentric time."""
    keep = cluster_per_key(events["trial"].to_numpy(), events["geocent_sample"].to_numpy(np.float64),
                           events["rho"].to_numpy(np.float64), window)
    events = events[keep].sort_values(["trial", "geocent_sample"], kind="stable").reset_index(drop=True)
    return events.drop(columns="_window_time")
