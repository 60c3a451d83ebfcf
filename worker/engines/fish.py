"""The ``fish-speech`` engine: Fish Speech / OpenAudio S1 voice cloning through the official ``fish-speech``
package (0.1.0): its ``DualARTransformer`` text-to-semantic model and its DAC codec.

Pure module (no Flask, no Celery). ``torch`` and ``fish_speech`` are imported lazily (the ``fish``
extra), so the module imports anywhere. The checkpoint directory comes from the engine registry (this
module reads no environment); nothing is downloaded. Loading does what the package's own loaders do,
minus their side effects and more strictly: ``torch.load(weights_only=True)``, so no pickle code runs,
and ``strict=True``.

The speaker prompt (``encode_speaker``) is the reference's DAC codes and its transcript, computed once per
voice and cached like every engine's prompt. The package's ``generate_long`` renders one request and
samples from the global torch RNG, so rows are rendered one at a time, each under its chunk's seed and a
process-wide lock: a chunk renders the same alone or in any batch.

See docs/engines.md, "The Fish Speech engine (OpenAudio S1)" (the checkpoint layout, the modules never
imported, the prompt's tensors, the engine version).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import pickle  # only for its exception: torch.load(weights_only=True) raises UnpicklingError
import threading
import types
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from worker.engines.base import (
    RATE_SCALE,
    EngineError,
    SpeakerPrompt,
    SynthesisRequest,
    Waveform,
    default_device,
    is_device,
    rate_scale,
)
from worker.engines.fish_spec import FishSettings
from worker.engines.reference import check_sample_rate, mono_reference, sine_reference
from worker.engines.stand_ins import stand_ins

__all__ = [
    "PROMPT_LAYOUT",
    "SAMPLE_RATE",
    "FishEngine",
    "FishSettings",
    "build_codec",
    "check_prompt",
    "import_fish_speech",
    "load_models",
    "model_identity",
]

PROMPT_LAYOUT = "prompt-v1"  # bump when the prompt arrays or their meaning change
SAMPLE_RATE = 44100  # the DAC codec's (checked against the loaded codec)
CODEC_CONFIG = "modded_dac_vq"  # the packaged Hydra config of the S1 codec
CODEC_OVERRIDES_FILE = "codec_overrides.json"
# Files of the checkpoint layout; model_identity hashes every one of them that exists.
REQUIRED_FILES = ("config.json", "model.pth", "tokenizer.tiktoken", "codec.pth")
IDENTITY_FILES = (*REQUIRED_FILES, "special_tokens.json", CODEC_OVERRIDES_FILE)
# Sampling parameters (generate_long's, with the ranges it asserts) and their defaults.
_SAMPLING = {"temperature": (0.0, 2.0, 0.8), "top_p": (0.0, 1.0, 0.8), "repetition_penalty": (0.0, 2.0, 1.1)}

# Modules that ``audiotools`` (the codec's base classes) imports at import time but the codec never calls
# here: the torchaudio wheel for this torch does not load. Inert stand-ins exist during the import only.
_VQ_MODULE = "tome_fish_vq_manager"  # the name VQManager's module is loaded under (see _vq_manager_class)
_STAND_IN_MODULES = ("torchaudio", "torchaudio.functional", "torchaudio.transforms")


# -- import and loading ----------------------------------------------------------------------------------


@functools.cache
def import_fish_speech() -> types.SimpleNamespace:
    """The parts of ``fish_speech`` the engine uses (imported once). Raises ImportError when torch or
    the ``fish`` extra is missing."""
    import torch  # noqa: F401  (fail early with a clear name)

    with stand_ins(_STAND_IN_MODULES):
        from fish_speech.models.dac import modded_dac

    from fish_speech.models.text2semantic import inference, llama
    from fish_speech.tokenizer import FishTokenizer
    from loguru import logger

    # The package logs every step at INFO through loguru; Tome's logs say what matters.
    logger.disable("fish_speech")
    logger.disable(_VQ_MODULE)
    return types.SimpleNamespace(
        DAC=modded_dac.DAC,
        BaseModelArgs=llama.BaseModelArgs,
        DualARTransformer=llama.DualARTransformer,
        FishTokenizer=FishTokenizer,
        generate_long=inference.generate_long,
        decode_one_token_ar=inference.decode_one_token_ar,
        VQManager=_vq_manager_class(),
    )


def _vq_manager_class() -> type:
    """``fish_speech.inference_engine.vq_manager.VQManager``, loaded from its file: importing it by name
    would first run its package's ``__init__``, which needs a loadable torchaudio."""
    path = package_dir() / "inference_engine" / "vq_manager.py"
    spec = importlib.util.spec_from_file_location(_VQ_MODULE, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return cast(type, module.VQManager)


def package_dir() -> Path:
    """Where the ``fish_speech`` package is installed (a namespace package: it has no ``__init__``)."""
    import fish_speech

    return Path(next(iter(fish_speech.__path__)))


def package_version() -> str:
    try:
        return importlib.metadata.version("fish-speech")
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def build_codec(overrides: Sequence[str] = ()) -> Any:
    """The DAC codec of the packaged ``modded_dac_vq`` config (with Hydra ``overrides``), randomly
    initialised: the caller loads the weights."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from hydra.utils import instantiate
    from omegaconf.errors import OmegaConfBaseException

    import_fish_speech()  # the codec classes, imported with their stand-ins
    config_dir = package_dir() / "configs"
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
            cfg = compose(config_name=CODEC_CONFIG, overrides=list(overrides))
        return instantiate(cfg)
    except (HydraException, OmegaConfBaseException, TypeError, ValueError) as exc:
        raise EngineError(f"cannot build the Fish Speech codec from {CODEC_CONFIG!r}: {exc}") from exc
    finally:
        GlobalHydra.instance().clear()


def _state_dict(path: Path) -> dict[str, Any]:
    """A checkpoint's tensors, read without running pickle code; Lightning wrappers unwrapped."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, ValueError, pickle.UnpicklingError) as exc:
        # weights_only refuses any object but tensors and plain containers: no pickle code runs.
        raise EngineError(f"cannot read {path.name}: {str(exc).splitlines()[0]}") from exc
    if not isinstance(state, dict):
        raise EngineError(f"{path.name} holds no state dict")
    if isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    return cast(dict[str, Any], state)


def _load_strict(module: Any, state: Mapping[str, Any], what: str) -> None:
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise EngineError(f"{what} does not match its config: {exc}") from exc


def _read_overrides(model_dir: Path) -> list[str]:
    path = model_dir / CODEC_OVERRIDES_FILE
    if not path.is_file():
        return []
    try:
        overrides = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EngineError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise EngineError(f"{path} must hold a list of Hydra override strings")
    return overrides


class _Models(types.SimpleNamespace):
    llama: Any
    codec: Any
    vq: Any  # VQManager over the codec
    device: str


_load_lock = threading.Lock()
_models: dict[tuple[str, str], _Models] = {}


def load_models(model_dir: Path, device: str) -> _Models:
    """The process-wide text-to-semantic model and codec of ``model_dir`` on ``device`` (loaded once)."""
    import torch

    key = (str(Path(model_dir).resolve()), device)
    with _load_lock:
        loaded = _models.get(key)
        if loaded is not None:
            return loaded
        fish = import_fish_speech()
        root = Path(key[0])
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        try:
            config = fish.BaseModelArgs.from_pretrained(str(root))
            tokenizer = fish.FishTokenizer.from_pretrained(str(root))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise EngineError(f"{root} is not a Fish Speech checkpoint: {exc}") from exc
        if config.model_type != "dual_ar":
            raise EngineError(f"{root} is a {config.model_type!r} model; the engine needs dual_ar")
        llama = fish.DualARTransformer(config, tokenizer=tokenizer)
        weights = _state_dict(root / "model.pth")
        if next(iter(weights), "").startswith("model."):  # a TextToSemantic LightningModule checkpoint
            weights = {k.removeprefix("model."): v for k, v in weights.items()}
        _load_strict(llama, weights, "model.pth")
        llama = llama.to(device=device, dtype=dtype).eval()

        codec = build_codec(_read_overrides(root))
        state = _state_dict(root / "codec.pth")
        if any(k.startswith("generator.") for k in state):  # a training checkpoint: the generator only
            state = {k.removeprefix("generator."): v for k, v in state.items() if k.startswith("generator.")}
        _load_strict(codec, state, "codec.pth")
        codec = codec.to(device).eval()
        if int(codec.sample_rate) != SAMPLE_RATE:
            raise EngineError(f"the codec renders at {codec.sample_rate} Hz, not {SAMPLE_RATE}")
        vq = fish.VQManager()
        vq.decoder_model = codec
        vq.load_audio = _already_loaded
        loaded = _Models(llama=llama, codec=codec, vq=vq, device=device)
        _models[key] = loaded
        return loaded


def _already_loaded(audio: npt.NDArray[np.float32], sample_rate: int) -> npt.NDArray[np.float32]:
    """VQManager's ``load_audio``: the engine hands it samples already at the codec's rate."""
    return audio


def _identity_files(model_dir: Path) -> list[Path]:
    return [model_dir / name for name in IDENTITY_FILES if (model_dir / name).is_file()]


@functools.lru_cache(maxsize=8)
def identity_cached(model_dir: str, stamp: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for name, _size, _mtime in stamp:
        digest.update(name.encode("utf-8") + b"\0")
        with open(Path(model_dir) / name, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def model_identity(model_dir: Path) -> str:
    """sha256 over the names and bytes of the checkpoint's files (cached per process by path, size and
    mtime: a real checkpoint is over a gigabyte)."""
    root = Path(model_dir).resolve()
    files = _identity_files(root)
    stamp = tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    return identity_cached(str(root), stamp)


# -- prompts ---------------------------------------------------------------------------------------------


def check_prompt(prompt: SpeakerPrompt, num_codebooks: int, codebook_size: int) -> tuple[Any, str]:
    """The reference codes (a torch int64 tensor) and transcript of a stored prompt, checked."""
    import torch

    missing = {"codes", "ref_text_utf8"} - set(prompt)
    if missing:
        raise EngineError(f"speaker prompt lacks {sorted(missing)}")
    codes = np.asarray(prompt["codes"])
    text_bytes = np.asarray(prompt["ref_text_utf8"])
    if codes.dtype != np.int64 or codes.ndim != 2 or codes.shape[0] != num_codebooks or codes.shape[1] < 1:
        raise EngineError(f"codes must be int64 ({num_codebooks}, T>0), got {codes.dtype} {codes.shape}")
    if codes.min() < 0 or codes.max() >= codebook_size:
        raise EngineError(f"codes must lie in [0, {codebook_size})")
    if text_bytes.dtype != np.uint8 or text_bytes.ndim != 1:
        raise EngineError(f"ref_text_utf8 must be uint8 (N,), got {text_bytes.dtype} {text_bytes.shape}")
    try:
        text = text_bytes.tobytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EngineError("ref_text_utf8 is not valid UTF-8") from exc
    if not text.strip():
        raise EngineError("a Fish Speech prompt needs the reference transcript")
    return torch.from_numpy(np.ascontiguousarray(codes)), text


def _resample(wave: npt.NDArray[np.float32], rate: int, target: int) -> npt.NDArray[np.float32]:
    if rate == target:
        return wave
    from scipy.signal import resample_poly

    g = int(np.gcd(rate, target))
    return np.asarray(resample_poly(wave, target // g, rate // g), dtype=np.float32)


# -- the engine ------------------------------------------------------------------------------------------


class FishEngine:
    """The ``fish-speech`` engine (see the module docstring). Construction reads only ``config.json``;
    the checkpoint is hashed when :attr:`version` is first read, and the models are loaded by the first
    call that needs them (or by :meth:`warm_up`)."""

    name = "fish-speech"
    sample_rate = SAMPLE_RATE
    max_chunk_chars = 300

    def __init__(
        self, model_dir: Path | str | None, *, device: str | None = None, max_new_tokens: int | None = None
    ) -> None:
        """``device``: cpu, cuda or cuda:N (None: cuda:0 when available, else cpu); ``max_new_tokens``:
        a cap on codec frames per chunk (about 21.5 a second; None: what the model's length allows)."""
        if not model_dir:
            raise EngineError("no Fish Speech model directory: set TOME_FISH_MODEL_DIR")
        self.model_dir = Path(model_dir).resolve()
        missing = [name for name in REQUIRED_FILES if not (self.model_dir / name).is_file()]
        if missing:
            raise EngineError(f"Fish Speech model directory {self.model_dir} lacks {', '.join(missing)}")
        try:
            config = json.loads((self.model_dir / "config.json").read_text(encoding="utf-8"))
            self.num_codebooks = int(config["num_codebooks"])
            self.codebook_size = int(config["codebook_size"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise EngineError(f"{self.model_dir}/config.json is not a Fish Speech config: {exc}") from exc
        if device is not None and not is_device(device):
            raise EngineError(f"TOME_FISH_DEVICE={device!r}: use cpu, cuda or cuda:N")
        self._device = device
        if max_new_tokens is not None and max_new_tokens < 1:
            raise EngineError(f"max_new_tokens={max_new_tokens!r} must be a positive whole number")
        self._max_new_tokens = max_new_tokens
        self.prompt_shapes: Mapping[str, tuple[int, ...]] = {
            "codes": (self.num_codebooks, -1),
            "ref_text_utf8": (-1,),
        }
        self._lock = threading.Lock()

    @functools.cached_property
    def version(self) -> str:
        return f"{self.name}/{PROMPT_LAYOUT}/{package_version()}/{model_identity(self.model_dir)}"

    @property
    def models(self) -> _Models:
        if self._device is None:
            self._device = default_device()
        return load_models(self.model_dir, self._device)

    def warm_up(self) -> None:
        """Load the models and render one tiny request (first-call allocations)."""
        prompt = self.encode_speaker(sine_reference(SAMPLE_RATE), SAMPLE_RATE, "Hi.")
        self.synthesize([SynthesisRequest(text="Hello.", prompt=prompt, params={"max_new_tokens": 4})])

    # -- speaker prompts -------------------------------------------------------------------------------

    def encode_speaker(
        self, audio: Waveform, sample_rate: int, ref_text: str
    ) -> dict[str, npt.NDArray[np.generic]]:
        import torch

        check_sample_rate(sample_rate)
        text = (ref_text or "").strip()
        if not text:
            raise EngineError(
                "Fish Speech clones a voice from its recording and transcript: ref_text is empty"
            )
        wav = mono_reference(audio, sample_rate)
        wav = _resample(wav, int(sample_rate), SAMPLE_RATE)
        models = self.models
        with self._lock, torch.inference_mode():
            codes = models.vq.encode_reference(reference_audio=wav, enable_reference_audio=True)
        array = codes.detach().to("cpu").to(torch.int64).numpy()
        if array.ndim != 2 or array.shape[0] != self.num_codebooks:
            raise EngineError(f"the codec made codes of shape {array.shape}, not ({self.num_codebooks}, T)")
        return {
            "codes": np.ascontiguousarray(array, dtype=np.int64),
            "ref_text_utf8": np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy(),
        }

    # -- synthesis -------------------------------------------------------------------------------------

    def synthesize(self, batch: Sequence[SynthesisRequest]) -> list[Waveform]:
        # Validate everything before rendering anything.
        prompts = [check_prompt(r.prompt, self.num_codebooks, self.codebook_size) for r in batch]
        kwargs = [self._generate_kwargs(r.params) for r in batch]
        rates = [rate_scale(r.params) for r in batch]
        out: list[Waveform] = []
        for request, (codes, ref_text), options, rate in zip(batch, prompts, kwargs, rates, strict=True):
            wave = self._render(request, codes, ref_text, options) if request.text.strip() else None
            wave = np.zeros(0, dtype=np.float32) if wave is None else wave
            out.append(_change_rate(wave, rate))
        return out

    def _generate_kwargs(self, params: Mapping[str, float]) -> dict[str, float | int]:
        unknown = set(params) - {*_SAMPLING, "max_new_tokens", RATE_SCALE}
        if unknown:
            raise EngineError(f"unsupported Fish Speech parameters: {sorted(unknown)}")
        out: dict[str, float | int] = {}
        for name, (low, high, default) in _SAMPLING.items():
            try:
                value = float(params.get(name, default))
            except (TypeError, ValueError) as exc:
                raise EngineError(f"{name} must be a number, got {params[name]!r}") from exc
            if not low < value <= high or (name != "top_p" and value == high):
                raise EngineError(f"{name} must be in ({low}, {high}{']' if name == 'top_p' else ')'}")
            out[name] = value
        cap = self._max_new_tokens or 0
        if "max_new_tokens" in params:
            try:
                asked = int(params["max_new_tokens"])
            except (TypeError, ValueError) as exc:
                raise EngineError(
                    f"max_new_tokens must be a whole number, got {params['max_new_tokens']!r}"
                ) from exc
            if asked < 1:
                raise EngineError("max_new_tokens must be positive")
            cap = min(cap, asked) if cap else asked
        out["max_new_tokens"] = cap  # 0: as many as the model's length allows
        return out

    def _render(
        self, request: SynthesisRequest, codes: Any, ref_text: str, options: Mapping[str, float | int]
    ) -> Waveform:
        """One request: semantic codes under the request's seed, then the codec's decoder."""
        import torch

        fish = import_fish_speech()
        models = self.models
        with self._lock, torch.inference_mode(), warnings.catch_warnings():
            # generate_long copies its sampling tensors with torch.tensor(tensor): a UserWarning per call.
            warnings.filterwarnings("ignore", "To copy construct from a tensor", UserWarning)
            torch.manual_seed(request.seed)  # generate_long samples from the global RNG
            if models.device.startswith("cuda"):
                torch.cuda.manual_seed_all(request.seed)
            try:
                responses = fish.generate_long(
                    model=models.llama,
                    device=models.device,
                    decode_one_token=fish.decode_one_token_ar,
                    text=request.text,
                    prompt_text=[ref_text],
                    prompt_tokens=[codes],
                    **options,
                )
                parts = [r.codes for r in responses if r.action == "sample" and r.codes is not None]
            except ValueError as exc:  # e.g. "Prompt is too long"
                raise EngineError(f"Fish Speech could not render this chunk: {exc}") from exc
            if not parts or parts[0].shape[1] == 0:
                return np.zeros(0, dtype=np.float32)
            generated = torch.cat(parts, dim=1).to(models.device)
            audio = models.vq.decode_vq_tokens(codes=generated)
        wave = np.asarray(audio.detach().float().to("cpu").numpy(), dtype=np.float32).reshape(-1)
        return np.clip(np.nan_to_num(wave), -1.0, 1.0).astype(np.float32)


def _change_rate(wave: Waveform, rate: float) -> Waveform:
    """The job's speed and SSML prosody rate, applied to the output (the model has no rate control)."""
    from worker.engines.qwen3 import change_rate

    return change_rate(wave, rate)


def create(settings: FishSettings) -> FishEngine:
    """The engine as the registry builds it (empty and 0 settings: the engine's own defaults)."""
    return FishEngine(
        settings.model_dir or None,
        device=settings.device or None,
        max_new_tokens=settings.max_new_tokens or None,
    )
