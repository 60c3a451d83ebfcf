"""The speaker check's arithmetic and policy (worker.qa.speaker), without an engine: the encoder's part is
tested with the tiny Qwen3-TTS checkpoint in tests/qwen3/test_qa_speaker_qwen3.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from worker.engines.espeak import EspeakEngine
from worker.qa.checks import DEFAULT_POLICIES, QaPolicy, policy_for
from worker.qa.speaker import check_speaker, cosine_similarity, speaker_encoder


def test_cosine_similarity_of_vectors() -> None:
    a = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    assert cosine_similarity(a, a) == pytest.approx(1.0)
    assert cosine_similarity(a, 3 * a) == pytest.approx(1.0)  # scale does not matter
    assert cosine_similarity(a, [0.0, 1.0, 0.0]) == pytest.approx(0.0)
    assert cosine_similarity(a, -a) == pytest.approx(-1.0)
    assert cosine_similarity([1.0, 1.0], [1.0, 0.0]) == pytest.approx(math.sqrt(0.5))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ([0.0, 0.0], [1.0, 0.0]),  # a zero vector has no direction
        ([1.0, float("nan")], [1.0, 0.0]),
        ([1.0, 0.0], [1.0, float("inf")]),
        ([1.0, 0.0], [1.0, 0.0, 0.0]),  # shapes differ
        ([], []),
    ],
)
def test_cosine_similarity_is_none_when_it_means_nothing(a: list[float], b: list[float]) -> None:
    assert cosine_similarity(a, b) is None


def test_the_check_is_off_by_default_and_still_records_the_score() -> None:
    for engine in ("espeak", "qwen3-tts"):
        assert policy_for(engine).min_speaker_similarity == 0.0
    check = check_speaker(0.12, QaPolicy().min_speaker_similarity)
    assert check.name == "speaker"
    assert check.passed
    assert check.score == 0.12
    assert check.limit.startswith("off")


def test_the_check_fails_under_a_threshold_a_job_sets() -> None:
    policy = DEFAULT_POLICIES["qwen3-tts"].with_overrides({"min_speaker_similarity": 0.8})
    low = check_speaker(0.61234, policy.min_speaker_similarity)
    assert not low.passed
    assert low.score == 0.6123
    assert "0.612 under 0.8" in low.reason
    assert check_speaker(0.8, policy.min_speaker_similarity).passed
    assert check_speaker(0.95, policy.min_speaker_similarity).passed
    # Not measured (audio too short for the encoder): nothing to hold against the threshold.
    unmeasured = check_speaker(None, policy.min_speaker_similarity)
    assert unmeasured.passed
    assert unmeasured.score is None


def test_espeak_has_no_speaker_encoder() -> None:
    # Its pitch check stands for this one (docs/qa.md).
    assert speaker_encoder(EspeakEngine()) is None
