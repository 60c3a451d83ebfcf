"""Markdown (CommonMark + tables + strikethrough + front matter + footnotes) to speakable blocks of text.

A YAML front-matter block is metadata (title, author, language), never speech. Footnote markers are not
read; the footnotes themselves are left out, or read at the end of the chapter that refers to them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml
from markdown_it import MarkdownIt
from markdown_it.token import Token
from mdit_py_plugins.footnote import footnote_plugin
from mdit_py_plugins.front_matter import front_matter_plugin

from .breaks import break_line
from .document import Block, BookInfo, Pause
from .errors import ScriptError
from .voices import OWN_LINE, VoiceDirective, directive_in_line, find_attempt

Footnotes = Literal["skip", "chapter_end"]

_MARKDOWN = (
    MarkdownIt("commonmark").enable(["table", "strikethrough"]).use(front_matter_plugin).use(footnote_plugin)
)
# Front matter larger than this is not metadata but a mistake (or an attack on the YAML parser).
MAX_FRONT_MATTER = 16_384
# markdown-it silently skips the content of a block container (blockquote or list item) that opens deeper
# than this level, and can skip text after it too. Every open block counts a level: a list two, the list
# and its item. Such a script is refused rather than read with text missing.
_DEEPEST = _MARKDOWN.options.maxNesting - 2
_CONTAINERS = frozenset({"blockquote_open", "list_item_open"})
TOO_DEEP = (
    "blockquotes and lists are nested too deeply"
    f" (at most {_DEEPEST + 1} blockquotes or {(_DEEPEST + 1) // 2} lists deep)"
)

# Inline tokens whose ``content`` is readable text. Everything else is markup (emphasis, strong, link and
# strikethrough open/close), dropped (images, raw inline HTML) or a break (turned into a space).
_TEXT_TOKENS = frozenset({"text", "text_special", "code_inline"})
_BREAK_TOKENS = frozenset({"softbreak", "hardbreak"})
# Inline tokens in which a (misplaced) voice directive can appear: a comment, or an unclosed one as text.
_DIRECTIVE_CARRIERS = frozenset({"html_inline", "text"})
_INLINE_BREAK = re.compile(r"<!--\s*break\s*:[^>]{0,40}-->", re.IGNORECASE)


@dataclass
class MarkdownScript:
    """A Markdown script read: its events in document order and what its front matter says."""

    events: list[Block | VoiceDirective | Pause] = field(default_factory=list)
    info: BookInfo = field(default_factory=BookInfo)


def read_markdown(text: str, footnotes: Footnotes = "skip") -> MarkdownScript:
    """The events of a Markdown script (see :func:`markdown_blocks`) and its front matter's metadata."""
    tokens = _MARKDOWN.parse(text)
    script = MarkdownScript()
    if tokens and tokens[0].type == "front_matter":
        script.info = front_matter_info(tokens[0])
    script.events = list(markdown_blocks(text, footnotes, tokens))
    return script


def markdown_blocks(
    text: str, footnotes: Footnotes = "skip", tokens: list[Token] | None = None
) -> Iterator[Block | VoiceDirective | Pause]:
    """Headings and paragraphs (including list items, blockquotes and table cells) of a Markdown script,
    with the voice directives and break lines between them, in document order.

    Code blocks, horizontal rules, front matter and raw HTML blocks (comments included) yield no text:
    they are not spoken; a line of an HTML block that is a voice directive or a break yields it. Images
    are dropped together with their alt text, footnote markers too. With ``footnotes="chapter_end"`` the
    footnotes a chapter refers to are read after its last paragraph, each as "Note LABEL." and its text.
    A voice directive inside a paragraph or heading is a ScriptError, and so are blockquotes and lists
    nested too deeply for markdown-it to parse what is inside them.
    """
    tokens = _MARKDOWN.parse(text) if tokens is None else tokens
    source_lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    notes = _footnote_texts(tokens) if footnotes == "chapter_end" else {}
    referred: list[str] = []  # labels the current chapter refers to, in order, once each
    for index, token in enumerate(tokens):
        if token.type == "footnote_block_open":
            break  # the definitions: read (or not) where their chapters end
        if token.type in _CONTAINERS and token.level > _DEEPEST:
            raise ScriptError(TOO_DEEP, token.map[0] + 1 if token.map is not None else None)
        if token.type == "inline":
            _refuse_inline_directive(token, source_lines)
            heading = index > 0 and tokens[index - 1].type == "heading_open"
            if heading:
                yield from _notes_block(referred, notes)
            yield Block(heading, inline_text(token.children or []))
            _note_references(token.children or [], referred)
        elif token.type == "html_block" and token.map is not None:
            yield from _block_directives(token.content, token.map[0], source_lines)
    yield from _notes_block(referred, notes)


_LEADING = re.compile(rf"---[ \t]*\r?\n(.{{0,{MAX_FRONT_MATTER}}}?)\r?\n---[ \t]*(?:\r?\n|$)", re.DOTALL)


def leading_front_matter(text: str) -> BookInfo:
    """What the front matter of a Markdown script says, read without parsing the rest (cheap: the API
    wants a long script's title before a worker plans it). Empty if there is none or it is invalid."""
    match = _LEADING.match(text.removeprefix("\ufeff"))
    if match is None:
        return BookInfo()
    token = Token("front_matter", "", 0)
    token.content, token.map = match[1], [0, match[1].count("\n") + 2]
    try:
        return front_matter_info(token)
    except ScriptError:
        return BookInfo()


def front_matter_info(token: Token) -> BookInfo:
    """Title, author and language from a YAML front-matter block; other keys are ignored.

    Only ``yaml.safe_load``; only string (or, for the author, list of strings) values are taken, so YAML
    aliases cannot make anything large out of the (bounded) block.
    """
    line = (token.map[0] + 1) if token.map is not None else 1
    if len(token.content) > MAX_FRONT_MATTER:
        raise ScriptError(f"front matter is longer than {MAX_FRONT_MATTER} characters", line)
    try:
        data: Any = yaml.safe_load(token.content)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = line + 1 + mark.line if mark is not None else line
        raise ScriptError(f"front matter is not valid YAML: {getattr(exc, 'problem', exc)}", where) from exc
    if not isinstance(data, dict):
        return BookInfo()
    return BookInfo(
        title=_string(data.get("title")),
        author=_string(data.get("author")) or _names(data.get("author") or data.get("authors")),
        language=_string(data.get("language") or data.get("lang")),
    )


def _string(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    return " ".join(value.split())[:1000] or None


def _names(value: object) -> str | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value[:20]):
        return _string(", ".join(value[:20]))
    return None


def _footnote_texts(tokens: Sequence[Token]) -> dict[str, str]:
    """Each footnote's label and its text (its paragraphs joined), from the definitions block."""
    texts: dict[str, list[str]] = {}
    label: str | None = None
    for token in tokens:
        if token.type == "footnote_open":
            label = str(token.meta.get("label", token.meta.get("id")))
            texts[label] = []
        elif token.type == "footnote_close":
            label = None
        elif token.type == "inline" and label is not None:
            texts[label].append(inline_text(token.children or []))
    return {label: " ".join(" ".join(parts).split()) for label, parts in texts.items()}


def _note_references(children: Sequence[Token], referred: list[str]) -> None:
    for child in children:
        if child.type == "footnote_ref":
            label = str(child.meta.get("label", child.meta.get("id")))
            if label not in referred:
                referred.append(label)


def _notes_block(referred: list[str], notes: dict[str, str]) -> Iterator[Block]:
    """The notes the chapter just ended refers to (when they are read at all); clears ``referred``."""
    for label in referred:
        if notes.get(label):
            yield Block(False, f"Note {label}. {notes[label]}")
    referred.clear()


def _block_directives(
    content: str, first_line: int, source_lines: Sequence[str]
) -> Iterator[VoiceDirective | Pause]:
    """The voice directives and break lines among the lines of an HTML block that starts on (0-based)
    ``first_line``."""
    for offset, line in enumerate(content.split("\n")):
        number = first_line + offset
        source = source_lines[number] if number < len(source_lines) else None
        directive = directive_in_line(line, number + 1, source)
        if directive is not None:
            yield directive
        elif (pause := break_line(line)) is not None:
            yield pause


def _refuse_inline_directive(token: Token, source_lines: Sequence[str]) -> None:
    """A ``<!-- voice: ... -->`` inside running text cannot switch voices between paragraphs: refuse it
    (pointing at it) rather than drop it like other inline HTML and read on in the wrong voice."""
    children = token.children or []
    if not any(c.type in _DIRECTIVE_CARRIERS and find_attempt(c.content) is not None for c in children):
        return
    first, end = token.map if token.map is not None else (0, len(source_lines))
    for number in range(first, min(end, len(source_lines))):
        column = find_attempt(source_lines[number])
        if column is not None:
            raise ScriptError(OWN_LINE, number + 1, column + 1)
    raise ScriptError(OWN_LINE, first + 1)


def inline_text(children: Sequence[Token]) -> str:
    """The readable text of an inline token's children: markup stripped, entities already decoded."""
    parts: list[str] = []
    for child in children:
        if child.type in _TEXT_TOKENS:
            parts.append(child.content)
        elif child.type == "html_inline" and _INLINE_BREAK.fullmatch(child.content):
            parts.append(f" {child.content} ")  # kept: the paragraph is cut there (breaks.split_breaks)
        elif child.type in _BREAK_TOKENS or (
            child.type == "html_inline" and child.content[:3].lower() == "<br"
        ):
            parts.append(" ")
    return "".join(parts)
