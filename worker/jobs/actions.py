"""Small actions that several steps of a job take: send chunks, fail the job, give chunks back."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence

from models import unit_of_work, utcnow
from worker import observe
from worker.jobs import state
from worker.runtime import Runtime
from worker.task_names import DELIVER_WEBHOOK, RENDER_CHUNKS, Enqueue

log = logging.getLogger(__name__)


def batches(seqs: Sequence[int], size: int) -> list[list[int]]:
    return [list(seqs[i : i + size]) for i in range(0, len(seqs), size)]


def send_chunks(rt: Runtime, job_id: uuid.UUID, seqs: Sequence[int], enqueue: Enqueue) -> int:
    """Record that these chunks were sent (committed first), then send them in render batches."""
    groups = batches(sorted(seqs), rt.settings.tasks.chunks_per_task)
    with unit_of_work(rt.sessions) as session:
        state.mark_enqueued(session, job_id, list(seqs))
    for group in groups:
        enqueue(RENDER_CHUNKS, [str(job_id), group])
    return len(groups)


def fail(
    rt: Runtime,
    job_id: uuid.UUID,
    error: str,
    enqueue: Enqueue | None,
    chunk: tuple[int, str | None] | None = None,
    detail: dict[str, object] | None = None,
) -> bool:
    """Fail the job (and ``chunk``: its id and attempt token) with ``error``; its webhook goes out.
    ``detail`` (a script that cannot be planned: code, field, line, column) is recorded as the job's
    ``error_detail`` in the same transaction, and the script waiting to be planned is dropped: a reader
    never sees the job failed without it."""
    with unit_of_work(rt.sessions) as session:
        if chunk is not None:
            state.fail_chunk(session, chunk[0], chunk[1], error)
        failed = state.fail_job(session, job_id, error, utcnow())
        if failed and detail is not None:
            state.record_error_detail(session, job_id, detail, drop_script=True)
    log.warning("failed: %s", error)
    if failed:
        observe.job_ended(rt, job_id)
    if failed and enqueue is not None:
        enqueue(DELIVER_WEBHOOK, [str(job_id)])
    return failed


def release(rt: Runtime, chunk_ids: Iterable[int], token: str) -> None:
    """Give claimed chunks back (cancellation, a transient failure) so another attempt can take them."""
    with unit_of_work(rt.sessions) as session:
        for chunk_id in chunk_ids:
            state.release_chunk(session, chunk_id, token)


def still_running(rt: Runtime, job_id: uuid.UUID) -> bool:
    with rt.sessions() as session:
        return state.is_running(session, job_id)
