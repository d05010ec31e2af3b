"""Weight bytes per GPU, by precision, sharded across tensor-parallel ranks.

Following the calculator seed's "The arithmetic" (its figures: tests/fixtures/seeds.json,
seed-002-capacity-calculator): embeddings and the
LM head stay at 16 bits unless the checkpoint quantises them; quantised matrices cost
``bits/8`` bytes per weight plus a scale overhead (0.125 bit/weight at 8-bit, 0.156 at 4-bit:
a group-128 fp16 scale, plus a packed 4-bit zero point at 4-bit). Formats that define their
own scales (MXFP4: one 8-bit exponent per 32 values; NVFP4: one fp8 scale per 16) use them,
and so does a checkpoint whose ``quantization_config`` says otherwise (fp8 with 128x128
blocks: one fp32 scale per 16,384 weights).
"""

from __future__ import annotations

from servesize.derivation import Derivation
from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.model.architecture import DTYPE_BYTES, Architecture
from servesize.model.layers import MLA
from servesize.model.ledger import ParamLedger, parameter_ledger
from servesize.units import cdiv

# precision -> (bits per weight, scale overhead in bits per weight, why). The first seven are the
# calculator seed's planning conventions (servesize fit --precision); the rest are what vLLM does to
# a 16-bit checkpoint at load time for an online --quantization method (data/quantization.toml).
PRECISIONS: dict[str, tuple[int, float, str]] = {
    "bf16": (16, 0.0, "16-bit weights, no scales"),
    "fp16": (16, 0.0, "16-bit weights, no scales"),
    "fp8": (8, 0.125, "calculator seed: group-128 fp16 scale = 16/128 bit"),
    "int8": (8, 0.125, "calculator seed: group-128 fp16 scale = 16/128 bit"),
    "int4": (4, 0.156, "calculator seed: g128 fp16 scale + 4-bit zero = (16+4)/128 bit"),
    "mxfp4": (4, 0.25, "OCP MX: one 8-bit (E8M0) scale per 32 values = 8/32 bit"),
    "nvfp4": (4, 0.5, "NVFP4: one fp8 (E4M3) scale per 16 values = 8/16 bit"),
    "fp8_per_tensor": (8, 0.0, "vLLM online fp8: one fp32 scale per tensor"),
    "fp8_per_channel": (8, 0.0, "vLLM online fp8: one fp32 scale per output row (32 / in_features bit, < 0.01)"),
    "fp8_per_block": (8, 32 / (128 * 128), "vLLM online fp8: one fp32 scale per 128 x 128 block"),
    "int8_per_channel": (8, 0.0, "vLLM online int8: one scale per output row (< 0.01 bit)"),
    "mxfp8": (8, 8 / 32, "MXFP8: one E8M0 scale per 32 values"),
    "nvfp4_per_token": (4, 8 / 16, "vLLM online NVFP4: one fp8 scale per 16 values"),
    "experts_int8": (8, 0.0, "vLLM experts_int8: int8 experts, one scale per output row"),
    "bnb_nf4": (4, 8 / 64 + 32 / (64 * 256), "bitsandbytes 4-bit, blocks of 64 with double-quantised absmax (8 bit per "
                "block, fp32 per 256 blocks)"),
}
# Precisions that convert only some groups (the rest stay 16-bit).
PRECISION_GROUPS: dict[str, tuple[str, ...]] = {"experts_int8": ("experts",)}
PRECISION_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "auto": "native", "awq": "int4",
                     "gptq": "int4", "fp8_e4m3": "fp8", "w4a16": "int4", "w8a8": "int8"}

# Groups whose matrices a quantiser converts. Embedding and LM head stay 16-bit unless the
# checkpoint says otherwise; norms, biases, conv kernels, routers and vision towers stay 16-bit.
QUANTISABLE_GROUPS = ("attention", "linear_attention", "mlp", "experts", "shared_experts", "indexer", "mtp")
# Groups vLLM keeps whole on every TP rank; everything else is sharded (vocab-parallel embedding and
# LM head included).
REPLICATED_GROUPS = ("norms", "router")
EXPERT_GROUPS = ("experts",)


def normalise_precision(name: str) -> str:
    key = PRECISION_ALIASES.get(name.lower(), name.lower())
    if key != "native" and key not in PRECISIONS:
        raise BadInput(f"precision {name!r} is not one of native, {', '.join(PRECISIONS)}")
    return key


@frozen
class Placement:
    """How a replica's weights spread over its GPUs (the rank that holds the most is the one sized).

    tp              tensor-parallel ranks: sharded groups divide by it
    ep              expert-parallel ranks (TP x DP with --enable-expert-parallel, else 1): each holds
                    ceil(E / ep) whole experts instead of 1/tp of every expert
    stage           (first layer, last layer + 1, pp) of the pipeline stage sized; None: one stage
    replicated      params of sharded groups that vLLM replicates on every TP rank, by group (MLA's
                    q_a_proj and kv_a_proj_with_mqa are ReplicatedLinear)
    skip            groups not loaded at all (the vision tower in language-model-only mode)
    """

    tp: int = 1
    ep: int = 1
    stage: tuple[int, int, int] | None = None
    replicated: tuple[tuple[str, int], ...] = ()
    skip: tuple[str, ...] = ()


@frozen
class GroupBytes:
    group: str
    params: int
    quantised_params: int
    bits: float  # bits per quantised weight including scale overhead
    bytes: int
    sharded: bool


@frozen
class Weights:
    precision: str
    tp: int
    groups: tuple[GroupBytes, ...]
    total_bytes: int
    per_gpu_bytes: int
    ledger: ParamLedger
    derivation: Derivation

    def to_dict(self) -> dict:
        return {
            "precision": self.precision, "tensor_parallel_size": self.tp,
            "total_bytes": self.total_bytes, "per_gpu_bytes": self.per_gpu_bytes,
            "groups": {g.group: {"params": g.params, "quantised_params": g.quantised_params,
                                 "bits_per_quantised_weight": g.bits, "bytes": g.bytes, "sharded": g.sharded}
                       for g in self.groups},
        }


def _native_group_bits(arch: Architecture, group: str) -> float | None:
    """Bits per weight the checkpoint stores a group's matrices in; None = unquantised."""
    q = arch.quantization
    if q is None or group not in QUANTISABLE_GROUPS:
        return None
    if q.method == "fp8":
        # Block-wise fp8 (128x128): one fp32 scale per block; per-tensor fp8: negligible.
        scale_bits = 32 / (q.block[0] * q.block[1]) if q.block else 0.0
        return 8 + scale_bits
    if q.method == "mxfp4":
        return 4 + 8 / 32 if group in ("experts",) else None  # gpt-oss: only the experts are MXFP4
    if q.method == "nvfp4":
        return 4 + 8 / 16
    if q.method in ("int4", "int8"):
        g = q.group_size
        zero_bits = q.bits if q.zero_point else 0  # GPTQ/AWQ pack a zero per group; symmetric schemes store none
        scale_bits = (16 + zero_bits) / g if g else 0.0
        return q.bits + scale_bits
    if q.method == "bnb4":
        # absmax per 64-block: fp32, or (double-quantised) 8-bit plus an fp32 per 256 blocks
        return 4 + (8 / 64 + 32 / (64 * 256) if q.double_quant else 32 / 64)
    if q.method == "mxfp8":
        return 8 + 8 / 32
    if q.method == "mixed":
        return _mixed_group_bits(q.per_module, group)
    return None


def _mixed_group_bits(per_module: tuple[tuple[str, str], ...], group: str) -> float | None:
    """ModelOpt quantized_layers: the algorithm most of the group's listed modules use (FP8, else NVFP4);
    None when none is listed (unquantised)."""
    marker = {"attention": ("self_attn",), "linear_attention": ("linear_attn",), "experts": ("experts",),
              "shared_experts": ("shared_expert",), "mlp": ("mlp.",), "mtp": ("mtp",)}.get(group, ())
    algos = [a for name, a in per_module if any(m in name for m in marker)
             and not (group == "mlp" and ("experts" in name or "shared_expert" in name))]
    if not algos:
        return None
    algo = max(set(algos), key=algos.count)
    return 8.0 if algo == "FP8" else 4 + 8 / 16


def _group_bits(arch: Architecture, group: str, precision: str) -> float | None:
    """Bits per quantised weight of ``group`` at ``precision``; None = left at 16 bits."""
    if precision == "native":
        return _native_group_bits(arch, group)
    only = PRECISION_GROUPS.get(precision)
    if only is not None and group not in only:
        return None
    if group in QUANTISABLE_GROUPS and PRECISIONS[precision][0] < 16:
        return PRECISIONS[precision][0] + PRECISIONS[precision][1]
    return None


def mla_replicated_params(arch: Architecture, layers: int | None = None) -> int:
    """MLA projections vLLM keeps whole on every TP rank: q_a_proj (hidden -> q_lora_rank) and
    kv_a_proj_with_mqa (hidden -> kv_lora_rank + rope), ReplicatedLinear in deepseek_v2.py (fused
    as fused_qkv_a_proj with disable_tp=True in newer releases); their two RMSNorms too."""
    if not arch.kv_lora_rank:
        return 0
    n = arch.count(MLA) if layers is None else layers
    q_lora = arch.q_lora_rank or 0
    return n * (arch.hidden_size * (q_lora + arch.kv_lora_rank + (arch.qk_rope_head_dim or 0)) + q_lora + arch.kv_lora_rank)


def _layers_with(arch: Architecture, group: str) -> list[int]:
    """The decoder layers a ledger group's parameters live in (for splitting them over PP stages)."""
    n = arch.num_layers
    moe = arch.moe
    if group == "attention":
        return [i for i, layer in enumerate(arch.layers) if layer.is_attention]
    if group == "linear_attention":  # a recurrent layer, or a layer with a mixer beside its attention (Falcon-H1)
        return [i for i, layer in enumerate(arch.layers) if not layer.is_attention or i < len(arch.mixers)]
    if group == "indexer":
        if arch.indexer_layers is not None:  # IndexShare: vLLM builds the indexer on the 'full' layers only
            return list(arch.indexer_layers)
        return [i for i, layer in enumerate(arch.layers) if layer.kind == MLA]
    if group in ("experts", "router", "shared_experts") and moe is not None:
        return arch.moe_layer_ids
    if group == "mlp" and moe is not None:
        routed = set(arch.moe_layer_ids)
        return [i for i in range(n) if i not in routed]
    return list(range(n))


def stage_share(arch: Architecture, group: str, stage: tuple[int, int, int] | None) -> float:
    """The fraction of a group's parameters on one pipeline stage (vLLM get_pp_indices ranges): the
    embedding (and a multimodal encoder) on the first, the LM head (and MTP module) on the last."""
    if stage is None or stage[2] == 1:
        return 1.0
    first, last, pp = stage
    is_first, is_last = first == 0, last == arch.num_layers
    if group in ("embedding", "vision"):
        return 1.0 if is_first else 0.0
    if group in ("lm_head", "mtp"):
        return 1.0 if is_last else 0.0
    layers = _layers_with(arch, group)
    return sum(1 for i in layers if first <= i < last) / len(layers) if layers else 0.0


def weights(arch: Architecture, precision: str = "native", tp: int = 1, *, dtype: str | None = None,
            include_mtp: bool = False, ledger: ParamLedger | None = None, placement: Placement | None = None) -> Weights:
    """Weight bytes for the whole model and on the GPU that holds the most under ``placement``
    (default: ``tp``-way tensor parallel, one stage).

    ``precision`` is ``native`` (what the checkpoint stores) or one of PRECISIONS applied to
    every quantisable matrix; ``dtype`` is the 16-bit type of everything left unquantised.
    """
    precision = normalise_precision(precision)
    placement = placement or Placement(tp=tp)
    ledger = ledger or parameter_ledger(arch)
    high_bytes = DTYPE_BYTES[dtype] if dtype and dtype != "auto" else arch.dtype_bytes
    d = Derivation()
    groups: list[GroupBytes] = []
    for group, params in ledger.groups.items():
        if params == 0 or (group == "mtp" and not include_mtp) or group in placement.skip:
            continue
        linear = ledger.linear.get(group, 0)
        if group == "indexer" and arch.indexer_count < arch.num_layers:
            # IndexShare: the checkpoint ships an indexer on every layer, vLLM loads it on the 'full' ones only
            # (deepseek_v2.py load_weights drops the rest).
            params = d.step("indexer_loaded_params", "params // layers * full_layers", params=params,
                            layers=arch.num_layers, full_layers=arch.indexer_count)
            linear = linear // arch.num_layers * arch.indexer_count
        bits = _group_bits(arch, group, precision)
        if bits is None:
            n_bytes = d.step(f"{group}_bytes", "params * bytes_16bit", unit="B", params=params, bytes_16bit=high_bytes)
            quantised = 0
            bits_out = 8.0 * high_bytes
        else:
            n_bytes = d.step(f"{group}_bytes", "quantised * bits / 8 + (params - quantised) * bytes_16bit", unit="B",
                             quantised=linear, bits=round(bits, 5), params=params, bytes_16bit=high_bytes)
            quantised = linear
            bits_out = bits
        groups.append(GroupBytes(group, params, quantised, bits_out, int(n_bytes), group not in REPLICATED_GROUPS))
    sharded_total = sum(g.bytes for g in groups if g.sharded)
    replicated_total = sum(g.bytes for g in groups if not g.sharded)
    total = d.step("weights_bytes", "sharded + replicated", unit="B", sharded=sharded_total, replicated=replicated_total)
    per_gpu = _per_gpu(arch, groups, ledger, placement, d)
    label = precision if precision != "native" else f"native ({arch.quantization.method if arch.quantization else arch.dtype})"
    return Weights(label, placement.tp, tuple(groups), int(total), int(per_gpu), ledger, d)


def _per_gpu(arch: Architecture, groups: list[GroupBytes], ledger: ParamLedger, placement: Placement, d: Derivation) -> int:
    """The bytes on the busiest GPU: sharded groups / tp (less what vLLM replicates), whole experts over
    the EP ranks, replicated groups in full; each group's share of the pipeline stage."""
    tp, ep = placement.tp, placement.ep
    replicated = dict(placement.replicated)
    sharded = whole = experts = 0.0
    for g in groups:
        share = stage_share(arch, g.group, placement.stage)
        if g.group in EXPERT_GROUPS and ep > 1 and ledger.num_experts:
            per_rank = cdiv(ledger.num_experts, ep)
            experts += share * g.bytes * per_rank / ledger.num_experts
        elif not g.sharded:
            whole += share * g.bytes
        elif g.group in replicated and g.params:
            kept = g.bytes * replicated[g.group] / g.params  # the replicated params at the group's bytes per param
            whole += share * kept
            sharded += share * (g.bytes - kept)
        else:
            sharded += share * g.bytes
    if placement.stage is not None and placement.stage[2] > 1 and arch.tie_word_embeddings and placement.stage[1] == arch.num_layers:
        tied = next((g.bytes for g in groups if g.group == "embedding"), 0)
        sharded += tied  # the last stage holds its own copy of the tied LM head (the embedding lives on the first)
    notes = "sharded matrices, embedding and LM head split over TP; norms, routers"
    notes += " and MLA's q_a/kv_a projections replicated" if replicated else " replicated"
    if ep > 1:
        notes += f"; experts whole, ceil({ledger.num_experts} / {ep}) per rank"
    if placement.stage is not None and placement.stage[2] > 1:
        notes += f"; pipeline stage of layers {placement.stage[0]}..{placement.stage[1] - 1} of {placement.stage[2]} stages"
    return int(d.step("weights_bytes_per_gpu", "ceil(sharded / tp) + replicated + experts_per_rank", unit="B",
                      sharded=int(sharded), tp=tp, replicated=int(whole), experts_per_rank=int(experts), note=notes))
