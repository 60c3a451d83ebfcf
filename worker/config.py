"""All of Tome's settings, read from ``TOME_*`` environment variables in this one place.

With nothing set, Tome runs embedded: SQLite under ``./var``, Celery's filesystem broker (no server),
the catalog's default engine. Production sets ``TOME_DATABASE_URL`` (PostgreSQL) and ``TOME_BROKER_URL``
(Redis).

:class:`Settings` is a few frozen sections (``settings.limits.max_script_chars``); each leaf has one
*flat name*, its variable's name less ``TOME_`` in lower case: the section's prefix and the field's
name (``quotas.storage_bytes`` is ``quota_storage_bytes``, ``TOME_QUOTA_STORAGE_BYTES``) unless the field
names its own (``storage.backend`` is ``storage``). :data:`FLAT_SETTINGS` maps each flat name to its
path; :meth:`Settings.with_overrides` and :func:`load_settings` take flat names. Each engine's section
is declared by the engine (worker.engines.catalog) and lives under ``settings.engines``; the engines of
the modules ``TOME_ENGINE_MODULES`` names are loaded first, so that their sections' variables are read
too.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

from worker.engines.catalog import (
    EngineModuleError,
    EngineSettings,
    PluginSections,
    load_engine_modules,
    loaded_modules,
    parse_module_names,
    plugin_specs,
)
from worker.engines.spec import EngineSpec
from worker.storage.backend import Storage
from worker.storage.layout import Layout
from worker.storage.select import open_storage

__all__ = [
    "FLAT_SETTINGS",
    "ApiSettings",
    "AudiobookshelfSettings",
    "BrokerSettings",
    "CastLlmSettings",
    "ConfigError",
    "LimitSettings",
    "ObservabilitySettings",
    "QaSettings",
    "QuotaSettings",
    "SecuritySettings",
    "Settings",
    "SpeechSettings",
    "StorageSettings",
    "TaskSettings",
    "VoiceSettings",
    "WebhookSettings",
    "env_name",
    "load_modules",
    "load_settings",
]

MIN_SECRET_KEY_CHARS = 32
MIN_FILE_LINK_SECONDS, MAX_FILE_LINK_SECONDS = 10, 86_400


class ConfigError(ValueError):
    """A setting is missing, malformed or inconsistent with another one."""


def _flat(name: str) -> dict[str, str]:
    """A field's metadata naming its flat name (its variable is ``TOME_<NAME>``)."""
    return {"flat": name}


@dataclass(frozen=True)
class StorageSettings:
    """Where files and rows live, and how long they are kept."""

    data_dir: Path = Path("var")
    # Where files live (worker.storage): "local" keeps them in data_dir (embedded, one host); "s3" in an
    # S3-compatible bucket, data_dir being scratch (credentials: the usual AWS_* variables or profile).
    backend: str = field(default="local", metadata=_flat("storage"))
    s3_bucket: str = ""
    s3_prefix: str = ""  # keys go under this prefix in the bucket (several Tomes may share one bucket)
    s3_endpoint_url: str = ""  # empty: AWS; MinIO, Ceph, R2: their URL
    s3_region: str = ""
    s3_part_mib: int = 8  # multipart upload part size
    # Downloads from S3: 0 proxies the bytes through the API (Range kept); N > 0 answers a 302 to a URL
    # presigned for N seconds (the client then asks the bucket itself, Range included).
    s3_presign_seconds: int = 0
    # The endpoint presigned URLs name, when clients reach the bucket at another address than Tome's
    # processes do (compose's MinIO is http://minio:9000 inside, a published host name outside); empty:
    # s3_endpoint_url.
    s3_public_endpoint_url: str = ""
    database_url: str = ""  # empty: sqlite:///<data_dir>/tome.db
    output_ttl_seconds: int = 7 * 24 * 3600  # finished audio is removed this long after the job ends
    # Chunk audio outlives the book so that later jobs can reuse it (worker.jobs.reuse): removed this long
    # after its job ended (whatever the job's end), or sooner, oldest jobs first, while an owner's kept
    # chunks of ended jobs weigh more than chunk_keep_bytes.
    chunk_ttl_seconds: int = 30 * 24 * 3600
    chunk_keep_bytes: int = 2 * 1024**3
    # A preview planned by a worker (an EPUB, or a script over inline_plan_max_chars) can be read this long
    # after it was asked for (GET /v1/previews/{id}); then it is gone.
    preview_ttl_seconds: int = 3600


@dataclass(frozen=True)
class BrokerSettings:
    """The Celery broker and the queues tasks go to."""

    url: str = field(default="filesystem://", metadata=_flat("broker_url"))
    queue: str = "tome"
    # Empty: every task goes to ``queue``. Set: the engine-bound tasks (chunk rendering, voice prompt builds)
    # go to this queue instead, so that workers holding a GPU consume only GPU work (celery_app.task_routes).
    gpu_queue: str = ""
    # The short control tasks (planning, starting, the sweep) go to this queue, which a small dedicated
    # worker serves and no render worker consumes (`make run`, docker-compose: processes.split_workers),
    # so that they never wait behind render batches or stitches (celery_app.task_routes). Empty:
    # "<queue>.control".
    control_queue: str = ""
    # Stitches (a chapter's, the book's) go to this queue, which a stitch worker of its own consumes and no
    # render worker does, so that a long stitch never holds a control or render process. Empty:
    # "<queue>.stitch".
    stitch_queue: str = ""
    visibility_timeout: int = 3600

    @property
    def control_queue_name(self) -> str:
        return self.control_queue or f"{self.queue}.control"

    @property
    def stitch_queue_name(self) -> str:
        return self.stitch_queue or f"{self.queue}.stitch"


@dataclass(frozen=True)
class LimitSettings:
    """Limits on what callers may send, and the estimates they are held to."""

    max_script_chars: int = 2_000_000
    max_upload_bytes: int = 50 * 1024 * 1024
    max_reference_seconds: float = 120.0
    min_reference_seconds: float = 1.0
    max_chunks_per_job: int = 20_000
    # Scripts up to this long are planned while the client waits (errors answered at once); longer ones
    # by a worker, so that no request holds an API process for long (worker.jobs.intake).
    inline_plan_max_chars: int = 10_000
    max_job_chapters: int = 2_000
    max_job_audio_seconds: float = 86_400.0  # estimated output (speech + pauses) of one job
    max_pause_share: float = 0.5  # pauses may be at most this share of a job's estimated output
    speech_chars_per_second: float = 14.0  # the speaking rate output estimates assume (about 170 wpm)
    # Re-renders of one job's chunks in any hour (each stitches its chapter and the book again); 0: no limit.
    max_rerenders_per_job_hour: int = 30


@dataclass(frozen=True)
class QuotaSettings:
    """Per-owner quotas (worker.jobs.usage); 0: no limit."""

    storage_bytes: int = 20 * 1024**3
    unfinished_jobs: int = 20
    audio_seconds_per_day: float = 172_800.0  # estimated output submitted in any 24 hours
    # Worker seconds spent building an owner's voice prompts in any 24 hours; over it, uploads are refused.
    build_seconds_per_day: float = 3_600.0


@dataclass(frozen=True)
class SpeechSettings:
    """POST /v1/audio/speech (worker.jobs.speech): the longest input it speaks, how long the API waits
    for the first chunk (a voice's prompt build included) and then for each next one, and how many
    requests one owner may have rendering or waiting at once (more are answered 429 with Retry-After,
    so that one owner's loop cannot fill the render slots)."""

    max_chars: int = 4_096
    wait_seconds: float = 60.0
    per_owner: int = 2


@dataclass(frozen=True)
class TaskSettings:
    """How workers take, hold and retry work."""

    chunks_per_task: int = 8
    # Render tasks sent and not yet done, across all workers (worker.jobs.scheduler): enough to keep every
    # worker busy, few enough that a new owner's job is not queued behind a whole book. Raise it with
    # the number of rendering processes (about twice their total).
    render_tasks_in_flight: int = 4
    chunk_lease_seconds: int = 300
    stitch_lease_seconds: int = 1800
    max_chunk_attempts: int = 3
    sweep_interval_seconds: float = 30.0
    queued_grace_seconds: int = 60
    pending_requeue_seconds: int = 600
    # How long a new pool process may take to come up, warm-up included (loading a model onto a GPU takes
    # longer than Celery's 4 s default, which killed every replacement of a dead GPU pool process).
    worker_start_timeout: float = 300.0
    task_soft_time_limit: int = 600
    task_time_limit: int = 900
    mp3_bitrate_kbps: int = 128


@dataclass(frozen=True)
class VoiceSettings:
    """Voice prompt builds, the prompt cache and the reference analysers."""

    build_lease_seconds: int = 600
    # Voice prompt builds sent and not yet ended (worker.voices.builds): in all, and per owner. Keep the
    # total below the number of rendering processes, so that builds never take every process and another
    # owner's chunks still render; further builds wait in the database and are sent as one ends.
    builds_in_flight: int = 2
    builds_per_owner: int = 1
    cache_max_bytes: int = 256 * 1024 * 1024  # per worker process
    # Reference recordings are decoded and checked in helper processes of each API process (never on its
    # request loop): how many at once, and how long one may take before it is killed (webapi.voices).
    reference_analysers: int = field(default=2, metadata=_flat("reference_analysers"))
    reference_analysis_seconds: float = field(default=60.0, metadata=_flat("reference_analysis_seconds"))


@dataclass(frozen=True)
class WebhookSettings:
    """Webhook deliveries and the address rules every outbound URL follows."""

    max_attempts: int = 8
    allow_private: bool = False  # allow webhooks to loopback/private addresses (tests, LANs)
    # Ports a webhook URL may name besides its scheme's own, comma-separated; empty: 80 and 443 (any port
    # with allow_private).
    ports: str = ""

    @property
    def port_set(self) -> frozenset[int] | None:
        """``ports`` parsed (None: the default rule); validate() has checked it."""
        if not self.ports.strip():
            return None
        return frozenset(int(part) for part in self.ports.split(",") if part.strip())


@dataclass(frozen=True)
class CastLlmSettings:
    """Optional LLM attribution (worker/cast_llm.py, docs/scripts.md): any OpenAI-compatible
    chat-completions URL (vLLM, Ollama, ...); empty: off. Only lines the rules leave unknown or below the
    threshold are sent, in batches, within a total budget per plan; the model only labels, it never
    changes the text. The URL follows the webhook address rules; allow_private lifts the address rule
    for it alone (a model served on the operator's own network)."""

    url: str = ""
    model: str = ""
    key: str = ""  # sent as a bearer token when set
    allow_private: bool = False
    timeout_seconds: float = 10.0  # to connect, and for each read
    budget_seconds: float = 20.0  # all of one plan's requests together
    batch_lines: int = 20  # lines per request
    max_lines: int = 400  # lines sent per plan (the least sure first)
    threshold: float = 0.6  # lines attributed with less confidence than this are sent


@dataclass(frozen=True)
class AudiobookshelfSettings:
    """Delivery into an owner's Audiobookshelf (worker/audiobookshelf.py, docs/api.md): the server's URL
    follows the webhook address rules; allow_private lifts the address rule for it alone (a server on the
    operator's own network). Each read or write waits at most timeout_seconds, a whole upload at most
    upload_seconds; a 5xx or a timeout is tried again after retry_seconds, then twice as long each time,
    up to max_attempts attempts in all."""

    allow_private: bool = False
    timeout_seconds: float = 30.0
    upload_seconds: float = 1800.0
    retry_seconds: float = 5.0
    max_attempts: int = 5


@dataclass(frozen=True)
class SecuritySettings:
    """Tome's own secret and what it signs."""

    # Tome's own secret (TOME_SECRET_KEY, at least 32 characters): encrypts stored third-party tokens
    # (integrations) and signs short-lived file URLs. `make run` creates one under data_dir on first start;
    # empty elsewhere: what needs it answers 409 naming the setting.
    secret_key: str = ""
    # How long a signed file link (POST /v1/jobs/{id}/files/{name}/link) works: long enough to listen
    # through a chapter, short enough that a link copied out of a page soon stops working.
    file_link_seconds: int = 3600
    # Bearer token Prometheus sends to GET /metrics (admin API keys work too); empty: admin keys only.
    metrics_token: str = ""


@dataclass(frozen=True)
class ApiSettings:
    """Where `make run` serves the API, and how fast one key may call it."""

    host: str = "127.0.0.1"
    port: int = 8000
    rate_limit_per_minute: int = field(default=600, metadata=_flat("rate_limit_per_minute"))  # 0 disables


@dataclass(frozen=True)
class ObservabilitySettings:
    """Logs and metrics (docs/observability.md): "text" or "json" log lines; how often each process
    writes the metrics it gathered (cache counters, histograms) to the database (0: at once)."""

    log_format: str = "text"
    metrics_flush_seconds: float = 10.0


@dataclass(frozen=True)
class QaSettings:
    """The transcript check's recogniser (docs/qa.md): "pocketsphinx" (embedded, English, CPU) or
    "whisper" (worker/qa/whisper.py: a Whisper checkpoint in whisper_dir, on whisper_device; empty:
    cuda:0 when CUDA is available, else cpu)."""

    recogniser: str = "pocketsphinx"
    whisper_dir: str = ""
    whisper_device: str = ""


@dataclass(frozen=True)
class Settings:
    """Tome's settings, one frozen section each (see the module docstring for the flat names)."""

    storage: StorageSettings = field(default_factory=StorageSettings)
    broker: BrokerSettings = field(default_factory=BrokerSettings)
    limits: LimitSettings = field(default_factory=LimitSettings)
    quotas: QuotaSettings = field(default_factory=QuotaSettings, metadata={"prefix": "quota_"})
    speech: SpeechSettings = field(default_factory=SpeechSettings, metadata={"prefix": "speech_"})
    tasks: TaskSettings = field(default_factory=TaskSettings)
    voices: VoiceSettings = field(default_factory=VoiceSettings, metadata={"prefix": "voice_"})
    webhooks: WebhookSettings = field(default_factory=WebhookSettings, metadata={"prefix": "webhook_"})
    cast_llm: CastLlmSettings = field(default_factory=CastLlmSettings, metadata={"prefix": "cast_llm_"})
    audiobookshelf: AudiobookshelfSettings = field(
        default_factory=AudiobookshelfSettings, metadata={"prefix": "audiobookshelf_"}
    )
    security: SecuritySettings = field(default_factory=SecuritySettings)
    api: ApiSettings = field(default_factory=ApiSettings, metadata={"prefix": "api_"})
    observability: ObservabilitySettings = field(default_factory=ObservabilitySettings)
    qa: QaSettings = field(default_factory=QaSettings, metadata={"prefix": "qa_"})
    engines: EngineSettings = field(default_factory=EngineSettings)

    @property
    def layout(self) -> Layout:
        """Where every file lives under ``storage.data_dir``."""
        return Layout.under(self.storage.data_dir)

    def open_storage(self) -> Storage:
        """The storage backend ``storage.backend`` names (no request is made: see ``Storage.ping``)."""
        s = self.storage
        return open_storage(
            s.backend,
            self.layout,
            bucket=s.s3_bucket,
            prefix=s.s3_prefix,
            endpoint_url=s.s3_endpoint_url,
            region=s.s3_region,
            part_bytes=s.s3_part_mib * 1024 * 1024,
            public_endpoint_url=s.s3_public_endpoint_url,
        )

    @property
    def sqlalchemy_url(self) -> str:
        return self.storage.database_url or f"sqlite:///{self.layout.database}"

    @property
    def broker_folder(self) -> Path:
        return self.layout.broker

    def with_overrides(self, **flat: Any) -> Settings:
        """A copy with some settings replaced, named by their flat names (``max_chunks_per_job=3``);
        TypeError on a name that is no setting. ``engine_modules`` is loaded into this process first (see
        :func:`load_modules`), so that its engines' settings can be named too. Not validated:
        :func:`load_settings` validates."""
        if "engine_modules" in flat:
            flat = {**flat, "engine_modules": load_modules(flat["engine_modules"])}
        settings = self
        for name, value in flat.items():
            path = FLAT_SETTINGS.get(name)
            if path is None:
                raise TypeError(
                    f"unknown setting {name!r} (no TOME_{name.upper()}; an engine's own settings need "
                    "its module in TOME_ENGINE_MODULES)"
                )
            settings = _replace_path(settings, path, value)
        return settings

    def flat_value(self, name: str) -> Any:
        """The setting whose flat name is ``name`` (KeyError if none)."""
        value: Any = self
        for part in FLAT_SETTINGS[name]:
            value = _child(value, part)
        return value

    def validate(self) -> Settings:
        """Refuse settings that would lose or duplicate work (see README, "Reliability")."""
        self._validate_recogniser()
        self._validate_tasks()
        self._validate_voices()
        self._validate_secrets()
        self._validate_speech()
        self._validate_engines()
        self._validate_network()
        self._validate_queues()
        self._validate_storage()
        self._validate_cast_llm()
        self._validate_audiobookshelf()
        return self

    def _validate_tasks(self) -> None:
        """Time limits, leases and batch sizes that keep every task's work done once."""
        t = self.tasks
        if not t.task_soft_time_limit < t.task_time_limit:
            raise ConfigError("TOME_TASK_SOFT_TIME_LIMIT must be below TOME_TASK_TIME_LIMIT")
        if not t.task_time_limit < self.broker.visibility_timeout:
            raise ConfigError(
                "TOME_TASK_TIME_LIMIT must be below TOME_VISIBILITY_TIMEOUT, or the broker redelivers "
                "tasks that are still running"
            )
        if not t.worker_start_timeout > 0:
            raise ConfigError("TOME_WORKER_START_TIMEOUT must be a positive number of seconds")
        if min(t.chunks_per_task, t.max_chunk_attempts, t.render_tasks_in_flight) < 1:
            raise ConfigError(
                "TOME_CHUNKS_PER_TASK, TOME_MAX_CHUNK_ATTEMPTS and TOME_RENDER_TASKS_IN_FLIGHT "
                "must be at least 1"
            )

    def _validate_voices(self) -> None:
        """Voice builds in flight and the reference analysers."""
        v = self.voices
        if not 1 <= v.builds_per_owner <= v.builds_in_flight:
            raise ConfigError(
                "TOME_VOICE_BUILDS_PER_OWNER must be at least 1 and at most TOME_VOICE_BUILDS_IN_FLIGHT"
            )
        if v.reference_analysers < 1 or not v.reference_analysis_seconds > 0:
            raise ConfigError("TOME_REFERENCE_ANALYSERS and TOME_REFERENCE_ANALYSIS_SECONDS must be positive")

    def _validate_secrets(self) -> None:
        """The secret key's length and the signed file links' lifetime."""
        s = self.security
        if s.secret_key and len(s.secret_key) < MIN_SECRET_KEY_CHARS:
            raise ConfigError(
                f"TOME_SECRET_KEY must be at least {MIN_SECRET_KEY_CHARS} characters "
                "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')"
            )
        if not MIN_FILE_LINK_SECONDS <= s.file_link_seconds <= MAX_FILE_LINK_SECONDS:
            raise ConfigError(
                f"TOME_FILE_LINK_SECONDS must be {MIN_FILE_LINK_SECONDS} to {MAX_FILE_LINK_SECONDS} (a day)"
            )

    def _validate_speech(self) -> None:
        """The speech endpoint's limits and the output estimates' speaking rate."""
        s = self.speech
        if min(s.max_chars, s.per_owner) < 1 or not s.wait_seconds > 0:
            raise ConfigError(
                "TOME_SPEECH_MAX_CHARS, TOME_SPEECH_PER_OWNER and TOME_SPEECH_WAIT_SECONDS must be positive"
            )
        if not (self.limits.speech_chars_per_second > 0 and 0 < self.limits.max_pause_share <= 1):
            raise ConfigError("TOME_SPEECH_CHARS_PER_SECOND must be positive, TOME_MAX_PAUSE_SHARE in (0, 1]")

    def _validate_engines(self) -> None:
        """Each engine's section (its own rules), then the quotas' numbers that must not be negative."""
        try:
            self.engines.validate()
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        if self.limits.max_rerenders_per_job_hour < 0:
            raise ConfigError("TOME_MAX_RERENDERS_PER_JOB_HOUR must not be negative")
        if self.quotas.build_seconds_per_day < 0:
            raise ConfigError("TOME_QUOTA_BUILD_SECONDS_PER_DAY must not be negative")

    def _validate_network(self) -> None:
        """Webhook ports, log format, metrics flushing and the API's port."""
        ports_text = self.webhooks.ports
        try:
            ports = self.webhooks.port_set
        except ValueError as exc:
            raise ConfigError(f"TOME_WEBHOOK_PORTS={ports_text!r}: comma-separated port numbers") from exc
        if ports is not None and not all(0 < port < 65536 for port in ports):
            raise ConfigError(f"TOME_WEBHOOK_PORTS={ports_text!r}: ports are 1-65535")
        if self.observability.log_format not in ("text", "json"):
            raise ConfigError(f"TOME_LOG_FORMAT={self.observability.log_format!r}: text or json")
        if not 0 <= self.observability.metrics_flush_seconds <= 3600:
            raise ConfigError("TOME_METRICS_FLUSH_SECONDS must be between 0 and 3600")
        if not 0 < self.api.port < 65536:
            raise ConfigError("TOME_API_PORT must be a TCP port (1-65535)")

    def _validate_audiobookshelf(self) -> None:
        """Delivery into Audiobookshelf: time limits and attempts."""
        a = self.audiobookshelf
        if not (
            a.timeout_seconds > 0
            and a.upload_seconds > 0
            and a.retry_seconds >= 0
            and 1 <= a.max_attempts <= 20
        ):
            raise ConfigError(
                "TOME_AUDIOBOOKSHELF_TIMEOUT_SECONDS and TOME_AUDIOBOOKSHELF_UPLOAD_SECONDS must be "
                "positive, TOME_AUDIOBOOKSHELF_RETRY_SECONDS not negative, "
                "TOME_AUDIOBOOKSHELF_MAX_ATTEMPTS 1-20"
            )

    def _validate_cast_llm(self) -> None:
        c = self.cast_llm
        if not (c.timeout_seconds > 0 and c.budget_seconds > 0):
            raise ConfigError(
                "TOME_CAST_LLM_TIMEOUT_SECONDS and TOME_CAST_LLM_BUDGET_SECONDS must be positive"
            )
        if not (1 <= c.batch_lines <= 200 and 0 <= c.max_lines <= 10_000):
            raise ConfigError("TOME_CAST_LLM_BATCH_LINES must be 1-200, TOME_CAST_LLM_MAX_LINES 0-10000")
        if not 0 <= c.threshold <= 1:
            raise ConfigError("TOME_CAST_LLM_THRESHOLD must be between 0 and 1")
        if not c.url:
            return
        if not c.model:
            raise ConfigError("TOME_CAST_LLM_URL needs TOME_CAST_LLM_MODEL (the model the endpoint serves)")
        from worker.webhooks import WebhookRefused, check_url  # imports models: only when an LLM is set

        try:
            check_url(c.url, c.allow_private, allowed_ports=self.webhooks.port_set)
        except WebhookRefused as exc:
            message = str(exc).replace("webhook_url", "the URL")
            raise ConfigError(
                f"TOME_CAST_LLM_URL={c.url[:200]!r}: {message} (TOME_CAST_LLM_ALLOW_PRIVATE=true "
                "allows a model on a private or loopback address)"
            ) from exc

    def _validate_storage(self) -> None:
        s = self.storage
        if s.backend not in ("local", "s3"):
            raise ConfigError(f"TOME_STORAGE={s.backend!r}: local or s3")
        if s.backend == "s3" and not s.s3_bucket:
            raise ConfigError("TOME_STORAGE=s3 needs TOME_S3_BUCKET (the bucket's name)")
        if not 5 <= s.s3_part_mib <= 5120:
            raise ConfigError("TOME_S3_PART_MIB must be 5-5120 (S3's part size limits)")
        if not 0 <= s.s3_presign_seconds <= 7 * 24 * 3600:
            raise ConfigError("TOME_S3_PRESIGN_SECONDS must be 0 (proxy) to 604800 (S3's limit)")
        for name, url in (
            ("TOME_S3_ENDPOINT_URL", s.s3_endpoint_url),
            ("TOME_S3_PUBLIC_ENDPOINT_URL", s.s3_public_endpoint_url),
        ):
            if url and not _is_endpoint_url(url):
                raise ConfigError(
                    f"{name}={url[:200]!r}: an http:// or https:// URL of a host, e.g. http://minio:9000"
                )

    def _validate_queues(self) -> None:
        # Queue names end up in ``celery worker --queues a,b``, which splits on commas.
        b = self.broker
        named = (
            ("TOME_QUEUE", b.queue),
            ("TOME_GPU_QUEUE", b.gpu_queue),
            ("TOME_CONTROL_QUEUE", b.control_queue_name),
            ("TOME_STITCH_QUEUE", b.stitch_queue_name),
        )
        for name, value in named:
            if value != value.strip() or "," in value or any(c.isspace() for c in value):
                raise ConfigError(f"{name}={value!r}: a queue name has no commas or spaces")
        if not b.queue:
            raise ConfigError("TOME_QUEUE must not be empty")
        # An error, not "treat as unset": whoever sets TOME_GPU_QUEUE means to keep GPU workers on GPU work,
        # and a GPU worker started with ``--queues <TOME_GPU_QUEUE>`` would silently take every stitch and
        # webhook too. Leave TOME_GPU_QUEUE empty to run everything on one queue.
        if b.gpu_queue == b.queue:
            raise ConfigError(
                f"TOME_GPU_QUEUE={b.gpu_queue!r} is the same queue as TOME_QUEUE: GPU workers would also "
                "take stitching and webhooks. Give it another name, or leave it empty for one queue"
            )
        if b.control_queue_name in (b.queue, b.gpu_queue):
            raise ConfigError(
                f"TOME_CONTROL_QUEUE={b.control_queue!r}: a queue of its own (not TOME_QUEUE or "
                "TOME_GPU_QUEUE), so that a worker serving only it never takes render work"
            )
        if b.stitch_queue_name in (b.queue, b.gpu_queue, b.control_queue_name):
            raise ConfigError(
                f"TOME_STITCH_QUEUE={b.stitch_queue!r}: a queue of its own (not TOME_QUEUE, "
                "TOME_GPU_QUEUE or TOME_CONTROL_QUEUE), so that stitches never hold the control worker"
            )

    def _validate_recogniser(self) -> None:
        q = self.qa
        if q.recogniser not in RECOGNISERS:
            raise ConfigError(f"TOME_QA_RECOGNISER={q.recogniser!r}: use one of {', '.join(RECOGNISERS)}")
        if q.whisper_device:
            from worker.engines.base import is_device

            if not is_device(q.whisper_device):
                raise ConfigError(f"TOME_QA_WHISPER_DEVICE={q.whisper_device!r}: use cpu, cuda or cuda:N")
        if q.recogniser == "whisper":
            if not q.whisper_dir:
                raise ConfigError("TOME_QA_RECOGNISER=whisper needs TOME_QA_WHISPER_DIR (a local checkpoint)")
            from worker.qa.whisper import RecogniserError, check_model_dir  # numpy-only; only when chosen

            try:
                check_model_dir(Path(q.whisper_dir))
            except RecogniserError as exc:
                raise ConfigError(f"TOME_QA_WHISPER_DIR: {exc}") from exc


def _flat_paths(
    section: Any, prefix: str = "", path: tuple[str, ...] = ()
) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(flat name, path) of every leaf under ``section`` (a dataclass instance); the sections of loaded
    engines are under their keys."""
    for f in fields(section):
        value = getattr(section, f.name)
        if isinstance(value, PluginSections):
            for spec in plugin_specs():
                if spec.key:
                    yield from _flat_paths(value.get(spec.key), f"{spec.key}_", (*path, f.name, spec.key))
        elif is_dataclass(value):
            yield from _flat_paths(value, f.metadata.get("prefix", ""), (*path, f.name))
        else:
            yield f.metadata.get("flat", prefix + f.name), (*path, f.name)


def _flat_settings() -> dict[str, tuple[str, ...]]:
    table: dict[str, tuple[str, ...]] = {}
    for name, path in _flat_paths(Settings()):
        if name in table:
            raise RuntimeError(f"two settings are named {name!r}: {table[name]} and {path}")
        table[name] = path
    return table


def _child(section: Any, name: str) -> Any:
    return section.get(name) if isinstance(section, PluginSections) else getattr(section, name)


def _replace_path(section: Any, path: tuple[str, ...], value: Any) -> Any:
    head, *rest = path
    inner = _replace_path(_child(section, head), tuple(rest), value) if rest else value
    if isinstance(section, PluginSections):
        return section.with_section(head, inner)
    return replace(section, **{head: inner})


class _FlatTable(Mapping[str, tuple[str, ...]]):
    """Every setting's flat name and its path, the loaded engines' sections included: built again when a
    module of engines has been loaded since."""

    def __init__(self) -> None:
        self._modules: tuple[str, ...] | None = None
        self._table: dict[str, tuple[str, ...]] = {}

    def _current(self) -> dict[str, tuple[str, ...]]:
        modules = loaded_modules()
        if modules != self._modules:
            self._table, self._modules = _flat_settings(), modules
        return self._table

    def __getitem__(self, name: str) -> tuple[str, ...]:
        return self._current()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._current()))

    def __len__(self) -> int:
        return len(self._current())


# Every setting's flat name (its variable's, less TOME_, in lower case) and its path in Settings.
FLAT_SETTINGS: Mapping[str, tuple[str, ...]] = _FlatTable()


def _section_names(spec: EngineSpec[Any], accepted: tuple[EngineSpec[Any], ...]) -> None:
    """ValueError when a variable of ``spec``'s section is another setting's already, or one of the
    ``accepted`` specs' (loaded with it)."""
    taken = set(FLAT_SETTINGS).union(*(_section_variables(other) for other in accepted))
    clash = sorted(_section_variables(spec) & taken)
    if clash:
        raise ValueError(f"{spec.name!r} would read {env_name(clash[0])}, which another setting has")


def _section_variables(spec: EngineSpec[Any]) -> set[str]:
    """The flat names of ``spec``'s section."""
    return {name for name, _ in _flat_paths(spec.settings(), f"{spec.key}_")} if spec.key else set()


def load_modules(raw: str) -> str:
    """Load the engines of the comma-separated modules ``raw`` (``TOME_ENGINE_MODULES``) into this process,
    all or none; the list as the settings hold it (blanks dropped). ConfigError naming the module and the
    problem."""
    if not isinstance(raw, str):
        raise ConfigError(f"TOME_ENGINE_MODULES must be a comma-separated text, not {type(raw).__name__}")
    try:
        names = parse_module_names(raw)
        load_engine_modules(names, check=_section_names)
    except EngineModuleError as exc:
        raise ConfigError(f"TOME_ENGINE_MODULES: {exc}") from exc
    return ",".join(names)


def env_name(flat: str) -> str:
    """The variable a setting is read from."""
    return f"TOME_{flat.upper()}"


RECOGNISERS = ("pocketsphinx", "whisper")


def _convert(raw: str, default: Any, name: str) -> Any:
    try:
        if isinstance(default, bool):
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if isinstance(default, Path):
            return Path(raw)
        return type(default)(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r} is not a valid {type(default).__name__}") from exc


def load_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Settings from the ``TOME_*`` variables (``environ`` defaults to ``os.environ``), then overrides
    named by their flat names (``data_dir=...``; TypeError on an unknown name), validated."""
    env = os.environ if environ is None else environ
    modules = overrides.get("engine_modules", env.get("TOME_ENGINE_MODULES"))
    if modules is not None:
        load_modules(modules)
    defaults = Settings()
    values: dict[str, Any] = {}
    for flat in FLAT_SETTINGS:
        name = env_name(flat)
        if name in env:
            values[flat] = _convert(env[name], defaults.flat_value(flat), name)
    return defaults.with_overrides(**{**values, **overrides}).validate()


def _is_endpoint_url(url: str) -> bool:
    """http(s)://host[:port][/path], nothing else (no credentials, query or fragment)."""
    try:
        parts = urllib.parse.urlsplit(url)
        port_ok = parts.port is None or 0 < parts.port < 65536
    except ValueError:
        return False
    return (
        parts.scheme in ("http", "https")
        and bool(parts.hostname)
        and port_ok
        and not (parts.username or parts.password or parts.query or parts.fragment)
        and not any(c.isspace() or ord(c) < 32 for c in url)
    )
