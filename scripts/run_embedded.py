"""`make run`: Tome on one machine with no servers to install.

Applies migrations, mints an admin key on first start (stored in <data dir>/admin.key, mode 0600) and a secret
key (<data dir>/secret.key, unless TOME_SECRET_KEY is set), then runs the API under gunicorn on
TOME_API_HOST:TOME_API_PORT (127.0.0.1:8000), one Celery worker that renders (the engine tasks, webhooks
and deliveries; never a control task or a stitch), a small one for the control tasks alone (a job's plan
and start never wait behind render batches or stitches), one for stitches alone (a finished book's stitch
never waits behind render batches) and Celery beat (the sweeper's clock), until Ctrl-C; if any of them
exits, the others are stopped too.
SQLite, Celery's filesystem broker and the espeak engine are the defaults (see worker/config.py).

The children run in their own process group, so that Ctrl-C reaches this process alone: it stops them with
SIGTERM (each shuts down in its own orderly way) instead of the terminal interrupting every one of them
mid-call, which made gevent print tracebacks. "listening" is printed once the API answers /livez.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from models import make_engine
from models.migrate import upgrade_head
from webapi.cli import mint_key_in
from worker.celery_app import ensure_broker_folders
from worker.config import ConfigError, Settings, load_settings
from worker.engines import EngineError, get_engine
from worker.processes import api_command, beat_command, split_workers
from worker.storage.atomic import keep_files_private

API_START_SECONDS = 120.0  # the API's first answer, at most (gunicorn imports the app in each worker)
STOP_SECONDS = 20.0


def ensure_admin_key(settings: Settings) -> Path:
    path = settings.layout.admin_key
    if not path.exists():
        key = mint_key_in(make_engine(settings.sqlalchemy_url), owner="admin", name="first-start", admin=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(key + "\n")
        print(f"tome: created an admin API key in {path} (mode 0600)", flush=True)
    else:
        print(f"tome: admin API key in {path}", flush=True)
    return path


def ensure_secret_key(settings: Settings) -> Settings:
    """TOME_SECRET_KEY when set; else the one in <data dir>/secret.key, created (mode 0600) on first start.
    The children inherit it through the environment."""
    if settings.security.secret_key:
        return settings
    path = settings.layout.secret_key
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(32) + "\n")
        print(f"tome: created a secret key in {path} (mode 0600; keep it: stored tokens need it)", flush=True)
    os.environ["TOME_SECRET_KEY"] = path.read_text().strip()
    return load_settings()


def check_engine(settings: Settings) -> None:
    """Build the configured engine once (construction reads only its settings and config files), so that a
    missing model directory or extra is said here, before anything starts."""
    try:
        get_engine(settings.engines.default, settings)
    except ImportError as exc:
        raise ConfigError(
            f"TOME_ENGINE={settings.engines.default}: its packages are not installed ({exc}); "
            f"`make run ENGINE={settings.engines.default}` installs them"
        ) from exc
    except EngineError as exc:
        raise ConfigError(f"TOME_ENGINE={settings.engines.default}: {exc}") from exc
    except KeyError as exc:  # no such engine here (one of another module needs TOME_ENGINE_MODULES)
        raise ConfigError(f"TOME_ENGINE={settings.engines.default}: {exc.args[0]}") from exc


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def tool_path_hint() -> str:
    """How to reach the ``tome`` command installed beside this interpreter, unless PATH already finds it."""
    bin_dir = Path(sys.executable).parent.absolute()
    found = shutil.which("tome")
    if found and Path(found).parent.absolute() == bin_dir:
        return ""
    return f'; for the `tome` command: export PATH="{bin_dir}:$PATH"'


def prepare() -> Settings | None:
    """Settings checked, the data folder, broker folders, database and keys ready; None after saying why."""
    try:
        settings = load_settings()
        check_engine(settings)
    except ConfigError as exc:
        print(f"tome: {exc}", file=sys.stderr, flush=True)
        return None
    settings.storage.data_dir.resolve().mkdir(parents=True, exist_ok=True)
    ensure_broker_folders(settings)
    upgrade_head(settings.sqlalchemy_url)
    ensure_admin_key(settings)
    return ensure_secret_key(settings)


def watch(children: list[subprocess.Popen[bytes]], url: str, interrupted: Callable[[], bool]) -> None:
    """Say "listening" once the API answers; return when one child exits, on Ctrl-C, or when the API never
    answered within :data:`API_START_SECONDS`."""
    deadline = time.monotonic() + API_START_SECONDS
    listening = False
    while not interrupted() and all(child.poll() is None for child in children):
        if not listening and answers(f"{url}/livez"):
            listening = True
            print(
                f"tome: listening on {url} (the studio at {url}/, the API reference at {url}/docs); "
                f"worker and sweeper running{tool_path_hint()}; Ctrl-C stops all",
                flush=True,
            )
        elif not listening and time.monotonic() > deadline:
            print(f"tome: the API did not answer on {url} within {API_START_SECONDS:.0f} s", flush=True)
            return
        time.sleep(0.25 if not listening else 0.5)


def stop_all(children: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to each child still running, then wait for them together (killing any past STOP_SECONDS)."""
    for child in children:
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + STOP_SECONDS
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def main() -> int:
    keep_files_private()  # the database, keys and audio: 0600 in 0700 folders (the children inherit it)
    settings = prepare()
    if settings is None:
        return 2
    bind = f"{settings.api.host}:{settings.api.port}"
    commands = [
        api_command(bind),
        *split_workers(settings),
        beat_command(settings.layout.beat_schedule),
    ]
    # process_group=0: the children leave the terminal's foreground group, so Ctrl-C reaches only this
    # process, which then stops them in order.
    children = [subprocess.Popen(cmd, process_group=0) for cmd in commands]
    interrupted = False

    def interrupt(*_: object) -> None:
        nonlocal interrupted
        if not interrupted:
            print("tome: stopping", flush=True)
        interrupted = True
        for child in children:
            if child.poll() is None:
                child.terminate()

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    try:
        watch(children, f"http://{bind}", lambda: interrupted)
    finally:
        stop_all(children)
    if interrupted:
        return 0
    return max(abs(child.returncode or 0) for child in children) or 1


if __name__ == "__main__":
    sys.exit(main())
