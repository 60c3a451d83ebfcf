"""Two worker "hosts" that share only PostgreSQL, Redis and an S3 bucket (moto's server on 127.0.0.1),
each with its own data directory: one consumes only the engine queue (TOME_GPU_QUEUE: it builds the
voice's prompt and renders every chunk), the other only the default queue (it plans, starts and
stitches, reading the chunks from the bucket). The API, on a third data directory, serves the book
from the bucket with Range; afterwards no host keeps a file of the voice or the job on its disk."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from flask import Flask

from tests.conftest import bearer
from tests.e2e.flow import check_output, submit_book, wait_terminal
from tests.support.apps import app_on
from tests.support.s3 import S3Server, assert_no_local_files, s3_overrides
from webapi.cli import mint_key
from worker.config import Settings
from worker.processes import WorkerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


@pytest.fixture
def shared(pg_settings: Settings, s3_server: S3Server) -> Settings:
    """What the hosts share: the database, the broker (private queues) and a fresh bucket."""
    bucket = s3_server.new_bucket()
    return pg_settings.with_overrides(
        gpu_queue=f"{pg_settings.broker.queue}-gpu", **s3_overrides(s3_server, bucket)
    )


def _host(shared: Settings, root: Path) -> Settings:
    return shared.with_overrides(data_dir=root).validate()


@pytest.fixture
def api(shared: Settings, tmp_path: Path) -> Iterator[Flask]:
    with app_on(_host(shared, tmp_path / "api-host")) as app:
        yield app


def test_one_host_renders_the_other_stitches_and_the_api_serves_from_the_bucket(
    api: Flask,
    shared: Settings,
    s3_server: S3Server,
    tmp_path: Path,
    reference_audio: tuple[bytes, str],
    start_worker: Callable[..., WorkerProcess],
) -> None:
    renderer = _host(shared, tmp_path / "render-host")
    stitcher = _host(shared, tmp_path / "stitch-host")
    gpu = start_worker(renderer, concurrency=1, queues=[shared.broker.gpu_queue])
    cpu = start_worker(
        stitcher,
        concurrency=1,
        queues=[shared.broker.queue, shared.broker.control_queue_name, shared.broker.stitch_queue_name],
    )
    client = api.test_client()
    headers = bearer(mint_key(api, "alice", "k", admin=False))
    job = submit_book(client, headers, reference_audio, fmt="mp3")
    done = wait_terminal(client, headers, job["id"])
    check_output(api, client, headers, done)  # whole download, a Range compared byte for byte, timings

    rendered = sum(int(n) for n in re.findall(r"(\d+) chunks rendered", gpu.log()))
    assert rendered == done["progress"]["chunks_total"]
    assert "chunks rendered" not in cpu.log()
    assert re.search(r"Task tome\.\w*stitch\w*\[[0-9a-f-]+\] succeeded", cpu.log()), cpu.log()[-3000:]
    assert "stitch" not in " ".join(re.findall(r"Task (tome\.\w+)\[[^\]]+\] succeeded", gpu.log()))

    keys = s3_server.keys(shared.storage.s3_bucket)
    assert any(k.startswith(f"jobs/{done['id']}/output-") for k in keys), keys
    assert any(k.startswith(f"voices/{done['voice_id']}/prompt-") for k in keys), keys
    whole = client.get(done["output"]["url"], headers=headers).data
    tail = client.get(done["output"]["url"], headers={**headers, "Range": "bytes=-64"})
    assert tail.status_code == 206
    assert tail.data == whole[-64:]
    # the data directories were scratch: nothing of the voice or the job stayed on any host
    assert_no_local_files(tmp_path)
