"""A tiny Whisper checkpoint for tests, built here and saved in the transformers layout the whisper
recogniser loads (random weights: it hears nonsense, but through the real loading and decoding path).
Nothing is downloaded: the tokenizer is a byte-level BPE with no merges, written from scratch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SPECIALS = ("<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>")


def tiny_whisper(folder: Path, seed: int = 0) -> Path:
    """Write a tiny random Whisper model (safetensors), its feature extractor and tokenizer to ``folder``."""
    import torch
    import transformers
    from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode

    hf: Any = transformers  # untyped constructors

    folder.mkdir(parents=True, exist_ok=True)
    vocab = {char: index for index, char in enumerate(bytes_to_unicode().values())}
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    end = SPECIALS[0]
    tokenizer = hf.WhisperTokenizer(
        str(folder / "vocab.json"),
        str(folder / "merges.txt"),
        unk_token=end,
        bos_token=end,
        eos_token=end,
        pad_token=end,
    )
    tokenizer.add_special_tokens({"additional_special_tokens": list(SPECIALS[1:])})
    hf.WhisperProcessor(hf.WhisperFeatureExtractor(feature_size=80), tokenizer).save_pretrained(folder)
    ids = tokenizer.convert_tokens_to_ids(list(SPECIALS))
    config = hf.WhisperConfig(
        vocab_size=len(tokenizer),
        num_mel_bins=80,
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_source_positions=1500,  # 30 s of features after the encoder's stride-2 convolution
        max_target_positions=64,
        pad_token_id=ids[0],
        bos_token_id=ids[0],
        eos_token_id=ids[0],
        decoder_start_token_id=ids[1],
        begin_suppress_tokens=None,
        suppress_tokens=None,
    )
    torch.manual_seed(seed)
    hf.WhisperForConditionalGeneration(config).save_pretrained(folder, safe_serialization=True)
    return folder
