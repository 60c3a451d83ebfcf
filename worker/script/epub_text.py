"""The readable text of one XHTML content document, as blocks in document order (pure).

A block is a heading (h1-h6) or a paragraph-like run of text: every block-level element (p, li, dt, dd,
blockquote, div, section, ...) starts and ends one, so the text of a div that is not in a p is a block
too, and every word of the document lands in exactly one block, in order. Inline ``br`` is a space.

Not read inline: images, figures, tables, svg, math, scripts, styles, media, ruby annotations, asides,
page-break markers and footnotes (``epub:type`` footnote/endnote/rearnote/note, ``doc-`` roles).
Footnote reference markers are dropped from the text; each block lists the notes it refers to, so
:func:`note_texts` can fetch their text for reading at the chapter's end.

The walk is iterative (libxml2 already refuses trees deeper than 256), and records where each of a set of
wanted ids (table-of-contents anchors) falls: the index of the block that starts there.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from lxml import etree

from .epub_matter import semantic
from .epub_xml import entity_text, epub_types, local_name, text_of
from .epub_zip import resolve

_BLOCKS = frozenset(
    {
        *("address", "article", "blockquote", "body", "caption", "center", "dd", "details", "dialog"),
        *("div", "dl", "dt", "fieldset", "figcaption", "footer", "form", "h1", "h2", "h3", "h4", "h5"),
        *("h6", "header", "hgroup", "hr", "legend", "li", "main", "nav", "ol", "p", "pre", "section"),
        *("summary", "ul"),
    }
)
_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
# Elements never read inline, and how a warning counts them (None: not worth a warning).
_SKIPPED: dict[str, str | None] = {
    "img": "images",
    "svg": "images",
    "image": "images",
    "figure": "figures",
    "table": "tables",
    "math": "formulas",
    "audio": "media",
    "video": "media",
    "object": "media",
    "embed": "media",
    "iframe": "media",
    "canvas": "images",
    "aside": None,
    "script": None,
    "style": None,
    "noscript": None,
    "template": None,
    "head": None,
    "rt": None,
    "rp": None,
    "input": None,
    "select": None,
    "textarea": None,
    "button": None,
}
NOTE_TYPES = frozenset({"footnote", "endnote", "rearnote", "note", "footnotes", "endnotes", "rearnotes"})
_UNREAD_TYPES = NOTE_TYPES | {"pagebreak"}
# Link texts that look like note markers ("1", "[12]", "(3a)", "*", "†"), and ids that look like notes'.
_MARKER = re.compile(r"[\[(]?(?:\d{1,4}[a-z]?|[ivxlc]{1,6}|[a-z]|[*†‡§¶#]{1,3})[\])]?\.?", re.IGNORECASE)
_NOTE_ID = re.compile(r"(?:fn|ftn|note|footnote|endnote|en|n)[-_:.]?\d", re.IGNORECASE)
_MARKER_CLASSES = frozenset({"noteref", "footnote-ref", "footnoteref", "fnref", "footnote-link", "note-ref"})
_SOFT_HYPHEN = "\u00ad"


@dataclass(frozen=True)
class NoteRef:
    """A footnote marker: the note it points at (zip path and id) and what it showed ("1")."""

    path: str
    fragment: str
    label: str


@dataclass
class TextBlock:
    """A heading or paragraph; ``semantic``: the epub:type of its nearest typed ancestor ("chapter",
    "copyright-page"; see :mod:`worker.script.epub_matter`); ``notes``: the notes it refers to."""

    heading: bool
    text: str
    semantic: str | None = None
    notes: tuple[NoteRef, ...] = ()


@dataclass
class Anchor:
    """Where a wanted id falls: the index of the block that starts there, and the epub:type of the
    element or its nearest typed ancestor."""

    block: int
    semantic: str | None


@dataclass
class DocText:
    path: str
    blocks: list[TextBlock] = field(default_factory=list)
    anchors: dict[str, Anchor] = field(default_factory=dict)
    semantic: str | None = None  # the body's own epub:type
    title: str | None = None  # <title> in <head>
    skipped: Counter[str] = field(default_factory=Counter)  # "images": 3

    def first_heading(self) -> str | None:
        return next((block.text for block in self.blocks if block.heading), None)


def read_document(root: etree._Element, path: str, wanted: Iterable[str] = ()) -> DocText:
    """The blocks of the XHTML document ``root`` (zip path ``path``) and where the ``wanted`` ids are."""
    doc = DocText(path)
    heads = [node for node in root if local_name(node) == "head"]
    titles = [node for node in heads[0] if local_name(node) == "title"] if heads else []
    doc.title = text_of(titles[0]) or None if titles else None
    body = next((node for node in root if local_name(node) == "body"), None)
    if body is None:
        return doc
    doc.semantic = semantic(epub_types(body))
    note_ids = {node.get("id") for node in body.iter() if _is_note(node) and node.get("id")}
    walker = _Walker(path, set(wanted), {i for i in note_ids if i}, doc)
    walker.walk(body)
    return doc


def read_slots(root: etree._Element, path: str) -> list[tuple[etree._Element, bool]]:
    """Where the text that :func:`read_document` reads lies in ``root``: (element, is its tail) for every
    piece, in document order (entities aside), so that a reader can mark read sentences in place."""
    body = next((node for node in root if local_name(node) == "body"), None)
    if body is None:
        return []
    note_ids = {node.get("id") for node in body.iter() if _is_note(node) and node.get("id")}
    walker = _Slots(path, set(), {i for i in note_ids if i}, DocText(path))
    walker.walk(body)
    return walker.slots


def note_texts(root: etree._Element, path: str, ids: set[str]) -> dict[str, str]:
    """The text of each note among ``ids`` in document ``root``: the note element the id is on, or the
    paragraph around it; back links and the leading marker left out."""
    found: dict[str, str] = {}
    for node in root.iter():
        node_id = node.get("id") if isinstance(node.tag, str) else None
        if node_id not in ids or node_id in found:
            continue
        container = _note_container(node)
        walker = _Walker(path, set(), set(), DocText(path), in_note=True)
        walker.walk(container)
        found[node_id] = " ".join(block.text for block in walker.doc.blocks)
    return found


def strip_label(text: str, label: str) -> str:
    """``text`` without a leading marker that repeats the note's ``label`` ("1. The note" -> "The note")."""
    if label and text.startswith(label):
        rest = text[len(label) :]
        if not rest[:1].isalnum():
            text = rest
    return text.lstrip(" .:)]-\u2013\u2014")


def _note_container(node: etree._Element) -> etree._Element:
    """The element holding a note's text: the note element itself, or the nearest block around ``node``."""
    current: etree._Element | None = node
    while current is not None:
        if _is_note(current) or local_name(current) in _BLOCKS:
            return current
        current = current.getparent()
    return node


def _is_note(node: etree._Element) -> bool:
    return local_name(node) == "aside" or bool(epub_types(node) & NOTE_TYPES)


class _Walker:
    """Collects the blocks of an element's subtree into ``doc`` (see the module docstring)."""

    def __init__(
        self, path: str, wanted: set[str], note_ids: set[str], doc: DocText, *, in_note: bool = False
    ) -> None:
        self.path = path
        self.wanted = wanted
        self.note_ids = note_ids
        self.doc = doc
        self.in_note = in_note  # reading a note's text: its back links are markers too
        self.buffer: list[str] = []
        self.notes: list[NoteRef] = []
        # (element name, in a heading, epub:type) of the open elements
        self.context: list[tuple[str, bool, str | None]] = [("", False, None)]
        self.started: tuple[bool, str | None] | None = None  # (heading, epub:type) of the first text

    def walk(self, top: etree._Element) -> None:
        self._start(top, local_name(top), epub_types(top))
        stack: list[tuple[etree._Element, Iterator[etree._Element]]] = [(top, iter(top))]
        while stack:
            element, kids = stack[-1]
            child = next(kids, None)
            if child is None:
                stack.pop()
                self._end()
                if stack:
                    self._tail(element)
            elif isinstance(child, etree._Entity):
                self._text(entity_text(child))
                self._tail(child)
            elif not (name := local_name(child)):  # not an element (comments are gone already)
                self._tail(child)
            else:
                types = epub_types(child)
                if self._skipped(child, name, types):
                    self._tail(child)
                else:
                    self._start(child, name, types)
                    stack.append((child, iter(child)))
        self._flush()
        if self.notes and self.doc.blocks:  # a marker after the last words: it belongs to them
            last = self.doc.blocks[-1]
            last.notes = (*last.notes, *self.notes)

    def _start(self, element: etree._Element, name: str, types: frozenset[str]) -> None:
        if name in _BLOCKS:
            self._flush()
        _, heading, kind = self.context[-1]
        self.context.append((name, heading or name in _HEADINGS, semantic(types) or kind))
        self._anchor(element)
        if name == "br":
            self._text(" ")
        self._head(element)

    def _end(self) -> None:
        if self.context.pop()[0] in _BLOCKS:
            self._flush()

    def _anchor(self, element: etree._Element) -> None:
        element_id = element.get("id")
        if element_id in self.wanted and element_id not in self.doc.anchors:
            self.doc.anchors[element_id] = Anchor(len(self.doc.blocks), self.context[-1][2])

    def _head(self, element: etree._Element) -> None:
        self._text(element.text)

    def _tail(self, element: etree._Element) -> None:
        self._text(element.tail)

    def _text(self, text: str | None) -> None:
        if not text:
            return
        if self.started is None and not text.isspace():
            self.started = self.context[-1][1:]
        self.buffer.append(text)

    def _flush(self) -> None:
        text = " ".join("".join(self.buffer).replace(_SOFT_HYPHEN, "").split())
        self.buffer = []
        if text and self.started is not None:
            heading, kind = self.started
            self.doc.blocks.append(TextBlock(heading, text, kind, tuple(self.notes)))
            self.notes = []
        self.started = None

    def _skipped(self, element: etree._Element, name: str, types: frozenset[str]) -> bool:
        """Whether ``element`` is left out of the text (counting it, or noting the note it refers to)."""
        if name in _SKIPPED or types & _UNREAD_TYPES or element.get("hidden") is not None:
            if _SKIPPED.get(name):
                self.doc.skipped[_SKIPPED[name] or ""] += 1
            self._anchors_within(element)
            return True
        ref = self._marker(element, name, types)
        if ref is None:
            return False
        if not self.in_note:
            self.notes.append(ref)
        return True

    def _anchors_within(self, element: etree._Element) -> None:
        """Wanted ids inside a skipped element start at the next block (nothing in between is read)."""
        for node in element.iter():
            if isinstance(node.tag, str):
                self._anchor(node)

    def _marker(self, element: etree._Element, name: str, types: frozenset[str]) -> NoteRef | None:
        """The note a footnote marker refers to, if ``element`` is one: a link typed noteref, or a short
        link to a fragment ("1", "[2]", "*") that is superscript, classed as a note reference, or points
        at a note (of this document, or by its id's look). A ``sup`` around such a link is the marker."""
        if name == "sup":
            links = [node for node in element.iter() if local_name(node) == "a" and node.get("href")]
            text = text_of(element)
            if len(links) != 1 or not _MARKER.fullmatch(text):
                return None
            return self._ref(links[0], text, superscript=True)
        if name != "a" or not element.get("href"):
            return None
        text = text_of(element)
        if "noteref" in types or (self.in_note and "backlink" in types):
            return self._ref(element, text, superscript=True)
        if not _MARKER.fullmatch(text) and not (self.in_note and not any(c.isalnum() for c in text)):
            return None
        parent = element.getparent()
        superscript = any(local_name(n) == "sup" for n in element.iter()) or (
            parent is not None and local_name(parent) == "sup"
        )
        return self._ref(element, text, superscript=superscript or self.in_note)

    def _ref(self, link: etree._Element, text: str, *, superscript: bool) -> NoteRef | None:
        path, fragment = resolve(self.path, link.get("href") or "")
        if not fragment:
            return None
        classes = frozenset((link.get("class") or "").lower().split())
        looks_like_note = (
            (path == self.path and fragment in self.note_ids)
            or bool(_NOTE_ID.match(fragment))
            or bool(classes & _MARKER_CLASSES)
        )
        if not (superscript or looks_like_note):
            return None
        return NoteRef(path, fragment, text.strip("[]().") or text)


class _Slots(_Walker):
    """A walker that also records which element's text or tail each piece of read text is."""

    def __init__(self, path: str, wanted: set[str], note_ids: set[str], doc: DocText) -> None:
        super().__init__(path, wanted, note_ids, doc)
        self.slots: list[tuple[etree._Element, bool]] = []

    def _head(self, element: etree._Element) -> None:
        if element.text:
            self.slots.append((element, False))
        super()._head(element)

    def _tail(self, element: etree._Element) -> None:
        if element.tail:
            self.slots.append((element, True))
        super()._tail(element)
