"""POST /v1/keys/{key_id}/webhook-secret: rotate a key's webhook signing secret without missing a delivery.

The new secret signs every delivery from now on; the secret it replaces keeps signing beside it (a second
signature in ``webhook-signature`` and ``X-Tome-Signature``) for ``overlap_seconds``, so a receiver can
switch to the new secret at any time within the overlap and still verify every delivery. ``key_id`` is one
of the caller's own keys (``current``: the key making the request); another owner's key, or a revoked
one, is not found.
"""

from __future__ import annotations

import secrets
import uuid
from datetime import datetime, timedelta

from flask import Blueprint, Response, jsonify
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select

from models import ApiKey, utcnow
from webapi.auth import current_principal, require_key
from webapi.errors import NotFound
from webapi.extensions import tome
from webapi.operations import Operation, operation
from webapi.validation import json_body, parse_id
from worker.webhooks import standard_secret

bp = Blueprint("keys", __name__, url_prefix="/v1/keys")
bp.before_request(require_key)

MAX_OVERLAP_SECONDS = 7 * 24 * 3600
CURRENT = "current"


class SecretRotation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    overlap_seconds: int = Field(
        default=86_400,
        ge=0,
        le=MAX_OVERLAP_SECONDS,
        description="How long the replaced secret keeps signing beside the new one (0: not at all)",
    )


class WebhookSecretOut(BaseModel):
    key_id: uuid.UUID
    secret: str = Field(description="The new secret (the HMAC key of X-Tome-Signature and webhook-signature)")
    standard_secret: str = Field(
        description="The same secret as Standard Webhooks libraries take it: whsec_..."
    )
    previous_valid_until: datetime | None = Field(
        description="Until when the replaced secret also signs deliveries (null: no overlap)"
    )


@bp.post("/<key_id>/webhook-secret")
@operation(
    Operation(
        "Rotate a key's webhook secret, the old one signing too for an overlap",
        {200: WebhookSecretOut},
        body=SecretRotation,
        tags=("keys",),
    )
)
def rotate_webhook_secret(key_id: str) -> Response:
    principal = current_principal()
    body = json_body(SecretRotation)
    wanted = uuid.UUID(principal.key_id) if key_id == CURRENT else parse_id(key_id, "key")
    session = tome().sessions()
    key = session.scalars(
        select(ApiKey)
        .where(ApiKey.id == wanted, ApiKey.owner == principal.owner, ApiKey.revoked_at.is_(None))
        .with_for_update()
    ).first()
    if key is None:
        raise NotFound(f"key {key_id!r} not found")
    now = utcnow()
    until = now + timedelta(seconds=body.overlap_seconds) if body.overlap_seconds else None
    key.webhook_secret_previous = key.webhook_secret if until is not None else None
    key.webhook_secret_previous_until = until
    key.webhook_secret = secrets.token_hex(32)
    session.commit()
    out = WebhookSecretOut(
        key_id=key.id,
        secret=key.webhook_secret,
        standard_secret=standard_secret(key.webhook_secret),
        previous_valid_until=until,
    )
    return jsonify(out.model_dump(mode="json"))
