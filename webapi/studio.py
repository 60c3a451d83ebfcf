"""The web studio at ``/``: a small page (vanilla JavaScript and CSS, no build step) that is a client of the
REST API and nothing more. It uses the same endpoints and the same authorisation as any other client: the
user pastes an API key, the page keeps it in the tab's ``sessionStorage`` and sends it as
``Authorization: Bearer``; an admin key also sees the admin section, whose requests the API itself refuses
(403) for any other key.

The page and its three files come from the package folder ``webapi/studio_assets`` (no CDN, works
offline). The app's CSP allows nothing, so these responses carry their own, strict one: scripts and styles
from this origin only (no inline script or style, no eval), fetches to this origin only, media from this
origin or ``blob:`` URLs (the page fetches audio with the key in the header and plays it from a blob: the
key is never put in a URL), no framing, no form submission, and Trusted Types enforced, so that no code
path of the page can hand a string to ``innerHTML`` or the like: everything it shows is text.
"""

from __future__ import annotations

from importlib.resources import files

from flask import Blueprint, Response, abort, request

bp = Blueprint("studio", __name__)

ASSETS = {  # served file -> content type; nothing else of the package is reachable
    "studio.js": "text/javascript; charset=utf-8",
    "studio.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
STUDIO_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; media-src 'self' blob:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; "
    "require-trusted-types-for 'script'; trusted-types 'none'"
)
# Revalidated on every load (a 304 when unchanged), so a new release is never mixed with an old script.
CACHE = "no-cache"


def _read(name: str) -> bytes:
    return (files("webapi") / "studio_assets" / name).read_bytes()


def _served(data: bytes, content_type: str) -> Response:
    response = Response(data, content_type=content_type)
    response.headers["Cache-Control"] = CACHE
    response.headers["Content-Security-Policy"] = STUDIO_CSP
    response.add_etag()
    response.make_conditional(request)  # a 304 for a matching If-None-Match
    return response


@bp.get("/")
def page() -> Response:
    return _served(_read("index.html"), "text/html; charset=utf-8")


@bp.get("/studio/assets/<name>")
def asset(name: str) -> Response:
    if name not in ASSETS:
        abort(404)
    return _served(_read(name), ASSETS[name])
