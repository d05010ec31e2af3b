"""Deployment: a model on GPUs with engine settings, named as vLLM names them.

Defaults that changed between vLLM releases, or that differ by platform (CUDA, ROCm, the CPU
build) and GPU, are resolved from ``vllm_version``, ``device`` and the GPU here, once, so every
later stage sees concrete values. Each rule cites where it comes from (the release sources read:
``vllm/engine/arg_utils.py`` get_batch_defaults and _set_default_max_num_seqs_and_batched_tokens_args,
``vllm/platforms/cpu.py`` check_and_update_config, ``vllm/config/vllm.py`` max_concurrent_batches).
"""

from __future__ import annotations

from dataclasses import field, replace
from typing import TYPE_CHECKING

from servesize.engine.versions import (
    DEFAULT_VLLM_VERSION,
    V0_CHUNKED_BATCHED_TOKENS,
    V0_LONG_CONTEXT_CHUNKED_PREFILL_FROM,
    V0_LONG_CONTEXT_TOKENS,
    V1_FROM,
    log_era,
    parse_version,
)
from servesize.errors import BadInput, DoesNotFit, WouldNotStart
from servesize.frozen import frozen
from servesize.model.architecture import Architecture
from servesize.model.hardware import GpuGroup
from servesize.model.layers import MLA, SLIDING, GatedDeltaNet

if TYPE_CHECKING:
    from servesize.engine.speculative import Speculation

# --max-model-len auto (or -1): vLLM picks the largest length whose one request fits (v0.14+).
AUTO_MAX_MODEL_LEN = -1
AUTO_MAX_MODEL_LEN_FROM = (0, 14, 0)
# --gpu-memory-utilization's default: 0.90 until 0.19.x, 0.92 from 0.20.0 (config/cache.py, vLLM PR #38284).
UTILIZATION_092_FROM = (0, 20, 0)
EVERY_RELEASE = (0, 0, 0)  # a rule with no lower boundary among the releases servesize reads
# vLLM SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS: the floor of the profile batch when
# chunked prefill is off (CPU MLA), and the CPU API server's per-rank default.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
# The CPU build's OpenAI-server defaults, per rank of TP x PP (arg_utils.py get_batch_defaults,
# 'cpu specific default values', in every release read from 0.22 to 0.33).
CPU_SERVER_BATCHED_TOKENS_PER_RANK = 2048
CPU_SERVER_SEQS_PER_RANK = 128
# --moe-backend's values (vllm/config/kernel.py MoEBackend, vLLM 0.32; the flag from 0.17: data/vllm_vocabulary.toml):
# the fused-MoE kernel. The step model prices 'marlin' apart (FP4 experts, gpus.toml fp4_moe_marlin_tbps); 'auto' is
# the release's choice for the GPU and weights.
MOE_BACKENDS = ("auto", "triton", "batched_triton", "deep_gemm", "deep_gemm_mega_moe", "cutlass", "flashinfer_trtllm",
                "flashinfer_cutlass", "flashinfer_cutedsl", "flashinfer_moe_ep_cutedsl", "flashinfer_b12x", "b12x",
                "flashinfer_moe_ep_mega_deep_gemm", "marlin", "humming", "triton_unfused", "aiter", "aiter_mega_moe",
                "aiter_triton_mxfp4_bf16", "flydsl", "hpc", "emulation", "rdna3")


@frozen
class BatchTier:
    """One row of the CUDA OpenAI server's batch defaults (arg_utils.py get_batch_defaults): from release
    ``since``, on at least ``min_bytes`` of CUDA-visible memory (A100s excluded where ``not_a100``, PR #17885)."""
    since: tuple[int, int, int]
    min_bytes: int
    not_a100: bool
    batched_tokens: int
    seqs: int


CUDA_BATCH_TIERS = (BatchTier((0, 28, 0), 160 * 2**30, False, 16384, 1024),
                    BatchTier(EVERY_RELEASE, 70 * 2**30, True, 8192, 1024))
CUDA_BATCH_FALLBACK = (2048, 256)  # below every tier
V0_SEQS = 256  # before V1 (0.8.0) max_num_seqs defaulted to 256 on every GPU


def batch_default_words(which: str) -> str:
    """The default of --max-num-seqs (``which="seqs"``) or --max-num-batched-tokens (``"batched_tokens"``), in
    words, from the same table ``Deployment._tier`` reads: help text that states an engine default says this."""
    pick = (lambda t: t.seqs) if which == "seqs" else (lambda t: t.batched_tokens)
    parts = []
    for t in CUDA_BATCH_TIERS:
        where = f">= {t.min_bytes // 2**30} GiB GPUs" + (" other than A100s" if t.not_a100 else "")
        since = f" from v{t.since[0]}.{t.since[1]}" if t.since > EVERY_RELEASE else ""
        parts.append(f"{pick(t)} on {where}{since}")
    fallback = CUDA_BATCH_FALLBACK[1] if which == "seqs" else CUDA_BATCH_FALLBACK[0]
    cpu = CPU_SERVER_SEQS_PER_RANK if which == "seqs" else CPU_SERVER_BATCHED_TOKENS_PER_RANK
    v0 = (f"{V0_SEQS} before v0.8" if which == "seqs"
          else f"before v0.8 max_model_len, or {V0_CHUNKED_BATCHED_TOKENS} with chunked prefill")
    return f"{', '.join(parts)}, else {fallback}; the CPU build {cpu} per rank; {v0}"
# The CPU MLA reference kernel compiles only for block 16 (platforms/cpu.py, from 0.28); CPUs
# with AMX tiles (torch.cpu._is_amx_tile_supported) take the AMX MLA backend instead, which keeps the
# CPU default block and leaves chunked prefill and prefix caching on (read in the 0.32.0 wheel's
# platforms/cpu.py and amx_mla.py; earlier releases were not checked, so the reference rule stands there).
CPU_MLA_BLOCK = 16
CPU_MLA_FORCED_FROM = (0, 28, 0)
CPU_AMX_MLA_FROM = (0, 32, 0)
# Sliding-window and chunked-local specs reserve for every batch in flight (max_in_flight_tokens,
# kv_cache_interface.py from 0.26.0); async scheduling, on by default on CUDA, keeps two in flight.
IN_FLIGHT_BATCHES_FROM = (0, 26, 0)
# Hybrid models: prefix caching on by default from 0.26.0; asked for, it checkpoints the recurrent
# states every block ('align' mode) from 0.15.0.
HYBRID_PREFIX_CACHING_FROM = (0, 26, 0)
ALIGN_MODE_FROM = (0, 15, 0)


def derived_max_model_len(arch: Architecture) -> int | None:
    """The longest context vLLM accepts without VLLM_ALLOW_LONG_MAX_MODEL_LEN (ModelConfig's
    _get_and_verify_max_len): max_position_embeddings, times the RoPE scaling factor for scaling
    types that extend it (yarn scales original_max_position_embeddings; llama3/longrope/su already
    count it in max_position_embeddings)."""
    limit = arch.max_position_embeddings or None
    rope = arch.config.get("rope_scaling") or {}
    if limit and isinstance(rope, dict) and rope.get("factor"):
        kind = rope.get("rope_type") or rope.get("type")
        if kind not in ("su", "longrope", "llama3", "mrope", "default", None):
            if kind == "yarn" and rope.get("original_max_position_embeddings"):
                limit = int(rope["original_max_position_embeddings"])
            limit = int(limit * float(rope["factor"]))
    return limit


def gpu_compute_capability(gpu) -> float | None:
    try:
        return float(gpu.compute_capability)
    except (TypeError, ValueError, AttributeError):
        return None


def _cuda_total_bytes(gpus: GpuGroup) -> int:
    g = gpus.gpu
    return g.cuda_total_bytes or g.memory_bytes


@frozen
class Deployment:
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    enable_expert_parallel: bool = False
    dtype: str = "auto"
    quantization: str = "native"
    kv_cache_dtype: str = "auto"
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None  # AUTO_MAX_MODEL_LEN: the largest that fits, as vLLM picks it
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    kv_cache_memory_bytes: int | None = None
    num_gpu_blocks_override: int | None = None
    enable_prefix_caching: bool | None = None  # None: the model's default (off for attention-free models)
    enable_chunked_prefill: bool | None = None
    enforce_eager: bool = False
    moe_backend: str = "auto"  # --moe-backend: the fused-MoE kernel (MOE_BACKENDS)
    disable_hybrid_kv_cache_manager: bool = False
    mamba_ssm_cache_dtype: str | None = None
    mamba_cache_mode: str | None = None
    num_speculative_tokens: int = 0  # the model's own MTP head, when ``speculation`` is None
    speculation: Speculation | None = field(default=None, compare=False)
    enable_lora: bool = False
    max_loras: int = 1
    max_lora_rank: int = 16
    fully_sharded_loras: bool = False
    language_model_only: bool = False  # --limit-mm-per-prompt with every modality at 0: no encoder loaded
    vllm_version: str = DEFAULT_VLLM_VERSION
    device: str = "cuda"
    cpu_avx512_bf16: bool = True  # the CPU build's machine has AVX-512 BF16 (platforms/cpu.py decides by it)
    cpu_amx: bool = False  # ... and AMX tiles (its MLA backend is then AMX_MLA, not the reference CPU_MLA)

    @property
    def version(self) -> tuple[int, int, int]:
        return parse_version(self.vllm_version)

    @property
    def era(self) -> str:
        return log_era(self.version)

    @property
    def world_size(self) -> int:
        """GPUs one replica spans: TP x PP."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def spec_tokens(self) -> int:
        """Draft tokens per step, whichever way speculation was asked for."""
        return self.speculation.num_speculative_tokens if self.speculation is not None else self.num_speculative_tokens

    @property
    def drops_hit_block(self) -> bool:
        """Whether vLLM's prefix cache drops a hit's last block here: drafts that read the target's hidden states
        (the model's own MTP head, EAGLE, EAGLE-3) unless disable_eagle_block_drop (engine/speculative.py)."""
        if self.speculation is not None:
            return self.speculation.drops_hit_block
        return self.num_speculative_tokens > 0

    @property
    def mtp_tokens(self) -> int:
        """Draft tokens of the model's own MTP head (0 when speculation uses something else)."""
        if self.speculation is None:
            return self.num_speculative_tokens
        return self.speculation.num_speculative_tokens if self.speculation.method == "mtp" else 0

    @property
    def in_flight_batches(self) -> int:
        """Batches scheduled but not yet settled (VllmConfig.max_concurrent_batches): the pipeline's
        depth, or 2 with async scheduling (on by default on CUDA, off on the CPU build and with
        speculation other than EAGLE/MTP/draft models/ngram); before 0.26 sliding windows reserved one."""
        pp = self.pipeline_parallel_size
        if self.version < IN_FLIGHT_BATCHES_FROM:
            return 1
        asynchronous = self.device == "cuda" and (self.speculation is None or self.speculation.async_ok)
        return 2 if asynchronous and pp == 1 else pp

    def resolved(self, arch: Architecture, gpus: GpuGroup | None) -> Deployment:
        """Fill every default the engine would fill, for this version, platform and hardware."""
        util = self._utilisation()
        max_len = self._max_len(arch)
        prefix_caching = self._prefix_caching(arch)
        chunked = self._chunked_prefill(arch, max_len, gpus)
        mnbt, seqs = self._batch(arch, gpus, max_len, chunked)
        _check_scheduler(mnbt, seqs, max_len, chunked)
        mode = self.mamba_cache_mode
        if mode is None and arch.has_state:
            # With prefix caching on, the states are checkpointed every block ('align', from 0.15:
            # MambaModelConfig.verify_and_update_config); without it one state block per request ('none').
            mode = "align" if (prefix_caching and self.version >= ALIGN_MODE_FROM) else "none"
        return replace(self, gpu_memory_utilization=util, max_model_len=max_len, max_num_batched_tokens=mnbt,
                       max_num_seqs=seqs, mamba_cache_mode=mode, enable_prefix_caching=prefix_caching,
                       enable_chunked_prefill=chunked)

    # -- the defaults, one rule each ---------------------------------------------------------
    def resolved_utilisation(self) -> float:
        """--gpu-memory-utilization as the engine settles it (its release's default where unset)."""
        return self._utilisation()

    def _utilisation(self) -> float:
        util = self.gpu_memory_utilization
        if util is None:
            # 0.90 until 0.19.x; 0.92 from 0.20.0 (config/cache.py default, vLLM PR #38284).
            util = 0.92 if self.version >= UTILIZATION_092_FROM else 0.90
        if not 0 < util <= 1:
            raise BadInput(f"--gpu-memory-utilization must be in (0, 1], got {util}", field="gpu_memory_utilization")
        return util

    def _max_len(self, arch: Architecture) -> int:
        limit = derived_max_model_len(arch)
        if self.max_model_len == AUTO_MAX_MODEL_LEN:
            if self.version < AUTO_MAX_MODEL_LEN_FROM:
                raise BadInput(f"--max-model-len auto (-1) arrived in vLLM 0.14; {self.vllm_version} needs a number", field="max_model_len")
            if not limit:
                raise BadInput("--max-model-len auto needs the config's max_position_embeddings to search below", field="max_model_len")
            return AUTO_MAX_MODEL_LEN  # the largest that fits: memory_report searches for it once the budget is known
        max_len = self.max_model_len or limit
        if not max_len:
            raise BadInput("the config has no max_position_embeddings: pass --max-model-len", field="max_model_len")
        if limit and max_len > limit:
            raise BadInput(f"--max-model-len {max_len:,} is above {arch.name}'s {limit:,}-token context "
                           "(max_position_embeddings and RoPE scaling); vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
                           field="max_model_len")
        return max_len

    def cpu_reference_mla(self, arch: Architecture) -> bool:
        """The CPU build's reference MLA backend (no AMX): block 16, no chunked prefill, no prefix caching."""
        return (self.device == "cpu" and bool(arch.count(MLA)) and self.version >= CPU_MLA_FORCED_FROM
                and not (self.cpu_amx and self.version >= CPU_AMX_MLA_FROM))

    def _prefix_caching(self, arch: Architecture) -> bool:
        """As asked; by default on, except for attention-free models and, before 0.26, for hybrid
        (attention + Mamba/GDN) models (ModelConfig.is_prefix_caching_supported); the CPU build turns
        it off for MLA (platforms/cpu.py: 'forcing chunked prefill and prefix caching to be disabled')."""
        if self.cpu_reference_mla(arch):
            return False
        if self.enable_prefix_caching is not None:
            return self.enable_prefix_caching
        if arch.attention_free:
            return False
        return not arch.has_state or self.version >= HYBRID_PREFIX_CACHING_FROM

    def _chunked_prefill(self, arch: Architecture, max_len: int = 0, gpus: GpuGroup | None = None) -> bool:
        if self.cpu_reference_mla(arch):
            return False
        if self.enable_chunked_prefill is not None:
            return self.enable_chunked_prefill
        if self.version >= V1_FROM:
            return True  # V1 schedules chunked prefills
        return self._v0_long_context_chunked(arch, max_len, gpus)

    def _v0_long_context_chunked(self, arch: Architecture, max_len: int, gpus: GpuGroup | None) -> bool:
        """V0 left chunked prefill off, except above 32K tokens (engine.versions, PR #6666) on CUDA for a
        text model with full attention only, no speculation and no LoRA. AMD GPUs are left off: one V0
        release's condition adds ``not current_platform.is_rocm()`` and which releases is not read."""
        if self.version < V0_LONG_CONTEXT_CHUNKED_PREFILL_FROM or self.device != "cuda":
            return False
        if gpus is not None and gpus.gpu.vendor.upper() == "AMD":
            return False
        length = max_len if max_len != AUTO_MAX_MODEL_LEN else (derived_max_model_len(arch) or 0)
        multimodal = arch.vision_config is not None and not self.language_model_only
        sliding = any(layer.kind == SLIDING for layer in arch.layers)
        return (length > V0_LONG_CONTEXT_TOKENS and not sliding and not arch.has_state and not multimodal
                and self.spec_tokens == 0 and not self.enable_lora)

    def _tier(self, gpus: GpuGroup | None) -> tuple[int, int]:
        """(batched tokens, sequences) the OpenAI server defaults to on this device.

        CUDA, by the CUDA-visible memory: >= 160 GiB 16384 / 1024 (from 0.28.0); >= 70 GiB and not
        an A100 (PR #17885) 8192 / 1024; otherwise 2048 / 256. The CPU build: 2048 / 128 per rank of
        TP x PP."""
        if self.device == "cpu":
            return CPU_SERVER_BATCHED_TOKENS_PER_RANK * self.world_size, CPU_SERVER_SEQS_PER_RANK * self.world_size
        total = _cuda_total_bytes(gpus) if gpus is not None else 0
        a100 = gpus is not None and "a100" in gpus.gpu.name.lower()
        for tier in CUDA_BATCH_TIERS:
            if self.version >= tier.since and total >= tier.min_bytes and not (tier.not_a100 and a100):
                return tier.batched_tokens, tier.seqs
        return CUDA_BATCH_FALLBACK

    def _batch(self, arch: Architecture, gpus: GpuGroup | None, max_len: int, chunked: bool) -> tuple[int, int]:
        """max_num_batched_tokens and max_num_seqs as the engine settles them.

        V0 had chunked prefill off by default, so its profile batch was max_model_len (with chunked
        prefill on, as V0 turns it on above 32K, 512). In V1, left
        unset: without chunked prefill the batch must hold one whole prompt (max(max_model_len,
        default)); it never exceeds max_num_seqs x max_model_len; and max_num_seqs never exceeds
        the batch. The CPU build's MLA path sets max(max_model_len, 2048) whatever was asked."""
        v = self.version
        batched_default, seqs_default = self._tier(gpus)
        length = max_len if max_len != AUTO_MAX_MODEL_LEN else (derived_max_model_len(arch) or 0)
        seqs = self.max_num_seqs or (seqs_default if v >= V1_FROM else V0_SEQS)
        mnbt = self.max_num_batched_tokens
        if mnbt is None:
            if v < V1_FROM:
                mnbt = V0_CHUNKED_BATCHED_TOKENS if chunked else length
            else:
                mnbt = batched_default if chunked else max(length, batched_default)
                mnbt = min(seqs * length, mnbt) if length else mnbt
        if self.cpu_reference_mla(arch):
            mnbt = max(length, DEFAULT_MAX_NUM_BATCHED_TOKENS)
        if self.max_num_seqs is None and v >= V1_FROM:
            seqs = min(seqs, mnbt)
        return mnbt, seqs


def _check_scheduler(mnbt: int, seqs: int, max_len: int, chunked: bool) -> None:
    """vLLM's SchedulerConfig checks at start-up: without chunked prefill one batch must hold a whole
    max_model_len prompt; a batch of max_num_seqs sequences needs a token each."""
    if not chunked and max_len != AUTO_MAX_MODEL_LEN and mnbt < max_len:
        raise WouldNotStart(f"vLLM would refuse to start: max_num_batched_tokens ({mnbt:,}) is smaller than max_model_len "
                            f"({max_len:,}) with chunked prefill off; give --max-num-batched-tokens {max_len} or more, "
                            f"a --max-model-len of at most {mnbt}, or --enable-chunked-prefill", field="max_num_batched_tokens")
    if mnbt < seqs:
        raise WouldNotStart(f"vLLM would refuse to start: max_num_batched_tokens ({mnbt:,}) must be at least "
                            f"max_num_seqs ({seqs:,}); give --max-num-seqs {mnbt} or less, or --max-num-batched-tokens "
                            f"{seqs} or more", field="max_num_seqs")


def check_parallelism(arch: Architecture, tp: int, pp: int = 1) -> None:
    """vLLM's own checks: heads divide by TP; KV heads divide TP or TP divides them; PP no deeper
    than the layers."""
    if tp < 1:
        raise BadInput(f"--tensor-parallel-size must be at least 1, got {tp}", field="tensor_parallel_size")
    if arch.num_attention_heads and arch.num_attention_heads % tp:
        raise DoesNotFit(
            f"tensor parallel size {tp} does not divide the {arch.num_attention_heads} attention heads of "
            f"{arch.name}; choose a divisor of {arch.num_attention_heads}"
        )
    kv = arch.num_kv_heads
    if kv and kv % tp and tp % kv:
        raise DoesNotFit(f"tensor parallel size {tp} and the {kv} KV heads of {arch.name} do not divide each other")
    # The first layer stands for all: a GDN model whose layer_types start with full attention is not checked here.
    first = arch.layers[0] if arch.layers else None
    if isinstance(first, GatedDeltaNet) and (first.num_value_heads % tp or first.num_key_heads % tp):
        raise DoesNotFit(f"tensor parallel size {tp} does not divide the linear-attention heads of {arch.name}")
    if pp > arch.num_layers:
        raise DoesNotFit(f"pipeline parallel size {pp} is more than the {arch.num_layers} layers of {arch.name}")
