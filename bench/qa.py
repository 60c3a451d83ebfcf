"""Chunk QA against injected faults: ``python -m bench.qa --chunks N``.

A book-length script of generated English prose (:func:`prose`: varied vocabulary and sentence shapes,
dialogue, numbers, dates and money, abbreviations) is parsed, normalised and cut into chunks exactly as a
job's script is (:mod:`worker.script`, espeak's 600-character chunks); its chapters are read in turn by
four espeak voices that differ in pitch and speaking rate; or (``--voices varied``) each voice of a
split of :mod:`bench.voice_set` (references of different bands, levels, pitch and room noise, made into
prompts as a voice build makes them) reads a book of its own (``--chunks`` per voice), and the report
adds a table per voice and per check. Every chunk is rendered through
:class:`bench.faults.FaultyEngine` around the real espeak engine, which injects a fault into a
share of them (``--share``, default 0.3; kinds drawn uniformly), then checked:

* the cheap checks (:func:`worker.qa.checks.check_audio`), against the voice's speaking rate, median
  pitch and speech level measured from its chunks that passed so far (rate and pitch seeded from the
  voice's prompt: ``words_per_minute`` and ``f0_median_hz``), and its floor on the edge and noise checks
  (:func:`worker.jobs.quality.calibration`, as a job);
* the transcript check (:func:`worker.qa.transcript.check_transcript`, pocketsphinx, constrained to
  the chunk's text).

A flagged chunk is rendered again (the wrapper injects nothing on a second attempt) and checked again.

Reported: the share of injected faults caught, per kind and overall, and which checks caught them; the
share of clean chunks flagged and why; the share of flagged faulty chunks that the re-render repaired;
and the time per chunk of each stage (with the real-time factor of the transcript check). The issue's
targets: at least 95 % of faults caught, at most 2 % of clean espeak chunks flagged. Exits 1 if either
target is missed.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from bench import voice_set
from bench.faults import FaultKind, FaultyEngine, random_plan
from worker.config import load_settings
from worker.engines.base import SpeakerPrompt, SynthesisRequest
from worker.engines.espeak import EspeakEngine
from worker.jobs import quality
from worker.qa.checks import (
    QaPolicy,
    QaResult,
    SpeakingRate,
    VoiceFloor,
    check_audio,
    measure_speaking_rate,
    median_f0,
    median_level,
    policy_for,
)
from worker.qa.transcript import Recogniser, check_transcript
from worker.script import Said, make_chunks, parse_document
from worker.script.normalise import normalise

CATCH_TARGET = 0.95
FALSE_FLAG_TARGET = 0.02
# The seeds whose books and faults the thresholds and methods were calibrated on (worker.qa.checks.QaPolicy,
# worker.qa.transcript.SECOND_OPINION_FRATE_STEP). A report is only honest on other seeds (held out); the
# default, 263, has never been run. Spent as held-out seeds (each reported in docs/qa.md): 31, 43, 59, 131,
# 137, 139, 151, 157, 163, 167, 173, 179, 181, 191; with the varied voice set's held-out voices, 193, 197,
# 199, 211, 223, 227, 229 (their clean flags showed the creak taken for rumble), 233, 239, 241, 243, 251
# and 257 (the voice floor's factor and the calibration texts were set on its calibrate voices and seed
# 7, the creak rule on the calibrate voices and book seeds 301 and 401, the repeat check on the
# calibrate voices and book seeds 7 and 301).
CALIBRATION_SEEDS = (7, 21, 101, 103, 105, 111, 113)
HELD_OUT_SEED = 263

# -- the script -------------------------------------------------------------------------------------------

_PEOPLE = (
    "the old keeper", "the doctor", "my grandmother", "a young sailor", "the baker's daughter",
    "Captain Ross", "Mrs. Avery", "the stranger", "her brother", "the children",
    "a tall woman in a green coat", "the mayor", "Thomas", "Eleanor", "the fisherman", "our neighbour",
    "the schoolteacher", "two soldiers",
    "Dr. Hale", "the priest", "Mr. Okonkwo", "the lamplighter", "Aunt Margarethe",
)  # fmt: skip
_PLACES = (
    "the harbour", "the narrow lane behind the church", "the market square", "the lighthouse", "the station",
    "the edge of the forest", "the kitchen", "the river bank", "the library", "the top of the hill",
    "the empty ballroom", "the garden wall", "the bridge", "the crowded tavern", "the orchard",
)  # fmt: skip
_VERBS = (
    "walked slowly towards", "hurried across", "looked back at", "never returned to", "painted a picture of",
    "wrote a long letter about", "dreamed of", "argued quietly about", "searched every corner of",
    "left a lantern at", "sang softly near", "remembered",
)  # fmt: skip
_OBJECTS = (
    "a silver key", "the broken clock", "an old map of the coast", "three loaves of bread",
    "a basket of apples", "the missing letter", "a wooden box", "the heavy iron gate", "a bundle of firewood",
    "the photograph", "seventeen candles", "a pair of muddy boots", "the telescope", "a jar of honey",
)  # fmt: skip
_TIMES = (
    "At dawn", "Late that evening", "On the second morning", "Before the storm broke",
    "In the winter of 1921", "After supper", "At 10:30 am", "By the end of March", "Years later",
    "Just before midnight", "On 3 March",
    "When the bells rang",
)  # fmt: skip
_FEELINGS = (
    "tired", "curious", "afraid", "strangely calm", "furious", "hopeful", "uneasy", "delighted", "lonely",
    "restless",
)  # fmt: skip
_WEATHER = (
    "The wind howled through the chimneys", "Rain drummed against the windows",
    "A thick fog rolled in from the sea", "The sky was clear and full of stars",
    "Snow had covered the roofs overnight", "The air smelled of salt and smoke",
    "Thunder grumbled somewhere to the west",
)  # fmt: skip
_SAYINGS = (
    "We should leave before it gets dark", "I have never seen anything like it",
    "Nobody believed a word of the story", "Bring the lamp and follow me",
    "It costs $12.50, not a penny more", "The ferry leaves at half past nine",
    "Do you remember the summer of 1984", "Please close the door behind you",
    "There were 25% fewer boats this year", "I counted 3,412 steps to the top",
)  # fmt: skip
_CONNECT = ("because", "although", "while", "until", "as soon as", "even though")
_ADVERBS = ("suddenly", "quietly", "carefully", "at last", "without a word", "once again", "reluctantly")


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _sentence(rng: random.Random) -> str:
    person, other = rng.sample(_PEOPLE, 2)
    shape = rng.randrange(9)
    if shape == 0:
        return f"{rng.choice(_TIMES)}, {person} {rng.choice(_VERBS)} {rng.choice(_PLACES)}."
    if shape == 1:
        feeling, connect, thing = rng.choice(_FEELINGS), rng.choice(_CONNECT), rng.choice(_OBJECTS)
        return f"{_cap(person)} felt {feeling} {connect} {other} had taken {thing}."
    if shape == 2:
        return f"{rng.choice(_WEATHER)}, and {person} {rng.choice(_ADVERBS)} opened {rng.choice(_OBJECTS)}."
    if shape == 3:
        return f"\u201c{rng.choice(_SAYINGS)},\u201d said {person}."
    if shape == 4:
        return f"Why had {person} hidden {rng.choice(_OBJECTS)} in {rng.choice(_PLACES)}?"
    if shape == 5:
        first, second, third = rng.sample(_OBJECTS, 3)
        return f"On the table lay {first}, {second} and {third}."
    if shape == 6:
        return f"{_cap(person)} waited {rng.randint(2, 40)} minutes at {rng.choice(_PLACES)}."
    if shape == 7:
        return f"{rng.choice(_WEATHER)}."
    place, connect, feeling = rng.choice(_PLACES), rng.choice(_CONNECT), rng.choice(_FEELINGS)
    return f"{_cap(person)} {rng.choice(_VERBS)} {place}, {connect} {other} was {feeling}."


def prose(paragraphs: int, seed: int = 13, per_chapter: int = 12) -> str:
    """A Markdown book of ``paragraphs`` paragraphs (one to seven sentences each, so chunks of very
    different lengths), ``per_chapter`` to a chapter."""
    rng = random.Random(seed)
    parts = []
    for number in range(paragraphs):
        if number % per_chapter == 0:
            parts.append(f"# Chapter {number // per_chapter + 1}")
        sentences = [_sentence(rng) for _ in range(rng.choice((1, 2, 3, 3, 4, 5, 7)))]
        parts.append(" ".join(sentences))
    return "\n\n".join(parts)


@dataclass(frozen=True)
class BenchChunk:
    seq: int
    chapter: int
    text: str  # normalised, as the engine reads it


def script_chunks(
    count: int, seed: int = 13, max_chars: int = EspeakEngine.max_chunk_chars
) -> list[BenchChunk]:
    """``count`` chunks of a generated book, parsed, normalised and packed as a job's are."""
    paragraphs = count
    while True:
        parsed = parse_document(prose(paragraphs, seed), "markdown")
        specs = make_chunks(
            parsed.chapters, max_chars, lambda _chapter, _number, sentence: Said(normalise(sentence).text)
        )
        if len(specs) >= count:
            return [BenchChunk(s.seq, s.chapter, s.text) for s in specs[:count]]
        paragraphs *= 2


# -- voices -----------------------------------------------------------------------------------------------


def _prompt(f0_hz: float, range_st: float, wpm: float) -> SpeakerPrompt:
    figures = {
        "f0_median_hz": f0_hz,
        "f0_range_st": range_st,
        "words_per_minute": wpm,
        "voiced_seconds": 5.0,
        "speech_seconds": 8.0,
    }
    return {name: np.asarray([value], dtype=np.float32) for name, value in figures.items()}


# Four voices at least 3.5 semitones apart in pitch (what a listener hears as another speaker) and at
# speaking rates between 160 and 260 words per minute.
VOICES: dict[str, SpeakerPrompt] = {
    "narrator": _prompt(102.9, 3.65, 209.2),
    "alto": _prompt(190.0, 4.0, 180.0),
    "bass": _prompt(78.0, 3.0, 160.0),
    "quick": _prompt(132.0, 3.5, 260.0),
}


# -- the run ----------------------------------------------------------------------------------------------


@dataclass
class _Voice:
    prompt: SpeakerPrompt
    engine: EspeakEngine
    passed: list[tuple[str, QaResult]] = field(default_factory=list)

    def rate(self) -> SpeakingRate:
        measured = measure_speaking_rate((text, r.speech_s) for text, r in self.passed)
        if measured is not None:
            return measured
        return SpeakingRate.from_words_per_minute(float(self.prompt["words_per_minute"][0]))

    def f0(self) -> float | None:
        """As a job: learnt from the voice's chunks that passed, before that the pitch its prompt is read
        with (worker.jobs.quality.calibrated_pitch)."""
        measured = median_f0(r.f0_median_hz for _, r in self.passed[-50:]) if len(self.passed) >= 3 else None
        if measured is not None:
            return measured
        request = SynthesisRequest("", self.prompt, "en", {}, seed=0)
        return quality.calibrated_pitch(self.engine, request, str(id(self.prompt)))

    def floor(self) -> VoiceFloor | None:
        """As a job: the voice's own edge and noise figures, from its calibration renderings."""
        request = SynthesisRequest("", self.prompt, "en", {}, seed=0)
        found = quality.calibration(self.engine, request, str(id(self.prompt)))
        return None if found is None else found.floor

    def level(self) -> float | None:
        """The speech level of the voice's chunks that passed (the job's loudness reference)."""
        return median_level(r.level_db for _, r in self.passed[-50:]) if len(self.passed) >= 3 else None


@dataclass
class QaBench:
    chunks: int = 0
    injected: Counter[str] = field(default_factory=Counter)
    caught: Counter[str] = field(default_factory=Counter)
    caught_by: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    missed: list[str] = field(default_factory=list)
    clean: int = 0
    clean_flagged: list[str] = field(default_factory=list)
    repaired: int = 0
    rerendered: int = 0
    audio_s: float = 0.0
    render_s: float = 0.0
    checks_s: float = 0.0
    transcript_s: float = 0.0
    recogniser: str = "pocketsphinx"
    # per voice: clean chunks, clean flagged, faults injected, faults caught
    per_voice: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    clean_flagged_by: Counter[str] = field(default_factory=Counter)  # check -> clean chunks it failed
    faults_caught_by: Counter[str] = field(default_factory=Counter)  # check -> faulty chunks it failed
    voice_notes: dict[str, str] = field(default_factory=dict)

    @property
    def caught_share(self) -> float:
        total = sum(self.injected.values())
        return sum(self.caught.values()) / total if total else 1.0

    @property
    def false_flag_share(self) -> float:
        return len(self.clean_flagged) / self.clean if self.clean else 0.0

    def table(self) -> list[str]:
        """The Markdown table of docs/qa.md: per fault kind, injected and caught; clean flagged; repairs."""
        out = ["| fault | injected | caught | share |", "|---|---|---|---|"]
        for kind in FaultKind:
            injected, caught = self.injected[kind.value], self.caught[kind.value]
            share = f"{caught / injected:.1%}" if injected else "-"
            out.append(f"| {kind.value} | {injected} | {caught} | {share} |")
        total, caught = sum(self.injected.values()), sum(self.caught.values())
        out.append(f"| **all** | {total} | {caught} | **{self.caught_share:.1%}** |")
        out.append(
            f"| clean chunks flagged | {self.clean} | {len(self.clean_flagged)} | "
            f"**{self.false_flag_share:.1%}** |"
        )
        repaired = f"{self.repaired / self.rerendered:.1%}" if self.rerendered else "-"
        out.append(
            f"| caught chunks repaired by a re-render | {self.rerendered} | {self.repaired} | {repaired} |"
        )
        return out

    def voice_table(self) -> list[str]:
        """Per voice: clean chunks flagged and faults caught (the voice set's report)."""
        out = [
            "| voice | reference | clean flagged | faults caught |",
            "|---|---|---|---|",
        ]
        for name, tally in self.per_voice.items():
            clean, flagged = tally["clean"], tally["clean_flagged"]
            injected, caught = tally["injected"], tally["caught"]
            flag_share = f"{flagged / clean:.1%}" if clean else "-"
            catch_share = f"{caught / injected:.1%}" if injected else "-"
            out.append(
                f"| {name} | {self.voice_notes.get(name, '')} | {flagged} of {clean} ({flag_share}) | "
                f"{caught} of {injected} ({catch_share}) |"
            )
        return out

    def check_table(self) -> list[str]:
        """Per check: the clean chunks it flagged and the faulty chunks it failed (a chunk may fail
        several checks)."""
        out = ["| check | clean chunks it flagged | faulty chunks it failed |", "|---|---|---|"]
        injected = sum(self.injected.values())
        for name in sorted(set(self.clean_flagged_by) | set(self.faults_caught_by)):
            flagged, caught = self.clean_flagged_by[name], self.faults_caught_by[name]
            out.append(f"| {name} | {flagged} of {self.clean} | {caught} of {injected} |")
        return out

    def lines(self) -> list[str]:
        n = max(self.chunks, 1)
        out = [
            f"chunk QA on {self.chunks} espeak chunks ({self.audio_s / 60:.1f} min of audio), "
            f"{sum(self.injected.values())} with an injected fault; transcripts heard by {self.recogniser}",
            "  fault            injected  caught  share   caught by (checks that failed)",
        ]
        for kind in FaultKind:
            injected, caught = self.injected[kind.value], self.caught[kind.value]
            share = f"{caught / injected:6.1%}" if injected else "     -"
            by = ", ".join(f"{name} {count}" for name, count in self.caught_by[kind.value].most_common())
            out.append(f"  {kind.value:<16} {injected:8d}  {caught:6d}  {share}   {by}")
        out.append(
            f"  all faults       {sum(self.injected.values()):8d}  {sum(self.caught.values()):6d}  "
            f"{self.caught_share:6.1%}   (target >= {CATCH_TARGET:.0%})"
        )
        out.append(
            f"  clean chunks flagged: {len(self.clean_flagged)} of {self.clean} = {self.false_flag_share:.1%}"
            f" (target <= {FALSE_FLAG_TARGET:.0%})"
        )
        out.extend(f"    clean flagged: {line}" for line in self.clean_flagged[:10])
        out.extend(f"    missed: {line}" for line in self.missed[:15])
        if self.rerendered:
            out.append(
                f"  re-rendered the {self.rerendered} flagged faulty chunks: {self.repaired} passed "
                f"({self.repaired / self.rerendered:.0%})"
            )
        rtf = self.transcript_s / self.audio_s if self.audio_s else 0.0
        out += [
            f"  time per chunk: render {self.render_s / n * 1e3:.0f} ms, cheap checks "
            f"{self.checks_s / n * 1e3:.0f} ms, transcript {self.transcript_s / n * 1e3:.0f} ms "
            f"({n / self.transcript_s if self.transcript_s else 0:.1f} chunks/s, real-time factor {rtf:.3f}; "
            f"mean chunk {self.audio_s / n:.1f} s)",
        ]
        return out


def _assess(
    wave: np.ndarray,
    rate: int,
    text: str,
    voice: _Voice,
    policy: QaPolicy,
    recogniser: Recogniser,
    bench: QaBench,
) -> QaResult:
    started = time.perf_counter()
    result = check_audio(
        wave,
        rate,
        text,
        policy=policy,
        rate=voice.rate(),
        expected_f0_hz=voice.f0(),
        expected_level_db=voice.level(),
        floor=voice.floor(),
    )
    bench.checks_s += time.perf_counter() - started
    started = time.perf_counter()
    transcript = check_transcript(recogniser, wave, rate, text, policy=policy)
    bench.transcript_s += time.perf_counter() - started
    return result.combined(transcript.checks, {"transcript": transcript.details()})


def run_qa_bench(chunks: int = 300, share: float = 0.3, seed: int = 13) -> QaBench:
    """Render, fault and check ``chunks`` chunks read by the bench's four voices, a chapter each in turn
    (see the module docstring)."""
    names = list(VOICES)
    readings = [(names[c.chapter % len(names)], c) for c in script_chunks(chunks, seed)]
    return _run(dict(VOICES), readings, share, seed)


def run_voice_set_bench(
    chunks_per_voice: int, share: float = 0.3, seed: int = 13, split: str = "held-out"
) -> QaBench:
    """Render, fault and check ``chunks_per_voice`` chunks of a book read by each voice of a split of
    the varied voice set (:mod:`bench.voice_set`); each voice reads its own book (seed + its index)."""
    engine = EspeakEngine()
    specs = voice_set.voices(split)  # type: ignore[arg-type]
    prompts = {spec.name: voice_set.prompt_of(spec, engine) for spec in specs}
    readings = [
        (spec.name, chunk)
        for index, spec in enumerate(specs)
        for chunk in script_chunks(chunks_per_voice, seed + index)
    ]
    bench = _run(prompts, readings, share, seed)
    bench.voice_notes = {spec.name: spec.describe() for spec in specs}
    return bench


def _run(
    prompts: dict[str, SpeakerPrompt], readings: list[tuple[str, BenchChunk]], share: float, seed: int
) -> QaBench:
    engine = EspeakEngine()
    plan = random_plan(share, seed=seed)
    recogniser = quality.recogniser(load_settings())  # TOME_QA_RECOGNISER: pocketsphinx unless set
    policy = policy_for(engine.name)
    voices = {name: _Voice(prompt, engine) for name, prompt in prompts.items()}
    bench = QaBench(recogniser=recogniser.name)
    for name, chunk in readings:
        voice = voices[name]
        tally = bench.per_voice[name]
        others = [prompts[other] for other in prompts if other != name]
        faulty = FaultyEngine(engine, plan, other_prompts=others, seed=seed)
        request = SynthesisRequest(chunk.text, voice.prompt, seed=chunk.seq)
        started = time.perf_counter()
        wave = faulty.synthesize([request])[0]
        bench.render_s += time.perf_counter() - started
        injected = faulty.log[-1]
        bench.chunks += 1
        bench.audio_s += wave.size / engine.sample_rate
        result = _assess(wave, engine.sample_rate, chunk.text, voice, policy, recogniser, bench)
        label = f"#{chunk.seq} ({name}) {', '.join(result.reasons) or 'passed'} | {chunk.text[:70]}"
        if injected.kind is None:
            bench.clean += 1
            tally["clean"] += 1
            if not result.passed:
                bench.clean_flagged.append(label)
                tally["clean_flagged"] += 1
                bench.clean_flagged_by.update(check.name for check in result.failed)
        else:
            bench.injected[injected.kind.value] += 1
            tally["injected"] += 1
            if result.passed:
                bench.missed.append(f"{injected.kind.value}: {injected.detail} | {label}")
            else:
                bench.caught[injected.kind.value] += 1
                tally["caught"] += 1
                bench.faults_caught_by.update(check.name for check in result.failed)
                for check in result.failed:
                    bench.caught_by[injected.kind.value][check.name] += 1
                again = faulty.synthesize([request])[0]  # the wrapper's second attempt is clean
                bench.rerendered += 1
                result = _assess(again, engine.sample_rate, chunk.text, voice, policy, recogniser, bench)
                bench.repaired += int(result.passed)
        if result.passed:
            voice.passed.append((chunk.text, result))
    return bench


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.qa", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--chunks",
        type=int,
        default=None,
        help="chunks of the book (default 300), or with --voices varied chunks per voice (default 25)",
    )
    parser.add_argument(
        "--share", type=float, default=0.3, help="share of chunks given a fault (default 0.3)"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=HELD_OUT_SEED,
        help=f"seed of the script and the faults (default {HELD_OUT_SEED}, held out; the thresholds were "
        f"calibrated on {', '.join(map(str, CALIBRATION_SEEDS))})",
    )
    parser.add_argument(
        "--voices",
        choices=("bench", "varied"),
        default="bench",
        help="the bench's four espeak voices (default), or the varied voice set of bench/voice_set.py: "
        "references of different bands, levels, pitch and room noise, each voice reading its own book",
    )
    parser.add_argument(
        "--split",
        choices=("held-out", "calibrate", "all"),
        default="held-out",
        help="with --voices varied: the voices to run (default held-out; the thresholds were calibrated "
        "on the calibrate ones only)",
    )
    args = parser.parse_args(argv)
    if args.voices == "varied":
        bench = run_voice_set_bench(args.chunks or 25, args.share, args.seed, args.split)
        fair = args.split == "held-out" and args.seed not in CALIBRATION_SEEDS
        held = "held out" if fair else "NOT held out"
        print(f"varied voices, {args.split} split, seed {args.seed} ({held})")
    else:
        bench = run_qa_bench(args.chunks or 300, args.share, args.seed)
        held = "held out" if args.seed not in CALIBRATION_SEEDS else "a CALIBRATION seed: not a fair report"
        print(f"seed {args.seed} ({held})")
    print("\n".join(bench.lines()))
    print()
    print("\n".join(bench.table()))
    if args.voices == "varied":
        print()
        print("\n".join(bench.voice_table()))
        print()
        print("\n".join(bench.check_table()))
    ok = bench.caught_share >= CATCH_TARGET and bench.false_flag_share <= FALSE_FLAG_TARGET
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
