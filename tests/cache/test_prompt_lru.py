"""The per-process prompt LRU (worker/voices/lru.py) and ``process_lru`` (worker/voices/prompts.py)."""

from __future__ import annotations

import multiprocessing
import random
import threading
from collections.abc import Mapping
from multiprocessing.connection import Connection

import numpy as np
import numpy.typing as npt
import pytest

from worker.voices import prompts as voice_prompts
from worker.voices.lru import PromptLru, prompt_bytes

Prompt = dict[str, npt.NDArray[np.generic]]


def prompt(value: float, floats: int = 25) -> Prompt:
    """A prompt of exactly ``4 * floats + 8`` bytes whose arrays all say ``value``."""
    return {
        "vector": np.full(floats, value, dtype=np.float32),
        "tag": np.array([value], dtype=np.float64),
    }


SIZE = prompt_bytes(prompt(0.0))  # 108 bytes


def stored_bytes(lru: PromptLru) -> int:
    return sum(prompt_bytes(p) for p in lru._items.values())


def check_accounting(lru: PromptLru) -> None:
    assert lru._bytes == stored_bytes(lru)
    assert lru._bytes <= lru.max_bytes
    assert lru.stats.bytes == lru._bytes
    assert lru.stats.entries == len(lru._items) == len(lru)


def assert_same(a: Mapping[str, npt.NDArray[np.generic]] | None, b: Prompt) -> None:
    assert a is not None
    assert sorted(a) == sorted(b)
    for name in b:
        assert a[name].dtype == b[name].dtype
        assert np.array_equal(a[name], b[name])


def test_hits_misses_and_evictions_are_counted() -> None:
    lru = PromptLru(max_bytes=2 * SIZE)
    assert lru.get("a") is None
    lru.put("a", prompt(1))
    assert_same(lru.get("a"), prompt(1))
    assert_same(lru.get("a"), prompt(1))
    assert lru.get("b") is None
    lru.put("b", prompt(2))
    lru.put("c", prompt(3))  # over the cap by one entry: "a", the least recently used, goes
    assert lru.get("a") is None
    assert (lru.stats.hits, lru.stats.misses, lru.stats.evictions) == (2, 3, 1)
    assert (lru.stats.entries, lru.stats.bytes) == (2, 2 * SIZE)
    check_accounting(lru)


def test_least_recently_used_goes_first_and_a_get_counts_as_use() -> None:
    lru = PromptLru(max_bytes=3 * SIZE)
    for key in "abc":
        lru.put(key, prompt(ord(key)))
    assert lru.get("a") is not None  # a is now the most recently used; b the least
    lru.put("d", prompt(4))
    assert list(lru._items) == ["c", "a", "d"]
    assert lru.get("b") is None
    lru.put("c", prompt(5))  # re-putting refreshes too
    lru.put("e", prompt(6))
    assert list(lru._items) == ["d", "c", "e"]
    assert_same(lru.get("c"), prompt(5))
    check_accounting(lru)


def test_byte_cap_is_never_exceeded_with_prompts_of_many_sizes() -> None:
    rng = random.Random(3)
    lru = PromptLru(max_bytes=10_000)
    for step in range(2000):
        key = f"k{rng.randrange(40)}"
        if rng.random() < 0.7:
            lru.put(key, prompt(step, floats=rng.randrange(1, 1200)))
        elif rng.random() < 0.8:
            lru.get(key)
        else:
            lru.discard(key)
        check_accounting(lru)
    assert lru.stats.evictions > 0


def test_replacing_an_entry_accounts_for_its_new_size() -> None:
    lru = PromptLru(max_bytes=10_000)
    lru.put("a", prompt(1, floats=1000))
    lru.put("a", prompt(2, floats=10))
    assert lru.stats.bytes == prompt_bytes(prompt(2, floats=10))
    assert_same(lru.get("a"), prompt(2, floats=10))
    lru.discard("a")
    lru.discard("a")  # twice is harmless
    assert (len(lru), lru.stats.bytes, lru.stats.entries) == (0, 0, 0)
    check_accounting(lru)


def test_get_returns_copies_that_callers_may_modify() -> None:
    lru = PromptLru(max_bytes=10 * SIZE)
    lru.put("a", prompt(1))
    first = lru.get("a")
    assert first is not None
    first["vector"][:] = 99.0  # a caller scribbling on its prompt ...
    first["tag"][0] = 7.0
    first["extra"] = np.zeros(3)
    assert_same(lru.get("a"), prompt(1))  # ... does not change what the next caller gets


def test_put_stores_a_private_read_only_copy() -> None:
    lru = PromptLru(max_bytes=10 * SIZE)
    original = prompt(1)
    lru.put("a", original)
    original["vector"][:] = 42.0  # the caller keeps using its own arrays
    assert_same(lru.get("a"), prompt(1))
    for array in lru._items["a"].values():
        assert not array.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            array[...] = 0
    # The copies handed out are writable, and do not share memory with the stored arrays.
    handed = lru.get("a")
    assert handed is not None
    for name, array in handed.items():
        assert array.flags.writeable
        assert not np.shares_memory(array, lru._items["a"][name])


def test_an_entry_larger_than_the_whole_cache_is_not_stored() -> None:
    lru = PromptLru(max_bytes=SIZE - 1)
    lru.put("big", prompt(1))
    assert len(lru) == 0
    assert lru.get("big") is None
    assert lru.stats.evictions == 0
    roomy = PromptLru(max_bytes=2 * SIZE)
    roomy.put("a", prompt(1))
    roomy.put("huge", prompt(2, floats=1000))  # does not evict what is there to make room in vain
    assert_same(roomy.get("a"), prompt(1))
    assert roomy.get("huge") is None
    check_accounting(roomy)
    exact = PromptLru(max_bytes=SIZE)
    exact.put("fits", prompt(3))
    assert_same(exact.get("fits"), prompt(3))


@pytest.mark.parametrize("max_bytes", [0, -1])
def test_a_cache_needs_a_positive_capacity(max_bytes: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        PromptLru(max_bytes)


def test_concurrent_hammer_keeps_entries_whole_and_bytes_accounted() -> None:
    threads_count, ops = 8, 2000
    lru = PromptLru(max_bytes=40 * SIZE)
    barrier = threading.Barrier(threads_count)
    errors: list[BaseException] = []
    gets = [0] * threads_count

    def hammer(index: int) -> None:
        rng = random.Random(index)
        try:
            barrier.wait()
            for step in range(ops):
                key = f"k{rng.randrange(64)}"
                value = float(int(key[1:]))  # every prompt stored under a key says the key's number
                choice = rng.random()
                if choice < 0.45:
                    lru.put(key, prompt(value, floats=rng.randrange(1, 60)))
                elif choice < 0.9:
                    gets[index] += 1
                    got = lru.get(key)
                    if got is not None:
                        assert np.all(got["vector"] == np.float32(value)), "a torn or foreign entry"
                        assert got["tag"][0] == value
                        got["vector"][:] = -1.0  # scribble on the copy
                else:
                    lru.discard(key)
                if step % 250 == 0:
                    assert 0 <= lru.stats.bytes <= lru.max_bytes
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    check_accounting(lru)
    assert lru.stats.hits + lru.stats.misses == sum(gets)
    assert lru.stats.hits > 0
    assert lru.stats.evictions > 0
    for key, stored in lru._items.items():  # nothing stored was changed by the scribbling
        assert np.all(stored["vector"] == np.float32(float(key[1:])))


def _report_child_lru(conn: Connection) -> None:
    lru = voice_prompts.process_lru(1000)
    report = {
        "same_object_twice": voice_prompts.process_lru(1000) is lru,
        "entries": len(lru),
        "parent_key": lru.get("parent") is not None,
        "hits": lru.stats.hits,
    }
    lru.put("child", prompt(2))
    conn.send(report)
    conn.close()


def test_process_lru_is_one_per_process_and_fresh_in_a_forked_child() -> None:
    voice_prompts._lru = None
    parent = voice_prompts.process_lru(1000)
    assert voice_prompts.process_lru(1000) is parent
    parent.put("parent", prompt(1))
    assert parent.get("parent") is not None

    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_report_child_lru, args=(send,))
    child.start()
    send.close()
    assert receive.poll(30), "the child reported nothing"
    report = receive.recv()
    child.join(30)
    assert child.exitcode == 0
    assert report == {"same_object_twice": True, "entries": 0, "parent_key": False, "hits": 0}
    # The parent's cache is untouched by the child, and still the same one.
    assert voice_prompts.process_lru(1000) is parent
    assert len(parent) == 1
    assert parent.get("child") is None
    assert (parent.stats.hits, parent.stats.misses) == (1, 1)
