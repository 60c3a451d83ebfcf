"""The job id on worker log lines (worker.logs), set by the dispatcher for every task on a job."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest

from worker import dispatch
from worker.logs import NO_JOB, install_record_factory, job_context
from worker.task_names import DELIVER_WEBHOOK


def _job(record: logging.LogRecord) -> str:
    return str(record.__dict__["job_id"])


def test_records_carry_the_job_of_the_block_they_are_made_in() -> None:
    install_record_factory()
    install_record_factory()  # idempotent: one factory, not two wrapped ones
    make = logging.getLogRecordFactory()
    outside = make("x", logging.INFO, __file__, 1, "m", (), None)
    with job_context("abc"):
        inside = make("x", logging.INFO, __file__, 1, "m", (), None)
        with job_context(None):  # a block with no job of its own keeps the current one
            nested = make("x", logging.INFO, __file__, 1, "m", (), None)
    after = make("x", logging.INFO, __file__, 1, "m", (), None)
    assert (_job(outside), outside.__dict__["job"]) == (NO_JOB, "")
    assert (_job(inside), inside.__dict__["job"]) == ("abc", " job=abc")
    assert _job(nested) == "abc"
    assert _job(after) == NO_JOB
    formatted = logging.Formatter("%(name)s%(job)s: %(message)s").format(inside)
    assert formatted == "x job=abc: m"


def test_dispatch_tags_every_line_a_job_task_logs(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_record_factory()
    job_id = str(uuid.uuid4())
    seen: list[str] = []

    def handler(rt: Any, args: list[Any], enqueue: Any) -> str:
        logging.getLogger("worker.jobs.test").warning("working")
        seen.append(args[0])
        return "ok"

    monkeypatch.setitem(dispatch.handlers(), DELIVER_WEBHOOK, handler)
    with caplog.at_level(logging.INFO):
        assert dispatch.run(None, DELIVER_WEBHOOK, [job_id], lambda n, a: None) == "ok"  # type: ignore[arg-type]
    [record] = [r for r in caplog.records if r.name == "worker.jobs.test"]
    assert _job(record) == job_id
    assert seen == [job_id]
