"""Voice directives: a line holding only ``<!-- voice: NAME -->`` switches the voice that reads on; a
line holding only ``<!-- speaker: NAME -->`` says who speaks the dialogue of the paragraph after it
(overriding attribution, :mod:`worker.script.attribution`).

The directive is an HTML comment so that a Markdown script still renders cleanly anywhere else, and it
must be a line of its own so that a voice change always falls between paragraphs (never inside a
sentence). ``<!-- voice: default -->`` goes back to the job's own voice. A comment that starts like a
directive but is not a well-formed line of its own is an error rather than silently spoken or skipped:
a typo in a directive would otherwise give the wrong narrator for the rest of the book.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import ScriptError

MAX_VOICE_NAME = 64
DEFAULT_VOICE = "default"
OWN_LINE = "a voice directive must be a line of its own: <!-- voice: NAME -->"

# Anything that looks like the start of a directive, wherever it is on a line.
_ATTEMPT = re.compile(r"<!--\s*(?:voice|speaker)\s*:", re.IGNORECASE)
# A whole well-formed directive line; the name may not contain the comment's end.
_DIRECTIVE = re.compile(r"\s*<!--\s*(?P<kind>voice|speaker)\s*:(?P<name>(?:(?!-->).)*)-->\s*", re.IGNORECASE)
MAX_SPEAKER_NAME = 200


@dataclass(frozen=True)
class VoiceDirective:
    """One ``<!-- voice: NAME -->`` line: the name as written (stripped) and where its ``<!--`` is."""

    name: str
    line: int
    column: int
    kind: str = "voice"  # or "speaker": who says the next paragraph's dialogue

    @property
    def voice(self) -> str | None:
        """The voice to switch to; None for ``default`` (any case), the job's own voice."""
        return None if self.name.lower() == DEFAULT_VOICE else self.name


def find_attempt(line: str) -> int | None:
    """The 0-based index of the first ``<!-- voice:`` in ``line``, or None if there is none."""
    match = _ATTEMPT.search(line)
    return None if match is None else match.start()


def directive_in_line(line: str, line_number: int, source_line: str | None = None) -> VoiceDirective | None:
    """The directive ``line`` holds, None if it holds none, or :class:`ScriptError` if it is malformed.

    ``source_line`` is the line as it stands in the script when ``line`` is a part of it (Markdown strips
    blockquote and list markers from block content); columns are counted in it.
    """
    if find_attempt(line) is None:
        return None
    located = source_line if source_line is not None else line
    column = (find_attempt(located) or 0) + 1
    match = _DIRECTIVE.fullmatch(line)
    if match is None:
        raise ScriptError(OWN_LINE, line_number, column)
    name = match["name"].strip()
    kind = match["kind"].lower()
    if not name:
        raise ScriptError(
            f"{kind} directive names no {kind}: write <!-- {kind}: NAME -->", line_number, column
        )
    limit = MAX_VOICE_NAME if kind == "voice" else MAX_SPEAKER_NAME
    if len(name) > limit:
        raise ScriptError(
            f"{kind} name has {len(name)} characters; the limit is {limit}", line_number, column
        )
    return VoiceDirective(name, line_number, column, kind)
