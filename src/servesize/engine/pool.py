"""What the engine makes of the available bytes: pages, block size, groups, blocks, and the
two lines vLLM logs — plus the true usable token capacity and, where they differ, why.

Follows vLLM's V1 KV-cache manager (vLLM 0.32: vllm/v1/kv_cache_interface.py
``page_size_bytes``; vllm/v1/core/kv_cache_utils.py ``get_kv_cache_groups``,
``get_kv_cache_config_from_groups``, ``get_max_concurrency_for_kv_cache_config``;
vllm/platforms/interface.py ``Platform._align_hybrid_block_size``):

1. One spec per layer (page bytes for one block of ``block_size`` tokens on one rank).
2. All layers alike -> one group: ``num_blocks = available // (page x layers)``.
   Several attention types (full + sliding/chunked) -> hybrid groups: the group size is the
   smallest per-type layer count (the largest if max < 1.5 x min), each type split into
   ``cdiv(n_type, group_size)`` groups (missing slots are padding layers), one shared block pool:
   ``num_blocks = available // page // group_size``.
   Attention + Mamba/GDN -> the attention block size is raised so one attention page holds a
   whole recurrent state (``_align_hybrid_block_size``) and the state page is padded to it.
3. ``num_blocks`` is the minimum over ranks (all ranks are identical here), or the override.
4. Concurrency = ``num_blocks / sum_g cdiv(max_memory_g, page_g)``; the token line is
   ``n x block`` (v0.8-0.9), ``(n // groups) x min_block`` (to v0.20), ``int(C x L)`` (v0.20.1+).
"""

from __future__ import annotations

import math
from dataclasses import field, replace
from typing import Any

from servesize.derivation import Derivation
from servesize.engine.deployment import CPU_MLA_BLOCK, CPU_MLA_FORCED_FROM, Deployment
from servesize.engine.kv_cache import indexer_bytes_per_token, kv_element_bytes, layer_bytes_per_token, ssm_dtype_bytes, state_shape
from servesize.errors import BadInput, DoesNotFit, UnsupportedArchitecture
from servesize.frozen import frozen
from servesize.jsonable import Record, json_as
from servesize.model.architecture import Architecture
from servesize.model.hardware import Gpu
from servesize.model.layers import CHUNKED, FULL, GDN, MAMBA, MLA, SLIDING, STATE_KINDS, GatedDeltaNet, WindowedAttention
from servesize.units import cdiv

INDEXER = "indexer"
# Backend block-size forcing for MLA on CUDA (vllm-kv-sizing.md §3.1): FlashMLA 64 on Hopper and
# older, CUTLASS MLA 128 on Blackwell (compute capability 10.x).
FLASHMLA_BLOCK = 64
CUTLASS_MLA_BLOCK = 128
# Before 0.19 the MLA block follows the architecture (FlashMLA 64 on Hopper, CUTLASS MLA 128 on Blackwell); from
# 0.19.1 platforms/cuda.py's backend order, checked in the 0.19.1-0.33.0 wheels (_mla_block).
MLA_BLOCK_BY_ARCH_UNTIL = (0, 19, 0)
# vLLM 0.33 (not 0.30) checkpoints GDN prefill states for FlashInfer GDN in 'align' mode (_gdn_checkpoint_align).
GDN_CHECKPOINT_ALIGN_FROM = (0, 33, 0)
# From 0.28 the two KV-cache lines are printed as one ("GPU KV cache size: N tokens, Maximum concurrency ..."),
# as the 0.31 log tests/data/vllm-logs/v1-031-one-line-llama8b-a100.log shows.
COMBINED_LOG_LINE_FROM = (0, 28, 0)
FLASHINFER_MLA_BLOCK = 32
FLASHINFER_GDN_CHECKPOINT_ALIGNMENT = 64
# Mamba2 layers hold a prefill checkpoint block in 'align' mode (MambaMixer2.get_kv_cache_spec,
# num_prefill_checkpoint_blocks=1): read in the 0.32.0 wheel and checked against its engine
# (tests/integration); releases before 0.32 are not checked and keep the 2-block rule.
MAMBA2_CHECKPOINT_FROM = (0, 32, 0)
CUDA_DEFAULT_BLOCK = 16
CPU_DEFAULT_BLOCK = 128  # the CPU backend: a multiple of 32, default 128 (vllm-kv-sizing.md, version notes)
# vLLM V0 swap space: 4 GiB of pinned CPU blocks by default ('# CPU blocks' in the V0 log).
V0_SWAP_SPACE_BYTES = 4 << 30


@frozen
class KvGroup(Record):
    kind: str
    layers: int  # real layers (group_size minus padding)
    block_size: int
    page_bytes: int  # one layer, one block, one rank
    blocks_per_request: int = field(metadata=json_as("blocks_per_request_at_max_model_len"))  # per layer, for one request at max_model_len


@frozen
class KvPool:
    groups: tuple[KvGroup, ...]
    group_size: int
    padding_layers: int
    block_size: int
    num_blocks: int
    kv_cache_tokens: int  # as the engine logs it
    max_concurrency: float  # as the engine computes it (printed with 2 decimals)
    max_model_len: int
    log_lines: tuple[str, ...]
    usable_kv_tokens: int
    kv_bytes_per_token: int  # per rank, every layer that grows with context (token-equivalent charge)
    state_bytes_per_sequence: int  # per rank, padded pages of the recurrent groups
    notes: tuple[str, ...]
    derivation: Derivation = field(compare=False)
    log_line_note: str | None = None  # why the logged token count is not the pool's (one of ``notes``), where it is not

    def to_dict(self) -> dict:
        return {
            "block_size": self.block_size, "num_blocks": self.num_blocks, "group_size": self.group_size,
            "padding_layers": self.padding_layers, "groups": [g.to_dict() for g in self.groups],
            "kv_cache_tokens": self.kv_cache_tokens, "max_concurrency": round(self.max_concurrency, 2),
            "max_concurrency_exact": self.max_concurrency, "max_model_len": self.max_model_len,
            "log_lines": list(self.log_lines), "usable_kv_tokens": self.usable_kv_tokens,
            "kv_bytes_per_token": self.kv_bytes_per_token, "state_bytes_per_sequence": self.state_bytes_per_sequence,
            "notes": list(self.notes),
        }


@frozen
class LayerSpec:
    """One layer's cache as vLLM lays it out on one rank: its kind and its bytes per token (attention) or per
    sequence (Mamba/GDN state), and its window where it has one."""

    kind: str
    bytes_per_token: int = 0  # attention kinds
    state_bytes: int = 0  # recurrent kinds
    window: int = 0  # sliding / chunked kinds: tokens


def state_cache_dtype(arch: Architecture, dep: Deployment) -> str | None:
    """The recurrent-state dtype vLLM stores: --mamba-ssm-cache-dtype, else the config's.

    The CPU build (platforms/cpu.py, CpuPlatform.check_and_update_config), only on a CPU with
    AVX-512 BF16 (``torch.cpu._is_avx512_bf16_supported()``), resets it to float32 unless a 16-bit
    type was asked for and the model's state backend is the accelerated GDN one; on any other CPU
    (AVX2 only, say) the state keeps the type asked for, as on CUDA."""
    asked = dep.mamba_ssm_cache_dtype
    if dep.device == "cpu" and dep.cpu_avx512_bf16:
        if asked in ("bfloat16", "float16") and arch.count(GDN):
            return asked
        return "float32"
    return asked


def _layer_specs(arch: Architecture, dep: Deployment) -> list[LayerSpec]:
    tp = dep.tensor_parallel_size
    kv_bytes = kv_element_bytes(dep.kv_cache_dtype, arch.dtype)
    ssm_b = ssm_dtype_bytes(arch, state_cache_dtype(arch, dep)) if arch.has_state else 0
    specs = []
    if dep.disable_hybrid_kv_cache_manager and arch.has_state:
        raise BadInput("--disable-hybrid-kv-cache-manager: vLLM needs the hybrid manager for Mamba/GDN layers",
        field="disable_hybrid_kv_cache_manager")
    for layer in arch.cache_layers:
        if isinstance(layer, WindowedAttention) and dep.disable_hybrid_kv_cache_manager:
            # vLLM unify_hybrid_kv_cache_specs: a windowed layer is cached as full attention (every token kept)
            specs.append(LayerSpec(FULL, layer_bytes_per_token(layer, tp, kv_bytes, dep.kv_cache_dtype)))
        elif isinstance(layer, WindowedAttention):
            specs.append(LayerSpec(layer.kind, layer_bytes_per_token(layer, tp, kv_bytes, dep.kv_cache_dtype), window=layer.window))
        elif layer.is_attention:
            specs.append(LayerSpec(layer.kind, layer_bytes_per_token(layer, tp, kv_bytes, dep.kv_cache_dtype)))
        else:
            s = state_shape(layer, tp, arch.dtype_bytes, ssm_b, dep.spec_tokens)
            specs.append(LayerSpec(layer.kind, state_bytes=s.bytes))
    if dep.mtp_tokens and arch.mtp_layers:
        # An MTP draft module's attention layer(s) join the model's attention KV-cache group
        # (vllm-kv-sizing.md, version notes: group size 16 -> 17 for Qwen3.5/3.6-27B).
        first = next(s for s in specs if s.kind in (FULL, MLA))
        specs += [LayerSpec(first.kind, first.bytes_per_token)] * arch.mtp_layers
    if dep.speculation is not None:
        # A draft model's or EAGLE head's own attention layers join the pool the same way.
        for layer in dep.speculation.draft_attention_layers():
            specs.append(LayerSpec(layer.kind, layer_bytes_per_token(layer, tp, kv_bytes, dep.kv_cache_dtype),
                                    window=getattr(layer, "window", 0)))
    if arch.index_head_dim:
        specs += [LayerSpec(INDEXER, indexer_bytes_per_token(arch))] * arch.indexer_count
    return specs


def _base_block_size(arch: Architecture, dep: Deployment, gpu: Gpu | None, notes: list[str]) -> int:
    if dep.device == "cpu":
        return _cpu_block_size(arch, dep, notes)
    block = dep.block_size or CUDA_DEFAULT_BLOCK
    if arch.count(MLA):
        forced, why = _mla_block_size(arch, dep, gpu)
        if forced is not None and forced != block:
            notes.append(f"the MLA attention backend forces the KV block size to {forced} ({why})")
            block = forced
    return block


def _cpu_block_size(arch: Architecture, dep: Deployment, notes: list[str]) -> int:
    """The CPU build: default block 128, any multiple of 32 (a warning otherwise, from 0.28); its
    reference MLA kernel (CPUs without AMX tiles) takes block 16 only, whatever was asked; the AMX one
    keeps the CPU rules."""
    if dep.cpu_reference_mla(arch):
        if dep.block_size not in (None, CPU_MLA_BLOCK):
            notes.append(f"the CPU MLA backend requires block size {CPU_MLA_BLOCK} and overrides --block-size "
                         f"{dep.block_size} (CPUs with AMX tiles take the AMX MLA backend instead)")
        return CPU_MLA_BLOCK
    block = dep.block_size or CPU_DEFAULT_BLOCK
    if block % 32:
        if dep.version < CPU_MLA_FORCED_FROM:
            raise DoesNotFit(f"the CPU backend of vLLM {dep.vllm_version} needs a block size that is a multiple of 32, "
                             f"got {block}")
        notes.append(f"the CPU backend prefers block sizes that are multiples of 32 (vLLM warns at {block})")
    return block


def _mla_block_size(arch: Architecture, dep: Deployment, gpu: Gpu | None) -> tuple[int | None, str]:
    """The block size vLLM's MLA backend imposes on CUDA (None: the configured one stands).

    Backend order from vLLM's platforms/cuda.py (checked in the 0.19.1-0.33.0 wheels): on SM90
    FLASH_ATTN_MLA (any multiple of 16) unless the KV cache is fp8, which falls to FlashMLA (64);
    on SM10x FLASHINFER_MLA ([32, 64], the smallest preferred); sparse DeepSeek-V3.2 FlashMLA-sparse
    (64). Before 0.19 servesize keeps the older rule: FlashMLA 64 on Hopper, CUTLASS MLA 128 on Blackwell."""
    from servesize.engine.deployment import gpu_compute_capability

    cc = gpu_compute_capability(gpu) if gpu is not None else 9.0
    if arch.index_head_dim or dep.kv_cache_dtype == "fp8_ds_mla":
        return FLASHMLA_BLOCK, "FlashMLA (sparse / fp8_ds_mla)"
    if cc is None or cc < 9.0:
        return None, "Triton MLA"
    if dep.version < MLA_BLOCK_BY_ARCH_UNTIL:
        return (CUTLASS_MLA_BLOCK, "CUTLASS MLA on Blackwell") if cc >= 10 else (FLASHMLA_BLOCK, "FlashMLA on Hopper")
    if cc >= 10:
        return FLASHINFER_MLA_BLOCK, "FlashInfer MLA on Blackwell"
    if dep.kv_cache_dtype.startswith("fp8"):
        return FLASHMLA_BLOCK, "FlashMLA: FlashAttention MLA takes no fp8 KV cache"
    return None, "FlashAttention MLA"


def flashinfer_gdn_alignment(arch: Architecture, dep: Deployment, gpu: Gpu | None) -> bool:
    """vLLM 0.33 (not 0.30) checkpoints GDN prefill states for the FlashInfer GDN kernel in 'align'
    mode: the attention block aligns to lcm(block, 64) and each GDN group holds one more block per
    request (platforms/interface.py, gdn_attn.py FLASHINFER_GDN_CHECKPOINT_ALIGNMENT = 64,
    MambaSpec num_prefill_checkpoint_blocks). FlashInfer GDN is the default on SM90, and on SM10x/12x
    when the key head dim is 128."""
    from servesize.engine.deployment import gpu_compute_capability

    if dep.device != "cuda" or dep.mamba_cache_mode != "align" or dep.version < GDN_CHECKPOINT_ALIGN_FROM or not arch.count(GDN):
        return False
    cc = gpu_compute_capability(gpu) if gpu is not None else None
    if cc is None:
        return False
    key_dim = next(layer.key_head_dim for layer in arch.layers if isinstance(layer, GatedDeltaNet))
    return 9.0 <= cc < 10 or (cc >= 10 and key_dim == 128)


def _per_request_blocks(spec: LayerSpec, block: int, dep: Deployment, checkpoint_blocks: int = 0) -> int:
    """Blocks one request at max_model_len holds in a group of this kind (the spec's
    max_memory_usage_bytes / page). Windows reserve for every batch in flight (from 0.26)."""
    L, mnbt = resolved_lengths(dep)
    in_flight = dep.in_flight_batches * mnbt
    if spec.kind in (FULL, MLA, INDEXER):
        return cdiv(L, block)
    if spec.kind == SLIDING:
        return cdiv(min(spec.window - 1 + in_flight, L), block) + 1
    if spec.kind == CHUNKED:
        return cdiv(min(spec.window + in_flight, L), block)
    mode = dep.mamba_cache_mode or "none"
    if mode == "all":
        return cdiv(L, block)
    if spec.kind == MAMBA and dep.version >= MAMBA2_CHECKPOINT_FROM:
        # MambaMixer2.get_kv_cache_spec: num_prefill_checkpoint_blocks=1 (the block-boundary state
        # is exported from inside one forward pass), so 'align' mode holds one more block.
        checkpoint_blocks = max(checkpoint_blocks, 1)
    return state_blocks_per_request(mode, dep.spec_tokens, checkpoint_blocks)


def state_blocks_per_request(mode: str, spec_tokens: int = 0, checkpoint_blocks: int = 0) -> int:
    """Blocks one request holds in a Mamba/GDN state group outside 'all' mode: MambaSpec.max_memory_usage_bytes
    is page x (1 + num_speculative_blocks) in 'none' mode and page x (2 + num_speculative_blocks) in 'align'
    (the running state and the last block-boundary state), plus the prefill checkpoint blocks a kernel
    exports in 'align' (vllm/v1/kv_cache_interface.py, MambaSpec); num_speculative_blocks is the draft's
    num_speculative_tokens. ``calibrate`` reads a log's per-request block sum by this same rule."""
    return (2 + checkpoint_blocks if mode == "align" else 1) + spec_tokens


def resolved_lengths(dep: Deployment) -> tuple[int, int]:
    """max_model_len and max_num_batched_tokens of a resolved Deployment."""
    if dep.max_model_len is None or dep.max_num_batched_tokens is None:
        raise BadInput("the KV pool and a pull are priced for a resolved Deployment (Deployment.resolved fills "
                       "max_model_len and max_num_batched_tokens)")
    return dep.max_model_len, dep.max_num_batched_tokens


def kv_pool(arch: Architecture, dep: Deployment, available_bytes: int, gpu: Gpu | None = None,
            derivation: Derivation | None = None) -> KvPool:
    """The pool one TP group gets from ``available_bytes`` per GPU, for a resolved Deployment.

    Steps, each recorded in the derivation: layer specs and the base block size; pages and the
    (hybrid-aligned) block size; groups and padding; num_blocks; blocks per request and the
    concurrency; the log lines of this vLLM release; the usable tokens and the growing bytes per token."""
    d = derivation if derivation is not None else Derivation()
    notes: list[str] = []
    specs = _layer_specs(arch, dep)
    block = _base_block_size(arch, dep, gpu, notes)
    kinds = _group_by_kind(arch, specs)
    if not kinds.attention:
        # Attention-free (vLLM's mamba_block_size = max_model_len without prefix caching): a block is a sequence.
        block = resolved_lengths(dep)[0]
        notes.append(f"attention-free: each block holds one sequence's state (up to {block:,} tokens), so the pool "
                     "is a count of sequences, whatever their length")
    if kinds.one_group:
        grouping = _one_group(kinds, block, available_bytes, d, notes)
    else:
        page, block, block_of = _hybrid_pages(arch, dep, gpu, kinds, block, d, notes)
        grouping = _hybrid_groups(kinds, page, block, block_of, available_bytes, d, notes)
    n = _num_blocks(dep, grouping.num_blocks, available_bytes, d)
    checkpoint = 1 if flashinfer_gdn_alignment(arch, dep, gpu) else 0
    groups, per_request = _with_request_blocks(kinds, grouping, dep, checkpoint, d)
    concurrency = d.step("max_concurrency", "num_blocks / blocks_per_request", unit="x",
                         num_blocks=n, blocks_per_request=per_request)
    tokens, concurrency, lines = _log_lines(dep, n, grouping.block_size, groups, concurrency, d)
    usable, attn_block = _usable_tokens(kinds, groups, n, d)
    line_notes = _token_line_notes(dep, groups, tokens, usable, attn_block, concurrency)
    notes += line_notes
    kv_per_token = _growing_bytes_per_token(kinds, groups, attn_block, d)
    state_bytes = sum(g.blocks_per_request * g.page_bytes * grouping.group_size for g in groups if g.kind in STATE_KINDS)
    return KvPool(groups=tuple(groups), group_size=int(grouping.group_size), padding_layers=int(grouping.padding),
                  block_size=int(min(g.block_size for g in groups)), num_blocks=n, kv_cache_tokens=int(tokens),
                  max_concurrency=float(concurrency), max_model_len=resolved_lengths(dep)[0], log_lines=lines, usable_kv_tokens=int(usable),
                  kv_bytes_per_token=int(kv_per_token), state_bytes_per_sequence=int(state_bytes), notes=tuple(notes), derivation=d,
                  log_line_note=line_notes[0] if line_notes else None)


@frozen
class _Kinds:
    """The layer specs by kind (in first-seen order), with the one KV page per token of each attention kind."""

    specs: list[LayerSpec]
    by_kind: dict[str, list[LayerSpec]]
    attention: list[str]
    state: list[str]
    per_token: dict[str, int]  # attention kind -> bytes per token of one layer, one rank
    one_group: bool  # every layer in one KV-cache group (all alike, or UniformTypeKVCacheSpecs)
    uniform: bool  # every layer alike


def _group_by_kind(arch: Architecture, specs: list[LayerSpec]) -> _Kinds:
    by_kind: dict[str, list[LayerSpec]] = {}
    for s in specs:
        by_kind.setdefault(s.kind, []).append(s)
    attention = [k for k in by_kind if k not in STATE_KINDS]
    state = [k for k in by_kind if k in STATE_KINDS]
    per_token = _alike_per_kind(arch, specs, by_kind, attention)
    uniform = len(by_kind) == 1
    # vLLM UniformTypeKVCacheSpecs: full attention / MLA / indexer layers of different page sizes, no windows, no state.
    uniform_type = not state and set(attention) <= {MLA, INDEXER, FULL} and len(set(per_token.values())) > 1
    return _Kinds(specs, by_kind, attention, state, per_token, uniform or uniform_type, uniform)


def _alike_per_kind(arch: Architecture, specs: list[LayerSpec], by_kind: dict[str, list[LayerSpec]],
                    attention: list[str]) -> dict[str, int]:
    """Bytes per token of one layer of each attention kind; refused where the layers of one kind differ in KV
    head size or window, or (attention-free) in state size."""
    sizes = {k: {s.bytes_per_token for s in by_kind[k]} for k in attention}
    if any(len(v) > 1 for v in sizes.values()):
        raise UnsupportedArchitecture(arch.model_type, "attention layers of one kind with different KV head sizes are not modelled",
                                      ("head_dim", "layer_types"))
    windows = {k: {s.window for s in by_kind[k]} for k in attention}
    if any(len(v) > 1 for v in windows.values()):
        raise UnsupportedArchitecture(arch.model_type, "windowed layers of one kind with different windows are not modelled",
                                      ("sliding_window", "layer_types"))
    if not attention and len({s.state_bytes for s in specs}) > 1:
        raise UnsupportedArchitecture(arch.model_type, "recurrent layers of different state sizes are not modelled", ("layer_types",))
    return {k: next(iter(v)) for k, v in sizes.items()}


@frozen
class _Grouping:
    groups: list[KvGroup]  # blocks_per_request not yet filled in
    group_size: int
    padding: int
    block_size: int  # the attention block (after hybrid alignment): what the V0 line counts in
    num_blocks: int  # before --num-gpu-blocks-override


def _one_group(kinds: _Kinds, block: int, available_bytes: int, d: Derivation, notes: list[str]) -> _Grouping:
    """Every layer in one group: ``num_blocks = available // (page x layers)``.

    An attention-free model (every layer Mamba/SSM) is one group too: its page is one sequence's
    state, and a block holds one whole sequence (mamba_block_size = max_model_len, 'none' mode)."""
    if not kinds.uniform:
        notes.append("layers of one attention type with different page sizes share one group (UniformTypeKVCacheSpecs)")
    layers = len(kinds.specs)
    if not kinds.attention:
        state = kinds.specs[0].state_bytes
        page = d.step("page_bytes_all_layers", "layers * state_bytes", unit="B", layers=layers, state_bytes=state,
                      note="attention-free: one page holds one sequence's recurrent state in every layer")
        kind, page_per_layer = kinds.state[0], state
    else:
        page = d.step("page_bytes_all_layers", "block_size * (" + " + ".join(
            f"{len(kinds.by_kind[k])} * {kinds.per_token[k]}" for k in kinds.attention) + ")", unit="B", block_size=block)
        kind = kinds.attention[0] if kinds.uniform else "+".join(kinds.attention)
        page_per_layer = page // layers if kinds.uniform else page
    n = d.step("num_blocks", "available // page_bytes_all_layers", unit="blocks",
               available=available_bytes, page_bytes_all_layers=page)
    group = KvGroup(kind, layers, block, page_per_layer, 0)
    return _Grouping([group], layers, 0, block, n)


def _hybrid_pages(arch: Architecture, dep: Deployment, gpu: Gpu | None, kinds: _Kinds, block: int,
                  d: Derivation, notes: list[str]) -> tuple[int, int, dict[str, int]]:
    """The one page size all hybrid groups share, the attention block size, and the block size of each kind."""
    if kinds.state:
        return _state_aligned_page(arch, dep, gpu, kinds, block, d, notes)
    pages = {k: block * kinds.per_token[k] for k in kinds.attention}
    page = max(pages.values())
    block_of = {}
    for k in kinds.attention:
        if page % pages[k]:
            raise UnsupportedArchitecture(arch.model_type, "page sizes of the layer types do not divide each other", ("head_dim",))
        block_of[k] = block * (page // pages[k])
    d.given("page_bytes", page, unit="B")
    return page, block, block_of


def _state_aligned_page(arch: Architecture, dep: Deployment, gpu: Gpu | None, kinds: _Kinds, block: int,
                        d: Derivation, notes: list[str]) -> tuple[int, int, dict[str, int]]:
    """Attention + Mamba/GDN: the attention block grows until one attention page holds a recurrent state."""
    attn_page_1 = max(kinds.per_token[k] for k in kinds.attention)
    state_page = max(s.state_bytes for k in kinds.state for s in kinds.by_kind[k])
    kernel_align = block
    if flashinfer_gdn_alignment(arch, dep, gpu):
        kernel_align = math.lcm(block, FLASHINFER_GDN_CHECKPOINT_ALIGNMENT)
        notes.append(f"vLLM's FlashInfer GDN kernel checkpoints prefill states: blocks align to {kernel_align} tokens "
                     "and each GDN group holds one more block per request")
    if dep.mamba_cache_mode == "all":
        raise UnsupportedArchitecture(arch.model_type, "mamba_cache_mode 'all' alignment is not modelled", ("mamba_cache_mode",))
    attn_block = d.step("attention_block_size", "kernel_align * cdiv(state_page, kernel_align * attn_page_per_token)",
                        unit="tokens", kernel_align=kernel_align, state_page=state_page, attn_page_per_token=attn_page_1,
                        note="vLLM _align_hybrid_block_size: one attention page must hold one recurrent state")
    if attn_block > block:
        padded = 100 * (attn_block * attn_page_1 - state_page) / state_page
        notes.append(f"vLLM raises the attention block size to {attn_block} tokens so one page holds a recurrent state "
                     f"({state_page:,} B); the state page is padded by {padded:.2f}%")
    block = max(block, attn_block)
    page = d.step("page_bytes", "block_size * attn_page_per_token", unit="B", block_size=block, attn_page_per_token=attn_page_1)
    if any(kinds.per_token[k] != attn_page_1 for k in kinds.attention):
        raise UnsupportedArchitecture(arch.model_type, "hybrid attention layers with different page sizes", ("head_dim",))
    return page, block, dict.fromkeys(kinds.attention + kinds.state, block)


def _hybrid_groups(kinds: _Kinds, page: int, block: int, block_of: dict[str, int], available_bytes: int,
                   d: Derivation, notes: list[str]) -> _Grouping:
    """Several layer types: groups of ``group_size`` layers (padding fills the last of a type), one shared block pool."""
    counts = {k: len(v) for k, v in kinds.by_kind.items()}
    lo, hi = min(counts.values()), max(counts.values())
    group_size = d.step("group_size", "hi if hi < 1.5 * lo else lo", unit="layers", hi=hi, lo=lo,
                        note="vLLM: the smallest per-type layer count, or the largest when max < 1.5 x min")
    groups = []
    padding = 0
    for k in kinds.by_kind:
        n_groups = cdiv(counts[k], group_size)
        padding += n_groups * group_size - counts[k]
        for i in range(n_groups):
            real = min(group_size, counts[k] - i * group_size)
            groups.append(KvGroup(k, real, block_of[k], page, 0))
    if padding:
        notes.append(f"vLLM adds {padding} padding layer(s) to fill the groups")
    n = d.step("num_blocks", "available // page_bytes // group_size", unit="blocks",
               available=available_bytes, page_bytes=page, group_size=group_size,
               note="one shared block pool; each block id spans one layer of every group")
    return _Grouping(groups, group_size, padding, block, n)


def _num_blocks(dep: Deployment, n: int, available_bytes: int, d: Derivation) -> int:
    """The engine's block count (every rank alike), or --num-gpu-blocks-override; none left -> DoesNotFit."""
    if dep.num_gpu_blocks_override is not None:
        n = d.given("num_blocks", dep.num_gpu_blocks_override, unit="blocks", note="--num-gpu-blocks-override")
    n = int(n)
    if n <= 0:
        raise DoesNotFit(f"no memory is left for the KV cache ({available_bytes / 2**30:.2f} GiB available per GPU)")
    return n


def _with_request_blocks(kinds: _Kinds, grouping: _Grouping, dep: Deployment, checkpoint: int,
                         d: Derivation) -> tuple[list[KvGroup], int]:
    """Each group with the blocks one request at max_model_len holds in it (per layer); their sum is a derivation step."""
    L, _ = resolved_lengths(dep)
    blocks_inputs: dict[str, Any]  # Derivation.step inputs
    if kinds.one_group and not kinds.uniform:  # UniformTypeKVCacheSpecs: full attention / MLA of several page sizes
        g, block = grouping.groups[0], grouping.block_size
        groups = [KvGroup(g.kind, g.layers, block, g.page_bytes, cdiv(L, block))]
        blocks_expr, blocks_inputs = "cdiv(max_model_len, block_size)", {"max_model_len": L, "block_size": block}
    elif kinds.one_group:
        g, spec = grouping.groups[0], kinds.specs[0]
        blocks = _per_request_blocks(spec, g.block_size, dep, checkpoint)
        groups = [KvGroup(g.kind, g.layers, g.block_size, g.page_bytes, blocks)]
        blocks_expr, blocks_inputs = _one_kind_blocks_expression(spec, g.block_size, dep, blocks)
    else:
        spec_by_kind = {k: v[0] for k, v in kinds.by_kind.items()}
        groups = [KvGroup(g.kind, g.layers, g.block_size, g.page_bytes,
                          _per_request_blocks(spec_by_kind[g.kind], g.block_size, dep, checkpoint)) for g in grouping.groups]
        terms = [f"b{i}" for i in range(len(groups))]
        blocks_expr = " + ".join(terms)
        blocks_inputs = {t: g.blocks_per_request for t, g in zip(terms, groups)}
    per_request = d.step("blocks_per_request", blocks_expr, unit="blocks", **blocks_inputs,
                         note="per group at max_model_len: full cdiv(L, B); sliding cdiv(min(W-1+chunk, L), B)+1; state 1 (+1 align)")
    return groups, per_request


def _one_kind_blocks_expression(spec: LayerSpec, block: int, dep: Deployment, blocks: int) -> tuple[str, dict[str, Any]]:
    """The per-request block count of a model whose layers are all one kind, as the expression vLLM's spec uses."""
    L, mnbt = resolved_lengths(dep)
    in_flight = {"max_model_len": L, "block_size": block, "in_flight_batches": dep.in_flight_batches,
                 "max_num_batched_tokens": mnbt}
    if spec.kind == SLIDING:
        return ("cdiv(min(window - 1 + in_flight_batches * max_num_batched_tokens, max_model_len), block_size) + 1",
                {"window": spec.window, **in_flight})
    if spec.kind == CHUNKED:
        return ("cdiv(min(chunk + in_flight_batches * max_num_batched_tokens, max_model_len), block_size)",
                {"chunk": spec.window, **in_flight})
    if spec.kind in STATE_KINDS:
        return "state_blocks", {"state_blocks": blocks}
    return "cdiv(max_model_len, block_size)", {"max_model_len": L, "block_size": block}


def _log_lines(dep: Deployment, n: int, block: int, groups: list[KvGroup], concurrency: float,
               d: Derivation) -> tuple[int, float, tuple[str, ...]]:
    """The token count and concurrency as this vLLM release prints them (vllm-kv-sizing.md §6), and its lines."""
    era, L = dep.era, resolved_lengths(dep)[0]
    min_block, n_groups = min(g.block_size for g in groups), len(groups)
    pcp = 1
    if era == "v0":
        tokens = d.step("kv_cache_tokens", "num_blocks * block_size", unit="tokens", num_blocks=n, block_size=block)
        concurrency = d.step("max_concurrency", "num_blocks * block_size / max_model_len", unit="x",
                             num_blocks=n, block_size=block, max_model_len=L)
        cpu_blocks = V0_SWAP_SPACE_BYTES // (groups[0].page_bytes * groups[0].layers) if n_groups == 1 else 0
        return tokens, concurrency, (f"# GPU blocks: {n}, # CPU blocks: {cpu_blocks}",
                                     f"Maximum concurrency for {L} tokens per request: {concurrency:.2f}x")
    if era == "v1-uniform":
        tokens = d.step("kv_cache_tokens", "num_blocks // n_groups * min_block_size", unit="tokens",
                        num_blocks=n, n_groups=n_groups, min_block_size=min_block)
        concurrency = d.step("max_concurrency", "kv_cache_tokens / max_model_len", unit="x", kv_cache_tokens=tokens, max_model_len=L)
        return tokens, concurrency, _lines(dep, tokens, L, concurrency, combined=False)
    if era == "v1-hybrid-old":
        tokens = d.step("kv_cache_tokens", "num_blocks // n_groups * min_block_size * pcp", unit="tokens",
                        num_blocks=n, n_groups=n_groups, min_block_size=min_block, pcp=pcp,
                        note="the pre-v0.20.1 line assumes every group consumes blocks at the same rate")
        return tokens, concurrency, _lines(dep, tokens, L, concurrency, combined=False)
    tokens = d.step("kv_cache_tokens", "int(max_concurrency * max_model_len)", unit="tokens",
                    max_concurrency=concurrency, max_model_len=L,
                    note="since v0.20.1 the token line is concurrency x max_model_len, not the pool size")
    return tokens, concurrency, _lines(dep, tokens, L, concurrency, combined=dep.version >= COMBINED_LOG_LINE_FROM)


def _full_groups(kinds: _Kinds, groups: list[KvGroup]) -> list[KvGroup]:
    """The groups that hold a request's whole context (full attention, MLA, or the one uniform group)."""
    return [g for g in groups if g.kind in (FULL, MLA, "+".join(kinds.attention))] or groups[:1]


# The tokens of full-attention context the pool holds for one request (block 0 is the null block; the other
# groups' blocks that request pins come off); ``calibrate`` derives a log's pool by this same expression.
USABLE_KV_TOKENS = "max(0, block_size * (num_blocks - 1 - other_blocks) // full_groups)"


def _usable_tokens(kinds: _Kinds, groups: list[KvGroup], n: int, d: Derivation) -> tuple[int, int]:
    """True usable capacity: tokens of full-attention context the pool holds for one request; and its block size."""
    full_groups = _full_groups(kinds, groups)
    other_blocks = sum(g.blocks_per_request for g in groups if g not in full_groups)
    attn_block = full_groups[0].block_size
    usable = d.step("usable_kv_tokens", USABLE_KV_TOKENS,
                    unit="tokens", block_size=attn_block, num_blocks=n, other_blocks=other_blocks, full_groups=len(full_groups),
                    note="block 0 is the null block; window/state groups pin their blocks per request (shown for one request); "
                         "0 when the state blocks alone take the pool")
    return usable, attn_block


def _token_line_notes(dep: Deployment, groups: list[KvGroup], tokens: int, usable: int, attn_block: int,
                      concurrency: float) -> list[str]:
    """Why the logged token count differs from what the pool holds, where it does by more than a block (or 2%)."""
    era, n_groups, L = dep.era, len(groups), resolved_lengths(dep)[0]
    if era == "v0" or abs(usable - tokens) <= max(attn_block, 0.02 * usable):
        return []
    if n_groups > 1 and era in ("v1-hybrid-old", "v1-uniform"):
        return [f"the logged {tokens:,} tokens divides the blocks by all {n_groups} groups; full-attention context "
                f"really holds about {usable:,} tokens (window/state groups need only a few blocks per request)"]
    if era == "v1-new":
        return [f"since v0.20.1 the logged tokens are concurrency x max_model_len ({concurrency:.2f} x {L:,}); "
                f"the pool itself holds about {usable:,} tokens of full-attention context for one request"]
    return []


def _growing_bytes_per_token(kinds: _Kinds, groups: list[KvGroup], attn_block: int, d: Derivation) -> int:
    """KV bytes per token of context on one rank, every layer that grows with it (the token-equivalent charge)."""
    if kinds.one_group:
        return sum(s.bytes_per_token for s in kinds.specs if s.kind in (FULL, MLA, INDEXER))
    return d.step("kv_bytes_per_token", "page_bytes // block_size * growing_layers", unit="B",
                  page_bytes=groups[0].page_bytes, block_size=attn_block,
                  growing_layers=sum(g.layers for g in groups if g.kind in (FULL, MLA)))


def _lines(dep: Deployment, tokens: int, L: int, concurrency: float, combined: bool) -> tuple[str, ...]:
    where = "CPU" if dep.device == "cpu" else "GPU"
    size = f"{where} KV cache size: {tokens:,} tokens"
    conc = f"Maximum concurrency for {L:,} tokens per request: {concurrency:.2f}x"
    return (f"{size}, {conc}",) if combined else (size, conc)


# ---------------------------------------------------------------------------------------
# vLLM's start-up check and --max-model-len auto

NULL_BLOCK_RESERVED_FROM = (0, 29, 0)  # the check and auto-fit plan against the usable blocks (0.29+)
GROUP_CHECK_FROM = (0, 17, 0)  # the check counts group block ids x bytes per block id (before: a sum over layers)
OVERRIDE_CHECKED_FROM = (0, 22, 0)  # --num-gpu-blocks-override replaces the memory the check plans against


@frozen
class BlockLayout:
    """Each layer spec with its page and block size, and the bytes one block id spans over all layers."""

    specs: list[tuple[LayerSpec, int, int]]  # (spec, page bytes of one layer, block size)
    group_blocks: list[tuple[LayerSpec, int]]  # one entry per KV-cache group: (a spec of its kind, its block size)
    bytes_per_block: int


def block_layout(arch: Architecture, dep: Deployment, gpu: Gpu | None) -> BlockLayout:
    d, notes = Derivation(), list[str]()
    specs = _layer_specs(arch, dep)
    block = _base_block_size(arch, dep, gpu, notes)
    kinds = _group_by_kind(arch, specs)
    if not kinds.attention:
        L = resolved_lengths(dep)[0]
        state = specs[0].state_bytes
        return BlockLayout([(s, state, L) for s in specs], [(specs[0], L)], state * len(specs))
    if kinds.one_group:
        laid = [(s, block * s.bytes_per_token, block) for s in specs]
        return BlockLayout(laid, [(specs[0], block)], sum(page for _, page, _ in laid))
    page, block, block_of = _hybrid_pages(arch, dep, gpu, kinds, block, d, notes)
    grouping = _hybrid_groups(kinds, page, block, block_of, 1, d, notes)
    laid = [(s, page, block_of[s.kind]) for s in specs]
    firsts = {k: v[0] for k, v in kinds.by_kind.items()}
    return BlockLayout(laid, [(firsts[g.kind], g.block_size) for g in grouping.groups], page * grouping.group_size)


def kv_cache_group_count(arch: Architecture, dep: Deployment, gpu: Gpu | None = None) -> int:
    """How many KV-cache groups vLLM makes of this model's layers (1 for a model of one attention kind)."""
    return len(block_layout(arch, dep, gpu).group_blocks)


def _request_bytes(layout: BlockLayout, dep: Deployment, length: int, checkpoint: int, per_group: bool) -> int:
    """Bytes one request of ``length`` tokens needs: summed over layers (the start-up check) or, as
    auto-fit counts it, the group block ids it takes times the bytes one block id spans."""
    at = replace(dep, max_model_len=length)
    if per_group:
        return layout.bytes_per_block * sum(_per_request_blocks(s, b, at, checkpoint) for s, b in layout.group_blocks)
    return sum(page * _per_request_blocks(s, b, at, checkpoint) for s, page, b in layout.specs)


def _largest_fitting(fits, upper: int) -> int:
    """vLLM's binary search over 1..upper (0 when not even one token fits)."""
    if not fits(1):
        return 0
    lo, hi, best = 1, upper, 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


@frozen
class StartCheck:
    """vLLM's check that one request at max_model_len fits (check_enough_kv_cache_memory)."""

    needed_bytes: int
    available_bytes: int  # what the check compares with: available, less the null block from 0.29
    largest_max_model_len: int  # vLLM's estimate of the longest length that would start (0: none)

    @property
    def fits(self) -> bool:
        return self.needed_bytes <= self.available_bytes


def _check_bytes(layout: BlockLayout, dep: Deployment, available_bytes: int) -> int | None:
    """The memory vLLM's start-up check plans against (None: the check does not run on it)."""
    if dep.num_gpu_blocks_override is not None:
        if dep.version < OVERRIDE_CHECKED_FROM:
            return None  # older releases check the profiled memory, which an override alone does not tell
        available_bytes = dep.num_gpu_blocks_override * layout.bytes_per_block
    return available_bytes - (layout.bytes_per_block if dep.version >= NULL_BLOCK_RESERVED_FROM else 0)


def bytes_per_block(arch: Architecture, dep: Deployment, gpu: Gpu | None = None) -> int:
    """The bytes one block id spans over every layer of one rank: what vLLM allocates per block it is told of."""
    return block_layout(arch, dep, gpu).bytes_per_block


def start_check(arch: Architecture, dep: Deployment, available_bytes: int, gpu: Gpu | None = None) -> StartCheck | None:
    """vLLM's check that one request at max_model_len fits, as the release runs it (None: not run)."""
    layout = block_layout(arch, dep, gpu)
    checkpoint = 1 if flashinfer_gdn_alignment(arch, dep, gpu) else 0
    usable = _check_bytes(layout, dep, available_bytes)
    if usable is None or not any(s.kind not in STATE_KINDS for s, _, _ in layout.specs) and arch.attention_free:
        return None if usable is None else StartCheck(0, usable, resolved_lengths(dep)[0])
    per_group = dep.version >= GROUP_CHECK_FROM
    L = resolved_lengths(dep)[0]
    needed = _request_bytes(layout, dep, L, checkpoint, per_group)
    largest = L if needed <= usable else _largest_fitting(
        lambda n: _request_bytes(layout, dep, n, checkpoint, per_group) <= usable, L)
    return StartCheck(needed, usable, largest)


def auto_max_model_len(arch: Architecture, dep: Deployment, available_bytes: int, gpu: Gpu | None = None) -> int:
    """--max-model-len auto (vLLM 0.14+ _auto_fit_max_model_len): the longest length whose one
    request's group blocks fit the memory the check plans against, at most the model's own context
    (dep's max_model_len); an attention-free model keeps its derived length."""
    if arch.attention_free:
        return resolved_lengths(dep)[0]
    layout = block_layout(arch, dep, gpu)
    checkpoint = 1 if flashinfer_gdn_alignment(arch, dep, gpu) else 0
    usable = _check_bytes(layout, dep, available_bytes)
    usable = available_bytes if usable is None else usable
    return _largest_fitting(lambda n: _request_bytes(layout, dep, n, checkpoint, per_group=True) <= usable,
                            resolved_lengths(dep)[0])
