"""The EPUB reader on real files built in memory (tests/support/epubs.py): chapters from the table of
contents, front and back matter, footnotes, metadata, and hostile files that must fail with ScriptError."""

from __future__ import annotations

import random
import zipfile
from dataclasses import replace
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.epubs import (
    BILLION_LAUGHS,
    EXTERNAL_ENTITY,
    OPF_PATH,
    Section,
    build_epub,
    declare_size,
    deep_xhtml,
    epub_files,
    xhtml,
    zip_bytes,
)
from worker.script.document import Block, BookInfo, ChapterStart
from worker.script.epub import EpubLimits, read_epub
from worker.script.errors import ScriptError

Version = Literal[2, 3]

Event = ChapterStart | Block

# The default book's chapters, as read with the default options.
BODY: list[Event] = [
    ChapterStart("Chapter One"),
    Block(True, "Chapter One"),
    Block(False, "It was a bright cold day in April."),
    Block(False, "The clocks were striking thirteen."),
    ChapterStart("A Smaller Part"),
    Block(True, "A Smaller Part"),
    Block(False, "Nested words live here."),
    ChapterStart("Chapter Two"),
    Block(True, "Chapter Two"),
    Block(False, "The second chapter starts here."),
    Block(False, "It goes on in another file."),
    ChapterStart("Chapter Three"),
    Block(True, "Chapter Three"),
    Block(False, "Three shares a file."),
    ChapterStart("Chapter Four"),
    Block(True, "Chapter Four"),
    Block(False, "Four shares it too."),
]
NOTE_1 = Block(False, "Note 1. Clocks in this book strike oddly.")
NOTE_2 = Block(False, "Note 2. A second note.")
COLOPHON: list[Event] = [
    ChapterStart("Colophon"),
    Block(True, "Colophon"),
    Block(False, "Set in a typeface nobody reads aloud."),
]


def _titles(events: list[Event]) -> list[str]:
    return [event.title for event in events if isinstance(event, ChapterStart)]


def _one_chapter(
    body: str, *, front_matter: bool = False, footnotes: Literal["skip", "chapter_end"] = "skip"
) -> list[Event]:
    """The events of a one-chapter EPUB 3 whose chapter file has ``body`` as its body."""
    data = build_epub(
        [Section("Only", ("Start.",))],
        cover=False,
        titlepage=False,
        copyright=False,
        contents=False,
        colophon=False,
        files={"OEBPS/chapter1.xhtml": xhtml(body)},
    )
    return read_epub(data, front_matter=front_matter, footnotes=footnotes).events


# --- chapters from the table of contents ------------------------------------------------------------


def test_epub3_chapters_follow_the_navigation_document() -> None:
    book = read_epub(build_epub())
    assert book.events == BODY
    assert book.warnings == [
        "left out front matter: Cover, Title page, Legal Notice, Contents",
        "left out back matter: Colophon",
        "left out 2 footnotes",
        "skipped 1 image",
    ]


def test_epub2_chapters_follow_the_ncx_and_the_guide_marks_matter() -> None:
    book = read_epub(build_epub(version=2))
    assert book.events == BODY
    assert book.warnings == [
        "left out front matter: Cover, Title page, Legal Notice, Contents",
        "left out back matter: Colophon, Notes",
        "left out 2 footnotes",
        "skipped 1 image",
    ]


@pytest.mark.parametrize("version", [2, 3])
def test_a_flat_table_of_contents_reads_like_a_nested_one(version: Version) -> None:
    assert read_epub(build_epub(version=version, nested=False)).events == BODY


def test_a_chapter_runs_from_its_anchor_to_the_next_across_files() -> None:
    chapters = [
        Section("One", ("First words.",), file="a.xhtml", continued=("Second file, no entry.",)),
        Section("Two", ("Two starts mid-file.",), file="b.xhtml"),
    ]
    files = epub_files(chapters)
    # Words before Two's anchor in its own file still belong to One.
    files["OEBPS/b.xhtml"] = xhtml('<p>Still chapter one.</p><h2 id="s2">Two</h2><p>Two starts mid-file.</p>')
    events = read_epub(zip_bytes(files)).events
    assert events == [
        ChapterStart("One"),
        Block(True, "One"),
        Block(False, "First words."),
        Block(False, "Second file, no entry."),
        Block(False, "Still chapter one."),
        ChapterStart("Two"),
        Block(True, "Two"),
        Block(False, "Two starts mid-file."),
    ]


def test_an_unlinked_heading_in_the_nav_is_a_chapter_with_only_its_title() -> None:
    files = epub_files([Section("Chapter 1", ("Words.",))])
    nav = (
        '<nav epub:type="toc"><ol><li><span>Part One</span><ol>'
        '<li><a href="chapter1.xhtml">Chapter 1</a></li></ol></li></ol></nav>'
    )
    files["OEBPS/nav.xhtml"] = xhtml(nav)
    events = read_epub(zip_bytes(files)).events
    assert _titles(events) == ["Part One", "Chapter 1"]
    assert events[1] == ChapterStart("Chapter 1")


def test_without_a_table_of_contents_each_spine_file_is_a_chapter_titled_by_its_heading() -> None:
    book = read_epub(build_epub(toc=False, cover=False, titlepage=False, copyright=False, contents=False))
    # A file without a heading continues the chapter before it; the colophon says what it is.
    assert book.events == [
        *BODY[: BODY.index(ChapterStart("A Smaller Part"))],
        *BODY[BODY.index(ChapterStart("A Smaller Part")) + 1 : BODY.index(ChapterStart("Chapter Four"))],
        *BODY[BODY.index(ChapterStart("Chapter Four")) + 1 :],
    ]
    assert book.warnings == [
        "the EPUB has no usable table of contents: its chapters follow its files",
        "left out back matter: Colophon",
        "left out 2 footnotes",
    ]


# --- what a chapter's text is -------------------------------------------------------------------------


def test_paragraph_like_elements_are_blocks_and_whitespace_collapses() -> None:
    body = (
        "<h2>Only</h2><div>Loose  div text<p>In a\n  paragraph.</p>tail of div</div>"
        "<ul><li>One item</li><li>Two<br/>lines</li></ul><dl><dt>Term</dt><dd>Definition</dd></dl>"
        "<blockquote>Quoted <em>words</em>.</blockquote><p>Soft\u00adhyphen and <b>bold</b>er.</p>"
    )
    assert _one_chapter(body) == [
        ChapterStart("Only"),
        Block(True, "Only"),
        Block(False, "Loose div text"),
        Block(False, "In a paragraph."),
        Block(False, "tail of div"),
        Block(False, "One item"),
        Block(False, "Two lines"),
        Block(False, "Term"),
        Block(False, "Definition"),
        Block(False, "Quoted words."),
        Block(False, "Softhyphen and bolder."),
    ]


def test_images_tables_figures_and_code_are_not_read_and_are_counted() -> None:
    body = (
        '<p>Before.</p><img src="x.png" alt="An image"/><table><tr><td>Cell</td></tr></table>'
        "<figure><img src='y.png' alt='y'/><figcaption>Caption</figcaption></figure>"
        "<svg xmlns='http://www.w3.org/2000/svg'><text>Svg</text></svg><script>var x;</script>"
        "<math xmlns='http://www.w3.org/1998/Math/MathML'><mi>x</mi></math><p>After.</p>"
    )
    data = build_epub(
        [Section("Only")],
        cover=False,
        titlepage=False,
        copyright=False,
        contents=False,
        colophon=False,
        files={"OEBPS/chapter1.xhtml": xhtml(body)},
    )
    book = read_epub(data)
    assert book.events == [ChapterStart("Only"), Block(False, "Before."), Block(False, "After.")]
    assert book.warnings == ["skipped 1 figure", "skipped 1 formula", "skipped 2 images", "skipped 1 table"]


def test_footnote_markers_are_dropped_but_other_superscripts_and_links_are_read() -> None:
    body = (
        '<p>Plain<a href="#fn1"><sup>1</sup></a> and<sup><a href="#fn2">[2]</a></sup> and'
        '<a href="#fn3" class="noteref">3</a>. E = mc<sup>2</sup>; see <a href="#sec">chapter 3</a>.</p>'
        '<p id="sec">Numbered <a href="#sec">4</a> link.</p>'
        '<aside epub:type="footnote" id="fn1"><p>One.</p></aside>'
        '<div epub:type="footnote" id="fn2">Two.</div><div role="doc-footnote" id="fn3">Three.</div>'
    )
    assert _one_chapter(body) == [
        ChapterStart("Only"),
        Block(False, "Plain and and. E = mc2; see chapter 3."),
        Block(False, "Numbered 4 link."),
    ]
    with_notes = _one_chapter(body, footnotes="chapter_end")
    assert with_notes[-3:] == [
        Block(False, "Note 1. One."),
        Block(False, "Note 2. Two."),
        Block(False, "Note 3. Three."),
    ]


def test_html_entities_under_the_xhtml_dtd_are_their_characters() -> None:
    page = (
        b'<?xml version="1.0"?>\n<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" '
        b'"http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd">\n<html xmlns="http://www.w3.org/1999/xhtml">'
        b"<head><title>T</title></head><body><p>Wait&mdash;what&nbsp;now &amp; then.</p></body></html>"
    )
    data = build_epub([Section("Only")], files={"OEBPS/chapter1.xhtml": page})
    assert read_epub(data).events == [ChapterStart("Only"), Block(False, "Wait\u2014what now & then.")]


# --- front matter, back matter, footnotes ------------------------------------------------------------


def test_front_matter_is_read_when_asked() -> None:
    book = read_epub(build_epub(), front_matter=True)
    front = book.events[: book.events.index(ChapterStart("Chapter One"))]
    assert _titles(front) == ["Cover", "Title page", "Legal Notice", "Contents"]
    assert Block(False, "Copyright 2024 by the author. All rights reserved.") in front
    assert Block(False, "by Ann Smith") in front
    assert book.events[len(front) :] == BODY
    assert not any(w.startswith("left out front matter") for w in book.warnings)


@pytest.mark.parametrize("version", [2, 3])
def test_back_matter_is_read_when_asked(version: Version) -> None:
    book = read_epub(build_epub(version=version), back_matter=True)
    assert book.events[: len(BODY)] == BODY
    assert book.events[len(BODY) : len(BODY) + 3] == COLOPHON
    if version == 2:  # the notes file is in the spine and the NCX, titled "Notes"
        assert book.events[len(BODY) + 3 :] == [
            ChapterStart("Notes"),
            Block(False, "1. Clocks in this book strike oddly."),
            Block(False, "2. A second note."),
        ]


@pytest.mark.parametrize("version", [2, 3])
def test_footnotes_are_read_at_the_end_of_their_chapter(version: Version) -> None:
    events = read_epub(build_epub(version=version), footnotes="chapter_end").events
    expected = list(BODY)
    expected.insert(expected.index(ChapterStart("A Smaller Part")), NOTE_1)
    expected.insert(expected.index(ChapterStart("Chapter Three")), NOTE_2)
    assert events == expected


def test_a_note_referred_to_twice_is_read_once() -> None:
    body = (
        '<p>A<a epub:type="noteref" href="#n">*</a> and again<a epub:type="noteref" href="#n">*</a>.</p>'
        '<aside epub:type="footnote" id="n"><p><a href="#back" epub:type="backlink">*</a> The note.</p>'
        "</aside>"
    )
    events = _one_chapter(body, footnotes="chapter_end")
    assert events == [ChapterStart("Only"), Block(False, "A and again."), Block(False, "Note *. The note.")]


def test_titles_mark_matter_when_nothing_else_does() -> None:
    data = build_epub(semantics=False, copyright_title="Copyright", cover=False, titlepage=False)
    book = read_epub(data)
    assert book.events == BODY
    assert book.warnings[:2] == [
        "left out front matter: Copyright, Contents",
        "left out back matter: Colophon",
    ]


def test_matter_marked_only_by_an_unusual_title_and_no_semantics_is_read() -> None:
    data = build_epub(semantics=False, cover=False, titlepage=False, contents=False, colophon=False)
    book = read_epub(data)
    assert _titles(book.events)[0] == "Legal Notice"


def test_the_nearest_epub_type_decides_a_dedication_in_a_frontmatter_body_is_read() -> None:
    files = epub_files([Section("Dedication"), Section("One", ("Words.",))])
    dedication = '<section epub:type="dedication"><p>For Ann.</p></section>'
    files["OEBPS/chapter1.xhtml"] = xhtml(dedication, body_type="frontmatter")
    assert read_epub(zip_bytes(files)).events[:2] == [ChapterStart("Dedication"), Block(False, "For Ann.")]
    files["OEBPS/chapter1.xhtml"] = xhtml("<p>For Ann.</p>", body_type="frontmatter")
    book = read_epub(zip_bytes(files))
    assert _titles(book.events) == ["One"]
    assert book.warnings[0] == "left out front matter: Cover, Title page, Legal Notice, Contents, Dedication"


def test_a_copyright_section_inside_a_chapter_file_is_left_out() -> None:
    body = '<p>Story.</p><section epub:type="copyright-page"><p>All rights reserved.</p></section>'
    assert _one_chapter(body) == [ChapterStart("Only"), Block(False, "Story.")]
    assert _one_chapter(body, front_matter=True)[-1] == Block(False, "All rights reserved.")


# --- metadata ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [2, 3])
def test_metadata_comes_from_the_opf(version: Version) -> None:
    data = build_epub(
        version=version,
        title="Nineteen",
        authors=("Ann Smith", "Bob Jones"),
        illustrators=("Ivy Drew",),
        language="en-GB",
    )
    assert read_epub(data).info == BookInfo("Nineteen", "Ann Smith, Bob Jones", "en-GB")


def test_missing_metadata_is_none() -> None:
    files = epub_files([Section("One", ("Words.",))])
    opf = files[OPF_PATH].decode()
    start, end = opf.index("<metadata"), opf.index("</metadata>") + len("</metadata>")
    files[OPF_PATH] = (opf[:start] + "<metadata/>" + opf[end:]).encode()
    assert read_epub(zip_bytes(files)).info == BookInfo()


# --- hostile files -----------------------------------------------------------------------------------


def _refused(data: bytes, match: str, limits: EpubLimits | None = None) -> ScriptError:
    with pytest.raises(ScriptError, match=match) as caught:
        read_epub(data, limits=limits or EpubLimits())
    return caught.value


@pytest.mark.parametrize("data", [b"", b"hello, not a zip", b"PK\x03\x04junk", b"PK\x05\x06" + b"\0" * 18])
def test_not_a_zip_is_refused(data: bytes) -> None:
    _refused(data, "not an EPUB")


def test_a_truncated_zip_is_refused() -> None:
    data = build_epub()
    for cut in (len(data) // 3, len(data) // 2, len(data) - 10):
        _refused(data[:cut], "not an EPUB")


def test_a_zip_without_container_xml_is_refused() -> None:
    _refused(build_epub(files={"META-INF/container.xml": None}), r"not an EPUB: META-INF/container\.xml")


def test_a_zip_with_another_mimetype_is_refused() -> None:
    _refused(build_epub(files={"mimetype": b"application/zip"}), "not an EPUB: its mimetype")


def test_a_highly_compressed_entry_is_refused_before_it_is_inflated() -> None:
    bomb = build_epub(files={"OEBPS/bomb.txt": b"\0" * (20 * 2**20)})
    _refused(bomb, r"entry 'OEBPS/bomb\.txt' is compressed more than 200:1")


def test_declared_sizes_over_the_limits_are_refused() -> None:
    data = declare_size(build_epub(), "OEBPS/chapter1.xhtml", 3 * 2**30)
    _refused(data, r"unpacks to more than 50 MB")
    many = build_epub(files={f"OEBPS/pad{i}.bin": random.Random(i).randbytes(60_000) for i in range(5)})
    _refused(many, r"the EPUB unpacks to more than 0\.25 MB", EpubLimits(max_unpacked_bytes=2**18))


def test_lying_sizes_are_caught_while_reading() -> None:
    data = declare_size(build_epub(), "OEBPS/chapter1.xhtml", 10)  # far less than it holds
    _refused(data, "chapter1.xhtml")


def test_too_many_entries_are_refused_before_the_directory_is_loaded() -> None:
    files = epub_files([Section("One", ("Words.",))])
    files.update({f"OEBPS/x{i}.txt": b"" for i in range(10_001)})
    _refused(zip_bytes(files), "more than 10000 files")
    _refused(build_epub(), "more than 5 files", EpubLimits(max_entries=5))


def test_too_many_chapters_are_refused() -> None:
    chapters = [Section(f"C{i}", ("Words.",)) for i in range(12)]
    _refused(build_epub(chapters), "more than 10 entries", EpubLimits(max_chapters=10))


_AES = "http://www.w3.org/2001/04/xmlenc#aes128-cbc"
_IDPF_FONTS = "http://www.idpf.org/2008/embedding"


def _encryption(algorithm: str, uri: str) -> bytes:
    return (
        '<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
        'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>'
        f'<enc:EncryptionMethod Algorithm="{algorithm}"/>'
        f'<enc:CipherData><enc:CipherReference URI="{uri}"/></enc:CipherData>'
        "</enc:EncryptedData></encryption>"
    ).encode()


def test_encrypted_content_is_drm_and_refused() -> None:
    data = build_epub(
        files={
            "META-INF/encryption.xml": _encryption(_AES, "OEBPS/chapter1.xhtml"),
            "META-INF/rights.xml": b"<rights/>",
        }
    )
    _refused(data, r"DRM-protected \(META-INF/encryption\.xml encrypts 'OEBPS/chapter1\.xhtml'\)")


@pytest.mark.parametrize("algorithm", [_IDPF_FONTS, "http://ns.adobe.com/pdf/enc#RC"])
def test_font_obfuscation_is_not_drm(algorithm: str) -> None:
    data = build_epub(
        files={
            "OEBPS/font.otf": b"scrambled font bytes",
            "META-INF/encryption.xml": _encryption(algorithm, "OEBPS/font.otf"),
        }
    )
    assert read_epub(data).events == BODY


@pytest.mark.parametrize(
    ("opf", "match"),
    [
        (b"<package><metadata>", "malformed OPF"),
        (b"<not-a-package/>", "the root element is not <package>"),
        (b'<package xmlns="http://www.idpf.org/2007/opf"><manifest/></package>', "has no <spine>"),
        (
            b'<package xmlns="http://www.idpf.org/2007/opf"><manifest/><spine><itemref idref="x"/></spine>'
            b"</package>",
            "not in the manifest",
        ),
    ],
)
def test_a_malformed_opf_is_refused(opf: bytes, match: str) -> None:
    _refused(build_epub(files={OPF_PATH: opf}), match)


def test_malformed_xhtml_is_refused() -> None:
    _refused(build_epub(files={"OEBPS/chapter1.xhtml": b"<html><body><p>Open"}), "malformed XHTML")


def test_an_entity_bomb_is_refused_without_expansion() -> None:
    # refused before libxml2 sees it (which would expand it up to its own amplification limit)
    _refused(build_epub(files={"OEBPS/chapter1.xhtml": BILLION_LAUGHS}), "XHTML.*declares entities")


def test_an_external_entity_is_never_read() -> None:
    error = _refused(build_epub(files={"OEBPS/chapter1.xhtml": EXTERNAL_ENTITY}), "declares entities")
    assert "root:" not in str(error)


def test_an_entity_bomb_in_the_opf_or_container_is_refused() -> None:
    _refused(build_epub(files={OPF_PATH: BILLION_LAUGHS}), "OPF.*declares entities")
    _refused(build_epub(files={"META-INF/container.xml": EXTERNAL_ENTITY}), "declares entities")


def test_deeply_nested_html_is_refused() -> None:
    deep = {"OEBPS/chapter1.xhtml": deep_xhtml(10_000)}
    _refused(build_epub(files=deep), "compressed more than 200:1")  # deflated, it looks like a bomb
    _refused(build_epub(files=deep, compression=zipfile.ZIP_STORED), "malformed XHTML.*depth")


def test_a_small_entity_declaration_is_refused_too() -> None:
    page = (
        b'<?xml version="1.0"?><!DOCTYPE html [<!ENTITY name "Ann">]>'
        b'<html xmlns="http://www.w3.org/1999/xhtml"><body><p>Hi &name;.</p></body></html>'
    )
    _refused(build_epub(files={"OEBPS/chapter1.xhtml": page}), "declares entities in its DTD")


def test_a_table_of_contents_pointing_at_a_missing_file_is_refused() -> None:
    nav = xhtml('<nav epub:type="toc"><ol><li><a href="missing.xhtml">Gone</a></li></ol></nav>')
    _refused(build_epub(files={"OEBPS/nav.xhtml": nav}), r"points at 'OEBPS/missing\.xhtml'")


def test_a_spine_file_missing_from_the_zip_is_refused() -> None:
    _refused(build_epub(files={"OEBPS/chapter2.xhtml": None}), r"spine lists 'OEBPS/chapter2\.xhtml'")


def test_a_book_with_no_toc_and_no_text_is_refused() -> None:
    data = build_epub(
        [], toc=False, cover=False, titlepage=False, copyright=False, contents=False, colophon=False
    )
    _refused(data, "no table of contents and no readable spine")


def test_a_package_path_outside_the_zip_is_refused() -> None:
    container = (
        b'<container xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
        b'<rootfile full-path="../../etc/passwd" media-type="application/oebps-package+xml"/></rootfiles>'
        b"</container>"
    )
    _refused(build_epub(files={"META-INF/container.xml": container}), "package document")


def test_damaged_files_only_ever_raise_script_error() -> None:
    """Byte flips and truncations anywhere: a readable book or a ScriptError, nothing else."""
    data = build_epub(compression=zipfile.ZIP_STORED)
    rng = random.Random(11)
    for _ in range(150):
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        try:
            cut = rng.randint(len(data) // 2, len(data)) if rng.random() < 0.2 else len(data)
            read_epub(bytes(damaged[:cut]))
        except ScriptError:
            pass


# --- no word lost, none doubled ----------------------------------------------------------------------

_WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=7)
_PARAGRAPHS = st.lists(st.lists(_WORDS, min_size=1, max_size=5).map(" ".join), max_size=3)


@st.composite
def _sections(draw: st.DrawFn, depth: int = 0) -> Section:
    title = "Part " + " ".join(draw(st.lists(_WORDS, min_size=1, max_size=2)))
    children = draw(st.lists(_sections(depth + 1), max_size=2)) if depth < 2 else []
    return Section(title, draw(_PARAGRAPHS), children=children)


@st.composite
def _books(draw: st.DrawFn) -> list[Section]:
    """Top-level sections; some share a file with the one before, some run on into a second file."""
    sections: list[Section] = []
    for number, section in enumerate(draw(st.lists(_sections(), min_size=1, max_size=5))):
        share = bool(sections) and sections[-1].file is not None and not sections[-1].continued
        if share and draw(st.booleans()):
            sections.append(replace(section, file=sections[-1].file))
        elif draw(st.booleans()):
            sections.append(replace(section, file=f"group{number}.xhtml"))
        else:
            sections.append(replace(section, continued=draw(_PARAGRAPHS)))
    return sections


def _words_of(section: Section) -> list[str]:
    words = section.title.split() + " ".join(section.paragraphs).split()
    for child in section.children:
        words += _words_of(child)
    return words + " ".join(section.continued).split()


def _titles_of(section: Section) -> list[str]:
    return [section.title, *(title for child in section.children for title in _titles_of(child))]


@settings(max_examples=60, deadline=None)
@given(_books(), st.sampled_from([2, 3]), st.booleans())
def test_every_word_of_every_chapter_is_read_once_in_order(
    sections: list[Section], version: Version, nested: bool
) -> None:
    events = read_epub(build_epub(sections, version=version, nested=nested)).events
    words = [word for event in events if isinstance(event, Block) for word in event.text.split()]
    assert words == [word for section in sections for word in _words_of(section)]
    assert _titles(events) == [title for section in sections for title in _titles_of(section)]
