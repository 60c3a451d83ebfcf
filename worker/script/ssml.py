"""SSML scripts to reader events (pure): the subset of SSML 1.1 that Tome can honour, and nothing else.

:func:`read_ssml` turns a ``<speak>`` document into the events of :mod:`worker.script.document`: ``<p>`` and
``<s>`` into :class:`Speech` and :class:`SentenceEnd`, ``<break>`` into a :class:`Pause`, ``<voice>``
and ``<prosody rate>`` into the voice and rate of the :class:`Words` inside (each voice is also reported
as a :class:`VoiceDirective` so the caller can check that its name resolves), and ``<say-as>``,
``<sub>`` and ``<phoneme>`` into shaped :class:`Piece` objects that the normaliser and the engines
honour later. ``<emphasis>`` is checked and read as written: the engines have no emphasis control.

Everything else is an error with its 1-based line and column, never silently dropped: another element
or attribute, an attribute Tome cannot honour, malformed XML, and, as hardening, any DOCTYPE, an entity
other than XML's five, a processing instruction, or nesting deeper than MAX_DEPTH. The reader is one
expat pass, linear in the length of the script.

See docs/scripts.md, "SSML" (each element's attributes, values and limits, and how events are built).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NoReturn
from xml.parsers import expat

from .document import MAX_BREAK_SECONDS, Pause, Piece, SentenceEnd, Speech, Words
from .errors import EmptyScript, ScriptError
from .voices import MAX_VOICE_NAME, VoiceDirective

SSML_NAMESPACE = "http://www.w3.org/2001/10/synthesis"
XSI_NAMESPACE = "http://www.w3.org/2001/XMLSchema-instance"
VERSIONS = frozenset({"1.0", "1.1"})
# Real SSML nests a handful of elements; the bound keeps hostile input (100,000 nested tags) cheap.
MAX_DEPTH = 64

# Seconds of silence for each break strength. "none" is an explicit "no break here" (nothing is added).
BREAK_STRENGTHS = {"none": 0.0, "x-weak": 0.1, "weak": 0.25, "medium": 0.5, "strong": 1.0, "x-strong": 2.0}
# Multipliers of the rate around a prosody element for each rate keyword.
RATES = {"x-slow": 0.5, "slow": 0.75, "medium": 1.0, "fast": 1.25, "x-fast": 1.5}
# The speaking rates (multipliers of the voice's own rate) a script may ask for.
RATE_RANGE = (0.5, 2.0)

# say-as interpret-as values and the name the normaliser knows them by.
INTERPRET_AS = {
    "characters": "characters",
    "spell-out": "characters",
    "cardinal": "cardinal",
    "number": "cardinal",
    "ordinal": "ordinal",
    "date": "date",
    "time": "time",
    "telephone": "telephone",
}
# say-as formats, for the interpret-as values that take one (the W3C say-as note's date and time formats).
FORMATS = {
    "date": frozenset({"mdy", "dmy", "ymd", "md", "dm", "ym", "my", "y", "m", "d"}),
    "time": frozenset({"hms12", "hms24", "hm12", "hm24", "h12", "h24"}),
}
EMPHASIS_LEVELS = frozenset({"strong", "moderate", "reduced", "none"})

# The attributes each supported element may carry.
_ATTRIBUTES: dict[str, frozenset[str]] = {
    "speak": frozenset({"version", "xml:lang", "xmlns", "xmlns:xsi", "xsi:schemaLocation"}),
    "p": frozenset(),
    "s": frozenset(),
    "break": frozenset({"time", "strength"}),
    "voice": frozenset({"name"}),
    "prosody": frozenset({"rate"}),
    "say-as": frozenset({"interpret-as", "format"}),
    "sub": frozenset({"alias"}),
    "phoneme": frozenset({"alphabet", "ph"}),
    "emphasis": frozenset({"level"}),
}
# Attributes SSML defines on supported elements that Tome cannot honour: named as unsupported, not unknown.
_UNSUPPORTED_ATTRIBUTES = {
    "voice": frozenset({"gender", "age", "variant", "languages", "required", "ordering", "onvoicefailure"}),
    "prosody": frozenset({"pitch", "volume", "contour", "range", "duration"}),
    "say-as": frozenset({"detail"}),
}
# SSML elements Tome does not support: named as unsupported, not unknown.
_UNSUPPORTED_ELEMENTS = frozenset(
    {"audio", "desc", "lang", "lexicon", "lookup", "mark", "meta", "metadata", "token", "w"}
)
# Elements whose content is only text, which becomes one piece.
_TEXT_ONLY = frozenset({"say-as", "sub", "phoneme"})
# Elements that are inline content: outside a <p> they open a paragraph of their own.
_INLINE = frozenset({"s", "emphasis"}) | _TEXT_ONLY

_XML_SPACE = re.compile(r"[ \t\r\n]+")
_NUMBER = r"[0-9]{1,6}(?:\.[0-9]{1,6})?|\.[0-9]{1,6}"
_TIME = re.compile(rf"(?P<value>{_NUMBER})(?P<unit>ms|s)", re.IGNORECASE)
_RATE_PERCENT = re.compile(rf"(?P<sign>[+-]?)(?P<value>{_NUMBER})%")
_RATE_NUMBER = re.compile(_NUMBER)
_LANGUAGE = re.compile(r"[A-Za-z]{2,8}(?:[-_][A-Za-z0-9]{1,8}){0,6}")
# One attribute of a (well-formed) start tag, to find where an attribute stands.
_ATTRIBUTE = re.compile(rb"[ \t\r\n]+([^ \t\r\n=/>]+)[ \t\r\n]*=[ \t\r\n]*(?:\"[^\"]*\"|'[^']*')")
_ENTITY = re.compile(rb"&([^;\s&<]{1,40});")

_Key = tuple[str | None, float | None]  # the voice and rate of a run of words


@dataclass(frozen=True)
class SsmlScript:
    """An SSML script read: its events in document order, every ``<voice>`` in it (at its start tag,
    whether or not it holds words), and the ``xml:lang`` of ``<speak>`` (None when absent or empty)."""

    events: list[Speech | Pause]
    directives: tuple[VoiceDirective, ...]
    language: str | None


def read_ssml(text: str) -> SsmlScript:
    """Read an SSML script (see the module docstring for what is supported).

    Raises :class:`ScriptError` with the line and column (1-based, in characters) of the offending tag,
    attribute or character for anything unsupported, malformed or hostile, and for a script with
    nothing to say.
    """
    return _Reader(text.removeprefix("\ufeff")).read()


@dataclass
class _Frame:
    """An open element: its tag, where its start tag is (a byte index), and what it passes to its content."""

    tag: str
    index: int
    voice: str | None = None
    rate: float = 1.0
    in_p: bool = False
    in_s: bool = False
    in_emphasis: bool = False
    attributes: dict[str, str] = field(default_factory=dict)
    text: list[str] = field(default_factory=list)  # a text-only element's content so far

    @property
    def key(self) -> _Key:
        return self.voice, None if self.rate == 1.0 else self.rate


class _Paragraph:
    """Builds one Speech from text, shaped pieces, sentence ends and pauses.

    Whitespace is collapsed to single spaces that stay in the plain text around shaped pieces, so the
    written texts of the pieces join to the paragraph as written. Leading spaces (at the start, after a
    sentence end or a pause) are dropped and trailing ones stripped before such a boundary.
    """

    def __init__(self, explicit: bool) -> None:
        self.explicit = explicit  # a <p>, rather than inline content directly in <speak>, <voice>...
        self.items: list[Words | SentenceEnd | Pause] = []
        self.key: _Key | None = None  # voice and rate of the open Words; None when none is open
        self.pieces: list[Piece] = []  # the open Words' finished pieces
        self.plain: list[str] = []  # plain text after them, not yet a piece
        self.space = True  # what is written so far ends at a space or a boundary
        self.sentence = False  # words since the last sentence end

    def text(self, chunk: str, key: _Key) -> None:
        """Plain text, whitespace already collapsed."""
        if self.space:
            chunk = chunk.lstrip(" ")
        if not chunk:
            return
        # A space alone needs no voice: it stays in the open Words rather than opening one.
        if chunk != " " or self.key is None:
            self._switch(key)
        self.plain.append(chunk)
        self.space = chunk.endswith(" ")
        self.sentence = self.sentence or chunk != " "

    def shaped(self, piece: Piece, before: bool, after: bool, key: _Key) -> None:
        """A shaped piece (its text stripped), with a space before and after it where one was written."""
        if before:
            self.text(" ", key)
        self._switch(key)
        if self.plain:
            self.pieces.append(Piece("".join(self.plain)))
            self.plain = []
        self.pieces.append(piece)
        self.space = False
        self.sentence = True
        if after:
            self.text(" ", key)

    def sentence_end(self) -> None:
        if self.sentence:
            self._close_words()
            self.items.append(SentenceEnd())
            self.sentence = False
            self.space = True

    def pause(self, seconds: float) -> None:
        self._close_words()
        last = self.items[-1] if self.items else None
        if isinstance(last, Pause):
            self.items[-1] = Pause(round(last.seconds + seconds, 3))
        else:
            self.items.append(Pause(seconds))
        self.space = True

    def finish(self) -> tuple[Speech | None, list[Pause]]:
        """The Speech (None if it has no words) and the pauses that follow it between paragraphs: those
        after the last words of an inline-content paragraph, or all of them if it has no words."""
        self._close_words()
        items = self.items
        after: list[Pause] = []
        if not self.explicit:
            while items and isinstance(last := items[-1], Pause):
                after.insert(0, last)
                items.pop()
        if not any(isinstance(item, Words) for item in items):
            return None, [item for item in items if isinstance(item, Pause)] + after
        return Speech(tuple(items)), after

    def _switch(self, key: _Key) -> None:
        if self.key != key:
            self._close_words(strip=False)
            self.key = key

    def _close_words(self, strip: bool = True) -> None:
        if self.plain:
            text = "".join(self.plain)
            text = text.rstrip(" ") if strip else text
            if text:
                self.pieces.append(Piece(text))
            self.plain = []
        if self.pieces and self.key is not None:
            voice, rate = self.key
            self.items.append(Words(tuple(self.pieces), voice, rate))
        self.pieces = []
        self.key = None


class _Reader:
    """One pass of expat over the script; the handlers build the events as elements open and close."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.data = b""
        self.cursor = _Cursor(self.data)
        self.parser = expat.ParserCreate(encoding="UTF-8")  # overrides any encoding the script declares
        self.stack: list[_Frame] = []
        self.events: list[Speech | Pause] = []
        self.directives: list[VoiceDirective] = []
        self.language: str | None = None
        self.paragraph: _Paragraph | None = None
        self.pending: list[str] = []  # character data not yet given to the element it is in
        self.pending_index = 0  # where it starts
        self.breaks = 0.0  # seconds of breaks since the last words
        self.spoken = False  # any words at all
        self.rooted = False  # the root element has started

    def read(self) -> SsmlScript:
        try:
            self.data = self.text.encode("utf-8")
            self.cursor = _Cursor(self.data)
        except UnicodeEncodeError as exc:
            code = ord(self.text[exc.start])
            raise ScriptError(
                f"character U+{code:04X} is not allowed", *_position(self.text, exc.start)
            ) from exc
        if not self.text.strip():
            raise ScriptError("the SSML script is empty")
        self._harden()
        parser = self.parser
        # No buffer_text: expat would report buffered text at the position of the tag after it.
        parser.ordered_attributes = True
        parser.StartElementHandler = self._start
        parser.EndElementHandler = self._end
        parser.CharacterDataHandler = self._characters
        parser.ProcessingInstructionHandler = self._instruction
        try:
            parser.Parse(self.data, True)
        except expat.ExpatError as exc:
            self._malformed(exc.code, parser.ErrorByteIndex)
        return SsmlScript(self.events, tuple(self.directives), self.language)

    def _harden(self) -> None:
        """What defusedxml does to expat, stricter: no DOCTYPE at all, so there are no DTDs, no entity
        declarations (nothing to expand: no billion laughs) and no external entities (no file reads)."""
        parser = self.parser
        parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
        parser.StartDoctypeDeclHandler = self._doctype
        # Unreachable once a DOCTYPE is refused; set all the same, as defusedxml does.
        parser.EntityDeclHandler = self._entity_declaration
        parser.UnparsedEntityDeclHandler = self._unparsed_entity
        parser.ExternalEntityRefHandler = self._external_entity
        parser.SkippedEntityHandler = self._skipped_entity

    # Hardening handlers: each refuses what it is told about.

    def _doctype(self, name: str, system_id: str | None, public_id: str | None, internal: int) -> NoReturn:
        # Expat reports the declaration after its name: point at its "<!DOCTYPE".
        start = self.data.rfind(b"<!", 0, self.parser.CurrentByteIndex + 1)
        self._fail(
            "a DOCTYPE is not allowed in SSML (no DTDs, entity declarations or external resources)",
            start if start >= 0 else None,
        )

    def _entity_declaration(self, name: str, *args: object) -> NoReturn:
        self._fail(f"entity declaration {name!r} is not allowed in SSML")

    def _unparsed_entity(self, name: str, *args: object) -> NoReturn:
        self._fail(f"entity declaration {name!r} is not allowed in SSML")

    def _external_entity(self, context: str | None, *args: object) -> NoReturn:
        self._fail("external entities are not allowed in SSML")

    def _skipped_entity(self, name: str, is_parameter: int) -> NoReturn:
        self._fail(f"entity &{name}; is not allowed in SSML")

    def _instruction(self, target: str, data: str) -> NoReturn:
        self._fail(f"processing instruction <?{target}?> is not allowed in SSML")

    # Content.

    def _characters(self, data: str) -> None:
        if not self.pending:
            self.pending_index = self.parser.CurrentByteIndex
        self.pending.append(data)

    def _flush(self) -> None:
        """Give the character data read since the last tag to the element it is in."""
        if not self.pending or not self.stack:  # expat reports no text outside the root; be safe
            self.pending = []
            return
        raw = "".join(self.pending)
        self.pending = []
        frame = self.stack[-1]
        if frame.tag in _TEXT_ONLY:
            frame.text.append(raw)
            return
        if frame.tag == "break":
            if raw.strip(" \t\r\n"):
                self._fail("<break> must be empty", self.pending_index)
            return
        chunk = _XML_SPACE.sub(" ", raw)
        if chunk == " " and self.paragraph is None:
            return  # layout between paragraphs
        self._words(chunk)
        self._open_paragraph().text(chunk, frame.key)

    def _start(self, tag: str, attributes: list[str]) -> None:
        self._flush()
        index = self.parser.CurrentByteIndex
        parent = self.stack[-1] if self.stack else None
        if len(self.stack) >= MAX_DEPTH:
            self._fail(f"elements are nested more than {MAX_DEPTH} deep", index)
        if parent is None and tag != "speak":
            self._fail(f"the root element of an SSML script must be <speak>, not <{tag}>", index)
        if tag not in _ATTRIBUTES:
            if tag in _UNSUPPORTED_ELEMENTS:
                self._fail(f"SSML <{tag}> is not supported", index)
            self._fail(f"unknown SSML element <{tag}>", index)
        if parent is not None:
            self._check_parent(tag, parent, index)
        pairs = dict(zip(attributes[::2], attributes[1::2], strict=True))
        for name in pairs:
            if name not in _ATTRIBUTES[tag]:
                where = self._attribute_index(index, name)
                if name in _UNSUPPORTED_ATTRIBUTES.get(tag, ()):
                    self._fail(f"{tag} {name} is not supported", where)
                self._fail(f"unknown attribute {name!r} on <{tag}>", where)
        frame = _Frame(tag, index, attributes=pairs)
        if parent is not None:
            frame.voice, frame.rate = parent.voice, parent.rate
            frame.in_p, frame.in_s, frame.in_emphasis = parent.in_p, parent.in_s, parent.in_emphasis
        self._open(frame)
        self.stack.append(frame)
        self.rooted = True

    def _check_parent(self, tag: str, parent: _Frame, index: int) -> None:
        if tag == "speak":
            self._fail("<speak> may only be the root element", index)
        if parent.tag in _TEXT_ONLY:
            self._fail(f"<{parent.tag}> may contain only text, not <{tag}>", index)
        if parent.tag == "break":
            self._fail("<break> must be empty", index)
        if tag == "p" and parent.in_p:
            self._fail("<p> inside <p>: paragraphs cannot be nested", index)
        if tag == "s" and parent.in_s:
            self._fail("<s> inside <s>: sentences cannot be nested", index)
        if tag in {"p", "s"} and (parent.in_s or parent.in_emphasis):
            inside = "s" if parent.in_s else "emphasis"
            self._fail(f"<{tag}> cannot be inside <{inside}>", index)

    def _open(self, frame: _Frame) -> None:
        """What an element's start tag does; ``frame`` inherits from its parent and is not yet pushed."""
        tag, attributes = frame.tag, frame.attributes
        if tag in _INLINE:
            self._open_paragraph()
        if tag == "speak":
            self._speak(frame.index, attributes)
        elif tag == "p":
            self._close_paragraph()
            self.paragraph = _Paragraph(explicit=True)
            frame.in_p = True
        elif tag == "s":
            self._open_paragraph().sentence_end()
            frame.in_s = True
        elif tag == "break":
            self._break(frame.index, attributes)
        elif tag == "voice":
            frame.voice = self._voice(frame.index, attributes)
        elif tag == "prosody":
            frame.rate = self._rate(frame.index, frame.rate, attributes)
        elif tag == "emphasis":
            level = attributes.get("level")
            if level is not None and level not in EMPHASIS_LEVELS:
                where = self._attribute_index(frame.index, "level")
                self._fail(f"emphasis level {level!r} is not one of {_listed(EMPHASIS_LEVELS)}", where)
            frame.in_emphasis = True
        elif tag == "say-as":
            self._say_as(frame.index, attributes)
        elif tag == "sub":
            self._required(frame.index, tag, attributes, "alias")
        elif tag == "phoneme":
            alphabet = attributes.get("alphabet", "ipa")
            if alphabet != "ipa":
                where = self._attribute_index(frame.index, "alphabet")
                self._fail(
                    f'phoneme alphabet {alphabet!r} is not supported: write IPA (alphabet="ipa")', where
                )
            self._required(frame.index, tag, attributes, "ph")

    def _end(self, tag: str) -> None:
        self._flush()
        frame = self.stack.pop()
        if tag == "p":
            self._close_paragraph()
        elif tag == "s":
            self._open_paragraph().sentence_end()
        elif tag in _TEXT_ONLY:
            self._piece(frame)
        elif tag == "speak":
            self._close_paragraph()
            if not self.spoken:
                raise EmptyScript(
                    "the script has nothing to read: the SSML holds no text, only tags and breaks",
                    *self.cursor.at(max(frame.index, 0)),
                )

    def _open_paragraph(self) -> _Paragraph:
        """The paragraph being built; inline content outside any <p> opens one."""
        if self.paragraph is None:
            self.paragraph = _Paragraph(explicit=False)
        return self.paragraph

    def _close_paragraph(self) -> None:
        if self.paragraph is None:
            return
        speech, pauses = self.paragraph.finish()
        self.paragraph = None
        if speech is not None:
            self.events.append(speech)
        for pause in pauses:
            self._pause_event(pause.seconds)

    def _pause_event(self, seconds: float) -> None:
        """A pause between paragraphs, added to one right before it."""
        last = self.events[-1] if self.events else None
        if isinstance(last, Pause):
            self.events[-1] = Pause(round(last.seconds + seconds, 3))
        else:
            self.events.append(Pause(seconds))

    def _words(self, written: str) -> None:
        """Note written text: words (a letter or digit) end a run of breaks."""
        if any(character.isalnum() for character in written):
            self.breaks = 0.0
            self.spoken = True

    # Elements.

    def _speak(self, index: int, attributes: dict[str, str]) -> None:
        checks = (("version", VERSIONS), ("xmlns", {SSML_NAMESPACE}), ("xmlns:xsi", {XSI_NAMESPACE}))
        for name, allowed in checks:
            value = attributes.get(name)
            if value is not None and value not in allowed:
                where = self._attribute_index(index, name)
                self._fail(f"speak {name} {value!r} is not supported (supported: {_listed(allowed)})", where)
        language = attributes.get("xml:lang", "").strip()
        if language and _LANGUAGE.fullmatch(language) is None:
            where = self._attribute_index(index, "xml:lang")
            self._fail(f"speak xml:lang {language!r} is not a language tag such as en or en-GB", where)
        self.language = language or None

    def _break(self, index: int, attributes: dict[str, str]) -> None:
        time = attributes.get("time")
        if time is not None:
            match = _TIME.fullmatch(time.strip())
            where = self._attribute_index(index, "time")
            if match is None:
                self._fail(f"break time {time!r} is not a time: write e.g. 500ms or 1.5s", where)
            seconds = float(match["value"]) / (1000.0 if match["unit"].lower() == "ms" else 1.0)
            if not 0 < seconds <= MAX_BREAK_SECONDS:
                self._fail(
                    f"break time {time!r} must be longer than 0 s and at most {MAX_BREAK_SECONDS:g} s", where
                )
        else:
            strength = attributes.get("strength", "medium")
            if strength not in BREAK_STRENGTHS:
                where = self._attribute_index(index, "strength")
                self._fail(f"break strength {strength!r} is not one of {_listed(BREAK_STRENGTHS)}", where)
            seconds = BREAK_STRENGTHS[strength]
            if seconds == 0:
                return
        total = self.breaks + seconds
        if total > MAX_BREAK_SECONDS + 1e-9:
            self._fail(f"breaks in a row add up to {total:g} s; at most {MAX_BREAK_SECONDS:g} s", index)
        self.breaks = round(total, 6)
        if self.paragraph is not None:
            self.paragraph.pause(seconds)
        else:
            self._pause_event(seconds)

    def _voice(self, index: int, attributes: dict[str, str]) -> str | None:
        name = self._required(index, "voice", attributes, "name")
        if len(name) > MAX_VOICE_NAME:
            where = self._attribute_index(index, "name")
            self._fail(f"voice name has {len(name)} characters; the limit is {MAX_VOICE_NAME}", where)
        directive = VoiceDirective(name, *self.cursor.at(index))
        self.directives.append(directive)
        return directive.voice

    def _rate(self, index: int, current: float, attributes: dict[str, str]) -> float:
        value = attributes.get("rate")
        if value is None:
            return current
        where = self._attribute_index(index, "rate")
        written = value.strip()
        percent = _RATE_PERCENT.fullmatch(written)
        if written == "default":
            rate = 1.0
        elif written in RATES:
            rate = current * RATES[written]
        elif percent is not None and percent["sign"]:
            change = float(percent["value"]) / 100
            rate = current * (1 + change if percent["sign"] == "+" else 1 - change)
        elif percent is not None:
            rate = current * float(percent["value"]) / 100
        elif _RATE_NUMBER.fullmatch(written):
            rate = current * float(written)
        else:
            self._fail(
                f"prosody rate {value!r} is not a rate: write {_listed(RATES)}, default, "
                "a percentage (80%), a change (+10%, -20%) or a multiplier (1.2)",
                where,
            )
        rate = round(rate, 4)
        low, high = RATE_RANGE
        if not low <= rate <= high:
            self._fail(
                f"prosody rate {value!r} makes the speaking rate {rate:g}; "
                f"it must be from {low:g} to {high:g}",
                where,
            )
        return rate

    def _say_as(self, index: int, attributes: dict[str, str]) -> None:
        interpret_as = self._required(index, "say-as", attributes, "interpret-as")
        if interpret_as not in INTERPRET_AS:
            where = self._attribute_index(index, "interpret-as")
            self._fail(f"say-as interpret-as {interpret_as!r} is not one of {_listed(INTERPRET_AS)}", where)
        fmt = attributes.get("format")
        if fmt is not None:
            where = self._attribute_index(index, "format")
            formats = FORMATS.get(INTERPRET_AS[interpret_as])
            if formats is None:
                self._fail(f"say-as interpret-as {interpret_as!r} takes no format", where)
            if fmt not in formats:
                self._fail(f"say-as {interpret_as} format {fmt!r} is not one of {_listed(formats)}", where)

    def _piece(self, frame: _Frame) -> None:
        """The shaped piece a closed say-as, sub or phoneme element makes (its attributes are checked)."""
        written = _XML_SPACE.sub(" ", "".join(frame.text))
        inner = written.strip(" ")
        if not inner:
            self._fail(f"<{frame.tag}> has no text", frame.index)
        attributes = frame.attributes
        if frame.tag == "sub":
            piece = Piece(inner, say=" ".join(attributes["alias"].split()))
        elif frame.tag == "phoneme":
            piece = Piece(inner, phoneme=attributes["ph"].strip())
        else:
            piece = Piece(
                inner, interpret_as=INTERPRET_AS[attributes["interpret-as"]], format=attributes.get("format")
            )
        self._words(inner)
        paragraph = self._open_paragraph()
        paragraph.shaped(piece, written.startswith(" "), written.endswith(" "), frame.key)

    def _required(self, index: int, tag: str, attributes: dict[str, str], name: str) -> str:
        value = attributes.get(name, "").strip()
        if not value:
            where = self._attribute_index(index, name) if name in attributes else index
            self._fail(f"<{tag}> needs a non-empty {name}", where)
        return value

    # Errors.

    def _attribute_index(self, tag_index: int, name: str) -> int:
        """Where attribute ``name`` of the start tag at ``tag_index`` stands (else the tag's start)."""
        position = tag_index + 1  # past "<" and the tag's name
        while position < len(self.data) and self.data[position : position + 1] not in b" \t\r\n/>":
            position += 1
        wanted = name.encode("utf-8")
        while (match := _ATTRIBUTE.match(self.data, position)) is not None:
            if match[1] == wanted:
                return match.start(1)
            position = match.end()
        return tag_index

    def _malformed(self, code: int, index: int) -> NoReturn:
        """Raise for expat's error ``code`` at byte ``index``, in words a script writer understands."""
        if code == expat.errors.codes[expat.errors.XML_ERROR_UNDEFINED_ENTITY]:
            match = _ENTITY.match(self.data, index)
            name = match[1].decode("utf-8", "replace") if match else "?"
            self._fail(
                f"entity &{name}; is not allowed in SSML: use &amp; &lt; &gt; &quot; &apos; "
                "or a character reference such as &#233;",
                index,
            )
        if code == expat.errors.codes[expat.errors.XML_ERROR_INVALID_TOKEN] and index < len(self.data):
            character = self.data[index:].decode("utf-8", "ignore")[:1]
            if character and not character.isprintable() and not character.isspace():
                self._fail(f"character U+{ord(character):04X} is not allowed in XML", index)
        if not self.rooted:
            self._fail("an SSML script must be XML with a <speak> root element", index)
        if code == expat.errors.codes[expat.errors.XML_ERROR_NO_ELEMENTS]:
            self._fail("the SSML script ends before its elements are closed", index)
        self._fail(f"malformed XML: {expat.ErrorString(code)}", index)

    def _fail(self, message: str, index: int | None = None) -> NoReturn:
        """Raise :class:`ScriptError` at byte ``index`` of the script (the current event's by default)."""
        where = self.parser.CurrentByteIndex if index is None else index
        raise ScriptError(message, *self.cursor.at(max(where, 0)))


class _Cursor:
    """Line and column (1-based, in characters) of byte indexes of the UTF-8 script.

    Expat's own column counts an astral character as two, so positions are counted here. Asked in
    document order (as voice directives are), it moves on from where it last stood: linear in all.
    """

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.index, self.line, self.column = 0, 1, 1

    def at(self, index: int) -> tuple[int, int]:
        if index < self.index:
            self.index, self.line, self.column = 0, 1, 1
        # Indexes fall on the start of a markup token, never between the CR and LF of a line end.
        step = self.data[self.index : index].decode("utf-8", "ignore")
        self.index = index
        line, column = _position(step, len(step))
        if line > 1:
            self.line, self.column = self.line + line - 1, column
        else:
            self.column += column - 1
        return self.line, self.column


def _position(text: str, index: int) -> tuple[int, int]:
    """The 1-based line and column (in characters) of ``text[index]``; CR LF, CR and LF end lines."""
    before = text[:index]
    line = before.count("\n") + before.count("\r") - before.count("\r\n") + 1
    column = index - max(before.rfind("\n"), before.rfind("\r"))
    return line, column


def _listed(values: Iterable[str]) -> str:
    return ", ".join(sorted(values))
