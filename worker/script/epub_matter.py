"""Which parts of an EPUB are front matter, back matter or the body of the book (pure).

The vocabulary is EPUB 3 structural semantics (``epub:type``, also ARIA ``doc-`` roles), the EPUB 2 guide
reference types, and, as a last resort, the titles books commonly give those pages. Only pages that are
not part of the text are matter: a cover, title, copyright or contents page, an index, a colophon, lists
of notes. A foreword, preface, dedication, epigraph or appendix is read like a chapter.
"""

from __future__ import annotations

from typing import Literal

Kind = Literal["front", "back", "body"]

# epub:type (and guide type) -> what it is. Generic wrappers ("frontmatter") come first in no particular
# order: the nearest typed ancestor of a paragraph decides, so a dedication inside a "frontmatter" body is
# read, while a bare "frontmatter" body is not.
_KINDS: dict[str, Kind] = {
    **dict.fromkeys(
        (
            "frontmatter",
            "cover",
            "titlepage",
            "title-page",
            "halftitlepage",
            "copyright-page",
            "imprint",
            "imprimatur",
            "seriespage",
            "toc",
            "landmarks",
            "page-list",
            "loi",
            "lot",
            "loa",
            "lov",
            "errata",
            "other-credits",
        ),
        "front",
    ),
    **dict.fromkeys(
        (
            "backmatter",
            "index",
            "colophon",
            "glossary",
            "bibliography",
            "endnotes",
            "rearnotes",
            "footnotes",
            "notes",
        ),
        "back",
    ),
    **dict.fromkeys(
        (
            "bodymatter",
            "text",
            "chapter",
            "part",
            "division",
            "volume",
            "subchapter",
            "prologue",
            "epilogue",
            "foreword",
            "preface",
            "introduction",
            "preamble",
            "dedication",
            "epigraph",
            "afterword",
            "conclusion",
            "appendix",
            "acknowledgments",
            "acknowledgements",
        ),
        "body",
    ),
}

# How a warning names what it left out, when no title is at hand.
_LABELS = {
    "frontmatter": "Front matter",
    "backmatter": "Back matter",
    "titlepage": "Title page",
    "title-page": "Title page",
    "halftitlepage": "Half title page",
    "copyright-page": "Copyright",
    "toc": "Contents",
    "page-list": "Page list",
    "loi": "List of illustrations",
    "lot": "List of tables",
}

# Titles that mark a table-of-contents entry as matter when nothing else does (compared case-folded).
_TITLES: dict[str, Kind] = {
    **dict.fromkeys(
        (
            "cover",
            "copyright",
            "copyright page",
            "contents",
            "table of contents",
            "title page",
            "titlepage",
            "half title",
            "half title page",
        ),
        "front",
    ),
    **dict.fromkeys(("index", "colophon", "notes", "endnotes", "footnotes"), "back"),
}

# Guide reference types (EPUB 2) under the epub:type name they correspond to.
_GUIDE_ALIASES = {"title-page": "titlepage", "notes": "endnotes", "acknowledgements": "acknowledgments"}


def semantic(types: frozenset[str]) -> str | None:
    """The one of ``types`` (epub:type tokens) that says what an element is, if any: a specific type
    beats a generic wrapper (``frontmatter``, ``bodymatter``, ``backmatter``)."""
    if not types:
        return None
    known = sorted(t for t in types if t in _KINDS)
    specific = [t for t in known if not t.endswith("matter")]
    chosen = specific or known
    return chosen[0] if chosen else None


def kind_of(semantic_type: str | None) -> Kind | None:
    return _KINDS.get(semantic_type) if semantic_type is not None else None


def guide_type(reference_type: str) -> str:
    """An EPUB 2 guide reference type as the epub:type it stands for."""
    lowered = reference_type.strip().lower()
    return _GUIDE_ALIASES.get(lowered, lowered)


def label(semantic_type: str) -> str:
    return _LABELS.get(semantic_type, semantic_type.replace("-", " ").capitalize())


def kind_of_title(title: str) -> Kind | None:
    """Matter judged by a table-of-contents title alone ("Cover", "Table of Contents", "Index")."""
    return _TITLES.get(" ".join(title.casefold().replace("-", " ").split()).rstrip(".:"))
