"""What the neural engines' end-to-end tests (tests/fish, tests/qwen3) share: skipping where the engine's
package is missing, a job rendered through the workers, and the engine's speaker-prompt counters."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.api.helpers import submit_job
from tests.e2e.flow import wait_terminal
from tests.support.apps import tome_of
from worker import counters


def require_package(load: Callable[[], object], module: str, extra: str) -> None:
    """Skip the calling test module where ``load()`` raises ImportError, with the reason; under CI (``CI``
    or ``TOME_TEST_REQUIRE_SERVICES=1``, as ``.ci/run`` sets) that is a failure instead, never a silent
    skip."""
    try:
        load()
    except ImportError as exc:  # pragma: no cover - depends on the environment
        if os.environ.get("CI") or os.environ.get("TOME_TEST_REQUIRE_SERVICES") == "1":
            raise
        pytest.skip(f"{module} is not importable ({exc}); install the {extra} extra", allow_module_level=True)


def prompt_counts(app: Flask, engine: str) -> dict[str, float]:
    """The speaker-prompt cache counters of ``engine`` (builds, hits, misses), by name."""
    all_counts = counters.read_all(tome_of(app).sessions())
    return {name: value for (name, of), value in all_counts.items() if of == engine}


def render(
    client: FlaskClient,
    user: dict[str, str],
    engine: str,
    *,
    title: str,
    script: str,
    output: Mapping[str, Any],
) -> dict[str, Any]:
    """Submit a Markdown job in the voice ``narrator`` and wait until it succeeds on ``engine``."""
    job = submit_job(
        client, user, "narrator", title=title, script=script, script_format="markdown", output=output
    )
    assert job.status_code == 202, job.json
    assert job.json["engine"] == engine
    done = wait_terminal(client, user, job.json["id"], timeout=300)
    assert done["status"] == "succeeded", done
    return done
