"""The one error type the script package raises for bad input."""

from __future__ import annotations


class ScriptError(ValueError):
    """A script cannot be turned into speech.

    ``message`` is the bare reason; ``line`` and ``column`` (1-based, counted in characters) point at the
    offending character when there is one. ``str(error)`` prefixes the position when it is known.
    """

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        self.message = message
        self.line = line
        self.column = column
        super().__init__(self._describe())

    def _describe(self) -> str:
        if self.line is None:
            return self.message
        if self.column is None:
            return f"line {self.line}: {self.message}"
        return f"line {self.line}, column {self.column}: {self.message}"


class ScriptTooLong(ScriptError):
    """A script (an EPUB's text, counted while it is read) is longer than the server's limit."""


class EmptyScript(ScriptError):
    """A script with nothing to read: no text once markup is left out, only spaces and punctuation, or only
    headings. ``message`` says which."""
