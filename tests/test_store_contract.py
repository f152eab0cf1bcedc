"""The strain store's contract (issue 22, findings 6, 7, 8 and 13): per-chunk checksums bound to
their position, the contract :func:`read_meta` checks before any task, ``seal`` and format 1,
:func:`store_identity`, stale partial stores, and runs of exact zeros masked as gaps."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zarr

from gwbatch.conditioning.mask import edge_zeros, zero_runs
from gwbatch.errors import DataError
from gwbatch.io.store import (
    MAX_STORE_SECONDS,
    STORE_FORMAT,
    StoreWriter,
    chunk_digest,
    open_store,
    read_chunk,
    read_dq,
    read_meta,
    read_strain,
    remove_stale_partials,
    seal,
    store_identity,
)
from workflow.cli import main

REPO = Path(__file__).resolve().parent.parent
FS, N, CHUNK = 256, 4096, 1024  # 16 s in 4 chunks of 4 s per detector


def make_store(path: Path, *, ifos=("H1", "L1"), injections: bool = True) -> Path:
    """16 s of noise at 256 Hz in 4 chunks per detector; L1's chunk 2 is never written (a gap)."""
    rng = np.random.default_rng(7)
    with StoreWriter(path, ifos=ifos, sample_rate=FS, t0="1000000000", n_samples=N, chunk_samples=CHUNK,
                     provenance={"source": "test"}) as w:
        for k, ifo in enumerate(ifos):
            x = rng.standard_normal(N).astype(np.float32)
            if ifo == "L1":
                w.write_strain(ifo, 0, x[: 2 * CHUNK])
                w.write_strain(ifo, 3 * CHUNK, x[3 * CHUNK :])
            else:
                w.write_strain(ifo, 0, x)
            w.write_dq(ifo, 0, np.full(N // FS, 127))
        if injections:
            w.write_injections(pd.DataFrame({"id": [0, 1], "gps_time": [1e9 + 3.0, 1e9 + 9.0]}))
        return w.commit()


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return make_store(tmp_path_factory.mktemp("contract") / "base.zarr")


@pytest.fixture
def store(base, tmp_path) -> Path:
    path = tmp_path / "s.zarr"
    shutil.copytree(base, path)
    return path


def chunk_file(store: Path, row: int, index: int) -> Path:
    return store / "strain" / "c" / str(row) / str(index)


def edit_attrs(store: Path, **changes) -> None:
    """Change (or, with the value ``...``, delete) root attributes in the store's zarr.json."""
    doc = json.loads((store / "zarr.json").read_text())
    for key, value in changes.items():
        if value is ...:
            doc["attributes"].pop(key, None)
        else:
            doc["attributes"][key] = value
    (store / "zarr.json").write_text(json.dumps(doc))


def read_all(store: Path) -> np.ndarray:
    meta = read_meta(store)
    return read_strain(meta, meta.ifos, 0, meta.n_samples)


# ---------------------------------------------------------------------------------------------
# checksums bound to position (findings 6 and 8)


def test_checksum_table_written_and_gaps_are_zero(store):
    meta = read_meta(store)
    assert meta.checksums.dtype == np.uint64 and meta.checksums.shape == (2, 4)
    assert (meta.checksums[0] != 0).all() and (meta.checksums[1] != 0).sum() == 3 and meta.checksums[1, 2] == 0
    assert meta.checksums[0, 1] == chunk_digest(0, 1, chunk_file(store, 0, 1).read_bytes())
    x = read_all(store)
    assert np.isnan(x[1, 2 * CHUNK : 3 * CHUNK]).all() and not np.isnan(x[0]).any()
    assert read_chunk(meta, 1, 2) is None


def test_swapped_chunk_files_are_refused(store):
    a, b = chunk_file(store, 0, 1), chunk_file(store, 0, 2)
    da, db = a.read_bytes(), b.read_bytes()
    a.write_bytes(db)
    b.write_bytes(da)
    meta = read_meta(store)  # the metadata is intact
    read_strain(meta, ["H1"], 0, CHUNK)  # chunk 0 untouched
    with pytest.raises(DataError, match=r"strain chunk 1 of H1 \(samples 1024\.\.2048, file strain/c/0/1\) does not "
                                        r"match its checksum .*gwbatch seal"):
        read_strain(meta, ["H1"], 1000, 1100)
    # across detectors: the same bytes at another row are refused too (the key binds the row)
    shutil.copyfile(chunk_file(store, 0, 0), chunk_file(store, 1, 0))
    with pytest.raises(DataError, match="strain chunk 0 of L1"):
        read_strain(meta, ["L1"], 0, 10)


def test_edit_with_zarr_is_seen_until_sealed(store, capsys):
    group = zarr.open_group(store, mode="r+")
    group["strain"][0, 2000:2010] = 5.0  # a burst added after the store was written
    with pytest.raises(DataError, match="strain chunk 1 of H1 .* does not match its checksum"):
        read_all(store)
    assert main(["seal", str(store)]) == 0
    assert "sealed" in capsys.readouterr().out
    assert (read_all(store)[0, 2000:2010] == 5.0).all()


def test_deleted_and_added_chunk_files(store):
    chunk_file(store, 0, 3).unlink()
    with pytest.raises(DataError, match=r"strain chunk 3 of H1 \(samples 3072\.\.4096.* is missing, though the store "
                                        r"was written with it"):
        read_all(store)
    shutil.copytree(store, store.parent / "other.zarr")
    other = store.parent / "other.zarr"
    seal(other)  # deliberate: now chunk 3 of H1 is a gap
    assert np.isnan(read_all(other)[0, 3 * CHUNK :]).all()
    shutil.copyfile(chunk_file(other, 1, 1), chunk_file(other, 1, 2))  # a file where none was written
    with pytest.raises(DataError, match="strain chunk 2 of L1 .* exists, though the store's checksum table says it "
                                        "was never written"):
        read_strain(read_meta(other), ["L1"], 2 * CHUNK, 2 * CHUNK + 1)


def test_verify_store_chunks_checks_files_without_decoding(store):
    from gwbatch.io.store import verify_store_chunks

    meta = read_meta(store)
    verify_store_chunks(meta, {"H1": [0, 1, 2, 3], "L1": [0, 1, 2, 3]})
    chunk_file(store, 1, 0).write_bytes(chunk_file(store, 1, 1).read_bytes())
    verify_store_chunks(meta, {"H1": [0], "L1": [1, 2]})
    with pytest.raises(DataError, match="strain chunk 0 of L1 .* does not match its checksum"):
        verify_store_chunks(meta, {"L1": [0]})
    with pytest.raises(DataError, match="no strain chunk 4"):
        verify_store_chunks(meta, {"H1": [4]})
    # in threads: the same checks, and the first failure in the order given is the one raised
    verify_store_chunks(meta, {"H1": [0, 1, 2, 3], "L1": [1, 2, 3]}, threads=4)
    chunk_file(store, 0, 3).write_bytes(chunk_file(store, 0, 2).read_bytes())
    with pytest.raises(DataError, match="strain chunk 3 of H1 .* does not match its checksum"):
        verify_store_chunks(meta, {"H1": [1, 2, 3], "L1": [2, 0, 1]}, threads=4)
    with pytest.raises(DataError, match="strain chunk 0 of L1 .* does not match its checksum"):
        verify_store_chunks(meta, {"L1": [1, 0, 2], "H1": [3]}, threads=4)


def test_verify_store_chunks_stops_reading_at_the_first_failure(store, monkeypatch):
    """In threads, a failing file ends the check at once: the files not yet started are not read
    (``Executor.map`` cancels them when its iterator raises), so a resume over a 19 GB store names
    a damaged file without hashing the rest first."""
    import time

    import gwbatch.io.store as store_mod

    read = []

    def verified(meta, row, index):
        read.append(index)
        if index == 0:
            raise DataError("strain chunk 0 is damaged")
        time.sleep(0.01)

    monkeypatch.setattr(store_mod, "_verified_bytes", verified)
    with pytest.raises(DataError, match="chunk 0 is damaged"):
        store_mod.verify_store_chunks(read_meta(store), {"H1": [0] + [1, 2, 3] * 100}, threads=2)
    assert len(read) <= 6, len(read)  # of 301 files: the failing one and the few already started


def test_truncated_chunk_is_refused(store):
    f = chunk_file(store, 1, 3)
    f.write_bytes(f.read_bytes()[:-5])
    with pytest.raises(DataError, match="strain chunk 3 of L1 .* does not match its checksum"):
        read_strain(read_meta(store), ["L1"], 3 * CHUNK, N)


def test_seal_refuses_a_chunk_that_does_not_decode(store):
    f = chunk_file(store, 0, 0)
    f.write_bytes(b"\x00" * 100)
    with pytest.raises(DataError, match="strain/c/0/0 cannot be decoded"):
        seal(store)


def test_format_1_store_is_refused_then_upgraded_by_seal(store, capsys):
    before = read_all(store)
    shutil.rmtree(store / "checksum")
    edit_attrs(store, format="gwbatch-strain/1")
    assert main(["info", str(store)]) == 3
    err = capsys.readouterr().err
    assert f"is in format gwbatch-strain/1 (no per-chunk checksums); run 'gwbatch seal {store}'" in err
    assert len(err.strip().splitlines()) == 1
    assert main(["seal", str(store)]) == 0
    assert "checksums of 7 strain chunks written (1 never written" in capsys.readouterr().out
    meta = read_meta(store)
    np.testing.assert_array_equal(read_all(store), before)
    assert main(["info", str(store)]) == 0
    assert f"format      {STORE_FORMAT}: 7 of 8 strain chunks written" in capsys.readouterr().out
    assert meta.checksums[1, 2] == 0


def test_open_store_reads_verified_strain(store):
    ds = open_store(store)
    assert ds["strain"].dims == ("ifo", "time") and "checksum" in ds
    np.testing.assert_array_equal(read_strain(ds, ["L1", "H1"], 0, N), read_all(store)[::-1])
    np.testing.assert_array_equal(read_dq(ds, ["L1"]), read_dq(read_meta(store), ["L1"]))
    chunk_file(store, 0, 0).write_bytes(chunk_file(store, 0, 1).read_bytes())
    with pytest.raises(DataError, match="strain chunk 0 of H1"):
        read_strain(ds, ["H1"], 0, 4)


# ---------------------------------------------------------------------------------------------
# the contract, checked before any task (finding 8)


def _rewrite_strain(store: Path, dtype=None, chunks=None) -> None:
    group = zarr.open_group(store, mode="r+", use_consolidated=False)
    old = group["strain"]
    values = old[...]
    arr = group.create_array("strain", shape=values.shape, dtype=dtype or values.dtype, chunks=chunks or old.chunks,
                             fill_value=0, dimension_names=("ifo", "time"), overwrite=True,
                             compressors=zarr.codecs.ZstdCodec(level=0, checksum=True))
    arr[...] = np.nan_to_num(values * 1e3).astype(dtype or values.dtype)


def _lie(store: Path, case: str) -> None:
    if case == "int32 data":
        _rewrite_strain(store, dtype="int32")
    elif case == "chunk grid (2, C)":
        _rewrite_strain(store, chunks=(2, CHUNK))
    elif case.startswith("sample_rate"):
        value = {"sample_rate 2048 on 1024": 2 * FS, "sample_rate 1023.7": FS - 0.3, "sample_rate 0": 0,
                 "sample_rate NaN": float("nan"), "sample_rate missing": ..., "sample_rate text": "256",
                 "sample_rate true": True, "sample_rate 256.3": FS + 0.3}[case]
        edit_attrs(store, sample_rate=value)
    elif case == "dq_bits missing":
        edit_attrs(store, dq_bits=...)
    elif case == "dq_bits repeated":
        edit_attrs(store, dq_bits=["DATA", "DATA"])
    elif case == "t0 2**62":
        edit_attrs(store, t0=str(2**62))
    elif case == "t0 text":
        edit_attrs(store, t0="yesterday")
    elif case == "t0 shifted":
        edit_attrs(store, t0="1000000001.000000000")
    elif case == "format unknown":
        edit_attrs(store, format="something/9")
    elif case == "ifos missing a detector":
        edit_attrs(store, ifos=["H1"])
    elif case == "ifos swapped":
        edit_attrs(store, ifos=["L1", "H1"])
    elif case == "detector missing from the ifo array":
        group = zarr.open_group(store, mode="r+", use_consolidated=False)
        arr = group.create_array("ifo", shape=(1,), dtype=str, dimension_names=("ifo",), overwrite=True)
        arr[:] = np.array(["H1"])
    elif case in ("dq missing", "strain deleted", "checksum missing"):
        shutil.rmtree(store / {"dq missing": "dq", "strain deleted": "strain", "checksum missing": "checksum"}[case])
    elif case == "dq int16":
        group = zarr.open_group(store, mode="r+", use_consolidated=False)
        values = group["dq"][...]
        group.create_array("dq", shape=values.shape, dtype="int16", dimension_names=("ifo", "second"),
                           overwrite=True)[...] = values
    else:
        raise AssertionError(case)


LIES = {
    "int32 data": "array 'strain' has data type int32; expected float32",
    "chunk grid (2, C)": r"array 'strain' has chunk grid \(2, 1024\); expected \(1, C\)",
    "sample_rate 2048 on 1024": r"array 'dq' has shape \(2, 16\); expected \(2, 8\).*'sample_rate' 512 Hz",
    "sample_rate 1023.7": r"array 'dq' has shape \(2, 16\); expected \(2, 17\)",
    "sample_rate 0": r"attribute 'sample_rate' is 0.0; expected a finite number of Hz in \[0.001, 1e\+06\]",
    "sample_rate NaN": "attribute 'sample_rate' is nan; expected",
    "sample_rate missing": "attribute 'sample_rate' is None; expected a number of Hz",
    "sample_rate text": "attribute 'sample_rate' is '256'; expected a number of Hz",
    "sample_rate true": "attribute 'sample_rate' is True; expected a number of Hz",
    "sample_rate 256.3": r"attributes \(ifos, sample_rate, t0, dq_bits\), strain layout or data-quality values changed after it was sealed",
    "dq_bits missing": "attribute 'dq_bits' is None; expected a list of 1 to 8 distinct names",
    "dq_bits repeated": r"attribute 'dq_bits' is \['DATA', 'DATA'\]; expected a list of 1 to 8 distinct names",
    "t0 2**62": r"attribute 't0' 4611686018427387904.000000000 is outside the GPS times gwbatch handles, \[0, 2\*\*32\)",
    "t0 text": "attribute 't0' is 'yesterday'; expected a GPS time as a decimal string",
    "t0 shifted": "changed after it was sealed",
    "format unknown": r"is not a gwbatch strain store \(format attribute 'something/9', expected 'gwbatch-strain/2' or 'gwbatch-filterbank/1'\)",
    "ifos missing a detector": "array 'strain' has 2 detector rows; attribute 'ifos' names 1",
    "ifos swapped": r"array 'ifo' holds \['H1', 'L1'\]; expected the 'ifos' attribute, \['L1', 'H1'\]",
    "detector missing from the ifo array": r"array 'ifo' holds \['H1'\]; expected the 'ifos' attribute",
    "dq missing": "has no 'dq' array",
    "dq int16": "array 'dq' has data type int16; expected uint8",
    "strain deleted": "has no 'strain' array",
    "checksum missing": "has no 'checksum' array.*gwbatch seal",
}


@pytest.mark.parametrize("case", sorted(LIES))
def test_store_lies_are_refused_before_any_task(store, case, capsys):
    _lie(store, case)
    with pytest.raises(DataError, match=LIES[case]) as err:
        read_meta(store)
    assert str(store) in str(err.value) and "\n" not in str(err.value)
    assert main(["info", str(store)]) == 3
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and len(captured.err.strip().splitlines()) == 1


@pytest.mark.parametrize("case", ["int32 data", "sample_rate NaN", "dq missing", "strain deleted", "dq_bits missing"])
def test_store_lies_exit_3_in_dry_run_and_run(store, case, tmp_path, capsys):
    _lie(store, case)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"name: lie\ndata: {{store: {store}}}\nsearch: {{kind: pulse}}\ncluster: {{kind: in-process}}\n"
                   f"backend: numpy\noutput: {{dir: {tmp_path / 'out'}}}\nplan: {{chunk: 8}}\n")
    assert main(["run", str(cfg), "--dry-run"]) == 3
    assert main(["run", str(cfg), "--no-progress"]) == 3
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("gwbatch: error: store") == 2


def test_lies_through_a_subprocess_have_no_traceback(store):
    _lie(store, "sample_rate missing")
    out = subprocess.run([sys.executable, "-m", "gwbatch", "info", str(store)], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.returncode == 3 and "Traceback" not in out.stderr and "attribute 'sample_rate'" in out.stderr


def test_writer_refuses_what_the_contract_refuses(tmp_path):
    path = tmp_path / "w.zarr"
    with pytest.raises(DataError, match=r"store start t0 of .* is outside the GPS times"):
        StoreWriter(path, ifos=("H1",), sample_rate=FS, t0=2**62, n_samples=10)
    with pytest.raises(DataError, match="sample rate is 1e\\+300"):
        StoreWriter(path, ifos=("H1",), sample_rate=1e300, t0=0, n_samples=10)
    with pytest.raises(DataError, match="longer than the 126230400 s \\(4 years\\)"):
        StoreWriter(path, ifos=("H1",), sample_rate=FS, t0=0, n_samples=int(MAX_STORE_SECONDS * FS) + 1)
    with pytest.raises(DataError, match="dq_bits"):
        StoreWriter(path, ifos=("H1",), sample_rate=FS, t0=0, n_samples=10, dq_bits=("A", "A"))
    assert not any(tmp_path.iterdir())


# ---------------------------------------------------------------------------------------------
# store_identity (resume fingerprints)


def test_store_identity(store, tmp_path):
    ident = store_identity(read_meta(store))
    assert json.loads(json.dumps(ident)) == ident
    assert set(ident) == {"format", "ifos", "sample_rate", "t0", "n_samples", "chunk_samples", "dq_bits",
                          "dq_sha256", "injections_sha256", "provenance"}
    assert ident["format"] == STORE_FORMAT and ident["t0"] == "1000000000.000000000" and ident["n_samples"] == N
    assert "checksum" not in json.dumps(ident)  # the strain's checksums are compared per chunk, not here
    # a copy elsewhere is the same store
    copy = tmp_path / "copy.zarr"
    shutil.copytree(store, copy)
    assert store_identity(read_meta(copy)) == ident
    # strain edits leave it alone (they show in meta.checksums); DQ edits do not
    group = zarr.open_group(copy, mode="r+")
    group["strain"][0, 5] = 1.0
    dq = group["dq"][...]
    dq[1, 3] = 0
    group["dq"][...] = dq
    seal(copy)
    changed = store_identity(read_meta(copy))
    assert changed["dq_sha256"] != ident["dq_sha256"] and {k: v for k, v in changed.items() if k != "dq_sha256"} == \
        {k: v for k, v in ident.items() if k != "dq_sha256"}
    assert (read_meta(copy).checksums != read_meta(store).checksums).sum() == 1
    plain = make_store(tmp_path / "plain.zarr", injections=False)
    assert store_identity(read_meta(plain))["injections_sha256"] is None
    assert ident["injections_sha256"] is not None


# ---------------------------------------------------------------------------------------------
# partial stores (finding 13)


def _partial(tmp_path: Path, pid: int, host: str | None) -> Path:
    partial = tmp_path / f".s.zarr.partial-{pid}"
    (partial / "strain").mkdir(parents=True)
    if host is not None:
        (partial / ".gwbatch-writer.json").write_text(json.dumps({"host": host, "pid": pid}))
    return partial


def test_stale_partials_of_gone_processes_are_removed(tmp_path):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead = _partial(tmp_path, dead_pid, socket.gethostname())
        live = _partial(tmp_path, alive.pid, socket.gethostname())
        never = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # PIDs no process can have
        other_host = _partial(tmp_path, never, "elsewhere.example")
        legacy_new = _partial(tmp_path, never + 1, None)  # no owner file, just made: may be starting
        legacy_old = _partial(tmp_path, never + 2, None)
        past = time.time() - 3600
        os.utime(legacy_old, (past, past))
        assert sorted(remove_stale_partials(tmp_path / "s.zarr")) == sorted([dead, legacy_old])
        assert live.exists() and other_host.exists() and legacy_new.exists()
        make_store(tmp_path / "s.zarr")  # a writer of the same store cleans up as it starts
        assert read_meta(tmp_path / "s.zarr").n_samples == N
    finally:
        alive.kill()
        alive.wait()


def _simulate_args(out: Path, duration: int = 240) -> list[str]:
    return ["simulate", "--ifos", "H1,L1,V1", "--duration", str(duration), "--sample-rate", "4096", "--seed", "1",
            "--out", str(out)]


def _wait_for_partial(directory: Path, proc: subprocess.Popen, name: str) -> Path:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = [p for p in directory.glob(f".{name}.partial-*") if (p / "strain" / "c").exists()]
        if found:
            return found[0]
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    raise AssertionError("no partial store appeared")


def test_simulate_killed_with_sigkill_leaves_a_partial_the_next_writer_removes(tmp_path):
    out = tmp_path / "sim.zarr"
    proc = subprocess.Popen([sys.executable, "-m", "gwbatch", *_simulate_args(out)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    partial = _wait_for_partial(tmp_path, proc, out.name)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert partial.exists() and not out.exists()
    assert main(_simulate_args(out, duration=8)) == 0
    assert not partial.exists() and read_meta(out).n_samples == 8 * 4096
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sim.zarr"]


#: ``gwbatch`` with a SIGTERM handler that raises, as the CLI's own does (issue 22, item 5).
_SIGTERM_WRAPPER = """
import signal, sys
class Terminated(KeyboardInterrupt):
    pass
def handler(signum, frame):
    raise Terminated()
signal.signal(signal.SIGTERM, handler)
from workflow.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_simulate_stopped_by_sigterm_or_sigint_leaves_nothing(tmp_path, sig):
    out = tmp_path / "sim.zarr"
    proc = subprocess.Popen([sys.executable, "-c", _SIGTERM_WRAPPER, *_simulate_args(out)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_partial(tmp_path, proc, out.name)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0 and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())


# ---------------------------------------------------------------------------------------------
# data that is not data: runs of exact zeros (finding 7)


def test_zero_runs():
    x = np.array([0, 0, 1, 0, 0, 0, 2, 0, np.nan, 0, -0.0, 0, 3], dtype=np.float32)
    np.testing.assert_array_equal(zero_runs(x, 3), [0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0])
    np.testing.assert_array_equal(zero_runs(x, 2), [1, 1, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0])
    assert not zero_runs(x, 4).any()
    assert zero_runs(np.zeros(5), 5).all() and not zero_runs(np.zeros(4), 5).any()
    assert not zero_runs(np.full(4, np.nan), 1).any() and zero_runs(np.zeros(0), 2).size == 0


def test_zero_runs_touching_the_edges_count_the_zeros_beyond():
    x = np.array([0, 0, 1, 2, 0], dtype=np.float32)
    assert not zero_runs(x, 3).any()
    np.testing.assert_array_equal(zero_runs(x, 3, (1, 0)), [1, 1, 0, 0, 0])
    np.testing.assert_array_equal(zero_runs(x, 3, (0, 2)), [0, 0, 0, 0, 1])
    assert zero_runs(np.zeros(2), 5, (2, 1)).all()  # all zeros: both outside counts add to one run
    assert edge_zeros(x) == (2, 1) and edge_zeros(np.zeros(3)) == (3, 3) and edge_zeros(np.ones(3)) == (0, 0)


def test_zero_runs_do_not_depend_on_where_the_data_is_cut():
    """The mask of any window, its edge runs completed from beyond it, equals the whole series' mask."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal(3000)
    for start, length in ((100, 7), (500, 40), (997, 3), (1500, 200), (2990, 10)):
        x[start : start + length] = 0.0
    whole = zero_runs(x, 8)
    for lo in range(0, 3000, 37):
        for hi in (lo + 5, lo + 64, lo + 700):
            w = x[lo:hi]
            lead, trail = edge_zeros(w)
            before = edge_zeros(x[max(0, lo - 8) : lo])[1] if 0 < lead < 8 and lo else 0
            after = edge_zeros(x[hi : hi + 8])[0] if 0 < trail < 8 else 0
            np.testing.assert_array_equal(zero_runs(w, 8, (before, after)), whole[lo:hi], err_msg=f"{lo}:{hi}")


def _campaign(store: Path, out: Path, chunk: float = 64.0, **data):
    from gwbatch.config import validate_campaign

    return validate_campaign({
        "name": "zeros", "data": {"store": str(store), **data},
        "search": {"kind": "pulse", "series": "energy", "threshold": 5.0, "decimation": [16, 8, 8]},
        "background": {"slides": 5}, "plan": {"chunk": chunk},
        "cluster": {"kind": "in-process", "dashboard_address": ":0"}, "backend": "numpy",
        "output": {"dir": str(out)},
    })


def _own_masks(campaign, meta) -> dict[str, np.ndarray]:
    """Each detector's analysed mask over the plan's span, joined from every chunk's own part."""
    from gwbatch.searches.common import bookkeeping, conditioned_series
    from workflow.plan import chunk_task, make_plan

    plan = make_plan(campaign, meta)
    masks, zero = {ifo: [] for ifo in meta.ifos}, {ifo: 0 for ifo in meta.ifos}
    for spec in plan.chunks:
        for series in conditioned_series(chunk_task(plan, meta, spec, "numpy")):
            lo, hi = series.own
            masks[series.ifo].append(np.asarray(series.cond.valid[lo:hi]))
            zero[series.ifo] += bookkeeping(series, spec.start, spec.read_start, 0)[2]["zero_samples"]
    return {ifo: np.concatenate(m) for ifo, m in masks.items()}, zero


def test_zero_runs_masked_alike_for_any_chunking(small_store, tmp_path):
    """Zero runs across a chunk edge of the 32-s plan, cut by a read edge with fewer than zero_gap samples inside
    the read span, and one sample too short: each chunk's own samples are masked the same whether
    the plan cuts the data every 32 s or every 64 s; with data.zero_gap null the zeros are data."""
    store = tmp_path / "zeros.zarr"
    shutil.copytree(small_store, store)
    meta = read_meta(store)
    fs = int(meta.sample_rate)
    c32 = _campaign(store, tmp_path / "a", chunk=32.0)
    from workflow.plan import make_plan

    chunks = make_plan(c32, meta).chunks
    assert chunks[3].start == 96 * fs  # 96 s: a chunk edge of the 32-s plan, inside a 64-s chunk
    length = int(np.ceil(c32.data.zero_gap * fs))  # 11 samples at 1024 Hz
    group = zarr.open_group(store, mode="r+")
    runs = {
        "cut by chunk 3's read start, 9 samples inside": (chunks[3].read_start - 5, chunks[3].read_start + 9),
        "cut by chunk 2's read stop, 3 samples inside": (chunks[2].read_stop - 3, chunks[2].read_stop + 20),
        "across the 160 s boundary": (160 * fs - 400, 160 * fs + 300),
        "one sample short": (150 * fs, 150 * fs + length - 1),
    }
    for a, b in runs.values():
        group["strain"][0, a:b] = 0.0
    seal(store)
    m32, z32 = _own_masks(c32, read_meta(store))
    m64, z64 = _own_masks(_campaign(store, tmp_path / "b", chunk=64.0), read_meta(store))
    for ifo in ("H1", "L1"):
        np.testing.assert_array_equal(m32[ifo], m64[ifo], err_msg=ifo)
    masked = sum(b - a for key, (a, b) in runs.items() if key != "one sample short")
    assert z32 == z64 == {"H1": masked, "L1": 0}
    start = make_plan(c32, meta).span_start
    for key, (a, b) in runs.items():
        assert m32["H1"][a - start : b - start].any() == (key == "one sample short"), key
    off, z_off = _own_masks(_campaign(store, tmp_path / "c", chunk=64.0, zero_gap=None), read_meta(store))
    assert z_off == {"H1": 0, "L1": 0} and off["H1"][150 * fs - start] and off["H1"].sum() > m64["H1"].sum()


def test_zero_stretch_is_masked_reported_and_its_injection_not_missed(small_store, tmp_path):
    """Finding 7: a 3-s stretch of exact zeros in both detectors is masked like a gap: out of the
    livetime with the whitening edge on each side, reported as zero_samples, and the injection in it
    is not analysed (so not missed)."""
    from gwbatch.io.store import read_injections
    from gwbatch.io.tables import read_table
    from workflow.campaign import run_campaign

    store = tmp_path / "zeros.zarr"
    shutil.copytree(small_store, store)
    meta = read_meta(store)
    fs = int(meta.sample_rate)
    rel = read_injections(store)["gps_time"].to_numpy() - float(meta.t0)
    victim = next(i for i, t in enumerate(rel) if 20 < t < 230 and np.sort(np.abs(rel - t))[1] > 8)
    a, b = int(rel[victim]) - 1, int(rel[victim]) + 2
    zarr.open_group(store, mode="r+")["strain"][:, a * fs : b * fs] = 0.0
    seal(store)
    campaign = _campaign(store, tmp_path / "run")
    run = run_campaign(campaign, progress=False)
    chunks = run.manifest["chunks"]
    for ifo in ("H1", "L1"):
        assert sum(c["series_stats"][ifo]["zero_samples"] for c in chunks) == (b - a) * fs
        assert run.manifest["livetime"]["masked_seconds"][ifo] == {"nonfinite": 0.0, "zero_runs": float(b - a), "vetoed": 0.0, "gated": 0.0}
    edge = campaign.conditioning.filter_duration
    analysed = run.manifest["livetime"]["analysed_seconds"]
    # 254 s analysed without the stretch (1 s whitening edge at each end of the store)
    assert analysed["H1"] == pytest.approx(254.0 - (b - a) - edge, abs=2 / fs)
    assert analysed["L1"] == pytest.approx(254.0 - (b - a) - edge, abs=2 / fs)
    inj = read_table(run.out / "injections.parquet").set_index("id")
    row = inj.loc[victim]
    assert not row["analysed"] and not row["found"]
    missed = inj[inj["analysed"] & ~inj["found"]]
    assert victim not in missed.index
