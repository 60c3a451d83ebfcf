"""A job's read-along EPUB (``output.readalong``), built at the stitch beside the book's other files.

The job's options say whether it asked (``readalong``) and, for an EPUB script, where the book was kept
when the job was accepted (its folder, like the cover): the read-along's text is that book's own XHTML.
The audio and the sentence times come from what the stitch has just written: the book and its manifest
(worker.audio.readalong).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from worker.audio.readalong import BookMeta, audio_format, build
from worker.jobs.deliver import Artefact
from worker.storage.backend import Storage

log = logging.getLogger(__name__)

NAME = "book-readalong.epub"
KIND = "readalong"


def wanted(options: Mapping[str, Any]) -> bool:
    """Whether the job asked for a read-along EPUB."""
    stored = options.get("readalong")
    return isinstance(stored, dict) and stored.get("enabled") is True


def stored_options(enabled: bool, source: str | None) -> dict[str, Any]:
    """What a job records about its read-along: whether it asked, and where its EPUB script is kept."""
    return {"enabled": enabled, "source": source}


def source_path(options: Mapping[str, Any]) -> str | None:
    stored = options.get("readalong")
    if not isinstance(stored, dict) or not stored.get("source"):
        return None
    return str(stored["source"])


def build_file(
    storage: Storage,
    job_id: uuid.UUID,
    options: Mapping[str, Any],
    files: Sequence[Artefact],
    book: Path,
    file_path: Callable[[str], Path],
    *,
    title: str,
    job_format: str,
    sample_rate: int,
    bitrate_kbps: int,
) -> Artefact:
    """The read-along EPUB of a job whose book was just written to ``book`` with ``files`` beside it."""
    manifest_file = next(f for f in files if f.kind == "manifest")
    manifest = json.loads(Path(manifest_file.path).read_text(encoding="utf-8"))
    source = source_path(options)
    epub = b"".join(storage.open_range(source, None, None).body) if source else None
    metadata = options.get("metadata") or {}
    meta = BookMeta(
        identifier=f"urn:uuid:{job_id}",
        title=title,
        language=str(metadata.get("language") or options.get("language") or "en"),
        author=metadata.get("author"),
    )
    path = file_path(NAME)
    path.parent.mkdir(parents=True, exist_ok=True)
    size = build(
        path,
        manifest,
        book,
        fmt=audio_format(job_format),
        sample_rate=sample_rate,
        bitrate_kbps=min(bitrate_kbps, 320),
        meta=meta,
        epub=epub,
    )
    log.info("read-along EPUB: %d bytes", size)
    return Artefact(NAME, KIND, "epub", str(path), size, title=title, duration=manifest.get("duration"))
