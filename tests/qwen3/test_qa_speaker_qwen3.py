"""The speaker check with a real speaker encoder: the tiny, randomly initialised Qwen3-TTS checkpoint the
tests build (tests/qwen3/tiny_checkpoint.py), through the engine's own ``speaker_embedding`` and the render
step's review (worker.jobs.quality). Random weights make every input score 0.98-1.0, so these tests show
that the measure is the encoder's and that the policy, the re-render and the flag work; they say nothing
about a threshold for real voices (docs/qa.md)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from flask import Flask

from bench.faults import FaultKind, FaultyEngine, fixed_plan
from tests.api.helpers import submit_job, upload_voice
from tests.conftest import bearer
from tests.support.apps import tome_of
from tests.support.inline import Inline
from webapi.cli import mint_key
from worker.engines.base import EngineError, SynthesisRequest
from worker.engines.qwen3 import Qwen3Engine
from worker.jobs import quality
from worker.qa.assess import assess_chunk
from worker.qa.checks import policy_for
from worker.qa.speaker import speaker_encoder, speaker_similarity
from worker.task_names import BUILD_VOICE, START_JOB

SR = 24000
TEXT = "The ferry left the harbour at dawn."
# The tiny checkpoint renders noise: the cheap checks that look for voicing and a clean ending would fail
# every take whatever the speaker. A job can lift them as it lifts any threshold, leaving the speaker
# check the only one that can fail here.
LIFTED = {"max_edge_s": 1e3, "max_noise_s": 1e3, "max_hiss_s": 1e3, "max_end_level_db": 1e3}


def _voice(f0: float, seconds: float = 2.0, seed: int = 0, sr: int = SR) -> np.ndarray:
    t = np.arange(int(sr * seconds), dtype=np.float64) / sr
    rng = np.random.default_rng(seed)
    wav = 0.3 * np.sin(2 * np.pi * f0 * t) + 0.1 * np.sin(2 * np.pi * 2 * f0 * t)
    return (wav + 0.01 * rng.standard_normal(t.size)).astype(np.float32)


@pytest.fixture(scope="module")
def engine(tiny_dir: Path) -> Qwen3Engine:
    return Qwen3Engine(tiny_dir, device="cpu", max_new_tokens=40)


def test_the_voice_s_own_reference_scores_one_and_other_signals_less(engine: Qwen3Engine) -> None:
    assert speaker_encoder(engine) is engine
    own = _voice(120.0)
    prompt = engine.encode_speaker(own, SR, "Hello there.")
    assert speaker_similarity(engine, own, SR, prompt) == pytest.approx(1.0, abs=1e-5)
    # A reference at 16 kHz: resampled to the encoder's rate as the prompt build resamples it.
    own16 = _voice(120.0, sr=16000)
    prompt16 = engine.encode_speaker(own16, 16000, "Hello there.")
    assert speaker_similarity(engine, own16, 16000, prompt16) == pytest.approx(1.0, abs=1e-5)
    other = speaker_similarity(engine, _voice(260.0, seed=1), SR, prompt)
    noise = (0.1 * np.random.default_rng(5).standard_normal(2 * SR)).astype(np.float32)
    hiss = speaker_similarity(engine, noise, SR, prompt)
    assert other is not None
    assert hiss is not None
    # Lower, by little: random weights (0.998 and 0.993 on this checkpoint when written).
    assert other < 1.0 - 1e-4
    assert hiss < other


def test_audio_too_short_to_embed_is_not_scored(engine: Qwen3Engine) -> None:
    prompt = engine.encode_speaker(_voice(120.0), SR, "Hello there.")
    with pytest.raises(EngineError):
        engine.speaker_embedding(np.zeros(100, dtype=np.float32), SR)
    assert speaker_similarity(engine, np.zeros(100, dtype=np.float32), SR, prompt) is None


def test_the_chunk_s_score_is_recorded_and_held_to_the_job_s_threshold(engine: Qwen3Engine) -> None:
    prompt = engine.encode_speaker(_voice(120.0), SR, "Hello there.")
    wave = engine.synthesize([SynthesisRequest(TEXT, prompt, seed=3)])[0]
    off = assess_chunk(wave, SR, TEXT, policy=policy_for("qwen3-tts", LIFTED), speaker=(engine, prompt))
    check = off.check("speaker")
    assert check is not None
    assert check.passed
    assert check.score is not None
    assert 0.9 < check.score < 1.0
    stored = off.to_json()["checks"]
    assert isinstance(stored, list)
    assert {"name": "speaker"}.items() <= stored[-1].items()
    strict = policy_for("qwen3-tts", {**LIFTED, "min_speaker_similarity": check.score + 0.001})
    held = assess_chunk(wave, SR, TEXT, policy=strict, speaker=(engine, prompt))
    assert [c.name for c in held.failed] == ["speaker"]
    assert "another voice" in held.reasons[0]


def test_review_re_renders_a_chunk_in_another_voice_and_flags_it(engine: Qwen3Engine) -> None:
    """The render step's review with the job's options as stored: a chunk rendered from another voice's
    prompt (FaultyEngine's ``other_voice``, first take only) under a per-job threshold is rendered again
    and, since no take of the tiny model reaches it, kept flagged with the speaker check failed; with
    the default (off) the same chunk passes on its first take with its score recorded."""
    mine = engine.encode_speaker(_voice(120.0), SR, "Hello there.")
    theirs = engine.encode_speaker(_voice(260.0, seed=1), SR, "Good morning.")
    request = SynthesisRequest(TEXT, mine, seed=3)

    def run(thresholds: dict[str, float]) -> tuple[FaultyEngine, quality.Take]:
        faulty = FaultyEngine(engine, fixed_plan({TEXT: FaultKind.OTHER_VOICE}), other_prompts=[theirs])
        options = {"qa": {"transcript": False, "max_rerenders": 1, "thresholds": thresholds}}
        settings = quality.QaSettings.of(options, engine.name)
        wave = faulty.synthesize([request])[0]

        def synthesize(e: object, batch: list[SynthesisRequest]) -> list[tuple[np.ndarray, list[object]]]:
            return [(w, []) for w in faulty.synthesize(batch)]

        (take,) = quality.review(faulty, [request], [(wave, [])], settings, synthesize, [quality.Expected()])
        return faulty, take

    faulty, take = run(LIFTED)
    assert faulty.log[0].kind is FaultKind.OTHER_VOICE
    assert take.passed
    assert take.renders == 1
    assert take.result is not None
    score = take.result.check("speaker")
    assert score is not None
    assert score.score is not None

    faulty, take = run({**LIFTED, "min_speaker_similarity": 0.9999})
    assert [i.kind for i in faulty.log] == [FaultKind.OTHER_VOICE, None]  # rendered again, clean
    assert take.renders == 2
    assert not take.passed
    assert take.result is not None
    assert [c.name for c in take.result.failed] == ["speaker"]


@pytest.mark.serial  # compares the timings of two parts of one process: alone, not beside others
def test_the_embedding_costs_a_small_share_of_the_render(engine: Qwen3Engine) -> None:
    """CPU seconds of this process (torch's threads included) per chunk: the speaker embedding must not
    double a chunk's render time. Written down in docs/qa.md: render 0.3-1.7 s, embedding 7-11 ms a chunk
    (3 s of audio) when written."""
    prompt = engine.encode_speaker(_voice(120.0), SR, "Hello there.")
    requests = [SynthesisRequest(TEXT, prompt, seed=seed) for seed in range(3)]
    engine.speaker_embedding(_voice(120.0), SR)  # first call allocations
    started = time.process_time()
    waves = engine.synthesize(requests)
    render = time.process_time() - started
    started = time.process_time()
    for wave in waves:
        speaker_similarity(engine, wave, SR, prompt)
    embed = time.process_time() - started
    assert embed < 0.25 * render, (embed, render)


def test_a_job_s_threshold_reaches_the_render_step_and_flags_its_chunks(
    make_app: Callable[..., Flask], reference_audio: tuple[bytes, str], engine: Qwen3Engine
) -> None:
    """Through the API and the render step (task bodies run in this process): a job that sets
    ``min_speaker_similarity`` above anything the tiny model reaches gets every chunk rendered again
    and flagged, the speaker check failed and its score in the QA report."""
    app = make_app(
        engine="qwen3-tts",
        qwen3_model_dir=str(engine.model_dir),
        qwen3_device="cpu",
        qwen3_max_new_tokens=40,
    )
    client = app.test_client()
    user = bearer(mint_key(app, "producer", "k", admin=False))
    voice = upload_voice(client, user, reference_audio[0], ref_text=reference_audio[1])
    assert voice.status_code == 202, voice.json
    inline = Inline(tome_of(app).runtime)
    inline.enqueue(BUILD_VOICE, [voice.json["id"]])
    inline.run()
    qa = {"transcript": False, "max_rerenders": 1, "thresholds": {**LIFTED, "min_speaker_similarity": 0.9999}}
    job = submit_job(client, user, "narrator", script="The ferry left the harbour at dawn.", qa=qa)
    assert job.status_code == 202, job.json
    inline.enqueue(START_JOB, [job.json["id"]])
    inline.run()
    done = client.get(f"/v1/jobs/{job.json['id']}", headers=user).json
    assert done["status"] == "succeeded", done["error"]
    assert done["qa"]["chunks_flagged"] == 1
    assert done["qa"]["chunks_rerendered"] == 1
    (chunk,) = client.get(done["qa"]["url"], headers=user).json["chunks"]
    assert chunk["flagged"] is True
    assert chunk["renders"] == 2
    (speaker,) = [c for c in chunk["checks"] if c["name"] == "speaker"]
    assert speaker["passed"] is False
    assert 0.9 < speaker["score"] < 0.9999
    assert [c["name"] for c in chunk["checks"] if not c["passed"]] == ["speaker"]
