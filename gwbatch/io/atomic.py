"""Files that appear whole or not at all, and the owners of unfinished ones.

Every file gwbatch writes outside a Zarr store (tables, banks, PSDs, skymaps, LIGO_LW documents,
the report, cached placements) goes through :func:`atomic_file`: it is written under a temporary
name beside its target, created exclusively and never through a symlink, and renamed over the
target only once written, so a reader sees the old file or the new one, never half of one.  A
failed write removes its temporary file; a writer killed outright (``kill -9``, a node lost) leaves
it, named for its host and process, and the next write of the same target removes it once that
process is gone (:func:`remove_stale_temps`).  Two writers of one target never share a temporary
file: the last rename wins, and the target is always one writer's whole file.
"""

from __future__ import annotations

import contextlib
import glob
import os
import socket
import tempfile
from pathlib import Path
from typing import Iterator

#: Linux's largest process ID (``/proc/sys/kernel/pid_max`` is at most 2^22).
PID_MAX = 1 << 22


def process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, Linux), to tell a PID that was reused;
    None where it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[19]
    except (OSError, IndexError):
        return None


def process_alive(pid: int, started: str | None = None) -> bool:
    """Whether process ``pid`` of this host still runs (and, given ``started``, is the process that
    started then).  A PID above Linux's largest names no process (gone); zero or a negative number is
    not a PID and counts as alive: a damaged owner record never lets its files be taken."""
    if pid <= 0:
        return True
    if pid > PID_MAX:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    now = process_start(pid)
    return started is None or now is None or now == started


def _temp_prefix(path: Path, host: str) -> str:
    return f".{path.name}.tmp.{host}."


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a new, empty temporary file beside ``path`` to write by name; on success it is renamed
    over ``path`` (a symlink there is replaced, not followed), on any exception removed.

    The parent directory is created.  Stale temporary files of ``path`` left by killed writers of
    this host are removed first (:func:`remove_stale_temps`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f"{_temp_prefix(path, socket.gethostname())}{os.getpid()}.")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomically(path: str | os.PathLike, write) -> Path:
    """Write ``path`` through ``write(binary file)`` (:func:`atomic_file`); returns ``path``."""
    path = Path(path)
    with atomic_file(path) as tmp, open(tmp, "wb") as fh:
        write(fh)
    return path


def remove_stale_temps(path: str | os.PathLike) -> list[Path]:
    """Remove the temporary files of ``path`` (:func:`atomic_file`) whose writer was a process of
    this host that no longer runs; returns those removed.  Other hosts' and live writers' are kept."""
    path = Path(path)
    prefix = _temp_prefix(path, socket.gethostname())
    removed = []
    for name in glob.glob(glob.escape(str(path.parent / prefix)) + "*"):
        temp = Path(name)
        pid = temp.name[len(prefix):].split(".", 1)[0]
        if not pid.isdigit() or process_alive(int(pid)) or temp.is_symlink() or not temp.is_file():
            continue
        with contextlib.suppress(FileNotFoundError):  # another writer may have removed it first
            temp.unlink()
            removed.append(temp)
    return removed
