"""Requests per API key per minute, counted in the database so every API process shares the count."""

from __future__ import annotations

import time

from sqlalchemy.dialects import postgresql, sqlite

from models import RateWindow
from webapi.errors import ApiError
from webapi.extensions import tome

WINDOW_SECONDS = 60


class RateLimited(ApiError):
    status, code = 429, "rate_limited"


def check_rate(key_id: str) -> None:
    """Count this request in the key's current window; 429 with Retry-After once over the limit."""
    state = tome()
    limit = state.settings.rate_limit_per_minute
    if limit <= 0:
        return
    now = time.time()
    window = int(now // WINDOW_SECONDS) * WINDOW_SECONDS
    session = state.sessions()
    insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    upsert = (
        insert(RateWindow)
        .values(key_id=key_id, window_start=window, count=1)
        .on_conflict_do_update(
            index_elements=[RateWindow.key_id, RateWindow.window_start], set_={"count": RateWindow.count + 1}
        )
        .returning(RateWindow.count)
    )
    count = int(session.execute(upsert).scalar_one())
    session.commit()
    if count > limit:
        retry_after = max(1, int(window + WINDOW_SECONDS - now) + 1)
        raise RateLimited(
            f"more than {limit} requests a minute with this key; retry in {retry_after} s",
            retry_after=retry_after,
        )
