"""The recipe: the ``vllm serve`` line that realises a plan, and the notes that go with it."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from servesize.planning.ceilings import Ceilings
from servesize.planning.inputs import Fixed, Knobs, spec_tokens_of
from servesize.units import GiB

if TYPE_CHECKING:
    from servesize.engine.deployment import Deployment


def gpu_resident_p5_per_replica(fixed: Fixed, result: Ceilings) -> float:
    w = result.warm
    if isinstance(w.per_replica, dict) and "gpu_resident" in w.per_replica:
        return float(w.per_replica["gpu_resident"].p5)
    return float(w.gpu_resident.p5) / max(1, fixed.dp)


def max_num_seqs(fixed: Fixed, result: Ceilings) -> int:
    """min(decode ceiling, GPU-resident warm sessions p5) per replica, at least 1."""
    return max(1, int(min(result.decode.n, math.floor(gpu_resident_p5_per_replica(fixed, result)))))


def serve_command(fixed: Fixed, dep: Deployment, knobs: Knobs, max_num_seqs: int, spec_speedup: float) -> str:
    """The ``vllm serve`` line of one replica of ``fixed`` (the flags the plan sized it with), in the words vLLM
    takes: --quantization only as a method the release accepts (engine.quant_methods.served_weights), and a
    placeholder for the checkpoint when the model's own cannot give the weights sized (checkpoint_note says which)."""
    served = fixed.served
    parts = ["vllm serve", served.placeholder or fixed.hf_id, f"--tensor-parallel-size {fixed.tp}"]
    if dep.pipeline_parallel_size > 1:
        parts.append(f"--pipeline-parallel-size {dep.pipeline_parallel_size}")
    if dep.enable_expert_parallel:
        parts.append("--enable-expert-parallel")
    parts += [f"--kv-cache-dtype {fixed.kv_cache_dtype}", f"--max-model-len {fixed.max_model_len}",
              f"--max-num-seqs {max_num_seqs}", f"--max-num-batched-tokens {fixed.chunk_tokens}",
              "--enable-prefix-caching"]
    if served.quantization is not None:
        parts.append(f"--quantization {served.quantization}")
    if dep.moe_backend != "auto":
        parts.append(f"--moe-backend {dep.moe_backend}")
    if dep.mamba_ssm_cache_dtype not in (None, "auto"):
        parts.append(f"--mamba-ssm-cache-dtype {dep.mamba_ssm_cache_dtype}")
    util = dep.gpu_memory_utilization or fixed.memory.get("gpu_memory_utilization")
    if util:
        parts.append(f"--gpu-memory-utilization {util}")  # the pool was sized at this; defaults moved between releases
    if spec_speedup > 1:
        parts.append(f"--speculative-config '{{\"method\":\"mtp\",\"num_speculative_tokens\":{spec_tokens_of(knobs)}}}'")
    if knobs.cpu_offload_bytes:
        parts.append(f"--kv-offloading-size {knobs.cpu_offload_bytes / GiB:g}")
    return " ".join(parts)


def checkpoint_note(fixed: Fixed) -> str | None:
    """When the recipe serves a placeholder: which checkpoint it needs, whether the catalogue has one, and the
    online method that quantises the model's own checkpoint instead (a different format: plan it to size it)."""
    served = fixed.served
    if served.placeholder is None:
        return None
    have = quantised_siblings(fixed.name, fixed.memory.get("weights_precision"))
    found = ("the catalogue has " + ", ".join(f"{k} ({hf})" for k, hf in have) + ": plan it to size it as stored"
             if have else "none in the catalogue")
    text = (f"{served.placeholder}: these figures are for {fixed.memory.get('weights_precision')} weights, which "
            f"{fixed.hf_id} is not: serve {served.needs} of this model ({found}); {served.how}")
    if served.online:
        text += f"; or let vLLM quantise {fixed.hf_id} at load time with --quantization {served.online} (plan -q {served.online})"
    return text


def quantised_siblings(name: str, precision: str | None) -> list[tuple[str, str]]:
    """Catalogue checkpoints of the same model (key ``name-...``, or ``name`` less a suffix) stored at ``precision``
    (int4 / int8 / nvfp4, or 16-bit for bf16 / fp16)."""
    from servesize.model.catalogue import load_catalogue

    base = name
    out: list[tuple[str, str]] = []
    for key, entry in load_catalogue().items():
        if key == name or not (key.startswith(base + "-") or base.startswith(key + "-")):
            continue
        q = entry.architecture().quantization
        sixteen = precision in ("bf16", "fp16")
        if (q is None and sixteen) or (q is not None and not sixteen and q.method in (precision, "mixed")):
            out.append((key, entry.hf_id))
    return out


def routing_note(fixed: Fixed, knobs: Knobs) -> str | None:
    """How DP replicas must be routed for the warm figures to hold (None for one replica)."""
    if fixed.dp > 1 and knobs.sticky_routing:
        return (f"run {fixed.dp} of these behind a session-sticky router (each on its own {fixed.tp} GPU(s)); "
                "without sticky routing every replica ends up holding the same recent sessions, so the "
                f"system keeps about one replica's worth warm, not {fixed.dp}x")
    if fixed.dp > 1:
        return (f"run {fixed.dp} of these behind a load balancer (each on its own {fixed.tp} GPU(s)): the figures "
                "assume routing that ignores where a session's cache is, so about one replica's worth stays warm; "
                f"a session-sticky router would keep {fixed.dp}x")
    return None


def chunk_note(fixed: Fixed, result: Ceilings) -> str | None:
    """Why --max-num-batched-tokens is what it is: what a full chunk costs the decodes beside it, and whether that
    is what stops one user more (None where interference is not priced)."""
    stall, load = result.stall, result.decode_load
    if stall is None or load is None or load.stall_share is None:
        return None
    binds = result.binding == "decode" and load.stall_binds
    return (f"--max-num-batched-tokens {fixed.chunk_tokens:,}: a full prefill chunk holds the decodes in its step "
            f"{stall.chunk_stall_s:.2f} s longer; at the decode ceiling {load.stall_share:.1%} of requests fall "
            f"below {stall.floor_tok_s:g} tok/s for it (allowed {load.stall_allowed:.1%})"
            + ("; this is what binds: smaller chunks stall each step less and take more steps per cold prefill "
               "(the sensitivity row max_num_batched_tokens says where the binding moves)" if binds else ""))


def recipe_for(fixed: Fixed, dep: Deployment, knobs: Knobs, result: Ceilings) -> tuple[str, list[str]]:
    per_replica_gpu_p5 = gpu_resident_p5_per_replica(fixed, result)
    mns = max_num_seqs(fixed, result)
    command = serve_command(fixed, dep, knobs, mns, result.spec_speedup)
    checkpoint = checkpoint_note(fixed)
    notes = [checkpoint] if checkpoint else []
    notes += [f"--max-num-seqs {mns} = min(decode ceiling {result.decode.n} at {result.decode.floor_tok_s:.3g} tok/s, "
             f"GPU-resident warm sessions p5 {per_replica_gpu_p5:,.0f}) per replica"]
    chunk = chunk_note(fixed, result)
    if chunk:
        notes.append(chunk)
    if result.floor_out_of_reach is not None:
        notes.append(result.floor_out_of_reach.text())
    if mns == 1:
        why = ("not one warm session stays GPU-resident at p5" if per_replica_gpu_p5 < 1
               else f"only one decoder keeps {result.decode.floor_tok_s:.3g} tok/s")
        notes.append(f"--max-num-seqs 1: {why}; this deployment serves one user at a time")
    if knobs.cpu_offload_bytes:
        notes.append("--kv-offloading-size is in GiB of host RAM per engine")
    routing = routing_note(fixed, knobs)
    if routing:
        notes.append(routing)
    return command, notes
