"""Request and response models of /v1/integrations (services Tome delivers finished books into)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from webapi.schemas import Strict
from webapi.text import Line

TOKEN_PATTERN = r"^[\x21-\x7e]+$"  # visible ASCII: it travels in an Authorization header


class AudiobookshelfIn(Strict):
    url: Line = Field(
        min_length=1,
        max_length=2000,
        description="The server's address (http or https, e.g. https://abs.example.com); it must resolve "
        "to public addresses unless the operator allows private ones (TOME_AUDIOBOOKSHELF_ALLOW_PRIVATE)",
    )
    token: str = Field(
        min_length=1,
        max_length=4096,
        pattern=TOKEN_PATTERN,
        description="An API token of an Audiobookshelf user who may upload (and, for the scan, an admin); "
        "stored encrypted, never shown again",
    )


class AudiobookshelfOut(BaseModel):
    url: str | None = Field(description="The server's address; null when none is set")
    configured: bool = Field(description="Whether a server and token are set (the token is never shown)")
