"""Stitching: once every chunk is done, exactly one worker wins running -> stitching and builds the
book and its files (worker.jobs.deliver: mastered, streamed through ffmpeg), published under its token."""

from __future__ import annotations

import contextlib
import logging
import uuid
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from models import Chunk, ChunkStatus, Job, JobChapter, JobStatus, unit_of_work, utcnow
from worker.audio import FORMATS, BookTags, Cover, Pauses, load_cover
from worker.audio.formats import check_format
from worker.audio.loudness import Levels
from worker.audio.presets import Delivery
from worker.jobs import actions, deliver, library, readalong, state
from worker.jobs.files import stored_files
from worker.runtime import Runtime
from worker.storage.backend import Storage, StoredFileMissing, folder_key, key_of
from worker.task_names import DELIVER_AUDIOBOOKSHELF, DELIVER_WEBHOOK, STITCH_JOB, Enqueue

log = logging.getLogger(__name__)


def maybe_begin_stitch(rt: Runtime, job_id: uuid.UUID, enqueue: Enqueue) -> bool:
    """Send the stitch if this call won running -> stitching (every chunk done)."""
    with unit_of_work(rt.sessions) as session:
        token = state.begin_stitch(
            session, job_id, timedelta(seconds=rt.settings.tasks.stitch_lease_seconds), utcnow()
        )
    if token is None:
        return False
    enqueue(STITCH_JOB, [str(job_id), token])
    return True


def stitch_job(rt: Runtime, job_id: uuid.UUID, token: str, enqueue: Enqueue) -> bool:
    """Build the book and its files (worker.jobs.deliver); only the current token may publish them."""
    loaded = _load(rt, job_id, token)
    if loaded is None:
        return False
    source, rows, builds = loaded
    if rows is None or builds is None:
        actions.fail(rt, job_id, "internal: stitching started before every chunk was done", enqueue)
        return False
    out = rt.layout.output(job_id, token, FORMATS[source.delivery.format].extension.lstrip("."))
    out.parent.mkdir(parents=True, exist_ok=True)
    built = _build(rt, job_id, token, source, rows, builds, out)
    if not _record(rt, job_id, token, source, out, built):
        _discard(rt, job_id, token, out)
        return False
    _keep_only(rt, job_id, source, {out, *(Path(f.path) for f in built.files), *(Path(r.path) for r in rows)})
    log.info(
        "succeeded, %.1f s of %s, %d bytes, %d more files",
        built.book.duration,
        source.delivery.format,
        built.book.bytes,
        len(built.files),
    )
    enqueue(DELIVER_WEBHOOK, [str(job_id)])
    if source.asks("audiobookshelf"):
        enqueue(DELIVER_AUDIOBOOKSHELF, [str(job_id)])
    return True


def _load(
    rt: Runtime, job_id: uuid.UUID, token: str
) -> tuple[DeliverySource, list[deliver.ChunkRow] | None, list[deliver.ChapterBuild] | None] | None:
    """What the stitch reads of a job that is stitching under ``token`` (None: not, or no longer): its
    delivery, its chunks (None: not all done) and its chapters' builds (None: not all built)."""
    with rt.sessions() as session:
        job = session.get(Job, job_id)
        if job is None or job.status != JobStatus.STITCHING or job.stitch_token != token:
            return None
        source = DeliverySource.of(job)
        rows = chunk_rows(session, job_id)
        chapter_rows = chapters_of(session, job_id)
    builds = [deliver.ChapterBuild.from_json(c.build) for c in chapter_rows if c.build is not None]
    return source, rows, builds if len(builds) == len(chapter_rows) else None


def _build(
    rt: Runtime,
    job_id: uuid.UUID,
    token: str,
    source: DeliverySource,
    rows: list[deliver.ChunkRow],
    builds: list[deliver.ChapterBuild],
    out: Path,
) -> deliver.Deliverables:
    """The book at ``out`` and its files (from the chapters' builds when there are some), the read-along
    and library ZIP when asked for, published; nothing of a failed attempt stays (the sweeper re-issues
    the stitch)."""
    delivery = source.delivery
    rate, pauses, info = rt.engine(source.engine).sample_rate, source.pauses, source.info(job_id, rt.storage)

    def files(name: str) -> Path:
        return rt.layout.job_file(job_id, token, name)

    try:
        if builds:
            built = deliver.build_from_chapters(
                builds, rows, delivery, out, files, sample_rate=rate, pauses=pauses, info=info
            )
        else:
            built = deliver.build(rows, delivery, out, files, sample_rate=rate, pauses=pauses, info=info)
        if readalong.wanted(source.options):
            along = readalong.build_file(
                rt.storage,
                job_id,
                source.options,
                built.files,
                out,
                files,
                title=source.title,
                job_format=delivery.format,
                sample_rate=delivery.sample_rate or rate,
                bitrate_kbps=delivery.bitrate_kbps,
            )
            built = replace(built, files=[*built.files, along])
        if source.asks("library_zip"):
            built = _with_library_zip(built, source, out, files(library.ZIP_NAME), info.cover)
        _publish(rt, out, built, rt.layout.job_files(job_id, token))
    except BaseException:
        _discard(rt, job_id, token, out)
        raise
    return built


def _record(
    rt: Runtime, job_id: uuid.UUID, token: str, source: DeliverySource, out: Path, built: deliver.Deliverables
) -> bool:
    """stitching -> succeeded under ``token``, with the book, its chapters and files (False: the token
    is no longer current)."""
    result = built.book
    chapters: list[dict[str, object]] = [
        {"index": m.index, "title": source.titles.get(m.index), "start": round(m.start, 3)}
        for m in result.chapters
    ]
    now = utcnow()
    with unit_of_work(rt.sessions) as session:
        return state.finish_stitch(
            session,
            job_id,
            token,
            output_path=str(out),
            output_bytes=result.bytes,
            duration=result.duration,
            chapters=chapters,
            now=now,
            expires_at=now + timedelta(seconds=rt.settings.storage.output_ttl_seconds),
            files=[f.to_json() for f in built.files],
            extra_bytes=_cover_bytes(rt.storage, source.options),
        )


def _discard(rt: Runtime, job_id: uuid.UUID, token: str, out: Path) -> None:
    """The book and files of an attempt that did not publish."""
    rt.storage.remove(out)
    rt.storage.remove_folder(rt.layout.job_files(job_id, token))


def _keep_only(rt: Runtime, job_id: uuid.UUID, source: DeliverySource, keep: set[Path]) -> None:
    """The job's folder holds only what it published, its chunks, its cover and its kept EPUB; on S3
    nothing of the job stays in scratch."""
    if cover_path := source.options.get("cover"):
        keep.add(Path(str(cover_path)))
    if epub_path := readalong.source_path(source.options):
        keep.add(Path(epub_path))
    _remove_orphans(rt.storage, rt.layout.job_dir(job_id), keep)
    rt.storage.release_folder(rt.layout.job_dir(job_id))


def _with_library_zip(
    built: deliver.Deliverables, source: DeliverySource, book: Path, out: Path, cover: Cover | None
) -> deliver.Deliverables:
    """The deliverables and the book in a library's layout (worker.jobs.library) as one ZIP."""
    ext = FORMATS[source.delivery.format].extension
    item = library.LibraryBook.of(source.title, source.options.get("metadata", {}))
    size = library.write_zip(item, book, ext, cover, out)
    zipped = deliver.Artefact(out.name, "bundle", "zip", str(out), size, title="/".join(item.folders))
    return deliver.Deliverables(built.book, [*built.files, zipped])


@dataclass(frozen=True)
class DeliverySource:
    """What delivering a job's files reads from its row (loaded in one session, used after it)."""

    options: dict[str, Any]
    titles: dict[int, str | None]
    title: str
    engine: str
    delivery: Delivery
    webhook: bool

    @classmethod
    def of(cls, job: Job) -> DeliverySource:
        options = dict(job.options)
        return cls(
            options=options,
            titles={int(c["index"]): c.get("title") for c in job.chapters},
            title=job.title,
            engine=job.engine,
            delivery=job_delivery(options, job.output_format),
            webhook=bool(job.webhook_url),
        )

    def asks(self, what: str) -> bool:
        """Whether the job's ``deliver`` asks for ``what`` (library_zip, audiobookshelf)."""
        return bool((self.options.get("deliver") or {}).get(what))

    @property
    def pauses(self) -> Pauses:
        return Pauses(**self.options.get("pauses", {}))

    def info(self, job_id: uuid.UUID, storage: Storage) -> deliver.BookInfo:
        return deliver.BookInfo(
            tags=BookTags(title=self.title, **library.tag_values(self.options.get("metadata", {}))),
            titles=self.titles,
            cover=_cover(storage, self.options),
            language=str(self.options.get("language") or "en"),
            seed=int(job_id.int % (1 << 31)),
            files=stored_files(storage),
        )


def chapters_of(session: Session, job_id: uuid.UUID) -> list[JobChapter]:
    """The job's chapter rows in book order (none for a job whose chapters are not built one by one)."""
    query = select(JobChapter).where(JobChapter.job_id == job_id).order_by(JobChapter.position)
    return list(session.scalars(query))


def chunk_rows(
    session: Session, job_id: uuid.UUID, chapter: int | None = None
) -> list[deliver.ChunkRow] | None:
    """The job's rendered chunks in order (those of ``chapter`` only, if given) as delivering needs
    them; None if one of them is not done."""
    query = (
        select(
            Chunk.seq,
            Chunk.audio_path,
            Chunk.pause_after,
            Chunk.pause_seconds,
            Chunk.chapter,
            Chunk.status,
            Chunk.levels,
            Chunk.text,
            Chunk.source_text,
            Chunk.voice_id,
            Chunk.words,
            Chunk.speaker,
        )
        .where(Chunk.job_id == job_id)
        .order_by(Chunk.seq)
    )
    if chapter is not None:
        query = query.where(Chunk.chapter == chapter)
    rows = session.execute(query).all()
    if not rows or any(r.status != ChunkStatus.DONE or not r.audio_path for r in rows):
        return None
    return [
        deliver.ChunkRow(
            seq=r.seq,
            chapter=r.chapter,
            path=str(r.audio_path),
            pause=r.pause_after if r.pause_seconds is None else r.pause_seconds,
            levels=None if r.levels is None else Levels.from_json(r.levels),
            written=r.source_text or r.text,
            spoken=r.text,
            voice=str(r.voice_id),
            words=r.words or [],
            speaker=r.speaker,
        )
        for r in rows
    ]


def job_delivery(options: dict[str, Any], fmt: str) -> Delivery:
    """The job's delivery as stored at submission; jobs from before presets get their format and
    bitrate, unmastered, as they were rendered then."""
    stored = options.get("delivery")
    if isinstance(stored, dict):
        return Delivery.from_json(stored)
    return Delivery(
        format=check_format(fmt),
        bitrate_kbps=int(options.get("bitrate_kbps", 128)),
        mastering=None,
    )


def _publish(rt: Runtime, out: Path, built: deliver.Deliverables, folder: Path) -> None:
    """Put the book and this stitch's own files in the store (chapter files of earlier chapter
    stitches are there already) before the job row names them."""
    rt.storage.publish(out)
    for file in built.files:
        if Path(file.path).parent == folder:
            rt.storage.publish(Path(file.path))


def _cover_bytes(storage: Storage, options: dict[str, Any]) -> int:
    """The bytes the job keeps beside its outputs: its cover, and the EPUB kept for its read-along."""
    total = 0
    for path in (options.get("cover"), readalong.source_path(options)):
        if not path:
            continue
        with contextlib.suppress(StoredFileMissing):
            total += storage.size(str(path))
    return total


def _cover(storage: Storage, options: dict[str, Any]) -> Cover | None:
    """The cover the job was sent with (checked when it was accepted, stored in the job's folder)."""
    path = options.get("cover")
    if not path:
        return None
    return load_cover(b"".join(storage.open_range(str(path), None, None).body))


def _remove_orphans(storage: Storage, folder: Path, keep: set[Path]) -> None:
    """Once a job has succeeded, anything in its folder but its output and chunks is debris of attempts
    that lost their claim or were killed mid-write (chunk copies, temp files of an earlier stitch)."""
    if storage.kind == "local":
        kept = {p.resolve() for p in keep}
        for path in folder.rglob("*"):
            if path.is_file() and path.resolve() not in kept:
                path.unlink(missing_ok=True)
        return
    kept_keys = {key_of(p) for p in keep}
    prefix = folder_key(folder)
    for stored in storage.list_objects(prefix):
        if stored.key not in kept_keys:
            storage.remove(storage.layout.root / stored.key)
