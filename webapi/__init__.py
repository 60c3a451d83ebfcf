"""Tome's REST API: ``create_app(config)`` builds it; ``flask --app webapi ...`` finds it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Flask

from worker.config import Settings, load_settings


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """Build the app. ``config`` may hold a ``Settings`` under ``"settings"`` or Settings field overrides;
    anything not given comes from ``TOME_*`` environment variables."""
    from webapi import admin, health, jobs, metrics, voices
    from webapi.cli import register_cli
    from webapi.errors import register_error_handlers
    from webapi.extensions import init_tome

    config = dict(config or {})
    settings = config.pop("settings", None)
    if not isinstance(settings, Settings):
        settings = load_settings(**config)
    app = Flask(__name__)
    # Werkzeug refuses larger bodies with a 413 before reading them; the upload view counts again.
    app.config["MAX_CONTENT_LENGTH"] = max(settings.max_upload_bytes, settings.max_script_chars * 4) + 65536
    app.json.sort_keys = False  # type: ignore[attr-defined]
    init_tome(app, settings)
    register_error_handlers(app)
    for blueprint in (health.bp, metrics.bp, voices.bp, jobs.bp, admin.bp):
        app.register_blueprint(blueprint)
    register_cli(app)
    return app
