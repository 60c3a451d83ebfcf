"""Chapters as soon as they are done: when a chapter's last chunk is rendered, one worker wins its
pending -> stitching claim and stitches and masters it into its file(s) (worker.jobs.deliver.build_chapter)
while later chapters still render. The chapter is then downloadable, ``GET /v1/jobs/{id}`` lists it, a
``job.chapter_ready`` webhook goes out, and the book's stitch (which waits for every chapter) joins the
chapters' files instead of encoding the whole book after the last chunk.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path

from sqlalchemy import func, select

from models import Chunk, Job, JobChapter, JobStatus, unit_of_work, utcnow
from worker.jobs import actions, deliver, state
from worker.jobs.stitch import DeliverySource, chunk_rows, maybe_begin_stitch
from worker.runtime import Runtime
from worker.task_names import DELIVER_CHAPTER_WEBHOOK, STITCH_CHAPTER, Enqueue

log = logging.getLogger(__name__)


def maybe_stitch_chapters(rt: Runtime, job_id: uuid.UUID, seqs: Iterable[int], enqueue: Enqueue) -> int:
    """Claim and send the stitch of every chapter of ``seqs`` (chunks just done) that is now complete;
    returns how many this call sent."""
    wanted = list(seqs)
    if not wanted:
        return 0
    with rt.sessions() as session:
        chapters = list(
            session.scalars(
                select(JobChapter.chapter).where(
                    JobChapter.job_id == job_id,
                    JobChapter.chapter.in_(
                        select(Chunk.chapter).where(Chunk.job_id == job_id, Chunk.seq.in_(wanted))
                    ),
                )
            )
        )
    sent = 0
    for chapter in chapters:
        sent += begin_chapter(rt, job_id, chapter, enqueue)
    return sent


def begin_chapter(rt: Runtime, job_id: uuid.UUID, chapter: int, enqueue: Enqueue) -> bool:
    """Send the chapter's stitch if this call won its claim (every chunk of it done)."""
    lease = timedelta(seconds=rt.settings.tasks.stitch_lease_seconds)
    with unit_of_work(rt.sessions) as session:
        token = state.claim_chapter(session, job_id, chapter, lease, utcnow())
    if token is None:
        return False
    enqueue(STITCH_CHAPTER, [str(job_id), chapter, token])
    return True


def stitch_chapter(rt: Runtime, job_id: uuid.UUID, chapter: int, token: str, enqueue: Enqueue) -> bool:
    """Build the chapter's files; only the current token may publish them."""
    with rt.sessions() as session:
        job = session.get(Job, job_id)
        row = session.get(JobChapter, (job_id, chapter))
        if job is None or job.status != JobStatus.RUNNING or row is None or row.token != token:
            return False
        source = DeliverySource.of(job)
        position = row.position
        total = session.scalar(select(func.count()).where(JobChapter.job_id == job_id)) or position
        rows = chunk_rows(session, job_id, chapter)
    if rows is None:
        actions.fail(
            rt, job_id, f"internal: chapter {position} stitched before its chunks were done", enqueue
        )
        return False
    folder = rt.layout.job_files(job_id, token)
    try:
        built = deliver.build_chapter(
            rows,
            source.delivery,
            lambda name: rt.layout.job_file(job_id, token, name),
            position=position,
            chapters_total=int(total),
            sample_rate=rt.engine(source.engine).sample_rate,
            pauses=source.pauses,
            info=source.info(job_id, rt.storage),
        )
        for file in built.files:  # in the store before the row names them
            rt.storage.publish(Path(file.path))
    except BaseException:  # nothing of a failed attempt stays: the sweeper re-issues the chapter
        rt.storage.remove_folder(folder)
        raise
    with unit_of_work(rt.sessions) as session:
        ok = state.finish_chapter(
            session,
            job_id,
            chapter,
            token,
            build=built.to_json(),
            size=built.bytes,
            duration=built.duration,
            now=utcnow(),
        )
    if not ok:
        rt.storage.remove_folder(folder)
        return False
    log.info("chapter %d of %d ready: %.1f s, %d bytes", position, total, built.duration, built.bytes)
    if source.webhook:
        enqueue(DELIVER_CHAPTER_WEBHOOK, [str(job_id), chapter])
    maybe_begin_stitch(rt, job_id, enqueue)
    return True
