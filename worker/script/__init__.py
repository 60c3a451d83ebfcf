"""Script handling: parse plain/Markdown scripts, split sentences, pack synthesis chunks (pure Python)."""

from .chunking import ChunkSpec, PauseAfter, make_chunks, split_clauses
from .errors import ScriptError
from .parse import Chapter, ParsedScript, ScriptFormat, parse_document, parse_script
from .sentences import split_sentences
from .voices import MAX_VOICE_NAME, VoiceDirective

__all__ = [
    "MAX_VOICE_NAME",
    "Chapter",
    "ChunkSpec",
    "ParsedScript",
    "PauseAfter",
    "ScriptError",
    "ScriptFormat",
    "VoiceDirective",
    "make_chunks",
    "parse_document",
    "parse_script",
    "split_clauses",
    "split_sentences",
]
