"""Request and response models of /v1/lexicons (pronunciation lexicons)."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel, Field

from webapi.schemas import LANGUAGE_PATTERN, NAME_PATTERN, Strict
from webapi.text import Lines, OptionalLines
from worker.script.lexicon import MAX_ALIAS_CHARS, MAX_ENTRIES, MAX_GRAPHEME_CHARS, MAX_PHONEME_CHARS


class LexiconEntryIn(Strict):
    grapheme: Lines = Field(
        min_length=1,
        max_length=MAX_GRAPHEME_CHARS,
        description="The written word or words, matched whole (literal text, never a pattern)",
    )
    alias: OptionalLines = Field(None, max_length=MAX_ALIAS_CHARS, description="A respelling to say instead")
    phoneme: OptionalLines = Field(
        None, max_length=MAX_PHONEME_CHARS, description="IPA, for engines that take phonemes"
    )
    case_sensitive: bool = Field(False, description="Match only the grapheme's exact case")


class LexiconIn(Strict):
    """A lexicon as JSON; or send a W3C PLS document (``Content-Type: application/pls+xml``) with the
    name, language and case_sensitive choice in the query string."""

    name: str = Field(pattern=NAME_PATTERN, description="1-64 letters, digits, space, '_', '.', '-'")
    language: str | None = Field(None, pattern=LANGUAGE_PATTERN)
    entries: list[LexiconEntryIn] = Field(max_length=MAX_ENTRIES, description=f"At most {MAX_ENTRIES}")


class PlsQuery(Strict):
    """Query of a PLS upload: the name (required to create), and how to match the file's graphemes."""

    name: str | None = Field(None, pattern=NAME_PATTERN)
    language: str | None = Field(None, pattern=LANGUAGE_PATTERN, description="Default: the file's xml:lang")
    case_sensitive: bool = False


class LexiconEntryOut(BaseModel):
    grapheme: str
    alias: str | None
    phoneme: str | None
    case_sensitive: bool


class LexiconSummary(BaseModel):
    id: uuid.UUID
    name: str
    language: str | None
    entry_count: int
    created_at: datetime
    updated_at: datetime


class LexiconOut(LexiconSummary):
    entries: list[LexiconEntryOut]


class LexiconList(BaseModel):
    lexicons: list[LexiconSummary]
