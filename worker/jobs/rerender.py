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
    log.warning("re-render refused, the previous take kept: %s", error)
    begin_chapter(rt, job_id, chapter, enqueue)
    return False
