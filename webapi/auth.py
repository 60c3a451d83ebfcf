"""Bearer API keys. Only the SHA-256 of a key is stored; every lookup of an object filters by owner."""

from __future__ import annotations

from dataclasses import dataclass

from flask import g, request
from sqlalchemy import select

from models import ApiKey, Role, hash_key
from webapi.errors import Forbidden, Unauthorized
from webapi.extensions import tome
from webapi.ratelimit import check_rate


@dataclass(frozen=True)
class Principal:
    key_id: str
    owner: str
    role: str

    @property
    def is_admin(self) -> bool:
        return self.role == Role.ADMIN.value


def authenticate() -> Principal:
    header = request.headers.get("Authorization", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise Unauthorized("send your API key as 'Authorization: Bearer <key>'")
    row = (
        tome()
        .sessions.scalars(
            select(ApiKey).where(ApiKey.key_sha256 == hash_key(key.strip()), ApiKey.revoked_at.is_(None))
        )
        .first()
    )
    if row is None:
        raise Unauthorized("unknown or revoked API key")
    principal = Principal(str(row.id), row.owner, row.role)
    g.principal = principal
    check_rate(principal.key_id)
    tome().sessions.commit()  # hand the connection back before the view reads a (maybe slow) body
    return principal


def require_key() -> None:
    """``before_request`` hook of every blueprint that needs a key."""
    authenticate()


def current_principal() -> Principal:
    principal = g.get("principal")
    assert isinstance(principal, Principal), "authenticate() must run first"
    return principal


def require_admin() -> Principal:
    principal = current_principal()
    if not principal.is_admin:
        raise Forbidden("this endpoint needs an admin key")
    return principal
