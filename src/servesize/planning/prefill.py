"""Prefill cost: FLOPs of a forward pass over new tokens, and what a cache hit or miss costs.

One pass over T new tokens with ``prior`` tokens already cached (working-set-model.md 2.8):

    FLOPs = 2 x P x T                      GEMMs: P = matmul parameters, embeddings and
                                           lm_head excluded; active parameters for MoE
          + 2 x T^2 x d x L_a              attention among the new tokens (QK^T and AV,
                                           2 x pairs x d each, causal mask halves the pairs)
          + 4 x T x prior x d x L_a        every new query attends over every cached token

with d = n_q x head_dim and L_a the full-attention layers (linear-attention and sliding
layers are inside P and add nothing quadratic). Over chunks the attention terms telescope,
so a context's total FLOPs do not depend on the chunk size.

    time = FLOPs / (tp x peak dense FLOP/s for the dtype x tp_efficiency x MFU)

A cache MISS re-prefills its whole context L: 2PL + 2L^2 d L_a. A warm HIT prefills only
the new turn's tail (``warm_turn_tokens``) on top of its cached context, which it still
attends over, so its cost is affine in L. Both are priced per sampled context and averaged:
E[S|miss] needs E[L^2], not E[L]^2, because the tail of a log-normal dominates the square.
"""

from __future__ import annotations

import math
from dataclasses import field
from typing import TYPE_CHECKING, Any

import numpy as np

from servesize.assumptions import assumption
from servesize.derivation import Derivation
from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.jsonable import Record, json_as
from servesize.planning.decode import ContextSampler, tp_efficiency
from servesize.planning.step_model import prefill_seconds

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


def prefill_flops(tokens: ArrayLike, prior: ArrayLike, gemm_params: float, attention_width: float,
                  full_attention_layers: int) -> np.ndarray | float:
    """FLOPs of one pass over ``tokens`` new tokens with ``prior`` cached (vectorised over arrays)."""
    tokens = np.asarray(tokens, dtype=float)
    prior = np.asarray(prior, dtype=float)
    if (tokens.size and tokens.min() < 0) or (prior.size and prior.min() < 0):  # one reduction each, no mask
        raise BadInput("token counts must be >= 0")
    out = (
        2.0 * gemm_params * tokens
        + 2.0 * tokens**2 * attention_width * full_attention_layers
        + 4.0 * tokens * prior * attention_width * full_attention_layers
    )
    return float(out) if out.ndim == 0 else out


@frozen
class PrefillSetup:
    """How much compute one prefill pass costs, and how fast one replica group does it.

    gemm_params: P, parameters that take part in matmuls per token (no embedding, no
        lm_head; for MoE the active parameters: shared + k routed experts + attention).
    attention_width: d = num_attention_heads x head_dim.
    full_attention_layers: L_a, layers with full (growing) attention.
    peak_flops_per_gpu: dense (not sparse) peak FLOP/s of one GPU for the compute dtype.
    """

    gemm_params: float
    attention_width: int
    full_attention_layers: int
    peak_flops_per_gpu: float
    tp: int = 1
    tp_efficiency: float | None = None
    mfu: float = field(default_factory=lambda: assumption("prefill.mfu"))
    expert_params: float = 0.0      # of gemm_params, the routed experts' (k of E) per token
    expert_efficiency: float = 1.0  # their grouped GEMMs' rate, as a share of the others' (step.moe_prefill_scope)

    def __post_init__(self) -> None:
        if self.gemm_params <= 0:
            raise BadInput("prefill needs a positive matmul parameter count")
        if self.attention_width < 0 or self.full_attention_layers < 0:
            raise BadInput("attention width and layer count must be >= 0")
        if self.peak_flops_per_gpu <= 0:
            raise BadInput("peak FLOP/s must be positive (use the dense figure, not the sparsity one)")
        if not 0 < self.mfu <= 1:
            raise BadInput(f"MFU must be in (0, 1], got {self.mfu!r}")
        if self.tp < 1 or int(self.tp) != self.tp:
            raise BadInput(f"tensor-parallel size must be a whole number >= 1, got {self.tp!r}")
        if self.tp_efficiency is not None and not 0 < self.tp_efficiency <= 1:
            raise BadInput(f"TP efficiency must be in (0, 1], got {self.tp_efficiency!r}")
        if not 0 <= self.expert_params <= self.gemm_params or not 0 < self.expert_efficiency <= 1:
            raise BadInput(f"the routed experts' parameters must be in [0, {self.gemm_params:g}] and their prefill "
                           f"efficiency in (0, 1], got {self.expert_params!r} and {self.expert_efficiency!r}")

    @property
    def tp_eff(self) -> float:
        return tp_efficiency(self.tp) if self.tp_efficiency is None else float(self.tp_efficiency)

    @property
    def achieved_flops_per_s(self) -> float:
        """tp x peak x tp_efficiency x MFU: the FLOP/s a prefill really gets from the group."""
        return self.tp * self.peak_flops_per_gpu * self.tp_eff * self.mfu

    @property
    def priced_params(self) -> float:
        """The matmul parameters per token as the achieved rate prices them: the routed experts' count 1 /
        expert_efficiency each (their grouped GEMMs run slower than the rest); gemm_params for a dense model."""
        return self.gemm_params + self.expert_params * (1.0 / self.expert_efficiency - 1.0)

    def flops(self, tokens: ArrayLike, prior: ArrayLike = 0.0) -> np.ndarray | float:
        return prefill_flops(tokens, prior, self.gemm_params, self.attention_width, self.full_attention_layers)

    def priced_flops(self, tokens: ArrayLike, prior: ArrayLike = 0.0) -> np.ndarray | float:
        """FLOPs weighted by their kernels' rate (``priced_params``): over ``achieved_flops_per_s``, the pass's time."""
        return prefill_flops(tokens, prior, self.priced_params, self.attention_width, self.full_attention_layers)

    def seconds(self, tokens: ArrayLike, prior: ArrayLike = 0.0) -> Any:
        """Machine time of one pass (vectorised): the step model's (planning.step_model.prefill_seconds)."""
        return prefill_seconds(self, tokens, prior)

    def miss_seconds(self, contexts: ArrayLike) -> Any:
        """A miss re-prefills its whole context from nothing (chunking does not change the FLOPs)."""
        return self.seconds(contexts, 0.0)

    def hit_seconds(self, contexts: ArrayLike, warm_turn_tokens: float) -> Any:
        """A warm hit prefills the new turn on top of its cached context (priced at prior = L)."""
        return self.seconds(warm_turn_tokens, contexts)


@frozen
class PrefillCosts(Record):
    """Service times of a cache miss and a warm hit over the workload's context lengths."""

    mean_context_tokens: float          # E[L]
    mean_context_sq_tokens2: float      # E[L^2]
    warm_turn_tokens: float
    miss_s: float = field(metadata=json_as("miss_ttft_s"))  # E[S | miss]: cold TTFT with no queue
    miss_s2: float                      # E[S^2 | miss]
    hit_s: float = field(metadata=json_as("hit_ttft_s"))  # E[S | hit]: warm TTFT with no queue (= hit at prior E[L])
    hit_s2: float                       # E[S^2 | hit]
    samples: int                        # context draws behind the moments (0: closed form)
    derivation: Derivation

    @property
    def thrash_ratio(self) -> float:
        """How many warm hits one miss costs in machine time."""
        return self.miss_s / self.hit_s if self.hit_s > 0 else float("inf")

    @property
    def max_cold_rate_per_s(self) -> float:
        """Misses per second at which prefill alone saturates the group."""
        return 1.0 / self.miss_s

    JSON_EXTRA = ("thrash_ratio", "max_cold_rate_per_s")


def prefill_costs(
    setup: PrefillSetup,
    contexts: np.ndarray | None = None,
    sample_contexts: ContextSampler | None = None,
    warm_turn_tokens: float | None = None,
    samples: int | None = None,
    seed: int = 0,
    length_moments: tuple[float, ...] | None = None,
) -> PrefillCosts:
    """E[S|miss], E[S^2|miss], E[S|hit], E[S^2|hit] from context lengths (given, sampled, or their moments).

    Pass ``contexts`` (an array of context lengths, prefix included), or
    ``sample_contexts(rng, size)`` with ``samples`` draws (default 200,000, seed 0), or
    ``length_moments`` = (E[L], E[L^2], E[L^3], E[L^4]): both legs are polynomials in L of degree
    at most 2, so their first two moments follow exactly from these four (no sampling noise).
    """
    turn = assumption("prefill.warm_turn_tokens") if warm_turn_tokens is None else float(warm_turn_tokens)
    if turn < 0:
        raise BadInput(f"warm turn must be >= 0 tokens, got {turn!r}")
    if length_moments is not None:
        if len(length_moments) != 4 or not all(math.isfinite(x) and x >= 0 for x in length_moments):
            raise BadInput("length_moments must be E[L], E[L^2], E[L^3], E[L^4]: four finite values >= 0")
        el, el2, el3, el4 = (float(x) for x in length_moments)
        return _costs(setup, turn, el, el2, None, 0, "closed form over the workload's length distribution", (el3, el4))
    if contexts is None:
        if sample_contexts is None:
            raise BadInput("prefill_costs needs contexts, a context sampler or the length moments")
        samples = assumption("prefill.samples") if samples is None else int(samples)
        if samples < 1:
            raise BadInput("samples must be >= 1")
        contexts = sample_contexts(np.random.default_rng(seed), samples)
    length = np.asarray(contexts, dtype=float).ravel()
    if length.size == 0 or np.any(length < 0) or not np.all(np.isfinite(length)):
        raise BadInput("context lengths must be a non-empty array of finite values >= 0")

    miss = setup.miss_seconds(length)
    hit = setup.hit_seconds(length, turn)
    el, el2 = float(length.mean()), float((length**2).mean())
    return _costs(setup, turn, el, el2, (float((miss**2).mean()), float((hit**2).mean())), int(length.size),
                  f"mean context over {length.size:,} draws")


def _costs(setup: PrefillSetup, turn: float, el: float, el2: float, sampled: tuple[float, float] | None,
           samples: int, how: str, higher: tuple[float, float] = (0.0, 0.0)) -> PrefillCosts:
    """PrefillCosts with its derivation. The means are affine in E[L] and E[L^2]; the second moments are
    ``sampled`` (E[S^2|miss], E[S^2|hit]) or, from ``higher`` = (E[L^3], E[L^4]), exact: miss = (2P L +
    2 d L_a L^2) / F and hit = (h0 + 4 T d L_a L) / F are polynomials in L, so their squares' means are
    sums of E[L^k]."""
    d = Derivation()
    d.given("P", setup.priced_params, note="matmul parameters per token (active for MoE), no embedding/lm_head"
            + ("; the routed experts' counted 1 / step.moe_prefill_efficiency each" if setup.expert_efficiency < 1 else ""))
    d.given("d", setup.attention_width, note="attention width n_q x head_dim")
    d.given("L_a", setup.full_attention_layers, note="full-attention layers")
    flops_s = d.step(
        "achieved_flops_per_s", "tp * peak_flops_per_gpu * tp_efficiency * mfu", unit="FLOP/s",
        source="working-set-model.md 2.8; mfu = prefill.mfu x the deployment's kernel factors (data/assumptions.toml: "
               "step.gpu_fp8_prefill_kernels at the FP8 peak, step.vendor_efficiency_amd, step.moe_prefill_efficiency)",
        tp=setup.tp, peak_flops_per_gpu=setup.peak_flops_per_gpu, tp_efficiency=setup.tp_eff, mfu=setup.mfu,
    )
    d.given("E_L", el, unit="tokens", note=how)
    d.given("E_L2", el2, unit="tokens^2", note="second moment: the quadratic term is priced on the tail")
    miss_s = d.step(
        "miss_ttft_s", "(2 * P * E_L + 2 * d * L_a * E_L2) / achieved_flops_per_s", unit="s",
        note="E[S | miss]: re-prefill the whole context, no queue", source="working-set-model.md 2.8",
        P=setup.priced_params, E_L=el, d=setup.attention_width, L_a=setup.full_attention_layers, E_L2=el2,
        achieved_flops_per_s=flops_s,
    )
    hit_s = d.step(
        "hit_ttft_s", "(2 * P * T + 2 * T ** 2 * d * L_a + 4 * T * E_L * d * L_a) / achieved_flops_per_s", unit="s",
        note="E[S | hit]: the new turn at prior = E[L] (affine in L, so exact in expectation)",
        P=setup.priced_params, T=turn, d=setup.attention_width, L_a=setup.full_attention_layers, E_L=el,
        achieved_flops_per_s=flops_s,
    )
    if sampled is not None:
        miss_s2, hit_s2 = sampled
    else:
        e3 = d.given("E_L3", higher[0], unit="tokens^3", note=how)
        e4 = d.given("E_L4", higher[1], unit="tokens^4", note=how)
        miss_s2 = d.step(
            "miss_s2", "((2 * P) ** 2 * E_L2 + 2 * (2 * P) * (2 * d * L_a) * E_L3 + (2 * d * L_a) ** 2 * E_L4)"
            " / achieved_flops_per_s ** 2", unit="s^2", note="E[S^2 | miss], exact from the length moments",
            P=setup.priced_params, d=setup.attention_width, L_a=setup.full_attention_layers, E_L2=el2, E_L3=e3, E_L4=e4,
            achieved_flops_per_s=flops_s)
        h0 = float(setup.priced_flops(turn, 0.0))
        hit_s2 = d.step(
            "hit_s2", "(h0 ** 2 + 2 * h0 * (4 * T * d * L_a) * E_L + (4 * T * d * L_a) ** 2 * E_L2) / achieved_flops_per_s ** 2",
            unit="s^2", note="E[S^2 | hit], h0 = the turn's own FLOPs with nothing cached", h0=h0, T=turn,
            d=setup.attention_width, L_a=setup.full_attention_layers, E_L=el, E_L2=el2, achieved_flops_per_s=flops_s)
    return PrefillCosts(
        mean_context_tokens=el,
        mean_context_sq_tokens2=el2,
        warm_turn_tokens=turn,
        miss_s=float(miss_s),
        miss_s2=float(miss_s2),
        hit_s=float(hit_s),
        hit_s2=float(hit_s2),
        samples=samples,
        derivation=d,
    )
