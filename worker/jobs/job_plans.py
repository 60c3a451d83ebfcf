"""A job's plan as the job's row and options describe it: the request it is planned from (a job's stored
options, or a preview's in the same shape) and what the plan records on the row. The planner
(worker.jobs.intake), the submit use case, previews and the API's checks share it."""

from __future__ import annotations

from typing import Any

from models import Job, Voice
from worker.audio import Pauses
from worker.cast_llm import LlmSettings
from worker.jobs import limits
from worker.jobs import state as jobs
from worker.jobs.plan import PlanRequest, ScriptPlan
from worker.runtime import Runtime
from worker.script import ReadOptions
from worker.script.cast import CastRequest
from worker.script.language_id import script_language_warnings


def apply_plan(job: Job, script_plan: ScriptPlan, title: str | None = None) -> None:
    """What a plan records on its job row (chunks are inserted beside it). What the script says about
    itself (EPUB metadata, front matter) fills the tags the request left out: author and language. The
    plan's warnings are kept, with one more when the script is written in another language than the job's
    (worker.script.language_id). ``title``: the job's title, when its planner takes it from the script."""
    metadata = dict(job.options.get("metadata", {}))
    if script_plan.info.author and "author" not in metadata:
        metadata["author"] = script_plan.info.author
    if "language" not in metadata:
        metadata["language"] = tag_language(script_plan.info.language or script_plan.language)
    warnings = [*script_plan.warnings, *script_language_warnings(script_plan.chapters, script_plan.language)]
    jobs.record_plan(
        job,
        title=title,
        chapters=[{"index": i, "title": c.title} for i, c in enumerate(script_plan.chapters)],
        chunks_total=len(script_plan.specs),
        estimated_seconds=round(script_plan.size.total_seconds, 1),
        options={
            **job.options,
            "metadata": metadata,
            "voice_ids": [str(v) for v in script_plan.voice_ids(job.voice_id)],
            "warnings": warnings,
        },
    )


def tag_language(language: str) -> str:
    """The primary subtag of a language code ("en-GB" -> "en"), as the output's language tag."""
    return language.replace("_", "-").split("-")[0].lower()[:3] or "en"


def plan_request(rt: Runtime, job: Job, voice: Voice, script: str | bytes) -> PlanRequest:
    """The plan request a job records (its options carry what the API was asked)."""
    return plan_request_of(rt, job.owner, job.script_format, job.engine, job.options, voice, script)


def plan_request_of(
    rt: Runtime,
    owner: str,
    script_format: str,
    engine: str,
    options: dict[str, Any],
    voice: Voice,
    script: str | bytes,
    *,
    attribute: bool = False,
) -> PlanRequest:
    """The plan request that stored options (a job's, or a preview's in the same shape) describe."""
    read = options.get("script_options", {})
    return PlanRequest(
        owner=owner,
        voice=voice,
        script=script,
        script_format=script_format,
        pauses=Pauses(**options.get("pauses", {})),
        max_chunk_chars=rt.engine(engine).max_chunk_chars,
        job_limits=limits.JobLimits.of(rt.settings),
        language=options.get("language"),
        read_options=ReadOptions(
            bool(read.get("front_matter", False)),
            bool(read.get("back_matter", False)),
            read.get("footnotes", "skip"),
            rt.settings.limits.max_script_chars,
        ),
        lexicons=tuple(options.get("lexicons", [])),
        engine=engine,
        split_chapters=_splits_by_name(options),
        attribute=attribute,
        cast=cast_request(options.get("cast")),
        llm=LlmSettings.of(rt.settings),
    )


def cast_request(stored: object) -> CastRequest | None:
    """The cast a job asked for, as its options record it (the API's ``cast`` field, validated)."""
    if not isinstance(stored, dict):
        return None
    return CastRequest(
        voices=dict(stored.get("voices") or {}),
        default=stored.get("default"),
        lines={int(index): name for index, name in (stored.get("lines") or {}).items()},
        llm=stored.get("llm") is True,
    )


def _splits_by_name(options: dict[str, Any]) -> bool:
    """Whether the job asked for chapter files by name (an ACX job splits whatever chapters there are)."""
    delivery = options.get("delivery")
    if not isinstance(delivery, dict):
        return False
    return delivery.get("split") == "chapter" and delivery.get("preset") != "acx"
