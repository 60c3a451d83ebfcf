"""Slow clients must not stall the API (issue 10). The API runs exactly as `make run` starts it
(``api_command``, TOME_* settings through ``settings_env``) while dozens of connections send their request
line, headers or body a byte a second; another tenant's requests must still be answered at once.

Everything here talks to 127.0.0.1 only; every socket has a timeout and is closed; the server is stopped by
its PID; each test stops by itself in well under a minute (a stalled request counts as stalled after
VICTIM_TIMEOUT and ends the measurement)."""

from __future__ import annotations

import io
import json
import os
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from flask import Flask

from tests.support.api_server import request, running_api
from tests.support.apps import tome_of
from tests.support.inline import Inline
from webapi.cli import mint_key
from worker.config import Settings
from worker.processes import api_command
from worker.task_names import START_JOB

pytestmark = pytest.mark.e2e

SLOW_HEADERS = 48  # connections that never finish their headers
SLOW_BODIES = 16  # connections that send whole headers and then trickle the body
BOUND = 2.0  # seconds another tenant may wait while they hang (sync workers: every request stalled)
VICTIM_TIMEOUT = 5.0  # a measured request with no answer by then counts as stalled
HEADER_DEADLINE = 5.0  # api_command's --keep-alive: under gevent also the time a request's headers may take


def announced_status(port: int, method: str, path: str, headers: dict[str, str], length: int) -> int:
    """The status of an answer to headers that announce a ``length``-byte body, before any of it is sent
    (a server may refuse and close at once, so sending the body first would race a broken pipe)."""
    lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{lines}Content-Length: {length}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=VICTIM_TIMEOUT) as sock:
        sock.sendall(head.encode())
        status_line = sock.makefile("rb").readline()
    return int(status_line.split()[1])


class Tricklers:
    """Connections that each send the start of a request and then one more byte a second (all from one
    thread) until closed; ``open`` counts those the server has not closed yet."""

    def __init__(self, port: int, openings: Sequence[tuple[bytes, bytes]]):
        self.port = port
        self.openings = openings
        self.sockets: list[socket.socket] = []
        self.alive: list[bool] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._trickle, daemon=True)

    def __enter__(self) -> Tricklers:
        try:
            for opening, _ in self.openings:
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                self.sockets.append(sock)
                self.alive.append(True)
                sock.sendall(opening)
        except BaseException:
            self._close()
            raise
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._close()

    def _close(self) -> None:
        for sock in self.sockets:
            sock.close()

    def _trickle(self) -> None:
        while not self._stop.wait(1.0):
            for index, (sock, (_, drip)) in enumerate(zip(self.sockets, self.openings, strict=True)):
                if self.alive[index]:
                    self.alive[index] = _still_open(sock) and _send(sock, drip)

    @property
    def open(self) -> int:
        return sum(self.alive)


def _still_open(sock: socket.socket) -> bool:
    """False once the server has closed the connection (EOF, or a reset) or answered on it."""
    sock.setblocking(False)
    try:
        sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.settimeout(5)
    return False


def _send(sock: socket.socket, data: bytes) -> bool:
    try:
        sock.sendall(data)
    except OSError:
        return False
    return True


def header_trickle(path: str) -> tuple[bytes, bytes]:
    """A request line and a header that never ends."""
    return (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ".encode(), b"a")


def body_trickle(method: str, path: str, content_type: str, key: str | None) -> tuple[bytes, bytes]:
    """Whole headers, then a body announced at 1 MB that arrives a byte a second."""
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}"
        f"Content-Type: {content_type}\r\nContent-Length: 1000000\r\n\r\n"
    )
    return (head.encode(), b" ")


MULTIPART = "multipart/form-data; boundary=slowslowslow"


def upload_trickle(method: str, path: str, key: str | None) -> tuple[bytes, bytes]:
    head, _ = body_trickle(method, path, MULTIPART, key)
    part = b'--slowslowslow\r\nContent-Disposition: form-data; name="ref_text"\r\n\r\n'
    return (head + part, b"a")


def seed_voice(app: Flask, key: str, reference_audio: tuple[bytes, str], name: str = "narrator") -> str:
    audio, transcript = reference_audio
    uploaded = app.test_client().post(
        "/v1/voices",
        data={"name": name, "ref_text": transcript, "audio": (io.BytesIO(audio), "r.wav")},
        headers={"Authorization": f"Bearer {key}"},
        content_type="multipart/form-data",
    )
    assert uploaded.status_code == 202, uploaded.json
    voice_id: str = uploaded.json["id"]
    tome_of(app).sessions.remove()
    return voice_id


def victim_latencies(port: int, key: str, rounds: int = 3) -> list[float]:
    """Another tenant's GET /healthz and authenticated GET /v1/voices, ``rounds`` times a second apart; the
    first one that takes longer than BOUND ends the measurement (VICTIM_TIMEOUT if it had no answer)."""
    auth = {"Authorization": f"Bearer {key}"}
    seconds: list[float] = []
    for round_ in range(rounds):
        if round_:
            time.sleep(1.0)
        for path, headers in (("/healthz", {}), ("/v1/voices", auth)):
            try:
                answer = request(port, "GET", path, headers, timeout=VICTIM_TIMEOUT)
            except TimeoutError:
                seconds.append(VICTIM_TIMEOUT)
                return seconds
            assert answer.status == 200, answer
            seconds.append(answer.seconds)
            if answer.seconds >= BOUND:
                return seconds
    return seconds


@pytest.mark.serial  # BOUND is seconds: run alone
def test_slow_clients_do_not_stall_other_tenants(app: Flask, settings: Settings, tmp_path: Path) -> None:
    """64 slow connections: 48 trickle a header (no key), 16 send whole headers and trickle the body, 8 of
    them with a valid key to an endpoint that reads its body first (POST /v1/jobs). With the sync workers
    every request of the other tenant stalled (none answered within VICTIM_TIMEOUT)."""
    hostile = mint_key(app, owner="mallory", name="slow", admin=False)
    victim = mint_key(app, owner="alice", name="victim", admin=False)
    started = time.monotonic()
    with running_api(settings, tmp_path) as server:
        openings = [header_trickle("/v1/voices" if i % 2 else "/healthz") for i in range(SLOW_HEADERS)]
        openings += [
            body_trickle("POST", "/v1/jobs", "application/json", hostile)
            if i % 2
            else upload_trickle("POST", "/v1/voices", None)
            for i in range(SLOW_BODIES)
        ]
        with Tricklers(server.port, openings) as slow:
            time.sleep(1.5)  # had every worker taken one of them, the server would now be stuck
            hanging = slow.open
            seconds = victim_latencies(server.port, victim)
        assert hanging >= SLOW_HEADERS, f"only {hanging} slow clients were still hanging: it measured nothing"
        assert len(seconds) == 6, (seconds, server.log()[-3000:])
        assert max(seconds) < BOUND, (seconds, server.log()[-3000:])
    assert time.monotonic() - started < 45


def test_a_request_whose_headers_never_end_is_dropped_and_oversized_ones_refused(
    settings: Settings, app: Flask, tmp_path: Path
) -> None:
    with running_api(settings, tmp_path) as server:
        with Tricklers(server.port, [header_trickle("/healthz") for _ in range(4)]) as slow:
            deadline = time.monotonic() + HEADER_DEADLINE + 5
            while slow.open and time.monotonic() < deadline:
                time.sleep(0.25)
            assert slow.open == 0, "a slow-loris outlived the header deadline"
        too_long = request(server.port, "GET", "/healthz?" + "a" * 5000)
        assert too_long.status in (400, 414), too_long
        many = request(server.port, "GET", "/healthz", {f"X-H{i}": "1" for i in range(60)})
        assert many.status in (400, 431), many  # 431 from gunicorn 25 on
        assert request(server.port, "GET", "/healthz").status == 200


def test_uploads_near_the_limit_range_downloads_and_both_logs_still_work(
    app: Flask, settings: Settings, tmp_path: Path, reference_audio: tuple[bytes, str]
) -> None:
    key = mint_key(app, owner="alice", name="test", admin=False)
    auth = {"Authorization": f"Bearer {key}"}
    seed_voice(app, key, reference_audio)
    limit = settings.limits.max_upload_bytes
    with running_api(settings, tmp_path) as server:
        # An upload just under the limit reaches the app whole: it is refused for what it is, not its size.
        boundary = "b0undary"
        head = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\nbig\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="ref_text"\r\n\r\nhello there\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="audio"; filename="big.wav"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        tail = f"\r\n--{boundary}--\r\n".encode()
        body = head + os.urandom(limit - 4096) + tail
        headers = {**auth, "Content-Type": f"multipart/form-data; boundary={boundary}"}
        big = request(server.port, "POST", "/v1/voices", headers, body, timeout=60)
        error = json.loads(big.body)["error"]
        assert (big.status, error["field"]) == (422, "audio"), big
        assert error["code"].startswith("audio_"), error
        assert error["code"] != "audio_too_large", error
        assert announced_status(server.port, "POST", "/v1/voices", headers, 2 * limit) == 413

        job = request(
            server.port, "POST", "/v1/jobs", {**auth, "Content-Type": "application/json"},
            json.dumps({"title": "x", "script": "Hello there. A short job.", "voice": "narrator",
                        "output": {"format": "wav"}}).encode(),
        )  # fmt: skip
        assert job.status == 202, job
        job_id = json.loads(job.body)["id"]
        inline = Inline(tome_of(app).runtime)  # the same database: render it here, no worker process
        for voice in app.test_client().get("/v1/voices", headers=auth).json["voices"]:
            inline.enqueue("tome.build_voice", [voice["id"]])
        inline.enqueue(START_JOB, [job_id])
        inline.run()
        whole = request(server.port, "GET", f"/v1/jobs/{job_id}/audio", auth)
        assert whole.status == 200, whole
        part = request(server.port, "GET", f"/v1/jobs/{job_id}/audio", {**auth, "Range": "bytes=0-99"})
        assert (part.status, part.body) == (206, whole.body[:100])

        # The access log on stdout; the API's own lines where gunicorn's error log goes (stderr).
        server.wait_for(server.stdout, f'"GET /v1/jobs/{job_id}/audio HTTP/1.1" 206')
        server.wait_for(server.stderr, f"webapi.jobs: job {job_id}: accepted")


@pytest.mark.serial  # BOUND is seconds: run alone
def test_slow_uploads_with_a_key_hold_no_database_connection(
    app: Flask, settings: Settings, tmp_path: Path, reference_audio: tuple[bytes, str]
) -> None:
    hostile = mint_key(app, owner="mallory", name="slow", admin=False)
    victim = mint_key(app, owner="alice", name="victim", admin=False)
    voice_id = seed_voice(app, hostile, reference_audio)
    one_worker = lambda bind: api_command(bind, workers=1)  # noqa: E731 - every upload on the same pool
    with running_api(settings, tmp_path, one_worker) as server:
        openings = [
            upload_trickle("PUT", f"/v1/voices/{voice_id}", hostile)
            if i % 2
            else upload_trickle("POST", "/v1/voices", hostile)
            for i in range(24)
        ]
        with Tricklers(server.port, openings):
            time.sleep(1.5)
            seconds = victim_latencies(server.port, victim, rounds=1)
    assert max(seconds) < BOUND, seconds
