"""Architecture: what a config.json says, normalised into layer kinds.

Fail closed: a ``model_type`` outside the allowlist, or a layer design the reader does not
recognise, raises ``UnsupportedArchitecture`` naming the fields — never a guess. Redundant
inputs are cross-checked (``layer_types`` vs ``full_attention_interval``, explicit
``head_dim`` vs ``hidden_size / heads`` is *not* assumed: an explicit head_dim wins, and
its absence is recorded).

The layer kinds, one frozen type each, and what each caches are in ``layers.py``.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servesize.errors import BadInput, UnsupportedArchitecture
from servesize.model.layers import (
    ATTENTION_KINDS,
    CHUNKED,
    FULL,
    GDN,
    MAMBA,
    MLA,
    SLIDING,
    STATE_KINDS,
    ChunkedLocal,
    FullAttention,
    GatedDeltaNet,
    KvHeadAttention,
    Layer,
    Mamba2,
    Mla,
    Moe,
    SlidingWindow,
    WindowedAttention,
)
from servesize.model.quantization import DTYPE_BYTES, Quantization, parse_quantization

# Re-exported: callers name the kinds, layer types and tables through the architecture.
__all__ = [
    "ATTENTION_KINDS", "CHUNKED", "DTYPE_BYTES", "FULL", "GDN", "MAMBA", "MLA", "SLIDING", "STATE_KINDS",
    "SUPPORTED_MODEL_TYPES", "Architecture", "ChunkedLocal", "FullAttention", "GatedDeltaNet", "KvHeadAttention",
    "Layer", "Mamba2", "Mla", "Moe", "Quantization", "SlidingWindow", "WindowedAttention", "from_config",
    "load_config_file",
]


@dataclass(frozen=True)
class Architecture:
    name: str
    model_type: str
    architectures: tuple[str, ...]
    hidden_size: int
    vocab_size: int
    num_attention_heads: int
    head_dim: int  # query head size of the attention layers
    head_dim_explicit: bool
    num_kv_heads: int
    layers: tuple[Layer, ...]
    intermediate_size: int
    tie_word_embeddings: bool
    dtype: str
    max_position_embeddings: int
    moe: Moe | None = None
    quantization: Quantization | None = None
    mtp_layers: int = 0
    attention_bias: bool = False
    attn_output_gate: bool = False
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    index_head_dim: int | None = None  # DeepSeek-V3.2 sparse-attention indexer key width
    index_n_heads: int | None = None
    mamba_ssm_dtype: str | None = None
    config: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)  # the text config
    vision_config: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    warnings: tuple[str, ...] = ()

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def count(self, kind: str) -> int:
        return sum(1 for layer in self.layers if layer.kind == kind)

    @property
    def kinds(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for layer in self.layers:
            out[layer.kind] = out.get(layer.kind, 0) + 1
        return out

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def has_state(self) -> bool:
        return any(layer.kind in STATE_KINDS for layer in self.layers)


# ---------------------------------------------------------------------------------------
# Reading config.json


def load_config_file(path: str | pathlib.Path) -> dict:
    """Read a config.json (or a model folder holding one). Errors are one line."""
    p = pathlib.Path(path)
    if p.is_dir():
        for name in ("config.json", "config.partial.json"):
            if (p / name).is_file():
                p = p / name
                break
        else:
            raise BadInput(f"{path}: folder has no config.json")
    if not p.is_file():
        raise BadInput(f"{path}: no such file")
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read ({exc})") from None
    if not isinstance(data, dict):
        raise BadInput(f"{path}: a config.json must be a JSON object")
    return data


# model_type (outer or text) -> reader family. Anything else is refused.
_DENSE_GQA = {"llama", "mistral", "qwen2", "qwen3", "phi3", "granite", "olmo2"}
SUPPORTED_MODEL_TYPES = (
    sorted(_DENSE_GQA)
    + ["mixtral", "qwen2_moe", "qwen3_moe", "minimax_m2", "glm4_moe", "gpt_oss", "gemma3", "gemma3_text",
       "gemma2", "llama4", "llama4_text", "deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2",
       "qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "mamba2"]
)


def _req(cfg: Mapping, key: str, model_type: str):
    if key not in cfg or cfg[key] is None:
        raise UnsupportedArchitecture(model_type, f"config lacks required field {key!r}", (key,))
    return cfg[key]


def _int(cfg: Mapping, key: str, model_type: str) -> int:
    value = _req(cfg, key, model_type)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < 0:
        raise BadInput(f"config field {key!r} must be a non-negative integer, got {value!r}")
    return int(value)


def from_config(config: Mapping[str, Any], name: str = "") -> Architecture:
    """Normalise a Hugging Face config.json (dict) into an Architecture, or refuse."""
    if not isinstance(config, Mapping):
        raise BadInput("a config must be a JSON object")
    outer_type = config.get("model_type")
    if not outer_type:
        raise UnsupportedArchitecture("<missing>", "config has no model_type", ("model_type",))
    text = config.get("text_config") or config
    model_type = text.get("model_type") or outer_type
    if outer_type not in SUPPORTED_MODEL_TYPES and model_type not in SUPPORTED_MODEL_TYPES:
        raise UnsupportedArchitecture(
            outer_type,
            "this model_type is not in servesize's allowlist "
            f"({', '.join(SUPPORTED_MODEL_TYPES)})",
            ("model_type",),
        )
    family = outer_type if outer_type in SUPPORTED_MODEL_TYPES else model_type
    family = {"gemma3_text": "gemma3", "llama4_text": "llama4", "qwen3_5_text": "qwen3_5",
              "qwen3_5_moe_text": "qwen3_5_moe", "kimi_k2": "deepseek_v3"}.get(family, family)

    warnings: list[str] = []
    hidden = _int(text, "hidden_size", family) if family != "mamba2" else _int(text, "hidden_size", family)
    vocab = _int(text, "vocab_size", family)
    n_layers = _int(text, "num_hidden_layers", family)
    if n_layers == 0:
        raise BadInput("config says num_hidden_layers = 0")
    heads = _int(text, "num_attention_heads", family) if family != "mamba2" else int(text.get("num_attention_heads") or 0)
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim_explicit = text.get("head_dim") is not None
    if head_dim_explicit:
        head_dim = _int(text, "head_dim", family)
    else:
        if heads == 0 or hidden % heads:
            raise UnsupportedArchitecture(family, "no head_dim and hidden_size is not a multiple of the heads",
                                          ("head_dim", "hidden_size", "num_attention_heads"))
        head_dim = hidden // heads
    if heads and kv_heads and heads % kv_heads:
        raise UnsupportedArchitecture(family, f"{heads} attention heads are not a multiple of {kv_heads} KV heads",
                                      ("num_attention_heads", "num_key_value_heads"))
    dtype = str(text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    if dtype not in DTYPE_BYTES:
        raise BadInput(f"config dtype {dtype!r} is not one of {', '.join(sorted(DTYPE_BYTES))}")
    tie = text.get("tie_word_embeddings")
    if tie is None:
        tie = config.get("tie_word_embeddings")
    if tie is None:
        # transformers' PretrainedConfig default is True; Gemma ties, Llama 4 does not.
        tie = {"gemma3": True, "gemma2": True, "llama4": False}.get(family, True)
        warnings.append(f"tie_word_embeddings absent: took {tie} (the {family} default)")

    kwargs: dict[str, Any] = {}
    layers: list[Layer]
    full = FullAttention(kv_heads, head_dim, head_dim)
    moe: Moe | None = None
    intermediate = int(text.get("intermediate_size") or 0)

    if family in _DENSE_GQA:
        window = text.get("sliding_window")
        use_swa = text.get("use_sliding_window", family in ("mistral",))
        if window and use_swa and family in ("mistral", "phi3"):
            layers = [SlidingWindow(kv_heads, head_dim, head_dim, int(window))] * n_layers
        else:
            layers = [full] * n_layers
        kwargs["attention_bias"] = bool(text.get("attention_bias", family == "qwen2"))
    elif family in ("mixtral", "qwen2_moe", "qwen3_moe", "minimax_m2", "glm4_moe"):
        layers = [full] * n_layers
        window = text.get("sliding_window")
        if family == "mixtral" and window:
            layers = [SlidingWindow(kv_heads, head_dim, head_dim, int(window))] * n_layers
        n_exp = int(text.get("num_local_experts") or text.get("num_experts") or text.get("n_routed_experts") or 0)
        if not n_exp:
            raise UnsupportedArchitecture(family, "a mixture-of-experts model without an expert count",
                                          ("num_experts", "num_local_experts", "n_routed_experts"))
        expert_inter = int(text.get("moe_intermediate_size") or intermediate)
        shared_n = int(text.get("n_shared_experts") or 0)
        shared_inter = int(text.get("shared_expert_intermediate_size") or text.get("shared_intermediate_size") or 0)
        if shared_n and not shared_inter:
            shared_inter = shared_n * expert_inter
        if shared_inter and not shared_n:
            shared_n = 1
        sparse_step = int(text.get("decoder_sparse_step") or 1)
        if sparse_step != 1 or text.get("mlp_only_layers"):
            raise UnsupportedArchitecture(family, "dense layers interleaved by decoder_sparse_step/mlp_only_layers are not modelled",
                                          ("decoder_sparse_step", "mlp_only_layers"))
        moe = Moe(n_exp, _int(text, "num_experts_per_tok", family), expert_inter, shared_n, shared_inter,
                  int(text.get("first_k_dense_replace") or 0), 1, intermediate)
        kwargs["attention_bias"] = bool(text.get("attention_bias", family in ("qwen2_moe", "glm4_moe")))
    elif family == "gpt_oss":
        types = text.get("layer_types")
        window = _int(text, "sliding_window", family)
        layers = _layers_from_types(types, n_layers, family, {
            "full_attention": full,
            "sliding_attention": SlidingWindow(kv_heads, head_dim, head_dim, window),
        })
        moe = Moe(_int(text, "num_local_experts", family), _int(text, "num_experts_per_tok", family), intermediate)
        kwargs["attention_bias"] = bool(text.get("attention_bias", True))
    elif family in ("gemma3", "gemma2"):
        window = _int(text, "sliding_window", family)
        sliding = SlidingWindow(kv_heads, head_dim, head_dim, window)
        types = text.get("layer_types")
        pattern = text.get("sliding_window_pattern") or text.get("_sliding_window_pattern")
        if types is None:
            if family == "gemma2":
                types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n_layers)]
            elif pattern:
                types = ["full_attention" if (i + 1) % int(pattern) == 0 else "sliding_attention" for i in range(n_layers)]
            else:
                raise UnsupportedArchitecture(family, "neither layer_types nor sliding_window_pattern says which layers are local",
                                              ("layer_types", "sliding_window_pattern"))
        elif pattern:
            derived = ["full_attention" if (i + 1) % int(pattern) == 0 else "sliding_attention" for i in range(n_layers)]
            if list(types) != derived:
                raise UnsupportedArchitecture(family, "layer_types disagrees with sliding_window_pattern",
                                              ("layer_types", "sliding_window_pattern"))
        layers = _layers_from_types(types, n_layers, family, {"full_attention": full, "sliding_attention": sliding})
    elif family == "llama4":
        chunk = text.get("attention_chunk_size")
        no_rope = text.get("no_rope_layers")
        if no_rope is None:
            # transformers Llama4TextConfig default: every 4th layer is a global NoPE layer.
            no_rope = [int((i + 1) % 4 != 0) for i in range(n_layers)]
            warnings.append("no_rope_layers absent: every 4th layer global (transformers' Llama4TextConfig default)")
        if len(no_rope) != n_layers:
            raise UnsupportedArchitecture(family, "no_rope_layers length differs from num_hidden_layers",
                                          ("no_rope_layers", "num_hidden_layers"))
        local: Layer = ChunkedLocal(kv_heads, head_dim, head_dim, int(chunk)) if chunk else full
        layers = [local if uses_rope else full for uses_rope in no_rope]
        step = int(text.get("interleave_moe_layer_step") or 1)
        moe = Moe(_int(text, "num_local_experts", family), _int(text, "num_experts_per_tok", family), intermediate,
                  1, intermediate, 0, step, int(text.get("intermediate_size_mlp") or intermediate))
    elif family in ("deepseek_v2", "deepseek_v3", "deepseek_v32"):
        kv_lora = _int(text, "kv_lora_rank", family)
        rope = _int(text, "qk_rope_head_dim", family)
        nope = _int(text, "qk_nope_head_dim", family)
        v_dim = _int(text, "v_head_dim", family)
        layers = [Mla(kv_lora, rope)] * n_layers
        head_dim = nope + rope
        head_dim_explicit = True
        kv_heads = heads  # MLA decompresses to per-head K/V; the cache holds one latent
        kwargs.update(q_lora_rank=text.get("q_lora_rank"), kv_lora_rank=kv_lora, qk_rope_head_dim=rope,
                      qk_nope_head_dim=nope, v_head_dim=v_dim)
        if family == "deepseek_v32":
            kwargs.update(index_head_dim=_int(text, "index_head_dim", family), index_n_heads=_int(text, "index_n_heads", family))
        n_exp = _int(text, "n_routed_experts", family)
        freq = int(text.get("moe_layer_freq") or 1)
        shared_n = int(text.get("n_shared_experts") or 0)
        expert_inter = _int(text, "moe_intermediate_size", family)
        moe = Moe(n_exp, _int(text, "num_experts_per_tok", family), expert_inter, shared_n, shared_n * expert_inter,
                  int(text.get("first_k_dense_replace") or 0), freq, intermediate)
        kwargs["mtp_layers"] = int(text.get("num_nextn_predict_layers") or 0)
    elif family in ("qwen3_next", "qwen3_5", "qwen3_5_moe"):
        interval = text.get("full_attention_interval")
        types = text.get("layer_types")
        if types is None:
            if not interval:
                raise UnsupportedArchitecture(family, "neither layer_types nor full_attention_interval", ("layer_types", "full_attention_interval"))
            types = ["full_attention" if (i + 1) % int(interval) == 0 else "linear_attention" for i in range(n_layers)]
        elif interval:
            derived = ["full_attention" if (i + 1) % int(interval) == 0 else "linear_attention" for i in range(n_layers)]
            if list(types) != derived:
                raise UnsupportedArchitecture(family, "layer_types disagrees with full_attention_interval",
                                              ("layer_types", "full_attention_interval"))
        gdn = GatedDeltaNet(_int(text, "linear_num_key_heads", family), _int(text, "linear_num_value_heads", family),
                            _int(text, "linear_key_head_dim", family), _int(text, "linear_value_head_dim", family),
                            _int(text, "linear_conv_kernel_dim", family))
        layers = _layers_from_types(types, n_layers, family, {"full_attention": full, "linear_attention": gdn})
        if family in ("qwen3_next", "qwen3_5_moe"):
            n_exp = _int(text, "num_experts", family)
            shared_inter = int(text.get("shared_expert_intermediate_size") or 0)
            moe = Moe(n_exp, _int(text, "num_experts_per_tok", family), _int(text, "moe_intermediate_size", family),
                      1 if shared_inter else 0, shared_inter, 0, 1, intermediate)
            if text.get("mlp_only_layers"):
                raise UnsupportedArchitecture(family, "dense mlp_only_layers are not modelled", ("mlp_only_layers",))
        kwargs["attn_output_gate"] = bool(text.get("attn_output_gate", True))
        kwargs["mtp_layers"] = int(text.get("mtp_num_hidden_layers") or text.get("num_nextn_predict_layers") or 0)
        kwargs["mamba_ssm_dtype"] = text.get("mamba_ssm_dtype")
    elif family == "mamba2":
        m = Mamba2(_int(text, "num_heads", family), _int(text, "head_dim", family), _int(text, "state_size", family),
                   int(text.get("n_groups") or 1), int(text.get("conv_kernel") or 4))
        layers = [m] * n_layers
    else:  # pragma: no cover - the allowlist and this chain are kept in step by a test
        raise UnsupportedArchitecture(family, "no reader for this family", ("model_type",))

    if family == "minimax_m2":
        kwargs["mtp_layers"] = int(text.get("num_mtp_modules") or 0) if text.get("use_mtp") else 0
    if family == "glm4_moe":
        kwargs["mtp_layers"] = int(text.get("num_nextn_predict_layers") or 0)

    for key in ("kv_cache_quant_method",):
        if key in text:
            raise UnsupportedArchitecture(family, "unrecognised KV-cache field", (key,))

    quant = parse_quantization(config.get("quantization_config") or text.get("quantization_config"), family)
    return Architecture(
        name=name or (config.get("_name_or_path") or family),
        model_type=family,
        architectures=tuple(config.get("architectures") or ()),
        hidden_size=hidden,
        vocab_size=vocab,
        num_attention_heads=heads,
        head_dim=head_dim,
        head_dim_explicit=head_dim_explicit,
        num_kv_heads=kv_heads,
        layers=tuple(layers),
        intermediate_size=intermediate,
        tie_word_embeddings=bool(tie),
        dtype=dtype,
        max_position_embeddings=int(text.get("max_position_embeddings") or 0),
        moe=moe,
        quantization=quant,
        config=dict(text),
        vision_config=config.get("vision_config"),
        warnings=tuple(warnings),
        **kwargs,
    )


def _layers_from_types(types, n_layers: int, family: str, mapping: Mapping[str, Layer]) -> list[Layer]:
    if not isinstance(types, list) or len(types) != n_layers:
        raise UnsupportedArchitecture(family, f"layer_types must list {n_layers} layers", ("layer_types", "num_hidden_layers"))
    unknown = sorted({t for t in types if t not in mapping})
    if unknown:
        raise UnsupportedArchitecture(family, f"unrecognised layer type(s) {', '.join(map(repr, unknown))}", ("layer_types",))
    return [mapping[t] for t in types]
