"""docker-compose.yml and the Dockerfile, checked by reading (no Docker engine on these machines).

The file is parsed with PyYAML (anchors and merge keys resolved), ``${...}`` variables are substituted the way
Compose does for the two documented setups (plain CPU, and the `gpu` profile), and each service's environment
is fed to the real ``load_settings`` and ``celery_config``: the queues the workers consume must cover every
queue that tasks are routed to, and every service that talks to the broker must agree on the engine and the
GPU queue.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import re
import subprocess
import sys
import threading
import tomllib
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from gunicorn.util import load_class
from gunicorn.workers.ggevent import GeventWorker

from worker.celery_app import celery_config
from worker.config import FLAT_SETTINGS, Settings, env_name, load_settings
from worker.processes import api_command, render_queues

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]

CPU_ENV: dict[str, str] = {}  # `docker compose up -d --build`
GPU_ENV = {  # the command at the top of docker-compose.yml, with `--profile gpu`
    "TOME_ENGINE": "qwen3-tts",
    "TOME_GPU_QUEUE": "gpu",
    "TOME_CHUNKS_PER_TASK": "32",
    "TOME_QWEN3_HOST_DIR": "/srv/models/Qwen3-TTS-12Hz-1.7B-Base",
}
S3_ENV = {  # the object-storage command at the top of docker-compose.yml, with `--profile s3`
    "TOME_STORAGE": "s3",
    "TOME_S3_BUCKET": "tome",
    "TOME_S3_ENDPOINT_URL": "http://minio:9000",
    "AWS_ACCESS_KEY_ID": "tome",
    "AWS_SECRET_ACCESS_KEY": "change-me-minio",
}
SETUPS = {"cpu": (CPU_ENV, set()), "gpu": (GPU_ENV, {"gpu"}), "s3": (S3_ENV, {"s3"})}

_VARIABLE = re.compile(r"\$(?:(\$)|\{(\w+)(?:(:?[-?])([^}]*))?\}|(\w+))")


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's variable substitution: ``$$``, ``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``,
    ``${VAR:?message}`` (an unset variable is the empty string, as Compose makes it after a warning)."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        escaped, name, operator, argument, bare = match.groups()
        if escaped:
            return "$"
        name = name or bare
        current = env.get(name)
        if (operator in (":-", ":?") and not current) or (operator in ("-", "?") and current is None):
            if operator.endswith("?"):
                raise KeyError(f"required variable {name} is missing a value: {argument}")
            return str(argument)
        return current or ""

    return _VARIABLE.sub(substitute, value)


def active(setup: str) -> dict[str, dict[str, Any]]:
    """The services ``docker compose [--profile ...] up`` starts in this setup, variables substituted."""
    env, profiles = SETUPS[setup]
    return {
        name: interpolate(service, env)
        for name, service in SERVICES.items()
        if not service.get("profiles") or profiles & set(service["profiles"])
    }


def broker_clients(services: dict[str, dict[str, Any]]) -> dict[str, Settings]:
    """Each service that talks to the broker, with the Settings its TOME_* variables load to."""
    return {
        name: load_settings(service["environment"])
        for name, service in services.items()
        if "TOME_BROKER_URL" in service.get("environment", {})
    }


def consumed_queues(service: dict[str, Any]) -> set[str] | None:
    """The queues of a ``celery worker`` command (None for anything else: the API, beat)."""
    command = service.get("command", [])
    if command[:4] != ["celery", "-A", "worker.main", "worker"]:
        return None
    assert "--queues" in command, "a worker without --queues consumes the default queue only; say so"
    return set(command[command.index("--queues") + 1].split(","))


def option(service: dict[str, Any], flag: str) -> str:
    command = service["command"]
    return str(command[command.index(flag) + 1])


def test_compose_has_no_required_variables() -> None:
    """Compose interpolates every service before it applies profiles: a ``${VAR:?}`` of worker-gpu would
    break the plain ``docker compose up``."""
    required = re.compile(r"(?<!\$)\$\{\w+:?\?")
    assert not required.search(yaml.safe_dump(COMPOSE))  # the parsed file: values, not its comments
    for setup in SETUPS:
        active(setup)  # every variable resolves


def test_plain_up_is_the_cpu_deployment() -> None:
    services = active("cpu")
    assert set(services) == {
        "postgres",
        "redis",
        "migrate",
        "api",
        "worker",
        "worker-control",
        "worker-stitch",
        "sweeper",
    }
    assert {name: s["profiles"] for name, s in SERVICES.items() if s.get("profiles")} == {
        "worker-gpu": ["gpu"],
        "flower": ["flower"],
        "minio": ["s3"],
        "minio-init": ["s3"],
    }
    for name, settings in broker_clients(services).items():
        assert (settings.engines.default, settings.broker.gpu_queue) == ("espeak", ""), name
        assert settings.storage.backend == "local", name  # files on the tome-data volume, as before


@pytest.mark.parametrize("setup", SETUPS)
def test_broker_clients_agree_on_engine_and_gpu_queue(setup: str) -> None:
    clients = broker_clients(active(setup))
    assert {"api", "worker", "sweeper"} <= set(clients)
    agreed = {
        (s.engines.default, s.broker.queue, s.broker.gpu_queue, s.tasks.chunks_per_task)
        for s in clients.values()
    }
    assert len(agreed) == 1, clients
    if setup == "gpu":
        assert "worker-gpu" in clients
        assert {(s.engines.default, s.broker.gpu_queue) for s in clients.values()} == {("qwen3-tts", "gpu")}
        # A render task carries a full GPU batch (start_job, on the CPU worker, splits by this).
        assert {s.tasks.chunks_per_task for s in clients.values()} == {32}
    else:
        assert {s.tasks.chunks_per_task for s in clients.values()} == {8}


@pytest.mark.parametrize("setup", SETUPS)
def test_every_routed_queue_is_consumed_and_gpu_workers_take_only_gpu_work(setup: str) -> None:
    services = active(setup)
    clients = broker_clients(services)
    routed: set[str] = set()
    consumers: dict[str, set[str]] = {}
    for name, settings in clients.items():
        conf = celery_config(settings)
        routes = conf["task_routes"].values()  # a route that names no queue sends to the default queue
        routed |= {conf["task_default_queue"], *(route["queue"] for route in routes if "queue" in route)}
        queues = consumed_queues(services[name])
        if queues is not None:
            consumers[name] = queues
    unconsumed = routed - set().union(*consumers.values())
    assert not unconsumed, f"tasks are routed to {unconsumed}, which no worker consumes"
    settings = clients["worker"]
    # the CPU worker takes no engine work when a GPU worker does; with it, what make run's render worker
    # takes: neither a control task nor a stitch
    assert consumers["worker"] == {settings.broker.queue}, "the CPU worker: no engine work"
    assert consumers["worker"] | consumers.get("worker-gpu", set()) == set(render_queues(settings))
    # the control tasks have a worker of their own, so that they never wait behind render batches or
    # stitches; stitches one of their own, so that they never wait behind render batches; each queue has
    # one kind of consumer
    assert consumers["worker-control"] == {settings.broker.control_queue_name}
    assert consumers["worker-stitch"] == {settings.broker.stitch_queue_name}
    for queue in routed:
        assert sum(queue in queues for queues in consumers.values()) == 1, queue
    if setup == "gpu":
        assert consumers["worker-gpu"] == {settings.broker.gpu_queue}


def make_run_api(bind: str, workers: int) -> list[str]:
    """``make run``'s API command line, with the container's ``gunicorn`` on the PATH."""
    gunicorn, *options = api_command(bind, workers)
    assert Path(gunicorn).name == "gunicorn"
    return ["gunicorn", *options]


@pytest.mark.parametrize("setup", SETUPS)
def test_api_runs_the_server_options_of_make_run(setup: str) -> None:
    """Slow clients (issue 10): compose serves the API exactly as `make run` does, but with 4 workers."""
    api = active(setup)["api"]
    assert api["command"] == make_run_api("0.0.0.0:8000", workers=4)
    worker_class = load_class(option(api, "--worker-class"))
    assert issubclass(worker_class, GeventWorker), "sync workers are stalled by two slow clients"


def test_the_images_default_command_is_the_compose_api() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    cmd = re.search(r"^CMD (\[.*\])$", dockerfile, re.MULTILINE)
    assert cmd, "the Dockerfile ends with a JSON-array CMD"
    assert json.loads(cmd.group(1)) == SERVICES["api"]["command"]


def test_gpu_worker_service() -> None:
    gpu = active("gpu")["worker-gpu"]
    assert SERVICES["worker-gpu"]["profiles"] == ["gpu"]
    assert option(gpu, "--concurrency") == "1", "one model per process, one process per GPU"
    assert option(gpu, "--queues") == "gpu"
    assert gpu["build"]["args"]["EXTRAS"] == "qwen3"
    assert gpu["environment"]["TOME_ENGINE"] == "qwen3-tts"
    # The container sees only its reserved GPU, and sees it as device 0.
    assert gpu["environment"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert gpu["environment"]["TOME_QWEN3_DEVICE"] == "cuda:0"
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia"
    assert device["capabilities"] == ["gpu"]
    assert device["device_ids"] == ["0"]  # TOME_GPU_DEVICE's default
    assert "count" not in device  # Compose allows count or device_ids, not both
    cpu_images = {"api", "worker", "sweeper"}
    assert all(SERVICES[name]["build"] == "." for name in cpu_images), "the CPU services keep the small image"


@pytest.mark.parametrize("setup", SETUPS)
def test_model_dir_is_mounted_read_only_wherever_the_engine_is_named(setup: str) -> None:
    """The API and the CPU services hash the checkpoint for the engine version (cache keys), so they need it
    as much as the GPU worker does; none of them may write to it."""
    env, _ = SETUPS[setup]
    declared = set(COMPOSE["volumes"])
    for name, service in active(setup).items():
        environment = service.get("environment", {})
        if "TOME_ENGINE" not in environment:
            continue
        target = environment["TOME_QWEN3_MODEL_DIR"]
        mounts = [v.split(":") for v in service["volumes"] if v.split(":")[1] == target]
        assert len(mounts) == 1, name
        source, _, mode = mounts[0]
        assert mode == "ro", name
        if setup == "gpu":
            assert source == env["TOME_QWEN3_HOST_DIR"], name
        else:
            assert source in declared, f"{name}: without a model dir the mount is an empty named volume"


def run_guard(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """worker-gpu's entrypoint, run by sh with the container's environment, in front of ``echo started``."""
    service = SERVICES["worker-gpu"]
    environment = interpolate(service["environment"], env)
    entrypoint = interpolate(service["entrypoint"], env)
    return subprocess.run(
        [*entrypoint, "echo", "started"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )


def test_gpu_worker_starts_only_in_the_documented_gpu_setup() -> None:
    assert run_guard(GPU_ENV).stdout == "started\n"
    for env in (CPU_ENV, {**GPU_ENV, "TOME_GPU_QUEUE": ""}, {**GPU_ENV, "TOME_ENGINE": "espeak"}):
        refused = run_guard(env)
        assert refused.returncode == 78, env
        assert "started" not in refused.stdout
        assert "TOME_ENGINE=qwen3-tts TOME_GPU_QUEUE=gpu" in refused.stderr


def test_compose_comment_gives_the_gpu_command() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    assignments = " ".join(f"{key}={value}" for key, value in GPU_ENV.items())
    assert assignments in text
    assert "docker compose --profile gpu up -d --build" in text


def test_dockerfile_installs_qwen_tts_as_the_makefile_does() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    makefile = (ROOT / "Makefile").read_text()
    make_pin = re.search(r"--no-deps '?qwen-tts==([\w.]+)", makefile)
    docker_pin = re.search(r"^ARG QWEN_TTS_VERSION=([\w.]+)$", dockerfile, re.MULTILINE)
    assert make_pin, "the Makefile installs qwen-tts with --no-deps"
    assert docker_pin, "the Dockerfile pins qwen-tts in ARG QWEN_TTS_VERSION"
    assert make_pin.group(1) == docker_pin.group(1)
    assert re.search(r"^ARG EXTRAS=\"\"$", dockerfile, re.MULTILINE), "the default image has no extras"
    assert '--no-deps "qwen-tts==${QWEN_TTS_VERSION}"' in dockerfile


# --- health checks, graceful stops, Flower (issue 15, Observability) ------------------------------------

WORKERS = ("worker", "worker-control", "worker-stitch", "worker-gpu")


def _seconds(duration: str) -> float:
    """A Compose duration (``1m30s``, ``10m``, ``45s``) in seconds."""
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|m|s|ms|us)", duration)
    assert parts, duration
    assert "".join(n + u for n, u in parts) == duration, duration
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}
    return sum(float(n) * scale[u] for n, u in parts)


class _Answers(BaseHTTPRequestHandler):
    status = 200
    paths: list[str] = []

    def do_GET(self) -> None:
        type(self).paths.append(self.path)
        self.send_response(type(self).status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (503, False)])
def test_the_api_healthcheck_asks_readyz_and_fails_on_a_503(status: int, healthy: bool) -> None:
    """The command itself runs, against a local server standing in for the API's port."""
    check = SERVICES["api"]["healthcheck"]
    assert check["test"][:2] == ["CMD", "python"]
    server = HTTPServer(("127.0.0.1", 0), _Answers)
    _Answers.status, _Answers.paths = status, []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        argv = [arg.replace("127.0.0.1:8000", f"127.0.0.1:{server.server_port}") for arg in check["test"][1:]]
        argv[0] = sys.executable
        done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
    finally:
        server.shutdown()
        server.server_close()
    assert _Answers.paths == ["/readyz"]
    assert (done.returncode == 0) is healthy, done.stderr
    assert _seconds(check["timeout"]) < _seconds(check["interval"])


@pytest.mark.parametrize("setup", SETUPS)
def test_every_long_running_service_has_a_healthcheck_but_the_sweeper(setup: str) -> None:
    for name, service in active(setup).items():
        if name in (
            "migrate",
            "minio-init",
            "sweeper",
        ):  # one-shot jobs; beat has nothing to ask (see the file)
            assert "healthcheck" not in service, name
            continue
        assert "healthcheck" in service, name


@pytest.mark.parametrize("name", WORKERS)
def test_workers_answer_a_celery_ping_and_send_task_events(name: str) -> None:
    service = active("gpu")[name]
    kind, command = service["healthcheck"]["test"]
    assert kind == "CMD-SHELL"
    assert command.startswith("celery -A worker.main inspect ping --destination celery@$HOSTNAME")
    assert "-E" in service["command"], "Flower sees tasks only from workers that send task events"


@pytest.mark.parametrize("name", WORKERS)
def test_a_stopping_worker_has_time_to_finish_its_batch(name: str) -> None:
    """Longer than a task may run before its soft time limit: the batch in flight ends before the kill."""
    service = active("gpu")[name]
    settings = load_settings(service["environment"])
    assert _seconds(service["stop_grace_period"]) >= settings.tasks.task_soft_time_limit
    assert _seconds(SERVICES["api"]["stop_grace_period"]) >= 10


def test_flower_is_optional_and_reads_the_workers_broker() -> None:
    assert "flower" not in active("cpu")
    assert "flower" not in active("gpu")
    flower = interpolate(SERVICES["flower"], CPU_ENV)
    assert flower["profiles"] == ["flower"]
    broker = load_settings(active("cpu")["worker"]["environment"]).broker.url
    assert f"--broker={broker}" in flower["command"]
    assert "flower" in flower["command"]
    assert flower["ports"] == ["127.0.0.1:5555:5555"], "no login: on the host's loopback only"
    assert "build" not in flower, "Flower's own image: Tome's image stays without it"


def test_the_s3_profile_adds_minio_and_its_bucket_and_every_service_uses_it() -> None:
    services = active("s3")
    assert set(services) == {
        "postgres",
        "redis",
        "migrate",
        "api",
        "worker",
        "worker-control",
        "worker-stitch",
        "sweeper",
        "minio",
        "minio-init",
    }
    assert SERVICES["minio"]["profiles"] == SERVICES["minio-init"]["profiles"] == ["s3"]
    minio, init = services["minio"], services["minio-init"]
    assert minio["command"] == ["server", "/data"]  # the S3 API on MinIO's port 9000
    assert "ports" not in minio, "the bucket is on the internal network only"
    assert minio["networks"] == ["internal"]
    assert minio["healthcheck"]["test"][:2] == ["CMD", "mc"]
    # the bucket step waits for a healthy MinIO and creates the bucket Tome is told to use
    assert init["depends_on"]["minio"]["condition"] == "service_healthy"
    script = init["entrypoint"][-1]
    assert 'mc mb --ignore-existing "tome/$TOME_S3_BUCKET"' in script
    assert init["environment"]["TOME_S3_BUCKET"] == "tome"
    assert init["environment"]["TOME_S3_ENDPOINT_URL"] == "http://minio:9000"
    # MinIO's root user is the key pair the Tome services sign with
    assert minio["environment"]["MINIO_ROOT_USER"] == init["environment"]["AWS_ACCESS_KEY_ID"] == "tome"
    assert len(minio["environment"]["MINIO_ROOT_PASSWORD"]) >= 8, "MinIO refuses shorter passwords"
    clients = broker_clients(services)
    assert {"api", "worker", "sweeper"} <= set(clients)
    for name, settings in clients.items():
        assert (settings.storage.backend, settings.storage.s3_bucket, settings.storage.s3_endpoint_url) == (
            "s3",
            "tome",
            "http://minio:9000",
        ), name
        environment = services[name]["environment"]
        assert environment["AWS_ACCESS_KEY_ID"] == minio["environment"]["MINIO_ROOT_USER"], name
        assert environment["AWS_SECRET_ACCESS_KEY"] == minio["environment"]["MINIO_ROOT_PASSWORD"], name
        # started only once the bucket exists (a missing bucket stops a service at start), and only
        # when the profile is on: without it the dependency is not required
        wait = services[name]["depends_on"]["minio-init"]
        assert wait == {"condition": "service_completed_successfully", "required": False}, name


def test_compose_comment_gives_the_s3_command() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    assert " ".join(f"{key}={value}" for key, value in S3_ENV.items()) in text
    assert "docker compose --profile s3 up -d --build" in text


def test_every_storage_setting_reaches_every_tome_service() -> None:
    """A setting compose does not pass through cannot be set in a compose deployment at all."""
    storage = {env_name(flat) for flat in FLAT_SETTINGS if flat.startswith(("s3_", "storage"))}
    assert "TOME_S3_PUBLIC_ENDPOINT_URL" in storage
    for name, service in active("s3").items():
        if name in ("api", "worker", "sweeper"):
            missing = (storage | {"AWS_SESSION_TOKEN"}) - set(service["environment"])
            assert not missing, (name, sorted(missing))


# --- the Compose specification, the build context, the first key (issue 26) -----------------------------

# The Compose specification's JSON schema as check-jsonschema vendors it (a test dependency): read from the
# installed package, never fetched.
SPEC = json.loads(
    importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    .joinpath("compose-spec.json")
    .read_text(encoding="utf-8")
)


def spec_errors(document: Any) -> list[str]:
    validator = jsonschema.Draft202012Validator(SPEC)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


@pytest.mark.parametrize("setup", [None, *SETUPS])
def test_the_file_follows_the_compose_specification(setup: str | None) -> None:
    """As written and with each documented setup's variables substituted (Compose validates both ways)."""
    document = COMPOSE if setup is None else interpolate(COMPOSE, SETUPS[setup][0])
    assert spec_errors(document) == []


@pytest.mark.parametrize(
    "break_it",
    [
        lambda doc: doc["services"]["api"].update(depends_on={"redis": {"required": "no"}}),
        lambda doc: doc["services"]["worker"].update(restart_policy="always"),
        lambda doc: doc["services"]["api"]["healthcheck"].update(retires=3),  # a misspelt key
    ],
)
def test_the_schema_check_refuses_what_compose_would(break_it: Any) -> None:
    document = json.loads(json.dumps(COMPOSE))
    break_it(document)
    assert spec_errors(document)


def test_the_compose_version_is_stated_where_a_reader_looks() -> None:
    """``depends_on.required`` (used above) arrived in Compose 2.20."""
    assert any("required" in wait for s in SERVICES.values() for wait in s.get("depends_on", {}).values())
    for path in ("docker-compose.yml", "docs/operations.md"):
        assert "Compose 2.20 or newer" in " ".join((ROOT / path).read_text().split()), path


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Whether the build context leaves ``path`` out (.dockerignore: Go's filepath.Match plus ``**``, a
    pattern also covering what lies under a matched folder; later ``!`` patterns re-include)."""
    ignored = False
    parts = path.split("/")
    for pattern in patterns:
        negate = pattern.startswith("!")
        regex = re.escape(pattern.lstrip("!").strip("/"))
        regex = regex.replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
        regex = regex.replace(r"\?", "[^/]")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        if any(re.fullmatch(regex, prefix) for prefix in prefixes):
            ignored = not negate
    return ignored


def test_the_build_context_leaves_out_the_venv_data_caches_and_history_but_not_the_sources() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for left_out in (".venv/lib/python3.11/site-packages/torch/__init__.py", "var/tome.db", ".git/HEAD",
                     "worker/__pycache__/config.cpython-311.pyc", ".mypy_cache/3.11/x.json",
                     ".pytest_cache/v/cache", "tome.egg-info/PKG-INFO"):  # fmt: skip
        assert dockerignored(left_out, patterns), left_out
    copied = re.findall(r"^COPY (\S+(?: \S+)*) \S+$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    sources = [source for line in copied for source in line.split()]
    assert {"pyproject.toml", "webapi", "worker", "models", "migrations", "tome_cli"} <= set(sources)
    for source in sources:
        assert (ROOT / source).exists(), source
        inside = [source] if (ROOT / source).is_file() else [
            str(p.relative_to(ROOT)) for p in (ROOT / source).rglob("*.py")
        ]  # fmt: skip
        assert not any(dockerignored(p, patterns) for p in inside), source


def test_the_image_carries_every_package_the_project_installs() -> None:
    """pyproject's packages are all copied, or the installed `tome` or app would miss one at run time."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    copied = set(re.findall(r"^COPY (\w+) \./\1$", (ROOT / "Dockerfile").read_text(), re.MULTILINE))
    assert packages <= copied, packages - copied


def test_the_documented_first_key_command_makes_an_admin_key_in_the_services_database(
    tmp_path: Path,
) -> None:
    """The command docs/operations.md gives, run as the api container would run it: the key lands in the
    database named by TOME_DATABASE_URL (compose's PostgreSQL there, a migrated SQLite file here)."""
    docs = (ROOT / "docs" / "operations.md").read_text()
    [command] = re.findall(r"^\$ (docker compose exec api flask .*)$", docs, re.MULTILINE)
    assert command in (ROOT / "docker-compose.yml").read_text()
    service, argv = command.split()[3], command.split()[4:]
    assert service in SERVICES
    assert "TOME_DATABASE_URL" in SERVICES[service]["environment"]
    assert argv[:3] == ["flask", "--app", "webapi"]
    url = f"sqlite:///{tmp_path / 'tome.db'}"
    from models.migrate import upgrade_head

    upgrade_head(url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOME_")}
    env.update(TOME_DATABASE_URL=url, TOME_DATA_DIR=str(tmp_path / "data"))
    flask = [sys.executable, "-m", "flask", *argv[1:]]
    made = subprocess.run(flask, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith("tome_")
    from sqlalchemy import create_engine, text

    with create_engine(url).connect() as db:
        role = db.execute(text("SELECT role, owner FROM api_keys")).one()
    assert tuple(role) == ("admin", "admin")
