"""Cutting a book's text into chapters where its table of contents says, and judging front and back matter
(pure).

A table-of-contents entry points at a file and maybe an anchor; its chapter runs from there to the next
entry's anchor, through as many spine files as lie between. Text before an entry's anchor, and spine
files no entry points into, continue the chapter before them, unless the file says it is another kind of
text (a copyright page no entry names, after the last chapter, is a piece of front matter of its own).
Text before the first entry is front matter unless it is marked as the body of the book.

What a chapter is, first rule that says: the epub:type at its anchor (or on the body of its file), a nav
landmark or guide reference for that place, ``linear="no"`` in the spine (front before the first body
chapter, back after), the entry's title ("Cover", "Contents", "Index"). A paragraph inside a chapter
that is marked as matter itself (a ``section epub:type="copyright-page"`` in a chapter file) is judged by
its own mark.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .epub_matter import Kind, kind_of, kind_of_title, label
from .epub_package import Landmark, SpineItem, TocEntry
from .epub_text import DocText, TextBlock


@dataclass
class Chapter:
    """A chapter in reading order: its title, what it is, and its blocks (before any matter is left
    out)."""

    title: str
    kind: Kind
    blocks: list[TextBlock] = field(default_factory=list)


@dataclass(frozen=True)
class _Start:
    doc: int
    block: int
    order: int  # the entry's place in the table of contents: ties keep that order
    entry: TocEntry
    semantic: str | None


@dataclass
class Book:
    """The spine's documents, their landmarks, and what the chapter cutter found wrong."""

    spine: Sequence[SpineItem]
    docs: Sequence[DocText]
    landmarks: Sequence[Landmark]
    warnings: list[str] = field(default_factory=list)


def cut_chapters(book: Book, entries: Sequence[TocEntry]) -> list[Chapter]:
    """The chapters of ``book`` as ``entries`` (resolved to spine files) cut them, in reading order."""
    starts = _starts(book, entries)
    by_doc: dict[int, list[_Start]] = {}
    for start in starts:
        by_doc.setdefault(start.doc, []).append(start)
    chapters: list[Chapter] = []
    seen_body = False
    for index, doc in enumerate(book.docs):
        cuts = by_doc.get(index, [])
        first = cuts[0].block if cuts else len(doc.blocks)
        if first > 0 or not cuts:
            _continue(book, index, doc.blocks[:first], chapters, seen_body)
        for number, start in enumerate(cuts):
            end = cuts[number + 1].block if number + 1 < len(cuts) else len(doc.blocks)
            kind = _entry_kind(book, start, seen_body)
            title = start.entry.title or doc.first_heading() or doc.title or f"Chapter {len(chapters) + 1}"
            chapters.append(Chapter(title, kind, list(doc.blocks[start.block : end])))
        seen_body = seen_body or any(chapter.kind == "body" for chapter in chapters)
    return chapters


def spine_entries(docs: Sequence[DocText]) -> list[TocEntry]:
    """Stand-in entries when a book has no usable table of contents: one per spine file with a heading,
    titled by it (a file without one continues the chapter before it, like a file no entry points at).
    A book without headings is one chapter per file with text, titled by its <title> or number."""
    entries = [TocEntry(heading, doc.path, "") for doc in docs if (heading := doc.first_heading())]
    if entries:
        return entries
    with_text = [doc for doc in docs if doc.blocks]
    return [TocEntry(doc.title or f"Section {n}", doc.path, "") for n, doc in enumerate(with_text, start=1)]


def _starts(book: Book, entries: Sequence[TocEntry]) -> list[_Start]:
    """Where each entry's chapter starts (file and block), sorted into reading order."""
    index = {doc.path: number for number, doc in enumerate(book.docs)}
    starts: list[_Start] = []
    for order, entry in enumerate(entries):
        number = index[entry.path]
        doc = book.docs[number]
        anchor = doc.anchors.get(entry.fragment) if entry.fragment else None
        if entry.fragment and anchor is None:
            book.warnings.append(
                f"the table of contents points at a missing anchor {entry.path}#{entry.fragment}: "
                f"chapter {entry.title!r} starts at the top of that file"
            )
        block, semantic = (anchor.block, anchor.semantic) if anchor else (0, _leading(doc, doc.blocks))
        starts.append(_Start(number, block, order, entry, semantic))
    return sorted(starts, key=lambda start: (start.doc, start.block, start.order))


def _entry_kind(book: Book, start: _Start, seen_body: bool) -> Kind:
    """What an entry's chapter is (see the module docstring)."""
    entry = start.entry
    kind = kind_of(start.semantic) or _landmark_kind(book.landmarks, entry.path, entry.fragment)
    if kind is None and start.block == 0 and entry.fragment:
        kind = _landmark_kind(book.landmarks, entry.path, "")
    if kind is None and not book.spine[start.doc].linear:
        kind = "back" if seen_body else "front"
    return kind or kind_of_title(entry.title) or "body"


def _landmark_kind(landmarks: Sequence[Landmark], path: str, fragment: str) -> Kind | None:
    for landmark in landmarks:
        if landmark.path == path and landmark.fragment == fragment and kind_of(landmark.type):
            return kind_of(landmark.type)
    return None


def _leading(doc: DocText, blocks: Sequence[TextBlock]) -> str | None:
    """The epub:type that rules the start of ``blocks`` of ``doc``: the first block's (its nearest typed
    ancestor: a ``section epub:type="dedication"`` in a ``frontmatter`` body is a dedication), else the
    body's."""
    return blocks[0].semantic if blocks else doc.semantic


def _doc_semantic(book: Book, index: int, blocks: Sequence[TextBlock]) -> str | None:
    """What a run of a spine file no entry starts says it is: its epub:type, else a landmark for the
    file."""
    doc = book.docs[index]
    semantic = _leading(doc, blocks)
    if kind_of(semantic):
        return semantic
    return next(
        (lm.type for lm in book.landmarks if lm.path == doc.path and not lm.fragment and kind_of(lm.type)),
        None,
    )


def _continue(
    book: Book, index: int, blocks: list[TextBlock], chapters: list[Chapter], seen_body: bool
) -> None:
    """Blocks no entry starts: they continue the last chapter if they are the same kind of text, else
    they are a piece of their own (front matter before any chapter). A file without text is a piece
    only if it is marked as matter (a cover page: the warnings then name it)."""
    semantic = _doc_semantic(book, index, blocks)
    kind = kind_of(semantic)
    if kind is None and not book.spine[index].linear:
        kind = "back" if seen_body else "front"
    if not blocks and kind not in ("front", "back"):
        return
    # A different kind of text, or a page that names itself matter (a title page after the cover), is
    # a piece of its own; a file that says nothing continues the chapter.
    same = kind == "body" or semantic is None
    if chapters and (kind is None or (kind == chapters[-1].kind and same)):
        chapters[-1].blocks.extend(blocks)
        return
    doc = book.docs[index]
    title = (label(semantic) if semantic and kind != "body" else None) or doc.first_heading() or doc.title
    kind = kind or "front"
    fallback = {"front": "Front matter", "back": "Back matter", "body": f"Chapter {len(chapters) + 1}"}
    chapters.append(Chapter(title or fallback[kind], kind, blocks))
