"""Markdown (CommonMark + tables + strikethrough) to speakable blocks of plain text."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

from markdown_it import MarkdownIt
from markdown_it.token import Token

from .errors import ScriptError
from .voices import OWN_LINE, VoiceDirective, directive_in_line, find_attempt

_MARKDOWN = MarkdownIt("commonmark").enable(["table", "strikethrough"])
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


class Block(NamedTuple):
    """One unit of text in document order: a heading or a paragraph (raw, not yet normalised)."""

    heading: bool
    text: str


def markdown_blocks(text: str) -> Iterator[Block | VoiceDirective]:
    """Headings and paragraphs (including list items, blockquotes and table cells) of a Markdown script,
    with the voice directives between them, in document order.

    Code blocks, horizontal rules and raw HTML blocks (comments included) yield no text: they are not
    spoken; a line of an HTML block that is a voice directive yields that directive. Images are dropped
    together with their alt text. A voice directive inside a paragraph or heading is a ScriptError, and
    so are blockquotes and lists nested too deeply for markdown-it to parse what is inside them.
    """
    tokens = _MARKDOWN.parse(text)
    source_lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    for index, token in enumerate(tokens):
        if token.type in _CONTAINERS and token.level > _DEEPEST:
            raise ScriptError(TOO_DEEP, token.map[0] + 1 if token.map is not None else None)
        if token.type == "inline":
            _refuse_inline_directive(token, source_lines)
            heading = index > 0 and tokens[index - 1].type == "heading_open"
            yield Block(heading, inline_text(token.children or []))
        elif token.type == "html_block" and token.map is not None:
            yield from _block_directives(token.content, token.map[0], source_lines)


def _block_directives(content: str, first_line: int, source_lines: Sequence[str]) -> Iterator[VoiceDirective]:
    """The voice directives among the lines of an HTML block that starts on (0-based) ``first_line``."""
    for offset, line in enumerate(content.split("\n")):
        number = first_line + offset
        source = source_lines[number] if number < len(source_lines) else None
        directive = directive_in_line(line, number + 1, source)
        if directive is not None:
            yield directive


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
        elif child.type in _BREAK_TOKENS or (
            child.type == "html_inline" and child.content[:3].lower() == "<br"
        ):
            parts.append(" ")
    return "".join(parts)
