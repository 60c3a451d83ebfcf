"""Script handling: parse plain/Markdown scripts, split sentences, pack synthesis chunks (pure Python)."""

from .chunking import ChunkSpec, PauseAfter, make_chunks, split_clauses
from .errors import ScriptError
from .parse import Chapter, ScriptFormat, parse_script
from .sentences import split_sentences

__all__ = [
    "Chapter",
    "ChunkSpec",
    "PauseAfter",
    "ScriptError",
    "ScriptFormat",
    "make_chunks",
    "parse_script",
    "split_clauses",
    "split_sentences",
]
