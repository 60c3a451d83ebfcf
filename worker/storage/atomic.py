"""Write-to-temp-then-rename: a reader never sees a partially written file (pure module).

:func:`atomic_file` is the one way Tome writes a file that others read (chunk WAVs, outputs, speaker
prompts): the data goes to a hidden temp file in the same folder, is fsynced, renamed onto its final
name and the folder fsynced; on any error the temp file is removed and nothing appears under the name.

A batch of files (a render task's chunks) can skip the fsyncs one by one (``durable=False``: still atomic
for readers) and be made durable together by :func:`sync_files`, whose fsyncs run at once: the
filesystem's journal commits them as one group instead of one commit each.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

# Voices and books belong to the tenants: files are readable by the service's own user only.
FILE_MODE = 0o600
PRIVATE_UMASK = 0o077  # new folders 0700, new files 0600 (the database, the broker's messages, uploads)
TEMP_SUFFIX = ".tmp"
SYNC_THREADS = 8  # fsyncs in flight at once (a render task's batch is 8 chunks by default)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], *, durable: bool = True) -> Iterator[str]:
    """Yield the path of a new, empty temp file beside ``path``; on a clean exit, publish it as ``path``
    (the caller has closed whatever it opened on it); on an error, remove it. ``durable=False`` leaves
    the fsyncs to a later :func:`sync_files`."""
    fd, tmp = make_temp(path)
    os.close(fd)
    try:
        yield tmp
        commit(tmp, path, durable=durable)
    except BaseException:
        discard(tmp)
        raise


def keep_files_private() -> int:
    """Make every file and folder this process creates from now on private to its user (umask 077);
    returns the previous mask. Called when the API, a worker or ``make run`` starts."""
    return os.umask(PRIVATE_UMASK)


def make_temp(path: str | os.PathLike[str]) -> tuple[int, str]:
    """Create a uniquely named hidden temp file next to ``path``; returns its open fd and its path."""
    final = os.path.abspath(os.fspath(path))
    directory, base = os.path.split(final)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{base}.", suffix=TEMP_SUFFIX)
    try:
        os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        discard(tmp)
        raise
    return fd, tmp


def commit(tmp: str, path: str | os.PathLike[str], *, durable: bool = True) -> None:
    """fsync ``tmp``, rename it onto ``path`` atomically and fsync the directory (without ``durable``:
    the rename only)."""
    if durable:
        fsync_file(tmp)
    final = os.path.abspath(os.fspath(path))
    os.replace(tmp, final)
    if durable:
        fsync_dir(os.path.dirname(final))


def fsync_file(path: str | os.PathLike[str]) -> None:
    fd = os.open(os.fspath(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_files(paths: Iterable[str | os.PathLike[str]]) -> None:
    """Make files written with ``durable=False`` (and their names) durable: their fsyncs at once, then
    each folder's. Sequential fsyncs cost a journal commit each (about 2 ms apiece on the development
    machine: 16 a render task of 8 chunks); concurrent ones share commits."""
    files = [os.path.abspath(os.fspath(p)) for p in paths]
    if not files:
        return
    folders = sorted({os.path.dirname(f) for f in files})
    if len(files) == 1:
        fsync_file(files[0])
    else:
        list(_sync_pool().map(fsync_file, files))  # list(): re-raises the first failure
    for folder in folders:
        fsync_dir(folder)


_pool_lock = threading.Lock()
_pools: dict[int, ThreadPoolExecutor] = {}  # by process id


def _sync_pool() -> ThreadPoolExecutor:
    """This process's fsync threads (a forked child makes its own: threads do not survive a fork)."""
    with _pool_lock:
        pool = _pools.get(os.getpid())
        if pool is None:
            _pools.clear()  # a parent's pool, copied by the fork, has no threads here
            pool = _pools[os.getpid()] = ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="tome-fsync")
        return pool


def fsync_dir(directory: str) -> None:
    """Make a rename in ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def discard(tmp: str) -> None:
    """Remove a temp file if it is still there."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
