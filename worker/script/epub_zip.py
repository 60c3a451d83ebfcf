"""The zip container of an EPUB, opened with limits (pure).

A zip file says how many entries it has and how large each unpacks in its central directory, before any
byte is inflated. :func:`open_archive` checks those numbers first (entry count, total and per-entry sizes,
compression ratios), so a zip bomb is refused without inflating anything; :meth:`Archive.read` enforces
the same limits again while inflating, because the declared sizes can lie.
"""

from __future__ import annotations

import io
import posixpath
import zipfile
from dataclasses import dataclass
from urllib.parse import unquote

from .errors import ScriptError

MIB = 2**20
# Entries smaller than this are not held to the compression ratio: a few kilobytes of repeated whitespace
# legitimately deflate more than 200:1, and cannot make a bomb (the size limits bound them anyway).
RATIO_EXEMPT_BYTES = 64 * 1024
_READ_CHUNK = 64 * 1024
# The signatures of the end-of-central-directory records (plain and Zip64) and of one directory entry.
_END = b"PK\x05\x06"
_END64_LOCATOR = b"PK\x06\x07"
_END64 = b"PK\x06\x06"
_ENTRY = b"PK\x01\x02"
_END_SIZE = 22
_MAX_COMMENT = 65_535


@dataclass(frozen=True)
class EpubLimits:
    """What an EPUB may unpack to; every limit is enforced (see the module docstring)."""

    max_entries: int = 10_000  # files in the zip
    max_unpacked_bytes: int = 200 * MIB  # total uncompressed, from the central directory and while reading
    max_entry_bytes: int = 50 * MIB
    max_ratio: int = 200  # compression ratio per entry (zip bomb)
    max_chapters: int = 2_000
    max_text_chars: int | None = None  # the text read from the spine, counted as it is read


def _megabytes(size: int) -> str:
    return f"{size / MIB:g} MB"


class Archive:
    """An EPUB's zip, its directory checked against :class:`EpubLimits`. Names are zip paths."""

    def __init__(self, data: bytes, limits: EpubLimits) -> None:
        _check_entry_count(data, limits.max_entries)
        try:
            self._zip = zipfile.ZipFile(io.BytesIO(data))
            infos = self._zip.infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError) as exc:
            raise ScriptError(f"not an EPUB: not a readable zip file ({exc})") from exc
        self._limits = limits
        self._unpacked = 0  # bytes inflated so far, all entries together
        self._infos = {info.filename: info for info in infos if not info.is_dir()}
        _check_directory(infos, limits)

    def __contains__(self, name: str) -> bool:
        return name in self._infos

    def read(self, name: str) -> bytes:
        """The bytes of entry ``name``, inflated within the limits whatever its directory entry says."""
        info = self._infos.get(name)
        if info is None:
            raise ScriptError(f"the EPUB has no file {name!r}")
        cap = min(info.file_size, self._limits.max_entry_bytes)
        parts: list[bytes] = []
        size = 0
        try:
            with self._zip.open(info) as stream:
                while chunk := stream.read(min(_READ_CHUNK, cap - size + 1)):
                    size += len(chunk)
                    self._unpacked += len(chunk)
                    self._check_reading(name, info, size)
                    parts.append(chunk)
        except ScriptError:
            raise
        except (zipfile.BadZipFile, ValueError, OSError, EOFError, RuntimeError, NotImplementedError) as exc:
            # RuntimeError: a password-protected entry; NotImplementedError: an unknown compression method.
            raise ScriptError(f"entry {name!r} of the EPUB cannot be unpacked ({exc})") from exc
        return b"".join(parts)

    def _check_reading(self, name: str, info: zipfile.ZipInfo, size: int) -> None:
        limits = self._limits
        if size > info.file_size:
            raise ScriptError(f"entry {name!r} unpacks to more than its declared {info.file_size} bytes")
        if size > limits.max_entry_bytes:
            raise ScriptError(f"entry {name!r} unpacks to more than {_megabytes(limits.max_entry_bytes)}")
        if self._unpacked > limits.max_unpacked_bytes:
            raise ScriptError(f"the EPUB unpacks to more than {_megabytes(limits.max_unpacked_bytes)}")


def _check_directory(infos: list[zipfile.ZipInfo], limits: EpubLimits) -> None:
    """Refuse, from the central directory alone, too many entries, too much data or a bomb-like ratio."""
    if len(infos) > limits.max_entries:
        raise ScriptError(f"the EPUB has more than {limits.max_entries} files")
    total = 0
    for info in infos:
        total += info.file_size
        if info.file_size > limits.max_entry_bytes:
            raise ScriptError(
                f"entry {info.filename!r} unpacks to more than {_megabytes(limits.max_entry_bytes)}"
            )
        ratio_applies = info.file_size > RATIO_EXEMPT_BYTES
        if ratio_applies and info.file_size > limits.max_ratio * max(info.compress_size, 1):
            raise ScriptError(f"entry {info.filename!r} is compressed more than {limits.max_ratio}:1")
    if total > limits.max_unpacked_bytes:
        raise ScriptError(f"the EPUB unpacks to more than {_megabytes(limits.max_unpacked_bytes)}")


def _check_entry_count(data: bytes, max_entries: int) -> None:
    """Refuse a zip whose central directory holds more than ``max_entries`` entries before
    :mod:`zipfile` builds an object for each (memory): count the entry signatures in the directory."""
    end = data.rfind(_END, max(0, len(data) - _END_SIZE - _MAX_COMMENT))
    if end < 0 or len(data) < end + _END_SIZE:
        raise ScriptError("not an EPUB: not a zip file")
    directory_size = int.from_bytes(data[end + 12 : end + 16], "little")
    record = end
    locator = end - 20
    if locator >= 0 and data[locator : locator + 4] == _END64_LOCATOR:
        # Zip64: the sizes are in the Zip64 record, which zipfile reads the directory relative to.
        record = int.from_bytes(data[locator + 8 : locator + 16], "little")
        if data[record : record + 4] != _END64:
            raise ScriptError("not an EPUB: a damaged Zip64 directory")
        directory_size = int.from_bytes(data[record + 40 : record + 48], "little")
    start = record - directory_size
    if start < 0:
        raise ScriptError("not an EPUB: the zip directory lies outside the file (truncated?)")
    if data.count(_ENTRY, start, record) > max_entries:
        raise ScriptError(f"the EPUB has more than {max_entries} files")


def resolve(referrer: str, href: str) -> tuple[str, str]:
    """The zip path and fragment (``""`` if none) that ``href`` (URL-encoded) in file ``referrer`` points
    at; a bare ``#fragment`` points into ``referrer`` itself. A path that climbs out of the zip resolves to
    ``""``, which no entry has."""
    path, _, fragment = href.strip().partition("#")
    path = unquote(path)
    if not path:
        return referrer, unquote(fragment)
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(referrer), path))
    if joined == ".." or joined.startswith("../") or joined.startswith("/"):
        return "", unquote(fragment)
    return joined, unquote(fragment)
