"""Kombu's filesystem transport with atomic publishing: the embedded broker of ``make run`` and the tests.

Kombu 5.7's ``filesystem`` transport creates a message file under its final name and then writes into it.
A consumer that lists the folder in between moves the still-empty file away, fails to decode it, and the
Celery worker stops with "Unrecoverable error: JSONDecodeError" while the message is lost (kombu issue
#1551; measured here: 2 worker deaths in 45 runs of the Markdown-book end-to-end test with three running
at once). This transport writes each message under a name no queue matches and renames it into place once
complete (a rename within one folder is atomic), so a consumer sees a whole message or none. A message
that still cannot be decoded (written by something else) is logged and skipped instead of stopping the
worker; the job's rows are the truth and the sweeper re-sends its work.

Selected with Celery's ``broker_transport`` setting (see worker.celery_app); imports kombu, not Celery.
"""

from __future__ import annotations

import logging
import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.json import dumps

log = logging.getLogger(__name__)

# A message being written: the leading dot keeps it out of every queue's ``<ts>_<uuid>.<queue>.msg`` match.
PARTIAL_PREFIX = ".partial-"


class Channel(filesystem.Channel):
    # kombu names the second parameter "message" in the abstract channel and "payload" here: mypy sees both.
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """Write the message beside the queue under a hidden name, then rename it into the queue."""
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        folder = self.data_folder_out
        partial = os.path.join(folder, PARTIAL_PREFIX + name)
        try:
            with open(partial, "wb") as f:
                f.write(dumps(payload).encode())  # type: ignore[no-untyped-call]
            os.replace(partial, os.path.join(folder, name))
        except OSError as exc:
            raise ChannelError(f"cannot add message {name!r} to {folder!r}") from exc

    def _get(self, queue: Any, timeout: Any = None) -> Any:
        """The next message of ``queue``; an undecodable one is logged and skipped, never raised."""
        while True:
            try:
                return super()._get(queue)  # type: ignore[no-untyped-call]
            except ValueError as exc:  # json's decode error; the file is already gone
                log.error("queue %s: skipped a message that is not valid JSON: %s", queue, exc)


class Transport(filesystem.Transport):
    Channel = Channel
