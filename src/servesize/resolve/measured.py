"""What a measurement fixes, and how --gpus is split.

- ``calibrated``   a measured pool or a calibration file: the most direct measurement wins (a calibration of
                   another model, TP or GPU is refused);
- ``split_of``     every GPU --gpus names is used: a TP or DP left at 1 is chosen.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

from servesize.engine.deployment import Deployment
from servesize.errors import BadInput, clip
from servesize.frozen import frozen
from servesize.model.catalogue import ResolvedModel
from servesize.resolve.model import display_name, gpus_of, hf_id_of, model_of
from servesize.scenario import PARAMS, Scenario
from servesize.units import GiB

if TYPE_CHECKING:  # placement loads with the first split, a calibration's modules where one is given: memory starts
    from servesize.engine.placement import Split  # without either
    from servesize.vllm_logs.calibration import Calibration


@frozen
class Calibrated:
    """What a measurement fixes: the pool outright, or the engine figures the pool follows from."""

    deployment: Deployment
    pool_tokens: float | None
    pool_source: str | None


def calibration_of(scenario: Scenario) -> tuple[Calibration, str] | None:
    if scenario.calibration is None:
        return None
    from servesize.vllm_logs.calibration import Calibration
    from servesize.vllm_logs.files import load_calibration

    if isinstance(scenario.calibration, Calibration):
        return scenario.calibration, f"calibration {scenario.calibration.source}"
    return load_calibration(scenario.calibration), f"calibration {scenario.calibration}"


def _model_words(text: str) -> frozenset[str]:
    """A model name as the words it is made of: its last path part (a config.json's folder), lowercase, split at what
    is not a letter or digit (Meta-Llama-3.1-8B-Instruct -> meta, llama, 3, 1, 8b, instruct)."""
    path = str(text).replace("\\", "/").rstrip("/")
    if path.lower().endswith("/config.json"):  # a config.json path names its model by its folder
        path = path[: -len("/config.json")]
    last = path.rpartition("/")[2].lower()
    return frozenset(w for w in re.split(r"[^a-z0-9]+", last) if w)


CALIBRATION_GPU_MEMORY_TOLERANCE = 0.05  # the log's total memory is CUDA's, a few % under nvidia-smi's


def step_calibration_of(scenario: Scenario) -> tuple[Calibration, str] | None:
    """A calibration of the step model (calibrate --vllm-bench: its base efficiencies), or None."""
    found = calibration_of(scenario)
    if found is None or (found[0].bandwidth_efficiency is None and found[0].mfu is None):
        return None
    return found


def check_calibration_matches(cal: Calibration, scenario: Scenario, deployment: Deployment, where: str) -> None:
    """A calibration measures one model at one TP on one GPU with one engine setting: applied to another, its
    pool is another deployment's. Refuse, naming the field that differs (a field the log did not state is not
    compared), unless --calibration-mismatch-ok says to apply it anyway."""
    if scenario.calibration_mismatch_ok:
        return
    try:
        _check_calibration_identity(cal, scenario, deployment, where)
        _check_calibration_engine(cal, scenario, deployment, where)
    except BadInput as exc:
        raise BadInput(f"{exc} (or --calibration-mismatch-ok to apply it anyway)", field=exc.field or "calibration") from None


def _kv_dtype_family(name: str) -> str:
    text = str(name).strip().lower()
    return "fp8" if text.startswith("fp8") else text


def _check_calibration_engine(cal: Calibration, scenario: Scenario, deployment: Deployment, where: str) -> None:
    """The engine settings the pool follows from, where this scenario sets them (left unset, the calibration's
    measured setting stands): the KV dtype and the memory utilisation. (Not the length: in V1 the profile batch
    is max_num_batched_tokens whatever max_model_len is, so a pool measured at 32K holds at 8K.)"""
    given = scenario.explicit()
    theirs = _kv_dtype_family(cal.kv_cache_dtype) if cal.kv_cache_dtype else None
    if "kv_cache_dtype" in given and theirs and theirs != _kv_dtype_family(deployment.kv_cache_dtype):
        raise BadInput(f"{where} was measured with kv_cache_dtype {str(cal.kv_cache_dtype)[:40]}, not "
                       f"{deployment.kv_cache_dtype}: give --kv-cache-dtype {str(cal.kv_cache_dtype)[:40]} or a calibration "
                       "of this one", field="kv_cache_dtype")
    if cal.moe_backend is not None and cal.moe_backend != deployment.moe_backend:
        raise BadInput(f"{where} was measured on --moe-backend {str(cal.moe_backend)[:40]}, not "
                       f"{deployment.moe_backend}: give --moe-backend {str(cal.moe_backend)[:40]} or a calibration of "
                       "this one", field="moe_backend")
    if "gpu_memory_utilization" in given and cal.gpu_memory_utilization:
        ours_util = deployment.resolved_utilisation()
        if abs(float(cal.gpu_memory_utilization) - ours_util) > 1e-9:
            raise BadInput(f"{where} was measured at gpu_memory_utilization {cal.gpu_memory_utilization:g}, not "
                           f"{ours_util:g}: give --gpu-memory-utilization {cal.gpu_memory_utilization:g} or a "
                           "calibration of this one", field="gpu_memory_utilization")


def _check_calibration_identity(cal: Calibration, scenario: Scenario, deployment: Deployment, where: str) -> None:
    """The model, its TP and the GPU. A calibration that does not name its model (a log quoted without vLLM's
    config or 'non-default args' line) cannot be checked against any, so it is not applied to one unless told."""
    if not cal.model and scenario.model is not None:
        raise BadInput(f"{where} does not say which model it measured (its log has no vLLM config or 'non-default "
                       f"args' line), so it cannot be checked against {display_name(model_of(scenario.model))}: "
                       "calibrate from the whole start-up log, or name it (calibrate --model)", field="calibration")
    if cal.tensor_parallel_size is not None and cal.tensor_parallel_size != deployment.tensor_parallel_size:
        raise BadInput(f"{where} was measured at tensor_parallel_size {cal.tensor_parallel_size:,}, not this "
                       f"scenario's {deployment.tensor_parallel_size}: give -tp {cal.tensor_parallel_size} or a "
                       "calibration of this deployment", field="tensor_parallel_size")
    if cal.model and scenario.model is not None:
        model = model_of(scenario.model)
        theirs = _model_words(cal.model)
        spec = scenario.model if isinstance(scenario.model, str) else ""  # a local folder or config.json path too
        ours = [w for w in (_model_words(display_name(model)), _model_words(hf_id_of(model, scenario.model)),
                            _model_words(model.architecture.name), _model_words(spec)) if w]
        if theirs and not any(theirs <= w or w <= theirs for w in ours):  # one name's words within the other's
            raise BadInput(f"{where} was measured on model {clip(cal.model)}, not {display_name(model)}: give that "
                           "MODEL, or a calibration of this one")
    _check_calibration_groups(cal, scenario, deployment, where)
    if cal.gpu and scenario.gpus is not None and cal.gpu != gpus_of(scenario).gpu.key:
        raise BadInput(f"{where} was measured on {clip(cal.gpu)}, not {gpus_of(scenario).gpu.key}: give that GPU with "
                       "--gpus, or a calibration of this one", field="gpus")
    if cal.total_gpu_memory_gib:
        gpu = gpus_of(scenario).gpu
        logged, ours_gib = cal.total_gpu_memory_gib, gpu.memory_bytes / GiB
        if abs(logged - ours_gib) > CALIBRATION_GPU_MEMORY_TOLERANCE * ours_gib:
            raise BadInput(f"{where} was measured on a GPU of {logged:.2f} GiB, not {gpu.key}'s {ours_gib:.2f} GiB: "
                           "give that GPU with --gpus (or --gpu-memory), or a calibration of this one", field="gpus")


def _check_calibration_groups(cal: Calibration, scenario: Scenario, deployment: Deployment, where: str) -> None:
    """The KV-cache groups given to calibrate: a hybrid model's calibration (full attention beside Mamba/GDN state
    or sliding windows) holds for a model vLLM groups the same way, never for one it groups otherwise."""
    if cal.kv_cache_groups is None or scenario.model is None:
        return
    from servesize.engine.pool import kv_cache_group_count

    model = model_of(scenario.model)
    gpus = gpus_of(scenario)
    ours = kv_cache_group_count(model.architecture, deployment.resolved(model.architecture, gpus), gpus.gpu)
    if ours != cal.kv_cache_groups:
        raise BadInput(f"{where} was calibrated for a model of {cal.kv_cache_groups:,} KV-cache groups, not "
                       f"{display_name(model)}'s {ours}: give that MODEL, or a calibration of this one")


def calibrated(scenario: Scenario, deployment: Deployment) -> Calibrated:
    """The most direct measurement wins: --pool-tokens, else the calibration's pool, else the engine's
    own available KV bytes (the pool then follows exactly), else its block count."""
    if scenario.pool_tokens is not None:
        return Calibrated(deployment, float(scenario.pool_tokens), "--pool-tokens (measured)")
    found = calibration_of(scenario)
    if found is None:
        return Calibrated(deployment, None, None)
    cal, where = found
    check_calibration_matches(cal, scenario, deployment, where)
    if cal.pool_tokens:
        return Calibrated(deployment, float(cal.pool_tokens), f"{where} (pool)")
    if cal.available_kv_bytes_per_gpu:
        lo, hi = cal.available_kv_bytes_per_gpu
        return Calibrated(replace(deployment, kv_cache_memory_bytes=(lo + hi) // 2), None,
                          f"engine arithmetic on the available KV bytes logged in {where.removeprefix('calibration ')}")
    if cal.num_blocks:
        return Calibrated(replace(deployment, num_gpu_blocks_override=cal.num_blocks), None,
                          f"engine arithmetic on the block count logged in {where.removeprefix('calibration ')}")
    if cal.bandwidth_efficiency is not None or cal.mfu is not None:  # a benchmark's: the step model's, not the pool's
        return Calibrated(deployment, None, None)
    raise BadInput(f"{where} has no pool, available memory or block count; pass --pool-tokens instead", field="pool_tokens")


# -- the split of --gpus NxGPU ----------------------------------------------------------------

def split_of(scenario: Scenario, model: ResolvedModel, measured: Calibrated, deployment: Deployment | None = None
             ) -> tuple[Deployment, Split]:
    """Every GPU --gpus names is used: a TP, DP (or both) left at 1 while TP x DP x PP is short of the count is
    chosen (engine.placement.choose_split: fit's rule for TP, as many replicas as the GPUs hold for DP); one given
    wins. A measured pool is one replica's at the TP measured, so it fixes TP."""
    from servesize.engine.placement import Split, choose_split

    dep = deployment or measured.deployment
    gpus = gpus_of(scenario)
    tp, dp, pp = dep.tensor_parallel_size, dep.data_parallel_size, dep.pipeline_parallel_size
    if tp * dp * pp >= gpus.count:
        return dep, Split(tp, dp, pp, gpus.count, False, "TP x DP x PP as given")
    fixed_pool = measured.pool_tokens is not None or dep.kv_cache_memory_bytes is not None \
        or dep.num_gpu_blocks_override is not None
    split = choose_split(model.architecture, gpus, dep, tp_given=tp != 1 or fixed_pool, dp_given=dp != 1,
                         budget=scenario.budget, max_dp=int(PARAMS["data_parallel_size"].hi or 1))
    return replace(dep, tensor_parallel_size=split.tp, data_parallel_size=split.dp), split

