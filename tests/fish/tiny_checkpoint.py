"""Build a tiny, randomly initialised Fish Speech (OpenAudio S1) checkpoint on disk (seeded, deterministic).

Written through the ``fish-speech`` package's own classes, in the published S1 layout, so that it loads
through the engine's real path (``worker/engines/fish.py``)::

    dest/
      config.json            DualARModelArgs (model_type dual_ar): hidden 32, 2 layers + 1 fast layer
      model.pth              DualARTransformer state dict (torch.save; loaded with weights_only=True)
      tokenizer.tiktoken     256 single-byte tokens (every text encodes)
      special_tokens.json    the package's special tokens with 64 semantic tokens (one per code)
      codec.pth              the DAC codec of the packaged ``modded_dac_vq`` config, made small by
      codec_overrides.json   these Hydra overrides (the published checkpoints need none)

Constraints: the slow model samples its first codebook from the semantic tokens, so there are exactly
CODEBOOK_SIZE of them; ``max_seq_len`` is at least 2560 because ``generate_long`` refuses prompts longer
than ``max_seq_len - 2048``; the codec's quantizer has 1 semantic + NUM_CODEBOOKS - 1 residual codebooks
of CODEBOOK_SIZE codes; the codec's transformers take references up to 512 frames (23 s). Both
``post_module`` and ``pre_module`` are overridden: the packaged config makes them one YAML anchor, and an
override of one leaves the other at full size (a 460 MB codec file).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

HIDDEN = 32
CODEBOOK_SIZE = 64
NUM_CODEBOOKS = 4
MAX_SEQ_LEN = 2560
SEED = 4321

CODEC_OVERRIDES = [
    "encoder_dim=8",  # latent 8 * 2**4 = 128
    "decoder_dim=32",
    "encoder_transformer_layers=[0,0,0,0]",
    "decoder_transformer_layers=[0,0,0,0]",
    "quantizer.input_dim=128",
    f"quantizer.n_codebooks={NUM_CODEBOOKS - 1}",
    f"quantizer.codebook_size={CODEBOOK_SIZE}",
    f"quantizer.semantic_codebook_size={CODEBOOK_SIZE}",
    *(
        f"quantizer.{module}.{key}"
        for module in ("post_module", "pre_module")
        for key in (
            "input_dim=128",
            "config.n_layer=1",
            "config.n_head=2",
            f"config.dim={HIDDEN}",
            f"config.intermediate_size={2 * HIDDEN}",
            "config.head_dim=16",
            "config.block_size=512",  # its causal mask is saved: 4096 (packaged) is 16 MB each
        )
    ),
]


def build_tiny_checkpoint(dest: Path) -> Path:
    """Write the tiny checkpoint into ``dest`` (created) and return it."""
    import torch
    from fish_speech.models.text2semantic.llama import DualARModelArgs, DualARTransformer
    from fish_speech.tokenizer import ALL_SPECIAL_TOKENS, SEMANTIC_TOKEN_TEMPLATE, FishTokenizer

    from worker.engines.fish import build_codec

    dest.mkdir(parents=True, exist_ok=True)
    ranks = dest / "tokenizer.tiktoken"
    ranks.write_text(
        "".join(f"{base64.b64encode(bytes([b])).decode()} {b}\n" for b in range(256)), encoding="utf-8"
    )
    specials = [t for t in ALL_SPECIAL_TOKENS if not t.startswith("<|semantic:")]
    specials += [SEMANTIC_TOKEN_TEMPLATE.format(i=i) for i in range(CODEBOOK_SIZE)]
    tokenizer = FishTokenizer(str(ranks), specials)
    config = DualARModelArgs(
        vocab_size=256 + len(specials),
        n_layer=2,
        n_head=2,
        dim=HIDDEN,
        intermediate_size=2 * HIDDEN,
        head_dim=16,
        max_seq_len=MAX_SEQ_LEN,
        codebook_size=CODEBOOK_SIZE,
        num_codebooks=NUM_CODEBOOKS,
        n_fast_layer=1,
        use_gradient_checkpointing=False,
    )
    torch.manual_seed(SEED)
    model = DualARTransformer(config, tokenizer=tokenizer)
    model.save_pretrained(str(dest))  # config.json, model.pth, tokenizer.tiktoken, special_tokens.json

    (dest / "codec_overrides.json").write_text(json.dumps(CODEC_OVERRIDES, indent=1), encoding="utf-8")
    torch.manual_seed(SEED + 1)
    codec = build_codec(CODEC_OVERRIDES)
    torch.save(codec.state_dict(), dest / "codec.pth")
    return dest
