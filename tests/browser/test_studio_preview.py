"""The studio's preview of a script over the inline cap, in a real browser against a real stack (gunicorn,
a real Celery worker): the server answers 202, the page polls the preview's Location and shows the preview
the worker planned, and the job it then submits is the one previewed."""

from __future__ import annotations

import pytest

from tests.browser.conftest import Stack
from tests.browser.studio import Studio
from worker.processes import WorkerProcess

pytestmark = pytest.mark.e2e

PARAGRAPH = "The tide came in over the flats, and the gulls rose from the mud in a long grey line. "


def _book(chars: int) -> str:
    half = "\n\n".join([PARAGRAPH * 4] * (chars // (2 * len(PARAGRAPH) * 4) + 1))
    return f"# Flood\n\n{half}\n\n# Ebb\n\n{half}\n"


def test_a_long_scripts_preview_is_polled_and_shown(
    studio: Studio, stack: Stack, worker: WorkerProcess, reference_audio: tuple[bytes, str]
) -> None:
    book = _book(stack.settings.limits.inline_plan_max_chars + 2_000)
    assert len(book) > stack.settings.limits.inline_plan_max_chars  # a worker plans its preview
    with stack.api(stack.alice) as api:
        files = {"audio": ("reference.wav", reference_audio[0], "audio/wav")}
        voice = api.post(
            "/v1/voices", data={"name": "tidewatcher", "ref_text": reference_audio[1]}, files=files
        )
        assert voice.status_code == 202, voice.text
    studio.sign_in(stack.alice)
    studio.nav("New job")
    studio.wait(lambda: studio.finds("#job-voice option"), what="the voices in the form")
    studio.choose("#job-voice", voice.json()["id"])
    studio.fill("#job-title", "Tides")
    studio.js("document.getElementById('job-script').value = arguments[0]", book)
    studio.js("document.getElementById('job-script').dispatchEvent(new Event('input', {bubbles: true}))")
    studio.click("#job-preview-button")
    studio.wait(lambda: studio.shown("#preview"), 120, "the preview a worker planned")
    assert [row.text for row in studio.finds("#preview-chapters tbody th")] == ["Flood", "Ebb"]
    polled = studio.js(
        "return performance.getEntriesByType('resource').map(e => e.name)"
        ".filter(n => n.includes('/v1/previews/')).length"
    )
    assert polled >= 1  # the page read the preview from its Location
    assert studio.find("#job-submit").is_enabled()
    studio.click("#job-submit")
    studio.wait(lambda: "#/jobs/" in studio.driver.current_url, what="the job page")
    job_id = studio.driver.current_url.rsplit("#/jobs/", 1)[1]
    with stack.api(stack.alice) as api:
        assert api.get(f"/v1/jobs/{job_id}").json()["title"] == "Tides"
        cancelled = api.post(f"/v1/jobs/{job_id}/cancel")  # the book itself is not this test's business
    assert cancelled.status_code in (200, 409), cancelled.text
