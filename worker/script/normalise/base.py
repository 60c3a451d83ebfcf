"""What a normaliser returns, and the shape every language's rules take (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Fired:
    """One rewrite: the rule's category (``"cardinal"``, ``"date"``...), the text matched, its spoken form."""

    rule: str
    written: str
    spoken: str


@dataclass(frozen=True)
class Normalised:
    """The text as an engine should read it, and the rewrites that made it, in text order."""

    text: str
    fired: tuple[Fired, ...]


class Rules(Protocol):
    """One language's normaliser. ``region`` is the BCP-47 region subtag (``"US"``), or None."""

    def normalise(self, text: str, *, heading: bool, region: str | None) -> Normalised:
        """Rewrite ``text`` for speech; never raises."""
        ...

    def say_as(self, text: str, interpret_as: str, format: str | None, region: str | None) -> str:
        """Say ``text`` the way SSML ``say-as`` asks; ValueError when the text cannot be read that way."""
        ...
