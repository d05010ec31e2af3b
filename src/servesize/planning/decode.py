"""Decode speed: a roofline per replica group, memory and compute (working-set-model.md 2.7).

Every decode step of a replica group streams, from HBM:

    step_bytes(n) = weights read per step            (dense: every streamed weight once;
                                                      MoE: shared part + the union of the
                                                      experts the n tokens route to)
                  + sum over the n active contexts of L_i x kv_bytes_per_token_read
                  + 2 x n x state_bytes               (recurrent state read and written)

                  + draft_bytes                       (MTP: the head and lm_head, once per draft)

and computes, with q = 1 + k query tokens per sequence (k MTP drafts verified with the token of
its own) and F = 2 x (matmul parameters + lm_head) FLOPs per token:

    step_flops(n) = n x (q x F + draft_flops)         GEMMs (draft_flops: k MTP-head passes)
                  + q x A x sum over the n contexts   attention, A = 4 x d x L_a per context token
                                                      (+ the sliding layers over min(L, window))

The GEMMs take the longer of their weights' read and their FLOPs' time, and the attention (its KV and state
read, or its FLOPs if longer) comes after them (the roofline, ``decode.roofline = sequential``: vLLM runs the two as kernels one after
the other, and the mixed step prices its decoders so, planning/step_model.py):

    step_s = max(weight_bytes / B, GEMM FLOPs / R) + max((step_bytes - weight_bytes) / B, attention FLOPs / R)
             + step_overhead_s                 (scheduling, kernel launches, sampling: a fixed cost
                                                per step, planning/step_model.py StepTerms.overhead,
                                                fitted to measured runs by scripts/step_accuracy.py)

with B = tp x bandwidth x bandwidth_efficiency x tp_efficiency, R = tp x peak FLOP/s x tp_efficiency x
compute_efficiency, the GEMM FLOPs n x (q x F + draft_flops) and the attention's the rest; ``decode.roofline = max`` takes
max(step_bytes / B, step_flops / ...) instead (the KV read overlapped with the compute; the rule before
2026-12-06).

and each of the n users gets ``spec_speedup`` tokens per step: per-user tok/s = spec_speedup / step_s.
A setup without compute figures (peak 0) is the seed's memory-only roofline.

The contexts L_i are Monte-Carlo draws from the workload (prefix included: there is no
prefix-sharing saving on reads). Percentiles are taken over ``fills`` draws of the n
contexts. The decode ceiling is the largest n whose p50 still meets the floor, found by
bisection over one bank of common random numbers, so the curve is smooth and monotone.

Everything here is pure numbers and numpy arrays: the caller (plan) turns an Architecture,
a Gpu and a Workload into a ``DecodeSetup`` and a ``sample_contexts(rng, size)`` callable.

Per replica group: bytes are what the whole group reads per step (under TP a replicated KV
head or weight is read by every rank that holds it, so pass per-rank bytes x tp), and the
bandwidth is one GPU's datasheet HBM rate, multiplied here by tp.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import field
from typing import TYPE_CHECKING, Any

from servesize.assumptions import assumption
from servesize.derivation import Derivation
from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.jsonable import Record, json_as
from servesize.percentile import percentile50, percentiles
from servesize.planning.step_model import decode_seconds

if TYPE_CHECKING:  # numpy loads where a function needs it (the CLI starts without it)
    import numpy as np
    from numpy.typing import ArrayLike

    from servesize.workload.model import Workload


class FloorNeverReached(BadInput):
    """Per-user decode stays above the floor at every concurrency searched: decode cannot bind."""

ContextSampler = Callable[["np.random.Generator", int], "np.ndarray"]


def contexts_from(workload: Workload) -> ContextSampler:
    """Adapt anything with ``sample(rng, size) -> Sample`` (``.full_tokens``) to a context sampler."""

    import numpy as np
    def sample_contexts(rng: np.random.Generator, size: int) -> np.ndarray:
        return np.asarray(workload.sample(rng, size).full_tokens, dtype=float)

    return sample_contexts


# --------------------------------------------------------------------------------------
# Closed-form pieces
# --------------------------------------------------------------------------------------


def mtp_speedup(acceptance: float, drafts: int) -> float:
    """Tokens per verification step with ``drafts`` speculative tokens: 1 + a + a^2 + ... + a^k.

    Each draft is accepted only if all before it were (geometric acceptance), and the
    verifying pass always yields one token of its own.
    """
    if not 0.0 <= acceptance <= 1.0:
        raise BadInput(f"MTP acceptance must be in [0, 1], got {acceptance!r}")
    if drafts < 0 or int(drafts) != drafts:
        raise BadInput(f"MTP drafts must be a whole number >= 0, got {drafts!r}")
    return float(sum(acceptance**i for i in range(int(drafts) + 1)))


def mtp_acceptance_for(speedup: float, drafts: int) -> float:
    """The per-draft acceptance that gives ``speedup`` with ``drafts`` drafts (inverse of mtp_speedup)."""
    if drafts < 1:
        raise BadInput("an acceptance needs at least one draft token")
    if not 1.0 <= speedup <= drafts + 1:
        raise BadInput(f"a speedup of {speedup} is impossible with {drafts} drafts (range 1 to {drafts + 1})")
    lo, hi = 0.0, 1.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if mtp_speedup(mid, drafts) < speedup:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def tp_efficiency(
    tp: int,
    per_doubling: float | None = None,
    nvlink_domain: int | None = None,
    cross_domain_per_doubling: float | None = None,
) -> float:
    """Bandwidth efficiency of a TP group: per_doubling^log2(min(tp, domain)) x cross^log2(tp/domain).

    The seed's haircut (working-set-model.md 2.5): 0.90 per doubling inside one NVLink
    domain, a further 0.65 per doubling beyond it. TP1 is 1.0.
    """
    per_doubling = assumption("decode.tp_efficiency_per_doubling") if per_doubling is None else per_doubling
    nvlink_domain = assumption("decode.nvlink_domain_gpus") if nvlink_domain is None else nvlink_domain
    cross = assumption("decode.tp_efficiency_cross_domain_per_doubling") if cross_domain_per_doubling is None else cross_domain_per_doubling
    if tp < 1 or int(tp) != tp:
        raise BadInput(f"tensor-parallel size must be a whole number >= 1, got {tp!r}")
    if nvlink_domain < 1:
        raise BadInput(f"NVLink domain must be >= 1 GPU, got {nvlink_domain!r}")
    eff = per_doubling ** math.log2(min(tp, nvlink_domain))
    if tp > nvlink_domain:
        eff *= cross ** math.log2(tp / nvlink_domain)
    return float(eff)


def dense_weights_read_per_step(
    total_weight_bytes: float,
    embedding_bytes: float,
    tied_embeddings: bool,
    seed_convention: bool = False,
) -> float:
    """Weight bytes one decode step streams for a dense model.

    A step multiplies every layer's matrices and the lm_head once, but reads only n rows
    of the input embedding table (a gather, negligible), so the embedding is not streamed.
    With tied embeddings the same matrix *is* the lm_head and is read in full.

    ``seed_convention=True`` counts the whole checkpoint (the seed's w_decode_shared = W,
    e.g. 28.8 GiB for Qwen3.6-27B FP8), which overstates the read by the embedding table
    (working-set-model.md 5b.9).
    """
    if total_weight_bytes <= 0 or embedding_bytes < 0 or embedding_bytes >= total_weight_bytes:
        raise BadInput("weight bytes must be positive and larger than the embedding table")
    if seed_convention or tied_embeddings:
        return float(total_weight_bytes)
    return float(total_weight_bytes - embedding_bytes)


@frozen
class ExpertRouting:
    """The routed experts of a MoE model, over all its MoE layers, per replica group.

    ``all_expert_bytes``: every routed expert of every MoE layer. Each token routes to
    ``experts_per_token`` of ``num_experts`` per layer.

    ``union``: how many distinct experts n tokens in one step touch.
      "linear"   the no-overlap upper bound min(n x k, E) experts per layer (the seed's default)
      "expected" the expected union under uniform independent routing: E x (1 - (1 - k/E)^n)
    Real routing is skewed, so the truth sits between the two (nearer "expected" at large n).

    ``read_share``: the share of the decode stream's rate at which the experts' kernel reads them (the MoE kernel's
    efficiency, or the kernel's measured rate: FP4 experts the SMs dequantise, bf16 experts;
    planning.step_model.dequant_share); their bytes count
    1 / read_share times in the step's read.
    """

    all_expert_bytes: float
    num_experts: int
    experts_per_token: int
    union: str = "linear"
    read_share: float = 1.0

    def __post_init__(self) -> None:
        if self.all_expert_bytes <= 0:
            raise BadInput("expert bytes must be positive")
        if not 1 <= self.experts_per_token <= self.num_experts:
            raise BadInput(f"experts per token must be in 1..{self.num_experts}, got {self.experts_per_token}")
        if self.union not in ("linear", "expected"):
            raise BadInput(f"expert union must be 'linear' or 'expected', got {self.union!r}")
        if not (0 < self.read_share and math.isfinite(self.read_share)):  # above 1: a measured kernel (dequant_share)
            raise BadInput(f"the experts' read share must be positive and finite, got {self.read_share!r}")

    def union_bytes(self, n: ArrayLike) -> np.ndarray | float:
        """Routed-expert bytes read per step with n concurrent decode tokens (vectorised in n)."""
        import numpy as np
        n = np.asarray(n, dtype=float)
        share = self.experts_per_token / self.num_experts
        if self.union == "linear":
            frac = np.minimum(n * share, 1.0)
        else:
            frac = 1.0 - (1.0 - share) ** n
        out = self.all_expert_bytes / self.read_share * frac
        return float(out) if out.ndim == 0 else out


@frozen
class DecodeSetup:
    """What one replica group reads per decode step, and how fast it reads it.

    weight_bytes_per_step: weights streamed every step whatever n is (dense: see
        dense_weights_read_per_step; MoE: attention, dense layers, shared experts, router,
        lm_head).
    kv_bytes_per_token_read: KV bytes read per context token per step, whole group.
    state_bytes_per_sequence: recurrent (linear-attention / Mamba) state per sequence.
    topk_tokens / topk_bytes_per_token: sparse attention (DSA-style) reads a further
        topk_bytes_per_token x min(L, topk_tokens) per sequence; 0 for dense attention.
    """

    bandwidth_bytes_per_s: float
    weight_bytes_per_step: float
    kv_bytes_per_token_read: float
    state_bytes_per_sequence: float = 0.0
    tp: int = 1
    experts: ExpertRouting | None = None
    spec_speedup: float = 1.0
    bandwidth_efficiency: float = field(default_factory=lambda: assumption("decode.bandwidth_efficiency"))
    tp_efficiency: float | None = None
    topk_tokens: int = 0
    topk_bytes_per_token: float = 0.0
    # the compute leg (0 peak: memory only, the seed's roofline)
    peak_flops_per_s: float = 0.0
    compute_efficiency: float = field(default_factory=lambda: assumption("decode.compute_efficiency"))
    flops_per_token: float = 0.0
    query_tokens_per_step: float = 1.0
    draft_flops_per_sequence: float = 0.0
    draft_bytes_per_step: float = 0.0
    attention_flops_per_context_token: float = 0.0
    window_attention_flops_per_token: float = 0.0
    step_overhead_s: float = 0.0  # fixed per step (decode.step_overhead_s); 0 is the pure roofline (the seed's)
    # the KV and state read after the GEMMs' roofline, not overlapped with their compute (decode.roofline = sequential)
    sequential: bool = False

    def __post_init__(self) -> None:
        if self.bandwidth_bytes_per_s <= 0:
            raise BadInput("HBM bandwidth must be positive")
        if self.weight_bytes_per_step < 0 or self.kv_bytes_per_token_read < 0 or self.state_bytes_per_sequence < 0:
            raise BadInput("bytes per step, per token and per sequence must be >= 0")
        if not 0 < self.bandwidth_efficiency <= 1:
            raise BadInput(f"bandwidth efficiency must be in (0, 1], got {self.bandwidth_efficiency!r}")
        if self.spec_speedup < 1:
            raise BadInput(f"speculative speedup must be >= 1, got {self.spec_speedup!r}")
        if self.tp < 1 or int(self.tp) != self.tp:
            raise BadInput(f"tensor-parallel size must be a whole number >= 1, got {self.tp!r}")
        if self.tp_efficiency is not None and not 0 < self.tp_efficiency <= 1:
            raise BadInput(f"TP efficiency must be in (0, 1], got {self.tp_efficiency!r}")
        if self.topk_tokens < 0 or self.topk_bytes_per_token < 0:
            raise BadInput("sparse top-k settings must be >= 0")
        if min(self.peak_flops_per_s, self.flops_per_token, self.draft_flops_per_sequence, self.draft_bytes_per_step,
               self.attention_flops_per_context_token, self.window_attention_flops_per_token) < 0:
            raise BadInput("FLOP/s, FLOPs and draft bytes must be >= 0")
        if not 0 < self.compute_efficiency <= 1:
            raise BadInput(f"compute efficiency must be in (0, 1], got {self.compute_efficiency!r}")
        if self.query_tokens_per_step < 1:
            raise BadInput(f"query tokens per step must be >= 1, got {self.query_tokens_per_step!r}")
        if not 0 <= self.step_overhead_s < 1:
            raise BadInput(f"per-step overhead must be in [0, 1) s, got {self.step_overhead_s!r}")

    @property
    def tp_eff(self) -> float:
        return tp_efficiency(self.tp) if self.tp_efficiency is None else float(self.tp_efficiency)

    @property
    def effective_bandwidth_bytes_per_s(self) -> float:
        """tp x bandwidth x bandwidth_efficiency x tp_efficiency: what the group really streams."""
        return self.tp * self.bandwidth_bytes_per_s * self.bandwidth_efficiency * self.tp_eff

    @property
    def effective_flops_per_s(self) -> float:
        """tp x peak x tp_efficiency x compute_efficiency: what the group really computes (0: memory only)."""
        return self.tp * self.peak_flops_per_s * self.tp_eff * self.compute_efficiency

    @property
    def prices_compute(self) -> bool:
        return self.peak_flops_per_s > 0

    def weight_bytes(self, n: ArrayLike) -> np.ndarray | float:
        """Weights read per step at n concurrent decoders (vectorised in n), the MTP drafts' included."""
        import numpy as np
        base = float(self.weight_bytes_per_step + self.draft_bytes_per_step)
        if self.experts is None:
            return np.full(np.shape(n), base) if np.ndim(n) else base
        return base + self.experts.union_bytes(n)

    def gemm_flops(self, n: Any) -> Any:
        """FLOPs of one step's GEMMs: n sequences x (q tokens x F + drafts) (n a count or an array of counts)."""
        return n * (self.query_tokens_per_step * self.flops_per_token + self.draft_flops_per_sequence)

    def step_flops(self, n: int, context_sum: ArrayLike, window_sum: ArrayLike = 0.0) -> np.ndarray:
        """FLOPs of one step: n sequences x (q tokens x F + drafts) + q x attention over the contexts."""
        import numpy as np
        gemm = np.asarray(self.gemm_flops(n), dtype=float)
        attention = self.query_tokens_per_step * (self.attention_flops_per_context_token * np.asarray(context_sum, dtype=float)
                                                  + self.window_attention_flops_per_token * np.asarray(window_sum, dtype=float))
        return gemm + attention

    def step_seconds(self, step_bytes: ArrayLike, step_flops: ArrayLike | None = None, n: int = 0) -> np.ndarray:
        """The step's time at ``n`` decoders: the one step model's roofline (planning.step_model.decode_seconds)."""
        return decode_seconds(self, step_bytes, step_flops, n)

    def step_bytes(self, contexts: np.ndarray) -> np.ndarray:
        """Bytes per step for each row of ``contexts`` (shape (..., n): the n active contexts)."""
        import numpy as np
        contexts = np.asarray(contexts, dtype=float)
        n = contexts.shape[-1]
        kv: np.ndarray = contexts.sum(axis=-1) * self.kv_bytes_per_token_read
        if self.topk_tokens and self.topk_bytes_per_token:
            kv = kv + np.minimum(contexts, self.topk_tokens).sum(axis=-1) * self.topk_bytes_per_token
        step_bytes: np.ndarray = self.weight_bytes(n) + kv + 2.0 * n * self.state_bytes_per_sequence
        return step_bytes

    def per_user_tokens_per_s(self, step_bytes: ArrayLike) -> np.ndarray:
        """spec_speedup / (step bytes / effective bandwidth + per-step overhead) (the memory leg only)."""
        return self.spec_speedup / self.step_seconds(step_bytes)


# --------------------------------------------------------------------------------------
# Monte-Carlo over fills, with common random numbers
# --------------------------------------------------------------------------------------

_BLOCK = 128  # columns (decoder slots) drawn per block


class ContextBank:
    """``fills`` rows of context draws, grown column-block by column-block.

    Block j is drawn from its own generator seeded (seed, j), so column i holds the same
    contexts however far the bank has grown: p50(n) is computed from the first n columns
    of the same matrix for every n, which makes it monotone in n and smooth.

    ``ContextBank.from_columns(columns, fills)`` draws from ``columns(c0, c1)`` instead, a
    (fills, c1 - c0) block of contexts that must not depend on how far the bank has grown
    (the plan passes the sessions of its warm fills: workload.draws.RandomBank). One bank
    serves every floor, bandwidth and speedup over the same workload.
    """

    def __init__(self, sample_contexts: ContextSampler | None, fills: int, seed: int = 0, topk_tokens: int = 0,
                 columns: Callable[[int, int], np.ndarray] | None = None):
        import numpy as np
        if fills < 1:
            raise BadInput(f"fills must be >= 1, got {fills!r}")
        if (sample_contexts is None) == (columns is None):
            raise BadInput("a context bank needs a context sampler or a column source (one of them)")
        self.sample_contexts = sample_contexts
        self.columns_of = columns
        self.fills = int(fills)
        self.seed = int(seed)
        self.topk_tokens = int(topk_tokens)
        self.cum = np.zeros((self.fills, 1))
        self.cum_topk = np.zeros((self.fills, 1))
        self.blocks = 0

    @classmethod
    def from_columns(cls, columns: Callable[[int, int], np.ndarray], fills: int, topk_tokens: int = 0) -> ContextBank:
        return cls(None, fills, 0, topk_tokens, columns=columns)

    @property
    def columns(self) -> int:
        return self.cum.shape[1] - 1

    def _block(self) -> np.ndarray:
        import numpy as np
        if self.columns_of is not None:
            c0 = self.blocks * _BLOCK
            block = np.asarray(self.columns_of(c0, c0 + _BLOCK), dtype=float)
            if block.shape != (self.fills, _BLOCK):
                raise BadInput("the context columns must be a (fills, columns) array")
        else:
            assert self.sample_contexts is not None  # one of the two, checked in __init__
            rng = np.random.default_rng([self.seed, self.blocks])
            block = np.asarray(self.sample_contexts(rng, self.fills * _BLOCK), dtype=float)
            if block.shape != (self.fills * _BLOCK,):
                raise BadInput("the context sampler must return a flat array of the requested size")
            block = block.reshape(self.fills, _BLOCK)
        if not np.all(np.isfinite(block)) or np.any(block < 0):
            raise BadInput("sampled contexts must be finite and >= 0")
        return block

    def _grow(self, n: int) -> None:
        import numpy as np
        new = []
        cols = self.columns
        while cols < n:
            new.append(self._block())
            self.blocks += 1
            cols += _BLOCK
        if new:
            block = np.concatenate(new, axis=1)
            self.cum = np.concatenate([self.cum, self.cum[:, -1:] + np.cumsum(block, axis=1)], axis=1)
            if self.topk_tokens:
                capped = np.minimum(block, self.topk_tokens)
                self.cum_topk = np.concatenate([self.cum_topk, self.cum_topk[:, -1:] + np.cumsum(capped, axis=1)], axis=1)

    def context_sums(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Per fill: sum of the first n contexts, and of min(context, topk)."""
        import numpy as np
        self._grow(n)
        topk = self.cum_topk[:, n] if self.topk_tokens else np.zeros(self.fills)
        return self.cum[:, n], topk

    def matrix(self, n: int) -> np.ndarray:
        """The (fills, n) contexts themselves (for tests and plots)."""
        import numpy as np
        self._grow(n)
        return np.diff(self.cum[:, : n + 1], axis=1)


def _legs(setup: DecodeSetup, bank: ContextBank, n: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Per fill: the step's bytes and (when compute is priced) its FLOPs."""
    sums, topk_sums = bank.context_sums(n)
    kv = sums * setup.kv_bytes_per_token_read
    if setup.topk_tokens and setup.topk_bytes_per_token:
        kv = kv + topk_sums * setup.topk_bytes_per_token
    step = setup.weight_bytes(n) + kv + 2.0 * n * setup.state_bytes_per_sequence
    flops = setup.step_flops(n, sums, topk_sums) if setup.prices_compute else None
    return step, flops


def _speeds(setup: DecodeSetup, bank: ContextBank, n: int) -> np.ndarray:
    step, flops = _legs(setup, bank, n)
    return setup.spec_speedup / setup.step_seconds(step, flops, n)


@frozen
class DecodeSpeed(Record):
    """Per-user decode speed at n concurrent decoders, over Monte-Carlo fills."""

    n: int = field(metadata=json_as("concurrent_decoders"))
    p5_tok_s: float = field(metadata=json_as(None))  # written in per_user_tok_s
    p50_tok_s: float = field(metadata=json_as(None))
    p95_tok_s: float = field(metadata=json_as(None))
    aggregate_p50_tok_s: float = field(metadata=json_as("aggregate_tok_s_p50"))
    step_bytes_p50: float
    weight_bytes: float = field(metadata=json_as("weight_bytes_per_step"))
    kv_bytes_p50: float = field(metadata=json_as("kv_bytes_per_step_p50"))
    state_bytes: float = field(metadata=json_as("state_bytes_per_step"))
    fills: int
    derivation: Derivation
    memory_s_p50: float = 0.0
    compute_s_p50: float = 0.0

    JSON_EXTRA = ("per_user_tok_s", "bound")

    @property
    def per_user_tok_s(self) -> dict[str, float]:
        return {"p5": self.p5_tok_s, "p50": self.p50_tok_s, "p95": self.p95_tok_s}

    @property
    def bound(self) -> str:
        """Which leg of the roofline sets the step: 'memory' or 'compute' (under decode.roofline = sequential, the
        legs of the step's GEMMs: their weights' read and their FLOPs; the KV read comes after either)."""
        return "compute" if self.compute_s_p50 > self.memory_s_p50 else "memory"

    @property
    def compute_share(self) -> float:
        """Compute time / memory time of the median step, or of its GEMMs under the sequential rule (1 = the ridge
        point)."""
        return self.compute_s_p50 / self.memory_s_p50 if self.memory_s_p50 > 0 else 0.0


def _weights_step(d: Derivation, setup: DecodeSetup, n: int) -> None:
    weights = float(setup.weight_bytes(n))
    if setup.experts is None:
        d.given("weight_bytes_per_step", weights, unit="B",
                note="every streamed weight once per step (see dense_weights_read_per_step for the embedding convention)"
                + (", the MTP drafts' head and lm_head once per draft" if setup.draft_bytes_per_step else ""))
        return
    e = setup.experts
    formula = ("shared_bytes + all_expert_bytes / read_share * min(n * k / E, 1)" if e.union == "linear"
               else "shared_bytes + all_expert_bytes / read_share * (1 - (1 - k / E) ** n)")
    d.step("weight_bytes_per_step", formula, unit="B",
           note=("no-overlap upper bound on the expert union" if e.union == "linear" else "expected union under uniform routing")
           + "; read_share: the experts' kernel's share of the stream rate (step.moe_expert_efficiency, or the "
             "kernel's measured rate: FP4 experts without FP4 tensor cores, step.fp4_moe_kernel_rate; bf16 experts, "
             "step.bf16_moe_kernel_rate)",
           shared_bytes=setup.weight_bytes_per_step + setup.draft_bytes_per_step, all_expert_bytes=e.all_expert_bytes,
           read_share=e.read_share, n=n, k=e.experts_per_token, E=e.num_experts)


def _compute_steps(d: Derivation, setup: DecodeSetup, n: int, ctx_p50: float, window_p50: float, memory_s: float,
                   eff_bw: float) -> tuple[float, float, float]:
    """The compute leg of the median step and the step it sets (decode.roofline), derived; returns the two legs the
    ridge is read between (compute, memory: the GEMMs' under the sequential rule) and the step (s)."""
    eff = d.step("effective_flops", "tp * peak_flops_per_s * tp_efficiency * compute_efficiency", unit="FLOP/s",
                 source="GPU catalogue (dense, weights' dtype); data/assumptions.toml decode.compute_efficiency",
                 tp=setup.tp, peak_flops_per_s=setup.peak_flops_per_s, tp_efficiency=setup.tp_eff,
                 compute_efficiency=setup.compute_efficiency)
    flops = d.step("step_flops_p50",
                   "n * (q * flops_per_token + draft_flops) + q * (attention_flops_per_context_token * context_tokens_p50"
                   " + window_attention_flops_per_token * window_tokens_p50)",
                   unit="FLOP", note="q = 1 + drafts verified per sequence; attention 4 x d x L_a per context token, "
                   "the sliding layers' over min(L, window)",
                   n=n, q=setup.query_tokens_per_step, flops_per_token=setup.flops_per_token,
                   draft_flops=setup.draft_flops_per_sequence,
                   attention_flops_per_context_token=setup.attention_flops_per_context_token, context_tokens_p50=ctx_p50,
                   window_attention_flops_per_token=setup.window_attention_flops_per_token, window_tokens_p50=window_p50)
    compute_s = d.step("compute_s_p50", "step_flops_p50 / effective_flops", unit="s", step_flops_p50=flops,
                       effective_flops=eff)
    if setup.sequential:
        weights_s = d.step("weights_s_p50", "weight_bytes_per_step / effective_bandwidth", unit="s",
                           weight_bytes_per_step=float(setup.weight_bytes(n)), effective_bandwidth=eff_bw)
        gemm_s = d.step("gemm_s_p50", "n * (q * flops_per_token + draft_flops) / effective_flops", unit="s",
                        n=n, q=setup.query_tokens_per_step, flops_per_token=setup.flops_per_token,
                        draft_flops=setup.draft_flops_per_sequence, effective_flops=eff)
        step_s = d.step("step_s_p50", "max(weights_s_p50, gemm_s_p50) + max(memory_s_p50 - weights_s_p50, "
                        "compute_s_p50 - gemm_s_p50)", unit="s", weights_s_p50=weights_s, gemm_s_p50=gemm_s,
                        memory_s_p50=memory_s, compute_s_p50=compute_s,
                        note="the GEMMs' roofline, then the attention's over the KV and state read (decode.roofline "
                        "= sequential): the GEMMs " + ("compute-bound" if gemm_s > weights_s else "memory-bound")
                        + (f" (their compute / their weights' read = {gemm_s / weights_s:.2f})" if weights_s > 0 else ""))
        return float(gemm_s), float(weights_s), float(step_s)
    step_s = d.step("step_s_p50", "max(memory_s_p50, compute_s_p50)", unit="s", memory_s_p50=memory_s,
                    compute_s_p50=compute_s, note="the roofline: " + ("compute-bound" if compute_s > memory_s
                                                                     else "memory-bound")
                    + f" (compute / memory = {compute_s / memory_s:.2f})")
    return float(compute_s), float(memory_s), float(step_s)


def _speed_result(setup: DecodeSetup, bank: ContextBank, n: int) -> DecodeSpeed:
    speeds = _speeds(setup, bank, n)
    p5, p50, p95 = percentiles(speeds, (5, 50, 95))
    sums, topk_sums = bank.context_sums(n)
    (ctx_p50,) = percentiles(sums, (50,))
    mean_ctx = float(sums.mean() / n)

    d = Derivation()
    d.given("bandwidth_bytes_per_s", setup.bandwidth_bytes_per_s, unit="B/s", source="GPU catalogue (datasheet HBM)")
    bw_eff = d.given("bandwidth_efficiency", setup.bandwidth_efficiency,
                     source="modelled: data/assumptions.toml decode.bandwidth_efficiency")
    tp_eff = d.given("tp_efficiency", setup.tp_eff, source="modelled: 0.90 per TP doubling (working-set-model.md 2.5)")
    eff_bw = d.step(
        "effective_bandwidth", "tp * bandwidth_bytes_per_s * bandwidth_efficiency * tp_efficiency", unit="B/s",
        tp=setup.tp, bandwidth_bytes_per_s=setup.bandwidth_bytes_per_s, bandwidth_efficiency=bw_eff, tp_efficiency=tp_eff,
    )
    _weights_step(d, setup, n)
    weights = float(setup.weight_bytes(n))
    kv_p50 = ctx_p50 * setup.kv_bytes_per_token_read
    d.step(
        "kv_bytes_per_step_p50", "context_tokens_p50 * kv_bytes_per_token_read", unit="B",
        note=f"sum of the n active contexts, p50 over {bank.fills} fills (mean context {mean_ctx:,.0f} tokens)",
        context_tokens_p50=ctx_p50, kv_bytes_per_token_read=setup.kv_bytes_per_token_read,
    )
    topk_bytes = 0.0
    if setup.topk_tokens and setup.topk_bytes_per_token:
        topk_bytes = percentiles(topk_sums, (50,))[0] * setup.topk_bytes_per_token
        d.given("sparse_topk_bytes_per_step_p50", topk_bytes, unit="B",
                note=f"min(L, {setup.topk_tokens}) x {setup.topk_bytes_per_token} B per sequence")
    state = d.step("state_bytes_per_step", "2 * n * state_bytes_per_sequence", unit="B", note="recurrent state read and written",
                   n=n, state_bytes_per_sequence=setup.state_bytes_per_sequence)
    step_bytes = d.step("step_bytes_p50", "weight_bytes_per_step + kv_bytes_per_step_p50 + topk_bytes + state_bytes_per_step",
                        unit="B", weight_bytes_per_step=weights, kv_bytes_per_step_p50=kv_p50, topk_bytes=topk_bytes,
                        state_bytes_per_step=state, note="the median fill's step")
    memory_s = d.step("memory_s_p50", "step_bytes_p50 / effective_bandwidth", unit="s", step_bytes_p50=step_bytes,
                      effective_bandwidth=eff_bw)
    window_p50 = float(percentiles(topk_sums, (50,))[0]) if setup.window_attention_flops_per_token else 0.0
    compute_leg, memory_leg, step_s = (_compute_steps(d, setup, n, ctx_p50, window_p50, memory_s, eff_bw)
                                       if setup.prices_compute else (0.0, float(memory_s), 0.0))
    d.given("spec_speedup", setup.spec_speedup, unit="tokens/step",
            source="1 + a + ... + a^k for MTP acceptance a and k drafts (data/assumptions.toml decode.mtp_*); 1 without speculation")
    overhead = d.given("step_overhead_s", setup.step_overhead_s, unit="s",
                       source="modelled: planning/step_model.py StepTerms.overhead (decode.step_overhead_s + per layer + per TP "
                       "doubling: scheduling, launches, sampling, all-reduces)")
    step_p50 = float(setup.spec_speedup / p50 - overhead) * eff_bw  # the median fill's roofline bytes
    if setup.prices_compute and setup.sequential:
        d.step("per_user_tok_s_p50", "spec_speedup / (step_s_p50 + step_overhead_s)", unit="tok/s",
               source="the roofline (data/assumptions.toml decode.roofline)", spec_speedup=setup.spec_speedup,
               step_s_p50=step_s, step_overhead_s=overhead,
               note="p50 over the fills of the per-fill speed; the median step above gives it to rounding")
    elif setup.prices_compute:
        d.step("per_user_tok_s_p50", "spec_speedup / (max(memory_s_p50, compute_s_p50) + step_overhead_s)", unit="tok/s",
               source="the roofline (data/assumptions.toml decode.roofline)", spec_speedup=setup.spec_speedup,
               memory_s_p50=memory_s, compute_s_p50=compute_leg, step_overhead_s=overhead,
               note="p50 over the fills of the per-fill speed; the median step above gives it to rounding")
    else:
        d.step("per_user_tok_s_p50", "spec_speedup / (step_bytes_p50 / effective_bandwidth + step_overhead_s)",
               unit="tok/s", source="working-set-model.md 2.7", spec_speedup=setup.spec_speedup,
               effective_bandwidth=eff_bw, step_bytes_p50=step_p50, step_overhead_s=overhead)
    agg = d.step("aggregate_tok_s_p50", "n * per_user_tok_s_p50", unit="tok/s", n=n, per_user_tok_s_p50=p50)
    return DecodeSpeed(n, p5, p50, p95, agg, step_p50, weights, kv_p50, state, bank.fills, d, memory_leg, compute_leg)


def decode_speed_in(setup: DecodeSetup, bank: ContextBank, n: int) -> DecodeSpeed:
    """Per-user speed at n decoders over contexts already drawn (a bank shared with the ceilings)."""
    if n < 1 or int(n) != n:
        raise BadInput(f"concurrent decoders must be a whole number >= 1, got {n!r}")
    if bank.topk_tokens != setup.topk_tokens:
        raise BadInput("the context bank was drawn for another top-k / window than this decode setup")
    return _speed_result(setup, bank, int(n))


def fill_speeds(setup: DecodeSetup, bank: ContextBank, n: int) -> np.ndarray:
    """Per-user tok/s at n decoders, one per fill of the bank (the draws ``median_speed`` takes the p50 of)."""
    return _speeds(setup, bank, int(n))


def median_speed(setup: DecodeSetup, bank: ContextBank, n: int) -> float:
    """The p50 per-user tok/s at n decoders, nothing else (no derivation)."""
    return percentile50(_speeds(setup, bank, int(n)))


def decode_speed(
    setup: DecodeSetup,
    sample_contexts: ContextSampler,
    n: int,
    fills: int | None = None,
    seed: int = 0,
) -> DecodeSpeed:
    """Per-user tok/s p5/p50/p95 with n concurrent decoders (n contexts drawn per fill)."""
    if n < 1 or int(n) != n:
        raise BadInput(f"concurrent decoders must be a whole number >= 1, got {n!r}")
    fills = assumption("decode.fills") if fills is None else fills
    bank = ContextBank(sample_contexts, fills, seed, setup.topk_tokens)
    return _speed_result(setup, bank, int(n))


def decode_curve(
    setup: DecodeSetup,
    sample_contexts: ContextSampler | None,
    ns: Iterable[int],
    fills: int | None = None,
    seed: int = 0,
    bank: ContextBank | None = None,
) -> dict[str, np.ndarray]:
    """p5/p50/p95 per-user tok/s and aggregate p50 for every n in ``ns`` (one bank, CRN).

    ``bank``: contexts already drawn (the plan's own, ``planning.ceilings.contexts_of``), so the
    curve crosses the floor exactly where the plan's decode ceiling says it does."""
    import numpy as np
    ns = np.asarray(list(ns), dtype=int)
    if ns.size == 0 or ns.min() < 1:
        raise BadInput("concurrency values must be >= 1")
    if bank is None:
        fills = assumption("decode.fills") if fills is None else fills
        bank = ContextBank(sample_contexts, fills, seed, setup.topk_tokens)
    elif bank.topk_tokens != setup.topk_tokens:
        raise BadInput("the context bank was drawn for another top-k / window than this decode setup")
    bank._grow(int(ns.max()))
    out = np.array([percentiles(_speeds(setup, bank, int(n)), (5, 50, 95)) for n in ns])
    return {"n": ns, "p5": out[:, 0], "p50": out[:, 1], "p95": out[:, 2], "aggregate_p50": ns * out[:, 1]}


def decode_mfu(setup: DecodeSetup, ns: Iterable[int], bank: ContextBank) -> np.ndarray | None:
    """Decode's effective MFU at each n in ``ns``: the FLOPs one step executes (n sequences x query tokens x F, the
    drafts, the attention over the contexts) over the step's roofline time, as a share of the group's dense peak
    (tp x peak FLOP/s), p50 over the fills; None where the GPU's FLOP/s are not priced. A memory-bound step at
    small n leaves most of the peak idle: this is how far from compute-bound decode runs.

        MFU(n) = step_flops(n) / step_seconds(n) / (tp x peak_flops_per_s)"""
    import numpy as np
    if not setup.prices_compute:
        return None
    ns = np.asarray(list(ns), dtype=int)
    bank._grow(int(ns.max()))
    out = []
    for n in ns:
        step, flops = _legs(setup, bank, int(n))
        out.append(percentile50(np.asarray(flops, dtype=float) / setup.step_seconds(step, flops, int(n))
                        / (setup.tp * setup.peak_flops_per_s)))
    return np.array(out)


@frozen
class DecodeCeiling(Record):
    """The largest number of concurrent decoders whose p50 per-user speed meets the floor."""

    n: int = field(metadata=json_as("decode_ceiling"))
    floor_tok_s: float
    at_ceiling: DecodeSpeed | None
    p50_one_more_tok_s: float
    evaluations: int = field(metadata=json_as(None))
    derivation: Derivation

    JSON_EXTRA = ("p50_at_ceiling_tok_s",)

    @property
    def p50_at_ceiling_tok_s(self) -> float | None:
        return None if self.at_ceiling is None else self.at_ceiling.p50_tok_s


def decode_ceiling(
    setup: DecodeSetup,
    sample_contexts: ContextSampler | None,
    floor_tok_s: float | None = None,
    fills: int | None = None,
    seed: int = 0,
    max_n: int = 1 << 16,
    bank: ContextBank | None = None,
) -> DecodeCeiling:
    """Largest n with p50 per-user tok/s >= floor, by bisection (p50 is monotone in n under CRN).

    Returns n = 0 when even one decoder misses the floor. Refuses (BadInput) rather than
    report a censored value when the floor is still met at ``max_n`` decoders. ``bank``: contexts
    already drawn (a ContextBank with the setup's top-k), shared across floors and setups.
    """
    floor = assumption("decode.floor_hard_tok_s") if floor_tok_s is None else float(floor_tok_s)
    if floor <= 0:
        raise BadInput(f"decode floor must be > 0 tok/s, got {floor!r}")
    if bank is None:
        fills = assumption("decode.fills") if fills is None else fills
        bank = ContextBank(sample_contexts, fills, seed, setup.topk_tokens)
    elif bank.topk_tokens != setup.topk_tokens:
        raise BadInput("the context bank was drawn for another top-k / window than this decode setup")
    seen: dict[int, float] = {}

    def p50(n: int) -> float:
        if n not in seen:
            seen[n] = percentile50(_speeds(setup, bank, n))
        return seen[n]

    d = Derivation()
    lo, at_least = largest_meeting(p50, floor, max_n, first_probe=_BLOCK)
    if lo == 0:
        first = p50(1)
        d.step("decode_ceiling", "0", note=f"one decoder alone runs at {first:.1f} tok/s (p50), under the {floor:g} tok/s floor")
        return DecodeCeiling(0, floor, None, first, len(seen), d)
    if at_least:
        raise FloorNeverReached(
            f"per-user decode stays above {floor:g} tok/s beyond {max_n} concurrent decoders; "
            "the decode ceiling is not the binding constraint here (raise max_n to locate it)"
        )
    at = _speed_result(setup, bank, lo)
    above = p50(lo + 1)
    d.extend(at.derivation)
    d.step(
        "decode_ceiling", "n", note=(
            f"largest n with p50 >= {floor:g} tok/s: {at.p50_tok_s:.2f} tok/s at n = {lo}, "
            f"{above:.2f} at n = {lo + 1} (bisection over one bank of {bank.fills} fills, common random numbers)"
        ), n=lo,
    )
    return DecodeCeiling(lo, floor, at, above, len(seen), d)


def largest_meeting(p50: Callable[[int], float], floor: float, cap: int, first_probe: int = 2) -> tuple[int, bool]:
    """The decode ceiling's search, the one every caller runs (``decode_ceiling`` here, the teams' and the fleet's
    searches): ``(n, at_least)``, the largest n <= ``cap`` whose p50 per-user speed ``p50(n)`` meets ``floor``, and
    whether the floor still holds at ``cap`` (n = cap is then only a lower bound); n = 0 when one decoder alone misses
    it. p50 is monotone in n over one bank of contexts (common random numbers), so the search galloping up from
    ``first_probe`` (the work follows the answer, not the cap) and then bisecting finds the one answer."""
    cap = max(1, int(cap))
    if p50(1) < floor:
        return 0, False
    lo, hi = 1, max(2, int(first_probe))
    while hi < cap and p50(hi) >= floor:
        lo, hi = hi, 2 * hi
    if hi >= cap:
        if p50(cap) >= floor:
            return cap, True
        hi = cap
    while hi - lo > 1:  # p50(lo) >= floor > p50(hi)
        mid = (lo + hi) // 2
        if p50(mid) >= floor:
            lo = mid
        else:
            hi = mid
    return lo, False
