"""Write-to-temp-then-rename helpers, so readers never see a partially written file."""

from __future__ import annotations

import contextlib
import os
import tempfile

FILE_MODE = 0o644


def make_temp(path: str | os.PathLike[str]) -> tuple[int, str]:
    """Create a uniquely named hidden temp file next to ``path``; returns its open fd and its path."""
    final = os.path.abspath(os.fspath(path))
    directory, base = os.path.split(final)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{base}.", suffix=".tmp")
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
