"""A cast applied to parsed chapters: quotations cut out for their characters' voices, tags left to the
narrator, corrections and names checked (worker.script.cast)."""

from __future__ import annotations

import pytest

from worker.script import make_chunks, parse_document
from worker.script.attribution import attribute
from worker.script.cast import CastError, CastRequest, apply, names

SCRIPT = """\
Anna Price and Tom Hale stood on the quay.

"It is late," said Anna. "Too late."

"Not yet," Tom replied.
"""


def _applied(request: CastRequest) -> tuple[list[tuple[str, str | None, str | None, str]], dict[int, str]]:
    parsed = parse_document(SCRIPT, "plain")
    texts = [[" ".join(p) for p in chapter.paragraphs] for chapter in parsed.chapters]
    casting = apply(parsed.chapters, parsed.language, attribute(texts), request)
    specs = make_chunks(casting.chapters, 200)
    return [(s.written, s.voice, s.speaker, s.pause_after) for s in specs], casting.speakers


def test_each_quotation_is_cut_out_for_its_characters_voice_and_the_tags_stay_with_the_narrator() -> None:
    chunks, _ = _applied(CastRequest(voices={"anna": "high", "Tom Hale": "mid"}))
    assert chunks == [
        ("Anna Price and Tom Hale stood on the quay.", None, None, "paragraph"),
        ('"It is late,"', "high", "Anna Price", "sentence"),
        ("said Anna.", None, None, "sentence"),
        ('"Too late."', "high", "Anna Price", "paragraph"),
        ('"Not yet,"', "mid", "Tom Hale", "sentence"),
        ("Tom replied.", None, None, "none"),
    ]


def test_corrections_and_the_default_voice() -> None:
    chunks, speakers = _applied(
        CastRequest(voices={"Tom": "mid"}, default="extra", lines={0: "tom", 1: "narrator"})
    )
    assert speakers == {0: "Tom Hale", 1: "narrator"}
    assert [(c[1], c[2]) for c in chunks if c[0].startswith('"')] == [
        ("mid", "Tom Hale"),
        ("mid", "Tom Hale"),
        (None, None),
    ]
    unvoiced, _ = _applied(CastRequest(default="extra"))
    assert [c[1] for c in unvoiced if c[0].startswith('"')] == ["extra", "extra", "extra"]


@pytest.mark.parametrize(
    ("request_", "field", "named"),
    [
        (CastRequest(voices={"Gandalf": "x", "Tom": "y"}), "cast.voices", "'Gandalf'"),
        (CastRequest(lines={0: "Gandalf"}), "cast.lines", "'Gandalf'"),
        (CastRequest(lines={7: "Tom"}), "cast.lines", "no line 7"),
    ],
)
def test_names_that_mean_nobody_are_refused_naming_them(
    request_: CastRequest, field: str, named: str
) -> None:
    with pytest.raises(CastError) as raised:
        _applied(request_)
    assert raised.value.field == field
    assert named in raised.value.message


def test_a_word_of_one_name_alone_is_enough() -> None:
    cast = attribute([["“Hi,” said Anna Price.", "“Hello,” said Anne Price."]])
    known = names(cast)
    assert known["anna"] == "Anna Price"
    assert "price" not in known  # shared by two characters
