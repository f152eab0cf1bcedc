"""Files written whole or not at all (gwbatch.io.atomic): failures, killed writers, rivals."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gwbatch.io.atomic import process_alive, remove_stale_temps, write_atomically
from gwbatch.io.tables import read_table, write_table


def _temps(path: Path) -> list[Path]:
    return sorted(p for p in path.parent.iterdir() if p.name.startswith(f".{path.name}."))


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "t.parquet"
    write_table(pd.DataFrame({"snr": [8.0]}), target)

    def fail(fh):
        fh.write(b"half a table")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        write_atomically(target, fail)
    assert read_table(target)["snr"].tolist() == [8.0]
    assert _temps(target) == []


def test_a_writer_killed_outright_leaves_a_temporary_the_next_write_removes(tmp_path):
    target = tmp_path / "bank.h5"
    code = ("import sys, time; from gwbatch.io.atomic import write_atomically\n"
            "def slow(fh):\n    fh.write(b'x' * 1000); fh.flush(); print('writing', flush=True); time.sleep(60)\n"
            f"write_atomically({str(target)!r}, slow)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "writing"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    left = _temps(target)
    assert len(left) == 1 and left[0].stat().st_size == 1000 and str(child.pid) in left[0].name
    assert not target.exists()  # nothing that looks complete

    write_atomically(target, lambda fh: fh.write(b"whole"))
    assert target.read_bytes() == b"whole"
    assert _temps(target) == []


def test_temporaries_of_live_writers_and_other_hosts_are_kept(tmp_path):
    target = tmp_path / "psd.h5"
    host = socket.gethostname()
    dead_pid = _dead_pid()
    hexes = "0123456789ab"
    live = tmp_path / f".{target.name}.tmp.{host}.{os.getppid()}.{hexes}"      # a live process of this host
    other = tmp_path / f".{target.name}.tmp.elsewhere.{dead_pid}.{hexes}"     # another host's writer
    longer = tmp_path / f".{target.name}.tmp.{host}.5.{dead_pid}.{hexes}"     # host "<this host>.5"
    dead = tmp_path / f".{target.name}.tmp.{host}.{dead_pid}.{hexes}"
    # another target whose name extends this one's: its temporary is its live writer's
    cousin = tmp_path / f".{target.name}.tmp.{host}.{dead_pid}.tmp.{host}.{os.getpid()}.{hexes}"
    users = tmp_path / f".{target.name}.tmp.{host}.{dead_pid}.notes"  # not a name gwbatch makes
    for p in (live, other, longer, dead, cousin, users):
        p.write_bytes(b"partial")
    assert remove_stale_temps(tmp_path) == [dead]
    assert all(p.exists() for p in (live, other, longer, cousin, users)) and not dead.exists()


def test_a_directory_is_swept_once_per_process_and_long_names_fit(tmp_path, monkeypatch):
    """Writing many files into one directory (a month's chunk checkpoints) lists it once, not once
    a file; a target of 250 bytes still gets a temporary name of at most 255."""
    import gwbatch.io.atomic as atomic

    calls = []
    monkeypatch.setattr(atomic, "remove_stale_temps", lambda d: calls.append(Path(d)) or [])
    for k in range(20):
        write_atomically(tmp_path / f"chunk-{k:04d}.json", lambda fh: fh.write(b"{}"))
    assert calls == [tmp_path]
    long = tmp_path / ("x" * 250)
    write_atomically(long, lambda fh: fh.write(b"ok"))
    assert long.read_bytes() == b"ok" and _temps(long) == []


def test_written_files_get_an_ordinary_mode(tmp_path):
    """Outputs are created as open() creates them (0666 less the umask), not 0600: a run shared
    with a group stays readable to it."""
    umask = os.umask(0o022)
    try:
        write_atomically(tmp_path / "report.html", lambda fh: fh.write(b"<html>"))
        write_table(pd.DataFrame({"snr": [8.0]}), tmp_path / "t.parquet")
    finally:
        os.umask(umask)
    assert (tmp_path / "report.html").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "t.parquet").stat().st_mode & 0o777 == 0o644


def test_rival_writers_of_one_target_never_mix(tmp_path):
    target = tmp_path / "candidates.npy"
    arrays = [np.full(200_000, k, dtype=np.int64) for k in range(6)]
    start = threading.Barrier(len(arrays))

    def write(a):
        def chunks(fh):
            start.wait()
            for piece in np.array_split(a, 20):
                fh.write(piece.tobytes())
                time.sleep(0.001)
        write_atomically(target, chunks)

    threads = [threading.Thread(target=write, args=(a,)) for a in arrays]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = np.frombuffer(target.read_bytes(), dtype=np.int64)
    assert got.size == 200_000 and (got == got[0]).all()  # one writer's whole file
    assert _temps(target) == []


def test_a_symlink_at_the_target_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    target = tmp_path / "report.html"
    target.symlink_to(victim)
    write_atomically(target, lambda fh: fh.write(b"<html>"))
    assert victim.read_text() == "keep me"
    assert not target.is_symlink() and target.read_bytes() == b"<html>"


@pytest.mark.parametrize("pid, alive", [(0, True), (-1, True), (2**22 + 1, False), (2**40, False), (2**70, False)])
def test_numbers_that_are_not_running_pids(pid, alive):
    """Zero and negative numbers are not PIDs (a damaged record: never licence to take a file);
    numbers above Linux's pid_max name no process.  Never a traceback (2**70 overflowed os.kill)."""
    assert process_alive(pid) is alive


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid
