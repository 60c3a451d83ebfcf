"""The studio's Delivery fieldset in a real browser against a real stack (gunicorn, Celery workers) and a
fake Audiobookshelf on 127.0.0.1: the job it queues asks for the library-layout ZIP and the upload, the job
page shows the delivery's state, and the fake receives the book with the owner's token."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.browser.conftest import Stack
from tests.browser.studio import Studio
from tests.support.api_server import running_api
from tests.support.apps import app_on
from tests.support.audiobookshelf import ABS_TOKEN, FakeAudiobookshelf
from webapi.cli import mint_key
from worker.config import load_settings
from worker.processes import WorkerProcess, api_command

pytestmark = pytest.mark.e2e

TOKEN = ABS_TOKEN


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """As conftest's stack, with a secret key and a loopback Audiobookshelf allowed."""
    root = tmp_path_factory.mktemp("studio-delivery")
    settings = load_settings(
        {},
        data_dir=root / "var",
        secret_key="studio-secret-key-0123456789abcdefghij",
        audiobookshelf_allow_private=True,
    )
    with app_on(settings) as app:
        alice = mint_key(app, owner="alice", name="studio", admin=False)
        bob = mint_key(app, owner="bob", name="studio", admin=False)
        admin = mint_key(app, owner="root", name="studio", admin=True)
    with running_api(settings, root, lambda bind: api_command(bind, workers=1)) as server:
        yield Stack(f"http://127.0.0.1:{server.port}", settings, root, alice, bob, admin)


def test_a_job_from_the_studio_is_delivered_into_audiobookshelf(
    studio: Studio,
    stack: Stack,
    worker: WorkerProcess,
    abs_server: FakeAudiobookshelf,
    reference_audio: tuple[bytes, str],
) -> None:
    audio, transcript = reference_audio
    with stack.api(stack.alice) as api:
        target = {"url": abs_server.url, "token": TOKEN}
        assert api.put("/v1/integrations/audiobookshelf", json=target).is_success
        files = {"audio": ("reference.wav", audio, "audio/wav")}
        voice = api.post("/v1/voices", data={"name": "narrator", "ref_text": transcript}, files=files)
        assert voice.status_code == 202, voice.text
    studio.sign_in(stack.alice)
    studio.nav("New job")
    studio.wait(lambda: studio.finds("#job-voice option"), what="the voices in the form")
    studio.fill("#job-title", "The Keeper")
    studio.fill("#job-script", "The keeper climbed the stairs at dusk.")
    studio.click("#job-library-zip")
    studio.fill("#job-abs-library", "lib_main")
    studio.fill("#job-abs-folder", "fol_books")
    studio.click("#job-preview-button")
    studio.wait(lambda: studio.find("#job-submit").is_enabled(), what="the preview")
    studio.click("#job-submit")
    studio.wait(lambda: "#/jobs/" in studio.driver.current_url, what="the job page")
    # Render, stitch and upload: minutes at most on a loaded CI machine (seconds alone).
    studio.wait_text("#job-delivery", "Audiobookshelf: delivered", timeout=300)
    studio.screenshot("job-delivered")
    job_id = studio.driver.current_url.rsplit("#/jobs/", 1)[1]
    with stack.api(stack.alice) as api:
        job = api.get(f"/v1/jobs/{job_id}").json()
        files = api.get(f"/v1/jobs/{job_id}/files").json()["files"]
        book = api.get(job["output"]["url"]).content
    assert job["delivery"] == {"audiobookshelf": {"state": "delivered", "attempts": 1, "error": None}}
    assert "library.zip" in {f["name"] for f in files}
    assert [(u.token, u.fields["title"], u.fields["library"]) for u in abs_server.uploads] == [
        (TOKEN, "The Keeper", "lib_main")
    ]
    assert abs_server.uploads[0].files["The Keeper.mp3"] == book
    studio.check_requests([stack.alice, TOKEN])
