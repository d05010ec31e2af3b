"""Architecture: what a config.json says, normalised into layer kinds.

Fail closed: a ``model_type`` outside the allowlist (``families.MODEL_TYPES``), or a layer design
its family's reader does not recognise, raises ``UnsupportedArchitecture`` naming the fields —
never a guess. Redundant inputs are cross-checked (``layer_types`` vs ``full_attention_interval``);
an explicit ``head_dim`` wins over ``hidden_size / heads``, and its absence is recorded.

The layer kinds and what each caches are in ``layers.py``; one reader per model family in
``families.py``; ``quantization_config`` in ``quantization.py``.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servesize.errors import BadInput, UnsupportedArchitecture
from servesize.model.families import SUPPORTED_MODEL_TYPES, family_of, read_common
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

    @property
    def attention_free(self) -> bool:
        """No layer attends over the context (a pure Mamba/SSM stack): vLLM's 'attention_free' models."""
        return not any(layer.is_attention for layer in self.layers)


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


def from_config(config: Mapping[str, Any], name: str = "") -> Architecture:
    """Normalise a Hugging Face config.json (dict) into an Architecture, or refuse."""
    if not isinstance(config, Mapping):
        raise BadInput("a config must be a JSON object")
    text, family = family_of(config)
    common = read_common(config, text, family)
    parts = family.read(common)
    for key in ("kv_cache_quant_method",):
        if key in text:
            raise UnsupportedArchitecture(family.name, "unrecognised KV-cache field", (key,))
    quant = parse_quantization(config.get("quantization_config") or text.get("quantization_config"), family.name)
    geometry: dict[str, Any] = {
        "head_dim": common.head_dim, "head_dim_explicit": common.head_dim_explicit, "num_kv_heads": common.num_kv_heads,
    }
    return Architecture(
        name=name or (config.get("_name_or_path") or family.name),
        model_type=family.name,
        architectures=tuple(config.get("architectures") or ()),
        hidden_size=common.hidden_size,
        vocab_size=common.vocab_size,
        num_attention_heads=common.num_attention_heads,
        layers=tuple(parts.layers),
        intermediate_size=common.intermediate_size,
        tie_word_embeddings=common.tie_word_embeddings,
        dtype=common.dtype,
        max_position_embeddings=int(text.get("max_position_embeddings") or 0),
        moe=parts.moe,
        quantization=quant,
        config=dict(text),
        vision_config=config.get("vision_config"),
        warnings=common.warnings + parts.warnings,
        **{**geometry, **parts.fields},
    )
