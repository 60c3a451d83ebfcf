"""A script turned into a job's plan: parsed, its voice directives resolved to the owner's voices, read
through lexicons and the normaliser, cut into chunks, and checked against the per-job limits (no Flask or
Celery imports). The API's preview shows a plan without queueing it.

The API plans short scripts while the client waits, so that an error comes back at once with its line
and column; a long script is planned by a worker (:mod:`worker.jobs.intake`) so that no request holds an
API process for long, and the same error then fails the job with the same code, line and column.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from models import Voice
from models.names import voice_name_key
from worker.audio import Pauses
from worker.cast_llm import LlmSettings, label
from worker.jobs import lexicons, limits
from worker.script import (
    Chapter,
    ChunkSpec,
    ParsedScript,
    ReadOptions,
    ScriptError,
    ScriptFormat,
    VoiceDirective,
    make_chunks,
    parse_document,
)
from worker.script import cast as casting
from worker.script.attribution import NARRATOR, Cast, attribute, relabelled
from worker.script.document import BookInfo
from worker.script.errors import EmptyScript, ScriptTooLong
from worker.script.lexicon import CompiledLexicon, compile_lexicons
from worker.script.speak import Speaker

_NO_LLM = (
    "cast.llm asks for the attribution model, but this server has none (TOME_CAST_LLM_URL): the rules' "
    "attribution stands"
)

# Distinct voices one script may name: a cast, not a crowd; also bounds the size of the lookup query.
MAX_SCRIPT_VOICES = 100


class PlanError(ValueError):
    """Why a script cannot become a job: the API answers it as a 422, a worker fails the job with it."""

    def __init__(
        self,
        message: str,
        code: str,
        field: str = "script",
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message, self.code, self.field, self.line, self.column = message, code, field, line, column

    def detail(self) -> dict[str, object]:
        found = {"line": self.line, "column": self.column}
        return {"code": self.code, "message": self.message, "field": self.field} | {
            k: v for k, v in found.items() if v is not None
        }


@dataclass(frozen=True)
class ScriptPlan:
    """A script parsed and cut into chunks, each with the voice that reads it, and its estimated size."""

    chapters: list[Chapter]
    specs: list[ChunkSpec]
    chunk_voices: list[uuid.UUID]
    size: limits.JobEstimate
    info: BookInfo = field(default_factory=BookInfo)
    language: str = "en"
    warnings: tuple[str, ...] = ()
    cast: Cast | None = None  # the dialogue attributed, when asked (the preview, a job with a cast)
    line_chunks: dict[int, int] = field(default_factory=dict)  # line index -> the chunk that reads it
    line_speakers: dict[int, str] = field(default_factory=dict)  # after the cast's corrections
    corrected: frozenset[int] = frozenset()  # lines whose speaker a job's cast or a speaker line gives

    def voice_ids(self, default: uuid.UUID) -> list[uuid.UUID]:
        """The distinct voices of the chunks: the job's own voice first if any chunk uses it, then the
        others in the order of their first chunk (so a client can list the cast as it appears)."""
        used = list(dict.fromkeys(self.chunk_voices))
        return [default, *(v for v in used if v != default)] if default in used else used


@dataclass(frozen=True)
class PlanRequest:
    owner: str
    voice: Voice  # the job's own voice
    script: str | bytes  # bytes: an EPUB
    script_format: str
    pauses: Pauses
    max_chunk_chars: int
    job_limits: limits.JobLimits
    language: str | None = None  # None: the script's own, else the voice's
    read_options: ReadOptions = field(default_factory=ReadOptions)
    lexicons: Sequence[str] = ()
    engine: str = "the engine"
    split_chapters: bool = False  # output.split = "chapter" asked by name: the script needs chapters
    attribute: bool = False  # find and attribute the dialogue (the preview does, always)
    cast: casting.CastRequest | None = None  # read each line by its character's voice
    llm: LlmSettings | None = None  # the operator's attribution model, used when the cast asks for it


def plan(session: Session, request: PlanRequest) -> ScriptPlan:
    """Parse, resolve, read, chunk and check; raises :class:`PlanError`."""
    parsed = _parse(request)
    try:
        limits.check_chapters(len(parsed.chapters), request.job_limits)
    except limits.LimitExceeded as exc:
        raise _over_limit(exc) from exc
    if request.split_chapters and len(parsed.chapters) < 2 and not any(c.title for c in parsed.chapters):
        raise PlanError(
            "the script has no chapters to split at (Markdown headings, an EPUB's table of contents, "
            "or SSML with several chapters): leave output.split out",
            "validation_error",
            field="output.split",
        )
    resolved = _script_voices(session, request.owner, request.voice, parsed.directives)
    chapters, cast, lines = _cast(parsed, request)
    if request.cast is not None:
        resolved.update(_cast_voices(session, request.owner, request.cast))
    by_ref, skipped = _lexicons(session, request, resolved)
    speaker = Speaker(parsed.language, by_ref, engine=request.engine)
    try:
        specs = make_chunks(chapters, request.max_chunk_chars, speaker)
    except ScriptError as exc:
        raise PlanError(exc.message, "script_invalid", line=exc.line, column=exc.column) from exc
    if request.cast is not None:  # a job with a cast names the narrator too (manifest, subtitles)
        specs = [replace(spec, speaker=spec.speaker or NARRATOR) for spec in specs]
    size = limits.estimate(specs, len(parsed.chapters), request.pauses, request.job_limits.chars_per_second)
    try:
        limits.check(size, request.job_limits)
    except limits.LimitExceeded as exc:
        raise _over_limit(exc) from exc
    chunk_voices = [request.voice.id if s.voice is None else resolved[s.voice] for s in specs]
    warnings = (*parsed.warnings, *skipped, *(cast.warnings if cast else ()))
    return ScriptPlan(
        list(chapters),
        specs,
        chunk_voices,
        size,
        parsed.info,
        parsed.language,
        warnings,
        cast,
        _line_chunks(specs, cast, lines),
        _line_speakers(parsed, cast, lines),
        frozenset(_overrides(parsed, cast)) | frozenset(request.cast.lines if request.cast else ()),
    )


def _overrides(parsed: ParsedScript, cast: Cast | None) -> dict[int, str]:
    """The lines a ``<!-- speaker: NAME -->`` line gives a speaker: those of the paragraph after it."""
    if cast is None or not parsed.speakers:
        return {}
    return {
        line.index: parsed.speakers[(line.chapter, line.paragraph)]
        for line in cast.lines
        if (line.chapter, line.paragraph) in parsed.speakers
    }


def _line_speakers(
    parsed: ParsedScript, cast: Cast | None, applied: casting.Casting | None
) -> dict[int, str]:
    if applied is not None:
        return applied.speakers
    if cast is None:
        return {}
    known = casting.names(cast)
    speakers = {line.index: line.speaker for line in cast.lines}
    for index, name in _overrides(parsed, cast).items():
        speakers[index] = known.get(name.lower(), name)
    return speakers


def _cast(
    parsed: ParsedScript, request: PlanRequest
) -> tuple[Sequence[Chapter], Cast | None, casting.Casting | None]:
    """The chapters to chunk (cut at speakers when the job has a cast), the dialogue attributed (when
    asked), and how the cast was applied."""
    if not request.attribute and request.cast is None:
        return parsed.chapters, None, None
    texts = [[" ".join(paragraph) for paragraph in chapter.paragraphs] for chapter in parsed.chapters]
    cast = rules = attribute(texts, parsed.language)
    if request.cast is not None and request.cast.llm:
        if request.llm is None:
            cast = relabelled(cast, cast.lines, [_NO_LLM])
        else:
            settled = {*_overrides(parsed, cast), *request.cast.lines}
            cast = label(cast, texts, request.llm, settled)
    if request.cast is None:
        return parsed.chapters, cast, None
    asked = replace(request.cast, lines={**_overrides(parsed, cast), **request.cast.lines})
    try:
        applied = casting.apply(parsed.chapters, parsed.language, cast, asked)
    except casting.CastError as exc:
        raise PlanError(exc.message, "cast_invalid", field=exc.field) from exc
    if cast is not rules:  # the model only labels: the text read is, piece for piece, the rules' own
        alone = casting.apply(parsed.chapters, parsed.language, rules, asked)
        assert [c.paragraphs for c in alone.chapters] == [c.paragraphs for c in applied.chapters]
    return applied.chapters, cast, applied


def _cast_voices(session: Session, owner: str, cast: casting.CastRequest) -> dict[str, uuid.UUID]:
    """The cast's voice references resolved to the owner's live voices; ``voice_not_found`` naming the
    first that is none of theirs (another owner's voice is no voice of theirs)."""
    refs = list(dict.fromkeys([*cast.voices.values(), *([cast.default] if cast.default else [])]))
    found = live_voices(session, owner, refs)
    for character, ref in [*cast.voices.items(), *([("default", cast.default)] if cast.default else [])]:
        if ref not in found:
            field = "cast.default" if character == "default" else f"cast.voices.{character}"
            raise PlanError(
                f"{field} names {ref!r}, but you have no voice with that id or name",
                "voice_not_found",
                field=field,
            )
    return {ref: voice.id for ref, voice in found.items()}


def _line_chunks(
    specs: Sequence[ChunkSpec], cast: Cast | None, applied: casting.Casting | None
) -> dict[int, int]:
    """The chunk that reads each line: the first chunk of the paragraph cut out for it (a cast), else the
    first chunk of the paragraph it is in."""
    if cast is None:
        return {}
    first: dict[tuple[int, int], int] = {}
    for spec in specs:
        first.setdefault((spec.chapter, spec.paragraph), spec.seq)
    if applied is not None:
        return {line: first[where] for where, line in applied.line_paragraphs.items() if where in first}
    return {
        line.index: first[(line.chapter, line.paragraph)]
        for line in cast.lines
        if (line.chapter, line.paragraph) in first
    }


def _over_limit(exc: limits.LimitExceeded) -> PlanError:
    return PlanError(f"{exc.message} ({exc.setting})", exc.code, field=exc.field)


def _parse(request: PlanRequest) -> ParsedScript:
    fmt: ScriptFormat = request.script_format  # type: ignore[assignment]
    try:
        return parse_document(
            request.script,
            fmt,
            language=request.language,
            fallback_language=request.voice.language,
            options=request.read_options,
        )
    except ScriptTooLong as exc:
        raise PlanError(exc.message, "script_too_long", field="script") from exc
    except EmptyScript as exc:
        raise PlanError(exc.message, "empty_script", field="script") from exc
    except ScriptError as exc:
        raise PlanError(exc.message, "script_invalid", line=exc.line, column=exc.column) from exc


def _lexicons(
    session: Session, request: PlanRequest, resolved: dict[str, uuid.UUID]
) -> tuple[dict[str | None, CompiledLexicon], list[str]]:
    """For the job's voice (None) and each voice the script names: the job's lexicons, then the voice's
    own defaults, compiled; and a warning for each entry skipped (a phoneme the engine cannot take)."""
    try:
        named = lexicons.load(session, request.owner, list(request.lexicons))
    except lexicons.LexiconNotFound as exc:
        raise PlanError(exc.message, "lexicon_not_found", field="lexicons") from exc
    voice_ids = {request.voice.id, *resolved.values()}
    defaults = lexicons.voice_defaults(session, list(voice_ids))
    by_ref: dict[str | None, CompiledLexicon] = {}
    warnings: list[str] = []
    refs: dict[str | None, uuid.UUID] = {None: request.voice.id}
    refs.update(resolved)
    compiled_by_voice: dict[uuid.UUID, CompiledLexicon] = {}
    for ref, voice_id in refs.items():
        if voice_id not in compiled_by_voice:
            compiled = compile_lexicons(
                [*named, *defaults.get(voice_id, [])], phonemes=False, engine=request.engine
            )
            compiled_by_voice[voice_id] = compiled
            warnings.extend(w for w in compiled.warnings if w not in warnings)
        by_ref[ref] = compiled_by_voice[voice_id]
    return by_ref, warnings


def _script_voices(
    session: Session, owner: str, default: Voice, directives: Sequence[VoiceDirective]
) -> dict[str, uuid.UUID]:
    """Every voice the script's directives name, resolved like the ``voice`` field (an id or name of the
    owner's live voices), in one query. Unused directives are resolved too: a typo is reported even if
    another directive follows it at once. ``voice_not_found`` at the first directive of a name that does
    not resolve."""
    first: dict[str, VoiceDirective] = {}
    resolved = {default.name: default.id}
    for directive in directives:
        if directive.voice is None:
            continue
        if voice_name_key(directive.voice) == default.name_key:
            resolved[directive.voice] = default.id
            continue
        first.setdefault(directive.voice, directive)
        if len(first) > MAX_SCRIPT_VOICES:
            raise PlanError(
                f"the script names more than {MAX_SCRIPT_VOICES} voices",
                "too_many_voices",
                line=directive.line,
                column=directive.column,
            )
    found = live_voices(session, owner, list(first)) if first else {}
    for ref, directive in first.items():
        if ref not in found:
            raise PlanError(
                f"a voice directive names {ref!r}, but you have no voice with that id or name",
                "voice_not_found",
                line=directive.line,
                column=directive.column,
            )
        resolved[ref] = found[ref].id
    return resolved


def live_voices(session: Session, owner: str, refs: list[str]) -> dict[str, Voice]:
    """The refs (ids or names) that name one of the owner's live voices, and that voice, in one query; an
    id wins over a name that happens to spell it. This is how every voice reference is resolved (a job's
    ``voice``, script directives and SSML ``<voice>``, speech's ``voice``): a name matches by its key
    (models.names), so "Narrator", "narrator " and "NARRATOR" are one voice."""
    ids: dict[str, uuid.UUID] = {}
    for ref in refs:
        with contextlib.suppress(ValueError):
            ids[ref] = uuid.UUID(ref)
    keys = {ref: voice_name_key(ref) for ref in refs}
    rows = session.scalars(
        select(Voice).where(
            Voice.owner == owner,
            Voice.deleted_at.is_(None),
            or_(Voice.name_key.in_(set(keys.values())), Voice.id.in_(list(ids.values()))),
        )
    )
    by_id: dict[uuid.UUID, Voice] = {}
    by_key: dict[str, Voice] = {}
    for voice in rows:
        by_id[voice.id] = voice
        by_key[voice.name_key] = voice
    found: dict[str, Voice] = {}
    for ref in refs:
        if ref in ids and ids[ref] in by_id:
            found[ref] = by_id[ids[ref]]
        elif keys[ref] in by_key:
            found[ref] = by_key[keys[ref]]
    return found
