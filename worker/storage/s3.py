"""S3-compatible object storage (AWS S3, MinIO, Ceph, R2) through boto3 (pure module).

Atomicity: an object appears under its key only when its PUT, or the completion of its multipart
upload, succeeds; boto3's transfer manager aborts a multipart upload that fails, and the sweeper aborts
any left by a killed process (:meth:`S3Storage.abort_stale_uploads`). Files are uploaded from the local
data directory (where they were written atomically) in parts of ``part_bytes``, read one part at a time:
memory does not grow with a file's size.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from worker.storage.atomic import FILE_MODE, commit, discard
from worker.storage.backend import (
    Download,
    StorageError,
    StoredFileMissing,
    StoredObject,
    folder_key,
    key_of,
    resolve_range,
)
from worker.storage.layout import Layout

_MISSING = ("404", "NoSuchKey", "NotFound")
_BLOCK = 1 << 16


# One boto3 session per process, its clients made one at a time: a session parses botocore's service
# and endpoint data (a few MB of JSON, about 0.1 s of CPU) once, where a session per storage parsed it
# again for each app and each worker runtime. A session is not thread-safe, the clients it makes are.
# Credentials are resolved once, on the first client, from the usual AWS_* variables or profile (as
# boto3's own default session does); refreshable credentials refresh inside it, and static keys changed
# in a credentials file or the environment are read again when the process restarts.
class _SharedSession:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._session: boto3.session.Session | None = None

    def client(self, **kwargs: Any) -> Any:
        """An S3 client from this process's session."""
        with self._lock:
            if self._session is None:
                self._session = boto3.session.Session()
            return self._session.client("s3", **kwargs)

    def before_fork(self) -> None:
        """Held across a fork: the child gets the session whole, never one another thread is changing."""
        self._lock.acquire()

    def after_fork(self) -> None:
        self._lock.release()


_SHARED = _SharedSession()
os.register_at_fork(
    before=_SHARED.before_fork, after_in_parent=_SHARED.after_fork, after_in_child=_SHARED.after_fork
)


class S3Storage:
    """A bucket (under an optional key prefix) with the local data directory as scratch."""

    kind = "s3"

    def __init__(
        self,
        layout: Layout,
        bucket: str,
        *,
        prefix: str = "",
        endpoint_url: str = "",
        region: str = "",
        part_bytes: int = 8 * 1024 * 1024,
        connect_timeout: float = 5.0,
        public_endpoint_url: str = "",
    ) -> None:
        if not bucket:
            raise StorageError("TOME_STORAGE=s3 needs TOME_S3_BUCKET")
        self.layout = layout
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        config = Config(
            connect_timeout=connect_timeout,
            read_timeout=60,
            retries={"max_attempts": 3, "mode": "standard"},
            s3={"addressing_style": "path"} if endpoint_url else None,
            signature_version="s3v4",
        )
        self.endpoint_url = endpoint_url
        self.client: Any = _SHARED.client(
            endpoint_url=endpoint_url or None, region_name=region or None, config=config
        )
        # Presigned URLs are signed for the host they name: with a public endpoint, by a client of its own
        # (signing makes no request).
        self.presigner: Any = (
            _SHARED.client(endpoint_url=public_endpoint_url, region_name=region or None, config=config)
            if public_endpoint_url
            else self.client
        )
        self.transfer = TransferConfig(
            multipart_threshold=part_bytes, multipart_chunksize=part_bytes, max_concurrency=2
        )

    # -- keys ------------------------------------------------------------------------------------------

    def _key(self, stored: str | Path) -> str:
        return self.prefix + key_of(stored)

    def _local(self, stored: str | Path) -> Path:
        return self.layout.root / key_of(stored)

    # -- the protocol ----------------------------------------------------------------------------------

    def ping(self) -> None:
        where = f"bucket {self.bucket!r}" + (f" at {self.endpoint_url}" if self.endpoint_url else "")
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _MISSING or code == "NoSuchBucket":
                raise StorageError(f"{where} does not exist (create it first)") from exc
            if code in ("403", "AccessDenied"):
                raise StorageError(f"{where}: access denied (check the AWS credentials)") from exc
            raise StorageError(f"{where}: {code or exc}") from exc
        except BotoCoreError as exc:
            raise StorageError(f"{where} cannot be reached: {exc}") from exc

    def publish(self, path: Path) -> None:
        try:
            self.client.upload_file(str(path), self.bucket, self._key(path), Config=self.transfer)
        except (BotoCoreError, ClientError) as exc:
            raise StorageError(f"uploading {key_of(path)} failed: {exc}") from exc
        path.unlink(missing_ok=True)  # the local copy was scratch

    def publish_batch(self, paths: Sequence[Path]) -> None:
        for path in paths:  # scratch copies: the bucket makes them durable, no fsync needed
            self.publish(path)

    def fetch(self, stored: str) -> Path:
        local = self._local(stored)
        if local.is_file():
            return local
        local.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=local.parent, prefix=f".{local.name}.", suffix=".tmp")
        try:
            os.fchmod(fd, FILE_MODE)
            with os.fdopen(fd, "wb") as out:
                self.client.download_fileobj(self.bucket, self._key(stored), out, Config=self.transfer)
            commit(tmp, local)
        except ClientError as exc:
            discard(tmp)
            if _missing(exc):
                raise StoredFileMissing(f"stored file {key_of(stored)} is missing") from exc
            raise StorageError(f"downloading {key_of(stored)} failed: {exc}") from exc
        except BaseException:
            discard(tmp)
            raise
        return local

    def release(self, path: str | Path) -> None:
        with contextlib.suppress(ValueError):
            self._local(path).unlink(missing_ok=True)

    def release_folder(self, folder: Path) -> None:
        import shutil

        local = self.layout.root / folder_key(folder)
        shutil.rmtree(local, ignore_errors=True)

    def exists(self, stored: str) -> bool:
        try:
            self.size(stored)
        except StoredFileMissing:
            return False
        return True

    def size(self, stored: str) -> int:
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self._key(stored))
        except ClientError as exc:
            if _missing(exc):
                raise StoredFileMissing(f"stored file {key_of(stored)} is missing") from exc
            raise StorageError(f"{key_of(stored)}: {exc}") from exc
        except BotoCoreError as exc:
            raise StorageError(f"the store cannot be reached: {exc}") from exc
        return int(head["ContentLength"])

    def read_head(self, stored: str, length: int) -> bytes:
        try:
            return self.open_range(stored, 0, length - 1).body_bytes()
        except ValueError:
            return b""

    def copy(self, stored: str, target: Path) -> None:
        try:
            self.client.copy(
                {"Bucket": self.bucket, "Key": self._key(stored)},
                self.bucket,
                self._key(target),
                Config=self.transfer,
            )
        except ClientError as exc:
            if _missing(exc):
                raise StoredFileMissing(f"stored file {key_of(stored)} is missing") from exc
            raise StorageError(f"copying {key_of(stored)} failed: {exc}") from exc

    def remove(self, stored: str | Path) -> None:
        self.release(stored)
        try:  # deleting a key that is not there succeeds in S3
            self.client.delete_object(Bucket=self.bucket, Key=self._key(stored))
        except (BotoCoreError, ClientError) as exc:
            raise StorageError(f"deleting {key_of(stored)} failed: {exc}") from exc

    def remove_folder(self, folder: Path, keep: str | None = None) -> int:
        prefix = self.prefix + folder_key(folder)
        spared = prefix + keep + "/" if keep else None
        keys = [
            o["Key"]
            for o in self._objects(prefix)
            if not (spared and (o["Key"].startswith(spared) or o["Key"] == spared[:-1]))
        ]
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1,000 keys
            batch = keys[start : start + 1000]
            try:
                self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}
                )
            except (BotoCoreError, ClientError) as exc:
                raise StorageError(f"deleting under {folder_key(folder)} failed: {exc}") from exc
        if keep is None:
            self.release_folder(folder)
        return len(keys)

    def open_range(self, stored: str, start: int | None, end: int | None) -> _S3Download:
        key = self._key(stored)
        total = self.size(stored)
        first, last = resolve_range(start, end, total)
        if last < first:  # an empty file
            return _S3Download(iter(()), 0, 0, 0, "", datetime.now().astimezone())
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={first}-{last}")
        except ClientError as exc:
            if _missing(exc):
                raise StoredFileMissing(f"stored file {key_of(stored)} is missing") from exc
            raise StorageError(f"reading {key_of(stored)} failed: {exc}") from exc
        body = answer["Body"]
        return _S3Download(
            _blocks(body),
            first,
            last - first + 1,
            total,
            str(answer.get("ETag", "")).strip('"'),
            answer["LastModified"],
        )

    def presigned_url(self, stored: str, seconds: int, download_name: str, mimetype: str) -> str | None:
        params = {
            "Bucket": self.bucket,
            "Key": self._key(stored),
            "ResponseContentType": mimetype,
            "ResponseContentDisposition": f'attachment; filename="{download_name}"',
        }
        url: str = self.presigner.generate_presigned_url("get_object", Params=params, ExpiresIn=seconds)
        return url

    def list_objects(self, root: str) -> Iterator[StoredObject]:
        for o in self._objects(self.prefix + root.strip("/") + "/"):
            yield StoredObject(o["Key"][len(self.prefix) :], int(o["Size"]), o["LastModified"])

    def abort_stale_uploads(self, older_than: datetime) -> int:
        aborted = 0
        pages = self.client.get_paginator("list_multipart_uploads").paginate(
            Bucket=self.bucket, Prefix=self.prefix
        )
        for page in pages:
            for upload in page.get("Uploads", []):
                if upload["Initiated"] < older_than:
                    self.client.abort_multipart_upload(
                        Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                    )
                    aborted += 1
        return aborted

    def _objects(self, prefix: str) -> Iterator[dict[str, Any]]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        for page in pages:
            yield from page.get("Contents", [])


class _S3Download(Download):
    def body_bytes(self) -> bytes:
        return b"".join(self.body)


def _blocks(body: Any) -> Iterator[bytes]:
    try:
        while block := body.read(_BLOCK):
            yield block
    finally:
        body.close()


def _missing(exc: ClientError) -> bool:
    return str(exc.response.get("Error", {}).get("Code", "")) in (*_MISSING, "NoSuchBucket")
