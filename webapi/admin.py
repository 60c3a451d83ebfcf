"""/v1/admin: speaker-prompt caches of every owner's voices (admin keys only; a user key gets 403)."""

from __future__ import annotations

import uuid
from typing import Literal

from flask import Blueprint, Response, jsonify
from pydantic import BaseModel, Field, model_validator
from sqlalchemy import select

from models import Voice
from webapi.auth import authenticate, require_admin
from webapi.errors import NotFound
from webapi.extensions import tome
from webapi.operations import Operation, operation
from webapi.schemas import ListQuery, Strict, VoiceOut
from webapi.text import OptionalLine
from webapi.validation import json_body, parse_id, query
from worker.voices.builds import send_builds
from worker.voices.prompts import request_build

bp = Blueprint("admin", __name__, url_prefix="/v1/admin")

CacheState = Literal["pending", "processing", "ready", "failed", "stale"]


@bp.before_request
def _admin_only() -> None:
    authenticate()
    require_admin()


class CacheRebuild(Strict):
    force: bool = Field(False, description="Rebuild even if the prompt is ready and current")


class CacheRebuildMany(Strict):
    status: list[CacheState] | None = Field(None, min_length=1, description="Rebuild voices in these states")
    all: bool = Field(False, description="Rebuild every live voice")

    @model_validator(mode="after")
    def _one_selector(self) -> CacheRebuildMany:
        if bool(self.status) == self.all:
            raise ValueError("give either 'status' (a non-empty list) or 'all': true")
        return self


class AdminVoiceQuery(ListQuery):
    cache_status: CacheState | None = None
    owner: OptionalLine = Field(None, max_length=100)


class AdminVoiceOut(VoiceOut):
    owner: str
    cache_key: str | None


class AdminVoiceList(BaseModel):
    voices: list[AdminVoiceOut]


class CacheQueued(BaseModel):
    voice: AdminVoiceOut
    queued: bool = Field(description="False when a build is already pending or running, or nothing to do")


class CachesQueued(BaseModel):
    queued: int
    matched: int


def _out(voice: Voice) -> AdminVoiceOut:
    return AdminVoiceOut.model_validate(voice, from_attributes=True)


def _queue(voice_id: uuid.UUID, force: bool) -> bool:
    """Ask for a build: the voice waits for one (worker.voices.builds sends it when there is room)."""
    state = tome()
    state.sessions.rollback()  # hand this request's connection back before the build service takes one
    return request_build(state.runtime, voice_id, force)


def _send() -> None:
    state = tome()
    state.sessions.rollback()
    send_builds(state.runtime, state.enqueue)


@bp.post("/voices/<voice_id>/cache")
@operation(Operation("Rebuild one voice's speaker prompt", {202: CacheQueued, 403: None}, body=CacheRebuild,
                     tags=("admin",)))  # fmt: skip
def rebuild_one(voice_id: str) -> tuple[Response, int]:
    body = json_body(CacheRebuild)
    vid = parse_id(voice_id, "voice")
    state = tome()
    if state.sessions.scalar(select(Voice.id).where(Voice.id == vid, Voice.deleted_at.is_(None))) is None:
        raise NotFound(f"voice {voice_id} not found")
    queued = _queue(vid, body.force)
    _send()
    state.sessions.expire_all()
    voice = state.sessions.get(Voice, vid)
    assert voice is not None
    return jsonify(CacheQueued(voice=_out(voice), queued=queued).model_dump(mode="json")), 202


@bp.post("/voice-caches/rebuild")
@operation(Operation("Rebuild the caches of every voice in some states, or of all voices",
                     {202: CachesQueued, 403: None}, body=CacheRebuildMany, tags=("admin",)))  # fmt: skip
def rebuild_many() -> tuple[Response, int]:
    body = json_body(CacheRebuildMany)
    stmt = select(Voice.id).where(Voice.deleted_at.is_(None))
    if body.status:
        stmt = stmt.where(Voice.cache_status.in_(body.status))
    ids = list(tome().sessions.scalars(stmt))
    queued = sum(_queue(vid, force=True) for vid in ids)
    _send()
    return jsonify(CachesQueued(queued=queued, matched=len(ids)).model_dump()), 202


@bp.get("/voices")
@operation(Operation("Voices of all owners with their cache state", {200: AdminVoiceList, 403: None},
                     query=AdminVoiceQuery, tags=("admin",)))  # fmt: skip
def list_voices() -> Response:
    q = query(AdminVoiceQuery)
    stmt = select(Voice).where(Voice.deleted_at.is_(None))
    if q.cache_status:
        stmt = stmt.where(Voice.cache_status == q.cache_status)
    if q.owner:
        stmt = stmt.where(Voice.owner == q.owner)
    voices = tome().sessions.scalars(
        stmt.order_by(Voice.created_at.desc(), Voice.id).limit(q.limit).offset(q.offset)
    )
    return jsonify(AdminVoiceList(voices=[_out(v) for v in voices]).model_dump(mode="json"))
