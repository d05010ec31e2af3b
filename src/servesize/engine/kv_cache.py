"""KV and recurrent-state bytes, per layer kind, per token and per sequence, per TP rank.

Exactly as vLLM shapes them (vLLM 0.32 vllm/v1/kv_cache_interface.py ``page_size_bytes`` of
``FullAttentionSpec``/``MLAAttentionSpec``/``MambaSpec``; vllm/config/model.py ``get_num_kv_heads``;
vllm/model_executor/layers/mamba/mamba_utils.py ``MambaStateShapeCalculator``):

- GQA/MHA: K and V for ``max(1, kv_heads // tp)`` heads on every rank — replicated, not
  sharded further, once tp exceeds the KV heads.
- MLA: one latent of ``kv_lora_rank + qk_rope_head_dim`` per token, no K/V factor 2, the
  same latent on every TP rank (``get_num_kv_heads`` is 1 for MLA).
- Sliding window / chunked local: as full attention per token, but capped at the window.
- Gated DeltaNet: conv state ``(conv_kernel - 1 + spec, conv_dim / tp)`` in the model dtype and
  recurrent state ``(v_heads / tp, v_dim, k_dim)`` in the SSM-cache dtype (fp32 for Qwen3.5/3.6).
- Mamba2: conv ``(conv_kernel - 1 + spec, conv_dim / tp)`` and SSM ``(heads / tp, head_dim, d_state)``.
"""

from __future__ import annotations

from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.model.architecture import Architecture, per_architecture
from servesize.model.layers import FullAttention, GatedDeltaNet, KvHeadAttention, Layer, Mamba2, Mla, WindowedAttention
from servesize.model.quantization import DTYPE_BYTES

# vLLM --kv-cache-dtype values with one plain element size (None = the model dtype).
KV_CACHE_DTYPES: dict[str, int | None] = {
    "auto": None, "bfloat16": 2, "float16": 2, "half": 2, "float32": 4,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "fp8_ds_mla": 1,
}
# Quantised KV caches whose page vLLM's backend packs (customize_spec, 0.32/0.33 sources):
# per-token-head modes add an fp32 scale per K and per V side after each head's data
# (triton_attn.py, mla_attention.py); int4 packs two values a byte; NVFP4 stores fp4 data plus
# one fp8 scale per 16 values (utils/torch_utils.py nvfp4_kv_cache_full_dim: d // 2 + d // 16).
PER_TOKEN_HEAD = {"int8_per_token_head": 1.0, "fp8_per_token_head": 1.0, "int4_per_token_head": 0.5}
PER_TOKEN_HEAD_SCALE_BYTES = 2 * 4
NVFP4_KV = "nvfp4"
# DeepSeek's FlashMLA fp8 cache stores 512 fp8 latent values, 4 fp32 scales and 64 bf16 rope
# values per token: 512 + 16 + 128 = 656 bytes (vllm-kv-sizing.md §3.2, MLAAttentionSpec);
# its NVFP4 layout 352 (mla_attention.py: {"fp8_ds_mla": 656, "nvfp4_ds_mla": 352}).
DS_MLA_BYTES_PER_TOKEN = {"fp8_ds_mla": 656, "nvfp4_ds_mla": 352}
# The sparse-attention indexer key (DeepSeek-V3.2): index_head_dim fp8 values plus one fp32
# scale per 128 values -> 128 + 4 = 132 bytes per token per layer.
INDEXER_SCALE_BYTES_PER_128 = 4
MODELLED_KV_CACHE_DTYPES = (*KV_CACHE_DTYPES, *PER_TOKEN_HEAD, NVFP4_KV, "nvfp4_ds_mla")


def kv_element_bytes(kv_cache_dtype: str, model_dtype: str) -> int:
    """Bytes of one cached element for the plain dtypes (the packed ones: ``head_bytes``)."""
    if kv_cache_dtype in PER_TOKEN_HEAD or kv_cache_dtype in (NVFP4_KV, "nvfp4_ds_mla"):
        return 1
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise BadInput(f"--kv-cache-dtype {kv_cache_dtype!r}: servesize models {', '.join(MODELLED_KV_CACHE_DTYPES)}; "
                       "the others' page layouts are their backends' own", field="kv_cache_dtype")
    b = KV_CACHE_DTYPES[kv_cache_dtype]
    return DTYPE_BYTES[model_dtype] if b is None else b


def head_bytes(kv_cache_dtype: str, head_dim_k: int, head_dim_v: int, kv_bytes: int) -> int:
    """Bytes one KV head caches per token (its K and V side, with any inline scales)."""
    if kv_cache_dtype in PER_TOKEN_HEAD:
        per = PER_TOKEN_HEAD[kv_cache_dtype]
        return int(head_dim_k * per) + int(head_dim_v * per) + PER_TOKEN_HEAD_SCALE_BYTES
    if kv_cache_dtype == NVFP4_KV:
        return (head_dim_k // 2 + head_dim_k // 16) + (head_dim_v // 2 + head_dim_v // 16)
    return (head_dim_k + head_dim_v) * kv_bytes


def kv_heads_per_rank(num_kv_heads: int, tp: int) -> int:
    """vLLM ModelConfig.get_num_kv_heads: max(1, kv_heads // tp) — replication past kv_heads."""
    return max(1, num_kv_heads // tp)


def layer_bytes_per_token(layer: Layer, tp: int, kv_bytes: int, kv_cache_dtype: str = "auto") -> int:
    """Bytes one attention layer caches per token on one TP rank (0 for state layers)."""
    if isinstance(layer, KvHeadAttention):
        if kv_cache_dtype in DS_MLA_BYTES_PER_TOKEN:
            raise BadInput(f"--kv-cache-dtype {kv_cache_dtype} is vLLM's cache layout for MLA (DeepSeek's latent "
                           "attention) and this model's attention is not MLA: vLLM finds no attention backend for it; "
                           f"use {'fp8' if kv_cache_dtype.startswith('fp8') else 'nvfp4'} (or auto)", field="kv_cache_dtype")
        return kv_heads_per_rank(layer.num_kv_heads, tp) * head_bytes(kv_cache_dtype, layer.head_dim, layer.head_dim_v, kv_bytes)
    if isinstance(layer, Mla):
        if kv_cache_dtype in DS_MLA_BYTES_PER_TOKEN:
            return DS_MLA_BYTES_PER_TOKEN[kv_cache_dtype]
        if kv_cache_dtype in PER_TOKEN_HEAD:  # the latent is one head, single-sided
            return int(layer.latent_dim * PER_TOKEN_HEAD[kv_cache_dtype]) + PER_TOKEN_HEAD_SCALE_BYTES
        if kv_cache_dtype == NVFP4_KV:
            raise BadInput("--kv-cache-dtype nvfp4 is not an MLA cache layout; vLLM's MLA NVFP4 cache is nvfp4_ds_mla",
            field="kv_cache_dtype")
        return layer.latent_dim * kv_bytes  # latent replicated on every rank
    return 0


def indexer_bytes_per_token(arch: Architecture) -> int:
    if not arch.index_head_dim:
        return 0
    return arch.index_head_dim + arch.index_head_dim // 128 * INDEXER_SCALE_BYTES_PER_128


@frozen
class StateShape:
    conv_elements: int
    ssm_elements: int
    conv_bytes: int
    ssm_bytes: int

    @property
    def bytes(self) -> int:
        return self.conv_bytes + self.ssm_bytes


def state_shape(layer: Layer, tp: int, conv_dtype_bytes: int, ssm_dtype_bytes: int, num_speculative_tokens: int = 0) -> StateShape:
    """Per-sequence state of one GDN/Mamba layer on one rank (MambaStateShapeCalculator)."""
    if isinstance(layer, GatedDeltaNet):
        conv = (layer.conv_kernel - 1 + num_speculative_tokens) * (layer.conv_dim // tp)
        ssm = (layer.num_value_heads // tp) * layer.value_head_dim * layer.key_head_dim
    elif isinstance(layer, Mamba2):
        conv = (layer.conv_kernel - 1 + num_speculative_tokens) * (layer.conv_dim // tp)
        ssm = (layer.num_heads // tp) * layer.head_dim * layer.state_size
    else:
        return StateShape(0, 0, 0, 0)
    return StateShape(conv, ssm, conv * conv_dtype_bytes, ssm * ssm_dtype_bytes)


def ssm_dtype_bytes(arch: Architecture, override: str | None = None) -> int:
    """The recurrent-state dtype: --mamba-ssm-cache-dtype, else the config's mamba_ssm_dtype, else the model dtype."""
    name = override if override not in (None, "auto") else (arch.mamba_ssm_dtype or arch.dtype)
    if name not in DTYPE_BYTES:
        raise BadInput(f"state dtype {name!r} is not one of {', '.join(sorted(DTYPE_BYTES))}")
    return DTYPE_BYTES[name]


@frozen
class KvPerToken:
    """KV bytes per token for one TP rank (or the whole model with tp=1)."""

    growing_bytes_per_token: int  # full attention + MLA (+ indexer): every token of context
    windowed_bytes_per_token: int  # sliding/chunked layers, only up to their window
    window_tokens: int | None
    state_bytes_per_sequence: int  # GDN/Mamba, constant per sequence (unpadded)

    def bytes_per_sequence(self, tokens: int) -> int:
        windowed = min(tokens, self.window_tokens) if self.window_tokens else tokens
        return self.growing_bytes_per_token * tokens + self.windowed_bytes_per_token * windowed + self.state_bytes_per_sequence


@per_architecture
def kv_per_token(arch: Architecture, kv_cache_dtype: str = "auto", tp: int = 1, state_dtype: str | None = None) -> KvPerToken:
    """KV bytes per token per rank of ``arch`` (memoised: an Architecture is frozen, and ``fit`` asks per placement)."""
    kv_bytes = kv_element_bytes(kv_cache_dtype, arch.dtype)
    growing = windowed = state = 0
    window = None
    ssm_b = ssm_dtype_bytes(arch, state_dtype) if arch.has_state else 0
    for layer in arch.layers:
        per = layer_bytes_per_token(layer, tp, kv_bytes, kv_cache_dtype)
        if isinstance(layer, (FullAttention, Mla)):
            growing += per
        elif isinstance(layer, WindowedAttention):
            windowed += per
            window = layer.window if window is None else min(window, layer.window)
        else:
            state += state_shape(layer, tp, arch.dtype_bytes, ssm_b).bytes
    if arch.index_head_dim:
        growing += indexer_bytes_per_token(arch) * arch.indexer_count
    return KvPerToken(growing, windowed, window, state)


def all_layers_bytes_per_token(arch: Architecture, kv_cache_dtype: str = "auto", tp: int = 1) -> int:
    """The calculator seed's table figure: every attention layer as if it were full attention."""
    t = kv_per_token(arch, kv_cache_dtype, tp)
    return t.growing_bytes_per_token + t.windowed_bytes_per_token
