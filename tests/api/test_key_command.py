"""``flask --app webapi tome-keys create``, as the README and docker-compose.yml run it: a real process on a
migrated database. It loads only what minting a key needs (no views, audio stack, Celery, pydantic or other
models), and its CPU time stays within a small multiple of the floor any such command pays (Python,
Flask's command line and SQLAlchemy's ORM, measured in the same run): CPU, not the clock, so a loaded
machine does not fail it. Its figures are in docs/benchmarks.md."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from sqlalchemy import select

from models import ApiKey, hash_key, make_engine
from models.migrate import upgrade_head
from worker.config import load_settings

ROOT = Path(__file__).resolve().parents[2]
FLASK = Path(sys.executable).with_name("flask")
# Never needed to mint a key: the app's views and request types, the audio stack, the task queue, the
# engines, object storage, and the models other than ApiKey.
HEAVY = ("numpy", "scipy", "celery", "kombu", "torch", "boto3", "gevent", "pydantic", "webapi.jobs",
         "webapi.schemas", "worker.audio", "worker.engines", "models.job", "models.voice")  # fmt: skip
# What the settings read of the engines: their declarations (settings sections, names), no engine itself.
LIGHT_ENGINE_MODULES = {"worker.engines", "worker.engines.catalog", "worker.engines.spec"} | {
    f"worker.engines.{name}_spec" for name in ("espeak", "qwen3", "fish")
}
# The command as `flask` runs it, then the modules it left loaded, on the last line.
CREATE = (
    "import json, sys\n"
    "from flask.cli import main\n"
    "sys.argv = ['flask', '--app', 'webapi', 'tome-keys', 'create', '--owner', 'cost', '--name', 'probe']\n"
    "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
    "print(json.dumps(sorted(sys.modules)))\n"
)
RUNS = 3


def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOME_")}
    return {**env, "TOME_DATA_DIR": str(data_dir), "PYTHONPATH": str(ROOT)}


def _cpu_seconds(command: list[str], env: dict[str, str]) -> float:
    """The least CPU time (user + system) of ``command`` over a few runs: the least is the least disturbed."""
    spent = []
    for _ in range(RUNS):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(command, env=env, check=True, capture_output=True, timeout=120, cwd=ROOT)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        spent.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return min(spent)


def test_minting_a_key_from_the_command_line_loads_only_what_it_needs(tmp_path: Path) -> None:
    data_dir = tmp_path / "var"
    data_dir.mkdir()
    url = load_settings({}, data_dir=data_dir).sqlalchemy_url
    upgrade_head(url)
    env = _env(data_dir)
    done = subprocess.run(
        [sys.executable, "-c", CREATE], check=False, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    key, modules = done.stdout.strip().splitlines()
    loaded = set(json.loads(modules)) - LIGHT_ENGINE_MODULES
    assert not [m for m in loaded for heavy in HEAVY if m == heavy or m.startswith(f"{heavy}.")]
    assert "webhook secret: " in done.stderr
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            owner = connection.scalar(select(ApiKey.owner).where(ApiKey.key_sha256 == hash_key(key)))
    finally:
        engine.dispose()
    assert owner == "cost"


def test_minting_a_key_costs_little_cpu_beyond_flask_and_sqlalchemy(tmp_path: Path) -> None:
    data_dir = tmp_path / "var"
    data_dir.mkdir()
    upgrade_head(load_settings({}, data_dir=data_dir).sqlalchemy_url)
    env = _env(data_dir)
    floor = _cpu_seconds([sys.executable, "-c", "import flask.cli, sqlalchemy.orm"], env)
    bare = _cpu_seconds([sys.executable, "-c", "pass"], env)
    create = _cpu_seconds([str(FLASK), "--app", "webapi", "tome-keys", "create", "--owner", "cost"], env)
    # A fraction of the floor more; building the app (its blueprints, numpy, scipy, Celery) is several floors.
    assert create < 3 * floor, (
        f"tome-keys create: {create:.2f} s CPU; floor {floor:.2f} s; python {bare:.2f} s"
    )
    assert bare < floor
