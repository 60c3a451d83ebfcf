"""What the broker holds and whether it answers, for GET /readyz and GET /metrics (no Flask or Celery
imports: Redis through redis-py, the filesystem broker through its folder).

Queue depth is the number of messages waiting in each queue (sent, not yet taken by a worker), summed over
the priority steps: kombu's Redis transport keeps one list per step (``<queue>`` for step 0,
``<queue>\\x06\\x16<step>`` for the others); Tome's filesystem transport keeps one file per message named
``<priority>-<ms>_<uuid>.<queue>.msg`` (worker.filesystem_broker).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import redis

from worker.celery_app import PRIORITY_STEPS
from worker.config import Settings

TIMEOUT_SECONDS = 2.0
_PRIORITY_SEPARATOR = "\x06\x16"


class BrokerDown(RuntimeError):
    """The broker did not answer; the message says how, without credentials."""


def queues(settings: Settings) -> list[str]:
    return [
        q
        for q in (
            settings.broker.queue,
            settings.broker.gpu_queue,
            settings.broker.control_queue_name,
            settings.broker.stitch_queue_name,
        )
        if q
    ]


def _is_redis(settings: Settings) -> bool:
    return settings.broker.url.startswith(("redis://", "rediss://"))


def _redis(settings: Settings) -> redis.Redis:
    return redis.Redis.from_url(
        settings.broker.url, socket_timeout=TIMEOUT_SECONDS, socket_connect_timeout=TIMEOUT_SECONDS
    )


def _queue_folder(settings: Settings) -> Path:
    return settings.broker_folder / "queue"


def ping(settings: Settings) -> None:
    """Raise BrokerDown unless the broker answers (Redis: PING; filesystem: its folder is writable)."""
    if _is_redis(settings):
        client = _redis(settings)
        try:
            client.ping()
        except redis.RedisError as exc:
            raise BrokerDown(type(exc).__name__) from exc
        finally:
            client.close()
    elif settings.broker.url.startswith("filesystem://"):
        folder = _queue_folder(settings)
        if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
            raise BrokerDown("queue folder missing or not writable")
    else:
        raise BrokerDown("readiness checks Redis and the filesystem broker only")


def queue_depths(settings: Settings, names: Sequence[str] | None = None) -> dict[str, int]:
    """Messages waiting in each queue; raises BrokerDown when the broker does not answer."""
    wanted = list(names or queues(settings))
    if _is_redis(settings):
        client = _redis(settings)
        try:
            with client.pipeline(transaction=False) as pipe:
                for queue in wanted:
                    for step in PRIORITY_STEPS:
                        pipe.llen(queue if step == 0 else f"{queue}{_PRIORITY_SEPARATOR}{step}")
                lengths = pipe.execute()
        except redis.RedisError as exc:
            raise BrokerDown(type(exc).__name__) from exc
        finally:
            client.close()
        per = len(PRIORITY_STEPS)
        return {q: int(sum(lengths[i * per : (i + 1) * per])) for i, q in enumerate(wanted)}
    if settings.broker.url.startswith("filesystem://"):
        try:
            names_in = [n for n in os.listdir(_queue_folder(settings)) if not n.startswith(".")]
        except OSError as exc:
            raise BrokerDown(type(exc).__name__) from exc
        return {q: sum(1 for n in names_in if n.endswith(f".{q}.msg")) for q in wanted}
    raise BrokerDown("queue depth is read from Redis and the filesystem broker only")
