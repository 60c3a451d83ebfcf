"""The ``qwen3-tts`` engine: Qwen3-TTS 12 Hz *Base* voice cloning through the official ``qwen-tts`` package.

Pure module (no Flask, no Celery). ``torch`` and ``qwen_tts`` are imported lazily (optional extra), so the
module imports anywhere. The checkpoint directory and the other ``TOME_QWEN3_*`` settings come from the
engine registry (this module reads no environment); nothing is downloaded. The model is loaded once per
process (:func:`load_model`), on first use or by :meth:`Qwen3Engine.warm_up`; one instance is not safe
for concurrent ``generate`` calls, so every call holds a process-wide lock (one worker process per GPU).

The speaker prompt (``encode_speaker``) holds everything needed to rebuild
``qwen_tts.VoiceClonePromptItem``: the reference's codec codes, its x-vector, the mode (in-context or
x-vector only) and the transcript. The engine version digests every config and weight file of the model
directory (:func:`model_identity`), so swapping the checkpoint makes cached prompts and renderings stale.

See docs/engines.md, "The Qwen3-TTS engine (GPU)" (the checkpoint layout, the prompt's tensors, batches
and seeds).
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import time
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from worker.engines.base import (
    RATE_SCALE,
    EmbeddingSpec,
    EngineError,
    SpeakerPrompt,
    SynthesisRequest,
    Waveform,
    default_device,
    is_device,
    rate_scale,
)
from worker.engines.qwen3_spec import DEVICE_SETTING, RUNNER_SETTING, RUNNERS, Qwen3Settings
from worker.engines.reference import check_sample_rate, mono_reference, sine_reference
from worker.engines.stand_ins import stand_ins

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from qwen_tts import Qwen3TTSModel, VoiceClonePromptItem

    from worker.engines.qwen3_loop import LoopRow, TalkerLoop
    from worker.engines.qwen3_stream import PrefixStates

__all__ = [
    "DEVICE_SETTING",
    "PROMPT_LAYOUT",
    "RUNNERS",
    "RUNNER_SETTING",
    "Qwen3Engine",
    "Qwen3Settings",
    "import_qwen_tts",
    "load_model",
    "model_identity",
    "prompt_from_arrays",
]

PROMPT_LAYOUT = "prompt-v1"  # bump when the prompt arrays or their meaning change
# Batch size from free GPU memory: rows are sized by their expected sequence length times the bytes one
# frame holds (key/value cache + the hidden states generate returns), and a batch takes MEMORY_HEADROOM of
# what is free; a wrong guess costs an out-of-memory that the pipeline answers by halving the batch.
MAX_BATCH = 32
CPU_BATCH = 8
MEMORY_HEADROOM = 0.7
CUDA_DTYPE_BYTES = 2  # bfloat16: load_model's dtype on CUDA
# The shortest audio the speaker encoder embeds (its mel front end's window is 1024 samples at 24 kHz).
MIN_EMBEDDING_SECONDS = 0.1
FRAMES_PER_CHAR = 0.9  # 12.5 codec frames per second over about 14 spoken characters per second

# Files that define the checkpoint's identity (config + weights + tokenizer), relative to the model dir.
_IDENTITY_SUFFIXES = (".json", ".safetensors", ".bin", ".txt", ".model", ".tiktoken")

# ISO 639-1 codes -> qwen_tts language names (the model's ``codec_language_id`` keys).
_LANGUAGES = {
    "zh": "chinese",
    "en": "english",
    "de": "german",
    "fr": "french",
    "es": "spanish",
    "it": "italian",
    "ja": "japanese",
    "ko": "korean",
    "pt": "portuguese",
    "ru": "russian",
}
# Per-request params forwarded to generate (batch-wide in qwen_tts: requests are grouped by their values).
_GENERATE_PARAMS = ("temperature", "top_k", "top_p", "repetition_penalty", "max_new_tokens")
_INT_PARAMS = ("top_k", "max_new_tokens")

# Modules the 25 Hz tokenizer imports at qwen_tts import time but the 12 Hz Base path never calls.
_STAND_IN_MODULES = (
    "sox",
    "onnxruntime",
    "torchaudio",
    "torchaudio.compliance",
    "torchaudio.compliance.kaldi",
)


# -- import and loading ----------------------------------------------------------------------------------


@functools.cache
def import_qwen_tts() -> types.ModuleType:
    """Import ``qwen_tts``; missing 25 Hz-only dependencies are replaced by inert stand-ins for the import.

    The stand-ins (each with a real ``__spec__``) are removed from ``sys.modules`` again afterwards, so other
    libraries' availability checks still see the dependencies as absent. Raises ImportError when torch,
    transformers or qwen_tts itself is missing.
    """
    import torch  # noqa: F401  (fail early, and before transformers caches availability)
    import transformers  # noqa: F401

    with stand_ins(_STAND_IN_MODULES):
        import qwen_tts
    return cast(types.ModuleType, qwen_tts)


def check_device(device: str) -> str:
    """``cpu``, ``cuda`` or ``cuda:N``; anything else is an EngineError naming the setting."""
    if not is_device(device):
        raise EngineError(f"{DEVICE_SETTING}={device!r}: use cpu, cuda or cuda:N")
    return device


_load_lock = threading.Lock()
_models: dict[tuple[str, str], Qwen3TTSModel] = {}


def load_model(model_dir: Path, device: str | None = None) -> Qwen3TTSModel:
    """The process-wide ``Qwen3TTSModel`` of ``model_dir`` on ``device`` (loaded on first call)."""
    import torch

    device = device or default_device()
    key = (str(Path(model_dir).resolve()), device)
    with _load_lock:
        model = _models.get(key)
        if model is None:
            qwen_tts = import_qwen_tts()
            dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
            try:
                model = qwen_tts.Qwen3TTSModel.from_pretrained(
                    key[0], device_map=device, dtype=dtype, local_files_only=True
                )
            except (OSError, ValueError, KeyError) as exc:
                raise EngineError(f"cannot load the Qwen3-TTS checkpoint in {key[0]}: {exc}") from exc
            if model.model.tts_model_type != "base":
                raise EngineError(
                    f"{key[0]} is a {model.model.tts_model_type!r} model; voice cloning needs Base"
                )
            # The talker's generation config has no pad id; set it (to EOS, as transformers would) so that
            # every generate call does not log "Setting `pad_token_id` to `eos_token_id`".
            talker = model.model.talker
            talker.generation_config.pad_token_id = model.model.config.talker_config.codec_eos_token_id
            from worker.engines import row_sampling  # imports torch: only once a model is loaded

            row_sampling.install(talker, talker.code_predictor)  # per-chunk seeds (see that module)
            _models[key] = model
        return model


def _identity_files(model_dir: Path) -> list[Path]:
    return sorted(
        p
        for p in model_dir.rglob("*")
        if p.is_file()
        and p.suffix in _IDENTITY_SUFFIXES
        and not any(part.startswith(".") for part in p.parts)
    )


@functools.lru_cache(maxsize=8)
def identity_cached(model_dir: str, stamp: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    root = Path(model_dir)
    for rel, _size, _mtime in stamp:
        digest.update(rel.encode("utf-8") + b"\0")
        with open(root / rel, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def model_identity(model_dir: Path) -> str:
    """sha256 over the relative paths and bytes of the model dir's config and weight files (cached per
    process by path, size and mtime: hashing the 1.7B checkpoint reads about 4.5 GB)."""
    root = Path(model_dir).resolve()
    files = _identity_files(root)
    if not files:
        raise EngineError(f"no config or weight files in {root}")
    stamp = tuple((p.relative_to(root).as_posix(), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    return identity_cached(str(root), stamp)


# -- prompts ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckpointLayout:
    """Prompt dimensions read from the checkpoint's config files (no model load needed)."""

    num_quantizers: int
    embedding_dim: int
    sample_rate: int
    layers: int
    hidden: int
    kv_width: int  # key/value heads x head dim

    def bytes_per_frame(self, dtype_bytes: int) -> int:
        """Memory one position of one row holds during generate: keys and values of every layer, the
        hidden states of every layer (qwen_tts asks generate for them), and a factor 2 for activations."""
        kv = 2 * self.layers * self.kv_width
        hidden_states = (self.layers + 1) * self.hidden
        return 2 * (kv + hidden_states) * dtype_bytes


def read_layout(model_dir: Path) -> CheckpointLayout:
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        codec = json.loads((model_dir / "speech_tokenizer" / "config.json").read_text(encoding="utf-8"))
        talker = config["talker_config"]
        heads = int(talker.get("num_attention_heads", 16))
        head_dim = int(talker.get("head_dim") or int(talker["hidden_size"]) // heads)
        return CheckpointLayout(
            num_quantizers=int(talker["num_code_groups"]),
            embedding_dim=int(config["speaker_encoder_config"]["enc_dim"]),
            sample_rate=int(codec.get("output_sample_rate", 24000)),
            layers=int(talker["num_hidden_layers"]),
            hidden=int(talker["hidden_size"]),
            kv_width=int(talker.get("num_key_value_heads", heads)) * head_dim,
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EngineError(f"{model_dir} is not a Qwen3-TTS checkpoint directory: {exc}") from exc


def prompt_from_arrays(
    prompt: SpeakerPrompt, *, num_quantizers: int, embedding_dim: int
) -> VoiceClonePromptItem:
    """Rebuild a ``VoiceClonePromptItem`` from stored prompt arrays, checking names, shapes and dtypes."""
    import torch

    qwen_tts = import_qwen_tts()
    missing = {"ref_code", "ref_spk_embedding", "x_vector_only", "ref_text_utf8"} - set(prompt)
    if missing:
        raise EngineError(f"speaker prompt lacks {sorted(missing)}")
    code = np.asarray(prompt["ref_code"])
    emb = np.asarray(prompt["ref_spk_embedding"])
    flag = np.asarray(prompt["x_vector_only"])
    text_bytes = np.asarray(prompt["ref_text_utf8"])
    if code.dtype != np.int64 or code.ndim != 2 or code.shape[1] != num_quantizers:
        raise EngineError(f"ref_code must be int64 (T, {num_quantizers}), got {code.dtype} {code.shape}")
    if emb.dtype != np.float32 or emb.shape != (embedding_dim,):
        raise EngineError(
            f"ref_spk_embedding must be float32 ({embedding_dim},), got {emb.dtype} {emb.shape}"
        )
    if not np.isfinite(emb).all():
        raise EngineError("ref_spk_embedding holds non-finite values")
    if flag.dtype != np.uint8 or flag.shape != (1,) or int(flag[0]) not in (0, 1):
        raise EngineError(f"x_vector_only must be uint8 (1,) holding 0 or 1, got {flag.dtype} {flag.shape}")
    if text_bytes.dtype != np.uint8 or text_bytes.ndim != 1:
        raise EngineError(f"ref_text_utf8 must be uint8 (N,), got {text_bytes.dtype} {text_bytes.shape}")
    try:
        ref_text = text_bytes.tobytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EngineError("ref_text_utf8 is not valid UTF-8") from exc
    x_vector_only = bool(flag[0])
    if not x_vector_only:
        if code.shape[0] == 0 or not ref_text.strip():
            raise EngineError("an ICL prompt needs reference codes and a transcript")
        if code.min() < 0:
            raise EngineError("ref_code holds negative codes")
    return qwen_tts.VoiceClonePromptItem(
        ref_code=None if x_vector_only else torch.from_numpy(np.ascontiguousarray(code)),
        ref_spk_embedding=torch.from_numpy(np.ascontiguousarray(emb)),
        x_vector_only_mode=x_vector_only,
        icl_mode=not x_vector_only,
        ref_text=ref_text if ref_text else None,
    )


# -- the engine ------------------------------------------------------------------------------------------


# The rate of the reference the warm-up builds a prompt from: not the model's 24 kHz, so that resampling
# (what most real references need) is compiled at warm-up; 16 kHz is a common rate for speech recordings.
WARM_UP_REFERENCE_RATE = 16_000


class Qwen3Engine:
    """The ``qwen3-tts`` engine (see the module docstring). Construction reads only the config files; the
    checkpoint is hashed when :attr:`version` is first read, and the model is loaded by the first call that
    needs it (or by :meth:`warm_up`)."""

    name = "qwen3-tts"
    max_chunk_chars = 500

    def __init__(
        self,
        model_dir: Path | str | None,
        *,
        device: str | None = None,
        max_batch: int | None = None,
        max_new_tokens: int | None = None,
        runner: str = "fast",
        pull_chunks: bool = True,
    ) -> None:
        """``device``: cpu, cuda or cuda:N (None: cuda:0 when available, else cpu); ``max_batch``: rows
        per generate call, or rows in flight for the fast runner (None: from free GPU memory, CPU_BATCH
        on a CPU); ``max_new_tokens``: a cap on codec frames per chunk (None: the model's own);
        ``runner``: one of :data:`RUNNERS`; ``pull_chunks``: see :attr:`refills`."""
        if not model_dir:
            raise EngineError("no Qwen3-TTS model directory: set TOME_QWEN3_MODEL_DIR")
        directory = model_dir
        self.model_dir = Path(directory).resolve()
        if not self.model_dir.is_dir():
            raise EngineError(f"Qwen3-TTS model directory {self.model_dir} does not exist")
        self._device = check_device(device) if device else None
        if runner not in RUNNERS:
            raise EngineError(f"{RUNNER_SETTING}={runner!r}: use one of {', '.join(RUNNERS)}")
        self.runner = runner
        self.pull_chunks = bool(pull_chunks)
        self._loop: TalkerLoop | None = None
        self._prefixes: PrefixStates | None = None  # decoder states after voices' reference codes
        self._layout = read_layout(self.model_dir)
        self.sample_rate: int = self._layout.sample_rate
        self.prompt_shapes: Mapping[str, tuple[int, ...]] = {
            "ref_code": (-1, self._layout.num_quantizers),
            "ref_spk_embedding": (self._layout.embedding_dim,),
            "x_vector_only": (1,),
            "ref_text_utf8": (-1,),
        }
        # Voices from a speaker embedding alone (x-vector-only mode): worker.voices.embedding.
        self.embedding_spec = EmbeddingSpec("ref_spk_embedding", "float32", (self._layout.embedding_dim,))
        self._generate_lock = threading.Lock()
        for name, value in (("max_batch", max_batch), ("max_new_tokens", max_new_tokens)):
            if value is not None and value < 1:
                raise EngineError(f"{name}={value!r} must be a positive whole number")
        self._max_new_tokens = max_new_tokens
        # Rows per generate call; None: chosen per call from free GPU memory (CPU_BATCH on a CPU).
        self.max_batch_size: int | None = max_batch
        # Rows of each generate call the last synthesize made (how a batch was split; tests, benchmarks);
        # for the fast runner, the rows it kept in flight, and the seconds its loop took (benchmarks).
        self.last_calls: tuple[int, ...] = ()
        self.last_generate_s = 0.0
        self.last_occupancy = 0.0  # frames made per slot and step in the last refilled call (benchmarks)
        # The fast runner's step through torch.compile where no CUDA graph is captured (TalkerLoop).
        self.compile_loop = False

    @functools.cached_property
    def version(self) -> str:
        """``qwen3-tts/<layout>/<sha256 of the checkpoint>``, computed on first use: the API builds the
        engine only to size chunks and should not read gigabytes of weights for that."""
        return f"{self.name}/{PROMPT_LAYOUT}/{model_identity(self.model_dir)}"

    # -- model -----------------------------------------------------------------------------------------

    @property
    def model(self) -> Qwen3TTSModel:
        model = load_model(self.model_dir, self._device)
        if int(model.model.speech_tokenizer.get_output_sample_rate()) != self.sample_rate:
            raise EngineError("speech tokenizer sample rate differs from its config file")
        return model

    def warm_up(self) -> None:
        """Load the model and take the paths a first real request takes, so that no first job pays for them:
        a prompt build from a reference *not* at the model's rate (:data:`WARM_UP_REFERENCE_RATE`), with a
        transcript (ICL: the reference's codec codes too), then one tiny generation with that prompt
        (first-call allocations, kernels). Resampling the reference goes through librosa, whose numba code
        compiles on first use, so a warm-up at the model's own rate alone would leave that compile to the
        first build of a 16 kHz reference."""
        sr = WARM_UP_REFERENCE_RATE
        prompt = self.encode_speaker(sine_reference(sr), sr, "Hello.")
        self.synthesize([SynthesisRequest(text="Hello.", prompt=prompt, params={"max_new_tokens": 8})])

    # -- speaker prompts -------------------------------------------------------------------------------

    def encode_speaker(
        self, audio: Waveform, sample_rate: int, ref_text: str
    ) -> dict[str, npt.NDArray[np.generic]]:
        check_sample_rate(sample_rate)
        wav = mono_reference(audio, sample_rate)
        text = (ref_text or "").strip()
        x_vector_only = not text
        with self._generate_lock:
            items = self.model.create_voice_clone_prompt(
                ref_audio=(wav, int(sample_rate)), ref_text=text or None, x_vector_only_mode=x_vector_only
            )
        item = items[0]
        q = self._layout.num_quantizers
        if item.ref_code is None:
            code = np.zeros((0, q), dtype=np.int64)
        else:
            code = item.ref_code.detach().to("cpu").to(dtype=_torch().int64).numpy().reshape(-1, q)
        emb = item.ref_spk_embedding.detach().to("cpu").float().numpy().astype(np.float32).reshape(-1)
        return {
            "ref_code": np.ascontiguousarray(code, dtype=np.int64),
            "ref_spk_embedding": np.ascontiguousarray(emb, dtype=np.float32),
            "x_vector_only": np.asarray([1 if x_vector_only else 0], dtype=np.uint8),
            "ref_text_utf8": np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy(),
        }

    def prompt_from_embedding(self, embedding: npt.NDArray[np.float32]) -> dict[str, npt.NDArray[np.generic]]:
        """An x-vector-only prompt: the speaker embedding, no reference codes, no transcript."""
        emb = np.ascontiguousarray(embedding, dtype=np.float32).reshape(-1)
        if emb.shape != (self._layout.embedding_dim,) or not np.isfinite(emb).all():
            raise EngineError(f"ref_spk_embedding must be {self._layout.embedding_dim} finite float32 values")
        return {
            "ref_code": np.zeros((0, self._layout.num_quantizers), dtype=np.int64),
            "ref_spk_embedding": emb,
            "x_vector_only": np.asarray([1], dtype=np.uint8),
            "ref_text_utf8": np.zeros(0, dtype=np.uint8),
        }

    def embedding_of(self, prompt: SpeakerPrompt) -> npt.NDArray[np.float32]:
        """The speaker embedding of any of this engine's prompts (every one holds it); numpy only, so that
        the API can export it without torch."""
        if "ref_spk_embedding" not in prompt:
            raise EngineError("speaker prompt lacks ref_spk_embedding")
        emb = np.asarray(prompt["ref_spk_embedding"])
        if (
            emb.dtype != np.float32
            or emb.shape != (self._layout.embedding_dim,)
            or not np.isfinite(emb).all()
        ):
            raise EngineError(f"ref_spk_embedding must be {self._layout.embedding_dim} finite float32 values")
        return np.ascontiguousarray(emb)

    def speaker_embedding(self, audio: Waveform, sample_rate: int) -> npt.NDArray[np.float32]:
        """The speaker-encoder x-vector of ``audio`` (mono float32 at ``sample_rate``), computed as
        ``encode_speaker`` computes a prompt's (resampled to the encoder's rate, same mel front end): the
        chunk QA's speaker check (worker.qa.speaker) compares a rendered chunk's with the voice's.
        :class:`EngineError` under :data:`MIN_EMBEDDING_SECONDS` of audio."""
        check_sample_rate(sample_rate)
        wav = np.nan_to_num(np.asarray(audio, dtype=np.float32).reshape(-1), nan=0.0, posinf=0.0, neginf=0.0)
        if wav.size < MIN_EMBEDDING_SECONDS * sample_rate:
            raise EngineError(f"audio shorter than {MIN_EMBEDDING_SECONDS} s has no speaker embedding")
        with self._generate_lock:
            model = self.model.model
            target = int(model.speaker_encoder_sample_rate)
            if int(sample_rate) != target:
                import librosa  # the qwen3 extra's dependency (qwen_tts resamples references with it)

                wav = librosa.resample(y=wav, orig_sr=int(sample_rate), target_sr=target)
            emb = model.extract_speaker_embedding(
                audio=np.ascontiguousarray(wav, dtype=np.float32), sr=target
            )
        return np.ascontiguousarray(emb.detach().to("cpu").float().numpy().reshape(-1), dtype=np.float32)

    def prompt_item(self, prompt: SpeakerPrompt) -> VoiceClonePromptItem:
        return prompt_from_arrays(
            prompt, num_quantizers=self._layout.num_quantizers, embedding_dim=self._layout.embedding_dim
        )

    # -- synthesis -------------------------------------------------------------------------------------

    def language_name(self, language: str) -> str:
        """The qwen_tts name of a language code ("en" -> "english"); "auto" passes; EngineError if unknown."""
        code = language.strip().lower().replace("_", "-")
        name = _LANGUAGES.get(code.split("-", 1)[0], code)
        supported = self.model.get_supported_languages() or []
        if name != "auto" and name not in supported:
            raise EngineError(f"Qwen3-TTS has no language {language!r} (supported: {sorted(supported)})")
        return name

    def synthesize(self, batch: Sequence[SynthesisRequest]) -> list[Waveform]:
        # Validate everything before rendering anything.
        items = [self.prompt_item(request.prompt) for request in batch]
        languages = [self.language_name(request.language) for request in batch]
        kwargs = [self._generate_kwargs(request.params) for request in batch]
        rates = [rate_scale(request.params) for request in batch]
        if self.runner == "fast":
            waves = self._synthesize_fast(batch, items, languages, kwargs)
            return [change_rate(w, rate) for w, rate in zip(waves, rates, strict=True)]
        out: list[Waveform | None] = [None] * len(batch)
        groups: dict[tuple[tuple[str, float | int], ...], list[int]] = {}
        for index, request in enumerate(batch):
            if not request.text.strip():
                out[index] = np.zeros(0, dtype=np.float32)
            else:
                groups.setdefault(tuple(sorted(kwargs[index].items())), []).append(index)
        calls: list[int] = []
        for key, indices in groups.items():
            for sub in self.plan_batches(batch, items, indices, dict(key)):
                calls.append(len(sub))
                for index, wav in zip(
                    sub, self._generate(batch, items, languages, sub, dict(key)), strict=True
                ):
                    out[index] = wav
        self.last_calls = tuple(calls)
        waves = [w if w is not None else np.zeros(0, dtype=np.float32) for w in out]
        return [change_rate(w, rate) for w, rate in zip(waves, rates, strict=True)]

    @property
    def refills(self) -> bool:
        """Whether a render task may refill this engine's free slots with other waiting chunks while its
        batch renders (``TOME_QWEN3_PULL_CHUNKS``, fast runner only): worker.jobs.render."""
        return self.pull_chunks and self.runner == "fast"

    def synthesize_refilling(
        self,
        batch: Sequence[SynthesisRequest],
        refill: Callable[[int], Sequence[SynthesisRequest]],
        waiting: int | None = None,
    ) -> list[Waveform | None]:
        """``batch`` through the fast loop, its free slots refilled from ``refill`` while it runs: the waves
        of ``batch`` then of every refilled request (None: one the loop could not take; render it on its
        own); ``waiting`` (how many requests ``refill`` could give now) sizes the slots. See
        worker.engines.qwen3_refill."""
        from worker.engines.qwen3_refill import synthesize_refilling

        return synthesize_refilling(self, batch, refill, waiting)

    def synthesize_stream(self, request: SynthesisRequest) -> Iterator[Waveform]:
        """One request's audio in pieces as its frames are generated (the fast runner; the reference
        runner yields the whole at the end). The pieces joined equal :meth:`synthesize`'s audio within
        float rounding, before any rate change (``rate_scale`` is refused here: a time stretch needs the
        whole)."""
        if rate_scale(request.params) != 1.0:
            raise EngineError("a streamed rendering cannot change its rate")
        if self.runner != "fast" or not request.text.strip():
            yield from self.synthesize([request])
            return
        from worker.engines.qwen3_stream import StreamDecoder

        item = self.prompt_item(request.prompt)
        language = self.language_name(request.language)
        kwargs = self._generate_kwargs(request.params)
        pieces: list[Waveform] = []
        with self._generate_lock:
            row = self._loop_row(request, item, language, kwargs)
            states = self._prefix_states()
            stream = StreamDecoder(*self._decoder(), self._reference_codes(item), states=states)

            def sink(_index: int, frames: torch.Tensor) -> None:
                piece = stream.push(frames)
                if piece.size:
                    pieces.append(np.clip(piece, -1.0, 1.0))

            # The loop yields after every frame (its sink has decoded what is due): hand the audio out then.
            loop = self._fast_loop()
            for _ in loop.run_iter([row], 1, sink=sink):
                while pieces:
                    yield pieces.pop(0)
            tail = stream.finish()
        if tail.size:
            pieces.append(np.clip(tail, -1.0, 1.0))
        while pieces:
            yield pieces.pop(0)

    def release_memory(self) -> None:
        """Return cached accelerator memory to the driver (the pipeline calls it after out-of-memory,
        before it renders the batch in halves)."""
        torch = _torch()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    # -- batch size ------------------------------------------------------------------------------------

    def plan_batches(
        self,
        batch: Sequence[SynthesisRequest],
        items: Sequence[VoiceClonePromptItem],
        indices: Sequence[int],
        kwargs: Mapping[str, float | int],
    ) -> list[list[int]]:
        """Split ``indices`` into generate calls: longest first (rows of a call pad to its longest), each
        call as large as ``max_batch_size`` or, when that is unset on a GPU, as free memory allows."""
        frames = {i: self._expected_frames(batch[i].text, items[i], kwargs) for i in indices}
        order = sorted(indices, key=lambda i: -frames[i])
        plan: list[list[int]] = []
        while order:
            size = self.batch_limit(frames[order[0]])
            plan.append(order[:size])
            order = order[size:]
        return plan

    def batch_limit(self, frames: int) -> int:
        """Rows per generate call for rows of up to ``frames`` codec frames."""
        if self.max_batch_size is not None:
            return self.max_batch_size
        torch = _torch()
        device = torch.device(self._device or default_device())
        if device.type != "cuda":
            return CPU_BATCH
        row_bytes = self._layout.bytes_per_frame(CUDA_DTYPE_BYTES) * frames
        return batch_size_for(free_gpu_bytes(torch, device), row_bytes)

    def _expected_frames(
        self, text: str, item: VoiceClonePromptItem, kwargs: Mapping[str, float | int]
    ) -> int:
        """Sequence length a row reaches: prompt (reference codes and text) plus the frames it generates,
        estimated from the text's length and capped by ``max_new_tokens``."""
        reference = 0 if item.ref_code is None else int(item.ref_code.shape[0])
        ref_text = len(item.ref_text or "")
        spoken = int(len(text) * FRAMES_PER_CHAR) + 16
        cap = kwargs.get("max_new_tokens")
        new = spoken if cap is None else min(spoken, int(cap))
        return reference + ref_text + len(text) + new

    # -- generation ------------------------------------------------------------------------------------

    def _generate_kwargs(self, params: Mapping[str, float]) -> dict[str, float | int]:
        unknown = set(params) - {*_GENERATE_PARAMS, RATE_SCALE}
        if unknown:
            raise EngineError(f"unsupported Qwen3-TTS parameters: {sorted(unknown)}")
        out: dict[str, float | int] = {}
        for name in _GENERATE_PARAMS:
            if name not in params:
                continue
            try:
                value = float(params[name])  # rate_scale is not a generate parameter: see change_rate
            except (TypeError, ValueError) as exc:
                raise EngineError(f"{name} must be a number, got {params[name]!r}") from exc
            if not np.isfinite(value) or value <= 0:
                raise EngineError(f"{name} must be positive, got {value!r}")
            out[name] = int(value) if name in _INT_PARAMS else value
        if self._max_new_tokens is not None:
            out["max_new_tokens"] = min(
                int(out.get("max_new_tokens", self._max_new_tokens)), self._max_new_tokens
            )
        return out

    def _fast_loop(self) -> TalkerLoop:
        from worker.engines.qwen3_loop import TalkerLoop

        model = self.model.model
        if self._loop is None or self._loop.model is not model:
            self._loop = TalkerLoop(model, compile_steps=self.compile_loop)
        self._loop.compile_steps = self.compile_loop
        return self._loop

    def _loop_row(
        self,
        request: SynthesisRequest,
        item: VoiceClonePromptItem,
        language: str,
        kwargs: Mapping[str, float | int | bool],
    ) -> LoopRow:
        """The request's prompt as qwen-tts builds it (worker.engines.qwen3_loop.capture_prompt)."""
        from worker.engines.qwen3_loop import capture_prompt, row_from_capture

        qm = self.model
        input_ids = qm._tokenize_texts([qm._build_assistant_text(request.text)])
        ref_ids = [qm._tokenize_texts([qm._build_ref_text(item.ref_text)])[0] if item.ref_text else None]
        captured = capture_prompt(
            qm.model,
            input_ids=input_ids,
            ref_ids=ref_ids,
            voice_clone_prompt=qm._prompt_items_to_voice_clone_prompt([item]),
            languages=[language],
            non_streaming_mode=False,
            **qm._merge_generate_kwargs(**kwargs),
        )
        return row_from_capture(captured, request.seed)

    def _decoder(self) -> tuple[Any, int]:
        """The codec decoder's forward and its samples per frame."""
        tokenizer = self.model.model.speech_tokenizer.model
        return tokenizer.decoder, int(tokenizer.get_decode_upsample_rate())

    def _prefix_states(self) -> PrefixStates:
        """The codec decoder's states after the reference codes of the last voices decoded (a new table
        when the model, and so the decoder, changed): a chunk then decodes only its generated frames."""
        from worker.engines.qwen3_stream import PrefixStates

        decoder, _ = self._decoder()
        if self._prefixes is None or self._prefixes.decoder is not decoder:
            self._prefixes = PrefixStates(decoder)
        return self._prefixes

    def _reference_codes(self, item: VoiceClonePromptItem) -> torch.Tensor | None:
        """The reference's codes a row is decoded after (ICL prompts), on the model's device."""
        if item.ref_code is None:
            return None
        return cast("torch.Tensor", item.ref_code.to(self.model.device))

    def _synthesize_fast(
        self,
        batch: Sequence[SynthesisRequest],
        items: Sequence[VoiceClonePromptItem],
        languages: Sequence[str],
        kwargs: Sequence[Mapping[str, float | int]],
    ) -> list[Waveform]:
        """Every request through the fast loop, up to ``batch_limit`` rows in flight (rows that end are
        refilled at once, whatever their voice or sampling settings), then decoded as qwen-tts decodes."""
        indices = [i for i, request in enumerate(batch) if request.text.strip()]
        out: list[Waveform] = [np.zeros(0, dtype=np.float32) for _ in batch]
        if not indices:
            self.last_calls = ()
            return out
        with self._generate_lock:
            rows = [self._loop_row(batch[i], items[i], languages[i], kwargs[i]) for i in indices]
            # The static cache holds every position a row can reach: its prompt and its frame cap.
            slots = min(
                len(indices), self.batch_limit(max(r.prefill.shape[0] + r.max_new_tokens for r in rows))
            )
            loop = self._fast_loop()
            began = time.perf_counter()
            codes = loop.run(rows, slots)
            self.last_generate_s = time.perf_counter() - began
            # Every row decoded after its reference's codes, as qwen-tts decodes a generate call's rows;
            # the reference's samples are cut at its exact frame boundary.
            prefixes = [self._reference_codes(items[i]) for i in indices]
            wholes = [
                generated if prefix is None else _torch().cat([prefix, generated], dim=0)
                for prefix, generated in zip(prefixes, codes, strict=True)
            ]
            for i, samples in zip(indices, self._decode_rows(wholes, prefixes), strict=True):
                out[i] = np.clip(samples, -1.0, 1.0).astype(np.float32)
        self.last_calls = (loop.last_slots,)
        return out

    def _decode_rows(
        self, wholes: Sequence[torch.Tensor], prefixes: Sequence[torch.Tensor | None]
    ) -> list[npt.NDArray[np.float32]]:
        """Each row's samples after its reference's codes. On a GPU one batched decode (qwen-tts's, one
        launch sequence for all rows); on a CPU row by row with the same windows (``decode_whole``), each
        from the kept state after its reference's codes (:meth:`_prefix_states`): the convolutions over a
        batch of rows ran about 5x slower there than the rows one at a time (16 rows of 136 frames, tiny
        checkpoint: 4.0 s against 0.7 s; docs/benchmarks.md)."""
        decoder, upsample = self._decoder()
        cuts = [0 if prefix is None else int(prefix.shape[0]) for prefix in prefixes]
        if _torch().device(self.model.device).type == "cpu":
            from worker.engines.qwen3_stream import decode_whole

            states = self._prefix_states()
            return [
                decode_whole(decoder, upsample, w, cut, states) for w, cut in zip(wholes, cuts, strict=True)
            ]
        wavs, _rate = self.model.model.speech_tokenizer.decode([{"audio_codes": w} for w in wholes])
        return [
            np.asarray(wav, dtype=np.float32).reshape(-1)[cut * upsample :]
            for wav, cut in zip(wavs, cuts, strict=True)
        ]

    def _generate(
        self,
        batch: Sequence[SynthesisRequest],
        items: Sequence[VoiceClonePromptItem],
        languages: Sequence[str],
        indices: Sequence[int],
        kwargs: Mapping[str, float | int],
    ) -> list[Waveform]:
        """One generate call (talker, then codec decoder) for ``indices``; row i samples from its own
        request's seed (worker.engines.row_sampling), so a chunk renders the same in any batch."""
        from worker.engines.row_sampling import seeded_rows

        model = self.model
        with self._generate_lock, seeded_rows([batch[i].seed for i in indices], model.device):
            wavs, sample_rate = model.generate_voice_clone(
                text=[batch[i].text for i in indices],
                language=[languages[i] for i in indices],
                voice_clone_prompt=[items[i] for i in indices],
                **kwargs,
            )
        if int(sample_rate) != self.sample_rate:
            raise EngineError(f"model rendered at {sample_rate} Hz, not {self.sample_rate}")
        return [np.clip(np.asarray(w, dtype=np.float32).reshape(-1), -1.0, 1.0) for w in wavs]


def free_gpu_bytes(torch: Any, device: Any) -> int:
    """Memory a batch can use on ``device``: what the driver reports free plus what torch holds cached but
    unused (blocks of earlier, larger batches, which the driver counts as taken)."""
    free, _total = torch.cuda.mem_get_info(device)
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return int(free) + max(0, int(cached))


def batch_size_for(free_bytes: int, row_bytes: int, cap: int = MAX_BATCH) -> int:
    """How many rows of ``row_bytes`` fit in ``MEMORY_HEADROOM`` of ``free_bytes`` (1 to ``cap``)."""
    if row_bytes <= 0:
        return cap
    return max(1, min(cap, int(free_bytes * MEMORY_HEADROOM) // row_bytes))


def _torch() -> Any:
    import torch

    return torch


def change_rate(wave: Waveform, rate: float) -> Waveform:
    """``wave`` spoken ``rate`` times as fast, pitch kept (librosa's phase-vocoder time stretch): Qwen3-TTS
    has no rate control of its own, so the job's speed and SSML prosody rate are applied to its output."""
    if rate == 1.0 or wave.size < 2048:
        return wave
    import librosa  # the qwen3 extra's dependency, like the engine itself

    stretched = np.asarray(librosa.effects.time_stretch(wave.astype(np.float32), rate=rate))
    return cast(Waveform, np.clip(stretched, -1.0, 1.0).astype(np.float32))


def create(settings: Qwen3Settings) -> Qwen3Engine:
    """The engine as the registry builds it (empty and 0 settings: the engine's own defaults)."""
    return Qwen3Engine(
        settings.model_dir or None,
        device=settings.device or None,
        max_batch=settings.max_batch or None,
        max_new_tokens=settings.max_new_tokens or None,
        runner=settings.runner,
        pull_chunks=settings.pull_chunks,
    )
