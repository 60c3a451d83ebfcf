"""A chunk of a finished job rendered again on request (POST .../chunks/{seq}/rerender) whose new take
fails (the engine refuses it, it never passes QA under a policy that fails, or its worker is lost every
time) does not fail the finished job: the chunk keeps its previous take, its chapter and the book are
stitched again from the audio they had, and the job says why the re-render was refused. Its owner's
cancel does the same at any point before the new book is published (POST /v1/jobs/{id}/cancel): it
cancels the re-render, never the book."""

from __future__ import annotations

import logging
import uuid

from models import unit_of_work
from worker.jobs import actions, state
from worker.jobs.chapters import begin_chapter
from worker.jobs.stitch import maybe_begin_stitch
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


def give_up(rt: Runtime, job_id: uuid.UUID, error: str, enqueue: Enqueue) -> bool:
    """Give up the job's re-render, if it is rendering one: its chunk keeps the previous take (``error``
    recorded on the job), and its chapter and the book are stitched again from it. False if the job
    renders no chunk again (nothing changed)."""
    return _keep_previous(rt, job_id, error, enqueue, "refused", stored_too=False)


def cancel(rt: Runtime, job_id: uuid.UUID, enqueue: Enqueue) -> bool:
    """Its owner cancels the job's re-render, whether its new take is rendering or already stored and
    being stitched into its chapter and the book: until the new book is published, the chunk gets its
    previous take back and the book is stitched again from it. False if the job has no unpublished
    re-render (nothing changed: a concurrent cancel got there first, or the new book is out)."""
    return _keep_previous(rt, job_id, "cancelled by its owner", enqueue, "cancelled", stored_too=True)


def _keep_previous(
    rt: Runtime, job_id: uuid.UUID, error: str, enqueue: Enqueue, outcome: str, *, stored_too: bool
) -> bool:
    with unit_of_work(rt.sessions) as session:
        chapters = {
            chapter
            for chunk_id in state.rerendering_chunks(session, job_id)
            if (
                chapter := state.keep_previous_take(
                    session, chunk_id, None, error, outcome, stored_too=stored_too
                )
            )
            is not None
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
    maybe_begin_stitch(rt, job_id, enqueue)  # a book without chapter rows: its stitch at once
