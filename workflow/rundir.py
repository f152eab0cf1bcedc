"""The run directory: a run's checkpoints and outputs, owned by one gwbatch process at a time.

Layout of ``DIR`` (a multi-search campaign has a member directory of the same layout, less the lock
and the parts log, for each search inside ``DIR``)::

    .gwbatch-run        marker: a gwbatch run directory (``.gwbatch-member`` in a member directory)
    .gwbatch-lock       the lock, naming its holder (host, PID, start time, command)
    run.json            what the run computes: its analysis settings, analysis version and store
    chunks/             one checkpoint per chunk, named by the chunk's span
    parts.jsonl         one line per invocation that ran chunks (the first, and each --resume); its
                        ``ended`` says how that invocation's chunk stage ended (complete, stopped,
                        failed, interrupted), not the run: only ``manifest.json`` says a run is complete
    banks/              SPIIR banks (a cache keyed by what they are built from)
    manifest.json  candidates.parquet  ...  report.html  skymaps/      the final set

The rules (``docs/reliability.md`` lists each with its test):

1. **One process at a time.**  The lock is an exclusive ``flock`` on ``.gwbatch-lock``, which the
   operating system releases however its holder ends (``kill -9`` included), so a lock left by a
   dead process is never in the way.  Where the file system has no ``flock``, the lock file is
   created exclusively and one left by a process that no longer runs on this host (its PID gone,
   or reused by a process that started later) is taken over.  A second run is refused (exit 4)
   naming the holder.
2. **Opening changes nothing.**  What a new run discards (``--overwrite``: the old manifests,
   checkpoints and parts log) is discarded by :meth:`RunDirectory.begin`, called once the plan is made and the
   cluster is up: a run that cannot start leaves the directory as it was.  A new directory is
   marked as a run's when it is opened, before a search's preparation writes its bank cache
   there, so a run cut short while building banks is resumed (or overwritten) like any other; a
   directory holding only the released lock file and the marker counts as new.
3. **The final set is swapped in.**  It is written into ``.staging/`` and then committed: the old
   manifests go first (the directory stops claiming a complete run), the old final files that the
   new set does not have are removed, the new files move in and the manifests come last (a
   campaign's own after its members').  The commit's journal (``.staging/COMMIT``) is written only
   once everything is staged, so a commit cut short is completed by the next run that opens the
   directory; a staging area without a journal is discarded.
4. **No symlinks.**  Nothing inside a run directory is followed through a symbolic link: a link
   where the run would read or write is refused, and files are created exclusively under random
   temporary names and renamed into place.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import json
import logging
import os
import shutil
import socket
from pathlib import Path
from typing import Iterator

from gwbatch.errors import ConfigError, DataError, OutputError
from gwbatch.io.atomic import process_alive, process_start
from gwbatch.io.tables import write_json

log = logging.getLogger("gwbatch")

MARKER = ".gwbatch-run"
MEMBER_MARKER = ".gwbatch-member"
LOCK = ".gwbatch-lock"
IDENTITY = "run.json"
CHUNKS = "chunks"
PARTS = "parts.jsonl"
BANKS = "banks"
SKYMAPS = "skymaps"
MANIFEST = "manifest.json"
STAGING = ".staging"
JOURNAL = "COMMIT"
#: The final set's files besides the manifest, and the skymaps directory.
#: Heimdall's text format of the radio search's candidates (:func:`gwbatch.radio.candidates.write_heimdall_cands`).
CAND_FILE = "candidates.cand"
#: Candidate columns of dispersed pulses: a run whose candidates have them also writes :data:`CAND_FILE`.
DISPERSED_COLUMNS = {"beam", "dm_index", "dm", "width", "sample", "snr", "members"}
#: ``gwbatch vt RUN``'s table: made from one final set, so a new final set discards it.
VT_FILE = "vt.json"
FINAL_FILES = ("candidates.parquet", "triggers.parquet", "background.parquet", "injections.parquet",
               "gates.parquet", "psd.h5", CAND_FILE, "report.html", VT_FILE)
#: Every name the run directory uses itself (a search member cannot be named so).
OWN_NAMES = (MARKER, MEMBER_MARKER, LOCK, IDENTITY, CHUNKS, PARTS, BANKS, SKYMAPS, MANIFEST, STAGING, *FINAL_FILES)


# ----------------------------------------------------------------------------------------------
# Paths that are never followed through a symlink


def no_link(path: Path) -> Path:
    """``path``, refused (:class:`OutputError`) when it is a symbolic link."""
    if path.is_symlink():
        raise OutputError(f"{path} is a symbolic link; gwbatch does not follow links inside a run directory "
                          "(remove it, or choose another --out)")
    return path


def real_dir(path: Path) -> Path:
    """``path`` as a directory of its own (created if missing), never through a symlink."""
    no_link(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{path} exists and is not a directory")
    with output_errors(path):
        path.mkdir(exist_ok=True)
    return path


def check_file_target(path: Path, *, overwrite: bool) -> Path:
    """Refuse (:class:`OutputError`), before any work, an output file that could not be written:
    one that exists without ``overwrite``, a directory, a path through a file, or one whose nearest
    existing directory this process cannot write."""
    if path.is_dir():
        raise OutputError(f"cannot write {path}: it is a directory; name a file")
    if path.exists() and not overwrite:
        raise OutputError(f"{path} exists; pass --overwrite to replace it")
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise OutputError(f"cannot write {path}: {parent} is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {path}: {parent} is not writable; choose a directory you can write")
    return path


@contextlib.contextmanager
def output_errors(path: Path, resumable: bool = True) -> Iterator[None]:
    """Turn a failure to write ``path`` (no space, no permission, read-only) into :class:`OutputError`;
    ``resumable``: chunks may have been checkpointed already (the message says to --resume)."""
    try:
        yield
    except OutputError:
        raise
    except OSError as exc:
        reason = exc.strerror or str(exc)
        hint = {errno.ENOSPC: "free some space", errno.EDQUOT: "free some quota",
                errno.EACCES: "choose a directory you can write", errno.EPERM: "choose a directory you can write",
                errno.EROFS: "choose a writable file system"}.get(exc.errno, "check the output directory")
        then = " (finished chunks stay checkpointed: rerun with --resume)" if resumable else ""
        raise OutputError(f"cannot write {exc.filename or path}: {reason}; {hint}{then}") from None


def remove(path: Path) -> None:
    """Remove a file, a symlink or a directory tree (a symlink itself, never what it points to)."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.is_dir():
        shutil.rmtree(path)


def append_line(path: Path, text: str) -> None:
    """Append one line to ``path`` (created if missing), never through a symlink."""
    with output_errors(path):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "a") as fh:
            fh.write(text + "\n")


def read_text(path: Path) -> str | None:
    """A file's text, or None when missing; a symlink is refused."""
    if not path.exists() and not path.is_symlink():
        return None
    no_link(path)
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


# ----------------------------------------------------------------------------------------------
# The lock


def _holder_line(text: str | None) -> str:
    try:
        h = json.loads(text or "")
        return (f"gwbatch (PID {h['pid']} on {h['host']}, since {h['since_utc']}): {h.get('command') or 'a run'}")
    except (ValueError, KeyError, TypeError):
        return "another gwbatch process"


class Lock:
    """The exclusive lock of a run directory (rule 1 of the module docstring)."""

    def __init__(self, directory: Path, command: str = "") -> None:
        self.path = directory / LOCK
        self.fd: int | None = None
        self.exclusive_file = False
        pid = os.getpid()
        self.record = {"host": socket.gethostname(), "pid": pid, "process_start": process_start(pid),
                       "since_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                       "command": command}

    def refused(self, text: str | None) -> OutputError:
        return OutputError(f"output {self.path.parent} is in use by {_holder_line(text)}; wait for that run to end "
                           f"(or stop it) and try again")

    def acquire(self) -> "Lock":
        no_link(self.path)
        with output_errors(self.path):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 1 << 16, 0).decode(errors="replace")
            os.close(fd)
            raise self.refused(text) from None
        except OSError as exc:  # no flock on this file system: an exclusively created file
            os.close(fd)
            if exc.errno not in (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                raise
            return self._acquire_file()
        self.fd = fd
        with output_errors(self.path):
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(self.record).encode(), 0)
        return self

    def _acquire_file(self) -> "Lock":
        """The lock without ``flock``: ``.gwbatch-lock`` created exclusively; a lock of a process that
        no longer runs on this host is taken over.  A lock of another host is refused: its process
        cannot be checked from here (the message names it; remove the file once it is gone)."""
        for _ in range(3):
            text = read_text(self.path)
            if text is not None:
                try:
                    holder = json.loads(text)
                    stale = holder["host"] == self.record["host"] and not process_alive(int(holder["pid"]),
                                                                                       holder.get("process_start"))
                except (ValueError, KeyError, TypeError):
                    stale = False
                if not stale:
                    raise self.refused(text)
                log.warning("taking over the lock of %s, which no longer runs", _holder_line(text))
                self.path.unlink(missing_ok=True)
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w") as fh:
                fh.write(json.dumps(self.record))
            self.exclusive_file = True
            return self
        raise self.refused(read_text(self.path))

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, 0)
            os.close(self.fd)  # closing releases the flock; the file stays (unlinking it would race)
            self.fd = None
        elif self.exclusive_file:
            self.path.unlink(missing_ok=True)
            self.exclusive_file = False


# ----------------------------------------------------------------------------------------------
# The run directory


@contextlib.contextmanager
def reading_finished_run(folder: Path, command: str) -> Iterator[None]:
    """Hold the lock of the run directory of ``folder`` (a run, or one search of a multi-search run)
    while ``command`` reads its finished outputs and writes beside them (export's bank cache, vt's
    table): a campaign cannot rewrite the run meanwhile, and two such commands never race.  A folder
    that is not a run directory, or whose lock this process cannot take (a read-only archive of
    runs, a colleague's run shared with a group), is read without it."""
    folder = Path(folder)
    top = folder.parent if (folder / MEMBER_MARKER).is_file() else folder
    lock_file = top / LOCK
    if not (top / MARKER).is_file() or not os.access(top, os.W_OK | os.X_OK) or (
            lock_file.exists() and not os.access(lock_file, os.R_OK | os.W_OK)):
        yield
        return
    lock = Lock(top, command).acquire()
    try:
        yield
    finally:
        lock.release()


def finished_manifest(folder: Path, needs: str) -> dict:
    """The ``manifest.json`` of a complete run in ``folder`` (for ``needs``: "export", "VT"), or a
    :class:`DataError` saying what is missing or damaged."""
    path = Path(folder) / MANIFEST
    if not path.exists():
        raise DataError(f"{folder} is not a finished run: no manifest.json")
    try:
        m = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"{path} cannot be read ({type(exc).__name__}): the run's outputs are damaged") from None
    if not isinstance(m, dict):
        raise DataError(f"{path} is not a gwbatch manifest (a JSON {type(m).__name__})")
    if m.get("status") != "complete":
        raise DataError(f"{folder}: the run's status is {m.get('status')!r}, not complete; {needs} needs a complete run")
    members = m.get("members") or []
    if not (isinstance(members, list) and all(isinstance(x, dict) and isinstance(x.get("name"), str) for x in members)):
        raise DataError(f"{path}: its members are not a list of named searches: damaged")
    campaign = m.get("campaign")
    kind = (campaign.get("search") or {}).get("kind") if isinstance(campaign, dict) else None
    if not members and not isinstance(kind, str):
        raise DataError(f"{path} names no search kind (campaign.search.kind): not a gwbatch manifest, or damaged")
    return m


def run_table(path: Path):
    """A finished run's Parquet table, or a :class:`DataError` saying it is damaged."""
    import pandas as pd

    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise DataError(f"{path} cannot be read ({type(exc).__name__}): the run's outputs are damaged") from None


def run_state(path: Path) -> str:
    """``complete`` or ``failed`` (the manifest's status), else ``unfinished`` (no manifest)."""
    try:
        return str(json.loads(read_text(Path(path) / MANIFEST) or "").get("status", "complete"))
    except (ValueError, AttributeError):
        return "unfinished"


class RunDirectory:
    """A run directory, locked for this process from :meth:`open` to :meth:`close`.

    ``members``: the member directories of a multi-search campaign (names), or ``()`` when the
    run directory is the search's own.
    """

    def __init__(self, path: Path, members: tuple[str, ...], resume: bool, overwrite: bool, lock: Lock) -> None:
        self.path, self.members, self.resume, self.overwrite, self.lock = path, members, resume, overwrite, lock

    # -- opening ----------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: Path, *, members: tuple[str, ...] = (), resume: bool = False, overwrite: bool = False,
             command: str = "") -> "RunDirectory":
        """Check ``path`` may hold this run, lock it and complete a commit cut short; delete nothing."""
        if resume and overwrite:
            raise ConfigError("--resume and --overwrite exclude each other: choose one")
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise OutputError(f"output {path} exists and is not a directory")
        if (path / MEMBER_MARKER).exists():
            raise OutputError(f"output {path} holds one search of the multi-search campaign in {path.parent}; "
                              "run that campaign (with --resume or --overwrite) instead")
        with output_errors(path, resumable=False):  # a lock file and the marker alone: nothing was written here
            fresh = not path.exists() or all(p.name in (LOCK, MARKER) for p in path.iterdir())
        if not fresh and not (path / MARKER).exists() and not (path / MARKER).is_symlink():
            raise OutputError(f"output {path} exists, is not empty and is not a gwbatch run directory; "
                              "choose another --out")
        with output_errors(path, resumable=False):
            path.mkdir(parents=True, exist_ok=True)
        lock = Lock(path, command).acquire()
        try:
            run = cls(path, tuple(members), resume, overwrite, lock)
            run._check_links()
            if resume:
                run._check_shape()
            if fresh:  # marked before anything is written here (a bank cache), so a run cut short resumes
                with output_errors(path, resumable=False):
                    run._mark_top()
            run._recover()
            if not fresh and not (resume or overwrite):
                state = run_state(path)
                what = {"complete": "a finished run", "failed": "a run with failed chunks (see its manifest.json)"}.get(
                    state, "an unfinished run")
                raise OutputError(f"output {path} holds {what}; pass --resume to reuse its finished chunks or "
                                  "--overwrite to start again")
        except BaseException:
            lock.release()
            raise
        return run

    def close(self) -> None:
        self.lock.release()

    def __enter__(self) -> "RunDirectory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def directories(self) -> list[Path]:
        """The member directories (the run directory itself for a one-search campaign)."""
        return [self.path / m for m in self.members] if self.members else [self.path]

    def member_dir(self, name: str) -> Path:
        return self.path / name if name else self.path

    def _check_links(self) -> None:
        """Refuse a symlink anywhere the run reads or writes (rule 4)."""
        for directory in (self.path, *(self.path / m for m in self.members)):
            no_link(directory)
            for name in OWN_NAMES:
                no_link(directory / name)

    def held_members(self) -> list[str]:
        """The member directories this run directory holds (a campaign of several searches)."""
        with output_errors(self.path):
            return sorted(p.name for p in self.path.iterdir()
                          if p.is_dir() and not p.is_symlink() and (p / MEMBER_MARKER).is_file())

    def _check_shape(self) -> None:
        """Refuse to resume a one-search run with a campaign of several, or the reverse: the
        other shape's checkpoints would be left behind and its final set replaced."""
        held = self.held_members()
        if self.members and (self.path / IDENTITY).exists():
            raise OutputError(f"--resume: {self.path} holds the run of one search, and this campaign has several "
                              f"({', '.join(self.members)}); run that search, or start again with --overwrite "
                              "(or use another --out)")
        if not self.members and held:
            raise OutputError(f"--resume: {self.path} holds a campaign of several searches ({', '.join(held)}), and "
                              "this campaign is one search; run that campaign, or start again with --overwrite "
                              "(or use another --out)")

    def _mark_top(self) -> None:
        marker = self.path / MARKER
        if not marker.exists():
            write_json({"gwbatch": "run directory"}, marker)

    def _mark(self) -> None:
        self._mark_top()
        for directory in self.directories():
            if directory != self.path:
                real_dir(directory)
                if not (directory / MEMBER_MARKER).exists():
                    write_json({"gwbatch": "member directory", "campaign": ".."}, directory / MEMBER_MARKER)

    # -- what the run computes ------------------------------------------------------------------

    def identity(self, member: str) -> dict | None:
        """The ``run.json`` of a member (or of the run), or None before a run has begun there."""
        text = read_text(self.member_dir(member) / IDENTITY)
        try:
            return json.loads(text) if text is not None else None
        except ValueError:
            return None

    def begin(self, identities: dict[str, dict]) -> None:
        """Start the new run's own state, once its plan is made and its cluster is up (rule 2):
        with ``--overwrite`` the old checkpoints and parts log go; every member's ``run.json`` says
        what this run computes."""
        with output_errors(self.path):
            self._mark()
            if self.overwrite:
                self._discard_old_run()
            for name, identity in identities.items():
                directory = self.member_dir(name)
                real_dir(directory / CHUNKS)
                write_json(identity, no_link(directory / IDENTITY))

    def _discard_old_run(self) -> None:
        """``--overwrite``: the old run's manifests first (the directory stops claiming a complete
        run before anything it stood on goes), then its checkpoints and parts log, and what the
        other campaign shape left (a one-search run's checkpoints and identity under a campaign of
        several, or the old members of one under a single search).  Bank caches are kept."""
        held = self.held_members()
        for directory in (self.path, *(self.path / m for m in held)):
            remove(no_link(directory / MANIFEST))
        remove(no_link(self.path / PARTS))
        for directory in self.directories():
            remove(no_link(directory / CHUNKS))
        if self.members:
            remove(no_link(self.path / IDENTITY))
            remove(no_link(self.path / CHUNKS))
        for name in held:
            if name not in self.members:
                for own in (CHUNKS, IDENTITY, MEMBER_MARKER):
                    remove(no_link(self.path / name / own))

    def chunks(self, member: str) -> Path:
        return no_link(self.member_dir(member) / CHUNKS)

    def record_part(self, record: dict) -> None:
        """Append one invocation's record (its stage times and chunks done) to the parts log."""
        append_line(no_link(self.path / PARTS), json.dumps(record, sort_keys=True))

    def parts(self) -> list[dict]:
        """Every invocation's record, oldest first (empty before the first)."""
        text = read_text(self.path / PARTS) or ""
        parts = []
        for line in text.splitlines():
            try:
                parts.append(json.loads(line))
            except ValueError:  # a line cut by a crash while appending
                log.warning("%s: skipping a damaged line", self.path / PARTS)
        return parts

    # -- the final set --------------------------------------------------------------------------

    def staging(self) -> "Staging":
        """A fresh staging area for the final set (rule 3)."""
        stage = self.path / STAGING
        with output_errors(stage):
            remove(no_link(stage))
            stage.mkdir()
        return Staging(self, stage)

    def _recover(self) -> None:
        """Complete a commit cut short, or discard a staging area that never reached its commit."""
        stage = self.path / STAGING
        if not stage.exists():
            return
        no_link(stage)
        with output_errors(stage):
            if (stage / JOURNAL).is_file():
                log.warning("completing the outputs of an earlier run whose commit was interrupted")
                _apply(self.path, stage)
            else:
                remove(stage)


class Staging:
    """The new final set, written under ``.staging/`` (same relative paths as in the run
    directory), then :meth:`commit`-ted in one step."""

    def __init__(self, run: RunDirectory, path: Path) -> None:
        self.run, self.path = run, path

    def dir(self, member: str = "") -> Path:
        directory = self.path / member if member else self.path
        with output_errors(directory):
            directory.mkdir(parents=True, exist_ok=True)
        return directory

    def commit(self) -> None:
        files = sorted(str(p.relative_to(self.path)) for p in self.path.rglob("*") if p.is_file())
        directories = ["", *self.run.members]
        with output_errors(self.path):
            write_json({"files": files, "directories": directories}, self.path / JOURNAL)
            _apply(self.run.path, self.path)


def _apply(top: Path, stage: Path) -> None:
    """Move a staged final set into place (idempotent: a cut-short commit is redone from its journal)."""
    journal = json.loads((stage / JOURNAL).read_text())
    files, directories = set(journal["files"]), journal["directories"]
    roots = [top / d if d else top for d in directories]
    for root in roots:  # the campaign's manifest first: it stops claiming a complete run
        (no_link(root / MANIFEST)).unlink(missing_ok=True)
    for d, root in zip(directories, roots):
        prefix = f"{d}/" if d else ""
        for name in FINAL_FILES:
            if f"{prefix}{name}" not in files:
                remove(no_link(root / name))
        maps = no_link(root / SKYMAPS)
        if maps.is_dir():
            for old in maps.iterdir():
                if f"{prefix}{SKYMAPS}/{old.name}" not in files:
                    remove(old)
    manifests = [f"{d}/{MANIFEST}" if d else MANIFEST for d in reversed(directories)]  # the campaign's last
    for rel in [f for f in sorted(files) if f not in manifests] + [m for m in manifests if m in files]:
        source, target = stage / rel, top / rel
        if source.exists():
            if target.parent != top:
                real_dir(target.parent)
            os.replace(source, no_link(target))
    remove(stage)
