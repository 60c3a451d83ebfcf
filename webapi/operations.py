"""How a view declares its operation for the OpenAPI document: a marker the document builder reads.

Apart from :mod:`webapi.openapi` so that the views (whose models the document's examples use) need not
import the builder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Operation:
    summary: str
    responses: dict[int, type[BaseModel] | None]
    body: type[BaseModel] | None = None
    form: type[BaseModel] | None = None  # multipart: text fields from the model plus file fields
    files: tuple[str, ...] = ()
    optional_files: tuple[str, ...] = ()
    query: type[BaseModel] | None = None
    auth: bool = True
    tags: tuple[str, ...] = field(default_factory=tuple)
    binary: str | None = None  # media type of a binary 200 response


def operation(op: Operation) -> Callable[[F], F]:
    def mark(view: F) -> F:
        view.__dict__["openapi"] = op
        return view

    return mark
