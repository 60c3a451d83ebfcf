"""POST /v1/audio/speech: short text spoken with one of the caller's voices and streamed while it renders,
in the shape of OpenAI's speech API, so that OpenAI's client libraries work against Tome by changing
their base URL (they send ``Authorization: Bearer <key>``, which is how Tome takes keys).

The request is planned, checked against the quotas and admitted as a speech job here (at most
TOME_SPEECH_PER_OWNER of an owner's at once: 429 with Retry-After beyond); one worker task renders its
chunks, ahead of the book work waiting in the queue when it is the owner's only one (worker.jobs.speech),
and the response streams them through ffmpeg as they finish (worker.jobs.speech_stream).
Errors found before the first byte are answered with Tome's error shape and status; after it, the response
is broken off.

OpenAI's fields: ``model`` and ``instructions`` are accepted and ignored (Tome speaks with its configured
engine, and no engine of Tome's takes style instructions); ``stream_format`` may only be ``audio`` (no
server-sent events); fields this API does not know are ignored, as a newer client may send some.
"""

from __future__ import annotations

import logging
import uuid
from typing import Literal

from flask import Blueprint, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from models import Job, Voice, unit_of_work
from webapi.auth import current_principal, require_key
from webapi.errors import ApiError, Conflict, Invalid, NotFound
from webapi.extensions import tome
from webapi.operations import Operation, operation
from webapi.ratelimit import RateLimited
from webapi.text import Line, OptionalLine, OptionalLines
from webapi.usage import require_room_for_job
from webapi.validation import json_body
from worker.audio import Pauses
from worker.audio.stream import PcmStream, SpeechFormat
from worker.celery_app import SPEECH_PRIORITY, WORK_PRIORITY
from worker.jobs import limits, speech, speech_admission
from worker.jobs.plan import PlanError, PlanRequest, live_voices
from worker.jobs.speech_stream import SpeechStream
from worker.logs import log_context
from worker.script import ReadOptions
from worker.task_names import SPEAK
from worker.voices.builds import wait_for_prompt
from worker.voices.prompts import VoiceCacheFailed, ensure_ready

log = logging.getLogger(__name__)
BUSY_RETRY_SECONDS = 1  # a speech request renders in about a second or two; its place frees when it ends
bp = Blueprint("speech", __name__, url_prefix="/v1/audio")
bp.before_request(require_key)


class SpeechCreate(BaseModel):
    """OpenAI's speech request. Unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore")

    input: str = Field(
        min_length=1,
        description="The text to speak, read as a plain script (numbers and abbreviations in words, the "
        "voice's lexicons, `<!-- break: 1s -->` lines); at most TOME_SPEECH_MAX_CHARS (4,096) characters",
    )
    voice: Line = Field(
        min_length=1,
        max_length=200,
        description='One of your voices, by id or name (OpenAI\'s custom-voice form {"id": "..."} too)',
    )
    model: OptionalLine = Field(
        None, max_length=200, description="Accepted and ignored: Tome speaks with its configured engine"
    )
    response_format: SpeechFormat = Field(
        "mp3",
        description="mp3; opus (Ogg Opus, 24 kHz); aac (ADTS); flac; wav (16-bit, sizes left unknown: "
        "0xFFFFFFFF); pcm (raw 16-bit little-endian mono at 24 kHz, as OpenAI's)",
    )
    speed: float = Field(
        1.0,
        ge=0.25,
        le=4.0,
        description="1 is the voice's own pace; the engine speaks at 0.5-2 of it, ffmpeg stretches the rest",
    )
    instructions: OptionalLines = Field(
        None, max_length=4096, description="Accepted and ignored: no engine of Tome's takes instructions"
    )
    stream_format: Literal["audio"] = Field("audio", description="audio only (no server-sent events)")

    @model_validator(mode="before")
    @classmethod
    def _voice_object(cls, data: object) -> object:
        """OpenAI clients name a custom voice as ``{"id": "..."}``: the id is the voice."""
        if isinstance(data, dict) and isinstance(data.get("voice"), dict) and set(data["voice"]) == {"id"}:
            return {**data, "voice": data["voice"]["id"]}
        return data


class Unavailable(ApiError):
    status, code = 503, "unavailable"


class SpeechFailed(ApiError):
    status, code = 500, "speech_failed"


@bp.post("/speech")
@operation(
    Operation(
        "Speak short text, streamed while it renders: OpenAI's speech API, so that its client libraries "
        "work against Tome with their base URL changed. The audio starts as soon as the first sentence is "
        "rendered (chunked transfer encoding); the `Tome-Job-Id` header names the speech job, which counts "
        "against your quotas as any job. A voice without a speaker prompt is built first by the usual "
        "build (the request waits for it within TOME_SPEECH_WAIT_SECONDS). 409: the voice's prompt could "
        "not be built (`voice_unavailable`), or is still being built (`voice_not_ready`, with "
        "Retry-After); 429: your voice build quota is used, or "
        "TOME_SPEECH_PER_OWNER (2) speech requests of yours are still rendering or waiting for a voice "
        "build (retry after the seconds "
        "Retry-After says); 503: the first audio did not come within TOME_SPEECH_WAIT_SECONDS.",
        {200: None, 404: None, 409: None, 429: None},
        body=SpeechCreate,
        tags=("speech",),
        binary="audio/mpeg",
    )
)
def create_speech() -> Response:
    body = json_body(SpeechCreate)
    state = tome()
    settings = state.settings
    if len(body.input) > settings.speech.max_chars:
        raise Invalid(
            f"input has {len(body.input)} characters; the limit is {settings.speech.max_chars} "
            "(TOME_SPEECH_MAX_CHARS)",
            code="input_too_long",
            field="input",
        )
    principal = current_principal()
    voice = _voice(principal.owner, body.voice)
    _await_prompt(voice)
    engine = state.engine()
    speed = speech_admission.Speed.of(body.speed)
    speech_plan = _plan(principal.owner, voice, body.input, speed)
    require_room_for_job(speech_plan.estimated_seconds, engine.sample_rate)
    running = speech_admission.running_speech(state.sessions(), principal.owner)
    if running >= settings.speech.per_owner:  # at once, before an encoder starts; admit() decides races
        raise _busy(speech_admission.SpeechBusy(running, settings.speech.per_owner))
    encoder = PcmStream(
        body.response_format, engine.sample_rate, speed.tempo, settings.tasks.mp3_bitrate_kbps
    )
    job, alone = _admit(body, voice, engine.name, speed, speech_plan, encoder)
    stream = SpeechStream(
        state.runtime, job.id, len(speech_plan.specs), encoder, settings.speech.wait_seconds
    )
    stream.start()
    state.enqueue(SPEAK, [str(job.id)], priority=SPEECH_PRIORITY if alone else WORK_PRIORITY)
    with log_context(job_id=job.id):
        log.info("speech %s: %d chunks, %s", job.id, len(speech_plan.specs), body.response_format)
    try:
        stream.wait_first()
    except speech.SpeechError as exc:
        stream.close()
        raise _refusal(exc) from exc
    except BaseException:
        stream.close()
        raise
    response = Response(stream, mimetype=encoder.mime_type, direct_passthrough=True)
    response.headers["Tome-Job-Id"] = str(job.id)
    response.headers["Cache-Control"] = "no-store"
    return response


def _admit(
    body: SpeechCreate,
    voice: Voice,
    engine: str,
    speed: speech_admission.Speed,
    speech_plan: speech_admission.SpeechPlan,
    encoder: PcmStream,
) -> tuple[Job, bool]:
    """The speech job, inserted and committed if the owner is within its share (else a 429, the encoder
    stopped); whether it is the owner's only speech in flight (then sent at the speech priority)."""
    state = tome()
    principal = current_principal()
    try:
        job = speech_admission.new_job(
            owner=principal.owner,
            api_key_id=uuid.UUID(principal.key_id),
            voice_id=voice.id,
            engine=engine,
            fmt=body.response_format,
            speed=speed,
            speech_plan=speech_plan,
            title=body.input[:80],
        )
        alone = speech_admission.admit(state.sessions(), job, speech_plan, state.settings.speech.per_owner)
        state.sessions.commit()
    except speech_admission.SpeechBusy as exc:
        state.sessions.rollback()
        encoder.abort()
        raise _busy(exc) from exc
    except BaseException:
        state.sessions.rollback()
        encoder.abort()
        raise
    return job, alone


def _await_prompt(voice: Voice) -> None:
    """Return once the voice's prompt is ready, waiting within TOME_SPEECH_WAIT_SECONDS for its build (the
    usual build, within the build bounds and quota: worker.voices.builds), before the request is admitted,
    so that it holds no render slot or encoder meanwhile (it holds one of its owner's speech places). 409
    ``voice_unavailable`` if the build failed; 409 ``voice_not_ready`` with Retry-After if it is not done in
    time; 429 if the owner's build quota leaves no room for it, or its speech places are all taken."""
    state = tome()
    rt, voice_id, name = state.runtime, voice.id, voice.name
    try:
        if ensure_ready(rt, voice_id):
            return
        wait_id = _hold_wait(voice)
        state.end_session()  # no connection held while it waits
        try:
            waited = wait_for_prompt(rt, voice_id, state.enqueue, state.settings.speech.wait_seconds)
        finally:
            with unit_of_work(rt.sessions) as session:
                speech_admission.end_wait(session, wait_id)
    except VoiceCacheFailed as exc:
        raise Conflict(str(exc), code="voice_unavailable", field="voice") from exc
    if waited is None:
        return
    if waited.quota_used:
        raise RateLimited(
            f"voice {name!r} has no speaker prompt, and your voice prompt builds of the last 24 hours (with "
            "those in flight) used the build quota (TOME_QUOTA_BUILD_SECONDS_PER_DAY)",
            code="quota_build_seconds_per_day",
            retry_after=3600,
        )
    building = _BUILD_STATES.get(waited.state, waited.state)
    raise Conflict(
        f"voice {name!r} has no speaker prompt yet: its build is {building}; retry in about "
        f"{waited.retry_after} s",
        code="voice_not_ready",
        field="voice",
        retry_after=waited.retry_after,
    )


def _hold_wait(voice: Voice) -> uuid.UUID:
    """One of the owner's speech places, held while the request waits for the voice's build (committed):
    429 ``speech_busy`` when its speech jobs and waiting requests already take them all, so that an owner
    cannot hold more API workers waiting than it may have speech rendering."""
    state = tome()
    settings = state.settings.speech
    try:
        wait_id = speech_admission.hold_wait(
            state.sessions(), voice.owner, voice.id, settings.per_owner, settings.wait_seconds
        )
        state.sessions.commit()
    except speech_admission.SpeechBusy as exc:
        state.sessions.rollback()
        raise _busy(exc) from exc
    except BaseException:
        state.sessions.rollback()
        raise
    return wait_id


_BUILD_STATES = {"pending": "waiting for a free build slot", "processing": "running", "stale": "waiting"}


def _voice(owner: str, ref: str) -> Voice:
    voice = live_voices(tome().sessions(), owner, [ref]).get(ref)
    if voice is None:
        raise NotFound(
            f"you have no voice with id or name {ref[:100]!r}", code="voice_not_found", field="voice"
        )
    return voice


def _plan(owner: str, voice: Voice, text: str, speed: speech_admission.Speed) -> speech_admission.SpeechPlan:
    settings = tome().settings
    engine = tome().engine()
    request = PlanRequest(
        owner=owner,
        voice=voice,
        script=text,
        script_format="plain",
        pauses=Pauses(),
        max_chunk_chars=engine.max_chunk_chars,
        job_limits=limits.JobLimits.of(settings),
        read_options=ReadOptions(max_chars=settings.speech.max_chars),
        engine=engine.name,
    )
    try:
        return speech_admission.plan_speech(tome().sessions(), request, speed, voice.language)
    except PlanError as exc:
        field = "input" if exc.field == "script" else exc.field
        raise Invalid(exc.message, code=exc.code, field=field, line=exc.line, column=exc.column) from exc


def _busy(exc: speech_admission.SpeechBusy) -> ApiError:
    return RateLimited(str(exc), code="speech_busy", retry_after=BUSY_RETRY_SECONDS)


def _refusal(exc: speech.SpeechError) -> ApiError:
    """A speech job that ended before its first audio, as the answer's status."""
    if exc.code == "voice_unavailable":
        return Conflict(exc.message, code=exc.code, field="voice")
    if exc.code == "voice_not_ready":
        return Conflict(exc.message, code=exc.code, field="voice", retry_after=BUSY_RETRY_SECONDS * 5)
    if exc.code == "speech_timeout":
        return Unavailable(exc.message, code=exc.code, retry_after=5)
    if exc.code == "engine_error":
        return Invalid(exc.message, code=exc.code, field="input")
    return SpeechFailed(exc.message, code=exc.code)
