"""pysbd's patterns compiled once each (worker/script/pysbd_patterns.py), the sentences unchanged."""

from __future__ import annotations

import random
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pysbd
from pysbd.lang.english import English

from worker.script import pysbd_patterns
from worker.script.sentences import split_sentences


def _abbreviated_prose(paragraphs: int, seed: int = 15) -> list[str]:
    """Paragraphs in which every abbreviation pysbd knows comes up, in both cases: more distinct patterns
    than the ``re`` module's own cache of 512 holds."""
    rng = random.Random(seed)
    abbreviations = sorted(English.Abbreviation.ABBREVIATIONS)

    def word() -> str:
        if rng.random() < 0.2:
            abbreviation = rng.choice(abbreviations)
            return str(abbreviation.capitalize() if rng.random() < 0.5 else abbreviation) + "."
        return "".join(rng.choice("etaoinshrdlucmfwypvbg") for _ in range(rng.randint(2, 9)))

    def sentence() -> str:
        return " ".join(word() for _ in range(rng.randint(6, 14))).capitalize() + rng.choice(".?!")

    return [" ".join(sentence() for _ in range(5)) for _ in range(paragraphs)]


@contextmanager
def _pysbd_with(module: Any) -> Iterator[None]:
    """pysbd's modules using ``module`` as their ``re`` for the block."""
    pysbd_patterns.install()
    names = [n for n, m in sys.modules.items() if n.startswith("pysbd") and hasattr(m, "re")]
    kept = {name: getattr(sys.modules[name], "re") for name in names}  # noqa: B009
    for name in names:
        setattr(sys.modules[name], "re", module)  # noqa: B010
    try:
        yield
    finally:
        for name, value in kept.items():
            setattr(sys.modules[name], "re", value)  # noqa: B010


def test_sentences_are_exactly_pysbd_own_with_the_shared_cache() -> None:
    text = " ".join(_abbreviated_prose(40))
    with _pysbd_with(re):
        plain = pysbd.Segmenter(language="en", clean=False).segment(text)
    with _pysbd_with(pysbd_patterns.CACHED_RE):
        cached = pysbd.Segmenter(language="en", clean=False).segment(text)
    assert len(plain) > 100
    assert cached == plain


def test_each_pattern_is_compiled_once_however_many_paragraphs() -> None:
    paragraphs = _abbreviated_prose(30)
    split_sentences(paragraphs[0])  # installs the cache
    changed = pysbd_patterns.install()  # already installed: nothing left to change
    assert changed == []
    assert sys.modules["pysbd.abbreviation_replacer"].re is pysbd_patterns.CACHED_RE
    pysbd_patterns._compiled.cache_clear()
    first = [split_sentences(p) for p in paragraphs]
    compiled = pysbd_patterns.compiled_patterns()
    assert compiled > 512, "the text needs more patterns than re's own cache holds"
    again = [split_sentences(p) for p in paragraphs]
    assert again == first
    assert pysbd_patterns.compiled_patterns() == compiled, "a pattern was compiled twice"


def test_flags_and_compiled_patterns_behave_as_in_re() -> None:
    cached = pysbd_patterns.CACHED_RE
    assert cached.sub("a", "b", "AaA", flags=re.IGNORECASE) == "bbb"
    assert cached.sub("a", "b", "AaA") == "AbA"
    assert cached.findall(re.compile("[0-9]+"), "a1b22") == ["1", "22"]
    assert cached.split(r"\s", "a b c", 1) == ["a", "b c"]
    assert cached.escape(".") == re.escape(".")
    assert cached.IGNORECASE is re.IGNORECASE
