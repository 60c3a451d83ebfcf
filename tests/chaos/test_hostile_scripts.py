"""Issue 11's part of the hostile corpus on its own: EPUB zip bombs, DRM and malformed EPUBs, SSML with
DTDs and entities, text uploads that are not UTF-8, oversized lexicons and pattern-like graphemes, PLS
documents with a DOCTYPE. Each must be a 4xx with the error code and the words the item expects, in
under a second, within the memory bound (the whole corpus runs in test_fuzz.py)."""

from __future__ import annotations

import dataclasses
import io
import json
import random
import uuid
import zipfile
from collections.abc import Callable

import pytest
from flask import Flask

from tests.chaos.hostile import (
    MEMORY_LIMIT,
    MIB,
    TIME_LIMIT_S,
    VOICE,
    Corpus,
    HostileItem,
    epub_bomb,
    issue_11_items,
    run_hostile,
    seed_voice,
)
from tests.chaos.test_fuzz import HOSTILE_SETTINGS
from tests.conftest import bearer
from tests.support.apps import tome_of
from tests.support.cost import CpuMeter
from tests.support.epubs import Section, build_epub
from webapi.cli import mint_key
from worker.jobs.intake import plan_job


def _run(make_app: Callable[..., Flask], items: list[HostileItem]) -> tuple[Flask, list[str], str]:
    app = make_app(**HOSTILE_SETTINGS)
    user = bearer(mint_key(app, owner="hostile", name="hostile", admin=False))
    report = run_hostile(app, user, Corpus(tuple(items), (), ()))
    print(report.summary())
    assert report.slowest().cpu_s < TIME_LIMIT_S, report.summary()
    assert report.heaviest().peak_bytes < MEMORY_LIMIT, report.summary()
    return app, report.violations(), report.summary()


def test_issue_11_inputs_are_refused_fast_naming_the_problem(make_app: Callable[..., Flask]) -> None:
    items = issue_11_items()
    labels = [item.label for item in items]
    assert len(set(labels)) == len(labels)
    for kind in ("epub: zip bomb", "epub: DRM", "epub: not a zip", "ssml:", "text upload:", "lexicon:"):
        assert any(label.startswith(kind) for label in labels), kind
    refused = [item for item in items if item.allowed is None]
    assert all(item.code and item.says for item in refused)  # every refusal is checked for its reason
    _, violations, _ = _run(make_app, items)
    assert violations == [], "\n".join(violations)


def test_a_refusal_for_another_reason_breaks_the_invariant(make_app: Callable[..., Flask]) -> None:
    """The check has teeth: the DRM book expected to be refused as a zip bomb, or with another code, is a
    violation although its status is a 4xx."""
    drm = next(item for item in issue_11_items() if item.label.startswith("epub: DRM"))
    wrong = [
        dataclasses.replace(drm, label="wrong words", says=("unpacks to more than",)),
        dataclasses.replace(drm, label="wrong code", code="lexicon_invalid"),
    ]
    _, violations, _ = _run(make_app, wrong)
    assert len(violations) == 2, violations
    assert all("expected" in v and "DRM-protected" in v for v in violations), violations


def test_the_zip_bomb_is_a_valid_zip_that_inflates_to_what_it_declares() -> None:
    """So that the server refuses it for its size, not for being broken: a small one unpacks, CRC and
    all; the big one declares 1 GiB in about 1 MB; a lying one fails its CRC when read."""
    with zipfile.ZipFile(io.BytesIO(epub_bomb(4))) as archive:
        assert archive.testzip() is None
        assert archive.read("OEBPS/chapter1.xhtml") == bytes(4 * MIB)
    bomb = epub_bomb(1024)
    assert len(bomb) < 1.1e6
    with zipfile.ZipFile(io.BytesIO(bomb)) as archive:
        info = archive.getinfo("OEBPS/chapter1.xhtml")
        assert info.file_size == 1024 * MIB
        assert info.file_size > 1000 * info.compress_size  # far beyond the 200:1 limit
    with zipfile.ZipFile(io.BytesIO(epub_bomb(4, declared=4096))) as archive:
        assert archive.getinfo("OEBPS/chapter1.xhtml").file_size == 4096
        with pytest.raises(zipfile.BadZipFile, match="CRC"):
            archive.read("OEBPS/chapter1.xhtml")


def test_an_epub_is_held_to_the_script_length_limit_like_text(make_app: Callable[..., Flask]) -> None:
    """The same words as a text script and as an EPUB: the text is refused at once (script_too_long,
    before parsing); the EPUB is accepted at once (not unpacked in the request) and its job fails
    planning with the same code, as fast."""
    app = make_app(**HOSTILE_SETTINGS)
    limit = int(HOSTILE_SETTINGS["max_script_chars"])
    user = bearer(mint_key(app, owner="hostile", name="hostile", admin=False))
    seed_voice(app, user)
    rng = random.Random(5)
    words = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9))) for _ in range(1000)]
    paragraphs: list[str] = []
    while sum(len(p) + 2 for p in paragraphs) < 20 * limit:
        paragraphs.append(" ".join(rng.choices(words, k=80)) + ".")
    client = app.test_client()
    text = client.post(
        "/v1/jobs", json={"title": "t", "voice": VOICE, "script": "\n\n".join(paragraphs)}, headers=user
    )
    assert text.status_code == 422, text.json
    assert text.json["error"]["code"] == "script_too_long"

    epub = build_epub([Section("Long", paragraphs)], cover=False, copyright=False, footnotes=False)
    form = {"job": json.dumps({"title": "t", "voice": VOICE}), "script": (io.BytesIO(epub), "long.epub")}
    meter = CpuMeter()
    response = client.post("/v1/jobs", data=form, headers=user, content_type="multipart/form-data")
    assert response.status_code == 202, response.json
    assert plan_job(tome_of(app).runtime, uuid.UUID(response.json["id"]), lambda *_: None).value == "failed"
    elapsed = meter.seconds()
    job = client.get(f"/v1/jobs/{response.json['id']}", headers=user).json
    assert job["status"] == "failed", job
    assert job["error_detail"]["code"] == "script_too_long", job
    assert job["error"].startswith("script_too_long: ")
    assert elapsed < TIME_LIMIT_S
