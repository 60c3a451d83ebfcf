"""A stronger recogniser for the transcript check: a Whisper model from a local directory (pure: no Flask,
no Celery; ``torch`` and ``transformers`` are imported on first use, the ``qwen3`` extra installs them).

For a GPU deployment, where a general recogniser is affordable and hears neural voices better than the
constrained pocketsphinx search. Selected with ``TOME_QA_RECOGNISER=whisper`` and
``TOME_QA_WHISPER_DIR`` (worker/config.py hands them over: this module reads no environment), and loaded
the careful way the TTS engines are: from that directory only, safetensors only (a pickle can run code
when loaded), the layout checked before any weight is read, once per process under a lock, and every
failure a :class:`RecogniserError` that names the directory and what is wrong.

Whisper is not constrained to the chunk's text (``expected`` only bounds how many tokens it may decode):
it answers "what was said?", so it has no unscored words and no second hearing. See docs/qa.md,
"The transcript check" (the directory's layout, windows and decoding).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from worker.engines.base import default_device
from worker.qa.signal import resample
from worker.qa.transcript import Recognised, words_of

__all__ = ["RecogniserError", "WhisperRecogniser", "check_model_dir", "load_whisper"]

SAMPLE_RATE = 16_000
WINDOW_SECONDS = 30  # Whisper's input: 30 s of log-mel features
TOKENS_PER_WORD = 4  # a generous bound on the tokens a heard word takes (punctuation included)
MIN_NEW_TOKENS = 16
TOKEN_LIMIT = 440  # Whisper decodes at most 448 positions, a few of which its prompt takes
_TOKENIZER_FILES = ("tokenizer.json", "vocab.json")


class RecogniserError(Exception):
    """The recogniser cannot be loaded or run; the message names the directory and the cause."""


def check_model_dir(model_dir: Path) -> None:
    """Refuse a directory that is not a Whisper checkpoint in the transformers layout with safetensors
    weights, before any file of it is loaded."""
    where = f"Whisper model directory {str(model_dir)!r}"
    if not model_dir.is_dir():
        raise RecogniserError(f"{where} does not exist")
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RecogniserError(f"{where} has no readable config.json: {exc}") from exc
    if not isinstance(config, dict) or config.get("model_type") != "whisper":
        kind = config.get("model_type") if isinstance(config, dict) else None
        raise RecogniserError(f"{where} holds a {kind!r} model, not a whisper one")
    if not any(model_dir.glob("*.safetensors")):
        pickled = sorted(p.name for p in model_dir.glob("*.bin"))
        hint = f" ({', '.join(pickled)}: pickled weights are not loaded)" if pickled else ""
        raise RecogniserError(f"{where} has no .safetensors weights{hint}")
    if not (model_dir / "preprocessor_config.json").is_file():
        raise RecogniserError(f"{where} has no preprocessor_config.json (the feature extractor)")
    if not any((model_dir / name).is_file() for name in _TOKENIZER_FILES):
        raise RecogniserError(f"{where} has no tokenizer (tokenizer.json or vocab.json)")


@dataclass(frozen=True)
class _Loaded:
    model: Any  # transformers.WhisperForConditionalGeneration, in eval mode on its device
    processor: Any  # transformers.WhisperProcessor
    device: str


_load_lock = threading.Lock()
_loaded: dict[tuple[str, str], _Loaded] = {}


def load_whisper(model_dir: Path, device: str = "") -> _Loaded:
    """The process-wide model and processor of ``model_dir`` on ``device`` (empty: cuda:0 when CUDA is
    available, else cpu), loaded on first call."""
    try:
        import torch
        from transformers import WhisperForConditionalGeneration, WhisperProcessor
    except ImportError as exc:
        raise RecogniserError(f"the whisper recogniser needs torch and transformers: {exc}") from exc
    device = device or default_device()
    key = (str(Path(model_dir).resolve()), device)
    with _load_lock:
        loaded = _loaded.get(key)
        if loaded is None:
            check_model_dir(Path(key[0]))
            dtype = torch.float16 if device.startswith("cuda") else torch.float32
            try:
                model = WhisperForConditionalGeneration.from_pretrained(
                    key[0], local_files_only=True, use_safetensors=True, dtype=dtype
                )
                processor = WhisperProcessor.from_pretrained(key[0], local_files_only=True)
                model = model.to(device).eval()
            except Exception as exc:  # a bad file fails in many ways (safetensors' own error among them)
                raise RecogniserError(f"cannot load the Whisper model in {key[0]}: {exc}") from exc
            loaded = _loaded[key] = _Loaded(model, processor, device)
        return loaded


class WhisperRecogniser:
    """:class:`~worker.qa.transcript.Recogniser` over a local Whisper model; loaded on first use. Calls
    are serialised per instance (one model, one decode at a time)."""

    name = "whisper"

    def __init__(self, model_dir: Path, device: str = "") -> None:
        self.model_dir = Path(model_dir)
        self.device = device
        self._lock = threading.Lock()

    def warm_up(self) -> None:
        load_whisper(self.model_dir, self.device)

    def recognise(self, audio: npt.ArrayLike, sample_rate: int, expected: str) -> Recognised:
        import torch

        started = time.perf_counter()
        loaded = load_whisper(self.model_dir, self.device)
        samples = resample(np.asarray(audio, dtype=np.float64).reshape(-1), sample_rate, SAMPLE_RATE)
        budget = min(TOKEN_LIMIT, max(MIN_NEW_TOKENS, TOKENS_PER_WORD * len(words_of(expected))))
        window = WINDOW_SECONDS * SAMPLE_RATE
        heard: list[str] = []
        with self._lock, torch.inference_mode():
            for start in range(0, samples.size, window):
                piece = samples[start : start + window].astype(np.float32)
                features = loaded.processor.feature_extractor(
                    piece, sampling_rate=SAMPLE_RATE, return_tensors="pt", return_attention_mask=True
                )
                tokens = loaded.model.generate(
                    features.input_features.to(loaded.device, dtype=loaded.model.dtype),
                    attention_mask=features.attention_mask.to(loaded.device),
                    max_new_tokens=budget,
                )
                text = loaded.processor.tokenizer.batch_decode(tokens, skip_special_tokens=True)[0]
                heard.extend(words_of(text))
        return Recognised(tuple(heard), seconds=time.perf_counter() - started)
