"""A bounded, thread-safe LRU of speaker prompts, capped in bytes (pure module).

A hit costs no disk read. Entries are keyed by the full cache key (engine, engine version, audio hash,
transcript hash), so a changed voice or engine can never hit an old entry. ``get`` returns copies: a caller
that modifies its arrays cannot corrupt what the next chunk receives.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Prompt = dict[str, npt.NDArray[np.generic]]


@dataclass
class LruStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    bytes: int = 0
    entries: int = 0


def prompt_bytes(prompt: Mapping[str, npt.NDArray[np.generic]]) -> int:
    return sum(int(a.nbytes) for a in prompt.values())


class PromptLru:
    def __init__(self, max_bytes: int):
        if max_bytes < 1:
            raise ValueError("max_bytes must be positive")
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, Prompt] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.stats = LruStats()

    def get(self, key: str) -> Prompt | None:
        with self._lock:
            prompt = self._items.get(key)
            if prompt is None:
                self.stats.misses += 1
                return None
            self._items.move_to_end(key)
            self.stats.hits += 1
            return {name: array.copy() for name, array in prompt.items()}

    def put(self, key: str, prompt: Mapping[str, npt.NDArray[np.generic]]) -> None:
        """Store a private copy; an entry larger than the whole cache is not kept."""
        size = prompt_bytes(prompt)
        if size > self.max_bytes:
            return
        stored = {name: np.array(array, copy=True) for name, array in prompt.items()}
        for array in stored.values():
            array.flags.writeable = False
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= prompt_bytes(old)
            self._items[key] = stored
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, evicted = self._items.popitem(last=False)
                self._bytes -= prompt_bytes(evicted)
                self.stats.evictions += 1
            self.stats.bytes, self.stats.entries = self._bytes, len(self._items)

    def discard(self, key: str) -> None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= prompt_bytes(old)
            self.stats.bytes, self.stats.entries = self._bytes, len(self._items)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
