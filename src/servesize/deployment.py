"""Deployment: a model on GPUs with engine settings, named as vLLM names them.

Defaults that changed between vLLM releases are resolved from ``vllm_version`` here, once,
so every later stage sees concrete values. Each version rule cites where it comes from.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from servesize.architecture import Architecture
from servesize.errors import BadInput, DoesNotFit
from servesize.hardware import GpuGroup

DEFAULT_VLLM_VERSION = "0.33.0"  # newest vLLM release on PyPI when this default was set (2026-11)


def parse_version(text: str) -> tuple[int, int, int]:
    core = str(text).strip().lstrip("v").split("+")[0]
    parts = []
    for piece in core.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit()) if not piece.isdigit() else piece
        if not digits:
            break
        parts.append(int(digits))
    if not parts:
        raise BadInput(f"--vllm-version {text!r} is not a version such as 0.19.0")
    while len(parts) < 3:
        parts.append(0)
    return tuple(parts)  # type: ignore[return-value]


def log_era(version: tuple[int, int, int]) -> str:
    """Which formula the engine uses to print its KV-cache lines (vllm-kv-sizing.md §6)."""
    if version < (0, 8, 0):
        return "v0"  # '# GPU blocks: n'; concurrency n*block/L
    if version < (0, 10, 0):
        return "v1-uniform"  # 'GPU KV cache size: n*block tokens'; concurrency tokens/L
    if version < (0, 21, 0):
        return "v1-hybrid-old"  # (n // groups) * min_block; concurrency n / sum per-group blocks
    return "v1-new"  # int(C * L), C = n / sum_g cdiv(max_mem_g, page_g)


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

    def resolved(self, arch: Architecture, gpus: GpuGroup | None) -> "Deployment":
        """Fill every default the engine would fill, for this version and hardware."""
        v = self.version
        util = self.gpu_memory_utilization
        if util is None:
            # vLLM PR #38284 raised the default from 0.90 to 0.92 around v0.21.
            util = 0.92 if v >= (0, 21, 0) else 0.90
        if not 0 < util <= 1:
            raise BadInput(f"--gpu-memory-utilization must be in (0, 1], got {util}")
        max_len = self.max_model_len or arch.max_position_embeddings
        if not max_len:
            raise BadInput("the config has no max_position_embeddings: pass --max-model-len")
        big_gpu = gpus is not None and gpus.gpu.memory_bytes >= 70 * 2**30
        # vLLM EngineArgs defaults for the OpenAI server (arg_utils, V1): 8192 batched tokens and
        # 1024 sequences on >= 70 GiB GPUs, else 2048 / 256. Before V1 (v0) chunked prefill was off
        # by default, so the profile batch was max_model_len.
        mnbt = self.max_num_batched_tokens
        if mnbt is None:
            mnbt = max_len if v < (0, 8, 0) else (8192 if big_gpu else 2048)
        seqs = self.max_num_seqs or (1024 if big_gpu and v >= (0, 8, 0) else 256)
        mode = self.mamba_cache_mode
        if mode is None and arch.has_state:
            # 'align' (checkpoint states every block) is the default with prefix caching in
            # releases that support Mamba prefix caching; 0.19-era logs sum 1 block per Mamba group.
            mode = "align" if (self.enable_prefix_caching and v >= (0, 21, 0)) else "none"
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
    for layer in arch.layers:
        if layer.linear is not None and (layer.linear.num_value_heads % tp or layer.linear.num_key_heads % tp):
            raise DoesNotFit(f"tensor parallel size {tp} does not divide the linear-attention heads of {arch.name}")
        break
