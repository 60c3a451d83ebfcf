"""The storage backend the settings name (pure module: no Flask, Celery or database imports)."""

from __future__ import annotations

from worker.storage.backend import LocalStorage, Storage
from worker.storage.layout import Layout


def open_storage(
    kind: str,
    layout: Layout,
    *,
    bucket: str = "",
    prefix: str = "",
    endpoint_url: str = "",
    region: str = "",
    part_bytes: int = 8 * 1024 * 1024,
    public_endpoint_url: str = "",
) -> Storage:
    """``local`` (the data directory) or ``s3`` (a bucket; boto3 is imported only then)."""
    if kind == "s3":
        from worker.storage.s3 import S3Storage

        return S3Storage(
            layout,
            bucket,
            prefix=prefix,
            endpoint_url=endpoint_url,
            region=region,
            part_bytes=part_bytes,
            public_endpoint_url=public_endpoint_url,
        )
    return LocalStorage(layout)
