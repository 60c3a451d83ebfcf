"""Subtitles and the manifest: golden outputs, and properties checked with strict parsers of both formats."""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.audio.timings import (
    MAX_LINE_CHARS,
    ChapterTiming,
    ChunkTiming,
    Cue,
    SentenceTiming,
    WordTiming,
    manifest,
    sentence_times,
    stored_words,
    subtitle_cues,
    timed_sentences,
    to_srt,
    to_webvtt,
)
from worker.engines.base import SynthesisRequest, WordMark
from worker.engines.espeak import EspeakEngine


def chunk(seq: int, start: float, end: float, *sentences: str, chapter: int = 0) -> ChunkTiming:
    times = sentence_times(list(sentences), [len(s) for s in sentences], start, end)
    return ChunkTiming(seq, chapter, "narrator", start, end, " ".join(sentences), " ".join(sentences), times)


# --- sentence_times --------------------------------------------------------------------------------------


def test_sentence_times_spread_in_proportion_to_spoken_length() -> None:
    times = sentence_times(["One.", "Two three.", "4."], [4, 12, 4], 10.0, 12.0)
    assert [(t.text, t.start, t.end) for t in times] == [
        ("One.", 10.0, 10.4),
        ("Two three.", 10.4, pytest.approx(11.6)),
        ("4.", pytest.approx(11.6), 12.0),
    ]
    assert all(t.estimated and t.words == [] for t in times)
    assert times[0].start == 10.0
    assert times[-1].end == 12.0  # exactly, not by accumulation
    assert [t.end for t in times[:-1]] == [t.start for t in times[1:]]


def test_sentence_times_edge_cases() -> None:
    assert sentence_times([], [], 1.0, 2.0) == []
    even = sentence_times(["a", "b"], [0, 0], 0.0, 1.0)
    assert [(t.start, t.end) for t in even] == [(0.0, 0.5), (0.5, 1.0)]
    with pytest.raises(ValueError, match="spoken lengths"):
        sentence_times(["a"], [1, 2], 0.0, 1.0)
    with pytest.raises(ValueError, match=">= 0"):
        sentence_times(["a"], [-1], 0.0, 1.0)
    for start, end in ((2.0, 1.0), (0.0, float("nan")), (-1.0, 1.0), (0.0, float("inf"))):
        with pytest.raises(ValueError, match="finite"):
            sentence_times(["a"], [1], start, end)


@given(
    lengths=st.lists(st.integers(0, 500), min_size=1, max_size=30),
    start=st.floats(0, 1e5),
    span=st.floats(0, 1e3),
)
def test_sentence_times_cover_the_chunk_in_order(lengths: list[int], start: float, span: float) -> None:
    end = start + span
    times = sentence_times(["x"] * len(lengths), lengths, start, end)
    assert times[0].start == start
    assert times[-1].end == end
    for t, following in itertools.pairwise(times):
        assert start <= t.start <= t.end <= end
        assert t.end == following.start


# --- timed_sentences and stored_words ---------------------------------------------------------------------


def said(spoken: str, *words: tuple[str, float, float]) -> list[list[float]]:
    """Stored words: each word's next occurrence in ``spoken`` with its times in the chunk."""
    out: list[list[float]] = []
    at = 0
    for word, start, end in words:
        at = spoken.index(word, at)
        out.append([start, end, at, at + len(word)])
        at += len(word)
    return out


SPOKEN = "Doctor Smith paid five dollars. He left at nine."
WRITTEN = ["Dr. Smith paid $5.", "He left at 9."]
SPOKEN_WORDS = said(
    SPOKEN,
    ("Doctor", 0.0, 0.3),
    ("Smith", 0.3, 0.6),
    ("paid", 0.62, 0.8),
    ("five", 0.8, 1.0),
    ("dollars", 1.0, 1.4),
    ("He", 2.0, 2.1),
    ("left", 2.1, 2.4),
    ("at", 2.4, 2.5),
    ("nine", 2.5, 2.9),
)


def test_timed_sentences_take_their_times_from_their_words() -> None:
    times = timed_sentences(WRITTEN, SPOKEN, SPOKEN_WORDS, 10.0, 13.0, "en")
    assert [(t.text, t.estimated) for t in times] == [(w, False) for w in WRITTEN]
    assert [x for t in times for x in (t.start, t.end)] == pytest.approx([10.0, 11.4, 12.0, 12.9])
    assert [w.text for w in times[0].words] == ["Doctor", "Smith", "paid", "five", "dollars"]
    assert [w.text for w in times[1].words] == ["He", "left", "at", "nine"]
    assert [times[1].words[0].start, times[1].words[0].end] == pytest.approx([12.0, 12.1])
    assert times[0].end < times[1].start  # the pause between them is in neither


def test_timed_sentences_without_words_are_the_estimate() -> None:
    for words in ([], [[1.0, 2.0]], [[0.0, 1.0, 5, 2]], [[0.0, 1.0, 0, 999]], [[float("nan"), 1.0, 0, 2]]):
        assert timed_sentences(WRITTEN, SPOKEN, words, 10.0, 13.0, "en") == sentence_times(
            WRITTEN, [len(s) for s in WRITTEN], 10.0, 13.0
        )
    assert timed_sentences([], SPOKEN, SPOKEN_WORDS, 10.0, 13.0, "en") == []
    with pytest.raises(ValueError, match="finite"):
        timed_sentences(WRITTEN, SPOKEN, SPOKEN_WORDS, 13.0, 10.0, "en")


def test_timed_sentences_fall_back_when_the_sentences_do_not_match() -> None:
    # The spoken text is one sentence, the written one two: each word goes to the estimated sentence its
    # middle falls in (the estimate puts the boundary at 1.2 * 8 / 19 = 0.505 s, inside "two"), and the
    # sentences, marked estimated, span their words.
    spoken = "One two three four."
    words = said(spoken, ("One", 0.0, 0.2), ("two", 0.3, 0.5), ("three", 0.6, 0.9), ("four", 1.0, 1.2))
    times = timed_sentences(["One two.", "Three four."], spoken, words, 0.0, 1.2, "en")
    assert [(t.start, t.end, t.estimated) for t in times] == [(0.0, 0.5, True), (0.6, 1.2, True)]
    assert [[w.text for w in t.words] for t in times] == [["One", "two"], ["three", "four"]]
    # Written sentences that get no word share the time between their neighbours.
    times = timed_sentences(["One.", "Two.", "Three four."], spoken, words[2:], 0.0, 1.2, "en")
    assert [(t.start, t.end, t.estimated) for t in times] == [
        (0.0, 0.3, True),
        (0.3, 0.6, True),
        (0.6, 1.2, True),
    ]


def test_timed_sentences_clamp_order_and_drop_bad_words() -> None:
    spoken = "Alpha beta. Gamma delta."
    words = [
        [-0.5, 0.2, 0, 5],  # starts before the chunk
        [0.1, 0.4, 6, 10],  # overlaps the previous word's time
        [0.5, 0.3, 12, 17],  # ends before it starts: dropped
        [9.0, 12.0, 18, 23],  # runs past the chunk's end
        [0.2, 0.3, 3, 8],  # overlaps two words' text: dropped
        [0.2, 0.3, 1.5, 4],  # not a character offset: dropped
        [0.2, 0.3],  # not a word
    ]
    times = timed_sentences(["Alpha beta.", "Gamma delta."], spoken, words, 5.0, 7.0, "en")
    assert [w.text for t in times for w in t.words] == ["Alpha", "beta", "delta"]
    alpha, beta, delta = (w for t in times for w in t.words)
    assert (alpha.start, alpha.end) == (5.0, 5.2)
    assert (beta.start, beta.end) == (5.2, 5.4)
    assert (delta.start, delta.end) == (7.0, 7.0)
    assert [(t.start, t.end, t.estimated) for t in times] == [(5.0, 5.4, False), (7.0, 7.0, False)]


def test_a_sentence_without_words_gets_the_time_between_its_neighbours() -> None:
    spoken = "First one. Second. Third one."
    words = said(spoken, ("First", 0.0, 0.2), ("one", 0.2, 0.4), ("Third", 1.0, 1.2), ("one", 1.2, 1.5))
    times = timed_sentences(["First one.", "Second.", "Third one."], spoken, words, 0.0, 2.0, "en")
    assert [(t.start, t.end, t.estimated) for t in times] == [
        (0.0, 0.4, False),
        (0.4, 1.0, True),
        (1.0, 1.5, False),
    ]


@settings(max_examples=200, deadline=None)
@given(
    words=st.lists(
        st.tuples(st.floats(-5, 50), st.floats(-5, 50), st.integers(-3, 40), st.integers(-3, 40)).map(list),
        max_size=15,
    ),
    start=st.floats(0, 1e4),
    span=st.floats(0, 20),
)
def test_timed_sentences_stay_in_the_chunk_and_in_order(
    words: list[list[float]], start: float, span: float
) -> None:
    spoken = "One two three. Four five! Six seven eight nine."
    end = start + span
    for written in (["One.", "Two.", "Three."], ["One.", "Two."]):  # as spoken, and not
        times = timed_sentences(written, spoken, words, start, end, "en")
        assert len(times) == len(written)
        floor = start
        for sentence in times:
            assert floor <= sentence.start <= sentence.end <= end
            floor = sentence.end
            for word in sentence.words:
                assert sentence.start <= word.start <= word.end <= sentence.end
        flat = [w for t in times for w in t.words]
        for word, following in itertools.pairwise(flat):
            assert word.end <= following.start


def test_stored_words_are_relative_to_the_stored_audio() -> None:
    marks = [WordMark(0, 2205, 0, 5), WordMark(4410, 8820, 6, 11), WordMark(30000, 30000, 12, 14)]
    assert stored_words(marks, 22050) == [[0.0, 0.1, 0, 5], [0.2, 0.4, 6, 11], [1.3605, 1.3605, 12, 14]]
    # The stored audio starts 2205 samples in and lasts 0.25 s: times shift and are clamped into it.
    assert stored_words(marks, 22050, offset=2205, length=5512) == [
        [0.0, 0.0, 0, 5],
        [0.1, 0.25, 6, 11],
        [0.25, 0.25, 12, 14],
    ]
    assert stored_words([], 22050) == []
    with pytest.raises(ValueError, match="sample_rate"):
        stored_words(marks, 0)
    with pytest.raises(ValueError, match="offset"):
        stored_words(marks, 22050, offset=-1)


def test_espeak_words_time_the_sentences_of_a_chunk() -> None:
    engine = EspeakEngine()
    spoken = "The lamp was lit at dusk. Nobody saw the keeper leave."
    [(wave, marks)] = engine.synthesize_timed([SynthesisRequest(spoken, {})])
    words = json.loads(json.dumps(stored_words(marks, engine.sample_rate)))  # as stored in the database
    duration = wave.size / engine.sample_rate
    times = timed_sentences(
        ["The lamp was lit at dusk.", "Nobody saw the keeper leave."],
        spoken,
        words,
        3.0,
        3.0 + duration,
        "en",
    )
    assert [t.estimated for t in times] == [False, False]
    assert [[w.text for w in t.words] for t in times] == [
        ["The", "lamp", "was", "lit", "at", "dusk"],
        ["Nobody", "saw", "the", "keeper", "leave"],
    ]
    assert times[0].start < 3.1
    assert times[0].end + 0.1 < times[1].start  # the pause after the full stop
    assert times[1].end > 3.0 + duration - 0.1
    chunk_timing = ChunkTiming(0, 0, "v", 3.0, 3.0 + duration, spoken, spoken, times)
    data = manifest([], [chunk_timing])
    sentence = data["chunks"][0]["sentences"][1]
    assert sentence["estimated"] is False
    assert [w["text"] for w in sentence["words"]] == ["Nobody", "saw", "the", "keeper", "leave"]


# --- golden outputs ----------------------------------------------------------------------------------------

TIMELINE = [
    chunk(0, 0.75, 3.25, "It was a bright cold day in April.", "The clocks were striking thirteen."),
    chunk(
        1, 3.6, 9.0, "Winston Smith, his chin nuzzled into his breast in an effort to escape the vile wind."
    ),
    chunk(2, 9.5, 10.0, "<b>Tom & Jerry</b> --> end", chapter=1),
]

GOLDEN_SRT = """\
1
00:00:00,750 --> 00:00:02,000
It was a bright cold day in April.

2
00:00:02,000 --> 00:00:03,250
The clocks were striking thirteen.

3
00:00:03,600 --> 00:00:09,000
Winston Smith, his chin nuzzled into his
breast in an effort to escape the vile
wind.

4
00:00:09,500 --> 00:00:10,000
<b>Tom & Jerry</b> -> end
"""


def test_golden_srt_and_webvtt() -> None:
    cues = subtitle_cues(TIMELINE, max_lines=3)
    assert to_srt(cues) == GOLDEN_SRT
    assert to_webvtt(cues) == (
        "WEBVTT\n\n"
        "00:00:00.750 --> 00:00:02.000\nIt was a bright cold day in April.\n\n"
        "00:00:02.000 --> 00:00:03.250\nThe clocks were striking thirteen.\n\n"
        "00:00:03.600 --> 00:00:09.000\nWinston Smith, his chin nuzzled into his\n"
        "breast in an effort to escape the vile\nwind.\n\n"
        "00:00:09.500 --> 00:00:10.000\n&lt;b&gt;Tom &amp; Jerry&lt;/b&gt; --&gt; end\n"
    )


def test_a_long_sentence_becomes_two_line_cues_timed_by_characters() -> None:
    cues = subtitle_cues(TIMELINE[1:2])
    assert [c.text for c in cues] == [
        "Winston Smith, his chin nuzzled into his\nbreast in an effort to escape the vile",
        "wind.",
    ]
    # 79 characters then 5 (the line break counts as the space it replaced) over 3.6-9.0 s.
    assert [(c.start, c.end) for c in cues] == [(3.6, 3.6 + round(5400 * 79 / 84) / 1000), (8.679, 9.0)]


def test_hours_and_empty_inputs() -> None:
    cue = Cue(3600 * 101 + 61.0015, 3600 * 101 + 62.5, "late")
    assert "101:01:01,002 --> 101:01:02,500" in to_srt([cue])
    assert "101:01:01.002 --> 101:01:02.500" in to_webvtt([cue])
    assert to_srt([]) == ""
    assert to_webvtt([]) == "WEBVTT\n"
    assert subtitle_cues([]) == []
    assert to_srt([Cue(1.0, 2.0, " \n\n ")]) == ""  # nothing to show: no cue
    # a zero-length cue given directly still gets a valid (1 ms) duration
    assert "00:00:01.000 --> 00:00:01.001" in to_webvtt([Cue(1.0, 1.0, "x")])
    with pytest.raises(ValueError, match="finite"):
        to_srt([Cue(float("nan"), 1.0, "x")])
    with pytest.raises(ValueError, match=">= 0"):
        to_webvtt([Cue(-1.0, 1.0, "x")])


def test_chunk_without_sentences_uses_its_written_text() -> None:
    bare = ChunkTiming(0, 0, "v", 1.0, 2.0, "Hello there.", "hello there", [])
    assert subtitle_cues([bare]) == [Cue(1.0, 2.0, "Hello there.")]


def test_engine_sentence_times_are_clamped_into_the_chunk() -> None:
    sloppy = ChunkTiming(
        0,
        0,
        "v",
        1.0,
        2.0,
        "A. B.",
        "a b",
        [SentenceTiming("A.", 0.5, 1.6), SentenceTiming("B.", 1.4, 2.7)],
    )
    assert [(c.start, c.end, c.text) for c in subtitle_cues([sloppy])] == [(1.0, 1.6, "A."), (1.6, 2.0, "B.")]


def test_text_without_time_joins_a_neighbour() -> None:
    # "--" is written but not spoken: it has no time of its own and shows with the next sentence.
    times = sentence_times(["Yes.", "--", "No."], [3, 0, 2], 0.0, 1.0)
    c = ChunkTiming(0, 0, "v", 0.0, 1.0, "Yes. -- No.", "yes no", times)
    assert [(q.start, q.end, q.text) for q in subtitle_cues([c])] == [
        (0.0, 0.6, "Yes."),
        (0.6, 1.0, "-- No."),
    ]
    # at the end it joins the previous cue; a chunk of no length joins its text to the next chunk
    tail = sentence_times(["Yes.", "--"], [3, 0], 0.0, 1.0)
    c2 = ChunkTiming(0, 0, "v", 0.0, 1.0, "", "", tail)
    assert [q.text for q in subtitle_cues([c2])] == ["Yes. --"]
    empty = chunk(0, 1.0, 1.0, "Lost?")
    assert [q.text for q in subtitle_cues([empty, chunk(1, 1.0, 2.0, "Found.")])] == ["Lost? Found."]


# --- the manifest ------------------------------------------------------------------------------------------


def test_manifest_golden() -> None:
    words = [WordTiming("Hello", 0.75, 1.1), WordTiming("world.", 1.1, 1.5004)]
    first = ChunkTiming(0, 0, "narrator", 0.75, 1.5004, "Hello world.", "hello world", [
        SentenceTiming("Hello world.", 0.75, 1.5004, words)
    ])  # fmt: skip
    second = chunk(1, 2.0, 3.0, "Dr. Who?", "Yes.", chapter=1)
    data = manifest([ChapterTiming(0, "One", 0.0, 1.9), ChapterTiming(1, None, 1.9, 3.2)], [second, first])
    assert data == {
        "version": 1,
        "duration": 3.2,
        "chapters": [
            {"index": 0, "title": "One", "start": 0.0, "end": 1.9},
            {"index": 1, "title": None, "start": 1.9, "end": 3.2},
        ],
        "chunks": [
            {
                "seq": 0,
                "chapter": 0,
                "voice": "narrator",
                "start": 0.75,
                "end": 1.5,
                "text": "Hello world.",
                "spoken": "hello world",
                "sentences": [
                    {
                        "text": "Hello world.",
                        "start": 0.75,
                        "end": 1.5,
                        "estimated": False,
                        "words": [
                            {"text": "Hello", "start": 0.75, "end": 1.1},
                            {"text": "world.", "start": 1.1, "end": 1.5},
                        ],
                    }
                ],
            },
            {
                "seq": 1,
                "chapter": 1,
                "voice": "narrator",
                "start": 2.0,
                "end": 3.0,
                "text": "Dr. Who? Yes.",
                "spoken": "Dr. Who? Yes.",
                "sentences": [
                    {"text": "Dr. Who?", "start": 2.0, "end": 2.667, "estimated": True},
                    {"text": "Yes.", "start": 2.667, "end": 3.0, "estimated": True},
                ],
            },
        ],
    }
    json.dumps(data, allow_nan=False)


def test_manifest_takes_any_text_and_refuses_non_finite_times() -> None:
    hostile = 'a\x00b\ud800c\n"quoted" </script>'
    c = ChunkTiming(0, 0, hostile, 0.0, 1.0, hostile, hostile, [SentenceTiming(hostile, 0.0, 1.0)])
    data = manifest([ChapterTiming(0, hostile, 0.0, 1.0)], [c])
    text = json.dumps(data, ensure_ascii=False, allow_nan=False)
    text.encode("utf-8")  # no lone surrogate left
    assert json.loads(text)["chunks"][0]["text"] == 'ab\ufffdc\n"quoted" </script>'
    with pytest.raises(ValueError, match="finite"):
        manifest([], [ChunkTiming(0, 0, "v", 0.0, float("inf"), "", "", [])])


# --- strict parsers, and properties on hostile text --------------------------------------------------------

SRT_TIME = r"(\d{2,}):([0-5]\d):([0-5]\d),(\d{3})"
VTT_TIME = r"(\d{2,}):([0-5]\d):([0-5]\d)\.(\d{3})"


@dataclass
class Parsed:
    start: int
    end: int
    lines: list[str]


def _ms(groups: tuple[str, ...]) -> int:
    h, m, s, ms = (int(g) for g in groups)
    return ((h * 60 + m) * 60 + s) * 1000 + ms


def lines_of(text: str) -> list[str]:
    """Lines as both formats define them: CRLF, LF or CR ends one."""
    return re.split(r"\r\n|\r|\n", text)


def parse_srt(text: str) -> list[Parsed]:
    """SubRip as players read it: blocks split by one blank line; number, timing, 1+ text lines."""
    if not text:
        return []
    assert text.endswith("\n")
    assert not text.endswith("\n\n")
    cues = []
    for n, block in enumerate(text[:-1].split("\n\n"), start=1):
        number, timing, *lines = lines_of(block)
        assert number == str(n)
        match = re.fullmatch(f"{SRT_TIME} --> {SRT_TIME}", timing)
        assert match, timing
        assert lines, block
        assert all(line.strip() for line in lines), block
        assert not any("-->" in line for line in lines)
        cues.append(Parsed(_ms(match.groups()[:4]), _ms(match.groups()[4:]), lines))
    return cues


def parse_webvtt(text: str) -> list[Parsed]:
    """WebVTT with the file syntax's rules for what a cue's text may hold."""
    assert text.startswith("WEBVTT\n")
    assert text.endswith("\n")
    assert not text.endswith("\n\n")
    blocks = text[:-1].split("\n\n")
    assert blocks[0] == "WEBVTT"
    cues = []
    for block in blocks[1:]:
        timing, *lines = lines_of(block)
        match = re.fullmatch(f"{VTT_TIME} --> {VTT_TIME}", timing)
        assert match, timing
        assert lines, block
        assert all(line.strip() for line in lines), block
        for line in lines:
            assert "-->" not in line
            assert "<" not in line
            assert ">" not in line
            assert re.fullmatch(r"([^&]|&(amp|lt|gt);)*", line), line  # every & starts an escape
        cues.append(Parsed(_ms(match.groups()[:4]), _ms(match.groups()[4:]), lines))
    return cues


def unescape(line: str) -> str:
    return line.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


hostile_text = st.lists(
    st.one_of(
        st.sampled_from(
            [
                "-->",
                "--->",
                "<script>",
                "</b>",
                "&amp;",
                "&",
                "\n",
                "\n\n",
                "\r\n",
                " ",
                "\t",
                "\u2028",
                "\x00",
            ]
        ),
        st.sampled_from(["1", "00:00:01,000 --> 00:00:02,000", "WEBVTT", "NOTE", "{\\an8}", "x" * 50]),
        st.text(max_size=15),
    ),
    max_size=12,
).map("".join)


@st.composite
def timelines(draw: st.DrawFn, min_chunk_ms: int = 0, spoken_as_written: bool = False) -> list[ChunkTiming]:
    chunks = []
    at = draw(st.integers(0, 2000))
    for seq in range(draw(st.integers(0, 6))):
        length = draw(st.integers(min_chunk_ms, 20_000))
        sentences = draw(st.lists(hostile_text, max_size=4))
        n = len(sentences)
        spoken = (
            [len(s) for s in sentences]
            if spoken_as_written
            else draw(st.lists(st.integers(0, 300), min_size=n, max_size=n))
        )
        start, end = at / 1000, (at + length) / 1000
        times = sentence_times(sentences, spoken, start, end)
        chunks.append(ChunkTiming(seq, 0, "v", start, end, " ".join(sentences), "", times))
        at += length + draw(st.integers(0, 3000))
    return chunks


def visible(text: str) -> str:
    """The characters a viewer must see, in order, whatever the spacing and line breaks."""
    return "".join(re.sub(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]", " ", text).split())


def check_bounds(cues: list[Parsed], chunks: list[ChunkTiming]) -> None:
    spans = [(round(c.start * 1000), round(c.end * 1000)) for c in chunks]
    for cue, following in itertools.pairwise(cues):
        assert cue.end <= following.start  # ordered, no overlap
    for cue in cues:
        assert cue.start < cue.end
        assert any(a <= cue.start and cue.end <= b for a, b in spans), (cue, spans)


@settings(max_examples=300, deadline=None)
@given(chunks=timelines())
def test_webvtt_is_valid_ordered_in_bounds_and_loses_no_text(chunks: list[ChunkTiming]) -> None:
    cues = parse_webvtt(to_webvtt(subtitle_cues(chunks)))
    check_bounds(cues, chunks)
    shown = "".join(visible(unescape(line)) for cue in cues for line in cue.lines)
    written = "".join(visible(s.text) for c in chunks for s in c.sentences)
    if any(c.end > c.start for c in chunks):  # a timeline with no audio at all has no subtitles
        assert shown == written


@settings(max_examples=300, deadline=None)
@given(chunks=timelines())
def test_srt_is_valid_and_says_what_webvtt_says(chunks: list[ChunkTiming]) -> None:
    # SRT has no escapes: its text is WebVTT's (lossless, above), with "->" for every arrow.
    cues = subtitle_cues(chunks)
    srt, vtt = parse_srt(to_srt(cues)), parse_webvtt(to_webvtt(cues))
    check_bounds(srt, chunks)
    assert [(c.start, c.end) for c in srt] == [(c.start, c.end) for c in vtt]
    for a, b in zip(srt, vtt, strict=True):
        assert a.lines == [re.sub(r"-{2,}>", "->", unescape(line)) for line in b.lines]


@settings(max_examples=200, deadline=None)
@given(chunks=timelines(min_chunk_ms=10_000, spoken_as_written=True))
def test_cues_have_at_most_two_lines_of_42_characters(chunks: list[ChunkTiming]) -> None:
    # With time for every character (10 s per chunk for at most 2,400 characters, spread in proportion
    # to them), no text is pushed into a neighbour, so every cue keeps to the limits.
    for cue in subtitle_cues(chunks):
        lines = cue.text.split("\n")
        assert 1 <= len(lines) <= 2
        assert all(0 < len(line) <= MAX_LINE_CHARS for line in lines), lines


@given(cues=st.lists(st.builds(Cue, st.floats(0, 1e5), st.floats(0, 1e5), hostile_text), max_size=8))
def test_any_cues_given_directly_make_valid_files(cues: list[Cue]) -> None:
    srt = parse_srt(to_srt(cues))
    vtt = parse_webvtt(to_webvtt(cues))
    assert len(srt) == len(vtt) == sum(1 for c in cues if visible(c.text))
    for parsed in (srt, vtt):
        assert [c.start for c in parsed] == sorted(c.start for c in parsed)
        assert all(c.end > c.start for c in parsed)


def test_a_cast_names_the_speaker_in_the_manifest_and_the_webvtt_voice_span() -> None:
    chunks = [
        ChunkTiming(
            0,
            0,
            "v1",
            0.0,
            1.0,
            "said Tom.",
            "said Tom.",
            [SentenceTiming("said Tom.", 0.0, 1.0)],
            "narrator",
        ),
        ChunkTiming(
            1,
            0,
            "v2",
            1.0,
            2.0,
            "“Go <now>.”",
            "Go now.",
            [SentenceTiming("“Go <now>.”", 1.0, 2.0)],
            "Tom & Co",
        ),
        ChunkTiming(2, 0, "v1", 2.0, 3.0, "No cast.", "No cast.", [SentenceTiming("No cast.", 2.0, 3.0)]),
    ]
    data = manifest([], chunks)
    assert [c.get("speaker") for c in data["chunks"]] == ["narrator", "Tom & Co", None]
    assert [s.get("speaker") for c in data["chunks"] for s in c["sentences"]] == [
        "narrator",
        "Tom & Co",
        None,
    ]
    vtt = to_webvtt(subtitle_cues(chunks))
    assert "<v Narrator>said Tom." in vtt
    assert "<v Tom &amp; Co>“Go &lt;now&gt;.”" in vtt
    assert "\nNo cast." in vtt
    assert "<v" not in to_srt(subtitle_cues(chunks))
