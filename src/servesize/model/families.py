"""Model families: which config.json ``model_type`` servesize reads, and one small reader per family.

``from_config`` (architecture.py) reads what every family says the same way (``read_common``), then
hands the text config to the family's reader, which builds the layers, the MoE plan and the fields
only that family has. A ``model_type`` outside ``MODEL_TYPES`` is refused (``family_of``); a reader
refuses a design of its family it does not model, naming the fields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from servesize.errors import BadInput, UnsupportedArchitecture
from servesize.model.layers import ChunkedLocal, FullAttention, GatedDeltaNet, Layer, Mamba2, Mla, Moe, SlidingWindow
from servesize.model.quantization import DTYPE_BYTES

# ---------------------------------------------------------------------------------------
# Fields every family reads the same way


def _req(cfg: Mapping, key: str, model_type: str):
    if key not in cfg or cfg[key] is None:
        raise UnsupportedArchitecture(model_type, f"config lacks required field {key!r}", (key,))
    return cfg[key]


def required_int(cfg: Mapping, key: str, model_type: str) -> int:
    """``cfg[key]`` as a non-negative integer; refuse when absent, reject when not an integer."""
    value = _req(cfg, key, model_type)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < 0:
        raise BadInput(f"config field {key!r} must be a non-negative integer, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class CommonFields:
    """One family's text config, with the fields every family reads the same way read once."""

    family: str
    text: Mapping[str, Any]
    hidden_size: int
    vocab_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    head_dim_explicit: bool
    dtype: str
    tie_word_embeddings: bool
    intermediate_size: int
    warnings: tuple[str, ...] = ()

    def required(self, key: str) -> int:
        """A required non-negative integer field of this family's config."""
        return required_int(self.text, key, self.family)

    def refuse(self, reason: str, fields: tuple[str, ...]) -> UnsupportedArchitecture:
        return UnsupportedArchitecture(self.family, reason, fields)

    def full(self) -> FullAttention:
        return FullAttention(self.num_kv_heads, self.head_dim, self.head_dim)

    def sliding(self, window: int) -> SlidingWindow:
        return SlidingWindow(self.num_kv_heads, self.head_dim, self.head_dim, window)


def read_common(config: Mapping[str, Any], text: Mapping[str, Any], family: Family) -> CommonFields:
    """Hidden size, vocabulary, layer count, head geometry (cross-checked), dtype, tying and MLP width."""
    name = family.name
    hidden = required_int(text, "hidden_size", name)
    vocab = required_int(text, "vocab_size", name)
    n_layers = required_int(text, "num_hidden_layers", name)
    if n_layers == 0:
        raise BadInput("config says num_hidden_layers = 0")
    heads = required_int(text, "num_attention_heads", name) if family.needs_attention_heads else int(text.get("num_attention_heads") or 0)
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim_explicit = text.get("head_dim") is not None
    head_dim = required_int(text, "head_dim", name) if head_dim_explicit else _implied_head_dim(hidden, heads, name)
    if heads and kv_heads and heads % kv_heads:
        raise UnsupportedArchitecture(name, f"{heads} attention heads are not a multiple of {kv_heads} KV heads",
                                      ("num_attention_heads", "num_key_value_heads"))
    dtype = _dtype(config, text)
    tie, warnings = _tie_word_embeddings(config, text, family)
    return CommonFields(name, text, hidden, vocab, n_layers, heads, kv_heads, head_dim, head_dim_explicit, dtype, tie,
                        int(text.get("intermediate_size") or 0), warnings)


def _dtype(config: Mapping[str, Any], text: Mapping[str, Any]) -> str:
    dtype = str(text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    if dtype not in DTYPE_BYTES:
        raise BadInput(f"config dtype {dtype!r} is not one of {', '.join(sorted(DTYPE_BYTES))}")
    return dtype


def _tie_word_embeddings(config: Mapping[str, Any], text: Mapping[str, Any], family: Family) -> tuple[bool, tuple[str, ...]]:
    """The text config's tie_word_embeddings, else the wrapper's, else the family default (with a warning)."""
    tie = text.get("tie_word_embeddings")
    if tie is None:
        tie = config.get("tie_word_embeddings")
    if tie is None:
        tie = family.tie_default
        return bool(tie), (f"tie_word_embeddings absent: took {tie} (the {family.name} default)",)
    return bool(tie), ()


def _implied_head_dim(hidden: int, heads: int, family: str) -> int:
    """hidden_size / heads — only when it divides; an absent head_dim is recorded (head_dim_explicit)."""
    if heads == 0 or hidden % heads:
        raise UnsupportedArchitecture(family, "no head_dim and hidden_size is not a multiple of the heads",
                                      ("head_dim", "hidden_size", "num_attention_heads"))
    return hidden // heads


# ---------------------------------------------------------------------------------------
# What a family's reader returns


@dataclass(frozen=True)
class FamilyParts:
    layers: Sequence[Layer]
    moe: Moe | None = None
    # Further Architecture fields this family's config sets (attention_bias, mtp_layers, MLA ranks, ...);
    # they win over the common reading (MLA: head_dim is qk_nope + qk_rope).
    fields: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def _layers_from_types(c: CommonFields, types: Any, mapping: Mapping[str, Layer]) -> list[Layer]:
    if not isinstance(types, list) or len(types) != c.num_layers:
        raise c.refuse(f"layer_types must list {c.num_layers} layers", ("layer_types", "num_hidden_layers"))
    unknown = sorted({t for t in types if t not in mapping})
    if unknown:
        raise c.refuse(f"unrecognised layer type(s) {', '.join(map(repr, unknown))}", ("layer_types",))
    return [mapping[t] for t in types]


def _every_nth_full(n_layers: int, every: Any, other: str) -> list[str]:
    """Layer types where every ``every``-th layer is full attention and the rest ``other``."""
    return ["full_attention" if (i + 1) % int(every) == 0 else other for i in range(n_layers)]


def _types_or_period(c: CommonFields, period_key: str, period: Any, other: str, missing: str) -> Any:
    """``layer_types``, or the types a period field implies; both given -> they must agree."""
    types = c.text.get("layer_types")
    if types is None:
        if not period:
            raise c.refuse(missing, ("layer_types", period_key))
        return _every_nth_full(c.num_layers, period, other)
    return _agreeing(c, types, period_key, period, other)


def _agreeing(c: CommonFields, types: Any, period_key: str, period: Any, other: str) -> Any:
    """Cross-check: ``layer_types`` must be the types a period field implies, when both are given."""
    if period and list(types) != _every_nth_full(c.num_layers, period, other):
        raise c.refuse(f"layer_types disagrees with {period_key}", ("layer_types", period_key))
    return types


# ---------------------------------------------------------------------------------------
# Dense GQA transformers


def _dense(c: CommonFields, *, may_slide: bool = False, slides_by_default: bool = False,
           bias_by_default: bool = False) -> FamilyParts:
    """Llama-style decoder: every layer full attention, or every layer one sliding window (Mistral, Phi-3)."""
    window = c.text.get("sliding_window")
    use_swa = c.text.get("use_sliding_window", slides_by_default)
    layer: Layer = c.sliding(int(window)) if window and use_swa and may_slide else c.full()
    return FamilyParts([layer] * c.num_layers, fields={"attention_bias": bool(c.text.get("attention_bias", bias_by_default))})


# ---------------------------------------------------------------------------------------
# Mixture of experts on GQA attention


def _routed_experts(c: CommonFields) -> Moe:
    """Mixtral / Qwen-MoE / MiniMax / GLM experts: every layer MoE (after first_k_dense_replace)."""
    text, inter = c.text, c.intermediate_size
    n_exp = int(text.get("num_local_experts") or text.get("num_experts") or text.get("n_routed_experts") or 0)
    if not n_exp:
        raise c.refuse("a mixture-of-experts model without an expert count", ("num_experts", "num_local_experts", "n_routed_experts"))
    expert_inter = int(text.get("moe_intermediate_size") or inter)
    shared_n = int(text.get("n_shared_experts") or 0)
    shared_inter = int(text.get("shared_expert_intermediate_size") or text.get("shared_intermediate_size") or 0)
    if shared_n and not shared_inter:
        shared_inter = shared_n * expert_inter
    if shared_inter and not shared_n:
        shared_n = 1
    sparse_step = int(text.get("decoder_sparse_step") or 1)
    if sparse_step != 1 or text.get("mlp_only_layers"):
        raise c.refuse("dense layers interleaved by decoder_sparse_step/mlp_only_layers are not modelled",
                       ("decoder_sparse_step", "mlp_only_layers"))
    return Moe(n_exp, c.required("num_experts_per_tok"), expert_inter, shared_n, shared_inter,
               int(text.get("first_k_dense_replace") or 0), 1, inter)


def _moe(c: CommonFields, *, may_slide: bool = False, bias_by_default: bool = False) -> FamilyParts:
    window = c.text.get("sliding_window")
    layer: Layer = c.sliding(int(window)) if may_slide and window else c.full()
    return FamilyParts([layer] * c.num_layers, _routed_experts(c),
                       fields={"attention_bias": bool(c.text.get("attention_bias", bias_by_default))})


def _minimax_m2(c: CommonFields) -> FamilyParts:
    parts = _moe(c)
    mtp = int(c.text.get("num_mtp_modules") or 0) if c.text.get("use_mtp") else 0
    return replace(parts, fields={**parts.fields, "mtp_layers": mtp})


def _glm4_moe(c: CommonFields) -> FamilyParts:
    parts = _moe(c, bias_by_default=True)
    return replace(parts, fields={**parts.fields, "mtp_layers": int(c.text.get("num_nextn_predict_layers") or 0)})


def _gpt_oss(c: CommonFields) -> FamilyParts:
    """gpt-oss: full and sliding layers by layer_types, every layer MoE, attention biases by default."""
    types = c.text.get("layer_types")
    window = c.required("sliding_window")
    layers = _layers_from_types(c, types, {"full_attention": c.full(), "sliding_attention": c.sliding(window)})
    moe = Moe(c.required("num_local_experts"), c.required("num_experts_per_tok"), c.intermediate_size)
    return FamilyParts(layers, moe, fields={"attention_bias": bool(c.text.get("attention_bias", True))})


# ---------------------------------------------------------------------------------------
# Local + global attention


def _gemma3(c: CommonFields) -> FamilyParts:
    """Gemma 3: sliding layers with every n-th global, by layer_types or sliding_window_pattern."""
    window = c.required("sliding_window")
    pattern = c.text.get("sliding_window_pattern") or c.text.get("_sliding_window_pattern")
    types = _types_or_period(c, "sliding_window_pattern", pattern, "sliding_attention",
                             "neither layer_types nor sliding_window_pattern says which layers are local")
    return FamilyParts(_layers_from_types(c, types, {"full_attention": c.full(), "sliding_attention": c.sliding(window)}))


def _gemma2(c: CommonFields) -> FamilyParts:
    """Gemma 2: sliding and global layers alternate unless layer_types says otherwise."""
    window = c.required("sliding_window")
    types = c.text.get("layer_types")
    if types is None:
        types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(c.num_layers)]
    else:
        pattern = c.text.get("sliding_window_pattern") or c.text.get("_sliding_window_pattern")
        types = _agreeing(c, types, "sliding_window_pattern", pattern, "sliding_attention")
    return FamilyParts(_layers_from_types(c, types, {"full_attention": c.full(), "sliding_attention": c.sliding(window)}))


def _llama4(c: CommonFields) -> FamilyParts:
    """Llama 4: chunked local attention on the RoPE layers, global NoPE layers; MoE every n-th layer."""
    text, inter, warnings = c.text, c.intermediate_size, []
    chunk = text.get("attention_chunk_size")
    no_rope = text.get("no_rope_layers")
    if no_rope is None:
        # transformers Llama4TextConfig default: every 4th layer is a global NoPE layer.
        no_rope = [int((i + 1) % 4 != 0) for i in range(c.num_layers)]
        warnings.append("no_rope_layers absent: every 4th layer global (transformers' Llama4TextConfig default)")
    if len(no_rope) != c.num_layers:
        raise c.refuse("no_rope_layers length differs from num_hidden_layers", ("no_rope_layers", "num_hidden_layers"))
    full = c.full()
    local: Layer = ChunkedLocal(c.num_kv_heads, c.head_dim, c.head_dim, int(chunk)) if chunk else full
    layers = [local if uses_rope else full for uses_rope in no_rope]
    step = int(text.get("interleave_moe_layer_step") or 1)
    moe = Moe(c.required("num_local_experts"), c.required("num_experts_per_tok"), inter,
              1, inter, 0, step, int(text.get("intermediate_size_mlp") or inter))
    return FamilyParts(layers, moe, warnings=tuple(warnings))


# ---------------------------------------------------------------------------------------
# Multi-head latent attention


def _deepseek(c: CommonFields, *, indexer: bool = False) -> FamilyParts:
    """DeepSeek-V2/V3 (Kimi K2): MLA layers, shared + routed experts after the first dense layers, MTP."""
    kv_lora, rope = c.required("kv_lora_rank"), c.required("qk_rope_head_dim")
    nope, v_dim = c.required("qk_nope_head_dim"), c.required("v_head_dim")
    fields: dict[str, Any] = {
        "head_dim": nope + rope, "head_dim_explicit": True,
        "num_kv_heads": c.num_attention_heads,  # MLA decompresses to per-head K/V; the cache holds one latent
        "q_lora_rank": c.text.get("q_lora_rank"), "kv_lora_rank": kv_lora, "qk_rope_head_dim": rope,
        "qk_nope_head_dim": nope, "v_head_dim": v_dim,
    }
    if indexer:  # DeepSeek-V3.2 sparse attention
        fields.update(index_head_dim=c.required("index_head_dim"), index_n_heads=c.required("index_n_heads"))
    n_exp = c.required("n_routed_experts")
    freq = int(c.text.get("moe_layer_freq") or 1)
    shared_n = int(c.text.get("n_shared_experts") or 0)
    expert_inter = c.required("moe_intermediate_size")
    moe = Moe(n_exp, c.required("num_experts_per_tok"), expert_inter, shared_n, shared_n * expert_inter,
              int(c.text.get("first_k_dense_replace") or 0), freq, c.intermediate_size)
    fields["mtp_layers"] = int(c.text.get("num_nextn_predict_layers") or 0)
    return FamilyParts([Mla(kv_lora, rope)] * c.num_layers, moe, fields)


# ---------------------------------------------------------------------------------------
# Recurrent-state layers


def _qwen_gdn_layers(c: CommonFields) -> list[Layer]:
    """Gated DeltaNet layers with every n-th full attention, by layer_types or full_attention_interval."""
    interval = c.text.get("full_attention_interval")
    types = _types_or_period(c, "full_attention_interval", interval, "linear_attention",
                             "neither layer_types nor full_attention_interval")
    gdn = GatedDeltaNet(c.required("linear_num_key_heads"), c.required("linear_num_value_heads"), c.required("linear_key_head_dim"),
                        c.required("linear_value_head_dim"), c.required("linear_conv_kernel_dim"))
    return _layers_from_types(c, types, {"full_attention": c.full(), "linear_attention": gdn})


def _qwen_gdn_fields(c: CommonFields) -> dict[str, Any]:
    text = c.text
    return {
        "attn_output_gate": bool(text.get("attn_output_gate", True)),
        "mtp_layers": int(text.get("mtp_num_hidden_layers") or text.get("num_nextn_predict_layers") or 0),
        "mamba_ssm_dtype": text.get("mamba_ssm_dtype"),
    }


def _qwen_gdn(c: CommonFields) -> FamilyParts:
    """Qwen3.5/3.6 dense: the Gated DeltaNet hybrid, gated attention output, MTP."""
    return FamilyParts(_qwen_gdn_layers(c), fields=_qwen_gdn_fields(c))


def _qwen_gdn_moe(c: CommonFields) -> FamilyParts:
    """Qwen3-Next, Qwen3.5/3.6 MoE: the Gated DeltaNet hybrid with routed experts and one gated shared expert."""
    layers = _qwen_gdn_layers(c)
    n_exp = c.required("num_experts")
    shared_inter = int(c.text.get("shared_expert_intermediate_size") or 0)
    moe = Moe(n_exp, c.required("num_experts_per_tok"), c.required("moe_intermediate_size"),
              1 if shared_inter else 0, shared_inter, 0, 1, c.intermediate_size)
    if c.text.get("mlp_only_layers"):
        raise c.refuse("dense mlp_only_layers are not modelled", ("mlp_only_layers",))
    return FamilyParts(layers, moe, _qwen_gdn_fields(c))


def _mamba2(c: CommonFields) -> FamilyParts:
    """Mamba2: every layer an SSM mixer, no attention."""
    m = Mamba2(c.required("num_heads"), c.required("head_dim"), c.required("state_size"),
               int(c.text.get("n_groups") or 1), int(c.text.get("conv_kernel") or 4))
    return FamilyParts([m] * c.num_layers)


# ---------------------------------------------------------------------------------------
# The table


@dataclass(frozen=True)
class Family:
    """A model family: the name an Architecture records, its reader, and the defaults it differs in."""

    name: str  # the model_type an Architecture records (a wrapper's text type reads as its family)
    read: Callable[[CommonFields], FamilyParts]
    tie_default: bool = True  # tie_word_embeddings when the config is silent: transformers' default for the family
    needs_attention_heads: bool = True


_GEMMA3 = Family("gemma3", _gemma3)
_QWEN2_5_VL = Family("qwen2_5_vl", partial(_dense, bias_by_default=True))
_LLAMA4 = Family("llama4", _llama4, tie_default=False)
_DEEPSEEK_V3 = Family("deepseek_v3", _deepseek)
_QWEN3_5 = Family("qwen3_5", _qwen_gdn)
_QWEN3_5_MOE = Family("qwen3_5_moe", _qwen_gdn_moe)

# model_type (outer or text) -> its family. Anything else is refused.
MODEL_TYPES: dict[str, Family] = {
    "granite": Family("granite", _dense),
    "llama": Family("llama", _dense),
    "mistral": Family("mistral", partial(_dense, may_slide=True, slides_by_default=True)),
    "olmo2": Family("olmo2", _dense),
    "phi3": Family("phi3", partial(_dense, may_slide=True)),
    "qwen2": Family("qwen2", partial(_dense, bias_by_default=True)),
    "qwen3": Family("qwen3", _dense),
    "qwen2_5_vl": _QWEN2_5_VL,
    "qwen2_5_vl_text": _QWEN2_5_VL,
    "mixtral": Family("mixtral", partial(_moe, may_slide=True)),
    "qwen2_moe": Family("qwen2_moe", partial(_moe, bias_by_default=True)),
    "qwen3_moe": Family("qwen3_moe", _moe),
    "minimax_m2": Family("minimax_m2", _minimax_m2),
    "glm4_moe": Family("glm4_moe", _glm4_moe),
    "gpt_oss": Family("gpt_oss", _gpt_oss),
    "gemma3": _GEMMA3,
    "gemma3_text": _GEMMA3,
    "gemma2": Family("gemma2", _gemma2),
    "llama4": _LLAMA4,
    "llama4_text": _LLAMA4,
    "deepseek_v2": Family("deepseek_v2", _deepseek),
    "deepseek_v3": _DEEPSEEK_V3,
    "deepseek_v32": Family("deepseek_v32", partial(_deepseek, indexer=True)),
    "kimi_k2": _DEEPSEEK_V3,  # Kimi K2 is DeepSeek-V3's design
    "qwen3_next": Family("qwen3_next", _qwen_gdn_moe),
    "qwen3_5": _QWEN3_5,
    "qwen3_5_text": _QWEN3_5,
    "qwen3_5_moe": _QWEN3_5_MOE,
    "qwen3_5_moe_text": _QWEN3_5_MOE,
    "mamba2": Family("mamba2", _mamba2, needs_attention_heads=False),
}
SUPPORTED_MODEL_TYPES = tuple(MODEL_TYPES)


def family_of(config: Mapping[str, Any]) -> tuple[Mapping[str, Any], Family]:
    """The text config (a multimodal wrapper's ``text_config``) and the family that reads it, or refuse."""
    outer_type = config.get("model_type")
    if not outer_type:
        raise UnsupportedArchitecture("<missing>", "config has no model_type", ("model_type",))
    text = config.get("text_config") or config
    model_type = text.get("model_type") or outer_type
    if outer_type not in SUPPORTED_MODEL_TYPES and model_type not in SUPPORTED_MODEL_TYPES:
        raise UnsupportedArchitecture(
            outer_type,
            f"this model_type is not in servesize's allowlist ({', '.join(SUPPORTED_MODEL_TYPES)})",
            ("model_type",),
        )
    return text, MODEL_TYPES[outer_type if outer_type in SUPPORTED_MODEL_TYPES else model_type]
