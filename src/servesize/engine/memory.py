"""One deployment's memory, end to end: weights per GPU -> budget -> KV pool -> log lines.

``memory_report`` is the public entry point the CLI, ``fit``, ``plan`` and ``measure`` share.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from servesize.derivation import Derivation
from servesize.engine.budget import SEED_GPU_MEMORY_UTILIZATION, EngineAssumptions, MemoryBudget, memory_budget
from servesize.engine.deployment import Deployment, check_parallelism
from servesize.engine.kv_cache import kv_per_token
from servesize.engine.pool import KvPool, kv_pool
from servesize.engine.weights import Weights, weights
from servesize.errors import DoesNotFit
from servesize.model.architecture import Architecture
from servesize.model.hardware import GpuGroup
from servesize.units import fmt_bytes

DEFAULT_ENGINE_ASSUMPTIONS = EngineAssumptions()


@dataclass(frozen=True)
class MemoryReport:
    model: str
    gpus: GpuGroup
    deployment: Deployment
    weights: Weights
    budget: MemoryBudget
    pool: KvPool
    derivation: Derivation = field(compare=False)
    warnings: tuple[str, ...] = ()

    @property
    def replicas(self) -> int:
        return self.deployment.data_parallel_size

    def to_dict(self) -> dict:
        dep = self.deployment
        return {
            "model": self.model,
            "gpus": {"count": self.gpus.count, "gpu": self.gpus.gpu.key, "memory_mib": self.gpus.gpu.memory_mib},
            "deployment": {k: getattr(dep, k) for k in dep.__dataclass_fields__},
            "weights_bytes_per_gpu": self.weights.per_gpu_bytes,
            "weights_bytes_total": self.weights.total_bytes,
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
            "derivation": self.derivation.to_list(),
        }



def memory_report(arch: Architecture, gpus: GpuGroup, deployment: Deployment, *, budget: str = "engine",
                  assumptions: EngineAssumptions = DEFAULT_ENGINE_ASSUMPTIONS, name: str | None = None) -> MemoryReport:
    if budget == "simple" and deployment.gpu_memory_utilization is None:
        deployment = replace(deployment, gpu_memory_utilization=SEED_GPU_MEMORY_UTILIZATION)
    dep = deployment.resolved(arch, gpus)
    tp, dp = dep.tensor_parallel_size, dep.data_parallel_size
    if tp * dp > gpus.count:
        raise DoesNotFit(f"TP {tp} x DP {dp} needs {tp * dp} GPUs; --gpus gives {gpus.count}")
    check_parallelism(arch, tp)
    d = Derivation()
    w = weights(arch, dep.quantization, tp, dtype=dep.dtype, include_mtp=dep.num_speculative_tokens > 0)
    d.extend(w.derivation)
    b = memory_budget(arch, gpus.gpu, dep, w.per_gpu_bytes, budget=budget, assumptions=assumptions, derivation=d)
    if b.available_bytes <= 0:
        raise DoesNotFit(
            f"{name or arch.name} does not fit: {fmt_bytes(w.per_gpu_bytes)} of weights per GPU plus the reserve exceed "
            f"{fmt_bytes(b.requested_bytes)} ({dep.gpu_memory_utilization} of {gpus.gpu.key}); try a larger "
            "--tensor-parallel-size, a smaller precision, or more GPUs"
        )
    pool = kv_pool(arch, dep, b.available_bytes, gpus.gpu, derivation=d)
    warnings = list(arch.warnings)
    one_request = kv_per_token(arch, dep.kv_cache_dtype, tp).bytes_per_sequence(int(dep.max_model_len or 0))
    if pool.max_concurrency < 1:
        warnings.append(
            f"one request at max_model_len {dep.max_model_len:,} needs {fmt_bytes(one_request)} of KV per GPU, more than the "
            f"{fmt_bytes(b.available_bytes)} available: vLLM refuses to start; lower --max-model-len"
        )
    return MemoryReport(name or arch.name, gpus, dep, w, b, pool, d, tuple(warnings))

