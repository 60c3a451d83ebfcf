# ruff: noqa: RUF001  (IPA letters are the test data)
"""Pronunciation lexicons (pure): whole-word matching, case, precedence, limits, PLS round trip."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.cost import CpuMeter
from worker.script.lexicon import (
    MAX_ENTRIES,
    Entry,
    Lexicon,
    LexiconError,
    check_entries,
    check_entry,
    compile_lexicons,
)
from worker.script.pls import MAX_PLS_BYTES, PLS_NS, read_pls, write_pls


def apply(text: str, *lexicons: Lexicon, phonemes: bool = False) -> str:
    return compile_lexicons(list(lexicons), phonemes=phonemes).apply(text)[0]


def test_whole_words_only_and_case_insensitive_by_default() -> None:
    names = Lexicon("names", [Entry("Siobhan", "shiv-awn"), Entry("cat", "kat")])
    assert apply("siobhan met SIOBHAN's cat.", names) == "shiv-awn met shiv-awn's kat."
    assert apply("A catalogue of bobcats; concatenate.", names) == "A catalogue of bobcats; concatenate."


def test_case_sensitive_entries_match_only_their_case() -> None:
    lexicon = Lexicon("l", [Entry("US", "United States", case_sensitive=True)])
    assert apply("Tell us about the US.", lexicon) == "Tell us about the United States."


def test_the_longest_grapheme_wins_then_the_first_lexicon() -> None:
    first = Lexicon("first", [Entry("New York", "Noo Yawk")])
    second = Lexicon("second", [Entry("New York City", "the big apple"), Entry("new york", "NY")])
    text, fired = compile_lexicons([first, second]).apply("New York City and New York.")
    assert text == "the big apple and Noo Yawk."
    assert [(f.rule, f.written, f.spoken) for f in fired] == [
        ("lexicon:second", "New York City", "the big apple"),
        ("lexicon:first", "New York", "Noo Yawk"),
    ]


def test_graphemes_with_punctuation_and_non_latin_letters() -> None:
    lexicon = Lexicon("l", [Entry("Dr.", "Doctor"), Entry("AT&T", "A T and T"), Entry("Zoë", "Zo-ee")])
    assert apply("Dr. Who rang AT&T for Zoë.", lexicon) == "Doctor Who rang A T and T for Zo-ee."
    greek = Lexicon("el", [Entry("Αθήνα", "Athína")])
    assert apply("Στην Αθήνα.", greek) == "Στην Athína."


def test_a_rewritten_word_is_not_matched_again() -> None:
    lexicon = Lexicon("l", [Entry("a", "b c"), Entry("b", "x")])
    assert apply("a b", lexicon) == "b c x"


def test_phoneme_only_entries_are_skipped_with_a_warning_when_the_engine_cannot_take_them() -> None:
    lexicon = Lexicon("ipa", [Entry("tomato", None, "təˈmɑːtəʊ"), Entry("potato", "po-tah-to", "pəˈteɪtəʊ")])
    compiled = compile_lexicons([lexicon], phonemes=False, engine="espeak")
    assert compiled.apply("tomato potato")[0] == "tomato po-tah-to"
    [warning] = compiled.warnings
    assert "tomato" in warning
    assert "espeak" in warning


@pytest.mark.parametrize("grapheme", ["a.*b", "[abc]", "(x|y)+", "\\d+", "x{2,}", "^start", "end$", "a?"])
def test_a_grapheme_that_looks_like_a_pattern_is_refused(grapheme: str) -> None:
    with pytest.raises(LexiconError, match="not patterns"):
        check_entry(Entry(grapheme, "x"), 3)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (Entry("", "x"), "empty"),
        (Entry("   ", "x"), "empty"),
        (Entry("x" * 101, "y"), "longer than 100"),
        (Entry("word"), "alias or a phoneme"),
        (Entry("word", "  "), "alias or a phoneme"),
        (Entry("'tis", "tiz"), "start with a letter or digit"),
        (Entry("tab\u0007bell", "x"), "no word contains"),
        (Entry("word", "bad\u200balias"), "control"),
    ],
)
def test_bad_entries_are_refused_naming_the_problem(entry: Entry, message: str) -> None:
    with pytest.raises(LexiconError, match=message) as caught:
        check_entry(entry, 7)
    assert caught.value.index == 7


def test_at_most_max_entries_and_the_check_is_fast() -> None:
    entries = [Entry(f"word{i}", f"alias {i}") for i in range(MAX_ENTRIES + 5000)]
    meter = CpuMeter()
    with pytest.raises(LexiconError, match=f"at most {MAX_ENTRIES}"):
        check_entries(entries)
    assert meter.seconds() < 1.0
    assert len(check_entries(entries[:MAX_ENTRIES])) == MAX_ENTRIES


def test_matching_costs_a_lookup_per_word_not_a_scan_per_entry() -> None:
    """A full lexicon on a novel-length text: every entry sharing a first word is the worst case."""
    lexicon = Lexicon("big", [Entry(f"the word{i}", f"alias{i}") for i in range(MAX_ENTRIES)])
    compiled = compile_lexicons([lexicon] * 20)
    text = "the word999 and the end. " * 4000
    meter = CpuMeter()
    result, fired = compiled.apply(text)
    elapsed = meter.seconds()
    assert result.count("alias999") == 4000
    assert len(fired) == 4000
    print(f"lexicon apply: {len(text)} chars in {elapsed:.3f} s")


WORDS = st.text(alphabet="abcXYZ é", min_size=1, max_size=30)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["cat", "dog", "hot dog", "Cat", "x"]), min_size=1, max_size=20), WORDS)
def test_text_without_graphemes_is_unchanged_and_matches_are_whole_words(
    words: list[str], filler: str
) -> None:
    lexicon = Lexicon("l", [Entry("hot dog", "HOTDOG"), Entry("cat", "CAT")])
    text = " ".join(words)
    result = apply(text, lexicon)
    expected = " ".join(words).replace("hot dog", "HOTDOG")
    expected = " ".join("CAT" if w.casefold() == "cat" else w for w in expected.split(" "))
    assert result == expected
    assert apply(filler, Lexicon("l", [Entry("www", "q")])) == filler  # no "w" in the filler alphabet


# PLS -----------------------------------------------------------------------------------------------

PLS = f"""<?xml version="1.0" encoding="UTF-8"?>
<lexicon version="1.0" xmlns="{PLS_NS}" alphabet="ipa" xml:lang="en-GB">
  <lexeme><grapheme>W3C</grapheme><alias>World Wide Web Consortium</alias></lexeme>
  <lexeme><grapheme>tomato</grapheme><grapheme>tomatoes</grapheme><phoneme>təˈmɑːtəʊ</phoneme></lexeme>
  <lexeme><grapheme>Siobhan</grapheme><phoneme>ʃɪˈvɔːn</phoneme><alias>shiv-awn</alias>
    <example>Siobhan rang.</example></lexeme>
</lexicon>
""".encode()


def test_pls_import_reads_every_grapheme_alias_and_phoneme() -> None:
    pls = read_pls(PLS, case_sensitive=True)
    assert pls.language == "en-GB"
    assert pls.entries == [
        Entry("W3C", "World Wide Web Consortium", None, True),
        Entry("tomato", None, "təˈmɑːtəʊ", True),
        Entry("tomatoes", None, "təˈmɑːtəʊ", True),
        Entry("Siobhan", "shiv-awn", "ʃɪˈvɔːn", True),
    ]


def test_pls_round_trip() -> None:
    entries = read_pls(PLS).entries
    again = read_pls(write_pls(entries, "en-gb"))
    assert again.entries == entries
    assert again.language == "en-gb"


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaa">]><lexicon/>', "DTD"),
        (b"<lexicon", "not well-formed"),
        (b"<lexicon xmlns='urn:other'/>", "root element"),
        (f"<lexicon xmlns='{PLS_NS}' alphabet='x-sampa'/>".encode(), "x-sampa"),
        (f"<lexicon xmlns='{PLS_NS}'><lexeme><alias>x</alias></lexeme></lexicon>".encode(), "no <grapheme>"),
        (
            f"<lexicon xmlns='{PLS_NS}'><lexeme><grapheme>a.*</grapheme><alias>x</alias></lexeme>"
            "</lexicon>".encode(),
            "not patterns",
        ),
        (
            f"<lexicon xmlns='{PLS_NS}'><lexeme><grapheme>a</grapheme><bogus/></lexeme></lexicon>".encode(),
            "bogus",
        ),
        (b"x" * (MAX_PLS_BYTES + 1), "larger than"),
    ],
)
def test_bad_pls_documents_are_refused_naming_the_problem(document: bytes, message: str) -> None:
    with pytest.raises(LexiconError, match=message):
        read_pls(document)


def test_a_pls_with_thousands_of_lexemes_is_refused_quickly() -> None:
    lexemes = "".join(f"<lexeme><grapheme>w{i}</grapheme><alias>a</alias></lexeme>" for i in range(5000))
    document = f"<lexicon xmlns='{PLS_NS}'>{lexemes}</lexicon>".encode()
    meter = CpuMeter()
    with pytest.raises(LexiconError, match=f"at most {MAX_ENTRIES}"):
        read_pls(document)
    assert meter.seconds() < 1.0
