"""The recipe: the ``vllm serve`` line that realises a plan, and the notes that go with it."""

from __future__ import annotations

import math

from servesize.planning.ceilings import Ceilings
from servesize.planning.inputs import Fixed, Knobs, spec_tokens_of
from servesize.units import GiB


def gpu_resident_p5_per_replica(fixed: Fixed, result: Ceilings) -> float:
    w = result.warm
    if isinstance(w.per_replica, dict) and "gpu_resident" in w.per_replica:
        return float(w.per_replica["gpu_resident"].p5)
    return float(w.gpu_resident.p5) / max(1, fixed.dp)


def max_num_seqs(fixed: Fixed, result: Ceilings) -> int:
    """min(decode ceiling, GPU-resident warm sessions p5) per replica, at least 1."""
    return max(1, int(min(result.decode.n, math.floor(gpu_resident_p5_per_replica(fixed, result)))))


def recipe_for(fixed: Fixed, dep, knobs: Knobs, result: Ceilings) -> tuple[str, list]:
    per_replica_gpu_p5 = gpu_resident_p5_per_replica(fixed, result)
    mns = max_num_seqs(fixed, result)
    parts = ["vllm serve", fixed.hf_id, f"--tensor-parallel-size {fixed.tp}", f"--kv-cache-dtype {fixed.kv_cache_dtype}",
             f"--max-model-len {fixed.max_model_len}", f"--max-num-seqs {mns}", "--enable-prefix-caching"]
    if dep.quantization not in ("native", None):
        parts.append(f"--quantization {dep.quantization}")
    if dep.mamba_ssm_cache_dtype not in (None, "auto"):
        parts.append(f"--mamba-ssm-cache-dtype {dep.mamba_ssm_cache_dtype}")
    util = dep.gpu_memory_utilization or fixed.memory.get("gpu_memory_utilization")
    if util:
        parts.append(f"--gpu-memory-utilization {util}")  # the pool was sized at this; defaults moved between releases
    if result.spec_speedup > 1:
        parts.append(f"--speculative-config '{{\"method\":\"mtp\",\"num_speculative_tokens\":{spec_tokens_of(knobs)}}}'")
    if knobs.cpu_offload_bytes:
        parts.append(f"--kv-offloading-size {knobs.cpu_offload_bytes / GiB:g}")
    notes = [f"--max-num-seqs {mns} = min(decode ceiling {result.decode.n} at {result.decode.floor_tok_s:.3g} tok/s, "
             f"GPU-resident warm sessions p5 {per_replica_gpu_p5:,.0f}) per replica"]
    if result.floor_out_of_reach is not None:
        notes.append(result.floor_out_of_reach.text())
    if mns == 1:
        why = ("not one warm session stays GPU-resident at p5" if per_replica_gpu_p5 < 1
               else f"only one decoder keeps {result.decode.floor_tok_s:.3g} tok/s")
        notes.append(f"--max-num-seqs 1: {why}; this deployment serves one user at a time")
    if knobs.cpu_offload_bytes:
        notes.append("--kv-offloading-size is in GiB of host RAM per engine")
    if fixed.dp > 1 and knobs.sticky_routing:
        notes.append(f"run {fixed.dp} of these behind a session-sticky router (each on its own {fixed.tp} GPU(s)); "
                     "without sticky routing every replica ends up holding the same recent sessions, so the "
                     f"system keeps about one replica's worth warm, not {fixed.dp}x")
    elif fixed.dp > 1:
        notes.append(f"run {fixed.dp} of these behind a load balancer (each on its own {fixed.tp} GPU(s)): the figures "
                     "assume routing that ignores where a session's cache is, so about one replica's worth stays warm; "
                     f"a session-sticky router would keep {fixed.dp}x")
    return " ".join(parts), notes
