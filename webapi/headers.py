"""Headers every response carries: no MIME sniffing (an uploaded "audio" file is never run as a page), no
framing, no referrer, and a CSP that allows nothing, since the API serves no HTML."""

from __future__ import annotations

from flask import Flask, Response

SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
}


def register_security_headers(app: Flask) -> None:
    @app.after_request
    def _secure(response: Response) -> Response:
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response
