"""POST /v1/audio/speech through the Flask test client, its task run by a worker thread in this process.

The view sends ``tome.speak`` with the app's ``enqueue``; here that hands the message to one thread that
runs what a Celery worker runs (worker.dispatch) on its own database connections while the request waits
for the chunks: only the broker hop is left out (tests/e2e/test_speech_stream.py has it, and gunicorn).
Every format is decoded back with the bundled ffmpeg (WAV with soundfile too).
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import soundfile as sf
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, update
from werkzeug.test import TestResponse

from models import Chunk, Job, JobStatus, SpeechWait, Voice, VoiceBuild, unit_of_work
from tests.api.helpers import upload_voice
from tests.support.apps import app_on, close_engine, tome_of
from webapi.cli import mint_key
from worker import dispatch
from worker.audio import decode_to_pcm
from worker.audio.stream import PCM_RATE, SPEECH_FORMATS, atempo_chain, stream_command
from worker.celery_app import SPEECH_PRIORITY, WORK_PRIORITY
from worker.config import Settings, load_settings
from worker.jobs.speech_admission import FIRST_CHUNK_CHARS, Speed, first_sentence_apart
from worker.runtime import Runtime
from worker.script import ChunkSpec
from worker.task_names import BUILD_VOICE, SPEAK
from worker.voices.prompts import key_for

TEXT = (
    "The lighthouse keeper climbed the stairs at dusk. He counted every step, as he always did. "
    "The ships passed slowly beyond the harbour wall."
)
SPEECH = "/v1/audio/speech"
MAGIC = {"mp3": b"\xff", "opus": b"OggS", "aac": b"\xff", "flac": b"fLaC", "wav": b"RIFF"}


class ThreadWorker:
    """One thread running the messages the app sends, in order, as one worker process would.

    Every change of state happens under one condition, so a test can hold the worker and then take a
    message back out of its queue without racing the thread for it, and ``drain`` cannot see an empty
    queue between the thread taking a message and starting to run it.
    """

    def __init__(self, settings: Settings) -> None:
        self.rt = Runtime(settings)
        self.ran: list[tuple[str, Any]] = []
        self.priorities: list[tuple[str, int | None]] = []  # as sent: None is the route's
        self._state = threading.Condition()
        self._pending: collections.deque[tuple[str, list[Any]]] = collections.deque()
        self._held = False  # held: messages stay in the queue
        self._running = False
        self._stopping = False
        self.thread = threading.Thread(target=self._run, name="test-worker", daemon=True)
        self.thread.start()

    def enqueue(self, name: str, args: list[Any], priority: int | None = None) -> None:
        with self._state:
            self._pending.append((name, args))
            self.priorities.append((name, priority))
            self._state.notify_all()

    def hold(self) -> None:
        with self._state:
            self._held = True

    def release(self) -> None:
        with self._state:
            self._held = False
            self._state.notify_all()

    def take(self, timeout: float = 5.0) -> tuple[str, list[Any]]:
        """The oldest message not yet run, taken out of the queue (the worker must be held)."""
        with self._state:
            assert self._held, "take() races the worker thread unless it is held"
            assert self._state.wait_for(lambda: bool(self._pending), timeout), "no message was sent"
            return self._pending.popleft()

    def _run(self) -> None:
        while True:
            with self._state:
                self._state.wait_for(lambda: self._stopping or (self._pending and not self._held))
                if self._stopping:
                    return
                name, args = self._pending.popleft()
                self._running = True
            try:
                self.ran.append((name, dispatch.run(self.rt, name, args, lambda _n, _a: None)))
            except Exception as exc:
                self.ran.append((name, exc))
            finally:
                with self._state:
                    self._running = False
                    self._state.notify_all()

    def drain(self, timeout: float = 30.0) -> None:
        """Until every message sent so far has run."""
        with self._state:
            assert not self._held, "a held worker never drains"
            done = self._state.wait_for(lambda: not self._pending and not self._running, timeout)
            assert done, "the worker thread is stuck"

    def stop(self) -> None:
        with self._state:
            self._stopping = True
            self._state.notify_all()
        self.thread.join(timeout=30)
        close_engine(self.rt.db)


@dataclass
class Stack:
    app: Flask
    client: FlaskClient
    settings: Settings
    worker: ThreadWorker | None
    keys: dict[str, dict[str, str]] = field(default_factory=dict)

    def key(self, owner: str) -> dict[str, str]:
        if owner not in self.keys:
            self.keys[owner] = {"Authorization": f"Bearer {mint_key(self.app, owner, 'test', admin=False)}"}
        return self.keys[owner]

    def voice(self, owner: str, name: str, reference: tuple[bytes, str]) -> dict[str, Any]:
        response = upload_voice(self.client, self.key(owner), reference[0], name=name, ref_text=reference[1])
        assert response.status_code == 202, response.json
        voice: dict[str, Any] = response.json
        return voice

    def job(self, job_id: str) -> Job:
        with self.app.app_context(), tome_of(self.app).runtime.sessions() as session:
            job = session.get(Job, uuid.UUID(job_id))
            assert job is not None
            return job


@contextlib.contextmanager
def speech_stack(folder: Path, worker: bool = True, **overrides: Any) -> Iterator[Stack]:
    """An app on its own data dir; with ``worker``, its messages run by a worker thread (else they go to
    the embedded broker, which nothing consumes)."""
    settings = load_settings({}, data_dir=folder / "var", **overrides)
    with app_on(settings) as app:
        thread = ThreadWorker(settings) if worker else None
        try:
            with pytest.MonkeyPatch.context() as patch:
                if thread is not None:
                    patch.setattr(tome_of(app), "enqueue", thread.enqueue)
                yield Stack(app, app.test_client(), settings, thread)
        finally:
            if thread is not None:
                thread.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, reference_audio: tuple[bytes, str]) -> Iterator[Stack]:
    """alice with a voice "narrator" whose prompt is built, bob with none."""
    with speech_stack(tmp_path_factory.mktemp("speech")) as built:
        built.voice("alice", "narrator", reference_audio)
        assert built.worker is not None
        built.worker.drain()
        yield built


def speak(stack: Stack, owner: str = "alice", **body: Any) -> TestResponse:
    payload: dict[str, Any] = {"model": "tts-1", "voice": "narrator", "input": TEXT, **body}
    return stack.client.post(SPEECH, json=payload, headers=stack.key(owner))


def seconds_of(data: bytes, fmt: str, folder: Path) -> float:
    """How long the audio lasts, decoded by the bundled ffmpeg (pcm: counted)."""
    if fmt == "pcm":
        return len(data) / 2 / PCM_RATE
    path = folder / f"speech.{fmt}"
    path.write_bytes(data)
    return len(decode_to_pcm(path, PCM_RATE)) / PCM_RATE


def ffmpeg_children() -> list[int]:
    """ffmpeg processes whose parent is this test process."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        with contextlib.suppress(OSError):
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
            if fields.get("Name", "").strip() == "ffmpeg" and int(fields.get("PPid", "0")) == os.getpid():
                found.append(int(status.parent.name))
    return found


# -- the audio ------------------------------------------------------------------------------------------


def test_every_format_streams_audio_that_decodes_to_the_same_length(stack: Stack, tmp_path: Path) -> None:
    lengths: dict[str, float] = {}
    for fmt in SPEECH_FORMATS:
        response = speak(stack, response_format=fmt, instructions="Speak warmly.", voice_settings={"x": 1})
        assert response.status_code == 200, response.json
        data = response.get_data()
        assert response.headers["Cache-Control"] == "no-store"
        assert data.startswith(MAGIC.get(fmt, b"")), (fmt, data[:8])
        lengths[fmt] = seconds_of(data, fmt, tmp_path)
        job = stack.job(response.headers["Tome-Job-Id"])
        assert job.status == JobStatus.SUCCEEDED, (fmt, job.error)
        assert job.kind == "speech"
        assert job.chunks_done == job.chunks_total >= 2  # the first sentence is a chunk of its own
        assert 0.5 < lengths[fmt] / float(job.estimated_seconds or 1) < 2.0, (fmt, lengths[fmt])
        assert not stack.settings.layout.job_dir(job.id).exists(), "chunk files outlive the stream"
        with tome_of(stack.app).runtime.sessions() as session:
            paths = session.scalars(select(Chunk.audio_path).where(Chunk.job_id == job.id)).all()
        assert set(paths) == {None}
        if fmt == "wav":
            assert data[4:8] == b"\xff\xff\xff\xff", "a streamed WAV says its size is unknown"
            samples, rate = sf.read(Path(tmp_path / "speech.wav"))
            assert abs(len(samples) / rate - lengths["wav"]) < 0.01
    for seconds in lengths.values():
        assert abs(seconds - lengths["wav"]) < 0.3, lengths  # codec padding only
    assert ffmpeg_children() == []


@pytest.mark.parametrize(
    ("fmt", "mime"),
    [("mp3", "audio/mpeg"), ("opus", "audio/ogg"), ("aac", "audio/aac"), ("flac", "audio/flac"),
     ("wav", "audio/wav"), ("pcm", "audio/pcm")],
)  # fmt: skip
def test_content_types(stack: Stack, fmt: str, mime: str) -> None:
    response = speak(stack, input="Hello.", response_format=fmt)
    assert response.status_code == 200
    assert response.mimetype == mime
    response.get_data()


def test_speed_scales_the_length(stack: Stack, tmp_path: Path) -> None:
    """2.0 is about half as long (the engine's rate); 4 and 0.25 go past what the engine does alone
    (ffmpeg's atempo does the rest)."""
    lengths = {}
    for speed in (1.0, 2.0, 4.0, 0.25):
        response = speak(stack, response_format="wav", speed=speed)
        assert response.status_code == 200, response.json
        lengths[speed] = seconds_of(response.get_data(), "wav", tmp_path)
    assert 0.38 < lengths[2.0] / lengths[1.0] < 0.65, lengths
    assert 0.18 < lengths[4.0] / lengths[1.0] < 0.35, lengths
    assert 3.0 < lengths[0.25] / lengths[1.0] < 5.5, lengths


# -- what is refused --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "field", "code"),
    [
        ({"input": ""}, 422, "input", "validation_error"),
        ({"input": 42}, 422, "input", "validation_error"),
        ({"input": None}, 422, "input", "validation_error"),
        ({"input": "  \n\n  "}, 422, "input", "empty_script"),
        ({"input": "x" * 4097}, 422, "input", "input_too_long"),
        ({"voice": ""}, 422, "voice", "validation_error"),
        ({"voice": ["narrator"]}, 422, "voice", "validation_error"),
        ({"speed": 0.2}, 422, "speed", "validation_error"),
        ({"speed": 4.01}, 422, "speed", "validation_error"),
        ({"speed": "fast"}, 422, "speed", "validation_error"),
        ({"response_format": "ogg"}, 422, "response_format", "validation_error"),
        ({"stream_format": "sse"}, 422, "stream_format", "validation_error"),
        ({"model": 5}, 422, "model", "validation_error"),
        ({"voice": "nobody"}, 404, "voice", "voice_not_found"),
        ({"input": "<!-- voice: nobody -->\nHello."}, 422, "input", "voice_not_found"),
    ],
)
def test_bad_requests_name_the_field(
    stack: Stack, body: dict[str, Any], status: int, field: str, code: str
) -> None:
    response = speak(stack, **body)
    assert response.status_code == status, response.json
    assert response.json["error"]["field"] == field
    assert response.json["error"]["code"] == code


def test_missing_fields_and_bodies_that_are_not_json(stack: Stack) -> None:
    headers = stack.key("alice")
    for missing in ("input", "voice"):
        body = {"voice": "narrator", "input": "Hi."}
        del body[missing]
        response = stack.client.post(SPEECH, json=body, headers=headers)
        assert (response.status_code, response.json["error"]["field"]) == (422, missing)
    assert stack.client.post(SPEECH, data="input=hi", headers=headers).status_code == 415
    bad_json = stack.client.post(SPEECH, data="{", headers=headers, content_type="application/json")
    assert bad_json.status_code == 400


def test_keys_and_owners(stack: Stack) -> None:
    anonymous = stack.client.post(SPEECH, json={"voice": "narrator", "input": "Hi."})
    assert anonymous.status_code == 401
    assert anonymous.headers["WWW-Authenticate"] == 'Bearer realm="tome"'
    wrong = stack.client.post(
        SPEECH, json={"voice": "narrator", "input": "Hi."}, headers={"Authorization": "Bearer x"}
    )
    assert wrong.status_code == 401
    alice_voice = stack.client.get("/v1/voices", headers=stack.key("alice")).json["voices"][0]["id"]
    for ref in (alice_voice, "narrator"):  # bob has no voice of that id or name
        response = speak(stack, "bob", voice=ref)
        assert response.status_code == 404, response.json
        assert response.json["error"]["code"] == "voice_not_found"
    mine = speak(stack, input="Hello.")
    assert mine.status_code == 200
    mine.get_data()
    job_id = mine.headers["Tome-Job-Id"]
    assert stack.client.get(f"/v1/jobs/{job_id}", headers=stack.key("bob")).status_code == 404
    assert stack.client.get(f"/v1/jobs/{job_id}", headers=stack.key("alice")).json["status"] == "succeeded"
    listed = stack.client.get("/v1/jobs", headers=stack.key("alice")).json["jobs"]
    assert job_id not in {job["id"] for job in listed}, "speech requests are not listed among books"


HOSTILE = [
    "-f lavfi -i sine -y /tmp/tome-speech-pwned.wav",
    "narrator | touch /tmp/tome-speech-pwned",
    "$(touch /tmp/tome-speech-pwned)",
    "../../../etc/passwd",
    "narrator; -f null -",
]


@pytest.mark.parametrize("voice", HOSTILE)
def test_hostile_voices_are_simply_not_found(stack: Stack, voice: str) -> None:
    response = speak(stack, voice=voice)
    assert response.status_code == 404
    assert not Path("/tmp/tome-speech-pwned").exists()
    assert not Path("/tmp/tome-speech-pwned.wav").exists()


def test_a_voice_with_a_control_character_is_a_422_naming_it(stack: Stack) -> None:
    response = speak(stack, voice="narrator\n-y /tmp/tome-speech-pwned.wav")
    assert response.status_code == 422
    assert response.json["error"]["field"] == "voice"
    assert not Path("/tmp/tome-speech-pwned.wav").exists()


def test_the_voice_is_named_as_everywhere_else_case_and_spaces_aside(stack: Stack) -> None:
    response = speak(stack, voice=" NARRATOR ", response_format="wav")
    assert response.status_code == 200, response.data[:300]
    assert response.data[:4] == b"RIFF"


def test_hostile_input_is_only_ever_spoken(stack: Stack, tmp_path: Path) -> None:
    target = tmp_path / "pwned.wav"
    text = "\n".join(
        [
            f"-f wav -y {target}",
            f"| tee {target}",
            f"$(touch {target}) `touch {target}`",
            "-filter_complex anullsrc -map 0 pipe:1",
            "\r\n -i /etc/passwd -c copy",
        ]
    )
    response = speak(stack, input=text, response_format="wav")
    assert response.status_code == 200, response.json
    assert seconds_of(response.get_data(), "wav", tmp_path) > 2.0
    assert not target.exists()
    escape = speak(stack, input="Red \x1b[31m text.")  # control characters: refused as in any script
    assert (escape.status_code, escape.json["error"]["field"]) == (422, "input")


def test_the_ffmpeg_command_holds_no_client_text() -> None:
    """Everything on the command line is a constant or a number, whatever the format or speed."""
    for fmt in SPEECH_FORMATS:
        for tempo in (0.25, 0.5, 1.0, 2.0, 3.7):
            cmd = stream_command(fmt, 22050, tempo)
            assert cmd[cmd.index("-i") + 1] == "pipe:0"
            assert cmd[-1] == "pipe:1"
            for arg in cmd[1:]:
                assert all(c.isalnum() or c in "-_:+.=," for c in arg), arg


# -- voices, quotas, time limits, clients that leave -------------------------------------------------------


def test_a_voice_without_a_prompt_is_built_by_the_usual_build_then_cached(
    stack: Stack, reference_audio: tuple[bytes, str]
) -> None:
    """The request waits for the voice's build, which a worker runs as a build task (sent within the build
    bounds, counted in usage), not the speech task; the prompt is then cached for the next request."""
    worker = stack.worker
    assert worker is not None
    worker.hold()  # the upload's build message waits behind (say) book work ...
    voice = stack.voice("alice", "fresh", reference_audio)
    message = worker.take()
    assert message == (BUILD_VOICE, [voice["id"]])  # ... and is lost
    worker.release()
    assert (
        stack.client.get(f"/v1/voices/{voice['id']}", headers=stack.key("alice")).json["cache_status"]
        == "pending"
    )
    before = stack.client.get("/v1/usage", headers=stack.key("alice")).json["voice_builds_24h"]["count"]
    first = speak(stack, voice="fresh", input="Hello there.")
    assert first.status_code == 200, first.json
    first.get_data()
    built = stack.client.get(f"/v1/voices/{voice['id']}", headers=stack.key("alice")).json
    assert built["cache_status"] == "ready"
    ran = [name for name, _ in worker.ran]
    assert ran.index(BUILD_VOICE) < ran.index(SPEAK), "the build task ran before the speech was sent"
    assert (BUILD_VOICE, "built") in worker.ran
    usage = stack.client.get("/v1/usage", headers=stack.key("alice")).json["voice_builds_24h"]
    assert usage["count"] == before + 1
    again = speak(stack, voice=voice["id"], input="Hello again.")
    assert again.status_code == 200
    again.get_data()
    after = stack.client.get(f"/v1/voices/{voice['id']}", headers=stack.key("alice")).json
    assert after["cache_built_at"] == built["cache_built_at"], "the second request used the cached prompt"
    worker.enqueue(*message)  # the build message, delivered late, finds the prompt ready
    worker.drain()
    assert (BUILD_VOICE, "already_ready") in worker.ran


def test_a_voice_gone_stale_before_the_speech_task_is_asked_for_not_built_there(
    stack: Stack, reference_audio: tuple[bytes, str]
) -> None:
    """The voice is ready when the request is admitted and stale (another engine) when its speech task
    runs: the task does not build it inline; it asks for the usual build and fails the speech, and the
    request is a 409 ``voice_not_ready`` with Retry-After; a build task then builds it."""
    worker = stack.worker
    assert worker is not None
    voice = stack.voice("alice", "racer", reference_audio)
    worker.drain()
    worker.hold()
    answer: list[TestResponse] = []
    thread = threading.Thread(
        target=lambda: answer.append(speak(stack, voice="racer", input="Hello.")), name="speech-request"
    )
    speaks = sum(1 for name, _ in worker.priorities if name == SPEAK)
    thread.start()
    deadline = time.monotonic() + 30
    while sum(1 for name, _ in worker.priorities if name == SPEAK) == speaks:
        assert time.monotonic() < deadline, "the request was not admitted"
        time.sleep(0.02)
    with stack.app.app_context(), unit_of_work(tome_of(stack.app).runtime.sessions) as session:
        session.execute(update(Voice).where(Voice.id == uuid.UUID(voice["id"])).values(cache_status="stale"))
    ran_before = len(worker.ran)
    worker.release()
    thread.join(timeout=60)
    (response,) = answer
    assert response.status_code == 409, response.json
    assert response.json["error"]["code"] == "voice_not_ready"
    assert int(response.headers["Retry-After"]) >= 1
    worker.drain()
    assert worker.ran[ran_before:] == [(SPEAK, "failed")], "the speech task built nothing"
    with tome_of(stack.app).runtime.sessions() as session:
        row = session.get(Voice, uuid.UUID(voice["id"]))
        assert row is not None
        # Asked for as any job asks: pending and sent within the bounds (this worker drops what its
        # tasks send; the next request sends the build again as a hint, and it runs as a build task).
        assert row.cache_status == "pending"
        assert row.cache_sent_until is not None
    again = speak(stack, voice="racer", input="Hello.")
    assert again.status_code == 200, again.json
    again.get_data()
    assert worker.ran[ran_before + 1] == (BUILD_VOICE, "built")


def _pretend_ready(stack: Stack, voice_id: str) -> None:
    """Mark a voice's prompt ready without building it (no worker here renders with it)."""
    with stack.app.app_context(), unit_of_work(tome_of(stack.app).runtime.sessions) as session:
        voice = session.get(Voice, uuid.UUID(voice_id))
        assert voice is not None
        voice.cache_status, voice.cache_key = "ready", key_for(voice, tome_of(stack.app).engine())


def test_speech_never_builds_past_the_build_bounds_or_quota(
    tmp_path: Path, reference_audio: tuple[bytes, str]
) -> None:
    """No worker here; one build in flight at most. bob's build holds the only slot: alice's request waits
    TOME_SPEECH_WAIT_SECONDS, gets a 409 ``voice_not_ready`` with Retry-After, and her build stays
    unsent, no speech job kept. Once her build quota is used, her request is a 429 at once."""
    bounds = {"voice_builds_in_flight": 1, "voice_builds_per_owner": 1, "speech_wait_seconds": 0.5}
    with speech_stack(tmp_path, worker=False, **bounds) as idle:
        idle.voice("bob", "narrator", reference_audio)  # sent: it holds the slot (nothing builds it)
        alice = idle.voice("alice", "narrator", reference_audio)
        response = speak(idle, input="Hello.")
        assert response.status_code == 409, response.json
        assert response.json["error"]["code"] == "voice_not_ready"
        assert response.json["error"]["field"] == "voice"
        assert "waiting for a free build slot" in response.json["error"]["message"]
        assert int(response.headers["Retry-After"]) >= 1
        with tome_of(idle.app).runtime.sessions() as session:
            row = session.get(Voice, uuid.UUID(alice["id"]))
            assert row is not None
            assert (row.cache_status, row.cache_sent_until) == ("pending", None), "not sent past the bound"
            assert session.scalars(select(Job.id)).all() == [], "no speech job while the voice waits"
    quota = {"quota_build_seconds_per_day": 0.5, "speech_wait_seconds": 0.5}
    with speech_stack(tmp_path / "quota", worker=False, **quota) as used:
        alice = used.voice("alice", "narrator", reference_audio)
        with tome_of(used.app).runtime.sessions() as session:
            session.execute(update(Voice).values(cache_sent_until=None))  # its upload's message is lost
            session.add(
                VoiceBuild(
                    voice_id=uuid.UUID(alice["id"]),
                    owner="alice",
                    seconds=1.0,
                    audio_seconds=0.0,
                    outcome="built",
                )
            )
            session.commit()
        started = time.monotonic()
        response = speak(used, input="Hello.")
        assert response.status_code == 429, response.json
        assert response.json["error"]["code"] == "quota_build_seconds_per_day"
        assert int(response.headers["Retry-After"]) > 0
        assert time.monotonic() - started < 5


def test_a_voice_whose_prompt_failed_is_a_409(stack: Stack, reference_audio: tuple[bytes, str]) -> None:
    voice = stack.voice("alice", "broken", reference_audio)
    assert stack.worker is not None
    stack.worker.drain()
    with stack.app.app_context(), unit_of_work(tome_of(stack.app).runtime.sessions) as session:
        session.execute(
            update(Voice)
            .where(Voice.id == uuid.UUID(voice["id"]))
            .values(cache_status="failed", cache_error="EngineError: unreadable reference")
        )
    response = speak(stack, voice="broken")
    assert response.status_code == 409
    assert response.json["error"]["code"] == "voice_unavailable"
    assert "unreadable reference" in response.json["error"]["message"]


def test_speech_counts_against_the_owners_usage(stack: Stack) -> None:
    headers = stack.key("carol")
    before = stack.client.get("/v1/usage", headers=headers).json
    assert before["audio_seconds_24h"]["used"] == 0
    assert speak(stack, "carol").status_code == 404  # she has no voice: nothing is counted
    assert stack.client.get("/v1/usage", headers=headers).json == before
    response = speak(stack)
    response.get_data()
    job = stack.job(response.headers["Tome-Job-Id"])
    usage = stack.client.get("/v1/usage", headers=stack.key("alice")).json
    assert usage["unfinished_jobs"]["used"] == 0
    assert usage["audio_seconds_24h"]["used"] >= float(job.estimated_seconds or 0) > 5


def test_over_the_daily_audio_quota_is_a_429(tmp_path: Path, reference_audio: tuple[bytes, str]) -> None:
    limits = {"quota_audio_seconds_per_day": 5.0, "speech_wait_seconds": 0.3}
    with speech_stack(tmp_path, worker=False, **limits) as small:
        _pretend_ready(small, small.voice("alice", "narrator", reference_audio)["id"])
        response = speak(small)
        assert response.status_code == 429
        assert response.json["error"]["code"] == "quota_audio_per_day"
        assert int(response.headers["Retry-After"]) > 0
        assert speak(small, input="Hi.").status_code == 503  # a quarter of a second fits (no worker here)


def test_an_owner_beyond_its_share_of_speech_gets_a_429_and_no_job(
    tmp_path: Path, reference_audio: tuple[bytes, str]
) -> None:
    _beyond_the_share(tmp_path, reference_audio)


@pytest.mark.postgres
def test_an_owner_beyond_its_share_of_speech_gets_a_429_on_postgres(
    tmp_path: Path, reference_audio: tuple[bytes, str], pg_settings: Settings
) -> None:
    _beyond_the_share(tmp_path, reference_audio, database_url=pg_settings.storage.database_url)


def _beyond_the_share(tmp_path: Path, reference_audio: tuple[bytes, str], **overrides: Any) -> None:
    """Six requests of alice's at once, TOME_SPEECH_PER_OWNER=2, the worker held: exactly two are admitted
    (the owner's admissions are serialised, so simultaneous ones cannot both take the last place), four
    are answered 429 at once with Retry-After and leave no job; bob's request is admitted all the same.
    An owner's only speech job goes at the speech priority, its second in arrival order."""
    with speech_stack(tmp_path, speech_per_owner=2, **overrides) as busy:
        busy.voice("alice", "narrator", reference_audio)
        busy.voice("bob", "narrator", reference_audio)
        worker = busy.worker
        assert worker is not None
        worker.drain()
        worker.hold()
        answers: dict[str, list[TestResponse]] = {"alice": [], "bob": []}
        lock = threading.Lock()

        def post(owner: str) -> None:
            client = busy.app.test_client()
            payload = {"voice": "narrator", "input": "Hello there."}
            response = client.post(SPEECH, json=payload, headers=busy.key(owner))
            response.get_data()
            with lock:
                answers[owner].append(response)

        threads = [threading.Thread(target=post, args=("alice",)) for _ in range(6)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while len(answers["alice"]) < 4:
            assert time.monotonic() < deadline, "the refusals did not come at once"
            time.sleep(0.02)
        bob = threading.Thread(target=post, args=("bob",))
        bob.start()
        sent = [SPEAK] * 3
        while [name for name, _ in worker.priorities if name == SPEAK] != sent:
            assert time.monotonic() < deadline, worker.priorities
            time.sleep(0.02)
        worker.release()
        for thread in [*threads, bob]:
            thread.join(timeout=60)
        refused = [r for r in answers["alice"] if r.status_code == 429]
        assert len(answers["alice"]) == 6
        assert len(refused) == 4, [r.status_code for r in answers["alice"]]
        for response in refused:
            assert response.json["error"]["code"] == "speech_busy"
            assert "TOME_SPEECH_PER_OWNER" in response.json["error"]["message"]
            assert int(response.headers["Retry-After"]) >= 1
        assert sorted(r.status_code for r in answers["alice"]) == [200, 200, 429, 429, 429, 429]
        assert [r.status_code for r in answers["bob"]] == [200]
        assert all(r.get_data() for r in answers["alice"] + answers["bob"] if r.status_code == 200)
        with tome_of(busy.app).runtime.sessions() as session:
            owners = sorted(session.scalars(select(Job.owner).where(Job.kind == "speech")).all())
        assert owners == ["alice", "alice", "bob"], "a refused request keeps nothing"
        priorities = [p for name, p in worker.priorities if name == SPEAK]
        assert set(priorities[:2]) == {SPEECH_PRIORITY, WORK_PRIORITY}  # alice's first, her second
        assert priorities[2] == SPEECH_PRIORITY  # bob's only one
        assert speak(busy, input="Again.").status_code == 200  # her places are free again


def test_no_worker_no_wait_for_ever(tmp_path: Path, reference_audio: tuple[bytes, str]) -> None:
    """Nothing consumes the broker here: the request gives up after TOME_SPEECH_WAIT_SECONDS with a 503
    and the job is cancelled, not left running against the owner's quota."""
    with speech_stack(tmp_path, worker=False, speech_wait_seconds=0.5) as idle:
        _pretend_ready(idle, idle.voice("alice", "narrator", reference_audio)["id"])
        started = time.monotonic()
        response = speak(idle, input="Hello.")
        assert response.status_code == 503
        assert time.monotonic() - started < 5
        assert response.json["error"]["code"] == "speech_timeout"
        assert response.headers["Retry-After"] == "5"
        with tome_of(idle.app).runtime.sessions() as session:
            statuses = session.scalars(select(Job.status)).all()
        assert statuses == [JobStatus.CANCELLED.value]
        assert idle.client.get("/v1/usage", headers=idle.key("alice")).json["unfinished_jobs"]["used"] == 0
        assert ffmpeg_children() == []


def test_a_client_that_leaves_stops_the_rendering(tmp_path: Path, reference_audio: tuple[bytes, str]) -> None:
    """espeak-paced (espeak at a GPU's pace, 0.3 s a chunk), one chunk per batch: the response is closed
    after its first bytes; the job is cancelled, the chunks after the batch in the engine are never
    rendered, no file and no ffmpeg process is left."""
    with speech_stack(
        tmp_path, engine="espeak-paced", paced_seconds_per_chunk=0.3, chunks_per_task=1
    ) as slow:
        slow.voice("alice", "narrator", reference_audio)
        assert slow.worker is not None
        slow.worker.drain()
        text = "\n\n".join(f"Paragraph {n} is here, and it goes on for a while." for n in range(1, 9))
        response = slow.client.post(
            SPEECH, json={"voice": "narrator", "input": text}, headers=slow.key("alice"), buffered=False
        )
        assert response.status_code == 200, response.get_data()[:500]
        body = iter(response.response)
        assert next(body)  # the first bytes of the first chunk
        job_id = response.headers["Tome-Job-Id"]
        response.close()  # what the WSGI server does when the client has gone
        assert ffmpeg_children() == []
        slow.worker.drain()
        job = slow.job(job_id)
        assert job.status == JobStatus.CANCELLED
        assert job.chunks_done < job.chunks_total - 2, "the rest was not rendered"
        assert (SPEAK, "stopped") in slow.worker.ran
        assert not slow.settings.layout.job_dir(job.id).exists()
        usage = slow.client.get("/v1/usage", headers=slow.key("alice")).json
        assert usage["unfinished_jobs"]["used"] == 0
        assert usage["audio_seconds_24h"]["used"] < float(job.estimated_seconds or 0)  # what it rendered


# -- the pure parts ------------------------------------------------------------------------------------------


def test_speeds_split_between_the_engine_and_atempo() -> None:
    assert Speed.of(1.0) == Speed(1.0, 1.0, 1.0)
    assert Speed.of(2.0) == Speed(2.0, 2.0, 1.0)
    assert Speed.of(4.0) == Speed(4.0, 2.0, 2.0)
    assert Speed.of(0.25) == Speed(0.25, 0.5, 0.5)
    assert atempo_chain(1.0) == []
    assert atempo_chain(2.0) == [2.0]
    assert atempo_chain(8.0) == [2.0, 2.0, 2.0]
    assert atempo_chain(0.2) == [0.5, 0.5, 0.8]
    with pytest.raises(ValueError, match="tempo"):
        atempo_chain(float("nan"))


def test_the_first_sentence_is_a_chunk_of_its_own() -> None:
    voice = uuid.uuid4()
    long_first = ChunkSpec(0, 0, "One two three. " * 10 + "Four.", "paragraph", rate=1.5)
    specs, voices = first_sentence_apart([long_first, ChunkSpec(1, 0, "Next.", "none")], [voice, voice])
    assert [s.text for s in specs][:2] == ["One two three.", ("One two three. " * 9 + "Four.").strip()]
    assert [s.seq for s in specs] == [0, 1, 2]
    assert [s.pause_after for s in specs] == ["sentence", "paragraph", "none"]
    assert {s.rate for s in specs[:2]} == {1.5}
    assert voices == [voice] * 3
    short = [ChunkSpec(0, 0, "Short. Very.", "none")]
    assert first_sentence_apart(short, [voice]) == (short, [voice])
    assert len(long_first.text) > FIRST_CHUNK_CHARS


@pytest.mark.serial
def test_an_owner_flooding_speech_on_unbuilt_voices_waits_in_its_own_places_only(
    tmp_path: Path, reference_audio: tuple[bytes, str]
) -> None:
    _flood_of_unbuilt_voices(tmp_path, reference_audio)


@pytest.mark.serial
@pytest.mark.postgres
def test_an_owner_flooding_speech_on_unbuilt_voices_waits_in_its_own_places_only_on_postgres(
    tmp_path: Path, reference_audio: tuple[bytes, str], pg_settings: Settings
) -> None:
    _flood_of_unbuilt_voices(tmp_path, reference_audio, database_url=pg_settings.storage.database_url)


def _flood_of_unbuilt_voices(tmp_path: Path, reference_audio: tuple[bytes, str], **overrides: Any) -> None:
    """alice asks speech of her voices eight times at once, their builds never ending (the worker never
    gets them): a request waiting for a build holds one of her TOME_SPEECH_PER_OWNER (2) places, so two
    wait and six are answered 429 ``speech_busy`` at once, holding nothing. bob's request is served while
    hers wait; hers end in 409 ``voice_not_ready``, never a 5xx, and free their places."""
    wait = 4.0  # bob's request takes 0.1-0.2 s beside the flood on a loaded machine
    with speech_stack(tmp_path, speech_per_owner=2, speech_wait_seconds=wait, **overrides) as flood:
        flood.voice("bob", "narrator", reference_audio)
        worker = flood.worker
        assert worker is not None
        worker.drain()

        def no_builds(name: str, args: list[Any], priority: int | None = None) -> None:
            if name != BUILD_VOICE:
                worker.enqueue(name, args, priority)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(tome_of(flood.app), "enqueue", no_builds)
            voices = [flood.voice("alice", f"v{i}", reference_audio)["id"] for i in range(2)]
            answers: dict[str, list[tuple[TestResponse, float]]] = {"alice": [], "bob": []}
            lock = threading.Lock()

            def post(owner: str, voice: str) -> None:
                started = time.monotonic()
                payload = {"voice": voice, "input": "Hello there."}
                response = flood.app.test_client().post(SPEECH, json=payload, headers=flood.key(owner))
                response.get_data()
                with lock:
                    answers[owner].append((response, time.monotonic() - started))

            started = time.monotonic()
            threads = [threading.Thread(target=post, args=("alice", voices[i % 2])) for i in range(8)]
            for thread in threads:
                thread.start()
            while len(answers["alice"]) < 6:
                assert time.monotonic() - started < wait, "the requests beyond her places were held"
                time.sleep(0.02)
            post("bob", "narrator")
            bob_done = time.monotonic() - started
            for thread in threads:
                thread.join(timeout=wait + 30)
        ((bob, bob_seconds),) = answers["bob"]
        assert bob.status_code == 200, bob.get_data(as_text=True)
        assert bob.get_data()
        print(f"bob's speech during alice's flood: {bob_seconds:.2f} s")
        assert bob_done < wait, "bob's request was served while alice's waited"
        codes = sorted(r.status_code for r, _ in answers["alice"])
        assert codes == [409, 409, 429, 429, 429, 429, 429, 429], codes
        for response, _ in answers["alice"]:
            code = response.json["error"]["code"]
            assert code == ("speech_busy" if response.status_code == 429 else "voice_not_ready")
            assert int(response.headers["Retry-After"]) >= 1
        with tome_of(flood.app).runtime.sessions() as session:
            assert session.scalars(select(SpeechWait.id)).all() == [], "the waits freed their places"
            assert session.scalars(select(Job.owner)).all() == ["bob"]
