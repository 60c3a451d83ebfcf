"""Optional LLM attribution: the lines of dialogue the rules leave uncertain, labelled by a model behind
any OpenAI-compatible chat-completions endpoint (vLLM, Ollama, ...). No Flask or Celery imports.

Only lines whose attribution is ``unknown`` or whose confidence is below the threshold are sent (the least
sure first, at most ``max_lines``), in batches of ``batch_lines``, each with its paragraph and the one
before as context and the characters the rules found. An answer counts only when it names one of those
characters (by name or alias) or ``narrator``; anything else is ignored. A labelled line's attribution
becomes ``llm``, with the model's confidence (capped below an explicit tag's).

The model only labels: a line's text and spans (what the engine reads) are never touched, and
:func:`label` asserts it. Any failure (time out, an HTTP error, an answer that is not the JSON asked for)
leaves the rules' attribution of that batch and adds a warning; all requests of one call share a total
time budget, past which the remaining lines keep the rules' answer. Redirects are not followed.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from math import isfinite
from typing import TYPE_CHECKING, Any

from worker.config import Settings
from worker.script.attribution import Cast, Line, relabelled
from worker.script.cast import names

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

MAX_CONFIDENCE = 0.85  # a model's label never counts as surely as a tag naming the speaker
DEFAULT_CONFIDENCE = 0.7  # when the answer gives none
MAX_CONTEXT_CHARS = 1_200  # of each line's paragraph and the one before
MAX_ANSWER_BYTES = 256 * 1024

SYSTEM_PROMPT = (
    "You label who speaks each line of dialogue in a book. You are given the characters and, for each "
    "line, its id, the quotation and the text around it. Answer with JSON only: "
    '{"labels": [{"id": <line id>, "speaker": "<a character\'s name, or narrator>", '
    '"confidence": <0 to 1>}]}. Use only the names given, or narrator when no character says it.'
)


@dataclass(frozen=True)
class LlmSettings:
    """Where the model is and how much of a plan's time it may take."""

    url: str
    model: str
    key: str = ""
    timeout_seconds: float = 10.0
    budget_seconds: float = 20.0
    batch_lines: int = 20
    max_lines: int = 400
    threshold: float = 0.6

    @classmethod
    def of(cls, settings: Settings) -> LlmSettings | None:
        """The operator's LLM settings; None when ``TOME_CAST_LLM_URL`` is empty (the default: off)."""
        if not settings.cast_llm.url:
            return None
        return cls(
            settings.cast_llm.url,
            settings.cast_llm.model,
            settings.cast_llm.key,
            settings.cast_llm.timeout_seconds,
            settings.cast_llm.budget_seconds,
            settings.cast_llm.batch_lines,
            settings.cast_llm.max_lines,
            settings.cast_llm.threshold,
        )


def uncertain(cast: Cast, threshold: float, limit: int, settled: Collection[int] = ()) -> list[Line]:
    """The lines to ask about: unknown or below ``threshold`` and not ``settled`` (corrected by the job or
    the script), the least sure first, at most ``limit``."""
    found = [
        line
        for line in cast.lines
        if (line.attribution == "unknown" or line.confidence < threshold) and line.index not in settled
    ]
    found.sort(key=lambda line: (line.confidence, line.index))
    return sorted(found[:limit], key=lambda line: line.index)


def label(
    cast: Cast, chapters: Sequence[Sequence[str]], llm: LlmSettings, settled: Collection[int] = ()
) -> Cast:
    """``cast`` with its uncertain lines labelled by the model where it answered with a known name
    (``settled`` lines, whose speaker a correction gives, are not asked about)."""
    asked = uncertain(cast, llm.threshold, llm.max_lines, settled)
    if not asked or not cast.characters:
        return cast
    known = names(cast)
    labels: dict[int, tuple[str, float]] = {}
    warnings: list[str] = []
    failed: dict[str, int] = {}  # reason -> lines left to the rules (one warning per reason)
    deadline = time.monotonic() + llm.budget_seconds
    headers = {"Authorization": f"Bearer {llm.key}"} if llm.key else {}
    import httpx  # imported on first use: a process that never asks a model does not pay for it

    with httpx.Client(headers=headers, follow_redirects=False) as client:
        for start in range(0, len(asked), llm.batch_lines):
            batch = asked[start : start + llm.batch_lines]
            if time.monotonic() >= deadline:
                warnings.append(
                    f"the attribution model's time ran out: {len(asked) - start} uncertain line(s) keep "
                    "the rules' attribution"
                )
                break
            try:
                answer = _ask(client, llm, _prompt(cast, chapters, batch), deadline)
            except _Failed as exc:
                log.warning("cast LLM: %s", exc.detail)
                failed[str(exc)] = failed.get(str(exc), 0) + len(batch)
                continue
            ids = {line.index for line in batch}
            labels.update({i: found for i, found in _labels(answer, known).items() if i in ids})
    warnings[:0] = [
        f"the attribution model failed ({reason}): {count} line(s) keep the rules' attribution"
        for reason, count in failed.items()
    ]
    lines = [_relabel(line, labels.get(line.index)) for line in cast.lines]
    for before, after in zip(cast.lines, lines, strict=True):  # the model only labels
        assert (before.index, before.chapter, before.paragraph, before.spans, before.text) == (
            after.index,
            after.chapter,
            after.paragraph,
            after.spans,
            after.text,
        )
    return relabelled(cast, lines, warnings)


def _relabel(line: Line, found: tuple[str, float] | None) -> Line:
    if found is None:
        return line
    speaker, confidence = found
    return replace(line, speaker=speaker, attribution="llm", confidence=confidence, addressee=None)


class _Failed(Exception):
    """A request that gave no usable answer; the message is generic, ``detail`` goes to the log only."""

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message)
        self.detail = detail


def _prompt(cast: Cast, chapters: Sequence[Sequence[str]], batch: Sequence[Line]) -> str:
    characters = [{"name": m.name, "aliases": list(m.aliases)} for m in cast.characters]
    lines = []
    for line in batch:
        paragraphs = chapters[line.chapter] if line.chapter < len(chapters) else ()
        around = paragraphs[max(0, line.paragraph - 1) : line.paragraph + 1]
        context = "\n".join(around)[-MAX_CONTEXT_CHARS:]
        lines.append({"id": line.index, "quotation": line.text[:MAX_CONTEXT_CHARS], "context": context})
    return json.dumps({"characters": characters, "lines": lines}, ensure_ascii=False)


def _ask(client: httpx.Client, llm: LlmSettings, prompt: str, deadline: float) -> Any:
    """The JSON the model answered, read within ``deadline`` (a monotonic time) and MAX_ANSWER_BYTES."""
    import httpx

    body = {
        "model": llm.model,
        "temperature": 0,
        "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}],
    }
    timeout = httpx.Timeout(max(0.01, min(llm.timeout_seconds, deadline - time.monotonic())))
    try:
        with client.stream("POST", llm.url, json=body, timeout=timeout) as response:
            answer = bytearray()
            for part in response.iter_bytes():
                answer += part
                if len(answer) > MAX_ANSWER_BYTES:
                    raise _Failed("answer too long", f"over {MAX_ANSWER_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise _Failed("timed out", "the answer outlasted the time budget")
    except httpx.TimeoutException as exc:
        raise _Failed("timed out", repr(exc)) from exc
    except httpx.HTTPError as exc:
        raise _Failed("connection failed", repr(exc)) from exc
    if response.status_code != 200:
        raise _Failed(f"HTTP {response.status_code}", answer[:500].decode(errors="replace"))
    try:
        content = json.loads(answer)["choices"][0]["message"]["content"]
        return json.loads(_unfenced(content))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise _Failed(
            "an answer that is not the JSON asked for", answer[:500].decode(errors="replace")
        ) from exc


def _unfenced(content: str) -> str:
    """The JSON of an answer, without the Markdown code fence some models put around it."""
    text = content.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.rsplit("```", 1)[0]
    return text


def _labels(answer: Any, known: dict[str, str]) -> dict[int, tuple[str, float]]:
    """Line id -> (canonical speaker, confidence) for each label naming a known character or the narrator."""
    found: dict[int, tuple[str, float]] = {}
    items = answer.get("labels") if isinstance(answer, dict) else None
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, dict):
            continue
        index, speaker = item.get("id"), item.get("speaker")
        if not isinstance(index, int) or isinstance(index, bool) or not isinstance(speaker, str):
            continue
        canonical = known.get(speaker.strip().lower())
        if canonical is None:
            continue
        confidence = item.get("confidence", DEFAULT_CONFIDENCE)
        if (
            not isinstance(confidence, int | float)
            or isinstance(confidence, bool)
            or not isfinite(confidence)
        ):
            confidence = DEFAULT_CONFIDENCE
        found[index] = (canonical, round(min(max(float(confidence), 0.0), MAX_CONFIDENCE), 2))
    return found


__all__ = ["LlmSettings", "label", "uncertain"]
