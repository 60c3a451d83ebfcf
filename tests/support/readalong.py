"""Checks on a read-along EPUB, read with zipfile and lxml (not Tome's code), against the job's manifest,
and epubcheck (Debian's package; ``.ci/run`` installs it)."""

from __future__ import annotations

import io
import os
import posixpath
import re
import shutil
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from lxml import etree

OPF = "{http://www.idpf.org/2007/opf}"
SMIL = "{http://www.w3.org/ns/SMIL}"
TOLERANCE = 0.005  # seconds: a clip against the manifest


@dataclass(frozen=True)
class Par:
    doc: str  # zip path of the text document
    fragment: str
    audio: str  # zip path of the audio file
    begin: float
    end: float


# One short JVM run a book: the quick compiler alone and the serial collector (not C2's compiler threads
# and the parallel collector's) take half the CPU for the same report (docs/benchmarks.md, "Test suite time").
JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def epubcheck_command() -> list[str] | None:
    jar = Path("/usr/share/java/epubcheck.jar")
    if shutil.which("java") and jar.is_file():
        return ["java", *JVM_OPTIONS, "-jar", str(jar)]
    found = shutil.which("epubcheck")
    return [found] if found else None


def epubcheck(path: Path, tolerated: tuple[str, ...] = ()) -> str:
    """epubcheck's report on ``path``; fails the test on any error or fatal but those in the files named
    in ``tolerated`` (a source book's own faults, copied as they were). Skips where epubcheck is missing,
    except under CI, which installs it."""
    command = epubcheck_command()
    if command is None:
        if os.environ.get("TOME_TEST_REQUIRE_SERVICES") == "1":
            pytest.fail("epubcheck is not installed (apt-get install epubcheck)")
        pytest.skip("epubcheck is not installed (apt-get install epubcheck)")
    done = subprocess.run([*command, str(path)], capture_output=True, text=True, timeout=300, check=False)
    report = done.stdout + done.stderr
    counts = re.search(r"Messages: (\d+) fatals? / (\d+) errors?", report)
    assert counts is not None, report
    errors = [line for line in report.splitlines() if line.startswith(("ERROR", "FATAL"))]
    assert len(errors) == int(counts.group(1)) + int(counts.group(2)), report
    assert all(any(f"/{name}(" in line for name in tolerated) for line in errors), report
    return report


def _clock(value: str) -> float:
    if value.endswith("ms"):
        return float(value[:-2]) / 1000
    if value.endswith("s"):
        return float(value[:-1])
    parts = [float(p) for p in value.split(":")]
    seconds = 0.0
    for p in parts:
        seconds = seconds * 60 + p
    return seconds


def _attr(element: etree._Element | None, name: str) -> str:
    """An attribute the EPUB must have (the test fails where it is missing)."""
    assert element is not None, name
    value = element.get(name)
    assert value is not None, (element.tag, name)
    return str(value)


def read_epub(data: bytes) -> tuple[zipfile.ZipFile, str, etree._Element]:
    archive = zipfile.ZipFile(io.BytesIO(data))
    names = archive.namelist()
    assert names[0] == "mimetype"
    assert archive.getinfo("mimetype").compress_type == zipfile.ZIP_STORED
    assert archive.read("mimetype") == b"application/epub+zip"
    container = etree.fromstring(archive.read("META-INF/container.xml"))
    opf = _attr(container.find(".//{urn:oasis:names:tc:opendocument:xmlns:container}rootfile"), "full-path")
    return archive, opf, etree.fromstring(archive.read(opf))


def pars_in_order(data: bytes) -> tuple[list[Par], dict[str, float], float]:
    """Every par of every overlay in spine order, each overlay's media:duration, and the book's."""
    archive, opf, package = read_epub(data)
    base = posixpath.dirname(opf)
    items = {i.get("id"): i for i in package.iter(f"{OPF}item")}

    def where(item: etree._Element) -> str:
        return posixpath.normpath(posixpath.join(base, _attr(item, "href")))

    durations: dict[str, float] = {}
    total = None
    for meta in package.iter(f"{OPF}meta"):
        if meta.get("property") == "media:duration":
            if meta.get("refines"):
                durations[_attr(meta, "refines").lstrip("#")] = _clock(meta.text or "")
            else:
                total = _clock(meta.text or "")
    assert total is not None
    pars: list[Par] = []
    seen_overlays: set[str] = set()
    for ref in package.iter(f"{OPF}itemref"):
        item = items[ref.get("idref")]
        overlay = item.get("media-overlay")
        if not overlay or overlay in seen_overlays:
            continue
        seen_overlays.add(overlay)
        smil_path = where(items[overlay])
        smil = etree.fromstring(archive.read(smil_path))
        folder = posixpath.dirname(smil_path)
        for par in smil.iter(f"{SMIL}par"):
            text = _attr(par.find(f"{SMIL}text"), "src")
            audio = par.find(f"{SMIL}audio")
            doc, _, fragment = text.partition("#")
            pars.append(
                Par(
                    posixpath.normpath(posixpath.join(folder, doc)),
                    fragment,
                    posixpath.normpath(posixpath.join(folder, _attr(audio, "src"))),
                    _clock(_attr(audio, "clipBegin")),
                    _clock(_attr(audio, "clipEnd")),
                )
            )
    assert seen_overlays == set(durations), (seen_overlays, durations)
    return pars, durations, total


def check_against_manifest(data: bytes, manifest: dict[str, Any]) -> list[Par]:
    """Every sentence of the manifest has its par, in order; each clip is the sentence's start and end
    minus its chapter's start (within 5 ms), in its chapter's own audio file; clips in a file are in
    order and never overlap; every text target exists in its document; the durations add up."""
    archive, _, _ = read_epub(data)
    pars, durations, total = pars_in_order(data)
    sentences = [(c["chapter"], s) for c in manifest["chunks"] for s in c["sentences"]]
    assert len(pars) == len(sentences), (len(pars), len(sentences))
    starts = {c["index"]: c["start"] for c in manifest["chapters"]}
    audio_of: dict[int, str] = {}
    last_end: dict[str, float] = {}
    for par, (chapter, sentence) in zip(pars, sentences, strict=True):
        assert abs(par.begin - (sentence["start"] - starts[chapter])) <= TOLERANCE, (par, sentence)
        assert abs(par.end - (sentence["end"] - starts[chapter])) <= TOLERANCE, (par, sentence)
        assert par.begin <= par.end
        assert audio_of.setdefault(chapter, par.audio) == par.audio  # one file per chapter
        assert par.begin >= last_end.get(par.audio, 0.0) - 1e-9, par  # in order, no overlap
        last_end[par.audio] = par.end
    assert len(set(audio_of.values())) == len(audio_of)  # and a file of its own for each
    ids: dict[str, set[str]] = {}
    for par in pars:
        if par.doc not in ids:
            root = etree.fromstring(archive.read(par.doc))
            ids[par.doc] = {str(e.get("id")) for e in root.iter() if isinstance(e.tag, str) and e.get("id")}
        assert par.fragment in ids[par.doc], par
    assert abs(sum(durations.values()) - total) < 0.002, (durations, total)
    length = sum(manifest_chapter_length(manifest, c) for c in audio_of)
    assert abs(total - length) < 0.01 * len(audio_of), (total, length)
    return pars


def manifest_chapter_length(manifest: dict[str, Any], index: int) -> float:
    chapter = next(c for c in manifest["chapters"] if c["index"] == index)
    return float(chapter["end"] - chapter["start"])


def element_text(data: bytes, doc: str, ident: str) -> str:
    archive, _, _ = read_epub(data)
    root = etree.fromstring(archive.read(doc))
    found = [e for e in root.iter() if isinstance(e.tag, str) and e.get("id") == ident]
    assert len(found) == 1, (doc, ident)
    return "".join(str(t) for t in found[0].itertext())
