"""The start-up check of the storage backend: a missing bucket or an endpoint that does not answer stops
the API or worker at start with a message that names it, instead of a 500 at the first download."""

from __future__ import annotations

from worker.storage.backend import Storage, StorageError


class StorageUnavailable(RuntimeError):
    """Raised at start when the configured store cannot be used."""


def check_storage(storage: Storage) -> None:
    """Nothing for the local data directory (created on start); a HEAD of the bucket for S3."""
    if storage.kind == "local":
        return
    try:
        storage.ping()
    except StorageError as exc:
        raise StorageUnavailable(f"TOME_STORAGE={storage.kind}: {exc}") from exc
