"""Checks of a voice's reference recording at enrollment, pure: numpy and the recogniser.

Two kinds, run in two places:

* :func:`check_reference`: cheap signal checks on the decoded samples, run by the API while the upload
  request waits. A hopeless recording is *refused* (:attr:`ReferenceReport.refusal`); a doubtful one is
  accepted with *warnings*. A recording that is not speech (noise, a steady tone, music) is refused as
  :data:`NOT_SPEECH`, which the API's ``force=true`` turns into a warning; one no engine can use
  (silent, badly clipped) is refused whatever the caller says.
* :func:`check_reference_transcript`: compares what the recogniser hears with the ``ref_text`` (a wrong
  transcript ruins in-context cloning). It costs CPU seconds, so the worker runs it during the prompt
  build, and it only warns: recognition of human speech is imperfect.

Every finding is a :class:`Finding` (``code``, plain-words ``message``, the ``measured`` value), stored
on the voice as JSON. The measures work on 20 ms frames; the thresholds are module constants, each with
its reason. See docs/qa.md, "Reference checks at enrollment".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from worker.qa.checks import spoken_units
from worker.qa.transcript import Recogniser, check_transcript
from worker.script.normalise import normalise

__all__ = [
    "CLIP_LEVEL",
    "MIN_TRANSCRIPT_LETTERS_PER_SECOND",
    "NOT_SPEECH",
    "Finding",
    "ReferenceReport",
    "active_speech_seconds",
    "check_reference",
    "check_reference_transcript",
    "without",
]

FRAME_S = 0.02
# The decoder's own silence threshold (worker.audio.decode.SILENCE_PEAK_DBFS): a frame whose RMS is below
# it is silent whatever the rest of the recording does.
SILENCE_DBFS = -60.0
# A frame is sound when it is within 30 dB of the speech level: the same range the transcript check
# uses for "sound the recogniser must explain" (worker.qa.transcript._SOUND_DB); the weak consonants
# and decays of speech are within it, room tone of a usable recording is below it.
SOUND_RANGE_DB = 30.0
# A level below any 16-bit recording's quantisation noise (-101 dBFS): where digital silence is put.
FLOOR_DBFS = -120.0
# The percentiles of the frame levels taken as the speech level and as the noise floor (see above).
SPEECH_PERCENTILE = 95.0
NOISE_PERCENTILE = 10.0
# Full scale: a sample at 0.999 of it or beyond is clipped (as worker.qa.checks.QaPolicy.clip_level).
CLIP_LEVEL = 0.999

# -- refusals (hopeless: no engine can clone from it) ---------------------------------------------------
# Less sound than this in the whole recording: half a second is one or two syllables, too little of a
# voice to clone (the decoder already refuses a recording shorter than a second, or silent at -60 dBFS).
MIN_SOUND_S = 0.5
# A tenth of the sound's samples flat at full scale: the peaks of nearly every pitch period are cut off
# and the voice's timbre is replaced by the distortion's harmonics (espeak speech driven 10x past full
# scale measures 15 %, 3x 1.7 %, 2x 0.3 %); the engine would clone the distortion.
MAX_CLIPPED_SHARE = 0.10
# -- not speech (refused as NOT_SPEECH unless the caller insists) ----------------------------------------
NOT_SPEECH = "reference_not_speech"
# Nothing rises 3 dB above the quietest frames: the recording is steady, which speech never is (stationary
# noise's 20 ms frame levels spread by about 1 dB, a tone's not at all; speech at 0 dB SNR already lifts
# its loud frames ~5 dB above the pauses). A noise-flat spectrum makes it hiss, any other a tone or hum.
NOISE_ONLY_SNR_DB = 3.0
NOISE_FLATNESS = 0.2  # white noise ~0.56, pink noise ~0.27; speech measures < 0.06, tones ~0
# A recording with dynamics whose sound frames put this share of their power (below 4 kHz) in a sixth of
# the bins, and that never pauses, is notes, not speech: synthetic chords, melodies and a band with drums
# measure 0.986-1.0 with no silent frames; espeak's speech 0.85-0.90 at 60-120 Hz, up to 0.976 at 400 Hz,
# but with 7-13 % of its frames silent between phrases; noisy speech 0.67-0.79 (see the module docstring).
MUSIC_TONALITY = 0.97
MUSIC_MAX_SILENCE = 0.03
TONALITY_BINS = 1 / 6
TONALITY_BAND_HZ = 4000.0  # the voice's fundamentals and formants, and where notes put most of their power

# -- warnings (usable, but worse clones) ----------------------------------------------------------------
# Speech should stand 20 dB above the background: below that, cloning reproduces the noise (a quiet
# room with a decent microphone gives 40 dB and more; ACX asks for 60 dB).
MIN_SNR_DB = 20.0
# 0.1 % of the sound's samples clipped: audible distortion (as QaPolicy.max_clipped_share).
WARN_CLIPPED_SHARE = 0.001
# More than half of the recording is silence: the encoder hears less speech than pauses; trimming the
# pauses gives it more voice for the same length.
MAX_SILENCE_RATIO = 0.5
# Speech at -40 dBFS and below (normal recordings put it at -30 to -12 dBFS RMS) was recorded far too
# quiet: normalising it raises the preamp's and quantisation noise with it.
QUIET_DBFS = -40.0
# A DC offset of 1 % of full scale (-40 dBFS) points at a faulty interface or preamp (a sound one stays
# well under 0.1 %); it is harmless once removed, so it only warns.
MAX_DC_OFFSET = 0.01
# A decay time (RT60) above 0.6 s: a living room measures 0.3-0.5 s, a treated booth under 0.3 s; beyond
# 0.6 s the room's echo is audible in the reference and a cloned voice reproduces it (espeak's dry speech
# measures ~0.1 s; the same speech in a 1 s room ~0.8 s).
MAX_RT60_S = 0.6
# A fall is timed from a frame within 12 dB of the speech level (and louder than the frames after it) to
# the first frame 12 dB lower (less when the background is nearer), with no louder frame in between; at
# least 5 falls are needed (fewer: not enough evidence, no estimate). Speech stops abruptly now and
# then, the room's decay never: the fastest falls (their 10th percentile) time the room.
DECAY_START_DB = 12.0
DECAY_DB = 12.0
DECAY_PERCENTILE = 10.0
MIN_DECAYS = 5
# Frames whose spectral flatness is measured (evenly spread over the recording): enough for a stable
# median, few enough to stay a millisecond of FFTs.
FLATNESS_FRAMES = 256

# -- the transcript check ---------------------------------------------------------------------------------
# Word error rate above which the reference's transcript is reported as wrong. The constrained recogniser
# hears ~99 % of clean espeak words (the right transcript of the test reference: 0 %, with noise at 8 dB
# SNR: 9 %; wrong ones: 61-250 %); real speech is misheard more often, but beyond a third of the words
# wrong the transcript (or the recording) is another text, not a misheard word or two.
MAX_REFERENCE_WER = 1 / 3
# ...and at least this many word errors: one misheard word in a two-word transcript is not evidence.
MIN_REFERENCE_ERRORS = 3
# Letters of the (normalised) transcript per second of the recording's speech (active_speech_seconds)
# below which the transcript leaves out most of what is said. The recogniser cannot tell: held to the
# transcript's words, it fits them to part of the speech. Right transcripts measured 8.4 (espeak at its
# slowest, 80 words a minute) to 49 (450 a minute), 11.5-18.8 on bench.voice_set's 12 voices, 8.7-15.2
# for slow speech padded and paused in noise at 10-30 dB SNR; "hello there" 0.5-3.9 on 2.6-22 s of
# speech. About half the slowest right transcript.
MIN_TRANSCRIPT_LETTERS_PER_SECOND = 4.0
# What the transcript rule counts as speech stands this far above the noise floor as well (a pause filled
# with room noise is no speech, however close the noise is to the speech level).
SPEECH_ABOVE_NOISE_DB = 6.0
TRANSCRIPT_CODES = frozenset({"transcript_mismatch", "transcript_too_short"})


@dataclass(frozen=True)
class Finding:
    """One problem of a reference: a refusal or a warning, in plain words, with what was measured."""

    code: str
    message: str
    measured: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ReferenceReport:
    """The cheap checks of a reference: what was measured, the refusal (None if usable) and warnings."""

    duration_s: float
    speech_dbfs: float
    noise_dbfs: float
    snr_db: float
    sound_s: float
    silence_ratio: float
    clipped_share: float
    dc_offset: float
    flatness: float
    rt60_s: float | None = None
    tonality: float = 0.0
    refusal: Finding | None = None
    warnings: tuple[Finding, ...] = field(default_factory=tuple)


def check_reference(samples: npt.ArrayLike, sample_rate: int) -> ReferenceReport:
    """Measure a decoded reference (mono, float in [-1, 1]) and judge it (see the module docstring)."""
    x = np.asarray(samples, dtype=np.float32).reshape(-1)
    if sample_rate <= 0:
        raise ValueError(f"the sample rate must be positive, got {sample_rate}")
    duration = x.size / sample_rate
    frames = _frames(x, sample_rate)
    n_frames, hop = map(int, frames.shape)
    if n_frames == 0:
        too_short = Finding("reference_unusable", "the recording is too short to measure", 0.0)
        return ReferenceReport(
            duration, FLOOR_DBFS, FLOOR_DBFS, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, refusal=too_short
        )
    dc = float(np.mean(x, dtype=np.float64))
    levels = _frame_levels(frames)
    speech, noise = _speech_and_noise(levels)
    snr = speech - noise
    sound = levels >= max(speech - SOUND_RANGE_DB, SILENCE_DBFS)
    n_sound = int(np.count_nonzero(sound))
    sound_s = n_sound * hop / sample_rate
    silence_ratio = 1.0 - n_sound / n_frames
    clipped_per_frame = np.count_nonzero(np.abs(frames) >= CLIP_LEVEL, axis=1)
    clipped = float(clipped_per_frame[sound].sum()) / (n_sound * hop) if n_sound else 0.0
    flatness, tonality = _spectral_shape(frames[np.flatnonzero(sound)] if n_sound else frames)
    rt60 = _rt60(levels, speech, noise)

    refusal = _refusal(sound_s, clipped, snr, flatness, tonality, silence_ratio)
    warnings = _warnings(speech, snr, silence_ratio, clipped, dc, rt60) if refusal is None else ()
    return ReferenceReport(
        duration_s=round(duration, 3),
        speech_dbfs=round(speech, 1),
        noise_dbfs=round(noise, 1),
        snr_db=round(snr, 1),
        sound_s=round(sound_s, 2),
        silence_ratio=round(silence_ratio, 3),
        clipped_share=round(clipped, 5),
        dc_offset=round(dc, 5),
        flatness=round(flatness, 3),
        rt60_s=None if rt60 is None else round(rt60, 2),
        tonality=round(tonality, 3),
        refusal=refusal,
        warnings=warnings,
    )


def _spectral_shape(frames: npt.NDArray[np.float32]) -> tuple[float, float]:
    """Median spectral flatness and tonality (see the module docstring) of up to :data:`FLATNESS_FRAMES`
    frames spread evenly over ``frames``."""
    if not len(frames):
        return 0.0, 0.0
    picked = frames[np.linspace(0, len(frames) - 1, min(len(frames), FLATNESS_FRAMES)).astype(np.intp)]
    picked = picked - picked.mean(axis=1, keepdims=True)
    spectrum = np.abs(np.fft.rfft(picked * np.hanning(picked.shape[1]).astype(np.float32), axis=1)) ** 2
    spectrum = spectrum[:, 1:] + 1e-20  # the DC bin is empty after removing the mean
    flat = np.exp(np.mean(np.log(spectrum), axis=1)) / np.mean(spectrum, axis=1)
    # Bins are 1 / FRAME_S = 50 Hz apart at any sample rate; the band below TONALITY_BAND_HZ holds the same
    # bins at every rate, so a recording measures the same at 8 and at 48 kHz.
    band = spectrum[:, : min(spectrum.shape[1], round(TONALITY_BAND_HZ * FRAME_S))]
    strongest = max(1, round(band.shape[1] * TONALITY_BINS))
    top = -np.partition(-band, strongest - 1, axis=1)[:, :strongest]
    tonal = top.sum(axis=1) / band.sum(axis=1)
    return float(np.median(flat)), float(np.median(tonal))


def _rt60(levels: npt.NDArray[np.float64], speech: float, noise: float) -> float | None:
    """RT60 (s) from the falls of the frame levels (see the module docstring); None without enough."""
    drop = min(DECAY_DB, speech - noise - 5.0)  # a fall must end above the background
    if drop < 10.0:
        return None
    times = []
    k = 0
    n = levels.size
    while k < n - 1:
        peak = levels[k]
        if peak < speech - DECAY_START_DB or levels[k + 1] >= peak:
            k += 1
            continue
        end = k + 1
        while end < n and peak - drop < levels[end] <= peak:
            end += 1
        if end < n and levels[end] <= peak - drop:
            times.append((end - k) * FRAME_S)
        k = end
    if len(times) < MIN_DECAYS:
        return None
    fastest = float(np.percentile(times, DECAY_PERCENTILE))
    return 60.0 * fastest / drop


def _refusal(
    sound_s: float, clipped: float, snr: float, flatness: float, tonality: float, silence: float
) -> Finding | None:
    if sound_s < MIN_SOUND_S:
        return Finding(
            "reference_unusable",
            f"the recording is almost silent: only {sound_s:.2f} s of it is sound (at least "
            f"{MIN_SOUND_S:g} s of speech is needed)",
            round(sound_s, 2),
        )
    if clipped >= MAX_CLIPPED_SHARE:
        return Finding(
            "reference_unusable",
            f"the recording is badly clipped: {clipped:.0%} of its samples are at full scale (record it "
            "again with the input gain lower)",
            round(clipped, 4),
        )
    keep = "; send force=true to keep it anyway"
    if snr < NOISE_ONLY_SNR_DB and flatness >= NOISE_FLATNESS:
        return Finding(
            NOT_SPEECH,
            f"the recording sounds like noise only (a hiss): nothing in it rises more than {snr:.1f} dB "
            f"above its background, and its spectrum is flat{keep}",
            round(snr, 1),
        )
    if snr < NOISE_ONLY_SNR_DB:
        return Finding(
            NOT_SPEECH,
            f"the recording sounds like a steady tone or hum, not speech: its level varies by {snr:.1f} dB "
            f"at most, and {tonality:.0%} of its sound is in a few pure frequencies{keep}",
            round(snr, 1),
        )
    if tonality >= MUSIC_TONALITY and silence < MUSIC_MAX_SILENCE:
        return Finding(
            NOT_SPEECH,
            f"the recording sounds like music, not speech: {tonality:.0%} of its sound is in a few pure "
            f"notes, and it never pauses as speech does between phrases{keep}",
            round(tonality, 3),
        )
    return None


def _warnings(
    speech: float, snr: float, silence: float, clipped: float, dc: float, rt60: float | None
) -> tuple[Finding, ...]:
    out = []
    if rt60 is not None and rt60 > MAX_RT60_S:
        out.append(
            Finding(
                "reverberant",
                f"the room echoes: its decay time is about {rt60:.1f} s (under {MAX_RT60_S:g} s is "
                "recommended): the cloned voice may reproduce the echo; record in a smaller, softer room",
                round(rt60, 2),
            )
        )
    if snr < MIN_SNR_DB:
        out.append(
            Finding(
                "noisy",
                f"the speech is only {snr:.1f} dB above the background noise (at least {MIN_SNR_DB:g} dB "
                "is recommended): the cloned voice may reproduce the noise",
                round(snr, 1),
            )
        )
    if clipped >= WARN_CLIPPED_SHARE:
        out.append(
            Finding(
                "clipped",
                f"{clipped:.2%} of the samples are clipped at full scale: the distortion is audible and "
                "may be cloned",
                round(clipped, 5),
            )
        )
    if silence > MAX_SILENCE_RATIO:
        out.append(
            Finding(
                "mostly_silence",
                f"{silence:.0%} of the recording is silence: trim the pauses so that it is mostly speech",
                round(silence, 3),
            )
        )
    if speech < QUIET_DBFS:
        out.append(
            Finding(
                "quiet",
                f"the speech is very quiet ({speech:.1f} dBFS; -30 to -12 dBFS is usual): record it with "
                "more input gain",
                round(speech, 1),
            )
        )
    if abs(dc) >= MAX_DC_OFFSET:
        out.append(
            Finding(
                "dc_offset",
                f"the recording has a DC offset of {dc:+.1%} of full scale: the recording chain may be "
                "faulty",
                round(dc, 4),
            )
        )
    return tuple(out)


# -- the transcript check ---------------------------------------------------------------------------------


def check_reference_transcript(
    recogniser: Recogniser, samples: npt.ArrayLike, sample_rate: int, ref_text: str
) -> tuple[Finding, ...]:
    """Recognise the reference against its transcript; a warning when they disagree (never a refusal).

    The recogniser is constrained to the transcript's words (see :mod:`worker.qa.transcript`): speech
    that says something else comes out as the transcript's words in the wrong places, missing or heard
    again and again, which the word error rate counts. A transcript far shorter than the speech fits
    part of it, so its letters are also held to the seconds of speech (``transcript_too_short``)."""
    result = check_transcript(recogniser, samples, sample_rate, ref_text)
    if result.scored_words == 0 or result.errors < MIN_REFERENCE_ERRORS or result.wer <= MAX_REFERENCE_WER:
        return _too_short(samples, sample_rate, ref_text)
    parts = [f"{result.wer:.0%} of the words differ ({result.errors} errors for {result.scored_words} words)"]
    if result.missing:
        parts.append(f"not heard: {_listed(result.missing)}")
    if heard_instead := [heard for _, heard in result.substituted] + list(result.extra):
        parts.append(f"heard instead or in addition: {_listed(heard_instead)}")
    message = (
        "the recording does not seem to say its ref_text: "
        + "; ".join(parts)
        + ". A wrong transcript spoils the cloned voice: check that ref_text is exactly what is said"
    )
    return (Finding("transcript_mismatch", message, round(result.wer, 3)),)


def _too_short(samples: npt.ArrayLike, sample_rate: int, ref_text: str) -> tuple[Finding, ...]:
    """``transcript_too_short`` when the transcript has too few letters for the recording's speech. Not
    judged for a transcript mostly in another script (Chinese characters run at other rates)."""
    text = normalise(ref_text, "en").text
    letters = spoken_units(text, "chars")
    if sum(1 for ch in text if ch.isascii() and ch.isalnum()) < letters / 2:
        return ()
    seconds = active_speech_seconds(samples, sample_rate)
    if seconds <= 0 or letters / seconds >= MIN_TRANSCRIPT_LETTERS_PER_SECOND:
        return ()
    rate = letters / seconds
    message = (
        f"the ref_text seems to leave out most of what is said: {letters} letters as spoken for "
        f"{seconds:.1f} s of speech ({rate:.1f} a second, where read speech runs about "
        f"{MIN_TRANSCRIPT_LETTERS_PER_SECOND * 2:g} and more). A transcript that leaves words out spoils "
        "the cloned voice: check that ref_text is exactly what is said"
    )
    return (Finding("transcript_too_short", message, round(rate, 2)),)


def active_speech_seconds(samples: npt.ArrayLike, sample_rate: int) -> float:
    """Seconds of the recording's frames that stand out from its noise: within :data:`SOUND_RANGE_DB` of
    the speech level, :data:`SPEECH_ABOVE_NOISE_DB` above the noise floor and above
    :data:`SILENCE_DBFS`. Unlike the *sound* of :func:`check_reference`, pauses and padding filled with
    room noise or a music bed are left out."""
    frames = _frames(np.asarray(samples, dtype=np.float32).reshape(-1), sample_rate)
    n_frames, hop = map(int, frames.shape)
    if n_frames == 0:
        return 0.0
    levels = _frame_levels(frames)
    speech, noise = _speech_and_noise(levels)
    floor = max(speech - SOUND_RANGE_DB, noise + SPEECH_ABOVE_NOISE_DB, SILENCE_DBFS)
    return int(np.count_nonzero(levels >= floor)) * hop / sample_rate


def _frames(x: npt.NDArray[np.float32], sample_rate: int) -> npt.NDArray[np.float32]:
    """``x`` as whole :data:`FRAME_S` frames, one a row (a view; the tail short of a frame left out)."""
    hop = max(1, round(sample_rate * FRAME_S))
    n_frames = x.size // hop
    return x[: n_frames * hop].reshape(n_frames, hop)


def _frame_levels(frames: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    """Each frame's level (dBFS) from its power about its own mean (its variance: mean(x^2) - mean(x)^2,
    without copying the samples): a DC offset does not count as level, and digital silence stays silent."""
    hop = frames.shape[1]
    sums = np.einsum("ij,ij->i", frames, frames).astype(np.float64)
    means = frames.mean(axis=1, dtype=np.float64)
    power = sums / hop - means * means
    levels: npt.NDArray[np.float64] = 10.0 * np.log10(np.maximum(power, 10.0 ** (FLOOR_DBFS / 10.0)))
    return levels


def _speech_and_noise(levels: npt.NDArray[np.float64]) -> tuple[float, float]:
    """The speech level and the noise floor (dBFS) of frame levels (see docs/qa.md, the measures)."""
    noise = float(np.percentile(levels, NOISE_PERCENTILE))
    audible = levels[levels >= SILENCE_DBFS]  # long silences must not drag the speech level down
    speech = float(np.percentile(audible if audible.size else levels, SPEECH_PERCENTILE))
    return speech, noise


def _listed(words: Sequence[str], limit: int = 12) -> str:
    return " ".join(words[:limit]) + (" ..." if len(words) > limit else "")


def without(warnings: Sequence[dict[str, Any]], codes: frozenset[str]) -> list[dict[str, Any]]:
    """``warnings`` (as stored: JSON objects) without those whose code is one of ``codes``."""
    return [dict(w) for w in warnings if w.get("code") not in codes]
