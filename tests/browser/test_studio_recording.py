"""A reference recorded in the browser: Chromium's microphone is a WAV of speech (its fake capture device),
the studio records it with MediaRecorder, previews it and uploads it (WebM/Opus or Ogg, as the browser
makes it); the API decodes it, checks it and builds the voice's prompt."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.browser.conftest import Stack
from tests.browser.studio import Studio, chromium
from worker.processes import WorkerProcess

pytestmark = pytest.mark.e2e

RECORD_SECONDS = 4.0


@pytest.fixture(scope="module")
def microphone(
    tmp_path_factory: pytest.TempPathFactory, reference_audio: tuple[bytes, str]
) -> tuple[Path, str]:
    audio, transcript = reference_audio
    path = tmp_path_factory.mktemp("microphone") / "speech.wav"
    path.write_bytes(audio)
    return path, transcript


@pytest.fixture(scope="module")
def recording_studio(
    stack: Stack, microphone: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Studio]:
    with chromium(stack.url, tmp_path_factory.mktemp("downloads"), microphone=microphone[0]) as browser:
        yield browser


def test_a_voice_recorded_in_the_browser_is_uploaded_and_built(
    recording_studio: Studio, stack: Stack, worker: WorkerProcess, microphone: tuple[Path, str]
) -> None:
    studio = recording_studio
    studio.go("")
    studio.wait(lambda: studio.shown("#api-key"), what="the sign-in form")
    studio.sign_in(stack.alice)
    studio.wait_text("#who-text", "Signed in as alice")
    studio.wait(lambda: studio.shown("#record"), what="the record button (localhost is a secure context)")

    studio.fill("#voice-name", "Recorded")
    studio.fill("#voice-text", microphone[1])
    studio.click("#record")
    studio.wait_text("#record-state", "Recording")
    assert studio.find("#record").get_attribute("aria-pressed") == "true"
    time.sleep(RECORD_SECONDS)  # the length of the recording: what a person speaking takes
    studio.click("#record")
    studio.wait(lambda: "Recorded" in studio.text("#record-state"), what="the recording to end")
    assert studio.shown("#record-preview")
    assert studio.js("return document.querySelector('#record-preview').src").startswith("blob:")
    studio.screenshot("voice-recorded")

    studio.click("#voice-form button[type=submit]")
    studio.wait_text("#notice", "Voice Recorded uploaded")
    studio.wait(
        lambda: any(row.text.startswith("Recorded") for row in studio.finds("#voices-table tbody tr")),
        what="the voice in the table",
    )

    with httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {stack.alice}"}) as api:
        voices = {v["name"]: v for v in api.get("/v1/voices").json()["voices"]}
        voice = voices["Recorded"]
        assert voice["ref_text"] == microphone[1]
        # what the browser recorded, decoded by the API: about as long as the recording was
        assert RECORD_SECONDS - 1.0 < voice["audio_duration"] < RECORD_SECONDS + 2.0, voice
        deadline = time.monotonic() + 60
        while (state := api.get(f"/v1/voices/{voice['id']}").json()["cache_status"]) != "ready":
            assert state in {"pending", "processing"}, state
            assert time.monotonic() < deadline, "the recorded voice's prompt was not built"
            time.sleep(0.2)
