"""Architecture: what a config.json says, normalised into layer kinds.

Fail closed: a ``model_type`` outside the allowlist (``families.MODEL_TYPES``), or a layer design
its family's reader does not recognise, raises ``UnsupportedArchitecture`` naming the fields —
never a guess. Redundant inputs are cross-checked (``layer_types`` vs ``full_attention_interval``);
an explicit ``head_dim`` wins over ``hidden_size / heads``, and its absence is recorded.

The layer kinds and what each caches are in ``layers.py``; one reader per model family in
``families.py``; ``quantization_config`` in ``quantization.py``.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Mapping
from dataclasses import field
from typing import Any, TypeVar

from servesize.errors import BadInput, UnsupportedArchitecture
from servesize.frozen import frozen
from servesize.limits import MAX_CONFIG_BYTES, parse_json, read_input
from servesize.model.families import SUPPORTED_MODEL_TYPES, config_int, family_of, read_common
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


@frozen
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
    # MLA layers that compute (and cache keys for) the indexer; None = every MLA layer. GLM-5.2's IndexShare marks
    # the others indexer_types 'shared': they reuse the top-k of the last 'full' layer, and vLLM builds no indexer
    # (nor its key cache) there (vllm/model_executor/models/deepseek_v2.py, _skip_topk).
    indexer_layers: tuple[int, ...] | None = None
    mamba_ssm_dtype: str | None = None
    # A second mixer beside a layer's attention, one per layer in that layer's place (Falcon-H1's parallel hybrid:
    # a Mamba2 mixer and attention side by side in every layer). vLLM builds each as a layer of its own, with its
    # own KV-cache spec (vllm/model_executor/models/falcon_h1.py, FalconH1ParallelHybrid), so each is a cache layer
    # (``cache_layers``) while the layer count (MLP, norms, pipeline stages) stays the decoder's.
    mixers: tuple[Layer, ...] = ()
    config: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)  # the text config
    vision_config: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    # The multimodal wrapper's own projector fields (Mistral 3: spatial_merge_size, ...), read by the ledger.
    projector_config: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    warnings: tuple[str, ...] = ()

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def moe_layer_ids(self) -> list[int]:
        """The decoder layers with routed experts (none for a dense model)."""
        moe = self.moe
        return [] if moe is None else [i for i in range(self.num_layers) if moe.is_moe_layer(i)]

    @property
    def cache_layers(self) -> tuple[Layer, ...]:
        """Every layer vLLM gives a cache spec: the decoder's layers, then the mixers beside them."""
        return self.layers + self.mixers

    def count(self, kind: str) -> int:
        """Cache layers of one kind (a parallel mixer counts as a layer of its kind)."""
        return sum(1 for layer in self.cache_layers if layer.kind == kind)

    @property
    def indexer_count(self) -> int:
        """Layers holding a sparse-attention indexer (its weights and its key cache); 0 without one."""
        if not self.index_head_dim:
            return 0
        return self.count(MLA) if self.indexer_layers is None else len(self.indexer_layers)

    @property
    def kinds(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for layer in self.cache_layers:
            out[layer.kind] = out.get(layer.kind, 0) + 1
        return out

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def has_state(self) -> bool:
        return any(layer.kind in STATE_KINDS for layer in self.cache_layers)

    @property
    def attention_free(self) -> bool:
        """No layer attends over the context (a pure Mamba/SSM stack): vLLM's 'attention_free' models."""
        return not any(layer.is_attention for layer in self.layers)


# ---------------------------------------------------------------------------------------
# Reading config.json


def load_config_file(path: str | pathlib.Path) -> dict:
    """Read a config.json (or a model folder holding one). Errors are one line."""
    p = pathlib.Path(path)
    if _is_dir(p):
        for name in ("config.json", "config.partial.json"):
            if (p / name).is_file():
                p = p / name
                break
        else:
            raise BadInput(f"{path}: folder has no config.json")
    raw = read_input(p, "config", MAX_CONFIG_BYTES)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise BadInput(f"{path}: not UTF-8 text (a config.json is JSON)") from None
    data = parse_json(text, str(path))
    if not isinstance(data, dict):
        raise BadInput(f"{path}: a config.json must be a JSON object")
    return data


def _is_dir(p: pathlib.Path) -> bool:
    try:
        return p.is_dir()
    except (OSError, ValueError):  # a name too long for the file system: read_input says so
        return False


def from_config(config: Mapping[str, Any], name: str = "") -> Architecture:
    """Normalise a Hugging Face config.json (dict) into an Architecture, or refuse."""
    if not isinstance(config, Mapping):
        raise BadInput("a config must be a JSON object")
    text, family = family_of(config)
    _check_generative(config, family.name)
    common = read_common(config, text, family)
    parts = family.read(common)
    for key in ("kv_cache_quant_method",):
        if key in text:
            raise UnsupportedArchitecture(family.name, "unrecognised KV-cache field", (key,))
    quant = parse_quantization(config.get("quantization_config") or text.get("quantization_config"), family.name)
    _rope_scaling(text, family.name)
    geometry: dict[str, Any] = {
        "head_dim": common.head_dim, "head_dim_explicit": common.head_dim_explicit, "num_kv_heads": common.num_kv_heads,
    }
    return Architecture(
        name=name or str(config.get("_name_or_path") or family.name),
        model_type=family.name,
        architectures=_names(config, "architectures"),
        hidden_size=common.hidden_size,
        vocab_size=common.vocab_size,
        num_attention_heads=common.num_attention_heads,
        layers=tuple(parts.layers),
        intermediate_size=common.intermediate_size,
        tie_word_embeddings=common.tie_word_embeddings,
        dtype=common.dtype,
        max_position_embeddings=config_int(text, "max_position_embeddings", family.name, 0, lo=1),
        moe=parts.moe,
        quantization=quant,
        config=dict(text),
        vision_config=_table(config, "vision_config", family.name),
        projector_config={k: config[k] for k in PROJECTOR_KEYS if k in config},
        warnings=common.warnings + parts.warnings,
        **{**geometry, **parts.fields},
    )


# A multimodal wrapper's top-level fields that shape its vision projector (transformers Mistral3Config).
PROJECTOR_KEYS = ("spatial_merge_size", "multimodal_projector_bias", "vision_feature_layer")


# Heads that generate no text (encoders, classifiers, embedding and reward models): vLLM serves them as pooling
# models, with no KV cache for decoding; servesize sizes text generation and refuses them by name.
_NOT_GENERATIVE = ("ForSequenceClassification", "ForTokenClassification", "ForMaskedLM", "ForQuestionAnswering",
                   "ForMultipleChoice", "ForNextSentencePrediction", "ForPreTraining", "ForImageClassification",
                   "ForAudioClassification", "ForEmbedding", "ForRewardModel", "ForProcessRewardModel")


def _check_generative(config: Mapping[str, Any], family: str) -> None:
    for name in _names(config, "architectures"):
        bare_model = name.endswith("Model") and not name.endswith(("LMHeadModel", "MTPModel"))
        if bare_model or any(head in name for head in _NOT_GENERATIVE):
            raise UnsupportedArchitecture(name, "a model that generates no text (an encoder, a classifier or an "
                                          "embedding model: vLLM serves it for pooling, with no decode KV cache); "
                                          "servesize sizes text generation", ("architectures",))


def _names(config: Mapping[str, Any], key: str) -> tuple[str, ...]:
    """A list of names (``architectures``): absent is none; anything but a list of strings is refused."""
    value = config.get(key) or ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise BadInput(f"config field {key!r} must be a list of class names, got {str(value)[:40]!r}")
    return tuple(value)


def _table(config: Mapping[str, Any], key: str, family: str) -> Mapping[str, Any] | None:
    """A nested config table (``vision_config``): absent/null is none; anything but a JSON object is refused."""
    value = config.get(key)
    if value is None or isinstance(value, Mapping):
        return value
    raise BadInput(f"config field {key!r} must be a JSON object, got {type(value).__name__}")


def _rope_scaling(text: Mapping[str, Any], family: str) -> None:
    """rope_scaling, read by the context limit (engine.deployment): an object whose factor is a finite
    number > 0 and whose original_max_position_embeddings is a whole number >= 1."""
    rope = text.get("rope_scaling")
    if rope is None:
        return
    if not isinstance(rope, Mapping):
        raise BadInput(f"config field 'rope_scaling' must be a JSON object, got {type(rope).__name__}")
    factor = rope.get("factor")
    if factor is not None and (isinstance(factor, bool) or not isinstance(factor, (int, float))
                               or not 0 < factor < 1e6):
        raise BadInput(f"config field 'rope_scaling.factor' must be a number in (0, 1e6), got {factor!r:.40}")
    config_int(rope, "original_max_position_embeddings", family, None, lo=1, prefix="rope_scaling.")


_R = TypeVar("_R")
MEMO_ENTRIES = 1024  # a memo per function: past this many entries it starts afresh (a process sees a few dozen models)


def per_architecture(fn: Callable[..., _R]) -> Callable[..., _R]:
    """Memoise ``fn(arch, *args)`` on the Architecture's identity and the other (hashable) arguments: the
    catalogue hands out one Architecture per model, and hashing one field by field (every layer) costs about
    what some of these functions do. The memo holds the Architecture, so an id is never reused while kept."""
    memo: dict = {}

    def memoised(arch: Architecture, *args: Any, **kwargs: Any) -> _R:
        key = (id(arch), args, tuple(sorted(kwargs.items())))
        hit = memo.get(key)
        if hit is not None and hit[0] is arch:
            return hit[1]
        value = fn(arch, *args, **kwargs)
        if len(memo) >= MEMO_ENTRIES:
            memo.clear()
        memo[key] = (arch, value)
        return value

    memoised.__doc__, memoised.__name__, memoised.__wrapped__ = fn.__doc__, fn.__name__, fn  # type: ignore[attr-defined]
    return memoised
