"""EPUB 2 and 3 books to the reader events of :mod:`worker.script.document` (pure).

Chapters come from the table of contents (the EPUB 3 navigation document, else the EPUB 2 NCX), not
from files: a chapter runs from its entry's anchor to the next entry's, across files if need be, and
nested entries are chapters of their own (:mod:`worker.script.epub_chapters`). Without a usable table of
contents each spine file with text is a chapter titled by its first heading. Front and back matter are
left out unless asked for (:mod:`worker.script.epub_matter`), and listed in the warnings. Footnote
markers are never read; with ``footnotes="chapter_end"`` each chapter ends with the notes it refers to.

The book is read with :mod:`zipfile` under :class:`EpubLimits` (checked from the central directory
before anything is inflated, and again while inflating); only the files the book needs are read, and
every XML file goes through one hardened lxml parser (:mod:`worker.script.epub_xml`), so a hostile book
can neither exhaust memory nor reach the network. Every failure is a :class:`ScriptError`. See
docs/scripts.md, "EPUB".
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .document import Block, BookInfo, ChapterStart
from .epub_chapters import Book, Chapter, cut_chapters, spine_entries
from .epub_matter import Kind, kind_of, label
from .epub_package import (
    Landmark,
    Package,
    SpineItem,
    TocEntry,
    check_drm,
    check_mimetype,
    opf_path,
    read_nav,
    read_ncx,
    read_package,
)
from .epub_text import DocText, NoteRef, TextBlock, note_texts, read_document, strip_label
from .epub_xml import parse_xml
from .epub_zip import Archive, EpubLimits
from .errors import ScriptError, ScriptTooLong

__all__ = ["EpubBook", "EpubLimits", "read_epub"]

logger = logging.getLogger(__name__)

Footnotes = Literal["skip", "chapter_end"]
# Spine media types read as XHTML; anything else in the spine (an SVG or image page) has no text.
_DOCUMENT_TYPES = frozenset({"application/xhtml+xml", "text/html", "application/xml", "text/xml", ""})
DEFAULT_LIMITS = EpubLimits()
_SINGULAR = {"images": "image", "figures": "figure", "tables": "table", "formulas": "formula"}


@dataclass(frozen=True)
class EpubBook:
    """A book read: its OPF metadata, its events in reading order, and what the reader left out."""

    info: BookInfo
    events: list[ChapterStart | Block]
    warnings: list[str]


@dataclass(frozen=True)
class _Options:
    front_matter: bool
    back_matter: bool
    footnotes: Footnotes

    def reads(self, kind: Kind) -> bool:
        return kind == "body" or (self.front_matter if kind == "front" else self.back_matter)


def read_epub(
    data: bytes,
    *,
    front_matter: bool = False,
    back_matter: bool = False,
    footnotes: Footnotes = "skip",
    limits: EpubLimits = DEFAULT_LIMITS,
) -> EpubBook:
    """Read an EPUB's chapters and metadata (see the module docstring). Raises :class:`ScriptError`, and
    only that, for anything that is not a readable, unencrypted EPUB within ``limits``."""
    options = _Options(front_matter, back_matter, footnotes)
    try:
        return _read(data, options, limits)
    except ScriptError:
        raise
    except Exception as exc:  # the contract: bad input never escapes as anything but ScriptError
        logger.exception("unexpected error reading an EPUB")
        raise ScriptError(f"the EPUB cannot be read ({type(exc).__name__}: {exc})") from exc


def _read(data: bytes, options: _Options, limits: EpubLimits) -> EpubBook:
    archive = Archive(data, limits)
    check_mimetype(archive)
    opf = opf_path(archive)
    check_drm(archive, {opf})
    package = read_package(archive, opf)
    spine = _checked_spine(archive, package)
    check_drm(archive, {opf, *(item.path for item in spine), package.nav or "", package.ncx or ""})
    entries, landmarks = _table_of_contents(archive, package)
    warnings: list[str] = []
    entries = _usable_entries(archive, entries, {item.path for item in spine}, warnings)
    if len(entries) > limits.max_chapters:
        raise ScriptError(f"the table of contents has more than {limits.max_chapters} entries")
    docs = _read_docs(archive, spine, entries, limits.max_text_chars)
    if not entries:
        entries = spine_entries(docs)
        if not entries:
            raise ScriptError("the EPUB has no table of contents and no readable spine")
        if len(entries) > limits.max_chapters:
            raise ScriptError(f"the EPUB has more than {limits.max_chapters} chapters")
        warnings.append("the EPUB has no usable table of contents: its chapters follow its files")
    book = Book(spine, docs, landmarks)
    chapters = cut_chapters(book, entries)
    events = _events(archive, chapters, options, warnings)
    warnings.extend(book.warnings)
    warnings.extend(_skipped(docs))
    return EpubBook(package.info, events, warnings)


def _checked_spine(archive: Archive, package: Package) -> list[SpineItem]:
    for item in package.spine:
        if item.path not in archive:
            raise ScriptError(f"the spine lists {item.path!r}, which is not in the EPUB")
    return list(package.spine)


def _table_of_contents(archive: Archive, package: Package) -> tuple[list[TocEntry], list[Landmark]]:
    """The navigation document's entries and landmarks, else the NCX's entries; with the guide."""
    entries: list[TocEntry] = []
    landmarks: list[Landmark] = []
    if package.nav is not None:
        entries, landmarks = read_nav(archive, package.nav)
    if not any(entry.path for entry in entries) and package.ncx is not None:
        entries = read_ncx(archive, package.ncx)
    return entries, landmarks + package.guide


def _usable_entries(
    archive: Archive, entries: list[TocEntry], spine: set[str], warnings: list[str]
) -> list[TocEntry]:
    """Entries that point into the spine. An unlinked heading takes the place of the entry after it
    (its first sub-entry); a link to a file the EPUB lacks is an error; one outside the spine is left out."""
    usable: list[TocEntry] = []
    pending: list[str] = []  # titles of unlinked headings waiting for a place
    for entry in entries:
        if not entry.path:
            pending.append(entry.title)
            continue
        if entry.path not in archive:
            raise ScriptError(f"the table of contents points at {entry.path!r}, which is not in the EPUB")
        if entry.path not in spine:
            warnings.append(f"the table of contents entry {entry.title!r} points outside the spine: left out")
            continue
        usable.extend(TocEntry(title, entry.path, entry.fragment) for title in pending)
        pending = []
        usable.append(entry)
    return usable


def _read_docs(
    archive: Archive, spine: Sequence[SpineItem], entries: Sequence[TocEntry], max_chars: int | None
) -> list[DocText]:
    """Every spine file's text, noting where the entries' anchors fall; :class:`ScriptTooLong` as soon
    as the text read passes ``max_chars`` (the limit a text script has), before anything is planned."""
    wanted: dict[str, set[str]] = {}
    for entry in entries:
        if entry.fragment:
            wanted.setdefault(entry.path, set()).add(entry.fragment)
    docs: list[DocText] = []
    total = 0
    for item in spine:
        if item.media_type not in _DOCUMENT_TYPES:
            doc = DocText(item.path)
            if item.media_type.startswith("image/"):
                doc.skipped["images"] += 1
        else:
            root = parse_xml(archive.read(item.path), item.path, "XHTML")
            doc = read_document(root, item.path, wanted.get(item.path, ()))
            total += sum(len(block.text) for block in doc.blocks)
            if max_chars is not None and total > max_chars:
                raise ScriptTooLong(f"the EPUB has more than {max_chars} characters of text (the limit)")
        docs.append(doc)
    return docs


def _events(
    archive: Archive, chapters: Sequence[Chapter], options: _Options, warnings: list[str]
) -> list[ChapterStart | Block]:
    """The events of the chapters read, footnotes per ``options``; what was left out goes in warnings."""
    left_out: dict[Kind, list[str]] = {"front": [], "back": []}
    kept: list[tuple[Chapter, list[TextBlock]]] = []
    for chapter in chapters:
        blocks = _kept_blocks(chapter, options, left_out)
        if blocks is not None:
            kept.append((chapter, blocks))
    refs = [_chapter_refs(blocks) for _, blocks in kept]
    notes = _notes(archive, refs) if options.footnotes == "chapter_end" else {}
    events: list[ChapterStart | Block] = []
    for (chapter, blocks), chapter_refs in zip(kept, refs, strict=True):
        events.append(ChapterStart(chapter.title))
        events.extend(Block(block.heading, block.text) for block in blocks)
        events.extend(_note_blocks(chapter_refs, notes))
    for kind in ("front", "back"):
        if left_out[kind]:
            warnings.append(f"left out {kind} matter: {', '.join(dict.fromkeys(left_out[kind]))}")
    total = sum(len(chapter_refs) for chapter_refs in refs)
    if total and options.footnotes == "skip":
        warnings.append(f"left out {total} footnote{'s' if total != 1 else ''}")
    return events


def _kept_blocks(
    chapter: Chapter, options: _Options, left_out: dict[Kind, list[str]]
) -> list[TextBlock] | None:
    """The blocks of ``chapter`` that are read, None if the whole chapter is left out (noted in
    ``left_out``). A chapter with nothing but its title is kept (a part title, say)."""
    if not options.reads(chapter.kind):
        left_out[chapter.kind].append(chapter.title)
        return None
    kept: list[TextBlock] = []
    dropped: list[tuple[Kind, str]] = []
    for block in chapter.blocks:
        kind = kind_of(block.semantic) or "body"
        if options.reads(kind):
            kept.append(block)
        elif block.semantic is not None:
            dropped.append((kind, label(block.semantic)))
    if chapter.blocks and not kept:
        left_out[dropped[0][0]].append(chapter.title)
        return None
    for kind, name in dropped:
        left_out[kind].append(name)
    return kept


def _chapter_refs(blocks: Sequence[TextBlock]) -> list[NoteRef]:
    """The notes ``blocks`` refer to, in order of first reference, each once."""
    seen: dict[tuple[str, str], NoteRef] = {}
    for block in blocks:
        for ref in block.notes:
            seen.setdefault((ref.path, ref.fragment), ref)
    return list(seen.values())


def _notes(archive: Archive, refs: Sequence[Sequence[NoteRef]]) -> dict[tuple[str, str], str]:
    """The text of every note referred to, each note file parsed once."""
    wanted: dict[str, set[str]] = {}
    for chapter_refs in refs:
        for ref in chapter_refs:
            wanted.setdefault(ref.path, set()).add(ref.fragment)
    texts: dict[tuple[str, str], str] = {}
    for path, ids in wanted.items():
        if path in archive:
            root = parse_xml(archive.read(path), path, "XHTML")
            texts.update(((path, i), text) for i, text in note_texts(root, path, ids).items())
    return texts


def _note_blocks(refs: Sequence[NoteRef], notes: dict[tuple[str, str], str]) -> list[Block]:
    blocks: list[Block] = []
    for number, ref in enumerate(refs, start=1):
        note_label = ref.label or str(number)
        text = strip_label(notes.get((ref.path, ref.fragment), ""), note_label)
        if text:
            blocks.append(Block(False, f"Note {note_label}. {text}"))
    return blocks


def _skipped(docs: Sequence[DocText]) -> list[str]:
    counts: Counter[str] = Counter()
    for doc in docs:
        counts.update(doc.skipped)
    return [
        f"skipped {count} {_SINGULAR.get(what, what) if count == 1 else what}"
        for what, count in sorted(counts.items())
    ]
