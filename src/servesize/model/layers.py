"""What a decoder stack is made of: one frozen type per layer kind, and the MoE plan.

Each layer kind maps to one vLLM KV-cache spec (vLLM 0.32 vllm/v1/kv_cache_interface.py,
``KVCacheSpec`` subclasses and their ``page_size_bytes``) and carries only
the geometry that spec needs:

- ``FullAttention``  FullAttentionSpec: K and V per KV head, grows with every token
- ``SlidingWindow``  SlidingWindowSpec: as full attention, but only the last ``window`` tokens
- ``ChunkedLocal``   ChunkedLocalAttentionSpec (Llama 4): attention within ``window``-token chunks
- ``Mla``            MLAAttentionSpec: one latent of kv_lora_rank + qk_rope_head_dim, no K/V doubling
- ``GatedDeltaNet``  MambaSpec (GDN linear attention): a constant recurrent + conv state per sequence
- ``Mamba2``         MambaSpec (Mamba2 SSM): a constant SSM + conv state per sequence

``kind`` (a class constant, one of the names below) is what the engine groups layers by.
"""

from __future__ import annotations

from typing import ClassVar

from servesize.frozen import frozen

FULL = "full_attention"
SLIDING = "sliding_window"
CHUNKED = "chunked_local"
MLA = "mla"
GDN = "gated_deltanet"
MAMBA = "mamba"
ATTENTION_KINDS = (FULL, SLIDING, CHUNKED, MLA)
STATE_KINDS = (GDN, MAMBA)


@frozen
class KvHeadAttention:
    """Attention that caches a K and a V vector per KV head per token (MHA/GQA)."""

    num_kv_heads: int
    head_dim: int  # K head size
    head_dim_v: int  # V head size

    is_attention: ClassVar[bool] = True


@frozen
class FullAttention(KvHeadAttention):
    kind: ClassVar[str] = FULL


@frozen
class WindowedAttention(KvHeadAttention):
    """K/V attention over at most ``window`` tokens: the rest of the context is not read."""

    window: int  # tokens


@frozen
class SlidingWindow(WindowedAttention):
    """Each token attends to the ``window`` tokens before it."""

    kind: ClassVar[str] = SLIDING


@frozen
class ChunkedLocal(WindowedAttention):
    """Llama 4 local attention: each token attends within its own ``window``-token chunk."""

    kind: ClassVar[str] = CHUNKED


@frozen
class Mla:
    """Multi-head latent attention (DeepSeek): the cache holds one latent per token, the same on every TP rank."""

    kv_lora_rank: int
    qk_rope_head_dim: int

    kind: ClassVar[str] = MLA
    is_attention: ClassVar[bool] = True

    @property
    def latent_dim(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim


@frozen
class GatedDeltaNet:
    """Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5/3.6). State per sequence is constant."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int

    kind: ClassVar[str] = GDN
    is_attention: ClassVar[bool] = False

    @property
    def conv_dim(self) -> int:
        # q and k share the key geometry, v its own: conv over the concatenated qkv projection.
        return self.key_head_dim * self.num_key_heads * 2 + self.value_head_dim * self.num_value_heads


@frozen
class Mamba2:
    """Mamba2 SSM mixer: conv over x/B/C and an (nheads, head_dim, d_state) state."""

    num_heads: int
    head_dim: int
    state_size: int
    n_groups: int
    conv_kernel: int

    kind: ClassVar[str] = MAMBA
    is_attention: ClassVar[bool] = False

    @property
    def intermediate_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        return self.intermediate_size + 2 * self.n_groups * self.state_size


AttentionLayer = FullAttention | SlidingWindow | ChunkedLocal | Mla
StateLayer = GatedDeltaNet | Mamba2
Layer = AttentionLayer | StateLayer


@frozen
class Moe:
    """Which feed-forward layers route to experts, and the experts' widths."""

    num_experts: int
    experts_per_token: int
    expert_intermediate_size: int
    num_shared_experts: int = 0
    shared_intermediate_size: int = 0  # total width of the shared expert(s)
    first_dense_layers: int = 0  # DeepSeek/GLM first_k_dense_replace
    moe_every: int = 1  # Llama 4 Maverick interleaves MoE every 2nd layer
    dense_intermediate_size: int = 0  # MLP width of the non-MoE layers

    def is_moe_layer(self, index: int) -> bool:
        if index < self.first_dense_layers:
            return False
        return (index + 1) % self.moe_every == 0 if self.moe_every > 1 else True
