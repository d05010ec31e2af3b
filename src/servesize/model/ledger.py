"""Parameter ledger: count a model's parameters from named tensor groups, as checkpoints store them.

Every count is a ``Derivation`` step written once as arithmetic over the config's fields, so
``explain()`` shows the same expression that produced the number. Groups (names used by
``weights.py``):

- ``embedding``         token embedding table (a lookup, not a matmul)
- ``lm_head``           output projection; 0 when tied to the embedding
- ``attention``         q/k/v/o (MLA: q_a/q_b/kv_a/kv_b/o), biases, q/k norms, attention sinks
- ``linear_attention``  Gated DeltaNet / Mamba2 mixers: projections, conv1d, A_log, dt_bias, norm
- ``mlp``               dense MLP layers (gate/up/down)
- ``router``            MoE router weights (+ bias, + DeepSeek's e_score_correction_bias)
- ``experts``           every routed expert (gate/up/down, + gpt-oss expert biases)
- ``shared_experts``    shared experts (+ Qwen's shared_expert_gate)
- ``norms``             decoder-layer and final norms (attention-internal norms live with attention)
- ``indexer``           DeepSeek-V3.2 sparse-attention indexer
- ``vision``            vision tower + projector of a multimodal wrapper
- ``mtp``               multi-token-prediction module(s), as stored; *not* in ``total``

``linear[group]`` is the part of a group that lives in matmul weight matrices (what a quantiser
converts); the rest is biases, norms, conv kernels, A_log, embeddings tables and the like.

Sources for the tensor layouts: Hugging Face transformers modeling files (llama, qwen2, qwen3,
qwen3_moe, qwen3_next, qwen3_5, mixtral, gpt_oss, gemma3 + siglip, llama4, deepseek_v3, mamba2, starcoder2,
exaone4, smollm3, granitemoehybrid), vLLM's commandr.py for Cohere2; each new family's total is checked
against torch's count of a tiny random-weight model (tests/integration/test_architectures.py),
DeepSeek-V3's README_WEIGHTS.md (MTP layer 61 stores its own copies of the embedding and head)
and DeepSeek-V3.2-Exp's inference/model.py (Indexer: wq_b, wk, k_norm, weights_proj).
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from servesize.derivation import Derivation
from servesize.errors import UnsupportedArchitecture
from servesize.frozen import frozen
from servesize.jsonable import Record
from servesize.model.architecture import Architecture, per_architecture
from servesize.model.families import REQUIRED, config_int
from servesize.model.layers import GDN, MAMBA, MLA, GatedDeltaNet, KvHeadAttention, Mamba2

GROUPS = ("embedding", "lm_head", "attention", "linear_attention", "mlp", "router", "experts",
          "shared_experts", "norms", "indexer", "vision", "mtp")

_DENSE = {"llama", "mistral", "qwen2", "qwen3", "phi3", "granite", "olmo2", "qwen2_5_vl", "starcoder2", "exaone4",
          "smollm3"}
# Families whose dense MLP is two biased matrices (c_fc, c_proj) and whose norms are LayerNorms with a bias:
# transformers modeling_starcoder2.py (Starcoder2MLP, nn.LayerNorm)
_FC_MLP_LAYER_NORM = {"starcoder2"}
# One norm per layer (attention and MLP in parallel off it), a weight without a bias: vLLM commandr.py
# (CohereDecoderLayer.input_layernorm, LayerNorm(weight)); its q/k/v/o carry no bias whatever attention_bias says
_PARALLEL_BLOCK = {"cohere2"}
_BIAS_FREE_ATTENTION = {"cohere2"}
_MOE = {"mixtral", "qwen2_moe", "qwen3_moe", "minimax_m2", "glm4_moe"}
_DEEPSEEK = {"deepseek_v2", "deepseek_v3", "deepseek_v32", "glm_moe_dsa"}
_WITH_INDEXER = ("deepseek_v32", "glm_moe_dsa")  # DeepSeek sparse attention (DSA)
_GDN = {"qwen3_next", "qwen3_5", "qwen3_5_moe"}
# Families whose attention_bias puts a bias on q, k and v only (o_proj has none).
_QKV_BIAS_ONLY = {"qwen2", "qwen2_moe", "glm4_moe", "qwen2_5_vl"}
# q/k RMSNorm over one head (weight of head_dim), shared by all heads.
_PER_HEAD_QK_NORM = {"qwen3", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe", "gemma3", "exaone4"}


@frozen
class ParamLedger(Record):
    name: str
    groups: dict[str, int]
    linear: dict[str, int]
    num_experts: int = 0
    experts_per_token: int = 0
    derivation: Derivation = field(default_factory=Derivation, compare=False, repr=False)
    notes: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        """Every parameter of the served model, MTP module(s) excluded (the published convention)."""
        return sum(v for g, v in self.groups.items() if g != "mtp")

    @property
    def total_with_mtp(self) -> int:
        return self.total + self.groups.get("mtp", 0)

    @property
    def expert_params_per_token(self) -> int:
        """Routed-expert parameters one token runs through: experts × k / E (exact)."""
        if not self.num_experts:
            return 0
        return self.groups["experts"] * self.experts_per_token // self.num_experts

    @property
    def active(self) -> int:
        """Parameters per token: the total with the routed experts cut to k of E."""
        return self.total - self.groups["experts"] + self.expert_params_per_token

    @property
    def active_as_published(self) -> int:
        """Active parameters as model publishers count them: the input embedding is a table lookup, not
        compute, and is left out (gpt-oss-120b 5.1B, Qwen3-30B-A3B 3.3B); the LM head stays in."""
        return self.active - self.groups.get("embedding", 0)

    @property
    def linear_total(self) -> int:
        return sum(v for g, v in self.linear.items() if g != "mtp")

    JSON_EXTRA = ("total", "total_with_mtp", "active", "active_as_published", "expert_params_per_token")

    def explain(self) -> str:
        """Each group as arithmetic over the config's fields, then the totals."""
        lines = [self.derivation.render()]
        lines.append(f"total = {self.total:,} params (all groups but mtp)")
        if self.groups.get("mtp"):
            lines.append(f"total_with_mtp = {self.total_with_mtp:,} params")
        if self.num_experts:
            lines.append(f"active = total - experts + experts × {self.experts_per_token} / {self.num_experts} = {self.active:,} params")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)

    derivation_text = explain


class _Builder:
    """Collects terms per group; each term is one derivation step."""

    def __init__(self, name: str):
        self.name = name
        self.d = Derivation()
        self.terms: dict[str, list[tuple[str, int, bool]]] = {g: [] for g in GROUPS}
        self.notes: list[str] = []

    def add(self, group: str, key: str, expression: str, *, linear: bool, note: str = "", **inputs) -> int:
        value = self.d.step(f"{group}.{key}", expression, unit="params", note=note, **inputs)
        self.terms[group].append((key, int(value), linear))
        return int(value)

    def finish(self, arch: Architecture) -> ParamLedger:
        groups: dict[str, int] = {}
        linear: dict[str, int] = {}
        term_steps = {s.name: s for s in self.d.steps}
        ordered = Derivation()  # each group's terms, then its sum
        for g in GROUPS:
            terms = self.terms[g]
            ordered.steps.extend(term_steps[f"{g}.{k}"] for k, _, _ in terms)
            if len(terms) > 1:
                inputs: dict[str, Any] = {k: v for k, v, _ in terms}  # Derivation.step inputs
                ordered.step(g, " + ".join(k for k, _, _ in terms), unit="params", **inputs)
            groups[g] = sum(v for _, v, _ in terms)
            linear[g] = sum(v for _, v, is_lin in terms if is_lin)
        moe = arch.moe
        return ParamLedger(self.name, groups, linear, moe.num_experts if moe else 0, moe.experts_per_token if moe else 0,
                           ordered, tuple(self.notes))


@per_architecture
def parameter_ledger(arch: Architecture) -> ParamLedger:
    """Count ``arch``'s parameters by tensor group; refuse designs whose tensors are not known.

    Memoised (an Architecture is frozen): ``fit`` prices every precision and TP of a model from one ledger."""
    fam = arch.model_type
    b = _Builder(arch.name)
    h, V = arch.hidden_size, arch.vocab_size
    b.add("embedding", "embed_tokens", "vocab * hidden", linear=False, vocab=V, hidden=h)
    if arch.tie_word_embeddings:
        b.add("lm_head", "lm_head", "0", linear=True, note="tied to the embedding")
    else:
        b.add("lm_head", "lm_head", "vocab * hidden", linear=True, vocab=V, hidden=h)

    if fam in _DENSE | _MOE | {"gpt_oss", "gemma3", "gemma2", "llama4", "cohere2", "granitemoehybrid", "falcon_h1"} | _GDN:
        _gqa_attention(b, arch)
    elif fam in _DEEPSEEK:
        _mla_attention(b, arch, arch.count(MLA), "attention")
    elif fam != "mamba2":
        raise UnsupportedArchitecture(fam, "the parameter ledger has no tensor layout for this family", ("model_type",))

    if fam in _GDN:
        _gdn(b, arch)
    if fam in ("mamba2", "granitemoehybrid", "falcon_h1"):
        _mamba2(b, arch)

    _ffn(b, arch, [i for i in range(arch.num_layers)], "")
    _norms(b, arch)
    if fam in _WITH_INDEXER:
        # The checkpoint ships an indexer for every layer, IndexShare's 'shared' layers too (vLLM
        # deepseek_v2.py load_weights: "the checkpoint ships indexer weights for all of them"); vLLM builds
        # and loads it only on the 'full' layers, so the resident weights are a little smaller than counted.
        _indexer(b, arch, arch.num_layers, "indexer")
        if arch.indexer_count < arch.num_layers:
            b.notes.append(f"indexer: counted on all {arch.num_layers} layers as the checkpoint ships it; vLLM "
                           f"loads it on the {arch.indexer_count} 'full' layers only (index_topk_freq, index_skip_topk_offset)")
    _vision(b, arch)
    _mtp(b, arch)
    return b.finish(arch)


# ---------------------------------------------------------------------------------------
# attention


def _gqa_attention(b: _Builder, arch: Architecture, layers: int | None = None, group: str = "attention", prefix: str = "") -> None:
    fam = arch.model_type
    n = layers if layers is not None else sum(1 for layer in arch.layers if isinstance(layer, KvHeadAttention))
    if n == 0:
        return
    h, nq, nkv, d = arch.hidden_size, arch.num_attention_heads, arch.num_kv_heads, arch.head_dim
    kind = "full-attention layers only" if fam in _GDN else ""
    if arch.attn_output_gate:
        b.add(group, prefix + "qkvo",
              "layers * (hidden * 2 * q_heads * head_dim + 2 * hidden * kv_heads * head_dim + q_heads * head_dim * hidden)",
              linear=True, note=(kind + "; " if kind else "") + "q_proj also yields the output gate (2 × q width)",
              layers=n, hidden=h, q_heads=nq, kv_heads=nkv, head_dim=d)
    else:
        b.add(group, prefix + "qkvo",
              "layers * (hidden * q_heads * head_dim + 2 * hidden * kv_heads * head_dim + q_heads * head_dim * hidden)",
              linear=True, note=kind, layers=n, hidden=h, q_heads=nq, kv_heads=nkv, head_dim=d)
    _attention_bias(b, arch, n, group, prefix)
    _qk_norm(b, arch, n, group, prefix)
    if fam == "gpt_oss":
        b.add(group, prefix + "sinks", "layers * q_heads", linear=False, note="one learned attention sink per head",
              layers=n, q_heads=nq)


def _attention_bias(b: _Builder, arch: Architecture, n: int, group: str, prefix: str) -> None:
    """The attention biases a family carries: q/k/v only, or q/k/v and the output projection."""
    fam = arch.model_type
    h, nq, nkv, d = arch.hidden_size, arch.num_attention_heads, arch.num_kv_heads, arch.head_dim
    bias = (arch.attention_bias or fam == "gpt_oss") and fam not in _BIAS_FREE_ATTENTION
    if bias:
        if fam in _QKV_BIAS_ONLY:
            b.add(group, prefix + "qkv_bias", "layers * (q_heads + 2 * kv_heads) * head_dim", linear=False,
                  layers=n, q_heads=nq, kv_heads=nkv, head_dim=d)
        else:
            b.add(group, prefix + "qkvo_bias", "layers * ((q_heads + 2 * kv_heads) * head_dim + hidden)", linear=False,
                  layers=n, q_heads=nq, kv_heads=nkv, head_dim=d, hidden=h)


def _qk_norm(b: _Builder, arch: Architecture, n: int, group: str, prefix: str) -> None:
    """q/k norms: one weight per head dimension (shared by the heads), or one per q and kv head (OLMo 2, MiniMax M2)."""
    fam, cfg = arch.model_type, arch.config
    nq, nkv, d = arch.num_attention_heads, arch.num_kv_heads, arch.head_dim
    if fam in _PER_HEAD_QK_NORM or (fam == "glm4_moe" and cfg.get("use_qk_norm")):
        b.add(group, prefix + "qk_norm", "layers * 2 * head_dim", linear=False, layers=n, head_dim=d)
    elif fam == "olmo2" or (fam == "minimax_m2" and cfg.get("use_qk_norm")):
        if fam == "minimax_m2" and cfg.get("qk_norm_type", "per_layer") != "per_layer":
            raise UnsupportedArchitecture(fam, f"qk_norm_type {cfg.get('qk_norm_type')!r} is not modelled", ("qk_norm_type",))
        b.add(group, prefix + "qk_norm", "layers * (q_heads + kv_heads) * head_dim", linear=False,
              layers=n, q_heads=nq, kv_heads=nkv, head_dim=d)


def _mla_attention(b: _Builder, arch: Architecture, n: int, group: str, prefix: str = "") -> None:
    h, nq = arch.hidden_size, arch.num_attention_heads
    nope, rope, v, kv_lora = arch.qk_nope_head_dim, arch.qk_rope_head_dim, arch.v_head_dim, arch.kv_lora_rank
    q_lora = arch.q_lora_rank
    if q_lora:
        b.add(group, prefix + "q_a_b", "layers * (hidden * q_lora_rank + q_lora_rank * heads * (qk_nope + qk_rope))",
              linear=True, note="q_a_proj, q_b_proj", layers=n, hidden=h, q_lora_rank=q_lora, heads=nq, qk_nope=nope, qk_rope=rope)
        b.add(group, prefix + "q_a_norm", "layers * q_lora_rank", linear=False, layers=n, q_lora_rank=q_lora)
    else:
        b.add(group, prefix + "q_proj", "layers * hidden * heads * (qk_nope + qk_rope)", linear=True,
              layers=n, hidden=h, heads=nq, qk_nope=nope, qk_rope=rope)
    b.add(group, prefix + "kv_a_b_o",
          "layers * (hidden * (kv_lora_rank + qk_rope) + kv_lora_rank * heads * (qk_nope + v_head) + heads * v_head * hidden)",
          linear=True, note="kv_a_proj_with_mqa, kv_b_proj, o_proj", layers=n, hidden=h, kv_lora_rank=kv_lora,
          qk_rope=rope, heads=nq, qk_nope=nope, v_head=v)
    b.add(group, prefix + "kv_a_norm", "layers * kv_lora_rank", linear=False, layers=n, kv_lora_rank=kv_lora)
    if arch.attention_bias:
        raise UnsupportedArchitecture(arch.model_type, "MLA with attention_bias is not modelled", ("attention_bias",))


def _indexer(b: _Builder, arch: Architecture, n: int, group: str, prefix: str = "") -> None:
    # DeepSeek-V3.2 Indexer: wq_b (q_lora -> heads*dim), wk (hidden -> dim), k_norm (LayerNorm: w+b), weights_proj (hidden -> heads)
    if not arch.q_lora_rank:
        raise UnsupportedArchitecture(arch.model_type, "an indexer without q_lora_rank is not modelled", ("q_lora_rank",))
    b.add(group, prefix + "wq_b_wk_weights", "layers * (q_lora_rank * index_heads * index_dim + hidden * index_dim + hidden * index_heads)",
          linear=True, layers=n, q_lora_rank=arch.q_lora_rank, index_heads=arch.index_n_heads, index_dim=arch.index_head_dim,
          hidden=arch.hidden_size)
    b.add(group, prefix + "k_norm", "layers * 2 * index_dim", linear=False, note="LayerNorm weight and bias",
          layers=n, index_dim=arch.index_head_dim)


# ---------------------------------------------------------------------------------------
# linear attention / SSM


def _gdn(b: _Builder, arch: Architecture, n: int | None = None, group: str = "linear_attention") -> None:
    n = arch.count(GDN) if n is None else n
    if n == 0:
        return
    lin = next(layer for layer in arch.layers if isinstance(layer, GatedDeltaNet))
    h = arch.hidden_size
    inputs = dict(layers=n, hidden=h, k_heads=lin.num_key_heads, k_dim=lin.key_head_dim, v_heads=lin.num_value_heads,
                  v_dim=lin.value_head_dim)
    if arch.model_type == "qwen3_next":
        b.add(group, "in_proj_qkvz_ba", "layers * hidden * (2 * k_heads * k_dim + 2 * v_heads * v_dim + 2 * v_heads)",
              linear=True, note="in_proj_qkvz (q, k, v, z) and in_proj_ba (b, a)", **inputs)
    else:
        b.add(group, "in_proj_qkv_z_b_a", "layers * hidden * (2 * k_heads * k_dim + 2 * v_heads * v_dim + 2 * v_heads)",
              linear=True, note="in_proj_qkv, in_proj_z, in_proj_b, in_proj_a (Qwen3.5 naming)", **inputs)
    b.add(group, "out_proj", "layers * v_heads * v_dim * hidden", linear=True, layers=n, v_heads=lin.num_value_heads,
          v_dim=lin.value_head_dim, hidden=h)
    b.add(group, "conv1d", "layers * conv_dim * conv_kernel", linear=False, note="depthwise conv over q, k, v; no bias",
          layers=n, conv_dim=lin.conv_dim, conv_kernel=lin.conv_kernel)
    b.add(group, "A_log_dt_bias_norm", "layers * (2 * v_heads + v_dim)", linear=False,
          note="A_log, dt_bias (per value head), gated RMSNorm over one value head", layers=n, v_heads=lin.num_value_heads,
          v_dim=lin.value_head_dim)


def _mamba2(b: _Builder, arch: Architecture) -> None:
    n = arch.count(MAMBA)
    m = next(layer for layer in arch.cache_layers if isinstance(layer, Mamba2))
    cfg = arch.config
    # GraniteMoeHybrid and Falcon-H1 spell Mamba2's bias switches mamba_proj_bias / mamba_conv_bias
    bias_key, conv_key = (("mamba_proj_bias", "mamba_conv_bias") if arch.model_type in ("granitemoehybrid", "falcon_h1")
                          else ("use_bias", "use_conv_bias"))
    if cfg.get(bias_key):
        raise UnsupportedArchitecture(arch.model_type, "Mamba2 with in/out projection biases is not modelled", (bias_key,))
    b.add("linear_attention", "in_out_proj", "layers * (hidden * (2 * inner + 2 * groups * d_state + heads) + inner * hidden)",
          linear=True, note="in_proj (z, x, B, C, dt) and out_proj", layers=n, hidden=arch.hidden_size, inner=m.intermediate_size,
          groups=m.n_groups, d_state=m.state_size, heads=m.num_heads)
    conv_bias = 1 if cfg.get(conv_key, True) else 0
    b.add("linear_attention", "conv1d", "layers * conv_dim * (conv_kernel + conv_bias)", linear=False,
          layers=n, conv_dim=m.conv_dim, conv_kernel=m.conv_kernel, conv_bias=conv_bias)
    if arch.model_type == "falcon_h1" and not cfg.get("mamba_rms_norm", False):
        # Falcon-H1 gates the mixer's output without a norm unless mamba_rms_norm (transformers
        # modeling_falcon_h1.py FalconH1Mixer: self.norm only then; FalconH1Config's default is False)
        b.add("linear_attention", "A_log_D_dt_bias", "layers * 3 * heads", linear=False, layers=n, heads=m.num_heads,
              note="no gated RMSNorm (mamba_rms_norm false)")
        return
    b.add("linear_attention", "A_log_D_dt_bias_norm", "layers * (3 * heads + inner)", linear=False,
          layers=n, heads=m.num_heads, inner=m.intermediate_size)


# ---------------------------------------------------------------------------------------
# feed-forward


def _require_mlp_width(family: str, width: int) -> None:
    """A dense MLP of width 0 is a config without intermediate_size (or with null), not a model without an MLP:
    counting it as nothing would have Llama-3.1-8B at 2.39B parameters."""
    if width <= 0:
        raise UnsupportedArchitecture(family, "config lacks intermediate_size (the width of its dense MLP layers), "
                                      "or gives null", ("intermediate_size",))


def _dense_mlp(b: _Builder, arch: Architecture, n: int, group: str, gated_key: str, fc_key: str) -> None:
    """Every layer's dense MLP: gate/up/down, or StarCoder2's biased c_fc/c_proj."""
    fam, h = arch.model_type, arch.hidden_size
    if arch.config.get("mlp_bias"):
        raise UnsupportedArchitecture(fam, "MLP biases are not modelled", ("mlp_bias",))
    if fam != "mamba2":  # a Mamba-2 block is its mixer alone, with no MLP
        _require_mlp_width(fam, arch.intermediate_size)
    if fam in _FC_MLP_LAYER_NORM:
        b.add(group, fc_key, "layers * 2 * hidden * intermediate", linear=True,
              note="c_fc and c_proj", layers=n, hidden=h, intermediate=arch.intermediate_size)
        b.add(group, fc_key + "_bias", "layers * (intermediate + hidden)", linear=False,
              layers=n, hidden=h, intermediate=arch.intermediate_size)
        return
    b.add(group, gated_key, "layers * 3 * hidden * intermediate", linear=True,
          layers=n, hidden=h, intermediate=arch.intermediate_size)


def _ffn(b: _Builder, arch: Architecture, layer_ids: list[int], prefix: str, *, group_dense: str = "mlp",
         group_router: str = "router", group_experts: str = "experts", group_shared: str = "shared_experts") -> None:
    fam, h, moe = arch.model_type, arch.hidden_size, arch.moe

    def key(role: str, name: str) -> str:  # unique names when every role lands in one group (MTP)
        return f"{prefix}_{role}_{name}" if prefix else name

    if moe is None:
        _dense_mlp(b, arch, len(layer_ids), group_dense, key("dense", "gate_up_down"), key("dense", "fc_proj"))
        return
    moe_ids = [i for i in layer_ids if moe.is_moe_layer(i)]
    dense_n = len(layer_ids) - len(moe_ids)
    n, E = len(moe_ids), moe.num_experts
    if dense_n:
        width = moe.dense_intermediate_size or arch.intermediate_size
        _require_mlp_width(fam, width)
        b.add(group_dense, key("dense", "gate_up_down"), "layers * 3 * hidden * intermediate", linear=True,
              note="dense (non-MoE) layers", layers=dense_n, hidden=h, intermediate=width)
    if not n:
        return
    b.add(group_router, key("router", "gate"), "layers * hidden * experts", linear=True, layers=n, hidden=h, experts=E)
    if fam == "gpt_oss":
        b.add(group_router, key("router", "gate_bias"), "layers * experts", linear=False, layers=n, experts=E)
    if _has_score_correction_bias(arch):
        b.add(group_router, key("router", "e_score_correction_bias"), "layers * experts", linear=False, layers=n, experts=E)
    b.add(group_experts, key("experts", "gate_up_down"), "layers * experts * 3 * hidden * expert_intermediate", linear=True,
          layers=n, experts=E, hidden=h, expert_intermediate=moe.expert_intermediate_size)
    if fam == "gpt_oss":
        b.add(group_experts, key("experts", "biases"), "layers * experts * (2 * expert_intermediate + hidden)", linear=False,
              note="gate_up_proj_bias and down_proj_bias", layers=n, experts=E, expert_intermediate=moe.expert_intermediate_size, hidden=h)
    if moe.shared_intermediate_size:
        b.add(group_shared, key("shared", "gate_up_down"), "layers * 3 * hidden * shared_intermediate", linear=True,
              layers=n, hidden=h, shared_intermediate=moe.shared_intermediate_size)
        if fam in ("qwen2_moe", "qwen3_next", "qwen3_5_moe"):
            b.add(group_shared, key("shared", "shared_expert_gate"), "layers * hidden", linear=True,
                  note="sigmoid gate on the shared expert: Linear(hidden, 1)", layers=n, hidden=h)


def _has_score_correction_bias(arch: Architecture) -> bool:
    cfg = arch.config
    if arch.model_type in _DEEPSEEK:
        default = "noaux_tc" if arch.model_type in ("deepseek_v3", "deepseek_v32", "glm_moe_dsa") else "greedy"
        return cfg.get("topk_method", default) == "noaux_tc"
    if arch.model_type == "glm4_moe":
        return True  # Glm4MoeTopkRouter always holds e_score_correction_bias
    if arch.model_type == "minimax_m2":
        return bool(cfg.get("use_routing_bias"))
    return False


# ---------------------------------------------------------------------------------------
# norms


def _norms(b: _Builder, arch: Architecture) -> None:
    fam, n, h = arch.model_type, arch.num_layers, arch.hidden_size
    per_layer = 4 if fam in ("gemma3", "gemma2") else 2
    note = "input, post-attention, pre- and post-feedforward RMSNorm" if per_layer == 4 else "two RMSNorms per layer"
    if fam == "mamba2":
        per_layer, note = 1, "one RMSNorm per layer"
    if fam in _PARALLEL_BLOCK:
        per_layer, note = 1, "one LayerNorm weight per layer (attention and MLP in parallel)"
    if fam in _FC_MLP_LAYER_NORM:
        b.add("norms", "layer_norms", "(layers * 2 + 1) * 2 * hidden", linear=False,
              note="two LayerNorms (weight and bias) per layer, plus the final one", layers=n, hidden=h)
        return
    b.add("norms", "layer_norms", "layers * per_layer * hidden + hidden", linear=False, note=note + ", plus the final norm",
          layers=n, per_layer=per_layer, hidden=h)


# ---------------------------------------------------------------------------------------
# vision towers


def _vision(b: _Builder, arch: Architecture) -> None:
    vc = arch.vision_config
    if not vc:
        if arch.architectures and any("ConditionalGeneration" in a for a in arch.architectures):
            b.notes.append("multimodal wrapper whose config carries no vision_config: the vision tower is not counted")
        return
    vtype = vc.get("model_type", "")
    if vtype == "siglip_vision_model":
        _siglip(b, arch, vc)
    elif vtype in ("qwen3_5", "qwen3_5_moe", "qwen3_5_vision", "qwen3_5_moe_vision", "qwen3_vl"):
        _qwen3_vl_vision(b, arch, vc)
    elif vtype in ("qwen2_5_vl", "qwen2_5_vl_vision") or (arch.model_type == "qwen2_5_vl" and "depth" in vc):
        _qwen2_5_vl_vision(b, arch, vc)
    elif vtype == "pixtral":
        _pixtral(b, arch, vc)
    else:
        raise UnsupportedArchitecture(arch.model_type, f"vision tower {vtype!r} has no tensor layout in the ledger",
                                      ("vision_config.model_type",))


def _v(arch: Architecture, vc, key: str, default: Any = REQUIRED, lo: int = 1) -> Any:
    """A vision_config count or width: a whole number (>= 1 unless said), refused naming the field."""
    return config_int(vc, key, arch.model_type, default, lo=lo, prefix="vision_config.")


def _siglip(b: _Builder, arch: Architecture, vc) -> None:
    hv, iv, n = _v(arch, vc, "hidden_size"), _v(arch, vc, "intermediate_size"), _v(arch, vc, "num_hidden_layers")
    patch, image, ch = _v(arch, vc, "patch_size"), _v(arch, vc, "image_size"), _v(arch, vc, "num_channels", 3)
    if vc.get("vision_use_head"):
        raise UnsupportedArchitecture(arch.model_type, "SigLIP with an attention-pooling head is not modelled",
                                      ("vision_config.vision_use_head",))
    b.add("vision", "patch_pos_embed", "channels * patch * patch * v_hidden + v_hidden + (image // patch) ** 2 * v_hidden",
          linear=False, note="SigLIP patch conv (+ bias) and position embedding", channels=ch, patch=patch, v_hidden=hv, image=image)
    b.add("vision", "blocks", "v_layers * (4 * v_hidden * v_hidden + 2 * v_hidden * v_inter)", linear=True,
          note="q, k, v, out, fc1, fc2", v_layers=n, v_hidden=hv, v_inter=iv)
    b.add("vision", "block_biases_norms", "v_layers * (4 * v_hidden + v_inter + v_hidden + 4 * v_hidden) + 2 * v_hidden",
          linear=False, note="projection biases, two LayerNorms per block, post LayerNorm", v_layers=n, v_hidden=hv, v_inter=iv)
    b.add("vision", "projector", "v_hidden * hidden + v_hidden", linear=True,
          note="Gemma3 mm_input_projection_weight and mm_soft_emb_norm", v_hidden=hv, hidden=arch.hidden_size)


def _pixtral(b: _Builder, arch: Architecture, vc) -> None:
    """Pixtral's vision tower and Mistral 3's projector (transformers modeling_pixtral.py, modeling_mistral3.py):
    a bias-free patch conv, ln_pre, blocks of RMSNorm + bias-free q/k/v/o + RMSNorm + gated SiLU MLP (2D rotary
    positions, no table); then RMSNorm, a patch merger over spatial_merge_size**2 patches and two linears to the
    text width (biases when multimodal_projector_bias)."""
    hv, iv, n = _v(arch, vc, "hidden_size"), _v(arch, vc, "intermediate_size"), _v(arch, vc, "num_hidden_layers")
    patch, ch = _v(arch, vc, "patch_size"), _v(arch, vc, "num_channels", 3)
    proj = arch.projector_config
    merge = config_int(proj, "spatial_merge_size", arch.model_type, 2, lo=1, hi=64)
    feature_layer = proj.get("vision_feature_layer", -1)
    n_features = len(feature_layer) if isinstance(feature_layer, list) else 1
    bias = bool(proj.get("multimodal_projector_bias", False))
    b.add("vision", "patch_conv_ln_pre", "channels * patch * patch * v_hidden + v_hidden", linear=False,
          note="bias-free patch conv and ln_pre (RMSNorm)", channels=ch, patch=patch, v_hidden=hv)
    b.add("vision", "blocks", "v_layers * (4 * v_hidden * v_hidden + 3 * v_hidden * v_inter)", linear=True,
          note="q, k, v, o (bias-free, hidden -> hidden), gate, up, down", v_layers=n, v_hidden=hv, v_inter=iv)
    b.add("vision", "block_norms", "v_layers * 2 * v_hidden", linear=False, note="attention_norm and ffn_norm (RMSNorm)",
          v_layers=n, v_hidden=hv)
    b.add("vision", "projector", "v_hidden * merge * merge * v_hidden + features * v_hidden * hidden + hidden * hidden",
          linear=True, note="patch_merger.merging_layer, linear_1, linear_2", v_hidden=hv, merge=merge,
          features=n_features, hidden=arch.hidden_size)
    b.add("vision", "projector_norm_biases", "v_hidden + with_bias * 2 * hidden", linear=False,
          note="projector RMSNorm; linear_1/linear_2 biases when multimodal_projector_bias", v_hidden=hv,
          with_bias=int(bias), hidden=arch.hidden_size)


def _qwen2_5_vl_vision(b: _Builder, arch: Architecture, vc) -> None:
    """Qwen2.5-VL's vision tower (transformers modeling_qwen2_5_vl.py): a bias-free Conv3d patch
    embedding, blocks of RMSNorm + qkv/proj attention (biases) + a gated SiLU MLP (biases), and a
    patch merger (RMSNorm, then two linears over merge^2 patches); rotary positions, no table."""
    hv, iv, n = _v(arch, vc, "hidden_size"), _v(arch, vc, "intermediate_size"), _v(arch, vc, "depth")
    patch, tp = (_v(arch, vc, "patch_size", None) or _v(arch, vc, "spatial_patch_size", 14)), _v(arch, vc, "temporal_patch_size", 2)
    ch = (_v(arch, vc, "in_channels", None) or _v(arch, vc, "in_chans", 3))
    merge, out = _v(arch, vc, "spatial_merge_size", 2), _v(arch, vc, "out_hidden_size", arch.hidden_size)
    b.add("vision", "patch_embed", "channels * temporal_patch * patch * patch * v_hidden", linear=False,
          note="Conv3d patch embedding, no bias", channels=ch, temporal_patch=tp, patch=patch, v_hidden=hv)
    b.add("vision", "blocks", "v_layers * (4 * v_hidden * v_hidden + 3 * v_hidden * v_inter)", linear=True,
          note="attn.qkv, attn.proj, mlp.gate_proj, up_proj, down_proj", v_layers=n, v_hidden=hv, v_inter=iv)
    b.add("vision", "block_biases_norms", "v_layers * (3 * v_hidden + v_hidden + 2 * v_inter + v_hidden + 2 * v_hidden)",
          linear=False, note="qkv, proj and MLP biases, norm1 and norm2 (RMSNorm)", v_layers=n, v_hidden=hv, v_inter=iv)
    b.add("vision", "merger", "(v_hidden * merge ** 2) ** 2 + v_hidden * merge ** 2 * out_hidden", linear=True,
          note="merger mlp.0 and mlp.2", v_hidden=hv, merge=merge, out_hidden=out)
    b.add("vision", "merger_biases_norm", "v_hidden + v_hidden * merge ** 2 + out_hidden", linear=False,
          note="merger ln_q (RMSNorm) and biases", v_hidden=hv, merge=merge, out_hidden=out)


def _qwen3_vl_vision(b: _Builder, arch: Architecture, vc) -> None:
    hv, iv, n = _v(arch, vc, "hidden_size"), _v(arch, vc, "intermediate_size"), _v(arch, vc, "depth")
    patch, tp, ch = _v(arch, vc, "patch_size"), _v(arch, vc, "temporal_patch_size", 2), _v(arch, vc, "in_channels", 3)
    merge, out = _v(arch, vc, "spatial_merge_size", 2), _v(arch, vc, "out_hidden_size", arch.hidden_size)
    if vc.get("deepstack_visual_indexes"):
        raise UnsupportedArchitecture(arch.model_type, "deepstack mergers are not modelled", ("vision_config.deepstack_visual_indexes",))
    b.add("vision", "patch_pos_embed", "channels * temporal_patch * patch * patch * v_hidden + v_hidden + positions * v_hidden",
          linear=False, note="Conv3d patch embedding (+ bias) and learned position embedding",
          channels=ch, temporal_patch=tp, patch=patch, v_hidden=hv, positions=_v(arch, vc, "num_position_embeddings", 0))
    b.add("vision", "blocks", "v_layers * (3 * v_hidden * v_hidden + v_hidden * v_hidden + 2 * v_hidden * v_inter)", linear=True,
          note="attn.qkv, attn.proj, mlp.linear_fc1, mlp.linear_fc2", v_layers=n, v_hidden=hv, v_inter=iv)
    b.add("vision", "block_biases_norms", "v_layers * (3 * v_hidden + v_hidden + v_inter + v_hidden + 4 * v_hidden)",
          linear=False, note="projection biases and two LayerNorms per block", v_layers=n, v_hidden=hv, v_inter=iv)
    b.add("vision", "merger", "(v_hidden * merge ** 2) ** 2 + v_hidden * merge ** 2 * out_hidden", linear=True,
          note="patch merger linear_fc1, linear_fc2", v_hidden=hv, merge=merge, out_hidden=out)
    b.add("vision", "merger_biases_norm", "2 * v_hidden + v_hidden * merge ** 2 + out_hidden", linear=False,
          note="merger LayerNorm and biases", v_hidden=hv, merge=merge, out_hidden=out)


# ---------------------------------------------------------------------------------------
# multi-token prediction


def _mtp(b: _Builder, arch: Architecture) -> None:
    k = arch.mtp_layers
    if not k:
        return
    fam, h = arch.model_type, arch.hidden_size
    if fam in _DEEPSEEK or fam == "glm4_moe":
        b.add("mtp", "eh_proj", "modules * 2 * hidden * hidden", linear=True, note="eh_proj over [embedding; hidden]",
              modules=k, hidden=h)
        b.add("mtp", "norms", "modules * 4 * hidden", linear=False,
              note="enorm, hnorm, shared_head.norm and the layer's two RMSNorms", modules=k, hidden=h)
        if fam in _DEEPSEEK:
            _mla_attention(b, arch, k, "mtp", "attn_")
            if fam in _WITH_INDEXER:
                _indexer(b, arch, k, "mtp", "indexer_")
            b.add("mtp", "embed_head_copies", "modules * 2 * vocab * hidden", linear=False,
                  note="the checkpoint stores its own copy of embed_tokens and shared_head.head (README_WEIGHTS.md: 'shares parameters')",
                  modules=k, vocab=arch.vocab_size, hidden=h)
        else:
            _gqa_attention(b, arch, k, "mtp", "attn_")
            b.notes.append("GLM MTP: embed_tokens/shared_head copies in the checkpoint not counted (layout not verified)")
        _ffn(b, arch, [arch.num_layers + i for i in range(k)], "ffn", group_dense="mtp", group_router="mtp",
             group_experts="mtp", group_shared="mtp")
    elif fam in _GDN:
        b.add("mtp", "fc", "modules * 2 * hidden * hidden", linear=True, note="mtp.fc over [embedding; hidden]", modules=k, hidden=h)
        b.add("mtp", "norms", "modules * 4 * hidden + hidden", linear=False,
              note="pre_fc_norm_embedding, pre_fc_norm_hidden, the layer's two RMSNorms; mtp.norm", modules=k, hidden=h)
        _gqa_attention(b, arch, k, "mtp", "attn_")
        _ffn(b, arch, [arch.num_layers + i for i in range(k)], "ffn", group_dense="mtp", group_router="mtp",
             group_experts="mtp", group_shared="mtp")
    else:
        b.notes.append(f"{k} MTP module(s) declared but their tensor layout for {fam!r} is not modelled: not counted")


# ---------------------------------------------------------------------------------------
# speculative-decoding drafts


def speculator_ledger(draft: Architecture, method: str) -> ParamLedger:
    """The parameters a draft adds to a served model (--speculative-config).

    ``draft_model``: the draft's whole ledger (its own embedding and LM head). EAGLE heads (vLLM
    llama_eagle.py / llama_eagle3.py) load only what their checkpoint holds and take the rest from
    the target: the token embedding is the target's; EAGLE-1 also uses the target's LM head and adds
    a fusion layer fc over [embedding; hidden] (2h -> h); EAGLE-3 has its own LM head over
    ``draft_vocab_size``, fuses three hidden states (fc 3h -> h), feeds 2h into its first layer's
    q/k/v projections and normalises the hidden input (hidden_norm)."""
    full = parameter_ledger(draft)
    if method == "draft_model":
        return full
    if method not in ("eagle", "eagle3"):
        raise UnsupportedArchitecture(draft.model_type, f"no draft ledger for speculative method {method!r}", ("method",))
    b = _Builder(f"{draft.name} ({method} head)")
    h = draft.hidden_size
    b.add("embedding", "embed_tokens", "0", linear=False, note="the target's embedding (shared)")
    if method == "eagle":
        b.add("lm_head", "lm_head", "0", linear=True, note="the target's LM head (shared)")
        b.add("attention", "fc", "2 * hidden * hidden", linear=True, note="fusion of [embedding; hidden]", hidden=h)
    else:
        vocab = config_int(draft.config, "draft_vocab_size", draft.model_type, None, lo=1) or draft.vocab_size
        b.add("lm_head", "lm_head", "draft_vocab * hidden", linear=True, note="EAGLE-3's own LM head", draft_vocab=vocab,
              hidden=h)
        b.add("attention", "fc", "3 * hidden * hidden", linear=True, note="fusion of three hidden states", hidden=h)
        q = draft.num_attention_heads * draft.head_dim
        kv = draft.num_kv_heads * draft.head_dim
        b.add("attention", "qkv_wide_input", "hidden * (q + 2 * kv)", linear=True,
              note="the first layer's q/k/v take [embedding; hidden] (2h), not h", hidden=h, q=q, kv=kv)
        b.add("norms", "hidden_norm", "hidden", linear=False, note="RMSNorm on the fused hidden input", hidden=h)
    for group in ("attention", "mlp", "norms"):
        if full.groups.get(group):
            b.add(group, f"draft_{group}", "params", linear=full.linear.get(group, 0) == full.groups[group],
                  note=f"the head's decoder layer(s): {group}", params=full.groups[group])
    return b.finish(draft)
