"""worker.logs (JSON lines, request ids) and worker.counters (batched figures) on their own."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from models import Counter, make_engine, make_session_factory
from models.migrate import upgrade_head
from worker import counters
from worker.logs import JsonFormatter, clean_request_id, install_record_factory, log_context


def _record(message: str, *args: object, exc: bool = False) -> logging.LogRecord:
    install_record_factory()
    exc_info = None
    if exc:
        try:
            raise ValueError("boom\nsecond line")
        except ValueError:
            exc_info = sys.exc_info()
    return logging.getLogRecordFactory()("worker.x", logging.WARNING, __file__, 1, message, args, exc_info)


def test_a_json_line_carries_the_context_fields_that_are_set() -> None:
    with log_context(job_id="j1", chunk_seq=7, voice_id=None, request_id="r-1"):
        record = _record("rendered %d chunks\nand a second line", 3, exc=True)
    line = JsonFormatter().format(record)
    assert "\n" not in line, "one record, one line"
    data = json.loads(line)
    assert data["message"] == "rendered 3 chunks\nand a second line"
    assert (data["job_id"], data["chunk_seq"], data["request_id"]) == ("j1", 7, "r-1")
    assert "voice_id" not in data
    assert data["level"] == "WARNING"
    assert data["logger"] == "worker.x"
    assert "ValueError: boom" in data["exc"]
    outside = json.loads(JsonFormatter().format(_record("plain")))
    assert not {"job_id", "chunk_seq", "voice_id", "request_id"} & set(outside)


def test_log_context_refuses_an_unknown_field() -> None:
    with pytest.raises(ValueError, match="unknown log field"), log_context(user="x"):
        pass


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("abc-123", True),
        ("A.b_c:d@e+f=g/h-i", True),
        ("x" * 128, True),
        ("x" * 129, False),
        ("", False),
        (None, False),
        ("a b", False),
        ("a\r\nb", False),
        ("a\tb", False),
        ("é", False),
        ('"quoted"', False),
        ("a\u2028b", False),
    ],
)
def test_request_ids_are_kept_only_when_safe(given: str | None, kept: bool) -> None:
    cleaned = clean_request_id(given)
    assert (cleaned == given) is kept
    assert len(cleaned) <= 128
    assert cleaned.isascii()


@pytest.fixture
def sessions(tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    upgrade_head(url)
    engine = make_engine(url)
    yield make_session_factory(engine)
    counters.configure(10.0)
    counters.release(engine)
    engine.dispose()


def _stored(sessions: sessionmaker[Session]) -> dict[str, float]:
    with sessions() as session:
        return {c.name: c.value for c in session.scalars(select(Counter))}


def test_batched_counters_wait_for_a_flush_and_are_then_exact(sessions: sessionmaker[Session]) -> None:
    counters.configure(3600)  # no periodic flush during the test
    for _ in range(1000):
        counters.add_batched(sessions, "espeak", {counters.HITS: 1})
    counters.add_batched(sessions, "espeak", {counters.MISSES: 1})
    assert _stored(sessions) == {}, "no database write per hit"
    counters.flush(sessions)
    assert _stored(sessions) == {counters.HITS: 1000, counters.MISSES: 1}
    counters.flush(sessions)  # nothing twice
    assert _stored(sessions) == {counters.HITS: 1000, counters.MISSES: 1}
    counters.add_batched(sessions, "espeak", {counters.HITS: 5})
    with sessions() as session:
        assert counters.read_all(session)[(counters.HITS, "espeak")] == 1005  # reading writes this process's


def test_a_failed_flush_keeps_the_deltas_for_the_next_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'later.db'}"
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    counters.configure(3600)
    try:
        counters.observe(sessions, "tome_test_seconds", {"engine": "espeak"}, 0.3)
        counters.add_batched(sessions, "espeak", {counters.HITS: 2})
        with pytest.raises(Exception, match="no such table"):
            counters.flush(sessions)  # the tables do not exist yet
        upgrade_head(url)
        counters.flush(sessions)
        with sessions() as session:
            samples = {(n, tuple(sorted(lab.items()))): v for n, lab, v in counters.read_samples(session)}
            assert counters.read_all(session)[(counters.HITS, "espeak")] == 2
        assert samples[("tome_test_seconds_count", (("engine", "espeak"),))] == 1
        assert samples[("tome_test_seconds_sum", (("engine", "espeak"),))] == pytest.approx(0.3)
        assert samples[("tome_test_seconds_bucket", (("engine", "espeak"), ("le", "0.5")))] == 1
        assert samples[("tome_test_seconds_bucket", (("engine", "espeak"), ("le", "+Inf")))] == 1
        assert ("tome_test_seconds_bucket", (("engine", "espeak"), ("le", "0.25"))) not in samples
    finally:
        counters.configure(10.0)
        engine.dispose()


def test_a_released_database_is_written_then_forgotten(tmp_path: Path) -> None:
    """What a test does with an app it is done with (tests/support/apps.py): the batch is written, then
    nothing this process does later (the flusher, the exit flush) touches that database again."""
    counters.configure(3600)
    engines = {}
    try:
        for name in ("released", "kept"):
            url = f"sqlite:///{tmp_path / name}.db"
            upgrade_head(url)
            engines[name] = make_engine(url)
            counters.add_batched(make_session_factory(engines[name]), "espeak", {counters.HITS: 3})
        counters.release(engines["released"])
        with make_session_factory(engines["released"])() as session:
            assert session.scalar(select(Counter.value).where(Counter.name == counters.HITS)) == 3
        for engine in engines.values():  # both databases go away, as a test's database does
            engine.dispose()
            Path(str(engine.url.database)).unlink()
        with pytest.raises(Exception, match="no such table"):
            counters.flush()  # the kept batch still tries its database (a new, empty file now)
        counters.release(engines["kept"], write=False)  # dropped unwritten
        counters.flush()  # nothing left for either
    finally:
        counters.configure(10.0)
        for engine in engines.values():
            counters.release(engine, write=False)


def test_a_release_that_cannot_write_raises_and_keeps_the_batch(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'later.db'}"
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    counters.configure(3600)
    try:
        counters.add_batched(sessions, "espeak", {counters.BUILDS: 1})
        with pytest.raises(Exception, match="no such table"):
            counters.release(engine)  # the tables do not exist yet: said, not swallowed
        upgrade_head(url)
        counters.flush(sessions)  # the batch was kept
        assert _stored(sessions) == {counters.BUILDS: 1}
    finally:
        counters.configure(10.0)
        counters.release(engine, write=False)
        engine.dispose()


EXITING = """
import logging, sys
from pathlib import Path

from models import make_engine, make_session_factory
from models.migrate import upgrade_head
from tests.support.apps import close_engine
from worker import counters

logging.basicConfig(level=logging.WARNING)
path, close = Path(sys.argv[1]), sys.argv[2] == "close"
upgrade_head(f"sqlite:///{path}")
engine = make_engine(f"sqlite:///{path}")
counters.configure(3600)
counters.inc(make_session_factory(engine), "tome_test_total", {"engine": "espeak"})
if close:
    close_engine(engine)  # what the fixtures do when a test ends
else:
    engine.dispose()  # what they did
path.unlink()  # and then the test's database is gone (a temp file, a dropped PostgreSQL database)
"""


@pytest.mark.parametrize(("close", "warned"), [("close", False), ("dispose", True)])
def test_a_test_process_exits_without_a_metrics_warning_once_its_fixtures_close(
    tmp_path: Path, close: str, warned: bool
) -> None:
    """The noise was the exit flush writing batches of test databases that were gone; a process whose
    database is really gone at exit still says so (the 'dispose' case: as a production worker would)."""
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", EXITING, str(tmp_path / "m.db"), close],
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert ("could not write metrics at shutdown" in done.stderr) is warned, done.stderr


def test_with_no_batching_every_figure_is_written_at_once(sessions: sessionmaker[Session]) -> None:
    counters.configure(0)
    counters.add_batched(sessions, f"e-{uuid.uuid4().hex[:4]}", {counters.HITS: 1})
    assert _stored(sessions) == {counters.HITS: 1}
