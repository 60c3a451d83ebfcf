"""Settings in sections: few top-level fields, all frozen, every ``TOME_*`` variable still read under its
old name, flat override names, and the engines' own settings declared by the engines (the built-in ones
and those of ``bench.engines``, which the tests load as a deployment loads its own)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from bench.engines import PACED
from worker.config import FLAT_SETTINGS, ConfigError, Settings, env_name, load_settings
from worker.engines.catalog import BUILT_IN, EngineSettings, engines
from worker.engines.registry import create_engine
from worker.engines.spec import NoSettings

ROOT = Path(__file__).resolve().parents[2]

# The flat Settings' fields before the sections (each is TOME_<NAME>), and the ones added since: every one
# is read. The paced engine's are the loaded bench.engines' (PACED_NAMES).
FLAT_NAMES = [
    "api_host",
    "api_port",
    "audiobookshelf_allow_private",
    "audiobookshelf_max_attempts",
    "audiobookshelf_retry_seconds",
    "audiobookshelf_timeout_seconds",
    "audiobookshelf_upload_seconds",
    "broker_url",
    "cast_llm_allow_private",
    "cast_llm_batch_lines",
    "cast_llm_budget_seconds",
    "cast_llm_key",
    "cast_llm_max_lines",
    "cast_llm_model",
    "cast_llm_threshold",
    "cast_llm_timeout_seconds",
    "cast_llm_url",
    "chunk_keep_bytes",
    "chunk_lease_seconds",
    "chunk_ttl_seconds",
    "chunks_per_task",
    "control_queue",
    "data_dir",
    "database_url",
    "engine",
    "engine_modules",
    "file_link_seconds",
    "fish_device",
    "fish_max_new_tokens",
    "fish_model_dir",
    "gpu_queue",
    "inline_plan_max_chars",
    "log_format",
    "max_chunk_attempts",
    "max_chunks_per_job",
    "max_job_audio_seconds",
    "max_job_chapters",
    "max_pause_share",
    "max_reference_seconds",
    "max_rerenders_per_job_hour",
    "max_script_chars",
    "max_upload_bytes",
    "metrics_flush_seconds",
    "metrics_token",
    "min_reference_seconds",
    "mp3_bitrate_kbps",
    "output_ttl_seconds",
    "pending_requeue_seconds",
    "preview_ttl_seconds",
    "qa_recogniser",
    "qa_whisper_device",
    "qa_whisper_dir",
    "queue",
    "queued_grace_seconds",
    "quota_audio_seconds_per_day",
    "quota_build_seconds_per_day",
    "quota_storage_bytes",
    "quota_unfinished_jobs",
    "qwen3_device",
    "qwen3_max_batch",
    "qwen3_max_new_tokens",
    "qwen3_model_dir",
    "qwen3_pull_chunks",
    "qwen3_runner",
    "rate_limit_per_minute",
    "reference_analysers",
    "reference_analysis_seconds",
    "render_tasks_in_flight",
    "s3_bucket",
    "s3_endpoint_url",
    "s3_part_mib",
    "s3_presign_seconds",
    "s3_prefix",
    "s3_public_endpoint_url",
    "s3_region",
    "secret_key",
    "speech_chars_per_second",
    "speech_max_chars",
    "speech_per_owner",
    "speech_wait_seconds",
    "stitch_lease_seconds",
    "stitch_queue",
    "storage",
    "sweep_interval_seconds",
    "task_soft_time_limit",
    "task_time_limit",
    "visibility_timeout",
    "voice_build_lease_seconds",
    "voice_builds_in_flight",
    "voice_builds_per_owner",
    "voice_cache_max_bytes",
    "webhook_allow_private",
    "webhook_max_attempts",
    "webhook_ports",
    "worker_start_timeout",
]

PACED_NAMES = [
    "paced_max_reference_seconds",
    "paced_seconds_per_build",
    "paced_seconds_per_chunk",
    "paced_warm_up_seconds",
]
# Read with a value other than the default in tests/unit/engines/test_catalog.py (loading another module
# here would change this process's catalog for the tests after it; the lists above hold as long as no test
# loads one in-process).
READ_ELSEWHERE = {"engine_modules"}

# A valid value other than the default for every text setting (a new one must be added here).
TEXT_VALUES = {
    "api_host": "0.0.0.0",
    "broker_url": "redis://broker:6379/0",
    "cast_llm_key": "k",
    "cast_llm_model": "m",
    "cast_llm_url": "http://127.0.0.1:9/v1",
    "control_queue": "ctl",
    "database_url": "postgresql+psycopg://tome@db/tome",
    "engine": "constant",
    "fish_device": "cpu",
    "fish_model_dir": "/models/fish",
    "gpu_queue": "gpu",
    "log_format": "json",
    "metrics_token": "t",
    "qa_whisper_device": "cpu",
    "qa_whisper_dir": "/models/whisper",
    "queue": "work",
    "qwen3_device": "cuda:1",
    "qwen3_model_dir": "/models/qwen3",
    "qwen3_runner": "reference",
    "s3_bucket": "b",
    "s3_endpoint_url": "http://minio:9000",
    "s3_prefix": "p",
    "s3_public_endpoint_url": "https://files.example.test",
    "s3_region": "eu-west-1",
    "secret_key": "k" * 40,
    "stitch_queue": "joins",
    "storage": "s3",
    "webhook_ports": "8080",
}
# What else a changed value needs to be valid.
COMPANIONS = {
    "storage": {"TOME_S3_BUCKET": "b"},
    "cast_llm_url": {"TOME_CAST_LLM_MODEL": "m", "TOME_CAST_LLM_ALLOW_PRIVATE": "true"},
}
# Settings with no other valid value here (a Whisper checkpoint is needed): read, and refused by name.
REFUSED = {"qa_recogniser": "nope"}
ENGINE_WORDS = re.compile(r"espeak|qwen|fish|paced|constant", re.IGNORECASE)


def _sections(value: object) -> list[object]:
    found = [value]
    for f in dataclasses.fields(value):  # type: ignore[arg-type]
        inner = getattr(value, f.name)
        if dataclasses.is_dataclass(inner):
            found += _sections(inner)
    return found


def _changed(default: Any, flat: str) -> Any:
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    if isinstance(default, float):
        return default / 2 if default else 0.5
    if isinstance(default, Path):
        return Path("/tmp/elsewhere")
    return TEXT_VALUES[flat]


def test_at_most_fifteen_top_level_fields_each_a_frozen_section() -> None:
    top = dataclasses.fields(Settings)
    assert len(top) <= 15
    settings = Settings()
    for f in top:
        assert dataclasses.is_dataclass(getattr(settings, f.name)), f.name
    for section in _sections(settings):
        params = type(section).__dataclass_params__  # type: ignore[attr-defined]
        assert params.frozen, type(section).__name__


def test_every_old_variable_maps_to_exactly_one_section_field() -> None:
    assert sorted(FLAT_SETTINGS) == sorted(FLAT_NAMES + PACED_NAMES)
    assert len(set(FLAT_SETTINGS.values())) == len(FLAT_SETTINGS)


@pytest.mark.parametrize("flat", sorted(set(FLAT_NAMES + PACED_NAMES) - READ_ELSEWHERE))
def test_every_variable_is_read_into_its_section(flat: str) -> None:
    default = Settings().flat_value(flat)
    if flat in REFUSED:
        with pytest.raises(ConfigError, match=env_name(flat)):
            load_settings({env_name(flat): REFUSED[flat]})
        return
    value = _changed(default, flat)
    raw = str(value).lower() if isinstance(value, bool) else str(value)
    settings = load_settings({env_name(flat): raw, **COMPANIONS.get(flat, {})})
    assert settings.flat_value(flat) == value != default
    section: Any = settings
    for part in FLAT_SETTINGS[flat]:
        section = section.get(part) if part == PACED.key else getattr(section, part)
    assert section == value
    # and the default's text reads back as the default
    assert load_settings({env_name(flat): str(default)}).flat_value(flat) == default


def test_the_variables_the_docs_name_are_settings() -> None:
    documented = set(re.findall(r"`(TOME_[A-Z0-9_]+)`", (ROOT / "docs/operations.md").read_text()))
    known = {env_name(flat) for flat in FLAT_SETTINGS}
    assert len(documented & known) >= 60, sorted(documented - known)
    sample = {
        "TOME_MAX_SCRIPT_CHARS": ("limits", "max_script_chars", 1234),
        "TOME_QUEUE": ("broker", "queue", "work"),
        "TOME_ENGINE": ("engines", "default", "espeak-paced"),
        "TOME_QUOTA_STORAGE_BYTES": ("quotas", "storage_bytes", 5),
        "TOME_VOICE_BUILDS_IN_FLIGHT": ("voices", "builds_in_flight", 3),
        "TOME_API_PORT": ("api", "port", 9000),
    }
    for name, (section, field, value) in sample.items():
        assert name in documented, name
        assert getattr(getattr(load_settings({name: str(value)}), section), field) == value


def test_engine_sections_live_under_engines() -> None:
    settings = load_settings(
        {"TOME_QWEN3_MAX_BATCH": "4", "TOME_FISH_DEVICE": "cpu", "TOME_PACED_SECONDS_PER_CHUNK": "0.5"}
    )
    assert settings.engines.qwen3.max_batch == 4
    assert settings.engines.fish.device == "cpu"
    assert settings.engines.section(PACED).seconds_per_chunk == 0.5
    assert settings.engines.plugins.get("paced").seconds_per_chunk == 0.5
    assert settings.engines.default == BUILT_IN[0].name == "espeak"
    for spec in engines():
        section = settings.engines.section(spec)
        assert isinstance(section, spec.settings)
        assert (spec.key == "") == isinstance(section, NoSettings)
    with pytest.raises(ConfigError, match="TOME_QWEN3_RUNNER='slow': use fast or reference"):
        load_settings({"TOME_QWEN3_RUNNER": "slow"})
    with pytest.raises(ConfigError, match="TOME_PACED_SECONDS_PER_BUILD must not be negative"):
        load_settings({"TOME_PACED_SECONDS_PER_BUILD": "-1"})


def test_an_engine_built_from_its_section() -> None:
    engine = create_engine("espeak-paced", load_settings({"TOME_PACED_WARM_UP_SECONDS": "2"}))
    assert getattr(engine, "warm_up_seconds", None) == 2.0


def test_flat_overrides() -> None:
    settings = load_settings({}, data_dir=Path("/tmp/t"), max_chunks_per_job=3, qwen3_runner="reference")
    assert settings.storage.data_dir == Path("/tmp/t")
    assert settings.limits.max_chunks_per_job == 3
    assert settings.engines.qwen3.runner == "reference"
    derived = settings.with_overrides(queue="other", storage="local")
    assert (derived.broker.queue, derived.limits.max_chunks_per_job) == ("other", 3)
    assert settings.broker.queue == "tome"  # a copy
    with pytest.raises(TypeError, match="unknown setting 'no_such_setting'"):
        load_settings({}, no_such_setting=1)
    with pytest.raises(TypeError, match="unknown setting 'limits'"):
        settings.with_overrides(limits=None)
    with pytest.raises(ConfigError, match="TOME_GPU_QUEUE"):
        load_settings({}, gpu_queue="tome")  # overrides are validated too


def test_no_engine_is_named_where_engines_are_offered() -> None:
    for path in ("worker/config.py", "worker/engines/registry.py", "worker/qa/checks.py"):
        text = (ROOT / path).read_text()
        assert not ENGINE_WORDS.search(text), (path, ENGINE_WORDS.findall(text))


def test_every_catalog_engine_has_its_section_or_none() -> None:
    keys = {f.name for f in dataclasses.fields(EngineSettings)} - {"default", "modules", "plugins"}
    assert keys == {spec.key for spec in BUILT_IN if spec.key}
    assert len({spec.name for spec in engines()}) == len(engines())
