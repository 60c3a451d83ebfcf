"""Token choice for the fast Qwen3-TTS loop, on the device and per row (pure: torch only).

Every row of a batch carries its own sampling parameters (temperature, top-k, top-p, repetition penalty,
greedy or not) as tensors, so rows of different requests share one step. The logits go through the same
processors, in the same order and with the same arithmetic, as qwen-tts's Hugging Face ``generate``
applies them (repetition penalty over the row's own generated tokens, suppressed ids, end-of-speech held
back for the first tokens, then temperature, top-k and top-p). A sampled row then takes
``argmax(log p + Gumbel noise)``, an exact sample of ``p`` (the Gumbel-max trick); a greedy row takes the
argmax of the processed logits, as ``do_sample=False`` does.

The noise is not drawn from a generator with state: it is a hash of (the row's seed, a counter, the token
id), computed with integer tensor operations. A row's tokens therefore depend on its seed and its own
inputs only, never on its batch-mates or on the order rows were drawn in, and the whole step can be
captured as a CUDA graph (there is no generator state to advance).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["RowParams", "Warps", "choose", "gumbel_noise", "kth_index", "mix32", "row_key", "seed_halves"]

_MASK32 = 0xFFFF_FFFF
_NEG_INF = float("-inf")


def _constant(value: float, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """A number as a 0-dimensional (CPU) tensor: as an operand it gives the same values as the Python
    number, without wrapping the number into a new tensor on every call (several microseconds each on
    a CPU; a step makes dozens). Any device's tensors take it."""
    return torch.tensor(value, dtype=dtype)


_SHIFT_9, _SHIFT_15, _SHIFT_16 = _constant(9), _constant(15), _constant(16)
_MUL_1, _MUL_2, _MASK = _constant(0x7FEB352D), _constant(0x846CA68B), _constant(_MASK32)
_HALF, _UNIT = _constant(0.5, torch.float32), _constant(1.0 / (1 << 23), torch.float32)


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash with full avalanche (Wellons' lowbias32) on int64 tensors in [0, 2**32).

    A product of two numbers below 2**32 can pass 2**63: int64 multiplication wraps modulo 2**64 (two's
    complement, as torch computes it on every device), so its low 32 bits are the 32-bit product's (a
    test checks the hash against :func:`mix32`, the same hash on Python integers)."""
    x = x ^ (x >> _SHIFT_16)
    x = (x * _MUL_1) & _MASK
    x = x ^ (x >> _SHIFT_15)
    x = (x * _MUL_2) & _MASK
    return x ^ (x >> _SHIFT_16)


def mix32(x: int) -> int:
    """:func:`_mix32` on a Python integer in [0, 2**32)."""
    x ^= x >> 16
    x = (x * 0x7FEB352D) & _MASK32
    x ^= x >> 15
    x = (x * 0x846CA68B) & _MASK32
    return x ^ (x >> 16)


def seed_halves(seed: int) -> tuple[int, int]:
    """A 64-bit seed as two 32-bit halves (low, high), the form the hash takes."""
    value = int(seed) & 0xFFFF_FFFF_FFFF_FFFF
    return value & _MASK32, value >> 32


def row_key(seed: int) -> int:
    """The hash of a row's 64-bit seed that its noise starts from (computed once, when the row is loaded)."""
    low, high = seed_halves(seed)
    return mix32(low ^ mix32(high))


def gumbel_noise(key: torch.Tensor, counter: torch.Tensor, vocab_salt: torch.Tensor) -> torch.Tensor:
    """Standard Gumbel noise of shape ``counter.shape + (vocab,)``, a pure function of each row's seed
    (``key``: (rows,), :func:`row_key` of it) and counter (``counter`` is (rows,) or (rows, draws):
    several draws of a row in one call).

    ``vocab_salt`` is ``_mix32(arange(vocab))``, computed once per vocabulary (see :func:`vocab_salt`).
    Uniforms come from the top 23 bits of the hash: ``(h + 0.5) / 2**23`` needs 24 bits, so it is exact in
    float32 and lies strictly inside (0, 1) (at most ``1 - 2**-24``): the noise is always finite.
    """
    if counter.dim() == 2:
        key = key.unsqueeze(1)
    hashed = _mix32(_mix32(key ^ (counter & _MASK)).unsqueeze(-1) ^ vocab_salt)
    uniform = ((hashed >> _SHIFT_9).to(torch.float32) + _HALF) * _UNIT
    return -torch.log(-torch.log(uniform))


def vocab_salt(vocab: int, device: torch.device | str) -> torch.Tensor:
    """Per-token salt of the noise hash (int64, ``vocab`` entries)."""
    return _mix32(torch.arange(vocab, dtype=torch.int64, device=device) + 0x9E37_79B9 & _MASK32)


@dataclass
class RowParams:
    """Per-row sampling parameters as device tensors of shape (rows,)."""

    sample: torch.Tensor  # bool: sample (True) or greedy (False)
    temperature: torch.Tensor  # float32
    top_k: torch.Tensor  # int64; 0 disables
    top_p: torch.Tensor  # float32; 1.0 disables

    @classmethod
    def allocate(cls, rows: int, device: torch.device | str) -> RowParams:
        return cls(
            sample=torch.zeros(rows, dtype=torch.bool, device=device),
            temperature=torch.ones(rows, dtype=torch.float32, device=device),
            top_k=torch.zeros(rows, dtype=torch.int64, device=device),
            top_p=torch.ones(rows, dtype=torch.float32, device=device),
        )

    def set_row(self, row: int, *, sample: bool, temperature: float, top_k: int, top_p: float) -> None:
        self.sample[row] = bool(sample)
        self.temperature[row] = float(temperature) if temperature and temperature > 0 else 1.0
        self.top_k[row] = max(0, int(top_k or 0))
        self.top_p[row] = float(top_p) if top_p is not None else 1.0


@dataclass(frozen=True)
class Warps:
    """What the rows of a run ask of the token choice, known on the host when the rows are loaded: the
    largest top-k (the vocabulary's size when some row keeps it all), whether any row has a top-p below
    1, whether any row samples and whether any row is greedy (both, when not known: rows may come later).
    Steps are specialised on it (and CUDA graphs captured per value): with no sampled row the choice is an
    argmax, with no greedy row there is no per-row pick between the two."""

    top_k: int
    top_p: bool
    sample: bool = True
    greedy: bool = True

    @classmethod
    def of(
        cls, top_ks: list[int], top_ps: list[float], vocab: int, samples: list[bool] | None = None
    ) -> Warps:
        """``samples``: whether each row samples (None: rows of both kinds may come)."""
        ks = [min(k, vocab) if k > 0 else vocab for k in top_ks] or [vocab]
        top_p = any(p < 1.0 for p in top_ps)
        if samples is None:
            return cls(top_k=max(ks), top_p=top_p)
        return cls(top_k=max(ks), top_p=top_p, sample=any(samples), greedy=not all(samples))


def kth_index(params: RowParams, warps: Warps, vocab: int) -> torch.Tensor:
    """(rows, 1): where each row's k-th largest score sits among the ``warps.top_k`` largest (a function of
    the parameters alone: a caller choosing several tokens a step with the same parameters computes it
    once)."""
    k = torch.where(params.top_k > 0, params.top_k.clamp(max=vocab), torch.full_like(params.top_k, vocab))
    return (k - 1).clamp(max=warps.top_k - 1).unsqueeze(1)


def warp(
    scores: torch.Tensor, params: RowParams, warps: Warps, kth: torch.Tensor | None = None
) -> torch.Tensor:
    """Temperature, then top-k, then top-p, per row, as Hugging Face's warpers compute them (``kth``:
    :func:`kth_index`, computed here when not given)."""
    vocab = scores.shape[-1]
    scores = scores / params.temperature.unsqueeze(1)
    where = kth_index(params, warps, vocab) if kth is None else kth
    kth = torch.topk(scores, warps.top_k, dim=-1).values.gather(1, where)
    scores = scores.masked_fill(scores < kth, _NEG_INF)
    if not warps.top_p:
        return scores
    sorted_scores, sorted_index = torch.sort(scores, descending=False, dim=-1)
    cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
    remove_sorted = cumulative <= (1 - params.top_p).unsqueeze(1)
    remove_sorted[..., -1:] = False  # min_tokens_to_keep = 1
    remove = remove_sorted.scatter(1, sorted_index, remove_sorted)
    return scores.masked_fill(remove, _NEG_INF)


def choose(
    scores: torch.Tensor,
    params: RowParams,
    noise: torch.Tensor | None,
    warps: Warps,
    kth: torch.Tensor | None = None,
) -> torch.Tensor:
    """The token of each row: greedy rows the argmax of ``scores`` (already processed), sampled rows the
    argmax of the warped log-probabilities plus ``noise`` (``kth``: as :func:`warp` takes it; ``noise``
    may be None when ``warps`` says no row samples). Tokens the warpers removed stay at minus infinity:
    the noise is finite."""
    if not warps.sample:
        return torch.argmax(scores, dim=-1)
    if noise is None:
        raise ValueError("sampled rows need noise")
    sampled = torch.log_softmax(warp(scores, params, warps, kth), dim=-1) + noise
    picked = torch.where(params.sample.unsqueeze(1), sampled, scores) if warps.greedy else sampled
    return torch.argmax(picked, dim=-1)


def repetition_penalty(scores: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """Hugging Face's repetition penalty over the tokens ``seen`` (bool, rows x vocab) of each row."""
    factor = penalty.unsqueeze(1)
    penalized = torch.where(scores < 0, scores * factor, scores / factor)
    return torch.where(seen, penalized, scores)
