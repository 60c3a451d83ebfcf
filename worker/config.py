"""All of Tome's settings, read from ``TOME_*`` environment variables in this one place.

With nothing set, Tome runs embedded: SQLite under ``./var``, Celery's filesystem broker (no server),
the espeak engine. Production sets ``TOME_DATABASE_URL`` (PostgreSQL) and ``TOME_BROKER_URL`` (Redis).
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from worker.storage.backend import Storage
from worker.storage.layout import Layout
from worker.storage.select import open_storage

MIN_SECRET_KEY_CHARS = 32
MIN_FILE_LINK_SECONDS, MAX_FILE_LINK_SECONDS = 10, 86_400


class ConfigError(ValueError):
    """A setting is missing, malformed or inconsistent with another one."""


@dataclass(frozen=True)
class Settings:
    data_dir: Path = Path("var")
    # Where files live (worker.storage): "local" keeps them in data_dir (embedded, one host); "s3" in an
    # S3-compatible bucket, data_dir being scratch (credentials: the usual AWS_* variables or profile).
    storage: str = "local"
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
    broker_url: str = "filesystem://"
    queue: str = "tome"
    # Empty: every task goes to ``queue``. Set: the engine-bound tasks (chunk rendering, voice prompt builds)
    # go to this queue instead, so that workers holding a GPU consume only GPU work (celery_app.task_routes).
    gpu_queue: str = ""
    # The short control tasks (planning, starting, the sweep) go to this queue, which every worker
    # consumes and a small dedicated worker serves too (`make run`, docker-compose), so that they never
    # wait behind render batches or stitches (celery_app.task_routes). Empty: "<queue>.control".
    control_queue: str = ""
    # Stitches (a chapter's, the book's) go to this queue, which the ordinary workers and a stitch worker
    # of its own consume, so that a long stitch never holds a control worker. Empty: "<queue>.stitch".
    stitch_queue: str = ""
    engine: str = "espeak"
    # Limits on what callers may send.
    max_script_chars: int = 2_000_000
    max_upload_bytes: int = 50 * 1024 * 1024
    max_reference_seconds: float = 120.0
    min_reference_seconds: float = 1.0
    # Reference recordings are decoded and checked in helper processes of each API process (never on its
    # request loop): how many at once, and how long one may take before it is killed (webapi.voices).
    reference_analysers: int = 2
    reference_analysis_seconds: float = 60.0
    max_chunks_per_job: int = 20_000
    # Scripts up to this long are planned while the client waits (errors answered at once); longer ones
    # by a worker, so that no request holds an API process for long (worker.jobs.intake).
    inline_plan_max_chars: int = 10_000
    # A preview planned by a worker (an EPUB, or a script over inline_plan_max_chars) can be read this long
    # after it was asked for (GET /v1/previews/{id}); then it is gone.
    preview_ttl_seconds: int = 3600
    max_job_chapters: int = 2_000
    max_job_audio_seconds: float = 86_400.0  # estimated output (speech + pauses) of one job
    max_pause_share: float = 0.5  # pauses may be at most this share of a job's estimated output
    speech_chars_per_second: float = 14.0  # the speaking rate output estimates assume (about 170 wpm)
    # Per-owner quotas (worker.jobs.usage); 0: no limit.
    quota_storage_bytes: int = 20 * 1024**3
    quota_unfinished_jobs: int = 20
    quota_audio_seconds_per_day: float = 172_800.0  # estimated output submitted in any 24 hours
    # Worker seconds spent building an owner's voice prompts in any 24 hours; over it, uploads are refused.
    quota_build_seconds_per_day: float = 3_600.0
    # Re-renders of one job's chunks in any hour (each stitches its chapter and the book again); 0: no limit.
    max_rerenders_per_job_hour: int = 30
    # POST /v1/audio/speech (worker.jobs.speech): the longest input it speaks, and how long the API waits
    # for the first chunk (a voice's prompt build included) and then for each next one before giving up.
    speech_max_chars: int = 4_096
    speech_wait_seconds: float = 60.0
    # Speech requests one owner may have rendering or waiting at once; more are answered 429 with
    # Retry-After (worker.jobs.speech.admit), so that one owner's loop cannot fill the render slots.
    speech_per_owner: int = 2
    # Worker behaviour.
    chunks_per_task: int = 8
    # Render tasks sent and not yet done, across all workers (worker.jobs.scheduler): enough to keep every
    # worker busy, few enough that a new owner's job is not queued behind a whole book. Raise it with
    # the number of rendering processes (about twice their total).
    render_tasks_in_flight: int = 4
    chunk_lease_seconds: int = 300
    stitch_lease_seconds: int = 1800
    voice_build_lease_seconds: int = 600
    # Voice prompt builds sent and not yet ended (worker.voices.builds): in all, and per owner. Keep the
    # total below the number of rendering processes, so that builds never take every process and another
    # owner's chunks still render; further builds wait in the database and are sent as one ends.
    voice_builds_in_flight: int = 2
    voice_builds_per_owner: int = 1
    max_chunk_attempts: int = 3
    sweep_interval_seconds: float = 30.0
    queued_grace_seconds: int = 60
    pending_requeue_seconds: int = 600
    # How long a new pool process may take to come up, warm-up included (loading a model onto a GPU takes
    # longer than Celery's 4 s default, which killed every replacement of a dead GPU pool process).
    worker_start_timeout: float = 300.0
    task_soft_time_limit: int = 600
    task_time_limit: int = 900
    visibility_timeout: int = 3600
    mp3_bitrate_kbps: int = 128
    voice_cache_max_bytes: int = 256 * 1024 * 1024  # per worker process
    output_ttl_seconds: int = 7 * 24 * 3600  # finished audio is removed this long after the job ends
    # Chunk audio outlives the book so that later jobs can reuse it (worker.jobs.reuse): removed this long
    # after its job ended (whatever the job's end), or sooner, oldest jobs first, while an owner's kept
    # chunks of ended jobs weigh more than chunk_keep_bytes.
    chunk_ttl_seconds: int = 30 * 24 * 3600
    chunk_keep_bytes: int = 2 * 1024**3
    webhook_max_attempts: int = 8
    webhook_allow_private: bool = False  # allow webhooks to loopback/private addresses (tests, LANs)
    # Ports a webhook URL may name besides its scheme's own, comma-separated; empty: 80 and 443 (any port
    # with webhook_allow_private).
    webhook_ports: str = ""
    # Optional LLM attribution (worker/cast_llm.py, docs/scripts.md): any OpenAI-compatible chat-completions
    # URL (vLLM, Ollama, ...); empty: off. Only lines the rules leave unknown or below the threshold are
    # sent, in batches, within a total budget per plan; the model only labels, it never changes the text.
    # The URL follows the webhook address rules; cast_llm_allow_private lifts the address rule for it alone
    # (a model served on the operator's own network), as webhook_allow_private does for webhooks.
    cast_llm_url: str = ""
    cast_llm_model: str = ""
    cast_llm_key: str = ""  # sent as a bearer token when set
    cast_llm_allow_private: bool = False
    cast_llm_timeout_seconds: float = 10.0  # to connect, and for each read
    cast_llm_budget_seconds: float = 20.0  # all of one plan's requests together
    cast_llm_batch_lines: int = 20  # lines per request
    cast_llm_max_lines: int = 400  # lines sent per plan (the least sure first)
    cast_llm_threshold: float = 0.6  # lines attributed with less confidence than this are sent
    # Delivery into an owner's Audiobookshelf (worker/audiobookshelf.py, docs/api.md): the server's URL
    # follows the webhook address rules; audiobookshelf_allow_private lifts the address rule for it alone
    # (a server on the operator's own network). Each read or write waits at most timeout_seconds, a whole
    # upload at most upload_seconds; a 5xx or a timeout is tried again after retry_seconds, then twice as
    # long each time, up to audiobookshelf_max_attempts attempts in all.
    audiobookshelf_allow_private: bool = False
    audiobookshelf_timeout_seconds: float = 30.0
    audiobookshelf_upload_seconds: float = 1800.0
    audiobookshelf_retry_seconds: float = 5.0
    audiobookshelf_max_attempts: int = 5
    rate_limit_per_minute: int = 600  # requests per API key per minute; 0 disables
    # Tome's own secret (TOME_SECRET_KEY, at least 32 characters): encrypts stored third-party tokens
    # (integrations) and signs short-lived file URLs. `make run` creates one under data_dir on first start;
    # empty elsewhere: what needs it answers 409 naming the setting.
    secret_key: str = ""
    # How long a signed file link (POST /v1/jobs/{id}/files/{name}/link) works: long enough to listen
    # through a chapter, short enough that a link copied out of a page soon stops working.
    file_link_seconds: int = 3600
    # Bearer token Prometheus sends to GET /metrics (admin API keys work too); empty: admin keys only.
    metrics_token: str = ""
    # Observability (docs/observability.md): "text" or "json" log lines; how often each process writes
    # the metrics it gathered (cache counters, histograms) to the database (0: at once, no batching).
    log_format: str = "text"
    metrics_flush_seconds: float = 10.0
    # Where `make run` serves the API.
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    # The qwen3-tts engine (worker/engines/qwen3.py); the registry hands these to it.
    qwen3_model_dir: str = ""  # the checkpoint directory; required by that engine
    qwen3_device: str = ""  # cpu, cuda or cuda:N; empty: cuda:0 when CUDA is available, else cpu
    qwen3_max_batch: int = 0  # rows in flight (fast runner) or per generate call; 0: from free GPU memory
    qwen3_max_new_tokens: int = 0  # cap on codec frames per chunk (12.5 a second); 0: the model's own
    qwen3_runner: str = "fast"  # "fast": Tome's loop (worker/engines/qwen3_loop.py); "reference": qwen-tts
    # The fish-speech engine (worker/engines/fish.py); the registry hands these to it.
    fish_model_dir: str = ""  # the OpenAudio S1 checkpoint directory; required by that engine
    fish_device: str = ""  # cpu, cuda or cuda:N; empty: cuda:0 when CUDA is available, else cpu
    fish_max_new_tokens: int = 0  # cap on codec frames per chunk (about 21.5 a second); 0: the model's own
    # The transcript check's recogniser (docs/qa.md): "pocketsphinx" (embedded, English, CPU) or "whisper"
    # (worker/qa/whisper.py: a Whisper checkpoint in qa_whisper_dir, on qa_whisper_device; empty: cuda:0
    # when CUDA is available, else cpu).
    qa_recogniser: str = "pocketsphinx"
    qa_whisper_dir: str = ""
    qa_whisper_device: str = ""
    # The espeak-paced engine (worker/engines/paced.py, for the chaos battery).
    paced_seconds_per_chunk: float = 0.25
    paced_warm_up_seconds: float = 0.0
    paced_max_reference_seconds: float = 0.0  # 0: any length; else a longer reference fails its build
    paced_seconds_per_build: float = 0.0  # each prompt build takes at least this long (a slow encoder)

    @property
    def control_queue_name(self) -> str:
        return self.control_queue or f"{self.queue}.control"

    @property
    def stitch_queue_name(self) -> str:
        return self.stitch_queue or f"{self.queue}.stitch"

    @property
    def layout(self) -> Layout:
        """Where every file lives under ``data_dir``."""
        return Layout.under(self.data_dir)

    def open_storage(self) -> Storage:
        """The storage backend ``storage`` names (no request is made: see ``Storage.ping``)."""
        return open_storage(
            self.storage,
            self.layout,
            bucket=self.s3_bucket,
            prefix=self.s3_prefix,
            endpoint_url=self.s3_endpoint_url,
            region=self.s3_region,
            part_bytes=self.s3_part_mib * 1024 * 1024,
            public_endpoint_url=self.s3_public_endpoint_url,
        )

    @property
    def webhook_port_set(self) -> frozenset[int] | None:
        """``webhook_ports`` parsed (None: the default rule); validate() has checked it."""
        if not self.webhook_ports.strip():
            return None
        return frozenset(int(part) for part in self.webhook_ports.split(",") if part.strip())

    @property
    def sqlalchemy_url(self) -> str:
        return self.database_url or f"sqlite:///{self.layout.database}"

    @property
    def broker_folder(self) -> Path:
        return self.layout.broker

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
        if not self.task_soft_time_limit < self.task_time_limit:
            raise ConfigError("TOME_TASK_SOFT_TIME_LIMIT must be below TOME_TASK_TIME_LIMIT")
        if not self.task_time_limit < self.visibility_timeout:
            raise ConfigError(
                "TOME_TASK_TIME_LIMIT must be below TOME_VISIBILITY_TIMEOUT, or the broker redelivers "
                "tasks that are still running"
            )
        if not self.worker_start_timeout > 0:
            raise ConfigError("TOME_WORKER_START_TIMEOUT must be a positive number of seconds")
        if min(self.chunks_per_task, self.max_chunk_attempts, self.render_tasks_in_flight) < 1:
            raise ConfigError(
                "TOME_CHUNKS_PER_TASK, TOME_MAX_CHUNK_ATTEMPTS and TOME_RENDER_TASKS_IN_FLIGHT "
                "must be at least 1"
            )

    def _validate_voices(self) -> None:
        """Voice builds in flight and the reference analysers."""
        if not 1 <= self.voice_builds_per_owner <= self.voice_builds_in_flight:
            raise ConfigError(
                "TOME_VOICE_BUILDS_PER_OWNER must be at least 1 and at most TOME_VOICE_BUILDS_IN_FLIGHT"
            )
        if self.reference_analysers < 1 or not self.reference_analysis_seconds > 0:
            raise ConfigError("TOME_REFERENCE_ANALYSERS and TOME_REFERENCE_ANALYSIS_SECONDS must be positive")

    def _validate_secrets(self) -> None:
        """The secret key's length and the signed file links' lifetime."""
        if self.secret_key and len(self.secret_key) < MIN_SECRET_KEY_CHARS:
            raise ConfigError(
                f"TOME_SECRET_KEY must be at least {MIN_SECRET_KEY_CHARS} characters "
                "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')"
            )
        if not MIN_FILE_LINK_SECONDS <= self.file_link_seconds <= MAX_FILE_LINK_SECONDS:
            raise ConfigError(
                f"TOME_FILE_LINK_SECONDS must be {MIN_FILE_LINK_SECONDS} to {MAX_FILE_LINK_SECONDS} (a day)"
            )

    def _validate_speech(self) -> None:
        """The speech endpoint's limits and the output estimates' speaking rate."""
        if min(self.speech_max_chars, self.speech_per_owner) < 1 or not self.speech_wait_seconds > 0:
            raise ConfigError(
                "TOME_SPEECH_MAX_CHARS, TOME_SPEECH_PER_OWNER and TOME_SPEECH_WAIT_SECONDS must be positive"
            )
        if not (self.speech_chars_per_second > 0 and 0 < self.max_pause_share <= 1):
            raise ConfigError("TOME_SPEECH_CHARS_PER_SECOND must be positive, TOME_MAX_PAUSE_SHARE in (0, 1]")

    def _validate_engines(self) -> None:
        """The engines' and quotas' numbers (none negative) and the Qwen3 runner."""
        if self.qwen3_runner not in ("fast", "reference"):
            raise ConfigError(f"TOME_QWEN3_RUNNER={self.qwen3_runner!r}: use fast or reference")
        for name in (
            "qwen3_max_batch",
            "qwen3_max_new_tokens",
            "fish_max_new_tokens",
            "paced_seconds_per_chunk",
            "paced_warm_up_seconds",
            "paced_max_reference_seconds",
            "paced_seconds_per_build",
            "max_rerenders_per_job_hour",
            "quota_build_seconds_per_day",
        ):
            if getattr(self, name) < 0:
                raise ConfigError(f"TOME_{name.upper()} must not be negative")

    def _validate_network(self) -> None:
        """Webhook ports, log format, metrics flushing and the API's port."""
        try:
            ports = self.webhook_port_set
        except ValueError as exc:
            raise ConfigError(
                f"TOME_WEBHOOK_PORTS={self.webhook_ports!r}: comma-separated port numbers"
            ) from exc
        if ports is not None and not all(0 < port < 65536 for port in ports):
            raise ConfigError(f"TOME_WEBHOOK_PORTS={self.webhook_ports!r}: ports are 1-65535")
        if self.log_format not in ("text", "json"):
            raise ConfigError(f"TOME_LOG_FORMAT={self.log_format!r}: text or json")
        if not 0 <= self.metrics_flush_seconds <= 3600:
            raise ConfigError("TOME_METRICS_FLUSH_SECONDS must be between 0 and 3600")
        if not 0 < self.api_port < 65536:
            raise ConfigError("TOME_API_PORT must be a TCP port (1-65535)")

    def _validate_audiobookshelf(self) -> None:
        """Delivery into Audiobookshelf: time limits and attempts."""
        if not (
            self.audiobookshelf_timeout_seconds > 0
            and self.audiobookshelf_upload_seconds > 0
            and self.audiobookshelf_retry_seconds >= 0
            and 1 <= self.audiobookshelf_max_attempts <= 20
        ):
            raise ConfigError(
                "TOME_AUDIOBOOKSHELF_TIMEOUT_SECONDS and TOME_AUDIOBOOKSHELF_UPLOAD_SECONDS must be "
                "positive, TOME_AUDIOBOOKSHELF_RETRY_SECONDS not negative, "
                "TOME_AUDIOBOOKSHELF_MAX_ATTEMPTS 1-20"
            )

    def _validate_cast_llm(self) -> None:
        if not (self.cast_llm_timeout_seconds > 0 and self.cast_llm_budget_seconds > 0):
            raise ConfigError(
                "TOME_CAST_LLM_TIMEOUT_SECONDS and TOME_CAST_LLM_BUDGET_SECONDS must be positive"
            )
        if not (1 <= self.cast_llm_batch_lines <= 200 and 0 <= self.cast_llm_max_lines <= 10_000):
            raise ConfigError("TOME_CAST_LLM_BATCH_LINES must be 1-200, TOME_CAST_LLM_MAX_LINES 0-10000")
        if not 0 <= self.cast_llm_threshold <= 1:
            raise ConfigError("TOME_CAST_LLM_THRESHOLD must be between 0 and 1")
        if not self.cast_llm_url:
            return
        if not self.cast_llm_model:
            raise ConfigError("TOME_CAST_LLM_URL needs TOME_CAST_LLM_MODEL (the model the endpoint serves)")
        from worker.webhooks import WebhookRefused, check_url  # imports models: only when an LLM is set

        try:
            check_url(self.cast_llm_url, self.cast_llm_allow_private, allowed_ports=self.webhook_port_set)
        except WebhookRefused as exc:
            message = str(exc).replace("webhook_url", "the URL")
            raise ConfigError(
                f"TOME_CAST_LLM_URL={self.cast_llm_url[:200]!r}: {message} (TOME_CAST_LLM_ALLOW_PRIVATE=true "
                "allows a model on a private or loopback address)"
            ) from exc

    def _validate_storage(self) -> None:
        if self.storage not in ("local", "s3"):
            raise ConfigError(f"TOME_STORAGE={self.storage!r}: local or s3")
        if self.storage == "s3" and not self.s3_bucket:
            raise ConfigError("TOME_STORAGE=s3 needs TOME_S3_BUCKET (the bucket's name)")
        if not 5 <= self.s3_part_mib <= 5120:
            raise ConfigError("TOME_S3_PART_MIB must be 5-5120 (S3's part size limits)")
        if not 0 <= self.s3_presign_seconds <= 7 * 24 * 3600:
            raise ConfigError("TOME_S3_PRESIGN_SECONDS must be 0 (proxy) to 604800 (S3's limit)")
        for name, url in (
            ("TOME_S3_ENDPOINT_URL", self.s3_endpoint_url),
            ("TOME_S3_PUBLIC_ENDPOINT_URL", self.s3_public_endpoint_url),
        ):
            if url and not _is_endpoint_url(url):
                raise ConfigError(
                    f"{name}={url[:200]!r}: an http:// or https:// URL of a host, e.g. http://minio:9000"
                )

    def _validate_queues(self) -> None:
        # Queue names end up in ``celery worker --queues a,b``, which splits on commas.
        named = (
            ("TOME_QUEUE", self.queue),
            ("TOME_GPU_QUEUE", self.gpu_queue),
            ("TOME_CONTROL_QUEUE", self.control_queue_name),
            ("TOME_STITCH_QUEUE", self.stitch_queue_name),
        )
        for name, value in named:
            if value != value.strip() or "," in value or any(c.isspace() for c in value):
                raise ConfigError(f"{name}={value!r}: a queue name has no commas or spaces")
        if not self.queue:
            raise ConfigError("TOME_QUEUE must not be empty")
        # An error, not "treat as unset": whoever sets TOME_GPU_QUEUE means to keep GPU workers on GPU work,
        # and a GPU worker started with ``--queues <TOME_GPU_QUEUE>`` would silently take every stitch and
        # webhook too. Leave TOME_GPU_QUEUE empty to run everything on one queue.
        if self.gpu_queue == self.queue:
            raise ConfigError(
                f"TOME_GPU_QUEUE={self.gpu_queue!r} is the same queue as TOME_QUEUE: GPU workers would also "
                "take stitching and webhooks. Give it another name, or leave it empty for one queue"
            )
        if self.control_queue_name in (self.queue, self.gpu_queue):
            raise ConfigError(
                f"TOME_CONTROL_QUEUE={self.control_queue!r}: a queue of its own (not TOME_QUEUE or "
                "TOME_GPU_QUEUE), so that a worker serving only it never takes render work"
            )
        if self.stitch_queue_name in (self.queue, self.gpu_queue, self.control_queue_name):
            raise ConfigError(
                f"TOME_STITCH_QUEUE={self.stitch_queue!r}: a queue of its own (not TOME_QUEUE, "
                "TOME_GPU_QUEUE or TOME_CONTROL_QUEUE), so that stitches never hold the control worker"
            )

    def _validate_recogniser(self) -> None:
        if self.qa_recogniser not in RECOGNISERS:
            raise ConfigError(
                f"TOME_QA_RECOGNISER={self.qa_recogniser!r}: use one of {', '.join(RECOGNISERS)}"
            )
        if self.qa_whisper_device:
            from worker.engines.base import is_device  # worker.engines imports this module (and numpy)

            if not is_device(self.qa_whisper_device):
                raise ConfigError(
                    f"TOME_QA_WHISPER_DEVICE={self.qa_whisper_device!r}: use cpu, cuda or cuda:N"
                )
        if self.qa_recogniser == "whisper":
            if not self.qa_whisper_dir:
                raise ConfigError("TOME_QA_RECOGNISER=whisper needs TOME_QA_WHISPER_DIR (a local checkpoint)")
            from worker.qa.whisper import RecogniserError, check_model_dir  # numpy-only; only when chosen

            try:
                check_model_dir(Path(self.qa_whisper_dir))
            except RecogniserError as exc:
                raise ConfigError(f"TOME_QA_WHISPER_DIR: {exc}") from exc


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
    """Settings from ``TOME_<FIELD>`` variables (``environ`` defaults to ``os.environ``), then overrides."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    defaults = Settings()
    for f in fields(Settings):
        name = f"TOME_{f.name.upper()}"
        if name in env:
            values[f.name] = _convert(env[name], getattr(defaults, f.name), name)
    settings = replace(defaults, **values)
    if overrides:
        settings = replace(settings, **overrides)
    return settings.validate()


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
