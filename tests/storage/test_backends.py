"""The storage layer on both backends: the local data directory and a real S3-compatible server (moto's,
a child process on 127.0.0.1). Every read compares bytes with what was written."""

from __future__ import annotations

import hashlib
import os
import uuid
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from models import utcnow
from tests.support.api_server import free_port
from tests.support.s3 import S3Server, both_backends
from worker.audio import StitchError, StitchPiece, read_wav, stitch, write_wav_atomic
from worker.audio.wavfile import wav_header
from worker.config import ConfigError, Settings, load_settings
from worker.jobs.files import stored_files
from worker.storage.backend import Storage, StorageError, StoredFileMissing, key_of, local_copy
from worker.storage.check import StorageUnavailable, check_storage
from worker.storage.layout import UnsafePath

storage_overrides = both_backends  # every test here runs on the local directory and on S3


@pytest.fixture
def storage(settings: Settings) -> Storage:
    settings.storage.data_dir.mkdir(parents=True, exist_ok=True)
    store = settings.open_storage()
    check_storage(store)
    return store


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_a_published_file_reads_back_whole_and_by_range(storage: Storage) -> None:
    job = uuid.uuid4()
    data = os.urandom(300_000)
    path = _write(storage.layout.output(job, "tok1", "mp3"), data)
    storage.publish(path)
    stored = str(path)
    assert storage.exists(stored)
    assert storage.size(stored) == len(data)
    assert b"".join(storage.open_range(stored, None, None).body) == data
    part = storage.open_range(stored, 1000, 1999)
    assert (part.start, part.length, part.total) == (1000, 1000, len(data))
    assert b"".join(part.body) == data[1000:2000]
    assert b"".join(storage.open_range(stored, None, 500).body) == data[-500:]  # a suffix range
    assert b"".join(storage.open_range(stored, len(data) - 10, 10**9).body) == data[-10:]
    with pytest.raises(ValueError, match="outside"):
        storage.open_range(stored, len(data), None)
    assert storage.read_head(stored, 44) == data[:44]
    with local_copy(storage, stored) as local:
        assert local.read_bytes() == data
    if storage.kind == "s3":
        assert not path.exists()  # the local copy was scratch: dropped after the upload and the read


def test_a_stored_file_has_the_same_key_on_every_host(storage: Storage, tmp_path: Path) -> None:
    job = uuid.uuid4()
    path = _write(storage.layout.chunk_audio(job, 3, "abc"), b"RIFF....")
    storage.publish(path)
    other_host = Path("/srv/elsewhere/data") / key_of(path)  # another worker's data directory
    assert key_of(other_host) == key_of(path) == f"jobs/{job}/chunks/000003-abc.wav"
    if storage.kind == "s3":
        assert storage.read_head(str(other_host), 100) == b"RIFF...."


def test_copy_remove_and_folders(storage: Storage) -> None:
    job, other = uuid.uuid4(), uuid.uuid4()
    chunk = _write(storage.layout.chunk_audio(job, 1, "a"), b"chunk one")
    out = _write(storage.layout.output(job, "t", "wav"), b"the book")
    sub = _write(storage.layout.job_file(job, "t", "book.srt"), b"1\n")
    for p in (chunk, out, sub):
        storage.publish(p)
    target = storage.layout.chunk_audio(other, 1, "b")
    storage.copy(str(chunk), target)
    assert b"".join(storage.open_range(str(target), None, None).body) == b"chunk one"
    keys = sorted(o.key for o in storage.list_objects("jobs"))
    assert keys == sorted(key_of(p) for p in (chunk, out, sub, target))
    # expiry keeps a job's chunks (for reuse) and removes the rest
    assert storage.remove_folder(storage.layout.job_dir(job), keep="chunks") == 2
    assert storage.exists(str(chunk))
    assert not storage.exists(str(out))
    assert not storage.exists(str(sub))
    storage.remove(str(target))
    assert not storage.exists(str(target))
    storage.remove(str(target))  # removing twice is fine
    assert storage.remove_folder(storage.layout.job_dir(job)) == 1
    assert list(storage.list_objects("jobs")) == []
    with pytest.raises(StoredFileMissing):
        storage.size(str(chunk))
    with pytest.raises(StoredFileMissing):
        storage.copy(str(chunk), target)


@pytest.mark.parametrize(
    "hostile",
    [
        "/data/jobs/{job}/../../voices/{job}/prompt.safetensors",
        "/data/jobs/{job}/files-t/../../../etc/passwd",
        "/data/jobs/not-a-uuid/output.mp3",
        "/data/jobs/{job}/files-t/My Book: The Sequel.mp3",
        "/data/jobs/{job}/files-t/.hidden",
        "/etc/passwd",
        "/data/jobs/{job}",
    ],
)
def test_keys_come_from_ids_only_and_cannot_leave_their_prefix(hostile: str) -> None:
    with pytest.raises(UnsafePath):
        key_of(hostile.format(job=uuid.uuid4()))


def test_keys_never_contain_what_a_user_sent(storage: Storage) -> None:
    """A title or file name a tenant chooses is not a layout name: the layout refuses it outright."""
    job = uuid.uuid4()
    for name in ("../../voices/x.wav", "Book Title.mp3", "a/b.mp3", "ÿ.mp3", "x" * 200 + ".mp3"):
        with pytest.raises(UnsafePath):
            storage.layout.job_file(job, "t", name)
    with pytest.raises(UnsafePath):
        storage.layout.output(job, "../x", "mp3")


def test_a_file_the_store_never_had_is_missing_not_a_crash(storage: Storage) -> None:
    stored = str(storage.layout.output(uuid.uuid4(), "t", "mp3"))
    assert not storage.exists(stored)
    with pytest.raises(StoredFileMissing):
        storage.fetch(stored)
    with pytest.raises(StoredFileMissing):
        storage.open_range(stored, 0, 10)


def test_large_files_go_up_as_multipart_uploads_and_come_back_intact(
    s3_server: S3Server, tmp_path: Path
) -> None:
    bucket = s3_server.new_bucket()
    settings = load_settings({}, data_dir=tmp_path / "var", storage="s3", s3_bucket=bucket,
                             s3_endpoint_url=s3_server.endpoint_url, s3_part_mib=5)  # fmt: skip
    store = settings.open_storage()
    data = os.urandom(12 * 1024 * 1024 + 123)
    path = _write(settings.layout.output(uuid.uuid4(), "big", "m4b"), data)
    store.publish(path)
    head = s3_server.client().head_object(Bucket=bucket, Key=key_of(path))
    assert head["ETag"].strip('"').endswith("-3")  # three parts of 5 MiB: a multipart upload
    got = hashlib.sha256(b"".join(store.open_range(str(path), None, None).body)).hexdigest()
    assert got == hashlib.sha256(data).hexdigest()


def test_an_unfinished_multipart_upload_is_never_visible_and_the_sweep_aborts_it(
    s3_server: S3Server, tmp_path: Path
) -> None:
    bucket = s3_server.new_bucket()
    settings = load_settings({}, data_dir=tmp_path / "var", storage="s3", s3_bucket=bucket,
                             s3_endpoint_url=s3_server.endpoint_url)  # fmt: skip
    store = settings.open_storage()
    key = key_of(settings.layout.output(uuid.uuid4(), "tok", "mp3"))
    client = s3_server.client()
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)
    client.upload_part(Bucket=bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=b"x" * 1000)
    # a writer killed here: nothing is under the final key
    assert s3_server.keys(bucket) == []
    assert not store.exists(str(settings.layout.root / key))
    # (moto reports every upload as begun in 2010, so "too recent to abort" cannot be shown against it)
    assert store.abort_stale_uploads(utcnow() + timedelta(hours=2)) == 1
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_a_missing_bucket_or_a_dead_endpoint_is_a_clear_error_at_start(
    s3_server: S3Server, tmp_path: Path
) -> None:
    missing = load_settings({}, data_dir=tmp_path / "a", storage="s3", s3_bucket="no-such-bucket-here",
                            s3_endpoint_url=s3_server.endpoint_url)  # fmt: skip
    with pytest.raises(StorageUnavailable, match=r"'no-such-bucket-here'.*does not exist"):
        check_storage(missing.open_storage())
    dead = load_settings({}, data_dir=tmp_path / "b", storage="s3", s3_bucket="b",
                         s3_endpoint_url=f"http://127.0.0.1:{free_port()}")  # fmt: skip
    with pytest.raises(StorageUnavailable, match="cannot be reached"):
        check_storage(dead.open_storage())
    with pytest.raises(StorageError):
        dead.open_storage().ping()


def test_storage_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="TOME_S3_BUCKET"):
        load_settings({"TOME_STORAGE": "s3"})
    with pytest.raises(ConfigError, match="local or s3"):
        load_settings({"TOME_STORAGE": "nfs"})
    with pytest.raises(ConfigError, match="TOME_S3_PRESIGN_SECONDS"):
        load_settings({"TOME_S3_PRESIGN_SECONDS": "-1"})
    for bad in (
        "minio:9000",
        "ftp://minio",
        "http://",
        "http://user:secret@minio:9000",
        "http://minio:9000/?x=1",
        "http://minio:99999",
        "http://minio:9000/\nHost: evil",
    ):
        with pytest.raises(ConfigError, match="TOME_S3_PUBLIC_ENDPOINT_URL"):
            load_settings({"TOME_S3_PUBLIC_ENDPOINT_URL": bad})
        with pytest.raises(ConfigError, match="TOME_S3_ENDPOINT_URL"):
            load_settings({"TOME_S3_ENDPOINT_URL": bad})
    good = "https://files.example.test:8443/s3"
    assert load_settings({"TOME_S3_PUBLIC_ENDPOINT_URL": good}).storage.s3_public_endpoint_url == good
    assert load_settings({}).storage.backend == "local"


def test_wav_header_from_the_first_bytes(tmp_path: Path) -> None:
    path = tmp_path / "c.wav"
    write_wav_atomic(path, np.linspace(-0.5, 0.5, 12_345, dtype=np.float32), 24_000)
    data = path.read_bytes()
    assert wav_header(data[:4096]) == (12_345, 24_000)
    assert wav_header(data[:20]) is None  # the data chunk's header is not reached
    assert wav_header(b"ID3" + data[3:100]) is None


def test_a_stitch_reads_stored_chunks_one_at_a_time_and_its_book_is_stored(storage: Storage) -> None:
    job = uuid.uuid4()
    rate = 24_000
    lengths = [rate // 2, rate, rate // 3]
    pieces = []
    for seq, n in enumerate(lengths):
        path = storage.layout.chunk_audio(job, seq, "t")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_wav_atomic(path, np.full(n, 0.25, dtype=np.float32), rate)
        storage.publish(path)
        pieces.append(StitchPiece(str(path), 0.5, 0))
    out = storage.layout.output(job, "s", "wav")
    result = stitch(pieces, out, "wav", rate, files=stored_files(storage))
    storage.publish(out)
    assert result.duration == pytest.approx((sum(lengths) + 3 * rate // 2) / rate)
    with local_copy(storage, str(out)) as book:
        samples, got_rate = read_wav(book)
    assert got_rate == rate
    assert len(samples) == sum(lengths) + 3 * rate // 2
    if storage.kind == "s3":
        assert not any(storage.layout.root.rglob("*.wav")), "chunks and book were scratch"
    storage.remove(pieces[1].path)
    with pytest.raises(StitchError, match="missing"):
        stitch(pieces, out, "wav", rate, files=stored_files(storage))
