"""How the command line shows what the server sent: as plain text, always.

Every string that comes from the server (titles, voice names, chapter titles, errors, QA reasons, file
names, warnings) is user input somewhere, so it reaches the terminal only through :func:`plain`:

- Control characters are shown escaped (``\\x1b``, ``\\x07``, ``\\u009b``), not stripped: C0 (ESC, BEL,
  CR, newline, tab...), DEL, the C1 range (U+0080-U+009F, where U+009B is a one-character CSI), the line
  and paragraph separators and the bidirectional overrides and isolates (text that would read backwards).
  Escaping keeps the rest of the text readable and shows that something odd was there, which stripping
  would hide; no escape sequence, OSC title or hyperlink can reach the terminal.
- Rich markup is never interpreted: tables and progress bars get :class:`rich.text.Text` cells (which
  rich prints as they are) and consoles print with ``markup=False``, so ``[link=file:///etc/passwd]x[/link]``
  is printed as those characters.

``--json`` output needs neither: :func:`json.dumps` (ASCII-only) writes every control and non-ASCII
character as a ``\\uXXXX`` escape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

import click
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

# C0 and DEL, C1, Arabic letter mark, LRM/RLM, line/paragraph separators, bidi embeddings, overrides
# and isolates.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def plain(value: object) -> str:
    """``value`` (a server's string, number or None) as text safe to print: control characters
    escaped (see the module's docstring); None is empty."""
    return "" if value is None else _CONTROL.sub(_escaped, str(value))


def cell(value: object) -> Text:
    """``value`` as a rich cell or label: :func:`plain`, and never read as markup."""
    return Text(plain(value))


def table(headers: Iterable[str], rows: Iterable[Iterable[object]], *, keep: Iterable[str] = ()) -> Table:
    """A table of server values (each through :func:`cell`). Columns named in ``keep`` (ids) are never
    wrapped or cut, whatever the terminal's width: the others give way."""
    kept = set(keep)
    names = list(headers)
    cells = [[cell(value) for value in row] for row in rows]
    grid = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold")
    for index, header in enumerate(names):
        if header in kept:
            longest = max((len(c[index].plain) for c in cells), default=0)
            grid.add_column(header, no_wrap=True, min_width=longest)
        else:
            grid.add_column(header, overflow="fold")
    for row_cells in cells:
        grid.add_row(*row_cells)
    return grid


def show(grid: Table) -> None:
    """Print a :func:`table` on stdout. Where the terminal is narrower than the table's narrowest form
    (its whole ids and short words), the table keeps that form and the terminal wraps its lines: an id is
    never cut."""
    console = out()
    narrowest = Measurement.get(console, console.options, grid).minimum
    console.print(grid, width=max(console.width, narrowest))


def out() -> Console:
    """The console for results (stdout): no highlighting, no markup."""
    return Console(highlight=False, markup=False)


def err() -> Console:
    """The console for progress and notes (stderr): no highlighting, no markup."""
    return Console(stderr=True, highlight=False, markup=False)


def print_json(value: object) -> None:
    """``--json`` output: the API's JSON, indented, ASCII-only (every control character escaped)."""
    click.echo(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=True))
