"""/v1/lexicons: pronunciation lexicons, owned like voices; JSON or W3C PLS in, JSON or PLS out."""

from __future__ import annotations

import logging

from flask import Blueprint, Response, jsonify, request
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from models import Lexicon, Voice
from webapi.auth import current_principal, require_key
from webapi.errors import Conflict, Invalid, NotFound, TooLarge
from webapi.extensions import tome
from webapi.lexicon_schemas import (
    LexiconEntryOut,
    LexiconIn,
    LexiconList,
    LexiconOut,
    LexiconSummary,
    PlsQuery,
)
from webapi.operations import Operation, operation
from webapi.schemas import ListQuery
from webapi.validation import json_body, parse_id, query
from worker.jobs.lexicons import entry_from_json, entry_to_json
from worker.script.lexicon import Entry, LexiconError, check_entries
from worker.script.pls import MAX_PLS_BYTES, read_pls, write_pls

log = logging.getLogger(__name__)
bp = Blueprint("lexicons", __name__, url_prefix="/v1/lexicons")
bp.before_request(require_key)

PLS_TYPES = ("application/pls+xml", "application/xml", "text/xml")


def lexicon_out(row: Lexicon) -> LexiconOut:
    return LexiconOut(
        id=row.id,
        name=row.name,
        language=row.language,
        entry_count=row.entry_count,
        created_at=row.created_at,
        updated_at=row.updated_at,
        entries=[LexiconEntryOut(**entry_to_json(entry_from_json(e))) for e in row.entries],
    )


def owned_lexicon(lexicon_id: str) -> Lexicon:
    """The caller's lexicon, or 404 (another owner's is indistinguishable from a missing one)."""
    lid = parse_id(lexicon_id, "lexicon")
    row = (
        tome()
        .sessions.scalars(
            select(Lexicon).where(Lexicon.id == lid, Lexicon.owner == current_principal().owner)
        )
        .first()
    )
    if row is None:
        raise NotFound(f"lexicon {lexicon_id} not found")
    return row


def _checked(entries: list[Entry]) -> list[Entry]:
    try:
        return check_entries(entries)
    except LexiconError as exc:
        field = f"entries[{exc.index}].{exc.field}" if exc.index is not None else exc.field or "entries"
        raise Invalid(exc.message, code="lexicon_invalid", field=field) from exc


def _read_body(require_name: bool) -> tuple[str | None, str | None, list[Entry]]:
    """(name, language, entries) from a JSON body or a PLS document; a 4xx names what is wrong."""
    if request.mimetype in PLS_TYPES:
        q = query(PlsQuery)
        if require_name and q.name is None:
            raise Invalid(
                "name the lexicon: ?name=... beside a PLS document",
                code="validation_error",
                field="query.name",
            )
        if request.content_length is not None and request.content_length > MAX_PLS_BYTES:
            raise TooLarge(f"the PLS document is larger than {MAX_PLS_BYTES} bytes", field="lexicon")
        data = request.stream.read(MAX_PLS_BYTES + 1)
        try:
            pls = read_pls(data, case_sensitive=q.case_sensitive)
        except LexiconError as exc:
            raise Invalid(exc.message, code="lexicon_invalid", field=exc.field or "lexicon") from exc
        language = q.language or (pls.language.lower() if pls.language else None)
        if language is not None and len(language) > 16:
            raise Invalid(f"the language {language!r} is too long", code="validation_error", field="language")
        return q.name, language, pls.entries
    body = json_body(LexiconIn)
    entries = [Entry(e.grapheme, e.alias, e.phoneme, e.case_sensitive) for e in body.entries]
    return body.name, body.language, _checked(entries)


def _store(row: Lexicon, name: str | None, language: str | None, entries: list[Entry]) -> None:
    if name is not None:
        row.name = name
    row.language = language
    row.entries = [entry_to_json(e) for e in entries]
    row.entry_count = len(entries)
    state = tome()
    try:
        state.sessions.commit()
    except IntegrityError as exc:
        state.sessions.rollback()
        raise Conflict(f"you already have a lexicon named {name!r}", field="name") from exc


@bp.post("")
@operation(
    Operation(
        "Create a pronunciation lexicon from JSON, or from a W3C PLS document "
        "(Content-Type: application/pls+xml, ?name=...)",
        {201: LexiconOut, 409: None, 413: None},
        body=LexiconIn,
        tags=("lexicons",),
    )
)
def create_lexicon() -> tuple[Response, int]:
    name, language, entries = _read_body(require_name=True)
    owner = current_principal().owner
    state = tome()
    if state.sessions.scalar(select(Lexicon.id).where(Lexicon.owner == owner, Lexicon.name == name)):
        raise Conflict(f"you already have a lexicon named {name!r}", field="name")
    row = Lexicon(owner=owner, name=name, entries=[], entry_count=0)
    state.sessions.add(row)
    _store(row, name, language, entries)
    log.info("lexicon %s created by %s (%d entries)", row.id, owner, row.entry_count)
    response = jsonify(lexicon_out(row).model_dump(mode="json"))
    response.headers["Location"] = f"/v1/lexicons/{row.id}"
    return response, 201


@bp.put("/<lexicon_id>")
@operation(
    Operation(
        "Replace a lexicon's entries (and name, language): JSON, or a PLS document",
        {200: LexiconOut, 409: None, 413: None},
        body=LexiconIn,
        tags=("lexicons",),
    )
)
def replace_lexicon(lexicon_id: str) -> Response:
    name, language, entries = _read_body(require_name=False)
    row = owned_lexicon(lexicon_id)
    _store(row, name, language, entries)
    return jsonify(lexicon_out(row).model_dump(mode="json"))


@bp.get("")
@operation(
    Operation(
        "List your lexicons (without their entries)", {200: LexiconList}, query=ListQuery, tags=("lexicons",)
    )
)
def list_lexicons() -> Response:
    q = query(ListQuery)
    rows = tome().sessions.scalars(
        select(Lexicon)
        .where(Lexicon.owner == current_principal().owner)
        .order_by(Lexicon.created_at.desc(), Lexicon.id)
        .limit(q.limit)
        .offset(q.offset)
    )
    summaries = [LexiconSummary.model_validate(row, from_attributes=True) for row in rows]
    return jsonify(LexiconList(lexicons=summaries).model_dump(mode="json"))


@bp.get("/<lexicon_id>")
@operation(Operation("Show a lexicon and its entries", {200: LexiconOut}, tags=("lexicons",)))
def get_lexicon(lexicon_id: str) -> Response:
    return jsonify(lexicon_out(owned_lexicon(lexicon_id)).model_dump(mode="json"))


@bp.get("/<lexicon_id>/pls")
@operation(
    Operation(
        "Export a lexicon as a W3C PLS document",
        {200: None},
        tags=("lexicons",),
        binary="application/pls+xml",
    )
)
def export_lexicon(lexicon_id: str) -> Response:
    row = owned_lexicon(lexicon_id)
    document = write_pls([entry_from_json(e) for e in row.entries], row.language)
    response = Response(document, mimetype="application/pls+xml")
    response.headers["Content-Disposition"] = f'attachment; filename="lexicon-{row.id}.pls"'
    return response


@bp.delete("/<lexicon_id>")
@operation(Operation("Delete a lexicon; voices stop reading it", {204: None}, tags=("lexicons",)))
def delete_lexicon(lexicon_id: str) -> tuple[str, int]:
    state = tome()
    row = owned_lexicon(lexicon_id)
    key = str(row.id)
    for voice in state.sessions.scalars(select(Voice).where(Voice.owner == row.owner)):
        if key in (voice.lexicon_ids or []):
            voice.lexicon_ids = [v for v in voice.lexicon_ids if v != key]
    state.sessions.delete(row)
    state.sessions.commit()
    return "", 204
