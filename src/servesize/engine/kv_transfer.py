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

**How long.** ``pull_seconds``: the decode rank posts one NIXL descriptor per contiguous run of blocks, per layer, per
region (K and V apart; MLA's latent one; a Mamba2/GDN state four, its three conv sub-projections and its SSM state),
from every prefill rank it reads, at ``kv_transfer.descriptor_post_s`` each (pull_worker.py ``_read_blocks``: one
descriptor id per block and region, ``make_prepped_xfer`` then ``transfer``; NIXL merges adjacent blocks), then the
bytes move over its own GPU's link (gpus.toml ``[[kv_link]]``) at ``kv_transfer.link_efficiency``.
``handover_seconds`` adds what the decode instance spends around the pull, in its own steps
(``kv_transfer.handover_steps``): the pull dispatched with a step, its completion noticed at a step's end, the last
prompt token recomputed.

Not modelled: ``bidirectional_kv_xfer`` (off by default; the prefill side then also pulls what the decode side cached),
the bounded-replay sliding windows of ``prefix_replay_tokens`` (DeepSeek-V4-style), and the host buffer of an
accelerator NIXL does not reach directly (``use_host_buffer``: the same bytes, one more copy).
"""

from __future__ import annotations

import math
from collections import Counter

from servesize.assumptions import assumption
from servesize.engine.deployment import Deployment
from servesize.engine.pool import LayerSpec, block_layout, resolved_lengths
from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.jsonable import Record
from servesize.model.architecture import Architecture
from servesize.model.hardware import Gpu
from servesize.model.layers import MLA, SLIDING, STATE_KINDS
from servesize.units import cdiv

NIXL = "NixlConnector"  # the one connector whose rule this module holds (vLLM 0.32)


@frozen
class GroupTransfer(Record):
    """One KV-cache group's share of a pull: the blocks of each of its layers, and their bytes on one decode rank."""

    kind: str
    layers: int
    block_size: int
    blocks: int  # per layer
    bytes_per_rank: int  # every layer of the group


@frozen
class KvTransfer(Record):
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

    JSON_EXTRA = ("bytes_per_rank", "bytes")


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
    max_len, _ = resolved_lengths(dep)
    if not 1 <= prompt_tokens <= max_len:
        raise BadInput(f"a prompt of {prompt_tokens!r} tokens: it must be 1 to --max-model-len ({max_len:,})",
                       field="prompt_tokens")
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


def _regions(kind: str) -> int:
    """Memory regions NIXL registers per layer of ``kind``: K and V apart, MLA's one latent, a Mamba2/GDN state's
    three conv sub-projections and its SSM state (base_worker.py _compute_desc_ids: "NIXL regions per SSM layer = conv
    sub-projections + 1 SSM temporal (Mamba2/GDN: 3+1=4)")."""
    return 1 if kind == MLA else 4 if kind in STATE_KINDS else 2


@frozen
class TransferTime(Record):
    """How long one decode rank's pull takes: the descriptors it posts, then the bytes over its GPU's link."""

    descriptors: int  # per decode rank
    post_s: float
    move_s: float
    link: str  # the link's name
    link_bytes_per_s: float  # one way, per GPU, the signalling rate

    @property
    def seconds(self) -> float:
        return self.post_s + self.move_s

    JSON_EXTRA = ("seconds",)


def pull_seconds(pull: KvTransfer, link: dict, prefill_tp: int, *,
                 link_efficiency: float = assumption("kv_transfer.link_efficiency"),
                 descriptor_post_s: float = assumption("kv_transfer.descriptor_post_s"),
                 blocks_per_descriptor: float = assumption("kv_transfer.blocks_per_descriptor")) -> TransferTime:
    """The time a decode rank of ``pull`` takes to read its share from a prefill instance of ``prefill_tp`` ranks over
    ``link`` (a gpus.toml kv_link or host_link row). A decode rank holding the heads of several prefill ranks (prefill
    TP above decode TP) reads from each of them; MLA's latent is whole on every rank, so one prefill rank serves it."""
    if prefill_tp < 1:
        raise BadInput(f"the prefill instance's TP size must be >= 1, got {prefill_tp!r}", field="prefill_tp")
    for name, value in (("link_efficiency", link_efficiency), ("descriptor_post_s", descriptor_post_s),
                        ("blocks_per_descriptor", blocks_per_descriptor)):
        if not value > 0:
            raise BadInput(f"kv_transfer.{name} must be > 0, got {value!r}", field=name)
    sources = max(1, prefill_tp // pull.ranks)
    descriptors = sum(g.layers * _regions(g.kind) * math.ceil(g.blocks / blocks_per_descriptor)
                      * (1 if g.kind == MLA else sources) for g in pull.groups)
    rate = float(link["gbps_per_direction"]) * 1e9
    return TransferTime(descriptors, descriptors * descriptor_post_s, pull.bytes_per_rank / (rate * link_efficiency),
                        str(link["name"]), rate)


def handover_seconds(transfer: TransferTime, decode_step_s: float,
                     handover_steps: float = assumption("kv_transfer.handover_steps")) -> float:
    """From the prefill instance's first token to the decode instance's: the pull, and ``handover_steps`` of the
    decode instance's steps (``decode_step_s`` each) around it (kv_transfer.handover_steps)."""
    if not decode_step_s >= 0 or not handover_steps >= 0:
        raise BadInput("a decode step and the handover's steps must be >= 0")
    return transfer.seconds + handover_steps * decode_step_s
