"""/v1/integrations: the caller's Audiobookshelf server and API token, where jobs that ask for it
(``deliver.audiobookshelf``) upload their book (worker.audiobookshelf). The token is sealed with
``TOME_SECRET_KEY`` before it is stored and never appears in an answer or a log line."""

from __future__ import annotations

import logging

from flask import Blueprint, Response, jsonify

from models import Integration
from webapi.auth import current_principal, require_key
from webapi.errors import Conflict, Invalid
from webapi.extensions import tome
from webapi.integration_schemas import AudiobookshelfIn, AudiobookshelfOut
from webapi.operations import Operation, operation
from webapi.validation import json_body
from worker.audiobookshelf import KIND, ServerRefused, check_server_url
from worker.sealed import seal

log = logging.getLogger(__name__)
bp = Blueprint("integrations", __name__, url_prefix="/v1/integrations")
bp.before_request(require_key)


def _out(row: Integration | None) -> Response:
    body = AudiobookshelfOut(url=row.url if row else None, configured=row is not None)
    return jsonify(body.model_dump(mode="json"))


@bp.put("/audiobookshelf")
@operation(
    Operation(
        "Set your Audiobookshelf server and API token (the token is stored encrypted and never shown); "
        "409 when the server has no TOME_SECRET_KEY",
        {200: AudiobookshelfOut, 409: None},
        body=AudiobookshelfIn,
        tags=("integrations",),
    )
)
def set_audiobookshelf() -> Response:
    body = json_body(AudiobookshelfIn)
    settings = tome().settings
    if not settings.security.secret_key:
        raise Conflict(
            "storing a token needs TOME_SECRET_KEY set on the server (at least 32 characters)",
            code="secret_key_missing",
            field="token",
        )
    try:
        check_server_url(body.url, settings)
    except ServerRefused as exc:
        raise Invalid(str(exc), code="url_refused", field="url") from exc
    owner = current_principal().owner
    sessions = tome().sessions
    row = sessions.get(Integration, (owner, KIND))
    if row is None:
        row = Integration(owner=owner, kind=KIND, url=body.url, token_sealed="")
        sessions.add(row)
    row.url = body.url
    row.token_sealed = seal(settings.security.secret_key, body.token)
    sessions.commit()
    log.info("owner %s set an Audiobookshelf server", owner)
    return _out(row)


@bp.get("/audiobookshelf")
@operation(
    Operation(
        "Your Audiobookshelf server (never its token)", {200: AudiobookshelfOut}, tags=("integrations",)
    )
)
def get_audiobookshelf() -> Response:
    return _out(tome().sessions.get(Integration, (current_principal().owner, KIND)))


@bp.delete("/audiobookshelf")
@operation(
    Operation(
        "Forget your Audiobookshelf server and token; deliveries not yet made then fail",
        {204: None},
        tags=("integrations",),
    )
)
def forget_audiobookshelf() -> tuple[str, int]:
    sessions = tome().sessions
    row = sessions.get(Integration, (current_principal().owner, KIND))
    if row is not None:
        sessions.delete(row)
        sessions.commit()
    return "", 204
