"""Subtitles (SRT and WebVTT) and a JSON manifest from the timeline of a rendered output (pure).

The input is what stitching knows: where each chunk starts and ends in the output (exact: computed from
the rendered lengths and pauses, like the chapter marks), the sentences of each chunk and, where the
engine reports them, sentence and word times inside it. Without sentence times, :func:`sentence_times`
spreads the chunk's time over its sentences in proportion to their spoken length (marked ``estimated``
in the manifest). When the engine reports words (espeak does), :func:`stored_words` keeps them with the
chunk and :func:`timed_sentences` times the sentences by their words.

Subtitles have one cue per sentence, split into several for a sentence longer than :data:`MAX_LINES`
lines of :data:`MAX_LINE_CHARS` characters. Cue text is user text, made safe for each format so that no
text can end a cue or start a new one. See docs/api.md, "Chapter files, the ZIP, subtitles and the
manifest".
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from worker.audio.tags import clean_text
from worker.script.sentences import split_sentences

__all__ = [
    "MAX_LINES",
    "MAX_LINE_CHARS",
    "ChapterTiming",
    "ChunkTiming",
    "Cue",
    "SentenceTiming",
    "WordTiming",
    "manifest",
    "sentence_times",
    "stored_words",
    "subtitle_cues",
    "timed_sentences",
    "to_srt",
    "to_webvtt",
]

MAX_LINE_CHARS = 42
"""Characters per subtitle line (the common broadcast and streaming guideline)."""

MAX_LINES = 2
"""Lines per cue."""

MANIFEST_VERSION = 1

_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SRT_ARROW = re.compile(r"-{2,}>")


@dataclass(frozen=True)
class WordTiming:
    """A word and where it is in the output, in seconds."""

    text: str
    start: float
    end: float


@dataclass(frozen=True)
class SentenceTiming:
    """A sentence as written and where it is in the output, in seconds; ``words`` are empty when the
    engine reports none; ``estimated`` when the times come from :func:`sentence_times`."""

    text: str
    start: float
    end: float
    words: list[WordTiming] = field(default_factory=list)
    estimated: bool = False


@dataclass(frozen=True)
class ChunkTiming:
    """A rendered chunk: its place in the script, its voice, where it is in the output (seconds, exact),
    its text as written and as spoken (after normalisation), and its sentences in order."""

    seq: int
    chapter: int
    voice: str
    start: float
    end: float
    written: str
    spoken: str
    sentences: list[SentenceTiming]
    speaker: str | None = None  # who says it (a job with a cast: a character, or "narrator")


@dataclass(frozen=True)
class ChapterTiming:
    """A chapter of the output and where it is, in seconds."""

    index: int
    title: str | None
    start: float
    end: float


@dataclass(frozen=True)
class Cue:
    """One subtitle: seconds, and its text, lines separated by ``"\\n"``; who says it when the script's
    speakers are known (a WebVTT voice span)."""

    start: float
    end: float
    text: str
    speaker: str | None = None


def sentence_times(
    written_sentences: list[str], spoken_lengths: list[int], start: float, end: float
) -> list[SentenceTiming]:
    """Estimated times of a chunk's sentences: the chunk's time spread over them in proportion to their
    spoken lengths in characters (evenly if they are all 0), the first starting at ``start`` and the last
    ending at ``end``. Raises ``ValueError`` for lists of different lengths, a negative length, or times
    that are not finite with ``start <= end``.
    """
    if len(written_sentences) != len(spoken_lengths):
        raise ValueError(f"{len(written_sentences)} sentences but {len(spoken_lengths)} spoken lengths")
    if any(n < 0 for n in spoken_lengths):
        raise ValueError("spoken lengths must be >= 0")
    _check_span(start, end)
    if not written_sentences:
        return []
    weights = spoken_lengths if sum(spoken_lengths) > 0 else [1] * len(spoken_lengths)
    total = sum(weights)
    times: list[SentenceTiming] = []
    done = 0
    at = start
    for n, (text, weight) in enumerate(zip(written_sentences, weights, strict=True)):
        done += weight
        # min: start + span * done / total can round past end (when the sentences after are empty)
        until = end if n == len(weights) - 1 else min(end, start + (end - start) * done / total)
        times.append(SentenceTiming(text=text, start=at, end=until, estimated=True))
        at = until
    return times


class WordSpan(Protocol):
    """A word in an engine's waveform: samples ``[start, end)``, characters ``[text_start, text_end)`` of
    the text it read (what :class:`worker.engines.base.WordMark` is)."""

    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def text_start(self) -> int: ...
    @property
    def text_end(self) -> int: ...


def stored_words(
    marks: Iterable[WordSpan], sample_rate: int, offset: int = 0, length: int | None = None
) -> list[list[float]]:
    """The words of a chunk as stored with it: ``[start, end, text_start, text_end]`` with times in
    seconds from the start of the chunk's stored audio, which is the engine's waveform from sample
    ``offset`` on, ``length`` samples long (``None``: to its end), as left by trimming the silence at its
    ends. Times are clamped into the stored audio (rounded to 0.1 ms); text offsets stay as they are.
    """
    if sample_rate <= 0 or offset < 0 or (length is not None and length < 0):
        raise ValueError(f"bad sample_rate, offset or length: {sample_rate!r}, {offset!r}, {length!r}")
    limit = math.inf if length is None else length

    def seconds(sample: int) -> float:
        return round(min(max(sample - offset, 0), limit) / sample_rate, 4)

    return [[seconds(m.start), seconds(m.end), m.text_start, m.text_end] for m in marks]


def timed_sentences(
    written_sentences: Sequence[str],
    spoken: str,
    words: Sequence[Sequence[float]],
    start: float,
    end: float,
    language: str = "en",
) -> list[SentenceTiming]:
    """The sentences of a chunk that is at ``[start, end]`` in the output, timed by its words where the
    engine reported them.

    ``words`` are stored words (:func:`stored_words`: seconds from the chunk's start, characters of
    ``spoken``, the text the engine read); malformed ones are ignored. Every word becomes a
    :class:`WordTiming` with its spoken text, clamped into ``[start, end]``, in text order and never
    before the previous one ends. A sentence runs from its first word's start to its last word's end
    (sentences without words share the time between their neighbours, ``estimated``). Which words are whose:
    when ``spoken`` splits (:func:`split_sentences`) into as many sentences as ``written_sentences``, the
    n-th written sentence has the words of the n-th spoken one (``estimated=False``); otherwise each
    word goes to the sentence of :func:`sentence_times` its middle falls in (``estimated=True``).
    Without words, the result is :func:`sentence_times`'s (lengths of the written sentences). Raises
    ``ValueError`` as :func:`sentence_times` does.
    """
    _check_span(start, end)
    written = list(written_sentences)
    estimate = sentence_times(written, [len(s) for s in written], start, end)
    timed = _book_words(spoken, words, start, end)
    if not written or not timed:
        return estimate
    grouped: list[list[WordTiming]] = [[] for _ in written]
    bounds = _sentence_starts(spoken, split_sentences(spoken, language))
    matched = bounds is not None and len(bounds) == len(written)
    if bounds is not None and matched:
        for text_start, word in timed:
            grouped[max(bisect_right(bounds, text_start) - 1, 0)].append(word)
    else:
        starts = [s.start for s in estimate]
        for _text_start, word in timed:
            grouped[max(bisect_right(starts, (word.start + word.end) / 2) - 1, 0)].append(word)
    out: list[SentenceTiming] = []
    n = 0
    while n < len(written):
        group = grouped[n]
        if group:
            out.append(SentenceTiming(written[n], group[0].start, group[-1].end, group, not matched))
            n += 1
            continue
        # A run of sentences without words shares the time between its neighbours (an estimate).
        run_end = next((m for m in range(n, len(written)) if grouped[m]), len(written))
        after = out[-1].end if out else start
        following = grouped[run_end][0].start if run_end < len(written) else end
        run = written[n:run_end]
        out.extend(sentence_times(run, [len(s) for s in run], after, max(after, following)))
        n = run_end
    return out


def _book_words(
    spoken: str, words: Sequence[Sequence[float]], start: float, end: float
) -> list[tuple[int, WordTiming]]:
    """The well-formed stored words as (text start, word in output time), in text order, without
    overlaps in text or time, inside ``[start, end]``."""
    found: list[tuple[int, int, float, float]] = []
    for word in words:
        if len(word) != 4 or not all(isinstance(v, int | float) and math.isfinite(v) for v in word):
            continue
        first, last, text_start, text_end = word
        if text_start != int(text_start) or text_end != int(text_end):
            continue
        if not 0 <= text_start < text_end <= len(spoken) or last < first:
            continue
        found.append((int(text_start), int(text_end), float(first), float(last)))
    found.sort()
    out: list[tuple[int, WordTiming]] = []
    text_floor, time_floor = 0, start
    for text_start, text_end, first, last in found:
        if text_start < text_floor:  # overlaps the previous word's text
            continue
        word_start = min(max(start + first, time_floor), end)
        word_end = min(max(start + last, word_start), end)
        out.append((text_start, WordTiming(spoken[text_start:text_end], word_start, word_end)))
        text_floor, time_floor = text_end, word_end
    return out


def _sentence_starts(spoken: str, sentences: Sequence[str]) -> list[int] | None:
    """Where each of ``sentences`` (from :func:`split_sentences`: whole words of ``spoken``, single
    spaced) starts in ``spoken``; None if they do not cover its words."""
    tokens = [m.start() for m in re.finditer(r"\S+", spoken)]
    starts: list[int] = []
    at = 0
    for sentence in sentences:
        if at >= len(tokens):
            return None
        starts.append(tokens[at])
        at += len(sentence.split())
    return starts if at == len(tokens) else None


def _check_span(start: float, end: float) -> None:
    if not (math.isfinite(start) and math.isfinite(end)) or start < 0 or end < start:
        raise ValueError(f"times must be finite with 0 <= start <= end, got {start!r}, {end!r}")


def _one_line(text: str) -> str:
    """``text`` on one line: control characters and line separators become spaces, runs of whitespace
    one space; NUL removed and lone surrogates replaced as in tags."""
    return " ".join(_UNPRINTABLE.sub(" ", clean_text(text)).split())


def _wrap(text: str, width: int) -> list[str]:
    """Greedy line filling of one-line ``text``; a word longer than ``width`` is cut."""
    lines: list[str] = []
    line = ""
    for whole in text.split():
        word = whole
        while len(word) > width:
            if line:
                lines.append(line)
                line = ""
            lines.append(word[:width])
            word = word[width:]
        if not word:
            continue
        if not line:
            line = word
        elif len(line) + 1 + len(word) <= width:
            line += " " + word
        else:
            lines.append(line)
            line = word
    if line:
        lines.append(line)
    return lines


def _ms(seconds: float) -> int:
    if not math.isfinite(seconds):
        raise ValueError(f"times must be finite, got {seconds!r}")
    return round(seconds * 1000)


def subtitle_cues(
    chunks: Iterable[ChunkTiming], *, max_line_chars: int = MAX_LINE_CHARS, max_lines: int = MAX_LINES
) -> list[Cue]:
    """The subtitle cues of a timeline, in order: one per sentence (the chunk's written text if it has
    no sentences), split into several when it needs more than ``max_lines`` lines of ``max_line_chars``.

    Times are whole milliseconds; cues are ordered, do not overlap, last at least 1 ms and stay inside
    their chunk (sentence times are clamped into it). A piece of text that would get no time at all (a
    sentence with no spoken length, a chunk too short for its cues) joins the next cue, or the previous
    one at the very end (or, if there is no cue at all, takes the last chunk's whole time), which may then
    have more lines: no text is dropped, except that of a timeline with no audio at all. Chunks are taken
    in ``seq`` order.
    """
    if max_line_chars < 1 or max_lines < 1:
        raise ValueError("max_line_chars and max_lines must be >= 1")
    pieces: list[tuple[str, int, int, str | None]] = []  # (one-line text, start ms, end ms, speaker)
    floor = 0
    audible: tuple[int, int] | None = None  # the last chunk that lasts at least 1 ms
    for chunk in sorted(chunks, key=lambda c: c.seq):
        first, last = _ms(chunk.start), _ms(chunk.end)
        last = max(last, first)
        if last > max(first, floor):
            audible = (max(first, floor), last)
        floor = min(max(floor, first), last)
        sentences = chunk.sentences or [SentenceTiming(chunk.written, chunk.start, chunk.end)]
        for sentence in sentences:
            text = _one_line(sentence.text)
            if not text:
                continue
            start = min(max(_ms(sentence.start), floor), last)
            end = min(max(_ms(sentence.end), start), last)
            lines = _wrap(text, max_line_chars)
            blocks = [" ".join(lines[i : i + max_lines]) for i in range(0, len(lines), max_lines)]
            total = sum(len(b) for b in blocks)
            done = 0
            at = start
            for block in blocks:
                done += len(block)
                until = start + (2 * (end - start) * done + total) // (2 * total)  # nearest ms
                pieces.append((block, at, until, chunk.speaker))
                at = until
            floor = end
    cues: list[Cue] = []
    waiting = ""
    for piece, start, end, speaker in pieces:
        text = f"{waiting} {piece}" if waiting else piece
        if end <= start:
            waiting = text
            continue
        waiting = ""
        cues.append(Cue(start / 1000, end / 1000, "\n".join(_wrap(text, max_line_chars)), speaker))
    if waiting and cues:
        last_cue = cues[-1]
        joined = " ".join([*last_cue.text.split("\n"), waiting])
        cues[-1] = Cue(
            last_cue.start, last_cue.end, "\n".join(_wrap(joined, max_line_chars)), last_cue.speaker
        )
    elif waiting and audible is not None:  # every sentence without time, but some audio: show it all there
        last_speaker = pieces[-1][3] if pieces else None
        cues.append(
            Cue(audible[0] / 1000, audible[1] / 1000, "\n".join(_wrap(waiting, max_line_chars)), last_speaker)
        )
    return cues


def _prepared(cues: Iterable[Cue]) -> list[tuple[int, int, list[str], str | None]]:
    """Cues in start order as (start ms, end ms, one-line lines, speaker), dropping those with no text;
    an end not after its start becomes start + 1 ms (both formats require end > start)."""
    out = []
    for cue in cues:
        start, end = _ms(cue.start), _ms(cue.end)
        if start < 0 or end < 0:
            raise ValueError(f"cue times must be >= 0, got {cue.start!r}, {cue.end!r}")
        lines = [line for line in (_one_line(part) for part in cue.text.split("\n")) if line]
        if lines:
            out.append((start, max(end, start + 1), lines, cue.speaker))
    out.sort(key=lambda cue: cue[0])
    return out


def _timestamp(ms: int, separator: str) -> str:
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}{separator}{millis:03d}"


def to_srt(cues: Sequence[Cue]) -> str:
    """SubRip: cues numbered from 1, ``HH:MM:SS,mmm --> HH:MM:SS,mmm``, text lines, a blank line."""
    parts = []
    for n, (start, end, lines, _) in enumerate(_prepared(cues), start=1):
        text = "\n".join(_SRT_ARROW.sub("->", line) for line in lines)
        parts.append(f"{n}\n{_timestamp(start, ',')} --> {_timestamp(end, ',')}\n{text}\n")
    return "\n".join(parts)


def _vtt_escape(line: str) -> str:
    return line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _voice_span(speaker: str | None) -> str:
    """The WebVTT voice span that opens a cue said by ``speaker`` (``<v Narrator>`` for the narrator)."""
    if speaker is None:
        return ""
    name = "Narrator" if speaker == "narrator" else " ".join(_one_line(speaker).split())
    return f"<v {_vtt_escape(name)}>" if name else ""


def to_webvtt(cues: Sequence[Cue]) -> str:
    """WebVTT: the ``WEBVTT`` header, then cues ``HH:MM:SS.mmm --> HH:MM:SS.mmm`` with escaped text,
    opened by a voice span naming the speaker when the cue has one."""
    parts = ["WEBVTT\n"]
    for start, end, lines, speaker in _prepared(cues):
        text = _voice_span(speaker) + "\n".join(_vtt_escape(line) for line in lines)
        parts.append(f"{_timestamp(start, '.')} --> {_timestamp(end, '.')}\n{text}\n")
    return "\n".join(parts)


def _seconds(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError(f"times must be finite, got {value!r}")
    return round(value, 3)


def manifest(chapters: Iterable[ChapterTiming], chunks: Iterable[ChunkTiming]) -> dict[str, Any]:
    """The timeline as JSON-ready data: chapters with start and end; chunks (in ``seq`` order) with text,
    spoken text, voice, start and end; their sentences with start, end and ``estimated``; words where the
    engine reported them. Times are seconds rounded to the millisecond; text is as written (NUL removed,
    lone surrogates replaced, so that any JSON encoder takes it). Raises ``ValueError`` for a time that
    is not finite."""
    chapter_list: list[dict[str, Any]] = [
        {
            "index": c.index,
            "title": None if c.title is None else clean_text(c.title),
            "start": _seconds(c.start),
            "end": _seconds(c.end),
        }
        for c in chapters
    ]
    chunk_list = []
    chunks_sorted = sorted(chunks, key=lambda c: c.seq)
    for chunk in chunks_sorted:
        sentences = []
        for s in chunk.sentences:
            entry: dict[str, Any] = {
                "text": clean_text(s.text),
                "start": _seconds(s.start),
                "end": _seconds(s.end),
                "estimated": s.estimated,
            }
            if chunk.speaker is not None:
                entry["speaker"] = clean_text(chunk.speaker)
            if s.words:
                entry["words"] = [
                    {"text": clean_text(w.text), "start": _seconds(w.start), "end": _seconds(w.end)}
                    for w in s.words
                ]
            sentences.append(entry)
        chunk_list.append(
            {
                "seq": chunk.seq,
                "chapter": chunk.chapter,
                "voice": clean_text(chunk.voice),
                "start": _seconds(chunk.start),
                "end": _seconds(chunk.end),
                "text": clean_text(chunk.written),
                "spoken": clean_text(chunk.spoken),
                "sentences": sentences,
                **({"speaker": clean_text(chunk.speaker)} if chunk.speaker is not None else {}),
            }
        )
    ends = [_seconds(c.end) for c in chunks_sorted] + [c["end"] for c in chapter_list]
    return {
        "version": MANIFEST_VERSION,
        "duration": max(ends, default=0.0),
        "chapters": chapter_list,
        "chunks": chunk_list,
    }
