"""GET /docs: Swagger UI served from the app itself (no CDN), public, under a CSP that lets it run."""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import urlsplit

from flask.testing import FlaskClient

from webapi.headers import SECURITY_HEADERS


class _Refs(HTMLParser):
    """Every URL the page loads or links to, and whether it has inline script."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.inline_script = False
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href", "data-spec-url", "action") and value:
                self.urls.append(value)
            if name.startswith("on"):
                self.inline_script = True
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline_script = True


def _page(client: FlaskClient) -> tuple[str, _Refs]:
    response = client.get("/docs")  # no key: the reference is public, like /openapi.json
    assert response.status_code == 200
    assert response.mimetype == "text/html"
    html = response.get_data(as_text=True)
    refs = _Refs()
    refs.feed(html)
    return html, refs


def test_docs_page_loads_only_same_origin_assets(client: FlaskClient) -> None:
    html, refs = _page(client)
    assert "http://" not in html
    assert "https://" not in html
    assert "//" not in html  # no scheme-relative URL either
    assert len(refs.urls) >= 5, refs.urls
    for url in refs.urls:
        parts = urlsplit(url)
        assert not parts.scheme, url
        assert not parts.netloc, url
        assert url.startswith("/"), url


def test_every_asset_answers_with_its_content_type(client: FlaskClient) -> None:
    _, refs = _page(client)
    expected = {
        ".js": "text/javascript",
        ".css": "text/css",
        ".png": "image/png",
        ".json": "application/json",
    }
    kinds = set()
    for url in refs.urls:
        response = client.get(url)
        assert response.status_code == 200, url
        suffix = next(s for s in expected if url.endswith(s))
        assert response.mimetype == expected[suffix], (url, response.mimetype)
        assert len(response.data) > 0, url
        kinds.add(suffix)
    assert kinds == set(expected)


def test_the_page_starts_swagger_ui_on_the_apps_own_document(client: FlaskClient) -> None:
    _, refs = _page(client)
    assert "/openapi.json" in refs.urls
    init = next(u for u in refs.urls if u.endswith("init.js"))
    script = client.get(init).get_data(as_text=True)
    assert "SwaggerUIBundle(" in script
    assert "validatorUrl: null" in script  # else the document is sent to an external validator
    bundle = next(u for u in refs.urls if u.endswith("swagger-ui-bundle.js"))
    assert "SwaggerUIBundle" in client.get(bundle).get_data(as_text=True)[:2_000_000]


def _csp(header: str) -> dict[str, str]:
    directives = (part.strip().partition(" ") for part in header.split(";"))
    return {name: value for name, _, value in directives}


def test_the_csp_allows_the_page_and_nothing_inline_or_foreign(client: FlaskClient) -> None:
    _, refs = _page(client)
    assert not refs.inline_script  # the CSP below would block it
    for url in ["/docs", *refs.urls]:
        response = client.get(url)
        for name in ("X-Content-Type-Options", "X-Frame-Options", "Referrer-Policy"):
            assert response.headers[name] == SECURITY_HEADERS[name], (url, name)
        if url == "/openapi.json":  # the API's own answers keep the API's CSP
            assert response.headers["Content-Security-Policy"] == SECURITY_HEADERS["Content-Security-Policy"]
            continue
        csp = _csp(response.headers["Content-Security-Policy"])
        assert csp["default-src"] == "'none'", url
        assert csp["script-src"] == "'self'", url  # no 'unsafe-inline', no 'unsafe-eval', no other host
        assert csp["style-src"] == "'self'", url
        assert csp["connect-src"] == "'self'", url  # Swagger UI fetches /openapi.json
        assert csp["frame-ancestors"] == "'none'", url
        assert "http" not in response.headers["Content-Security-Policy"], url


def test_only_the_listed_swagger_files_are_served(client: FlaskClient) -> None:
    for name in ("../__init__.py", "LICENSE", "oauth2-redirect.html", "..%2F__init__.py", "nope.js"):
        assert client.get(f"/docs/assets/{name}").status_code == 404, name
