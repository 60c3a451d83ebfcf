"""The transcript check: were the chunk's words said, and nothing else? (pure: no Flask, no Celery)

:func:`check_transcript` asks a :class:`Recogniser` what the chunk says, aligns the heard words with the
chunk's normalised text (Levenshtein over words) and scores two checks against
:class:`~worker.qa.checks.QaPolicy`: ``words`` (error rate, dropped runs, a cut-off tail, a missing word
in a short chunk, a repeated phrase) and ``unexplained`` (sound heard as no word of the text). The
embedded :class:`PocketsphinxRecogniser` runs offline on CPU and is constrained to the chunk's own
words: it answers "which of these words were said, in this order, and what else is there?". Words the
dictionary lacks are pronounced from dictionary words where possible (inflections, compounds); the rest
are unscored wildcards. A quiet noise floor is added before recognition because digital silence lets
the silence model swallow words.

See docs/qa.md, "The transcript check" (thresholds, language model, unscored words, noise floor, second
hearing); figures in docs/benchmarks.md, "Figures behind the code's choices".
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import re
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from worker.qa.checks import Check, QaPolicy, spoken_units
from worker.qa.signal import resample, runs

__all__ = [
    "PocketsphinxRecogniser",
    "Recognised",
    "Recogniser",
    "SecondOpinion",
    "TranscriptResult",
    "WordEdit",
    "align_words",
    "check_transcript",
    "understands",
    "words_of",
]

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")


def words_of(text: str) -> list[str]:
    """The words of a (normalised) text as recognisers report them: lower case, hyphenated words split,
    punctuation dropped, inner apostrophes kept ("baker's")."""
    return _TOKEN.findall(text.lower().replace("\u2019", "'").replace("\u2018", "'"))


@dataclass(frozen=True)
class Recognised:
    """What a recogniser heard in a chunk: its words (normalised as :func:`words_of`) with their times,
    the spans of sound it could explain by no word (seconds), the expected words it cannot recognise
    (not in its vocabulary; left out of the scores), and how long it took."""

    words: tuple[str, ...]
    times: tuple[tuple[float, float], ...] = ()
    unexplained: tuple[tuple[float, float], ...] = ()
    unscored: frozenset[str] = frozenset()
    seconds: float = 0.0


@runtime_checkable
class Recogniser(Protocol):
    """A speech recogniser for the transcript check. ``expected`` is the chunk's normalised text: a
    recogniser may use it to constrain or prompt its search (pocketsphinx does), or ignore it."""

    name: str

    def recognise(self, audio: npt.ArrayLike, sample_rate: int, expected: str) -> Recognised: ...


def understands(recogniser: Recogniser, language: str | None) -> bool:
    """Whether ``recogniser`` hears ``language`` (an ISO 639-1 code, or a tag such as ``en-GB``; None:
    unknown, taken as English). A recogniser lists what it hears in ``languages``; one without that
    attribute hears any language."""
    languages = getattr(recogniser, "languages", None)
    if languages is None:
        return True
    return (language or "en").lower().split("-", 1)[0] in languages


@runtime_checkable
class SecondOpinion(Protocol):
    """A recogniser that can listen again another way (another front end, another search): asked only
    when its first hearing fails the check (see :func:`check_transcript`); None if it has no other way."""

    def recognise_again(self, audio: npt.ArrayLike, sample_rate: int, expected: str) -> Recognised | None: ...


# -- alignment ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WordEdit:
    """One step of the alignment: ``=`` a match, ``S`` a substitution, ``D`` an expected word missing,
    ``I`` an extra word, ``~`` a word heard where an unscored word stands (absorbed, no error);
    ``hyp_index`` is the heard word's position (None for ``D``)."""

    op: str
    expected: str | None
    heard: str | None
    hyp_index: int | None = None


WILDCARD = "*"


def align_words(expected: Sequence[str], heard: Sequence[str]) -> list[WordEdit]:
    """Minimum edit alignment of two word sequences (unit costs; ties resolved towards matches and
    substitutions). An expected :data:`WILDCARD` (an unscored word) matches any number of heard words,
    none included, at no cost."""
    n, m = len(expected), len(heard)
    dist = np.zeros((n + 1, m + 1), dtype=np.int32)
    dist[0, :] = np.arange(m + 1)
    heard_array = np.asarray(heard, dtype=object)
    for i in range(1, n + 1):
        wild = expected[i - 1] == WILDCARD
        step = 0 if wild else 1
        differs = (
            np.zeros(m, np.int32) if wild or not m else (heard_array != expected[i - 1]).astype(np.int32)
        )
        best = np.minimum(dist[i - 1, :-1] + differs, dist[i - 1, 1:] + step)
        row = dist[i]
        row[0] = dist[i - 1, 0] + step
        for j in range(1, m + 1):  # the left neighbour depends on this row: a short Python loop
            row[j] = min(int(best[j - 1]), int(row[j - 1]) + step)
    edits: list[WordEdit] = []
    i, j = n, m
    while i > 0 or j > 0:
        word = expected[i - 1] if i > 0 else None
        wild = word == WILDCARD
        step = 0 if wild else 1
        if wild and j > 0 and dist[i, j] == dist[i, j - 1]:
            edits.append(WordEdit("~", word, heard[j - 1], j - 1))
            j -= 1
        elif i > 0 and j > 0 and not wild and dist[i, j] == dist[i - 1, j - 1] + (word != heard[j - 1]):
            edits.append(WordEdit("=" if word == heard[j - 1] else "S", word, heard[j - 1], j - 1))
            i, j = i - 1, j - 1
        elif i > 0 and dist[i, j] == dist[i - 1, j] + step:
            edits.append(WordEdit("~" if wild else "D", word, None))
            i -= 1
        else:
            edits.append(WordEdit("I", None, heard[j - 1], j - 1))
            j -= 1
    edits.reverse()
    return edits


# -- the check ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TranscriptResult:
    """The transcript check of one chunk."""

    recogniser: str
    heard: str
    wer: float
    errors: int
    scored_words: int
    missing: tuple[str, ...]
    extra: tuple[str, ...]
    substituted: tuple[tuple[str, str], ...]
    longest_missing_run: int
    missing_tail: int
    repeated: tuple[str, ...]
    unexplained_s: float
    unscored: tuple[str, ...]
    seconds: float
    checks: tuple[Check, ...]
    # the first hearing, when a second opinion was asked (it failed; this result is the second's)
    first_hearing: TranscriptResult | None = None

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)

    def details(self) -> dict[str, object]:
        """JSON-ready, for the chunk's QA record (flagged words for the report)."""
        return {
            "recogniser": self.recogniser,
            "heard": self.heard,
            "wer": round(self.wer, 4),
            "missing": list(self.missing),
            "extra": list(self.extra),
            "substituted": [list(pair) for pair in self.substituted],
            "repeated": list(self.repeated),
            "unexplained_s": round(self.unexplained_s, 2),
            "unscored": list(self.unscored),
            "seconds": round(self.seconds, 3),
            **(
                {"first_hearing": {**self.first_hearing.details(), "reasons": self.first_hearing.reasons}}
                if self.first_hearing is not None
                else {}
            ),
        }

    @property
    def reasons(self) -> list[str]:
        return [check.reason for check in self.checks if not check.passed]


def check_transcript(
    recogniser: Recogniser,
    audio: npt.ArrayLike,
    sample_rate: int,
    text: str,
    *,
    policy: QaPolicy | None = None,
) -> TranscriptResult:
    """Recognise the chunk and score it against its normalised ``text`` (see the module docstring).

    A recogniser that offers a :class:`SecondOpinion` is asked to listen again when its first hearing
    fails, and the chunk passes if the second hearing passes: a mishearing depends on how the audio was
    heard, a dropped, repeated or noisy passage does not (measured in docs/qa.md). Both hearings are
    kept in the result."""
    policy = policy or QaPolicy()
    started = time.perf_counter()
    first = _score(recogniser.name, recogniser.recognise(audio, sample_rate, text), text, policy)
    if first.passed or not isinstance(recogniser, SecondOpinion):
        return first
    heard_again = recogniser.recognise_again(audio, sample_rate, text)
    if heard_again is None:
        return first
    again = _score(recogniser.name, heard_again, text, policy)
    seconds = time.perf_counter() - started
    if not again.passed:
        return replace(first, seconds=seconds)
    return replace(again, seconds=seconds, first_hearing=first)


def _score(name: str, result: Recognised, text: str, policy: QaPolicy) -> TranscriptResult:
    unscored = result.unscored
    expected_all = words_of(text)
    expected = [WILDCARD if w in unscored else w for w in expected_all]
    heard = list(result.words)
    edits = align_words(expected, heard)
    forgiven = _unscored_windows(edits, result.times)
    # words heard where an unscored word stands (a name, digits) may be that word's sound: not a repeat
    absorbed = _name_sound(edits, result.times, [w for w in expected_all if w in unscored], text)
    edits = [e for e in edits if e.op != "~"]
    scored = sum(1 for w in expected if w != WILDCARD)

    missing = tuple(e.expected for e in edits if e.op == "D" and e.expected is not None)
    extra = tuple(e.heard for e in edits if e.op == "I" and e.heard is not None)
    substituted = tuple(
        (e.expected, e.heard) for e in edits if e.op == "S" and e.expected is not None and e.heard is not None
    )
    errors = len(missing) + len(extra) + len(substituted)
    wer = errors / scored if scored else float(len(extra) > 0)
    longest = _longest_run(edits, "D")
    tail = len(edits) - next((k + 1 for k in range(len(edits) - 1, -1, -1) if edits[k].op != "D"), 0)
    repeated = _repeated_phrase(edits, heard) or heard_twice(heard, expected_all, absorbed)
    if _misheard_pair(repeated, substituted):
        repeated = ()

    spans = [_outside(span, forgiven) for span in result.unexplained]
    unexplained_s = max(spans, default=0.0)

    reasons = _word_reasons(wer, errors, scored, longest, tail, len(missing), repeated, policy)
    detail = _describe(missing, extra, substituted)
    words_check = Check(
        "words",
        round(wer, 4),
        f"WER <= {policy.max_wer:.0%} (or < {policy.min_errors} errors), < {policy.max_missing_run} "
        f"consecutive or {policy.max_missing_tail} final words missing, no phrase repeated",
        not reasons,
        "" if not reasons else "; ".join(reasons) + (f": {detail}" if detail else ""),
    )
    sound_check = _sound_check(unexplained_s, policy)
    return TranscriptResult(
        recogniser=name,
        heard=" ".join(result.words),
        wer=wer,
        errors=errors,
        scored_words=scored,
        missing=missing,
        extra=extra,
        substituted=substituted,
        longest_missing_run=longest,
        missing_tail=tail,
        repeated=repeated,
        unexplained_s=unexplained_s,
        unscored=tuple(sorted(unscored & set(expected_all))),
        seconds=result.seconds,
        checks=(words_check, sound_check),
    )


def _word_reasons(
    wer: float,
    errors: int,
    scored: int,
    longest: int,
    tail: int,
    missing: int,
    repeated: tuple[str, ...],
    policy: QaPolicy,
) -> list[str]:
    """Why the words check fails (none: it passes)."""
    reasons = []
    if (errors >= policy.min_errors and wer > policy.max_wer) or (errors and wer >= 0.5):
        reasons.append(f"word error rate {wer:.0%} ({errors} of {scored} words)")
    if longest >= policy.max_missing_run:
        reasons.append(f"{longest} consecutive words missing")
    if tail >= policy.max_missing_tail and longest < policy.max_missing_run:
        reasons.append(f"the last {tail} words missing")
    if missing and scored <= policy.max_exact_words and not reasons:
        reasons.append(f"{missing} of {scored} words missing")
    if repeated:
        reasons.append(f"{' '.join(repeated)!r} said twice")
    return reasons


def _sound_check(unexplained_s: float, policy: QaPolicy) -> Check:
    ok = unexplained_s <= policy.max_unexplained_s
    return Check(
        "unexplained",
        round(unexplained_s, 3),
        f"<= {policy.max_unexplained_s:g} s in one stretch",
        ok,
        ""
        if ok
        else f"{unexplained_s:.2f} s of sound in one stretch that is no word of the text (noise, babble)",
    )


def _longest_run(edits: Sequence[WordEdit], op: str) -> int:
    longest = run = 0
    for edit in edits:
        run = run + 1 if edit.op == op else 0
        longest = max(longest, run)
    return longest


# Short words a recogniser fills a long word it cannot match with ("schoolteacher" heard as "the to").
FUNCTION_WORDS = frozenset(
    {"a", "an", "the", "of", "to", "on", "in", "at", "and", "or", "as", "by", "for", "from", "with", "m"}
)


def _misheard_pair(repeated: Sequence[str], substituted: Sequence[tuple[str, str]]) -> bool:
    """A two-word repeat of function words one of which was also heard in the place of another word of
    the text: the recogniser filling a word it could not match with short ones, not a doubled phrase
    (a doubled "on the" leaves every word of the text heard). On calibration seeds 7, 21 and 101 this
    cleared two of the seven clean chunks flagged and let no injected fault through (docs/qa.md)."""
    if len(repeated) != 2 or not all(word in FUNCTION_WORDS for word in repeated):
        return False
    return any(heard in repeated for _, heard in substituted)


def _repeated_phrase(edits: Sequence[WordEdit], heard: Sequence[str]) -> tuple[str, ...]:
    """The longest run of two or more extra words of which at least two repeat, in order, the words heard
    just before or just after it ("walked to the walked to the harbour"); empty if none."""
    best: tuple[str, ...] = ()
    k = 0
    while k < len(edits):
        if edits[k].op != "I":
            k += 1
            continue
        start = k
        while k < len(edits) and edits[k].op == "I":
            k += 1
        run = [e.heard or "" for e in edits[start:k]]
        first = edits[start].hyp_index or 0
        size = len(run)
        before = heard[max(0, first - size) : first]
        after = heard[first + size : first + 2 * size]
        same = max(
            sum(a == b for a, b in zip(run[-len(before) :] if before else [], before, strict=False)),
            sum(a == b for a, b in zip(run, after, strict=False)),
        )
        if size >= 2 and same >= 2 and size > len(best):
            best = tuple(run)
    return best


def _name_sound(
    edits: Sequence[WordEdit],
    times: Sequence[tuple[float, float]],
    names: Sequence[str],
    text: str,
    stretch: float = 2.0,
    margin_s: float = 0.3,
) -> set[int]:
    """Indices of the heard words that may be the sound of the text's unscored words (``names``): those
    the alignment gave to an unscored word, as far as they start within ``stretch`` times the time its
    letters take at the chunk's pace (letters of the text over the span of the heard words), plus
    ``margin_s``, after the heard word before it. The alignment lets an unscored word absorb any number
    of heard words at no cost, so beside a name it swallowed half of a doubled phrase ("mister [please
    close felt uneasy while my grandmother had] taken a while my grandmother had taken a"): those words
    cannot all be the name's. Without word times, every absorbed word is kept."""
    absorbed = {e.hyp_index for e in edits if e.op == "~" and e.hyp_index is not None}
    if not absorbed or not times or not names:
        return absorbed
    span = times[-1][1] - times[0][0]
    pace = spoken_units(text) / span if span > 0 and math.isfinite(span) else 0.0
    if pace <= 0:
        return absorbed
    budget = stretch * max(spoken_units(name) for name in names) / pace + margin_s
    kept: set[int] = set()
    anchor = times[0][0]  # the end of the last heard word that is not a name's, walking in order
    for edit in edits:
        index = edit.hyp_index
        if index is None or index >= len(times):
            continue
        if edit.op != "~":
            anchor = times[index][1]
        elif times[index][0] <= anchor + budget:
            kept.add(index)
    return kept


def heard_twice(
    heard: Sequence[str],
    expected: Sequence[str],
    absorbed: Set[int] = frozenset(),
    longest: int = 8,
    max_gap: int = 2,
    min_gapped: int = 3,
) -> tuple[str, ...]:
    """The longest phrase of two or more words heard twice in a row ("a silver key in a silver key in
    the forest") that the text does not say twice in a row in any rotation; or of ``min_gapped`` or
    more words heard twice with up to ``max_gap`` words between ("the forest because thomas and and the
    forest because thomas": the seam of a repeat is often misheard) more often than the text says it.
    Empty if none. Looked for in the heard words themselves, not in the alignment: a repeat is often
    aligned as substitutions of the words it displaced rather than as extra words.

    ``absorbed`` are the indices of heard words that may be the sound of an unscored word of the text (a
    name, :func:`_name_sound`): a name is often heard as words of the text around it ("as soon as
    [mister okonkwo: soon our while]"), so a repeat with such a word in either copy does not count."""
    said = " " + " ".join(expected) + " "

    def counted(start: int, size: int, gap: int) -> bool:
        first = set(range(start, start + size))
        second = set(range(start + size + gap, start + 2 * size + gap))
        return not (first | second) & absorbed

    for size in range(min(longest, len(heard) // 2), 1, -1):
        for start in range(len(heard) - 2 * size + 1):
            phrase = list(heard[start : start + size])
            if phrase == list(heard[start + size : start + 2 * size]) and counted(start, size, 0):
                # "doctor the doctor the" where the text says "the doctor. The doctor hurried": the
                # text's own repeat, shifted by a misheard word; so every rotation of the phrase counts
                rotations = (" ".join([*phrase[k:], *phrase[:k]] * 2) for k in range(size))
                if not any(f" {twice} " in said for twice in rotations):
                    return tuple(phrase)
        if size < min_gapped:
            continue
        for gap in range(1, max_gap + 1):
            for start in range(len(heard) - 2 * size - gap + 1):
                phrase = list(heard[start : start + size])
                again = list(heard[start + size + gap : start + 2 * size + gap])
                if (
                    phrase == again
                    and counted(start, size, gap)
                    and _occurrences(heard, phrase) > _occurrences(expected, phrase)
                ):
                    return tuple(phrase)
    return ()


def _occurrences(words: Sequence[str], phrase: Sequence[str]) -> int:
    """How many times ``phrase`` occurs in ``words`` (overlapping occurrences counted)."""
    size = len(phrase)
    return sum(1 for k in range(len(words) - size + 1) if list(words[k : k + size]) == list(phrase))


def _merge(spans: Sequence[tuple[float, float]], gap: float = 0.05) -> list[tuple[float, float]]:
    """Sorted spans, those less than ``gap`` apart joined."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if out and start - out[-1][1] < gap:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _describe(
    missing: Sequence[str], extra: Sequence[str], substituted: Sequence[tuple[str, str]], limit: int = 12
) -> str:
    parts = []
    if missing:
        parts.append("missing " + " ".join(missing[:limit]) + (" ..." if len(missing) > limit else ""))
    if extra:
        parts.append("extra " + " ".join(extra[:limit]) + (" ..." if len(extra) > limit else ""))
    if substituted:
        pairs = ", ".join(f"{a}->{b}" for a, b in substituted[:limit])
        parts.append("heard " + pairs + (" ..." if len(substituted) > limit else ""))
    return "; ".join(parts)


def _unscored_windows(
    edits: Sequence[WordEdit], times: Sequence[tuple[float, float]]
) -> list[tuple[float, float]]:
    """Time windows where the unscored words of the text were said: from the end of the heard word
    aligned before each to the start of the heard word aligned after it (open-ended at the chunk's
    ends, and when the recogniser gave no times)."""
    windows = []
    for k, edit in enumerate(edits):
        if edit.expected != WILDCARD or (k > 0 and edits[k - 1].expected == WILDCARD):
            continue
        before = [e.hyp_index for e in edits[:k] if e.op in "=SI" and e.hyp_index is not None]
        after = [e.hyp_index for e in edits[k:] if e.op in "=SI" and e.hyp_index is not None]
        start = times[before[-1]][1] if before and times else 0.0
        end = times[after[0]][0] if after and times else math.inf
        windows.append((start, end))
    return windows


def _outside(span: tuple[float, float], windows: Sequence[tuple[float, float]]) -> float:
    """How much of ``span`` lies outside every window."""
    start, end = span
    length = max(0.0, end - start)
    for low, high in windows:
        overlap = max(0.0, min(end, high) - max(start, low))
        length -= overlap
    return max(0.0, length)


# -- pocketsphinx ---------------------------------------------------------------------------------------

# The phones of the wheel's en-us acoustic model (its mdef), silence and fillers excepted.
_PHONES = (
    "AA", "AE", "AH", "AO", "AW", "AY", "B", "CH", "D", "DH", "EH", "ER", "EY", "F", "G", "HH", "IH", "IY",
    "JH", "K", "L", "M", "N", "NG", "OW", "OY", "P", "R", "S", "SH", "T", "TH", "UH", "UW", "V", "W", "Y",
    "Z", "ZH",
)  # fmt: skip
_GARBAGE_PREFIX = "zzgarbage"  # pseudo-words of one phone each; no English word starts so
_SAMPLE_RATE = 16000
# The second hearing (PocketsphinxRecogniser.recognise_again): the same search on features taken this
# many frames a second faster, so every frame boundary falls elsewhere. Chosen on calibration seeds
# (docs/qa.md). (A vocal-tract-length warp looked better at first, but pocketsphinx keeps its warp
# parameters in process-wide state: what a warped decoder hears depends on which decoders were made
# before it.)
SECOND_OPINION_FRATE_STEP = 20
_FRAME_S = 0.01  # the sound mask's frame (and pocketsphinx's default frame: 100 frames/s)
# Fast speech is decoded at a higher feature frame rate: the acoustic model's phones last at least three
# frames (30 ms at 100 frames/s), and a fast voice's short phones are then swallowed or heard as garbage.
# At ``frate`` frames a second, speech at ``frate / 100`` times ``_NOMINAL_PACE`` letters a second gives
# the model the frames per phone it was trained on (sampling fast speech more often is the same, for
# the features, as slowing it down). Clamped to [100, ``_MAX_FRATE``] and rounded to ``_FRATE_STEP``
# (one decoder per step is kept).
_NOMINAL_PACE = 15.0  # letters per second of speech: about 190 words a minute
_MAX_FRATE = 200
_FRATE_STEP = 10
# A frame holds sound when its power is within 30 dB of the speech level; a stretch of sound of at least
# 0.1 s that the recogniser calls silence is unexplained (shorter ones are word onsets and decays at the
# edges of its silence segments).
_SOUND_DB = -30.0
_MIN_SOUND_S = 0.1
_SUFFIXES = (  # (spelling, pronunciation appended to the stem's); a stem needs at least 3 letters
    ("'s", None),
    ("s", None),
    ("es", ("IH", "Z")),
    ("ed", None),
    ("ing", ("IH", "NG")),
    ("ly", ("L", "IY")),
    ("er", ("ER",)),
    ("ness", ("N", "AH", "S")),
)
_VOICELESS = frozenset(("P", "T", "K", "F", "TH"))
_SIBILANT = frozenset(("S", "Z", "SH", "ZH", "CH", "JH"))


@functools.cache
def _dictionary() -> dict[str, tuple[str, ...]]:
    """The CMU dictionary the wheel ships: word -> pronunciations (phones separated by spaces)."""
    import pocketsphinx

    path = Path(pocketsphinx.get_model_path()) / "en-us" / "cmudict-en-us.dict"
    table: dict[str, list[str]] = {}
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            word, _, phones = line.partition(" ")
            phones = phones.split("#", 1)[0].strip()
            if word and phones:
                table.setdefault(re.sub(r"\(\d+\)$", "", word), []).append(phones)
    return {word: tuple(prons) for word, prons in table.items()}


def _inflect(stem: str, suffix: str, appended: tuple[str, ...] | None) -> str:
    last = stem.rsplit(maxsplit=1)[-1]
    if appended is not None:
        return f"{stem} {' '.join(appended)}"
    if suffix == "ed":
        return f"{stem} {'IH D' if last in ('T', 'D') else 'T' if last in _VOICELESS | _SIBILANT else 'D'}"
    # -s / -'s: /IH Z/ after a sibilant, /S/ after a voiceless consonant, /Z/ otherwise
    return f"{stem} {'IH Z' if last in _SIBILANT else 'S' if last in _VOICELESS else 'Z'}"


def pronounce(word: str) -> tuple[str, ...]:
    """Pronunciations of a word from the CMU dictionary, or made from dictionary words (an inflection
    of one, or a compound of two); empty when it cannot be pronounced."""
    table = _dictionary()
    if word in table:
        return table[word]
    for suffix, appended in _SUFFIXES:
        stem = word[: -len(suffix)] if word.endswith(suffix) else ""
        candidates = [stem] + ([stem + "e"] if suffix in ("ed", "ing", "er", "es") else [])
        for candidate in candidates:
            if len(candidate) >= 3 and candidate in table:
                return tuple(_inflect(p, suffix, appended) for p in table[candidate][:1])
    for cut in range(len(word) - 3, 2, -1):
        head, tail = word[:cut], word[cut:]
        if head in table and tail in table:
            return (f"{table[head][0]} {table[tail][0]}",)
    return ()


def recogniser_frame_rate(letters: int, sound: npt.NDArray[np.bool_], max_pause_s: float = 0.3) -> int:
    """The decoder's frame rate for speech of ``letters`` letters whose sound frames (10 ms) are
    ``sound``: from its pace over the speech (first to last sound frame, pauses capped at
    ``max_pause_s``, as the duration check measures speech), see ``_NOMINAL_PACE``."""
    if not sound.any() or letters <= 0:
        return 100
    first = int(np.argmax(sound))
    last = int(sound.size - 1 - np.argmax(sound[::-1]))
    gaps = runs(~sound[first : last + 1])
    seconds = (last - first + 1) * _FRAME_S - sum(max(0.0, (b - a) * _FRAME_S - max_pause_s) for a, b in gaps)
    pace = letters / max(seconds, _FRAME_S)
    frate = 100.0 * min(max(pace / _NOMINAL_PACE, 1.0), _MAX_FRATE / 100.0)
    return int(round(frate / _FRATE_STEP) * _FRATE_STEP)


class PocketsphinxRecogniser:
    """The embedded recogniser (see the module docstring). One decoder per instance, used under a lock:
    give each worker thread its own instance for parallel checks. The decoder, the dictionary (~0.2 s to
    read) and the words it learnt are kept between chunks."""

    name = "pocketsphinx"
    languages = frozenset({"en"})  # the acoustic model and dictionary its wheel ships

    def __init__(
        self,
        *,
        follow: float = 0.95,
        garbage: float = 0.01,
        noise_floor_db: float = -45.0,
        decoder_options: Mapping[str, object] | None = None,
        second_opinion: int | None = SECOND_OPINION_FRATE_STEP,
    ) -> None:
        if not (0.0 < follow < 1.0 and 0.0 < garbage < 1.0):
            raise ValueError("follow and garbage are probabilities strictly between 0 and 1")
        self.follow = follow
        self.garbage = garbage
        self.noise_floor_db = noise_floor_db
        self.decoder_options = dict(decoder_options or {})
        self.second_opinion = second_opinion
        self._lock = threading.Lock()
        self._decoders: dict[int, object] = {}
        self._known: dict[int, set[str]] = {}
        self._workdir: tempfile.TemporaryDirectory[str] | None = None

    def _ensure_decoder(self, frate: int) -> object:
        if frate not in self._decoders:
            import pocketsphinx

            options = {"frate": frate, **self.decoder_options}
            decoder = pocketsphinx.Decoder(
                lm=None, dict=None, samprate=_SAMPLE_RATE, loglevel="FATAL", **options
            )
            for number, phone in enumerate(_PHONES):
                decoder.add_word(f"{_GARBAGE_PREFIX}{phone.lower()}", phone, number == len(_PHONES) - 1)
            self._decoders[frate] = decoder
            self._known[frate] = set()
        if self._workdir is None:
            self._workdir = tempfile.TemporaryDirectory(prefix="tome-qa-")
        return self._decoders[frate]

    def close(self) -> None:
        with self._lock:
            self._decoders.clear()
            self._known.clear()
            if self._workdir is not None:
                self._workdir.cleanup()
                self._workdir = None

    def recognise(self, audio: npt.ArrayLike, sample_rate: int, expected: str) -> Recognised:
        return self._recognise(audio, sample_rate, expected, frate_step=0)

    def recognise_again(self, audio: npt.ArrayLike, sample_rate: int, expected: str) -> Recognised | None:
        """The same search on features taken ``second_opinion`` frames a second faster; None when it
        is off."""
        if self.second_opinion is None:
            return None
        return self._recognise(audio, sample_rate, expected, frate_step=self.second_opinion)

    def _recognise(
        self, audio: npt.ArrayLike, sample_rate: int, expected: str, *, frate_step: int
    ) -> Recognised:
        started = time.perf_counter()
        words = words_of(expected)
        pronounced = {w: pronounce(w) for w in set(words)}
        unscored = frozenset(w for w, prons in pronounced.items() if not prons)
        chain = [w for w in words if w not in unscored]
        pcm, sound = self._pcm(audio, sample_rate)
        if not chain or pcm.size < _SAMPLE_RATE // 10:
            return Recognised((), unscored=unscored, seconds=time.perf_counter() - started)
        frate = recogniser_frame_rate(spoken_units(expected), sound) + frate_step
        frame_s = 1.0 / frate
        with self._lock:
            decoder = self._ensure_decoder(frate)
            self._learn(decoder, self._known[frate], {w: pronounced[w] for w in chain})
            assert self._workdir is not None
            path = os.path.join(self._workdir.name, "chunk.arpa")
            with open(path, "w", encoding="utf-8") as out:
                out.write(self._language_model(chain))
            decoder.add_lm_file("chunk", path)  # type: ignore[attr-defined]
            decoder.activate_search("chunk")  # type: ignore[attr-defined]
            decoder.start_utt()  # type: ignore[attr-defined]
            decoder.process_raw(pcm.tobytes(), full_utt=True)  # type: ignore[attr-defined]
            decoder.end_utt()  # type: ignore[attr-defined]
            segments = [
                (str(s.word), s.start_frame * frame_s, (s.end_frame + 1) * frame_s)
                for s in decoder.seg()  # type: ignore[attr-defined]
            ]
        heard: list[str] = []
        times: list[tuple[float, float]] = []
        unexplained: list[tuple[float, float]] = []
        for word, start, end in segments:
            base = re.sub(r"\(\d+\)$", "", word)
            if base.startswith(_GARBAGE_PREFIX) or base in ("[NOISE]", "[SPEECH]"):
                unexplained.append((start, end))
            elif base in ("<sil>", "<s>", "</s>"):  # silence that is not silent: noise the model let pass
                first = round(start / _FRAME_S)
                for a, b in runs(sound[first : round(end / _FRAME_S)]):
                    if (b - a) * _FRAME_S >= _MIN_SOUND_S:
                        unexplained.append(((first + a) * _FRAME_S, (first + b) * _FRAME_S))
            elif not base.startswith("[") and not base.startswith("<"):
                heard.append(base)
                times.append((start, end))
        unexplained = _merge(unexplained)
        return Recognised(
            tuple(heard), tuple(times), tuple(unexplained), unscored, time.perf_counter() - started
        )

    def _pcm(
        self, audio: npt.ArrayLike, sample_rate: int
    ) -> tuple[npt.NDArray[np.int16], npt.NDArray[np.bool_]]:
        """16-bit audio at 16 kHz with the noise floor added, and which 10 ms frames hold sound (more than
        ``_SOUND_DB`` below the speech level: what the recogniser must not call silence)."""
        x = np.nan_to_num(np.asarray(audio, dtype=np.float64).reshape(-1), nan=0.0, posinf=0.0, neginf=0.0)
        y = resample(x, sample_rate, _SAMPLE_RATE)
        hop = int(_SAMPLE_RATE * _FRAME_S)
        n_frames = y.size // hop
        if not y.size:
            return np.zeros(0, dtype=np.int16), np.zeros(0, dtype=np.bool_)
        loud = y[np.abs(y) >= 0.01 * float(np.max(np.abs(y)))]
        rms = float(np.sqrt(np.mean(loud**2))) if loud.size else 0.0
        frame_power = np.mean(y[: n_frames * hop].reshape(n_frames, hop) ** 2, axis=1)
        sound = frame_power > (rms * 10.0 ** (_SOUND_DB / 20.0)) ** 2
        rng = np.random.default_rng(0x70C5)  # the same floor for the same audio: reproducible scores
        y = y + rng.standard_normal(y.size) * rms * 10.0 ** (self.noise_floor_db / 20.0)
        return np.clip(np.round(y * 32767.0), -32768, 32767).astype(np.int16), sound

    def _learn(self, decoder: object, known: set[str], pronunciations: dict[str, tuple[str, ...]]) -> None:
        new = [(w, prons) for w, prons in pronunciations.items() if w not in known]
        for number, (word, prons) in enumerate(new):
            for variant, phones in enumerate(prons):
                last = number == len(new) - 1 and variant == len(prons) - 1
                name = word if variant == 0 else f"{word}({variant + 1})"
                decoder.add_word(name, phones, last)  # type: ignore[attr-defined]
            known.add(word)

    def _language_model(self, chain: Sequence[str]) -> str:
        """ARPA bigram model of the chunk (see the module docstring)."""
        vocabulary = sorted(set(chain))
        share = (1.0 - self.garbage) / (len(vocabulary) + 1)  # the words and </s>, uniformly
        unigrams: dict[str, float] = dict.fromkeys([*vocabulary, "</s>"], math.log10(share))
        garbage = math.log10(self.garbage / len(_PHONES))
        for phone in _PHONES:
            unigrams[f"{_GARBAGE_PREFIX}{phone.lower()}"] = garbage
        successors: dict[str, set[str]] = {}
        sequence = ["<s>", *chain, "</s>"]
        for before, after in itertools.pairwise(sequence):
            successors.setdefault(before, set()).add(after)
        back_off = math.log10(1.0 - self.follow)
        lines = [
            "\\data\\",
            f"ngram 1={len(unigrams) + 1}",
            f"ngram 2={sum(len(s) for s in successors.values())}",
            "",
            "\\1-grams:",
            f"-99.0000 <s> {back_off:.4f}",
        ]
        for word, logp in unigrams.items():
            suffix = f" {back_off:.4f}" if word in successors else ""
            lines.append(f"{logp:.4f} {word}{suffix}")
        lines += ["", "\\2-grams:"]
        for before, afters in successors.items():
            logp = math.log10(self.follow / len(afters))
            lines.extend(f"{logp:.4f} {before} {after}" for after in sorted(afters))
        lines += ["", "\\end\\", ""]
        return "\n".join(lines)
