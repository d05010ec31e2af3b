"""vLLM's memory budget per GPU: what is left for the KV cache.

The engine's chain (vLLM 0.32 vllm/v1/worker/gpu_worker.py
``Worker.determine_available_memory``, with ``memory_profiling`` in vllm/utils/mem_utils.py):

    available = total x gpu_memory_utilization
                - (weights + activation peak + non-torch increase)
                - CUDA-graph estimate            (subtracted by default since v0.20)

or exactly ``--kv-cache-memory-bytes`` when it is given. ``total`` is what CUDA reports
(``cudaMemGetInfo``), a little below nvidia-smi's figure.

Three of these terms are measured by the engine at start-up and can only be estimated here.
Each is a named assumption with its default and its evidence (``EngineAssumptions``); the
``simple`` budget is the calculator seed's (nvidia-smi total x utilisation - weights), which
ignores them, and ``--explain`` shows exactly how far the two differ.
"""

from __future__ import annotations

from dataclasses import field

from servesize.derivation import Derivation
from servesize.engine.deployment import Deployment
from servesize.engine.kv_cache import kv_heads_per_rank
from servesize.engine.versions import V1_FROM
from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.jsonable import Record, json_as
from servesize.model.architecture import Architecture
from servesize.model.hardware import Gpu
from servesize.units import GiB, MiB

# The release boundaries of the rules below (each beside the figure it changes, in Assumptions' comments):
MOE_WORKSPACE_V10_FROM = (0, 10, 0)      # TritonExperts.workspace_shapes' 0.10-0.33 form (0.9's before)
FUSED_MOE_UNCHUNKED_FROM = (0, 18, 0)    # VLLM_FUSED_MOE_CHUNK_SIZE chunks the batch before 0.18
CUDAGRAPH_ESTIMATE_FROM = (0, 20, 0)     # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to 1 (envs.py)

# The calculator seed's simple budget uses vLLM's long-standing default utilisation of 0.90.
SEED_GPU_MEMORY_UTILIZATION = 0.90


def budget_utilization(budget: str, gpu_memory_utilization: float | None) -> float | None:
    """The utilisation a budget starts from: the one given; under the simple budget, when none is given, the
    calculator seed's 0.90 (not the release's default); else None (the engine's default for the release)."""
    if budget == "simple" and gpu_memory_utilization is None:
        return SEED_GPU_MEMORY_UTILIZATION
    return gpu_memory_utilization


@frozen
class EngineAssumptions:
    """Modelled terms of the budget: each default carries its evidence."""

    # nvidia-smi total minus the CUDA-visible total, for GPUs whose CUDA total is not catalogued.
    # Evidence: H100 81559 MiB vs 79.25 GiB (407 MiB), RTX 3090 24576 MiB vs 23.58 GiB (430 MiB),
    # H200 143771 MiB vs ~139.8 GiB (~616 MiB), B200 183359 MiB vs 178.35 GiB (729 MiB): vllm-kv-sizing.md §9.
    cuda_reserved_bytes: int = 512 * MiB
    # Non-torch memory the profile adds (cuBLAS workspace, attention buffers): 0.35 GiB in the
    # V0 log of vllm#10517 (RTX 3090, TP1).
    non_torch_bytes: int = int(0.35 * GiB)
    # Extra per rank under TP > 1 for NCCL / custom all-reduce buffers: aiconfigurator's
    # nccl_mem of 342-392 MiB per GPU (gpu-specs.md, "Memory: reported vs usable").
    nccl_bytes_per_rank: int = 392 * MiB
    # CUDA-graph memory estimate (subtracted since v0.20 unless --enforce-eager): the median of
    # seven public 'Estimated CUDA graph memory' log lines (0.26, 0.42, 0.43, 0.53, 0.61, 0.65,
    # 1.94 GiB) is 0.53 GiB.
    cudagraph_bytes: int = int(0.53 * GiB)
    # Activation peak of the profile run: the live tensors of one layer for every token of the
    # profile batch (max_num_batched_tokens), in the model dtype: 4 residual-stream copies, the
    # q/k/v projections, and a dense MLP's gate+up output and activation (3 x its width per rank).
    residual_copies: int = 4
    mlp_width_factor: int = 3
    # A MoE layer's fused-experts workspaces instead of the MLP's (vLLM's TritonExperts.workspace_shapes,
    # 0.10-0.33: (M, topk, max(N/2, K)) + (M, topk, max(N, K)) + (M, K), N = 2 x expert width per
    # rank, K = hidden; 0.9: (M, topk, max(2N', K)) + (M, topk, N') + (M, topk, K), N' the expert
    # width; M = the batch, in chunks of VLLM_FUSED_MOE_CHUNK_SIZE = 32768 before 0.18).
    fused_moe_chunk_tokens: int = 32768
    # The profile's dummy sampler run (gpu_model_runner._dummy_sampler_run: max_num_seqs rows, top-p
    # and top-k set): the logits in the model dtype (2 B), the sampler's float32 copy (4 B) and the
    # softmax probabilities FlashInfer's top-k/top-p sampling draws from (4 B) per vocabulary entry
    # (v1/sample/sampler.py, ops/topk_topp_sampler.py forward_cuda; FlashInfer is the default
    # sampler on CUDA when installed, as in vLLM's images). Without FlashInfer the PyTorch path
    # sorts the logits (4 B values + 8 B indices more): 22 B.
    sampler_bytes_per_logit: int = 10
    # V0 (before 0.8) profiles in eager PyTorch, where one layer's tensors are freed as the layer
    # moves on: at the MLP's peak the caller's layer input, the residual and the normed MLP input
    # (3 x hidden) live beside gate+up and its activation (3 x the MLP width); attention's q/k/v are
    # freed by then (model_executor/models/llama.py LlamaDecoderLayer / LlamaMLP.forward). Evidence:
    # vllm#10517's two V0 start-ups of one server (RTX 3090, Llama 3.1 8B) logged activation peaks of
    # 2.07 and 2.99 GiB at 20,000 and 29,000 profiled tokens (peak_torch_memory less the weights):
    # 2 x (3 x 4,096 + 3 x 14,336) = 110,592 B per token gives 2.06 and 2.99 GiB.
    v0_residual_copies: int = 3
    # V0's profile samples with top_p 0.99 and top_k vocab - 1 (worker/model_runner.py profile_run),
    # so its Sampler takes the sort path on max_num_seqs rows in float32 (model_executor/layers/
    # sampler.py: the float logits, sorted values + int64 indices, softmax, cumsum, probabilities,
    # log-probabilities). Evidence: vllm#10511's V0 runs logged the same 1.26 GiB peak at TP 1 and TP 2
    # (so not the forward pass), 256 x 128,256 rows: 41 B each; vllm#13882 (Qwen2.5-7B, 4,096 tokens, whose
    # forward takes ~0.5 GiB) logged 1.42 GiB at 256 x 152,064 rows: 39 B each; vllm#13061's driver rank held
    # ~1.3-1.4 GiB more than its sampler-free worker rank at 256 x 152,064 rows: 36-39 B each.
    v0_sampler_bytes_per_logit: int = 40

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@frozen
class MemoryBudget(Record):
    budget: str  # "engine" | "simple" | "given"
    total_bytes: int = field(metadata=json_as("total_bytes_per_gpu"))
    requested_bytes: int = field(metadata=json_as("requested_bytes_per_gpu"))
    weights_bytes: int = field(metadata=json_as("weights_bytes_per_gpu"))
    activation_bytes: int = field(metadata=json_as("activation_peak_bytes"))
    non_torch_bytes: int
    cudagraph_bytes: int
    available_bytes: int = field(metadata=json_as("available_kv_bytes_per_gpu"))
    derivation: Derivation = field(compare=False, metadata=json_as(None))

    @property
    def reserve_bytes(self) -> int:
        return self.activation_bytes + self.non_torch_bytes + self.cudagraph_bytes


def _moe_workspace_bytes_per_token(arch: Architecture, dep: Deployment, a: EngineAssumptions) -> tuple[int, str]:
    """Elements per batch token of vLLM's fused-experts workspaces for one MoE layer, and the formula."""
    moe = arch.moe
    assert moe is not None
    tp = dep.tensor_parallel_size
    k, h = moe.experts_per_token, arch.hidden_size
    # expert parallel keeps each expert whole on its rank; otherwise each rank holds 1/tp of every expert
    width = moe.expert_intermediate_size if dep.enable_expert_parallel else moe.expert_intermediate_size // tp
    if dep.version < MOE_WORKSPACE_V10_FROM:
        return k * (max(2 * width, h) + width + h), "topk * (max(2 * width, hidden) + width + hidden)"
    return k * (max(width, h) + max(2 * width, h)) + h, "topk * (max(width, hidden) + max(2 * width, hidden)) + hidden"


def activation_peak_bytes(arch: Architecture, dep: Deployment, a: EngineAssumptions, d: Derivation) -> int:
    tp = dep.tensor_parallel_size
    tokens = int(dep.max_num_batched_tokens or 0)  # resolved: never None
    q_width = arch.num_attention_heads * arch.head_dim // tp
    kv_width = 2 * kv_heads_per_rank(arch.num_kv_heads, tp) * arch.head_dim
    dense_width = arch.intermediate_size // tp
    if arch.moe is not None:
        dense_width = (arch.moe.shared_intermediate_size // tp if arch.moe.shared_intermediate_size else 0)
    moe_note = "; a MoE layer's shared expert as its MLP" if arch.moe is not None else ""
    v0 = dep.version < V1_FROM
    if v0:
        per_token = d.step(
            "activation_bytes_per_token", "dtype_bytes * (v0_residual_copies * hidden + mlp_width_factor * mlp_width)",
            unit="B", dtype_bytes=arch.dtype_bytes, v0_residual_copies=a.v0_residual_copies, hidden=arch.hidden_size,
            mlp_width_factor=a.mlp_width_factor, mlp_width=dense_width,
            note="named estimate: one layer's live tensors at V0's eager MLP peak per token of the profile batch "
                 "(q/k/v freed by then)" + moe_note,
        )
    else:
        per_token = d.step(
            "activation_bytes_per_token",
            "dtype_bytes * (residual_copies * hidden + q_width + kv_width + mlp_width_factor * mlp_width)",
            unit="B", dtype_bytes=arch.dtype_bytes, residual_copies=a.residual_copies, hidden=arch.hidden_size,
            q_width=q_width, kv_width=kv_width, mlp_width_factor=a.mlp_width_factor, mlp_width=dense_width,
            note="named estimate: one layer's live tensors per token of the profile batch" + moe_note,
        )
    forward = d.step("forward_activation_bytes", "max_num_batched_tokens * activation_bytes_per_token", unit="B",
                     max_num_batched_tokens=tokens, activation_bytes_per_token=per_token)
    moe_bytes = 0
    if arch.moe is not None:
        per, formula = _moe_workspace_bytes_per_token(arch, dep, a)
        chunk = min(tokens, a.fused_moe_chunk_tokens) if dep.version < FUSED_MOE_UNCHUNKED_FROM else tokens
        moe_bytes = d.step("fused_moe_workspace_bytes", "tokens * workspace_elements_per_token * dtype_bytes", unit="B",
                           tokens=chunk, workspace_elements_per_token=per, dtype_bytes=arch.dtype_bytes,
                           note=f"fused-experts workspaces: {formula} elements per token")
    if v0:
        sampler = d.step("sampler_bytes", "max_num_seqs * vocab * v0_sampler_bytes_per_logit", unit="B",
                         max_num_seqs=dep.max_num_seqs, vocab=arch.vocab_size,
                         v0_sampler_bytes_per_logit=a.v0_sampler_bytes_per_logit,
                         note="V0's profile samples with top-k and top-p: the sort path on max_num_seqs rows of the "
                              "whole vocabulary, on the driver rank, whose smaller pool vLLM keeps")
    else:
        sampler = d.step("sampler_bytes", "max_num_seqs * vocab * sampler_bytes_per_logit", unit="B",
                         max_num_seqs=dep.max_num_seqs, vocab=arch.vocab_size,
                         sampler_bytes_per_logit=a.sampler_bytes_per_logit,
                         note="the dummy sampler run: max_num_seqs rows of the whole vocabulary (logits, fp32 copy, "
                              "probabilities)")
    return d.step(
        "activation_peak_bytes", "max(forward + fused_moe_workspace, sampler)", unit="B",
        forward=forward, fused_moe_workspace=moe_bytes, sampler=sampler,
        note="estimate of the torch peak vLLM profiles at start-up: the forward pass and the sampler run one after "
             "the other, so the larger of the two",
    )


def memory_budget(arch: Architecture, gpu: Gpu, dep: Deployment, weights_per_gpu: int, *, budget: str = "engine",
                  assumptions: EngineAssumptions = EngineAssumptions(),
                  derivation: Derivation | None = None) -> MemoryBudget:
    """Per-GPU budget for a resolved Deployment (see Deployment.resolved)."""
    d = derivation if derivation is not None else Derivation()
    util = dep.gpu_memory_utilization
    if budget not in ("engine", "simple"):
        raise BadInput(f"--budget must be engine or simple, got {budget!r}", field="budget")
    if dep.kv_cache_memory_bytes is not None:
        avail = d.given("available_kv_bytes_per_gpu", dep.kv_cache_memory_bytes, unit="B",
                        note="--kv-cache-memory-bytes: taken as given; vLLM skips the utilisation budget")
        return MemoryBudget("given", gpu.memory_bytes, 0, weights_per_gpu, 0, 0, 0, int(avail), d)
    if budget == "simple":
        total = d.given("total_bytes_per_gpu", gpu.memory_bytes, unit="B", source=f"nvidia-smi {gpu.memory_mib} MiB")
        requested = d.step("requested_bytes_per_gpu", "total * gpu_memory_utilization", unit="B",
                           total=total, gpu_memory_utilization=util)
        avail = d.step("available_kv_bytes_per_gpu", "floor(requested - weights_per_gpu)", unit="B",
                       requested=requested, weights_per_gpu=weights_per_gpu,
                       note="the calculator seed's budget: no activation, non-torch or CUDA-graph reserve")
        return MemoryBudget("simple", int(total), int(requested), weights_per_gpu, 0, 0, 0, int(avail), d)

    if gpu.cuda_total_bytes:
        total = d.given("total_bytes_per_gpu", gpu.cuda_total_bytes, unit="B",
                        source=f"CUDA-visible total of {gpu.key}: {gpu.cuda_total_note or 'catalogue'}")
    else:
        total = d.step("total_bytes_per_gpu", "nvidia_smi_bytes - cuda_reserved_bytes", unit="B",
                       nvidia_smi_bytes=gpu.memory_bytes, cuda_reserved_bytes=assumptions.cuda_reserved_bytes,
                       note="CUDA reports less than nvidia-smi; named assumption cuda_reserved_bytes")
    requested = d.step("requested_bytes_per_gpu", "total * gpu_memory_utilization", unit="B",
                       total=total, gpu_memory_utilization=util)
    act = activation_peak_bytes(arch, dep, assumptions, d)
    non_torch = d.step("non_torch_bytes", "non_torch + (nccl_per_rank if tp > 1 else 0)", unit="B",
                       non_torch=assumptions.non_torch_bytes, nccl_per_rank=assumptions.nccl_bytes_per_rank,
                       tp=dep.tensor_parallel_size)
    # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to 1 from 0.20.0 (envs.py), though the log
    # line says "default since v0.21.0".
    graphs_on = dep.version >= CUDAGRAPH_ESTIMATE_FROM and not dep.enforce_eager and dep.device == "cuda"
    graphs = d.step("cudagraph_bytes", "estimate if subtracted else 0", unit="B",
                    estimate=assumptions.cudagraph_bytes, subtracted=graphs_on,
                    note="vLLM >= 0.20 subtracts its CUDA-graph estimate (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1)"
                    if graphs_on else "not subtracted: vLLM < 0.20 or --enforce-eager")
    avail = d.step("available_kv_bytes_per_gpu",
                   "floor(requested - weights_per_gpu - activation_peak - non_torch - cudagraph)", unit="B",
                   requested=requested, weights_per_gpu=weights_per_gpu, activation_peak=act,
                   non_torch=non_torch, cudagraph=graphs)
    return MemoryBudget("engine", int(total), int(requested), weights_per_gpu, int(act), int(non_torch), int(graphs), int(avail), d)
