"""The engines Tome offers, in one list, and the settings sections they declare (pure module).

Adding an engine: its declaration module (``<engine>_spec.py``, light: no numpy) holds an
:class:`~worker.engines.spec.EngineSpec` (name, settings section, QA profile, a factory that imports the
engine's module); list it in :data:`ENGINES`; when it has settings, add its section to
:class:`EngineSettings` under the spec's key (checked at import). The registry, ``TOME_ENGINE``'s
default, the settings loader and the QA policies are derived from here. Importing this module loads no
engine module, numpy, model or native library: reading settings stays light.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from worker.engines import constant_spec, espeak_spec, fish_spec, paced_spec, qwen3_spec
from worker.engines.spec import EngineSpec, NoSettings, QaProfile

__all__ = ["DEFAULT_ENGINE", "ENGINES", "EngineSettings", "qa_profile", "spec_for"]

ENGINES: tuple[EngineSpec[Any], ...] = (
    espeak_spec.SPEC,
    paced_spec.SPEC,
    constant_spec.SPEC,
    qwen3_spec.SPEC,
    fish_spec.SPEC,
)
DEFAULT_ENGINE = ENGINES[0].name


@dataclass(frozen=True)
class EngineSettings:
    """``settings.engines``: the engine jobs use unless they name one (``TOME_ENGINE``), and each
    engine's own section (``TOME_<KEY>_<FIELD>``)."""

    default: str = field(default=DEFAULT_ENGINE, metadata={"flat": "engine"})
    qwen3: qwen3_spec.Qwen3Settings = field(
        default_factory=qwen3_spec.Qwen3Settings, metadata={"prefix": "qwen3_"}
    )
    fish: fish_spec.FishSettings = field(default_factory=fish_spec.FishSettings, metadata={"prefix": "fish_"})
    paced: paced_spec.PacedSettings = field(
        default_factory=paced_spec.PacedSettings, metadata={"prefix": "paced_"}
    )

    def section(self, spec: EngineSpec[Any]) -> Any:
        """The section ``spec``'s factory takes (:class:`NoSettings` for an engine without settings)."""
        return getattr(self, spec.key) if spec.key else NoSettings()

    def validate(self) -> None:
        """Each engine's section, in the order of this class's fields (ValueError naming the variable)."""
        for f in fields(self):
            value = getattr(self, f.name)
            if hasattr(value, "validate"):
                value.validate()


def spec_for(name: str) -> EngineSpec[Any] | None:
    """The listed engine called ``name``, if any."""
    return next((spec for spec in ENGINES if spec.name == name), None)


def qa_profile(name: str) -> QaProfile:
    """The QA profile of engine ``name``; an engine not listed here (one registered at run time) is
    held to the neural profile, the lenient one."""
    spec = spec_for(name)
    return spec.qa_profile if spec is not None else "neural"


def _check_sections() -> None:
    """Every spec with a key has its section in EngineSettings under that key, of its type."""
    declared = {f.name: f for f in fields(EngineSettings) if f.name != "default"}
    keyed = {spec.key: spec for spec in ENGINES if spec.key}
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
