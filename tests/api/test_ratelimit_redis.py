"""The rate limit counted in Redis when the broker is Redis (the embedded SQLite count is tested in
test_reliability.py): the same answers, and no database write per request."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import redis
from flask import Flask
from sqlalchemy import func, select

from models import ApiKey, RateWindow
from tests.conftest import bearer
from tests.support.apps import tome_of
from tests.support.services import Services
from webapi.cli import mint_key
from webapi.ratelimit import WINDOW_SECONDS

pytestmark = pytest.mark.postgres


def _redis_app(make_app: Callable[..., Flask], services: Services, limit: int) -> Flask:
    return make_app(
        rate_limit_per_minute=limit, broker_url=services.redis_url, queue=f"tome-test-{os.urandom(4).hex()}"
    )


def _key_id(app: Flask) -> str:
    with tome_of(app).sessions() as session:
        return str(session.scalars(select(ApiKey.id).order_by(ApiKey.created_at.desc())).first())


def test_redis_rate_limit_answers_429_with_retry_after_per_key(
    make_app: Callable[..., Flask], services: Services
) -> None:
    app = _redis_app(make_app, services, limit=5)
    client = app.test_client()
    headers = bearer(mint_key(app, "hasty", "k", admin=False))
    hasty = _key_id(app)
    codes = [client.get("/v1/jobs", headers=headers).status_code for _ in range(7)]
    assert codes[:5] == [200] * 5
    assert codes[5:] == [429, 429]
    limited = client.get("/v1/jobs", headers=headers)
    assert limited.json["error"]["code"] == "rate_limited"
    assert 1 <= int(limited.headers["Retry-After"]) <= WINDOW_SECONDS + 1
    other = bearer(mint_key(app, "calm", "k", admin=False))
    assert client.get("/v1/jobs", headers=other).status_code == 200, "limits are per key"

    with tome_of(app).sessions() as session:
        assert session.scalar(select(func.count()).select_from(RateWindow)) == 0, "no database write"
    server = redis.Redis.from_url(services.redis_url)
    try:
        [key] = list(server.scan_iter(match=f"tome:ratelimit:{hasty}:*"))
        assert int(server.get(key) or 0) == 8
        assert 0 < server.ttl(key) <= WINDOW_SECONDS + 5, "every window's counter expires"
        server.delete(key)
    finally:
        server.close()


def test_an_unreachable_redis_does_not_turn_requests_into_errors(make_app: Callable[..., Flask]) -> None:
    # Port 9 (discard) on 127.0.0.1: nothing listens there, so every count fails to connect.
    app = make_app(rate_limit_per_minute=1, broker_url="redis://127.0.0.1:9/0")
    client = app.test_client()
    headers = bearer(mint_key(app, "calm", "k", admin=False))
    assert [client.get("/v1/jobs", headers=headers).status_code for _ in range(3)] == [200, 200, 200]
