"""Markdown (CommonMark + tables + strikethrough) to speakable blocks of plain text."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

from markdown_it import MarkdownIt
from markdown_it.token import Token

_MARKDOWN = MarkdownIt("commonmark").enable(["table", "strikethrough"])

# Inline tokens whose ``content`` is readable text. Everything else is markup (emphasis, strong, link and
# strikethrough open/close), dropped (images, raw inline HTML) or a break (turned into a space).
_TEXT_TOKENS = frozenset({"text", "text_special", "code_inline"})
_BREAK_TOKENS = frozenset({"softbreak", "hardbreak"})


class Block(NamedTuple):
    """One unit of text in document order: a heading or a paragraph (raw, not yet normalised)."""

    heading: bool
    text: str


def markdown_blocks(text: str) -> Iterator[Block]:
    """Headings and paragraphs (including list items, blockquotes and table cells) of a Markdown script.

    Code blocks, horizontal rules and raw HTML blocks (comments included) yield nothing: they are not
    spoken. Images are dropped together with their alt text.
    """
    tokens = _MARKDOWN.parse(text)
    for index, token in enumerate(tokens):
        if token.type == "inline":
            heading = index > 0 and tokens[index - 1].type == "heading_open"
            yield Block(heading, inline_text(token.children or []))


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
