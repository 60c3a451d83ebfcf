"""A finished book in the layout audiobook libraries read (Audiobookshelf's): ``Author/Series/Title/``
holding the book, ``cover.jpg`` (a PNG cover converted), ``desc.txt`` (the description) and
``reader.txt`` (the narrator). Pure: no Flask, Celery or database.

The same names make the ZIP in a job's files (for those who copy by hand) and the fields and files of an
upload into Audiobookshelf (worker.audiobookshelf), so both end up in the same folders. A book in a series
with a position gets a title folder ``Vol N - Title``, the form Audiobookshelf's scanner reads the position
from. Every name is a single path component: separators, control characters and the characters Windows
refuses become ``_``, leading and trailing dots and spaces go, ``.`` and ``..`` are never names.
"""

from __future__ import annotations

import os
import unicodedata
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.audio.cover import Cover, as_jpeg
from worker.storage.atomic import atomic_file

# Metadata keys that place the book in a library but are not tags written into its file.
LIBRARY_KEYS = frozenset({"series", "series_index"})
MAX_NAME_BYTES = 200  # of one path component, in UTF-8 (file systems allow 255)
ZIP_NAME = "library.zip"
_REFUSED = set('/\\:*?"<>|')


def tag_values(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A job's stored metadata without the library-only keys: what ``BookTags`` takes."""
    return {k: v for k, v in metadata.items() if k not in LIBRARY_KEYS}


def safe_name(text: str | None, fallback: str) -> str:
    """``text`` as one path component (see the module docstring); ``fallback`` when nothing is left."""
    cleaned = "".join(
        "_" if ch in _REFUSED or unicodedata.category(ch).startswith("C") else ch
        for ch in unicodedata.normalize("NFC", text or "")
    )
    cleaned = " ".join(cleaned.split()).strip(" .")
    while len(cleaned.encode()) > MAX_NAME_BYTES:
        cleaned = cleaned[:-1].rstrip(" .")
    return cleaned or fallback


def _index_text(index: float) -> str:
    return str(int(index)) if float(index).is_integer() else f"{index:g}"


@dataclass(frozen=True)
class LibraryBook:
    """What places a book in a library: its title, author, series and position, and the texts beside it."""

    title: str
    author: str | None = None
    series: str | None = None
    series_index: float | None = None
    narrator: str | None = None
    description: str | None = None

    @classmethod
    def of(cls, title: str, metadata: Mapping[str, Any]) -> LibraryBook:
        """From a job's title and stored metadata (tags and library keys)."""
        index = metadata.get("series_index")
        return cls(
            title=title,
            author=metadata.get("author") or None,
            series=metadata.get("series") or None,
            series_index=None if index is None else float(index),
            narrator=metadata.get("narrator") or None,
            description=metadata.get("description") or None,
        )

    @property
    def author_folder(self) -> str | None:
        return safe_name(self.author, "") or None

    @property
    def series_folder(self) -> str | None:
        """Only under an author, as Audiobookshelf's upload places it."""
        return safe_name(self.series, "") or None if self.author_folder else None

    @property
    def title_folder(self) -> str:
        title = safe_name(self.title, "Untitled")
        if self.series_folder and self.series_index is not None:
            return safe_name(f"Vol {_index_text(self.series_index)} - {title}", title)
        return title

    @property
    def folders(self) -> list[str]:
        """``[Author, Series, Title]``, without the parts the book has none of."""
        return [p for p in (self.author_folder, self.series_folder, self.title_folder) if p]

    def book_name(self, extension: str) -> str:
        """The book's file name: its title and ``extension`` (``.m4b``)."""
        stem = safe_name(self.title, "book")
        while len((stem + extension).encode()) > MAX_NAME_BYTES:
            stem = stem[:-1]
        return stem + extension

    def texts(self) -> dict[str, bytes]:
        """``desc.txt`` and ``reader.txt``, for what the book has (UTF-8, newline-terminated)."""
        found: dict[str, bytes] = {}
        if self.description:
            found["desc.txt"] = (self.description.strip() + "\n").encode()
        if self.narrator:
            found["reader.txt"] = (self.narrator.strip() + "\n").encode()
        return found


COVER_NAME = "cover.jpg"


def write_zip(book: LibraryBook, book_path: Path, extension: str, cover: Cover | None, out: Path) -> int:
    """The library folder of ``book`` as a ZIP at ``out`` (written beside it, then renamed): the audio and
    cover stored as they are (they do not compress), the texts deflated. Returns its size in bytes."""
    folder = "/".join(book.folders)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(out) as tmp, zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        archive.write(book_path, arcname=f"{folder}/{book.book_name(extension)}")
        if cover is not None:
            archive.writestr(f"{folder}/{COVER_NAME}", as_jpeg(cover).data)
        for name, data in book.texts().items():
            archive.writestr(f"{folder}/{name}", data, compress_type=zipfile.ZIP_DEFLATED)
    return os.path.getsize(out)
