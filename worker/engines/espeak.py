"""The ``espeak`` engine: libespeak-ng formant synthesis, steered by a measured speaker prompt.

Pure module (no Flask, no Celery). The library itself is driven through :mod:`worker.engines.espeak_binding`
(one initialised instance per process, every call under a process-wide lock).

The speaker prompt (``encode_speaker``) holds the reference's median pitch and pitch range (YIN,
:mod:`worker.engines.pitch`) and its speaking rate; a reference without voiced frames or transcript
gets the figures of espeak's own default voice (:data:`DEFAULT_F0_MEDIAN_HZ`, :data:`DEFAULT_F0_RANGE_ST`,
:data:`DEFAULT_WORDS_PER_MINUTE`). Rendering maps them to espeak's pitch, range and rate through tables
measured on this library build, and picks the female variant by pitch: timbre and accent stay espeak's.

Word times (``synthesize_timed``, the same audio as ``synthesize``) come from the events espeak-ng sends
as it starts each word (:class:`~.espeak_binding.WordEvent`): :func:`word_marks` gives every word of the
text a mark covering its speech, without the silence around it. See docs/engines.md, "The espeak engine:
what a voice prompt matches".
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import numpy.typing as npt

from worker.engines import espeak_binding as binding
from worker.engines.base import EngineError, SpeakerPrompt, SynthesisRequest, Waveform, WordMark
from worker.engines.base import rate_scale as requested_rate
from worker.engines.pitch import HOP_S, count_words, f0_statistics, speech_seconds, track_pitch
from worker.engines.spec import NoSettings

__all__ = [
    "ANALYSIS_VERSION",
    "CALIBRATION_TEXT",
    "DEFAULT_F0_MEDIAN_HZ",
    "DEFAULT_F0_RANGE_ST",
    "DEFAULT_WORDS_PER_MINUTE",
    "FEMALE_VARIANT",
    "FEMALE_VARIANT_MIN_F0_HZ",
    "MIN_REFERENCE_SECONDS",
    "EspeakEngine",
    "VoiceSettings",
    "measure_rendering",
    "settings_for_prompt",
    "word_marks",
]

# Bump when the analysis (pitch.py), the prompt layout, the calibration tables or the mapping from prompt
# to espeak settings change: it is part of the engine version, so renderings cached under the old version
# are not reused. (The library version is the other part.)
ANALYSIS_VERSION = "prompt-v2"

SAMPLE_RATE = 22050
MIN_REFERENCE_SECONDS = 0.5

# The calibration passage (39 words). Every table below was measured by rendering it with
# libespeak-ng 1.52.0 (espeakng-loader 0.2.4) through espeak_binding.synthesize and analysing the output
# with this module's own analysis (measure_rendering: pitch.track_pitch + pitch.f0_statistics for F0,
# pitch.speech_seconds for the rate) — i.e. exactly what encode_speaker would report for that rendering,
# so prompt -> settings -> rendering -> prompt round-trips. Re-measure with measure_rendering() (the unit
# tests compare a few points) when the library changes.
CALIBRATION_TEXT = (
    "The old lighthouse keeper walked slowly along the shore, watching the grey waves roll in. "
    "He had lived there for forty years, and every evening he climbed the narrow stairs to light the lamp."
)

_PITCH_STEPS = (0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100)  # espeakPITCH (rows)
_RANGE_STEPS = (0, 25, 50, 75, 100)  # espeakRANGE (columns)
# (median F0 Hz, 10-90 % F0 span in semitones) at rate 175, for each espeakPITCH x espeakRANGE.
# Default voice (gmw/en-US, no variant):
PITCH_TABLE_DEFAULT = (
    ((53.6, 0.65), (60.3, 3.45), (69.3, 5.38), (79.2, 6.37), (88.2, 6.95)),  # pitch 0
    ((59.2, 0.57), (65.8, 3.51), (73.9, 4.75), (84.3, 5.59), (91.5, 7.31)),  # pitch 10
    ((64.8, 0.52), (71.5, 3.10), (79.1, 4.82), (87.8, 6.15), (96.3, 6.63)),  # pitch 20
    ((72.0, 0.49), (78.6, 2.59), (85.9, 4.47), (95.3, 5.28), (103.8, 6.21)),  # pitch 30
    ((79.7, 0.43), (86.2, 2.43), (93.8, 4.00), (102.5, 4.70), (111.4, 5.87)),  # pitch 40
    ((89.1, 0.40), (95.7, 2.05), (102.9, 3.65), (110.3, 4.86), (118.5, 5.58)),  # pitch 50
    ((99.7, 0.37), (106.5, 1.89), (113.3, 3.45), (120.2, 4.48), (128.6, 5.34)),  # pitch 60
    ((111.9, 0.32), (118.7, 1.65), (125.8, 3.13), (132.8, 4.26), (140.2, 4.84)),  # pitch 70
    ((125.7, 0.29), (132.6, 1.49), (139.2, 2.70), (147.0, 3.83), (153.8, 4.74)),  # pitch 80
    ((141.8, 0.26), (148.7, 1.27), (156.0, 2.47), (162.9, 3.47), (169.5, 4.41)),  # pitch 90
    ((157.9, 0.24), (165.0, 1.16), (172.1, 2.16), (179.2, 3.15), (186.2, 3.89)),  # pitch 100
)
# Female variant (gmw/en-US+f3):
PITCH_TABLE_F3 = (
    ((113.0, 0.31), (131.1, 3.95), (153.1, 6.08), (175.9, 7.57), (199.7, 8.31)),  # pitch 0
    ((123.2, 0.28), (141.7, 3.67), (161.5, 6.45), (184.7, 7.31), (205.7, 8.07)),  # pitch 10
    ((133.5, 0.26), (152.0, 3.54), (172.1, 5.66), (194.7, 6.89), (216.1, 7.78)),  # pitch 20
    ((146.8, 0.24), (165.3, 3.11), (184.3, 5.42), (205.4, 6.54), (227.2, 7.64)),  # pitch 30
    ((161.1, 0.23), (179.4, 2.85), (198.5, 4.98), (218.6, 6.38), (237.5, 7.28)),  # pitch 40
    ((178.6, 0.20), (197.1, 2.71), (215.4, 4.57), (234.2, 6.15), (254.0, 7.04)),  # pitch 50
    ((198.0, 0.19), (216.5, 2.28), (235.2, 4.27), (254.2, 5.85), (271.9, 6.84)),  # pitch 60
    ((220.5, 0.17), (239.3, 2.11), (257.3, 3.91), (275.2, 5.47), (293.6, 6.52)),  # pitch 70
    ((246.1, 0.15), (264.9, 1.92), (282.8, 3.54), (300.3, 4.95), (317.3, 6.23)),  # pitch 80
    ((275.8, 0.13), (294.1, 1.69), (312.6, 3.18), (329.8, 4.56), (346.9, 5.71)),  # pitch 90
    ((305.6, 0.13), (324.0, 1.56), (341.4, 2.90), (359.4, 4.15), (376.9, 5.27)),  # pitch 100
)
# (espeakRATE, measured words per minute) at pitch 50, range 50, default voice. The +f3 variant measured
# within 2 % of these (101.0 at 80, 210.3 at 175, 511.3 at 449), so one table serves both.
RATE_TABLE = (
    (80, 100.1),
    (100, 117.4),
    (125, 148.1),
    (150, 178.6),
    (175, 209.2),
    (200, 236.9),
    (250, 297.8),
    (300, 357.3),
    (350, 420.6),
    (400, 476.6),
    (449, 519.1),
)

# Variant choice: the default voice spans 54-186 Hz and +f3 113-377 Hz over espeakPITCH x espeakRANGE
# (tables above); at espeak's own settings they sit at 103 Hz and 215 Hz. References with a median F0 of
# 160 Hz or more (above typical male, at the low end of typical female speech; and where the default voice
# would need espeakPITCH ~ 93) use the female variant.
FEMALE_VARIANT = "f3"
FEMALE_VARIANT_MIN_F0_HZ = 160.0

# The prompt figures of espeak's default voice at its default settings (table entries pitch 50 / range 50
# and rate 175): used when a reference has no voiced frames or no transcript.
DEFAULT_F0_MEDIAN_HZ = 102.9
DEFAULT_F0_RANGE_ST = 3.65
DEFAULT_WORDS_PER_MINUTE = 209.2

# In the pitch/range fit, a semitone of error in range costs as much as half a semitone in median F0.
_RANGE_WEIGHT = 0.25
# Preferred espeak voice per language code where the espeak default is not what people expect.
_LANGUAGE_ALIASES = {"en": "en-us"}


@dataclass(frozen=True)
class VoiceSettings:
    """espeak settings derived from a prompt: variant (None: the language's own voice), pitch, range, rate."""

    variant: str | None
    pitch: int
    pitch_range: int
    rate: int


def _scalar(prompt: SpeakerPrompt, key: str) -> float | None:
    """A positive finite scalar from the prompt, or None when missing or unusable."""
    value = prompt.get(key)
    if value is None:
        return None
    array = np.asarray(value, dtype=np.float64).reshape(-1)
    if array.size == 0 or not math.isfinite(float(array[0])) or float(array[0]) <= 0:
        return None
    return float(array[0])


@functools.cache
def _fine_grid(variant: str | None) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Bilinear interpolation of a pitch table onto every integer (pitch, range): (log2 F0, span st)."""
    table = np.asarray(PITCH_TABLE_F3 if variant == FEMALE_VARIANT else PITCH_TABLE_DEFAULT)
    fine = np.arange(101, dtype=np.float64)
    log_f0 = np.log2(table[:, :, 0])
    span = table[:, :, 1]

    def interpolate(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        along_range = np.stack([np.interp(fine, _RANGE_STEPS, row) for row in values])  # (11, 101)
        return np.stack([np.interp(fine, _PITCH_STEPS, col) for col in along_range.T], axis=1)  # (101, 101)

    return interpolate(log_f0), interpolate(span)


def _fit_pitch(variant: str | None, f0_hz: float, span_st: float | None) -> tuple[int, int]:
    """(espeakPITCH, espeakRANGE) whose measured (median F0, span) is closest to the target."""
    log_f0, span = _fine_grid(variant)
    cost = (12.0 * (log_f0 - math.log2(f0_hz))) ** 2
    if span_st is None:
        pitch = int(np.argmin(cost[:, 50]))
        return pitch, 50
    cost = cost + _RANGE_WEIGHT * (span - span_st) ** 2
    best = int(np.argmin(cost))
    return best // cost.shape[1], best % cost.shape[1]


def _rate_for_wpm(words_per_minute: float) -> int:
    rates = [rate for rate, _ in RATE_TABLE]
    measured = [wpm for _, wpm in RATE_TABLE]
    rate = float(np.interp(words_per_minute, measured, rates))
    return max(binding.RATE_MIN, min(binding.RATE_MAX, round(rate)))


def settings_for_prompt(prompt: SpeakerPrompt, *, rate_scale: float = 1.0) -> VoiceSettings:
    """Map a speaker prompt (see the module docstring) to espeak settings, through the calibration tables.

    Missing or unusable figures fall back to espeak's defaults (no variant, pitch 50, range 50, 175 wpm);
    ``rate_scale`` multiplies the target words per minute.
    """
    if not (math.isfinite(rate_scale) and rate_scale > 0):
        raise EngineError(f"rate_scale must be a positive number, got {rate_scale!r}")
    f0 = _scalar(prompt, "f0_median_hz")
    span = _scalar(prompt, "f0_range_st")
    wpm = _scalar(prompt, "words_per_minute")
    if f0 is None:
        variant, pitch, pitch_range = None, 50, 50
    else:
        variant = FEMALE_VARIANT if f0 >= FEMALE_VARIANT_MIN_F0_HZ else None
        pitch, pitch_range = _fit_pitch(variant, f0, span)
    if wpm is None and rate_scale == 1.0:
        rate = binding.RATE_NORMAL
    else:
        rate = _rate_for_wpm((wpm if wpm is not None else DEFAULT_WORDS_PER_MINUTE) * rate_scale)
    return VoiceSettings(variant=variant, pitch=pitch, pitch_range=pitch_range, rate=rate)


def _mono(audio: npt.ArrayLike) -> npt.NDArray[np.float64]:
    x = np.asarray(audio, dtype=np.float64)
    if x.ndim == 2 and min(x.shape) >= 1:
        x = x.mean(axis=int(np.argmin(x.shape)))  # (frames, channels) or (channels, frames)
    if x.ndim != 1:
        raise EngineError(f"reference audio must be mono (1-D), got shape {x.shape}")
    return np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)


def _analyse(audio: npt.ArrayLike, sample_rate: int, text: str) -> dict[str, float]:
    """The prompt figures of a recording (see the module docstring)."""
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, int | np.integer) or sample_rate < 4000:
        raise EngineError(f"reference sample rate must be an integer >= 4000 Hz, got {sample_rate!r}")
    x = _mono(audio)
    duration = x.size / sample_rate
    if duration < MIN_REFERENCE_SECONDS:
        raise EngineError(
            f"reference audio is too short to analyse: {duration:.2f} s < {MIN_REFERENCE_SECONDS} s"
        )
    track = track_pitch(x, int(sample_rate))
    stats = f0_statistics(track)
    f0_median, f0_span = stats if stats is not None else (DEFAULT_F0_MEDIAN_HZ, DEFAULT_F0_RANGE_ST)
    speech_s = speech_seconds(x, int(sample_rate))
    words = count_words(text)
    wpm = words / speech_s * 60.0 if words > 0 and speech_s >= 0.25 else DEFAULT_WORDS_PER_MINUTE
    return {
        "f0_median_hz": f0_median,
        "f0_range_st": f0_span,
        "words_per_minute": min(max(wpm, 20.0), 1000.0),
        "voiced_seconds": float(track.voiced.sum()) * HOP_S if stats is not None else 0.0,
        "speech_seconds": speech_s,
    }


def measure_rendering(
    text: str = CALIBRATION_TEXT,
    *,
    voice: str = "gmw/en-US",
    pitch: int = 50,
    pitch_range: int = 50,
    rate: int = binding.RATE_NORMAL,
) -> dict[str, float]:
    """Render ``text`` with raw espeak settings and analyse it like a reference: how the tables were made."""
    samples = binding.synthesize(
        text, binding.SynthParams(voice, rate=rate, pitch=pitch, pitch_range=pitch_range)
    )
    return _analyse(samples.astype(np.float32) / 32768.0, binding.sample_rate(), text)


class EspeakEngine:
    """The ``espeak`` engine (see the module docstring). Cheap to construct: the library is initialised
    by the first synthesis in the process that performs it."""

    name = "espeak"
    sample_rate = SAMPLE_RATE
    max_chunk_chars = 600
    # What a stored prompt must contain, checked when a prompt file is loaded.
    prompt_shapes: Mapping[str, tuple[int, ...]] = dict.fromkeys(
        ("f0_median_hz", "f0_range_st", "words_per_minute", "voiced_seconds", "speech_seconds"), (1,)
    )

    def __init__(self) -> None:
        self.version = f"espeak-ng {binding.library_version()}/{ANALYSIS_VERSION}"
        self._voices: dict[str, str] = {}

    # -- speaker prompts -------------------------------------------------------------------------------

    def encode_speaker(
        self, audio: Waveform, sample_rate: int, ref_text: str
    ) -> dict[str, npt.NDArray[np.generic]]:
        figures = _analyse(audio, sample_rate, ref_text or "")
        return {key: np.asarray([value], dtype=np.float32) for key, value in figures.items()}

    # -- languages -------------------------------------------------------------------------------------

    def voice_for_language(self, language: str) -> str:
        """The espeak voice identifier (e.g. ``"gmw/en-US"``) for a language code; EngineError if none."""
        code = language.strip().lower().replace("_", "-")
        cached = self._voices.get(code)
        if cached is not None:
            return cached
        voice = self._lookup_voice(code)
        if voice is None or not binding.voice_exists(voice):
            raise EngineError(f"espeak has no voice for language {language!r}")
        self._voices[code] = voice
        return voice

    @staticmethod
    def _lookup_voice(code: str) -> str | None:
        if not code or any(c in code for c in "+/\\\x00 "):
            return None
        voices = binding.list_voices()
        candidates = [code]
        if "-" in code:
            candidates.append(code.split("-", 1)[0])  # "de-at" -> "de"
        for code_or_alias in candidates:
            candidate = _LANGUAGE_ALIASES.get(code_or_alias, code_or_alias)
            for _name, identifier, _languages in voices:  # the voice named after the code ...
                if identifier.rsplit("/", 1)[-1].lower() == candidate:
                    return identifier
            for _name, identifier, languages in voices:  # ... else the first voice speaking it
                if candidate in languages:
                    return identifier
        return None

    # -- synthesis -------------------------------------------------------------------------------------

    def synthesize(self, batch: Sequence[SynthesisRequest]) -> list[Waveform]:
        return [wave for wave, _marks in self._render(batch, timed=False)]

    def synthesize_timed(self, batch: Sequence[SynthesisRequest]) -> list[tuple[Waveform, list[WordMark]]]:
        """The waveforms of :meth:`synthesize` (the same samples), each with its words (see the module
        docstring). The waveform is espeak's output unchanged but for the scaling to float, so its sample
        offsets are espeak's."""
        return self._render(batch, timed=True)

    def _render(
        self, batch: Sequence[SynthesisRequest], *, timed: bool
    ) -> list[tuple[Waveform, list[WordMark]]]:
        voices = [self.voice_for_language(request.language) for request in batch]  # fail before rendering
        settings = [
            settings_for_prompt(request.prompt, rate_scale=requested_rate(request.params))
            for request in batch
        ]
        out: list[tuple[Waveform, list[WordMark]]] = []
        for request, voice, setting in zip(batch, voices, settings, strict=True):
            if not request.text.strip():
                out.append((np.zeros(0, dtype=np.float32), []))
                continue
            name = f"{voice}+{setting.variant}" if setting.variant else voice
            params = binding.SynthParams(
                name, rate=setting.rate, pitch=setting.pitch, pitch_range=setting.pitch_range
            )
            marks: list[WordMark] = []
            if timed:
                samples, events = binding.synthesize_words(request.text, params)
                marks = word_marks(request.text, events, samples)
            else:
                samples = binding.synthesize(request.text, params)
            if binding.sample_rate() != self.sample_rate:
                raise EngineError(
                    f"libespeak-ng renders at {binding.sample_rate()} Hz, not {self.sample_rate}"
                )
            out.append(((samples.astype(np.float32) / np.float32(32768.0)).astype(np.float32), marks))
        return out


# -- words -----------------------------------------------------------------------------------------------

# A sample of espeak's 16-bit output is sound from this magnitude on (about -60 dBFS). espeak's pauses are
# exact zeros and its words stop abruptly, so the edges found hardly depend on the figure.
_SOUND_LEVEL = 33
_TOKEN = re.compile(r"\S+")  # \s is str.isspace, as in str.split
_SPOKEN_PUNCTUATION = "%\u2030\u2031#&@*\u00a7\u00b6"
_APOSTROPHES = "'\u2019\u02bc"
# Scripts written without spaces between words: Thai, Lao, Myanmar, Khmer, kana, CJK ideographs.
_UNSPACED = (
    (0x0E00, 0x0EFF),
    (0x1000, 0x109F),
    (0x1780, 0x17FF),
    (0x3040, 0x30FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0x20000, 0x3FFFF),
)


def _is_word_char(ch: str) -> bool:
    """Letters, marks, digits, symbols ("$5", an emoji) and the punctuation read out as words ("50%",
    "#1", "x@y.com"); not other punctuation, nor format characters."""
    return unicodedata.category(ch)[0] not in "PCZ" or ch in _SPOKEN_PUNCTUATION


def _unspaced(ch: str) -> bool:
    code = ord(ch)
    return any(low <= code <= high for low, high in _UNSPACED)


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    """``[start, end)`` without leading and trailing punctuation; all of it if it is all punctuation."""
    a, b = start, end
    while a < b and not _is_word_char(text[a]):
        a += 1
    while b > a and not _is_word_char(text[b - 1]):
        b -= 1
    return (a, b) if a < b else (start, end)


def _starts_word(text: str, q: int) -> bool:
    """Whether espeak starting a word at ``text[q]``, inside a whitespace-separated token, starts a new
    word of the text: after a dash, slash or other punctuation ("Yes\u2014no", "and/or"), or between two
    characters of a script without spaces; not after an apostrophe or inside a number ("1,000")."""
    ch, before = text[q], text[q - 1]
    if not _is_word_char(ch):
        return False
    if _is_word_char(before):
        return _unspaced(before) and _unspaced(ch)
    if before in _APOSTROPHES:
        return False
    return not (ch.isdigit() and q >= 2 and text[q - 2].isdigit())


def _words(text: str, positions: Sequence[int]) -> tuple[list[tuple[int, int]], list[int]]:
    """The words of ``text`` (character spans, in order) and the word espeak started at each position.

    Words are whitespace-separated tokens without surrounding punctuation (a token of punctuation only is
    no word, unless espeak read it out), cut where espeak starts a word inside one (:func:`_starts_word`).
    """
    tokens = [m.span() for m in _TOKEN.finditer(text)]
    starts = [a for a, _ in tokens]

    def containing(q: int) -> int | None:
        i = bisect_right(starts, q) - 1
        return i if i >= 0 and q < tokens[i][1] else None

    hits = [containing(q) for q in positions]
    hit_tokens = {i for i in hits if i is not None}

    def between(q: int) -> int:
        # Between tokens: espeak's off-by-one start of the next token ("a b. c"), unless that token has
        # events of its own: then a second word read out for the previous one (an emoji's name).
        following = bisect_right(starts, q)
        if following < len(tokens) and (following == 0 or following not in hit_tokens):
            return following
        return following - 1

    events_of: dict[int, list[int]] = {}  # token -> the events in it, in audio order
    previous = 0
    for n, (q, hit) in enumerate(zip(positions, hits, strict=True)):
        previous = max(between(q) if hit is None else hit, previous)  # in audio order, tokens move on
        events_of.setdefault(previous, []).append(n)
    words: list[tuple[int, int]] = []
    word_of = [0] * len(positions)
    for token, span in enumerate(tokens):
        a, b = _trim(text, *span)
        mine = events_of.get(token, [])
        cuts = sorted(
            {positions[n] for n in mine if a < positions[n] < b and _starts_word(text, positions[n])}
        )
        if not mine and not any(_is_word_char(ch) for ch in text[a:b]):
            continue
        pieces = [_trim(text, x, y) for x, y in pairwise([a, *cuts, b])]
        piece_starts = [x for x, _ in pieces]
        for n in mine:
            word_of[n] = len(words) + max(bisect_right(piece_starts, positions[n]) - 1, 0)
        words.extend(pieces)
    for n in range(1, len(word_of)):
        word_of[n] = max(word_of[n], word_of[n - 1])
    return words, word_of


def word_marks(
    text: str, events: Sequence[binding.WordEvent], samples: npt.NDArray[np.int16]
) -> list[WordMark]:
    """A mark for every word of ``text``, from the ``events`` espeak sent while rendering ``samples``
    (see the module docstring); none at all without events.

    espeak speaks some short unstressed words as one with the word before ("was a", "in the": one event
    for both) and sends nothing for words it does not say: such a run of words, from one event to the
    next, shares that event's sound in proportion to the words' lengths (words before the first event
    join the first run).
    """
    clean = text.replace("\x00", " ")  # what the binding gave espeak: the same positions
    if not events or not _TOKEN.search(clean):
        return []
    words, word_of = _words(clean, [min(max(e.position, 0), len(clean)) for e in events])
    runs: list[tuple[int, int]] = []  # (first word, first sample), one per word espeak started
    floor = 0
    for event, word in zip(events, word_of, strict=True):
        floor = min(max(event.sample, floor), samples.size)
        if not runs or runs[-1][0] != word:
            runs.append((word, floor))
    sound = np.abs(samples.astype(np.int32)) >= _SOUND_LEVEL
    marks: list[WordMark] = []
    for n, (word, first) in enumerate(runs):
        last = n + 1 == len(runs)
        until = samples.size if last else runs[n + 1][1]
        loud = np.flatnonzero(sound[first:until])
        start, end = (first + int(loud[0]), first + int(loud[-1]) + 1) if loud.size else (first, first)
        shared = words[0 if n == 0 else word : len(words) if last else runs[n + 1][0]]
        total = sum(b - a for a, b in shared)
        done, at = 0, start
        for k, (a, b) in enumerate(shared):
            done += b - a
            stop = end if k + 1 == len(shared) else start + (end - start) * done // total
            marks.append(WordMark(at, stop, a, b))
            at = stop
    return marks


def create(settings: NoSettings) -> EspeakEngine:
    """The engine as the registry builds it (it has no settings)."""
    return EspeakEngine()
