"""A chunk of a finished job rendered again on request (POST .../chunks/{seq}/rerender) whose new take
fails (the engine refuses it, it never passes QA under a policy that fails, or its worker is lost every
time) does not fail the finished job: the chunk keeps its previous take, its chapter and the book are
stitched again from the audio they had, and the job says why the re-render was refused."""

from __future__ import annotations

import logging
import uuid

from models import unit_of_work
from worker.jobs import actions, state
from worker.jobs.chapters import begin_chapter
from worker.runtime import Runtime
from worker.task_names import Enqueue

log = logging.getLogger(__name__)


def fail_chunk(
    rt: Runtime, job_id: uuid.UUID, chunk: tuple[int, str | None], error: str, enqueue: Enqueue
) -> bool:
    """The chunk (its id and attempt token) failed with ``error``: a re-render keeps its previous take,
    any other chunk fails the job (True if this call failed it)."""
    with unit_of_work(rt.sessions) as session:
        chapter = state.keep_previous_take(session, chunk[0], chunk[1], error)
    if chapter is None:
        return actions.fail(rt, job_id, error, enqueue, chunk=chunk)
    _stitch_again(rt, job_id, {chapter}, "refused", error, enqueue)
    return False


def fail_job(rt: Runtime, job_id: uuid.UUID, error: str, enqueue: Enqueue) -> bool:
    """The job cannot go on (``error``: its voice was deleted, the recogniser cannot load): a re-render
    keeps the previous take of its chunk, anything else fails the job (True if this call failed it)."""
    if give_up(rt, job_id, error, enqueue):
        return False
    return actions.fail(rt, job_id, error, enqueue)


def give_up(rt: Runtime, job_id: uuid.UUID, error: str, enqueue: Enqueue, outcome: str = "refused") -> bool:
    """Give up the job's re-render, if it is rendering one: its chunk keeps the previous take (``outcome``
    and ``error`` recorded on the job), and its chapter and the book are stitched again from it. False if
    the job renders no chunk again (nothing changed)."""
    with unit_of_work(rt.sessions) as session:
        chapters = {
            chapter
            for chunk_id in state.rerendering_chunks(session, job_id)
            if (chapter := state.keep_previous_take(session, chunk_id, None, error, outcome)) is not None
        }
    if not chapters:
        return False
    _stitch_again(rt, job_id, chapters, outcome, error, enqueue)
    return True


def _stitch_again(
    rt: Runtime, job_id: uuid.UUID, chapters: set[int], outcome: str, error: str, enqueue: Enqueue
) -> None:
    """The chapters whose re-rendered chunk kept its previous take, stitched again (then the book)."""
    log.warning("re-render %s, the previous take kept: %s", outcome, error)
    for chapter in sorted(chapters):
        begin_chapter(rt, job_id, chapter, enqueue)
