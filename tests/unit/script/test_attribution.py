"""Who says each line: tags, pronouns, alternation, vocatives, aliases, scare quotes, and bounds on what a
hostile script costs (worker.script.attribution)."""

from __future__ import annotations

from tests.support.cost import CpuMeter
from worker.script.attribution import MAX_CHARACTERS, MAX_LINES, NARRATOR, Cast, attribute


def speakers(*paragraphs: str) -> list[tuple[str, str]]:
    return [(line.speaker, line.attribution) for line in attribute([paragraphs]).lines]


def test_tags_after_and_before_the_line() -> None:
    assert speakers(
        "“You’re late,” said Tom.",
        "“I was up all night,” Margaret replied.",
        "Tom said, “Then sleep.”",
        "Margaret asked: “Now?”",
    ) == [("Tom", "explicit"), ("Margaret", "explicit"), ("Tom", "explicit"), ("Margaret", "explicit")]


def test_pronoun_tags_go_to_the_last_named_character_of_that_gender() -> None:
    result = speakers(
        "Mr. Hale and Mrs. Ellis sat down.",
        "“Tea?” he asked.",
        "“Please,” she said.",
    )
    assert result == [("Mr. Hale", "pronoun"), ("Mrs. Ellis", "pronoun")]


def test_a_pronoun_tag_passes_over_the_last_speaker_for_the_other_of_that_gender() -> None:
    result = speakers(
        "Anna and Beth walked in.",
        "“Cold out,” Beth said.",
        "“Freezing,” she agreed.",
    )
    assert result[1] == ("Anna", "pronoun")


def test_untagged_lines_alternate_between_the_two_speaking() -> None:
    result = speakers(
        "“Ready?” asked Tom.",
        "“Almost,” said Ada.",
        "“Now?”",
        "“Now.”",
        "“Go on, then.”",
    )
    assert result == [
        ("Tom", "explicit"),
        ("Ada", "explicit"),
        ("Tom", "alternation"),
        ("Ada", "alternation"),
        ("Tom", "alternation"),
    ]


def test_a_vocative_marks_the_listener_not_the_speaker() -> None:
    cast = attribute([["“Ready?” asked Tom.", "“Almost,” said Ada.", "“Ada, hurry.”"]])
    last = cast.lines[-1]
    assert (last.speaker, last.addressee) == ("Tom", "Ada")


def test_an_interrupted_quotation_is_one_line_of_one_speaker() -> None:
    [line] = attribute([["“My mother,” said Margaret, “is in Bath.”"]]).lines
    assert (line.text, line.speaker, line.attribution) == ("My mother, is in Bath.", "Margaret", "explicit")
    assert len(line.spans) == 2
    # A beat between two quotations makes two lines, of the same speaker.
    two = attribute([["“Fine.” Tom stood up. “Let’s go.”"]]).lines
    assert [(line.text, line.speaker) for line in two] == [("Fine.", "Tom"), ("Let’s go.", "Tom")]


def test_the_forms_of_a_name_are_one_character() -> None:
    cast = attribute(
        [
            [
                "Fitzwilliam Darcy came in.",
                "“Good evening,” said Mr. Darcy.",
                "“Is it?” asked Lady Ann.",
                "“It is,” Darcy said.",
            ]
        ]
    )
    darcy = next(member for member in cast.characters if member.name == "Fitzwilliam Darcy")
    assert set(darcy.aliases) == {"Mr. Darcy", "Darcy"}
    assert darcy.lines == 2
    assert darcy.sample in ("Good evening,", "It is,")


def test_scare_quotes_and_titles_stay_with_the_narrator() -> None:
    cast = attribute(
        [
            [
                "She had always called it “the mainland habit” and never drank it.",
                "They read “The Tempest” every winter.",
                "The sign said “out of order” and had said it for weeks.",
            ]
        ]
    )
    assert cast.lines == ()


def test_a_line_without_clues_is_unknown_and_read_by_the_narrator() -> None:
    [line] = attribute([["“Hello?”"]]).lines
    assert (line.speaker, line.attribution, line.confidence) == (NARRATOR, "unknown", 0.0)


def test_the_first_person_narrator_speaks_as_the_narrator() -> None:
    [line] = attribute([["“I know,” I said."]]).lines
    assert (line.speaker, line.attribution) == (NARRATOR, "explicit")


def test_dash_dialogue_is_attributed_like_any_other() -> None:
    cast = attribute([["—No nos alcanza —dijo Mateo.", "—Nos alcanza —respondió Lucía—. Y para pan."]], "es")
    assert [(line.speaker, line.text) for line in cast.lines] == [
        ("Mateo", "No nos alcanza"),
        ("Lucía", "Nos alcanza Y para pan."),
    ]


def test_a_speech_over_several_paragraphs_keeps_its_speaker() -> None:
    result = speakers(
        "“Consider the bridge,” Brandt said. “Two banks and a gap.", "“Every engineer stood there.”"
    )
    assert result == [("Brandt", "explicit"), ("Brandt", "alternation")]


def test_indexes_are_stable_and_in_reading_order() -> None:
    chapters = [["“One,” said Ann.", "“Two,” said Bo."], ["“Three,” said Ann."]]
    first, second = attribute(chapters), attribute(chapters)
    assert [line.index for line in first.lines] == [0, 1, 2]
    assert first == second
    assert [line.chapter for line in first.lines] == [0, 0, 1]


def _cost(chapters: list[list[str]]) -> tuple[float, Cast]:
    meter = CpuMeter()
    cast = attribute(chapters)
    return meter.seconds(), cast


def test_a_million_quotation_marks_cost_linear_time() -> None:
    quarter, _ = _cost([['"' * 250_000]])
    full, cast = _cost([['"' * 1_000_000]])
    assert cast.lines == ()
    assert full < 6 * quarter + 0.2, (quarter, full)
    quotes, _ = _cost([['"a," said Ann.'] * 2_500])
    double, cast = _cost([['"a," said Ann.'] * 5_000])
    assert len(cast.lines) == 5_000
    assert double < 3 * quotes + 0.2, (quotes, double)


def test_unbalanced_quotes_cost_linear_time() -> None:
    text = "‘a “b «c „d 'e " * 5_000
    half, _ = _cost([[text]])
    full, cast = _cost([[text * 2]])
    assert full < 3 * half + 0.2, (half, full)
    assert len(cast.lines) <= 1


def test_ten_thousand_characters_are_bounded_with_a_warning() -> None:
    chapters = [[f"“Hello,” said Zorbl{i} Quax{i}." for i in range(10_000)]]
    cost, cast = _cost(chapters)
    assert len(cast.characters) == MAX_CHARACTERS
    assert len(cast.lines) == 10_000
    assert sum(line.speaker == NARRATOR for line in cast.lines) == 10_000 - MAX_CHARACTERS
    assert any(f"more than {MAX_CHARACTERS} speakers" in warning for warning in cast.warnings)
    shared = [[f"“Hello,” said John Q{i}." for i in range(5_000)]]
    half, _ = _cost(shared)
    assert cost < 3 * half + 0.2, (half, cost)  # 10,000 speakers cost twice what 5,000 sharing a name do
    print(f"10,000 speakers: {cost:.2f} s")


def test_lines_are_bounded_with_a_warning() -> None:
    chapters = [["“A,” said Ann. “B.” Ann left. “C,” said Bo."] * 600]
    cast = attribute(chapters, max_lines=1000)
    assert len(cast.lines) == 1000
    assert any("more than 1000 lines" in warning for warning in cast.warnings)
    assert MAX_LINES == 100_000
