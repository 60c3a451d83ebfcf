"""The fast loop's decoder stacks as plain tensor code over stacked weights (pure: torch only).

The talker and the code predictor are qwen-tts decoder stacks (RMS norms, grouped-query attention with
per-head query and key norms and rotary positions, a gated MLP). With a small model on a CPU a frame
costs the dispatch of a few hundred small operations, not their arithmetic; :class:`Stack` does the
modules' arithmetic with fewer of them: the query, key and value projections are one matrix product, as
are the MLP's gate and up projections (the modules' weights become views of the stacked ones: no second
copy); the query and key norms are one norm over the heads of both; the rotary embedding is
``x * cos + roll(x, half) * signed_sin(sin)``, value for value qwen-tts's ``x * cos + rotate_half(x) *
sin``; and no ``nn.Module`` is called inside a step.

Each value comes from the same elementwise operations on the same numbers as in the modules; the stacked
products gave the separate products' values bit for bit on a CPU (tests/qwen3/test_qwen3_step.py, and
the greedy tests compare the loop's frames with qwen-tts's own generate). docs/engines.md, "The fast
runner", has the detail.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn import functional

__all__ = ["Stack", "Store", "attend", "epsilon", "rms_norm", "signed_sin"]

# Writes layer i's keys and values (rows, kv_heads, q, dim) into its cache; returns what the queries attend.
Store = Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def rms_norm(hidden: torch.Tensor, weight: torch.Tensor, eps: float | torch.Tensor) -> torch.Tensor:
    """qwen-tts's ``Qwen3TTSRMSNorm`` over the last dimension, value for value. ``eps``: a number, or the
    number as a float32 tensor (:func:`epsilon`: a tensor operand skips wrapping a Python number on every
    call; the sum is the same, since the number is rounded to float32 either way); ``x * x`` is what
    ``pow(x, 2)`` computes."""
    dtype = hidden.dtype
    x = hidden if dtype == torch.float32 else hidden.to(torch.float32)
    x = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)
    return weight * (x if dtype == torch.float32 else x.to(dtype))


def epsilon(value: float, device: torch.device | str) -> torch.Tensor:
    """A norm's epsilon as :func:`rms_norm` takes it fastest."""
    return torch.tensor([value], dtype=torch.float32, device=device)


def signed_sin(sin: torch.Tensor) -> torch.Tensor:
    """``sin`` with the first half of its last dimension negated: ``roll(x, half) * signed_sin(sin)``
    equals ``rotate_half(x) * sin`` exactly (a negation is exact in floating point)."""
    half = sin.shape[-1] // 2
    return torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)


def attend(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None, scale: float
) -> torch.Tensor:
    """Grouped-query attention: ``query`` (rows, heads, q, dim) over ``keys``/``values`` (rows, kv_heads,
        S, dim); ``mask`` (rows or 1, 1, q or 1, S) or (q, S) says what each query sees (None: everything;
    a mask that is all true gives the same values: it adds zeros to the scores). One query position
        (a decode step): the heads sharing a key/value head are folded into that head's queries, so the
        fused attention kernels run without copying the cache per head (a mask with grouped heads sends them
        to the slow path). Several positions: the key/value heads are repeated, as transformers does."""
    rows, heads, positions, dim = query.shape
    kv_heads = keys.shape[1]
    groups = heads // kv_heads
    if positions == 1 and groups > 1:
        folded = query.reshape(rows, kv_heads, groups, dim)
        if mask is not None and mask.dim() == 4:
            mask = mask.reshape(mask.shape[0], 1, 1, mask.shape[-1])
        out = functional.scaled_dot_product_attention(folded, keys, values, attn_mask=mask, scale=scale)
        return out.reshape(rows, heads, 1, dim)
    if groups > 1:
        keys = keys.repeat_interleave(groups, dim=1)
        values = values.repeat_interleave(groups, dim=1)
    return functional.scaled_dot_product_attention(query, keys, values, attn_mask=mask, scale=scale)


def stack_linears(linears: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One weight (and bias) for ``linears`` (``nn.Linear`` modules over the same input), their outputs
    side by side; each module's weight and bias become views of them (no second copy in memory)."""
    weights = [linear.weight for linear in linears]
    weight = torch.cat([w.detach() for w in weights])
    biases = [linear.bias for linear in linears]
    bias = None if any(b is None for b in biases) else torch.cat([b.detach() for b in biases])
    start = 0
    for linear in linears:
        width = int(linear.weight.shape[0])
        linear.weight.data = weight[start : start + width]
        if bias is not None:
            linear.bias.data = bias[start : start + width]
        start += width
    return weight, bias


@dataclass(frozen=True)
class _Layer:
    norm_in: torch.Tensor
    eps_in: torch.Tensor  # the epsilons as float32 tensors (:func:`epsilon`)
    qkv: torch.Tensor  # (heads + 2 * kv_heads) * dim rows: queries, keys, values
    qkv_bias: torch.Tensor | None
    qk_norm: torch.Tensor  # (heads + kv_heads, dim): the query norm's weight per query head, then the key's
    qk_norm_heads: torch.Tensor  # the same as (heads + kv_heads, 1, dim), for heads-first queries and keys
    eps_qk: torch.Tensor
    o: torch.Tensor
    o_bias: torch.Tensor | None
    norm_post: torch.Tensor
    eps_post: torch.Tensor
    gate_up: torch.Tensor  # the gate projection's rows, then the up projection's
    gate_up_bias: torch.Tensor | None
    down: torch.Tensor
    down_bias: torch.Tensor | None
    act: Callable[[torch.Tensor], torch.Tensor]


def _activation(module: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """The MLP's activation as a function (SiLU, qwen-tts's, without a module call)."""
    if isinstance(module, torch.nn.SiLU):
        return functional.silu
    return module  # type: ignore[no-any-return]


def _layer(layer: Any) -> _Layer:
    attn, mlp = layer.self_attn, layer.mlp
    if attn.q_norm.variance_epsilon != attn.k_norm.variance_epsilon:
        raise ValueError("the query and key norms have different epsilons")
    heads = attn.q_proj.weight.shape[0] // attn.head_dim
    kv_heads = attn.k_proj.weight.shape[0] // attn.head_dim
    qkv, qkv_bias = stack_linears([attn.q_proj, attn.k_proj, attn.v_proj])
    gate_up, gate_up_bias = stack_linears([mlp.gate_proj, mlp.up_proj])
    dim = int(attn.head_dim)
    qk_norm = torch.cat(
        [attn.q_norm.weight.detach().expand(heads, dim), attn.k_norm.weight.detach().expand(kv_heads, dim)]
    )
    device = qkv.device
    return _Layer(
        norm_in=layer.input_layernorm.weight.detach(),
        eps_in=epsilon(layer.input_layernorm.variance_epsilon, device),
        qkv=qkv,
        qkv_bias=qkv_bias,
        qk_norm=qk_norm,
        qk_norm_heads=qk_norm.unsqueeze(1),
        eps_qk=epsilon(attn.q_norm.variance_epsilon, device),
        o=attn.o_proj.weight.detach(),
        o_bias=None if attn.o_proj.bias is None else attn.o_proj.bias.detach(),
        norm_post=layer.post_attention_layernorm.weight.detach(),
        eps_post=epsilon(layer.post_attention_layernorm.variance_epsilon, device),
        gate_up=gate_up,
        gate_up_bias=gate_up_bias,
        down=mlp.down_proj.weight.detach(),
        down_bias=None if mlp.down_proj.bias is None else mlp.down_proj.bias.detach(),
        act=_activation(mlp.act_fn),
    )


@dataclass(frozen=True)
class Stack:
    """A qwen-tts decoder stack (the talker's or the code predictor's ``model``) over stacked weights."""

    layers: tuple[_Layer, ...]
    norm: torch.Tensor
    eps: torch.Tensor
    heads: int
    kv_heads: int
    dim: int
    scaling: float

    @classmethod
    def of(cls, model: Any) -> Stack:
        """The stack of ``model`` (its weights stacked once; later calls on the same model reuse them)."""
        made = getattr(model, "_tome_stack", None)
        if isinstance(made, Stack):
            return made
        attn = model.layers[0].self_attn
        with torch.no_grad():
            stack = cls(
                layers=tuple(_layer(layer) for layer in model.layers),
                norm=model.norm.weight.detach(),
                eps=epsilon(model.norm.variance_epsilon, model.norm.weight.device),
                heads=int(model.config.num_attention_heads),
                kv_heads=int(model.config.num_key_value_heads),
                dim=int(attn.head_dim),
                scaling=float(attn.scaling),
            )
        model._tome_stack = stack
        return stack

    def forward(
        self,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        store: Store,
        mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """The layers over ``hidden`` (rows, q, D): rotary ``cos`` and ``sin`` (:func:`signed_sin`) of
        shape (rows or 1, 1, q, dim), ``store`` writing layer i's keys and values into the cache and giving
        back what the queries attend, ``mask`` saying what each query sees (None: all of it). Returns the
        final-norm hidden states. One query position (a step) keeps the heads first throughout, so that
        no transposition is needed."""
        rows, q = hidden.shape[0], hidden.shape[1]
        heads, qk_heads, dim = self.heads, self.heads + self.kv_heads, self.dim
        width = qk_heads + self.kv_heads
        for index, layer in enumerate(self.layers):
            qkv = functional.linear(rms_norm(hidden, layer.norm_in, layer.eps_in), layer.qkv, layer.qkv_bias)
            if q == 1:  # (rows, heads, 1, dim) is (rows, 1, heads, dim) in memory
                qkv = qkv.view(rows, width, 1, dim)
                qk = rms_norm(qkv[:, :qk_heads], layer.qk_norm_heads, layer.eps_qk)
                vs = qkv[:, qk_heads:]
            else:
                qkv = qkv.view(rows, q, width, dim)
                qk = rms_norm(qkv[:, :, :qk_heads], layer.qk_norm, layer.eps_qk).transpose(1, 2)
                vs = qkv[:, :, qk_heads:].transpose(1, 2)
            qk = qk * cos + qk.roll(dim // 2, -1) * sin
            keys, values = store(index, qk[:, heads:], vs)
            out = attend(qk[:, :heads], keys, values, mask, self.scaling)
            out = out.reshape(rows, 1, -1) if q == 1 else out.transpose(1, 2).reshape(rows, q, -1)
            hidden = hidden + functional.linear(out, layer.o, layer.o_bias)
            x = rms_norm(hidden, layer.norm_post, layer.eps_post)
            gate, up = functional.linear(x, layer.gate_up, layer.gate_up_bias).chunk(2, dim=-1)
            hidden = hidden + functional.linear(layer.act(gate) * up, layer.down, layer.down_bias)
        return rms_norm(hidden, self.norm, self.eps)
