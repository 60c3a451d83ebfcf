"""The fast loop's step pieces against what they replace, value for value: stacked projections against
each projection, the plain-tensor decoder stacks against qwen-tts's own modules, the noise hash against the
same hash on Python integers, and the specialised token choices against the general one."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from worker.engines.qwen3 import Qwen3Engine

if TYPE_CHECKING:
    import torch

# torch and the loop's modules are imported in the tests that use them (tests/qwen3/conftest.py).


@pytest.mark.parametrize("bias", [False, True])
def test_stacked_projections_equal_each_projection_and_share_its_memory(bias: bool) -> None:
    import torch

    from worker.engines.qwen3_step import stack_linears

    torch.manual_seed(5)
    linears = [torch.nn.Linear(48, width, bias=bias) for width in (64, 16, 16)]
    inputs = [torch.randn(rows, q, 48) for rows, q in [(1, 1), (4, 1), (16, 1), (1, 7), (3, 2)]]
    with torch.no_grad():
        before = [[linear(x) for linear in linears] for x in inputs]
        weight, stacked_bias = stack_linears(linears)
        assert (stacked_bias is not None) == bias
        for x, expected in zip(inputs, before, strict=True):
            parts = torch.split(torch.nn.functional.linear(x, weight, stacked_bias), [64, 16, 16], dim=-1)
            for linear, part, alone in zip(linears, parts, expected, strict=True):
                assert torch.equal(part, alone)
                assert torch.equal(linear(x), alone)  # the module's own forward reads the same numbers
    for linear in linears:  # views of the stacked weight: no second copy
        assert linear.weight.untyped_storage().data_ptr() == weight.untyped_storage().data_ptr()


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_rms_norm_equals_the_module(dtype_name: str) -> None:
    import torch
    from qwen_tts.core.models.modeling_qwen3_tts import Qwen3TTSRMSNorm

    from worker.engines.qwen3_step import rms_norm

    dtype = getattr(torch, dtype_name)
    torch.manual_seed(6)
    module = Qwen3TTSRMSNorm(32, eps=1e-6).to(dtype)
    with torch.no_grad():
        module.weight.copy_(torch.randn(32))
        for shape in [(1, 1, 32), (16, 1, 32), (2, 5, 32)]:
            x = (torch.randn(shape) * 3).to(dtype)
            assert torch.equal(rms_norm(x, module.weight, module.variance_epsilon), module(x))


def test_the_rolled_rotation_equals_rotate_half() -> None:
    import torch
    from qwen_tts.core.models.modeling_qwen3_tts import rotate_half

    from worker.engines.qwen3_step import signed_sin

    torch.manual_seed(7)
    x, cos, sin = torch.randn(3, 4, 5, 16), torch.randn(1, 1, 5, 16), torch.randn(1, 1, 5, 16)
    expected = x * cos + rotate_half(x) * sin
    assert torch.equal(x * cos + x.roll(8, -1) * signed_sin(sin), expected)


def _module_layers(
    model: Any, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, store: Any, mask: Any
) -> Any:
    """The oracle: the decoder stack through qwen-tts's own modules, each called as it is."""
    from qwen_tts.core.models.modeling_qwen3_tts import rotate_half

    from worker.engines.qwen3_step import attend

    rows, q = hidden.shape[0], hidden.shape[1]
    for index, layer in enumerate(model.layers):
        attn = layer.self_attn
        x = layer.input_layernorm(hidden)
        shape = (rows, q, -1, attn.head_dim)
        qs = attn.q_norm(attn.q_proj(x).view(shape)).transpose(1, 2)
        ks = attn.k_norm(attn.k_proj(x).view(shape)).transpose(1, 2)
        vs = attn.v_proj(x).view(shape).transpose(1, 2)
        qs, ks = qs * cos + rotate_half(qs) * sin, ks * cos + rotate_half(ks) * sin
        keys, values = store(index, ks, vs)
        out = attend(qs, keys, values, mask, attn.scaling)
        hidden = hidden + attn.o_proj(out.transpose(1, 2).reshape(rows, q, -1))
        hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
    return model.norm(hidden)


def _prefix_store(prefix: int, rows: int, kv_heads: int, dim: int) -> Callable[..., Any]:
    """A store that attends ``prefix`` fixed random cache entries before the new ones."""
    import torch

    generator = torch.Generator().manual_seed(8)
    cached = torch.randn(2, rows, kv_heads, prefix, dim, generator=generator)

    def store(_index: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.cat([cached[0], keys], dim=2), torch.cat([cached[1], values], dim=2)

    return store


@pytest.mark.parametrize("which", ["talker", "code_predictor"])
def test_the_stacks_equal_qwen_tts_modules(engine: Qwen3Engine, which: str) -> None:
    """A step (one query over a cache, rows with their own positions) and a prefill (several causal
    queries) through :class:`Stack` and through the modules give the same hidden states bit for bit."""
    import torch

    from worker.engines.qwen3_step import Stack, signed_sin

    talker = engine.model.model.talker
    model = talker.model if which == "talker" else talker.code_predictor.model
    stack = Stack.of(model)
    assert Stack.of(model) is stack  # stacked once per model
    torch.manual_seed(9)
    hidden_size = int(model.config.hidden_size)
    with torch.inference_mode():
        for rows, q, prefix in [(1, 1, 5), (4, 1, 9), (1, 3, 0), (2, 2, 4)]:
            hidden = torch.randn(rows, q, hidden_size)
            positions = torch.arange(prefix, prefix + q).expand(rows, q)
            if which == "talker":  # a multimodal rotary embedding: speech has one position in all sections
                cos, sin = model.rotary_emb(hidden, positions.unsqueeze(0).expand(3, rows, q))
                cos, sin = cos[0], sin[0]
            else:
                cos, sin = model.rotary_emb(hidden, positions)
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
            mask = torch.ones(q, prefix + q, dtype=torch.bool).tril(prefix)
            store = _prefix_store(prefix, rows, stack.kv_heads, stack.dim)
            expected = _module_layers(model, hidden, cos, sin, store, mask)
            got = stack.forward(hidden, cos, signed_sin(sin), store, mask)
            assert torch.equal(got, expected), (rows, q, prefix)


def test_the_noise_hash_equals_the_hash_on_python_integers() -> None:
    import torch

    from worker.engines.qwen3_sampling import _mix32, gumbel_noise, mix32, row_key, vocab_salt

    edges = [0, 1, 2**16 - 1, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1, 0x7FEB352D, 0x846CA68B]
    randoms = torch.randint(0, 2**32, (2000,), generator=torch.Generator().manual_seed(10)).tolist()
    values = edges + randoms
    assert _mix32(torch.tensor(values, dtype=torch.int64)).tolist() == [mix32(v) for v in values]
    salt = vocab_salt(64, "cpu")
    assert salt.tolist() == [mix32((i + 0x9E37_79B9) & 0xFFFF_FFFF) for i in range(64)]
    seeds = [0, 7, 2**63 + 12345, 2**64 - 1]
    keys = torch.tensor([row_key(s) for s in seeds])
    counters = torch.tensor([[3, 2**40 + 1], [0, 1], [17, 18], [2**32 - 1, 2**32]])
    noise = gumbel_noise(keys, counters, salt)
    for row, seed in enumerate(seeds):
        low, high = seed & 0xFFFF_FFFF, (seed >> 32) & 0xFFFF_FFFF
        key = mix32(low ^ mix32(high))
        for draw, counter in enumerate(counters[row].tolist()):
            step = mix32(key ^ (counter & 0xFFFF_FFFF))
            hashed = [mix32(step ^ s) for s in salt.tolist()]
            uniform = (torch.tensor([h >> 9 for h in hashed]).to(torch.float32) + 0.5) * (1.0 / (1 << 23))
            assert torch.equal(noise[row, draw], -torch.log(-torch.log(uniform)))


def _params(sample: list[bool], vocab: int) -> Any:
    from worker.engines.qwen3_sampling import RowParams

    params = RowParams.allocate(len(sample), "cpu")
    for row, flag in enumerate(sample):
        params.set_row(
            row, sample=flag, temperature=0.7 + 0.1 * row, top_k=[0, 5, 50, vocab][row % 4], top_p=1.0
        )
    return params


@pytest.mark.parametrize("top_p", [False, True])
def test_the_specialised_choices_equal_the_general_one(top_p: bool) -> None:
    """No sampled row: the argmax; no greedy row: no per-row pick. Both give the general choice's tokens
    (the choice of a batch that may hold rows of either kind)."""
    import torch

    from worker.engines.qwen3_sampling import Warps, choose, gumbel_noise, row_key, vocab_salt

    vocab = 64
    torch.manual_seed(11)
    scores = torch.randn(8, vocab) * 4
    scores[:, :3] = float("-inf")  # suppressed ids
    noise = gumbel_noise(
        torch.tensor([row_key(s) for s in range(8)]), torch.arange(8), vocab_salt(vocab, "cpu")
    )
    for sample in ([False] * 8, [True] * 8):
        params = _params(sample, vocab)
        if top_p:
            params.top_p.fill_(0.8)
        top_ks = [int(k) for k in params.top_k.tolist()]
        general = Warps.of(top_ks, [float(p) for p in params.top_p.tolist()], vocab)
        special = Warps.of(top_ks, [float(p) for p in params.top_p.tolist()], vocab, sample)
        assert (general.sample, general.greedy) == (True, True)
        assert (special.sample, special.greedy) == (sample[0], not sample[0])
        expected = choose(scores, params, noise, general)
        assert torch.equal(choose(scores, params, noise if sample[0] else None, special), expected)
