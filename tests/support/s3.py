"""A real S3-compatible server for the tests: moto's standalone server (``moto[server]``) started as a
child process on a free port of 127.0.0.1, stopped by its PID. Each test gets its own bucket."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.support.api_server import free_port

START_DEADLINE = 60.0
# moto accepts any credentials; these keep boto3 from looking for real ones (and from asking a metadata
# service on the network) in this process and in the worker processes it starts.
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "tome-test",
    "AWS_SECRET_ACCESS_KEY": "tome-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str
    pid: int

    def client(self) -> Any:
        return boto3.session.Session().client("s3", endpoint_url=self.endpoint_url, region_name="us-east-1")

    def new_bucket(self) -> str:
        name = f"tome-test-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


@contextmanager
def moto_server(log_dir: Path) -> Iterator[S3Server]:
    """Start ``python -m moto.server`` on 127.0.0.1; wait until it answers; stop it by its PID."""
    for name, value in CREDENTIALS.items():
        os.environ[name] = value
    port = free_port()
    log = open(log_dir / "moto.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_DEADLINE
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"moto server exited with {proc.returncode}; see {log_dir / 'moto.log'}")
            try:
                with urllib.request.urlopen(f"{url}/moto-api/", timeout=2):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not answer on {url}") from None
                time.sleep(0.2)
        yield S3Server(url, proc.pid)
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def s3_overrides(server: S3Server, bucket: str, **more: Any) -> dict[str, Any]:
    """Settings overrides that put Tome's files in ``bucket``."""
    return {"storage": "s3", "s3_bucket": bucket, "s3_endpoint_url": server.endpoint_url, **more}


BACKENDS = ("local", "s3")


def overrides_for(kind: str, request: Any) -> dict[str, Any]:
    """For a ``storage_overrides`` fixture parametrized over :data:`BACKENDS`: the S3 server (started
    on first use) and a fresh bucket for ``s3``, nothing for ``local``."""
    if kind == "local":
        return {}
    server: S3Server = request.getfixturevalue("s3_server")
    tmp_path: Path = request.getfixturevalue("tmp_path")
    request.addfinalizer(lambda: assert_no_local_files(tmp_path))
    return s3_overrides(server, server.new_bucket())


@pytest.fixture(params=BACKENDS)
def both_backends(request: pytest.FixtureRequest) -> dict[str, Any]:
    """A module whose tests all run on the local data directory and on an S3 bucket says
    ``storage_overrides = both_backends`` (it stands for tests/conftest.py's ``storage_overrides``)."""
    return overrides_for(request.param, request)


def assert_no_local_files(root: Path) -> None:
    """With S3, nothing of a voice or a job stays on a local disk once the work is done (the data
    directory is scratch): what is there would be read behind the storage layer's back."""
    left = [
        str(p.relative_to(root))
        for folder in ("jobs", "voices")
        for p in root.rglob(f"{folder}/**/*")
        if p.is_file()
    ]
    assert not left, f"files left on the local disk with TOME_STORAGE=s3: {left[:10]}"
