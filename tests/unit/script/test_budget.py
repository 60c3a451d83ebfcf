"""Parsing and chunking a script takes time linear in its length, whatever the script.

``POST /v1/jobs`` parses and chunks the script on the request path, so pathological scripts are timed here
at realistic sizes, up to the server's limit of 2,000,000 characters. Each pattern that costs real time
is timed at two sizes, the larger four times the smaller, in the same test: linear work takes about four
times as long, quadratic work sixteen times; the tests allow eight. Scripts at the size limit must finish
within a bound about ten times what they take on an idle machine, far below what quadratic work takes.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.cost import CpuMeter
from worker.script import ScriptError, ScriptFormat, make_chunks, parse_document

LIMIT = 2_000_000  # characters: the server's default max_script_chars
CHUNK_CHARS = 400
RATIO = 8.0  # allowed time ratio for four times the input
_VOICE = "<!-- voice: Alice -->\nHello there.\n"


def _repeat(unit: str, size: int, head: str = "Look: ") -> str:
    """``head``, then ``unit`` repeated up to ``size`` characters in all."""
    return head + unit * max(1, (size - len(head)) // len(unit))


def _nested(size: int) -> str:
    """A Markdown script of ``size`` characters: lists and blockquotes nested deep, in turn."""
    lists = "".join("  " * depth + f"- Item {depth}. Dr. Who, e.g. here.\n" for depth in range(9))
    quotes = "".join(">" * depth + f" Quote {depth}. Dr. Who, e.g. here.\n" for depth in range(1, 19))
    both = "".join("> " * depth + f"- Both {depth}. Dr. Who, e.g. here.\n" for depth in range(1, 9))
    script = f"{lists}\n{quotes}\n{both}\n"
    return script * (size // len(script))


def _mixed(size: int) -> str:
    """A plain script of ``size`` characters: paragraphs of pathological text of every kind, in turn."""
    paragraphs = [
        _repeat("Dr. Mr. St. e.g. i.e. 3.5 U.S.A. ", 20_000),
        _repeat("![", 20_000),  # one word
        _repeat("![ ", 20_000),
        _repeat("1. ", 20_000),
        _repeat('"Stop!" (he said.) ... Why?! \u201cNo.\u201d ', 20_000),
        _repeat("\u548c\u5e73\u3002", 20_000),  # CJK: no spaces at all
        _repeat(_VOICE, 20_000, ""),
        _repeat("and on and on, e.g. the U.S.A. and so on ", 20_000),
    ]
    script = "\n\n".join(paragraphs) + "\n\n"
    return script * (size // len(script))


def _seconds(script: str, fmt: ScriptFormat) -> float:
    """CPU time to parse ``script`` and cut it into chunks (which must not be empty)."""
    meter = CpuMeter()
    chunks = make_chunks(parse_document(script, fmt).chapters, CHUNK_CHARS)
    elapsed = meter.seconds()
    assert chunks
    return elapsed


def _times(make: Callable[[int], str], fmt: ScriptFormat, size: int) -> tuple[float, float]:
    """Seconds for a script of ``size`` characters (best of two) and for one four times as long."""
    small, large = make(size), make(4 * size)
    assert 3.9 < len(large) / len(small) < 4.1
    return min(_seconds(small, fmt) for _ in range(2)), _seconds(large, fmt)


# name: format, script of about n characters, the smaller n (big enough that noise does not dominate).
_GROWING: dict[str, tuple[ScriptFormat, Callable[[int], str], int]] = {
    "abbreviations": ("plain", lambda n: _repeat("Dr. Mr. St. e.g. i.e. 3.5 U.S.A. ", n), 25_000),
    "spaced exclamation brackets": ("plain", lambda n: _repeat("![ ", n), 25_000),
    "numbered stops": ("plain", lambda n: _repeat("1. ", n), 25_000),
    "run-on sentence": ("plain", lambda n: _repeat("and on and on, e.g. the U.S.A. and so on ", n), 25_000),
    "voice lines": ("markdown", lambda n: _repeat(_VOICE, n, ""), 20_000),
    "voice lines, plain": ("plain", lambda n: _repeat(_VOICE, n, ""), 25_000),
    "image openers": ("markdown", lambda n: _repeat("![", n), 8_000),
    "nested lists and blockquotes": ("markdown", _nested, 40_000),
    # 25,000 and 100,000 headings, and a line to read (a script of headings alone is refused at once).
    "headings without blank lines": ("markdown", lambda n: _repeat("# Chapter\n", n, "Look.\n"), 250_000),
}


@pytest.mark.parametrize("name", list(_GROWING))
def test_time_grows_linearly(name: str) -> None:
    fmt, make, size = _GROWING[name]
    small, large = _times(make, fmt, size)
    if large > RATIO * small:  # measure once more before calling it superlinear: the machine may be busy
        again_small, again_large = _times(make, fmt, size)
        small, large = min(small, again_small), min(large, again_large)
    assert large < RATIO * small, f"{name}: {small:.3f} s for {size} characters, {large:.3f} s for 4x"


@pytest.mark.parametrize(
    ("fmt", "unit"),
    [
        pytest.param("plain", "a", id="one word, plain"),
        pytest.param("markdown", "a", id="one word, markdown"),
        pytest.param("plain", "![", id="exclamation brackets without spaces"),
    ],
)
def test_one_word_at_the_size_limit(fmt: ScriptFormat, unit: str) -> None:
    # About 0.1 s: no sentence can end inside a word, so pysbd never sees it.
    assert _seconds(_repeat(unit, LIMIT), fmt) < 2.0


def test_mixed_pathological_script_at_the_size_limit() -> None:
    # About 10 s, nearly all of it pysbd at work on windows of at most 2,000 characters.
    script = _mixed(LIMIT)
    assert len(script) > 0.95 * LIMIT
    assert _seconds(script, "plain") < 100.0


@pytest.mark.parametrize(
    "script",
    [
        pytest.param(lambda: (">" * 30 + " Deep.\n") * (LIMIT // 37), id="blockquotes"),
        pytest.param(lambda: "".join("  " * (i % 40) + "- Item.\n" for i in range(LIMIT // 47)), id="lists"),
    ],
)
def test_nesting_too_deep_at_the_size_limit_is_refused_quickly(script: Callable[[], str]) -> None:
    source = script()
    assert len(source) > 0.95 * LIMIT
    meter = CpuMeter()
    with pytest.raises(ScriptError, match="nested too deeply"):
        parse_document(source, "markdown")
    assert meter.seconds() < 10.0  # about 1 s
