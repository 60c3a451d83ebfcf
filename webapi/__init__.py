"""Tome's REST API: ``create_app(config)`` builds it; ``flask --app webapi ...`` finds it."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from flask import Flask

from worker.config import Settings, load_settings
from worker.logs import JsonFormatter


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """Build the app. ``config`` may hold a ``Settings`` under ``"settings"`` or Settings field overrides;
    anything not given comes from ``TOME_*`` environment variables."""
    from webapi import admin, docs, health, job_files, job_qa, jobs, keys, metrics, studio, usage, voices
    from webapi import file_links as link_views
    from webapi import integrations as integration_views
    from webapi import lexicons as lexicon_views
    from webapi import previews as preview_views
    from webapi import scripts as script_views
    from webapi import speech as speech_views
    from webapi.bodies import yielding_bodies
    from webapi.cli import register_cli
    from webapi.errors import register_error_handlers
    from webapi.extensions import init_tome
    from webapi.headers import register_security_headers
    from webapi.observe import register_request_observation

    config = dict(config or {})
    settings = config.pop("settings", None)
    if not isinstance(settings, Settings):
        settings = load_settings(**config)
    app = Flask(__name__)
    # Werkzeug refuses larger bodies with a 413 before reading them; the upload view counts again.
    app.config["MAX_CONTENT_LENGTH"] = (
        max(settings.limits.max_upload_bytes, settings.limits.max_script_chars * 4) + 65536
    )
    app.json.sort_keys = False  # type: ignore[attr-defined]
    init_tome(app, settings)
    register_request_observation(app)  # first: every later hook and view logs under the request's id
    register_error_handlers(app)
    register_security_headers(app)
    for blueprint in (health.bp, metrics.bp, voices.bp, jobs.bp, job_files.bp, job_qa.bp, usage.bp, admin.bp):
        app.register_blueprint(blueprint)
    app.register_blueprint(script_views.bp)  # POST /v1/scripts/preview
    app.register_blueprint(preview_views.bp)  # GET /v1/previews/{id}: previews planned by a worker
    app.register_blueprint(lexicon_views.bp)  # /v1/lexicons
    app.register_blueprint(integration_views.bp)  # /v1/integrations/audiobookshelf: delivery into a library
    app.register_blueprint(docs.bp)  # GET /docs: Swagger UI over /openapi.json
    app.register_blueprint(speech_views.bp)  # POST /v1/audio/speech: OpenAI-compatible, streamed
    app.register_blueprint(keys.bp)  # POST /v1/keys/{key_id}/webhook-secret: rotation
    app.register_blueprint(link_views.bp)  # POST /v1/jobs/{id}/files/{name}/link: a signed URL
    app.register_blueprint(link_views.public)  # GET /v1/links/...: what that URL serves, no key
    app.register_blueprint(studio.bp)  # GET /: the web studio, a client of this API (webapi/studio.py)
    register_cli(app)
    app.wsgi_app = yielding_bodies(app.wsgi_app)  # type: ignore[method-assign,assignment]
    _log_through_gunicorn(json_lines=settings.observability.log_format == "json")
    return app


def _log_through_gunicorn(json_lines: bool = False) -> None:
    """Under gunicorn, the API's own log lines (``webapi.*``, ``worker.*``) go where gunicorn's error log
    goes, at its level; without this they are dropped, as the root logger has no handler there. Outside
    gunicorn (tests, the CLI) logging is left as the caller set it up."""
    gunicorn = logging.getLogger("gunicorn.error")
    root = logging.getLogger()
    if not gunicorn.handlers or root.handlers:
        return
    formatter: logging.Formatter = (
        JsonFormatter()
        if json_lines
        else logging.Formatter("%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s")
    )
    for handler in gunicorn.handlers:
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(gunicorn.level)
    gunicorn.propagate = False  # its own lines are already written by these handlers
