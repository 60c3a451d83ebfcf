"""Cheap checks on one rendered chunk (pure: numpy only, no Flask, no Celery, no database).

:func:`check_audio` measures a chunk's waveform against its text and the voice, and scores each check
against a :class:`QaPolicy`: ``audio`` (samples present and finite), ``silence``, ``clipping``,
``duration`` (shorter than the text's expected duration means dropped words, longer means babble,
repeats or noise), ``pauses``, ``edges``, ``noise``, ``hiss``, ``rumble`` (unvoiced sound that is not
speech: speech alternates voiced and unvoiced sounds every few tenths of a second, noise does not),
``ending`` (a cut-off ending stops mid-sound), ``repeat`` (:mod:`worker.qa.repeat`), ``pitch``
(another voice) and ``level``. A
:class:`VoiceFloor` raises the edge and noise limits for a voice whose own clean rendering measures more.

The expected duration is the normalised text's letters and digits over the voice's
:class:`SpeakingRate`, which :func:`measure_speaking_rate` learns from the voice's chunks that passed;
speech seconds are measured as :func:`worker.engines.pitch.speech_seconds` measures them.

See docs/qa.md, "The checks of a chunk" (each check, its threshold fields and their defaults).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from worker.engines import pitch
from worker.engines.catalog import BUILT_IN, qa_profile
from worker.engines.spec import QaProfile
from worker.qa.repeat import self_repeat, text_repeats
from worker.qa.signal import longest_run, resample, runs

__all__ = [
    "DEFAULT_POLICIES",
    "NEURAL_POLICY",
    "PROFILE_POLICIES",
    "Check",
    "NoiseFigures",
    "QaPolicy",
    "QaResult",
    "SpeakingRate",
    "VoiceFloor",
    "check_audio",
    "is_rule_based",
    "is_short_line",
    "measure_floor",
    "measure_speaking_rate",
    "median_f0",
    "median_level",
    "noise_figures",
    "policy_for",
    "spoken_units",
    "unusable_audio",
]

RateUnit = Literal["chars", "words"]

# Pitch and voicing are tracked at this rate (F0 <= 500 Hz needs far less; halves the YIN cost at 22 kHz).
_ANALYSIS_RATE = 16000


@dataclass(frozen=True)
class QaPolicy:
    """Thresholds of the chunk QA. The defaults are the rule-based profile's, set on the default engine's
    formant speech (:data:`PROFILE_POLICIES` has the others); a job may override any of them. How each
    default was chosen is in the comment beside it; the clean rule-based figures quoted come from
    ``bench/qa.py``'s calibration set (a different seed from its test).
    """

    # audio / silence: -50 dBFS is the render step's own silence threshold (worker.audio.trim_silence).
    silence_dbfs: float = -50.0
    min_speech_s: float = 0.1  # shorter than any spoken word
    # clipping: a sample at 0.999 of full scale or beyond is taken as clipped; 0.1 % of samples is ~22
    # clipped samples per 10 ms frame of a second: audible distortion, never produced by a clean engine.
    clip_level: float = 0.999
    max_clipped_share: float = 0.001
    # duration: speech may be this much shorter / longer than expected, plus ``duration_slack_s`` either
    # way (a word or two of granularity, which matters in one-line chunks). Clean rule-based chunks measured
    # 0.71-1.13 of the expected duration at their voice's rate (1st-99th percentile 0.82-1.11), the
    # spread of letters per second between texts.
    max_short: float = 0.25
    max_long: float = 0.25
    duration_slack_s: float = 0.4
    # With no measured rate, speech outside this span of letters per second is not plausible speech.
    plausible_chars_per_second: tuple[float, float] = (5.0, 30.0)
    # pauses: clean rule-based chunks' longest internal silence measured 0.55 s (sentence ends, quotes).
    max_pause_s: float = 1.2
    # edges: unvoiced onsets and codas ("s", "st") last under 0.35 s in clean rule-based chunks.
    max_edge_s: float = 0.5
    # noise: clean rule-based chunks' longest unvoiced stretch measured 0.32 s ("sts", "fts" with their
    # closures) before the sound mask widened; with it, 0.44 s twice on calibration seed 113 (0.39 s on 111),
    # while no injected fault there was caught by this check alone at 0.5 s or less (short bursts are
    # hiss or rumble).
    max_noise_s: float = 0.5
    # hiss: unvoiced frames whose spectrum is flat (flatness above ``hiss_flatness``; white noise measures
    # ~0.56, fricatives stay under it, their power sits in a high band). Clean rule-based chunks'
    # longest run of them measured 0.05 s (set 21; 0.03 s set 7); white noise bursts 0.3 s and more.
    hiss_flatness: float = 0.4
    max_hiss_s: float = 0.15
    # rumble: unvoiced frames with more than ``rumble_low_share`` of their power below 1 kHz: no unvoiced
    # speech sound has that (fricatives and bursts are high-frequency), pink and brown noise do. Clean
    # rule-based chunks measured at most 0.21 s (voicing onsets the pitch tracker calls unvoiced) before
    # the sound mask widened; with it, up to 0.26 s on calibration seeds 111 and 113 (about 0.3 s was
    # read on 21 and 101), while the shortest pink bursts injected there (0.33 s) measured 0.37 s: 0.3 s
    # between.
    rumble_low_share: float = 0.4
    max_rumble_s: float = 0.3
    # noise, hiss and rumble look at the unvoiced frames that hold *sound*: active speech, or any frame
    # within ``sound_range_db`` of the chunk's speech level (and above ``silence_dbfs``). The activity
    # detector's threshold follows the chunk's own quietest frames (10 dB above its 10th percentile),
    # which in a chunk with few pauses sits inside the speech: a noise burst 17-20 dB below the speech
    # then counted as a pause and no check looked at it (7 of 17 missed on bench seed 43). Any sound
    # 40 dB below the speech is still heard; a clean rule-based chunk's pauses are digital silence.
    sound_range_db: float = 40.0
    # ending: the last ``end_window_s`` of the audio at most ``max_end_level_db`` re the speech level. A
    # rendering ends on a decay or in silence; one cut off (a decoder stopped at its length limit, a
    # stream closed early) stops mid-sound, which is also a click. Clean rule-based chunks measured at most
    # -23.6 dB (calibration seed 105, 300 chunks; the median ends in digital silence); 218 of 300 cut
    # renderings end above -20 dB (the rest stop in a pause, where the words check sees what is missing).
    end_window_s: float = 0.002
    max_end_level_db: float = -20.0
    # repeat (worker.qa.repeat): a stretch of the audio that sounds like the stretch just before it, for
    # at least ``max_repeat_s`` and ``min_repeat_coverage`` of the lag between them: a phrase said twice.
    # Not judged when the text itself repeats a phrase nearby. Set on the calibrate voices of
    # bench/voice_set.py only (book seeds 7 and 301, 20 chunks a voice, each rendered clean and with a
    # doubled phrase): see docs/qa.md. 0 = off.
    max_repeat_s: float = 0.6
    min_repeat_coverage: float = 0.4
    # pitch: clean rule-based chunks measured -1.6 to +0.2 semitones from their prompt's F0 (the worst a
    # chunk of a few words); 3 semitones is a different voice (a male and a female voice are ~12 apart).
    max_pitch_shift_st: float = 3.0
    # level: 6 dB is a loudness jump any listener notices between consecutive chunks.
    max_level_dev_db: float = 6.0
    # pitch needs this much voiced speech: the median of a word or two follows its intonation.
    min_voiced_s: float = 0.5
    # ... and under ``short_voiced_s`` of it (a heading, a one-line reply) the median still follows the
    # phrase's fall: 420 clean rule-based phrases of 2-6 words in four voices measured -4.7 to +1.0 semitones
    # ("Chapter seventy-one" -4.2 at 0.8 s voiced), against -1.6 to +0.2 for longer chunks; from 1.0 s of
    # voiced speech on, -1.5 at worst. Short speech is held to ``max_pitch_shift_short_st``, which still
    # tells most voices apart (a male and a female voice are ~12 semitones apart).
    short_voiced_s: float = 1.0
    max_pitch_shift_short_st: float = 6.0
    # transcript (worker.qa.transcript), each just beyond the worst clean rule-based chunk of the calibration
    # set (80 chunks, four voices): word error rate above ``max_wer`` with at least ``min_errors`` errors
    # (clean worst 0.19), or half the words wrong; ``max_missing_run`` consecutive expected words missing
    # (clean worst 3); the last ``max_missing_tail`` words missing (clean worst 2, once); a phrase of two
    # or more words heard twice (never in clean chunks); a stretch of sound longer than
    # ``max_unexplained_s`` heard as noise, as phones of no word of the text or as silence (clean 99th
    # percentile 0.44 s: a misheard word).
    max_wer: float = 0.25
    min_errors: int = 3
    max_missing_run: int = 4
    max_missing_tail: int = 3
    max_unexplained_s: float = 0.45
    # In a chunk of at most ``max_exact_words`` scored words (a heading, a one-line sentence), any word
    # missing fails: the constrained recogniser heard every word of all 75 clean rule-based chunks of up to
    # 14 words on calibration seeds 7 and 21, while a dropped word there ("Chapter" of "Chapter
    # twenty-one", 1 error in 3) stayed under ``min_errors``.
    max_exact_words: int = 10
    # speaker (worker.qa.speaker; engines with a speaker encoder): cosine similarity of the
    # chunk's speaker embedding to the voice's at least this. 0 = off: the score is measured and recorded
    # on every chunk, never held to a limit. Not calibrated: only a tiny random-weight neural checkpoint
    # exists here (every input scores 0.98-1.0 on it), so a job sets it from its own engine's figures.
    min_speaker_similarity: float = 0.0
    # The voice's own floor (:class:`VoiceFloor`, measured on its clean calibration renderings): the
    # edge, noise, hiss and rumble limits of its chunks are at least ``floor_factor`` times its worst
    # calibration figure plus ``floor_slack_s``; a chunk of at most ``short_line_words`` words (a
    # heading, a one-line sentence) is held to the figures of the voice's calibration headings. Set on
    # the calibration voices of bench/voice_set.py only: on the three whose floor rises above these
    # defaults (low and telephone voices, whose rule-based rendering dips into creak), the worst rumble and
    # heading edge of 30 clean chunks each stayed within 1.25 x the calibration worst + 0.05 s (rumble
    # 0.56 s against a floor of 0.60 s; a "Chapter one" edge of 0.83 s against a headings floor of
    # 0.83 s); the worst unvoiced stretch (noise) did not on one voice (0.80 s against a limit of
    # 0.59 s), and a wider factor would let through the noise bursts that only that check sees. For
    # the voices with a clear rendering the floor stays under the defaults and changes nothing. A
    # paragraph's edge is held to the longer of the prose's and the lines' edges: it ends on a
    # sentence's final fall as a heading does (30 clean chunks of the calibration voices ended with up
    # to 0.61-0.65 s where their prose calibration measured 0.21-0.42 s and their lines 0.64-0.83 s).
    floor_factor: float = 1.25
    floor_slack_s: float = 0.05
    short_line_words: int = 8

    def for_voice(self, floor: VoiceFloor | None, text: str = "") -> QaPolicy:
        """This policy with the edge and noise limits raised to what the voice's own clean rendering
        measures (never lowered): the ``lines`` figures for a short line of ``text``, else ``prose``
        (and for the edges, the longer of ``prose`` and ``lines``)."""
        if floor is None:
            return self
        own = floor.lines if is_short_line(text, self) else floor.prose

        def limit(default: float, measured: float) -> float:
            return max(default, round(measured * self.floor_factor + self.floor_slack_s, 3))

        # a paragraph ends on a sentence's final fall as a heading does: its edge may be a line's
        edge = max(own.edge_s, floor.lines.edge_s)
        return replace(
            self,
            max_edge_s=limit(self.max_edge_s, edge),
            max_noise_s=limit(self.max_noise_s, own.noise_s),
            max_hiss_s=limit(self.max_hiss_s, own.hiss_s),
            max_rumble_s=limit(self.max_rumble_s, own.rumble_s),
        )

    def to_json(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    def with_overrides(self, overrides: Mapping[str, object]) -> QaPolicy:
        """This policy with some thresholds replaced (a job's options); ValueError on unknown names."""
        unknown = set(overrides) - set(self.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown QA thresholds: {', '.join(sorted(unknown))}")
        return replace(self, **overrides)  # type: ignore[arg-type]


# The neural profile's defaults. Neural engines vary their pacing and pauses more than rule-based ones
# (and breathe): wider duration, pause and edge limits, a looser transcript test (a stronger recogniser is
# expected there, but pocketsphinx on natural speech mishears more than on clean formants).
NEURAL_POLICY = QaPolicy(
    max_short=0.35,
    max_long=0.40,
    duration_slack_s=0.6,
    max_pause_s=2.0,
    max_edge_s=0.8,
    max_noise_s=0.6,
    max_hiss_s=0.5,  # a breath is unvoiced, flat-ish sound: neural voices breathe between sentences
    max_rumble_s=0.4,
    max_pitch_shift_st=4.0,
    max_pitch_shift_short_st=7.0,
    max_wer=0.30,
    min_errors=4,
    max_missing_run=5,
    max_missing_tail=3,
    max_unexplained_s=0.8,
    # Not calibrated on neural speech yet, so as lenient as before these checks existed: sound is
    # what the activity detector calls speech (a cloned voice may carry its reference's room tone
    # 30-40 dB down), only a cut at near speech level is a cut-off ending, and no exact-words rule.
    sound_range_db=0.0,
    max_end_level_db=-10.0,
    max_exact_words=0,
    # a neural engine's two takes of a phrase differ more than a rule-based one's: not calibrated, off
    max_repeat_s=0.0,
)
# Each QA profile's defaults; an engine declares its profile (worker.engines.spec).
PROFILE_POLICIES: Mapping[QaProfile, QaPolicy] = {"rule-based": QaPolicy(), "neural": NEURAL_POLICY}
# Each built-in engine's defaults, by engine name (policy_for covers every engine, loaded ones included).
DEFAULT_POLICIES: Mapping[str, QaPolicy] = {spec.name: PROFILE_POLICIES[spec.qa_profile] for spec in BUILT_IN}


def is_rule_based(engine: str) -> bool:
    """Whether ``engine`` reads by rule (formant speech, every word it is given), as opposed to a
    neural voice cloner: its declared QA profile (an engine not in the catalog is neural)."""
    return qa_profile(engine) == "rule-based"


def policy_for(engine: str, overrides: Mapping[str, object] | None = None) -> QaPolicy:
    """The policy of the engine's QA profile, with a job's overrides. An engine not in the catalog gets
    the neural one: the rule-based thresholds were set on speech that never breathes, hesitates or
    varies its pauses."""
    base = PROFILE_POLICIES[qa_profile(engine)]
    return base.with_overrides(overrides) if overrides else base


@dataclass(frozen=True)
class Check:
    """One check's outcome: its measured ``score`` (None: could not be measured), the ``limit`` it was held
    to (readable), whether it ``passed`` and, when it failed, a sentence that says why."""

    name: str
    score: float | None
    limit: str
    passed: bool
    reason: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "score": self.score,
            "limit": self.limit,
            "passed": self.passed,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class QaResult:
    """The checks of one chunk and the figures a job keeps per chunk (to measure the voice's rate and
    pitch from the chunks that passed, and the job's level)."""

    checks: tuple[Check, ...]
    duration_s: float = 0.0
    speech_s: float = 0.0
    f0_median_hz: float | None = None
    level_db: float | None = None
    details: Mapping[str, object] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if not check.passed)

    @property
    def reasons(self) -> list[str]:
        return [check.reason for check in self.failed]

    def scores(self) -> dict[str, float | None]:
        return {check.name: check.score for check in self.checks}

    def check(self, name: str) -> Check | None:
        return next((check for check in self.checks if check.name == name), None)

    def combined(self, checks: Iterable[Check], details: Mapping[str, object] | None = None) -> QaResult:
        """This result with more checks (e.g. the transcript's) and details added."""
        merged = {**self.details, **(details or {})}
        return replace(self, checks=self.checks + tuple(checks), details=merged)

    def to_json(self) -> dict[str, object]:
        """JSON-ready: what the render step stores on the chunk."""
        return {
            "passed": self.passed,
            "reasons": self.reasons,
            "duration_s": round(self.duration_s, 3),
            "speech_s": round(self.speech_s, 3),
            "f0_median_hz": None if self.f0_median_hz is None else round(self.f0_median_hz, 1),
            "level_db": None if self.level_db is None else round(self.level_db, 2),
            "checks": [check.to_json() for check in self.checks],
            **({"details": dict(self.details)} if self.details else {}),
        }


# -- speaking rate ------------------------------------------------------------------------------------

_LETTER = re.compile(r"[^\W_]")
_WORD = re.compile(r"[^\W_]+(?:['\u2019\-][^\W_]+)*")


def spoken_units(text: str, unit: RateUnit = "chars") -> int:
    """Letters and digits (``chars``) or words (``words``) of a chunk's normalised text."""
    return len((_LETTER if unit == "chars" else _WORD).findall(text))


@dataclass(frozen=True)
class SpeakingRate:
    """A voice's speaking rate: spoken ``unit`` per second of speech (see the module docstring), measured
    over ``chunks`` chunks (0: given, e.g. from a speaker prompt)."""

    per_second: float
    unit: RateUnit = "chars"
    chunks: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.per_second) and self.per_second > 0):
            raise ValueError(f"a speaking rate must be positive, got {self.per_second!r}")

    @classmethod
    def from_words_per_minute(cls, words_per_minute: float) -> SpeakingRate:
        """From a prompt's figure (the rule-based engine's ``words_per_minute``), measured the same way."""
        return cls(words_per_minute / 60.0, "words")

    def expected_seconds(self, text: str) -> float:
        return spoken_units(text, self.unit) / self.per_second


def measure_speaking_rate(
    chunks: Iterable[tuple[str, float]], unit: RateUnit = "chars", *, min_units: int = 200
) -> SpeakingRate | None:
    """The rate of a voice from ``(text, speech_s)`` of its chunks that passed (``QaResult.speech_s``):
    their units over their speech seconds, so long chunks weigh more. None until the chunks hold at least
    ``min_units`` units (about a paragraph: a single short chunk's rate is too noisy to hold others to)."""
    units = 0
    seconds = 0.0
    count = 0
    for text, speech_s in chunks:
        if speech_s > 0 and math.isfinite(speech_s):
            units += spoken_units(text, unit)
            seconds += speech_s
            count += 1
    if units < min_units or seconds <= 0:
        return None
    return SpeakingRate(units / seconds, unit, count)


def median_f0(values: Iterable[float | None]) -> float | None:
    """The median of the chunks' median F0 (``QaResult.f0_median_hz`` of the chunks that passed)."""
    known = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    return float(np.median(known)) if known else None


def median_level(values: Iterable[object]) -> float | None:
    """The median speech level (dBFS, ``QaResult.level_db``) of the chunks that passed."""
    known = [float(v) for v in values if isinstance(v, int | float) and math.isfinite(v) and v < 0]
    return float(np.median(known)) if known else None


# -- the checks ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Frames:
    """Per-frame (10 ms) analysis of a chunk at the analysis rate: level, activity, voicing, F0, the
    frames that sound voiced (``voice_like``: the voiced ones and a low voice's creak, see
    :func:`_voice_like`), and the spectrum's flatness and share of power below ``_LOW_BAND_HZ``."""

    levels_db: npt.NDArray[np.float64]
    active: npt.NDArray[np.bool_]
    voiced: npt.NDArray[np.bool_]
    f0_hz: npt.NDArray[np.float64]
    flatness: npt.NDArray[np.float64]
    low_share: npt.NDArray[np.float64]
    voice_like: npt.NDArray[np.bool_]


_SPECTRUM_WINDOW = 512  # 32 ms at 16 kHz: a fricative's or a noise burst's spectrum, 31 Hz resolution
_LOW_BAND_HZ = 1000.0
_SPECTRUM_BLOCK = 512  # frames per FFT batch: bounded memory for long chunks


def _spectral_shape(
    y: npt.NDArray[np.float64], rate: int, n_frames: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Per frame (centred every ``pitch.HOP_S``): spectral flatness (geometric over arithmetic mean of
    the power spectrum, DC left out: ~0.56 for white noise, well under 0.3 for speech sounds), the
    share of the power below ``_LOW_BAND_HZ``, and the kurtosis of the samples (unwindowed, about
    their mean: 3 for Gaussian noise of any colour, far more for a train of glottal pulses)."""
    hop = max(1, round(rate * pitch.HOP_S))
    win = _SPECTRUM_WINDOW
    padded = np.concatenate((np.zeros(win // 2), y, np.zeros(win)))
    frames = sliding_window_view(padded, win)[::hop]  # a view: frame i starts at i * hop
    window = np.hanning(win)
    low_bins = int(np.count_nonzero(np.fft.rfftfreq(win, 1.0 / rate) < _LOW_BAND_HZ))
    flatness = np.zeros(n_frames)
    low = np.zeros(n_frames)
    kurtosis = np.zeros(n_frames)
    for start in range(0, n_frames, _SPECTRUM_BLOCK):
        stop = min(n_frames, start + _SPECTRUM_BLOCK)
        raw = frames[start:stop]
        centred = raw - raw.mean(axis=1, keepdims=True)
        squares = centred * centred
        variance = squares.mean(axis=1)
        fourth = np.einsum("ij,ij->i", squares, squares) / win  # mean of centred**4, without a power call
        kurtosis[start:stop] = fourth / np.maximum(variance * variance, 1e-30)
        spectrum = np.fft.rfft(raw * window, axis=1)
        power = spectrum.real * spectrum.real + spectrum.imag * spectrum.imag + 1e-20
        total = power.sum(axis=1)
        low[start:stop] = power[:, :low_bins].sum(axis=1) / total
        upper = power[:, 1:]
        flatness[start:stop] = np.exp(np.log(upper).mean(axis=1)) / upper.mean(axis=1)
    return flatness, low, kurtosis


def _analyse(x: npt.NDArray[np.float64], sample_rate: int) -> _Frames:
    rate = min(sample_rate, _ANALYSIS_RATE)
    y = resample(x, sample_rate, rate) if rate != sample_rate else x
    track = pitch.track_pitch(y, rate)
    levels = pitch.frame_levels_db(y, rate)
    active = pitch.speech_activity(y, rate)
    n = min(levels.size, active.size, track.voiced.size)
    flatness, low, kurtosis = _spectral_shape(y, rate, n)
    voice_like = _voice_like(track.voiced[:n], track.aperiodicity[:n], kurtosis, active[:n])
    return _Frames(levels[:n], active[:n], track.voiced[:n], track.f0_hz[:n], flatness, low, voice_like)


# A low voice's creak: frames that are periodic (YIN's d' under this) or impulsive (kurtosis over this),
# at most ``_CREAK_GAP`` frames apart.
_CREAK_MAX_APERIODICITY = 0.3
_CREAK_MIN_KURTOSIS = 5.0
_CREAK_GAP = 2
_CREAK_MIN_FRAMES = 3  # of them in a run: a burst of noise starting or ending in a frame marks one or two


def _voice_like(
    voiced: npt.NDArray[np.bool_],
    aperiodicity: npt.NDArray[np.float64],
    kurtosis: npt.NDArray[np.float64],
    active: npt.NDArray[np.bool_],
) -> npt.NDArray[np.bool_]:
    """The voiced frames, and the runs of active unvoiced frames that are periodic or impulsive at most
    ``_CREAK_GAP`` frames apart (``_CREAK_MIN_FRAMES`` of them at least): a low voice's creak, which the
    unvoiced checks (``edges``, ``noise``, ``hiss``, ``rumble``) take as voice, not as noise.

    A voice read at its lowest pitch falls into creak at a phrase's end: glottal pulses 40-60 Hz apart
    or slower, at nearly the speech level, low-pitched. YIN integrates over one period of its lowest F0
    (20 ms at 50 Hz), so d' dips in one frame and not the next, or nowhere, and the tracker calls the
    stretch unvoiced: long, loud and low, as rumble is. But a pulse train is impulsive (the kurtosis of
    a frame's samples 5-20), and noise of any colour is Gaussian (3; a frame of brown noise over 5 in
    about 0.3 % of frames, never three in a row). See docs/qa.md."""
    marked = ((aperiodicity < _CREAK_MAX_APERIODICITY) | (kurtosis > _CREAK_MIN_KURTOSIS)) & active & ~voiced
    bridged = marked.copy()
    index = np.flatnonzero(marked)
    for a, b in itertools.pairwise(index):
        if b - a <= _CREAK_GAP + 1:
            bridged[a:b] = True
    for start, end in runs(bridged):
        if np.count_nonzero(marked[start:end]) < _CREAK_MIN_FRAMES:
            bridged[start:end] = False
    return voiced | bridged


def _fmt_s(seconds: float) -> str:
    return f"{seconds:.2f} s"


def unusable_audio(audio: npt.ArrayLike, sample_rate: int, policy: QaPolicy | None = None) -> QaResult | None:
    """With QA off, still: no samples, NaN or infinite ones, or nothing above ``silence_dbfs`` (what a
    broken checkpoint renders) is never audio to keep. A failing result naming why, or None when the
    audio is usable. One pass over the samples, no frame analysis."""
    policy = policy or QaPolicy()
    x = np.asarray(audio, dtype=np.float64).reshape(-1)
    duration = x.size / sample_rate if sample_rate > 0 else 0.0
    if x.size == 0:
        return QaResult(
            (Check("audio", 0.0, "> 0 samples", False, "the engine returned no audio"),), duration
        )
    bad = int(np.count_nonzero(~np.isfinite(x)))
    if bad:
        reason = f"{bad} of {x.size} samples are NaN or infinite"
        return QaResult((Check("audio", float(bad), "0 non-finite samples", False, reason),), duration)
    peak = float(np.max(np.abs(x)))
    peak_db = 20.0 * math.log10(peak) if peak > 0 else -math.inf
    if peak_db >= policy.silence_dbfs:
        return None
    silence = Check(
        "silence",
        0.0,
        f"a peak above {policy.silence_dbfs:g} dBFS",
        False,
        f"the audio is silent (peak {peak_db:.1f} dBFS)",
    )
    return QaResult((Check("audio", 0.0, "0 non-finite samples", True), silence), duration)


def check_audio(
    audio: npt.ArrayLike,
    sample_rate: int,
    text: str,
    *,
    policy: QaPolicy | None = None,
    rate: SpeakingRate | None = None,
    expected_f0_hz: float | None = None,
    expected_level_db: float | None = None,
    floor: VoiceFloor | None = None,
) -> QaResult:
    """Run the cheap checks (see the module docstring) on a chunk's mono waveform, as the engine returned
    it (before the render step trims silence), against its normalised ``text``; the edge and noise
    limits raised to the voice's own ``floor`` where it is known (:meth:`QaPolicy.for_voice`)."""
    policy = (policy or QaPolicy()).for_voice(floor, text)
    x = _mono(audio)
    duration = x.size / sample_rate if sample_rate > 0 else 0.0
    if x.size == 0:
        return QaResult(
            (Check("audio", 0.0, "> 0 samples", False, "the engine returned no audio"),), duration, 0.0
        )
    audio_check, x = _finite_check(x)
    peak = float(np.max(np.abs(x)))
    peak_db = 20.0 * math.log10(peak) if peak > 0 else -math.inf
    frames = _analyse(x, sample_rate)
    hop = pitch.HOP_S
    active = frames.active & (frames.levels_db > policy.silence_dbfs)
    speech_s = _speech_seconds(active, hop)
    silent = peak_db < policy.silence_dbfs or speech_s < policy.min_speech_s
    checks = [
        audio_check,
        _silence_check(silent, peak_db, speech_s, duration, policy),
        _clipping_check(x, policy),
    ]
    if silent:  # the rest would only repeat that nothing is said
        return QaResult(tuple(checks), duration, speech_s, None, None)

    checks.append(_duration_check(text, speech_s, rate, policy))
    level = _speech_level(frames.levels_db, active)
    checks.extend(_timing_checks(frames, active, level, hop, policy))
    if level is not None:
        checks.append(_ending_check(x, sample_rate, level, policy))
    if policy.max_repeat_s > 0 and not text_repeats(text):
        checks.append(_repeat_check(x, sample_rate, policy))
    voiced_f0 = frames.f0_hz[frames.voiced]
    voiced_s = voiced_f0.size * hop
    f0 = float(np.median(voiced_f0)) if voiced_s >= policy.min_voiced_s else None
    if expected_f0_hz is not None and expected_f0_hz > 0:
        checks.append(_pitch_check(f0, voiced_s, expected_f0_hz, policy))
    if expected_level_db is not None and level is not None:
        checks.append(_level_check(level, expected_level_db, policy))
    return QaResult(tuple(checks), duration, speech_s, f0, level)


def _mono(audio: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The waveform as one float64 channel (a channel axis of any side averaged away)."""
    x = np.asarray(audio)
    if x.ndim != 1:
        x = x.reshape(-1) if x.size in x.shape else np.mean(x, axis=int(np.argmin(x.shape)))
    return x.astype(np.float64, copy=False)


def _finite_check(x: npt.NDArray[np.float64]) -> tuple[Check, npt.NDArray[np.float64]]:
    """The "audio" check (no NaN or infinite sample), and the waveform with any such samples zeroed so that
    the other checks can still measure it."""
    bad = int(np.count_nonzero(~np.isfinite(x)))
    check = Check(
        "audio",
        float(bad),
        "0 non-finite samples",
        bad == 0,
        "" if bad == 0 else f"{bad} of {x.size} samples are NaN or infinite",
    )
    return check, (np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0) if bad else x)


def _silence_check(silent: bool, peak_db: float, speech_s: float, duration: float, policy: QaPolicy) -> Check:
    if not silent:
        reason = ""
    elif peak_db < policy.silence_dbfs:
        reason = f"the audio is silent (peak {peak_db:.1f} dBFS)"
    else:
        reason = f"only {_fmt_s(speech_s)} of speech in {_fmt_s(duration)} of audio"
    return Check(
        "silence",
        round(speech_s, 3),
        f">= {policy.min_speech_s} s of speech above {policy.silence_dbfs:g} dBFS",
        not silent,
        reason,
    )


def _clipping_check(x: npt.NDArray[np.float64], policy: QaPolicy) -> Check:
    clipped = float(np.count_nonzero(np.abs(x) >= policy.clip_level)) / x.size
    return Check(
        "clipping",
        round(clipped, 6),
        f"<= {policy.max_clipped_share:.2%} of samples at full scale",
        clipped <= policy.max_clipped_share,
        "" if clipped <= policy.max_clipped_share else f"{clipped:.2%} of the samples are clipped",
    )


def _level_check(level: float, expected_level_db: float, policy: QaPolicy) -> Check:
    deviation = level - expected_level_db
    ok = abs(deviation) <= policy.max_level_dev_db
    reason = (
        ""
        if ok
        else _off(
            "speech level",
            f"{level:.1f} dBFS",
            deviation,
            "dB",
            "the job's",
            f"{expected_level_db:.1f} dBFS",
            policy.max_level_dev_db,
        )
    )
    return Check(
        "level",
        round(deviation, 2),
        f"within {policy.max_level_dev_db:g} dB of {expected_level_db:.1f} dBFS",
        ok,
        reason,
    )


def _speech_seconds(active: npt.NDArray[np.bool_], hop: float, max_pause_s: float = 0.3) -> float:
    """As pitch.speech_seconds: first to last active frame, pauses capped at ``max_pause_s``."""
    if not active.any():
        return 0.0
    first = int(np.argmax(active))
    last = int(active.size - 1 - np.argmax(active[::-1]))
    excess = sum(max(0.0, (b - a) * hop - max_pause_s) for a, b in runs(~active[first : last + 1]))
    return max(0.0, (last - first + 1) * hop - excess)


def _duration_check(text: str, speech_s: float, rate: SpeakingRate | None, policy: QaPolicy) -> Check:
    if rate is None:
        chars = spoken_units(text, "chars")
        low_rate, high_rate = policy.plausible_chars_per_second
        shortest = chars / high_rate - policy.duration_slack_s
        longest = chars / low_rate + policy.duration_slack_s
        measured = chars / speech_s if speech_s > 0 else math.inf
        ok = shortest <= speech_s <= longest
        reason = (
            ""
            if ok
            else f"{_fmt_s(speech_s)} of speech for {chars} letters is {measured:.1f} letters/s, "
            f"outside plausible speech ({low_rate:g}-{high_rate:g})"
        )
        return Check("duration", round(speech_s, 3), f"{max(shortest, 0):.2f}-{longest:.2f} s", ok, reason)
    expected = rate.expected_seconds(text)
    shortest = expected * (1.0 - policy.max_short) - policy.duration_slack_s
    longest = expected * (1.0 + policy.max_long) + policy.duration_slack_s
    ratio = speech_s / expected if expected > 0 else math.inf
    ok = shortest <= speech_s <= longest
    if ok:
        reason = ""
    elif speech_s < shortest:
        reason = (
            f"{_fmt_s(speech_s)} of speech where {_fmt_s(expected)} was expected "
            f"({ratio:.0%}): words may be missing or cut off"
        )
    else:
        reason = (
            f"{_fmt_s(speech_s)} of speech where {_fmt_s(expected)} was expected "
            f"({ratio:.0%}): repeated words, babble or noise"
        )
    return Check("duration", round(ratio, 3), f"{max(shortest, 0):.2f}-{longest:.2f} s", ok, reason)


@dataclass(frozen=True)
class NoiseFigures:
    """The longest stretches (seconds) that the edge and noise checks measure in a rendering: unvoiced
    sound at either end (``edge_s``), and inside it unvoiced sound (``noise_s``), flat-spectrum unvoiced
    sound (``hiss_s``) and low-pitched unvoiced sound (``rumble_s``)."""

    edge_s: float = 0.0
    noise_s: float = 0.0
    hiss_s: float = 0.0
    rumble_s: float = 0.0

    @classmethod
    def worst(cls, figures: Iterable[NoiseFigures]) -> NoiseFigures:
        """The longest of each figure over ``figures``."""
        rows = list(figures)
        return cls(
            max((f.edge_s for f in rows), default=0.0),
            max((f.noise_s for f in rows), default=0.0),
            max((f.hiss_s for f in rows), default=0.0),
            max((f.rumble_s for f in rows), default=0.0),
        )

    def to_json(self) -> dict[str, float]:
        return {name: round(getattr(self, name), 3) for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class VoiceFloor:
    """What a voice's own clean rendering measures on the edge and noise checks: the worst of its
    calibration sentences (``prose``) and of its calibration headings and one-line sentences (``lines``).

    What is noise for one voice is the voice for another: a voice whose clean rendering holds longer
    unvoiced stretches than the policy allows (its creak is taken as voice already, see
    :func:`_voice_like`) has its chunks held to its own figures (:meth:`QaPolicy.for_voice`), never to
    less than the policy's."""

    prose: NoiseFigures
    lines: NoiseFigures

    def to_json(self) -> dict[str, object]:
        return {"prose": self.prose.to_json(), "lines": self.lines.to_json()}


def _noise_figures(
    frames: _Frames, active: npt.NDArray[np.bool_], level_db: float | None, hop: float, policy: QaPolicy
) -> tuple[NoiseFigures, str]:
    """The :class:`NoiseFigures` of one analysed rendering, and at which end its longer edge is."""
    sound = frames.levels_db > policy.silence_dbfs  # what the render step's trim keeps
    voiced = np.flatnonzero(frames.voice_like)
    if voiced.size:
        lead = float(np.count_nonzero(sound[: voiced[0]])) * hop
        trail = float(np.count_nonzero(sound[voiced[-1] + 1 :])) * hop
    else:
        lead = trail = float(np.count_nonzero(sound)) * hop
    heard = active
    if level_db is not None:  # see QaPolicy.sound_range_db
        heard = active | (sound & (frames.levels_db > level_db - policy.sound_range_db))
    unvoiced = heard & ~frames.voice_like
    figures = NoiseFigures(
        edge_s=max(lead, trail),
        noise_s=longest_run(unvoiced) * hop,
        hiss_s=longest_run(unvoiced & (frames.flatness > policy.hiss_flatness)) * hop,
        rumble_s=longest_run(unvoiced & (frames.low_share > policy.rumble_low_share)) * hop,
    )
    return figures, "start" if lead >= trail else "end"


def is_short_line(text: str, policy: QaPolicy) -> bool:
    """Whether a chunk's text is a heading or a one-line sentence (at most ``short_line_words`` words):
    held to the ``lines`` figures of its voice's floor."""
    return spoken_units(text, "words") <= policy.short_line_words


def noise_figures(audio: npt.ArrayLike, sample_rate: int, policy: QaPolicy | None = None) -> NoiseFigures:
    """The :class:`NoiseFigures` of a mono rendering (what :func:`check_audio` holds to its limits)."""
    policy = policy or QaPolicy()
    x = np.nan_to_num(np.asarray(audio, dtype=np.float64).reshape(-1))
    if x.size == 0:
        return NoiseFigures()
    frames = _analyse(x, sample_rate)
    active = frames.active & (frames.levels_db > policy.silence_dbfs)
    if not active.any():
        return NoiseFigures()
    return _noise_figures(frames, active, _speech_level(frames.levels_db, active), pitch.HOP_S, policy)[0]


def measure_floor(
    renderings: Iterable[tuple[npt.ArrayLike, str]], sample_rate: int, policy: QaPolicy | None = None
) -> VoiceFloor:
    """A voice's :class:`VoiceFloor` from clean renderings of known texts with its prompt: the worst
    figures of the prose and of the short lines (:func:`is_short_line`); a class with no rendering takes
    the other's."""
    policy = policy or QaPolicy()
    prose: list[NoiseFigures] = []
    lines: list[NoiseFigures] = []
    for audio, text in renderings:
        (lines if is_short_line(text, policy) else prose).append(noise_figures(audio, sample_rate, policy))
    worst_prose = NoiseFigures.worst(prose or lines)
    worst_lines = NoiseFigures.worst(lines or prose)
    return VoiceFloor(worst_prose, worst_lines)


def _timing_checks(
    frames: _Frames,
    active: npt.NDArray[np.bool_],
    level_db: float | None,
    hop: float,
    policy: QaPolicy,
) -> list[Check]:
    first = int(np.argmax(active))
    last = int(active.size - 1 - np.argmax(active[::-1]))
    pause = longest_run(~active[first : last + 1]) * hop
    figures, where = _noise_figures(frames, active, level_db, hop, policy)
    return [
        _at_most("pauses", pause, policy.max_pause_s, "", f"a silence of {_fmt_s(pause)} inside the speech"),
        _at_most(
            "edges",
            figures.edge_s,
            policy.max_edge_s,
            " at either end",
            f"{_fmt_s(figures.edge_s)} of sound without voice at the {where} of the chunk",
        ),
        _at_most(
            "noise",
            figures.noise_s,
            policy.max_noise_s,
            "",
            f"{_fmt_s(figures.noise_s)} of sound without voice (noise or a hiss) inside the chunk",
        ),
        _at_most(
            "hiss",
            figures.hiss_s,
            policy.max_hiss_s,
            " of flat-spectrum sound",
            f"{_fmt_s(figures.hiss_s)} of hiss (sound with a flat, noise-like spectrum) inside the chunk",
        ),
        _at_most(
            "rumble",
            figures.rumble_s,
            policy.max_rumble_s,
            f" of unvoiced sound below {_LOW_BAND_HZ:g} Hz",
            f"{_fmt_s(figures.rumble_s)} of rumble (unvoiced, low-pitched noise) inside the chunk",
        ),
    ]


def _at_most(name: str, seconds: float, limit: float, of_what: str, reason: str) -> Check:
    """A check that ``seconds`` of something stay within ``limit``; ``reason`` is said when they do not."""
    ok = seconds <= limit
    return Check(name, round(seconds, 3), f"<= {limit:g} s{of_what}", ok, "" if ok else reason)


def _ending_check(x: npt.NDArray[np.float64], sample_rate: int, level_db: float, policy: QaPolicy) -> Check:
    """The level of the audio's last ``end_window_s`` against the speech level (see QaPolicy)."""
    n = max(1, round(policy.end_window_s * sample_rate))
    tail = x[-n:]
    power = float(np.mean(tail * tail))
    end_db = (10.0 * math.log10(power) if power > 0 else -200.0) - level_db
    ok = end_db <= policy.max_end_level_db
    return Check(
        "ending",
        round(end_db, 2),
        f"last {policy.end_window_s * 1e3:g} ms <= {policy.max_end_level_db:g} dB re speech",
        ok,
        ""
        if ok
        else f"the audio stops mid-sound ({end_db:+.1f} dB re speech in its last "
        f"{policy.end_window_s * 1e3:g} ms): the ending is cut off",
    )


def _repeat_check(x: npt.NDArray[np.float64], sample_rate: int, policy: QaPolicy) -> Check:
    """A stretch that sounds like the one just before it (see QaPolicy and worker.qa.repeat)."""
    found = self_repeat(x, sample_rate, policy.min_repeat_coverage)
    ok = found.run_s <= policy.max_repeat_s
    return Check(
        "repeat",
        round(found.run_s, 3),
        f"<= {policy.max_repeat_s:g} s like the stretch before it ({policy.min_repeat_coverage:.0%} of it)",
        ok,
        ""
        if ok
        else f"{_fmt_s(found.run_s)} at {_fmt_s(found.at_s)} sounds like the {_fmt_s(found.lag_s)} "
        "just before it: a phrase said twice",
    )


def _speech_level(levels_db: npt.NDArray[np.float64], active: npt.NDArray[np.bool_]) -> float | None:
    """Power average (dBFS) of the active frames: the chunk's speech level."""
    if not active.any():
        return None
    power = np.mean(10.0 ** (levels_db[active] / 10.0))
    return float(10.0 * np.log10(power)) if power > 0 else None


def _pitch_check(f0: float | None, voiced_s: float, expected_f0_hz: float, policy: QaPolicy) -> Check:
    short = voiced_s < policy.short_voiced_s
    allowed = policy.max_pitch_shift_short_st if short else policy.max_pitch_shift_st
    limit = f"within {allowed:g} st of {expected_f0_hz:.0f} Hz" + (
        f" ({voiced_s:.2f} s of voiced speech)" if short else ""
    )
    if f0 is None:  # too little voiced speech to judge (a word or two): not a failure
        return Check("pitch", None, limit, True)
    shift = 12.0 * math.log2(f0 / expected_f0_hz)
    ok = abs(shift) <= allowed
    reason = (
        ""
        if ok
        else _off(
            "median pitch",
            f"{f0:.0f} Hz",
            shift,
            "semitones",
            "the voice's",
            f"{expected_f0_hz:.0f} Hz",
            allowed,
        )
    )
    return Check("pitch", round(shift, 2), limit, ok, reason)


def _off(what: str, measured: str, by: float, unit: str, whose: str, expected: str, allowed: float) -> str:
    """A whole sentence for a measure too far from what was expected, e.g. "median pitch 240 Hz is 4.1
    semitones above the voice's 190 Hz (at most 3 allowed)"."""
    side = "above" if by > 0 else "below"
    return (
        f"{what} {measured} is {abs(by):.1f} {unit} {side} {whose} {expected} (at most {allowed:g} allowed)"
    )
