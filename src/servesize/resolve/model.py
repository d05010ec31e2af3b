"""The model, the GPUs and vLLM's flags as given.

- ``model_of``            MODEL -> Architecture (catalogue entries are parsed once per process);
- ``deployment_of``       vLLM's flags -> Deployment (the engine fills its own defaults later): the
                          speculative config with its draft, multimodal limits, LoRA slots; every
                          value checked against the vocabulary of the chosen vLLM release;
- ``gpus_of``             --gpus with the figures the user supplies (memory, bandwidth, FLOP/s, TDP);
- ``auto_fitted_length``  --max-model-len auto: the length vLLM's auto-fit picks.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import lru_cache
from typing import Any

from servesize.engine.deployment import Deployment
from servesize.engine.speculative import NEEDS_DRAFT, Speculation, method_of, mtp_draft, no_mtp_draft_why
from servesize.engine.versions import parse_version
from servesize.engine.vocabulary import (
    accepts,
    known_flag,
    show_version,
    vocabulary,
)
from servesize.errors import BadInput
from servesize.model.architecture import Architecture
from servesize.model.catalogue import InlineConfig, ResolvedModel, find_entry, resolve_model
from servesize.model.hardware import GpuGroup, host_has_amx_tile, host_has_avx512_bf16, parse_gpus
from servesize.scenario import Scenario

ENGINE_FIELDS = ("tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size", "enable_expert_parallel", "dtype",
                 "quantization", "kv_cache_dtype", "gpu_memory_utilization", "max_model_len", "max_num_seqs",
                 "max_num_batched_tokens", "block_size", "kv_cache_memory_bytes", "num_gpu_blocks_override",
                 "enable_prefix_caching", "enable_chunked_prefill", "enforce_eager", "moe_backend", "disable_hybrid_kv_cache_manager",
                 "mamba_ssm_cache_dtype", "mamba_cache_mode", "enable_lora", "max_loras", "max_lora_rank",
                 "fully_sharded_loras", "vllm_version", "device")


@lru_cache(maxsize=128)
def _cached_model(spec: str | InlineConfig) -> ResolvedModel:
    return resolve_model(spec)


def model_of(spec: str | InlineConfig) -> ResolvedModel:
    """MODEL -> its architecture; a catalogue entry or an inline config is parsed once per process
    (a file is read every time: it may have changed)."""
    if isinstance(spec, InlineConfig) or find_entry(spec) is not None:
        return _cached_model(spec)
    return resolve_model(spec)


def display_name(model: ResolvedModel) -> str:
    return model.entry.key if model.entry else model.architecture.name


def hf_id_of(model: ResolvedModel, spec: str | InlineConfig) -> str:
    """The name the recipe's ``vllm serve`` takes: the catalogue's Hugging Face id, else what was given."""
    if model.entry is not None and model.entry.hf_id:
        return model.entry.hf_id
    if isinstance(spec, InlineConfig):
        return display_name(model)
    return spec if "/" in spec and not spec.startswith((".", "/", "~")) else display_name(model)


def gpus_of(scenario: Scenario) -> GpuGroup:
    """--gpus, with any figure the user supplies in place of (or where the catalogue lacks) its own."""
    group = parse_gpus(scenario.gpus, memory=scenario.gpu_memory)
    if scenario.gpu_bandwidth is None and scenario.gpu_flops is None and scenario.gpu_tdp is None:
        return group
    gpu = group.gpu.with_figures(bandwidth_gbps=scenario.gpu_bandwidth, dense_tflops=scenario.gpu_flops,
                                 tdp_w=scenario.gpu_tdp)
    return replace(group, gpu=gpu)


def deployment_of(scenario: Scenario, model: ResolvedModel | None = None) -> Deployment:
    """vLLM's flags as given; None leaves the engine's own default for the version and GPU.

    Every --quantization and --kv-cache-dtype value is checked against the chosen release's
    vocabulary; --speculative-config resolves its draft like MODEL; --limit-mm-per-prompt with every
    modality at 0 is vLLM's language-model-only mode."""
    values: dict[str, Any] = {name: getattr(scenario, name) for name in ENGINE_FIELDS}
    values["num_speculative_tokens"] = scenario.num_speculative_tokens or 0
    values["cpu_avx512_bf16"] = cpu_avx512_bf16_of(scenario)
    values["cpu_amx"] = cpu_amx_of(scenario)
    version = parse_version(scenario.vllm_version)
    check_moe_backend(scenario.moe_backend, version)
    if scenario.speculative_config is not None:
        if scenario.num_speculative_tokens:
            raise BadInput("give --speculative-config or --num-speculative-tokens, not both", field="speculative_config")
        target = (model or model_of(scenario.model)).architecture
        values["speculation"] = speculation_of(json.loads(scenario.speculative_config), target, version)
    elif scenario.num_speculative_tokens:
        check_mtp_head((model or model_of(scenario.model)).architecture, version)
    if scenario.limit_mm_per_prompt is not None:
        values["language_model_only"] = language_model_only(json.loads(scenario.limit_mm_per_prompt))
    return Deployment(**values)


def check_moe_backend(moe_backend: str, version: tuple[int, int, int]) -> None:
    """A fused-MoE kernel chosen by flag needs a release with --moe-backend (0.17.0 on): the recipe's line must run."""
    if moe_backend != "auto" and not known_flag("--moe-backend", version):
        raise BadInput(f"--moe-backend is not a flag of vllm serve {show_version(version)} (it is from 0.17.0; before it "
                       "VLLM_MXFP4_USE_MARLIN=1 chose Marlin for MXFP4 experts): plan with --vllm-version 0.17.0 or "
                       "later, or leave the backend at auto", field="moe_backend")


def cpu_avx512_bf16_of(scenario: Scenario) -> bool:
    """Whether the CPU build runs on a CPU with AVX-512 BF16: as asked, else this machine's (vLLM
    decides from the machine it starts on, so a prediction for --device cpu reads the same machine)."""
    if scenario.cpu_avx512_bf16 != "auto":
        return scenario.cpu_avx512_bf16 == "yes"
    return scenario.device == "cpu" and host_has_avx512_bf16()


def cpu_amx_of(scenario: Scenario) -> bool:
    """Whether the CPU build runs on a CPU with AMX tiles: as asked, else this machine's. A CPU
    given as without AVX-512 BF16 has none (every CPU with AMX, Sapphire Rapids on, has AVX-512 BF16)."""
    if scenario.cpu_amx != "auto":
        return scenario.cpu_amx == "yes"
    if scenario.cpu_avx512_bf16 == "no":
        return False
    return scenario.device == "cpu" and host_has_amx_tile()


def check_mtp_head(target: Architecture, version: tuple[int, int, int]) -> None:
    """--num-speculative-tokens is vLLM's MTP speculation ({"method": "mtp"}): a model without an MTP head that this
    release serves as a draft has no draft layers to run, and vLLM refuses the method for it."""
    if mtp_draft(target, version) is None:
        raise BadInput(f"--num-speculative-tokens drafts with the model's own MTP head: "
                       f"{no_mtp_draft_why(target, version)} (vLLM refuses method mtp for it): drop the flag, or name "
                       "a draft with --speculative-config "
                       "'{\"method\": \"eagle3\" | \"draft_model\", \"model\": ..., \"num_speculative_tokens\": k}'",
                       field="num_speculative_tokens")


def speculation_of(config: dict, target: Architecture, version: tuple[int, int, int]) -> Speculation:
    """--speculative-config: the method (as this release names it) and, for EAGLE heads and draft
    models, the draft's architecture, found like MODEL (catalogue name, config path or HF id)."""
    method = config.get("method")
    if method is not None and not accepts("speculative_method", str(method), version):
        raise BadInput(f"--speculative-config method {method!r} is not one vLLM {show_version(version)} accepts: "
                       f"{', '.join(vocabulary('speculative_method', version))}", field="speculative_config")
    draft = None
    if config.get("model") is not None and method_of(config, target) in NEEDS_DRAFT:
        draft = model_of(str(config["model"])).architecture
    return Speculation.from_config(config, target, draft, version)


def language_model_only(limits: dict) -> bool:
    """vLLM skips the multimodal encoder when every modality's limit is 0 (language-model-only mode)."""
    counts = []
    for modality, value in limits.items():
        count = value.get("count", 0) if isinstance(value, dict) else value
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise BadInput(f"--limit-mm-per-prompt {modality!r}: expected a count >= 0, got {value!r}", field="limit_mm_per_prompt")
        counts.append(count)
    return bool(counts) and all(c == 0 for c in counts)


def auto_fitted_length(scenario: Scenario) -> int:
    """--max-model-len auto in a plan: the length vLLM's auto-fit picks for these flags becomes the
    engine's max_model_len, and so the workload's cap."""
    from servesize.engine.memory import memory_report

    model = model_of(scenario.model)
    report = memory_report(model.architecture, gpus_of(scenario), deployment_of(scenario, model), budget=scenario.budget)
    return report.pool.max_model_len
