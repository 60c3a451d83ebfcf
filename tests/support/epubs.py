"""EPUB files built in memory for tests: well-formed books (EPUB 3 or 2) and hostile variants.

``build_epub()`` with no arguments is a small novel with a cover, a title page, a copyright page, a
contents page, four chapters (one with a nested section, one spanning two files, two sharing a file),
footnotes and a colophon. Every piece can be switched off or replaced::

    build_epub()                                    # the default book, EPUB 3
    build_epub(version=2)                           # the same book with an NCX and a guide
    build_epub([Section("One", ("Hello.",))], cover=False, copyright=False)
    build_epub(files={"META-INF/container.xml": None})          # hostile: remove a file
    build_epub(files={"OEBPS/chapter1.xhtml": b"<html><p>"})   # hostile: replace one

What each version marks up, so that the reader's rules can be tested one by one:

- EPUB 3: a navigation document (in the spine, as the contents page) with a ``toc`` nav, nested unless
  ``nested=False``, and ``landmarks``; ``epub:type`` on the cover, title page, copyright page and
  colophon; footnotes as ``<a epub:type="noteref">`` and ``<aside epub:type="footnote">`` in the chapter.
- EPUB 2: an NCX and an OPF ``<guide>`` (cover, title-page, copyright-page, toc, colophon), the cover
  ``linear="no"``; footnotes as ``<a href="notes.xhtml#note-1"><sup>1</sup></a>`` into a notes file.

With ``toc=False`` the navigation document's toc nav (or the NCX's navMap) is empty.
With ``semantics=False`` neither ``epub:type`` nor landmarks nor guide are written: only titles remain.
Files are in ``OEBPS/``; chapter files are ``chapter1.xhtml``, ``chapter2.xhtml``, ... (top-level sections
in order, a section with ``file=`` uses that name), a continuation is ``chapterN-2.xhtml``.
"""

from __future__ import annotations

import io
import struct
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from html import escape
from typing import Literal

OPF_PATH = "OEBPS/content.opf"
_DOCTYPE = '<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE html>\n'
_HTML_OPEN = '<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">'
# A minimal, valid 1x1 GIF: the cover image (never read).
_GIF = (
    b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00\x00"
    b",\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;"
)


@dataclass(frozen=True)
class Section:
    """A table-of-contents entry and its text.

    ``paragraphs``: plain text, one ``<p>`` each, after an ``<h1>``/``<h2>`` with the title (unless
    ``heading=False``). ``children``: nested entries, anchored in the same file after the paragraphs.
    ``file``: a file name (without folder) that consecutive sections share; each then gets an anchor.
    ``continued``: paragraphs in one more spine file that no entry points at (the chapter spans two files).
    ``notes``: footnote texts; markers 1, 2, ... (numbered across the book) end the first paragraph.
    ``extra_html``: raw XHTML appended after the paragraphs (images, tables, ...).
    """

    title: str
    paragraphs: Sequence[str] = ()
    children: Sequence[Section] = ()
    file: str | None = None
    continued: Sequence[str] = ()
    notes: Sequence[str] = ()
    extra_html: str = ""
    heading: bool = True


DEFAULT_CHAPTERS: tuple[Section, ...] = (
    Section(
        "Chapter One",
        ("It was a bright cold day in April.", "The clocks were striking thirteen."),
        children=(Section("A Smaller Part", ("Nested words live here.",)),),
        notes=("Clocks in this book strike oddly.",),
    ),
    Section(
        "Chapter Two",
        ("The second chapter starts here.",),
        continued=("It goes on in another file.",),
        notes=("A second note.",),
    ),
    Section("Chapter Three", ("Three shares a file.",), file="shared.xhtml"),
    Section("Chapter Four", ("Four shares it too.",), file="shared.xhtml"),
)

BILLION_LAUGHS = (
    b'<?xml version="1.0"?>\n<!DOCTYPE html [\n<!ENTITY lol "lol">\n'
    + b"".join(
        b'<!ENTITY lol%d "%s">\n' % (level, (b"&lol%d;" % (level - 1) if level > 1 else b"&lol;") * 10)
        for level in range(1, 10)
    )
    + b']>\n<html xmlns="http://www.w3.org/1999/xhtml"><body><p>&lol9;</p></body></html>'
)
EXTERNAL_ENTITY = (
    b'<?xml version="1.0"?>\n<!DOCTYPE html [<!ENTITY secret SYSTEM "file:///etc/passwd">]>\n'
    b'<html xmlns="http://www.w3.org/1999/xhtml"><body><p>Secret: &secret;</p></body></html>'
)


def deep_xhtml(levels: int) -> bytes:
    """An XHTML document whose body nests ``levels`` divs."""
    return (
        f"{_DOCTYPE}{_HTML_OPEN}<head><title>Deep</title></head><body>{'<div>' * levels}Deep"
        f"{'</div>' * levels}</body></html>"
    ).encode()


def xhtml(body: str, *, title: str = "Page", body_type: str | None = None) -> bytes:
    """An XHTML5 document with ``body`` (raw markup) as its body's content."""
    typed = f' epub:type="{body_type}"' if body_type else ""
    head = f"<head><title>{escape(title)}</title></head>"
    return f"{_DOCTYPE}{_HTML_OPEN}{head}<body{typed}>{body}</body></html>".encode()


def build_epub(
    chapters: Sequence[Section] | None = None,
    *,
    version: Literal[2, 3] = 3,
    title: str = "The Test Book",
    authors: Sequence[str] = ("Ann Smith",),
    illustrators: Sequence[str] = (),
    language: str = "en",
    cover: bool = True,
    titlepage: bool = True,
    copyright: bool = True,
    copyright_title: str = "Legal Notice",
    contents: bool = True,
    colophon: bool = True,
    footnotes: bool = True,
    nested: bool = True,
    toc: bool = True,
    semantics: bool = True,
    compression: int = zipfile.ZIP_DEFLATED,
    files: Mapping[str, bytes | None] | None = None,
) -> bytes:
    """An EPUB's bytes (see the module docstring). ``files`` replaces, adds (bytes) or removes (None) zip
    entries by path after the book is built: the hook for hostile files. ``compression``: how entries other
    than ``mimetype`` are stored (``zipfile.ZIP_STORED`` for byte-flipping tests)."""
    built = epub_files(
        DEFAULT_CHAPTERS if chapters is None else chapters,
        _Book(
            version=version,
            title=title,
            authors=tuple(authors),
            illustrators=tuple(illustrators),
            language=language,
            cover=cover,
            titlepage=titlepage,
            copyright=copyright,
            copyright_title=copyright_title,
            contents=contents,
            colophon=colophon,
            footnotes=footnotes,
            nested=nested,
            toc=toc,
            semantics=semantics,
        ),
    )
    for name, data in (files or {}).items():
        if data is None:
            built.pop(name, None)
        else:
            built[name] = data
    return zip_bytes(built, compression=compression)


@dataclass(frozen=True)
class _Book:
    version: Literal[2, 3] = 3
    title: str = "The Test Book"
    authors: tuple[str, ...] = ("Ann Smith",)
    illustrators: tuple[str, ...] = ()
    language: str = "en"
    cover: bool = True
    titlepage: bool = True
    copyright: bool = True
    copyright_title: str = "Legal Notice"
    contents: bool = True
    colophon: bool = True
    footnotes: bool = True
    nested: bool = True
    toc: bool = True
    semantics: bool = True


@dataclass
class _Page:
    """One spine file while building: its name, body markup, and what it is (for guide/landmarks)."""

    name: str
    body: list[str] = field(default_factory=list)
    body_type: str | None = None
    guide: str | None = None  # guide/landmark type
    linear: bool = True
    title: str = "Page"


@dataclass(frozen=True)
class _Entry:
    title: str
    href: str
    children: tuple[_Entry, ...] = ()


def epub_files(chapters: Sequence[Section], book: _Book = _Book()) -> dict[str, bytes]:
    """The zip entries of a book, by path (``build_epub`` zips them)."""
    pages, entries, notes = _pages(chapters, book)
    files: dict[str, bytes] = {
        "mimetype": b"application/epub+zip",
        "META-INF/container.xml": (
            b'<?xml version="1.0"?>\n<container version="1.0" '
            b'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
            b'<rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
            b"</rootfiles></container>"
        ),
    }
    for page in pages:
        files[f"OEBPS/{page.name}"] = xhtml(
            "".join(page.body), title=page.title, body_type=page.body_type if book.semantics else None
        )
    if notes:
        files["OEBPS/notes.xhtml"] = xhtml("".join(notes), title="Notes")
    if book.cover:
        files["OEBPS/cover.gif"] = _GIF
    if book.version == 3:
        files["OEBPS/nav.xhtml"] = _nav(entries, pages, book)
    else:
        files["OEBPS/toc.ncx"] = _ncx(entries, book)
    files[OPF_PATH] = _opf(pages, book, has_notes=bool(notes))
    return files


def _pages(chapters: Sequence[Section], book: _Book) -> tuple[list[_Page], list[_Entry], list[str]]:
    """The spine's pages, the table of contents and (EPUB 2) the notes file's paragraphs."""
    pages: list[_Page] = []
    entries: list[_Entry] = []
    notes: list[str] = []
    if book.cover:
        pages.append(
            _Page(
                "cover.xhtml",
                ['<div><img src="cover.gif" alt="Cover"/></div>'],
                body_type="cover",
                guide="cover",
                linear=book.version == 3,
                title="Cover",
            )
        )
    if book.titlepage:
        typed = ' epub:type="titlepage"' if book.semantics and book.version == 3 else ""
        byline = escape(", ".join(book.authors))
        body = f"<section{typed}><h1>{escape(book.title)}</h1><p>by {byline}</p></section>"
        pages.append(_Page("titlepage.xhtml", [body], guide="title-page", title="Title Page"))
    if book.copyright:
        typed = ' epub:type="copyright-page"' if book.semantics and book.version == 3 else ""
        body = f"<section{typed}><p>Copyright 2024 by the author. All rights reserved.</p></section>"
        pages.append(_Page("copyright.xhtml", [body], body_type="frontmatter", guide="copyright-page"))
        entries.append(_Entry(book.copyright_title, "copyright.xhtml"))
    if book.contents:
        entries.append(_Entry("Contents", "nav.xhtml" if book.version == 3 else "toc.xhtml"))
    counter = [0]
    for number, section in enumerate(chapters, start=1):
        entries.append(_chapter(section, number, pages, notes, counter, book))
    if book.colophon:
        body = "<section><h2>Colophon</h2><p>Set in a typeface nobody reads aloud.</p></section>"
        pages.append(
            _Page("colophon.xhtml", [body], body_type="colophon", guide="colophon", title="Colophon")
        )
        entries.append(_Entry("Colophon", "colophon.xhtml"))
    if notes:
        entries.append(_Entry("Notes", "notes.xhtml"))
    if book.contents and book.version == 2:
        pages.insert(_first_chapter(pages), _contents_page(entries))
    return pages, entries, notes


def _first_chapter(pages: list[_Page]) -> int:
    return next((i for i, p in enumerate(pages) if p.name not in _FRONT_NAMES), len(pages))


_FRONT_NAMES = ("cover.xhtml", "titlepage.xhtml", "copyright.xhtml")


def _contents_page(entries: list[_Entry]) -> _Page:
    links = "".join(f'<li><a href="{e.href}">{escape(e.title)}</a></li>' for e in entries)
    return _Page("toc.xhtml", [f"<h1>Contents</h1><ul>{links}</ul>"], guide="toc", title="Contents")


def _chapter(
    section: Section, number: int, pages: list[_Page], notes: list[str], counter: list[int], book: _Book
) -> _Entry:
    """Add a top-level section's page(s); its table-of-contents entry."""
    name = section.file or f"chapter{number}.xhtml"
    shared = section.file is not None
    if pages and pages[-1].name == name:
        page = pages[-1]
    else:
        page = _Page(name, body_type="bodymatter", guide="text" if number == 1 else None, title=section.title)
        pages.append(page)
    anchor = f"s{number}"
    page.body.append(_section_html(section, anchor, 1, notes, counter, book))
    entry = _Entry(
        section.title,
        f"{name}#{anchor}" if shared else name,
        tuple(_child_entries(section, anchor, name)),
    )
    if section.continued:
        paragraphs = "".join(f"<p>{escape(p)}</p>" for p in section.continued)
        pages.append(_Page(f"chapter{number}-2.xhtml", [paragraphs], body_type="bodymatter"))
    return entry


def _child_entries(section: Section, anchor: str, name: str) -> list[_Entry]:
    return [
        _Entry(child.title, f"{name}#{anchor}-{i}", tuple(_child_entries(child, f"{anchor}-{i}", name)))
        for i, child in enumerate(section.children, start=1)
    ]


def _section_html(
    section: Section, anchor: str, level: int, notes: list[str], counter: list[int], book: _Book
) -> str:
    """A section's markup: heading, paragraphs (note markers after the first), notes, children."""
    paragraphs = [escape(p) for p in section.paragraphs]
    asides: list[str] = []
    markers: list[str] = []
    for text in section.notes if book.footnotes else ():
        counter[0] += 1
        number = counter[0]
        if book.version == 3:
            markers.append(f'<a epub:type="noteref" id="ref-{number}" href="#note-{number}">{number}</a>')
            asides.append(f'<aside epub:type="footnote" id="note-{number}"><p>{escape(text)}</p></aside>')
        else:
            markers.append(f'<a id="ref-{number}" href="notes.xhtml#note-{number}"><sup>{number}</sup></a>')
            notes.append(f'<p id="note-{number}"><a href="#ref-{number}">{number}.</a> {escape(text)}</p>')
    if paragraphs:
        paragraphs[0] += "".join(markers)
    heading = f"<h{min(level, 6)}>{escape(section.title)}</h{min(level, 6)}>" if section.heading else ""
    inner = "".join(
        _section_html(child, f"{anchor}-{i}", level + 1, notes, counter, book)
        for i, child in enumerate(section.children, start=1)
    )
    typed = ' epub:type="chapter"' if book.semantics and book.version == 3 and level == 1 else ""
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return (
        f'<section id="{anchor}"{typed}>{heading}{body}{section.extra_html}{"".join(asides)}{inner}</section>'
    )


def _nav(entries: list[_Entry], pages: list[_Page], book: _Book) -> bytes:
    """The navigation document: the toc nav (nested or flat) and the landmarks."""
    flat = (entries if book.nested else _flatten(entries)) if book.toc else []
    toc = f'<nav epub:type="toc" id="toc"><h1>Contents</h1>{_nav_list(flat)}</nav>'
    landmarks = ""
    if book.semantics:
        links = "".join(
            f'<li><a epub:type="{_LANDMARK.get(p.guide, p.guide)}" href="{p.name}">{escape(p.title)}</a></li>'
            for p in pages
            if p.guide
        )
        landmarks = f'<nav epub:type="landmarks" hidden=""><ol>{links}</ol></nav>'
    return xhtml(toc + landmarks, title="Contents")


_LANDMARK = {"title-page": "titlepage", "text": "bodymatter"}


def _flatten(entries: Sequence[_Entry]) -> list[_Entry]:
    flat: list[_Entry] = []
    for entry in entries:
        flat.append(replace(entry, children=()))
        flat.extend(_flatten(entry.children))
    return flat


def _nav_list(entries: Sequence[_Entry]) -> str:
    items = "".join(
        f'<li><a href="{e.href}">{escape(e.title)}</a>{_nav_list(e.children) if e.children else ""}</li>'
        for e in entries
    )
    return f"<ol>{items}</ol>"


def _ncx(entries: list[_Entry], book: _Book) -> bytes:
    counter = [0]

    def points(items: Sequence[_Entry]) -> str:
        out = []
        for entry in items:
            counter[0] += 1
            out.append(
                f'<navPoint id="p{counter[0]}" playOrder="{counter[0]}"><navLabel><text>{escape(entry.title)}'
                f'</text></navLabel><content src="{entry.href}"/>{points(entry.children)}</navPoint>'
            )
        return "".join(out)

    tree = (entries if book.nested else _flatten(entries)) if book.toc else []
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        '<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1">'
        f"<head/><docTitle><text>{escape(book.title)}</text></docTitle><navMap>{points(tree)}</navMap></ncx>"
    ).encode()


def _opf(pages: list[_Page], book: _Book, *, has_notes: bool) -> bytes:
    manifest = [
        f'<item id="{_id(p.name)}" href="{p.name}" media-type="application/xhtml+xml"/>' for p in pages
    ]
    spine = [f'<itemref idref="{_id(p.name)}"{"" if p.linear else _NOT_LINEAR}/>' for p in pages]
    if has_notes:
        manifest.append('<item id="notes" href="notes.xhtml" media-type="application/xhtml+xml"/>')
        spine.append('<itemref idref="notes"/>')
    if book.cover:
        manifest.append(
            '<item id="cover-image" href="cover.gif" media-type="image/gif" properties="cover-image"/>'
        )
    if book.version == 3:
        manifest.append(
            '<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>'
        )
        if book.contents:
            spine.insert(_first_chapter(pages), '<itemref idref="nav"/>')
    else:
        manifest.append('<item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>')
    guide = ""
    if book.version == 2 and book.semantics:
        refs = "".join(
            f'<reference type="{p.guide}" title="{escape(p.title)}" href="{p.name}"/>'
            for p in pages
            if p.guide
        )
        guide = f"<guide>{refs}</guide>"
    return (
        f'<?xml version="1.0" encoding="utf-8"?>\n<package xmlns="http://www.idpf.org/2007/opf" '
        f'version="{book.version}.0" unique-identifier="uid">{_metadata(book)}'
        f"<manifest>{''.join(manifest)}</manifest>"
        f"<spine{_NCX_TOC if book.version == 2 else ''}>{''.join(spine)}</spine>{guide}</package>"
    ).encode()


def _metadata(book: _Book) -> str:
    dc = 'xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:opf="http://www.idpf.org/2007/opf"'
    parts = [
        f'<dc:identifier id="uid">urn:uuid:test-book</dc:identifier><dc:title>{escape(book.title)}</dc:title>'
    ]
    people = [(name, "aut") for name in book.authors] + [(name, "ill") for name in book.illustrators]
    for number, (name, role) in enumerate(people, start=1):
        if book.version == 3:
            parts.append(f'<dc:creator id="c{number}">{escape(name)}</dc:creator>')
            parts.append(f'<meta refines="#c{number}" property="role" scheme="marc:relators">{role}</meta>')
        else:
            parts.append(f'<dc:creator opf:role="{role}">{escape(name)}</dc:creator>')
    parts.append(f"<dc:language>{escape(book.language)}</dc:language>")
    return f"<metadata {dc}>{''.join(parts)}</metadata>"


_NOT_LINEAR = ' linear="no"'
_NCX_TOC = ' toc="ncx"'


def _id(name: str) -> str:
    return "p-" + name.replace(".", "-")


def zip_bytes(files: Mapping[str, bytes], *, compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    """A zip of ``files`` in order; ``mimetype`` stored uncompressed, as EPUB requires."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            method = zipfile.ZIP_STORED if name == "mimetype" else compression
            archive.writestr(zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0)), data, compress_type=method)
    return buffer.getvalue()


def declare_size(data: bytes, name: str, size: int) -> bytes:
    """``data`` (a zip) with entry ``name``'s uncompressed size declared as ``size`` in its local header
    and central directory: a zip that lies about what it unpacks to."""
    patched = bytearray(data)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        info = archive.getinfo(name)
        start: int = archive.start_dir
    struct.pack_into("<I", patched, info.header_offset + 22, size)
    encoded = name.encode()
    position = start
    while patched[position : position + 4] == b"PK\x01\x02":
        name_length, extra_length, comment_length = struct.unpack_from("<HHH", patched, position + 28)
        if bytes(patched[position + 46 : position + 46 + name_length]) == encoded:
            struct.pack_into("<I", patched, position + 24, size)
            return bytes(patched)
        position += 46 + name_length + extra_length + comment_length
    raise KeyError(name)
