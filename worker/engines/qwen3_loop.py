"""Tome's own generation loop for the Qwen3-TTS Base talker and code predictor (pure: torch only).

qwen-tts renders through a Hugging Face ``generate`` of the talker that runs a nested ``generate`` of the
code predictor for every frame: hundreds of small calls per frame, so a GPU waits for Python. This loop
keeps the model's own modules and weights and replaces only the control around them: static key/value
caches for all rows (``slots``), one step function per frame for all rows with no host synchronisation
inside (a CUDA graph per shape on CUDA, so a frame is one launch), and continuous batching (a row that
ends leaves its slot at once and the next waiting request is prefilled into it).

A request's prompt is built by qwen-tts's own ``generate`` up to where it would call the talker's
``generate`` (:func:`capture_prompt`), so prompts cannot drift from the package's. With greedy decoding
the loop yields exactly qwen-tts's codec frames on a CPU in float32; with sampling, each row's tokens are
a pure function of its seed (worker.engines.qwen3_sampling).

See docs/engines.md, "The fast runner" (caches, the step, sampling and batching in detail).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Generator, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import torch
from torch.nn import functional

from worker.engines.qwen3_sampling import (
    RowParams,
    Warps,
    choose,
    gumbel_noise,
    kth_index,
    repetition_penalty,
    row_key,
    vocab_salt,
)
from worker.engines.qwen3_step import Stack, signed_sin

if TYPE_CHECKING:
    from worker.engines.qwen3_refill import FeedLimits

__all__ = ["FrameSink", "LoopRow", "TalkerLoop", "capture_prompt"]

CACHE_BUCKET = 256  # cache lengths are rounded up to a multiple of this (one CUDA graph per length)
_CAPTURE_LOCK = threading.Lock()

# Called after each step with (request index, the row's new frames (n, codebooks) on the device).
FrameSink = Callable[[int, torch.Tensor], None]


@dataclass
class LoopRow:
    """One request as the loop takes it: the prompt qwen-tts built and the sampling settings it would use."""

    prefill: torch.Tensor  # (L, D) talker input embeddings of the prompt
    trailing: torch.Tensor  # (T, D) text embeddings added to frames 0..T-1 (then the pad embedding)
    seed: int
    max_new_tokens: int
    sample: bool = True
    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05
    sub_sample: bool = True
    sub_temperature: float = 0.9
    sub_top_k: int = 50
    sub_top_p: float = 1.0
    min_new_tokens: int = 2
    pad_embed: torch.Tensor | None = None  # the text pad embedding as qwen-tts's prompt computed it


class _Captured(Exception):
    def __init__(self, kwargs: dict[str, Any]) -> None:
        super().__init__("talker prompt captured")
        self.kwargs = kwargs


_capture_state = threading.local()


def _capturing_generate(original: Callable[..., Any]) -> Callable[..., Any]:
    def generate(*args: Any, **kwargs: Any) -> Any:
        if getattr(_capture_state, "active", False):
            raise _Captured(kwargs)
        return original(*args, **kwargs)

    generate._tome_capture = True  # type: ignore[attr-defined]
    return generate


def capture_prompt(model: Any, **generate_kwargs: Any) -> dict[str, Any]:
    """The keyword arguments qwen-tts's ``Qwen3TTSForConditionalGeneration.generate`` hands to the
    talker's ``generate`` (``inputs_embeds``, ``attention_mask``, ``trailing_text_hidden``,
    ``tts_pad_embed`` and the sampling settings), without generating anything."""
    talker = model.talker
    if not getattr(talker.generate, "_tome_capture", False):
        talker.generate = _capturing_generate(talker.generate)
    _capture_state.active = True
    try:
        model.generate(**generate_kwargs)
    except _Captured as captured:
        return captured.kwargs
    finally:
        _capture_state.active = False
    raise RuntimeError("qwen-tts generate returned without calling the talker")


def row_from_capture(captured: Mapping[str, Any], seed: int) -> LoopRow:
    """A :class:`LoopRow` from :func:`capture_prompt`'s result for one request (no padding)."""
    embeds = captured["inputs_embeds"]
    if embeds.shape[0] != 1:
        raise ValueError("capture one request at a time")
    return LoopRow(
        prefill=embeds[0],
        trailing=captured["trailing_text_hidden"][0],
        seed=int(seed),
        max_new_tokens=int(captured["max_new_tokens"]),
        sample=bool(captured.get("do_sample", True)),
        temperature=float(captured.get("temperature") or 1.0),
        top_k=int(captured.get("top_k") or 0),
        top_p=_number(captured, "top_p", 1.0),
        repetition_penalty=float(captured.get("repetition_penalty") or 1.0),
        sub_sample=bool(captured.get("subtalker_dosample", True)),
        sub_temperature=float(captured.get("subtalker_temperature") or 1.0),
        sub_top_k=int(captured.get("subtalker_top_k") or 0),
        sub_top_p=_number(captured, "subtalker_top_p", 1.0),
        min_new_tokens=int(captured.get("min_new_tokens") or 0),
        pad_embed=captured.get("tts_pad_embed"),
    )


def _number(captured: Mapping[str, Any], name: str, default: float) -> float:
    value = captured.get(name)
    return default if value is None else float(value)


def _round_up(value: int, step: int) -> int:
    return max(step, -(-value // step) * step)


@dataclass
class _State:
    """Every buffer a step reads or writes, allocated once per (slots, cache length)."""

    slots: int
    length: int
    k: list[torch.Tensor]
    v: list[torch.Tensor]
    cp_k: list[torch.Tensor]
    cp_v: list[torch.Tensor]
    trailing: torch.Tensor  # (slots, T + 1, D): each row's text embeddings, then the pad embedding
    slot_index: torch.Tensor  # (slots,) 0..slots-1
    position: torch.Tensor  # (slots,) next cache index of the row
    generated: torch.Tensor  # (slots,) tokens the row has generated
    frame: torch.Tensor  # (slots,) generated - 1, at least 0: the frame a step records
    cap: torch.Tensor  # (slots,) max_new_tokens
    min_new: torch.Tensor  # (slots,)
    active: torch.Tensor  # (slots,) bool
    last_token: torch.Tensor  # (slots,)
    last_hidden: torch.Tensor  # (slots, D)
    seen: torch.Tensor  # (slots, vocab) bool
    penalty: torch.Tensor  # (slots,) float32
    seed_key: torch.Tensor  # (slots,) the hash of each row's seed (worker.engines.qwen3_sampling.row_key)
    talker_params: RowParams
    sub_params: RowParams
    talker_kth: torch.Tensor  # (slots, 1) kth_index of the parameters under `warps` (set with the rows)
    sub_kth: torch.Tensor
    frames: torch.Tensor  # (slots, cap_max, codebooks) int64
    done: torch.Tensor  # (slots,) bool: ended at this step
    warps: tuple[Warps, Warps] = (Warps(0, False), Warps(0, False))  # talker, code predictor
    graphs: dict[tuple[int, tuple[Warps, Warps]], Any] = field(default_factory=dict)
    # Views of the caches a step writes and reads, cut once: the talker's by cache length, (keys, values)
    # per layer; the code predictor's by (start, end) of a call, (written keys, values, read keys,
    # values) per layer.
    talker_views: dict[int, tuple[list[torch.Tensor], list[torch.Tensor]]] = field(default_factory=dict)
    cp_views: dict[tuple[int, int], list[tuple[torch.Tensor, ...]]] = field(default_factory=dict)
    pool: Any = None  # one CUDA graph memory pool for all of them (they replay one at a time)


class TalkerLoop:
    """The loop over one loaded qwen-tts model (see the module docstring). Not thread-safe: the engine
    calls it under its generate lock."""

    def __init__(
        self,
        model: Any,
        *,
        use_graphs: bool | None = None,
        compile_steps: bool = False,
        compile_backend: str = "inductor",
    ) -> None:
        """``model``: a ``Qwen3TTSForConditionalGeneration`` (qwen-tts's ``Qwen3TTSModel.model``);
        ``compile_steps``: where no CUDA graph is captured (a CPU), run the step through ``torch.compile``
        with ``compile_backend`` (inductor fuses its few hundred small operations into a few kernels; each
        new number of rows in flight or cache length compiles once, minutes on a small CPU, so it pays
        for long-lived workers)."""
        self.model = model
        self.talker = model.talker
        self.cp = self.talker.code_predictor
        config = model.config.talker_config
        self.device = self.talker.device
        self.dtype = self.talker.dtype
        self.vocab = int(config.vocab_size)
        self.codebooks = int(config.num_code_groups)
        self.eos = int(config.codec_eos_token_id)
        self.sliding_window = getattr(config, "sliding_window", None)  # as the talker picks its mask
        self.hidden = int(config.hidden_size)
        # Suppressed ids: the top 1,024 of the vocabulary (codec control ids) except end of speech.
        suppress = torch.zeros(self.vocab, dtype=torch.bool, device=self.device)
        suppress[self.vocab - 1024 :] = True
        suppress[self.eos] = False
        self.suppress = suppress
        self.eos_mask = torch.zeros_like(suppress)
        self.eos_mask[self.eos] = True
        with torch.inference_mode():
            pad_id = torch.tensor([[model.config.tts_pad_token_id]], device=self.device)
            pad = self.talker.text_projection(self.talker.get_text_embeddings()(pad_id))
        self.pad_embed = pad.reshape(-1).clone()  # read by captured graphs: never replaced
        self.talker_salt = vocab_salt(self.vocab, self.device)
        self.cp_vocab = int(self.cp.config.vocab_size)
        self.cp_salt = vocab_salt(self.cp_vocab, self.device)
        # The decoder stacks over stacked weights, and the plain weights of the embeddings and heads a step
        # uses (worker.engines.qwen3_step: no module call inside a step).
        self._talker_stack = Stack.of(self.talker.model)
        self._cp_stack = Stack.of(self.cp.model)
        self._talker_table = self.talker.get_input_embeddings().weight.detach()
        self._codec_head = self.talker.codec_head.weight.detach()
        self._cp_tables = [table.weight.detach() for table in self.cp.model.get_input_embeddings()]
        self._cp_heads = [head.weight.detach() for head in self.cp.lm_head]
        project = self.cp.small_to_mtp_projection
        self._project: tuple[torch.Tensor, torch.Tensor | None] | None = (
            (project.weight.detach(), None if project.bias is None else project.bias.detach())
            if isinstance(project, torch.nn.Linear)
            else None
        )
        self._rotary_tables(int(config.max_position_embeddings))
        # Numbers a step computes with, as tensors (a Python number is wrapped anew on every operation).
        self._one = torch.tensor(1, device=self.device)
        self._codebooks = torch.tensor(self.codebooks, device=self.device)
        self._groups = torch.arange(1, self.codebooks, device=self.device)  # the residual codebooks
        self.use_graphs = torch.device(self.device).type == "cuda" if use_graphs is None else bool(use_graphs)
        self._states: dict[int, _State] = {}  # by slots (a power of two), each with its graphs
        self.compile_steps = bool(compile_steps)
        self.compile_backend = compile_backend
        self.compiled_step: Callable[[_State, int], None] | None = None  # made by the first compiled step
        # Rows in flight at most in the last run (benchmarks, tests).
        self.last_slots = 0
        self.last_steps = 0  # the frames the last run_refilling ran

    def _rotary_tables(self, positions: int) -> None:
        """The rotary tables (sin with its first half negated, worker.engines.qwen3_step.signed_sin) and
        the code predictor's mask slices, computed once.

        The talker's multimodal rotary embedding gives the three sections (time, height, width) the same
        position for speech, so the cos and sin it assembles are those of the first section, value for
        value: one table lookup a step replaces the rotary module and the assembly. The code predictor's
        positions are the same every frame (0..codebooks-1); its pass runs at positions 0-1 (the talker's
        hidden state and the first code), then one position per code: each call's rotary slices and mask
        rows are cut here once."""
        with torch.inference_mode():
            every = torch.arange(positions, device=self.device)
            probe = torch.zeros(1, dtype=self.dtype, device=self.device)
            cos, sin = self.talker.model.rotary_emb(probe, every.view(1, 1, -1).expand(3, 1, -1))
            self._talker_cos, self._talker_sin = cos[0, 0], signed_sin(sin[0, 0])
            self._cache_index = every  # cache entry numbers, for the talker's mask
            where = torch.arange(self.codebooks, device=self.device).unsqueeze(0)
            cp_cos, cp_sin = self.cp.model.rotary_emb(probe, where)
            cp_sin = signed_sin(cp_sin)
        causal = torch.ones(self.codebooks, self.codebooks, dtype=torch.bool, device=self.device).tril()
        self._cp_at: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = {
            (start, start + width): (
                cp_cos[:, start : start + width].unsqueeze(1),
                cp_sin[:, start : start + width].unsqueeze(1),
                causal[start : start + width, : start + width] if width > 1 else None,  # 1: sees all
            )
            for start, width in [(0, 2), *((p, 1) for p in range(2, self.codebooks))]
        }

    # -- buffers ---------------------------------------------------------------------------------------

    def _kv_shape(self, module: Any, slots: int, length: int) -> tuple[int, int, int, int]:
        attn = module.layers[0].self_attn
        heads = int(module.config.num_key_value_heads)
        return (slots, heads, length, int(attn.head_dim))

    def _allocate(self, slots: int, length: int, trailing: int, cap: int) -> _State:
        dev, dt = self.device, self.dtype
        shape = self._kv_shape(self.talker.model, slots, length)
        cp_shape = self._kv_shape(self.cp.model, slots, self.codebooks)
        layers, cp_layers = len(self.talker.model.layers), len(self.cp.model.layers)

        def zeros(*size: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
            return torch.zeros(*size, dtype=dtype, device=dev)

        state = _State(
            slots=slots,
            length=length,
            k=[torch.zeros(shape, dtype=dt, device=dev) for _ in range(layers)],
            v=[torch.zeros(shape, dtype=dt, device=dev) for _ in range(layers)],
            cp_k=[torch.zeros(cp_shape, dtype=dt, device=dev) for _ in range(cp_layers)],
            cp_v=[torch.zeros(cp_shape, dtype=dt, device=dev) for _ in range(cp_layers)],
            trailing=zeros(slots, trailing + 1, self.hidden, dtype=dt),
            slot_index=torch.arange(slots, device=dev),
            position=zeros(slots),
            generated=zeros(slots),
            frame=zeros(slots),
            cap=zeros(slots),
            min_new=zeros(slots),
            active=zeros(slots, dtype=torch.bool),
            last_token=zeros(slots),
            last_hidden=zeros(slots, self.hidden, dtype=dt),
            seen=zeros(slots, self.vocab, dtype=torch.bool),
            penalty=torch.ones(slots, dtype=torch.float32, device=dev),
            seed_key=zeros(slots),
            talker_params=RowParams.allocate(slots, dev),
            sub_params=RowParams.allocate(slots, dev),
            talker_kth=zeros(slots, 1),
            sub_kth=zeros(slots, 1),
            frames=zeros(slots, max(1, cap), self.codebooks),
            done=zeros(slots, dtype=torch.bool),
        )
        return state

    def _state_for(self, slots: int, length: int, trailing: int, cap: int) -> _State:
        """The buffers of ``slots`` rows (a power of two: a handful of shapes, each captured once),
        reallocated only when a run needs longer caches, texts or frame caps than they hold."""
        state = self._states.get(slots)
        if (
            state is None
            or state.length < length
            or state.trailing.shape[1] <= trailing
            or state.frames.shape[1] < cap
        ):
            self._states.pop(slots, None)
            del state
            if torch.device(self.device).type == "cuda":
                torch.cuda.empty_cache()
            state = self._allocate(slots, _round_up(length, CACHE_BUCKET), trailing, cap)
            self._states[slots] = state
        state.active.zero_()  # nothing of an earlier run (one that was abandoned too) steps again
        return state

    # -- the model's pieces ----------------------------------------------------------------------------

    def _talker_forward(
        self,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        k: list[torch.Tensor],
        v: list[torch.Tensor],
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """Talker layers over ``hidden`` (rows, q, D) at ``positions`` (rows, q); keys and values are
        written into ``k``/``v`` (rows, heads, S, dim) at those positions; ``mask`` (rows, 1, q, S) says
        which cache entries each query sees. Returns the final-norm hidden states."""
        rows, q = positions.shape
        cos, sin = self._talker_cos[positions].unsqueeze(1), self._talker_sin[positions].unsqueeze(1)
        if q == 1:  # a step: one scatter per cache, its index made once for all layers
            stack = self._talker_stack
            where = positions.view(rows, 1, 1, 1).expand(rows, stack.kv_heads, 1, stack.dim)

            def store(
                index: int, keys: torch.Tensor, values: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor]:
                return k[index].scatter_(2, where, keys), v[index].scatter_(2, where, values)

        else:
            row_index = torch.arange(rows, device=positions.device).unsqueeze(1).expand(rows, q)

            def store(
                index: int, keys: torch.Tensor, values: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor]:
                k[index][row_index, :, positions] = keys.transpose(1, 2)
                v[index][row_index, :, positions] = values.transpose(1, 2)
                return k[index], v[index]

        return self._talker_stack.forward(hidden, cos, sin, store, mask)

    def _cp_forward(self, hidden: torch.Tensor, start: int, state: _State) -> torch.Tensor:
        """Code-predictor layers over ``hidden`` (rows, q, D_cp) at positions start..start+q-1 of the
        per-frame cache."""
        length = start + hidden.shape[1]
        cos, sin, mask = self._cp_at[(start, length)]
        views = state.cp_views.get((start, length))
        if views is None:
            views = [
                (k[:, :, start:length], v[:, :, start:length], k[:, :, :length], v[:, :, :length])
                for k, v in zip(state.cp_k, state.cp_v, strict=True)
            ]
            state.cp_views[(start, length)] = views

        def store(index: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            write_k, write_v, read_k, read_v = views[index]
            write_k.copy_(keys)
            write_v.copy_(values)
            return read_k, read_v

        return self._cp_stack.forward(hidden, cos, sin, store, mask)

    def _talker_mask(self, positions: torch.Tensor, length: int) -> torch.Tensor:
        """(rows, 1, q, length): cache entry j is seen by the query at position p when j <= p (and within
        the sliding window, where the talker has one)."""
        index = self._cache_index[:length].view(1, 1, 1, length)
        query = positions.view(positions.shape[0], 1, positions.shape[1], 1)
        seen = index <= query
        if self.sliding_window is not None:
            seen = seen & (index > query - int(self.sliding_window))
        return seen

    def _talker_choice(self, state: _State, logits: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
        """The next first-codebook token of ``rows`` (None: every slot), after the row has generated
        ``state.generated`` tokens."""

        def pick(tensor: torch.Tensor) -> torch.Tensor:
            return tensor if rows is None else tensor[rows]

        generated = pick(state.generated)
        scores = logits.float()
        scores = repetition_penalty(scores, pick(state.seen), pick(state.penalty))
        too_early = (generated < pick(state.min_new)).unsqueeze(1)
        scores = scores.masked_fill(self.suppress | (too_early & self.eos_mask), float("-inf"))
        warps = state.warps[0]
        params = state.talker_params if rows is None else _params_of(state.talker_params, rows)
        if not warps.sample:
            return choose(scores, params, None, warps)
        counter = (generated + self._one) * self._codebooks
        noise = gumbel_noise(pick(state.seed_key), counter, self.talker_salt)
        return choose(scores, params, noise, warps, pick(state.talker_kth))

    # -- one frame -------------------------------------------------------------------------------------

    def _step(self, state: _State, length: int) -> None:
        """One frame for every slot (inactive slots compute and change nothing that is read later)."""
        active, slot_index = state.active, state.slot_index
        keep = active.unsqueeze(1)
        first = functional.embedding(state.last_token, self._talker_table)  # (slots, D)
        # The frame of the token fed in, (slots, codebooks), and each code's embedding.
        codes, embedded = self._code_pass(state, first)
        # Recorded as frame number `generated` (1-based) of the row.
        previous = state.frames[slot_index, state.frame]
        state.frames[slot_index, state.frame] = torch.where(keep, codes, previous)
        # The next input: the sum of the frame's codebook embeddings and this step's text embedding (the
        # row's text, then the pad embedding, which follows the text in `trailing`).
        embeds = torch.stack([first, *embedded], dim=1).sum(1)
        text = state.trailing[slot_index, state.frame.clamp(max=state.trailing.shape[1] - 1)]
        embeds = (embeds + text).unsqueeze(1)
        positions = state.position.clamp(max=length - 1).unsqueeze(1)
        mask = self._talker_mask(positions, length)
        views = state.talker_views.get(length)
        if views is None:
            views = ([c[:, :, :length] for c in state.k], [c[:, :, :length] for c in state.v])
            state.talker_views[length] = views
        hidden = self._talker_forward(embeds, positions, *views, mask)[:, -1]
        logits = functional.linear(hidden, self._codec_head)
        nxt = self._talker_choice(state, logits, None)
        # Commit, for active rows only.
        state.last_hidden.copy_(torch.where(keep, hidden, state.last_hidden))
        state.last_token.copy_(torch.where(active, nxt, state.last_token))
        grow = active.to(torch.int64)
        state.position.add_(grow)
        state.generated.add_(grow)
        state.frame.add_(grow)
        state.seen[slot_index, nxt] |= active
        ended = active & ((nxt == self.eos) | (state.generated >= state.cap))
        state.done.copy_(ended)
        state.active.copy_(active & ~ended)

    def _projected(self, hidden: torch.Tensor) -> torch.Tensor:
        """The code predictor's input projection (qwen-tts's ``small_to_mtp_projection``)."""
        if self._project is None:
            return hidden
        return functional.linear(hidden, *self._project)

    def _code_pass(self, state: _State, first: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Every slot's current frame (rows, codebooks): its first code, then the 15 residual codes, and
        each residual code's embedding (rows, D): the next pass's input and a part of the frame's talker
        input."""
        embedded: list[torch.Tensor] = []
        hidden = self._projected(torch.stack([state.last_hidden, first], dim=1))
        codes = [state.last_token]
        warps = state.warps[1]
        noises: torch.Tensor | None = None
        if warps.sample:
            counters = state.generated.unsqueeze(1) * self._codebooks + self._groups
            noises = gumbel_noise(state.seed_key, counters, self.cp_salt)
        start = 0
        for group in range(self.codebooks - 1):
            out = self._cp_forward(hidden, start, state)
            start += hidden.shape[1]
            logits = functional.linear(out[:, -1], self._cp_heads[group]).float()
            noise = None if noises is None else noises[:, group]
            code = choose(logits, state.sub_params, noise, warps, state.sub_kth)
            codes.append(code)
            embedded.append(functional.embedding(code, self._cp_tables[group]))
            if group + 1 < self.codebooks - 1:
                hidden = self._projected(embedded[-1].unsqueeze(1))
        return torch.stack(codes, dim=1), embedded

    def _run_step(self, state: _State, length: int) -> None:
        if not self.use_graphs:
            if not self.compile_steps:
                self._step(state, length)
                return
            if self.compiled_step is None:
                self.compiled_step = torch.compile(self._step, dynamic=False, backend=self.compile_backend)
            self.compiled_step(state, length)
            return
        key = (length, state.warps)
        graph = state.graphs.get(key)
        if graph is None:
            graph = self._capture(state, length)
            state.graphs[key] = graph
        graph.replay()

    def _capture(self, state: _State, length: int) -> Any:
        """A CUDA graph of one step at cache length ``length``. Captured while no slot is active after
        warm-up runs on a side stream; steps change nothing an inactive slot later reads."""
        active = state.active.clone()
        state.active.zero_()
        try:
            with _CAPTURE_LOCK:
                stream = torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]
                stream.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(stream):
                    for _ in range(2):
                        self._step(state, length)
                torch.cuda.current_stream(self.device).wait_stream(stream)
                if state.pool is None:
                    state.pool = torch.cuda.graph_pool_handle()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=state.pool, capture_error_mode="thread_local"):
                    self._step(state, length)
        finally:
            state.active.copy_(active)
        return graph

    # -- rows in and out -------------------------------------------------------------------------------

    def _prefill(self, state: _State, slot: int, row: LoopRow) -> bool:
        """Load ``row`` into ``slot``: its prompt through the talker (eagerly), its first token chosen;
        False when that token already ends the row."""
        state.active[slot] = False
        length = row.prefill.shape[0]
        sel = slice(slot, slot + 1)
        positions = torch.arange(length, device=self.device).unsqueeze(0)
        mask = self._talker_mask(positions, length)
        k = [cache[sel, :, :length] for cache in state.k]
        v = [cache[sel, :, :length] for cache in state.v]
        embeds = row.prefill.to(device=self.device, dtype=self.dtype).unsqueeze(0)
        hidden = self._talker_forward(embeds, positions, k, v, mask)[:, -1]
        trailing = row.trailing.to(device=self.device, dtype=self.dtype)
        state.trailing[slot] = self.pad_embed  # after the text: the pad embedding (see _drive)
        state.trailing[slot, : trailing.shape[0]] = trailing
        state.position[slot] = length
        state.generated[slot] = 0
        state.cap[slot] = row.max_new_tokens
        state.min_new[slot] = row.min_new_tokens
        state.seen[slot] = False
        state.penalty[slot] = row.repetition_penalty
        state.seed_key[slot] = row_key(row.seed)
        state.talker_params.set_row(
            slot, sample=row.sample, temperature=row.temperature, top_k=row.top_k, top_p=row.top_p
        )
        state.sub_params.set_row(
            slot,
            sample=row.sub_sample,
            temperature=row.sub_temperature,
            top_k=row.sub_top_k,
            top_p=row.sub_top_p,
        )
        state.talker_kth.copy_(kth_index(state.talker_params, state.warps[0], self.vocab))
        state.sub_kth.copy_(kth_index(state.sub_params, state.warps[1], self.cp_vocab))
        logits = self.talker.codec_head(hidden)
        rows = torch.tensor([slot], device=self.device)
        token = self._talker_choice(state, logits, rows)[0]
        state.last_hidden[slot] = hidden[0]
        state.last_token[slot] = token
        state.generated[slot] = 1
        state.frame[slot] = 0
        state.seen[slot, token] = True
        state.frames[slot].zero_()
        state.done[slot] = False
        if row.min_new_tokens < 1 and int(token) == self.eos:
            return False
        state.active[slot] = True
        return True

    def run(
        self, rows: Sequence[LoopRow], slots: int, *, sink: FrameSink | None = None
    ) -> list[torch.Tensor]:
        """Generate every row with at most ``slots`` in flight; returns each row's codec frames
        (frames, codebooks) on the device, in ``rows`` order. ``sink`` sees frames as they are made."""
        steps = self.run_iter(rows, slots, sink=sink)
        while True:
            try:
                next(steps)
            except StopIteration as finished:
                return cast(list[torch.Tensor], finished.value)

    def run_iter(
        self, rows: Sequence[LoopRow], slots: int, *, sink: FrameSink | None = None
    ) -> Generator[None, None, list[torch.Tensor]]:
        """:meth:`run`, yielding after every frame (after ``sink`` has seen it), so that a caller can
        hand out audio while the rows are still generating; the generator's value is :meth:`run`'s."""
        if not rows:
            return []
        longest = max(r.prefill.shape[0] + r.max_new_tokens for r in rows)
        trailing = max(r.trailing.shape[0] for r in rows)
        cap = max(r.max_new_tokens for r in rows)
        state = self._begin(min(int(slots), len(rows)), int(slots), longest, trailing, cap)
        state.warps = (
            Warps.of(
                [r.top_k for r in rows],
                [r.top_p if r.sample else 1.0 for r in rows],
                self.vocab,
                [r.sample for r in rows],
            ),
            Warps.of(
                [r.sub_top_k for r in rows],
                [r.sub_top_p if r.sub_sample else 1.0 for r in rows],
                self.cp_vocab,
                [r.sub_sample for r in rows],
            ),
        )
        results: list[torch.Tensor | None] = [None] * len(rows)
        waiting = deque(range(len(rows)))

        def take(_wait: bool) -> tuple[Any, LoopRow] | None:
            if not waiting:
                return None
            index = waiting.popleft()
            return index, rows[index]

        def finish(index: Any, frames: torch.Tensor) -> None:
            results[index] = frames

        yield from self._drive(state, take, finish, sink)
        empty = torch.zeros(0, self.codebooks, dtype=torch.int64, device=self.device)
        return [r if r is not None else empty for r in results]

    def run_refilling(
        self,
        rows: Sequence[tuple[Hashable, LoopRow]],
        slots: int,
        limits: FeedLimits,
        refill: Callable[[int], Sequence[tuple[Hashable, LoopRow]]],
        tail: int = 0,
    ) -> dict[Hashable, torch.Tensor]:
        """Generate the keyed ``rows`` with ``slots`` in flight, taking more rows from ``refill`` as slots
        free; returns every row's frames (frames, codebooks) by key.

        Before every frame ``refill`` is told how many rows the loop would take now: the free slots not
        claimed by a waiting row of ``rows``; once every row of ``rows`` has ended, at most ``tail`` rows
        more in all (the tail: refilled rows keep the slots busy while the caller has work), then 0 (the
        loop only finishes the rows it took; the caller may use the call to keep its own bookkeeping). It
        returns at most that many rows, with keys of its own, each within ``limits``, which size the
        buffers before the first row. Called in the caller's thread, so it needs no locking. The warpers
        are sized for the whole vocabulary: a row's tokens do not depend on the rows beside it.
        ``last_steps``: the frames (steps) the call ran."""
        for key, row in rows:
            if not limits.admits(row):
                raise ValueError(f"row {key!r} is beyond the limits {limits}")
        state = self._begin(int(slots), int(slots), limits.length, limits.trailing, limits.cap)
        state.warps = (Warps.of([0], [0.5], self.vocab), Warps.of([0], [0.5], self.cp_vocab))
        waiting: deque[tuple[Hashable, LoopRow]] = deque(rows)
        own = {key for key, _ in rows}
        results: dict[Hashable, torch.Tensor] = {}

        def take(_wait: bool) -> tuple[Any, LoopRow] | None:
            return waiting.popleft() if waiting else None

        def finish(key: Any, frames: torch.Tensor) -> None:
            results[key] = frames

        left = max(0, int(tail))  # rows the tail may still take

        def ask(free: int) -> None:
            nonlocal left
            ending = all(k in results for k in own)  # the own rows have ended: the tail
            wanted = max(0, free - len(waiting))
            if ending:
                wanted = min(wanted, left)
            more = list(refill(wanted))
            if len(more) > wanted:
                raise ValueError(f"refill gave {len(more)} rows where {wanted} were asked for")
            if ending:
                left -= len(more)
            for key, row in more:
                if not limits.admits(row) or key in results or key in own:
                    raise ValueError(f"row {key!r} is beyond the limits {limits} or its key is taken")
                waiting.append((key, row))

        self.last_steps = sum(1 for _ in self._drive(state, take, finish, None, ask))
        return results

    def _begin(self, wanted: int, allowed: int, longest: int, trailing: int, cap: int) -> _State:
        """The state of a run of ``wanted`` rows in flight (rounded up to a power of two when ``allowed``)."""
        wanted = max(1, wanted)
        bucket = 1 << (wanted - 1).bit_length()  # a power of two, unless that is more than allowed
        slots = bucket if bucket <= allowed else wanted
        self.last_slots = slots
        return self._state_for(slots, longest, trailing, cap)

    def _drive(
        self,
        state: _State,
        take: Callable[[bool], tuple[Any, LoopRow] | None],
        finish: Callable[[Any, torch.Tensor], None],
        sink: Callable[[Any, torch.Tensor], None] | None,
        ask: Callable[[int], None] = lambda _free: None,
    ) -> Generator[None, None, None]:
        """Fill free slots with ``take`` (waiting only when no row is in flight; None: no row now, or no
        more when nothing is in flight), step, hand new frames to ``sink`` and ended rows to ``finish``.
        ``ask`` is told, before every fill (outside inference mode), how many slots are free."""
        slots = state.slots
        owner: list[Any] = [None] * slots
        busy = [False] * slots
        sent = [0] * slots
        position = [0] * slots
        while True:
            ask(slots - sum(busy))
            with torch.inference_mode():
                for slot in range(slots):
                    while not busy[slot]:
                        item = take(not any(busy))
                        if item is None:
                            break
                        key, row = item
                        if row.pad_embed is not None:
                            self.pad_embed.copy_(row.pad_embed.reshape(-1))  # in place: graphs read it
                        if row.max_new_tokens > 1 and self._prefill(state, slot, row):
                            owner[slot], busy[slot], sent[slot] = key, True, 0
                            position[slot] = row.prefill.shape[0]
                        else:  # no frame: a cap of one token, or end of speech first
                            finish(key, state.frames[slot, :0].clone())
                if not any(busy):
                    break
                in_use = max(position[s] for s in range(slots) if busy[s])
                length = min(state.length, _round_up(in_use + 1, CACHE_BUCKET))
                self._run_step(state, length)
                progress: list[list[int]] = torch.stack(
                    [state.done.to(torch.int64), state.generated, state.position]
                ).tolist()
                done, generated, position = progress
                for slot in range(slots):
                    if not busy[slot]:
                        continue
                    frames = int(generated[slot]) - 1
                    if sink is not None and frames > sent[slot]:
                        sink(owner[slot], state.frames[slot, sent[slot] : frames].clone())
                        sent[slot] = frames
                    if done[slot]:
                        finish(owner[slot], state.frames[slot, :frames].clone())
                        owner[slot], busy[slot] = None, False
            yield


def _params_of(params: RowParams, sel: slice | torch.Tensor) -> RowParams:
    return RowParams(
        sample=params.sample[sel],
        temperature=params.temperature[sel],
        top_k=params.top_k[sel],
        top_p=params.top_p[sel],
    )
