"""Job, chunk and chapter state transitions, each one a conditional UPDATE (compare-and-set) on the
database, and the queries that find work to resume: the one place that builds or writes those rows
(``scripts/check_layers.py`` holds the line). One module a concern (create, jobs, chunks, chapters,
rerender, expiry, delivery, resume); every name is exported here.

    job:     queued ──start_job──> running ──begin_stitch──> stitching ──finish_stitch──> succeeded
             (any active state) ──fail_job──> failed, ──cancel_job──> cancelled
             succeeded ──rerender_chunk──> running; (running | stitching) ──keep_previous_take──> running
    chunk:   pending ──claim_chunks──> running ──complete_chunk──> done
             running ──release_chunk──> pending, (pending | running) ──fail_chunk──> failed
    chapter: pending ──claim_chapter──> stitching ──finish_chapter──> ready

Broker messages are hints that may arrive twice, late, or never; these functions decide what happens:
only the holder of a chunk's attempt token marks it done, and one worker wins ``running -> stitching``.
See docs/how-it-works.md, "State transitions".
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
    forget_audio,
    mark_enqueued,
    release_chunk,
    renew_leases,
    take_for_sending,
    unsend,
)
from worker.jobs.state.common import claimable, new_token, rows
from worker.jobs.state.create import (
    BookRow,
    SpeechRow,
    add_chunks,
    add_job,
    await_planning,
    book_job,
    insert_job,
    note_stored_file,
    record_plan,
    set_options,
    speech_job,
    take_script,
)
from worker.jobs.state.delivery import (
    CHAPTER_EVENT,
    DELIVERY_EVENT,
    END_EVENT,
    FLAGGED_EVENT,
    WebhookColumns,
    claim_chapter_webhook,
    claim_upload,
    claim_webhook,
    record_chapter_webhook,
    record_upload,
    record_webhook,
)
from worker.jobs.state.expiry import expire_book, expire_chunk_audio
from worker.jobs.state.jobs import (
    begin_stitch,
    cancel_job,
    fail_job,
    finish_speech,
    finish_stitch,
    is_running,
    jobs_using_voice,
    record_error_detail,
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
    "CHAPTER_EVENT",
    "DELIVERY_EVENT",
    "END_EVENT",
    "FLAGGED_EVENT",
    "BookRow",
    "Claimed",
    "Completed",
    "Completion",
    "Edit",
    "Overdue",
    "SpeechRow",
    "WebhookColumns",
    "accept_flag",
    "add_chunks",
    "add_job",
    "await_planning",
    "begin_stitch",
    "book_job",
    "cancel_job",
    "chapters_to_resume",
    "claim_chapter",
    "claim_chapter_webhook",
    "claim_chunks",
    "claim_upload",
    "claim_webhook",
    "claimable",
    "complete_chunk",
    "complete_chunks",
    "expire_book",
    "expire_chunk_audio",
    "expired_stitches",
    "fail_chunk",
    "fail_job",
    "finish_chapter",
    "finish_speech",
    "finish_stitch",
    "forget_audio",
    "insert_job",
    "is_running",
    "jobs_using_voice",
    "keep_previous_take",
    "mark_enqueued",
    "new_token",
    "note_stored_file",
    "overdue_chunks",
    "record_chapter_webhook",
    "record_error_detail",
    "record_plan",
    "record_upload",
    "record_webhook",
    "reissue_chapter",
    "reissue_stitch",
    "release_chunk",
    "renew_leases",
    "rerender_chunk",
    "rerendering_chunks",
    "rows",
    "set_options",
    "speech_job",
    "start_job",
    "take_for_sending",
    "take_quiet_queued",
    "take_script",
    "unsend",
    "unstitched_jobs",
]
