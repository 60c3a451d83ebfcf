"""Write-to-temp-then-rename: a reader never sees a partially written file (pure module).

:func:`atomic_file` is the one way Tome writes a file that others read (chunk WAVs, outputs, speaker
prompts): the data goes to a hidden temp file in the same folder, is fsynced, renamed onto its final
name and the folder fsynced; on any error the temp file is removed and nothing appears under the name.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

# Voices and books belong to the tenants: files are readable by the service's own user only.
FILE_MODE = 0o600
PRIVATE_UMASK = 0o077  # new folders 0700, new files 0600 (the database, the broker's messages, uploads)
TEMP_SUFFIX = ".tmp"


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str]) -> Iterator[str]:
    """Yield the path of a new, empty temp file beside ``path``; on a clean exit, publish it as ``path``
    (the caller has closed whatever it opened on it); on an error, remove it."""
    fd, tmp = make_temp(path)
    os.close(fd)
    try:
        yield tmp
        commit(tmp, path)
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


def commit(tmp: str, path: str | os.PathLike[str]) -> None:
    """fsync ``tmp``, rename it onto ``path`` atomically and fsync the directory."""
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    final = os.path.abspath(os.fspath(path))
    os.replace(tmp, final)
    fsync_dir(os.path.dirname(final))


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
