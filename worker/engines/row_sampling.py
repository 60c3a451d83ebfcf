"""Per-row seeded sampling for batched Hugging Face ``generate`` calls (pure: torch + transformers only).

Why: a batched ``generate(do_sample=True)`` draws every row's tokens from one global random stream, so a
chunk's audio depends on which other chunks shared its batch, and a chunk re-rendered alone (a retry, a
batch halved after out-of-memory, a redelivered task) sounds different.

How: while row generators are set (:func:`seeded_rows`), the wrapped ``generate`` decodes *greedily* over
scores that already hold the sample: Hugging Face's own warpers turn the processed logits into a
distribution, and Gumbel noise from each row's own ``torch.Generator`` is added to its log-probabilities.
``argmax(log p + Gumbel)`` is an exact sample from ``p``, and row *i* draws only from its own generator,
so its tokens depend on its seed and inputs alone. The wrappers go on model instances (:func:`install`),
never on classes; outside :func:`seeded_rows` they call the original ``generate`` unchanged.

See docs/engines.md, "The Qwen3-TTS engine (GPU)", "A fixed seed per chunk".
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import torch
from transformers import LogitsProcessor, LogitsProcessorList
from transformers.generation.logits_process import (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

__all__ = ["RowSampler", "install", "seeded_rows"]

_state = threading.local()
_MARK = "_tome_row_sampling"
_TINY = torch.finfo(torch.float32).tiny


class RowSampler(LogitsProcessor):
    """Warp the scores like sampling would, then add each row's own Gumbel noise (see module doc)."""

    def __init__(
        self,
        generators: Sequence[torch.Generator],
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
    ) -> None:
        self.generators = list(generators)
        self.warpers: list[LogitsProcessor] = []
        if temperature is not None and temperature != 1.0:
            self.warpers.append(TemperatureLogitsWarper(float(temperature)))
        if top_k is not None and top_k != 0:
            self.warpers.append(TopKLogitsWarper(top_k=int(top_k), min_tokens_to_keep=1))
        if top_p is not None and top_p < 1.0:
            self.warpers.append(TopPLogitsWarper(top_p=float(top_p), min_tokens_to_keep=1))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if scores.shape[0] != len(self.generators):
            raise ValueError(f"{scores.shape[0]} rows but {len(self.generators)} row generators")
        warped: torch.Tensor = scores
        for warper in self.warpers:
            warped = warper(input_ids, warped)
        log_probs = torch.log_softmax(warped.float(), dim=-1)
        uniform = torch.stack(
            [
                torch.rand(scores.shape[-1], generator=g, device=scores.device, dtype=torch.float32)
                for g in self.generators
            ]
        )
        gumbel = -torch.log(-torch.log(uniform.clamp(min=_TINY, max=1.0 - 1e-7)))
        return cast(torch.FloatTensor, log_probs + gumbel)  # -inf (filtered tokens) stays -inf


def _wrap(generate: Callable[..., Any]) -> Callable[..., Any]:
    def seeded_generate(*args: Any, **kwargs: Any) -> Any:
        generators: list[torch.Generator] | None = getattr(_state, "generators", None)
        if generators is None or not kwargs.get("do_sample", True):
            return generate(*args, **kwargs)
        sampler = RowSampler(
            generators, kwargs.pop("temperature", None), kwargs.pop("top_k", None), kwargs.pop("top_p", None)
        )
        processors = LogitsProcessorList([*(kwargs.pop("logits_processor", None) or []), sampler])
        kwargs["do_sample"] = False
        return generate(*args, logits_processor=processors, **kwargs)

    setattr(seeded_generate, _MARK, True)
    return seeded_generate


def install(*models: Any) -> None:
    """Wrap each model instance's ``generate`` (idempotent)."""
    for model in models:
        if not getattr(model.generate, _MARK, False):
            model.generate = _wrap(model.generate)


@contextlib.contextmanager
def seeded_rows(seeds: Sequence[int], device: torch.device | str) -> Iterator[None]:
    """Within the block, wrapped ``generate`` calls on this thread sample row *i* from ``seeds[i]``."""
    generators = [torch.Generator(device=device).manual_seed(int(s) & 0x7FFF_FFFF_FFFF_FFFF) for s in seeds]
    _state.generators = generators
    try:
        yield
    finally:
        _state.generators = None
