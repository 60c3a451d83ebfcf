"""The Qwen3-TTS codec decoder run piece by piece with its state kept (pure: torch only).

qwen-tts's 12 Hz codec decoder (``Qwen3TTSTokenizerV2Decoder``) is causal to the sample: its convolutions
pad on the left only and have stride 1, its transposed convolutions trim what reaches past their input,
its transformer's mask is causal (with a sliding window), and everything else (quantizer lookups, the
snake activations, norms, linear layers) acts on one time step at a time. So decoding frames ``a..b``
needs only what the earlier frames left behind: the last inputs of each convolution (its left padding),
the last input frames of each transposed convolution (what overlaps into the new samples) and the
transformer's keys and values. :class:`CodecState` keeps those between calls, so a stream decodes each
frame once; its samples equal a whole decode of the same frames up to float rounding.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import nn

__all__ = ["CodecState"]


class CodecState:
    """One row's decoder state: :meth:`decode` takes the next frames' codes (1, codebooks, n) and returns
    their samples (1, 1, n * upsample), as the whole decode of every frame fed so far gives them."""

    def __init__(self, decoder: Any) -> None:
        from qwen_tts.core.tokenizer_12hz import modeling_qwen3_tts_tokenizer_v2 as codec
        from transformers.cache_utils import DynamicCache

        if not isinstance(decoder, codec.Qwen3TTSTokenizerV2Decoder):
            raise TypeError(f"not a Qwen3-TTS 12 Hz codec decoder: {type(decoder).__name__}")
        self._codec = codec
        self._decoder = decoder
        self._cache = DynamicCache(config=decoder.config)
        self._tails: dict[int, torch.Tensor] = {}  # id(module) -> its last inputs (time on the last axis)

    def copy(self) -> CodecState:
        """An independent state at the same point: the tails cloned, the transformer's cache deep-copied,
        the decoder shared (decoding with the copy leaves this state as it was)."""
        twin = CodecState.__new__(CodecState)
        twin._codec, twin._decoder = self._codec, self._decoder
        with torch.inference_mode():
            twin._cache = copy.deepcopy(self._cache)
            twin._tails = {key: tail.clone() for key, tail in self._tails.items()}
        return twin

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():  # no autograd: the codes and the kept state are inference tensors
            return self._decode(codes)

    def _decode(self, codes: torch.Tensor) -> torch.Tensor:
        decoder = self._decoder
        hidden: torch.Tensor = decoder.quantizer.decode(codes)
        hidden = self._run(decoder.pre_conv, hidden).transpose(1, 2)
        hidden = decoder.pre_transformer(
            inputs_embeds=hidden, past_key_values=self._cache, use_cache=True
        ).last_hidden_state
        hidden = hidden.permute(0, 2, 1)
        for blocks in decoder.upsample:
            hidden = self._run(blocks, hidden)
        for block in decoder.decoder:
            hidden = self._run(block, hidden)
        return hidden.clamp(min=-1, max=1)

    def _run(self, module: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
        codec = self._codec
        if isinstance(module, codec.Qwen3TTSTokenizerV2CausalConvNet):
            return self._conv(module, hidden)
        if isinstance(module, codec.Qwen3TTSTokenizerV2CausalTransConvNet):
            return self._transposed(module, hidden)
        if isinstance(module, codec.Qwen3TTSTokenizerV2ConvNeXtBlock):
            return self._convnext(module, hidden)
        if isinstance(module, codec.Qwen3TTSTokenizerV2DecoderDecoderResidualUnit):
            out = self._conv(module.conv1, module.act1(hidden))
            return self._conv(module.conv2, module.act2(out)) + hidden
        if isinstance(module, codec.Qwen3TTSTokenizerV2DecoderDecoderBlock):
            module = module.block
        if isinstance(module, nn.ModuleList):
            for child in module:
                hidden = self._run(child, hidden)
            return hidden
        if isinstance(module, codec.SnakeBeta):
            return module(hidden)  # type: ignore[no-any-return]
        raise TypeError(f"no streamed form for {type(module).__name__}")

    def _conv(self, module: Any, hidden: torch.Tensor) -> torch.Tensor:
        """A causal convolution (stride 1): the input after its last ``padding`` inputs (zeros at first)."""
        if module.stride != 1:
            raise TypeError("a strided causal convolution has no streamed form here")
        pad = int(module.padding)
        if not pad:
            return module.conv(hidden).contiguous()  # type: ignore[no-any-return]
        tail = self._tails.get(id(module))
        if tail is None:
            tail = hidden.new_zeros(*hidden.shape[:-1], pad)
        full = torch.cat([tail, hidden], dim=-1)
        self._tails[id(module)] = full[..., -pad:]
        return module.conv(full).contiguous()  # type: ignore[no-any-return]

    def _transposed(self, module: Any, hidden: torch.Tensor) -> torch.Tensor:
        """A transposed convolution trimmed to ``stride`` samples an input: run after the last inputs whose
        kernels reach into the new samples, then keep only the new inputs' samples."""
        conv = module.conv
        stride, kernel = int(conv.stride[0]), int(conv.kernel_size[0])
        context = math.ceil((kernel - stride) / stride)
        tail = self._tails.get(id(module))
        full = hidden if tail is None else torch.cat([tail, hidden], dim=-1)
        if context:
            self._tails[id(module)] = full[..., -context:]
        skip = 0 if tail is None else int(tail.shape[-1]) * stride
        out: torch.Tensor = conv(full)
        return out[..., skip : skip + hidden.shape[-1] * stride].contiguous()

    def _convnext(self, module: Any, hidden: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self._conv(module.dwconv, hidden).permute(0, 2, 1)
        out = module.pwconv2(module.act(module.pwconv1(module.norm(out))))
        scaled: torch.Tensor = module.gamma * out
        return hidden + scaled.permute(0, 2, 1)
