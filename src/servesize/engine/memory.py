"""One deployment's memory, end to end: weights per GPU -> budget -> KV pool -> log lines.

``memory_report`` is the public entry point the CLI, ``fit``, ``plan`` and ``measure`` share. Its
steps, in vLLM's order: resolve the engine's defaults (Deployment.resolved); place the weights
(tensor, expert and pipeline parallel; MLA's replicated projections; the vision tower unless the
language model only is loaded), add what loads with them (LoRA slots, a speculative draft); the
budget; ``--max-model-len auto`` (the longest that fits); vLLM's own start-up check (a predicted
refusal is ``WouldNotStart``, with the largest length that starts); the pool and its log lines.
With pipeline parallelism every stage is sized and the pool is the smallest stage's, as vLLM takes
the minimum block count over its workers.
"""

from __future__ import annotations

from dataclasses import field, replace
from typing import Any

from servesize.derivation import Derivation
from servesize.engine.budget import EngineAssumptions, MemoryBudget, budget_utilization, memory_budget
from servesize.engine.deployment import AUTO_MAX_MODEL_LEN, Deployment, check_parallelism
from servesize.engine.lora import lora_slot_bytes
from servesize.engine.pool import KvPool, auto_max_model_len, bytes_per_block, kv_pool, start_check
from servesize.engine.quant_methods import weight_format
from servesize.engine.weights import Placement, Weights, mla_replicated_params, weights
from servesize.errors import BadInput, DoesNotFit, UnsupportedArchitecture, WouldNotStart
from servesize.frozen import frozen
from servesize.model.architecture import Architecture
from servesize.model.hardware import GpuGroup
from servesize.model.ledger import speculator_ledger
from servesize.model.quantization import DTYPE_BYTES
from servesize.units import GiB, fmt_bytes


def _gib(n_bytes: int) -> str:
    """As vLLM prints memory (GiB, 2 decimals), or MiB below 0.1 GiB where two decimals say nothing."""
    return fmt_bytes(n_bytes) if n_bytes >= GiB // 10 else fmt_bytes(n_bytes, "MiB")

DEFAULT_ENGINE_ASSUMPTIONS = EngineAssumptions()


@frozen
class MemoryReport:
    model: str
    gpus: GpuGroup
    deployment: Deployment
    weights: Weights
    budget: MemoryBudget
    pool: KvPool
    derivation: Derivation = field(compare=False)
    warnings: tuple[str, ...] = ()
    extra_weight_bytes: int = 0  # per GPU, loaded with the weights: LoRA slots, a speculative draft
    flags_not_affecting: tuple[str, ...] = ()  # `vllm serve` flags accepted that change no figure here
    flags_estimated: tuple[str, ...] = ()  # flags that move a term servesize estimates anyway
    notes: tuple[str, ...] = ()
    placement: Any = None  # engine.placement.Split: how --gpus was split into replicas (api.memory)
    flags_not_modelled: tuple[str, ...] = ()  # KV connectors: KV kept outside the pool sized here, said plainly

    @property
    def replicas(self) -> int:
        return self.deployment.data_parallel_size

    @property
    def model_bytes_per_gpu(self) -> int:
        """What vLLM's 'Model loading took' counts: the weights and what loads with them."""
        return self.weights.per_gpu_bytes + self.extra_weight_bytes

    def to_dict(self) -> dict:
        dep = self.deployment
        deployment = {k: getattr(dep, k) for k in dep.__dataclass_fields__ if k != "speculation"}
        deployment["speculation"] = dep.speculation.describe() if dep.speculation is not None else None
        return {
            "model": self.model,
            "gpus": {"count": self.gpus.count, "gpu": self.gpus.gpu.key, "memory_mib": self.gpus.gpu.memory_mib},
            "deployment": deployment,
            "placement": None if self.placement is None else self.placement.to_dict(),
            "weights_bytes_per_gpu": self.weights.per_gpu_bytes,
            "weights_bytes_total": self.weights.total_bytes,
            "extra_weight_bytes_per_gpu": self.extra_weight_bytes,
            "model_loading_bytes_per_gpu": self.model_bytes_per_gpu,
            "weights": self.weights.to_dict(),
            "kv_bytes_per_token": self.pool.kv_bytes_per_token,
            "state_bytes_per_sequence": self.pool.state_bytes_per_sequence,
            "budget": self.budget.to_dict(),
            "available_kv_bytes_per_gpu": self.budget.available_bytes,
            "block_size": self.pool.block_size,
            "num_blocks": self.pool.num_blocks,
            "kv_cache_tokens": self.pool.kv_cache_tokens,
            "max_concurrency": round(self.pool.max_concurrency, 2),
            "max_model_len": self.pool.max_model_len,
            "usable_kv_tokens": self.pool.usable_kv_tokens,
            "pool": self.pool.to_dict(),
            "log_lines": list(self.pool.log_lines),
            "warnings": list(self.warnings),
            "notes": list(self.notes),
            "flags_not_affecting": list(self.flags_not_affecting),
            "flags_estimated": list(self.flags_estimated),
            "flags_not_modelled": list(self.flags_not_modelled),
            "derivation": self.derivation.to_list(),
        }


def pipeline_stages(num_layers: int, pp: int) -> list[tuple[int, int]]:
    """vLLM's get_pp_indices: an even split; the remainder to the stages before the last, from the
    second-to-last backwards (the last stage holds the LM head)."""
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    starts = [sum(sizes[:i]) for i in range(pp)]
    return [(s, s + n) for s, n in zip(starts, sizes)]


def _stage_arch(arch: Architecture, first: int, last: int) -> Architecture:
    """The layers one pipeline stage holds (the MTP module rides on the last stage)."""
    keep_mtp = last == arch.num_layers
    return replace(arch, layers=arch.layers[first:last], mixers=arch.mixers[first:last],
                   mtp_layers=arch.mtp_layers if keep_mtp else 0)


def _placement(arch: Architecture, dep: Deployment, stage: tuple[int, int] | None) -> Placement:
    tp, pp = dep.tensor_parallel_size, dep.pipeline_parallel_size
    ep = tp * dep.data_parallel_size if (dep.enable_expert_parallel and arch.moe is not None) else 1
    replicated = mla_replicated_params(arch)
    return Placement(tp=tp, ep=ep, stage=(stage[0], stage[1], pp) if stage and pp > 1 else None,
                     replicated=(("attention", replicated),) if replicated else (),
                     skip=("vision",) if dep.language_model_only else ())


def _extra_weights(arch: Architecture, dep: Deployment, d: Derivation, last_stage: bool) -> int:
    """Bytes per GPU loaded with the weights: LoRA slots and a speculative draft's own weights."""
    extra = 0
    if dep.enable_lora:
        lora_dtype = DTYPE_BYTES[dep.dtype] if dep.dtype not in ("auto", None) else arch.dtype_bytes
        extra += lora_slot_bytes(arch, dep.tensor_parallel_size, dep.max_loras, dep.max_lora_rank, lora_dtype,
                                 dep.fully_sharded_loras, d)
    spec = dep.speculation
    if spec is not None and spec.draft is not None and last_stage:
        tp = spec.draft_tensor_parallel_size or dep.tensor_parallel_size
        w = weights(spec.draft, "native", tp, ledger=speculator_ledger(spec.draft, spec.method))
        extra += int(d.step("draft_weights_bytes_per_gpu", "draft_bytes", unit="B", draft_bytes=w.per_gpu_bytes,
                            note=f"{spec.method} draft {spec.draft_name}: its own weights at TP {tp}"))
    return extra


@frozen
class _Stage:
    weights: Weights
    extra: int
    budget: MemoryBudget
    arch: Architecture
    derivation: Derivation


def _size_stage(arch: Architecture, gpus: GpuGroup, dep: Deployment, precision: str, stage: tuple[int, int] | None,
                budget: str, assumptions: EngineAssumptions) -> _Stage:
    d = Derivation()
    last = stage is None or stage[1] == arch.num_layers
    w = weights(arch, precision, dep.tensor_parallel_size, dtype=dep.dtype, include_mtp=dep.mtp_tokens > 0 and last,
                placement=_placement(arch, dep, stage))
    d.extend(w.derivation)
    extra = _extra_weights(arch, dep, d, last)
    stage_arch = _stage_arch(arch, *stage) if stage is not None and dep.pipeline_parallel_size > 1 else arch
    b = memory_budget(stage_arch, gpus.gpu, dep, w.per_gpu_bytes + extra, budget=budget, assumptions=assumptions,
                      derivation=d)
    return _Stage(w, extra, b, stage_arch, d)


def _check_layout(arch: Architecture, dep: Deployment, gpus: GpuGroup) -> None:
    tp, dp, pp = dep.tensor_parallel_size, dep.data_parallel_size, dep.pipeline_parallel_size
    if tp * dp * pp > gpus.count:
        raise DoesNotFit(f"TP {tp} x DP {dp} x PP {pp} needs {tp * dp * pp} GPUs; --gpus gives {gpus.count}", field="gpus")
    check_parallelism(arch, tp, pp)
    if dep.enable_expert_parallel and arch.moe is None:  # vLLM's ModelConfig._verify_with_expert_parallelism
        raise BadInput("--enable-expert-parallel: vLLM refuses it for a model without experts (\"Number of experts in "
                       "the model must be greater than 0 when expert parallelism is enabled.\"); drop it",
                       field="enable_expert_parallel")
    kinds = {layer.kind for layer in arch.layers}
    if pp > 1 and len(kinds) > 1:
        raise UnsupportedArchitecture(arch.model_type, "pipeline parallelism over several KV-cache layer kinds is not "
                                      "modelled (vLLM projects the hybrid groups onto each stage)", ("pipeline_parallel_size",))


def memory_report(arch: Architecture, gpus: GpuGroup, deployment: Deployment, *, budget: str = "engine",
                  assumptions: EngineAssumptions = DEFAULT_ENGINE_ASSUMPTIONS, name: str | None = None,
                  flags_not_affecting: tuple[str, ...] = (), flags_estimated: tuple[str, ...] = (),
                  flags_not_modelled: tuple[str, ...] = ()) -> MemoryReport:
    deployment = replace(deployment, gpu_memory_utilization=budget_utilization(budget, deployment.gpu_memory_utilization))
    dep = deployment.resolved(arch, gpus)
    _check_layout(arch, dep, gpus)
    precision = weight_format(arch, dep.quantization, dep.version).precision
    pp = dep.pipeline_parallel_size
    stages: list[tuple[int, int] | None] = list(pipeline_stages(arch.num_layers, pp)) if pp > 1 else [None]
    sized = [_size_stage(arch, gpus, dep, precision, stage, budget, assumptions) for stage in stages]
    notes: list[str] = []
    for s in sized:
        if s.budget.available_bytes <= 0:
            held = s.weights.per_gpu_bytes + s.extra
            if held > s.budget.total_bytes or s.budget.budget == "simple":
                # more than the GPU has: loading fails (out of memory) before any start-up check is reached
                raise DoesNotFit(
                    f"{name or arch.name} does not fit: {fmt_bytes(held)} of weights per GPU plus the reserve exceed "
                    f"{fmt_bytes(s.budget.requested_bytes)} ({dep.gpu_memory_utilization} of {gpus.gpu.key}); try a "
                    "larger --tensor-parallel-size, a smaller precision, or more GPUs", field="tensor_parallel_size")
            raise WouldNotStart(
                f"{name or arch.name} would not start: {fmt_bytes(s.weights.per_gpu_bytes + s.extra)} of weights per GPU "
                f"plus the reserve exceed {fmt_bytes(s.budget.requested_bytes)} ({dep.gpu_memory_utilization} of "
                f"{gpus.gpu.key}), so vLLM finds no memory for the cache blocks; try a larger --tensor-parallel-size, "
                "a smaller precision, more GPUs or a higher --gpu-memory-utilization", field="tensor_parallel_size")
    if dep.max_model_len == AUTO_MAX_MODEL_LEN:
        dep, note = _auto_fit(arch, dep, sized, gpus)
        notes.append(note)
    pools = [kv_pool(s.arch, dep, s.budget.available_bytes, gpus.gpu, derivation=s.derivation) for s in sized]
    at = min(range(len(pools)), key=lambda i: pools[i].num_blocks)
    chosen, pool = sized[at], pools[at]
    stage = stages[at]
    if stage is not None and pp > 1:
        notes.append(f"pipeline stage {at + 1} of {pp} (layers {stage[0]}..{stage[1] - 1}) holds the fewest "
                     f"blocks ({pool.num_blocks:,}); vLLM sizes every stage's pool to it")
    _refuse_if_larger_than_gpu(chosen, dep, gpus, name or arch.name)
    _refuse_if_vllm_would(chosen, dep, gpus, name or arch.name)
    warnings = list(arch.warnings)
    return MemoryReport(name or arch.name, gpus, dep, chosen.weights, chosen.budget, pool, chosen.derivation,
                        tuple(warnings), chosen.extra, tuple(flags_not_affecting), tuple(flags_estimated), tuple(notes),
                        flags_not_modelled=tuple(flags_not_modelled))


def _auto_fit(arch: Architecture, dep: Deployment, sized: list[_Stage], gpus: GpuGroup) -> tuple[Deployment, str]:
    """vLLM's auto-fit: the longest max_model_len every worker's memory holds one request of."""
    from servesize.engine.deployment import derived_max_model_len

    limit = derived_max_model_len(arch) or 0
    full = replace(dep, max_model_len=limit)
    fitted = min(auto_max_model_len(s.arch, full, s.budget.available_bytes, gpus.gpu) for s in sized)
    if fitted <= 0:
        raise WouldNotStart("vLLM cannot auto-fit max_model_len: not enough memory to serve even a single token; "
                            "try a higher --gpu-memory-utilization or a larger --tensor-parallel-size", field="gpu_memory_utilization")
    if fitted >= limit:
        return full, f"auto-fit max_model_len: the full context {limit:,} fits"
    return replace(dep, max_model_len=fitted), f"auto-fit max_model_len: reduced from {limit:,} to {fitted:,} to fit"


def _given_kv_bytes(stage: _Stage, dep: Deployment, gpus: GpuGroup) -> tuple[int, str, str] | None:
    """The KV memory per GPU a flag makes vLLM allocate, the flag's words, and the flag's name (None: vLLM sizes it)."""
    if dep.num_gpu_blocks_override is not None:
        per_block = bytes_per_block(stage.arch, dep, gpus.gpu)
        return (dep.num_gpu_blocks_override * per_block,
                f"--num-gpu-blocks-override {dep.num_gpu_blocks_override:,} blocks of {per_block:,} B",
                "--num-gpu-blocks-override")
    if dep.kv_cache_memory_bytes is not None:
        return dep.kv_cache_memory_bytes, "--kv-cache-memory-bytes", "--kv-cache-memory-bytes"
    return None


def _refuse_if_larger_than_gpu(stage: _Stage, dep: Deployment, gpus: GpuGroup, name: str) -> None:
    """A KV cache taken as given (--kv-cache-memory-bytes, --num-gpu-blocks-override) is allocated beside the
    weights without the utilisation budget: more than the GPU's memory fails at start-up (CUDA out of memory)."""
    given = _given_kv_bytes(stage, dep, gpus)
    if given is None:
        return
    kv, what, flag = given
    held, total = stage.weights.per_gpu_bytes + stage.extra, gpus.gpu.memory_bytes
    if held + kv <= total:
        return
    if held >= total:
        raise DoesNotFit(f"{name} does not fit: {fmt_bytes(held)} of weights per GPU exceed the {fmt_bytes(total)} "
                         f"of {gpus.gpu.key}; try a larger --tensor-parallel-size, a smaller precision, or more GPUs",
                         field="tensor_parallel_size")
    room = total - held
    if flag == "--num-gpu-blocks-override":
        most = f"{flag} at most {room // bytes_per_block(stage.arch, dep, gpus.gpu):,}"
    else:
        most = f"{flag} at most {fmt_bytes(room)}"
    raise WouldNotStart(
        f"vLLM would fail to start {name}: {fmt_bytes(kv)} of KV cache per GPU ({what}) plus {fmt_bytes(held)} of "
        f"weights exceed the {fmt_bytes(total)} of {gpus.gpu.key} (CUDA out of memory while allocating the cache); "
        f"give {most} (less the activations' reserve), or leave it out and vLLM sizes the pool itself",
        0, kv, field=flag.removeprefix("--").replace("-", "_"))


def _refuse_if_vllm_would(stage: _Stage, dep: Deployment, gpus: GpuGroup, name: str) -> None:
    """vLLM's own start-up check (check_enough_kv_cache_memory): one request at max_model_len must fit."""
    check = start_check(stage.arch, dep, stage.budget.available_bytes, gpus.gpu)
    if check is None or check.fits:
        return
    fix = (f"the largest --max-model-len that starts is {check.largest_max_model_len:,}"
           if check.largest_max_model_len else "not even one token fits: free memory first")
    raise WouldNotStart(
        f"vLLM would refuse to start {name}: one request at max_model_len {dep.max_model_len:,} needs "
        f"{_gib(check.needed_bytes)} of KV cache, more than the {_gib(check.available_bytes)} available per GPU; "
        f"{fix} (or raise --gpu-memory-utilization, or add GPUs)",
        check.largest_max_model_len, stage.budget.available_bytes,
        field="max_model_len" if check.largest_max_model_len else "gpu_memory_utilization")

