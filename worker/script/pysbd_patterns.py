"""pysbd's regular expressions, each compiled once per process (pure module).

pysbd builds many of its patterns from strings at run time (one per abbreviation it meets, formatted with
that abbreviation) and hands them to ``re.sub``/``re.findall``/... as strings. The ``re`` module caches
only 512 compiled patterns; one English paragraph can need more than that, so the cache thrashes and
long scripts spend most of their planning time compiling (docs/benchmarks.md has the figures).
:func:`install` gives pysbd's modules a ``re`` whose string-pattern calls go through a larger cache of
compiled patterns. The patterns, flags and calls are pysbd's own, unchanged: only the compiling is
shared, so every sentence boundary stays exactly where pysbd puts it.
"""

from __future__ import annotations

import functools
import re
import sys
import threading
from collections.abc import Iterator
from typing import Any

# Distinct patterns pysbd builds: a few per abbreviation of each language used (English has about 200).
CACHE_SIZE = 16_384

_lock = threading.Lock()


@functools.lru_cache(maxsize=CACHE_SIZE)
def _compiled(pattern: str | bytes, flags: int) -> re.Pattern[Any]:
    return re.compile(pattern, flags)


def _compile(pattern: str | bytes | re.Pattern[Any], flags: int | re.RegexFlag = 0) -> re.Pattern[Any]:
    if isinstance(pattern, re.Pattern):
        return re.compile(pattern, flags)  # re's own rules (flags with a compiled pattern are an error)
    return _compiled(pattern, int(flags))


class CachedRe:
    """The ``re`` functions pysbd calls, compiling through :func:`_compiled`; anything else (flags,
    ``escape``, ``error``...) is ``re``'s own."""

    def compile(self, pattern: Any, flags: int = 0) -> re.Pattern[Any]:
        return _compile(pattern, flags)

    def sub(self, pattern: Any, repl: Any, string: Any, count: int = 0, flags: int = 0) -> Any:
        return _compile(pattern, flags).sub(repl, string, count)

    def subn(self, pattern: Any, repl: Any, string: Any, count: int = 0, flags: int = 0) -> Any:
        return _compile(pattern, flags).subn(repl, string, count)

    def search(self, pattern: Any, string: Any, flags: int = 0) -> re.Match[Any] | None:
        return _compile(pattern, flags).search(string)

    def match(self, pattern: Any, string: Any, flags: int = 0) -> re.Match[Any] | None:
        return _compile(pattern, flags).match(string)

    def fullmatch(self, pattern: Any, string: Any, flags: int = 0) -> re.Match[Any] | None:
        return _compile(pattern, flags).fullmatch(string)

    def findall(self, pattern: Any, string: Any, flags: int = 0) -> list[Any]:
        return _compile(pattern, flags).findall(string)

    def finditer(self, pattern: Any, string: Any, flags: int = 0) -> Iterator[re.Match[Any]]:
        return _compile(pattern, flags).finditer(string)

    def split(self, pattern: Any, string: Any, maxsplit: int = 0, flags: int = 0) -> list[Any]:
        return _compile(pattern, flags).split(string, maxsplit)

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)


CACHED_RE = CachedRe()


def install() -> list[str]:
    """Point the ``re`` of every imported pysbd module at :data:`CACHED_RE` (idempotent); the names of
    the modules it changed. Call after importing pysbd and its languages."""
    changed = []
    with _lock:
        for name, module in list(sys.modules.items()):
            if (name == "pysbd" or name.startswith("pysbd.")) and getattr(module, "re", None) is re:
                setattr(module, "re", CACHED_RE)  # noqa: B010 - a module attribute, not a field
                changed.append(name)
    return changed


def compiled_patterns() -> int:
    """How many patterns the shared cache has compiled so far (its misses): for tests and benchmarks."""
    return _compiled.cache_info().misses
