"""What the caller says about a book (title, author, narrator...), checked and cleaned (pure).

Values are user input. Here they are only bounded and cleaned: NUL characters (which no container can
hold and which end a C string early) are removed and lone UTF-16 surrogates (which cannot be encoded as
UTF-8) become U+FFFD. Everything else, newlines, ``=``, ``;``, ``#``, backslashes, ``[CHAPTER]`` or
``-i /etc/passwd``, is just text: :mod:`worker.audio.ffmetadata` escapes it for ffmpeg.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

MAX_TAG_CHARS = 1_000
"""Longest title, author, narrator, publisher, genre or language accepted, in characters."""

MAX_DESCRIPTION_CHARS = 4_000
"""Longest description accepted (a publisher's summary runs to a few paragraphs)."""

MAX_CHAPTER_TITLE_CHARS = 1_000
"""Chapter titles come from the script's headings: longer ones are cut here (with an ellipsis)."""

_LANGUAGE = re.compile(r"[A-Za-z]{2,3}(?:-[A-Za-z0-9]{1,8}){0,4}")


def clean_text(value: str) -> str:
    """``value`` without NUL characters, lone surrogates replaced by U+FFFD."""
    text = value.replace("\0", "")
    if any("\ud800" <= ch <= "\udfff" for ch in text):
        text = "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in text)
    return text


def clean_title(value: str, limit: int = MAX_CHAPTER_TITLE_CHARS) -> str:
    """A chapter title cleaned like any tag and cut to ``limit`` characters (the last one an ellipsis)."""
    text = clean_text(value)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


@dataclass(frozen=True)
class BookTags:
    """Tags written into the output file; every field is optional.

    Construction checks and cleans the values (see the module docstring): a value longer than its limit
    (:data:`MAX_TAG_CHARS`, :data:`MAX_DESCRIPTION_CHARS` for ``description``), a ``year`` outside
    1-9999, a ``language`` that is not a language tag (``en``, ``eng``, ``en-GB``), or a ``track``
    outside 1..``track_total`` raises ``ValueError`` naming the field, so the API can check a request
    by building one. An empty string is the same as ``None``. ``track`` and ``album`` are for
    per-chapter files (the chapter's title is the file's title, the book's its album); leave them unset
    for a whole book.
    """

    title: str | None = None
    author: str | None = None
    narrator: str | None = None
    publisher: str | None = None
    year: int | None = None
    language: str | None = None
    description: str | None = None
    genre: str | None = "Audiobook"
    track: int | None = None
    track_total: int | None = None
    album: str | None = None  # the book's title on a chapter file (None: the title)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("year", "track", "track_total"):
                _check_int(f.name, value)
                continue
            if value is None:
                continue
            if not isinstance(value, str):
                raise ValueError(f"tag {f.name!r} must be a string, got {type(value).__name__}")
            text = clean_text(value)
            limit = MAX_DESCRIPTION_CHARS if f.name == "description" else MAX_TAG_CHARS
            if len(text) > limit:
                raise ValueError(
                    f"tag {f.name!r} is {len(text)} characters long; at most {limit} are allowed"
                )
            object.__setattr__(self, f.name, text or None)
        if self.year is not None and not 1 <= self.year <= 9999:
            raise ValueError(f"tag 'year' must be between 1 and 9999, got {self.year}")
        if self.language is not None and not _LANGUAGE.fullmatch(self.language):
            raise ValueError(
                f"tag 'language' must be a language code such as 'en' or 'eng', got {self.language!r}"
            )
        if self.track_total is not None and self.track_total < 1:
            raise ValueError(f"tag 'track_total' must be at least 1, got {self.track_total}")
        if self.track is not None and not 1 <= self.track <= (self.track_total or self.track):
            raise ValueError(f"tag 'track' must be between 1 and track_total, got {self.track}")
        if self.track is None and self.track_total is not None:
            raise ValueError("tag 'track_total' needs a 'track'")

    @property
    def track_text(self) -> str | None:
        """``"3/12"``, ``"3"`` or ``None``."""
        if self.track is None:
            return None
        return f"{self.track}/{self.track_total}" if self.track_total else str(self.track)


def _check_int(name: str, value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"tag {name!r} must be an integer, got {value!r}")
