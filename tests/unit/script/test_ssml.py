"""The SSML reader: every supported element and attribute value, errors at their line and column, hostile
XML refused quickly, and no written word ever lost, duplicated or reordered."""

from __future__ import annotations

import tracemalloc
from xml.sax.saxutils import escape, quoteattr

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.cost import CpuMeter
from worker.script import ScriptError, VoiceDirective, parse_document
from worker.script.document import MAX_BREAK_SECONDS, Pause, Piece, SentenceEnd, Speech, Words
from worker.script.ssml import MAX_DEPTH, SsmlScript, read_ssml

NS = 'xmlns="http://www.w3.org/2001/10/synthesis"'


def speak(body: str) -> str:
    return f"<speak>{body}</speak>"


def events(body: str) -> list[Speech | Pause]:
    return read_ssml(speak(body)).events


def said(*pieces: Piece | str, voice: str | None = None, rate: float | None = None) -> Words:
    """Words from pieces; a str is a plain piece."""
    return Words(tuple(Piece(p) if isinstance(p, str) else p for p in pieces), voice, rate)


def para(*items: Words | SentenceEnd | Pause | str) -> Speech:
    """A Speech; a str is plain words in the job's voice."""
    return Speech(tuple(said(item) if isinstance(item, str) else item for item in items))


def error(text: str) -> ScriptError:
    with pytest.raises(ScriptError) as caught:
        read_ssml(text)
    return caught.value


# The document root, paragraphs and sentences.


def test_a_minimal_script() -> None:
    assert read_ssml("<speak>Hello there.</speak>") == SsmlScript([para("Hello there.")], (), None)


def test_speak_takes_version_language_namespace_and_schema_location() -> None:
    script = read_ssml(
        '<?xml version="1.0" encoding="ISO-8859-1"?>\n'
        f'<speak version="1.1" xml:lang="en-GB" {NS}\n'
        '  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"\n'
        '  xsi:schemaLocation="http://www.w3.org/2001/10/synthesis '
        'http://www.w3.org/TR/speech-synthesis11/synthesis.xsd">\n'
        "  <p>Caf\u00e9.</p>\n"
        "</speak>\n"
    )
    # The declared encoding is ignored: the script is already text.
    assert script == SsmlScript([para("Caf\u00e9.")], (), "en-GB")


@pytest.mark.parametrize(
    ("attribute", "language"), [("", None), (' xml:lang=""', None), (' xml:lang="de"', "de")]
)
def test_the_language_is_that_of_speak(attribute: str, language: str | None) -> None:
    assert read_ssml(f"<speak{attribute}>Hallo.</speak>").language == language


def test_each_p_is_one_paragraph_and_layout_whitespace_between_them_is_nothing() -> None:
    text = "<speak>\n  <p>\n    One  two\n    three.\n  </p>\n\n  <p>Four.</p>\n</speak>"
    assert read_ssml(text).events == [para("One two three."), para("Four.")]


def test_inline_content_outside_p_forms_paragraphs_between_the_ps() -> None:
    text = speak('Before <emphasis>this</emphasis> one.<p>Inside.</p> After <sub alias="it">this</sub>.')
    assert read_ssml(text).events == [
        para("Before this one."),
        para("Inside."),
        para(said("After ", Piece("this", say="it"), ".")),
    ]


def test_s_ends_a_sentence_and_starts_one_after_words() -> None:
    assert events("<p>Lead in <s>One</s> <s>Two</s><s> </s>tail</p>") == [
        para("Lead in", SentenceEnd(), "One", SentenceEnd(), "Two", SentenceEnd(), "tail")
    ]
    assert events("<s>Alone.</s>") == [para("Alone.", SentenceEnd())]


def test_p_and_s_may_sit_inside_voice_and_prosody() -> None:
    text = speak('<voice name="Bob"><p>One.</p><prosody rate="fast"><s>Two.</s></prosody></voice>')
    assert read_ssml(text).events == [
        Speech((said("One.", voice="Bob"),)),
        Speech((said("Two.", voice="Bob", rate=1.25), SentenceEnd())),
    ]


# Breaks.


@pytest.mark.parametrize(
    ("time_", "seconds"),
    [
        ("500ms", 0.5),
        ("2s", 2.0),
        ("1.5s", 1.5),
        (".25s", 0.25),
        ("10s", 10.0),
        ("10000ms", 10.0),
        ("1MS", 0.001),
    ],
)
def test_break_time(time_: str, seconds: float) -> None:
    assert events(f'<p>a<break time="{time_}"/>b</p>') == [para("a", Pause(seconds), "b")]


@pytest.mark.parametrize(
    ("strength", "seconds"),
    [("x-weak", 0.1), ("weak", 0.25), ("medium", 0.5), ("strong", 1.0), ("x-strong", 2.0)],
)
def test_break_strength(strength: str, seconds: float) -> None:
    assert events(f'<p>a<break strength="{strength}"/>b</p>') == [para("a", Pause(seconds), "b")]


def test_break_defaults_to_medium_none_is_nothing_and_time_wins_over_strength() -> None:
    assert events("<p>a<break/>b</p>") == [para("a", Pause(0.5), "b")]
    assert events('<p>a <break strength="none"/>b</p>') == [para("a b")]
    assert events('<p>a<break strength="x-strong" time="300ms"/>b</p>') == [para("a", Pause(0.3), "b")]


def test_breaks_between_paragraphs_are_events_and_breaks_in_a_row_add_up() -> None:
    text = '<p>a<break time="1s"/><break time="250ms"/></p><break/><break strength="strong"/><p>b</p>'
    assert events(text) == [para("a", Pause(1.25)), Pause(1.5), para("b")]


def test_a_break_after_the_words_of_inline_content_falls_between_paragraphs() -> None:
    text = 'One <break time="2s"/>two<break time="1s"/><p>Three.</p><break time="1s"/>'
    assert events(text) == [para("One", Pause(2.0), "two"), Pause(1.0), para("Three."), Pause(1.0)]


def test_a_paragraph_of_breaks_only_is_a_pause_between_paragraphs() -> None:
    assert events('<p>a</p><p> <break time="2s"/> </p><p>b</p>') == [para("a"), Pause(2.0), para("b")]


def test_breaks_add_up_to_at_most_the_limit_even_across_paragraphs() -> None:
    assert events(
        f'<p>a<break time="{MAX_BREAK_SECONDS / 2:g}s"/></p><break time="{MAX_BREAK_SECONDS / 2:g}s"/>'
    )
    tenth = '<break strength="x-weak"/>'
    assert events("a" + tenth * 100 + "b" + tenth * 100) == [para("a", Pause(10.0), "b"), Pause(10.0)]
    caught = error(speak("<p>a" + tenth * 100 + "</p>\n" + tenth))
    assert (caught.message, caught.line, caught.column) == (
        "breaks in a row add up to 10.1 s; at most 10 s",
        2,
        1,
    )
    caught = error(speak('<p>a<break time="6s"/></p><p>...<break time="6s"/>b</p>'))
    assert caught.message.startswith("breaks in a row add up to 12 s")


# Voices.


def test_voice_reads_its_words_innermost_wins_and_default_is_the_jobs_voice() -> None:
    text = (
        "<speak>\n"
        '<p>Narrator. <voice name="Bob">Bob <voice name=" Old Mary ">Mary</voice> Bob again</voice>'
        ' <voice name="Bob"><voice name="DEFAULT">me</voice></voice></p>\n'
        '  <voice name="Nobody"/>\n'
        "</speak>"
    )
    script = read_ssml(text)
    assert script.events == [
        Speech(
            (
                said("Narrator. "),
                said("Bob ", voice="Bob"),
                said("Mary", voice="Old Mary"),
                said(" Bob again ", voice="Bob"),  # a space needs no voice: it stays in the open Words
                said("me"),
            )
        )
    ]
    # Every voice, used or not, at its start tag: the caller checks that each name resolves.
    assert script.directives == (
        VoiceDirective("Bob", 2, 14),
        VoiceDirective("Old Mary", 2, 36),
        VoiceDirective("Bob", 2, 92),
        VoiceDirective("DEFAULT", 2, 110),
        VoiceDirective("Nobody", 3, 3),
    )


# Prosody rate.


@pytest.mark.parametrize(
    ("rate", "multiplier"),
    [
        ("x-slow", 0.5),
        ("slow", 0.75),
        ("medium", None),
        ("fast", 1.25),
        ("x-fast", 1.5),
        ("default", None),
        ("80%", 0.8),
        ("100%", None),
        ("150.5%", 1.505),
        ("+10%", 1.1),
        ("-20%", 0.8),
        ("+0%", None),
        ("1.2", 1.2),
        ("2", 2.0),
        ("0.5", 0.5),
        (" 1.2 ", 1.2),
    ],
)
def test_prosody_rate(rate: str, multiplier: float | None) -> None:
    assert events(f'<p><prosody rate="{rate}">words</prosody></p>') == [para(said("words", rate=multiplier))]


def test_nested_rates_multiply_and_default_goes_back_to_the_voices_rate() -> None:
    text = (
        '<prosody rate="fast">a <prosody rate="x-slow">b <prosody rate="default">c</prosody></prosody>'
        "</prosody>"
    )
    assert events(f"<p>{text}</p>") == [para(said("a ", rate=1.25), said("b ", rate=0.625), said("c"))]
    text = '<prosody rate="x-fast"><prosody rate="+20%">a</prosody></prosody>'
    assert events(f"<p>{text}</p>") == [para(said("a", rate=1.8))]


def test_prosody_without_attributes_changes_nothing() -> None:
    assert events("<p>a <prosody>b</prosody></p>") == [para("a b")]


# say-as, sub, phoneme, emphasis.


@pytest.mark.parametrize(
    ("interpret_as", "fmt", "normalised"),
    [
        ("characters", None, "characters"),
        ("spell-out", None, "characters"),
        ("cardinal", None, "cardinal"),
        ("number", None, "cardinal"),
        ("ordinal", None, "ordinal"),
        ("telephone", None, "telephone"),
        ("date", None, "date"),
        *(("date", f, "date") for f in ["mdy", "dmy", "ymd", "md", "dm", "ym", "my", "y", "m", "d"]),
        ("time", None, "time"),
        *(("time", f, "time") for f in ["hms12", "hms24", "hm12", "hm24", "h12", "h24"]),
    ],
)
def test_say_as(interpret_as: str, fmt: str | None, normalised: str) -> None:
    attribute = "" if fmt is None else f' format="{fmt}"'
    text = f'<p>It is <say-as interpret-as="{interpret_as}"{attribute}> 12/3 </say-as>.</p>'
    assert events(text) == [para(said("It is ", Piece("12/3", interpret_as=normalised, format=fmt), " ."))]


def test_sub_keeps_the_written_text_and_the_spaces_around_it() -> None:
    text = '<p>Hello <sub alias="World  Wide\nWeb">WWW</sub> again</p>'
    [speech] = events(text)
    assert speech == para(said("Hello ", Piece("WWW", say="World Wide Web"), " again"))
    assert isinstance(speech.items[0], Words)
    assert "".join(piece.text for piece in speech.items[0].pieces) == "Hello WWW again"


def test_spaces_inside_shaped_elements_move_to_the_plain_text_around_them() -> None:
    text = '<p>a<sub alias="x">\n b  c </sub>d <sub alias="y">e</sub><sub alias="z">f</sub></p>'
    assert events(text) == [
        para(said("a ", Piece("b c", say="x"), " d ", Piece("e", say="y"), Piece("f", say="z")))
    ]


@pytest.mark.parametrize("alphabet", ['alphabet="ipa" ', ""])
def test_phoneme_is_ipa(alphabet: str) -> None:
    text = f'<p>A <phoneme {alphabet}ph=" t\u0259\u02c8m\u0251\u02d0to\u028a ">tomato</phoneme>.</p>'
    assert events(text) == [
        para(said("A ", Piece("tomato", phoneme="t\u0259\u02c8m\u0251\u02d0to\u028a"), "."))
    ]


@pytest.mark.parametrize(
    "level", ['level="strong"', 'level="moderate"', 'level="reduced"', 'level="none"', ""]
)
def test_emphasis_is_read_as_written(level: str) -> None:
    assert events(f"<p>Say <emphasis {level}>this</emphasis> now.</p>") == [para("Say this now.")]


def test_words_split_where_the_voice_or_rate_changes_and_spaces_stay_in_the_open_words() -> None:
    text = '<p>a <voice name="B"> </voice><sub alias="x">b</sub><prosody rate="slow"> c</prosody> d</p>'
    assert events(text) == [para(said("a ", Piece("b", say="x")), said(" c", rate=0.75), said(" d"))]


def test_xml_text_features_comments_cdata_and_references() -> None:
    text = "<p>Fish &amp; chips &lt;3 &#233;&#x00E9; <![CDATA[<raw> & ]]>ba<!-- a comment -->con</p>"
    assert events(text) == [para("Fish & chips <3 \u00e9\u00e9 <raw> & bacon")]


# Errors, at the offending tag, attribute or character.


@pytest.mark.parametrize(
    ("text", "message", "line", "column"),
    [
        ("<speak>\n  <p>Hi <blink>x</blink></p>\n</speak>", "unknown SSML element <blink>", 2, 9),
        ("<speak><audio src='a.wav'/></speak>", "SSML <audio> is not supported", 1, 8),
        ("<speak><mark name='m'/>a</speak>", "SSML <mark> is not supported", 1, 8),
        ("<speak>\n<p\n   id='x'>a</p></speak>", "unknown attribute 'id' on <p>", 3, 4),
        ("<speak><p xml:lang='fr'>a</p></speak>", "unknown attribute 'xml:lang' on <p>", 1, 11),
        ("<speak><voice name='a' gender='female'>x</voice></speak>", "voice gender is not supported", 1, 24),
        ("<speak><voice age='3'>x</voice></speak>", "voice age is not supported", 1, 15),
        ("<speak><voice>x</voice></speak>", "<voice> needs a non-empty name", 1, 8),
        ("<speak><voice name=' '>x</voice></speak>", "<voice> needs a non-empty name", 1, 15),
        ("<speak><voice name='" + "v" * 65 + "'>x</voice></speak>", "voice name has 65 characters", 1, 15),
        (
            "<speak><prosody rate='slow' pitch='high'>x</prosody></speak>",
            "prosody pitch is not supported",
            1,
            29,
        ),
        ("<speak><prosody volume='loud'>x</prosody></speak>", "prosody volume is not supported", 1, 17),
        (
            "<speak><prosody contour='(0%,+20Hz)'>x</prosody></speak>",
            "prosody contour is not supported",
            1,
            17,
        ),
        ("<speak><prosody range='low'>x</prosody></speak>", "prosody range is not supported", 1, 17),
        ("<speak><prosody duration='2s'>x</prosody></speak>", "prosody duration is not supported", 1, 17),
        ("<speak><prosody rate='speedy'>x</prosody></speak>", "prosody rate 'speedy' is not a rate", 1, 17),
        ("<speak><prosody rate='+1.2'>x</prosody></speak>", "prosody rate '+1.2' is not a rate", 1, 17),
        (
            "<speak><prosody rate='3'>x</prosody></speak>",
            "prosody rate '3' makes the speaking rate 3;",
            1,
            17,
        ),
        (
            "<speak><prosody rate='40%'>x</prosody></speak>",
            "prosody rate '40%' makes the speaking rate 0.4;",
            1,
            17,
        ),
        (
            "<speak><prosody rate='x-slow'><prosody rate='slow'>x</prosody></prosody></speak>",
            "prosody rate 'slow' makes the speaking rate 0.375; it must be from 0.5 to 2",
            1,
            40,
        ),
        (
            "<speak><break time='0s'/>a</speak>",
            "break time '0s' must be longer than 0 s and at most 10 s",
            1,
            15,
        ),
        ("<speak><break time='10.5s'/>a</speak>", "break time '10.5s' must be longer than 0 s", 1, 15),
        ("<speak><break time='2 sec'/>a</speak>", "break time '2 sec' is not a time", 1, 15),
        ("<speak><break strength='huge'/>a</speak>", "break strength 'huge' is not one of", 1, 15),
        ("<speak>a<break>now</break></speak>", "<break> must be empty", 1, 16),
        ("<speak>a<break><p/></break></speak>", "<break> must be empty", 1, 16),
        (
            "<speak><say-as interpret-as='money'>1</say-as></speak>",
            "say-as interpret-as 'money' is not one of",
            1,
            16,
        ),
        ("<speak><say-as>1</say-as></speak>", "<say-as> needs a non-empty interpret-as", 1, 8),
        (
            "<speak><say-as interpret-as='date' format='qq'>1</say-as></speak>",
            "say-as date format 'qq'",
            1,
            36,
        ),
        ("<speak><say-as interpret-as='ordinal' format='y'>1</say-as></speak>", "takes no format", 1, 39),
        (
            "<speak><say-as interpret-as='date' detail='1'>1</say-as></speak>",
            "say-as detail is not supported",
            1,
            36,
        ),
        (
            "<speak><say-as interpret-as='cardinal'>1<sub alias='x'>y</sub></say-as></speak>",
            "may contain only",
            1,
            41,
        ),
        ("<speak><say-as interpret-as='cardinal'> </say-as>a</speak>", "<say-as> has no text", 1, 8),
        ("<speak><sub>WWW</sub></speak>", "<sub> needs a non-empty alias", 1, 8),
        ("<speak><sub alias=''>WWW</sub></speak>", "<sub> needs a non-empty alias", 1, 13),
        ("<speak><sub alias='x'/>a</speak>", "<sub> has no text", 1, 8),
        (
            "<speak><phoneme alphabet='x-sampa' ph='t@'>a</phoneme></speak>",
            "phoneme alphabet 'x-sampa'",
            1,
            17,
        ),
        ("<speak><phoneme alphabet='ipa'>a</phoneme></speak>", "<phoneme> needs a non-empty ph", 1, 8),
        ("<speak><emphasis level='loud'>a</emphasis></speak>", "emphasis level 'loud' is not one of", 1, 18),
        ("<speak><p>a<p>b</p></p></speak>", "<p> inside <p>: paragraphs cannot be nested", 1, 12),
        ("<speak><p><voice name='a'><p>b</p></voice></p></speak>", "<p> inside <p>", 1, 27),
        ("<speak><s>a<p>b</p></s></speak>", "<p> cannot be inside <s>", 1, 12),
        ("<speak><s>a<s>b</s></s></speak>", "<s> inside <s>: sentences cannot be nested", 1, 12),
        ("<speak><emphasis><s>b</s></emphasis></speak>", "<s> cannot be inside <emphasis>", 1, 18),
        ("<speak><p><speak>a</speak></p></speak>", "<speak> may only be the root element", 1, 11),
        ("<p>Hello</p>", "the root element of an SSML script must be <speak>, not <p>", 1, 1),
        ("<Speak>Hello</Speak>", "the root element of an SSML script must be <speak>, not <Speak>", 1, 1),
        ("Hello", "an SSML script must be XML with a <speak> root element", 1, 1),
        ("<!-- just a comment -->", "an SSML script must be XML with a <speak> root element", 1, 24),
        ("<speak version='2.0'>a</speak>", "speak version '2.0' is not supported", 1, 8),
        (
            "<speak xmlns='http://example.com/'>a</speak>",
            "speak xmlns 'http://example.com/' is not supported",
            1,
            8,
        ),
        ("<speak xml:lang='english!'>a</speak>", "speak xml:lang 'english!' is not a language tag", 1, 8),
        ("<speak xmlns:x='urn:x'>a</speak>", "unknown attribute 'xmlns:x' on <speak>", 1, 8),
        ("<speak>\n  <p>a</q>\n</speak>", "malformed XML: mismatched tag", 2, 9),
        ("<speak>a", "the SSML script ends before its elements are closed", 1, 9),
        ("<speak>a</speak> b", "malformed XML: junk after document element", 1, 18),
        ("<speak><p a='1' a='2'>b</p></speak>", "malformed XML: duplicate attribute", 1, 17),
        ("<speak>\n<p>Caf\u00e9 \U0001f600 <b/></p></speak>", "unknown SSML element <b>", 2, 11),
        ("<speak> \n </speak>", "the SSML holds no text, only tags and breaks", 1, 1),
        ("<speak><p>...</p><break time='1s'/></speak>", "the SSML holds no text, only tags and breaks", 1, 1),
    ],
)
def test_errors_name_the_problem_at_its_line_and_column(
    text: str, message: str, line: int, column: int
) -> None:
    caught = error(text)
    assert message in caught.message, caught.message
    assert (caught.line, caught.column) == (line, column), caught


@pytest.mark.parametrize("text", ["", "   \n\t", "\ufeff"])
def test_an_empty_script_is_an_error(text: str) -> None:
    assert error(text).message == "the SSML script is empty"


def test_positions_follow_crlf_and_cr_line_ends() -> None:
    caught = error("<speak>\r\n<p>a</p>\r<p>b\r\n  <blink/></p></speak>")
    assert (caught.line, caught.column) == (4, 3)


# Hostile input: refused at once, before anything is expanded or fetched.

BILLION_LAUGHS = (
    '<?xml version="1.0"?>\n<!DOCTYPE speak [\n <!ENTITY lol "lol">\n'
    + "".join(
        f' <!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">\n' for i in range(1, 10)
    )
    + "]>\n<speak>&lol9;</speak>"
)


@pytest.mark.parametrize(
    ("text", "message", "line", "column"),
    [
        (BILLION_LAUGHS, "a DOCTYPE is not allowed", 2, 1),
        (
            '<?xml version="1.0"?><!DOCTYPE speak [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><speak>&xxe;</speak>',
            "a DOCTYPE is not allowed",
            1,
            22,
        ),
        (
            '<!DOCTYPE speak SYSTEM "http://example.com/ssml.dtd"><speak>a</speak>',
            "a DOCTYPE is not allowed",
            1,
            1,
        ),
        (
            '<!DOCTYPE speak [<!ENTITY % p SYSTEM "file:///etc/passwd"> %p;]><speak>a</speak>',
            "a DOCTYPE",
            1,
            1,
        ),
        ("<speak>\n  Fish &xxe; chips</speak>", "entity &xxe; is not allowed in SSML", 2, 8),
        ("<speak>A&nbsp;B</speak>", "entity &nbsp; is not allowed in SSML", 1, 9),
        ("<speak><p>A &eacute;</p></speak>", "entity &eacute; is not allowed in SSML", 1, 13),
        (
            '<?xml-stylesheet href="x.xsl"?><speak>a</speak>',
            "processing instruction <?xml-stylesheet?>",
            1,
            1,
        ),
        ("<speak>a<?php echo 1; ?></speak>", "processing instruction <?php?> is not allowed", 1, 9),
        ("<speak>\n  a\x01</speak>", "character U+0001 is not allowed in XML", 2, 4),
        ("<speak>a\ufffe</speak>", "character U+FFFE is not allowed in XML", 1, 9),
        ("<speak>a&#1;</speak>", "malformed XML: reference to invalid character number", 1, 9),
        ("<speak>\na\ud800</speak>", "character U+D800 is not allowed", 2, 2),
    ],
)
def test_hostile_and_invalid_xml_is_refused(text: str, message: str, line: int, column: int) -> None:
    caught = error(text)
    assert caught.message.startswith(message), caught.message
    assert (caught.line, caught.column) == (line, column), caught
    assert "root:" not in str(caught)  # nothing of /etc/passwd


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<speak>" + "<prosody>" * 100_000 + "x" + "</prosody>" * 100_000 + "</speak>", "nested more than"),
        ("<speak>" + "<emphasis>" * 100_000 + "x", "nested more than"),
        ("<speak>" + "<p>" * 100_000, "<p> inside <p>"),
        ("<speak>" + "<s>" * 100_000, "<s> inside <s>"),
        (BILLION_LAUGHS.replace("10", "1000"), "a DOCTYPE is not allowed"),
    ],
)
def test_deep_or_huge_hostile_input_fails_fast_in_bounded_memory(text: str, message: str) -> None:
    tracemalloc.start()
    meter = CpuMeter()
    try:
        caught = error(text)
        elapsed = meter.seconds()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert message in caught.message
    assert elapsed < 2.0
    assert peak < 4 * len(text) + 1_000_000  # the script's UTF-8 copy and little else


def test_nesting_up_to_the_limit_is_fine() -> None:
    depth = MAX_DEPTH - 1  # speak is one of them
    text = speak("<emphasis>" * depth + "deep" + "</emphasis>" * depth)
    assert read_ssml(text).events == [para("deep")]
    assert "nested more than" in error(speak("<emphasis>" * (depth + 1) + "x")).message


def test_a_long_script_reads_in_linear_time() -> None:
    unit = '<p>Word <voice name="Bob">and <sub alias="x">y</sub></voice> &amp; more.<break time="1s"/></p>\n'

    def seconds(count: int) -> float:
        meter = CpuMeter()
        script = read_ssml(speak(unit * count))
        assert len(script.directives) == count
        return meter.seconds()

    seconds(1000)  # warm up
    small, large = seconds(5_000), seconds(40_000)
    assert large < 8 * small * 3  # 8 times the text: about 8 times the time, far from 64


# Through the assembler: what the rest of Tome makes of the events.


def test_parse_document_reads_ssml_events_into_sentences_and_voices() -> None:
    text = speak(
        '<p>Visit <sub alias="the World Wide Web">WWW</sub>. It is big.<break time="1s"/></p>'
        '<p><voice name="Bob"><prosody rate="slow">Slowly.</prosody></voice></p>'
    )
    parsed = parse_document(text, "ssml")
    [chapter] = parsed.chapters
    assert chapter.paragraphs == (("Visit WWW.", "It is big."), ("Slowly.",))
    assert chapter.voices == (None, "Bob")
    assert [(s.rate, s.pause) for s in chapter.styles] == [(None, 1.0), (0.75, None)]
    assert parsed.directives == (VoiceDirective("Bob", 1, 95),)


# No word lost, duplicated or reordered, whatever supported markup wraps it.

WORD = st.text(alphabet="abcXYZ019\u00e9\u00df\U0001f600&<>'\".,", min_size=1, max_size=8).map(
    lambda w: "w" + w
)
SPACE = st.sampled_from([" ", "  ", "\n", "\t", " \r\n "])
SHAPED = st.sampled_from(
    [
        '<sub alias="said instead">{}</sub>',
        '<say-as interpret-as="characters">{}</say-as>',
        '<say-as interpret-as="date" format="dmy">{}</say-as>',
        '<phoneme alphabet="ipa" ph="p">{}</phoneme>',
    ]
)
RATE = st.sampled_from(["slow", "fast", "medium", "90%", "+10%", "-10%", "1.1"])


@st.composite
def content(draw: st.DrawFn, depth: int, in_s: bool, in_emphasis: bool) -> tuple[str, list[str]]:
    """Inline SSML and the words it holds, in order; every part separated by whitespace."""
    parts: list[str] = []
    words: list[str] = []
    for _ in range(draw(st.integers(1, 4))):
        kinds = ["words", "words", "shaped", "break"]
        if depth < 3:
            kinds += ["voice", "emphasis"] + ([] if in_s or in_emphasis else ["s"])
        if depth < 2:  # two nested rates stay in 0.5-2 (three "slow" would be 0.42: a clear 422)
            kinds.append("prosody")
        kind = draw(st.sampled_from(kinds))
        if kind == "words":
            chosen = draw(st.lists(WORD, min_size=1, max_size=5))
            parts.append(draw(SPACE).join(escape(w) for w in chosen))
            words += chosen
        elif kind == "shaped":
            chosen = draw(st.lists(WORD, min_size=1, max_size=3))
            parts.append(draw(SHAPED).format(draw(SPACE).join(escape(w) for w in chosen)))
            words += chosen
        elif kind == "break":
            parts.append(
                draw(st.sampled_from(['<break time="300ms"/>', '<break strength="none"/>', "<break/>"]))
            )
        else:
            inner, inner_words = draw(
                content(depth + 1, in_s or kind == "s", in_emphasis or kind == "emphasis")
            )
            attributes = {
                "voice": f" name={quoteattr(draw(st.sampled_from(['Bob', 'Mary', 'default'])))}",
                "prosody": f' rate="{draw(RATE)}"',
            }.get(kind, "")
            parts.append(f"<{kind}{attributes}>{inner}</{kind}>")
            words += inner_words
    return draw(SPACE).join(parts), words


@st.composite
def documents(draw: st.DrawFn) -> tuple[str, list[str]]:
    parts: list[str] = []
    words: list[str] = []
    for _ in range(draw(st.integers(1, 4))):
        inner, inner_words = draw(content(0, False, False))
        parts.append(f"<p>{inner}</p>" if draw(st.booleans()) else inner)
        words += inner_words
    return speak(draw(SPACE).join(parts)), words


@settings(max_examples=300, deadline=None)
@given(documents())
def test_the_written_text_of_all_pieces_is_the_words_in_order(document: tuple[str, list[str]]) -> None:
    text, words = document
    if not words:  # only breaks
        with pytest.raises(ScriptError, match="nothing to read"):
            read_ssml(text)
        return
    written: list[str] = []
    for event in read_ssml(text).events:
        if isinstance(event, Speech):
            for item in event.items:
                if isinstance(item, Words):
                    # Within one Words the pieces join as written: the spaces are in them.
                    written.append("".join(piece.text for piece in item.pieces))
                    for piece in item.pieces:
                        if piece.say or piece.interpret_as or piece.phoneme:
                            assert piece.text == piece.text.strip()
                            assert "  " not in piece.text
    assert " ".join(written).split() == words
