"""The studio's main path in a real browser against a real stack: sign in, upload a voice and watch its
speaker prompt become ready, paste a book, preview it, submit it, watch it render, play it, seek by
chapter, read its subtitles, download a file; then a job whose chunks QA flagged (listen, re-render) and
the admin's view of every owner's caches. Screenshots of each page go to var/test-artifacts/studio/."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from sqlalchemy import update

from models import Job, make_engine
from tests.browser.conftest import Stack
from tests.browser.studio import Studio
from worker.processes import WorkerProcess

pytestmark = pytest.mark.e2e

BOOK = """# One

The fog came in before dawn, and the harbour lay quiet for a long while.

# Two

By noon the wind had turned, and the boats strained at their moorings all afternoon.
"""
# Other sentences than BOOK's: chunks an earlier job rendered would be reused as they are, without new checks.
CHECKED = """# Morning

The gulls were loud over the water, and the nets lay drying along the wall.

# Evening

When the lamps were lit, the keeper wrote the day's weather in his book.
"""
RENDER_TIMEOUT = 90


@pytest.fixture(scope="module")
def reference(
    tmp_path_factory: pytest.TempPathFactory, reference_audio: tuple[bytes, str]
) -> tuple[Path, str]:
    audio, transcript = reference_audio
    path = tmp_path_factory.mktemp("ref") / "reference.wav"
    path.write_bytes(audio)
    return path, transcript


def job_id_of(studio: Studio) -> str:
    url: str = studio.driver.current_url
    return url.rsplit("#/jobs/", 1)[1]


def wait_succeeded(studio: Studio, timeout: float = RENDER_TIMEOUT) -> None:
    studio.wait(
        lambda: studio.text("#job-status") in {"succeeded", "failed", "cancelled"}, timeout, "job ended"
    )
    assert studio.text("#job-status") == "succeeded", studio.text("#job-error")


def test_voice_book_preview_render_play_and_download(
    studio: Studio, stack: Stack, worker: WorkerProcess, reference: tuple[Path, str]
) -> None:
    studio.go("")
    studio.wait(lambda: studio.shown("#api-key"), what="the sign-in form")
    assert studio.js("return document.activeElement.id") == "api-key"
    studio.screenshot("sign-in")
    studio.sign_in(stack.alice)
    studio.wait_text("#who-text", "Signed in as alice")
    assert not studio.shown("#nav-admin")  # a user's key

    # A voice: upload, then its speaker prompt goes to ready while the page polls.
    ref, transcript = reference
    studio.fill("#voice-name", "Narrator")
    studio.fill("#voice-text", transcript)
    studio.find("#voice-audio").send_keys(str(ref))
    studio.click("#voice-form button[type=submit]")
    studio.wait_text("#notice", "Voice Narrator uploaded")
    studio.wait_text("#voices-table tbody tr th", "Narrator")
    studio.wait(lambda: studio.text("#voices-table tbody tr .badge") == "ready", 60, "the voice ready")
    studio.screenshot("voices")

    # A book: pasted, previewed, submitted.
    studio.nav("New job")
    studio.wait(lambda: studio.finds("#job-voice option"), what="the voices in the form")
    studio.fill("#job-title", "The Harbour")
    studio.fill("#job-script", BOOK)
    studio.choose("#job-format", "mp3")
    studio.click("#job-readalong")
    assert not studio.find("#job-submit").is_enabled()  # preview first
    studio.click("#job-preview-button")
    studio.wait(lambda: studio.shown("#preview"), what="the preview")
    titles = [row.text for row in studio.finds("#preview-chapters tbody th")]
    assert titles == ["One", "Two"]
    assert "Chunks" in studio.text("#preview-summary")
    assert studio.find("#job-submit").is_enabled()
    studio.screenshot("new-job-preview")
    studio.click("#job-submit")
    studio.wait(lambda: "#/jobs/" in studio.driver.current_url, what="the job page")
    job_id = job_id_of(studio)
    studio.js("window.studioTestMarker = 1")  # gone if the page reloaded

    # Live progress, without reloading, until it has succeeded.
    studio.wait_text("#job-title-heading", "The Harbour")
    assert studio.text("#job-status") in {"queued", "running", "stitching", "succeeded"}
    assert "chunks" in studio.text("#job-progress-text")
    wait_succeeded(studio)
    studio.wait(lambda: "queued" not in studio.text("#notice"), what="the queued notice cleared at the end")
    assert studio.js("return window.studioTestMarker") == 1
    assert studio.js("return document.getElementById('job-progress').value") == 100

    # The player: it plays, and a chapter click seeks to the chapter's start.
    with stack.api(stack.alice) as api:
        job = api.get(f"/v1/jobs/{job_id}").json()
        book = api.get(job["output"]["url"]).content
    audio = "document.getElementById('job-audio')"
    studio.wait(lambda: studio.js(f"return {audio}.readyState >= 1 && {audio}.duration > 0"), what="audio")
    assert abs(studio.js(f"return {audio}.duration") - job["output"]["duration"]) < 0.2
    # streamed from a signed link (no key in it, only the key's id), not a blob of the whole book
    src = studio.js(f"return {audio}.getAttribute('src')")
    assert src.startswith(f"/v1/links/{job_id}/"), src
    assert "signature=" in src, src
    assert stack.alice not in src
    studio.js_async(f"{audio}.play().then(() => done(true), (e) => done(String(e)))")
    studio.wait(lambda: studio.js(f"return {audio}.currentTime") > 0.3, 10, "playback advancing")
    studio.js(f"{audio}.pause()")
    # the browser asked for byte ranges: the link answered 206 (Partial Content), as the page and the
    # server's access log both show
    studio.collect_logs()
    assert 206 in [status for url, status in studio.responses if "/v1/links/" in url], studio.responses
    access = (stack.root / "api.stdout").read_text(errors="replace")
    assert re.search(r'"GET /v1/links/[^" ]+ HTTP/1\.1" 206 ', access), access[-2000:]
    # a link that stops working (it expired; here its signature is broken) is replaced by a new one
    broken = src.replace("signature=", "signature=x")
    studio.js(f"{audio}.src = arguments[0]", broken)
    studio.wait(
        lambda: studio.js(
            f"const a = {audio}; return a.getAttribute('src') !== arguments[0] && a.readyState >= 1", broken
        ),
        what="the player on a new link",
    )
    assert studio.js(f"return {audio}.getAttribute('src')").startswith(f"/v1/links/{job_id}/")
    chapters = studio.finds("#job-chapters button")
    assert [b.text for b in chapters] == ["One", "Two"]
    chapters[1].click()
    start = job["chapters"][1]["start"]
    assert start > 1
    assert abs(studio.js(f"return {audio}.currentTime") - start) <= 0.1

    # Subtitles: the job's WebVTT file is the player's track, its cues loaded.
    track = "document.querySelector('#job-audio track')"
    assert studio.js(f"return {track}.src").startswith("blob:")
    studio.wait(lambda: studio.js(f"return {track}.track.cues && {track}.track.cues.length > 0"), what="cues")
    assert "fog" in studio.js(f"return Array.from({track}.track.cues, c => c.text).join(' ')")

    # Files: listed, and downloaded byte for byte.
    names = [row.text for row in studio.finds("#job-files tbody th")]
    assert names[0] == "The Harbour.mp3" or names[0].endswith(".mp3"), names
    assert {"book.vtt", "book.srt", "manifest.json", "book-readalong.epub"} <= set(names)
    studio.find(f"#job-files tbody tr[data-file='{names[0]}'] button").click()
    assert studio.downloaded(names[0]) == book
    with stack.api(stack.alice) as api:  # the form's checkbox asked for it
        listed = api.get(job["output"]["files_url"]).json()["files"]
        readalong = next(f for f in listed if f["name"] == "book-readalong.epub")
        assert readalong["kind"] == "readalong"
        assert api.get(readalong["url"]).content[:2] == b"PK"
    studio.wait_text("#notice", f"Downloaded {names[0]}")
    assert "Every chunk passed" in studio.wait_text("#qa-summary", "passed").text
    studio.js(f"{audio}.currentTime = 0")
    studio.screenshot("job")  # the README's screenshot

    studio.nav("Jobs")
    row = studio.wait_text("#jobs-table tbody tr", "The Harbour")
    assert "succeeded" in row.text
    assert studio.text("#notice") == "", "another page's notice stays on its page"
    studio.screenshot("jobs")


def test_flagged_chunks_can_be_heard_and_rendered_again(
    studio: Studio, stack: Stack, worker: WorkerProcess
) -> None:
    """A job whose QA thresholds flag every chunk (pauses of 10 ms at most, no second take): the page lists
    the flagged chunks with their reasons, plays one, and renders one again (revision 1)."""
    strict = {"max_rerenders": 0, "thresholds": {"max_pause_s": 0.01}}
    with stack.api(stack.alice) as api:
        submitted = api.post(
            "/v1/jobs",
            json={"title": "Flagged", "script": CHECKED, "script_format": "markdown", "voice": "Narrator",
                  "output": {"format": "mp3"}, "qa": strict},
        )  # fmt: skip
        assert submitted.status_code == 202, submitted.text
        job_id = submitted.json()["id"]
    studio.sign_in(stack.alice)
    studio.go(f"#/jobs/{job_id}")
    studio.wait_text("#job-title-heading", "Flagged")
    wait_succeeded(studio)
    studio.wait_text("#qa-summary", "flagged")
    with stack.api(stack.alice) as api:
        qa = api.get(f"/v1/jobs/{job_id}/qa", params={"flagged": "true"}).json()
    assert qa["chunks_flagged"] > 0
    items = studio.finds("#qa-flagged > li")
    assert [int(i.get_attribute("data-seq") or -1) for i in items] == [c["seq"] for c in qa["chunks"]]
    first = items[0]
    assert qa["chunks"][0]["reasons"][0] in first.text

    first.find_element(By.XPATH, ".//button[text()='Listen']").click()
    player = "document.querySelector('#qa-flagged > li audio')"
    studio.wait(lambda: studio.js(f"return {player}.readyState >= 1 && {player}.duration > 0"), what="chunk")
    assert studio.js(f"return {player}.src").startswith("blob:")
    studio.screenshot("job-qa")

    first.find_element(By.XPATH, ".//button[text()='Re-render']").click()
    studio.wait_text("#notice", "is being rendered again")
    studio.wait(
        lambda: (
            "revision 1" in studio.text("#job-progress-text") and studio.text("#job-status") == "succeeded"
        ),
        RENDER_TIMEOUT,
        "revision 1 rendered",
    )
    with stack.api(stack.alice) as api:
        assert api.get(f"/v1/jobs/{job_id}").json()["revision"] == 1
    studio.wait(lambda: "rendered again" not in studio.text("#notice"), what="the re-render notice cleared")
    studio.wait(
        lambda: studio.js("return document.getElementById('job-audio').duration > 0"), what="new book"
    )
    # a re-render whose new take failed (the worker's path is tested in tests/api/test_rerender.py; here
    # its record is set as that path leaves it): the page says why and that the previous take stayed
    engine = make_engine(stack.settings.sqlalchemy_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                update(Job)
                .where(Job.id == uuid.UUID(job_id))
                .values(
                    rerender={"seq": 3, "revision": 2, "error": "chunk 3 could not be rendered: <b>no</b>"}
                )
            )
    finally:
        engine.dispose()
    studio.go("#/jobs")
    studio.go(f"#/jobs/{job_id}")
    error = studio.wait_text("#job-error", "The re-render of chunk 3 was refused, its previous take kept")
    assert "<b>no</b>" in error.text, "the error is shown as text, never as markup"
    assert studio.text("#job-status") == "succeeded"


def test_an_admin_sees_every_owners_caches_and_rebuilds_them(
    studio: Studio, stack: Stack, worker: WorkerProcess
) -> None:
    studio.sign_in(stack.admin)
    studio.wait_text("#who-text", "root (admin)")
    assert studio.shown("#nav-admin")
    studio.nav("Admin")
    row = studio.wait_text("#admin-table tbody tr", "Narrator")
    assert "alice" in row.text
    assert "ready" in row.text

    studio.choose("#admin-status", "failed")
    studio.wait(lambda: studio.shown("#admin-empty"), what="no failed cache")
    studio.click("#admin-rebuild-failed")
    studio.wait_text("#notice", "Failed caches: 0 of 0 queued")
    studio.choose("#admin-status", "ready")
    studio.wait_text("#admin-table tbody tr", "Narrator")

    studio.choose("#admin-status", "")
    studio.press("#admin-table tbody tr button")
    studio.wait_text("#notice", "Rebuilding alice/Narrator")
    studio.wait(lambda: studio.text("#admin-table tbody tr .badge") == "ready", 60, "rebuilt")
    with stack.api(stack.admin) as api:
        [voice] = api.get("/v1/admin/voices").json()["voices"]
    assert voice["cache_status"] == "ready"
    studio.screenshot("admin")


def test_every_request_stayed_on_the_origin_without_a_key_in_its_url(studio: Studio, stack: Stack) -> None:
    urls = studio.check_requests([stack.alice, stack.bob, stack.admin])
    assert any("/v1/links/" in url for url in urls)  # the player's stream: a signed link, no key in it
    assert any(url.startswith("blob:") for url in urls)


# What passes the viewport, or squeezes a table column below its words (see the script).
OVERFLOW = (Path(__file__).parent / "overflow.js").read_text(encoding="utf-8")
WIDTHS = (390, 1280)


def fits(studio: Studio, page: str, width: int) -> None:
    """The page as it is now fits ``width``: nothing passes the viewport but in a table's scrolling box."""
    assert studio.js("return window.innerWidth") == width
    studio.screenshot(f"layout-{width}-{page}")
    assert studio.js(OVERFLOW) == [], f"{page} at {width} px"


def test_every_page_fits_a_phone_and_a_laptop(studio: Studio, stack: Stack, worker: WorkerProcess) -> None:
    """The voices, a new job's preview, a finished job (player, chapters, files, QA), the jobs and the admin
    pages at 390 and 1280 CSS pixels wide: nothing passes the screen's right edge except inside a table's
    sideways-scrolling box, and no column is narrower than its words. Screenshots:
    var/test-artifacts/studio/layout-WIDTH-PAGE.png."""
    with stack.api(stack.alice) as api:
        jobs = api.get("/v1/jobs").json()["jobs"]
    [job_id] = [job["id"] for job in jobs if job["title"] == "The Harbour"]
    try:
        for width in WIDTHS:
            studio.driver.execute_cdp_cmd(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 800},
            )
            studio.sign_in(stack.alice)
            studio.go("#/voices")
            studio.wait_text("#voices-table tbody tr th", "Narrator")
            fits(studio, "voices", width)

            studio.go("#/new")
            studio.wait(lambda: studio.finds("#job-voice option"), what="the voices in the form")
            studio.fill("#job-title", "The Harbour")
            studio.fill("#job-script", BOOK)
            studio.click("#job-preview-button")
            studio.wait(lambda: studio.shown("#preview"), what="the preview")
            fits(studio, "new-job-preview", width)
            assert studio.text("#notice").startswith("Preview:")
            studio.find("#job-title").send_keys(", again")  # the preview is out of date, its summary too
            studio.wait(lambda: studio.text("#notice") == "", what="the preview's notice cleared")

            studio.go(f"#/jobs/{job_id}")
            studio.wait_text("#qa-summary", "passed")
            studio.wait(
                lambda: studio.js("return document.getElementById('job-audio').duration > 0"),
                what="the player loaded",
            )
            assert studio.finds("#job-files tbody tr")
            assert studio.finds("#job-chapters button")
            fits(studio, "job", width)

            studio.go("#/jobs")
            studio.wait(lambda: len(studio.finds("#jobs-table tbody tr")) == len(jobs), what="every job")
            fits(studio, "jobs", width)

            studio.sign_in(stack.admin)
            studio.go("#/admin")
            studio.wait_text("#admin-table tbody tr", "Narrator")
            fits(studio, "admin", width)
    finally:
        studio.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
