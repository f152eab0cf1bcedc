"""Channel files in (issue 24): GWF frames through LALFrame and gwpy's HDF5 layout, resampled to
the analysis rate with a stated filter, gaps masked, overlaps compared, resumable, and every bad
file refused in one line within seconds."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.signal import welch

from gwbatch.errors import DataError
from gwbatch.gpstime import GPSTime
from gwbatch.io.channels import from_timeseries, plan_ingest
from gwbatch.io.frames import expand_inputs, parse_channels, scan_all, write_gwf
from gwbatch.io.resample import PASSBAND, Resampler
from gwbatch.io.store import read_dq, read_meta, read_strain
from workflow.cli import main
from workflow.ingest import ingest_channels

pytest.importorskip("lalframe")

REPO = Path(__file__).resolve().parents[1]
HLV = REPO.parent / "shared" / "data" / "hlv-hw100916"
HLV_GWF = HLV / "HLV-HW100916-968654552-1.gwf"
HLV_HDF = HLV / "HLV-HW100916-968654552-1.hdf"
HLV_CHANNELS = ("H1:LDAS-STRAIN", "L1:LDAS-STRAIN", "V1:h_16384Hz")
GW150914 = REPO / "tests" / "data" / "gw150914"
T0 = 1_000_000_000


def _ingest(inputs, channels, out, **kw):
    kw.setdefault("cluster_kind", "in-process")
    return ingest_channels([str(i) for i in inputs], channels, out, progress=False, **kw)


def _all(path) -> np.ndarray:
    meta = read_meta(path)
    return read_strain(meta, meta.ifos, 0, meta.n_samples)


# ---------------------------------------------------------------------------------------------
# real frames


needs_hlv = pytest.mark.skipif(not HLV_GWF.exists(), reason="the three-detector test frame is not here")


@needs_hlv
def test_hlv_frame_ingests_with_channel_names_and_resampling(tmp_path, capsys):
    """The acceptance command, as typed: 16384 Hz H1/L1/V1 to 4096 Hz.  Each detector equals the
    gwpy HDF5 twin's samples resampled by the stated filter (float32), NaN only within the
    filter's reach of the file's ends."""
    out = tmp_path / "S"
    args = ["ingest", "frames", str(HLV_GWF), *sum((["--channel", c] for c in HLV_CHANNELS), []),
            "--sample-rate", "4096", "--out", str(out), "--workers", "1", "--no-progress"]
    assert main(args) == 0
    meta = read_meta(out)
    assert meta.ifos == ("H1", "L1", "V1") and meta.sample_rate == 4096 and meta.t0 == GPSTime(968654552)
    got = read_strain(meta, meta.ifos, 0, meta.n_samples)
    import h5py

    r = Resampler(16384, 4096)
    reach = -(-(r.taps.size - 1) // 2 // 4)  # output samples an end masks
    with h5py.File(HLV_HDF) as h5:
        for row, channel in enumerate(HLV_CHANNELS):
            x = h5[channel][()]
            want = r.block(np.concatenate([np.full(r.halo, np.nan), x, np.full(r.halo, np.nan)]))
            assert np.array_equal(got[row], want.astype(np.float32), equal_nan=True)
            finite = np.flatnonzero(np.isfinite(got[row]))
            assert reach <= finite[0] <= reach + 2 and finite[-1] >= 4095 - reach - 2
    provenance = meta.provenance
    assert provenance["native_rates"] == {"H1": 16384, "L1": 16384, "V1": 16384}
    assert provenance["resampling"]["V1"]["taps"] == r.taps.size
    assert provenance["files"][0]["sha256"] and provenance["channels"]["V1"] == "V1:h_16384Hz"
    assert read_dq(meta, meta.ifos).tolist() == [[1], [1], [1]]


@needs_hlv
def test_gwpy_hdf5_and_in_memory_series_give_the_frame_store(tmp_path):
    """gwpy's HDF5 layout and gwpy's TimeSeriesDict in memory (from_timeseries) give the frame's store."""
    frame = _all(_ingest([HLV_GWF], HLV_CHANNELS, tmp_path / "f", sample_rate=2048).path)
    hdf = _all(_ingest([HLV_HDF], HLV_CHANNELS, tmp_path / "h", sample_rate=2048).path)
    assert np.array_equal(frame, hdf, equal_nan=True)
    gwpy = pytest.importorskip("gwpy.timeseries")
    data = gwpy.TimeSeriesDict.read(str(HLV_GWF), list(HLV_CHANNELS))
    assert np.array_equal(_all(from_timeseries(data, tmp_path / "m", sample_rate=2048)), frame, equal_nan=True)


def _gwosc_to_frames(tmp_path) -> list[Path]:
    from gwbatch.io.gwosc import read_gwosc

    frames = []
    for f in sorted(GW150914.glob("*_LOSC_4_V2-1126259446-32.hdf5")):
        g = read_gwosc(f)
        frames.append(write_gwf(tmp_path / f"{g.ifo[0]}-{g.ifo}_LOSC-{g.t0.seconds}-32.gwf", g.t0, g.duration,
                                {f"{g.ifo}:LOSC-STRAIN": (g.t0, g.sample_rate, g.strain)}))
    return frames


def test_gw150914_frames_give_the_hdf5_store_and_candidates(tmp_path):
    """GW150914's GWOSC files written to GWF and ingested as frames: the same strain (bit for bit),
    the same DATA bit, and the same candidates from the same campaign as the HDF5 ingest."""
    from gwbatch.io.gwosc import ingest_gwosc
    from gwbatch.config import load_campaign
    from workflow.campaign import run_campaign

    hdf = ingest_gwosc(sorted(GW150914.glob("*_LOSC_4_V2-1126259446-32.hdf5")), tmp_path / "hdf.zarr")
    cache = tmp_path / "gw150914.lcf"
    cache.write_text("".join(f"{p.name[0]} {p.name.split('-')[1]} 1126259446 32 file://localhost{p}\n"
                             for p in _gwosc_to_frames(tmp_path)))
    gwf = _ingest([cache], ["H1:LOSC-STRAIN", "L1:LOSC-STRAIN"], tmp_path / "gwf.zarr").path
    a, b = read_meta(hdf), read_meta(gwf)
    assert (a.ifos, a.t0, a.sample_rate, a.n_samples) == (b.ifos, b.t0, b.sample_rate, b.n_samples)
    assert np.array_equal(_all(hdf), _all(gwf), equal_nan=True)
    assert np.array_equal(read_dq(a, a.ifos) & 1, read_dq(b, b.ifos))
    tables = []
    for store in (hdf, gwf):
        campaign = load_campaign(REPO / "configs" / "gw150914-pulse.yaml",
                                 [f"data.store={store}", f"output.dir={tmp_path / store.name}-run", "data.dq_flags=[DATA]",
                                  "cluster.kind=in-process", "backend=numpy"])
        tables.append(run_campaign(campaign, progress=False).reduced.candidates)
    assert len(tables[0]) > 0
    pd.testing.assert_frame_equal(tables[0], tables[1])
    assert abs(tables[1].iloc[0]["gps_time"] - 1126259462.42) < 0.05


# ---------------------------------------------------------------------------------------------
# simulated frames: rates, gaps, overlaps


def _noise_frames(tmp_path, rates: dict[str, int], pieces: list[tuple[float, float]], seed: int = 1,
                  tone: float | None = None) -> tuple[list[Path], dict[str, np.ndarray]]:
    """Frames of white noise (plus an optional tone) for each detector, one file per ``(start,
    duration)`` relative to :data:`T0`, all cut from one series per detector (so overlaps agree)."""
    rng = np.random.default_rng(seed)
    end = max(s + d for s, d in pieces)
    series = {}
    for ifo, rate in rates.items():
        x = rng.standard_normal(int(end * rate))
        if tone:
            x += 3 * np.sin(2 * np.pi * tone * np.arange(x.size) / rate)
        series[ifo] = x
    files = []
    for start, duration in pieces:
        chans = {f"{ifo}:STRAIN": (T0 + start, rate, series[ifo][int(start * rate): int((start + duration) * rate)])
                 for ifo, rate in rates.items()}
        files.append(write_gwf(tmp_path / f"X-SIM-{T0 + int(start)}-{int(duration)}.gwf", T0 + start, duration, chans))
    return files, series


def test_mixed_rates_resampled_with_spectra_kept_and_gaps_masked(tmp_path):
    """LIGO at 16384 Hz and Virgo at 20000 Hz to 4096 Hz, three files each with a 3 s gap and a 2 s
    overlap (agreeing): spectra equal the original below 0.9 × Nyquist within 1%; no output within
    the filter's reach of the gap is finite, every output beyond it is."""
    files, series = _noise_frames(tmp_path, {"H1": 16384, "V1": 20000}, [(0, 24), (22, 10), (35, 29)], tone=1800.0)
    summary = _ingest(files, ["H1:STRAIN", "V1:STRAIN"], tmp_path / "s.zarr", sample_rate=4096,
                      chunk_samples=8192)
    assert len(summary.plan.overlaps) == 2  # one per detector, compared and accepted
    got = _all(summary.path)
    fs = 4096
    assert got.shape == (2, 64 * fs)
    for row, (ifo, rate) in enumerate((("H1", 16384), ("V1", 20000))):
        r = Resampler(rate, fs)
        reach = (r.taps.size - 1) / 2 / (rate * r.up)  # seconds the filter reaches each side
        t = np.arange(got.shape[1]) / fs
        near_gap = (t > 32 - reach) & (t < 35 + reach)
        near_end = (t < reach) | (t > 64 - reach)
        assert not np.isfinite(got[row][near_gap | near_end]).any()
        margin = 2 / fs  # the mask ends on the output grid
        far = ~((t > 32 - reach - margin) & (t < 35 + reach + margin)) & (t > reach + margin) & (t < 64 - reach - margin)
        assert np.isfinite(got[row][far]).all()
        # spectra of the 24 s before the gap
        x, y = series[ifo][: 24 * rate], got[row][int(reach * fs) + 8: 24 * fs]
        f1, p1 = welch(x[int(reach * rate) + 8 * rate // fs:], fs=rate, nperseg=rate)
        f2, p2 = welch(y, fs=fs, nperseg=fs)
        band = (f2 > 10) & (f2 < PASSBAND * fs / 2)
        ratio = p2[band] / np.interp(f2[band], f1, p1)
        assert np.all(np.abs(ratio - 1) < 0.01), (ifo, ratio.min(), ratio.max())
        assert read_meta(summary.path).provenance["native_rates"][ifo] == rate
    dq = read_dq(read_meta(summary.path), ["H1", "V1"])
    assert dq[:, 32:35].sum() == 0 and dq[:, :32].all() and dq[:, 35:].all()


def test_many_workers_write_the_same_store(tmp_path):
    """Two worker processes of a local Dask cluster write what one process writes."""
    files, _ = _noise_frames(tmp_path, {"H1": 16384, "L1": 16384}, [(0, 8), (8, 8), (20, 8)])
    one = _ingest(files, ["H1:STRAIN", "L1:STRAIN"], tmp_path / "one.zarr", sample_rate=2048, chunk_samples=2048)
    two = _ingest(files, ["H1:STRAIN", "L1:STRAIN"], tmp_path / "two.zarr", sample_rate=2048, chunk_samples=2048,
                  cluster_kind="local", workers=2)
    assert len(two.plan.blocks) > 2
    assert np.array_equal(_all(one.path), _all(two.path), equal_nan=True)
    assert np.array_equal(read_meta(one.path).checksums, read_meta(two.path).checksums)


def _interrupt_block(monkeypatch, n: int):
    """Make the ``n``-th block task of an ingest raise KeyboardInterrupt; returns the real task."""
    import workflow.ingest as ingest

    real, calls = ingest.ingest_block, []

    def interrupted(*a, **kw):
        calls.append(1)
        if len(calls) == n:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(ingest, "ingest_block", interrupted)
    return real


def test_interrupted_ingest_resumes_and_matches(tmp_path, monkeypatch):
    """An ingest interrupted after some blocks keeps them; the same command writes only the rest and
    gives the store an uninterrupted ingest gives."""
    import workflow.ingest as ingest

    files, _ = _noise_frames(tmp_path, {"H1": 16384}, [(4 * k, 4) for k in range(8)])
    args = dict(sample_rate=4096, chunk_samples=4096)
    clean = _ingest(files, ["H1:STRAIN"], tmp_path / "clean.zarr", **args)
    real = _interrupt_block(monkeypatch, 4)
    out = tmp_path / "resumed.zarr"
    with pytest.raises(KeyboardInterrupt):
        _ingest(files, ["H1:STRAIN"], out, **args)
    assert not out.exists() and len(list(tmp_path.glob(".resumed.zarr.resume-*"))) == 1
    monkeypatch.setattr(ingest, "ingest_block", real)
    again = _ingest(files, ["H1:STRAIN"], out, **args)
    assert again.blocks_resumed == 3 and again.blocks_written == len(again.plan.blocks) - 3
    assert np.array_equal(_all(out), _all(clean.path), equal_nan=True)
    assert np.array_equal(read_meta(out).checksums, read_meta(clean.path).checksums)
    assert not list(tmp_path.glob(".resumed.zarr.*"))


def test_a_resume_with_another_block_layout_writes_every_chunk(tmp_path, monkeypatch):
    """Blocks follow the workers (about four per worker), and a requeued job may have another
    number of them: the journal names blocks by the chunks they cover, so a resume with another
    layout takes only the blocks it would write itself and gives the uninterrupted store.  (Keyed
    by block number, blocks 0-3 of a 2-worker run passed for blocks 0-3 of a 1-worker run and a
    quarter of the chunks were never written, exit 0.)"""
    import workflow.ingest as ingest

    files, _ = _noise_frames(tmp_path, {"H1": 16384}, [(4 * k, 4) for k in range(8)])
    args = dict(sample_rate=4096, chunk_samples=4096)
    clean = _ingest(files, ["H1:STRAIN"], tmp_path / "clean.zarr", **args)
    plan_ingest = ingest.plan_ingest

    def with_tasks(n):
        monkeypatch.setattr(ingest, "plan_ingest", lambda *a, **kw: plan_ingest(*a, **{**kw, "tasks": n}))

    with_tasks(8)  # four blocks of eight chunks (a block holds at least two frames)
    real = _interrupt_block(monkeypatch, 3)
    out = tmp_path / "resumed.zarr"
    with pytest.raises(KeyboardInterrupt):
        _ingest(files, ["H1:STRAIN"], out, **args)
    monkeypatch.setattr(ingest, "ingest_block", real)
    with_tasks(2)  # two blocks of sixteen chunks: none was written as such
    again = _ingest(files, ["H1:STRAIN"], out, **args)
    assert len(again.plan.blocks) == 2 and again.blocks_resumed == 0 and again.blocks_written == 2
    assert np.array_equal(_all(out), _all(clean.path), equal_nan=True)
    assert np.array_equal(read_meta(out).checksums, read_meta(clean.path).checksums)
    assert np.array_equal(read_dq(read_meta(out), ["H1"]), read_dq(read_meta(clean.path), ["H1"]))


def test_globs_and_cache_files_expand(tmp_path):
    files, _ = _noise_frames(tmp_path, {"H1": 1024}, [(0, 4), (4, 4)])
    cache = tmp_path / "h1.lcf"
    cache.write_text(f"# a comment\nH H1_SIM {T0} 4 file://localhost{files[0]}\nH H1_SIM {T0 + 4} 4 {files[1].name}\n")
    assert expand_inputs([cache]) == files
    assert expand_inputs([str(tmp_path / "X-SIM-*.gwf"), files[0]]) == files


# ---------------------------------------------------------------------------------------------
# the boundary: one line, within seconds, non-zero exit, nothing written


def _refused(tmp_path, capsys, files, channels, needle, **extra) -> str:
    out = tmp_path / "refused.zarr"
    args = ["ingest", "frames", *map(str, files), *sum((["--channel", c] for c in channels), []),
            "--out", str(out), "--workers", "1", "--no-progress"]
    for key, value in extra.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    start = time.perf_counter()
    code = main(args)
    seconds = time.perf_counter() - start
    err = capsys.readouterr().err.strip()
    assert code == 3 and seconds < 10, (code, seconds)
    assert len(err.splitlines()) == 1 and needle in err, err
    assert not out.exists() and not list(tmp_path.glob(".refused.zarr*"))
    return err


def test_a_sample_beyond_float32_is_refused_not_stored_as_infinite(tmp_path, capsys):
    """A float64 frame sample beyond float32's range (a damaged frame, or a channel in other
    units) is refused naming it; it was stored as infinity (read as no data) with exit 0."""
    x = np.random.default_rng(3).standard_normal(4 * 1024) * 1e-21
    x[1000] = 1e300
    f = write_gwf(tmp_path / "X-BAD-1000000000-4.gwf", T0, 4, {"H1:STRAIN": (T0, 1024, x)})
    _refused(tmp_path, capsys, [f], ["H1:STRAIN"], "is 1e+300, beyond float32's range")


def test_missing_channel_refused_naming_file_and_channel(tmp_path, capsys):
    files, _ = _noise_frames(tmp_path, {"H1": 1024, "L1": 1024}, [(0, 4)])
    err = _refused(tmp_path, capsys, files, ["H1:STRAIN", "L1:GDS-CALIB_STRAIN"], "L1:GDS-CALIB_STRAIN")
    assert "H1:STRAIN, L1:STRAIN" in err  # what the files hold
    _refused(tmp_path, capsys, files, ["V1:STRAIN"], str(files[0]))


def test_empty_frame_refused(tmp_path, capsys):
    empty = write_gwf(tmp_path / "X-EMPTY-1000000000-4.gwf", T0, 4, {})
    _refused(tmp_path, capsys, [empty], ["H1:STRAIN"], "empty frame")


@pytest.mark.parametrize("keep", [0.0, 0.1, 0.5, 0.9, 0.999])
def test_truncated_frame_refused(tmp_path, capsys, keep):
    files, _ = _noise_frames(tmp_path, {"H1": 4096}, [(0, 4)])
    data = files[0].read_bytes()
    files[0].write_bytes(data[: int(len(data) * keep)])
    _refused(tmp_path, capsys, files, ["H1:STRAIN"], str(files[0]))


def test_corrupt_frame_refused_by_its_checksum(tmp_path, capsys):
    files, _ = _noise_frames(tmp_path, {"H1": 4096}, [(0, 4)])
    data = bytearray(files[0].read_bytes())
    data[len(data) // 2] ^= 0xFF
    files[0].write_bytes(bytes(data))
    _refused(tmp_path, capsys, files, ["H1:STRAIN"], str(files[0]))


def test_overlapping_frames_that_disagree_refused(tmp_path, capsys):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    a, _ = _noise_frames(tmp_path / "a", {"H1": 1024}, [(0, 8)], seed=1)
    b, _ = _noise_frames(tmp_path / "b", {"H1": 1024}, [(4, 8)], seed=2)
    err = _refused(tmp_path, capsys, a + b, ["H1:STRAIN"], "overlap")
    assert str(a[0]) in err and str(b[0]) in err


def test_rates_and_grids_refused(tmp_path, capsys):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir(), (tmp_path / "c").mkdir()
    a, _ = _noise_frames(tmp_path / "a", {"H1": 1024}, [(0, 4)])
    b, _ = _noise_frames(tmp_path / "b", {"H1": 2048}, [(4, 4)])
    # a frame file's rate is probed once per channel: a file at another rate is refused when read
    _refused(tmp_path, capsys, a + b, ["H1:STRAIN"], "8192 samples at 2048 Hz")
    c, _ = _noise_frames(tmp_path / "c", {"L1": 2048}, [(0, 4)])
    _refused(tmp_path, capsys, a + c, ["H1:STRAIN", "L1:STRAIN"], "--sample-rate")
    off = write_gwf(tmp_path / "off.gwf", f"{T0 + 4}.0001", 4, {"H1:STRAIN": (f"{T0 + 4}.0001", 1024, np.zeros(4096))})
    _refused(tmp_path, capsys, a + [off], ["H1:STRAIN"], "sample grids")


@pytest.mark.parametrize("channel", ["H1", "GDS-CALIB_STRAIN", "h1:STRAIN", "H1:", "H1:a b"])
def test_malformed_channel_names_refused(tmp_path, capsys, channel):
    files, _ = _noise_frames(tmp_path, {"H1": 1024}, [(0, 4)])
    _refused(tmp_path, capsys, files, [channel], "IFO:NAME")


def test_two_channels_of_one_detector_refused():
    with pytest.raises(DataError, match="both for H1"):
        parse_channels(["H1:A", "H1:B"])


def test_bad_cache_lines_refused(tmp_path, capsys):
    files, _ = _noise_frames(tmp_path, {"H1": 1024}, [(0, 4)])
    for text, needle in [("H H1 x 4 /a.gwf\n", "not a LAL cache line"), (f"H H1 {T0} 4 /nope.gwf\n", "does not exist"),
                         (f"H H1 {T0} 4 http://host/a.gwf\n", "not a local file"), ("\n", "listing no frame files")]:
        cache = tmp_path / "c.lcf"
        cache.write_text(text)
        _refused(tmp_path, capsys, [cache], ["H1:STRAIN"], needle)


def test_plan_refuses_a_span_of_decades(tmp_path):
    files, _ = _noise_frames(tmp_path, {"H1": 1024}, [(0, 4)])
    far = write_gwf(tmp_path / "far.gwf", T0 + 200_000_000, 4, {"H1:STRAIN": (T0 + 200_000_000, 1024, np.zeros(4096))})
    scans = scan_all(files + [far], ["H1:STRAIN"])
    with pytest.raises(DataError, match="4 years"):
        plan_ingest(scans, parse_channels(["H1:STRAIN"]), None)


# ---------------------------------------------------------------------------------------------
# appending later files to a store


APPEND_RATES = {"H1": 16384, "V1": 20000}
#: Five files: two batches that meet end to end (the seam falls inside a chunk), then a file after a 3 s gap.
APPEND_FILES = [(0, 6), (6, 5), (11, 6), (17, 4), (24, 5)]


def _batches(files):
    return [files[:2], files[2:4], files[4:]]


def test_append_equals_one_ingest(tmp_path):
    """A store made from the first two files and extended twice (a seam with no gap inside a chunk,
    then a file after a gap) equals one ingest of all five files: every sample, every chunk file's
    digest, the DQ; the provenance lists all five files and both appends."""
    files, _ = _noise_frames(tmp_path, APPEND_RATES, APPEND_FILES)
    channels, args = ["H1:STRAIN", "V1:STRAIN"], dict(sample_rate=4096, chunk_samples=3 * 4096)
    whole = _ingest(files, channels, tmp_path / "whole.zarr", **args)
    out = tmp_path / "grown.zarr"
    batches = _batches(files)
    _ingest(batches[0], channels, out, **args)
    for batch in batches[1:]:
        summary = _ingest(batch, channels, out, append=True, **args)
    grown = read_meta(out)
    assert (grown.t0, grown.n_samples, grown.chunk_samples) == (read_meta(whole.path).t0, whole.plan.n_samples,
                                                                 whole.plan.chunk_samples)
    assert np.array_equal(_all(out), _all(whole.path), equal_nan=True)
    assert np.array_equal(grown.checksums, read_meta(whole.path).checksums)
    assert np.array_equal(read_dq(grown, grown.ifos), read_dq(read_meta(whole.path), grown.ifos))
    assert [f["name"] for f in grown.provenance["files"]] == [f.name for f in files]
    assert [a["files"] for a in grown.provenance["appends"]] == [2, 1]
    assert summary.blocks_written == len(summary.plan.blocks)
    # the seam between the batches is finite: the outputs the first store masked at its end were filled
    seam = 11 * 4096
    assert np.isfinite(_all(out)[:, seam - 400: seam + 400]).all()
    assert not list(tmp_path.glob(".grown.zarr*"))


def test_interrupted_append_leaves_the_store_and_resumes(tmp_path, monkeypatch):
    """An append interrupted part way leaves the store as it was (every chunk verified); the same
    command then takes over the partial store and gives what one ingest gives."""
    import workflow.ingest as ingest

    files, _ = _noise_frames(tmp_path, APPEND_RATES, APPEND_FILES)
    channels, args = ["H1:STRAIN", "V1:STRAIN"], dict(sample_rate=4096, chunk_samples=4096)
    whole = _ingest(files, channels, tmp_path / "whole.zarr", **args)
    out = tmp_path / "grown.zarr"
    _ingest(files[:3], channels, out, **args)
    before, before_sums = _all(out), read_meta(out).checksums
    real = _interrupt_block(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
        _ingest(files[3:], channels, out, append=True, **args)
    assert np.array_equal(_all(out), before, equal_nan=True)
    assert np.array_equal(read_meta(out).checksums, before_sums)
    assert len(list(tmp_path.glob(".grown.zarr.resume-*"))) == 1
    monkeypatch.setattr(ingest, "ingest_block", real)
    again = _ingest(files[3:], channels, out, append=True, **args)
    assert again.blocks_resumed == 2
    assert np.array_equal(_all(out), _all(whole.path), equal_nan=True)
    assert np.array_equal(read_meta(out).checksums, read_meta(whole.path).checksums)


def test_append_refusals(tmp_path, capsys):
    """Each refused in one line, the store left as it was: data before the store's end, other
    channels, another native rate, a store not made from frames, --append with --overwrite."""
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    files, _ = _noise_frames(tmp_path / "a", {"H1": 4096}, [(0, 4), (4, 4), (3, 4)])
    out = tmp_path / "s.zarr"
    _ingest(files[:2], ["H1:STRAIN"], out, chunk_samples=4096)
    before = _all(out)

    def refused(inputs, channels, needle, *extra):
        args = ["ingest", "frames", *map(str, inputs), *sum((["--channel", c] for c in channels), []),
                "--out", str(out), "--workers", "1", "--no-progress", *extra]
        code = main(args)
        err = capsys.readouterr().err.strip()
        assert code != 0 and len(err.splitlines()) == 1 and needle in err, err
        assert np.array_equal(_all(out), before, equal_nan=True)
        return err

    refused([files[2]], ["H1:STRAIN"], "before the end of the H1 data", "--append")
    other, _ = _noise_frames(tmp_path / "b", {"H1": 2048, "L1": 2048}, [(8, 4)])
    refused(other, ["H1:STRAIN", "L1:STRAIN"], "not the store's", "--append")
    refused(other, ["H1:STRAIN"], "2048 Hz", "--append")
    refused(other, ["H1:STRAIN"], "--append extends a store", "--append", "--overwrite")
    simulated = tmp_path / "sim.zarr"
    assert main(["simulate", "--out", str(simulated), "--duration", "8", "--ifos", "H1", "--sample-rate", "4096", "--seed", "1"]) == 0
    capsys.readouterr()
    code = main(["ingest", "frames", str(other[0]), "--channel", "H1:STRAIN", "--out", str(simulated), "--append",
                 "--workers", "1", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code != 0 and "not made by 'gwbatch ingest frames'" in err and len(err.splitlines()) == 1


@pytest.mark.gpu
def test_gpu_resampling_equals_the_cpu_and_appends_across_devices(tmp_path):
    """``backend="cupy"`` runs the same filter on the GPU: every sample within 1e-6 of the CPU
    store's largest, the same NaN mask (gaps and ends), the same DQ; a CPU store extended on the
    GPU equals one CPU ingest of all the files to the same tolerance."""
    files, _ = _noise_frames(tmp_path, APPEND_RATES, APPEND_FILES)
    channels, args = ["H1:STRAIN", "V1:STRAIN"], dict(sample_rate=4096, chunk_samples=3 * 4096)
    cpu = _all(_ingest(files, channels, tmp_path / "cpu.zarr", **args).path)
    gpu = _all(_ingest(files, channels, tmp_path / "gpu.zarr", backend="cupy", **args).path)
    assert np.array_equal(np.isfinite(cpu), np.isfinite(gpu))
    scale = np.nanmax(np.abs(cpu))
    assert np.nanmax(np.abs(cpu - gpu)) <= 1e-6 * scale
    assert read_meta(tmp_path / "gpu.zarr").provenance["resampled_on"] == "cupy"
    out = tmp_path / "mixed.zarr"
    _ingest(files[:3], channels, out, **args)
    _ingest(files[3:], channels, out, append=True, backend="cupy", **args)
    mixed = _all(out)
    assert np.array_equal(np.isfinite(cpu), np.isfinite(mixed))
    assert np.nanmax(np.abs(cpu - mixed)) <= 1e-6 * scale


def test_a_resampling_ratio_too_dear_is_refused_before_any_work():
    """A co-prime rate (1024 Hz to 999983 Hz) would design a 1.3e8-tap filter (6 GB, 35 s) and
    then ingest; it is refused naming the ratio and the taps.  20000 Hz to 4096 Hz (Virgo) keeps
    its 80145 taps."""
    from gwbatch.errors import ConfigError

    assert Resampler(20000, 4096).taps.size == 80145
    with pytest.raises(ConfigError, match=r"ratio of 999983/1024, whose anti-alias filter needs 128227253 taps "
                                          r"\(at most 1048576\)"):
        Resampler(1024, 999983)
