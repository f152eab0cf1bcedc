"""From pieces of named channels (GWF frames, gwpy files, in-memory series) to a strain store.

:func:`plan_ingest` decides everything before a sample is read: per detector its channel, native
rate and :class:`~gwbatch.io.resample.Resampler`; the store's start (the earliest piece), rate and
length; where each piece's samples go; which overlaps must be compared; and the blocks of whole
store chunks that tasks write.  :func:`ingest_block` is one task: it reads the pieces its chunks
need (each once), resamples chunk by chunk with the filter's halo and writes every chunk that
holds a finite sample.  Unwritten store chunks read as NaN, so a gap between frames is masked,
and a NaN input sample makes NaN every output its filter reaches: no sample near a gap is used.

Rules (each refused with a one-line :class:`~gwbatch.errors.DataError`):

- one whole-Hz rate per detector; every piece starts on its detector's sample grid counted from
  the store's start, so the grids of all files line up;
- pieces of one detector that overlap must hold the same samples where they overlap
  (:func:`compare_overlap`); the first is kept;
- every requested channel is found in some file.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from gwbatch.errors import DataError
from gwbatch.gpstime import GPSTime
from gwbatch.io.frames import Channel, FileScan, Piece, header_piece, read_piece, shown_names
from gwbatch.io.resample import Resampler
from gwbatch.io.store import (DEFAULT_CHUNK_SAMPLES, MAX_STORE_SECONDS, NativeTail, StoreMeta, read_meta,
                              read_native_tails, read_strain, write_partial_strain)

_NS = 1_000_000_000
#: The fewest pieces (frames) a block task covers, where there are enough: see :func:`_blocks`.
PIECES_PER_BLOCK = 2


@dataclass(frozen=True)
class Placed:
    """A piece placed in its detector's native sample index (counted from the store's start):
    it covers ``[start, start + n)`` and gives ``[start + skip, start + n)`` (``skip`` > 0 where an
    earlier piece already covers its first samples)."""

    piece: Piece
    start: int
    skip: int = 0

    @property
    def stop(self) -> int:
        return self.start + self.piece.n_samples


@dataclass(frozen=True)
class Overlap:
    """Native samples ``[start, stop)`` held by both ``first`` and ``second``: they must agree."""

    ifo: str
    first: Placed
    second: Placed
    start: int
    stop: int


@dataclass(frozen=True)
class Block:
    """Store chunks ``[first, stop)`` of detector ``ifo`` (store row ``row``): one task."""

    index: int
    ifo: str
    row: int
    first: int
    stop: int


@dataclass(frozen=True, eq=False)
class IngestPlan:
    """Everything an ingest writes, decided from the files' headers."""

    ifos: tuple[str, ...]
    channels: dict[str, str]
    native_rates: dict[str, int]
    sample_rate: int
    t0: GPSTime
    n_samples: int
    chunk_samples: int
    resamplers: dict[str, Resampler]
    placed: dict[str, tuple[Placed, ...]]
    overlaps: tuple[Overlap, ...]
    blocks: tuple[Block, ...]
    backend: str = "numpy"  # where the resampling filter runs: numpy (CPU) or cupy (GPU)

    @property
    def n_seconds(self) -> int:
        return int(math.ceil(self.n_samples / self.sample_rate))


def _grid_offset(piece: Piece, t0: GPSTime) -> int:
    """The native sample index of ``piece``'s start counted from ``t0``; refused off the grid."""
    delta = piece.t0.total_ns - t0.total_ns
    if (delta * piece.sample_rate) % _NS:
        raise DataError(
            f"{piece.path}: channel {piece.channel} starts at GPS {piece.t0}, not a whole number of "
            f"{piece.sample_rate} Hz samples after the store's start {t0} (the earliest file): the files' "
            f"sample grids do not line up"
        )
    return delta * piece.sample_rate // _NS


def _place(ifo: str, pieces: list[Piece], t0: GPSTime) -> tuple[list[Placed], list[Overlap]]:
    rates = sorted({p.sample_rate for p in pieces})
    if len(rates) > 1:
        a = next(p for p in pieces if p.sample_rate == rates[0])
        b = next(p for p in pieces if p.sample_rate == rates[-1])
        raise DataError(f"{ifo}: {a.path} holds {a.channel} at {rates[0]} Hz but {b.path} at {rates[-1]} Hz; "
                        f"one detector's files must share one rate")
    placed, overlaps, reach = [], [], None
    for piece in sorted(pieces, key=lambda p: (p.t0, str(p.path), p.frame)):
        start = _grid_offset(piece, t0)
        here = Placed(piece, start)
        if reach is not None and start < reach.stop:
            overlaps.append(Overlap(ifo, reach, here, start, min(reach.stop, here.stop)))
            here = Placed(piece, start, min(piece.n_samples, reach.stop - start))
        placed.append(here)
        if reach is None or here.stop > reach.stop:
            reach = here
    return [p for p in placed if p.skip < p.piece.n_samples], overlaps


def _chunk_samples(resamplers: Sequence[Resampler], wanted: int) -> int:
    """Store chunk length: a multiple of every resampler's ``up`` (so each chunk starts at an input
    sample), near ``wanted``."""
    step = math.lcm(*(r.up for r in resamplers))
    return step * max(1, round(wanted / step))


def _blocks(plan_rows: dict[str, int], placed: dict[str, tuple[Placed, ...]], resamplers: dict[str, Resampler],
            n_samples: int, chunk: int, tasks: int) -> tuple[Block, ...]:
    """Blocks of consecutive store chunks that hold data (chunks no piece reaches are never
    written): about ``tasks`` of them, but each at least :data:`PIECES_PER_BLOCK` pieces long.
    A frame is decoded whole, and a block also decodes the pieces beside it for its filter's
    edges, so longer blocks read less twice ((p + 2)/p decodes per piece) and more blocks keep
    more workers busy."""
    n_chunks = -(-n_samples // chunk)
    wanted: dict[str, list[int]] = {}
    piece_chunks = []
    for ifo, pieces in placed.items():
        r = resamplers[ifo]
        covered = np.zeros(n_chunks, dtype=bool)
        for p in pieces:  # output samples whose filter reaches the piece
            lo = max(0, (p.start + p.skip - r.halo) * r.up // r.down)
            hi = min(n_samples, -(-(p.stop + r.halo) * r.up // r.down))
            covered[lo // chunk: -(-hi // chunk)] = True
            piece_chunks.append(p.piece.n_samples * r.up / r.down / chunk)
        wanted[ifo] = np.flatnonzero(covered).tolist()
    total = sum(len(v) for v in wanted.values())
    size = max(-(-total // max(1, tasks)), math.ceil(PIECES_PER_BLOCK * float(np.median(piece_chunks))))
    blocks: list[Block] = []
    for ifo, chunks in wanted.items():
        run: list[int] = []
        for c in chunks + [None]:
            if run and (c is None or c != run[-1] + 1 or len(run) == size):
                blocks.append(Block(len(blocks), ifo, plan_rows[ifo], run[0], run[-1] + 1))
                run = []
            if c is not None:
                run.append(c)
    return tuple(blocks)


@dataclass(frozen=True, eq=False)
class StoreBase:
    """The store an append extends (``ingest frames --append``): its grid, what it was made from,
    and per detector the native samples before its data's end (:class:`NativeTail`)."""

    path: Path
    t0: GPSTime
    sample_rate: int
    n_samples: int
    chunk_samples: int
    channels: dict[str, str]
    native_rates: dict[str, int]
    resampling: dict[str, dict]
    tails: dict[str, NativeTail]

    def tail_piece(self, ifo: str) -> Piece | None:
        """The tail as a piece in memory (None when the filter needs no past samples)."""
        tail = self.tails[ifo]
        if not tail.values.size:
            return None
        return Piece(Path(f"<{self.path.name} {ifo} tail>"), self.channels[ifo],
                     self.t0.add_samples(tail.start, tail.rate), tail.rate, tail.values.size, -2, "float64")


def store_base(path: str | os.PathLike) -> tuple[StoreBase, StoreMeta]:
    """The store at ``path`` as an append's :class:`StoreBase` (with its checked
    :class:`~gwbatch.io.store.StoreMeta`); refused unless ``gwbatch ingest frames`` made it."""
    meta = read_meta(path)
    provenance = meta.provenance
    tails = read_native_tails(meta)
    if provenance.get("source") != "channel files" or tails is None:
        raise DataError(f"--append: {meta.path} was not made by 'gwbatch ingest frames' of this version (provenance "
                        f"source {provenance.get('source')!r}, native tails {'kept' if tails else 'missing'}); "
                        f"only such stores can be extended")
    if meta.sample_rate != int(meta.sample_rate):
        raise DataError(f"--append: {meta.path} has sample rate {meta.sample_rate!r} Hz, not a whole number")
    base = StoreBase(meta.path, meta.t0, int(meta.sample_rate), meta.n_samples, meta.chunk_samples,
                     {ifo: provenance["channels"][ifo] for ifo in meta.ifos},
                     {ifo: int(provenance["native_rates"][ifo]) for ifo in meta.ifos},
                     dict(provenance.get("resampling", {})), tails)
    return base, meta


def _check_append(base: StoreBase, channels: Sequence[Channel], native: dict[str, int], sample_rate: int | None,
                  by_ifo: dict[str, list[Piece]]) -> None:
    """Refuse new pieces that do not continue ``base`` as one ingest of all the files would."""
    if {c.ifo: c.name for c in channels} != base.channels:
        raise DataError(f"--append: the channels {', '.join(c.name for c in channels)} are not the store's "
                        f"({', '.join(base.channels.values())}); name the same channels")
    if sample_rate is not None and sample_rate != base.sample_rate:
        raise DataError(f"--append: --sample-rate {sample_rate} is not the store's rate, {base.sample_rate} Hz")
    for ifo, pieces in by_ifo.items():
        if native[ifo] != base.native_rates[ifo]:
            raise DataError(f"--append: {pieces[0].path} holds {pieces[0].channel} at {native[ifo]} Hz, but {base.path} "
                            f"was made from {base.native_rates[ifo]} Hz data; one detector's files must share one rate")
        if Resampler(native[ifo], base.sample_rate).describe() != base.resampling.get(ifo):
            raise DataError(f"--append: {base.path} resampled {ifo} with another filter ({base.resampling.get(ifo)}); "
                            f"re-ingest it with this version")
        tail = base.tails[ifo]
        for p in pieces:
            if _grid_offset(p, base.t0) < tail.end:
                raise DataError(f"--append: {p.path}: {p.channel} starts at GPS {p.t0}, before the end of the {ifo} data "
                                f"{base.path} already holds (GPS {base.t0.add_samples(tail.end, tail.rate)}); an "
                                f"append takes only later data")


def plan_ingest(scans: Sequence[FileScan], channels: Sequence[Channel], sample_rate: int | None, *,
                chunk_samples: int = DEFAULT_CHUNK_SAMPLES, tasks: int = 1, base: StoreBase | None = None,
                backend: str = "numpy") -> IngestPlan:
    """The ingest of ``channels`` from the scanned files, resampled to ``sample_rate`` (None: the
    detectors' common native rate, refused if they differ), cut into about ``tasks`` blocks.

    With ``base``, the files extend that store: the plan keeps its t0, rate and chunk length, places
    its tails (:class:`NativeTail`) before the new pieces, and covers at least its samples."""
    by_ifo: dict[str, list[Piece]] = {c.ifo: [] for c in channels}
    for scan in scans:
        for piece in scan.pieces:
            by_ifo[piece.ifo].append(piece)
    missing = [c.name for c in channels if not by_ifo[c.ifo]]
    if missing:
        held = sorted({h for s in scans for h in s.held})
        raise DataError(f"channel {', '.join(missing)} is in none of the {len(scans)} input files "
                        f"(they hold: {shown_names(held, 12)})")
    native = {ifo: pieces[0].sample_rate for ifo, pieces in by_ifo.items()}
    if base is not None:
        _check_append(base, channels, native, sample_rate, by_ifo)
        sample_rate = base.sample_rate
        for ifo in by_ifo:
            tail = base.tail_piece(ifo)
            if tail is not None:
                by_ifo[ifo].append(tail)
    if sample_rate is None:
        if len(set(native.values())) > 1:
            rates = ", ".join(f"{ifo} {r} Hz" for ifo, r in native.items())
            raise DataError(f"the detectors' rates differ ({rates}); name the analysis rate with --sample-rate")
        sample_rate = next(iter(native.values()))
    if not (isinstance(sample_rate, int) and 1 <= sample_rate <= 1_000_000):
        raise DataError(f"--sample-rate {sample_rate!r} must be a whole number of Hz in [1, 1000000]")
    t0 = base.t0 if base is not None else min(p.t0 for pieces in by_ifo.values() for p in pieces)
    placed: dict[str, tuple[Placed, ...]] = {}
    overlaps: list[Overlap] = []
    for ifo, pieces in by_ifo.items():
        kept, found = _place(ifo, pieces, t0)
        placed[ifo] = tuple(kept)
        overlaps += found
    resamplers = {ifo: Resampler(native[ifo], sample_rate) for ifo in by_ifo}
    # The store's end: the last output sample whose time lies inside some detector's data.
    n_samples = max(-(-p.stop * resamplers[ifo].up // resamplers[ifo].down)
                    for ifo, ps in placed.items() for p in ps)
    if base is not None:
        n_samples = max(n_samples, base.n_samples)
    if n_samples / sample_rate > MAX_STORE_SECONDS:
        raise DataError(f"the files span {n_samples / sample_rate:.6g} s from GPS {t0}; a store may span at most "
                        f"{MAX_STORE_SECONDS:.0f} s (4 years): is one file's start time wrong?")
    if base is not None:
        chunk = base.chunk_samples  # the store's own grid (a multiple of every filter's phase count)
    else:
        chunk = min(_chunk_samples(list(resamplers.values()), chunk_samples),
                    _chunk_samples(list(resamplers.values()), n_samples))
    ifos = tuple(base.channels) if base is not None else tuple(c.ifo for c in channels)
    names = {c.ifo: c.name for c in channels}
    rows = {ifo: i for i, ifo in enumerate(ifos)}
    return IngestPlan(
        ifos=ifos, channels={ifo: names[ifo] for ifo in ifos}, native_rates=native, sample_rate=sample_rate,
        t0=t0, n_samples=int(n_samples), chunk_samples=int(chunk), resamplers=resamplers, placed=placed,
        overlaps=tuple(overlaps), blocks=_blocks(rows, placed, resamplers, n_samples, chunk, tasks), backend=backend,
    )


# ---------------------------------------------------------------------------------------------
# tasks


Reader = Callable[[Piece], np.ndarray]


def compare_overlap(overlap: Overlap, reader: Reader = read_piece) -> None:
    """Refuse two pieces that hold different samples where they overlap."""
    a = reader(overlap.first.piece)[overlap.start - overlap.first.start: overlap.stop - overlap.first.start]
    b = reader(overlap.second.piece)[overlap.start - overlap.second.start: overlap.stop - overlap.second.start]
    if not np.array_equal(a, b, equal_nan=True):
        bad = int(np.flatnonzero(~((a == b) | (np.isnan(a) & np.isnan(b))))[0])
        p, q = overlap.first.piece, overlap.second.piece
        when = p.t0.add_samples(overlap.start - overlap.first.start + bad, p.sample_rate)
        raise DataError(f"{p.path} and {q.path} overlap in {p.channel} for {overlap.stop - overlap.start} samples but "
                        f"differ from GPS {when} on ({a[bad]!r} against {b[bad]!r}); drop one of them")


def _fill(buffer: np.ndarray, start: int, pieces: Sequence[Placed], cache: dict, reader: Reader) -> None:
    """Copy the pieces' samples that fall in ``[start, start + buffer.size)`` into ``buffer``."""
    stop = start + buffer.size
    for p in pieces:
        lo, hi = max(start, p.start + p.skip), min(stop, p.stop)
        if lo >= hi:
            continue
        if p.piece not in cache:
            cache[p.piece] = reader(p.piece)
        buffer[lo - start: hi - start] = cache[p.piece][lo - p.start: hi - p.start]


class PieceReader:
    """Reads a piece: from ``arrays`` (pieces held in memory: series, a store's tails), else from
    its file.  Picklable, so tasks on the cluster take it."""

    def __init__(self, arrays: dict[Piece, np.ndarray] | None = None) -> None:
        self.arrays = dict(arrays or {})

    def __call__(self, piece: Piece) -> np.ndarray:
        return self.arrays[piece] if piece in self.arrays else read_piece(piece)


def native_tail(plan: IngestPlan, ifo: str, reader: Reader = read_piece) -> NativeTail:
    """The last native samples of ``ifo``'s data that an append needs: twice the filter's halo
    before the end of its last piece (an output next to the end reaches one halo back, and its
    filter one halo further), from a sample whose time is a whole nanosecond."""
    r = plan.resamplers[ifo]
    pieces = plan.placed[ifo]
    end = max(p.stop for p in pieces)
    step = r.rate_in // math.gcd(r.rate_in, _NS)  # a start at a whole nanosecond, as a piece's t0 is
    start = max(0, (end - 2 * r.halo) // step * step)
    values = np.full(end - start, np.nan)
    _fill(values, start, pieces, {}, reader)
    return NativeTail(ifo, plan.native_rates[ifo], start, end, values)


#: Where an appended chunk and the store both hold a sample, they may differ by at most this
#: fraction of the chunk's largest value: float32 rounding of the float64 filter, run on the CPU
#: or the GPU (an ingest on one and an append on the other), is ~1e-7.
MERGE_TOLERANCE = 1e-6


def _merge(old: np.ndarray, new: np.ndarray, block: Block, j0: int, base: str) -> np.ndarray:
    """A chunk of the store being extended (``old``, float32) and the same chunk computed again
    from its tail and the new files: where both are finite they must be equal (they come from the
    same samples through the same filter, within :data:`MERGE_TOLERANCE`), and the merge keeps the
    store's samples and adds every finite sample it lacked."""
    new = new.astype(np.float32)
    old_finite = np.isfinite(old)
    both = old_finite & np.isfinite(new)
    # Equal, to float32 rounding of a float64 filter that ran on another device (CPU or GPU).
    scale = float(np.max(np.abs(old[both]), initial=0.0))
    differ = both & (np.abs(old - new) > MERGE_TOLERANCE * scale)
    if differ.any():
        bad = int(np.flatnonzero(differ)[0])
        raise DataError(f"--append: {block.ifo} sample {j0 + bad} of {base} is {old[bad]!r} but the appended files "
                        f"give {new[bad]!r} there; the store's tail does not match the files (re-ingest all of them)")
    return np.where(old_finite, old, new)


def ingest_block(plan: IngestPlan, block: Block, strain_path: str, reader: Reader = read_piece,
                 base: StoreMeta | None = None) -> list[tuple[int, int, bytes]]:
    """Resample and write one block's store chunks (into the partial store's strain array at
    ``strain_path``); returns, per written chunk, ``(first second, seconds, packed bits)``: the seconds
    of the store holding a finite sample of this detector (its DQ ``DATA`` bit).  With ``base`` (an
    append), a chunk the extended store already holds is merged with it (:func:`_merge`)."""
    r, fs, chunk = plan.resamplers[block.ifo], plan.sample_rate, plan.chunk_samples
    pieces = plan.placed[block.ifo]
    cache: dict = {}
    seconds: list[tuple[int, bytes]] = []
    for c in range(block.first, block.stop):
        j0, j1 = c * chunk, min((c + 1) * chunk, plan.n_samples)
        span = -(-(j1 - j0) // r.up) * r.up  # a whole number of filter phases
        i0 = r.in_position(j0) - r.halo
        x = np.full(r.in_position(span) + 2 * r.halo, np.nan)
        _fill(x, i0, pieces, cache, reader)
        next_start = r.in_position(j1 // r.up * r.up) - r.halo
        for p in pieces:  # pieces no later chunk reaches: each is read once per block
            if p.piece in cache and p.stop <= next_start:
                del cache[p.piece]
        y = r.block(x, plan.backend)[: j1 - j0]
        if base is not None and j0 < base.n_samples:
            old = read_strain(base.slice(j0, j1), [block.ifo], j0, j1)[0]
            y = _merge(old, y, block, j0, str(base.path))
        finite = np.isfinite(y)
        if not finite.any():
            continue
        write_partial_strain(strain_path, block.row, j0, y)
        s0, s1 = int(j0 // fs), int(-(-j1 // fs))
        per_second = np.zeros(s1 - s0, dtype=bool)
        per_second[(np.flatnonzero(finite) + j0) // fs - s0] = True
        seconds.append((s0, s1 - s0, np.packbits(per_second).tobytes()))
    return seconds


def unpack_seconds(first: int, n: int, packed: bytes) -> tuple[int, np.ndarray]:
    """One entry of :func:`ingest_block`'s result as ``(first second, bool per second)``."""
    return first, np.unpackbits(np.frombuffer(packed, dtype=np.uint8))[:n].astype(bool)


# ---------------------------------------------------------------------------------------------
# series already in memory (gwpy)


def _memory_piece(name: str, series) -> tuple[Piece, np.ndarray]:
    """A :class:`Piece` and its samples from a gwpy ``TimeSeries`` (or anything with ``value``,
    ``t0`` or ``epoch``, and ``sample_rate`` or ``dt``)."""
    channel = str(getattr(series, "channel", None) or getattr(series, "name", None) or name)
    if str(name) != channel and ":" in str(name):
        channel = str(name)  # the dictionary's key names it (gwpy's TimeSeriesDict keys are channels)
    values = np.asarray(getattr(series, "value", series), dtype=np.float64)
    if values.ndim != 1:
        raise DataError(f"series {channel}: {values.ndim}-D samples; expected a 1-D time series")
    t0 = getattr(series, "t0", None)
    t0 = getattr(t0, "value", t0)
    rate = getattr(series, "sample_rate", None)
    rate = getattr(rate, "value", rate)
    if t0 is None or rate is None:
        raise DataError(f"series {channel} has no t0 or sample_rate (expected a gwpy TimeSeries)")
    where = Path(f"<series {channel}>")
    return header_piece(where, channel, GPSTime.parse(t0), 1.0 / float(rate), values.size, -2, "float64"), values


def from_timeseries(series: dict, out: str | os.PathLike, *, sample_rate: int | None = None,
                    overwrite: bool = False, chunk_samples: int = DEFAULT_CHUNK_SAMPLES) -> Path:
    """Write series held in memory (a gwpy ``TimeSeriesDict``, or a dict of ``TimeSeries``, keyed by
    ``IFO:NAME`` channel) to a strain store, resampled to ``sample_rate`` Hz (None: their common
    rate) exactly as ``gwbatch ingest frames`` does; NaN samples are kept masked.

    Example::

        from gwpy.timeseries import TimeSeriesDict
        from gwbatch.io.channels import from_timeseries

        data = TimeSeriesDict.read("H-H1_GWOSC_16KHZ_R1-1126259447-32.gwf", ["H1:GWOSC-16KHZ_R1_STRAIN"])
        from_timeseries(data, "gw150914.zarr", sample_rate=4096)
    """
    from gwbatch.io.frames import parse_channels
    from gwbatch.io.store import StoreWriter

    arrays: dict[Piece, np.ndarray] = {}
    for name, s in series.items():
        piece, values = _memory_piece(name, s)
        arrays[piece] = values
    channels = parse_channels([p.channel for p in arrays])
    scans = [FileScan(p.path, "memory", (p,), int(v.nbytes), "", (p.channel,)) for p, v in arrays.items()]
    plan = plan_ingest(scans, channels, sample_rate, chunk_samples=chunk_samples)
    provenance = {"source": "series in memory", "channels": plan.channels, "native_rates": plan.native_rates,
                  "resampling": {ifo: r.describe() for ifo, r in plan.resamplers.items()}}
    with StoreWriter(out, ifos=plan.ifos, sample_rate=plan.sample_rate, t0=plan.t0, n_samples=plan.n_samples,
                     chunk_samples=plan.chunk_samples, dq_bits=("DATA",), provenance=provenance,
                     overwrite=overwrite) as writer:
        dq = np.zeros((len(plan.ifos), plan.n_seconds), dtype=np.uint8)
        for block in plan.blocks:
            for entry in ingest_block(plan, block, writer.strain_path, reader=arrays.__getitem__):
                first, bits = unpack_seconds(*entry)
                dq[block.row, first: first + bits.size] |= bits.astype(np.uint8)
        for row, ifo in enumerate(plan.ifos):
            writer.write_dq(ifo, 0, dq[row])
        return writer.commit()
