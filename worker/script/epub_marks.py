"""Spoken sentences found and marked in an EPUB's own XHTML (pure): the text of a read-along book.

:func:`locate` finds each sentence the job read in the text the EPUB reader reads (the same walk:
:func:`worker.script.epub_text.read_slots`), in order, comparing letters and digits only (case folded):
the reader collapses white space and drops soft hyphens and footnote markers, and punctuation may differ,
but the words are the book's. A sentence that is not found within a window after the previous one (a note
read at a chapter's end, a sentence of generated text) stays unplaced. :func:`mark_document` then wraps
each placed sentence of one document in a ``span`` with its id: one span when the sentence lies in one
run of text or spans inline elements of one parent ("said <em>this</em> and"), else a span around its
first run only (its id is still there). Everything else of the document stays as it was.

Documents are parsed twice (locate, then mark), one at a time: memory holds one document's tree and the
letters of the book, never the whole book's trees.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from lxml import etree

from .epub_text import read_slots
from .epub_xml import XHTML, local_name, parse_xml

SEARCH_WINDOW = 200_000
"""How many letters after the previous sentence a sentence is looked for."""

_SVG = "http://www.w3.org/2000/svg"
_MATHML = "http://www.w3.org/1998/Math/MathML"


@dataclass(frozen=True)
class Located:
    """Where a sentence is: its document's zip path and its letters ``[start, end)`` in that document."""

    doc: str
    start: int
    end: int


Slots = list[tuple[etree._Element, bool]]


def letters(text: str) -> str:
    """What sentences are compared by: letters and digits, case folded."""
    return "".join(k for ch in text for k in ch.casefold() if k.isalnum())


def _slot_text(slot: tuple[etree._Element, bool]) -> str:
    element, tail = slot
    return (element.tail if tail else element.text) or ""


def _letter_map(slots: Slots) -> tuple[str, array[int], array[int]]:
    """The letters of a document's read text, and for each the slot and the offset it comes from."""
    out: list[str] = []
    where_slot: array[int] = array("I")
    where_offset: array[int] = array("I")
    for n, slot in enumerate(slots):
        for offset, ch in enumerate(_slot_text(slot)):
            for k in ch.casefold():
                if k.isalnum():
                    out.append(k)
                    where_slot.append(n)
                    where_offset.append(offset)
    return "".join(out), where_slot, where_offset


def parse_document(data: bytes, path: str) -> etree._Element:
    return parse_xml(data, path, "XHTML")


def locate(documents: Sequence[tuple[str, bytes]], sentences: Sequence[str]) -> list[Located | None]:
    """Each of ``sentences`` (in reading order) in ``documents`` (zip path and bytes, in spine order), or
    None where it is not found (see the module docstring). The search costs at most a few times the
    book's letters per sentence window, bounded overall."""
    keys: list[str] = []
    bounds: list[tuple[int, str]] = []  # (first letter, zip path) of each document in the joined text
    at = 0
    for path, data in documents:
        text, _, _ = _letter_map(read_slots(parse_document(data, path), path))
        bounds.append((at, path))
        keys.append(text)
        at += len(text) + 1
    joined = "\x00".join(keys)
    firsts = [first for first, _ in bounds]
    budget = 20 * len(joined) + 10_000_000  # letters scanned by misses, all sentences together
    cursor = 0
    found: list[Located | None] = []
    for sentence in sentences:
        key = letters(sentence)
        if not key or budget <= 0:
            found.append(None)
            continue
        limit = cursor + SEARCH_WINDOW + len(key)
        hit = joined.find(key, cursor, limit)
        if hit < 0:
            budget -= min(limit, len(joined)) - cursor
            found.append(None)
            continue
        doc_start, doc = bounds[bisect_right(firsts, hit) - 1]
        found.append(Located(doc, hit - doc_start, hit - doc_start + len(key)))
        cursor = hit + len(key)
    return found


def mark_document(
    root: etree._Element, path: str, marks: Sequence[tuple[Located, str]], stylesheet: str | None = None
) -> None:
    """Wrap each located sentence of document ``root`` in a span with its id (``marks``: in order, none
    overlapping); with ``stylesheet`` (a relative href), link it from the head."""
    slots = read_slots(root, path)
    _, where_slot, where_offset = _letter_map(slots)
    for located, ident in reversed(marks):  # later first: earlier positions stay valid
        first, last = located.start, located.end - 1
        if last >= len(where_slot) or first > last:
            continue
        a, oa = where_slot[first], where_offset[first]
        b, ob = where_slot[last], where_offset[last] + 1
        start_text = _slot_text(slots[a])
        while oa > 0 and not start_text[oa - 1].isspace() and not start_text[oa - 1].isalnum():
            oa -= 1  # its opening quote or bracket
        end_text = _slot_text(slots[b])
        while ob < len(end_text) and not end_text[ob].isspace() and not end_text[ob].isalnum():
            ob += 1  # the sentence's closing punctuation
        _wrap(slots, a, oa, b, ob, ident)  # a later sentence's span took its text: ob stays before
    if stylesheet is not None:
        _link_stylesheet(root, stylesheet)


def features(root: etree._Element) -> set[str]:
    """The manifest properties an EPUB 3 content document needs for what it holds."""
    found: set[str] = set()
    for node in root.iter():
        tag: object = node.tag  # a function for entities, whatever the stubs say
        if not isinstance(tag, str):
            continue
        if tag.startswith(f"{{{_SVG}}}"):
            found.add("svg")
        elif tag.startswith(f"{{{_MATHML}}}"):
            found.add("mathml")
        elif local_name(node) in ("script", "form"):
            found.add("scripted")
    return found


def _span(like: etree._Element, ident: str) -> etree._Element:
    tag = like.tag if isinstance(like.tag, str) else ""
    namespace = tag[1:].split("}")[0] if tag.startswith("{") else XHTML
    span = etree.Element(f"{{{namespace}}}span")
    span.set("id", ident)
    return span


def _set(slot: tuple[etree._Element, bool], text: str) -> None:
    element, tail = slot
    if tail:
        element.tail = text
    else:
        element.text = text


def _wrap(slots: Slots, a: int, oa: int, b: int, ob: int, ident: str) -> None:
    """Wrap slot ``a`` from ``oa`` to slot ``b`` at ``ob`` in a span with id ``ident`` (see the module
    docstring for when only the first run is wrapped)."""
    start_el, start_tail = slots[a]
    end_el, end_tail = slots[b]
    text_a = _slot_text(slots[a])
    owner = start_el.getparent() if start_tail else start_el
    end_owner = end_el.getparent() if end_tail else end_el
    span = _span(owner if owner is not None else start_el, ident)
    if a == b or owner is None or owner is not end_owner or not end_tail or end_el.getparent() is None:
        stop = ob if a == b else len(text_a)
        span.text = text_a[oa:stop]
        span.tail = text_a[stop:]
        _set(slots[a], text_a[:oa])
        if start_tail and owner is not None:
            owner.insert(owner.index(start_el) + 1, span)
        else:
            start_el.insert(0, span)
        return
    # the sentence ends in the tail of a child of the element it starts in (or beside): move the
    # children between into the span
    first = owner.index(start_el) + 1 if start_tail else 0
    last = owner.index(end_el)
    text_b = _slot_text(slots[b])
    span.text = text_a[oa:]
    _set(slots[a], text_a[:oa])
    end_el.tail = text_b[:ob]
    span.tail = text_b[ob:]
    for child in list(owner)[first : last + 1]:
        span.append(child)  # lxml moves the child with its tail
    owner.insert(first, span)


def _link_stylesheet(root: etree._Element, href: str) -> None:
    head = next((node for node in root if local_name(node) == "head"), None)
    if head is None:
        return
    namespace = (
        root.tag[1:].split("}")[0] if isinstance(root.tag, str) and root.tag.startswith("{") else XHTML
    )
    link = etree.SubElement(head, f"{{{namespace}}}link")
    link.set("rel", "stylesheet")
    link.set("type", "text/css")
    link.set("href", href)
