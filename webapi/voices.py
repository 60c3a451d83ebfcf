"""/v1/voices: upload a reference recording with its transcript (or a speaker embedding), list, show,
delete, export a voice's speaker embedding."""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from flask import Blueprint, Response, jsonify, request
from pydantic import BaseModel
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from werkzeug.datastructures import FileStorage

from models import ACTIVE, CacheStatus, Voice, utcnow
from models.names import voice_name_key
from webapi.auth import current_principal, require_key
from webapi.errors import Conflict, Invalid, NotFound, TooLarge, Unavailable, UnsupportedMediaType
from webapi.extensions import tome
from webapi.operations import Operation, operation
from webapi.schemas import ListQuery, VoiceEmbeddingForm, VoiceForm, VoiceList, VoiceOut, VoiceUpdate
from webapi.usage import build_wait, require_room_for_voice, require_storage_room
from webapi.validation import parse_id, query, validate
from worker.audio import AudioLimits
from worker.engines.base import EmbeddingEngine, embedding_engine
from worker.jobs.lexicons import LexiconNotFound
from worker.jobs.lexicons import find as find_lexicons
from worker.jobs.state import jobs_using_voice
from worker.logs import log_context
from worker.qa.reference import TRANSCRIPT_CODES, without
from worker.storage.atomic import atomic_file
from worker.storage.backend import StorageError, local_copy
from worker.voices.analysis import AnalysisUnavailable, process_pool
from worker.voices.builds import send_builds
from worker.voices.embedding import (
    MAX_EMBEDDING_BYTES,
    EmbeddingError,
    embedding_bytes,
    is_embedding_reference,
    parse_embedding,
)
from worker.voices.prompts import key_for
from worker.voices.state import publish_now, reset_for_new_reference
from worker.voices.store import PromptFileError, load_prompt, save_prompt

F = TypeVar("F", bound=BaseModel)
log = logging.getLogger(__name__)
bp = Blueprint("voices", __name__, url_prefix="/v1/voices")
bp.before_request(require_key)

COPY_BLOCK = 64 * 1024


def voice_out(voice: Voice) -> VoiceOut:
    return VoiceOut.model_validate(voice, from_attributes=True)


def voice_dir(voice_id: uuid.UUID) -> Path:
    return tome().settings.layout.voice_dir(voice_id)


def owned_voice(voice_id: str) -> Voice:
    """The caller's live voice, or 404 (another owner's voice is indistinguishable from a missing one)."""
    vid = parse_id(voice_id, "voice")
    voice = (
        tome()
        .sessions.scalars(
            select(Voice).where(
                Voice.id == vid, Voice.owner == current_principal().owner, Voice.deleted_at.is_(None)
            )
        )
        .first()
    )
    if voice is None:
        raise NotFound(f"voice {voice_id} not found")
    return voice


def _save_upload(upload: FileStorage, limit: int, folder: Path, field: str = "audio") -> Path:
    """Copy the upload to a temp file, counting bytes as they arrive: over the limit is a 413 at once."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix="upload-", dir=folder)
    size = 0
    try:
        with os.fdopen(fd, "wb") as out:
            while block := upload.stream.read(COPY_BLOCK):
                size += len(block)
                if size > limit:
                    raise TooLarge(f"{field} is larger than the limit of {limit} bytes", field=field)
                out.write(block)
                time.sleep(0)  # a turn for the API's other requests (a yield under gevent)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


@dataclass(frozen=True)
class StoredReference:
    path: Path
    sha256: str
    duration: float
    sample_rate: int
    size: int
    warnings: list[dict[str, Any]]


def _store_reference(upload: FileStorage, voice_id: uuid.UUID, force: bool = False) -> StoredReference:
    """Receive, decode under the configured caps, check the signal (a hopeless recording is a 422 naming
    ``audio``; one that is not speech, a tone, hiss or music, too unless ``force``, which keeps it with the
    finding as a warning; a doubtful one comes back with warnings), and keep the reference as mono 16-bit
    WAV under a new server-generated name (a re-upload never overwrites a file a running build may be
    reading).

    The bytes are copied here; the decoding, checks and WAV run in a helper process
    (worker.voices.analysis), so the API's event loop stays free for other requests meanwhile. The
    transcript check costs seconds and runs in the worker's prompt build."""
    settings = tome().settings
    limits = AudioLimits(
        max_bytes=settings.limits.max_upload_bytes,
        max_seconds=settings.limits.max_reference_seconds,
        min_seconds=settings.limits.min_reference_seconds,
        # 48 kHz is plenty for a voice; higher rates let a tiny FLAC of silence decode to hundreds of MB.
        max_sample_rate=48_000,
    )
    layout = settings.layout
    tmp = _save_upload(upload, settings.limits.max_upload_bytes, layout.uploads)
    reference = layout.new_reference(voice_id)
    pool = process_pool(settings.voices.reference_analysers, settings.voices.reference_analysis_seconds)
    started = time.monotonic()
    try:
        answer = pool.run(tmp, reference, limits, force)
        log.info("voice %s: reference analysed in %.2f s", voice_id, time.monotonic() - started)
    except AnalysisUnavailable as exc:
        log.warning("reference analysis of voice %s: %s", voice_id, exc)
        raise Unavailable(
            "the server is too busy to check the recording now; retry in a minute", retry_after=60
        ) from exc
    finally:
        tmp.unlink(missing_ok=True)
    if "invalid" in answer:
        raise Invalid(answer["invalid"]["message"], code=answer["invalid"]["code"], field="audio")
    if "refused" in answer:
        refusal = answer["refused"]
        raise Invalid(
            f"the reference recording is unusable: {refusal['message']}",
            code=refusal["code"],
            field="audio",
            measured=refusal.get("measured"),
        )
    ok = answer["ok"]
    tome().storage.publish(reference)  # in the store before the voice row names it
    return StoredReference(
        reference, ok["sha256"], ok["duration"], ok["sample_rate"], ok["size"], ok["warnings"]
    )


def _embedding_engine_or_422() -> EmbeddingEngine:
    engine = tome().engine()
    speaker = embedding_engine(engine)
    if speaker is None:
        raise Invalid(
            f"the engine {engine.name} has no speaker embeddings; upload a recording as 'audio'",
            code="embedding_unsupported",
            field="embedding",
        )
    return speaker


def _store_embedding(upload: FileStorage, voice_id: uuid.UUID, speaker: EmbeddingEngine) -> StoredReference:
    """Receive a speaker-embedding file (size-capped as it arrives), check it strictly against the running
    engine's checkpoint (worker.voices.embedding: no pickle, one tensor of the right name, dtype and
    shape, finite values), and keep it, re-written canonically, as the voice's reference."""
    layout = tome().settings.layout
    tmp = _save_upload(upload, MAX_EMBEDDING_BYTES, layout.uploads, field="embedding")
    try:
        data = tmp.read_bytes()
    finally:
        tmp.unlink(missing_ok=True)
    try:
        array = parse_embedding(data, speaker.embedding_spec)
    except EmbeddingError as exc:
        raise Invalid(str(exc), code="invalid_embedding", field="embedding") from exc
    canonical = embedding_bytes(array, speaker.embedding_spec)
    path = layout.new_embedding(voice_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as out:
        Path(out).write_bytes(canonical)
    tome().storage.publish(path)  # in the store before the voice row names it
    sha = hashlib.sha256(canonical).hexdigest()
    return StoredReference(path, sha, 0.0, 0, len(canonical), [])


def _publish_embedding_prompt(voice: Voice, speaker: EmbeddingEngine) -> None:
    """An embedding voice's prompt is the embedding itself: written now and published ready, no build."""
    engine = tome().engine()
    key = key_for(voice, engine)
    with local_copy(tome().storage, voice.audio_path) as stored:
        array = parse_embedding(stored.read_bytes(), speaker.embedding_spec)
    path = tome().settings.layout.prompt(voice.id, key)
    save_prompt(path, speaker.prompt_from_embedding(array), {"cache_key": key, "voice_id": str(voice.id)})
    tome().storage.publish(path)  # in the store before the voice row names it
    publish_now(voice, key=key, engine=f"{engine.name} {engine.version}", path=str(path), now=utcnow())


def _form(model: type[F]) -> F:
    """The multipart text fields as ``model``; ``lexicons`` may repeat or be comma-separated (neither a
    name nor an id contains a comma); an empty value clears the list."""
    data: dict[str, object] = {k: v for k, v in request.form.items() if k in model.model_fields}
    if "lexicons" in request.form:
        values = request.form.getlist("lexicons")
        data["lexicons"] = [part.strip() for value in values for part in value.split(",") if part.strip()]
    return validate(model, data)


def _lexicon_ids(refs: list[str]) -> list[str]:
    """The ids of the caller's lexicons that ``refs`` name, in order; 422 for one that names none."""
    try:
        rows = find_lexicons(tome().sessions(), current_principal().owner, refs)
    except LexiconNotFound as exc:
        raise Invalid(exc.message, code="lexicon_not_found", field="lexicons") from exc
    return [str(row.id) for row in rows]


def _require_multipart() -> None:
    if not request.mimetype.startswith("multipart/form-data"):
        raise UnsupportedMediaType("send the voice as multipart/form-data with fields name, ref_text, audio")


def _refuse_taken_name(owner: str, name: str) -> None:
    """409 naming the owner's live voice whose name is the same as ``name`` (by its key: case, Unicode
    normalisation and spaces aside), if there is one."""
    taken = (
        tome()
        .sessions.scalars(
            select(Voice).where(
                Voice.owner == owner, Voice.name_key == voice_name_key(name), Voice.deleted_at.is_(None)
            )
        )
        .first()
    )
    if taken is not None:
        raise Conflict(
            f"you already have a voice named {taken.name!r} (id {taken.id}); names are compared without "
            "regard to case",
            field="name",
            voice_id=str(taken.id),
        )


def _in_use(voice: Voice) -> int:
    """Unfinished jobs that use the voice: as their default voice, or in a chunk (a voice directive)."""
    using = jobs_using_voice(voice.id, ACTIVE).subquery()
    return int(tome().sessions.scalar(select(func.count()).select_from(using)) or 0)


@bp.post("")
@operation(
    Operation(
        "Upload a voice: reference recording plus its transcript; its speaker prompt is built "
        "asynchronously. Or, for an engine with speaker embeddings (qwen3-tts), send a safetensors "
        "'embedding' file instead of 'audio' (ref_text then optional): the voice is ready at once, "
        "nothing is built",
        {202: VoiceOut, 409: None, 413: None},
        form=VoiceForm,
        files=("audio",),
        optional_files=("embedding",),
        tags=("voices",),
    )
)
def create_voice() -> tuple[Response, int]:
    state = tome()
    _require_multipart()
    # The body first, the database after: a client trickling its upload must not hold a pooled
    # connection while it does (request.form reads the whole multipart body).
    upload = request.files.get("audio")
    embedding = request.files.get("embedding")
    if upload is not None and embedding is not None:
        raise Invalid(
            "send either 'audio' or 'embedding', not both", code="validation_error", field="embedding"
        )
    form: VoiceForm | VoiceEmbeddingForm = _form(VoiceEmbeddingForm if embedding is not None else VoiceForm)
    if upload is None and embedding is None:
        raise Invalid("the file field 'audio' is required", code="validation_error", field="audio")
    speaker = _embedding_engine_or_422() if embedding is not None else None
    if speaker is None:
        require_room_for_voice()  # a recording is built: the build quota counts too
    else:
        require_storage_room()
    owner = current_principal().owner
    _refuse_taken_name(owner, form.name)
    lexicon_ids = _lexicon_ids(form.lexicons)
    voice_id = uuid.uuid4()
    folder = voice_dir(voice_id)
    try:
        if embedding is not None and speaker is not None:
            ref = _store_embedding(embedding, voice_id, speaker)
        else:
            assert upload is not None  # checked above
            ref = _store_reference(upload, voice_id, form.force)
        voice = Voice(
            id=voice_id,
            owner=owner,
            name=form.name,
            language=form.language,
            ref_text=form.ref_text,
            audio_path=str(ref.path),
            audio_sha256=ref.sha256,
            audio_duration=ref.duration,
            audio_sample_rate=ref.sample_rate,
            audio_bytes=ref.size,
            lexicon_ids=lexicon_ids,
            warnings=ref.warnings,
        )
        if speaker is not None:
            _publish_embedding_prompt(voice, speaker)
        _insert(voice)
    except BaseException:
        state.storage.remove_folder(folder)
        raise
    with log_context(voice_id=voice_id):
        if speaker is None:
            send_builds(state.runtime, state.enqueue)  # now, or when one of the builds in flight ends
            log.info("voice %s uploaded by %s (%.1f s)", voice_id, owner, ref.duration)
        else:
            log.info("voice %s made from a speaker embedding by %s", voice_id, owner)
    response = jsonify(voice_out(voice).model_dump(mode="json"))
    response.headers["Location"] = f"/v1/voices/{voice_id}"
    return response, 202


def _insert(voice: Voice) -> None:
    """Insert and commit a new voice; 409 naming ``name`` when a concurrent upload took the name
    between the check and the insert."""
    sessions = tome().sessions
    sessions.add(voice)
    try:
        sessions.commit()
    except IntegrityError as exc:
        sessions.rollback()
        _refuse_taken_name(voice.owner, voice.name)
        raise Conflict(f"you already have a voice named {voice.name!r}", field="name") from exc


@bp.put("/<voice_id>")
@operation(
    Operation(
        "Replace a voice's reference recording, transcript or language (its prompt is rebuilt: 202), or "
        "only its default lexicons (200)",
        {200: VoiceOut, 202: VoiceOut, 409: None, 413: None},
        form=VoiceUpdate,
        optional_files=("audio",),
        tags=("voices",),
    )
)
def replace_voice(voice_id: str) -> tuple[Response, int]:
    state = tome()
    _require_multipart()
    form = _form(VoiceUpdate)
    upload = request.files.get("audio")  # the body before the database, as in create_voice
    voice = owned_voice(voice_id)
    if upload is None and form.ref_text is None and form.language is None:
        if form.lexicons is None:
            raise Invalid(
                "send a new 'audio' file, 'ref_text', 'language' or 'lexicons'",
                code="validation_error",
                field="audio",
            )
        # Only the default lexicons: the prompt stays, and jobs already planned keep what they read.
        voice.lexicon_ids = _lexicon_ids(form.lexicons)
        state.sessions.commit()
        return jsonify(voice_out(voice).model_dump(mode="json")), 200
    require_room_for_voice()  # the prompt is built again
    if in_use := _in_use(voice):
        raise Conflict(f"voice is used by {in_use} unfinished job(s); cancel them or wait", field="voice_id")
    old_audio = voice.audio_path
    ref = _store_reference(upload, voice.id, form.force) if upload is not None else None
    if ref is not None:
        voice.audio_path, voice.audio_sha256 = str(ref.path), ref.sha256
        voice.audio_duration, voice.audio_sample_rate = ref.duration, ref.sample_rate
        voice.audio_bytes = ref.size
        voice.warnings = ref.warnings
    else:  # the transcript check is done again by the rebuild
        voice.warnings = without(voice.warnings, TRANSCRIPT_CODES)
    if form.ref_text is not None:
        voice.ref_text = form.ref_text
    if form.language is not None:
        voice.language = form.language
    if form.lexicons is not None:
        voice.lexicon_ids = _lexicon_ids(form.lexicons)
    reset_for_new_reference(voice)
    state.sessions.commit()
    if ref is not None:
        state.storage.remove(old_audio)
    send_builds(state.runtime, state.enqueue)
    log.info("voice %s replaced by its owner", voice.id)
    return jsonify(voice_out(voice).model_dump(mode="json")), 202


@bp.get("")
@operation(Operation("List your voices", {200: VoiceList}, query=ListQuery, tags=("voices",)))
def list_voices() -> Response:
    q = query(ListQuery)
    voices = tome().sessions.scalars(
        select(Voice)
        .where(Voice.owner == current_principal().owner, Voice.deleted_at.is_(None))
        .order_by(Voice.created_at.desc(), Voice.id)
        .limit(q.limit)
        .offset(q.offset)
    )
    listed = [voice_out(v) for v in voices]
    wait = build_wait(current_principal().owner, [v.id for v in listed])
    for out in listed:
        if wait is not None and out.id in wait.voice_ids:
            out.build_waiting = wait.model_copy(update={"voice_ids": [out.id]})
    return jsonify(VoiceList(voices=listed).model_dump(mode="json"))


@bp.get("/<voice_id>")
@operation(
    Operation("Show a voice and the state of its speaker-prompt cache", {200: VoiceOut}, tags=("voices",))
)
def get_voice(voice_id: str) -> Response:
    out = voice_out(owned_voice(voice_id))
    out.build_waiting = build_wait(current_principal().owner, [out.id])
    return jsonify(out.model_dump(mode="json"))


@bp.delete("/<voice_id>")
@operation(Operation("Delete a voice and its files", {204: None, 409: None}, tags=("voices",)))
def delete_voice(voice_id: str) -> tuple[str, int]:
    state = tome()
    voice = owned_voice(voice_id)
    if in_use := _in_use(voice):
        raise Conflict(f"voice is used by {in_use} unfinished job(s); cancel them or wait", field="voice_id")
    voice.deleted_at = utcnow()
    state.sessions.commit()
    state.storage.remove_folder(voice_dir(voice.id))
    return "", 204


@bp.get("/<voice_id>/embedding")
@operation(
    Operation(
        "Download a voice's speaker embedding (a safetensors file) for an engine that has them, to create "
        "the same voice on another deployment of the same checkpoint",
        {200: None, 409: None},
        tags=("voices",),
        binary="application/octet-stream",
    )
)
def export_embedding(voice_id: str) -> Response:
    voice = owned_voice(voice_id)
    engine = tome().engine()
    speaker = _embedding_engine_or_422()
    if is_embedding_reference(voice.audio_path):
        try:
            with local_copy(tome().storage, voice.audio_path) as stored:
                array = parse_embedding(stored.read_bytes(), speaker.embedding_spec)
        except (OSError, StorageError, EmbeddingError) as exc:
            raise Invalid(
                f"this voice's embedding does not fit engine {engine.name}: {exc}",
                code="invalid_embedding",
                field="voice_id",
            ) from exc
    else:
        current = voice.cache_status == CacheStatus.READY and voice.cache_key == key_for(voice, engine)
        if not current or not voice.cache_path:
            raise Conflict(
                f"the voice's speaker prompt is not built yet (cache_status {voice.cache_status}); retry "
                "when it is ready",
                field="voice_id",
            )
        try:
            with local_copy(tome().storage, voice.cache_path) as stored:
                array = speaker.embedding_of(load_prompt(stored, engine.prompt_shapes))
        except (PromptFileError, StorageError, ValueError) as exc:
            raise Conflict(f"the voice's speaker prompt cannot be read: {exc}", field="voice_id") from exc
    response = Response(embedding_bytes(array, speaker.embedding_spec), mimetype="application/octet-stream")
    response.headers["Content-Disposition"] = f'attachment; filename="voice-{voice.id}-embedding.safetensors"'
    return response
