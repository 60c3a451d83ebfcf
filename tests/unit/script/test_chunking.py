"""make_chunks and split_clauses: bounded chunks, paragraph boundaries, pauses, nothing lost."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.script import Chapter, ChunkSpec, make_chunks, parse_script, split_clauses


def test_packs_sentences_and_sets_pauses() -> None:
    chapters = [
        Chapter(None, (("One two.", "Three four.", "Five six."), ("Seven.",))),
        Chapter("Title", (("Title",), ("Eight nine.", "Ten."))),
    ]
    assert make_chunks(chapters, 24) == [
        ChunkSpec(0, 0, "One two. Three four.", "sentence"),
        ChunkSpec(1, 0, "Five six.", "paragraph"),
        ChunkSpec(2, 0, "Seven.", "chapter"),
        ChunkSpec(3, 1, "Title", "paragraph"),
        ChunkSpec(4, 1, "Eight nine. Ten.", "none"),
    ]


def test_chapter_index_counts_chapters_without_chunks() -> None:
    chapters = [Chapter(None, (("A.",),)), Chapter("Empty", ()), Chapter(None, ((), ("  ",), ("B.",)))]
    assert make_chunks(chapters, 10) == [ChunkSpec(0, 0, "A.", "chapter"), ChunkSpec(1, 2, "B.", "none")]


def test_no_chapters_no_chunks() -> None:
    assert make_chunks([], 10) == []


@pytest.mark.parametrize("max_chars", [0, -5])
def test_max_chars_must_be_positive(max_chars: int) -> None:
    with pytest.raises(ValueError, match="max_chars"):
        make_chunks([Chapter(None, (("Hi.",),))], max_chars)
    with pytest.raises(ValueError, match="max_chars"):
        split_clauses("Hi.", max_chars)


def test_over_long_sentence_is_split_at_clause_boundaries() -> None:
    sentence = (
        "The storm broke at dawn, scattering the boats; the harbour master, who had warned them, "
        "watched from the pier: nothing could be done — the sea had decided, and it would not be argued with."
    )
    chapters = [Chapter(None, (("Short one.", sentence, "After."),))]
    texts = [chunk.text for chunk in make_chunks(chapters, 60)]
    assert texts == [
        "Short one.",
        "The storm broke at dawn, scattering the boats;",
        "the harbour master, who had warned them,",
        "watched from the pier:",
        "nothing could be done —",
        "the sea had decided, and it would not be argued with.",
        "After.",
    ]


@pytest.mark.parametrize(
    ("text", "max_chars", "expected"),
    [
        ("alpha; beta: gamma, delta", 100, ["alpha; beta: gamma, delta"]),
        ("alpha, beta; gamma, delta", 14, ["alpha, beta;", "gamma, delta"]),
        ("alpha, beta: gamma, delta", 14, ["alpha, beta:", "gamma, delta"]),
        ("alpha, beta \u2013 gamma, delta", 14, ["alpha, beta \u2013", "gamma, delta"]),
        ("alpha beta, gamma delta", 12, ["alpha beta,", "gamma delta"]),
        ('He said "yes," then "no;" and left', 20, ['He said "yes,"', 'then "no;"', "and left"]),
        ("semi;colon without space, here", 17, ["semi;colon", "without space,", "here"]),
        ("one two three four five", 9, ["one two", "three", "four five"]),
        ("a abcdefghij b", 4, ["a", "abcd", "efgh", "ij", "b"]),
        ("abcdefg", 3, ["abc", "def", "g"]),
        ("  spaced \n  out  ", 20, ["spaced out"]),
        ("", 5, []),
    ],
)
def test_split_clauses(text: str, max_chars: int, expected: list[str]) -> None:
    assert split_clauses(text, max_chars) == expected


def test_sentence_whitespace_is_normalised() -> None:
    chapters = [Chapter(None, ((" One\n two. ", "\tThree."),))]
    assert [chunk.text for chunk in make_chunks(chapters, 100)] == ["One two. Three."]


# --- properties -------------------------------------------------------------------------------------------

_TOKEN = st.text(alphabet="abcdeXYZ019.,;:!?\u2014\u2013\"')", min_size=1, max_size=14)
_SENTENCE = st.lists(_TOKEN, min_size=1, max_size=12).map(" ".join)
_PARAGRAPH = st.lists(_SENTENCE, min_size=0, max_size=6).map(tuple)
_CHAPTER = st.builds(
    Chapter, st.none() | st.just("Title"), st.lists(_PARAGRAPH, min_size=0, max_size=4).map(tuple)
)
_CHAPTERS = st.lists(_CHAPTER, min_size=0, max_size=4)
_MAX_CHARS = st.integers(min_value=1, max_value=15) | st.integers(min_value=16, max_value=200)


def _paragraphs(chapters: Sequence[Chapter]) -> list[tuple[int, list[str]]]:
    """(chapter index, sentences) of every paragraph that has text, in order."""
    result = []
    for index, chapter in enumerate(chapters):
        for paragraph in chapter.paragraphs:
            sentences = [" ".join(sentence.split()) for sentence in paragraph if sentence.strip()]
            if sentences:
                result.append((index, sentences))
    return result


def _groups(chunks: list[ChunkSpec]) -> list[list[ChunkSpec]]:
    """Chunks grouped into paragraphs by their pauses; also checks seq, chapters and pause kinds."""
    assert [chunk.seq for chunk in chunks] == list(range(len(chunks)))
    groups: list[list[ChunkSpec]] = []
    current: list[ChunkSpec] = []
    for chunk in chunks:
        current.append(chunk)
        if chunk.pause_after != "sentence":
            groups.append(current)
            current = []
    assert not current
    followers: list[list[ChunkSpec] | None] = [*groups[1:], None]
    for group, following in zip(groups, followers, strict=False):
        assert len({chunk.chapter for chunk in group}) == 1
        last = group[-1]
        if following is None:
            assert last.pause_after == "none"
        elif following[0].chapter != last.chapter:
            assert last.pause_after == "chapter"
        else:
            assert last.pause_after == "paragraph"
    return groups


@settings(deadline=None, max_examples=300)
@given(_CHAPTERS, _MAX_CHARS)
def test_chunk_properties(chapters: list[Chapter], max_chars: int) -> None:
    chunks = make_chunks(chapters, max_chars)
    # (1) bounded and non-empty
    assert all(0 < len(chunk.text) <= max_chars and chunk.text == chunk.text.strip() for chunk in chunks)
    # (3) each paragraph's chunks are a separate group, in the right chapter
    groups = _groups(chunks)
    expected = _paragraphs(chapters)
    assert [group[0].chapter for group in groups] == [index for index, _ in expected]
    for group, (_, sentences) in zip(groups, expected, strict=True):
        source = " ".join(sentences)
        joined = " ".join(chunk.text for chunk in group)
        if max(len(word) for word in source.split()) <= max_chars:
            # (2) the same words in the same order: nothing lost, nothing duplicated
            assert joined == source
        else:  # a too-long word was hard-split: the characters still match exactly
            assert joined.replace(" ", "") == source.replace(" ", "")
        if max(len(sentence) for sentence in sentences) <= max_chars:
            # (4) whole sentences only, packed greedily
            position = 0
            previous: ChunkSpec | None = None
            for chunk in group:
                if previous is not None:  # greedy: the previous chunk had no room for this sentence
                    assert len(previous.text) + 1 + len(sentences[position]) > max_chars
                end = position + 1
                while " ".join(sentences[position:end]) != chunk.text:
                    end += 1
                    assert end <= len(sentences)
                position, previous = end, chunk
            assert position == len(sentences)


@settings(deadline=None)
@given(_SENTENCE, st.integers(min_value=1, max_value=60))
def test_split_clauses_properties(sentence: str, max_chars: int) -> None:
    pieces = split_clauses(sentence, max_chars)
    assert all(0 < len(piece) <= max_chars for piece in pieces)
    if max(len(word) for word in sentence.split()) <= max_chars:
        assert " ".join(pieces) == sentence
    else:
        assert "".join(pieces).replace(" ", "") == sentence.replace(" ", "")


_WORD = st.from_regex(r"[A-Za-z][a-z]{0,9}[.,;:!?]?", fullmatch=True) | st.sampled_from(
    ["Dr.", "e.g.", "3.14", "Mr.", '"Yes!"', "—", "U.S.", "why?!"]
)


@settings(deadline=None)
@given(
    st.lists(st.lists(_WORD, min_size=1, max_size=40), min_size=1, max_size=5),
    st.integers(min_value=10, max_value=120),
)
def test_plain_script_to_chunks_keeps_every_word(paragraphs: list[list[str]], max_chars: int) -> None:
    source = "\n\n".join(" ".join(words) for words in paragraphs)
    if not any(character.isalnum() for words in paragraphs for character in "".join(words)):
        return
    chunks = make_chunks(parse_script(source, "plain"), max_chars)
    assert all(len(chunk.text) <= max_chars for chunk in chunks)
    speakable = [words for words in paragraphs if any(c.isalnum() for c in "".join(words))]
    groups = _groups(chunks)
    assert len(groups) == len(speakable)
    for group, words in zip(groups, speakable, strict=True):
        if max(len(word) for word in words) <= max_chars:
            assert " ".join(chunk.text for chunk in group).split() == words
