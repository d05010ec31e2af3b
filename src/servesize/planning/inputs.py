"""What the planner takes: the modelled knobs, and what one deployment's memory report fixes.

- ``Knobs``: every modelled choice (bandwidth efficiency, MTP, floors, MFU, TTFT limit, CPU offload,
  routing, Monte-Carlo sizes); None means the named assumption's value (data/assumptions.toml) for
  ``assumptions`` ('default' or the warm-capacity seed's values, 'seed').
- ``Fixed``: one replica's KV pool in tokens (or a measured pool: --pool-tokens, a calibration
  file), b = KV bytes per token per rank, and the recurrent-state charge per warm session = sum over
  the GDN/Mamba groups of page_bytes x group_size (one cached state block per group: every layer of
  a group holds one page for the session); weights read per decode step; GEMM parameters; hardware.
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, Any

from servesize.assumptions import assumption
from servesize.derivation import Derivation
from servesize.engine.quant_methods import ServedWeights, served_weights
from servesize.engine.speculative import mtp_draft
from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.limits import DEFAULT_DRAWS, DEFAULT_FILLS, DEFAULT_SEED
from servesize.model.architecture import CHUNKED, FULL, GDN, MAMBA, MLA, SLIDING, WindowedAttention
from servesize.planning.decode import dense_weights_read_per_step, mtp_speedup
from servesize.workload.model import Workload

if TYPE_CHECKING:
    from servesize.engine.memory import MemoryReport
    from servesize.engine.pool import KvPool
    from servesize.model.architecture import Architecture
    from servesize.model.hardware import Gpu
    from servesize.model.ledger import ParamLedger

# the planning percentiles in words, as every face states them (here, not in plan.py: api reads it without numpy)
PLANNING_PERCENTILE = ("planned for the warm users 19 in 20 simulated fills of the cache keep (p5) and the median "
                       "per-user decode (p50)")

STATE_KINDS = (GDN, MAMBA)
NOT_READ_IN_DECODE = ("vision", "mtp")  # text decode never streams the vision tower; the MTP head is the draft


@frozen
class Knobs:
    """Every modelled choice the planner takes; None = the assumption's value for ``assumptions``."""

    assumptions: str = "default"           # 'default' | 'seed'
    bandwidth_efficiency: float | None = None
    tp_efficiency: float | None = None
    mtp_speedup: float | None = None
    spec_acceptance: float | None = None
    spec_tokens: int | None = None
    decode_floor: float | None = None
    comfortable_floor: float | None = None
    mfu: float | None = None
    ttft_limit_s: float | None = None
    price_per_kwh: float | None = None
    currency: str | None = None
    pue: float | None = None
    compute_efficiency: float | None = None
    cpu_offload_bytes: float = 0.0
    sticky_routing: bool = True
    fills: int = DEFAULT_FILLS
    draws: int = DEFAULT_DRAWS
    seed: int = DEFAULT_SEED
    decode_fills: int | None = None
    prefill_samples: int | None = None
    overrides: tuple[tuple[str, Any], ...] = ()  # ((assumption name, value), ...): one assumption switched (the seed line)
    calibrated: tuple[tuple[str, str], ...] = ()  # (knob, where), ...: knobs a step-model calibration set (calibrate --vllm-bench)

    def a(self, name: str) -> Any:
        for key, value in self.overrides:
            if key == name:
                return value
        return assumption(name, "seed" if self.assumptions == "seed" else "default")


# the flag each knob comes from, for the assumption table
KNOB_SOURCE = {
    "bandwidth_efficiency": ("decode.bandwidth_efficiency", "--bandwidth-efficiency"),
    "decode_floor": ("decode.floor_hard_tok_s", "--decode-floor"),
    "comfortable_floor": ("decode.floor_comfortable_tok_s", "--comfortable-floor"),
    "mfu": ("prefill.mfu", "--mfu"),
    "ttft_limit_s": ("latency.ttft_limit_s", "--ttft-limit"),
    "compute_efficiency": ("decode.compute_efficiency", "--decode-compute-efficiency"),
    "price_per_kwh": ("power.price_per_kwh", "--electricity-price"),
    "currency": ("power.currency", "--currency"),
    "pue": ("power.pue", "--pue"),
}


@frozen
class Fixed:
    """What the memory report fixes for the plan: bytes, pool, topology, hardware."""

    name: str
    hf_id: str
    tp: int
    dp: int
    n_gpu: int
    gpu_key: str
    bandwidth_bytes_per_s: float
    peak_flops_per_gpu: float
    peak_dtype: str
    tdp_w: float | None
    pool_tokens: float
    pool_source: str
    kv_bytes_per_token_rank: int
    state_bytes_rank: int
    weight_bytes_read: float           # dense, or the MoE shared part
    expert_bytes: float                # 0 for dense
    num_experts: int
    experts_per_token: int
    gemm_params: float
    attention_width: int
    full_attention_layers: int
    has_mtp: bool
    kv_cache_dtype: str
    max_model_len: int
    memory: dict[str, Any]
    derivation: Derivation = field(compare=False, repr=False)
    window_tokens: int = 0             # sliding / chunked layers: what each decode step reads at most
    window_bytes_per_token_rank: int = 0
    window_bytes_per_session_rank: int = 0  # the window's blocks a warm session keeps resident
    window_attention_layers: int = 0   # sliding / chunked layers: each attends over min(L, window)
    lm_head_params: float = 0.0        # the output projection (the embedding when tied): every decoded token
    lm_head_bytes: float = 0.0
    mtp_matmul_params: float = 0.0     # the MTP module's matmul weights (one draft pass each)
    mtp_bytes: float = 0.0             # its bytes, when the deployment serves it
    served: ServedWeights = field(default_factory=ServedWeights)  # what the recipe passes vLLM for these weights
    host_link: str = ""                # the GPU's link to host RAM (gpus.toml); empty: not catalogued
    host_link_bytes_per_s: float = 0.0  # its one-way signalling rate per GPU, B/s
    host_link_source: str = ""
    weight_format: str = "bf16"        # the GEMMs' kernel family (planning.step_model.WEIGHT_FORMATS)
    vendor: str = "NVIDIA"             # the GPU's maker (gpus.toml): kernels differ by vendor
    memory_kernel_factor: float = 1.0  # its memory-bound kernels' measured rate against the fit's GPUs'
                                       # (model.hardware.memory_kernel_factor; step.gpu_memory_kernels)
    fp8_prefill_share: float = 0.0  # its FP8 GEMMs' measured share of the FP8 peak over its bf16 GEMMs' of theirs,
                                    # for these weights' scales (gpus.toml; step.gpu_fp8_prefill_kernels); 0: none
    layers: int = 0                    # decoder layers (each launches its kernels every step)
    moe_layers: int = 0                # of them, those with routed experts (each launches a fused MoE kernel)
    block_size: int = 0                # the pool's (attention) block: a prompt's cache and a hybrid's state start at one
    drops_hit_block: bool = False      # MTP / EAGLE drafts: vLLM computes a prefix hit's last block again
    chunk_tokens: int = 8192           # --max-num-batched-tokens as the engine settles it: a step's token budget
    expert_gemm_params: float = 0.0    # of gemm_params, the routed experts' a token runs through (k of E)
    expert_kernel_bytes_per_s: float = 0.0  # the measured rate the routed experts' MoE kernel reads them at, one GPU:
                                            # FP4 without FP4 tensor cores (gpus.toml fp4_moe_tbps) or bf16
                                            # (bf16_moe_tbps); 0: none measured for this format and GPU
    expert_kernel_rule: str = ""  # the assumption that takes that rate or leaves it (step.fp4_moe_kernel_rate, ...)


def _pool_tokens(d: Derivation, pool: KvPool, pool_tokens: float | None, pool_source: str | None) -> tuple[float, str]:
    """The pool one replica holds: the modelled one, or a measured one that replaces it."""
    if pool_tokens is None:
        src = pool_source or "modelled: engine budget (servesize memory)"
        pool_t = d.given("pool_tokens", int(pool.usable_kv_tokens), unit="tokens",
                         source=f"memory report ({src}): usable KV tokens of one replica")
        return pool_t, src
    pool_t = d.given("pool_tokens", float(pool_tokens), unit="tokens", source=pool_source or "--pool-tokens",
                     note="a measured pool replaces the modelled one")
    return pool_t, pool_source or "--pool-tokens"


def _state_bytes(d: Derivation, pool: KvPool) -> int:
    """One cached state block per GDN/Mamba group a session holds, one rank (0 without state layers)."""
    state_groups = [g for g in pool.groups if g.kind in STATE_KINDS]
    if not state_groups:
        return 0
    pages = [g.page_bytes for g in state_groups]
    if len(set(pages)) == 1:
        state_bytes: int = d.step("state_bytes_per_session_rank", "state_groups * page_bytes * group_size", unit="B",
                                  note="one cached state block per GDN/Mamba group: a page in each of the group's layers",
                                  state_groups=len(state_groups), page_bytes=pages[0], group_size=pool.group_size)
    else:
        state_bytes = d.given("state_bytes_per_session_rank", sum(p * pool.group_size for p in pages), unit="B")
    return state_bytes


def _window_charges(d: Derivation, pool: KvPool, arch: Architecture) -> tuple[int, int, int, int]:
    """Sliding-window / chunked-local groups: a warm session keeps about one window of blocks in each (vLLM
    frees what falls out of the window), and every decode step reads up to a window. Returns (window tokens,
    bytes per token, bytes per session, windowed layers), all 0 without such groups."""
    window_groups = [g for g in pool.groups if g.kind in (SLIDING, CHUNKED)]
    window = next((layer.window for layer in arch.layers if isinstance(layer, WindowedAttention)), 0) or 0  # sliding, chunked
    window_bpt = window_charge = 0
    if window_groups and window:
        per_group = [(-(-window // g.block_size) + 1) * g.page_bytes * pool.group_size for g in window_groups]
        window_charge = d.step("window_bytes_per_session_rank", "sum(per_group)", unit="B", per_group=per_group,
                               note=f"(cdiv({window}, block) + 1) blocks in each of {len(window_groups)} sliding/chunked group(s)")
        window_bpt = d.step("window_bytes_per_token_rank", "page_bytes // block_size * layers", unit="B",
                            page_bytes=window_groups[0].page_bytes, block_size=window_groups[0].block_size,
                            layers=sum(g.layers for g in window_groups))
    if not window_groups:
        return 0, int(window_bpt), int(window_charge), 0
    layers = sum(1 for layer in arch.layers if layer.kind in (SLIDING, CHUNKED))
    return int(window), int(window_bpt), int(window_charge), layers


def _weight_bytes_read(d: Derivation, groups: dict[str, int], ledger: ParamLedger, arch: Architecture,
                       seed_convention: bool) -> float:
    """Weights read per decode step, whole group: MoE reads all but the routed experts, dense every text weight."""
    skip = ("mtp",) if seed_convention else NOT_READ_IN_DECODE  # the seed streams the whole checkpoint
    text_total = sum(v for k, v in groups.items() if k not in skip)
    experts = groups.get("experts", 0)
    if experts:
        shared = text_total - experts
        if not (ledger.groups.get("embedding") and bool(arch.tie_word_embeddings)) and not seed_convention:
            shared -= groups.get("embedding", 0)
        read: float = d.given("weight_bytes_read_shared", float(shared), unit="B",
                              note="MoE: everything but the routed experts (and the embedding gather), read every step")
    else:
        read = d.given("weight_bytes_read", dense_weights_read_per_step(
            text_total, groups.get("embedding", 0), bool(arch.tie_word_embeddings), seed_convention=seed_convention),
            unit="B", note=("seed convention: the whole checkpoint (text) is read each step" if seed_convention else
                            "every text weight once per step, the input embedding only gathered"))
    return read


def _lm_head(ledger: ParamLedger, groups: dict[str, int]) -> tuple[float, float]:
    """The output projection's parameters and bytes: the embedding's when tied."""
    tied = not ledger.groups.get("lm_head")
    key = "embedding" if tied else "lm_head"
    return float(ledger.groups.get(key, 0)), float(groups.get(key, 0))


def _peak_flops(d: Derivation, gpu: Gpu, precision: str) -> tuple[float, str]:
    """The GPU's dense peak at the weights' compute dtype (fp8 where both have it), 0 with no published figure."""
    prec = str(precision).lower()
    dtype = "fp8" if ("fp8" in prec and getattr(gpu, "fp8", False)) else "bf16"
    try:
        peak = gpu.dense_flops_per_s(dtype)
        d.given("peak_flops_per_gpu", peak, unit="FLOP/s", source=f"GPU catalogue: {gpu.key} dense {dtype}")
    except BadInput:  # no published figure: the ceilings that need it say so, the others are computed
        peak = 0.0
        d.given("peak_flops_per_gpu", peak, unit="FLOP/s", note=f"{gpu.key} has no dense {dtype} figure; give --gpu-flops")
    return float(peak), dtype


def _memory_summary(report: MemoryReport) -> dict[str, Any]:
    """The memory report's figures the plan shows beside its own."""
    pool, w, dep = report.pool, report.weights, report.deployment
    return {
        "weights_bytes_per_gpu": w.per_gpu_bytes, "weights_bytes_total": w.total_bytes,
        "weights_precision": w.precision,
        "available_kv_bytes_per_gpu": report.budget.available_bytes,
        "modelled_pool_tokens": pool.usable_kv_tokens, "kv_cache_tokens_logged": pool.kv_cache_tokens,
        "kv_bytes_per_token_per_rank": pool.kv_bytes_per_token, "block_size": pool.block_size,
        "num_blocks": pool.num_blocks, "group_size": pool.group_size,
        "state_bytes_per_sequence_per_rank": pool.state_bytes_per_sequence,
        "log_lines": list(pool.log_lines),
        "gpu_memory_utilization": dep.gpu_memory_utilization,
    }


def weight_format_of(precision: str, arch: Architecture) -> str:
    """The kernel family the weights run through: bf16, fp8_tensor, fp8_block, int8, int4 or fp4 (what the step
    model's kernel efficiencies are keyed by), from the memory report's precision and the checkpoint's own
    quantization_config where the precision is the checkpoint's ('native')."""
    prec = str(precision).lower()
    q = getattr(arch, "quantization", None)
    if prec.startswith("native"):
        if q is None:
            return "bf16"
        if q.method == "fp8":
            return "fp8_block" if q.block else "fp8_tensor"
        return {"int8": "int8", "int4": "int4", "mxfp4": "fp4", "nvfp4": "fp4"}.get(q.method, "fp8_tensor")
    if "fp4" in prec:
        return "fp4"
    if "block" in prec:
        return "fp8_block"
    if "fp8" in prec:
        return "fp8_tensor"
    if "int8" in prec:
        return "int8"
    if "int4" in prec or "nf4" in prec:
        return "int4"
    return "bf16"


def fixed_from_memory(report: MemoryReport, arch: Architecture, pool_tokens: float | None = None, pool_source: str | None = None,
                      seed_convention: bool = False, hf_id: str | None = None) -> Fixed:
    """Everything the plan needs from a memory report (engine budget)."""
    pool, w, dep, gpu = report.pool, report.weights, report.deployment, report.gpus.gpu
    d = Derivation()
    tp, dp = dep.tensor_parallel_size, dep.data_parallel_size
    pool_t, src = _pool_tokens(d, pool, pool_tokens, pool_source)
    b = d.given("kv_bytes_per_token_rank", int(pool.kv_bytes_per_token), unit="B",
                source="KV pool: every layer that grows with context, one rank")
    state = _state_bytes(d, pool)
    window, window_bpt, window_charge, window_layers = _window_charges(d, pool, arch)
    groups = {g.group: g.bytes for g in w.groups}
    ledger = w.ledger
    wread = _weight_bytes_read(d, groups, ledger, arch, seed_convention)
    gemm = ledger.active - sum(ledger.groups.get(k, 0) for k in ("embedding", "lm_head", "vision"))
    d.given("gemm_params", gemm, note="active parameters minus embedding, lm_head (and vision)")
    head_params, head_bytes = _lm_head(ledger, groups)
    # architecture: attention width, full-attention layers
    width = arch.num_attention_heads * arch.head_dim
    full_layers = sum(1 for layer in arch.layers if layer.kind in (FULL, MLA))
    peak, dtype = _peak_flops(d, gpu, w.precision)
    weight_format = weight_format_of(w.precision, arch)
    assert dep.max_model_len is not None  # the memory report's deployment is resolved: its max_model_len is set
    return Fixed(
        name=report.model, hf_id=hf_id or report.model, tp=tp, dp=dp, n_gpu=tp * dp, gpu_key=gpu.key,
        bandwidth_bytes_per_s=float(gpu.bandwidth_bytes_per_s), peak_flops_per_gpu=peak, peak_dtype=dtype,
        tdp_w=getattr(gpu, "tdp_w", None), pool_tokens=float(pool_t), pool_source=src,
        kv_bytes_per_token_rank=int(b), state_bytes_rank=int(state), weight_bytes_read=float(wread),
        expert_bytes=float(groups.get("experts", 0)), num_experts=int(ledger.num_experts),
        experts_per_token=int(ledger.experts_per_token),
        gemm_params=float(gemm), attention_width=int(width), full_attention_layers=int(full_layers),
        has_mtp=mtp_draft(arch, dep.version) is not None, kv_cache_dtype=dep.kv_cache_dtype, max_model_len=int(dep.max_model_len),
        memory=_memory_summary(report),
        derivation=d, window_tokens=window, window_bytes_per_token_rank=window_bpt,
        window_bytes_per_session_rank=window_charge, window_attention_layers=window_layers,
        lm_head_params=head_params, lm_head_bytes=head_bytes,
        mtp_matmul_params=float(ledger.linear.get("mtp", 0)), mtp_bytes=float(groups.get("mtp", 0)),
        served=served_weights(arch, dep.quantization, dep.version),
        host_link=getattr(gpu, "host_link", ""), host_link_bytes_per_s=float(getattr(gpu, "host_link_bytes_per_s", 0.0)),
        host_link_source=getattr(gpu, "host_link_source", ""),
        weight_format=weight_format, vendor=str(getattr(gpu, "vendor", "NVIDIA")),
        memory_kernel_factor=_memory_kernel_factor(gpu),
        fp8_prefill_share=_fp8_prefill_share(gpu, dtype, weight_format),
        block_size=int(report.pool.block_size), drops_hit_block=dep.drops_hit_block,
        layers=len(arch.layers), moe_layers=len(arch.moe_layer_ids), chunk_tokens=int(dep.max_num_batched_tokens or 8192),
        **_expert_kernel(gpu, weight_format, dep.moe_backend),
        expert_gemm_params=float(ledger.expert_params_per_token),
    )


def _fp8_prefill_share(gpu: Gpu, peak_dtype: str, weight_format: str) -> float:
    """Where prefill runs at the FP8 peak: the GPU's measured FP8 GEMM share for these weights' scales (block-scaled
    checkpoints' own, per-tensor for the rest), 0 where it has none or the peak is not FP8's. A GPU measured with
    per-tensor scales only (the RTX PRO 6000's tables have no block rows) gives block-scaled weights that share: on
    every GPU measured with both, block scales are the slower."""
    if peak_dtype != "fp8":
        return 0.0
    block = weight_format == "fp8_block" and gpu.fp8_block_prefill_share
    return float(block or gpu.fp8_prefill_share or 0.0)


def _memory_kernel_factor(gpu: Gpu) -> float:
    """The GPU's memory-bound kernels against the fit's GPUs' (model.hardware.memory_kernel_factor)."""
    from servesize.model.hardware import memory_kernel_factor
    return memory_kernel_factor(gpu)


def _expert_kernel(gpu: Gpu, weight_format: str, moe_backend: str = "auto") -> dict[str, Any]:
    """The measured rate (B/s, one GPU) at which vLLM's MoE kernel reads routed experts of this weight format on this
    GPU, and the assumption that takes it (Fixed.expert_kernel_bytes_per_s, expert_kernel_rule):
    - FP4 on a GPU without FP4 tensor cores (its SMs dequantise them, step.fp4_moe_kernel_rate): the Marlin kernel's
      where --moe-backend marlin asks for it and it is measured (gpus.toml fp4_moe_marlin_tbps), else the default
      kernel's (fp4_moe_tbps);
    - bf16 (step.bf16_moe_kernel_rate): the Triton fused-MoE kernel's (bf16_moe_tbps), where --moe-backend leaves
      the choice to vLLM (auto: Triton on Hopper) or asks for Triton; another backend's kernel is not measured.
    Rate 0 and no rule where the format has none measured on this GPU (FP8 and INT4 experts: their fitted
    efficiencies)."""
    if weight_format == "fp4" and not getattr(gpu, "fp4", False):
        marlin = float(getattr(gpu, "fp4_moe_marlin_tbps", 0.0)) if moe_backend == "marlin" else 0.0
        rate, rule = marlin or float(getattr(gpu, "fp4_moe_tbps", 0.0)), "step.fp4_moe_kernel_rate"
    elif weight_format == "bf16" and moe_backend in ("auto", "triton"):
        rate, rule = float(getattr(gpu, "bf16_moe_tbps", 0.0)), "step.bf16_moe_kernel_rate"
    else:
        rate, rule = 0.0, ""
    return {"expert_kernel_bytes_per_s": rate * 1e12, "expert_kernel_rule": rule if rate else ""}


def spec_speedup_of(fixed: Fixed, knobs: Knobs) -> float:
    if knobs.mtp_speedup is not None:
        return float(knobs.mtp_speedup)
    if knobs.spec_acceptance is not None:
        return mtp_speedup(knobs.spec_acceptance, spec_tokens_of(knobs))
    if not fixed.has_mtp and knobs.spec_tokens is None:
        return 1.0
    if knobs.spec_tokens is not None and knobs.spec_tokens != knobs.a("decode.mtp_drafts"):
        return mtp_speedup(knobs.a("decode.mtp_acceptance"), knobs.spec_tokens)
    return float(knobs.a("decode.mtp_speedup"))


def spec_tokens_of(knobs: Knobs) -> int:
    return int(knobs.spec_tokens if knobs.spec_tokens is not None else knobs.a("decode.mtp_drafts"))


def knob_value(knobs: Knobs, name: str) -> Any:
    v = getattr(knobs, name)
    return v if v is not None else knobs.a(KNOB_SOURCE[name][0])


def ttft_queue_budget_s(knobs: Knobs) -> float:
    """What a turn's queue and prefill may take within the TTFT budget: the budget less the request's fixed cost
    (step.request_fixed_s, the API server's, which the engine simulator adds to every TTFT the client sees)."""
    return max(0.0, float(knob_value(knobs, "ttft_limit_s")) - float(knobs.a("step.request_fixed_s")))


def sub_ratio_of(workload: Workload) -> float:
    return float(workload.subagent_ratio) if workload.subagent is not None else 0.0
