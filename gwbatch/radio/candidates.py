"""Single-pulse candidates of the radio search: clustering, arrival times, multibeam RFI flags,
Heimdall ``.cand`` files and false-alarm arithmetic.

Raw triggers are a DataFrame with columns ``beam`` (str), ``dm_index`` (int, into the DM plan),
``dm`` (float, pc cm^-3), ``sample`` (int, first sample of the boxcar at the full input rate,
referred to the highest frequency), ``width`` (int, boxcar width in full-rate samples) and
``snr`` (float).

Clustering follows Heimdall (Barsdell et al. 2012, MNRAS 422, 379; ``label_candidate_clusters``,
``are_coincident``, ``merge_candidates``): friends-of-friends over (time, DM trial, width), one
candidate per connected component, carried by its loudest member.  Heimdall compares every pair
(O(n^2) on a GPU); here a union-find (numba) is fed by a time sweep or, for dense blocks, by a walk
over DM/width buckets (:func:`cluster_triggers`).

Times.  Sample ``k`` is at ``start + k * tsamp`` (as :mod:`gwbatch.gpstime`), so a boxcar of
``width`` samples from ``sample`` is centred at ``sample + (width - 1) / 2``; all times here are
of that centre.  Heimdall instead reports the integer index ``sample + width // 2`` (its boxcar
of width ``w`` around index ``c`` covers ``[c - w//2, c - w//2 + w)``), half a sample later for
even widths; the ``.cand`` files keep Heimdall's index.
"""

from __future__ import annotations

from pathlib import Path

import numba
import numpy as np
import pandas as pd
from scipy.stats import norm

from gwbatch.io.atomic import write_atomically
from gwbatch.radio.dedisperse import K_DM  # s MHz^2 pc^-1 cm^3: delay = K_DM * DM * f^-2, f in MHz

TRIGGER_COLUMNS = ("beam", "dm_index", "dm", "sample", "width", "snr")
CANDIDATE_COLUMNS = ("beam", "snr", "sample", "width", "dm_index", "dm", "members",
                     "first_sample", "last_sample", "dm_min", "dm_max", "snr_zero_dm")
#: Heimdall's ``.cand`` columns (pipeline.cu's writer, Candidates.cpp's reader); multibeam
#: Heimdall appends the beam number as a tenth.
HEIMDALL_COLUMNS = ("snr", "sample_index", "time", "filter", "dm_index", "dm", "members",
                    "begin", "end")


# --- clustering -------------------------------------------------------------------------------

@numba.njit(cache=True, inline="always")
def _root(parent, i):
    while parent[i] != i:
        parent[i] = parent[parent[i]]  # path halving
        i = parent[i]
    return i


@numba.njit(cache=True, inline="always")
def _union(parent, i, j):
    """Join the components of ``i`` and ``j``; a root is always its component's lowest index."""
    ri = _root(parent, i)
    rj = _root(parent, j)
    if ri != rj:
        parent[max(ri, rj)] = min(ri, rj)


@numba.njit(cache=True)
def _flatten(parent):
    for i in range(parent.size):
        parent[i] = _root(parent, i)
    return parent


@numba.njit(cache=True, inline="always")
def _reach(time_tol, width_i, width_j, width_ratio):
    """Largest centre separation (samples) of friends of these widths; -1 if too unlike."""
    wide = max(width_i, width_j)
    if wide > width_ratio * min(width_i, width_j):
        return -1.0
    return np.floor(time_tol * wide)


@numba.njit(cache=True)
def _roots_by_sweep(centre, width, dm_index, time_tol, dm_tol, width_ratio):
    """Component roots of one beam's triggers (sorted by centre): each trigger is tested against
    every earlier one within ``time_tol`` times the widest boxcar."""
    parent = np.arange(centre.size)
    widest = np.floor(time_tol * width.max())
    lo = 0
    for i in range(centre.size):
        while centre[i] - centre[lo] > widest:
            lo += 1
        for j in range(lo, i):
            if (abs(dm_index[i] - dm_index[j]) <= dm_tol
                    and centre[i] - centre[j] <= _reach(time_tol, width[i], width[j], width_ratio)):
                _union(parent, i, j)
    return _flatten(parent)


@numba.njit(cache=True)
def _roots_by_buckets(centre, width, dm_index, time_tol, dm_tol, width_ratio,
                      class_width, bucket_table, bucket_start, bucket_of, members):
    """Component roots of one beam's triggers (sorted by centre, ``dm_index`` from 0), visiting
    buckets of one DM trial and one width (``bucket_table[dm, class]``, -1 where empty; bucket
    ``b``'s triggers are ``members[bucket_start[b]:]`` in time order).

    A trigger's earlier friends in a bucket are a suffix of those seen so far (a binary search
    finds it).  ``joined_from[b]`` marks where the bucket's seen triggers are already known to be
    one component, so a dense block costs a union per bucket rather than one per pair.
    """
    parent = np.arange(centre.size)
    n_dm, n_classes = bucket_table.shape
    seen = np.zeros(bucket_start.size, dtype=np.int64)
    joined_from = bucket_start.copy()
    for t in range(centre.size):
        root = t  # t's root, kept up to date as it joins components
        for d in range(max(0, dm_index[t] - dm_tol), min(n_dm, dm_index[t] + dm_tol + 1)):
            for k in range(n_classes):
                b = bucket_table[d, k]
                if b < 0 or seen[b] == 0:
                    continue
                reach = _reach(time_tol, width[t], class_width[k], width_ratio)
                first, last = bucket_start[b], bucket_start[b] + seen[b] - 1
                if centre[t] - centre[members[last]] > reach:
                    continue
                other = _root(parent, members[last])
                if other != root:
                    parent[max(root, other)] = min(root, other)
                    root = min(root, other)
                joined = joined_from[b]
                if joined == first or centre[t] - centre[members[joined - 1]] > reach:
                    continue  # every friend in b is in the joined suffix
                lo, hi = first, joined - 1
                while lo < hi:
                    mid = (lo + hi) // 2
                    if centre[t] - centre[members[mid]] > reach:
                        lo = mid + 1
                    else:
                        hi = mid
                for q in range(lo, joined):
                    _union(parent, t, members[q])
                root = _root(parent, t)
                joined_from[b] = lo
        b = bucket_of[t]
        p = bucket_start[b] + seen[b]
        if seen[b] == 0 or _root(parent, t) != _root(parent, members[p - 1]):
            joined_from[b] = p
        seen[b] += 1
    return _flatten(parent)


def _beam_roots(centre, width, dm_index, time_tol, dm_tol, width_ratio, method=None):
    """Component roots (index of each component's first trigger) of one beam's triggers sorted
    by centre, by the sweep or the DM/width buckets, whichever visits fewer triggers or buckets
    (``method`` forces one: ``"sweep"`` or ``"buckets"``)."""
    dm_index = dm_index - dm_index.min()
    class_width, width_class = np.unique(width, return_inverse=True)
    if method is None:
        window_start = np.searchsorted(centre, centre - np.floor(time_tol * width.max()), side="left")
        sweep_visits = int(np.sum(np.arange(centre.size) - window_start))
        bucket_visits = centre.size * min(2 * dm_tol + 1, int(dm_index.max()) + 1) * class_width.size
        method = "sweep" if sweep_visits <= bucket_visits else "buckets"
    if method == "sweep":
        return _roots_by_sweep(centre, width, dm_index, time_tol, dm_tol, width_ratio)
    key = dm_index * class_width.size + width_class
    members = np.argsort(key, kind="stable")
    keys, bucket_start = np.unique(key[members], return_index=True)
    bucket_table = np.full((int(dm_index.max()) + 1) * class_width.size, -1, dtype=np.int64)
    bucket_table[keys] = np.arange(keys.size)
    return _roots_by_buckets(centre, width, dm_index, time_tol, dm_tol, width_ratio, class_width,
                             bucket_table.reshape(-1, class_width.size), bucket_start.astype(np.int64),
                             np.searchsorted(keys, key), members)


def _empty_candidates() -> pd.DataFrame:
    dtypes = {"beam": str, "snr": float, "dm": float, "dm_min": float, "dm_max": float}
    return pd.DataFrame({c: pd.Series(dtype=dtypes.get(c, np.int64)) for c in CANDIDATE_COLUMNS})


def cluster_triggers(triggers: pd.DataFrame, time_tol: float, dm_tol: int,
                     width_tol: float | None = None) -> pd.DataFrame:
    """Friends-of-friends candidates of single-pulse triggers, per beam (Barsdell et al. 2012).

    Two triggers of one beam are friends when
    ``|c_i - c_j| <= time_tol * max(width_i, width_j)`` with ``c = sample + width // 2`` the
    boxcar centre index (Heimdall's ``are_coincident``: its tolerance scales with the wider
    boxcar), ``|dm_index_i - dm_index_j| <= dm_tol`` and, unless ``width_tol`` is None,
    ``max(width) <= width_tol * min(width)`` (Heimdall's ``filter_tol = k`` is ``width_tol = 2**k``;
    its defaults are ``time_tol=3``, ``dm_tol=200``, ``width_tol=8``).  Clusters are the connected
    components, found per beam by whichever costs less: a sweep testing each trigger against the
    earlier ones within ``time_tol`` times the widest boxcar (sparse triggers), or a walk over
    buckets of one DM trial and width, ``2 dm_tol + 1`` trials by the distinct widths per
    trigger (dense blocks such as broadband RFI, where the sweep would test every pair).

    Each cluster gives one row (:data:`CANDIDATE_COLUMNS`): ``snr``, ``sample``, ``width``,
    ``dm_index``, ``dm`` of its loudest member (ties: earliest sample, then lowest DM trial, then
    narrowest); ``members``; ``first_sample``/``last_sample``, the first and last full-rate
    samples any member's boxcar covers (inclusive); ``dm_min``/``dm_max`` over members; ``beam``.
    Rows are ordered by beam, then by the centre of the cluster's earliest member.
    """
    missing = [c for c in TRIGGER_COLUMNS if c not in triggers.columns]
    if missing:
        raise ValueError(f"triggers lack columns {missing}; expected {list(TRIGGER_COLUMNS)}")
    if not time_tol >= 0 or dm_tol < 0 or (width_tol is not None and not width_tol >= 1):
        raise ValueError(f"need time_tol >= 0, dm_tol >= 0, width_tol None or >= 1; got "
                         f"{time_tol}, {dm_tol}, {width_tol}")
    if triggers.empty:
        return _empty_candidates()
    beam_names, beam_code = np.unique(triggers["beam"].to_numpy(dtype=str), return_inverse=True)
    sample = triggers["sample"].to_numpy(np.int64)
    width = triggers["width"].to_numpy(np.int64)
    if width.min() < 1:
        raise ValueError(f"boxcar widths must be >= 1 sample, got {width.min()}")
    dm_index = triggers["dm_index"].to_numpy(np.int64)
    dm = triggers["dm"].to_numpy(np.float64)
    snr = triggers["snr"].to_numpy(np.float64)
    centre = sample + width // 2

    order = np.lexsort((centre, beam_code))
    beam_bounds = np.searchsorted(beam_code[order], np.arange(beam_names.size + 1))
    roots = np.empty(order.size, dtype=np.int64)
    for lo, hi in zip(beam_bounds[:-1], beam_bounds[1:]):
        rows = order[lo:hi]
        roots[lo:hi] = lo + _beam_roots(centre[rows], width[rows], dm_index[rows], float(time_tol),
                                        int(dm_tol), np.inf if width_tol is None else float(width_tol))
    is_root = roots == np.arange(roots.size)
    label = np.empty(len(triggers), dtype=np.int64)
    label[order] = (np.cumsum(is_root) - 1)[roots]

    by_label = np.lexsort((width, dm_index, sample, -snr, label))
    lab = label[by_label]
    starts = np.flatnonzero(np.concatenate([[True], lab[1:] != lab[:-1]]))
    peak = by_label[starts]
    return pd.DataFrame({
        "beam": pd.Series(beam_names[beam_code[peak]], dtype=str),
        "snr": snr[peak],
        "sample": sample[peak],
        "width": width[peak],
        "dm_index": dm_index[peak],
        "dm": dm[peak],
        "members": np.diff(np.append(starts, lab.size)).astype(np.int64),
        "first_sample": np.minimum.reduceat(sample[by_label], starts),
        "last_sample": np.maximum.reduceat((sample + width - 1)[by_label], starts),
        "dm_min": np.minimum.reduceat(dm[by_label], starts),
        "dm_max": np.maximum.reduceat(dm[by_label], starts),
        "snr_zero_dm": np.maximum.reduceat(np.where(dm_index[by_label] == 0, snr[by_label], 0.0), starts),
    })


#: An event is undispersed RFI when its S/N in the plan's first DM trial is at least this fraction of its
#: peak although its dispersion sweep across the band is at least :data:`RESOLVED_SWEEP` of its widths.
UNDISPERSED_RATIO, RESOLVED_SWEEP = 0.8, 2.0


def undispersed(candidates: pd.DataFrame, sweep_per_dm: float, tsamp: float) -> np.ndarray:
    """Candidates whose dispersion should show but does not: the sweep across the band at their DM,
    ``dm * sweep_per_dm`` (s), is at least :data:`RESOLVED_SWEEP` times their boxcar, so a dispersed
    pulse searched at the first DM trial (DM 0 in a plan from 0) would be smeared over three widths
    and keep about ``(1 + RESOLVED_SWEEP)**-1/2`` = 0.58 of its S/N; yet their S/N there
    (``snr_zero_dm``) is at least :data:`UNDISPERSED_RATIO` of their peak.  Broadband terrestrial
    signals (and a receiver's slow variations) do this; a resolved sky pulse cannot."""
    resolved = candidates["dm"].to_numpy(np.float64) * sweep_per_dm >= RESOLVED_SWEEP * candidates["width"].to_numpy() * tsamp
    flat = candidates["snr_zero_dm"].to_numpy(np.float64) >= UNDISPERSED_RATIO * candidates["snr"].to_numpy(np.float64)
    return resolved & flat


# --- arrival times ----------------------------------------------------------------------------

def dispersion_delay(dm, f_mhz):
    """Delay (s) at ``f_mhz`` relative to infinite frequency: ``K_DM * DM * f^-2``."""
    return K_DM * np.asarray(dm, dtype=np.float64) / np.asarray(f_mhz, dtype=np.float64) ** 2


def _offset(seconds, start, unit):
    if unit == "s":
        return start + seconds
    if unit == "mjd":
        return start + seconds / 86400.0
    raise ValueError(f"unit must be 's' or 'mjd', got {unit!r}")


def time_top(sample, width, tsamp: float, start: float = 0.0, unit: str = "s"):
    """Arrival time at the top of the band of the boxcar centre, ``sample + (width - 1) / 2``.

    ``start`` is the time of sample 0 at the highest frequency: GPS (or any) seconds with
    ``unit="s"``, result in seconds; an MJD with ``unit="mjd"``, result an MJD (float64 MJDs
    resolve ~1 µs at the present epoch).
    """
    centre = np.asarray(sample, dtype=np.float64) + (np.asarray(width, dtype=np.float64) - 1) / 2
    return _offset(centre * tsamp, start, unit)


def time_inf(sample, width, dm, tsamp: float, f_max: float, start: float = 0.0, unit: str = "s"):
    """Arrival time at infinite frequency of the boxcar centre: :func:`time_top` less
    ``K_DM * dm * f_max^-2``, ``f_max`` the highest channel frequency (MHz)."""
    seconds = time_top(sample, width, tsamp) - dispersion_delay(dm, f_max)
    return _offset(seconds, start, unit)


# --- multibeam RFI ----------------------------------------------------------------------------

@numba.njit(cache=True)
def _coincident_beam_masks(first, last, beam, dm_min, dm_max, time_tol, dm_tol, n_words):
    """Per candidate (sorted by ``first``), a bit mask of the beams holding a coincident
    candidate, its own included: sample extents within ``time_tol``, DM extents within
    ``dm_tol``.  Each pair is visited once, from the earlier-starting candidate."""
    n = first.size
    masks = np.zeros((n, n_words), dtype=np.uint64)
    one = np.uint64(1)
    for i in range(n):
        masks[i, beam[i] // 64] |= one << np.uint64(beam[i] % 64)
    for i in range(n):
        j = i + 1
        while j < n and first[j] <= last[i] + time_tol:
            if beam[j] != beam[i] and dm_min[j] <= dm_max[i] + dm_tol and dm_min[i] <= dm_max[j] + dm_tol:
                masks[i, beam[j] // 64] |= one << np.uint64(beam[j] % 64)
                masks[j, beam[i] // 64] |= one << np.uint64(beam[i] % 64)
            j += 1
    return masks


def flag_rfi(candidates: pd.DataFrame, n_beams: int, beam_threshold: int, dm_zero_max: float,
             time_tol: int = 0, dm_tol: float = 0.0) -> pd.DataFrame:
    """A copy of ``candidates`` with ``coincident_beams`` (int), ``rfi`` (bool) and
    ``rfi_reason`` (str) columns.

    ``coincident_beams`` counts the beams (its own included) holding a candidate coincident with
    this one: sample extents ``[first_sample, last_sample]`` overlapping or within ``time_tol``
    samples, and DM extents ``[dm_min, dm_max]`` overlapping or within ``dm_tol`` (each pair of
    candidates whose extents meet in time is tested once).  A candidate is RFI (``rfi_reason``,
    comma-joined; ``""`` when clean):

    * ``multibeam``: ``coincident_beams > beam_threshold`` (Heimdall's coincidencer counts beams
      with an event within 3 boxcars in time, at any DM, and flags more than its ``beam_thresh``);
    * ``zero_dm``: its loudest member's ``dm <= dm_zero_max``, the S/N peaking at the lowest DM
      trials as terrestrial signals do (Heimdall drops DM < ``cand_rfi_dm_cut`` = 1.5).
    """
    if beam_threshold < 1:
        raise ValueError(f"beam_threshold must be at least 1 (with n_beams or more, no event is multibeam); "
                         f"got {beam_threshold}")
    beam_names, beam_code = np.unique(candidates["beam"].to_numpy(dtype=str), return_inverse=True)
    if beam_names.size > n_beams:
        raise ValueError(f"candidates come from {beam_names.size} beams, more than n_beams={n_beams}")
    first = candidates["first_sample"].to_numpy(np.int64)
    order = np.argsort(first, kind="stable")
    masks = _coincident_beam_masks(first[order], candidates["last_sample"].to_numpy(np.int64)[order],
                                   beam_code[order], candidates["dm_min"].to_numpy(np.float64)[order],
                                   candidates["dm_max"].to_numpy(np.float64)[order], int(time_tol),
                                   float(dm_tol), max(1, (beam_names.size + 63) // 64))
    coincident = np.empty(len(candidates), dtype=np.int64)
    coincident[order] = np.bitwise_count(masks).sum(axis=1)
    multibeam = coincident > beam_threshold
    zero_dm = candidates["dm"].to_numpy(np.float64) <= dm_zero_max
    reason = np.where(multibeam & zero_dm, "multibeam,zero_dm",
                      np.where(multibeam, "multibeam", np.where(zero_dm, "zero_dm", "")))
    return candidates.assign(coincident_beams=coincident, rfi=multibeam | zero_dm,
                             rfi_reason=pd.Series(reason, index=candidates.index, dtype=str))


# --- Heimdall .cand files ---------------------------------------------------------------------

def _format_float(value: float, significant_digits: int | None) -> str:
    """``%g`` with ``significant_digits`` (C++ streams' default is 6), or with the fewest digits
    from 6 up that read back to exactly ``value`` (NaN, never equal, ends as ``nan``)."""
    if significant_digits is not None:
        return f"{value:.{significant_digits}g}"
    for digits in range(6, 18):
        text = f"{value:.{digits}g}"
        if float(text) == value:
            return text
    return text


def write_heimdall_cands(candidates: pd.DataFrame, path, tsamp: float, multibeam: bool = False,
                         significant_digits: int | None = None, round_widths: bool = False) -> Path:
    """Write ``candidates`` (:data:`CANDIDATE_COLUMNS`) as a Heimdall ``.cand`` file.

    One line per candidate, tab-separated with a trailing tab as Heimdall's ``pipeline.cu``:
    S/N, sample index (``sample + width // 2``, Heimdall's boxcar-centre index), time in seconds
    (that index times ``tsamp``), filter index (``log2 width``: widths must be powers of two, or
    with ``round_widths`` are written as the nearest power of two in log, the centre index staying
    exact; :mod:`gwbatch.pulse.plan`'s widths such as 24 or 34 need it), DM trial index, DM, members, begin (``first_sample``), end (``last_sample``), and with
    ``multibeam`` the beam label as a tenth column (multibeam Heimdall writes its 1-based beam
    number).  Heimdall's begin/end are its peak member's above-threshold run; here they are the
    cluster's extent (first and last sample, inclusive).  ``dm_min``/``dm_max`` are not in the format.

    Floats are written as C++ streams write them with ``significant_digits=6`` (byte-identical
    to Heimdall); the default writes the fewest digits (at least 6) that read back exactly.
    """
    width = candidates["width"].to_numpy(np.int64)
    if (width < 1).any() or (not round_widths and (width & (width - 1)).any()):
        raise ValueError(f"Heimdall filter indices need power-of-two widths (or round_widths=True), "
                         f"got {sorted(set(width.tolist()))}")
    if not multibeam and candidates["beam"].nunique() > 1:
        raise ValueError("candidates of several beams: write one file per beam or pass multibeam=True")
    index = candidates["sample"].to_numpy(np.int64) + width // 2
    columns = [
        [_format_float(v, significant_digits) for v in candidates["snr"].to_numpy(np.float64)],
        index.astype(str),
        [_format_float(v, significant_digits) for v in index * float(tsamp)],
        np.rint(np.log2(width)).astype(np.int64).astype(str),
        candidates["dm_index"].to_numpy(np.int64).astype(str),
        [_format_float(v, significant_digits) for v in candidates["dm"].to_numpy(np.float64)],
        candidates["members"].to_numpy(np.int64).astype(str),
        candidates["first_sample"].to_numpy(np.int64).astype(str),
        candidates["last_sample"].to_numpy(np.int64).astype(str),
    ]
    if multibeam:
        beams = candidates["beam"].to_numpy(dtype=str)
        if any(not b or any(ch.isspace() for ch in b) for b in beams):
            raise ValueError("beam labels must be non-empty and free of whitespace in a .cand file")
        columns.append(beams)
    text = "".join("\t".join(fields) + "\t\n" for fields in zip(*columns))
    return write_atomically(path, lambda fh: fh.write(text.encode()))


def read_heimdall_cands(path, beam: str | None = None) -> pd.DataFrame:
    """Read a Heimdall ``.cand`` file (9 columns, or 10 with the beam) into the columns of
    :data:`CANDIDATE_COLUMNS` less ``dm_min``/``dm_max``, plus ``time`` (the file's seconds).

    ``sample`` is recovered as ``sample_index - width // 2`` with ``width = 2**filter``.  A
    9-column file's beam is ``beam``, else the file name's part after its last ``_`` (Heimdall
    names files ``<utc>_<beam>.cand``).
    """
    path = Path(path)
    with path.open() as handle:
        first = handle.readline().split()
    names = list(HEIMDALL_COLUMNS) + (["beam"] if len(first) == 10 else [])
    if first and len(first) not in (9, 10):
        raise ValueError(f"{path}: a Heimdall candidate line has 9 or 10 fields, got {len(first)}")
    # Floats are read as text and parsed by Python's float(), which is exact at any digit count.
    dtypes = {"snr": str, "time": str, "dm": str, "beam": str}
    table = pd.read_csv(path, sep=r"\s+", header=None, names=names,
                        dtype={n: dtypes.get(n, np.int64) for n in names}) if first else \
        pd.DataFrame({n: pd.Series(dtype=dtypes.get(n, np.int64)) for n in names})
    if "beam" not in table:
        table["beam"] = beam if beam is not None else path.stem.rsplit("_", 1)[-1]
    width = np.left_shift(1, table["filter"].to_numpy(np.int64))
    exact = {c: table[c].to_numpy(dtype=object).astype(np.float64) for c in ("snr", "dm", "time")}
    return pd.DataFrame({
        "beam": table["beam"].astype(str),
        "snr": exact["snr"],
        "sample": table["sample_index"].to_numpy(np.int64) - width // 2,
        "width": width,
        "dm_index": table["dm_index"].to_numpy(np.int64),
        "dm": exact["dm"],
        "members": table["members"].to_numpy(np.int64),
        "first_sample": table["begin"].to_numpy(np.int64),
        "last_sample": table["end"].to_numpy(np.int64),
        "time": exact["time"],
    })


# --- false alarms -----------------------------------------------------------------------------

def effective_trials(n_samples_per_dm: float, n_dm: int, widths) -> float:
    """Independent trials of a boxcar search: ``n_dm * sum_w n_samples_per_dm / w``.

    Cordes & McLaughlin (2003, ApJ 596, 1142): a boxcar of ``w`` samples gives about
    ``N / w`` independent tests per series.  Counting every DM trial and every width as
    independent over-counts (neighbouring trials are correlated), so false-alarm numbers from it
    are upper bounds.
    """
    widths = np.asarray(widths, dtype=np.float64)
    if n_samples_per_dm <= 0 or n_dm <= 0 or widths.size == 0 or (widths <= 0).any():
        raise ValueError("need n_samples_per_dm > 0, n_dm > 0 and positive widths")
    return float(n_dm * np.sum(n_samples_per_dm / widths))


def noise_false_alarms(snr_threshold, n_trials):
    """Expected noise events at S/N >= ``snr_threshold`` among ``n_trials`` independent Gaussian
    trials: ``n_trials * Q(snr)``, ``Q`` the standard normal upper tail."""
    return np.asarray(n_trials, dtype=np.float64) * norm.sf(snr_threshold)


def far_per_candidate(snr, n_trials, duration: float):
    """False-alarm rate (per second) of noise events at least as loud as ``snr`` in a search of
    ``n_trials`` independent trials over ``duration`` seconds."""
    if not duration > 0:
        raise ValueError(f"duration must be > 0 s, got {duration}")
    return noise_false_alarms(snr, n_trials) / duration
