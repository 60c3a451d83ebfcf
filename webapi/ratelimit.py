"""Requests per API key per minute, counted where every API process shares the count.

With a Redis broker the count lives in Redis: one INCR (and an EXPIRE when the window's key is new) in a
single atomic Lua call, no database write at all. Embedded (SQLite and the filesystem broker: no Redis
server) it is an upsert and commit of the key's row in the database. Under PostgreSQL that upsert would
be a write and commit on every request, on one hot row per key (docs/benchmarks.md has what it cost);
the Redis count costs one round trip to a server already there.
"""

from __future__ import annotations

import functools
import logging
import time

import redis
from sqlalchemy.dialects import postgresql, sqlite

from models import RateWindow
from webapi.errors import ApiError
from webapi.extensions import tome

log = logging.getLogger(__name__)

WINDOW_SECONDS = 60
# INCR the window's counter and give a new one an expiry (a window and a little more), atomically: a
# crash between the two can never leave a counter that never expires.
_COUNT = """
local count = redis.call('INCR', KEYS[1])
if count == 1 then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
end
return count
"""


class RateLimited(ApiError):
    status, code = 429, "rate_limited"


def uses_redis(broker_url: str) -> bool:
    return broker_url.startswith(("redis://", "rediss://"))


@functools.cache
def _counter(broker_url: str) -> tuple[redis.Redis, object]:
    """One client (a connection pool; connects on first use) and registered script per broker URL."""
    client = redis.Redis.from_url(broker_url, socket_timeout=5, socket_connect_timeout=5)
    return client, client.register_script(_COUNT)


def _count_in_redis(broker_url: str, key_id: str, window: int) -> int:
    """The window's count after this request; 0 (not limited) while Redis cannot be reached: an outage of
    the broker already queues nothing, and must not turn every request into an error as well."""
    _client, script = _counter(broker_url)
    key = f"tome:ratelimit:{key_id}:{window}"
    try:
        return int(script(keys=[key], args=[WINDOW_SECONDS + 5]))  # type: ignore[operator]
    except redis.RedisError as exc:
        log.warning("rate limit not counted, Redis unreachable: %s", exc)
        return 0


def _count_in_database(key_id: str, window: int) -> int:
    session = tome().sessions()
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
    return count


def check_rate(key_id: str) -> None:
    """Count this request in the key's current window; 429 with Retry-After once over the limit."""
    state = tome()
    limit = state.settings.api.rate_limit_per_minute
    if limit <= 0:
        return
    now = time.time()
    window = int(now // WINDOW_SECONDS) * WINDOW_SECONDS
    broker = state.settings.broker.url
    if uses_redis(broker):
        count = _count_in_redis(broker, key_id, window)
    else:
        count = _count_in_database(key_id, window)
    if count > limit:
        retry_after = max(1, int(window + WINDOW_SECONDS - now) + 1)
        raise RateLimited(
            f"more than {limit} requests a minute with this key; retry in {retry_after} s",
            retry_after=retry_after,
        )
