"""Per-job limits: what one small request can make a worker write is bounded; a refusal names the limit."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.support.cost import CpuMeter
from webapi.cli import mint_key
from worker.audio import Pauses
from worker.jobs.limits import JobEstimate, JobLimits, LimitExceeded, check, estimate
from worker.script import ChunkSpec

LIMITS = JobLimits(
    max_audio_seconds=100, max_chapters=3, max_chunks=10, max_pause_share=0.5, chars_per_second=10
)


def test_the_estimate_is_text_at_the_speaking_rate_plus_every_pause() -> None:
    specs = [
        ChunkSpec(0, 0, "a" * 40, "sentence"),
        ChunkSpec(1, 0, "b" * 60, "chapter"),
        ChunkSpec(2, 1, "c" * 100, "none"),
    ]
    size = estimate(specs, 2, Pauses(sentence=0.5, paragraph=1, chapter=3), chars_per_second=20)
    assert size == JobEstimate(speech_seconds=10.0, pause_seconds=3.5, chapters=2, chunks=3)
    assert size.total_seconds == 13.5


@pytest.mark.parametrize(
    ("size", "setting"),
    [
        (JobEstimate(10, 1, 1, 11), "TOME_MAX_CHUNKS_PER_JOB"),
        (JobEstimate(10, 1, 4, 5), "TOME_MAX_JOB_CHAPTERS"),
        (JobEstimate(90, 20, 1, 5), "TOME_MAX_JOB_AUDIO_SECONDS"),
        (JobEstimate(10, 11, 1, 5), "TOME_MAX_PAUSE_SHARE"),
    ],
)
def test_each_limit_is_named(size: JobEstimate, setting: str) -> None:
    with pytest.raises(LimitExceeded) as caught:
        check(size, LIMITS)
    assert caught.value.setting == setting


def test_a_job_within_every_limit_passes() -> None:
    check(JobEstimate(60, 30, 3, 10), LIMITS)  # exactly at each limit


@pytest.fixture
def narrator(client: FlaskClient, user: dict[str, str], reference_audio: tuple[bytes, str]) -> str:
    assert upload_voice(client, user, reference_audio[0]).status_code == 202
    return "narrator"


def test_the_2kb_silence_amplifier_is_refused_at_once(
    client: FlaskClient, user: dict[str, str], narrator: str
) -> None:
    """The hostile-tenant report: 200 headings and a 30 s chapter pause made 6,339 s of WAV from 2 KB
    (here with a word under each, since headings alone are refused as nothing to read)."""
    script = "".join(f"# {i}\n\nYes.\n\n" for i in range(200))
    meter = CpuMeter()
    response = submit_job(
        client,
        user,
        narrator,
        script=script,
        script_format="markdown",
        pauses={"chapter": 30},
        output={"format": "wav"},
    )
    elapsed = meter.seconds()
    assert response.status_code == 422, response.json
    assert response.json["error"]["code"] == "limit_exceeded"
    assert response.json["error"]["field"] == "pauses"
    assert "TOME_MAX_PAUSE_SHARE" in response.json["error"]["message"]
    assert elapsed < 5.0  # the refusal costs a parse, not a render


def test_an_ordinary_book_is_accepted_with_its_estimate(
    client: FlaskClient, user: dict[str, str], narrator: str
) -> None:
    script = "# One\n\n" + "The tide came in slowly over the flats. " * 20 + "\n\n# Two\n\nIt went out again."
    response = submit_job(client, user, narrator, script=script, script_format="markdown")
    assert response.status_code == 202, response.json
    estimated = response.json["estimated_seconds"]
    assert 50 < estimated < 120, estimated  # about 840 characters at 14 a second, plus pauses


def test_duration_and_chapter_limits_are_configurable(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app = make_app(max_job_audio_seconds=30, max_job_chapters=3)
    client, user = app.test_client(), bearer(mint_key(app, owner="alice", name="t", admin=False))
    assert upload_voice(client, user, reference_audio[0]).status_code == 202
    long = submit_job(client, user, "narrator", script="A sentence that goes on a while. " * 20)
    assert long.status_code == 422
    assert "TOME_MAX_JOB_AUDIO_SECONDS" in long.json["error"]["message"]
    chapters = "".join(f"# Part {i}\n\nText.\n\n" for i in range(4))
    many = submit_job(client, user, "narrator", script=chapters, script_format="markdown")
    assert many.status_code == 422
    assert "TOME_MAX_JOB_CHAPTERS" in many.json["error"]["message"]
    assert submit_job(client, user, "narrator", script="Short.").status_code == 202


@pytest.mark.parametrize(
    ("script", "script_format", "why"),
    [
        ("# One\n\n## Two\n\n# Three\n", "markdown", "it has only headings (3)"),
        ("<!-- notes -->\n\n```\nprint('code')\n```\n", "markdown", "markup that is not read"),
        ("... --- !!! ?\n\n* * *\n", "plain", "no letters or digits"),
        ("<speak><break time='2s'/></speak>", "ssml", "only tags and breaks"),
    ],
)
def test_a_script_with_nothing_to_read_is_empty_script_naming_why(
    client: FlaskClient, user: dict[str, str], narrator: str, script: str, script_format: str, why: str
) -> None:
    """In the preview and on submission alike; not a pause-share limit that a reader cannot act on."""
    body = {"voice": narrator, "script": script, "script_format": script_format, "pauses": {"chapter": 30}}
    preview = client.post("/v1/scripts/preview", json=body, headers=user)
    job = submit_job(
        client, user, narrator, script=script, script_format=script_format, pauses={"chapter": 30}
    )
    for response in (preview, job):
        assert response.status_code == 422, response.json
        error = response.json["error"]
        assert (error["code"], error["field"]) == ("empty_script", "script"), error
        assert error["message"].startswith("the script has nothing to read: "), error
        assert why in error["message"], error
    assert client.get("/v1/jobs", headers=user).json["jobs"] == []
