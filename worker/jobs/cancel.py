"""Its owner cancels a job (``POST /v1/jobs/{id}/cancel``): an unfinished job is cancelled and its webhook
goes out; a published book is never cancelled, only its re-render (worker.jobs.rerender: the chunk keeps
its previous take and the book is published again from it). :func:`cancel` is the one entry."""

from __future__ import annotations

from sqlalchemy.orm import Session

from models import Job, utcnow
from worker.jobs import rerender, state
from worker.runtime import Runtime
from worker.task_names import DELIVER_WEBHOOK, Enqueue


def cancel(rt: Runtime, session: Session, job: Job, enqueue: Enqueue) -> bool:
    """Cancel ``job`` (read in ``session``, which this commits or rolls back): its re-render if its book
    is published, else the job itself. False when nothing was cancelled (the job has ended, or has no
    unpublished re-render)."""
    if job.output_path is not None:
        return rerender.cancel(rt, job.id, enqueue)
    if not state.cancel_job(session, job.id, utcnow()):
        session.rollback()
        return False
    session.commit()
    enqueue(DELIVER_WEBHOOK, [str(job.id)])
    return True
