"""The labelled dialogue corpus (tests/data/cast_corpus.txt) and how attribution is scored on it.

Run ``python -m tests.support.cast_corpus`` to print the table that docs/scripts.md publishes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from worker.script.attribution import NARRATOR, Cast, attribute

CORPUS = Path(__file__).resolve().parent.parent / "data" / "cast_corpus.txt"


@dataclass(frozen=True)
class Expected:
    speaker: str  # a canonical name of the scene's cast, or "narrator"
    tagged: bool  # the tag names the speaker with a verb of speech


@dataclass
class Scene:
    title: str
    language: str = "en"
    cast: dict[str, frozenset[str]] = field(default_factory=dict)  # canonical name -> every form, lowercase
    paragraphs: list[str] = field(default_factory=list)
    expected: list[list[Expected]] = field(default_factory=list)


def load(path: Path = CORPUS) -> list[Scene]:
    scenes: list[Scene] = []
    blocks = [block.strip("\n") for block in path.read_text(encoding="utf-8").split("\n\n")]
    for block in blocks:
        lines = [line for line in block.split("\n") if line and not line.startswith("#")]
        if not lines:
            continue
        if lines[0].startswith("=== "):
            scene = Scene(lines[0][4:].strip())
            for line in lines[1:]:
                key, _, value = line.partition(":")
                if key == "language":
                    scene.language = value.strip()
                elif key == "cast":
                    for entry in value.split(";"):
                        name, _, aliases = entry.partition("=")
                        forms = {
                            name.strip().lower(),
                            *(a.strip().lower() for a in aliases.split(",") if a.strip()),
                        }
                        scene.cast[name.strip()] = frozenset(forms)
            scenes.append(scene)
            continue
        scene = scenes[-1]
        labels = [line for line in lines if line.startswith(">> ")]
        text = " ".join(line for line in lines if not line.startswith(">> "))
        expected = []
        for label in labels:
            for entry in label[3:].split("|"):
                name = entry.strip()
                tagged = name.endswith("*")
                name = name.rstrip("*").strip()
                if name != NARRATOR and name not in scene.cast:
                    raise ValueError(f"{scene.title}: {name!r} is not in the scene's cast")
                expected.append(Expected(name, tagged))
        scene.paragraphs.append(text)
        scene.expected.append(expected)
    return scenes


@dataclass
class Score:
    labelled: int = 0
    found: int = 0
    spurious: int = 0
    tagged: int = 0
    tagged_right: int = 0
    right: int = 0
    by_method: Counter[str] = field(default_factory=Counter)
    by_method_right: Counter[str] = field(default_factory=Counter)
    mistakes: list[str] = field(default_factory=list)

    @property
    def found_share(self) -> float:
        return self.found / self.labelled

    @property
    def tagged_share(self) -> float:
        return self.tagged_right / self.tagged

    @property
    def all_share(self) -> float:
        return self.right / self.labelled


def _right(scene: Scene, cast: Cast, speaker: str, expected: str) -> bool:
    """The attributed speaker is the expected character: one of its forms is one of the character's
    names, and none is another character's."""
    if NARRATOR in (expected, speaker):
        return speaker == expected
    member = next((m for m in cast.characters if m.name == speaker), None)
    forms = {speaker.lower(), *(a.lower() for a in (member.aliases if member else ()))}
    others = set().union(*(f for name, f in scene.cast.items() if name != expected))
    return bool(forms & scene.cast[expected]) and not forms & others


def score(scenes: list[Scene]) -> Score:
    """Quotations found (per paragraph, the lines found up to the number labelled; more are spurious),
    and speakers right where a paragraph's lines were all found."""
    total = Score()
    for scene in scenes:
        cast = attribute([scene.paragraphs], scene.language)
        by_paragraph: dict[int, list[int]] = {}
        for line in cast.lines:
            by_paragraph.setdefault(line.paragraph, []).append(line.index)
        for number, expected in enumerate(scene.expected):
            found = [cast.lines[i] for i in by_paragraph.get(number, [])]
            total.labelled += len(expected)
            total.tagged += sum(e.tagged for e in expected)
            total.found += min(len(found), len(expected))
            total.spurious += max(0, len(found) - len(expected))
            if len(found) != len(expected):
                if expected or found:
                    total.mistakes.append(
                        f"{scene.title}: {len(found)} lines for {len(expected)} in "
                        f"{scene.paragraphs[number][:70]!r}"
                    )
                continue
            for line, wanted in zip(found, expected, strict=True):
                right = _right(scene, cast, line.speaker, wanted.speaker)
                total.right += right
                total.tagged_right += right and wanted.tagged
                total.by_method[line.attribution] += 1
                total.by_method_right[line.attribution] += right
                if not right:
                    total.mistakes.append(
                        f"{scene.title}: {line.text[:50]!r} is {wanted.speaker}, "
                        f"not {line.speaker} ({line.attribution})"
                    )
    return total


def table(result: Score) -> str:
    rows = [
        "| measure | lines | right | share |",
        "| --- | ---: | ---: | ---: |",
        f"| quotations found | {result.labelled} | {result.found} | {result.found_share:.1%} |",
        f"| explicitly tagged lines attributed | {result.tagged} | {result.tagged_right} "
        f"| {result.tagged_share:.1%} |",
        f"| all lines attributed | {result.labelled} | {result.right} | {result.all_share:.1%} |",
    ]
    for method in ("explicit", "pronoun", "alternation", "unknown"):
        n = result.by_method[method]
        if n:
            right = result.by_method_right[method]
            rows.append(f"| lines the rules call `{method}` | {n} | {right} | {right / n:.1%} |")
    rows.append(
        f"\nSpurious lines (a scare quote or title taken for dialogue, a line split in two): "
        f"{result.spurious}"
    )
    return "\n".join(rows)


if __name__ == "__main__":
    outcome = score(load())
    print(table(outcome))
    for mistake in outcome.mistakes:
        print("-", mistake)
