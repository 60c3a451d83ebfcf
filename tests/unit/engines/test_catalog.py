"""The engine catalog: Tome's own engines, and engines loaded from other modules (``TOME_ENGINE_MODULES``).

What a process with no such module offers, and a module's engine read, built and handed on to the
processes it starts, run in fresh interpreters (loading a module here would stay loaded for the tests after
this one in this process). The refusals run here: a refused list loads nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from bench.engines import PacedSettings
from worker.config import ConfigError, Settings, load_settings
from worker.engines.catalog import engines, loaded_modules

ROOT = Path(__file__).resolve().parents[3]

ALONE = """
import json, sys
from worker.config import FLAT_SETTINGS, load_settings
from worker.engines.registry import available_engines, get_engine
settings = load_settings({})
try:
    get_engine("espeak-paced", settings)
    error = ""
except KeyError as exc:
    error = str(exc)
print(json.dumps({
    "engines": available_engines(),
    "modules": settings.engines.modules,
    "variables": sorted(FLAT_SETTINGS),
    "error": error,
    "bench": sorted(m for m in sys.modules if m == "bench" or m.startswith("bench.")),
}))
"""

# A deployment's own engine module: one engine with a settings section under the key "echo".
ECHO_MODULE = """
from dataclasses import dataclass
from worker.engines.spec import EngineSpec, require_not_negative

@dataclass(frozen=True)
class EchoSettings:
    gain: float = 1.0
    voice: str = "plain"

    def validate(self) -> None:
        require_not_negative(self, "echo_", ("gain",))

class EchoEngine:
    name = "echo"

    def __init__(self, settings: EchoSettings) -> None:
        self.gain, self.voice = settings.gain, settings.voice

SPEC = EngineSpec("echo", EchoSettings, EchoEngine, qa_profile="rule-based", key="echo")
"""

# Reads the module's engine from the environment, then prints what a child started with the settings'
# environment (worker.processes.settings_env) holds.
WITH_ECHO = """
import json, os
from worker.config import ConfigError, Settings, load_settings
from worker.engines.catalog import qa_profile, spec_for
from worker.engines.registry import available_engines, get_engine
from worker.processes import settings_env
before = Settings()  # made before the module loads
settings = load_settings()
engine = get_engine(settings.engines.default, settings)
refused = ""
try:
    load_settings({**os.environ, "TOME_ECHO_GAIN": "-1"})
except ConfigError as exc:
    refused = str(exc)
louder = settings.with_overrides(echo_gain=4.0)
print(json.dumps({
    "engines": available_engines(),
    "modules": settings.engines.modules,
    "engine": [engine.name, engine.gain, engine.voice],
    "louder": get_engine("echo", louder).gain,
    "profile": qa_profile("echo"),
    "refused": refused,
    "before": [before.engines.modules, before.engines.section(spec_for("echo")).gain,
               settings_env(before)["TOME_ENGINE_MODULES"], settings_env(before)["TOME_ECHO_GAIN"]],
    "env": {k: v for k, v in settings_env(settings).items() if k.startswith("TOME_")},
}))
"""


def _run(script: str, env: dict[str, str]) -> dict[str, object]:
    command = [sys.executable, "-c", script]
    done = subprocess.run(
        command, check=False, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOME_")}
    return {**env, **extra}


def test_tome_alone_offers_only_its_own_engines() -> None:
    got = _run(ALONE, _clean_env(PYTHONPATH=str(ROOT)))
    assert got["engines"] == ["espeak", "fish-speech", "qwen3-tts"]
    assert got["modules"] == ""
    variables = got["variables"]
    assert isinstance(variables, list)
    assert "engine_modules" in variables
    assert not [name for name in variables if name.startswith("paced_")]
    assert "unknown TTS engine 'espeak-paced'" in str(got["error"])
    assert "TOME_ENGINE_MODULES" in str(got["error"])
    assert got["bench"] == []


def test_a_module_of_engines_is_read_built_and_handed_on(tmp_path: Path) -> None:
    (tmp_path / "echo_engines.py").write_text(ECHO_MODULE)
    path = f"{tmp_path}{os.pathsep}{ROOT}"
    env = _clean_env(
        PYTHONPATH=path, TOME_ENGINE_MODULES=" echo_engines ,", TOME_ENGINE="echo", TOME_ECHO_GAIN="2.5"
    )
    got = _run(WITH_ECHO, env)
    assert got["engines"] == ["echo", "espeak", "fish-speech", "qwen3-tts"]
    assert got["modules"] == "echo_engines"
    assert got["engine"] == ["echo", 2.5, "plain"]
    assert got["louder"] == 4.0
    assert got["profile"] == "rule-based"
    assert got["refused"] == "TOME_ECHO_GAIN must not be negative"
    # Settings made before the load hold its defaults, and the processes they start load it too.
    assert got["before"] == ["", 1.0, "echo_engines", "1.0"]
    handed_on = got["env"]
    assert isinstance(handed_on, dict)
    assert handed_on["TOME_ENGINE_MODULES"] == "echo_engines"
    assert (handed_on["TOME_ECHO_GAIN"], handed_on["TOME_ECHO_VOICE"]) == ("2.5", "plain")
    # A process started with that environment loads the module and reads the same section.
    child = _run(WITH_ECHO, {**_clean_env(PYTHONPATH=path), **handed_on})
    assert child["engine"] == ["echo", 2.5, "plain"]
    assert child["env"] == handed_on


def _module(folder: Path, body: str) -> str:
    name = f"engines_{uuid.uuid4().hex[:10]}"
    (folder / f"{name}.py").write_text(textwrap.dedent(body))
    return name


SECTION = """
from dataclasses import dataclass
from worker.engines.spec import EngineSpec, NoSettings

@dataclass(frozen=True)
class Section:
    {field}: int = 1

    def validate(self) -> None:
        pass

SPEC = EngineSpec({name!r}, {settings}, lambda section: None, qa_profile="neural", key={key!r})
"""
LOOSE = """
from dataclasses import dataclass
from worker.engines.spec import EngineSpec

@dataclass
class Loose:
    level: int = 1

    def validate(self) -> None:
        pass

SPEC = EngineSpec("loose", Loose, lambda section: None, qa_profile="neural", key="loose")
"""


def _spec_module(folder: Path, name: str, key: str, field: str = "level", settings: str = "Section") -> str:
    return _module(folder, SECTION.format(name=name, key=key, field=field, settings=settings))


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("no_such_module_for_tome", "cannot import engine module 'no_such_module_for_tome'"),
        ("json", "engine module 'json' declares no SPECS"),
        ("worker.engines.espeak_spec", "engine name 'espeak' is empty or already taken"),
        ("bench.engines; rm -rf /", "'bench.engines; rm -rf /' is not a Python module name"),
        ("../../etc/passwd", "is not a Python module name"),
        ("x" * 100_000, "is not a Python module name (of at most 200 characters)"),
    ],
)
def test_a_module_list_that_cannot_load_is_refused_by_name(raw: str, problem: str) -> None:
    before = (loaded_modules(), engines())
    with pytest.raises(ConfigError, match="TOME_ENGINE_MODULES") as refused:
        load_settings({"TOME_ENGINE_MODULES": raw})
    assert problem in str(refused.value)
    assert len(str(refused.value)) < 400
    assert (loaded_modules(), engines()) == before


def test_a_module_whose_engines_clash_is_refused_and_nothing_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    fine = _spec_module(tmp_path, "fine-engine", "fine")
    cases = {
        _spec_module(tmp_path, "keyed-twice", "qwen3"): "settings key 'qwen3' of 'keyed-twice'",
        _spec_module(tmp_path, "quota-like", "quota", "storage_bytes"): "would read TOME_QUOTA_STORAGE_BYTES",
        _spec_module(tmp_path, "keyless", ""): "'keyless' has settings but no key",
        _spec_module(tmp_path, "Bad Key", "Bad Key"): "is not lower_snake_case",
        _spec_module(tmp_path, "espeak-paced", "paced2", settings="NoSettings"): "'espeak-paced' is empty or",
        _module(tmp_path, "SPECS = ('espeak',)\n"): "'espeak' is not an EngineSpec",
        _module(tmp_path, "SPEC = (\n"): "SyntaxError",
        _module(tmp_path, "raise RuntimeError('no GPU here')\n"): "RuntimeError: no GPU here",
        _module(tmp_path, LOOSE): "the settings of 'loose' are not a frozen dataclass",
        # Two modules of one list whose sections would read the same variable (TOME_ODD_ONE_OUT):
        f"{_spec_module(tmp_path, 'odd', 'odd', 'one_out')},"
        f"{_spec_module(tmp_path, 'odd-one', 'odd_one', 'out')}": "would read TOME_ODD_ONE_OUT",
    }
    before = (loaded_modules(), engines())
    for module, problem in cases.items():
        with pytest.raises(ConfigError, match="TOME_ENGINE_MODULES") as refused:
            Settings().with_overrides(engine_modules=f"{fine},{module}")
        assert problem in str(refused.value), module
        assert (loaded_modules(), engines()) == before, module  # the fine module did not load either


def test_the_loaded_list_is_held_as_read() -> None:
    assert "bench.engines" in loaded_modules()  # tests/conftest.py
    assert load_settings({"TOME_ENGINE_MODULES": " bench.engines ,, "}).engines.modules == "bench.engines"
    with pytest.raises(ConfigError, match="TOME_ENGINE_MODULES must be a comma-separated text, not NoneType"):
        Settings().with_overrides(engine_modules=None)


def test_a_loaded_engines_section_is_held_only_where_it_differs() -> None:
    """Settings equal to the defaults are equal, however they were made (a child reads every variable)."""
    default = PacedSettings().seconds_per_chunk
    assert Settings().with_overrides(paced_seconds_per_chunk=default) == Settings()
    changed = Settings().with_overrides(paced_seconds_per_chunk=0.3)
    assert changed != Settings()
    assert changed.with_overrides(paced_seconds_per_chunk=default) == Settings()
    assert changed.engines.plugins.get("paced").seconds_per_chunk == 0.3
