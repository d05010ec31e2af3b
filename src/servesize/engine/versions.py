"""vLLM versions: which release's rules apply (log formula, defaults, CUDA-graph accounting).

Each rule that changed between releases is keyed on the version here or where it is used, with the
release it changed in (checked against the released wheels; tests/test_engine_versions.py).
"""

from __future__ import annotations

from functools import lru_cache

from servesize.errors import BadInput

DEFAULT_VLLM_VERSION = "0.33.0"  # newest vLLM release on PyPI when this default was set (2026-11)

# The V1 engine is the default from 0.8.0 (VLLM_USE_V1=1, vLLM v0.8.0 release notes): chunked prefill always on,
# the per-GPU batch defaults, and the 'GPU KV cache size: N tokens' log line. Before it, V0's rules.
V1_FROM = (0, 8, 0)
# The KV-cache log lines per release, checked against the released wheels (log_era below): from 0.10.0 the
# hybrid formula (n // groups) x min_block; from 0.20.1 int(concurrency x max_model_len).
HYBRID_LOG_FROM = (0, 10, 0)
CONCURRENCY_TOKEN_LINE_FROM = (0, 20, 1)

# V0 (before 0.8) turns chunked prefill on by itself when --enable-chunked-prefill is left unset and
# max_model_len > 32K (EngineArgs.create_engine_config, vllm/engine/arg_utils.py: "Chunked prefill is
# enabled by default for models with max_model_len > 32K"), to keep the profiling pass from sizing a
# whole long prompt's activations. PR vllm-project/vllm#6666 (merged 2024-07-23,
# https://github.com/vllm-project/vllm/pull/6666); v0.5.3 was tagged that day, so the first release
# with it is taken to be 0.5.4 (not read from the 0.5.3 wheel; every release servesize accepts, 0.6.4
# on, has it). Its condition in 0.6.x: CUDA, no sliding window, no speculative decoding, no LoRA or
# prompt adapter, no seqlen-agnostic (Mamba) layers, and from 0.6.1 (PR #8425) not a multimodal model.
V0_LONG_CONTEXT_CHUNKED_PREFILL_FROM = (0, 5, 4)
V0_LONG_CONTEXT_TOKENS = 32 * 1024  # use_long_context = max_model_len > 32768
# V0's SchedulerConfig with chunked prefill on and --max-num-batched-tokens unset: 512 tokens per step
# ("Chunked prefill is enabled with max_num_batched_tokens=512", config.py, in the 0.6-era logs).
V0_CHUNKED_BATCHED_TOKENS = 512


def parse_version(text: str) -> tuple[int, int, int]:
    return _parse_version(str(text))


@lru_cache(maxsize=256)
def _parse_version(text: str) -> tuple[int, int, int]:  # a Deployment's .version reads its text on every rule
    core = text.strip().lstrip("v").split("+")[0]
    parts = []
    for piece in core.split(".")[:3]:
        digits = "".join(ch for ch in piece if "0" <= ch <= "9")  # ASCII only: '¹'.isdigit() is True
        if not digits:
            break
        if len(digits) > 6:
            raise BadInput(f"--vllm-version {text[:40]!r} is not a version such as 0.19.0", field="vllm_version")
        parts.append(int(digits))
    if not parts:
        raise BadInput(f"--vllm-version {text!r} is not a version such as 0.19.0", field="vllm_version")
    while len(parts) < 3:
        parts.append(0)
    return tuple(parts)  # type: ignore[return-value]


def log_era(version: tuple[int, int, int]) -> str:
    """Which formula the engine uses to print its KV-cache lines (vllm-kv-sizing.md §6).

    Boundaries checked against the released wheels: 0.20.0 still prints ``(n // groups) x
    min_block`` (kv_cache_utils.py:1694); 0.20.1 prints ``int(concurrency x max_model_len)``
    (kv_cache_utils.py:1706)."""
    if version < V1_FROM:
        return "v0"  # '# GPU blocks: n'; concurrency n*block/L
    if version < HYBRID_LOG_FROM:
        return "v1-uniform"  # 'GPU KV cache size: n*block tokens'; concurrency tokens/L
    if version < CONCURRENCY_TOKEN_LINE_FROM:
        return "v1-hybrid-old"  # (n // groups) * min_block; concurrency n / sum per-group blocks
    return "v1-new"  # int(C * L), C = n / sum_g cdiv(max_mem_g, page_g)
