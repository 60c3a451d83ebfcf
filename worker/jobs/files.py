"""The stitch's view of stored files (worker.audio.stitch.ChunkFiles over a storage backend).

On the local backend the paths are this disk's: read in place. On S3 a chunk is measured with a ranged
read of its first bytes and downloaded into the scratch folder only while it is being sent, then
dropped: the stitch holds one chunk on disk at a time, whatever the length of the book.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

from worker.audio.errors import StitchError
from worker.audio.stitch import ON_DISK, ChunkFiles
from worker.audio.wavfile import wav_header
from worker.storage.backend import Storage, StoredFileMissing, key_of

_HEAD_BYTES = 4096


class StoredFiles:
    """Chunk and chapter files of a job, wherever the storage keeps them."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def _here(self, path: str) -> Path:
        return self.storage.layout.root / key_of(path)

    def header(self, path: str) -> tuple[int, int]:
        if self._here(path).is_file():
            return ON_DISK.header(str(self._here(path)))
        try:
            found = wav_header(self.storage.read_head(path, _HEAD_BYTES))
        except StoredFileMissing as exc:
            raise StitchError(f"chunk file {key_of(path)} is missing") from exc
        if found is not None:
            return found
        with self.local(path) as local:  # a header longer than the ranged read: the whole file
            return ON_DISK.header(local)

    @contextlib.contextmanager
    def _local(self, path: str) -> Iterator[str]:
        here = self._here(path)
        if here.is_file():  # written by this task and not published yet, or fetched by an outer block
            yield str(here)
            return
        try:
            fetched = self.storage.fetch(path)
        except StoredFileMissing as exc:
            raise StitchError(f"chunk file {key_of(path)} is missing") from exc
        try:
            yield str(fetched)
        finally:
            self.storage.release(fetched)

    def local(self, path: str) -> AbstractContextManager[str]:
        return self._local(path)


def stored_files(storage: Storage) -> ChunkFiles:
    """The way a stitch reads files on this storage (in place on the local backend)."""
    return ON_DISK if storage.kind == "local" else StoredFiles(storage)
