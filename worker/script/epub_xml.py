"""Hardened XML parsing for the files inside an EPUB, and small helpers for namespaced trees (pure).

The parser never touches the network, never loads a DTD, never expands an entity and refuses trees deeper
than libxml2's default limit (256) and text nodes larger than its default (10 MB): ``huge_tree`` stays
off. A document that declares entities in an internal DTD subset is refused outright (the billion-laughs
and external-entity attacks both need one), like :mod:`defusedxml` does; an undeclared named entity under
an external XHTML DTD (``&nbsp;``) stays a reference node, which :func:`entity_text` maps to its
character. Comments and processing instructions are dropped at parse time, their surrounding text merged.
"""

from __future__ import annotations

import html.entities
from collections.abc import Iterator

from lxml import etree

from .errors import ScriptError

XHTML = "http://www.w3.org/1999/xhtml"
OPS = "http://www.idpf.org/2007/ops"
EPUB_TYPE = f"{{{OPS}}}type"


def parse_xml(data: bytes, name: str, kind: str) -> etree._Element:
    """The root element of XML file ``name`` (described as ``kind`` in errors: "OPF", "XHTML", ...)."""
    if b"<!ENTITY" in data:  # before parsing: libxml2 would expand a billion laughs up to its own limit
        raise ScriptError(f"{kind} {name!r} declares entities in its DTD, which an EPUB may not (refused)")
    parser = etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=False,
        recover=False,
        remove_comments=True,
        remove_pis=True,
    )
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        raise ScriptError(f"malformed {kind} {name!r}: {exc}") from exc
    except (ValueError, LookupError) as exc:  # an unknown or inconsistent encoding declaration
        raise ScriptError(f"malformed {kind} {name!r}: {exc}") from exc
    dtd = root.getroottree().docinfo.internalDTD
    if dtd is not None and any(True for _ in _entity_declarations(dtd)):
        raise ScriptError(f"{kind} {name!r} declares entities in its DTD, which an EPUB may not (refused)")
    return root


def _entity_declarations(dtd: etree.DTD) -> Iterator[object]:
    """The entity declarations of a DTD (lxml-stubs lack ``DTD.iterentities``)."""
    entities: Iterator[object] = getattr(dtd, "iterentities")()  # noqa: B009
    return entities


def local_name(element: etree._Element) -> str:
    """The tag without its namespace ("" for anything that is not an element)."""
    tag: object = element.tag  # a function for comments and entities, whatever the stubs say
    if not isinstance(tag, str):
        return ""
    return tag.rpartition("}")[2]


def children(element: etree._Element, name: str) -> list[etree._Element]:
    """Child elements called ``name`` in any namespace (sloppy OPFs and NCXs omit theirs)."""
    return [child for child in element if local_name(child) == name]


def descendants(element: etree._Element, name: str) -> list[etree._Element]:
    """Descendant elements called ``name`` in any namespace, in document order."""
    return [node for node in element.iter() if local_name(node) == name]


def text_of(element: etree._Element) -> str:
    """All text in ``element`` (entities as their characters), whitespace collapsed."""
    return " ".join("".join(iter_text(element)).split())


def iter_text(element: etree._Element) -> Iterator[str]:
    """The text inside ``element`` in document order (not its tail), entities as their characters.
    Iterative: a deep tree cannot exhaust the stack."""
    yield element.text or ""
    stack: list[tuple[etree._Element, Iterator[etree._Element]]] = [(element, iter(element))]
    while stack:
        node, kids = stack[-1]
        child = next(kids, None)
        if child is None:
            stack.pop()
            if stack:
                yield node.tail or ""
        elif isinstance(child, etree._Entity):
            yield entity_text(child)
            yield child.tail or ""
        else:
            yield child.text or ""
            stack.append((child, iter(child)))


_NO_TYPES: frozenset[str] = frozenset()


def epub_types(element: etree._Element) -> frozenset[str]:
    """The ``epub:type`` tokens of ``element``, lower-cased, prefixes (``z3998:``) removed, with its ARIA
    ``doc-`` role (``role="doc-footnote"``) as one more token."""
    if element.get(EPUB_TYPE) is None and element.get("role") is None:
        return _NO_TYPES  # most elements: the fast path
    tokens = {token.rpartition(":")[2].lower() for token in (element.get(EPUB_TYPE) or "").split()}
    role = (element.get("role") or "").strip().lower()
    if role.startswith("doc-"):
        tokens.add(role.removeprefix("doc-"))
    return frozenset(tokens)


def entity_text(node: etree._Entity) -> str:
    """The character a named HTML entity stands for ("" for names HTML does not define)."""
    return html.entities.html5.get(f"{node.name};", "")
