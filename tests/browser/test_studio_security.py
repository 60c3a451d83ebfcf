"""The studio against hostile input and the wrong keys, in a real browser, on an API with no worker (jobs
stay queued, which the cancel button needs): markup in names, transcripts, titles and chapter titles is
shown as text; the key stays out of URLs and cookies; a user's key gets no admin section (and the admin
API refuses it anyway); the page loads nothing from elsewhere and carries a strict CSP."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest

from tests.browser.conftest import Stack
from tests.browser.studio import Studio
from webapi.headers import SECURITY_HEADERS
from webapi.studio import STUDIO_CSP

pytestmark = pytest.mark.e2e

HOSTILE = "<img src=x onerror=alert(1)>"
# The second chapter's title holds markup (in a code span, which Markdown keeps as text in the heading).
SCRIPT = f"""# One

The fog came in before dawn, and the harbour lay quiet for a long while.

# Two `{HOSTILE}`

By noon the wind had turned, and the boats strained at their moorings all afternoon.
"""
NO_MARKUP = "return document.querySelectorAll('img, [onerror]').length"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, reference_audio: tuple[bytes, str]) -> Path:
    path = tmp_path_factory.mktemp("ref") / "reference.wav"
    path.write_bytes(reference_audio[0])
    return path


def test_the_page_has_a_strict_csp_and_only_same_origin_assets(stack: Stack) -> None:
    page = httpx.get(f"{stack.url}/")
    assert page.status_code == 200
    assert page.headers["Content-Type"] == "text/html; charset=utf-8"
    assert page.headers["Content-Security-Policy"] == STUDIO_CSP
    directives = dict(part.strip().partition(" ")[::2] for part in STUDIO_CSP.split(";"))
    assert directives["default-src"] == "'none'"
    assert directives["script-src"] == "'self'"  # no inline script, no eval, no other host
    assert directives["style-src"] == "'self'"
    assert directives["connect-src"] == "'self'"
    assert directives["require-trusted-types-for"] == "'script'"
    for name in ("X-Content-Type-Options", "X-Frame-Options", "Referrer-Policy"):
        assert page.headers[name] == SECURITY_HEADERS[name]

    refs = _Refs()
    refs.feed(page.text)
    assert not refs.inline, refs.inline  # no inline script, style or event handler
    assert refs.urls == ["/studio/assets/icon.svg", "/studio/assets/studio.css", "/studio/assets/studio.js"]
    for url in refs.urls:
        asset = httpx.get(f"{stack.url}{url}")
        assert asset.status_code == 200, url
        assert asset.headers["Content-Security-Policy"] == STUDIO_CSP
        again = httpx.get(f"{stack.url}{url}", headers={"If-None-Match": asset.headers["ETag"]})
        assert again.status_code == 304
    for name in ("index.html", "..%2Fstudio.py", "nope.js"):
        assert httpx.get(f"{stack.url}/studio/assets/{name}").status_code == 404, name


class _Refs(HTMLParser):
    """The page's own URLs (href, src) and anything inline that the CSP would block."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.inline: list[str] = []
        self._tag = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._tag = tag
        for name, value in attrs:
            if name in ("src", "href") and value and not value.startswith("#"):
                self.urls.append(value)
            if name.startswith("on") or name == "style":
                self.inline.append(f"{tag} {name}")
        if tag == "style":
            self.inline.append("style")

    def handle_endtag(self, tag: str) -> None:
        self._tag = ""

    def handle_data(self, data: str) -> None:
        if self._tag == "script" and data.strip():
            self.inline.append("script")


def test_a_wrong_key_is_refused_and_the_key_lives_in_session_storage_only(
    studio: Studio, stack: Stack
) -> None:
    studio.go("")
    studio.wait(lambda: studio.shown("#api-key"), what="the sign-in form")
    studio.fill("#api-key", "tome_not-a-key")
    studio.click("#signin-form button[type=submit]")
    studio.wait_text("#problem", "refused this key")
    assert studio.js("return sessionStorage.length") == 0
    assert not studio.shown("#nav")

    studio.sign_in(stack.alice)
    assert studio.js("return sessionStorage.getItem('tome.apiKey')") == stack.alice
    assert studio.js("return localStorage.length") == 0
    assert studio.js("return document.cookie") == ""
    assert studio.find("#api-key").get_attribute("value") == ""  # not left in the form either
    studio.driver.refresh()  # the tab keeps it
    studio.wait_text("#who-text", "Signed in as alice")

    studio.click("#sign-out")
    studio.wait(lambda: studio.shown("#api-key"), what="signed out")
    assert studio.js("return sessionStorage.getItem('tome.apiKey')") is None


def test_markup_in_names_transcripts_and_titles_is_shown_as_text(
    studio: Studio, stack: Stack, reference: Path
) -> None:
    studio.sign_in(stack.alice)
    # A voice named with markup: the API refuses such names; its message is shown, as text.
    studio.fill("#voice-name", HOSTILE)
    studio.fill("#voice-text", f"{HOSTILE} The old keeper climbed the stairs.")
    studio.find("#voice-audio").send_keys(str(reference))
    studio.click("#voice-form button[type=submit]")
    assert "field name" in studio.wait_text("#problem", "a voice name starts with a letter or digit").text
    # A transcript with markup is accepted: the table shows it as it was typed.
    studio.fill("#voice-name", "Keeper")
    studio.find("#voice-audio").send_keys(str(reference))
    studio.click("#voice-form button[type=submit]")
    row = studio.wait_text("#voices-table tbody tr", "Keeper")
    assert row.find_element("css selector", "td.transcript").text.startswith(HOSTILE)

    # A job whose title and second chapter's title are markup: preview, job page, list.
    studio.nav("New job")
    studio.wait(lambda: studio.finds("#job-voice option"), what="the voices in the form")
    studio.fill("#job-title", HOSTILE)
    studio.fill("#job-script", SCRIPT)
    studio.click("#job-preview-button")
    studio.wait(lambda: studio.shown("#preview"), what="the preview")
    chapters = [row.text for row in studio.finds("#preview-chapters tbody th")]
    assert chapters == ["One", f"Two {HOSTILE}"]
    assert HOSTILE in studio.text("#preview-summary")
    assert studio.js(NO_MARKUP) == 0
    studio.click("#job-submit")
    studio.wait_text("#job-title-heading", HOSTILE)
    assert [b.text for b in studio.finds("#job-chapters button")] == ["One", f"Two {HOSTILE}"]
    assert studio.driver.title.startswith(HOSTILE)
    assert studio.js(NO_MARKUP) == 0
    assert studio.no_alert()
    studio.screenshot("hostile-job")

    # Nothing renders it here (no worker): it stays queued until cancelled from the page.
    assert studio.text("#job-status") == "queued"
    studio.click("#job-cancel")
    studio.wait(lambda: studio.text("#job-status") == "cancelled", what="cancelled")
    assert not studio.shown("#job-cancel")
    studio.nav("Jobs")
    row = studio.wait_text("#jobs-table tbody tr", "cancelled")
    assert row.find_element("css selector", "th").text == HOSTILE
    assert studio.js(NO_MARKUP) == 0

    # The voice, free again, is deleted with two presses.
    studio.nav("Voices")
    delete = studio.wait(lambda: studio.find("#voices-table tbody tr button"), what="the delete button")
    delete.click()
    assert delete.text == "Press again to delete"
    delete.click()
    studio.wait_text("#notice", "Voice Keeper deleted")
    studio.wait(lambda: studio.shown("#voices-empty"), what="no voice left")
    assert studio.no_alert()


def test_a_user_key_sees_no_admin_section_and_the_admin_api_refuses_it(studio: Studio, stack: Stack) -> None:
    studio.sign_in(stack.bob)
    studio.wait_text("#who-text", "Signed in as bob")
    assert not studio.shown("#nav-admin")
    studio.go("#/admin")
    studio.wait(lambda: studio.shown("#view-voices"), what="the voices instead of admin")
    assert not studio.shown("#view-admin")
    assert studio.finds("#admin-table tbody tr") == []
    status = studio.js_async(
        "fetch('/v1/admin/voices', {headers: {Authorization: "
        "'Bearer ' + sessionStorage.getItem('tome.apiKey')}}).then(r => done(r.status))"
    )
    assert status == 403
    assert studio.js("return document.querySelectorAll('#voices-table tbody tr').length") == 0  # not alice's


def test_every_request_stayed_on_the_origin_and_markup_cannot_be_injected(
    studio: Studio, stack: Stack
) -> None:
    studio.check_requests([stack.alice, stack.bob, stack.admin, "tome_not-a-key"])
    # Trusted Types without a policy: even the page's own code could not parse a string as markup.
    outcome = studio.js(
        "try { document.getElementById('notice').innerHTML = '<b>x</b>'; return 'parsed'; }"
        " catch (e) { return e.name; }"
    )
    assert outcome == "TypeError"
    assert studio.js("return document.querySelectorAll('#notice b').length") == 0
