"""What an engine module declares so that Tome can offer it (pure: no Flask, no Celery).

Each engine module ends with one :class:`EngineSpec`: the name jobs and ``TOME_ENGINE`` use, its
settings section (a frozen dataclass whose fields are read from ``TOME_<KEY>_<FIELD>``, validated by its
``validate`` method), the QA profile whose default thresholds its chunks are held to, and the factory
that builds the engine from its section. :mod:`worker.engines.catalog` lists the specs; the registry,
the settings and the QA policies are derived from that list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar

if TYPE_CHECKING:
    from worker.engines.base import Engine

__all__ = ["EngineSpec", "NoSettings", "QaProfile", "require_not_negative"]

# "rule-based": formant speech that reads every word as written and never breathes (espeak's family);
# "neural": a voice cloner, whose pacing, pauses and breaths vary (worker.qa.checks has both policies).
QaProfile = Literal["rule-based", "neural"]


class SettingsSection(Protocol):
    def validate(self) -> None: ...


@dataclass(frozen=True)
class NoSettings:
    """The section of an engine that has no settings."""

    def validate(self) -> None:
        """Nothing to check."""


SectionT = TypeVar("SectionT", bound=SettingsSection)


@dataclass(frozen=True)
class EngineSpec(Generic[SectionT]):
    """One engine as Tome offers it. ``key`` names its section (``settings.engines.<key>``, variables
    ``TOME_<KEY>_<FIELD>``); empty when ``settings`` is :class:`NoSettings`."""

    name: str
    settings: type[SectionT]
    factory: Callable[[SectionT], Engine]
    qa_profile: QaProfile
    key: str = ""

    def create(self, section: Any) -> Engine:
        """The engine built from ``section`` (checked to be this engine's own section type)."""
        if not isinstance(section, self.settings):
            raise TypeError(
                f"engine {self.name!r} takes {self.settings.__name__}, not {type(section).__name__}"
            )
        return self.factory(section)


def require_not_negative(section: object, prefix: str, names: Iterable[str]) -> None:
    """ValueError naming the variable (``TOME_<PREFIX><NAME>``) of the first field below zero."""
    for name in names:
        if getattr(section, name) < 0:
            raise ValueError(f"TOME_{prefix.upper()}{name.upper()} must not be negative")
