"""What one job may cost: its output estimated from its chunks before anything is rendered, and the
per-job limits a submission must stay within (no Flask or Celery imports).

The limits bound what a small request can make a worker write: a 2 KB script of 200 headings with 30 s
chapter pauses asks for over 6,000 s of mostly silent audio. The pause share refuses that shape (pauses are
a small part of any real book), the duration and chapter limits bound the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from worker.audio import Pauses
from worker.config import Settings
from worker.script import ChunkSpec


@dataclass(frozen=True)
class JobLimits:
    max_audio_seconds: float  # estimated speech + pauses
    max_chapters: int
    max_chunks: int
    max_pause_share: float  # pauses / estimated output
    chars_per_second: float  # speaking rate the estimate assumes

    @classmethod
    def of(cls, settings: Settings) -> JobLimits:
        return cls(
            max_audio_seconds=settings.limits.max_job_audio_seconds,
            max_chapters=settings.limits.max_job_chapters,
            max_chunks=settings.limits.max_chunks_per_job,
            max_pause_share=settings.limits.max_pause_share,
            chars_per_second=settings.limits.speech_chars_per_second,
        )


@dataclass(frozen=True)
class JobEstimate:
    speech_seconds: float
    pause_seconds: float
    chapters: int
    chunks: int

    @property
    def total_seconds(self) -> float:
        return self.speech_seconds + self.pause_seconds


class LimitExceeded(ValueError):
    """A job over a limit; ``setting`` names the variable that sets it."""

    def __init__(
        self, message: str, setting: str, field: str = "script", code: str = "limit_exceeded"
    ) -> None:
        super().__init__(message)
        self.message, self.setting, self.field, self.code = message, setting, field, code


def estimate(
    specs: Sequence[ChunkSpec], chapters: int, pauses: Pauses, chars_per_second: float
) -> JobEstimate:
    """The job's output length, from its text at ``chars_per_second`` and the pause after each chunk."""
    chars = sum(len(spec.text) for spec in specs)
    pause = sum(pauses.seconds(_pause(spec)) for spec in specs)
    return JobEstimate(chars / chars_per_second, pause, chapters, len(specs))


def _pause(spec: ChunkSpec) -> str | float:
    return spec.pause_after if spec.pause_seconds is None else spec.pause_seconds


def check_chapters(chapters: int, limits: JobLimits) -> None:
    """Raise :class:`LimitExceeded` if there are more chapters than the limit. Known as soon as the script
    is parsed: checked then too, so that a script of thousands of one-word headings is refused before
    its chunks are made."""
    if chapters > limits.max_chapters:
        raise LimitExceeded(
            f"script has {chapters} chapters; the limit is {limits.max_chapters}", "TOME_MAX_JOB_CHAPTERS"
        )


def check(job: JobEstimate, limits: JobLimits) -> None:
    """Raise :class:`LimitExceeded` naming the first limit ``job`` is over."""
    if job.chunks > limits.max_chunks:
        raise LimitExceeded(
            f"script makes {job.chunks} chunks; the limit is {limits.max_chunks}",
            "TOME_MAX_CHUNKS_PER_JOB",
            code="script_too_long",
        )
    check_chapters(job.chapters, limits)
    if job.total_seconds > limits.max_audio_seconds:
        raise LimitExceeded(
            f"the output would last about {job.total_seconds:.0f} s; the limit is "
            f"{limits.max_audio_seconds:.0f} s",
            "TOME_MAX_JOB_AUDIO_SECONDS",
        )
    if job.total_seconds > 0 and job.pause_seconds / job.total_seconds > limits.max_pause_share:
        raise LimitExceeded(
            f"pauses would be {100 * job.pause_seconds / job.total_seconds:.0f}% of the output "
            f"({job.pause_seconds:.0f} s of {job.total_seconds:.0f} s); the limit is "
            f"{100 * limits.max_pause_share:.0f}%: shorten the pauses or the number of chapters",
            "TOME_MAX_PAUSE_SHARE",
            field="pauses",
        )
