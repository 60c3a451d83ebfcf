"""A fault-injecting engine for the QA benchmark and the tests (pure: no Flask, no Celery; kept out of the
production packages: no worker imports it).

:class:`FaultyEngine` wraps a real engine and, on the chunks a *plan* chooses, renders the failure modes
that neural TTS shows in long books: ``drop_sentence`` (a sentence not spoken), ``truncate`` (the
rendering stops early, mid-word where it falls), ``noise`` (a burst of white, pink or brown noise),
``double_phrase`` (a phrase spoken twice in a row, as a looping decoder does) and ``other_voice``
(another voice's speaker prompt, from ``other_prompts``).

A fault is injected on the first ``faulty_attempts`` renderings of a chunk only, so a re-render repairs
it, as the QA's re-render is meant to. Every choice is drawn from a generator seeded with the wrapper's
seed and a hash of the text, so the same chunk gets the same fault in every run and in every order;
:attr:`FaultyEngine.log` records every fault injected.

See docs/qa.md, "The proof benchmark" (each fault's sizes and how attempts are counted).
"""

from __future__ import annotations

import hashlib
import random
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from worker.engines.base import Engine, SpeakerPrompt, SynthesisRequest, Waveform

__all__ = [
    "FaultKind",
    "FaultPlan",
    "FaultyEngine",
    "Injected",
    "fixed_plan",
    "random_plan",
]


class FaultKind(StrEnum):
    DROP_SENTENCE = "drop_sentence"
    TRUNCATE = "truncate"
    NOISE = "noise"
    DOUBLE_PHRASE = "double_phrase"
    OTHER_VOICE = "other_voice"


# Attributes of the wrapped engine that the wrapper exposes as its own: its speaker encoder.
_FORWARDED = frozenset({"speaker_embedding", "embedding_of"})

# Which fault (if any) to inject into a request's rendering.
FaultPlan = Callable[[SynthesisRequest], FaultKind | None]


@dataclass(frozen=True)
class Injected:
    """One rendering of the wrapper: the request text, its attempt (0 = first), the fault injected (None:
    rendered clean) and what exactly was done."""

    text: str
    attempt: int
    kind: FaultKind | None
    detail: str = ""


def fixed_plan(faults: Mapping[str, FaultKind]) -> FaultPlan:
    """Inject ``faults[text]`` into the chunk with that text; leave the others clean."""
    table = dict(faults)
    return lambda request: table.get(request.text)


def random_plan(share: float, kinds: Iterable[FaultKind] = tuple(FaultKind), seed: int = 0) -> FaultPlan:
    """Inject a fault into about ``share`` of the chunks, its kind drawn uniformly from ``kinds``; chosen
    by a hash of the text and ``seed``, so the choice does not depend on the order of rendering."""
    choices = tuple(kinds)
    if not choices or not 0.0 <= share <= 1.0:
        raise ValueError("random_plan needs at least one kind and a share between 0 and 1")

    def plan(request: SynthesisRequest) -> FaultKind | None:
        rng = random.Random(_text_seed(request.text, seed, "plan"))
        return rng.choice(choices) if rng.random() < share else None

    return plan


class FaultyEngine:
    """An :class:`~worker.engines.base.Engine` that renders through ``inner`` and injects the faults of
    ``plan`` (see the module docstring). It does not report word times: a faulty rendering's words are
    not where the inner engine would say."""

    def __init__(
        self,
        inner: Engine,
        plan: FaultPlan,
        *,
        other_prompts: Sequence[SpeakerPrompt] = (),
        seed: int = 0,
        faulty_attempts: int = 1,
    ) -> None:
        self.inner = inner
        self.plan = plan
        self.other_prompts = tuple(other_prompts)
        self.seed = seed
        self.faulty_attempts = faulty_attempts
        self.name = inner.name
        self.sample_rate = inner.sample_rate
        self.max_chunk_chars = inner.max_chunk_chars
        self.prompt_shapes = inner.prompt_shapes
        self.log: list[Injected] = []
        self._attempts: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def version(self) -> str:
        return f"{self.inner.version}/faulty"

    def __getattr__(self, name: str) -> object:
        """The wrapped engine's speaker encoder (worker.qa.speaker), when it has one, so that the QA of a
        faulty rendering can embed it; nothing else is forwarded (word times would bypass the faults)."""
        if name in _FORWARDED:
            return getattr(self.inner, name)
        raise AttributeError(name)

    def encode_speaker(
        self, audio: Waveform, sample_rate: int, ref_text: str
    ) -> dict[str, npt.NDArray[np.generic]]:
        return self.inner.encode_speaker(audio, sample_rate, ref_text)

    def synthesize(self, batch: Sequence[SynthesisRequest]) -> list[Waveform]:
        out: list[Waveform] = []
        for request in batch:
            with self._lock:
                attempt = self._attempts.get(request.text, 0)
                self._attempts[request.text] = attempt + 1
            kind = self.plan(request) if attempt < self.faulty_attempts else None
            wave, detail = self._render(request, kind)
            with self._lock:
                self.log.append(Injected(request.text, attempt, kind, detail))
            out.append(wave)
        return out

    def attempts(self, text: str) -> int:
        """How many times the chunk with this text was rendered."""
        with self._lock:
            return self._attempts.get(text, 0)

    # -- the faults ------------------------------------------------------------------------------------

    def _render(self, request: SynthesisRequest, kind: FaultKind | None) -> tuple[Waveform, str]:
        rng = random.Random(_text_seed(request.text, self.seed, str(kind)))
        if kind is None:
            return self._one(request), ""
        if kind is FaultKind.DROP_SENTENCE:
            text, dropped = drop_sentence(request.text, rng)
            return self._one(replace(request, text=text)), f"dropped {dropped!r}"
        if kind is FaultKind.DOUBLE_PHRASE:
            text, phrase = double_phrase(request.text, rng)
            return self._one(replace(request, text=text)), f"doubled {phrase!r}"
        if kind is FaultKind.OTHER_VOICE:
            if not self.other_prompts:
                raise ValueError("an other_voice fault needs other_prompts")
            prompt = rng.choice(self.other_prompts)
            return self._one(replace(request, prompt=prompt)), "rendered with another prompt"
        wave = self._one(request)
        if kind is FaultKind.TRUNCATE:
            return truncate(wave, self.sample_rate, rng)
        return insert_noise(wave, self.sample_rate, rng)

    def _one(self, request: SynthesisRequest) -> Waveform:
        return self.inner.synthesize([request])[0]


def _text_seed(text: str, seed: int, salt: str) -> int:
    digest = hashlib.sha256(f"{seed}\x00{salt}\x00{text}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'\u201d\u2019)]*\s+")
_CLAUSE_END = re.compile(r"(?<=[,;:])\s+")


def drop_sentence(text: str, rng: random.Random) -> tuple[str, str]:
    """``text`` without one of its sentences (its longest clause, or its middle third of words, when it
    has one sentence); returns (new text, what was dropped)."""
    sentences = [s for s in _SENTENCE_END.split(text.strip()) if s]
    if len(sentences) >= 2:
        index = rng.randrange(len(sentences))
        return " ".join(sentences[:index] + sentences[index + 1 :]), sentences[index]
    clauses = [c for c in _CLAUSE_END.split(text.strip()) if c]
    if len(clauses) >= 2:
        index = max(range(len(clauses)), key=lambda i: len(clauses[i]))
        return " ".join(clauses[:index] + clauses[index + 1 :]), clauses[index]
    words = text.split()
    third = max(1, len(words) // 3)
    start = (len(words) - third) // 2
    return " ".join(words[:start] + words[start + third :]), " ".join(words[start : start + third])


def double_phrase(text: str, rng: random.Random) -> tuple[str, str]:
    """``text`` with a phrase of two to six words (within a sentence) said twice; (new text, phrase)."""
    words = text.split()
    if len(words) < 2:
        return f"{text} {text}", text
    length = min(len(words), rng.randint(2, 6))
    start = rng.randrange(len(words) - length + 1)
    phrase = [w.strip('.,;:!?"\u201c\u201d()') for w in words[start : start + length]]
    doubled = [*words[: start + length], *phrase, *words[start + length :]]
    # Keep the repeat inside the sentence: punctuation at the end of the phrase moves after the repeat.
    last = words[start + length - 1]
    tail = last[len(last.rstrip('.,;:!?"\u201d)')) :]
    if tail:
        doubled[start + length - 1] = last[: len(last) - len(tail)]
        doubled[start + 2 * length - 1] += tail
    return " ".join(doubled), " ".join(phrase)


def _speech_span(wave: npt.NDArray[np.float32], sample_rate: int) -> tuple[int, int]:
    """First and last sample above -40 dB of the peak (the speech, without its silent margins)."""
    if wave.size == 0:
        return 0, 0
    loud = np.flatnonzero(np.abs(wave) >= float(np.max(np.abs(wave))) * 0.01)
    return int(loud[0]), int(loud[-1]) + 1


def truncate(wave: Waveform, sample_rate: int, rng: random.Random) -> tuple[Waveform, str]:
    """The rendering cut short: the last 8-35 % of the speech (at least 0.4 s, at most 70 %) removed."""
    start, end = _speech_span(wave, sample_rate)
    speech = end - start
    cut = max(rng.uniform(0.08, 0.35) * speech, 0.4 * sample_rate)
    cut = min(cut, 0.7 * speech)
    keep = end - int(cut)
    out = wave[:keep].astype(np.float32, copy=True)
    return out, f"cut {int(cut) / sample_rate:.2f} s of {speech / sample_rate:.2f} s of speech"


def _coloured_noise(kind: str, n: int, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """White, pink (1/f) or brown (1/f^2) noise of unit RMS."""
    white = rng.standard_normal(n)
    if kind == "white" or n < 4:
        noise = white
    else:
        spectrum = np.fft.rfft(white)
        freqs = np.arange(spectrum.size, dtype=np.float64)
        freqs[0] = 1.0
        spectrum /= np.sqrt(freqs) if kind == "pink" else freqs
        spectrum[0] = 0.0
        noise = np.fft.irfft(spectrum, n)
    rms = float(np.sqrt(np.mean(noise**2))) or 1.0
    return noise / rms


def insert_noise(wave: Waveform, sample_rate: int, rng: random.Random) -> tuple[Waveform, str]:
    """A noise burst inserted into the rendering (see the module docstring)."""
    start, end = _speech_span(wave, sample_rate)
    x = wave.astype(np.float64)
    speech = x[start:end]
    rms = float(np.sqrt(np.mean(speech**2))) if speech.size else 0.1
    kind = rng.choice(("white", "pink", "brown"))
    seconds = rng.uniform(0.3, 1.2)
    level_db = rng.uniform(-20.0, 0.0)
    noise = _coloured_noise(kind, int(seconds * sample_rate), np.random.default_rng(rng.getrandbits(32)))
    noise *= rms * 10.0 ** (level_db / 20.0)
    at = rng.randint(start, max(start, end))
    out = np.concatenate((x[:at], noise, x[at:]))
    peak = float(np.max(np.abs(out)))
    if peak > 0.99:  # as an engine's output would be: within full scale
        out *= 0.99 / peak
    detail = f"{kind} noise, {seconds:.2f} s at {level_db:+.0f} dB re speech, at {at / sample_rate:.2f} s"
    return out.astype(np.float32), detail
