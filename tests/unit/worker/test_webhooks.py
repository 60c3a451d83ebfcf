"""Webhook delivery on a simulated network: DNS answers and routes are the test's, and every real connection
goes to a local server on 127.0.0.1. Delivery must resolve once, connect to the address it checked (never
to a name), keep the URL's host in the Host header and the TLS server name, report failures in generic
words, and count every attempt."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import socketserver
import ssl
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from models import ApiKey, Job, Voice, unit_of_work, utcnow
from tests.support.apps import close_engine, migrate
from worker import webhooks
from worker.config import load_settings
from worker.runtime import Runtime

SECRET = "s" * 64
PUBLIC = "93.184.215.14"  # stands for a receiver on the internet; the fake network routes it locally


class FakeNetwork:
    """Replaces ``socket.getaddrinfo`` and ``socket.create_connection``: names resolve only through ``dns``
    (successive answers, the last one repeating), and a connection to ``(ip, port)`` goes to
    ``routes[(ip, port)]`` on 127.0.0.1, or to 127.0.0.1 itself, or is refused. Nothing else is reached."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.dns: dict[str, list[list[str] | BaseException]] = {}
        self.routes: dict[tuple[str, int], tuple[str, int]] = {}
        self.lookups: list[str] = []
        self.connects: list[tuple[str, int]] = []
        self.real_getaddrinfo = socket.getaddrinfo
        self.real_create_connection = socket.create_connection
        monkeypatch.setattr(socket, "getaddrinfo", self.getaddrinfo)
        monkeypatch.setattr(socket, "create_connection", self.create_connection)

    def getaddrinfo(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, bytes):
            host = host.decode()
        if host in self.dns:
            self.lookups.append(host)
            answers = self.dns[host]
            current = answers.pop(0) if len(answers) > 1 else answers[0]
            if isinstance(current, BaseException):
                raise current
            return [
                (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
                for a in current
            ]
        kwargs["flags"] = kwargs.get("flags", 0) | socket.AI_NUMERICHOST  # never real DNS
        return self.real_getaddrinfo(host, port, *args, **kwargs)

    def create_connection(self, address: tuple[str, int], timeout: Any = None, *args: Any) -> socket.socket:
        host, port = address[0], int(address[1])
        self.connects.append((host, port))
        for info in self.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            ip = str(info[4][0])
            target = self.routes.get((ip, port)) or ((ip, port) if ip == "127.0.0.1" else None)
            if target is not None:
                return self.real_create_connection(target, timeout)
        raise ConnectionRefusedError(f"no route to {address} in this test")


@pytest.fixture
def network(monkeypatch: pytest.MonkeyPatch) -> FakeNetwork:
    return FakeNetwork(monkeypatch)


class _LocalServer(HTTPServer):
    def server_bind(self) -> None:  # without HTTPServer's reverse lookup of its own name
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "127.0.0.1", int(self.server_address[1])


class Receiver:
    """A local HTTP endpoint that records what it is sent and answers with ``status`` and ``extra``."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.status = 200
        self.headers: dict[str, str] = {}
        self.body = b""
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((self.path, dict(self.headers), body))
                self.send_response(receiver.status)
                for name, value in receiver.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(receiver.body)))
                self.end_headers()
                self.wfile.write(receiver.body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = _LocalServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class RawServer:
    """A local TCP endpoint that records the first bytes a client sends, answers ``reply`` and closes
    (or, with ``reply=None``, says nothing until the test ends)."""

    def __init__(self, reply: bytes | None) -> None:
        self.received = b""
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        self.port = int(self.listener.getsockname()[1])
        self.done = threading.Event()
        self.reply = reply
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with self.listener.accept()[0] as conn:
            conn.settimeout(5)
            self.received = conn.recv(65536)
            if self.reply is None:
                self.done.wait(10)
                return
            conn.sendall(self.reply)
            # Half-close, then read what the client still sends until it closes: closing with unread
            # bytes in the buffer would answer them with a reset, and the client would see "connection
            # failed" instead of the reply (a flaky race on what this test checks).
            conn.shutdown(socket.SHUT_WR)
            with contextlib.suppress(OSError):
                while conn.recv(65536):
                    pass

    def close(self) -> None:
        self.done.set()
        self.listener.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def make_rt(tmp_path: Path) -> Iterator[Callable[..., Runtime]]:
    made: list[Runtime] = []

    def make(**overrides: Any) -> Runtime:
        settings = load_settings({}, data_dir=tmp_path / f"var-{uuid.uuid4().hex[:8]}", **overrides)
        settings.storage.data_dir.mkdir(parents=True)
        migrate(settings.sqlalchemy_url)
        made.append(Runtime(settings))
        return made[-1]

    yield make
    for rt in made:
        close_engine(rt.db)


def add_job(rt: Runtime, url: str) -> uuid.UUID:
    with unit_of_work(rt.sessions) as session:
        key = ApiKey(name="k", owner="o", key_sha256=uuid.uuid4().hex * 2, webhook_secret=SECRET)
        voice = Voice(
            owner="o",
            name=uuid.uuid4().hex[:16],
            ref_text="t",
            audio_path="v.wav",
            audio_sha256="0" * 64,
            audio_duration=1.0,
            audio_sample_rate=24000,
        )
        session.add_all([key, voice])
        session.flush()
        job = Job(
            owner="o",
            status="succeeded",
            title="T",
            script_format="text",
            voice_id=voice.id,
            engine="espeak",
            chunks_total=1,
            output_format="wav",
            webhook_url=url,
            api_key_id=key.id,
            finished_at=utcnow(),
        )
        session.add(job)
        session.flush()
        return job.id


def webhook_state(rt: Runtime, job_id: uuid.UUID) -> tuple[int, str | None, datetime | None, datetime | None]:
    with unit_of_work(rt.sessions) as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job.webhook_attempts, job.webhook_error, job.webhook_next_at, job.webhook_delivered_at


def make_due(rt: Runtime, job_id: uuid.UUID) -> None:
    with unit_of_work(rt.sessions) as session:
        job = session.get(Job, job_id)
        assert job is not None
        job.webhook_next_at = utcnow() - timedelta(seconds=1)


def test_delivery_connects_to_the_address_it_checked_even_if_dns_changes_after(
    make_rt: Callable[..., Runtime], network: FakeNetwork, receiver: Receiver
) -> None:
    """DNS rebinding: the check sees a public address, a second lookup would see loopback."""
    internal = Receiver()  # stands for a service on the worker's own loopback, port 80
    try:
        network.dns["rebind.test"] = [[PUBLIC], ["127.0.0.1"]]
        network.routes[(PUBLIC, 80)] = ("127.0.0.1", receiver.port)
        network.routes[("127.0.0.1", 80)] = ("127.0.0.1", internal.port)
        rt = make_rt()
        job_id = add_job(rt, "http://rebind.test/hook")

        assert webhooks.deliver(rt, job_id) == "delivered"
        assert internal.requests == []
        assert network.lookups == ["rebind.test"], "resolved once"
        assert network.connects == [(PUBLIC, 80)], "connected to the checked address, not to the name"
        assert [(path, headers["Host"]) for path, headers, _ in receiver.requests] == [
            ("/hook", "rebind.test")
        ]
    finally:
        internal.close()


def test_delivery_refuses_a_private_answer_and_connects_nowhere(
    make_rt: Callable[..., Runtime], network: FakeNetwork, receiver: Receiver
) -> None:
    network.dns["rebind.test"] = [["127.0.0.1"]]
    network.routes[("127.0.0.1", 80)] = ("127.0.0.1", receiver.port)
    rt = make_rt()
    job_id = add_job(rt, "http://rebind.test/hook")
    assert webhooks.deliver(rt, job_id) == "failed"
    assert network.connects == []
    assert receiver.requests == []
    assert network.lookups == ["rebind.test"]
    attempts, error, next_at, _ = webhook_state(rt, job_id)
    assert (attempts, error) == (1, "refused: no public address")
    assert next_at is not None


def test_delivery_with_an_injected_resolver_asks_it_once(
    make_rt: Callable[..., Runtime], network: FakeNetwork, receiver: Receiver
) -> None:
    answers = iter([[PUBLIC], ["127.0.0.1"]])
    asked: list[tuple[str, int]] = []

    def resolver(host: str, port: int) -> list[str]:
        asked.append((host, port))
        return next(answers)

    network.routes[(PUBLIC, 443)] = ("127.0.0.1", receiver.port)
    network.routes[(PUBLIC, 80)] = ("127.0.0.1", receiver.port)
    rt = make_rt()
    job_id = add_job(rt, "http://hooks.example/x?y=1")
    webhooks.check_url("http://hooks.example/x?y=1", allow_private=False, resolver=resolver)
    with pytest.raises(webhooks.WebhookRefused):  # what a rebinding name answers the second time
        webhooks.check_url("http://hooks.example/x?y=1", allow_private=False, resolver=resolver)
    answers = iter([[PUBLIC], ["127.0.0.1"]])
    asked.clear()
    assert webhooks.deliver(rt, job_id, resolver=resolver) == "delivered"
    assert asked == [("hooks.example", 80)]
    assert network.connects == [(PUBLIC, 80)]
    assert receiver.requests[0][0] == "/x?y=1"


def test_a_local_receiver_gets_the_host_header_and_a_valid_signature(
    make_rt: Callable[..., Runtime], network: FakeNetwork, receiver: Receiver
) -> None:
    """allow_private (tests, LANs) lifts the address rule and the port rule; the address is still pinned."""
    network.dns["hooks.lan"] = [["127.0.0.1"], ["10.9.9.9"]]
    rt = make_rt(webhook_allow_private=True)
    url = f"http://hooks.lan:{receiver.port}/t%C3%B6me/hook?job=1"
    webhooks.check_url(url, allow_private=True)
    job_id = add_job(rt, url)
    assert webhooks.deliver(rt, job_id) == "delivered"
    assert network.connects == [("127.0.0.1", receiver.port)]
    [(path, headers, body)] = receiver.requests
    assert path == "/t%C3%B6me/hook?job=1"
    assert headers["Host"] == f"hooks.lan:{receiver.port}"
    assert headers["Content-Type"] == "application/json"
    assert webhooks.verify(SECRET, body, headers[webhooks.SIGNATURE_HEADER])
    attempts, error, _, delivered_at = webhook_state(rt, job_id)
    assert (attempts, error) == (1, None)
    assert delivered_at is not None


def test_https_sends_the_url_host_as_server_name_to_the_pinned_address(
    make_rt: Callable[..., Runtime], network: FakeNetwork
) -> None:
    """No certificate here (the cryptography package is not installed): the server reads the ClientHello,
    whose SNI must be the URL's host although the connection went to an address, and answers garbage."""
    server = RawServer(reply=b"HTTP/1.1 400 Bad Request\r\nServer: secret-banner/1.0\r\n\r\n")
    try:
        network.dns["secure.test"] = [[PUBLIC], ["127.0.0.1"]]
        network.routes[(PUBLIC, 443)] = ("127.0.0.1", server.port)
        rt = make_rt()
        job_id = add_job(rt, "https://secure.test/hook")
        assert webhooks.deliver(rt, job_id) == "failed"
        assert network.connects == [(PUBLIC, 443)]
        assert server.received.startswith(b"\x16\x03"), "a TLS handshake record"
        assert b"secure.test" in server.received, "SNI names the URL's host"
        assert webhook_state(rt, job_id)[:2] == (1, "TLS failed")
    finally:
        server.close()
    connection = webhooks.PinnedHTTPSConnection("secure.test", 443, [], timeout=1)
    assert connection.tls.check_hostname, "the certificate must name secure.test"
    assert connection.tls.verify_mode == ssl.CERT_REQUIRED


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (b"SSH-2.0-OpenSSH_9.6 secret-banner\r\n", "invalid response"),
        (b"+OK secret-banner POP3 ready\r\n", "invalid response"),
        (b"", "invalid response"),
        (None, "timed out"),
    ],
)
def test_what_a_remote_says_never_reaches_the_job(
    make_rt: Callable[..., Runtime],
    network: FakeNetwork,
    monkeypatch: pytest.MonkeyPatch,
    reply: bytes | None,
    error: str,
) -> None:
    """Otherwise a webhook URL is a port scanner and banner grabber with the worker's network position."""
    monkeypatch.setattr(webhooks, "TIMEOUT_SECONDS", 0.5)
    server = RawServer(reply)
    try:
        network.routes[(PUBLIC, 80)] = ("127.0.0.1", server.port)
        rt = make_rt()
        job_id = add_job(rt, f"http://{PUBLIC}/hook")
        assert webhooks.deliver(rt, job_id) == "failed"
        assert webhook_state(rt, job_id)[:2] == (1, error)
    finally:
        server.close()


def test_http_errors_refusals_and_redirects_are_reported_generically(
    make_rt: Callable[..., Runtime], network: FakeNetwork, receiver: Receiver
) -> None:
    rt = make_rt()
    network.routes[(PUBLIC, 80)] = ("127.0.0.1", receiver.port)
    receiver.status, receiver.body = 503, b"secret-banner: upstream db10.internal down"
    job_id = add_job(rt, f"http://{PUBLIC}/hook")
    webhooks.deliver(rt, job_id)
    assert webhook_state(rt, job_id)[:2] == (1, "HTTP 503")

    receiver.status, receiver.headers = 302, {"Location": "http://127.0.0.1/elsewhere"}
    make_due(rt, job_id)
    webhooks.deliver(rt, job_id)
    assert webhook_state(rt, job_id)[:2] == (2, "HTTP 302")
    assert [path for path, _, _ in receiver.requests] == ["/hook", "/hook"], "redirects are not followed"

    closed = add_job(rt, f"http://{PUBLIC}:443/hook")  # nothing routed there: the connection is refused
    webhooks.deliver(rt, closed)
    assert webhook_state(rt, closed)[:2] == (1, "connection failed")


def test_a_url_stored_before_the_syntax_checks_fails_its_attempts_and_ends(
    make_rt: Callable[..., Runtime], network: FakeNetwork, receiver: Receiver
) -> None:
    """A tab passed urlsplit at submission; http.client then raised at every delivery, before any count."""
    rt = make_rt(webhook_allow_private=True, webhook_max_attempts=2)
    job_id = add_job(rt, f"http://127.0.0.1:{receiver.port}/ho\tok")
    assert webhooks.deliver(rt, job_id) == "failed"
    assert webhook_state(rt, job_id)[:2] == (1, "refused: invalid URL")
    make_due(rt, job_id)
    assert webhooks.deliver(rt, job_id) == "failed"
    make_due(rt, job_id)
    assert webhooks.deliver(rt, job_id) == "not_due", "attempts used up"
    assert webhook_state(rt, job_id)[0] == 2
    assert receiver.requests == []


def test_any_exception_during_an_attempt_is_counted_and_retries_end(
    make_rt: Callable[..., Runtime], network: FakeNetwork
) -> None:
    network.dns["odd.test"] = [RuntimeError("a resolver bug")]
    rt = make_rt(webhook_max_attempts=3)
    job_id = add_job(rt, "http://odd.test/hook")
    for attempt in range(1, 4):
        assert webhooks.deliver(rt, job_id) == "failed"
        attempts, error, next_at, _ = webhook_state(rt, job_id)
        assert (attempts, error) == (attempt, "delivery failed")
        assert next_at is not None
        assert next_at > utcnow() + webhooks.backoff(attempt) - timedelta(seconds=5), "backoff, not the claim"
        make_due(rt, job_id)
    assert webhooks.deliver(rt, job_id) == "not_due"


def test_an_attempt_is_counted_even_when_the_worker_dies_during_it(
    make_rt: Callable[..., Runtime], network: FakeNetwork
) -> None:
    class Killed(BaseException):
        pass

    def dies(host: str, port: int) -> list[str]:
        raise Killed

    rt = make_rt()
    job_id = add_job(rt, "http://dies.test/hook")
    with pytest.raises(Killed):
        webhooks.deliver(rt, job_id, resolver=dies)
    attempts, _, next_at, delivered_at = webhook_state(rt, job_id)
    assert attempts == 1
    assert delivered_at is None
    assert next_at is not None, "claimed: the sweeper sends it again once the claim runs out"


@pytest.mark.parametrize("ports", ["80,443,8443", " 8443 "])
def test_delivery_applies_the_port_rule_and_the_webhook_ports_setting(
    make_rt: Callable[..., Runtime], network: FakeNetwork, receiver: Receiver, ports: str
) -> None:
    network.routes[(PUBLIC, 8443)] = ("127.0.0.1", receiver.port)
    rt = make_rt()
    job_id = add_job(rt, f"http://{PUBLIC}:8443/hook")  # stored before the port rule, or by hand
    assert webhooks.deliver(rt, job_id) == "failed"
    assert webhook_state(rt, job_id)[:2] == (1, "refused: port not allowed")
    assert network.connects == []

    rt.settings = rt.settings.with_overrides(webhook_ports=ports).validate()
    make_due(rt, job_id)
    assert webhooks.deliver(rt, job_id) == "delivered"
    assert receiver.requests[0][1]["Host"] == f"{PUBLIC}:8443"


# --- Standard Webhooks headers, checked by the reference library (standardwebhooks on PyPI) ------------


def _standard(secret: str) -> Webhook:
    return Webhook(webhooks.standard_secret(secret))


def _set_previous(rt: Runtime, job_id: uuid.UUID, previous: str, until: datetime) -> None:
    with unit_of_work(rt.sessions) as session:
        job = session.get(Job, job_id)
        assert job is not None
        key = session.get(ApiKey, job.api_key_id)
        assert key is not None
        key.webhook_secret_previous, key.webhook_secret_previous_until = previous, until


def test_the_standard_webhooks_library_verifies_a_delivery(
    make_rt: Callable[..., Runtime], receiver: Receiver
) -> None:
    rt = make_rt(webhook_allow_private=True)
    job_id = add_job(rt, f"http://127.0.0.1:{receiver.port}/hook")
    assert webhooks.deliver(rt, job_id) == "delivered"
    [(_, headers, body)] = receiver.requests
    assert _standard(SECRET).verify(body, headers) == json.loads(body)
    assert re.fullmatch(r"msg_[0-9a-f]{32}", headers["webhook-id"])
    assert re.fullmatch(r"v1,[A-Za-z0-9+/]+=*", headers["webhook-signature"])
    assert webhooks.verify(SECRET, body, headers[webhooks.SIGNATURE_HEADER])  # the Tome header still
    with pytest.raises(WebhookVerificationError):
        _standard(SECRET).verify(body.replace(b"succeeded", b"failed"), headers)
    with pytest.raises(WebhookVerificationError):
        _standard("another secret").verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        _standard(SECRET).verify(body, {**headers, "webhook-id": "msg_other"})


def test_every_attempt_of_one_event_has_the_same_webhook_id(
    make_rt: Callable[..., Runtime], receiver: Receiver
) -> None:
    rt = make_rt(webhook_allow_private=True)
    job_id = add_job(rt, f"http://127.0.0.1:{receiver.port}/hook")
    receiver.status = 503
    assert webhooks.deliver(rt, job_id) == "failed"
    make_due(rt, job_id)
    receiver.status = 200
    assert webhooks.deliver(rt, job_id) == "delivered"
    first, second = receiver.requests
    assert first[1]["webhook-id"] == second[1]["webhook-id"]
    _standard(SECRET).verify(second[2], second[1])
    other = add_job(rt, f"http://127.0.0.1:{receiver.port}/hook")
    assert webhooks.deliver(rt, other) == "delivered"
    assert receiver.requests[-1][1]["webhook-id"] != first[1]["webhook-id"], "another job, another id"


def test_during_a_rotation_overlap_both_secrets_verify_and_after_it_only_the_new(
    make_rt: Callable[..., Runtime], receiver: Receiver
) -> None:
    old = "o" * 64
    rt = make_rt(webhook_allow_private=True)
    job_id = add_job(rt, f"http://127.0.0.1:{receiver.port}/hook")
    _set_previous(rt, job_id, old, utcnow() + timedelta(hours=1))
    assert webhooks.deliver(rt, job_id) == "delivered"
    headers, body = receiver.requests[-1][1], receiver.requests[-1][2]
    assert len(headers["webhook-signature"].split(" ")) == 2
    for secret in (SECRET, old):
        _standard(secret).verify(body, headers)
        assert webhooks.verify(secret, body, headers[webhooks.SIGNATURE_HEADER])

    later = add_job(rt, f"http://127.0.0.1:{receiver.port}/hook")
    _set_previous(rt, later, old, utcnow() - timedelta(seconds=1))  # the overlap is over
    assert webhooks.deliver(rt, later) == "delivered"
    headers, body = receiver.requests[-1][1], receiver.requests[-1][2]
    assert len(headers["webhook-signature"].split(" ")) == 1
    _standard(SECRET).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        _standard(old).verify(body, headers)
    assert not webhooks.verify(old, body, headers[webhooks.SIGNATURE_HEADER])


def test_the_tome_signature_check_refuses_forged_and_stale_headers() -> None:
    body = b'{"event":"job.succeeded"}'
    header = webhooks.sign(SECRET, body, 1_000)
    assert webhooks.verify(SECRET, body, header, now=1_000)
    assert not webhooks.verify(SECRET, body, header, now=1_000 + 301)
    assert not webhooks.verify(SECRET, body, f"t=1000,t=2000,{header.split(',', 1)[1]}", now=1_000)
    assert not webhooks.verify(SECRET, body, "t=soon,v1=00", now=1_000)
    assert not webhooks.verify(SECRET, body + b" ", header, now=1_000)
