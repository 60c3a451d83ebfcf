"""GET /metrics: Prometheus text format, read from the counters every worker process writes to the
database (so figures are summed across processes and machines), plus jobs and voices by state. Scraped
with the metrics token or an admin key: the figures cover every tenant."""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Any

from flask import Blueprint, Response, request
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models import Job, Voice
from webapi.auth import authenticate, require_admin
from webapi.extensions import tome
from worker import counters

bp = Blueprint("metrics", __name__)


class DatabaseCollector:
    def __init__(self, session: Session):
        self.session = session

    def collect(self) -> Iterator[Metric]:
        values = counters.read_all(self.session)
        engines = sorted({engine for _, engine in values})
        for name, help_text in (
            (counters.HITS, "Speaker prompts served from a worker process's memory (no file read)"),
            (counters.MISSES, "Speaker prompts read from their file (first use in a worker process)"),
            (counters.BUILDS, "Speaker prompts encoded from reference audio"),
        ):
            family = CounterMetricFamily(name.removesuffix("_total"), help_text, labels=["engine"])
            for engine in engines:
                family.add_metric([engine], values.get((name, engine), 0.0))
            yield family
        summary = SummaryMetricFamily(
            "tome_voice_cache_build_seconds", "Time spent encoding speaker prompts", labels=["engine"]
        )
        for engine in engines:
            summary.add_metric(
                [engine],
                count_value=int(values.get((counters.BUILDS, engine), 0.0)),
                sum_value=values.get((counters.BUILD_SECONDS, engine), 0.0),
            )
        yield summary
        jobs = GaugeMetricFamily("tome_jobs", "Jobs by status", labels=["status"])
        for status, count in self.session.execute(select(Job.status, func.count()).group_by(Job.status)):
            jobs.add_metric([status], count)
        yield jobs
        voices = GaugeMetricFamily("tome_voices", "Live voices by cache status", labels=["cache_status"])
        live = select(Voice.cache_status, func.count()).where(Voice.deleted_at.is_(None))
        for status, count in self.session.execute(live.group_by(Voice.cache_status)):
            voices.add_metric([status], count)
        yield voices


def _require_scraper() -> None:
    """The metrics token (``TOME_METRICS_TOKEN``) or an admin key: the figures span every tenant."""
    token = tome().settings.metrics_token
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if token and scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
        return
    authenticate()
    require_admin()


@bp.get("/metrics")
def metrics() -> Response:
    _require_scraper()
    registry = CollectorRegistry(auto_describe=False)
    collector: Any = DatabaseCollector(tome().sessions())
    registry.register(collector)
    return Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST)
