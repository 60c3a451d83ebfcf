"""Lexicons from the database, as the pure :mod:`worker.script.lexicon` reads them (no Flask or Celery)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from models import Lexicon, Voice
from worker.script.lexicon import Entry
from worker.script.lexicon import Lexicon as Entries


class LexiconNotFound(LookupError):
    def __init__(self, ref: str) -> None:
        super().__init__(f"you have no lexicon with the id or name {ref!r}")
        self.ref = ref
        self.message = str(self)


def entries_of(row: Lexicon) -> Entries:
    return Entries(row.name, [entry_from_json(e) for e in row.entries])


def entry_from_json(data: dict[str, Any]) -> Entry:
    return Entry(
        str(data["grapheme"]), data.get("alias"), data.get("phoneme"), bool(data.get("case_sensitive", False))
    )


def entry_to_json(entry: Entry) -> dict[str, Any]:
    return {
        "grapheme": entry.grapheme,
        "alias": entry.alias,
        "phoneme": entry.phoneme,
        "case_sensitive": entry.case_sensitive,
    }


def find(session: Session, owner: str, refs: Sequence[str]) -> list[Lexicon]:
    """The owner's lexicons the refs (ids or names) name, in the refs' order; an id wins over a name that
    spells it. :class:`LexiconNotFound` for the first ref that names none (another owner's is none)."""
    if not refs:
        return []
    ids: dict[str, uuid.UUID] = {}
    for ref in refs:
        with contextlib.suppress(ValueError):
            ids[ref] = uuid.UUID(ref)
    rows = list(
        session.scalars(
            select(Lexicon).where(
                Lexicon.owner == owner, or_(Lexicon.name.in_(list(refs)), Lexicon.id.in_(list(ids.values())))
            )
        )
    )
    by_id = {row.id: row for row in rows}
    by_name = {row.name: row for row in rows}
    found: list[Lexicon] = []
    for ref in refs:
        row = by_id.get(ids[ref]) if ref in ids else None
        row = row or by_name.get(ref)
        if row is None:
            raise LexiconNotFound(ref)
        if row not in found:
            found.append(row)
    return found


def load(session: Session, owner: str, refs: Sequence[str]) -> list[Entries]:
    return [entries_of(row) for row in find(session, owner, refs)]


def voice_defaults(session: Session, voice_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, list[Entries]]:
    """Each voice's default lexicons, in its order; a lexicon deleted since is simply no longer read."""
    voices = list(
        session.execute(select(Voice.id, Voice.owner, Voice.lexicon_ids).where(Voice.id.in_(voice_ids)))
    )
    wanted: set[uuid.UUID] = set()
    for _, _, lexicon_ids in voices:
        for value in lexicon_ids or []:
            with contextlib.suppress(ValueError, TypeError):
                wanted.add(uuid.UUID(str(value)))
    rows = (
        {row.id: row for row in session.scalars(select(Lexicon).where(Lexicon.id.in_(wanted)))}
        if wanted
        else {}
    )
    defaults: dict[uuid.UUID, list[Entries]] = {}
    for voice_id, owner, lexicon_ids in voices:
        chosen: list[Entries] = []
        for value in lexicon_ids or []:
            with contextlib.suppress(ValueError, TypeError):
                row = rows.get(uuid.UUID(str(value)))
                if row is not None and row.owner == owner:
                    chosen.append(entries_of(row))
        defaults[voice_id] = chosen
    return defaults
