"""Voice prompt builds: sent fairly and boundedly (worker.voices.builds), counted in their owner's usage
against the daily build quota, and references analysed in helper processes (worker.voices.analysis)."""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select, update

from models import ApiKey, Voice, VoiceBuild, utcnow
from tests.api.helpers import upload_voice
from tests.conftest import bearer
from tests.support.apps import tome_of
from tests.support.factories import builds_sent, submit_job
from tests.support.inline import Inline
from webapi.cli import mint_key
from worker.audio import AudioLimits
from worker.config import ConfigError, load_settings
from worker.jobs.usage import BUILD_SECONDS_PER_REFERENCE_SECOND
from worker.task_names import START_JOB
from worker.voices.analysis import AnalyserPool, AnalysisUnavailable
from worker.voices.builds import send_builds


def _unsend_all(app: Flask) -> None:
    """Forget the build messages the API sent (to the app's broker, which no test worker reads)."""
    sessions = tome_of(app).sessions
    sessions.execute(update(Voice).values(cache_sent_until=None))
    sessions.commit()


def _voices(app: Flask, client: FlaskClient, owner: str, count: int, audio: tuple[bytes, str]) -> list[str]:
    headers = bearer(mint_key(app, owner=owner, name="k", admin=False))
    ids = []
    for i in range(count):
        answer = upload_voice(client, headers, audio[0], name=f"{owner} {i}", ref_text=audio[1])
        assert answer.status_code == 202, answer.json
        ids.append(answer.json["id"])
    return ids


def test_builds_are_sent_one_per_owner_within_the_total_and_the_next_when_one_ends(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app = make_app(voice_builds_in_flight=2, voice_builds_per_owner=1)
    client = app.test_client()
    alice = _voices(app, client, "alice", 3, reference_audio)
    bob = _voices(app, client, "bob", 1, reference_audio)
    carol = _voices(app, client, "carol", 1, reference_audio)
    _unsend_all(app)
    rt = tome_of(app).runtime
    inline = Inline(rt)
    assert send_builds(rt, inline.enqueue) == 2
    # The oldest waiting voice's owner first, then the owner with none in flight: never two of alice's.
    assert builds_sent(inline) == [alice[0], bob[0]]
    assert send_builds(rt, inline.enqueue) == 0, "no room: nothing more is sent, nothing twice"
    inline.run(max_messages=1)  # alice's first build ends: its slot goes to carol, who has none in flight
    assert builds_sent(inline)[2:] == [carol[0]]
    inline.run()
    assert sorted(builds_sent(inline)) == sorted(alice + bob + carol)
    states = dict(tome_of(app).sessions.execute(select(Voice.id, Voice.cache_status)).all())
    assert set(states.values()) == {"ready"}, states


def test_a_lost_build_message_is_sent_again_once_its_time_passes(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app = make_app()
    client = app.test_client()
    (voice_id,) = _voices(app, client, "alice", 1, reference_audio)
    rt = tome_of(app).runtime
    inline = Inline(rt)
    assert send_builds(rt, inline.enqueue) == 0, "sent at upload: it counts as on its way"
    sessions = tome_of(app).sessions
    sessions.execute(update(Voice).values(cache_sent_until=utcnow() - timedelta(seconds=1)))
    sessions.commit()
    assert send_builds(rt, inline.enqueue) == 1
    assert builds_sent(inline) == [voice_id]


def test_builds_are_counted_in_their_owners_usage_only_and_the_quota_refuses_uploads(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    app = make_app(quota_build_seconds_per_day=0.001)
    client = app.test_client()
    alice = bearer(mint_key(app, owner="alice", name="k", admin=False))
    bob = bearer(mint_key(app, owner="bob", name="k", admin=False))
    first = upload_voice(client, alice, reference_audio[0], name="one", ref_text=reference_audio[1])
    assert first.status_code == 202, first.json
    _unsend_all(app)
    inline = Inline(tome_of(app).runtime)
    send_builds(inline.rt, inline.enqueue)
    inline.run()
    usage = client.get("/v1/usage", headers=alice).json["voice_builds_24h"]
    assert usage["count"] == 1
    assert usage["seconds"]["used"] > 0
    assert usage["seconds"]["quota"] == 0.001
    assert usage["audio_seconds"] == pytest.approx(first.json["audio_duration"], abs=0.06)
    assert client.get("/v1/usage", headers=bob).json["voice_builds_24h"]["count"] == 0

    refused = upload_voice(client, alice, reference_audio[0], name="two", ref_text=reference_audio[1])
    assert refused.status_code == 429, refused.json
    assert refused.json["error"]["code"] == "quota_build_seconds_per_day"
    assert "TOME_QUOTA_BUILD_SECONDS_PER_DAY" in refused.json["error"]["message"]
    assert int(refused.headers["Retry-After"]) > 0
    replaced = client.put(
        f"/v1/voices/{first.json['id']}",
        data={"audio": (io.BytesIO(reference_audio[0]), "r.wav")},
        headers=alice,
        content_type="multipart/form-data",
    )
    assert replaced.status_code == 429, replaced.json
    # Another owner's builds are theirs: bob's upload is accepted.
    assert upload_voice(client, bob, reference_audio[0], ref_text=reference_audio[1]).status_code == 202


def test_an_upload_larger_than_the_limit_is_refused_before_its_body_is_read(
    make_app: Callable[..., Flask],
) -> None:
    app = make_app(max_upload_bytes=1024 * 1024)
    client = app.test_client()
    headers = bearer(mint_key(app, owner="alice", name="k", admin=False))

    declared = 64 * 1024 * 1024

    class Body(io.RawIOBase):
        """``declared`` bytes of zeros, made as they are read (and counted)."""

        read_bytes = position = 0

        def readable(self) -> bool:
            return True

        def seekable(self) -> bool:
            return True

        def tell(self) -> int:
            return self.position

        def seek(self, offset: int, whence: int = 0) -> int:
            self.position = offset + (declared if whence == io.SEEK_END else 0)
            return self.position

        def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
            size = min(len(buffer), declared - self.position)
            buffer[:size] = bytes(size)
            self.position += size
            self.read_bytes += size
            return size

    body = Body()
    answer = client.post(
        "/v1/voices",
        input_stream=body,
        headers={**headers, "Content-Type": "multipart/form-data; boundary=x"},
    )
    assert answer.status_code == 413, answer.json
    assert body.read_bytes < declared // 8


@pytest.mark.parametrize(
    ("audio", "code"),
    [(b"RIFF\x24\x00\x00\x00WAVEfmt junk", "audio_undecodable"), (b"\0" * 4096, "audio_undecodable")],
)
def test_bad_audio_is_a_422_from_the_analyser_and_leaves_nothing(
    client: FlaskClient, user: dict[str, str], app: Flask, audio: bytes, code: str
) -> None:
    answer = upload_voice(client, user, audio)
    assert answer.status_code == 422, answer.json
    assert answer.json["error"]["field"] == "audio"
    assert answer.json["error"]["code"].startswith("audio_"), answer.json
    voices = Path(tome_of(app).settings.storage.data_dir) / "voices"
    assert not voices.exists() or not any(voices.iterdir())


def test_an_analysis_past_its_deadline_is_unavailable_and_its_helper_is_replaced(
    tmp_path: Path, reference_audio: tuple[bytes, str]
) -> None:
    upload = tmp_path / "r.wav"
    upload.write_bytes(reference_audio[0])
    pool = AnalyserPool(1, timeout=0.01)  # far less than a helper takes to start
    try:
        with pytest.raises(AnalysisUnavailable):
            pool.run(upload, tmp_path / "out.wav", AudioLimits(), force=False)
        pool.timeout = 120
        answer = pool.run(upload, tmp_path / "out.wav", AudioLimits(), force=False)
    finally:
        pool.close()
    assert answer["ok"]["size"] == (tmp_path / "out.wav").stat().st_size
    assert answer["ok"]["duration"] > 1


def test_another_owners_voice_cannot_be_rebuilt_or_replaced(
    client: FlaskClient, user: dict[str, str], other_user: dict[str, str], reference_audio: tuple[bytes, str]
) -> None:
    voice = upload_voice(client, user, reference_audio[0], ref_text=reference_audio[1]).json
    url = f"/v1/voices/{voice['id']}"
    replaced = client.put(
        url,
        data={"ref_text": "mine now", "audio": (io.BytesIO(reference_audio[0]), "r.wav")},
        headers=other_user,
        content_type="multipart/form-data",
    )
    assert replaced.status_code == 404, replaced.json
    assert client.delete(url, headers=other_user).status_code == 404
    assert client.get(url, headers=other_user).status_code == 404
    assert client.get(url, headers=user).json["ref_text"] == reference_audio[1]
    assert client.get(f"/v1/voices/{uuid.uuid4()}", headers=user).status_code == 404
    assert client.get("/v1/usage", headers=other_user).json["voice_builds_24h"]["count"] == 0


@pytest.mark.parametrize(
    "bad",
    [
        {"voice_builds_per_owner": 3, "voice_builds_in_flight": 2},
        {"voice_builds_per_owner": 0},
        {"reference_analysers": 0},
        {"quota_build_seconds_per_day": -1.0},
    ],
)
def test_build_and_analysis_settings_that_make_no_sense_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings({}, **bad)
    assert "TOME_" in str(refused.value)


def _ran(app: Flask, owner: str, voice_id: str, seconds: float) -> None:
    """A build of ``owner``'s that ran just now and took ``seconds`` (no reference audio counted, so the
    estimate of a build stays the default)."""
    sessions = tome_of(app).sessions
    sessions.add(
        VoiceBuild(
            voice_id=uuid.UUID(voice_id), owner=owner, seconds=seconds, audio_seconds=0.0, outcome="built"
        )
    )
    sessions.commit()


def test_key_priority_weighs_an_owners_turn_as_it_weighs_its_chunks(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    """alice's builds took twice bob's worker time in the last hour; at priority 3 her turn still comes
    first (20 s / 3 < 10 s / 1), at priority 1 bob's does."""
    app = make_app(voice_builds_in_flight=1, voice_builds_per_owner=1)
    client = app.test_client()
    bob = _voices(app, client, "bob", 2, reference_audio)  # bob waits longest
    alice = _voices(app, client, "alice", 2, reference_audio)
    _ran(app, "alice", alice[0], 20.0)
    _ran(app, "bob", bob[0], 10.0)
    rt = tome_of(app).runtime
    sessions = tome_of(app).sessions
    for priority, first in ((3, alice[0]), (1, bob[0])):
        sessions.execute(update(ApiKey).where(ApiKey.owner == "alice").values(priority=priority))
        sessions.commit()
        _unsend_all(app)
        inline = Inline(rt)
        assert send_builds(rt, inline.enqueue) == 1
        assert builds_sent(inline) == [first], f"alice at priority {priority}"


def test_queued_builds_reserve_their_estimate_so_the_build_quota_holds(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    """Each build waiting or in flight reserves its estimate (half its reference's length while no build
    says better): uploads stop once builds that ran and reserved ones reach the quota; of the builds
    already waiting, only those the quota leaves room for are sent, all at once or not; the rest go
    once the builds that ran settle at their measured time."""
    probe = make_app()
    (one,) = _voices(probe, probe.test_client(), "probe", 1, reference_audio)
    length = probe.test_client().get(
        f"/v1/voices/{one}", headers=bearer(mint_key(probe, "probe", "p", False))
    )
    seconds = float(length.json["audio_duration"])
    estimate = BUILD_SECONDS_PER_REFERENCE_SECOND * seconds
    # Room for three builds' estimates, not four: the first three uploads pass, the fourth is refused.
    app = make_app(
        quota_build_seconds_per_day=2.5 * estimate, voice_builds_in_flight=4, voice_builds_per_owner=4
    )
    client = app.test_client()
    alice = _voices(app, client, "alice", 3, reference_audio)
    headers = bearer(mint_key(app, owner="alice", name="k2", admin=False))
    refused = upload_voice(client, headers, reference_audio[0], name="four", ref_text=reference_audio[1])
    assert refused.status_code == 429, refused.json
    assert refused.json["error"]["code"] == "quota_build_seconds_per_day"
    assert "estimated" in refused.json["error"]["message"]
    assert int(refused.headers["Retry-After"]) > 0
    builds = client.get("/v1/usage", headers=headers).json["voice_builds_24h"]
    assert builds["reserved_seconds"] == pytest.approx(3 * estimate, abs=0.1)
    assert builds["count"] == 0

    # The three waiting builds are sent together: 0, 1 and 2 estimates in flight, each under the quota.
    _unsend_all(app)
    rt = tome_of(app).runtime
    inline = Inline(rt)
    assert send_builds(rt, inline.enqueue) == 3
    # With a build that ran taking one estimate's time, only the first two are sent at once (the third
    # would start with 1 + 2 estimates reserved, past 2.5).
    _unsend_all(app)
    _ran(app, "alice", alice[0], estimate)
    inline = Inline(rt)
    assert send_builds(rt, inline.enqueue) == 2
    assert builds_sent(inline) == alice[:2]
    assert send_builds(rt, inline.enqueue) == 0, "the third waits while the two reserve their estimates"
    # espeak builds take far less than their estimate: settled at their measured time as each ends,
    # they leave room, and the end of a build sends the third.
    inline.run()
    assert builds_sent(inline) == alice
    states = dict(tome_of(app).sessions.execute(select(Voice.id, Voice.cache_status)).all())
    assert [states[uuid.UUID(v)] for v in alice] == ["ready"] * 3
    # bob's quota is his own.
    assert len(_voices(app, client, "bob", 1, reference_audio)) == 1


def test_a_build_the_quota_holds_back_says_so_on_its_job_and_voice_until_it_moves(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str]
) -> None:
    """A job whose voice's build waits for room in the build quota says why on GET /v1/jobs/{id}
    (``waiting``), as the voice does (``build_waiting``); both clear once the window moves and the build
    is sent by itself."""
    app = make_app(quota_build_seconds_per_day=10.0)
    client = app.test_client()
    (voice_id,) = _voices(app, client, "alice", 1, reference_audio)
    headers = bearer(mint_key(app, owner="alice", name="k2", admin=False))
    job = submit_job(client, headers, voice_id)
    assert job.status_code == 202, job.json
    _unsend_all(app)
    _ran(app, "alice", voice_id, 20.0)  # builds of the last 24 hours used the quota
    inline = Inline(tome_of(app).runtime)
    inline.enqueue(START_JOB, [job.json["id"]])
    inline.run()
    assert builds_sent(inline) == [], "the quota holds the build back"

    seen = client.get(f"/v1/jobs/{job.json['id']}", headers=headers).json
    assert seen["status"] in ("queued", "running"), seen
    waiting = seen["waiting"]
    assert waiting["code"] == "quota_build_seconds_per_day", seen
    assert waiting["voice_ids"] == [voice_id]
    assert "TOME_QUOTA_BUILD_SECONDS_PER_DAY" in waiting["message"]
    # It moves when the build that ran leaves the 24-hour window: about a day from now.
    assert 23 * 3600 < waiting["retry_after"] <= 24 * 3600
    voice = client.get(f"/v1/voices/{voice_id}", headers=headers).json
    assert voice["build_waiting"]["code"] == "quota_build_seconds_per_day", voice
    listed = client.get("/v1/voices", headers=headers).json["voices"]
    assert [v["build_waiting"]["voice_ids"] for v in listed] == [[voice_id]]
    bob = bearer(mint_key(app, owner="bob", name="k", admin=False))
    assert client.get(f"/v1/jobs/{job.json['id']}", headers=bob).status_code == 404

    sessions = tome_of(app).sessions
    sessions.execute(update(VoiceBuild).values(created_at=utcnow() - timedelta(hours=25)))
    sessions.commit()
    assert send_builds(inline.rt, inline.enqueue) == 1
    inline.run()
    done = client.get(f"/v1/jobs/{job.json['id']}", headers=headers).json
    assert done["status"] == "succeeded", done
    assert done["waiting"] is None
    assert client.get(f"/v1/voices/{voice_id}", headers=headers).json["build_waiting"] is None
