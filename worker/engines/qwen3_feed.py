"""A queue of rows a running Qwen3-TTS loop refills its slots from (pure: torch and the standard library).

:meth:`TalkerLoop.run` takes its rows up front, so a row that ends can only be refilled with a request of
the same call. A :class:`RowFeed` lets rows arrive while the loop runs (from other threads: the chunks of
later render tasks, any voice, the same checkpoint): the loop (:meth:`TalkerLoop.serve`) takes the next
waiting row whenever a slot frees, hands each row's frames to the caller's sink as they are made and its
whole frames to :meth:`RowFeed.result` when it ends, and stops once the feed is closed and empty.

The loop's buffers are sized before the first row, so a feed declares the most a row may bring
(:class:`FeedLimits`); :meth:`RowFeed.put` refuses a row beyond them. Its warpers keep every row's own
top-k and top-p (they are sized for the whole vocabulary), so a row's tokens do not depend on the rows
beside it, as in :meth:`TalkerLoop.run`.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass

import torch

from worker.engines.qwen3_loop import LoopRow

__all__ = ["FeedLimits", "RowFeed"]


@dataclass(frozen=True)
class FeedLimits:
    """The most a row of the feed may bring: prompt plus frame cap, text embeddings, frame cap."""

    length: int
    trailing: int
    cap: int

    def admits(self, row: LoopRow) -> bool:
        return (
            row.prefill.shape[0] + row.max_new_tokens <= self.length
            and row.trailing.shape[0] <= self.trailing
            and row.max_new_tokens <= self.cap
        )


class RowFeed:
    """Rows keyed by the caller (a chunk id, say), taken in the order they were put. Thread-safe."""

    def __init__(self, limits: FeedLimits) -> None:
        self.limits = limits
        self._waiting: deque[tuple[Hashable, LoopRow]] = deque()
        self._results: dict[Hashable, torch.Tensor] = {}
        self._closed = False
        self._changed = threading.Condition()

    def put(self, key: Hashable, row: LoopRow) -> None:
        if not self.limits.admits(row):
            raise ValueError(f"row {key!r} is beyond the feed's limits {self.limits}")
        with self._changed:
            if self._closed:
                raise ValueError("the feed is closed")
            self._waiting.append((key, row))
            self._changed.notify_all()

    def close(self) -> None:
        """No more rows: the loop ends once the rows put so far are done."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def take(self, *, wait: bool) -> tuple[Hashable, LoopRow] | None:
        """The next waiting row; None when there is none now (``wait`` False) or ever (closed, empty)."""
        with self._changed:
            while wait and not self._waiting and not self._closed:
                self._changed.wait()
            return self._waiting.popleft() if self._waiting else None

    def finish(self, key: Hashable, frames: torch.Tensor) -> None:
        """The loop's report that ``key``'s row ended with ``frames`` (frames, codebooks)."""
        with self._changed:
            self._results[key] = frames
            self._changed.notify_all()

    def result(self, key: Hashable, timeout: float | None = None) -> torch.Tensor:
        """``key``'s frames once its row has ended (and forgets them); TimeoutError after ``timeout`` s."""
        with self._changed:
            if not self._changed.wait_for(lambda: key in self._results, timeout):
                raise TimeoutError(f"row {key!r} has not ended")
            return self._results.pop(key)
