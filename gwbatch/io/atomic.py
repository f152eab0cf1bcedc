"""Files that appear whole or not at all, and the owners of unfinished ones.

Every file gwbatch writes outside a Zarr store (tables, banks, PSDs, skymaps, LIGO_LW documents,
candidate files, the report, cached placements) goes through :func:`atomic_file`: it is written
under a temporary name beside its target, created exclusively and never through a symlink, with
the mode ``open`` gives, and renamed over the target only once written, so a reader sees the old
file or the new one, never half of one.  (No ``fsync``: after a kernel crash or power loss what a
rename left depends on the file system; a resume checks what it reuses.)  A failed write removes
its temporary file.  A writer killed outright (``kill -9``) leaves it, named
``.TARGET.tmp.HOST.PID.RANDOM``; the first write of a later process into the same directory
removes the temporaries of writers of this host that are gone (:func:`remove_stale_temps`, once
per directory and process, so writing many files into one directory stays linear).  Writers in
containers that share a host name but not a PID namespace cannot see each other's processes: this
check, like the run lock's, assumes they can.  Two writers of one target never share a temporary
file: the last rename wins, and the target is always one writer's whole file.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
import threading
from pathlib import Path
from typing import Iterator

#: Linux's largest process ID (``/proc/sys/kernel/pid_max`` is at most 2^22).
PID_MAX = 1 << 22

#: The longest file name most file systems take (bytes).
NAME_MAX = 255

_swept: set[str] = set()  # directories this process has swept (:func:`atomic_file`)
_swept_lock = threading.Lock()


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


def _temp_name(target: str, host: str, pid: int) -> str:
    """``.TARGET.tmp.HOST.PID.RANDOM`` within :data:`NAME_MAX` bytes (a long target's name is cut:
    the sweep reads only what follows ``.tmp.HOST.``)."""
    tail = f".tmp.{host}.{pid}.{secrets.token_hex(6)}"
    room = NAME_MAX - 1 - len(tail.encode())
    return "." + target.encode()[:max(room, 1)].decode(errors="ignore") + tail


def _new_temp(path: Path) -> Path:
    """A new empty file beside ``path`` (:func:`_temp_name`), created exclusively (never through a
    link) with the mode an ordinary file gets (0666 less the umask, as ``open`` gives:
    ``tempfile.mkstemp``'s 0600 would hide a shared run's outputs from its group)."""
    host, pid = socket.gethostname(), os.getpid()
    for _ in range(100):
        tmp = path.parent / _temp_name(path.name, host, pid)
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666))
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(f"no free temporary name beside {path}")


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a new, empty temporary file beside ``path`` to write by name; on success it is renamed
    over ``path`` (a symlink there is replaced, not followed), on any exception removed.

    The parent directory is created.  The first write of this process into the directory removes
    the temporaries that killed writers of this host left there (:func:`remove_stale_temps`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    directory = os.path.abspath(path.parent)
    with _swept_lock:
        first = directory not in _swept
        _swept.add(directory)
    if first:
        remove_stale_temps(path.parent)
    tmp = _new_temp(path)
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


def remove_stale_temps(directory: str | os.PathLike) -> list[Path]:
    """Remove the temporary files in ``directory`` (:func:`atomic_file`'s names, exactly) whose writer
    was a process of this host that no longer runs; returns those removed.  Other hosts', live
    writers' and any other files are kept, and a file that cannot be removed is left (a cleanup
    never fails a write)."""
    owner = re.compile(rf"\..+\.tmp\.{re.escape(socket.gethostname())}\.(\d+)\.[0-9a-f]{{12}}")
    removed = []
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            match = owner.fullmatch(entry.name)
            if match is None or process_alive(int(match[1])) or not entry.is_file(follow_symlinks=False):
                continue
            with contextlib.suppress(OSError):  # removed by another writer first, or not ours to remove
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed
