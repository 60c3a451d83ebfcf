"""The whisper recogniser (worker/qa/whisper.py): chosen by settings, loaded the careful way from a local
directory (safetensors only, the layout checked first, nothing fetched), and used by the transcript check
in its place of the embedded pocketsphinx. The checkpoint is a tiny random one built here: it hears
nonsense, through the real loading and decoding path."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.support.whisper import tiny_whisper
from worker.config import ConfigError, load_settings
from worker.jobs import quality
from worker.qa.transcript import PocketsphinxRecogniser, check_transcript
from worker.qa.whisper import RecogniserError, WhisperRecogniser, check_model_dir, load_whisper


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_whisper(tmp_path_factory.mktemp("whisper"))


def _copy(checkpoint: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(checkpoint, tmp_path / "model"))


def test_it_loads_once_and_hears_through_the_model(checkpoint: Path) -> None:
    recogniser = WhisperRecogniser(checkpoint, "cpu")
    noise = np.random.default_rng(1).standard_normal(22_050 * 2) * 0.1
    heard = recogniser.recognise(noise, 22_050, "a short line of text")
    assert heard.seconds > 0
    assert heard.words, "the random model decodes some tokens"
    assert all(w == w.lower() and " " not in w for w in heard.words)
    assert load_whisper(checkpoint, "cpu") is load_whisper(checkpoint, "cpu")  # once per process
    # the same audio heard again: the same words (greedy decoding, no sampling)
    assert recogniser.recognise(noise, 22_050, "a short line of text").words == heard.words


def test_audio_longer_than_its_window_is_heard_in_windows(checkpoint: Path) -> None:
    recogniser = WhisperRecogniser(checkpoint, "cpu")
    rng = np.random.default_rng(2)
    short = rng.standard_normal(16_000 * 5) * 0.1
    heard_short = recogniser.recognise(short, 16_000, "word " * 10)
    heard_long = recogniser.recognise(
        np.concatenate([short, np.zeros(16_000 * 25), short]), 16_000, "word " * 10
    )
    # 55 s: two windows, the second starting at 30 s with the tail of the first stretch of noise
    assert len(heard_long.words) >= len(heard_short.words)
    assert recogniser.recognise(np.zeros(0), 16_000, "nothing").words == ()


def test_the_transcript_check_reports_which_recogniser_heard_it(checkpoint: Path) -> None:
    wave = np.random.default_rng(3).standard_normal(16_000 * 2) * 0.1
    result = check_transcript(WhisperRecogniser(checkpoint, "cpu"), wave, 16_000, "the boats came home")
    assert result.recogniser == "whisper"
    assert result.details()["recogniser"] == "whisper"
    assert not result.passed, "nonsense is not the text: the check can fail with this recogniser"


def test_settings_choose_the_recogniser(checkpoint: Path) -> None:
    assert isinstance(quality.recogniser(load_settings({})), PocketsphinxRecogniser)
    chosen = quality.recogniser(
        load_settings({"TOME_QA_RECOGNISER": "whisper", "TOME_QA_WHISPER_DIR": str(checkpoint)})
    )
    assert isinstance(chosen, WhisperRecogniser)
    assert chosen.model_dir == checkpoint
    assert (
        quality.recogniser(
            load_settings({"TOME_QA_RECOGNISER": "whisper", "TOME_QA_WHISPER_DIR": str(checkpoint)})
        )
        is chosen
    )


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"TOME_QA_RECOGNISER": "whisper; rm -rf /"}, "TOME_QA_RECOGNISER"),
        ({"TOME_QA_RECOGNISER": "whisper"}, "TOME_QA_WHISPER_DIR"),
        ({"TOME_QA_RECOGNISER": "whisper", "TOME_QA_WHISPER_DIR": "/no/such/dir"}, "does not exist"),
        ({"TOME_QA_WHISPER_DEVICE": "tpu"}, "TOME_QA_WHISPER_DEVICE"),
    ],
)
def test_bad_recogniser_settings_stop_the_process_naming_the_setting(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(named)):
        load_settings(env)


def test_a_directory_that_is_not_a_safe_whisper_checkpoint_is_refused_before_loading(
    checkpoint: Path, tmp_path: Path
) -> None:
    model = _copy(checkpoint, tmp_path)
    check_model_dir(model)  # the real layout passes
    weights = next(model.glob("*.safetensors"))
    weights.rename(model / "pytorch_model.bin")  # pickled weights can run code when loaded
    with pytest.raises(RecogniserError, match=r"no \.safetensors weights.*pytorch_model\.bin"):
        check_model_dir(model)
    with pytest.raises(RecogniserError, match="pickled"):
        WhisperRecogniser(model, "cpu").recognise(np.zeros(1600), 16_000, "text")
    (model / "pytorch_model.bin").rename(weights)

    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    with pytest.raises(RecogniserError, match="'bert' model, not a whisper one"):
        check_model_dir(model)
    (model / "config.json").write_text("{not json")
    with pytest.raises(RecogniserError, match=r"no readable config\.json"):
        check_model_dir(model)
    (model / "config.json").write_text(json.dumps(config))
    (model / "preprocessor_config.json").unlink()
    with pytest.raises(RecogniserError, match=r"preprocessor_config\.json"):
        check_model_dir(model)


def test_a_corrupt_weights_file_is_a_recogniser_error_naming_the_directory(
    checkpoint: Path, tmp_path: Path
) -> None:
    model = _copy(checkpoint, tmp_path)
    next(model.glob("*.safetensors")).write_bytes(b"\x00" * 64)
    with pytest.raises(RecogniserError, match=re.escape(f"cannot load the Whisper model in {model}")):
        load_whisper(model, "cpu")


def test_the_transcript_check_runs_by_default_only_where_the_recogniser_hears_the_language(
    checkpoint: Path,
) -> None:
    embedded = PocketsphinxRecogniser()
    whisper = WhisperRecogniser(checkpoint, "cpu")
    neural = "qwen3-tts"
    assert quality.QaSettings.of({}, neural, embedded, "en").transcript
    assert quality.QaSettings.of({}, neural, None, "en-GB").transcript
    assert not quality.QaSettings.of({}, neural, embedded, "de").transcript, "English model, German book"
    assert quality.QaSettings.of({}, neural, whisper, "de").transcript
    assert not quality.QaSettings.of({}, "espeak", whisper, "en").transcript  # reads by rule
    asked = {"qa": {"transcript": True}}
    assert quality.QaSettings.of(asked, neural, embedded, "de").transcript, "asked for: run"
    assert not quality.QaSettings.of({"qa": {"transcript": False}}, neural, whisper, "en").transcript
