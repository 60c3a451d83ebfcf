"""Script handling: read plain, Markdown, SSML and EPUB scripts, split sentences, pack synthesis chunks
(pure Python)."""

from .chunking import ChunkSpec, PauseAfter, Said, Say, make_chunks, split_clauses
from .errors import EmptyScript, ScriptError
from .parse import (
    Chapter,
    ParsedScript,
    ReadOptions,
    ScriptFormat,
    Sentence,
    Style,
    parse_document,
    parse_script,
)
from .sentences import split_sentences
from .voices import MAX_VOICE_NAME, VoiceDirective

__all__ = [
    "MAX_VOICE_NAME",
    "Chapter",
    "ChunkSpec",
    "EmptyScript",
    "ParsedScript",
    "PauseAfter",
    "ReadOptions",
    "Said",
    "Say",
    "ScriptError",
    "ScriptFormat",
    "Sentence",
    "Style",
    "VoiceDirective",
    "make_chunks",
    "parse_document",
    "parse_script",
    "split_clauses",
    "split_sentences",
]
