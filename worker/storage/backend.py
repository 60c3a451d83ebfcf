"""Where Tome's files are kept: the local data directory, or an S3-compatible bucket (pure module).

Every file is written first under the process's own data directory (atomically, by :mod:`.atomic`), at
the place :class:`~worker.storage.layout.Layout` names; the backend then decides where it lives:

- :class:`LocalStorage` (the default, ``TOME_STORAGE=local``): the data directory *is* the store.
  Publishing and fetching do nothing, and paths in the database are paths on this disk.
- :class:`~worker.storage.s3.S3Storage` (``TOME_STORAGE=s3``): :meth:`Storage.publish` uploads the
  file under its key and removes the local copy; :meth:`Storage.fetch` downloads a stored file into the
  local data directory when a process needs it on disk (ffmpeg's inputs) and :meth:`Storage.release`
  drops that copy again. The local folder is scratch.

A stored file is named by the path string its writer recorded in the database; :func:`key_of` turns it
into a key from the ``jobs/<uuid>/…`` or ``voices/<uuid>/…`` part only, so hosts with different data
directories agree on every key, and nothing a user sent ever becomes part of one. See docs/storage.md.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePath
from typing import Protocol

from worker.storage.atomic import sync_files
from worker.storage.layout import Layout, UnsafePath

KEY_ROOTS = ("jobs", "voices")
_KEY_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,120}")


class StorageError(RuntimeError):
    """The store cannot be reached, the bucket does not exist, or a stored file is missing."""


class StoredFileMissing(StorageError):
    """A file the database names is not in the store."""


def key_of(stored: str | PurePath) -> str:
    """The storage key of a stored path: from its last ``jobs/<uuid>`` or ``voices/<uuid>`` on, every
    part checked (no ``..``, no separators, no hidden or odd names). Raises :class:`UnsafePath`."""
    parts = PurePath(stored).parts
    if ".." in parts:
        raise UnsafePath(f"{stored!s} climbs out of its folder")
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] in KEY_ROOTS and _is_uuid(parts[i + 1]):
            rest = parts[i + 2 :]
            if not rest or not all(_KEY_PART.fullmatch(p) and ".." not in p for p in rest):
                raise UnsafePath(f"{stored!s} is not a file the layout names")
            return "/".join((parts[i], str(uuid.UUID(parts[i + 1])), *rest))
    raise UnsafePath(f"{stored!s} is not under jobs/<id> or voices/<id>")


def folder_key(folder: str | PurePath) -> str:
    """The key prefix (ending in ``/``) of a layout folder such as ``jobs/<uuid>`` or ``…/files-<tok>``."""
    return key_of(PurePath(folder) / "x")[: -len("x")]


def _is_uuid(part: str) -> bool:
    try:
        return str(uuid.UUID(part)) == part
    except ValueError:
        return False


@dataclass(frozen=True)
class StoredObject:
    key: str
    size: int
    modified: datetime


@dataclass(frozen=True)
class Download:
    """An open byte range of a stored file: ``body`` yields ``length`` bytes from ``start``."""

    body: Iterator[bytes]
    start: int
    length: int
    total: int
    etag: str
    modified: datetime


class Storage(Protocol):
    """What the API, the workers and the sweeper do with stored files (see the module docstring)."""

    kind: str
    layout: Layout

    def ping(self) -> None:
        """Raise :class:`StorageError` naming the problem if the store cannot be used."""

    def publish(self, path: Path) -> None:
        """``path`` (a complete file under the data directory) becomes readable by every process."""

    def publish_batch(self, paths: Sequence[Path]) -> None:
        """:meth:`publish` for files written without their fsyncs (``durable=False``, a render task's
        chunks): on return they are durable and readable by every process."""

    def fetch(self, stored: str) -> Path:
        """A local path holding the stored file (downloaded into the data directory if need be)."""

    def release(self, path: str | Path) -> None:
        """Drop a local copy made by :meth:`fetch` or left by a writer (the stored file stays)."""

    def release_folder(self, folder: Path) -> None:
        """Drop every local copy under ``folder``."""

    def exists(self, stored: str) -> bool: ...

    def size(self, stored: str) -> int:
        """Bytes of a stored file; :class:`StoredFileMissing` if it is not there."""

    def read_head(self, stored: str, length: int) -> bytes:
        """The first ``length`` bytes (fewer if the file is shorter)."""

    def copy(self, stored: str, target: Path) -> None:
        """Store a copy of ``stored`` under ``target``'s key (server-side where the store can)."""

    def remove(self, stored: str | Path) -> None:
        """Delete one stored file (and any local copy); nothing if it is not there."""

    def remove_folder(self, folder: Path, keep: str | None = None) -> int:
        """Delete everything stored under a layout folder (except a direct child named ``keep``);
        returns how many files went."""

    def open_range(self, stored: str, start: int | None, end: int | None) -> Download:
        """Bytes ``start``..``end`` (inclusive; None: from the start / to the end) of a stored file."""

    def presigned_url(self, stored: str, seconds: int, download_name: str, mimetype: str) -> str | None:
        """A short-lived URL a client may GET directly, or None if the store has none."""

    def list_objects(self, root: str) -> Iterator[StoredObject]:
        """Every stored file whose key starts with ``root`` (``jobs/`` or ``voices/``)."""

    def abort_stale_uploads(self, older_than: datetime) -> int:
        """Abort multipart uploads begun before ``older_than`` (their parts cost storage)."""


class LocalStorage:
    """The data directory is the store (the embedded default): publishing and fetching do nothing."""

    kind = "local"

    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def ping(self) -> None:
        root = self.layout.root
        if not root.is_dir():
            raise StorageError(f"data directory {root} does not exist")

    def publish(self, path: Path) -> None:
        return None

    def publish_batch(self, paths: Sequence[Path]) -> None:
        sync_files(paths)  # the data directory is the store: durable once fsynced, together

    def fetch(self, stored: str) -> Path:
        path = Path(stored)
        if not path.is_file():
            raise StoredFileMissing(f"stored file {key_of(stored)} is missing")
        return path

    def release(self, path: str | Path) -> None:
        return None

    def release_folder(self, folder: Path) -> None:
        return None

    def exists(self, stored: str) -> bool:
        return Path(stored).is_file()

    def size(self, stored: str) -> int:
        try:
            return Path(stored).stat().st_size
        except FileNotFoundError as exc:
            raise StoredFileMissing(f"stored file {key_of(stored)} is missing") from exc

    def read_head(self, stored: str, length: int) -> bytes:
        with open(self.fetch(stored), "rb") as f:
            return f.read(length)

    def copy(self, stored: str, target: Path) -> None:
        from worker.storage.atomic import atomic_file

        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(target) as tmp:
            shutil.copyfile(self.fetch(stored), tmp)

    def remove(self, stored: str | Path) -> None:
        Path(stored).unlink(missing_ok=True)

    def remove_folder(self, folder: Path, keep: str | None = None) -> int:
        # As forgiving as ``rmtree(ignore_errors=True)``: a late writer may add or remove files meanwhile.
        try:
            entries = list(folder.iterdir())
        except OSError:
            return 0
        removed = 0
        for entry in entries:
            if entry.name == keep:
                continue
            if entry.is_dir():
                with contextlib.suppress(OSError):
                    removed += sum(1 for p in entry.rglob("*") if p.is_file())
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    entry.unlink()
                    removed += 1
        if keep is None:
            with contextlib.suppress(OSError):
                folder.rmdir()
        return removed

    def open_range(self, stored: str, start: int | None, end: int | None) -> Download:
        path = self.fetch(stored)
        stat = path.stat()
        first, last = resolve_range(start, end, stat.st_size)
        return Download(
            _read_file(path, first, last - first + 1),
            first,
            last - first + 1,
            stat.st_size,
            f"{stat.st_mtime_ns:x}-{stat.st_size:x}",
            datetime.fromtimestamp(stat.st_mtime, UTC),
        )

    def presigned_url(self, stored: str, seconds: int, download_name: str, mimetype: str) -> str | None:
        return None

    def list_objects(self, root: str) -> Iterator[StoredObject]:
        base = self.layout.root / root.strip("/")
        if not base.is_dir():
            return
        for path in base.rglob("*"):
            with contextlib.suppress(FileNotFoundError, UnsafePath):
                if path.is_file():
                    stat = path.stat()
                    modified = datetime.fromtimestamp(stat.st_mtime, UTC)
                    yield StoredObject(key_of(path), stat.st_size, modified)

    def abort_stale_uploads(self, older_than: datetime) -> int:
        return 0


@contextlib.contextmanager
def local_copy(storage: Storage, stored: str) -> Iterator[Path]:
    """A local path of a stored file for the block's duration: the file itself on the local backend
    (a missing one fails where it is opened, as before), else a scratch copy dropped afterwards."""
    if storage.kind == "local":
        yield Path(stored)
        return
    here = storage.layout.root / key_of(stored)
    if here.is_file():
        yield here
        return
    fetched = storage.fetch(stored)
    try:
        yield fetched
    finally:
        storage.release(fetched)


def read_stored(storage: Storage, stored: str) -> bytes:
    """A small stored file (a cover, a reference) whole."""
    return b"".join(storage.open_range(stored, None, None).body)


def resolve_range(start: int | None, end: int | None, total: int) -> tuple[int, int]:
    """(first, last) byte of a request for ``start``..``end`` of ``total`` bytes; ``start`` None with
    ``end`` set is a suffix of ``end`` bytes. Raises ValueError if nothing of it is in the file."""
    if start is None and end is not None:
        first, last = max(0, total - end), total - 1
    else:
        first = start or 0
        last = total - 1 if end is None else min(end, total - 1)
    if total == 0 and start is None and end is None:
        return 0, -1
    if first > last or first >= total:
        raise ValueError(f"range {start}-{end} is outside {total} bytes")
    return first, last


def _read_file(path: Path, start: int, length: int) -> Iterator[bytes]:
    with open(path, "rb") as f:
        f.seek(start)
        remaining = length
        while remaining > 0:
            block = f.read(min(remaining, 1 << 16))
            if not block:
                return
            remaining -= len(block)
            yield block
