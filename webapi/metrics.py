"""GET /metrics: Prometheus text format, read from the figures every worker and API process writes to the
database in batches (worker.counters: so figures are summed across processes and machines), plus jobs and
voices by state, the depth of each broker queue and ``tome_build_info``. Scraped with the metrics token or
an admin key: the figures cover every tenant. The list is in docs/observability.md."""

from __future__ import annotations

import hmac
import importlib.metadata
import platform
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from flask import Blueprint, Response, request
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models import Job, Voice
from webapi.auth import authenticate, require_admin
from webapi.extensions import tome
from webapi.observe import API_LATENCY, API_LATENCY_HELP
from worker import broker_probe, counters, observe
from worker.config import Settings

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
        yield from samples(counters.read_samples(self.session))


HELP = {**observe.HELP, API_LATENCY: API_LATENCY_HELP}
_SUFFIXES = ("_bucket", "_sum", "_count")


def samples(rows: Iterable[tuple[str, dict[str, str], float]]) -> Iterator[Metric]:
    """Histogram families from their stored ``_bucket``/``_sum``/``_count`` rows; other rows as counters."""
    histograms: dict[str, dict[tuple[tuple[str, str], ...], dict[str, Any]]] = defaultdict(dict)
    plain: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for name, labels, value in rows:
        suffix = next((s for s in _SUFFIXES if name.endswith(s)), None)
        if suffix is None:
            plain[name].append((labels, value))
            continue
        base = name.removesuffix(suffix)
        le = labels.pop("le", None)
        entry = histograms[base].setdefault(tuple(sorted(labels.items())), {"buckets": {}, "sum": 0.0})
        if suffix == "_bucket" and le is not None:
            entry["buckets"][le] = value
        elif suffix == "_sum":
            entry["sum"] = value
    for base, series in sorted(histograms.items()):
        names = sorted({k for key in series for k, _ in key})
        family = HistogramMetricFamily(base, HELP.get(base, base), labels=names)
        for key, entry in sorted(series.items()):
            labels = dict(key)
            ordered = sorted(entry["buckets"].items(), key=lambda item: float(item[0]))
            family.add_metric([labels.get(n, "") for n in names], ordered, sum_value=entry["sum"])
        yield family
    for name, values in sorted(plain.items()):
        names = sorted({k for labels, _ in values for k in labels})
        counter = CounterMetricFamily(name.removesuffix("_total"), HELP.get(name, name), labels=names)
        for labels, value in values:
            counter.add_metric([labels.get(n, "") for n in names], value)
        yield counter


class BrokerCollector:
    """Messages waiting in each queue, read from the broker at scrape time (none when it is down)."""

    def __init__(self, settings: Settings):
        self.settings = settings

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily(
            "tome_queue_depth", "Messages waiting in each broker queue", labels=["queue"]
        )
        try:
            for queue, count in broker_probe.queue_depths(self.settings).items():
                depth.add_metric([queue], count)
        except broker_probe.BrokerDown:
            pass  # no sample: "unknown", not zero; /readyz says the broker is down
        yield depth
        info = GaugeMetricFamily(
            "tome_build_info",
            "Tome's version, Python's and the default engine's, as labels; always 1",
            labels=["version", "python", "engine"],
        )
        info.add_metric([_version(), platform.python_version(), self.settings.engines.default], 1)
        yield info


def _version() -> str:
    try:
        return importlib.metadata.version("tome")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _require_scraper() -> None:
    """The metrics token (``TOME_METRICS_TOKEN``) or an admin key: the figures span every tenant."""
    token = tome().settings.security.metrics_token
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
    broker: Any = BrokerCollector(tome().settings)
    registry.register(broker)
    return Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST)
