"""The studio's Cast panel in a real browser against a real stack: the preview lists the characters found
speaking with their lines and a sample; a voice picked for a character and a line's speaker corrected go
into the next preview (the line's chunk in that voice) and into the job that is queued."""

from __future__ import annotations

import httpx
import pytest

from tests.browser.conftest import Stack
from tests.browser.studio import Studio

pytestmark = pytest.mark.e2e

CHAPTER = """# The Quay

Margaret Ellis and Tom Hale waited on the quay in the rain.

“You are late,” said Tom.

“The boat was late,” Margaret replied.

“Again?”
"""


def _upload(api: httpx.Client, name: str, audio: bytes, transcript: str) -> str:
    files = {"audio": ("reference.wav", audio, "audio/wav")}
    response = api.post("/v1/voices", data={"name": name, "ref_text": transcript}, files=files)
    assert response.status_code == 202, response.text
    voice_id: str = response.json()["id"]
    return voice_id


def test_the_cast_panel_picks_voices_and_corrects_lines_before_the_job_is_queued(
    studio: Studio, stack: Stack, reference_audio: tuple[bytes, str]
) -> None:
    with stack.api(stack.alice) as api:
        ids = {name: _upload(api, name, *reference_audio) for name in ("narrator", "tom", "maggie")}
    studio.sign_in(stack.alice)
    studio.nav("New job")
    studio.wait(lambda: len(studio.finds("#job-voice option")) == 3, what="the voices in the form")
    studio.choose("#job-voice", ids["narrator"])
    studio.fill("#job-title", "The Quay")
    studio.fill("#job-script", CHAPTER)
    studio.click("#job-preview-button")
    studio.wait(lambda: studio.shown("#cast"), what="the cast panel")
    rows = [row.text for row in studio.finds("#cast-characters tbody th")]
    assert rows == ["Tom Hale (Tom)", "Margaret Ellis (Margaret)"]
    studio.click("#cast-lines-summary")  # open the list of lines
    lines = studio.finds("#cast-lines li")
    assert len(lines) == 3
    assert "You are late" in lines[0].text
    speakers = [studio.js(f"return document.getElementById('cast-line-{i}').value") for i in range(3)]
    assert speakers == ["Tom Hale", "Margaret Ellis", "Tom Hale"]

    # Tom gets his voice; line 3 ("Again?") goes to Margaret, who keeps the narrator's voice.
    studio.choose("#cast-voice-0", "tom")
    studio.choose("#cast-line-2", "Margaret Ellis")
    assert not studio.find("#job-submit").is_enabled()  # a new preview first
    assert "preview again" in studio.text("#cast-status")
    studio.click("#job-preview-button")
    studio.wait(lambda: studio.find("#job-submit").is_enabled(), what="the new preview")
    if not studio.shown("#cast-lines"):
        studio.click("#cast-lines-summary")
    assert studio.js("return document.getElementById('cast-line-2').value") == "Margaret Ellis"
    assert "corrected" in studio.finds("#cast-lines li")[2].text
    studio.screenshot("new-job-cast")
    studio.click("#job-submit")
    studio.wait(lambda: "#/jobs/" in studio.driver.current_url, what="the job page")
    job_id = studio.driver.current_url.rsplit("#/jobs/", 1)[1]
    with stack.api(stack.alice) as api:
        job = api.get(f"/v1/jobs/{job_id}").json()
        preview = api.post(
            "/v1/scripts/preview",
            json={
                "voice": ids["narrator"],
                "script": CHAPTER,
                "script_format": "markdown",
                "cast": {"voices": {"Tom Hale": "tom"}, "lines": {"2": "Margaret Ellis"}},
            },
        ).json()
    assert job["voice_ids"] == [ids["narrator"], ids["tom"]]
    assert job["progress"]["chunks_total"] == len(preview["chunks"])
    said = {c["written"]: (c["speaker"], c["voice_id"]) for c in preview["chunks"]}
    assert said["“You are late,”"] == ("Tom Hale", ids["tom"])
    assert said["“Again?”"] == ("Margaret Ellis", ids["narrator"])
