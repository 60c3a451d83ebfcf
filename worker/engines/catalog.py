"""The engines Tome offers and the settings sections they declare (pure module).

Two kinds. The built-in engines (:data:`BUILT_IN`) ship with Tome: each has a declaration module
(``<engine>_spec.py``, light: no numpy) holding an :class:`~worker.engines.spec.EngineSpec`, and its
settings section is a field of :class:`EngineSettings` under the spec's key (checked at import). Engines
from other modules (benchmarks', tests', a deployment's own) are loaded by name with
:func:`load_engine_modules`, which the settings call for ``TOME_ENGINE_MODULES``: each such module
declares ``SPECS`` (a tuple of specs) or ``SPEC``, and its sections live in :class:`PluginSections`, read
from ``TOME_<KEY>_<FIELD>`` like the built-in ones. The registry, ``TOME_ENGINE``'s default, the settings
loader and the QA policies are derived from here. Importing this module loads no engine module, numpy,
model or native library: reading settings stays light.
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

from worker.engines import espeak_spec, fish_spec, qwen3_spec
from worker.engines.spec import EngineSpec, NoSettings, QaProfile

__all__ = [
    "BUILT_IN",
    "DEFAULT_ENGINE",
    "EngineModuleError",
    "EngineSettings",
    "PluginSections",
    "SpecCheck",
    "engines",
    "load_engine_modules",
    "loaded_modules",
    "parse_module_names",
    "plugin_specs",
    "qa_profile",
    "spec_for",
]

BUILT_IN: tuple[EngineSpec[Any], ...] = (espeak_spec.SPEC, qwen3_spec.SPEC, fish_spec.SPEC)
DEFAULT_ENGINE = BUILT_IN[0].name

MAX_MODULE_NAME_CHARS = 200
_MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_KEY = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")
_plugins: dict[str, tuple[EngineSpec[Any], ...]] = {}  # module name -> its specs, in the order loaded
_lock = threading.Lock()
# A settings check of a new spec, given the new specs accepted before it (ValueError refuses it).
SpecCheck = Callable[[EngineSpec[Any], tuple[EngineSpec[Any], ...]], None]


class EngineModuleError(ValueError):
    """A module named in ``TOME_ENGINE_MODULES`` cannot be loaded or clashes with an engine loaded."""


def plugin_specs() -> tuple[EngineSpec[Any], ...]:
    """The specs loaded from other modules, in the order loaded."""
    return tuple(spec for specs in list(_plugins.values()) for spec in specs)


def engines() -> tuple[EngineSpec[Any], ...]:
    """Every engine this process offers: the built-in ones, then those loaded from other modules."""
    return BUILT_IN + plugin_specs()


def loaded_modules() -> tuple[str, ...]:
    """The modules whose engines this process has loaded, in the order loaded."""
    return tuple(_plugins)


def spec_for(name: str) -> EngineSpec[Any] | None:
    """The engine called ``name`` that this process offers, if any."""
    return next((spec for spec in engines() if spec.name == name), None)


def qa_profile(name: str) -> QaProfile:
    """The QA profile of engine ``name``; an engine not in the catalog (one registered at run time) is
    held to the neural profile, the lenient one."""
    spec = spec_for(name)
    return spec.qa_profile if spec is not None else "neural"


def parse_module_names(raw: str) -> tuple[str, ...]:
    """The module names of a comma-separated list (blanks ignored); EngineModuleError for one that is not a
    dotted Python name."""
    names = tuple(name.strip() for name in raw.split(",") if name.strip())
    for name in names:
        if len(name) > MAX_MODULE_NAME_CHARS or not _MODULE_NAME.fullmatch(name):
            raise EngineModuleError(
                f"{name[:80]!r} is not a Python module name (of at most {MAX_MODULE_NAME_CHARS} characters)"
            )
    return names


def load_engine_modules(names: Iterable[str], check: SpecCheck | None = None) -> tuple[EngineSpec[Any], ...]:
    """Import the modules ``names`` not loaded yet and add the engines they declare, all or none (a refused
    list adds no engine, though its modules may have been imported); the specs added. ``check(spec,
    accepted)`` may refuse a new spec by raising ValueError, ``accepted`` being the new specs before it
    (the settings refuse a section whose variables another setting already has). EngineModuleError names
    the module and the problem."""
    # Imported outside the lock: a module may read the settings (and so load modules) as it is imported.
    declared = {name: _declared_specs(name) for name in dict.fromkeys(names) if name not in _plugins}
    with _lock:
        new = {name: specs for name, specs in declared.items() if name not in _plugins}
        taken_names = {spec.name for spec in engines()}
        taken_keys = {spec.key for spec in engines() if spec.key}
        accepted: list[EngineSpec[Any]] = []
        for module, specs in new.items():
            for spec in specs:
                _check_new(module, spec, taken_names, taken_keys)
                if check is not None:
                    try:
                        check(spec, tuple(accepted))
                    except ValueError as exc:
                        raise EngineModuleError(f"engine module {module!r}: {exc}") from exc
                taken_names.add(spec.name)
                taken_keys.add(spec.key)
                accepted.append(spec)
        _plugins.update(new)
        return tuple(accepted)


def _declared_specs(module_name: str) -> tuple[EngineSpec[Any], ...]:
    """What module ``module_name`` declares: ``SPECS``, else ``(SPEC,)``."""
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # a syntax error or any exception its import raises: the module cannot load
        raise EngineModuleError(
            f"cannot import engine module {module_name!r}: {type(exc).__name__}: {str(exc)[:300]}"
        ) from exc
    declared = getattr(module, "SPECS", None)
    if declared is None and hasattr(module, "SPEC"):
        declared = (module.SPEC,)
    if not isinstance(declared, tuple | list) or not declared:
        raise EngineModuleError(f"engine module {module_name!r} declares no SPECS (a tuple of EngineSpec)")
    for spec in declared:
        if not isinstance(spec, EngineSpec):
            raise EngineModuleError(f"engine module {module_name!r}: {str(spec)[:80]!r} is not an EngineSpec")
        if not _is_frozen_dataclass(spec.settings):
            raise EngineModuleError(
                f"engine module {module_name!r}: the settings of {spec.name!r} are not a frozen dataclass"
            )
    return tuple(declared)


def _is_frozen_dataclass(cls: object) -> bool:
    """A frozen dataclass: its sections are hashable (the registry keeps one engine per section)."""
    return is_dataclass(cls) and isinstance(cls, type) and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]


def _check_new(module: str, spec: EngineSpec[Any], taken_names: set[str], taken_keys: set[str]) -> None:
    where = f"engine module {module!r}"
    if not spec.name.strip() or spec.name in taken_names:
        raise EngineModuleError(f"{where}: engine name {spec.name!r} is empty or already taken")
    if spec.key and (not _KEY.fullmatch(spec.key) or spec.key in taken_keys):
        raise EngineModuleError(
            f"{where}: settings key {spec.key!r} of {spec.name!r} is not lower_snake_case or already taken"
        )
    if not spec.key and spec.settings is not NoSettings:
        raise EngineModuleError(f"{where}: {spec.name!r} has settings but no key to read them under")


def _plugin_spec(key: str) -> EngineSpec[Any] | None:
    return next((spec for spec in plugin_specs() if spec.key == key), None)


@dataclass(frozen=True)
class PluginSections:
    """``settings.engines.plugins``: the settings sections of engines loaded from other modules, by key.
    Only the sections set differ from their engine's defaults are held (sorted by key: equal settings are
    equal), so a section of an engine loaded after these settings were made is its defaults."""

    held: tuple[tuple[str, Any], ...] = ()

    def get(self, key: str) -> Any:
        """The section under ``key`` (KeyError when no loaded engine has that key)."""
        for held_key, section in self.held:
            if held_key == key:
                return section
        spec = _plugin_spec(key)
        if spec is None:
            raise KeyError(f"no engine loaded has the settings key {key!r}")
        return spec.settings()

    def with_section(self, key: str, section: Any) -> PluginSections:
        """A copy with ``section`` under ``key`` (held only where it differs from its engine's defaults)."""
        held = [(k, s) for k, s in self.held if k != key]
        spec = _plugin_spec(key)
        if spec is None or section != spec.settings():
            held.append((key, section))
        return PluginSections(tuple(sorted(held, key=lambda item: item[0])))


def _modules_loaded() -> str:
    return ",".join(loaded_modules())


@dataclass(frozen=True)
class EngineSettings:
    """``settings.engines``: the engine jobs use unless they name one (``TOME_ENGINE``), the modules whose
    engines this process loads besides the built-in ones (``TOME_ENGINE_MODULES``, by default those it
    has loaded, so that the processes it starts load them too) and each engine's own section
    (``TOME_<KEY>_<FIELD>``)."""

    default: str = field(default=DEFAULT_ENGINE, metadata={"flat": "engine"})
    modules: str = field(default_factory=_modules_loaded, metadata={"flat": "engine_modules"})
    qwen3: qwen3_spec.Qwen3Settings = field(
        default_factory=qwen3_spec.Qwen3Settings, metadata={"prefix": "qwen3_"}
    )
    fish: fish_spec.FishSettings = field(default_factory=fish_spec.FishSettings, metadata={"prefix": "fish_"})
    plugins: PluginSections = field(default_factory=PluginSections)

    def section(self, spec: EngineSpec[Any]) -> Any:
        """The section ``spec``'s factory takes (:class:`NoSettings` for an engine without settings)."""
        if not spec.key:
            return NoSettings()
        if spec in BUILT_IN:
            return getattr(self, spec.key)
        return self.plugins.get(spec.key)

    def validate(self) -> None:
        """Each engine's section, built-in ones first (ValueError naming the variable)."""
        for spec in engines():
            self.section(spec).validate()


def _check_sections() -> None:
    """Every built-in spec with a key has its section in EngineSettings under that key, of its type."""
    declared = {f.name: f for f in fields(EngineSettings) if "prefix" in f.metadata}
    keyed = {spec.key: spec for spec in BUILT_IN if spec.key}
    if set(declared) != set(keyed):
        raise RuntimeError(f"EngineSettings sections {sorted(declared)} != engine keys {sorted(keyed)}")
    for key, spec in keyed.items():
        if declared[key].metadata.get("prefix") != f"{key}_" or not isinstance(
            getattr(EngineSettings(), key), spec.settings
        ):
            raise RuntimeError(
                f"EngineSettings.{key} is not {spec.name}'s section ({spec.settings.__name__})"
            )


_check_sections()
