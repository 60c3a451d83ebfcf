"""Figures shared by every process and machine: workers and API processes add to them, the API's
``GET /metrics`` reads them from the database (no framework imports).

Why the database and not prometheus_client's multiprocess directory: Tome's workers run on several
machines (GPU hosts beside a CPU host) that share only PostgreSQL, Redis and storage; a directory of mmap
files is per host, and the API that serves /metrics may not see it. So every figure is a cumulative row
(``counters`` for the speaker-prompt cache counters, ``metric_samples`` for the rest) that processes add to.

Adding is batched: :func:`add_batched` and :func:`observe` only add to an in-memory batch of this process;
a background thread writes the batch (one upsert per figure, ``value = value + delta``, in one
transaction) every ``metrics_flush_seconds``, and :func:`flush` writes it at once (a pool process's
shutdown, GET /metrics for its own process, :func:`read_all`). A cache hit thus costs no database write,
and the totals are exact once flushed: a delta leaves the batch only in the transaction that adds it.
A forked child starts with an empty batch (what the parent gathered is the parent's to write).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy import Engine as DbEngine
from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import InstrumentedAttribute, Session, sessionmaker

from models import Counter, MetricSample, unit_of_work

log = logging.getLogger(__name__)

HITS = "tome_voice_cache_hits_total"
MISSES = "tome_voice_cache_misses_total"
BUILDS = "tome_voice_cache_builds_total"
BUILD_SECONDS = "tome_voice_cache_build_seconds_sum"

# Histogram buckets (seconds) for the histograms of worker.observe and webapi.observe.
SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)
JOB_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0)
RATIO_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)

Labels = tuple[tuple[str, str], ...]
MAX_LABELS_CHARS = 400


def encode_labels(labels: Mapping[str, str]) -> str:
    """A label set as one string, keys sorted: ``k=v`` pairs joined by ``\\x1f`` (never in a label value:
    values are route templates, engine, queue and status names)."""
    text = "\x1f".join(f"{k}={str(v).replace(chr(0x1F), ' ')}" for k, v in sorted(labels.items()))
    return text[:MAX_LABELS_CHARS]


def decode_labels(text: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in text.split("\x1f") if pair)


@dataclass
class _Batch:
    sessions: sessionmaker[Session]
    counters: dict[tuple[str, str], float] = field(default_factory=dict)  # (name, engine) -> delta
    samples: dict[tuple[str, str], float] = field(default_factory=dict)  # (name, labels) -> delta

    def empty(self) -> bool:
        return not self.counters and not self.samples


class _Store:
    """This process's batches, one per database (a test process talks to several)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # Held for a whole flush (take the deltas, write them): a flush that returns has written whatever
        # another flush had taken, so a reader after flush() sees every figure (read your writes).
        self.flush_lock = threading.Lock()
        self.batches: dict[object, _Batch] = {}  # by database URL
        self.interval = 10.0
        self.thread: threading.Thread | None = None
        self.pid = os.getpid()

    def batch(self, sessions: sessionmaker[Session]) -> _Batch:
        """The batch for ``sessions``' database (the latest session factory given for it writes it)."""
        key = _url(sessions)
        found = self.batches.get(key)
        if found is None:
            found = self.batches[key] = _Batch(sessions)
        else:
            found.sessions = sessions
        return found


def _url(sessions: sessionmaker[Session]) -> object:
    bind = sessions.kw.get("bind")
    return bind.url if bind is not None else id(sessions)


_store = _Store()


def _after_fork() -> None:
    global _store  # noqa: PLW0603 - the child's own, empty store
    interval = _store.interval
    _store = _Store()
    _store.interval = interval


os.register_at_fork(after_in_child=_after_fork)


def configure(flush_seconds: float) -> None:
    """How often this process writes its batch (0: every figure at once, no batching)."""
    _store.interval = flush_seconds


def add(sessions: sessionmaker[Session], engine: str, deltas: Mapping[str, float]) -> None:
    """Add to named counters now, atomically (an upsert with ``value = value + delta``)."""
    with unit_of_work(sessions) as session:
        _upsert_counters(session, {(name, engine): delta for name, delta in deltas.items()})


def add_batched(sessions: sessionmaker[Session], engine: str, deltas: Mapping[str, float]) -> None:
    """Add to named counters in this process's batch (written within ``metrics_flush_seconds``)."""
    with _store.lock:
        batch = _store.batch(sessions)
        for name, delta in deltas.items():
            batch.counters[(name, engine)] = batch.counters.get((name, engine), 0.0) + delta
    _after_add(sessions)


def inc(sessions: sessionmaker[Session], name: str, labels: Mapping[str, str], delta: float = 1.0) -> None:
    """Add ``delta`` to the counter ``name`` with ``labels`` (batched)."""
    key = (name, encode_labels(labels))
    with _store.lock:
        batch = _store.batch(sessions)
        batch.samples[key] = batch.samples.get(key, 0.0) + delta
    _after_add(sessions)


def observe(
    sessions: sessionmaker[Session],
    name: str,
    labels: Mapping[str, str],
    value: float,
    buckets: Sequence[float] = SECONDS_BUCKETS,
) -> None:
    """One observation of the histogram ``name`` (batched): cumulative buckets, ``_sum``, ``_count``."""
    encoded = encode_labels(labels)
    deltas = {(f"{name}_sum", encoded): value, (f"{name}_count", encoded): 1.0}
    for bound in (*buckets, float("inf")):
        if value <= bound:
            le = "+Inf" if bound == float("inf") else repr(float(bound))
            deltas[(f"{name}_bucket", encode_labels({**labels, "le": le}))] = 1.0
    with _store.lock:
        batch = _store.batch(sessions)
        for key, delta in deltas.items():
            batch.samples[key] = batch.samples.get(key, 0.0) + delta
    _after_add(sessions)


def _after_add(sessions: sessionmaker[Session]) -> None:
    if _store.interval <= 0:
        flush(sessions)
    elif _store.thread is None:
        _start_flusher()


def _start_flusher() -> None:
    with _store.lock:
        if _store.thread is not None:
            return
        store = _store
        thread = threading.Thread(target=_flush_loop, args=(store,), name="tome-metrics-flush", daemon=True)
        store.thread = thread
    thread.start()


def _flush_loop(store: _Store) -> None:
    while store is _store:  # a forked child's copy of this thread does not exist; its store is new
        time.sleep(max(store.interval, 0.05))
        try:
            flush()
        except Exception:  # the database is down: the deltas stay in the batch for the next try
            log.warning("could not write metrics; kept for the next try", exc_info=True)


def flush(sessions: sessionmaker[Session] | None = None) -> None:
    """Write this process's batch (for ``sessions``' database, or all of them) now. A failed write puts
    the deltas back, so nothing is lost or counted twice."""
    store = _store
    with store.flush_lock:
        _flush(store, sessions)


def _flush(store: _Store, sessions: sessionmaker[Session] | None) -> None:
    with store.lock:
        chosen = [b for k, b in store.batches.items() if sessions is None or k == _url(sessions)]
        taken = [(b, b.counters, b.samples) for b in chosen if not b.empty()]
        for b in chosen:
            b.counters, b.samples = {}, {}
    failure: Exception | None = None
    for batch, counter_deltas, sample_deltas in taken:  # each database on its own: one down stops no other
        try:
            with unit_of_work(batch.sessions) as session:
                _upsert_counters(session, counter_deltas)
                _upsert_samples(session, sample_deltas)
        except Exception as exc:
            with store.lock:
                _merge(batch.counters, counter_deltas)
                _merge(batch.samples, sample_deltas)
            failure = failure or exc
    if failure is not None:
        raise failure


def release(db: DbEngine, *, write: bool = True) -> None:
    """Stop keeping a batch for ``db``'s database, for an engine about to be disposed (tests, tools that
    build apps and throw them away): otherwise the batch keeps the engine alive, the flusher opens new
    connections through it, and the exit flush writes to a database that may be gone by then.

    ``write``: the batch is written first; a failed write raises and keeps the batch, as :func:`flush`
    does. ``write=False`` drops it unwritten (a database that never answered)."""
    store = _store
    with store.flush_lock:
        with store.lock:
            batch = store.batches.get(db.url)
        if batch is None:
            return
        if write:
            _flush(store, batch.sessions)
        with store.lock:
            if not write or batch.empty():  # not what another thread added meanwhile
                store.batches.pop(db.url, None)


def flush_quietly() -> None:
    """:func:`flush`, logging rather than raising (process shutdown)."""
    try:
        flush()
    except Exception:
        log.warning("could not write metrics at shutdown", exc_info=log.isEnabledFor(logging.DEBUG))


atexit.register(flush_quietly)


def _merge(into: dict[tuple[str, str], float], deltas: Mapping[tuple[str, str], float]) -> None:
    for key, delta in deltas.items():
        into[key] = into.get(key, 0.0) + delta


def _upsert_counters(session: Session, deltas: Mapping[tuple[str, str], float]) -> None:
    rows = [
        {"name": name, "engine": engine, "value": delta} for (name, engine), delta in sorted(deltas.items())
    ]
    _add_values(session, Counter, [Counter.name, Counter.engine], rows)


def _upsert_samples(session: Session, deltas: Mapping[tuple[str, str], float]) -> None:
    rows = [
        {"name": name, "labels": labels, "value": delta} for (name, labels), delta in sorted(deltas.items())
    ]
    _add_values(session, MetricSample, [MetricSample.name, MetricSample.labels], rows)


def _add_values(
    session: Session,
    table: type[Counter] | type[MetricSample],
    keys: Sequence[InstrumentedAttribute[str]],
    rows: list[dict[str, object]],
) -> None:
    """Insert each row, or add its value to the row with its keys: one statement for the batch, run for
    every row (a few hundred histogram buckets a flush), rather than one statement built and sent a row.
    The rows come sorted by their keys: two flushers lock rows in one order."""
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    stmt = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)
    session.execute(
        stmt.on_conflict_do_update(index_elements=keys, set_={"value": table.value + stmt.excluded.value}),
        rows,
    )


def flush_for(session: Session) -> None:
    """Write this process's batch for the database ``session`` talks to."""
    with _store.lock:
        batch = _store.batches.get(session.get_bind().engine.url)
    if batch is not None:
        flush(batch.sessions)


def read_all(session: Session) -> dict[tuple[str, str], float]:
    """The cache counters, this process's batch for this database written first."""
    flush_for(session)
    return {(c.name, c.engine): c.value for c in session.scalars(select(Counter))}


def read_samples(session: Session) -> Iterable[tuple[str, dict[str, str], float]]:
    """Every metric sample: (name, labels, value)."""
    for row in session.scalars(select(MetricSample).order_by(MetricSample.name, MetricSample.labels)):
        yield row.name, decode_labels(row.labels), row.value
