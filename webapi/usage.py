"""GET /v1/usage: what the caller stores and renders, against their quotas; and the checks that turn a
quota into a clear refusal (403 for storage, 429 with Retry-After where waiting helps: the daily audio
and voice-build quotas free up as the 24-hour window moves on)."""

from __future__ import annotations

import uuid

from flask import Blueprint, Response, jsonify
from pydantic import BaseModel, Field

from models import utcnow
from webapi.auth import current_principal, require_key
from webapi.errors import ApiError, Forbidden
from webapi.extensions import tome
from webapi.operations import Operation, operation
from webapi.ratelimit import RateLimited
from webapi.schemas import BuildWaitOut
from worker.jobs.usage import (
    QuotaExceeded,
    Quotas,
    RecentRerenders,
    Usage,
    check_new_job,
    check_new_voice,
    check_rerender,
    check_storage,
    usage_of,
)
from worker.voices.builds import quota_hold, unsent_of

bp = Blueprint("usage", __name__, url_prefix="/v1/usage")
bp.before_request(require_key)


class Count(BaseModel):
    used: int
    quota: int | None = Field(description="null: no limit")


class Seconds(BaseModel):
    used: float
    quota: float | None = Field(description="null: no limit")


class VoiceBuilds(BaseModel):
    count: int
    seconds: Seconds = Field(description="worker seconds")
    audio_seconds: float = Field(description="reference audio encoded")
    reserved_seconds: float = Field(
        0.0,
        description="Estimated worker seconds of the builds waiting or in flight, held against the quota "
        "until each ends and counts its measured time",
    )


class UsageOut(BaseModel):
    owner: str
    stored_bytes: Count = Field(description="Reference recordings, chunk audio and outputs not yet expired")
    unfinished_jobs: Count
    audio_seconds_24h: Seconds = Field(
        description="Estimated output of the jobs submitted in the last 24 hours (what a failed or "
        "cancelled job rendered), and the estimated speech of the chunks re-rendered on request then"
    )
    voice_builds_24h: VoiceBuilds = Field(
        description="The voice prompt builds that ran in the last 24 hours: how many, the worker seconds "
        "they took (against the quota) and the seconds of reference audio they encoded"
    )


def current_usage() -> Usage:
    shared = tome().storage.kind == "local"  # reused chunks are hard links on one disk
    return usage_of(tome().sessions(), current_principal().owner, utcnow(), shared_chunks=shared)


@bp.get("")
@operation(Operation("Your usage and quotas", {200: UsageOut}, tags=("usage",)))
def get_usage() -> Response:
    usage, quotas = current_usage(), Quotas.of(tome().settings)
    out = UsageOut(
        owner=current_principal().owner,
        stored_bytes=Count(used=usage.stored_bytes, quota=quotas.stored_bytes or None),
        unfinished_jobs=Count(used=usage.unfinished_jobs, quota=quotas.unfinished_jobs or None),
        audio_seconds_24h=Seconds(
            used=round(usage.audio_seconds_24h, 1), quota=quotas.audio_seconds_24h or None
        ),
        voice_builds_24h=VoiceBuilds(
            count=usage.builds_24h,
            seconds=Seconds(used=round(usage.build_seconds_24h, 1), quota=quotas.build_seconds_24h or None),
            audio_seconds=round(usage.build_audio_seconds_24h, 1),
            reserved_seconds=round(usage.build_seconds_reserved, 1),
        ),
    )
    return jsonify(out.model_dump(mode="json"))


def build_wait(owner: str, voice_ids: list[uuid.UUID]) -> BuildWaitOut | None:
    """Why the builds of those of ``voice_ids`` waiting to be sent do not move, if the owner's build
    quota holds them back (one query when none of them waits)."""
    state, now = tome(), utcnow()
    session = state.sessions()
    held = unsent_of(session, voice_ids, now)
    hold = quota_hold(session, owner, now, state.settings) if held else None
    if hold is None:
        return None
    return BuildWaitOut(code=hold.code, message=hold.message, retry_after=hold.retry_after, voice_ids=held)


def _refusal(exc: QuotaExceeded) -> ApiError:
    if exc.retry_after is None:
        return Forbidden(exc.message, code=exc.code)
    return RateLimited(exc.message, code=exc.code, retry_after=exc.retry_after)


def require_room_for_job(seconds: float, sample_rate: int) -> None:
    try:
        check_new_job(current_usage(), Quotas.of(tome().settings), seconds, sample_rate)
    except QuotaExceeded as exc:
        raise _refusal(exc) from exc


def require_room_for_rerender(job_id: uuid.UUID, seconds: float) -> None:
    """429 if a re-render of ``seconds`` estimated speech is over the job's hourly re-render limit or the
    owner's daily audio quota."""
    now = utcnow()
    recent = RecentRerenders.of(tome().sessions(), job_id, now)
    try:
        check_rerender(current_usage(), Quotas.of(tome().settings), seconds, recent, now)
    except QuotaExceeded as exc:
        raise _refusal(exc) from exc


def require_room_for_voice() -> None:
    """403 if the owner's storage is full; 429 if their voice builds used the day's build quota."""
    usage, quotas = current_usage(), Quotas.of(tome().settings)
    try:
        check_storage(usage, quotas, 0)
        check_new_voice(usage, quotas)
    except QuotaExceeded as exc:
        raise _refusal(exc) from exc


def require_storage_room() -> None:
    try:
        check_storage(current_usage(), Quotas.of(tome().settings), 0)
    except QuotaExceeded as exc:
        raise _refusal(exc) from exc
