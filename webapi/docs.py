"""GET /docs: the interactive API reference (Swagger UI) over the app's own /openapi.json.

Swagger UI's files come from the ``flask-swagger-ui`` wheel and are served from here: no CDN, no external
URL, works offline. The page is public, like /openapi.json. The app's CSP allows nothing, so these
responses carry their own: same-origin scripts, styles and fetches only (the start-up script is a file,
not inline), ``data:`` images for the stylesheet's icons, no framing.
"""

from __future__ import annotations

from importlib.resources import files

from flask import Blueprint, Response, abort, render_template_string, url_for

bp = Blueprint("docs", __name__)

ASSETS = {  # served file -> content type; nothing else of the package is reachable
    "swagger-ui.css": "text/css; charset=utf-8",
    "index.css": "text/css; charset=utf-8",
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "favicon-32x32.png": "image/png",
}
DOCS_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
CACHE = "public, max-age=86400"

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Tome API reference</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="{{ asset('swagger-ui.css') }}">
<link rel="stylesheet" href="{{ asset('index.css') }}">
<link rel="icon" type="image/png" href="{{ asset('favicon-32x32.png') }}">
</head>
<body>
<div id="swagger-ui" data-spec-url="{{ spec_url }}"></div>
<script src="{{ asset('swagger-ui-bundle.js') }}"></script>
<script src="{{ url_for('docs.init_script') }}"></script>
</body>
</html>
"""

# No validatorUrl: Swagger UI would otherwise send the document to an external validator.
INIT_JS = """"use strict";
window.addEventListener("load", function () {
  var root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.getAttribute("data-spec-url"),
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null,
    persistAuthorization: false,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout"
  });
});
"""


def _secured(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = DOCS_CSP
    return response


@bp.get("/docs")
def docs() -> Response:
    html = render_template_string(
        PAGE,
        asset=lambda name: url_for("docs.asset", name=name),
        spec_url=url_for("health.openapi"),
    )
    response = Response(html, mimetype="text/html")
    response.headers["Cache-Control"] = "no-cache"
    return _secured(response)


@bp.get("/docs/init.js")
def init_script() -> Response:
    response = Response(INIT_JS, content_type="text/javascript; charset=utf-8")
    response.headers["Cache-Control"] = CACHE
    return _secured(response)


@bp.get("/docs/assets/<name>")
def asset(name: str) -> Response:
    if name not in ASSETS:
        abort(404)
    data = (files("flask_swagger_ui") / "dist" / name).read_bytes()
    response = Response(data, content_type=ASSETS[name])
    response.headers["Cache-Control"] = CACHE
    return _secured(response)
