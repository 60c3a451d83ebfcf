"""Word times: espeak's word events, mapped to the words of the text and to the samples of the rendering
(the real libespeak-ng, no mocks, except for the pure mapping checked on made-up events at the end)."""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
import pytest

from bench.engines.paced import PacedEspeakEngine
from worker.engines import EngineError, SynthesisRequest, espeak_binding
from worker.engines.base import TimedEngine, Waveform, WordMark, synthesize_timed
from worker.engines.espeak import EspeakEngine, word_marks
from worker.engines.espeak_binding import WordEvent

SR = 22050
SENTENCE = "The quick brown fox jumps over the lazy dog near the river."
WORDS = len(SENTENCE.split())  # 12


def timed(engine: EspeakEngine, text: str, language: str = "en") -> tuple[Waveform, list[WordMark]]:
    [(wave, marks)] = engine.synthesize_timed([SynthesisRequest(text, {}, language=language)])
    return wave, marks


def words_of(text: str) -> list[str]:
    """The words of plain text: whitespace-separated, surrounding punctuation removed."""
    return [w for w in (token.strip(".,;:!?\"'()\u2014\u201c\u201d") for token in text.split()) if w]


def slices(text: str, marks: Sequence[WordMark]) -> list[str]:
    return [text[m.text_start : m.text_end] for m in marks]


def rms_db(x: npt.NDArray[np.float32]) -> float:
    return float(20 * np.log10(np.sqrt(np.mean(np.square(x, dtype=np.float64))) + 1e-12))


def voiced_regions(wave: Waveform, min_gap_s: float = 0.1) -> list[tuple[int, int]]:
    """Runs of sound (10 ms frames above -50 dBFS peak) separated by at least ``min_gap_s`` of silence."""
    frame = SR // 100
    n = wave.size // frame
    loud = np.abs(wave[: n * frame]).reshape(n, frame).max(axis=1) >= 10 ** (-50 / 20)
    regions: list[tuple[int, int]] = []
    for i in np.flatnonzero(loud):
        start, end = int(i) * frame, (int(i) + 1) * frame
        if regions and start - regions[-1][1] < min_gap_s * SR:
            regions[-1] = (regions[-1][0], end)
        else:
            regions.append((start, end))
    return regions


def check_well_formed(text: str, wave: Waveform, marks: Sequence[WordMark]) -> None:
    for mark in marks:
        assert 0 <= mark.start <= mark.end <= wave.size
        assert 0 <= mark.text_start < mark.text_end <= len(text)
    for before, after in itertools.pairwise(marks):
        assert before.end <= after.start
        assert before.text_end <= after.text_start


# -- the engine -----------------------------------------------------------------------------------------


def test_every_word_of_a_sentence_is_marked_in_order(engine: EspeakEngine) -> None:
    wave, marks = timed(engine, SENTENCE)
    assert slices(SENTENCE, marks) == words_of(SENTENCE)
    check_well_formed(SENTENCE, wave, marks)
    assert marks[0].start < 0.1 * SR  # speech starts at once
    assert wave.size - marks[-1].end < 0.1 * SR
    for mark in marks:
        assert 0.04 * SR < mark.end - mark.start < 0.8 * SR  # a word, not a pause or a sentence
        assert rms_db(wave[mark.start : mark.end]) > -35.0  # speech
    # Between words there is at most a little (near) silence: the marks cover the speech.
    covered = sum(m.end - m.start for m in marks)
    assert covered > 0.9 * (marks[-1].end - marks[0].start)


def test_marks_fall_in_the_voiced_regions_and_leave_the_pauses_out(engine: EspeakEngine) -> None:
    text = "One. Two. Three."
    wave, marks = timed(engine, text)
    regions = voiced_regions(wave)
    assert len(regions) == 3  # three words, two sentence pauses
    assert slices(text, marks) == ["One", "Two", "Three"]
    for mark, (start, end) in zip(marks, regions, strict=True):
        # The mark is its region, to within 20 ms (two of the frames the regions are measured in).
        assert abs(mark.start - start) <= 0.02 * SR
        assert abs(mark.end - end) <= 0.02 * SR
    for before, after in itertools.pairwise(marks):
        pause = wave[before.end : after.start]
        assert pause.size > 0.15 * SR
        assert float(np.abs(pause).max()) < 1e-3


def test_words_espeak_joins_or_misreports_are_still_marked(engine: EspeakEngine) -> None:
    # espeak sends no event for "a" (it says "was a" as one word) and places the events of "c" and "e"
    # on the space before them (a full stop that ends no sentence): every word is still marked.
    for text in ("It was a bright cold day in April.", "a b. c d. e f", "In the bank, of a man."):
        wave, marks = timed(engine, text)
        assert slices(text, marks) == words_of(text), text
        check_well_formed(text, wave, marks)
    wave, marks = timed(engine, "It was a bright cold day in April.")
    was, a = marks[1], marks[2]
    assert was.end == a.start  # one event for both: they share its sound
    assert (a.end - a.start) * 3 == pytest.approx(was.end - was.start, abs=3)  # by length, 1:3


def test_non_ascii_text_maps_to_python_characters(engine: EspeakEngine) -> None:
    text = "Café naïve, Zoë's crème brûlée: déjà vu."
    wave, marks = timed(engine, text)
    assert slices(text, marks) == ["Café", "naïve", "Zoë's", "crème", "brûlée", "déjà", "vu"]
    check_well_formed(text, wave, marks)
    decomposed = "Cafe\u0301 nai\u0308ve \U0001f600 end"  # combining accents, an astral character
    wave, marks = timed(engine, decomposed)
    assert slices(decomposed, marks) == ["Cafe\u0301", "nai\u0308ve", "\U0001f600", "end"]
    check_well_formed(decomposed, wave, marks)
    german = "Zwei Bier, bitte! Straße über Öl."
    wave, marks = timed(engine, german, language="de")
    assert slices(german, marks) == words_of(german)


def test_numbers_symbols_and_punctuation(engine: EspeakEngine) -> None:
    # A number read as several words is one word; punctuation alone ("—") is no word.
    text = "It's 3.5 km, $5 and 50% \u2014 of 1,000 things; 42nd! Yes\u2014no, and/or."
    wave, marks = timed(engine, text)
    assert slices(text, marks) == [
        "It's", "3.5", "km", "$5", "and", "50%", "of", "1,000", "things", "42nd", "Yes", "no", "and", "or",
    ]  # fmt: skip
    check_well_formed(text, wave, marks)
    for mark in marks:
        assert rms_db(wave[mark.start : mark.end]) > -35.0
    number = marks[1]  # "three point five": several of espeak's words
    assert number.end - number.start > marks[2].end - marks[2].start


def test_text_without_spaces_is_cut_where_espeak_starts_words(engine: EspeakEngine) -> None:
    text = "我们今天去公园。"
    wave, marks = timed(engine, text, language="cmn")
    assert len(marks) >= 4
    assert "".join(slices(text, marks)) == "我们今天去公园"
    check_well_formed(text, wave, marks)


def test_control_characters_and_odd_whitespace(engine: EspeakEngine) -> None:
    text = "  Line one\r\nline\ttwo\x0cthree \ufefffour, NUL\x00here.  "
    wave, marks = timed(engine, text)
    assert slices(text, marks) == ["Line", "one", "line", "two", "three", "four", "NUL", "here"]
    check_well_formed(text, wave, marks)


def test_synthesize_is_unchanged_and_timed_rendering_is_deterministic(engine: EspeakEngine) -> None:
    batch = [
        SynthesisRequest(SENTENCE, {}),
        SynthesisRequest("Zwei Bier, bitte!", {"f0_median_hz": np.array([200.0])}, language="de"),
        SynthesisRequest("  ", {}),
        SynthesisRequest("Fast talk.", {}, params={"rate_scale": 2.0}),
    ]
    plain = engine.synthesize(batch)
    first = engine.synthesize_timed(batch)
    second = engine.synthesize_timed(batch)
    assert len(first) == len(batch)
    for wave, (timed_wave, marks), (again_wave, again_marks) in zip(plain, first, second, strict=True):
        assert timed_wave.dtype == np.float32
        assert np.array_equal(wave, timed_wave)
        assert np.array_equal(wave, again_wave)
        assert marks == again_marks
    assert first[2][1] == []  # nothing to say
    assert engine.synthesize_timed([]) == []
    # The binding's samples do not depend on whether events are collected.
    params = espeak_binding.SynthParams("gmw/en-US")
    samples, events = espeak_binding.synthesize_words(SENTENCE, params)
    assert np.array_equal(samples, espeak_binding.synthesize(SENTENCE, params))
    assert len(events) == WORDS
    assert [e.sample for e in events] == sorted(e.sample for e in events)
    assert SENTENCE[events[1].position :].startswith("quick")


def test_word_times_follow_the_rate(engine: EspeakEngine) -> None:
    [(slow, slow_marks), (fast, fast_marks)] = engine.synthesize_timed(
        [SynthesisRequest(SENTENCE, {}), SynthesisRequest(SENTENCE, {}, params={"rate_scale": 2.0})]
    )
    assert len(slow_marks) == len(fast_marks) == WORDS
    assert fast_marks[-1].end < 0.7 * slow_marks[-1].end
    assert fast.size < slow.size


def test_bad_language_fails_the_batch(engine: EspeakEngine) -> None:
    with pytest.raises(EngineError):
        engine.synthesize_timed(
            [SynthesisRequest(SENTENCE, {}), SynthesisRequest(SENTENCE, {}, language="zz")]
        )


def test_concurrent_timed_synthesis_is_serialised(engine: EspeakEngine) -> None:
    texts = [SENTENCE, "One. Two. Three.", "Café naïve, Zoë's crème brûlée."]
    expected = [engine.synthesize_timed([SynthesisRequest(t, {})])[0] for t in texts]
    results: dict[tuple[int, int], tuple[Waveform, list[WordMark]]] = {}
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for call in range(3):
                request = SynthesisRequest(texts[(worker + call) % len(texts)], {})
                results[worker, call] = engine.synthesize_timed([request])[0]
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    for (worker, call), (wave, marks) in results.items():
        want_wave, want_marks = expected[(worker + call) % len(texts)]
        assert np.array_equal(wave, want_wave)
        assert marks == want_marks


def test_paced_engine_reports_espeaks_words_at_its_pace(engine: EspeakEngine) -> None:
    paced = PacedEspeakEngine(seconds_per_chunk=0.2)
    batch = [SynthesisRequest(SENTENCE, {}), SynthesisRequest("One. Two. Three.", {})]
    started = time.monotonic()
    out = paced.synthesize_timed(batch)
    assert time.monotonic() - started >= 0.4
    want = engine.synthesize_timed(batch)
    for (wave, marks), (want_wave, want_marks) in zip(out, want, strict=True):
        assert np.array_equal(wave, want_wave)
        assert marks == want_marks
    assert isinstance(paced, TimedEngine)


# -- the optional protocol --------------------------------------------------------------------------------


class _Silent:
    """An engine that reports no words (like Qwen3)."""

    name = "silent"
    sample_rate = SR
    max_chunk_chars = 100
    prompt_shapes: Mapping[str, tuple[int, ...]] = {}
    version = "silent-1"

    def encode_speaker(
        self, audio: Waveform, sample_rate: int, ref_text: str
    ) -> dict[str, npt.NDArray[np.generic]]:
        return {}

    def synthesize(self, batch: Sequence[SynthesisRequest]) -> list[Waveform]:
        return [np.full(len(r.text), 0.5, dtype=np.float32) for r in batch]


def test_synthesize_timed_works_with_any_engine(engine: EspeakEngine) -> None:
    silent = _Silent()
    assert not isinstance(silent, TimedEngine)
    out = synthesize_timed(silent, [SynthesisRequest("abc", {}), SynthesisRequest("de", {})])
    assert [(w.size, marks) for w, marks in out] == [(3, []), (2, [])]
    [(wave, marks)] = synthesize_timed(engine, [SynthesisRequest(SENTENCE, {})])
    assert isinstance(engine, TimedEngine)
    assert np.array_equal(wave, engine.synthesize([SynthesisRequest(SENTENCE, {})])[0])
    assert len(marks) == WORDS


# -- the mapping, on made-up events ------------------------------------------------------------------------


def bursts(*spans: tuple[int, int], size: int) -> npt.NDArray[np.int16]:
    """Silence with a loud square wave over each ``[start, end)``."""
    out = np.zeros(size, dtype=np.int16)
    for start, end in spans:
        out[start:end] = 1000 * (1 - 2 * (np.arange(end - start) % 2))
    return out


def events(text: str, *at: tuple[str | int, int]) -> list[WordEvent]:
    """Events at the first occurrence of a string in ``text`` (or at a given index), with their sample."""
    return [WordEvent(where if isinstance(where, int) else text.index(where), sample) for where, sample in at]


def test_mapping_trims_silence_and_splits_shared_events() -> None:
    text = "Hello, was a world!"
    samples = bursts((100, 400), (500, 900), (1200, 1500), size=1600)
    marks = word_marks(text, events(text, ("Hello", 0), ("was", 450), ("world", 1000)), samples)
    assert marks == [
        WordMark(100, 400, 0, 5),
        WordMark(500, 800, 7, 10),  # "was a": one event, 300 + 100 samples for 3 + 1 characters
        WordMark(800, 900, 11, 12),
        WordMark(1200, 1500, 13, 18),
    ]


def test_mapping_of_events_between_words() -> None:
    text = "a b. c 😀 here"
    samples = bursts((0, 100), (200, 300), (400, 500), (600, 700), (800, 900), (1000, 1100), size=1200)
    got = word_marks(
        text,
        events(text, ("a", 0), ("b", 150), (4, 350), ("😀", 550), (text.index("😀") + 1, 750), ("here", 950)),
        samples,
    )
    # The event on the space before "c" starts "c" (it has no event of its own); the one on the space
    # after the emoji is the second word of its name (the next word has its own event).
    assert slices(text, got) == ["a", "b", "c", "😀", "here"]
    assert [(m.start, m.end) for m in got] == [(0, 100), (200, 300), (400, 500), (600, 900), (1000, 1100)]


def test_mapping_edge_cases() -> None:
    samples = bursts((10, 20), size=100)
    assert word_marks("Hello", [], samples) == []
    assert word_marks("   ", [WordEvent(0, 0)], samples) == []
    # A word espeak made no sound for gets an empty mark where its event was.
    assert word_marks("Hi there", [WordEvent(0, 0), WordEvent(3, 50)], samples) == [
        WordMark(10, 20, 0, 2),
        WordMark(50, 50, 3, 8),
    ]
    # Events out of range, or going backwards in the text or in time, are clamped into order.
    marks = word_marks(
        "one two three", [WordEvent(-5, -3), WordEvent(8, 5), WordEvent(4, 2), WordEvent(99, 500)], samples
    )
    check_well_formed("one two three", np.zeros(100, dtype=np.float32), marks)
    assert slices("one two three", marks) == ["one", "two", "three"]
    # Words before the first event join it; words after the last one share its sound.
    marks = word_marks("— so said he", [WordEvent(5, 0)], bursts((0, 90), size=100))
    assert marks == [WordMark(0, 22, 2, 4), WordMark(22, 67, 5, 9), WordMark(67, 90, 10, 12)]


@pytest.mark.parametrize("text", ["x", "a-b c/d", "  \t", "...", "1,2,3", "é\u0301\u0301 ß", "\x00a\x00"])
def test_mapping_never_breaks_its_invariants(text: str) -> None:
    samples = bursts((5, 50), (60, 95), size=100)
    for positions in ([0], [0, 1, 2], list(range(len(text) + 2)), [len(text)] * 3):
        marks = word_marks(text, [WordEvent(p, 10 * n) for n, p in enumerate(positions)], samples)
        check_well_formed(text, np.zeros(100, dtype=np.float32), marks)
        assert all(re.search(r"\S", text[m.text_start : m.text_end]) for m in marks)
