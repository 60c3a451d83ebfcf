"""Build a tiny, randomly initialised Qwen3-TTS 12 Hz *Base* checkpoint on disk (seeded, deterministic).

It has the same layout as the published ``Qwen3-TTS-12Hz-*-Base`` directories, so it loads through the real
``Qwen3TTSModel.from_pretrained`` path::

    dest/
      config.json                 Qwen3TTSConfig (talker + code predictor + speaker encoder)
      generation_config.json      generation defaults read by qwen_tts
      model.safetensors           talker, code predictor, speaker encoder
      tokenizer.json, tokenizer_config.json, special_tokens_map.json   byte-level BPE text tokenizer
      speech_tokenizer/
        config.json               Qwen3TTSTokenizerV2Config (Mimi encoder + codec decoder)
        preprocessor_config.json  EncodecFeatureExtractor at 24 kHz
        model.safetensors

Constraints the tiny config satisfies (qwen_tts 0.1.1): talker vocab = codebook size + 1024 with the codec
special ids in that top range; speaker-encoder enc_dim = talker hidden size, mel_dim 128; talker and code
predictor code groups = codec quantizers; code-predictor vocab = codebook size; decoder upsampling product
1920; ``<|im_start|>assistant\\n`` encodes as exactly 3 text tokens. The audio it produces is noise, scaled
to an audible level (about 0.1 RMS) so that silence trimming and output checks see real signal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CODEBOOK_SIZE = 64
NUM_QUANTIZERS = 4
HIDDEN = 32
HEAD_DIM = 16
SEED = 1234

# Codec special ids, all in the top 1024 of the talker vocabulary (>= CODEBOOK_SIZE).
CODEC_PAD, CODEC_BOS, CODEC_EOS = 1060, 1061, 1062
CODEC_THINK, CODEC_NOTHINK, CODEC_THINK_BOS, CODEC_THINK_EOS = 1066, 1067, 1068, 1069
CODEC_LANGUAGES = {"english": 1070, "chinese": 1071, "german": 1072, "french": 1073}

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|tts_pad|>", "<|tts_bos|>", "<|tts_eos|>"]


def _byte_level_alphabet() -> list[str]:
    """GPT-2's bytes -> unicode map (the alphabet of a byte-level BPE), in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars: dict[int, str] = {}
    extra = 0
    for byte in range(256):
        if byte in printable:
            chars[byte] = chr(byte)
        else:
            chars[byte] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def _write_text_tokenizer(dest: Path) -> dict[str, int]:
    """A byte-level BPE whose merges make ``assistant`` one token; returns the special-token ids."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    alphabet = _byte_level_alphabet()
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    word = "assistant"
    merges: list[tuple[str, str]] = []
    current = word[0]
    for ch in word[1:]:
        merges.append((current, ch))
        current += ch
        vocab[current] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=False))
    # Qwen2's split pattern, then byte-level mapping (as in the real Qwen tokenizer.json).
    pattern = (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
        r"|\s*[\r\n]+|\s+(?!\S)|\s+"
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tokenizer.save(str(dest / "tokenizer.json"))
    ids = {t: tokenizer.token_to_id(t) for t in SPECIAL_TOKENS}
    added = {
        str(ids[t]): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for t in SPECIAL_TOKENS
    }
    _dump(
        dest / "tokenizer_config.json",
        {
            "tokenizer_class": "Qwen2TokenizerFast",
            "added_tokens_decoder": added,
            "additional_special_tokens": SPECIAL_TOKENS[1:],
            "bos_token": None,
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "unk_token": None,
            "clean_up_tokenization_spaces": False,
            "errors": "replace",
            "model_max_length": 32768,
            "split_special_tokens": False,
        },
    )
    _dump(
        dest / "special_tokens_map.json",
        {
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "additional_special_tokens": SPECIAL_TOKENS[1:],
        },
    )
    return ids | {"vocab_size": tokenizer.get_vocab_size()}


def _dump(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _attention(hidden: int = HIDDEN) -> dict[str, Any]:
    return {
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": HEAD_DIM,
        "max_position_embeddings": 4096,
    }


def build_tiny_checkpoint(dest: Path) -> Path:
    """Write the tiny Base checkpoint into ``dest`` (created if needed) and return ``dest``.

    Deterministic: the same seed gives the same weights, so the same bytes on disk.
    """
    import torch
    from safetensors.torch import save_file

    from worker.engines.qwen3 import import_qwen_tts

    import_qwen_tts()
    from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSConfig
    from qwen_tts.core.models.modeling_qwen3_tts import Qwen3TTSForConditionalGeneration
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Config
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "speech_tokenizer").mkdir(exist_ok=True)
    token_ids = _write_text_tokenizer(dest)

    talker = {
        **_attention(),
        "vocab_size": CODEBOOK_SIZE + 1024,
        "text_vocab_size": token_ids["vocab_size"],
        "text_hidden_size": HIDDEN,
        "num_code_groups": NUM_QUANTIZERS,
        "rope_scaling": {
            "interleaved": True,
            "mrope_section": [4, 2, 2],
            "rope_type": "default",
            "type": "default",
        },
        "codec_pad_id": CODEC_PAD,
        "codec_bos_id": CODEC_BOS,
        "codec_eos_token_id": CODEC_EOS,
        "codec_think_id": CODEC_THINK,
        "codec_nothink_id": CODEC_NOTHINK,
        "codec_think_bos_id": CODEC_THINK_BOS,
        "codec_think_eos_id": CODEC_THINK_EOS,
        "codec_language_id": CODEC_LANGUAGES,
        "spk_id": {},
        "spk_is_dialect": {},
        "code_predictor_config": {
            **_attention(),
            "vocab_size": CODEBOOK_SIZE,
            "num_code_groups": NUM_QUANTIZERS,
        },
    }
    speaker_encoder = {
        "mel_dim": 128,
        "enc_dim": HIDDEN,
        "enc_channels": [16, 16, 16, 16, 48],
        "enc_kernel_sizes": [5, 3, 3, 3, 1],
        "enc_dilations": [1, 2, 3, 4, 1],
        "enc_attention_channels": 8,
        "enc_res2net_scale": 2,
        "enc_se_channels": 8,
        "sample_rate": 24000,
    }
    config = Qwen3TTSConfig(
        talker_config=talker,
        speaker_encoder_config=speaker_encoder,
        tokenizer_type="qwen3_tts_tokenizer_12hz",
        tts_model_size="tiny",
        tts_model_type="base",
        im_start_token_id=token_ids["<|im_start|>"],
        im_end_token_id=token_ids["<|im_end|>"],
        tts_pad_token_id=token_ids["<|tts_pad|>"],
        tts_bos_token_id=token_ids["<|tts_bos|>"],
        tts_eos_token_id=token_ids["<|tts_eos|>"],
        architectures=["Qwen3TTSForConditionalGeneration"],
    )
    torch.manual_seed(SEED)
    model = Qwen3TTSForConditionalGeneration(config).eval()
    config_dict = config.to_dict()
    # The saved speaker-encoder config must hold only its own keys, or it does not load back.
    config_dict["speaker_encoder_config"] = speaker_encoder
    _dump(dest / "config.json", config_dict)
    state = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    save_file(state, str(dest / "model.safetensors"), metadata={"format": "pt"})
    _dump(
        dest / "generation_config.json",
        {
            "do_sample": True,
            "top_k": 50,
            "top_p": 1.0,
            "temperature": 0.9,
            "repetition_penalty": 1.05,
            "subtalker_dosample": True,
            "subtalker_top_k": 50,
            "subtalker_top_p": 1.0,
            "subtalker_temperature": 0.9,
            "max_new_tokens": 16,
        },
    )

    codec = Qwen3TTSTokenizerV2Config(
        encoder_config={
            "hidden_size": HIDDEN,
            "intermediate_size": 2 * HIDDEN,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "head_dim": HEAD_DIM,
            "num_filters": 4,
            "codebook_size": CODEBOOK_SIZE,
            "codebook_dim": HIDDEN,
            "num_quantizers": NUM_QUANTIZERS,
            "num_semantic_quantizers": 1,
            "sampling_rate": 24000,
            "frame_rate": 12.5,
            "upsampling_ratios": [8, 6, 5, 4],
            "sliding_window": 64,
            "upsample_groups": HIDDEN,
            "vector_quantization_hidden_dimension": HIDDEN,
            "use_cache": False,
        },
        decoder_config={
            "codebook_size": CODEBOOK_SIZE,
            "codebook_dim": HIDDEN,
            "hidden_size": HIDDEN,
            "latent_dim": HIDDEN,
            "intermediate_size": 2 * HIDDEN,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "head_dim": HEAD_DIM,
            "num_quantizers": NUM_QUANTIZERS,
            "upsample_rates": [8, 5, 4, 3],
            "upsampling_ratios": [2, 2],
            "decoder_dim": 16,
            "sliding_window": 72,
            "max_position_embeddings": 8000,
        },
        encoder_valid_num_quantizers=NUM_QUANTIZERS,
        architectures=["Qwen3TTSTokenizerV2Model"],
    )
    torch.manual_seed(SEED + 1)
    codec_model = Qwen3TTSTokenizerV2Model(codec).eval()
    generator = torch.Generator().manual_seed(SEED + 2)
    codec_state = {}
    for key, tensor in codec_model.state_dict().items():
        # Codebook embeddings start at zero (usage at one): randomise them, or every code decodes the same.
        if key.endswith("embedding_sum"):
            codec_state[key] = torch.randn(tensor.shape, generator=generator)
        else:
            codec_state[key] = tensor.detach().contiguous().clone()
    _make_audible(codec_model, codec_state, generator)
    _dump(dest / "speech_tokenizer" / "config.json", codec.to_dict())
    save_file(codec_state, str(dest / "speech_tokenizer" / "model.safetensors"), metadata={"format": "pt"})
    _dump(
        dest / "speech_tokenizer" / "preprocessor_config.json",
        {
            "feature_extractor_type": "EncodecFeatureExtractor",
            "feature_size": 1,
            "sampling_rate": 24000,
            "padding_side": "right",
            "padding_value": 0.0,
            "return_attention_mask": True,
            "chunk_length_s": None,
            "overlap": None,
        },
    )
    return dest


TARGET_RMS = 0.1


def _make_audible(model: Any, state: dict[str, Any], generator: Any) -> None:
    """Scale the decoder's last convolution so random codes decode at about ``TARGET_RMS``.

    With the default small initialisation the signal shrinks through every layer (about 1e-9 at the
    output), which is silence to the worker's trimming; the last layer is linear, so scaling its weight
    and bias scales the output exactly (before the decoder's final clamp to [-1, 1]).
    """
    import torch

    model.load_state_dict(state)
    codes = torch.randint(0, CODEBOOK_SIZE, (1, NUM_QUANTIZERS, 50), generator=generator)
    with torch.no_grad():
        rms = float(model.decoder(codes).float().pow(2).mean().sqrt())
    last = max(
        (k for k in state if k.startswith("decoder.decoder.") and k.endswith(".weight")),
        key=lambda k: int(k.split(".")[2]),
    )
    factor = TARGET_RMS / max(rms, 1e-30)
    for key in (last, last.removesuffix("weight") + "bias"):
        if key in state:
            state[key] = (state[key] * factor).contiguous()
