"""A read-along book: an EPUB 3 with media overlays, from a finished job's audio and manifest (pure).

The audio is the book cut at the manifest's chapter marks, one file per chapter, so a sentence's clip is
its manifest start and end minus its chapter's start. The text is the EPUB script's own files with an id
on every sentence found (:mod:`worker.script.epub_marks`), or one generated XHTML page per chapter for
other scripts. There is one SMIL per content document with spoken sentences (EPUB 3 lets a document
belong to one overlay only); every sentence of the manifest has its ``par``, in order, and clips never
overlap. User text goes through lxml (escaped); the ZIP is written an entry at a time, audio streamed from
disk. See docs/api.md, "The read-along EPUB".
"""

from __future__ import annotations

import io
import logging
import os
import posixpath
import re
import subprocess
import tempfile
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
from lxml import etree

from worker.audio.errors import StitchError
from worker.audio.ffmpeg import FfmpegEncoder, decode_command
from worker.script.epub_marks import Located, features, locate, mark_document, parse_document
from worker.script.epub_package import CONTAINER, opf_path, read_package
from worker.script.epub_xml import XHTML, children, local_name, parse_xml
from worker.script.epub_zip import Archive, EpubLimits
from worker.script.errors import ScriptError
from worker.storage.atomic import atomic_file

log = logging.getLogger(__name__)

AudioFormat = Literal["mp3", "m4a"]

ACTIVE_CLASS = "tome-active"
_OPF = "http://www.idpf.org/2007/opf"
_DC = "http://purl.org/dc/elements/1.1/"
_OPS = "http://www.idpf.org/2007/ops"
_SMIL = "http://www.w3.org/ns/SMIL"
_CONTAINER_NS = "urn:oasis:names:tc:opendocument:xmlns:container"
_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_CSS = f".{ACTIVE_CLASS} {{ background-color: #fde68a; color: inherit; }}\n".encode()
_BLOCK = 1 << 15  # samples per read of the decoded book
_DIR = "tome"
_DOCUMENT_TYPES = frozenset(
    {"application/xhtml+xml", "text/html", ""}
)  # folder (beside the OPF) of what the read-along adds to an EPUB


def _ns(mapping: dict[str | None, str]) -> Any:
    """A namespace map for lxml (whose stubs do not take the default namespace's ``None`` key)."""
    return mapping


def audio_format(job_format: str) -> AudioFormat:
    """The read-along's audio: AAC in MP4 for a job in m4a or m4b, MP3 otherwise."""
    return "m4a" if job_format in ("m4a", "m4b") else "mp3"


@dataclass(frozen=True)
class Spoken:
    """A sentence of the manifest: its chapter, text as written, and times in the book (seconds)."""

    chapter: int
    text: str
    start: float
    end: float
    chunk: int


@dataclass(frozen=True)
class ChapterAudio:
    index: int
    title: str
    start: float
    path: Path
    samples: int
    rate: int

    @property
    def millis(self) -> int:
        return round(self.samples * 1000 / self.rate)


@dataclass(frozen=True)
class BookMeta:
    identifier: str
    title: str
    language: str
    author: str | None = None


@dataclass
class _Par:
    doc: str  # zip path of the text document
    ident: str
    chapter: int
    begin: int  # milliseconds in the chapter's audio
    end: int


@dataclass
class _Overlay:
    doc: str
    pars: list[_Par] = field(default_factory=list)
    millis: int = 0


def spoken_sentences(manifest: Mapping[str, Any]) -> list[Spoken]:
    """The manifest's sentences in reading order."""
    return [
        Spoken(int(chunk["chapter"]), str(s["text"]), float(s["start"]), float(s["end"]), int(chunk["seq"]))
        for chunk in manifest["chunks"]
        for s in chunk["sentences"]
    ]


def build(
    out: Path,
    manifest: Mapping[str, Any],
    book_audio: Path,
    *,
    fmt: AudioFormat,
    sample_rate: int,
    bitrate_kbps: int,
    meta: BookMeta,
    epub: bytes | None = None,
) -> int:
    """Write the read-along EPUB to ``out`` (atomically); returns its size in bytes."""
    sentences = spoken_sentences(manifest)
    if not sentences:
        raise ValueError("the manifest has no sentences")
    titles = {
        int(c["index"]): str(c.get("title") or f"Chapter {n}") for n, c in enumerate(manifest["chapters"], 1)
    }
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".readalong-") as scratch:
        audio = cut_chapters(book_audio, manifest, sentences, Path(scratch), fmt, sample_rate, bitrate_kbps)
        with atomic_file(out) as tmp, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as z:
            z.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip", compress_type=zipfile.ZIP_STORED)
            source = _open_source(epub, sentences) if epub is not None else None
            if source is not None and source.placed:
                source.write(z, sentences, audio, meta)
            else:
                _write_generated(z, sentences, audio, titles, meta)
    return os.path.getsize(out)


def cut_chapters(
    book: Path,
    manifest: Mapping[str, Any],
    sentences: Sequence[Spoken],
    folder: Path,
    fmt: AudioFormat,
    rate: int,
    bitrate_kbps: int,
) -> dict[int, ChapterAudio]:
    """The book decoded once (mono at ``rate``) and each chapter with sentences cut from it at its marks
    into its own file, in one pass (memory does not grow with the book)."""
    spoken = {s.chapter for s in sentences}
    marks = sorted(
        (float(c["start"]), float(c["end"]), int(c["index"]), str(c.get("title") or ""))
        for c in manifest["chapters"]
        if int(c["index"]) in spoken
    )
    listed = {m[2] for m in marks}
    stretch: dict[int, tuple[float, float]] = {}
    for s in sentences:  # a chapter the manifest does not list: its sentences' stretch
        if s.chapter not in listed:
            begin, _ = stretch.get(s.chapter, (s.start, s.end))
            stretch[s.chapter] = (begin, s.end)
    marks = sorted([*marks, *((a, b, index, "") for index, (a, b) in stretch.items())])
    cmd = decode_command(str(book), ["-vn", "-ac", "1", "-ar", str(rate)])
    out: dict[int, ChapterAudio] = {}
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    try:
        position = 0  # samples of the book read so far
        pending = np.zeros(0, dtype="<i2")
        blocks = _blocks(proc.stdout)
        for n, (start, end, index, title) in enumerate(marks, start=1):
            first, last = round(start * rate), max(round(start * rate), round(end * rate))
            path = folder / f"chapter-{n:03d}.{fmt}"
            with FfmpegEncoder(path, fmt, rate, bitrate_kbps) as encoder:
                while position < last:
                    if pending.size == 0:
                        pending = next(blocks, np.zeros(0, dtype="<i2"))
                        if pending.size == 0:
                            break
                    take = pending[: last - position]
                    lo = max(0, first - position)
                    if lo < take.size:
                        encoder.write(take[lo:])
                    position += take.size
                    pending = pending[take.size :]
                written = encoder.samples_written
            if written < (last - first) - rate // 10:  # more than a rounding short: the book is cut
                raise StitchError(f"the book decodes shorter than its manifest ({position} samples)")
            out[index] = ChapterAudio(index, title, start, path, max(written, 1), rate)
    finally:
        proc.stdout.close()
        proc.kill()
        proc.wait()
    return out


def _blocks(stream: Any) -> Iterator[np.ndarray]:
    carry = b""
    while data := stream.read(_BLOCK * 2):
        data = carry + data
        cut = len(data) - len(data) % 2
        carry = data[cut:]
        yield np.frombuffer(data[:cut], dtype="<i2")


def _clips(sentences: Sequence[Spoken], audio: Mapping[int, ChapterAudio]) -> list[tuple[int, int]]:
    """Each sentence's clip in its chapter's file, in milliseconds: in order, never overlapping."""
    clips: list[tuple[int, int]] = []
    previous: tuple[int, int] | None = None  # (chapter, end) of the sentence before
    for s in sentences:
        chapter = audio[s.chapter]
        length = chapter.millis
        begin = min(length, max(0, round((s.start - chapter.start) * 1000)))
        end = min(length, max(begin, round((s.end - chapter.start) * 1000)))
        if previous is not None and previous[0] == s.chapter and begin < previous[1]:
            begin = min(previous[1], end)
        clips.append((begin, end))
        previous = (s.chapter, end)
    return clips


def clock(millis: int) -> str:
    """A SMIL clock value, ``H:MM:SS.mmm``."""
    seconds, ms = divmod(int(millis), 1000)
    minutes, sec = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    return f"{hours}:{minute:02d}:{sec:02d}.{ms:03d}"


def _xml_text(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def _overlays(pars: Sequence[_Par], audio: Mapping[int, ChapterAudio]) -> list[_Overlay]:
    """The pars grouped by document (in order of first appearance), each overlay's duration its
    stretch of each chapter's audio (see the module docstring)."""
    overlays: dict[str, _Overlay] = {}
    for par in pars:
        overlays.setdefault(par.doc, _Overlay(par.doc)).pars.append(par)
    by_chapter: dict[int, list[tuple[int, _Overlay]]] = {}
    for overlay in overlays.values():
        seen: set[int] = set()
        for par in overlay.pars:
            if par.chapter not in seen:
                seen.add(par.chapter)
                by_chapter.setdefault(par.chapter, []).append((par.begin, overlay))
    for chapter, starts in by_chapter.items():
        starts.sort(key=lambda x: x[0])
        length = audio[chapter].millis
        for n, (_, overlay) in enumerate(starts):
            begin = 0 if n == 0 else starts[n][0]
            end = length if n == len(starts) - 1 else starts[n + 1][0]
            overlay.millis += max(0, end - begin)
    return list(overlays.values())


def _smil(overlay: _Overlay, smil_path: str, audio_paths: Mapping[int, str]) -> bytes:
    root = etree.Element(f"{{{_SMIL}}}smil", nsmap=_ns({None: _SMIL, "epub": _OPS}))
    root.set("version", "3.0")
    body = etree.SubElement(root, f"{{{_SMIL}}}body")
    doc_href = _relative(smil_path, overlay.doc)
    for n, par in enumerate(overlay.pars, start=1):
        p = etree.SubElement(body, f"{{{_SMIL}}}par")
        p.set("id", f"par-{n}")
        etree.SubElement(p, f"{{{_SMIL}}}text").set("src", f"{doc_href}#{par.ident}")
        a = etree.SubElement(p, f"{{{_SMIL}}}audio")
        a.set("src", _relative(smil_path, audio_paths[par.chapter]))
        a.set("clipBegin", f"{par.begin / 1000:.3f}s")
        a.set("clipEnd", f"{par.end / 1000:.3f}s")
    return etree.tostring(root, encoding="utf-8", xml_declaration=True)


def _relative(from_file: str, to_file: str) -> str:
    return posixpath.relpath(to_file, posixpath.dirname(from_file) or ".")


def _container(opf: str) -> bytes:
    root = etree.Element(f"{{{_CONTAINER_NS}}}container", nsmap=_ns({None: _CONTAINER_NS}))
    root.set("version", "1.0")
    rootfiles = etree.SubElement(root, f"{{{_CONTAINER_NS}}}rootfiles")
    rootfile = etree.SubElement(rootfiles, f"{{{_CONTAINER_NS}}}rootfile")
    rootfile.set("full-path", opf)
    rootfile.set("media-type", "application/oebps-package+xml")
    return etree.tostring(root, encoding="utf-8", xml_declaration=True)


def _xhtml(title: str, language: str, css_href: str) -> tuple[etree._Element, etree._Element]:
    html = etree.Element(f"{{{XHTML}}}html", nsmap=_ns({None: XHTML, "epub": _OPS}))
    html.set("{http://www.w3.org/XML/1998/namespace}lang", language)
    html.set("lang", language)
    head = etree.SubElement(html, f"{{{XHTML}}}head")
    etree.SubElement(head, f"{{{XHTML}}}meta").set("charset", "utf-8")
    etree.SubElement(head, f"{{{XHTML}}}title").text = _xml_text(title)
    link = etree.SubElement(head, f"{{{XHTML}}}link")
    link.set("rel", "stylesheet")
    link.set("type", "text/css")
    link.set("href", css_href)
    return html, etree.SubElement(html, f"{{{XHTML}}}body")


def _serialize(html: etree._Element) -> bytes:
    return etree.tostring(html, encoding="utf-8", xml_declaration=True, doctype="<!DOCTYPE html>")


def _nav(path: str, meta: BookMeta, entries: Sequence[tuple[str, str]]) -> bytes:
    html, body = _xhtml(meta.title, meta.language, _relative(path, f"{posixpath.dirname(path)}/tome.css"))
    nav = etree.SubElement(body, f"{{{XHTML}}}nav")
    nav.set(f"{{{_OPS}}}type", "toc")
    nav.set("id", "toc")
    etree.SubElement(nav, f"{{{XHTML}}}h1").text = _xml_text(meta.title)
    ol = etree.SubElement(nav, f"{{{XHTML}}}ol")
    for title, href in entries:
        a = etree.SubElement(etree.SubElement(ol, f"{{{XHTML}}}li"), f"{{{XHTML}}}a")
        a.set("href", _relative(path, href))
        a.text = _xml_text(title) or "-"
    return _serialize(html)


def _write_audio_and_overlays(
    z: zipfile.ZipFile,
    folder: str,
    pars: Sequence[_Par],
    audio: Mapping[int, ChapterAudio],
    fmt_of: str,
) -> tuple[list[tuple[str, str, str, str | None]], dict[str, str], dict[str, int]]:
    """Write the chapter audio files and the SMILs under ``folder``; the manifest items they need
    (id, zip path, media type, properties), each document's overlay id and each overlay's duration."""
    items: list[tuple[str, str, str, str | None]] = []
    audio_paths: dict[int, str] = {}
    mime = "audio/mp4" if fmt_of == "m4a" else "audio/mpeg"
    for n, chapter in enumerate(sorted(audio.values(), key=lambda c: c.start), start=1):
        name = f"{folder}/audio/chapter-{n:03d}.{fmt_of}"
        z.write(chapter.path, name, compress_type=zipfile.ZIP_STORED)  # copied a block at a time
        audio_paths[chapter.index] = name
        items.append((f"tome-audio-{n}", name, mime, None))
    overlay_of: dict[str, str] = {}
    durations: dict[str, int] = {}
    for n, overlay in enumerate(_overlays(pars, audio), start=1):
        name = f"{folder}/overlays/overlay-{n:03d}.smil"
        z.writestr(name, _smil(overlay, name, audio_paths))
        ident = f"tome-overlay-{n}"
        items.append((ident, name, "application/smil+xml", None))
        overlay_of[overlay.doc] = ident
        durations[ident] = overlay.millis
    return items, overlay_of, durations


def _media_meta(metadata: etree._Element, durations: Mapping[str, int], modified: str) -> None:
    def meta(prop: str, value: str, refines: str | None = None) -> None:
        m = etree.SubElement(metadata, f"{{{_OPF}}}meta")
        m.set("property", prop)
        if refines:
            m.set("refines", f"#{refines}")
        m.text = value

    meta("dcterms:modified", modified)
    for ident, millis in durations.items():
        meta("media:duration", clock(millis), ident)
    meta("media:duration", clock(sum(durations.values())))
    meta("media:active-class", ACTIVE_CLASS)


def _modified() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _write_generated(
    z: zipfile.ZipFile,
    sentences: Sequence[Spoken],
    audio: Mapping[int, ChapterAudio],
    titles: Mapping[int, str],
    meta: BookMeta,
) -> None:
    """A book of generated XHTML: a file per chapter, a paragraph per chunk, a span per sentence."""
    z.writestr("META-INF/container.xml", _container("OEBPS/package.opf"))
    clips = _clips(sentences, audio)
    pars: list[_Par] = []
    docs: list[tuple[str, str]] = []  # (title, zip path) in order
    by_chapter: dict[int, list[tuple[int, Spoken]]] = {}
    for i, s in enumerate(sentences):
        by_chapter.setdefault(s.chapter, []).append((i, s))
    order = sorted(by_chapter, key=lambda c: audio[c].start)
    for n, chapter in enumerate(order, start=1):
        path = f"OEBPS/text/chapter-{n:03d}.xhtml"
        title = titles.get(chapter) or f"Chapter {n}"
        html = _generated_chapter(title, meta.language, by_chapter[chapter])
        pars += [_Par(path, f"s{i + 1}", chapter, *clips[i]) for i, _ in by_chapter[chapter]]
        z.writestr(path, _serialize(html))
        docs.append((title, path))
    z.writestr("OEBPS/tome.css", _CSS)
    z.writestr("OEBPS/nav.xhtml", _nav("OEBPS/nav.xhtml", meta, docs))
    items, overlay_of, durations = _write_audio_and_overlays(z, "OEBPS/tome", pars, audio, _fmt(audio))
    root = _generated_package(meta, docs, items, overlay_of, durations)
    z.writestr("OEBPS/package.opf", etree.tostring(root, encoding="utf-8", xml_declaration=True))


def _generated_chapter(title: str, language: str, mine: Sequence[tuple[int, Spoken]]) -> etree._Element:
    """One chapter's XHTML: its title as a heading (unless its first chunk reads it), a paragraph per
    chunk, a span ``s<N>`` per sentence (N: the sentence's place in the book, from 1)."""
    html, body = _xhtml(title, language, "../tome.css")
    section = etree.SubElement(body, f"{{{XHTML}}}section")
    section.set(f"{{{_OPS}}}type", "chapter")
    first_chunk = [s for _, s in mine if s.chunk == mine[0][1].chunk]
    if " ".join(s.text for s in first_chunk).strip() != title.strip():
        etree.SubElement(section, f"{{{XHTML}}}h1").text = _xml_text(title)
    paragraph: etree._Element | None = None
    chunk = None
    for i, s in mine:
        if paragraph is None or s.chunk != chunk:
            tag = "h1" if len(section) == 0 else "p"  # no heading yet: the first chunk is the title
            paragraph = etree.SubElement(section, f"{{{XHTML}}}{tag}")
            chunk = s.chunk
        elif len(paragraph):
            paragraph[-1].tail = " "
        span = etree.SubElement(paragraph, f"{{{XHTML}}}span")
        span.set("id", f"s{i + 1}")
        span.text = _xml_text(s.text)
    return html


def _generated_package(
    meta: BookMeta,
    docs: Sequence[tuple[str, str]],
    items: Sequence[tuple[str, str, str, str | None]],
    overlay_of: Mapping[str, str],
    durations: Any,
) -> etree._Element:
    """The generated book's package document: metadata, manifest (chapters with their overlays, the
    audio and SMIL ``items``) and spine."""
    root = etree.Element(f"{{{_OPF}}}package", nsmap=_ns({None: _OPF, "dc": _DC}))
    root.set("version", "3.0")
    root.set("unique-identifier", "book-id")
    root.set("{http://www.w3.org/XML/1998/namespace}lang", meta.language)
    metadata = etree.SubElement(root, f"{{{_OPF}}}metadata")
    ident = etree.SubElement(metadata, f"{{{_DC}}}identifier")
    ident.set("id", "book-id")
    ident.text = meta.identifier
    etree.SubElement(metadata, f"{{{_DC}}}title").text = _xml_text(meta.title) or "Untitled"
    etree.SubElement(metadata, f"{{{_DC}}}language").text = meta.language
    if meta.author:
        etree.SubElement(metadata, f"{{{_DC}}}creator").text = _xml_text(meta.author)
    _media_meta(metadata, durations, _modified())
    manifest = etree.SubElement(root, f"{{{_OPF}}}manifest")

    def item(ident: str, path: str, mime: str, props: str | None = None, overlay: str | None = None) -> None:
        el = etree.SubElement(manifest, f"{{{_OPF}}}item")
        el.set("id", ident)
        el.set("href", _relative("OEBPS/package.opf", path))
        el.set("media-type", mime)
        if props:
            el.set("properties", props)
        if overlay:
            el.set("media-overlay", overlay)

    item("nav", "OEBPS/nav.xhtml", "application/xhtml+xml", "nav")
    item("css", "OEBPS/tome.css", "text/css")
    for n, (_, path) in enumerate(docs, start=1):
        item(f"chapter-{n}", path, "application/xhtml+xml", overlay=overlay_of.get(path))
    for ident_, path, mime, props in items:
        item(ident_, path, mime, props)
    spine = etree.SubElement(root, f"{{{_OPF}}}spine")
    for n in range(1, len(docs) + 1):
        etree.SubElement(spine, f"{{{_OPF}}}itemref").set("idref", f"chapter-{n}")
    return root


def _fmt(audio: Mapping[int, ChapterAudio]) -> str:
    return next(iter(audio.values())).path.suffix.lstrip(".")


@dataclass
class _EpubSource:
    """The script's EPUB, its package and where the spoken sentences are in its text."""

    archive: Archive
    zipped: zipfile.ZipFile
    opf: str
    docs: list[str]  # spine XHTML documents, in order
    located: list[Located | None]

    @classmethod
    def open(cls, data: bytes, sentences: Sequence[Spoken]) -> _EpubSource:
        archive = Archive(data, EpubLimits())
        opf = opf_path(archive)
        package = read_package(archive, opf)
        docs = [s.path for s in package.spine if s.media_type in _DOCUMENT_TYPES and s.path in archive]
        # the contents page repeats every title: a heading is looked for in the chapters, not there
        searched = [d for d in docs if d != package.nav] or docs
        located = locate([(d, archive.read(d)) for d in searched], [s.text for s in sentences])
        return cls(archive, zipfile.ZipFile(io.BytesIO(data)), opf, docs, located)

    @property
    def placed(self) -> bool:
        return any(x is not None for x in self.located)

    def write(
        self,
        z: zipfile.ZipFile,
        sentences: Sequence[Spoken],
        audio: Mapping[int, ChapterAudio],
        meta: BookMeta,
    ) -> None:
        folder = posixpath.join(posixpath.dirname(self.opf), _DIR) if posixpath.dirname(self.opf) else _DIR
        css = f"{folder}/tome.css"
        ids: list[tuple[str, str] | None] = []  # (doc, id) of each sentence
        marks: dict[str, list[tuple[Located, str]]] = {}
        for n, loc in enumerate(self.located, start=1):
            if loc is None:
                ids.append(None)
                continue
            ident = f"tome-s{n}"
            marks.setdefault(loc.doc, []).append((loc, ident))
            ids.append((loc.doc, ident))
        _fill_gaps(ids)
        clips = _clips(sentences, audio)
        pars = [
            _Par(where[0], where[1], s.chapter, *clip)
            for s, where, clip in zip(sentences, ids, clips, strict=True)
            if where is not None
        ]
        pars_of: dict[str, list[_Par]] = {}
        for par in pars:
            pars_of.setdefault(par.doc, []).append(par)
        z.writestr("META-INF/container.xml", _container(self.opf))
        props: dict[str, set[str]] = {}
        for doc in self.docs:
            root = parse_document(self.archive.read(doc), doc)
            taken = {str(x.get("id")) for x in root.iter() if isinstance(x.tag, str) and x.get("id")}
            renamed = {ident: _unique(ident, taken) for _, ident in marks.get(doc, [])}
            doc_marks = [(loc, renamed[ident]) for loc, ident in marks.get(doc, [])]
            for par in pars_of.get(doc, []):
                par.ident = renamed.get(par.ident, par.ident)
            mark_document(root, doc, doc_marks, _relative(doc, css))
            props[doc] = features(root)
            z.writestr(doc, _serialize(root))
        written = {"mimetype", CONTAINER, self.opf, *self.docs}
        for info in self.zipped.infolist():
            if info.is_dir() or info.filename in written or info.filename.startswith(f"{folder}/"):
                continue
            with self.zipped.open(info) as src, z.open(info.filename, "w", force_zip64=True) as dst:
                while block := src.read(1 << 16):
                    dst.write(block)
        z.writestr(css, _CSS)
        items, overlay_of, durations = _write_audio_and_overlays(z, folder, pars, audio, _fmt(audio))
        opf_root = parse_xml(self.archive.read(self.opf), self.opf, "OPF")
        nav_needed = not any("nav" in (i.get("properties") or "").split() for i in _items(opf_root))
        if nav_needed:
            nav = f"{folder}/nav.xhtml"
            z.writestr(nav, _nav(nav, meta, [(posixpath.basename(d), d) for d in self.docs]))
            items.append(("tome-nav", nav, "application/xhtml+xml", "nav"))
        items.append(("tome-css", css, "text/css", None))
        z.writestr(self.opf, _epub3_package(opf_root, self.opf, items, overlay_of, durations, props, meta))


def _open_source(epub: bytes, sentences: Sequence[Spoken]) -> _EpubSource | None:
    """The script's EPUB read again (it was read when the job was accepted); None, and the text
    generated instead, if it cannot be."""
    try:
        return _EpubSource.open(epub, sentences)
    except ScriptError as exc:
        log.warning("read-along: the EPUB's own text cannot be used (%s); generated text instead", exc)
        return None


def _unique(ident: str, taken: set[str]) -> str:
    candidate, n = ident, 1
    while candidate in taken:
        n += 1
        candidate = f"{ident}-{n}"
    return candidate


def _fill_gaps(ids: list[tuple[str, str] | None]) -> None:
    """Unplaced sentences point at the placed one before them (before any: the one after)."""
    last: tuple[str, str] | None = None
    for n, where in enumerate(ids):
        if where is None:
            ids[n] = last
        else:
            last = where
    following: tuple[str, str] | None = None
    for n in range(len(ids) - 1, -1, -1):
        if ids[n] is None:
            ids[n] = following
        else:
            following = ids[n]


def _items(opf_root: etree._Element) -> list[etree._Element]:
    return [i for m in children(opf_root, "manifest") for i in children(m, "item")]


def _epub3_package(
    root: etree._Element,
    opf: str,
    items: Sequence[tuple[str, str, str, str | None]],
    overlay_of: Mapping[str, str],
    durations: Mapping[str, int],
    props: Mapping[str, set[str]],
    meta: BookMeta,
) -> bytes:
    """The book's OPF as an EPUB 3 package with the read-along's items, overlays and durations."""
    root.set("version", "3.0")
    metadata = next(iter(children(root, "metadata")), None)
    if metadata is None:
        metadata = etree.Element(f"{{{_OPF}}}metadata")
        root.insert(0, metadata)
    for node in list(metadata):
        prop = node.get("property") or ""
        if local_name(node) == "meta" and (prop == "dcterms:modified" or prop.startswith("media:")):
            metadata.remove(node)
            continue
        for attr in list(node.attrib):
            if str(attr).startswith(f"{{{_OPF}}}"):  # EPUB 2's opf:role, opf:file-as, opf:scheme ...
                del node.attrib[attr]
    if not children(metadata, "language"):
        etree.SubElement(metadata, f"{{{_DC}}}language").text = meta.language
    if not children(metadata, "title"):
        etree.SubElement(metadata, f"{{{_DC}}}title").text = _xml_text(meta.title) or "Untitled"
    unique = root.get("unique-identifier")
    identifiers = children(metadata, "identifier")
    if not identifiers or not any(i.get("id") == unique for i in identifiers):
        ident = identifiers[0] if identifiers else etree.SubElement(metadata, f"{{{_DC}}}identifier")
        ident.set("id", ident.get("id") or "tome-book-id")
        ident.text = ident.text or meta.identifier
        root.set("unique-identifier", str(ident.get("id")))
    _media_meta(metadata, durations, _modified())
    manifest = next(iter(children(root, "manifest")))
    base = posixpath.dirname(opf)
    for item in _items(root):
        path = posixpath.normpath(posixpath.join(base, item.get("href") or ""))
        if path in overlay_of:
            item.set("media-overlay", overlay_of[path])
        if path in props:
            kept = set((item.get("properties") or "").split()) - {"svg", "mathml", "scripted"}
            merged = sorted(kept | props[path])
            if merged:
                item.set("properties", " ".join(merged))
            elif "properties" in item.attrib:
                del item.attrib["properties"]
    for item_id, added, mime, extra in items:
        el = etree.SubElement(manifest, f"{{{_OPF}}}item")
        el.set("id", item_id)
        el.set("href", _relative(opf, added))
        el.set("media-type", mime)
        if extra:
            el.set("properties", extra)
    return etree.tostring(root, encoding="utf-8", xml_declaration=True)


__all__ = ["ACTIVE_CLASS", "BookMeta", "audio_format", "build", "clock", "spoken_sentences"]
