"""Job and chunk state transitions, each one a conditional UPDATE (compare-and-set) on the database,
and the queries that find work to resume (the one answer to "where does a job or chunk change state").

    job:     queued ──start_job──> running ──begin_stitch──> stitching ──finish_stitch──> succeeded
             (any active state) ──fail_job──> failed, ──cancel_job──> cancelled
             succeeded ──rerender_chunk──> running; (running | stitching) ──keep_previous_take──> running
    chunk:   pending ──claim_chunks──> running ──complete_chunk──> done
             running ──release_chunk──> pending, (pending | running) ──fail_chunk──> failed
    chapter: pending ──claim_chapter──> stitching ──finish_chapter──> ready

Broker messages are hints that may arrive twice, late, or never; these functions decide what happens.
Only the holder of a chunk's current attempt token can mark it done, so a duplicate delivery never
writes a second copy, and only one worker wins ``running -> stitching``. See docs/how-it-works.md,
"State transitions" (each transition's conditions).
"""

from __future__ import annotations

from worker.jobs.state.chapters import chapters_to_resume, claim_chapter, finish_chapter, reissue_chapter
from worker.jobs.state.chunks import (
    Claimed,
    Completed,
    Completion,
    claim_chunks,
    complete_chunk,
    complete_chunks,
    fail_chunk,
    mark_enqueued,
    release_chunk,
    renew_leases,
    unsend,
)
from worker.jobs.state.common import claimable, new_token, rows
from worker.jobs.state.create import add_chunks, insert_job
from worker.jobs.state.jobs import (
    begin_stitch,
    cancel_job,
    fail_job,
    finish_stitch,
    is_running,
    jobs_using_voice,
    reissue_stitch,
    start_job,
)
from worker.jobs.state.rerender import (
    Edit,
    accept_flag,
    keep_previous_take,
    rerender_chunk,
    rerendering_chunks,
)
from worker.jobs.state.resume import (
    Overdue,
    expired_stitches,
    overdue_chunks,
    take_quiet_queued,
    unstitched_jobs,
)

__all__ = [
    "Claimed",
    "Completed",
    "Completion",
    "Edit",
    "Overdue",
    "accept_flag",
    "add_chunks",
    "begin_stitch",
    "cancel_job",
    "chapters_to_resume",
    "claim_chapter",
    "claim_chunks",
    "claimable",
    "complete_chunk",
    "complete_chunks",
    "expired_stitches",
    "fail_chunk",
    "fail_job",
    "finish_chapter",
    "finish_stitch",
    "insert_job",
    "is_running",
    "jobs_using_voice",
    "keep_previous_take",
    "mark_enqueued",
    "new_token",
    "overdue_chunks",
    "reissue_chapter",
    "reissue_stitch",
    "release_chunk",
    "renew_leases",
    "rerender_chunk",
    "rerendering_chunks",
    "rows",
    "start_job",
    "take_quiet_queued",
    "unsend",
    "unstitched_jobs",
]
