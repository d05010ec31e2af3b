"""Model families: which config.json ``model_type`` servesize reads, and one small reader per family.

``from_config`` (architecture.py) reads what every family says the same way (``read_common``), then
hands the text config to the family's reader, which builds the layers, the MoE plan and the fields
only that family has. A ``model_type`` outside ``MODEL_TYPES`` is refused (``family_of``); a reader
refuses a design of its family it does not model, naming the fields.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field, replace
from functools import partial
from typing import Any

from servesize.errors import BadInput, UnsupportedArchitecture
from servesize.frozen import frozen
from servesize.limits import MAX_CONFIG_INT, MAX_LAYERS
from servesize.model.layers import ChunkedLocal, FullAttention, GatedDeltaNet, Layer, Mamba2, Mla, Moe, SlidingWindow
from servesize.model.quantization import DTYPE_BYTES

# ---------------------------------------------------------------------------------------
# Fields every family reads the same way


REQUIRED: Any = object()  # config_int: no default, the field must be there
HEAD_DIM_RATIO = 8  # heads x head_dim within 1/8..8 x hidden_size: every model here is within 0.5..2 x


def config_int(cfg: Mapping, key: str, model_type: str, default: Any = REQUIRED, *, lo: int = 0,
               hi: int = MAX_CONFIG_INT, prefix: str = "") -> Any:
    """``cfg[key]`` as a whole number in [lo, hi] (JSON's 4096.0 reads as 4096); ``default`` when the field
    is absent or null, and a refusal naming the field when it is required. A string, list, bool, NaN,
    fraction or a number out of range is refused, naming the field, the value and the range."""
    name = prefix + key
    value = cfg.get(key) if isinstance(cfg, Mapping) else None
    if value is None:
        if default is REQUIRED:
            raise UnsupportedArchitecture(model_type, f"config lacks required field {name!r}", (name,))
        return default
    number = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value) and value.is_integer())
    if isinstance(value, bool) or not number:
        raise BadInput(f"config field {name!r} must be a whole number in [{lo:,}, {hi:,}], got {_shown(value)}")
    if not lo <= value <= hi:
        raise BadInput(f"config field {name!r} = {_shown(value)} is out of range: [{lo:,}, {hi:,}]")
    return int(value)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def required_int(cfg: Mapping, key: str, model_type: str, lo: int = 0, hi: int = MAX_CONFIG_INT) -> int:
    """``cfg[key]`` as a whole number in [lo, hi]; refuse when absent (``config_int``)."""
    return int(config_int(cfg, key, model_type, lo=lo, hi=hi))


@frozen
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

    def required(self, key: str, lo: int = 1, hi: int = MAX_CONFIG_INT) -> int:
        """A required whole-number field of this family's config (a count or width: >= 1 unless said)."""
        return required_int(self.text, key, self.family, lo, hi)

    def whole(self, key: str, default: Any, lo: int = 0, hi: int = MAX_CONFIG_INT) -> Any:
        """An optional whole-number field: ``default`` when absent or null, else checked (``config_int``)."""
        return config_int(self.text, key, self.family, default, lo=lo, hi=hi)

    def window(self, key: str) -> int | None:
        """A window or chunk in tokens: absent or null is none; else a positive whole number."""
        return self.whole(key, None, lo=1)

    def refuse(self, reason: str, fields: tuple[str, ...]) -> UnsupportedArchitecture:
        return UnsupportedArchitecture(self.family, reason, fields)

    def full(self) -> FullAttention:
        return FullAttention(self.num_kv_heads, self.head_dim, self.head_dim)

    def sliding(self, window: int) -> SlidingWindow:
        return SlidingWindow(self.num_kv_heads, self.head_dim, self.head_dim, window)


def read_common(config: Mapping[str, Any], text: Mapping[str, Any], family: Family) -> CommonFields:
    """Hidden size, vocabulary, layer count, head geometry (cross-checked), dtype, tying and MLP width."""
    name = family.name
    hidden = required_int(text, "hidden_size", name, lo=1)
    vocab = required_int(text, "vocab_size", name, lo=1)
    n_layers = required_int(text, "num_hidden_layers", name, lo=1, hi=MAX_LAYERS)
    if family.needs_attention_heads:
        heads = required_int(text, "num_attention_heads", name, lo=1)
    else:
        heads = config_int(text, "num_attention_heads", name, 0)
    kv_heads = config_int(text, "num_key_value_heads", name, heads, lo=1 if heads else 0, hi=max(heads, 1))
    head_dim_explicit = text.get("head_dim") is not None
    head_dim = required_int(text, "head_dim", name, lo=1) if head_dim_explicit else _implied_head_dim(hidden, heads, name)
    if heads and kv_heads and heads % kv_heads:
        raise UnsupportedArchitecture(name, f"{heads} attention heads are not a multiple of {kv_heads} KV heads",
                                      ("num_attention_heads", "num_key_value_heads"))
    if heads and head_dim_explicit:
        _check_head_dim(hidden, heads, head_dim, name)
    dtype = _dtype(config, text)
    tie, warnings = _tie_word_embeddings(config, text, family)
    return CommonFields(name, text, hidden, vocab, n_layers, heads, kv_heads, head_dim, head_dim_explicit, dtype, tie,
                        config_int(text, "intermediate_size", name, 0), warnings)


def _check_head_dim(hidden: int, heads: int, head_dim: int, family: str) -> None:
    """An explicit head_dim need not be hidden_size / heads (Qwen3-0.6B: 128 x 16 heads = 2 x its 1,024 hidden;
    Gemma 3 27B: 0.76 x), but attention that is HEAD_DIM_RATIO times wider or narrower than the residual
    stream is a typo, not a design: refuse it naming the three fields."""
    ratio = head_dim * heads / hidden
    if not 1 / HEAD_DIM_RATIO <= ratio <= HEAD_DIM_RATIO:
        raise BadInput(f"config head_dim {head_dim} x num_attention_heads {heads} = {head_dim * heads:,} is {ratio:.3g} x "
                       f"hidden_size {hidden:,}; real models stay within {1 / HEAD_DIM_RATIO:g}-{HEAD_DIM_RATIO:g} x "
                       "(fields: head_dim, num_attention_heads, hidden_size)")


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
    if not isinstance(tie, bool):  # "NaN", "false" or 0 would read as a truth value: the embeddings counted once
        raise BadInput(f"config field 'tie_word_embeddings' must be true or false, got {_shown(tie)}")
    return tie, ()


def _implied_head_dim(hidden: int, heads: int, family: str) -> int:
    """hidden_size / heads — only when it divides; an absent head_dim is recorded (head_dim_explicit)."""
    if heads == 0 or hidden % heads:
        raise UnsupportedArchitecture(family, "no head_dim and hidden_size is not a multiple of the heads",
                                      ("head_dim", "hidden_size", "num_attention_heads"))
    return hidden // heads


# ---------------------------------------------------------------------------------------
# What a family's reader returns


@frozen
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
    unknown = sorted({repr(t) for t in types if not isinstance(t, str) or t not in mapping})
    if unknown:
        raise c.refuse(f"unrecognised layer type(s) {', '.join(unknown[:5])}", ("layer_types",))
    return [mapping[t] for t in types]


def _every_nth_full(n_layers: int, every: int, other: str) -> list[str]:
    """Layer types where every ``every``-th layer is full attention and the rest ``other``."""
    return ["full_attention" if (i + 1) % every == 0 else other for i in range(n_layers)]


def _period(c: CommonFields, *keys: str) -> int | None:
    """A layer period (every n-th layer is global): the first of ``keys`` present, a whole number >= 1."""
    for key in keys:
        value = c.whole(key, None, lo=1, hi=MAX_LAYERS)
        if value is not None:
            return value
    return None


def _types_or_period(c: CommonFields, period_key: str, period: int | None, other: str, missing: str) -> Any:
    """``layer_types``, or the types a period field implies; both given -> they must agree."""
    types = c.text.get("layer_types")
    if types is None:
        if not period:
            raise c.refuse(missing, ("layer_types", period_key))
        return _every_nth_full(c.num_layers, period, other)
    return _agreeing(c, types, period_key, period, other)


def _agreeing(c: CommonFields, types: Any, period_key: str, period: int | None, other: str) -> Any:
    """Cross-check: ``layer_types`` must be the types a period field implies, when both are given."""
    if not isinstance(types, list):
        raise c.refuse("layer_types must be a list of layer type names", ("layer_types",))
    if period and types != _every_nth_full(c.num_layers, period, other):
        raise c.refuse(f"layer_types disagrees with {period_key}", ("layer_types", period_key))
    return types


# ---------------------------------------------------------------------------------------
# Dense GQA transformers


def _dense(c: CommonFields, *, may_slide: bool = False, slides_by_default: bool = False,
           bias_by_default: bool = False) -> FamilyParts:
    """Llama-style decoder: every layer full attention, or every layer one sliding window (Mistral, Phi-3)."""
    window = c.window("sliding_window") if may_slide else None
    use_swa = c.text.get("use_sliding_window", slides_by_default)
    layer: Layer = c.sliding(window) if window and use_swa else c.full()
    return FamilyParts([layer] * c.num_layers, fields={"attention_bias": bool(c.text.get("attention_bias", bias_by_default))})


# Transformers' Qwen2Config / Qwen3Config defaults (configuration_qwen2.py): the window a config that asks for one
# but names none gets, and the layers below which none slides.
QWEN2_DEFAULT_WINDOW = 4096
QWEN2_DEFAULT_MAX_WINDOW_LAYERS = 28


def _qwen2(c: CommonFields, *, bias_by_default: bool = False) -> FamilyParts:
    """Qwen2/Qwen3: the window as transformers and vLLM 0.32 read it. Qwen2Config keeps ``sliding_window``
    only when ``use_sliding_window`` is true, and (without ``layer_types``) slides the layers from
    ``max_window_layers`` on. vLLM's Qwen2Model passes no per-layer window: every layer takes the engine's
    one window (CacheConfig.sliding_window), set only when every layer type is sliding_attention
    (EngineArgs.create_engine_config); a mix starts only with max_window_layers = num_hidden_layers, and
    then no layer slides (Qwen2Model's assert: "Sliding window for some but all layers is not supported")."""
    fields = {"attention_bias": bool(c.text.get("attention_bias", bias_by_default))}
    window = _qwen2_window(c)
    if window is None:
        return FamilyParts([c.full()] * c.num_layers, fields=fields)
    types = c.text.get("layer_types")
    max_window = c.whole("max_window_layers", QWEN2_DEFAULT_MAX_WINDOW_LAYERS, hi=MAX_CONFIG_INT)
    if types is None:
        types = ["sliding_attention" if i >= max_window else "full_attention" for i in range(c.num_layers)]
    _layers_from_types(c, types, {"full_attention": c.full(), "sliding_attention": c.sliding(window)})
    slides = [t == "sliding_attention" for t in types]
    if all(slides):
        return FamilyParts([c.sliding(window)] * c.num_layers, fields=fields)
    if any(slides) and max_window != c.num_layers:
        raise c.refuse(f"a window on some layers but not all (max_window_layers {max_window} of {c.num_layers}): "
                       "vLLM's Qwen2 model refuses to start ('Sliding window for some but all layers is not "
                       "supported')", ("use_sliding_window", "max_window_layers", "layer_types"))
    return FamilyParts([c.full()] * c.num_layers, fields=fields)


def _qwen2_window(c: CommonFields) -> int | None:
    """The window Qwen2Config keeps: none unless use_sliding_window; absent -> its 4,096; null or 0 -> none
    (vLLM's ModelConfig reads a 0 window as no window)."""
    use = c.text.get("use_sliding_window", False)
    if not isinstance(use, bool):
        raise BadInput(f"config field 'use_sliding_window' must be true or false, got {_shown(use)}")
    if not use:
        return None
    if "sliding_window" not in c.text:
        return QWEN2_DEFAULT_WINDOW
    return c.whole("sliding_window", None) or None


def _window_everywhere(c: CommonFields, *, bias_key: str = "attention_bias", bias_by_default: bool = False) -> FamilyParts:
    """Phi-3, StarCoder2: the config has no use_sliding_window and no layer_types, so a ``sliding_window``
    (Phi-3-mini-4k's 2,047) is the engine's one window and every layer takes it (EngineArgs.create_engine_config
    sets CacheConfig.sliding_window when the config lists no layer types; Phi3ForCausalLM is vLLM's
    LlamaForCausalLM, StarCoder2 runs on its Transformers backend, and neither passes a window of its own).
    A config that does list them is read per layer, as both read them; null or 0 is no window."""
    window = c.whole("sliding_window", None) or None
    types = c.text.get("layer_types")
    if window is None:
        layers: list[Layer] = [c.full()] * c.num_layers
    elif types is None:
        layers = [c.sliding(window)] * c.num_layers
    else:
        layers = _layers_from_types(c, types, {"full_attention": c.full(), "sliding_attention": c.sliding(window)})
    return FamilyParts(layers, fields={"attention_bias": bool(c.text.get(bias_key, bias_by_default))})


# ---------------------------------------------------------------------------------------
# Mixture of experts on GQA attention


def _routed_experts(c: CommonFields) -> Moe:
    """Mixtral / Qwen-MoE / MiniMax / GLM experts: every layer MoE (after first_k_dense_replace)."""
    text, inter = c.text, c.intermediate_size
    n_exp = _first_int(c, ("num_local_experts", "num_experts", "n_routed_experts"))
    if not n_exp:
        raise c.refuse("a mixture-of-experts model without an expert count", ("num_experts", "num_local_experts", "n_routed_experts"))
    expert_inter = c.whole("moe_intermediate_size", None, lo=1) or inter
    shared_n = c.whole("n_shared_experts", 0)
    shared_inter = _first_int(c, ("shared_expert_intermediate_size", "shared_intermediate_size"))
    if shared_n and not shared_inter:
        shared_inter = shared_n * expert_inter
    if shared_inter and not shared_n:
        shared_n = 1
    sparse_step = c.whole("decoder_sparse_step", 1, lo=1)
    if sparse_step != 1 or text.get("mlp_only_layers"):
        raise c.refuse("dense layers interleaved by decoder_sparse_step/mlp_only_layers are not modelled",
                       ("decoder_sparse_step", "mlp_only_layers"))
    return Moe(n_exp, _experts_per_token(c, n_exp), expert_inter, shared_n, shared_inter,
               _dense_first(c), 1, inter)


def _first_int(c: CommonFields, keys: tuple[str, ...]) -> int:
    """The first of ``keys`` the config sets (each checked), else 0."""
    for key in keys:
        value = c.whole(key, None)
        if value:
            return int(value)
    return 0


def _experts_per_token(c: CommonFields, n_experts: int) -> int:
    """num_experts_per_tok, in [1, the expert count]: 64 of 8 experts would give more active than total."""
    k = c.required("num_experts_per_tok")
    if k > n_experts:
        raise BadInput(f"config num_experts_per_tok {k} exceeds the {n_experts} experts "
                       "(fields: num_experts_per_tok and the expert count)")
    return k


def _dense_first(c: CommonFields) -> int:
    """first_k_dense_replace: leading dense layers, at most every layer."""
    return int(c.whole("first_k_dense_replace", 0, hi=c.num_layers))


def _moe(c: CommonFields, *, may_slide: bool = False, bias_by_default: bool = False) -> FamilyParts:
    window = c.window("sliding_window") if may_slide else None
    layer: Layer = c.sliding(window) if window else c.full()
    return FamilyParts([layer] * c.num_layers, _routed_experts(c),
                       fields={"attention_bias": bool(c.text.get("attention_bias", bias_by_default))})


def _minimax_m2(c: CommonFields) -> FamilyParts:
    parts = _moe(c)
    mtp = c.whole("num_mtp_modules", 0, hi=MAX_LAYERS) if c.text.get("use_mtp") else 0
    return replace(parts, fields={**parts.fields, "mtp_layers": mtp})


def _glm4_moe(c: CommonFields) -> FamilyParts:
    parts = _moe(c, bias_by_default=True)
    return replace(parts, fields={**parts.fields, "mtp_layers": c.whole("num_nextn_predict_layers", 0, hi=MAX_LAYERS)})


def _gpt_oss(c: CommonFields) -> FamilyParts:
    """gpt-oss: full and sliding layers by layer_types, every layer MoE, attention biases by default."""
    types = c.text.get("layer_types")
    window = c.required("sliding_window")
    layers = _layers_from_types(c, types, {"full_attention": c.full(), "sliding_attention": c.sliding(window)})
    n_exp = c.required("num_local_experts")
    moe = Moe(n_exp, _experts_per_token(c, n_exp), c.intermediate_size)
    return FamilyParts(layers, moe, fields={"attention_bias": bool(c.text.get("attention_bias", True))})


# ---------------------------------------------------------------------------------------
# Local + global attention


def _gemma3(c: CommonFields) -> FamilyParts:
    """Gemma 3: sliding layers with every n-th global, by layer_types or sliding_window_pattern."""
    window = c.required("sliding_window")
    pattern = _period(c, "sliding_window_pattern", "_sliding_window_pattern")
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
        pattern = _period(c, "sliding_window_pattern", "_sliding_window_pattern")
        types = _agreeing(c, types, "sliding_window_pattern", pattern, "sliding_attention")
    return FamilyParts(_layers_from_types(c, types, {"full_attention": c.full(), "sliding_attention": c.sliding(window)}))


COHERE2_DEFAULT_PATTERN = 4  # transformers' Cohere2Config: without layer_types, every 4th layer is global


def _cohere2(c: CommonFields) -> FamilyParts:
    """Cohere2 (Command R7B, Command A): sliding layers with every n-th global, by layer_types or
    sliding_window_pattern (Cohere2Config's default 4). vLLM's CohereAttention (commandr.py) gives a sliding
    layer ``sliding_window + 1`` tokens, Cohere's training convention, and the cache is sized for that."""
    window = c.required("sliding_window") + 1
    pattern = _period(c, "sliding_window_pattern") or COHERE2_DEFAULT_PATTERN
    types = c.text.get("layer_types")
    types = _every_nth_full(c.num_layers, pattern, "sliding_attention") if types is None else types
    return FamilyParts(_layers_from_types(c, types, {"full_attention": c.full(), "sliding_attention": c.sliding(window)}))


def _exaone4(c: CommonFields) -> FamilyParts:
    """EXAONE 4.0: sliding layers with every n-th global, by layer_types or an integer sliding_window_pattern
    (Exaone4Config's default 4); a null window with no layer_types is full attention throughout (1.2B).
    vLLM's Exaone4Attention gives a sliding layer the config's sliding_window."""
    window = c.window("sliding_window")
    types = c.text.get("layer_types")
    if types is None:
        if window is None:
            return FamilyParts([c.full()] * c.num_layers)
        pattern = c.text.get("sliding_window_pattern", 4)
        if isinstance(pattern, str):
            raise c.refuse("a sliding_window_pattern string without layer_types (transformers' Exaone4Config "
                           "reads only a whole number)", ("sliding_window_pattern", "layer_types"))
        types = _every_nth_full(c.num_layers, _period(c, "sliding_window_pattern") or 4, "sliding_attention")
    if window is None:
        if any(t == "sliding_attention" for t in types):
            raise c.refuse("sliding layers without a sliding_window", ("sliding_window", "layer_types"))
        return FamilyParts(_layers_from_types(c, types, {"full_attention": c.full()}))
    return FamilyParts(_layers_from_types(c, types, {"full_attention": c.full(), "sliding_attention": c.sliding(window)}))


def _smollm3(c: CommonFields) -> FamilyParts:
    """SmolLM3: every layer attends over the whole context; NoPE on every 4th (no_rope_layers) changes no cache.
    Without layer_types, SmolLM3Config slides only the NoPE layers and only when use_sliding_window and a
    sliding_window are both set; vLLM serves it on its Transformers backend, which gives each
    sliding_attention layer the config's sliding_window (base.py, per_layer_sliding_window)."""
    types = c.text.get("layer_types")
    window = c.window("sliding_window")
    if types is None:
        no_rope = c.text.get("no_rope_layers")
        if no_rope is None:
            every = c.whole("no_rope_layer_interval", 4, lo=1, hi=MAX_LAYERS)
            no_rope = [int((i + 1) % every != 0) for i in range(c.num_layers)]
        if not isinstance(no_rope, list) or len(no_rope) != c.num_layers:
            raise c.refuse("no_rope_layers length differs from num_hidden_layers", ("no_rope_layers", "num_hidden_layers"))
        slide = bool(c.text.get("use_sliding_window")) and window is not None
        types = ["sliding_attention" if slide and not uses_rope else "full_attention" for uses_rope in no_rope]
    mapping: dict[str, Layer] = {"full_attention": c.full()}
    if window is not None:
        mapping["sliding_attention"] = c.sliding(window)
    return FamilyParts(_layers_from_types(c, types, mapping))


def _llama4(c: CommonFields) -> FamilyParts:
    """Llama 4: chunked local attention on the RoPE layers, global NoPE layers; MoE every n-th layer."""
    text, inter, warnings = c.text, c.intermediate_size, []
    chunk = c.window("attention_chunk_size")
    no_rope = text.get("no_rope_layers")
    if no_rope is None:
        # transformers Llama4TextConfig default: every 4th layer is a global NoPE layer.
        no_rope = [int((i + 1) % 4 != 0) for i in range(c.num_layers)]
        warnings.append("no_rope_layers absent: every 4th layer global (transformers' Llama4TextConfig default)")
    if not isinstance(no_rope, list) or len(no_rope) != c.num_layers:
        raise c.refuse("no_rope_layers length differs from num_hidden_layers", ("no_rope_layers", "num_hidden_layers"))
    full = c.full()
    local: Layer = ChunkedLocal(c.num_kv_heads, c.head_dim, c.head_dim, chunk) if chunk else full
    layers = [local if uses_rope else full for uses_rope in no_rope]
    step = c.whole("interleave_moe_layer_step", 1, lo=1, hi=c.num_layers)
    n_exp = c.required("num_local_experts")
    moe = Moe(n_exp, _experts_per_token(c, n_exp), inter,
              1, inter, 0, step, c.whole("intermediate_size_mlp", None, lo=1) or inter)
    return FamilyParts(layers, moe, warnings=tuple(warnings))


# ---------------------------------------------------------------------------------------
# Multi-head latent attention


def _indexer_layers(c: CommonFields) -> tuple[int, ...] | None:
    """IndexShare (GLM-5.2): which layers compute the DSA indexer, by vLLM's rule (deepseek_v2.py): a layer reuses the
    last full layer's top-k ('shared': no indexer built, no indexer cache; the checkpoint still ships its weights)
    when index_topk_pattern marks it 'S', else when max(layer - index_skip_topk_offset + 1, 0) % index_topk_freq != 0
    (offset default 2, freq default 1). A config's indexer_types list must agree. The full layers' indices; None:
    every layer computes it."""
    n = c.num_layers
    freq = c.whole("index_topk_freq", 1, lo=1, hi=n)
    offset = c.whole("index_skip_topk_offset", 2, hi=n)
    pattern = c.text.get("index_topk_pattern")
    if pattern is None:
        full = [max(i - offset + 1, 0) % freq == 0 for i in range(n)]
    elif isinstance(pattern, (str, list)) and all(isinstance(p, str) for p in pattern):
        full = [not (i < len(pattern) and pattern[i] == "S") for i in range(n)]
    else:
        raise c.refuse("index_topk_pattern must be a string or a list of 'S'/'F' marks", ("index_topk_pattern",))
    types = c.text.get("indexer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != n or any(t not in ("full", "shared") for t in types):
            raise c.refuse("indexer_types must list 'full' or 'shared' for every layer", ("indexer_types", "num_hidden_layers"))
        if [t == "full" for t in types] != full:
            raise c.refuse("indexer_types disagrees with index_topk_freq / index_skip_topk_offset / index_topk_pattern, "
                           "which vLLM follows", ("indexer_types", "index_topk_freq", "index_skip_topk_offset"))
    return None if all(full) else tuple(i for i, f in enumerate(full) if f)


def _deepseek(c: CommonFields, *, indexer: bool = False) -> FamilyParts:
    """DeepSeek-V2/V3 (Kimi K2): MLA layers, shared + routed experts after the first dense layers, MTP."""
    kv_lora, rope = c.required("kv_lora_rank"), c.required("qk_rope_head_dim")
    nope, v_dim = c.required("qk_nope_head_dim", lo=0), c.required("v_head_dim")
    fields: dict[str, Any] = {
        "head_dim": nope + rope, "head_dim_explicit": True,
        "num_kv_heads": c.num_attention_heads,  # MLA decompresses to per-head K/V; the cache holds one latent
        "q_lora_rank": c.whole("q_lora_rank", None, lo=1), "kv_lora_rank": kv_lora, "qk_rope_head_dim": rope,
        "qk_nope_head_dim": nope, "v_head_dim": v_dim,
    }
    if indexer:  # DeepSeek sparse attention (DeepSeek-V3.2, GLM-5)
        fields.update(index_head_dim=c.required("index_head_dim"), index_n_heads=c.required("index_n_heads"),
                      indexer_layers=_indexer_layers(c))
    n_exp = c.required("n_routed_experts")
    freq = c.whole("moe_layer_freq", 1, lo=1, hi=c.num_layers)
    shared_n = c.whole("n_shared_experts", 0)
    expert_inter = c.required("moe_intermediate_size")
    moe = Moe(n_exp, _experts_per_token(c, n_exp), expert_inter, shared_n, shared_n * expert_inter,
              _dense_first(c), freq, c.intermediate_size)
    fields["mtp_layers"] = c.whole("num_nextn_predict_layers", 0, hi=MAX_LAYERS)
    return FamilyParts([Mla(kv_lora, rope)] * c.num_layers, moe, fields)


# ---------------------------------------------------------------------------------------
# Recurrent-state layers


def _qwen_gdn_layers(c: CommonFields) -> list[Layer]:
    """Gated DeltaNet layers with every n-th full attention, by layer_types or full_attention_interval."""
    interval = _period(c, "full_attention_interval")
    types = _types_or_period(c, "full_attention_interval", interval, "linear_attention",
                             "neither layer_types nor full_attention_interval")
    gdn = GatedDeltaNet(c.required("linear_num_key_heads"), c.required("linear_num_value_heads"), c.required("linear_key_head_dim"),
                        c.required("linear_value_head_dim"), c.required("linear_conv_kernel_dim"))
    return _layers_from_types(c, types, {"full_attention": c.full(), "linear_attention": gdn})


def _qwen_gdn_fields(c: CommonFields) -> dict[str, Any]:
    text = c.text
    return {
        "attn_output_gate": bool(text.get("attn_output_gate", True)),
        "mtp_layers": c.whole("mtp_num_hidden_layers", None, hi=MAX_LAYERS) or c.whole("num_nextn_predict_layers", 0, hi=MAX_LAYERS),
        "mamba_ssm_dtype": _dtype_name(c, "mamba_ssm_dtype"),
    }


def _dtype_name(c: CommonFields, key: str) -> str | None:
    """A dtype field (``mamba_ssm_dtype``): absent or one of the dtypes servesize knows the bytes of."""
    value = c.text.get(key)
    if value is not None and (not isinstance(value, str) or value not in DTYPE_BYTES):
        raise BadInput(f"config field {key!r} must be one of {', '.join(sorted(DTYPE_BYTES))}, got {_shown(value)}")
    return value


def _qwen_gdn(c: CommonFields) -> FamilyParts:
    """Qwen3.5/3.6 dense: the Gated DeltaNet hybrid, gated attention output, MTP."""
    return FamilyParts(_qwen_gdn_layers(c), fields=_qwen_gdn_fields(c))


def _qwen_gdn_moe(c: CommonFields) -> FamilyParts:
    """Qwen3-Next, Qwen3.5/3.6 MoE: the Gated DeltaNet hybrid with routed experts and one gated shared expert."""
    layers = _qwen_gdn_layers(c)
    n_exp = c.required("num_experts")
    shared_inter = c.whole("shared_expert_intermediate_size", 0)
    moe = Moe(n_exp, _experts_per_token(c, n_exp), c.required("moe_intermediate_size"),
              1 if shared_inter else 0, shared_inter, 0, 1, c.intermediate_size)
    if c.text.get("mlp_only_layers"):
        raise c.refuse("dense mlp_only_layers are not modelled", ("mlp_only_layers",))
    return FamilyParts(layers, moe, _qwen_gdn_fields(c))


def _mamba2(c: CommonFields) -> FamilyParts:
    """Mamba2: every layer an SSM mixer, no attention."""
    m = Mamba2(c.required("num_heads"), c.required("head_dim"), c.required("state_size"),
               c.whole("n_groups", 1, lo=1), c.whole("conv_kernel", 4, lo=1, hi=1024))
    return FamilyParts([m] * c.num_layers)


def _granitemoehybrid(c: CommonFields) -> FamilyParts:
    """Granite 4.0 (GraniteMoeHybrid): Mamba2 mixers and full-attention layers by layer_types (config alias
    layers_block_type; every layer Mamba2 when absent, as GraniteMoeHybridConfig defaults), each layer with
    routed experts (num_local_experts; 0 is none) and a shared MLP of shared_intermediate_size.
    mamba_d_head 'auto' is mamba_expand x hidden / mamba_n_heads (the config's own rule)."""
    types = c.text.get("layer_types", c.text.get("layers_block_type"))
    if types is None:
        types = ["linear_attention"] * c.num_layers
    heads = c.whole("mamba_n_heads", 128, lo=1)
    inner = c.whole("mamba_expand", 2, lo=1) * c.hidden_size
    head_dim = c.text.get("mamba_d_head", "auto")
    head_dim = inner // heads if head_dim == "auto" else c.whole("mamba_d_head", None, lo=1)
    if head_dim * heads != inner:
        raise c.refuse("mamba_d_head x mamba_n_heads differs from mamba_expand x hidden_size",
                       ("mamba_d_head", "mamba_n_heads", "mamba_expand"))
    mamba = Mamba2(heads, head_dim, c.whole("mamba_d_state", 256, lo=1), c.whole("mamba_n_groups", 1, lo=1),
                   c.whole("mamba_d_conv", 4, lo=1, hi=1024))
    layers = _layers_from_types(c, types, {"full_attention": c.full(), "linear_attention": mamba})
    shared = c.whole("shared_intermediate_size", 1024)
    n_exp = c.whole("num_local_experts", 8)
    moe = None
    if n_exp:
        moe = Moe(n_exp, _experts_per_token(c, n_exp), c.intermediate_size, 1 if shared else 0, shared, 0, 1,
                  c.intermediate_size)
    elif not shared:
        raise c.refuse("neither experts nor a shared MLP", ("num_local_experts", "shared_intermediate_size"))
    return FamilyParts(layers, moe, fields={"attention_bias": bool(c.text.get("attention_bias", False))})


def _falcon_h1(c: CommonFields) -> FamilyParts:
    """Falcon-H1: attention and a Mamba2 mixer side by side in every layer (FalconH1ParallelHybrid), then a gated
    MLP. The mixer's width is mamba_d_ssm (mamba_expand x hidden when null, transformers' FalconH1Config and vLLM's
    falcon_h1.py alike), its heads mamba_n_heads x mamba_d_head. The mu-P multipliers scale activations, not sizes.
    vLLM builds the attention and the mixer as two layers with a cache each: the mixers ride in ``mixers``."""
    inner = c.text.get("mamba_d_ssm")
    inner = c.whole("mamba_expand", 2, lo=1) * c.hidden_size if inner is None else c.whole("mamba_d_ssm", None, lo=1)
    heads = c.whole("mamba_n_heads", 128, lo=1)
    head_dim = inner // heads if c.text.get("mamba_d_head", "auto") == "auto" else c.whole("mamba_d_head", None, lo=1)
    if head_dim * heads != inner:
        raise c.refuse("mamba_d_head x mamba_n_heads differs from mamba_d_ssm",
                       ("mamba_d_head", "mamba_n_heads", "mamba_d_ssm"))
    for key in ("projectors_bias", "mamba_proj_bias"):
        if c.text.get(key):
            raise c.refuse(f"{key}: biased projections are not modelled", (key,))
    mamba = Mamba2(heads, head_dim, c.whole("mamba_d_state", 256, lo=1), c.whole("mamba_n_groups", 1, lo=1),
                   c.whole("mamba_d_conv", 4, lo=1, hi=1024))
    return FamilyParts([c.full()] * c.num_layers, fields={"mixers": (mamba,) * c.num_layers,
                                                          "attention_bias": bool(c.text.get("attention_bias", False))})


# ---------------------------------------------------------------------------------------
# The table


@frozen
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
    # transformers MistralConfig: tie_word_embeddings = False (Mistral 3 text configs omit the field).
    "mistral": Family("mistral", partial(_dense, may_slide=True, slides_by_default=True), tie_default=False),
    "olmo2": Family("olmo2", _dense),
    "phi3": Family("phi3", _window_everywhere),
    "starcoder2": Family("starcoder2", partial(_window_everywhere, bias_key="use_bias", bias_by_default=True)),
    "qwen2": Family("qwen2", partial(_qwen2, bias_by_default=True)),
    "qwen3": Family("qwen3", _qwen2),
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
    "cohere2": Family("cohere2", _cohere2),
    "exaone4": Family("exaone4", _exaone4, tie_default=False),
    "smollm3": Family("smollm3", _smollm3),
    "llama4": _LLAMA4,
    "llama4_text": _LLAMA4,
    "deepseek_v2": Family("deepseek_v2", _deepseek),
    "deepseek_v3": _DEEPSEEK_V3,
    "deepseek_v32": Family("deepseek_v32", partial(_deepseek, indexer=True)),
    "glm_moe_dsa": Family("glm_moe_dsa", partial(_deepseek, indexer=True)),  # GLM-5: DeepSeek-V3.2's MLA + DSA
    "kimi_k2": _DEEPSEEK_V3,  # Kimi K2 is DeepSeek-V3's design
    "qwen3_next": Family("qwen3_next", _qwen_gdn_moe),
    "qwen3_5": _QWEN3_5,
    "qwen3_5_text": _QWEN3_5,
    "qwen3_5_moe": _QWEN3_5_MOE,
    "qwen3_5_moe_text": _QWEN3_5_MOE,
    "mamba2": Family("mamba2", _mamba2, needs_attention_heads=False),
    "granitemoehybrid": Family("granitemoehybrid", _granitemoehybrid, tie_default=False),
    "falcon_h1": Family("falcon_h1", _falcon_h1, tie_default=False),  # FalconH1Config: tie_word_embeddings False
}
SUPPORTED_MODEL_TYPES = tuple(MODEL_TYPES)
# model_types vLLM 0.32 serves (its model registry) whose layers servesize does not read yet: each refusal says
# which layer kind is missing.
LACKING_LAYER_KIND: dict[str, str] = {
    "deepseek_v4": ("DeepSeek-V4's compressed attention (compress_ratios: per-layer KV compressed 4x or 128x along "
                    "the sequence beside a sliding window), hash-routed expert layers and hyper-connections (hc_mult)"),
}


def family_of(config: Mapping[str, Any]) -> tuple[Mapping[str, Any], Family]:
    """The text config (a multimodal wrapper's ``text_config``) and the family that reads it, or refuse."""
    outer_type = config.get("model_type")
    if not outer_type:
        raise UnsupportedArchitecture("<missing>", "config has no model_type", ("model_type",))
    text = config.get("text_config") or config
    if not isinstance(text, Mapping):
        raise BadInput(f"config field 'text_config' must be a JSON object, got {type(text).__name__}")
    model_type = text.get("model_type") or outer_type
    if not isinstance(outer_type, str) or not isinstance(model_type, str):
        raise UnsupportedArchitecture(repr(outer_type)[:40], "model_type must be a string", ("model_type",))
    if outer_type not in SUPPORTED_MODEL_TYPES and model_type not in SUPPORTED_MODEL_TYPES:
        lacking = LACKING_LAYER_KIND.get(model_type) or LACKING_LAYER_KIND.get(outer_type)
        if lacking:
            raise UnsupportedArchitecture(outer_type, f"vLLM serves it, but servesize has no reader for its layer kind: "
                                          f"{lacking}", ("model_type",))
        raise UnsupportedArchitecture(
            outer_type,
            f"this model_type is not in servesize's allowlist ({', '.join(SUPPORTED_MODEL_TYPES)})",
            ("model_type",),
        )
    return text, MODEL_TYPES[outer_type if outer_type in SUPPORTED_MODEL_TYPES else model_type]
