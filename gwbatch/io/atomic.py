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
import re
import secrets
import socket
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


#: What follows a temporary file's prefix: the writer's PID and 12 random hex digits.
_TEMP_TAIL = re.compile(r"(\d+)\.[0-9a-f]{12}")


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
    tmp = _new_temp(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _new_temp(path: Path) -> Path:
    """A new empty file beside ``path`` named ``.NAME.tmp.HOST.PID.RANDOM``, created exclusively (never
    through a link) with the mode an ordinary file gets (0666 less the umask, as ``open`` gives:
    ``tempfile.mkstemp``'s 0600 would hide a shared run's outputs from its group)."""
    prefix = f"{_temp_prefix(path, socket.gethostname())}{os.getpid()}."
    for _ in range(100):
        tmp = path.parent / f"{prefix}{secrets.token_hex(6)}"
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666))
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(f"no free temporary name beside {path}")


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
        owner = _TEMP_TAIL.fullmatch(temp.name[len(prefix):])  # exactly PID.RANDOM: no other target's temp
        if owner is None or process_alive(int(owner[1])) or temp.is_symlink() or not temp.is_file():
            continue
        with contextlib.suppress(FileNotFoundError):  # another writer may have removed it first
            temp.unlink()
            removed.append(temp)
    return removed
