"""What a disaggregated deployment moves between its instances: the KV blocks a decode instance pulls from a prefill
instance for one request, as vLLM 0.32's NixlConnector decides them (issue 32).

The rule, from vLLM 0.32's source (vllm/distributed/kv_transfer/kv_connector/v1/nixl/):

- **Which tokens.** pull_scheduler.py ``get_num_new_matched_tokens``: the decode instance loads the prompt up to
  base_scheduler.py ``_get_remote_prefill_token_count``: the prompt less ``_prefill_backoff()`` trailing tokens that it
  recomputes itself (1 with Mamba/GDN state, which needs h(N-1); a multi-module MTP drafter's lookahead less 1), less
  the tokens its own prefix cache already holds (``num_computed_tokens``). Nothing is pulled when that is <= 0: a
  returning session whose context the decode instance still caches pulls only its new turn.
- **Which blocks.** ``update_state_after_alloc``: the blocks allocated for those tokens that are not prefix-cache hits
  (``get_unhashed_block_ids_all_groups``, padding skipped), per KV-cache group, clipped by
  ``get_exchange_clipped_blocks``: a sliding-window group only its last ``cdiv(window, block) + 1`` blocks, a
  Mamba/GDN group only its state-bearing slot (``clip_ssm_state_blocks``); a chunked-local group is not clipped
  (``ChunkedLocalAttentionSpec`` is not a ``SlidingWindowSpec``).
- **How many bytes.** base_worker.py registers each layer's blocks (and, for Mamba/GDN, the conv and SSM states as
  separate regions, not the padded page); each decode rank reads the blocks of its own share (its KV heads, or MLA's
  whole latent, the same on every rank) from the prefill ranks holding them, whatever the two TP sizes
  (tp_mapping.py). So a decode rank receives what its own cache holds for those blocks, and the link carries that
  times the decode instance's TP size.

Not modelled: ``bidirectional_kv_xfer`` (off by default; the prefill side then also pulls what the decode side cached),
the bounded-replay sliding windows of ``prefix_replay_tokens`` (DeepSeek-V4-style), and the host buffer of an
accelerator NIXL does not reach directly (``use_host_buffer``: the same bytes, one more copy).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from servesize.engine.deployment import Deployment
from servesize.engine.pool import LayerSpec, block_layout
from servesize.errors import BadInput
from servesize.model.architecture import Architecture
from servesize.model.hardware import Gpu
from servesize.model.layers import SLIDING, STATE_KINDS
from servesize.units import cdiv

NIXL = "NixlConnector"  # the one connector whose rule this module holds (vLLM 0.32)


@dataclass(frozen=True)
class GroupTransfer:
    """One KV-cache group's share of a pull: the blocks of each of its layers, and their bytes on one decode rank."""

    kind: str
    layers: int
    block_size: int
    blocks: int  # per layer
    bytes_per_rank: int  # every layer of the group

    def to_dict(self) -> dict:
        return {"kind": self.kind, "layers": self.layers, "block_size": self.block_size, "blocks": self.blocks,
                "bytes_per_rank": self.bytes_per_rank}


@dataclass(frozen=True)
class KvTransfer:
    """The pull of one request: the prompt tokens loaded remotely and the blocks and bytes per KV-cache group."""

    connector: str
    prompt_tokens: int
    local_hit_tokens: int  # the decode instance's own prefix-cache hit, whole blocks
    backoff_tokens: int  # trailing prompt tokens the decode instance recomputes
    remote_tokens: int  # tokens whose KV is pulled: the prompt less the backoff less the hit (0: none)
    groups: tuple[GroupTransfer, ...]
    ranks: int  # the decode instance's TP size: each rank pulls its own share

    @property
    def bytes_per_rank(self) -> int:
        return sum(g.bytes_per_rank for g in self.groups)

    @property
    def bytes(self) -> int:
        """Bytes over the link, every decode rank's pull."""
        return self.bytes_per_rank * self.ranks

    def to_dict(self) -> dict:
        return {"connector": self.connector, "prompt_tokens": self.prompt_tokens,
                "local_hit_tokens": self.local_hit_tokens, "backoff_tokens": self.backoff_tokens,
                "remote_tokens": self.remote_tokens, "ranks": self.ranks, "bytes_per_rank": self.bytes_per_rank,
                "bytes": self.bytes, "groups": [g.to_dict() for g in self.groups]}


def prefill_backoff(arch: Architecture, dep: Deployment) -> int:
    """Trailing prompt tokens the prefill instance leaves to the decode instance (base_scheduler.py
    ``_prefill_backoff``): 1 with Mamba/GDN state; a multi-module MTP drafter's lookahead less 1 (vllm/config/
    vllm.py ``num_prefill_lookahead_tokens``: the speculative tokens when min(MTP modules, tokens) > 1)."""
    lookahead = dep.mtp_tokens if min(arch.mtp_layers, dep.mtp_tokens) > 1 else 0
    return max(1 if arch.has_state else 0, lookahead - 1)


def nixl_pull(arch: Architecture, dep: Deployment, prompt_tokens: int, local_hit_tokens: int = 0,
              gpu: Gpu | None = None) -> KvTransfer:
    """The blocks and bytes a decode instance of ``dep`` (resolved) pulls for a prompt of ``prompt_tokens`` of which
    its own prefix cache holds ``local_hit_tokens`` (at most the prompt less its last token, floored to whole blocks
    of every group, as a hit is; none without prefix caching)."""
    if dep.max_model_len is None:
        raise BadInput("the pull is priced for a resolved Deployment (Deployment.resolved fills max_model_len)")
    if not 1 <= prompt_tokens <= dep.max_model_len:
        raise BadInput(f"a prompt of {prompt_tokens!r} tokens: it must be 1 to --max-model-len "
                       f"({dep.max_model_len:,})", field="prompt_tokens")
    if not 0 <= local_hit_tokens <= prompt_tokens:
        raise BadInput(f"the decode instance's prefix hit ({local_hit_tokens!r} tokens) must be 0 to the prompt's "
                       f"{prompt_tokens:,}", field="local_hit_tokens")
    layout = block_layout(arch, dep, gpu)
    hit_unit = math.lcm(*(b for _, b in layout.group_blocks))
    # a prefix hit is whole blocks, and never the prompt's last token (vLLM's kv_cache_manager.py
    # get_computed_blocks: max_cache_hit_length = num_tokens - 1)
    hit = min(local_hit_tokens, prompt_tokens - 1) // hit_unit * hit_unit if dep.enable_prefix_caching else 0
    backoff = prefill_backoff(arch, dep)
    remote = prompt_tokens - backoff if prompt_tokens > backoff else prompt_tokens
    pulled = max(remote - hit, 0)
    layers = Counter(spec.kind for spec, _, _ in layout.specs)
    first: dict[str, tuple[LayerSpec, int, int]] = {}  # a layer of each kind, in the model's order
    for spec, page, block in layout.specs:
        first.setdefault(spec.kind, (spec, page, block))
    groups = []
    for kind, (spec, page, block) in first.items():
        blocks = _pulled_blocks(spec, block, remote, hit) if pulled else 0
        unit = spec.state_bytes if kind in STATE_KINDS else page  # a state moves unpadded (its conv and SSM regions)
        groups.append(GroupTransfer(kind, layers[kind], block, blocks, blocks * unit * layers[kind]))
    return KvTransfer(NIXL, prompt_tokens, hit, backoff, pulled, tuple(groups),
                      dep.tensor_parallel_size)


def _pulled_blocks(spec: LayerSpec, block: int, remote: int, hit: int) -> int:
    """Blocks of one layer of ``spec``'s kind pulled for ``remote`` tokens of which ``hit`` are cached: the new ones,
    clipped as get_exchange_clipped_blocks clips them (a sliding window to cdiv(window, block) + 1, a state to its
    one slot; a chunked-local group is not a SlidingWindowSpec and keeps them all)."""
    new = cdiv(remote, block) - hit // block
    if spec.kind in STATE_KINDS:
        return 1
    if spec.kind == SLIDING:
        return min(new, cdiv(spec.window, block) + 1)
    return new
