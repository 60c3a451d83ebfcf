"""Request bodies read a step at a time, letting the API's other requests run between steps.

Under gunicorn's gevent worker a greenlet yields only when a socket read would block; a client on a fast
link keeps data waiting, so parsing its whole multipart body (a reference recording: tens of MB) would
run to the end without a yield and stall every other request of the process for that long, several
such uploads for the sum. :func:`yielding_bodies` wraps ``wsgi.input`` so that every ``STEP`` bytes read
give the loop a turn (``time.sleep(0)``, which gevent makes a yield; elsewhere a no-op).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, BinaryIO

STEP = 256 * 1024

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class YieldingInput:
    """A ``wsgi.input`` that yields to the event loop every :data:`STEP` bytes read."""

    def __init__(self, stream: BinaryIO, step: int = STEP) -> None:
        self._stream, self._step, self._since = stream, step, 0

    def _read(self, data: bytes) -> bytes:
        self._since += len(data)
        if self._since >= self._step:
            self._since = 0
            time.sleep(0)
        return data

    def read(self, size: int | None = -1) -> bytes:
        return self._read(self._stream.read(-1 if size is None else size))

    def readline(self, size: int | None = -1) -> bytes:
        return self._read(self._stream.readline(-1 if size is None else size))

    def __iter__(self) -> YieldingInput:
        return self

    def __next__(self) -> bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line


def yielding_bodies(app: WsgiApp) -> WsgiApp:
    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        stream = environ.get("wsgi.input")
        if stream is not None:
            environ["wsgi.input"] = YieldingInput(stream)
        return app(environ, start_response)

    return wrapped
