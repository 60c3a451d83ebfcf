"""Asking for a read-along over the API: what a job records (the EPUB script kept in its own folder,
counted in its bytes), and requests that are refused with a 4xx naming the field."""

from __future__ import annotations

import base64
import hashlib
import uuid
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from models import Job
from tests.api.helpers import submit_job
from tests.support.apps import tome_of
from tests.support.epubs import build_epub


def _job(app: Flask, job_id: str) -> Job:
    job = tome_of(app).sessions.get(Job, uuid.UUID(job_id))
    assert job is not None
    return job


def test_an_epub_job_keeps_its_book_in_its_own_folder_for_the_read_along(
    app: Flask, client: FlaskClient, user: dict[str, str], narrator: str
) -> None:
    epub = build_epub()
    response = submit_job(
        client, user, "narrator", title="B", script=base64.b64encode(epub).decode(), script_format="epub",
        output={"readalong": True},
    )  # fmt: skip
    assert response.status_code == 202, response.json
    job = _job(app, response.json["id"])
    stored = job.options["readalong"]
    assert stored["enabled"] is True
    kept = Path(stored["source"])
    assert kept.read_bytes() == epub
    assert kept.parent == tome_of(app).settings.layout.job_dir(job.id)  # a name Tome made, in its folder
    assert kept.name == f"script-{hashlib.sha256(epub).hexdigest()[:16]}.epub"
    assert job.files_bytes == len(epub)


def test_a_text_job_records_the_request_and_keeps_nothing(
    app: Flask, client: FlaskClient, user: dict[str, str], narrator: str
) -> None:
    response = submit_job(client, user, "narrator", output={"readalong": True})
    assert response.status_code == 202, response.json
    job = _job(app, response.json["id"])
    assert job.options["readalong"] == {"enabled": True, "source": None}
    without = submit_job(client, user, "narrator", title="Plain")
    assert "readalong" not in _job(app, without.json["id"]).options


@pytest.mark.parametrize("value", ["yes", 1, None, {"on": True}, [True]])
def test_a_read_along_that_is_not_a_boolean_is_a_422_naming_it(
    client: FlaskClient, user: dict[str, str], narrator: str, value: object
) -> None:
    response = submit_job(client, user, "narrator", output={"readalong": value})
    assert response.status_code == 422, response.json
    assert "readalong" in str(response.json)
