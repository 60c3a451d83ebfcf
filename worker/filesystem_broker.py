"""Kombu's filesystem transport, fixed for Tome: the embedded broker of ``make run`` and the tests.

1. Atomic publishing: a message is written under a name no queue matches and renamed into place once
   complete, and claimed by a rename within the folder, so a consumer sees a whole message or none and
   only one consumer wins it. A file that cannot be decoded is logged and skipped: the sweeper re-sends
   the work from the job's rows.
2. Celery's event loop: the transport is polled from the event loop's timer, so the worker runs the
   same pool as on Redis, not the blocking pool that one killed child can wedge.
3. Bindings: the bindings file is read, updated and rewritten under one exclusive lock, and an empty
   file reads as no bindings, so processes that start together do not trip on each other.
4. Priorities: a message's file name starts with its priority (0-9, lower first, as on Redis), so a
   speech task overtakes the book work waiting in its queue; oldest first within a priority.

Selected by Celery's ``broker_transport`` setting (worker.celery_app); imports kombu, not Celery.
See docs/operations.md, "Reliability" (kombu's own behaviour, and why each fix).
"""

from __future__ import annotations

import fcntl
import logging
import os
import uuid
from queue import Empty
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.exceptions import ConnectionError as KombuConnectionError
from kombu.transport import filesystem
from kombu.utils.json import dumps, loads

log = logging.getLogger(__name__)

# A message being written: the leading dot keeps it out of every queue's ``<ts>_<uuid>.<queue>.msg`` match.
PARTIAL_PREFIX = ".partial-"
# A message being read: claimed by a consumer, which removes it once read.
TAKEN_PREFIX = ".taken-"
MIN_POLLING_INTERVAL = 0.01
# Messages handed over per timer tick before the event loop gets its turn again.
MAX_DELIVERIES_PER_POLL = 100


class Channel(filesystem.Channel):
    # kombu names the second parameter "message" in the abstract channel and "payload" here: mypy sees both.
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """Write the message beside the queue under a hidden name, then rename it into the queue (its
        name starts with its priority, so that sorted names are served in priority order)."""
        priority = self._get_message_priority(payload)  # type: ignore[no-untyped-call]
        name = f"{priority}-{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        folder = self.data_folder_out
        partial = os.path.join(folder, PARTIAL_PREFIX + name)
        try:
            with open(partial, "wb") as f:
                f.write(dumps(payload).encode())  # type: ignore[no-untyped-call]
            os.replace(partial, os.path.join(folder, name))
        except OSError as exc:
            raise ChannelError(f"cannot add message {name!r} to {folder!r}") from exc

    def _queue_bind(self, exchange: Any, routing_key: Any, pattern: Any, queue: Any) -> None:
        """Add a binding to the exchange's table under one exclusive lock (see the module docstring)."""
        path = self._exchange_file(exchange)  # type: ignore[no-untyped-call]
        self.control_folder.mkdir(exist_ok=True)
        binding = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            with os.fdopen(fd, "r+b", buffering=0) as f:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX)
                try:
                    table = [filesystem.exchange_queue_t(*row) for row in _table(f.read())]
                    if binding not in table:
                        table.insert(0, binding)
                        f.seek(0)
                        f.truncate()
                        f.write(dumps(table).encode())  # type: ignore[no-untyped-call]
                finally:
                    fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        except OSError as exc:
            raise ChannelError(f"cannot bind {queue!r} to {exchange!r}") from exc

    def get_table(self, exchange: Any) -> list[Any]:
        """The exchange's bindings, read under a shared lock; an empty file has none."""
        path = self._exchange_file(exchange)  # type: ignore[no-untyped-call]
        try:
            with open(path, "rb") as f:
                fcntl.flock(f.fileno(), fcntl.LOCK_SH)
                try:
                    return [filesystem.exchange_queue_t(*row) for row in _table(f.read())]
                finally:
                    fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ChannelError(f"cannot read the bindings of {exchange!r}") from exc

    def _get(self, queue: Any, timeout: Any = None) -> Any:
        """The next message of ``queue``, claimed by renaming it to a hidden name in the same folder (one
        consumer wins the rename), then read and removed. Kombu's own moves it to the system temp dir,
        a copy and an unlink when that is another filesystem, which two consumers can both win. A message
        that does not decode is logged and skipped, never raised."""
        folder = self.data_folder_in
        wanted = f"{queue}.msg"
        for name in sorted(os.listdir(folder)):
            if name.partition(".")[2] != wanted:
                continue
            taken = os.path.join(folder, TAKEN_PREFIX + name)
            try:
                os.rename(os.path.join(folder, name), taken)
            except FileNotFoundError:
                continue  # another consumer took it first
            try:
                with open(taken, "rb") as f:
                    payload = f.read()
                os.remove(taken)
            except OSError as exc:
                raise ChannelError(f"cannot read message {name!r} from {folder!r}") from exc
            try:
                return loads(payload.decode())  # type: ignore[no-untyped-call]
            except ValueError as exc:  # not UTF-8 or not JSON
                log.error("queue %s: skipped message %s, not valid JSON: %s", queue, name, exc)
        raise Empty()


def _table(raw: bytes) -> list[Any]:
    """A bindings file's rows; an empty file (just created by another process) has none."""
    if not raw.strip():
        return []
    rows = loads(raw.decode())  # type: ignore[no-untyped-call]
    if not isinstance(rows, list):
        raise ChannelError("a bindings file does not hold a list")
    return rows


class Transport(filesystem.Transport):
    """Polled from Celery's event loop: every ``polling_interval`` seconds, what the queues hold is
    delivered, as far as the consumer's prefetch allows."""

    Channel = Channel
    implements = filesystem.Transport.implements.extend(asynchronous=True)

    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        # kombu's call_repeatedly never runs a function whose interval is 0: poll at least every 10 ms.
        interval = max(float(self.polling_interval or 0), MIN_POLLING_INTERVAL)
        loop.call_repeatedly(interval, self._deliver_ready, connection)

    def _deliver_ready(self, connection: Any) -> None:
        """Deliver what the queues hold now, without waiting. Any failure is raised as a connection
        error: the event loop would otherwise log it and go on (a vanished folder looks healthy while it
        takes no work), and a message that failed half-way would hold a prefetch slot for good. Celery
        answers a connection error by reconnecting with back-off, which puts unacked messages back."""
        for _ in range(MAX_DELIVERIES_PER_POLL):
            try:
                self.drain_events(connection, timeout=0)  # type: ignore[no-untyped-call]
            except TimeoutError:
                return
            except KombuConnectionError:
                raise
            except Exception as exc:
                raise KombuConnectionError(f"filesystem broker: {exc!r}") from exc
