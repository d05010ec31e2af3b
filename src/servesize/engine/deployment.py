"""Deployment: a model on GPUs with engine settings, named as vLLM names them.

Defaults that changed between vLLM releases are resolved from ``vllm_version`` here, once,
so every later stage sees concrete values. Each version rule cites where it comes from.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from servesize.engine.versions import DEFAULT_VLLM_VERSION, log_era, parse_version
from servesize.errors import BadInput, DoesNotFit
from servesize.model.architecture import Architecture
from servesize.model.hardware import GpuGroup
from servesize.model.layers import GatedDeltaNet


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


@dataclass(frozen=True)
class Deployment:
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    dtype: str = "auto"
    quantization: str = "native"
    kv_cache_dtype: str = "auto"
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    kv_cache_memory_bytes: int | None = None
    num_gpu_blocks_override: int | None = None
    enable_prefix_caching: bool = True
    enforce_eager: bool = False
    mamba_ssm_cache_dtype: str | None = None
    mamba_cache_mode: str | None = None
    num_speculative_tokens: int = 0
    vllm_version: str = DEFAULT_VLLM_VERSION
    device: str = "cuda"

    @property
    def version(self) -> tuple[int, int, int]:
        return parse_version(self.vllm_version)

    @property
    def era(self) -> str:
        return log_era(self.version)

    def resolved(self, arch: Architecture, gpus: GpuGroup | None) -> Deployment:
        """Fill every default the engine would fill, for this version and hardware."""
        v = self.version
        util = self.gpu_memory_utilization
        if util is None:
            # 0.90 until 0.19.x; 0.92 from 0.20.0 (config/cache.py default, vLLM PR #38284).
            util = 0.92 if v >= (0, 20, 0) else 0.90
        if not 0 < util <= 1:
            raise BadInput(f"--gpu-memory-utilization must be in (0, 1], got {util}")
        limit = derived_max_model_len(arch)
        max_len = self.max_model_len or limit
        if not max_len:
            raise BadInput("the config has no max_position_embeddings: pass --max-model-len")
        if limit and max_len > limit:
            raise BadInput(f"--max-model-len {max_len:,} is above {arch.name}'s {limit:,}-token context "
                           "(max_position_embeddings and RoPE scaling); vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
        # vLLM EngineArgs defaults for the OpenAI server (arg_utils.py): by the CUDA-visible memory,
        # >= 160 GiB: 16384 batched tokens / 1024 sequences (from 0.28.0); >= 70 GiB and not an A100
        # (PR #17885): 8192 / 1024; otherwise 2048 / 256. V0 had chunked prefill off by default,
        # so its profile batch was max_model_len.
        total = _cuda_total_bytes(gpus) if gpus is not None else 0
        a100 = gpus is not None and "a100" in gpus.gpu.name.lower()
        if v >= (0, 28, 0) and total >= 160 * 2**30:
            tier = (16384, 1024)
        elif total >= 70 * 2**30 and not a100:
            tier = (8192, 1024)
        else:
            tier = (2048, 256)
        mnbt = self.max_num_batched_tokens
        if mnbt is None:
            mnbt = max_len if v < (0, 8, 0) else tier[0]
        seqs = self.max_num_seqs or (tier[1] if v >= (0, 8, 0) else 256)
        mode = self.mamba_cache_mode
        if mode is None and arch.has_state:
            # Hybrid (attention + Mamba/GDN) models get prefix caching only from 0.26.0
            # (ModelConfig.is_prefix_caching_supported); with it, the states are checkpointed every
            # block ('align'); without it one state block per request ('none').
            mode = "align" if (self.enable_prefix_caching and v >= (0, 26, 0)) else "none"
        return replace(self, gpu_memory_utilization=util, max_model_len=max_len, max_num_batched_tokens=mnbt,
                       max_num_seqs=seqs, mamba_cache_mode=mode)


def check_parallelism(arch: Architecture, tp: int) -> None:
    """vLLM's own checks: heads divide by TP; KV heads divide TP or TP divides them."""
    if tp < 1:
        raise BadInput(f"--tensor-parallel-size must be at least 1, got {tp}")
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
