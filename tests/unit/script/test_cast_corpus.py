"""Attribution measured on the labelled corpus (tests/data/cast_corpus.txt), rules only; the table it
prints is the one docs/scripts.md publishes (``python -m tests.support.cast_corpus``)."""

from __future__ import annotations

from tests.support.cast_corpus import load, score, table


def test_the_corpus_is_large_and_varied_enough() -> None:
    scenes = load()
    lines = [entry for scene in scenes for expected in scene.expected for entry in expected]
    assert len(lines) >= 300
    assert sum(entry.tagged for entry in lines) >= 80
    assert {scene.language for scene in scenes} >= {"en", "de", "es", "fr"}
    assert sum(len(scene.cast) >= 3 for scene in scenes) >= 5


def test_rules_find_and_attribute_the_corpus_dialogue() -> None:
    result = score(load())
    print(table(result))
    assert result.found_share >= 0.98
    assert result.tagged_share >= 0.95
    assert result.all_share >= 0.85
    assert result.spurious <= result.labelled * 0.02
