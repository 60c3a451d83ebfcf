"""W3C Pronunciation Lexicon Specification (PLS 1.0) import and export (pure).

PLS is the XML format Azure, Amazon Polly and ElevenLabs take, so users can bring the dictionaries they
already keep. Import reads every ``lexeme``: each of its ``grapheme`` elements becomes an entry with the
lexeme's first ``alias`` and first ``phoneme``. PLS has no notion of case, so the importer applies one
``case_sensitive`` choice to the whole file. The parser is hardened: no DTD, no entities, no network, a
size cap before parsing. Only the ``ipa`` alphabet is accepted for phonemes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from xml.etree import ElementTree

import defusedxml.ElementTree as SafeTree
from defusedxml import DefusedXmlException

from .lexicon import MAX_ENTRIES, Entry, LexiconError, check_entry

PLS_NS = "http://www.w3.org/2005/01/pronunciation-lexicon"
XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
MAX_PLS_BYTES = 512 * 1024
_ALPHABETS = frozenset({"ipa"})


@dataclass(frozen=True)
class PlsLexicon:
    language: str | None
    entries: list[Entry]


def read_pls(data: bytes, *, case_sensitive: bool = False) -> PlsLexicon:
    """The entries of a PLS document, or :class:`LexiconError` naming what is wrong (and where)."""
    if len(data) > MAX_PLS_BYTES:
        raise LexiconError(f"the PLS document is larger than {MAX_PLS_BYTES} bytes", None, "lexicon")
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        raise LexiconError(
            "the PLS document has a DTD or entity declarations, which are refused", None, "lexicon"
        )
    try:
        root = SafeTree.fromstring(data, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    except DefusedXmlException as exc:
        raise LexiconError(f"the PLS document is refused: {exc}", None, "lexicon") from exc
    except ElementTree.ParseError as exc:
        line, column = exc.position
        raise LexiconError(
            f"the PLS document is not well-formed XML (line {line}, column {column + 1})", None, "lexicon"
        ) from exc
    if root.tag != f"{{{PLS_NS}}}lexicon":
        raise LexiconError(f"the root element must be <lexicon> in the namespace {PLS_NS}", None, "lexicon")
    alphabet = root.get("alphabet", "ipa")
    if alphabet.lower() not in _ALPHABETS:
        raise LexiconError(f"the alphabet {alphabet!r} is not supported: use ipa", None, "alphabet")
    # Counted before any entry is checked (about 0.3 ms each): a document far over the limit is refused
    # at the cost of parsing it, not of checking the first MAX_ENTRIES entries.
    counted = sum(1 for _ in root.iter(f"{{{PLS_NS}}}grapheme"))
    if counted > MAX_ENTRIES:
        raise LexiconError(
            f"a lexicon holds at most {MAX_ENTRIES} entries; this one has {counted} graphemes",
            None,
            "entries",
        )
    entries: list[Entry] = []
    for number, lexeme in enumerate(root, start=1):
        if lexeme.tag != f"{{{PLS_NS}}}lexeme":
            raise LexiconError(
                f"lexeme {number}: unexpected element {_local(lexeme.tag)!r} in <lexicon>", None, "lexicon"
            )
        graphemes, alias, phoneme = _lexeme(lexeme, number, alphabet)
        for grapheme in graphemes:
            if len(entries) >= MAX_ENTRIES:
                raise LexiconError(f"a lexicon holds at most {MAX_ENTRIES} entries", None, "entries")
            entries.append(check_entry(Entry(grapheme, alias, phoneme, case_sensitive), len(entries)))
    return PlsLexicon(root.get(XML_LANG), entries)


def _lexeme(
    lexeme: ElementTree.Element, number: int, alphabet: str
) -> tuple[list[str], str | None, str | None]:
    graphemes: list[str] = []
    alias: str | None = None
    phoneme: str | None = None
    for child in lexeme:
        name = _local(child.tag)
        if child.tag != f"{{{PLS_NS}}}{name}" or name not in ("grapheme", "alias", "phoneme", "example"):
            raise LexiconError(f"lexeme {number}: unknown element {name!r}", None, "lexicon")
        if len(child):
            raise LexiconError(f"lexeme {number}: <{name}> must hold text only", None, "lexicon")
        text = child.text or ""
        if name == "grapheme":
            graphemes.append(text)
        elif name == "alias" and alias is None:
            alias = text
        elif name == "phoneme" and phoneme is None:
            own = child.get("alphabet", alphabet)
            if own.lower() not in _ALPHABETS:
                raise LexiconError(
                    f"lexeme {number}: the alphabet {own!r} is not supported: use ipa", None, "alphabet"
                )
            phoneme = text
    if not graphemes:
        raise LexiconError(f"lexeme {number} has no <grapheme>", None, "lexicon")
    return graphemes, alias, phoneme


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def write_pls(entries: Sequence[Entry], language: str | None) -> bytes:
    """A PLS 1.0 document of ``entries``, one lexeme each (case sensitivity has no place in PLS)."""
    ElementTree.register_namespace("", PLS_NS)
    root = ElementTree.Element(f"{{{PLS_NS}}}lexicon", {"version": "1.0", "alphabet": "ipa"})
    root.set(XML_LANG, language or "en")
    for entry in entries:
        lexeme = ElementTree.SubElement(root, f"{{{PLS_NS}}}lexeme")
        ElementTree.SubElement(lexeme, f"{{{PLS_NS}}}grapheme").text = entry.grapheme
        if entry.phoneme is not None:
            ElementTree.SubElement(lexeme, f"{{{PLS_NS}}}phoneme").text = entry.phoneme
        if entry.alias is not None:
            ElementTree.SubElement(lexeme, f"{{{PLS_NS}}}alias").text = entry.alias
    ElementTree.indent(root)
    document: bytes = ElementTree.tostring(root, encoding="utf-8", xml_declaration=True)
    return document + b"\n"
