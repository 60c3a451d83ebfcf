"""Secrets Tome keeps for its owners (third-party API tokens), sealed at rest with the server's own
secret key (``TOME_SECRET_KEY``). Pure: no Flask, Celery or database.

A Fernet key (AES-128-CBC with HMAC-SHA256, authenticated) is derived from the secret key with HKDF-SHA256
under a fixed purpose label, so that the same secret key used elsewhere (signed file URLs) never serves as
this key itself. A sealed value opened with another secret key, or altered, raises :class:`SealError`.
"""

from __future__ import annotations

import base64

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

_PURPOSE = b"tome:integration-token:v1"


class SealError(ValueError):
    """No secret key, or a sealed value that this secret key did not seal (or that was altered)."""


def _fernet(secret_key: str) -> Fernet:
    if not secret_key:
        raise SealError("TOME_SECRET_KEY is not set")
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_PURPOSE).derive(secret_key.encode())
    return Fernet(base64.urlsafe_b64encode(key))


def seal(secret_key: str, value: str) -> str:
    """``value`` encrypted and authenticated under a key derived from ``secret_key`` (ASCII text)."""
    return _fernet(secret_key).encrypt(value.encode()).decode("ascii")


def unseal(secret_key: str, sealed: str) -> str:
    """The value :func:`seal` sealed; :class:`SealError` if ``secret_key`` is not the one it used."""
    try:
        return _fernet(secret_key).decrypt(sealed.encode("ascii")).decode()
    except (InvalidToken, UnicodeError, ValueError) as exc:
        raise SealError("the sealed value does not open with this TOME_SECRET_KEY") from exc
