"""Reaching the real PostgreSQL and Redis of this machine, or saying clearly why a test cannot."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
import pytest
import redis

PG_URL = os.environ.get("TOME_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("TOME_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@dataclass(frozen=True)
class Services:
    pg_url: str
    redis_url: str


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def require_services() -> Services:
    problems = []
    try:
        with psycopg.connect(_libpq(PG_URL), connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        problems.append(f"PostgreSQL at {PG_URL}: {exc}")
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        problems.append(f"Redis at {REDIS_URL}: {exc}")
    if problems:
        message = "needs PostgreSQL and Redis: " + "; ".join(problems)
        if os.environ.get("TOME_TEST_REQUIRE_SERVICES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return Services(PG_URL, REDIS_URL)


@contextmanager
def postgres_database(admin_url: str) -> Iterator[str]:
    """A new, empty database for one test; dropped (connections and all) afterwards."""
    name = f"tome_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_libpq(admin_url), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = admin_url.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(_libpq(admin_url), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def terminate_backend(admin_url: str, pid: int) -> None:
    """Drop PostgreSQL backend ``pid`` as a server restart drops every connection."""
    with psycopg.connect(_libpq(admin_url), autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
