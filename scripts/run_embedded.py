"""`make run`: Tome on one machine with no servers to install.

Applies migrations, mints an admin key on first start (stored in <data dir>/admin.key, mode 0600), then runs
the API under gunicorn on 127.0.0.1:8000, one Celery worker and Celery beat (the sweeper's clock), until
Ctrl-C; if any of them exits, the others are stopped too. SQLite, Celery's filesystem broker and the
espeak engine are the defaults (see worker/config.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from models.migrate import upgrade_head
from webapi import create_app
from webapi.cli import mint_key
from worker.celery_app import ensure_broker_folders
from worker.config import load_settings
from worker.processes import api_command, beat_command, worker_command
from worker.storage.atomic import keep_files_private


def ensure_admin_key(path: Path) -> Path:
    if not path.exists():
        key = mint_key(create_app(), owner="admin", name="first-start", admin=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(key + "\n")
        print(f"tome: created an admin API key in {path} (mode 0600)", flush=True)
    else:
        print(f"tome: admin API key in {path}", flush=True)
    return path


def main() -> int:
    keep_files_private()  # the database, keys and audio: 0600 in 0700 folders (the children inherit it)
    settings = load_settings()
    data_dir = settings.data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    ensure_broker_folders(settings)
    upgrade_head(settings.sqlalchemy_url)
    ensure_admin_key(settings.layout.admin_key)
    bind = f"{settings.api_host}:{settings.api_port}"
    commands = [
        api_command(bind),
        worker_command(2, [settings.queue, settings.gpu_queue]),
        beat_command(settings.layout.beat_schedule),
    ]
    children = [subprocess.Popen(cmd) for cmd in commands]
    print(f"tome: API on http://{bind}, worker and sweeper (beat) running; Ctrl-C stops all", flush=True)

    def stop(*_: object) -> None:
        for child in children:
            if child.poll() is None:
                child.terminate()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        while all(child.poll() is None for child in children):
            time.sleep(0.5)
    finally:
        stop()
        deadline = time.monotonic() + 20
        for child in children:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
    return max(child.returncode or 0 for child in children)


if __name__ == "__main__":
    sys.exit(main())
