"""The studio's fields hold what the API accepts, no more: each field's ``maxlength`` in index.html is the
longest value the API's own model for that field validates (one character more is refused), so the page
never lets a user type what the API then refuses."""

from __future__ import annotations

from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from webapi.admin import AdminVoiceQuery
from webapi.schemas import LANGUAGE_PATTERN, JobCreate, VoiceForm

INDEX = Path(__file__).resolve().parents[3] / "webapi" / "studio_assets" / "index.html"


class Fields(HTMLParser):
    """The attributes of every input and textarea, by id."""

    def __init__(self) -> None:
        super().__init__()
        self.by_id: dict[str, dict[str, str | None]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag in {"input", "textarea"} and found.get("id"):
            self.by_id[str(found["id"])] = found


def fields() -> dict[str, dict[str, str | None]]:
    parser = Fields()
    parser.feed(INDEX.read_text(encoding="utf-8"))
    return parser.by_id


def job(value: str) -> dict[str, Any]:
    return {"title": value, "script": "Text.", "voice": "Narrator"}


# field id -> (the API's model, the request it validates holding a value of the field)
SENT: dict[str, tuple[type[BaseModel], Callable[[str], dict[str, Any]]]] = {
    "job-title": (JobCreate, job),
    "voice-name": (VoiceForm, lambda v: {"name": v, "ref_text": "Words."}),
    "voice-text": (VoiceForm, lambda v: {"name": "Narrator", "ref_text": v}),
    "voice-language": (VoiceForm, lambda v: {"name": "Narrator", "ref_text": "Words.", "language": v}),
    "admin-owner": (AdminVoiceQuery, lambda v: {"owner": v}),
    "job-abs-library": (
        JobCreate,
        lambda v: {**job("T"), "deliver": {"audiobookshelf": {"library_id": v, "folder_id": "f"}}},
    ),
    "job-abs-folder": (
        JobCreate,
        lambda v: {**job("T"), "deliver": {"audiobookshelf": {"library_id": "l", "folder_id": v}}},
    ),
}


def longest(field: str, length: int) -> str:
    """A value of ``length`` characters the field's rules allow (a language code keeps its shape)."""
    if field == "voice-language":
        return "abc-" + "a" * (length - 4)
    return "a" * length


@pytest.mark.parametrize("field", sorted(SENT))
def test_each_field_holds_exactly_what_the_api_accepts(field: str) -> None:
    maxlength = fields()[field].get("maxlength")
    assert maxlength is not None, f"#{field} has no maxlength"
    limit = int(maxlength)
    model, request = SENT[field]
    model.model_validate(request(longest(field, limit)))  # the longest the page allows passes
    with pytest.raises(ValidationError):
        model.model_validate(request(longest(field, limit + 1)))


def test_the_language_field_checks_the_apis_pattern() -> None:
    assert fields()["voice-language"].get("pattern") == LANGUAGE_PATTERN.removeprefix("^").removesuffix("$")


def test_every_text_field_has_a_limit() -> None:
    """A new text field in the studio needs its limit (and a row in SENT) too."""
    free = {"api-key", "job-script", "voice-audio", "job-file"}
    free |= {name for name, attrs in fields().items() if attrs.get("type") == "checkbox"}  # no text to limit
    limited = {name for name, attrs in fields().items() if attrs.get("maxlength")}
    assert set(fields()) - free - limited == set()
    assert limited == set(SENT)
