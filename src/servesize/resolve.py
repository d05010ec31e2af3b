"""The rules that turn a Scenario into what the engine and the planner take.

Each rule is one named function, with the reason it exists:

- ``served``              a pasted ``vllm serve`` line -> the Scenario fields it sets (flags given to
                          servesize win), and the flags it carries that change no figure;
- ``model_of``            MODEL -> Architecture (catalogue entries are parsed once per process);
- ``deployment_of``       vLLM's flags -> Deployment (the engine fills its own defaults later): the
                          speculative config with its draft, multimodal limits, LoRA slots; every
                          value checked against the vocabulary of the chosen vLLM release;
- ``gpus_of``             --gpus with the figures the user supplies (memory, bandwidth, FLOP/s, TDP);
- ``calibrated``          a measured pool or a calibration file: the most direct measurement wins;
- ``preset_of``           --preset, else the preset a workload file names, else coding-agent (the seed's);
- ``workload_of``         the preset, then a workload file's fields, then single-field flags, then the
                          cap: --max-model-len, else the workload's, at most the model's own context
                          (``resolved_workload`` also says where each field came from);
- ``check_prefixes``      a shared prefix at or above its class's median session is refused;
- ``knobs_of``            the modelled assumptions the planner takes (a preset without speculative
                          decoding switches MTP off unless a flag asks);
- ``speculation_note``    the one line a reader needs when the preset's MTP and the model disagree;
- ``check_speculation``   speculative decoding is modelled only through a model's own MTP head;
- ``planned_deployment``  the deployment the plan sizes: the workload's cap is the engine's
                          --max-model-len, and the MTP head the recipe serves with is in the memory;
- ``users_sizing``        plan --users N: the scenario planned with one replica of --tensor-parallel-size
                          GPUs of --gpus's type, then ``sized_scenario`` with the replicas N needs;
- ``teams_of``            fleet --users N is one team of the workload; --team NAME=USERS[:WORKLOAD] each its
                          own (a preset name or a workload file; without one, the fleet's workload);
- ``fleet_currency``      the fleet's prices and power bill in one currency, never converted;
- ``fleet_space``         a FleetQuery -> what planning.fleet searches; ``confirm_scenario`` the Scenario
                          (and ``plan_command`` the command line) that confirms its answer.

``servesize.api`` calls these; no command holds a rule of its own.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, replace
from functools import lru_cache
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from servesize.engine.deployment import AUTO_MAX_MODEL_LEN, Deployment, derived_max_model_len
from servesize.engine.speculative import NEEDS_DRAFT, Speculation, method_of
from servesize.engine.versions import parse_version
from servesize.engine.vocabulary import (
    accepts,
    canonical_flag,
    flag_effects,
    known_flag,
    show_version,
    takes_value,
    vocabulary,
)
from servesize.errors import BadInput, clip
from servesize.model.architecture import Architecture
from servesize.model.catalogue import InlineConfig, ResolvedModel, find_entry, resolve_model
from servesize.model.hardware import GpuGroup, host_has_avx512_bf16, parse_gpus
from servesize.planning.inputs import Knobs, spec_tokens_of
from servesize.scenario import PARAMS, FleetQuery, Param, Scenario, params_in
from servesize.units import GiB
from servesize.vllm_logs.calibration import Calibration
from servesize.vllm_logs.files import load_calibration
from servesize.workload.catalogue import preset_names
from servesize.workload.files import read_workload_data
from servesize.workload.model import SessionClass, Workload
from servesize.workload.presets import (
    ORIGIN_FIELDS,
    Preset,
    WorkloadOrigin,
    file_preset,
    preset,
    workload_from_data,
)
from servesize.workload.teams import Team

if TYPE_CHECKING:  # the fleet's modules load with the first fleet: memory, fit and plan start without them
    from servesize.engine.placement import Split
    from servesize.planning.fleet import FleetSpace
    from servesize.planning.fleet_result import FleetOption

ENGINE_FIELDS = ("tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size", "enable_expert_parallel", "dtype",
                 "quantization", "kv_cache_dtype", "gpu_memory_utilization", "max_model_len", "max_num_seqs",
                 "max_num_batched_tokens", "block_size", "kv_cache_memory_bytes", "num_gpu_blocks_override",
                 "enable_prefix_caching", "enable_chunked_prefill", "enforce_eager", "disable_hybrid_kv_cache_manager",
                 "mamba_ssm_cache_dtype", "mamba_cache_mode", "enable_lora", "max_loras", "max_lora_rank",
                 "fully_sharded_loras", "vllm_version", "device")
# Scenario engine fields that are servesize's own (no `vllm serve` flag sets them).
SERVESIZE_ONLY = ("vllm_serve", "vllm_version", "budget", "num_speculative_tokens", "cpu_avx512_bf16")
# Scenario workload field -> the planner's parameter name (planning.sensitivity.apply_param)
WORKLOAD_FIELDS = {"median": "median", "sigma": "sigma", "prefix": "prefix", "subagent_ratio": "subagent_ratio",
                   "subagent_median": "subagent_median", "subagent_sigma": "subagent_sigma",
                   "subagent_prefix": "subagent_prefix", "invalidation": "invalidation", "think_time": "think_time_s",
                   "output_tokens": "output_tokens", "warm_turn_tokens": "warm_turn_tokens"}
# Scenario knob field -> Knobs field
KNOB_FIELDS = {"bandwidth_efficiency": "bandwidth_efficiency", "tp_efficiency": "tp_efficiency",
               "mtp_speedup": "mtp_speedup", "spec_acceptance": "spec_acceptance", "decode_floor": "decode_floor",
               "comfortable_floor": "comfortable_floor", "mfu": "mfu", "ttft_limit": "ttft_limit_s",
               "decode_compute_efficiency": "compute_efficiency", "electricity_price": "price_per_kwh",
               "currency": "currency", "pue": "pue"}


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
    version = parse_version(scenario.vllm_version)
    if scenario.speculative_config is not None:
        if scenario.num_speculative_tokens:
            raise BadInput("give --speculative-config or --num-speculative-tokens, not both")
        target = (model or model_of(scenario.model)).architecture
        values["speculation"] = speculation_of(json.loads(scenario.speculative_config), target, version)
    elif scenario.num_speculative_tokens:
        check_mtp_head((model or model_of(scenario.model)).architecture)
    if scenario.limit_mm_per_prompt is not None:
        values["language_model_only"] = language_model_only(json.loads(scenario.limit_mm_per_prompt))
    return Deployment(**values)


def cpu_avx512_bf16_of(scenario: Scenario) -> bool:
    """Whether the CPU build runs on a CPU with AVX-512 BF16: as asked, else this machine's (vLLM
    decides from the machine it starts on, so a prediction for --device cpu reads the same machine)."""
    if scenario.cpu_avx512_bf16 != "auto":
        return scenario.cpu_avx512_bf16 == "yes"
    return scenario.device == "cpu" and host_has_avx512_bf16()


def check_mtp_head(target: Architecture) -> None:
    """--num-speculative-tokens is vLLM's MTP speculation ({"method": "mtp"}): a model without an MTP head has no
    draft layers to run, and vLLM refuses the method for it."""
    if not target.mtp_layers:
        raise BadInput(f"--num-speculative-tokens drafts with the model's own MTP head, and {target.name} has none "
                       "(vLLM refuses method mtp for it): drop the flag, or name a draft with --speculative-config "
                       "'{\"method\": \"eagle3\" | \"draft_model\", \"model\": ..., \"num_speculative_tokens\": k}'")


def speculation_of(config: dict, target: Architecture, version: tuple[int, int, int]) -> Speculation:
    """--speculative-config: the method (as this release names it) and, for EAGLE heads and draft
    models, the draft's architecture, found like MODEL (catalogue name, config path or HF id)."""
    method = config.get("method")
    if method is not None and not accepts("speculative_method", str(method), version):
        raise BadInput(f"--speculative-config method {method!r} is not one vLLM {show_version(version)} accepts: "
                       f"{', '.join(vocabulary('speculative_method', version))}")
    draft = None
    if config.get("model") is not None and method_of(config, target) in NEEDS_DRAFT:
        draft = model_of(str(config["model"])).architecture
    return Speculation.from_config(config, target, draft)


def language_model_only(limits: dict) -> bool:
    """vLLM skips the multimodal encoder when every modality's limit is 0 (language-model-only mode)."""
    counts = []
    for modality, value in limits.items():
        count = value.get("count", 0) if isinstance(value, dict) else value
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise BadInput(f"--limit-mm-per-prompt {modality!r}: expected a count >= 0, got {value!r}")
        counts.append(count)
    return bool(counts) and all(c == 0 for c in counts)


# -- a pasted `vllm serve` line -------------------------------------------------------------

@dataclass(frozen=True)
class ServeLine:
    """What a `vllm serve ...` line says, in Scenario terms."""

    model: str | None
    fields: dict[str, Any]  # Scenario field -> the value the line gives (parsed as vLLM reads it)
    not_affecting: tuple[str, ...]  # flags vLLM knows that change no figure servesize computes
    estimated: tuple[str, ...]  # flags that move a term servesize estimates anyway (the reserve)


def _vllm_params(version: tuple[int, int, int]) -> dict[str, Param]:
    """Every spelling a `vllm serve` line may use for a Scenario engine field, in this release."""
    out: dict[str, Param] = {}
    for p in params_in("engine"):
        if p.name in SERVESIZE_ONLY:
            continue
        for flag in (p.flag, *p.flags):
            if known_flag(flag, version):
                out[flag] = p
    return out


def _serve_tokens(text: str) -> list[str]:
    try:
        words = shlex.split(text.replace("\\\n", " "))
    except ValueError as exc:  # an unclosed quote
        raise BadInput(f"--vllm-serve: {exc}") from None
    if words[:2] == ["vllm", "serve"]:
        return words[2:]
    if words[:1] == ["serve"]:
        return words[1:]
    for i in range(len(words) - 1):  # python -m vllm.entrypoints.openai.api_server ...
        if words[i] == "-m" and words[i + 1].startswith("vllm.entrypoints"):
            return words[i + 2:]
    raise BadInput("--vllm-serve takes a `vllm serve MODEL [flags]` line (or `python -m vllm.entrypoints.openai.api_server "
                   "[flags]`)")


def served(text: str, version: tuple[int, int, int]) -> ServeLine:
    """Read a `vllm serve` line with the vocabulary of ``version``: each flag is modelled (a Scenario
    field), changes no figure (listed), moves an estimated term (listed), changes memory in a way
    servesize does not model (refused, with why), or is not a flag of that release (refused)."""
    words = _serve_tokens(text)
    params = _vllm_params(version)
    effects = flag_effects()
    model: str | None = None
    fields: dict[str, Any] = {}
    plain: list[str] = []
    estimated: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-"):
            if model is not None:
                raise BadInput(f"--vllm-serve: a second model {word!r} (the line already serves {model!r})")
            model = word
            continue
        if not known_flag(word, version):
            raise BadInput(f"--vllm-serve: {word.split('=', 1)[0]} is not a flag of vllm serve {show_version(version)}")
        flag = canonical_flag(word)
        value: str | None = word.split("=", 1)[1] if "=" in word else None
        if value is None and takes_value(word, version):
            if i >= len(words):
                raise BadInput(f"--vllm-serve: {flag} needs a value")
            value, i = words[i], i + 1
        if flag == "--model":
            model = value
            continue
        _read_serve_flag(flag, value, params, effects, version, fields, plain, estimated)
    return ServeLine(model, fields, tuple(plain), tuple(estimated))


# Scenario fields whose `vllm serve` value is one of a release's choices (engine.vocabulary): a line is read as
# vLLM's parser reads it, so servesize's own names (int4, bf16, native) are refused there.
SERVE_VOCABULARY = {"quantization": "quantization", "kv_cache_dtype": "kv_cache_dtype"}


def _read_serve_flag(flag: str, value: str | None, params: dict[str, Param], effects: dict, version: tuple[int, int, int],
                     fields: dict[str, Any], plain: list[str], estimated: list[str]) -> None:
    negated = flag.startswith("--no-") and "--" + flag[5:] in params
    param = params.get("--" + flag[5:] if negated else flag)
    if param is not None:
        kind = SERVE_VOCABULARY.get(param.name)
        if kind is not None and value is not None and not accepts(kind, value.strip(), version):
            raise BadInput(f"--vllm-serve: {flag} {value!r} is not a value vllm serve {show_version(version)} accepts "
                           f"({', '.join(vocabulary(kind, version))})")
        if param.kind == "bool":
            fields[param.name] = (not negated) if value is None else param.parse(value)
        else:
            fields[param.name] = param.parse(value)
        return
    refused = effects.get("refuse", {}).get(flag)
    if refused is not None and not (refused.get("v0_only") and version >= (0, 8, 0)):
        raise BadInput(f"--vllm-serve: {flag} {refused['why']}; servesize does not model that (drop the flag to size "
                       "without it)")
    if flag in effects.get("estimate", {}):
        estimated.append(f"{flag}: {effects['estimate'][flag]['why']}")
        return
    plain.append(flag if value is None else f"{flag} {value}")


def with_serve_line(scenario: Scenario) -> tuple[Scenario, ServeLine | None]:
    """The Scenario with the fields a pasted `vllm serve` line sets; a field given to servesize
    itself (a value other than its declared default) wins over the line's."""
    if scenario.vllm_serve is None:
        return scenario, None
    line = served(scenario.vllm_serve, parse_version(scenario.vllm_version))
    given = scenario.explicit()
    changes = {name: value for name, value in line.fields.items() if name not in given}
    if scenario.model is None:
        if line.model is None:
            raise BadInput("--vllm-serve names no model, and no MODEL was given")
        changes["model"] = line.model
    return scenario.replace(**changes), line


# -- a measured pool ------------------------------------------------------------------------

@dataclass(frozen=True)
class Calibrated:
    """What a measurement fixes: the pool outright, or the engine figures the pool follows from."""

    deployment: Deployment
    pool_tokens: float | None
    pool_source: str | None


def calibration_of(scenario: Scenario) -> tuple[Calibration, str] | None:
    if scenario.calibration is None:
        return None
    if isinstance(scenario.calibration, Calibration):
        return scenario.calibration, f"calibration {scenario.calibration.source}"
    return load_calibration(scenario.calibration), f"calibration {scenario.calibration}"


def _model_words(text: str) -> frozenset[str]:
    """A model name as the words it is made of: its last path part, lowercase, split at what is not a letter or digit
    (Meta-Llama-3.1-8B-Instruct -> meta, llama, 3, 1, 8b, instruct)."""
    last = str(text).replace("\\", "/").rstrip("/").rpartition("/")[2].lower()
    return frozenset(w for w in re.split(r"[^a-z0-9]+", last) if w)


CALIBRATION_GPU_MEMORY_TOLERANCE = 0.05  # the log's total memory is CUDA's, a few % under nvidia-smi's


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
        raise BadInput(f"{exc} (or --calibration-mismatch-ok to apply it anyway)") from None


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
                       "of this one")
    if "gpu_memory_utilization" in given and cal.gpu_memory_utilization:
        ours_util = deployment.resolved_utilisation()
        if abs(float(cal.gpu_memory_utilization) - ours_util) > 1e-9:
            raise BadInput(f"{where} was measured at gpu_memory_utilization {cal.gpu_memory_utilization:g}, not "
                           f"{ours_util:g}: give --gpu-memory-utilization {cal.gpu_memory_utilization:g} or a "
                           "calibration of this one")


def _check_calibration_identity(cal: Calibration, scenario: Scenario, deployment: Deployment, where: str) -> None:
    """The model, its TP and the GPU."""
    if cal.tensor_parallel_size is not None and cal.tensor_parallel_size != deployment.tensor_parallel_size:
        raise BadInput(f"{where} was measured at tensor_parallel_size {cal.tensor_parallel_size:,}, not this "
                       f"scenario's {deployment.tensor_parallel_size}: give -tp {cal.tensor_parallel_size} or a "
                       "calibration of this deployment")
    if cal.model and scenario.model is not None:
        model = model_of(scenario.model)
        theirs = _model_words(cal.model)
        ours = [w for w in (_model_words(display_name(model)), _model_words(hf_id_of(model, scenario.model)),
                            _model_words(model.architecture.name)) if w]
        if theirs and not any(theirs <= w or w <= theirs for w in ours):  # one name's words within the other's
            raise BadInput(f"{where} was measured on model {clip(cal.model)}, not {display_name(model)}: give that "
                           "MODEL, or a calibration of this one")
    if cal.total_gpu_memory_gib:
        gpu = gpus_of(scenario).gpu
        logged, ours_gib = cal.total_gpu_memory_gib, gpu.memory_bytes / GiB
        if abs(logged - ours_gib) > CALIBRATION_GPU_MEMORY_TOLERANCE * ours_gib:
            raise BadInput(f"{where} was measured on a GPU of {logged:.2f} GiB, not {gpu.key}'s {ours_gib:.2f} GiB: "
                           "give that GPU with --gpus (or --gpu-memory), or a calibration of this one")


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
    raise BadInput(f"{where} has no pool, available memory or block count; pass --pool-tokens instead")


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


# -- the workload ---------------------------------------------------------------------------

# Scenario workload field -> the field name a WorkloadOrigin records it under
ORIGIN_OF = {"median": "user_median_tokens", "sigma": "user_sigma", "prefix": "user_prefix_tokens",
             "subagent_ratio": "subagent_ratio", "subagent_median": "subagent", "subagent_sigma": "subagent",
             "subagent_prefix": "subagent", "subagents_share_prefix": "subagents_share_prefix",
             "invalidation": "invalidation", "think_time": "think_time_s", "output_tokens": "output_tokens",
             "warm_turn_tokens": "warm_turn_tokens"}


def _file_data(scenario_workload: Workload | str | None) -> dict | None:
    return read_workload_data(scenario_workload) if isinstance(scenario_workload, str) else None


def preset_of(scenario: Any, data: dict | None = None) -> Preset:
    """--preset, else the preset a workload file names, else the default (coding-agent, the seed's)."""
    named = getattr(scenario, "preset", None)
    return preset(named if named is not None else file_preset(data))


def base_workload(scenario: Any) -> tuple[Workload, WorkloadOrigin]:
    """The preset, then a workload file's fields over it (a Workload object given whole replaces both)."""
    given_workload = getattr(scenario, "workload", None)
    data = _file_data(given_workload)
    chosen = preset_of(scenario, data)
    origin = WorkloadOrigin.of_preset(chosen)
    if isinstance(given_workload, Workload):
        return given_workload, origin.with_file("(a Workload object)", {f: "file (a Workload object)"
                                                                       for f in ORIGIN_FIELDS if f != "speculative"})
    workload = chosen.workload()
    if data is not None:
        assert isinstance(given_workload, str)
        workload, origin = workload_from_data(data, workload, origin, given_workload)
    return workload, origin


def workload_of(scenario: Scenario, model_limit: int | None = None) -> Workload:
    return resolved_workload(scenario, model_limit)[0]


def resolved_workload(scenario: Any, model_limit: int | None = None) -> tuple[Workload, WorkloadOrigin]:
    """The base workload, its single-field overrides, the checks a workload must pass, then the cap.

    Prefixes and lengths go first, so a smaller cap below can check that they fit. The cap is
    --max-model-len when given; otherwise the workload's own, at most the model's context (a preset
    without a cap takes the model's)."""
    workload, origin = overridden(scenario)
    check_prefixes(workload, origin)
    cap = getattr(scenario, "max_model_len", None)
    if cap is not None:
        return workload.replace(max_model_len=cap), origin.given({"max_model_len": f"flag --max-model-len {cap:,}"})
    if model_limit and workload.max_model_len > model_limit:
        return workload.replace(max_model_len=model_limit), origin
    return workload, origin


def overridden_workload(scenario: Any) -> Workload:
    """The base workload with the scenario's workload fields applied (anything with those attributes:
    a Scenario, or a command's parsed flags)."""
    return overridden(scenario)[0]


def overridden(scenario: Any) -> tuple[Workload, WorkloadOrigin]:
    workload, origin = base_workload(scenario)
    flags: dict[str, str] = {}
    share = getattr(scenario, "subagents_share_prefix", None)
    if share is not None:
        workload = workload.replace(subagents_share_prefix=share)
        flags["subagents_share_prefix"] = f"flag {PARAMS['subagents_share_prefix'].flag}"
    workload = _subagent_from_flags(scenario, workload, origin)
    knobs = Knobs()
    for name, planner_name in WORKLOAD_FIELDS.items():
        value = getattr(scenario, name, None)
        if value is not None:
            workload, knobs = _apply(workload, knobs, name, planner_name, value)
            flags[ORIGIN_OF[name]] = f"flag {PARAMS[name].flag} {value:,}" if isinstance(value, int) \
                else f"flag {PARAMS[name].flag} {value:g}"
    origin = origin.given(flags)
    if workload.subagent is not None and workload.subagent_ratio > 0 and not origin.preset.has_subagents:
        origin = origin.noting(f"preset {origin.preset.name} ({origin.preset.description}) has no subagents; "
                               f"planning with the subagent class the flags give (r = {workload.subagent_ratio:g})")
    return workload, origin


def _subagent_from_flags(scenario: Any, workload: Workload, origin: WorkloadOrigin) -> Workload:
    """A workload without a subagent class (chat, rag, batch) gets one only from --subagent-median and
    --subagent-sigma together; a ratio alone has nothing to apply to."""
    if workload.subagent is not None:
        return workload
    median, sigma = getattr(scenario, "subagent_median", None), getattr(scenario, "subagent_sigma", None)
    ratio = getattr(scenario, "subagent_ratio", None)
    if median is None and sigma is None:
        if ratio:
            raise BadInput(f"--subagent-ratio {ratio:g}: the workload (preset {origin.preset.name}) has no subagent "
                           "class; give --subagent-median and --subagent-sigma too, or --preset coding-agent")
        return workload
    if median is None or sigma is None:
        raise BadInput(f"the workload (preset {origin.preset.name}) has no subagent class: a new one needs both "
                       "--subagent-median and --subagent-sigma")
    prefix = getattr(scenario, "subagent_prefix", None) or 0
    return workload.replace(subagent=SessionClass("subagent", median, sigma, prefix, source="flags"))


def check_prefixes(workload: Workload, origin: WorkloadOrigin) -> None:
    """A class's shared prefix below its median session: a prefix at or above it means most sessions would
    be nothing but the prefix (usually a preset's prefix left under a shorter workload's median)."""
    classes = [("user", workload.user, "user_prefix_tokens", "user_median_tokens", "--prefix")]
    if workload.subagent is not None and workload.subagent_ratio > 0:
        classes.append(("subagent", workload.subagent, "subagent", "subagent", "--subagent-prefix"))
    for name, cls, prefix_field, median_field, prefix_flag in classes:
        prefix = workload.user.prefix_tokens if name == "subagent" and workload.subagents_share_prefix \
            else cls.prefix_tokens
        if prefix >= cls.median_tokens:
            raise BadInput(
                f"the {name} prefix ({prefix:,} tokens, {_short(origin.sources.get(prefix_field, ''))}) is at or "
                f"above the median {name} session ({cls.median_tokens:,.0f} tokens, "
                f"{_short(origin.sources.get(median_field, ''))}): a session holds its prefix, so most would be "
                f"nothing else; pass {prefix_flag} below {cls.median_tokens:,.0f} (your system prompt + tools), "
                f"or a preset that fits (--preset {', '.join(n for n in preset_names() if n != origin.preset.name)})")


def _short(source: str) -> str:
    """'preset chat' / 'flag --median 2,000' / 'file w.json' from a full source line."""
    head = source.split(":", 1)[0]
    return head or "default"


def _apply(workload: Workload, knobs: Knobs, name: str, planner_name: str, value: Any) -> tuple[Workload, Knobs]:
    from servesize.planning.sensitivity import apply_param

    try:
        return apply_param(workload, knobs, planner_name, value)
    except BadInput as exc:
        raise BadInput(str(exc).replace(f"--{planner_name.replace('_', '-')}", PARAMS[name].flag)) from None


# -- the modelled knobs ---------------------------------------------------------------------

def knobs_of(scenario: Scenario) -> Knobs:
    """The modelled knobs; a preset without speculative decoding (batch) switches MTP off unless a flag
    asks for it."""
    values: dict[str, Any] = {knob: getattr(scenario, name) for name, knob in KNOB_FIELDS.items()}
    spec_asked = any(getattr(scenario, n) is not None for n in ("mtp_speedup", "spec_acceptance",
                                                                 "num_speculative_tokens"))
    if not spec_asked and speculative_of(scenario) == "none":
        values["mtp_speedup"] = 1.0
    return Knobs(assumptions=scenario.assumptions, sticky_routing=scenario.sticky_routing, fills=scenario.fills,
                 draws=scenario.draws, seed=scenario.seed, spec_tokens=scenario.num_speculative_tokens,
                 cpu_offload_bytes=float(scenario.cpu_offload_gib or 0.0) * GiB, **values)


def speculative_of(scenario: Scenario) -> str:
    """The preset's speculative decoding ('mtp' or 'none'); a workload file does not change it."""
    data = _file_data(scenario.workload)
    return preset_of(scenario, data).speculative


def check_speculation(scenario: Scenario, model: ResolvedModel, knobs: Knobs) -> None:
    """servesize models speculative decoding only through a model's own MTP module, and no more
    speed-up than the drafts can give."""
    if scenario.speculative_config is not None:
        return  # the draft is named; its speed-up is the decode knobs' (mtp_speedup / spec_acceptance)
    asked = [name for name in ("mtp_speedup", "spec_acceptance", "num_speculative_tokens")
             if getattr(scenario, name) is not None
             and not (name == "mtp_speedup" and scenario.mtp_speedup == 1.0)
             and not (name == "num_speculative_tokens" and scenario.num_speculative_tokens == 0)]
    if asked and not model.architecture.mtp_layers:
        raise BadInput(f"{model.architecture.name} has no MTP head, and servesize models speculative decoding only "
                       f"through a model's own MTP module: drop {PARAMS[asked[0]].flag}")
    if scenario.mtp_speedup is not None:
        drafts = spec_tokens_of(knobs) or spec_tokens_of(Knobs())
        if scenario.mtp_speedup > drafts + 1:
            raise BadInput(f"--mtp-speedup {scenario.mtp_speedup:g} is more than {drafts} drafts can give "
                           f"(at most {drafts + 1}x, every draft accepted)")


def planned_deployment(deployment: Deployment, model: ResolvedModel, workload: Workload, knobs: Knobs,
                       scenario: Scenario) -> Deployment:
    """The deployment the plan sizes and its recipe serves.

    The workload's cap is the engine's --max-model-len. A model with an MTP head is served with it
    (unless the speed-up is switched off): size the memory as vLLM will, with the MTP weights, its
    attention layer in the KV group and the draft slots in the recurrent state. The seed's model
    ignores this, so ``assumptions='seed'`` leaves it out."""
    deployment = replace(deployment, max_model_len=workload.max_model_len)
    serves_mtp = (model.architecture.mtp_layers and scenario.num_speculative_tokens is None
                  and scenario.speculative_config is None
                  and scenario.assumptions != "seed" and knobs.mtp_speedup != 1.0)
    if serves_mtp:
        deployment = replace(deployment, num_speculative_tokens=spec_tokens_of(knobs))
    return deployment


@dataclass(frozen=True)
class PlanInputs:
    """A Scenario resolved for the planner."""

    scenario: Scenario
    model: ResolvedModel
    name: str
    hf_id: str
    gpus: GpuGroup
    deployment: Deployment
    workload: Workload
    knobs: Knobs
    pool_tokens: float | None
    pool_source: str | None
    origin: WorkloadOrigin | None = None
    flags_not_affecting: tuple[str, ...] = ()
    flags_estimated: tuple[str, ...] = ()
    split: Split | None = None  # how --gpus is split into replicas (engine.placement.choose_split)


def speculation_note(scenario: Scenario, model: ResolvedModel, origin: WorkloadOrigin, knobs: Knobs) -> str | None:
    """The one line a reader needs when the preset's speculative decoding and the model disagree."""
    if origin.preset.speculative == "mtp" and not model.architecture.mtp_layers:
        return (f"preset {origin.preset.name} serves with MTP where the model has a head; "
                f"{model.architecture.name} has none: decoding without speculation")
    if origin.preset.speculative == "none" and model.architecture.mtp_layers and knobs.mtp_speedup == 1.0 \
            and scenario.mtp_speedup is None:
        return (f"preset {origin.preset.name} serves without speculative decoding (saturated batches are not "
                "memory-bound); --mtp-speedup or --num-speculative-tokens turns the model's MTP head on")
    return None


def plan_inputs(scenario: Scenario) -> PlanInputs:
    scenario, line = with_serve_line(scenario)
    if scenario.max_model_len == AUTO_MAX_MODEL_LEN:
        scenario = scenario.replace(max_model_len=auto_fitted_length(scenario))
    model = model_of(scenario.model)
    knobs = knobs_of(scenario)
    check_speculation(scenario, model, knobs)
    workload, origin = resolved_workload(scenario, derived_max_model_len(model.architecture))
    note = speculation_note(scenario, model, origin, knobs)
    if note:
        origin = origin.noting(note)
    measured = calibrated(scenario, deployment_of(scenario, model))
    deployment, split = split_of(scenario, model, measured,
                                 planned_deployment(measured.deployment, model, workload, knobs, scenario))
    return PlanInputs(scenario, model, display_name(model), hf_id_of(model, scenario.model), gpus_of(scenario),
                      deployment, workload, knobs, measured.pool_tokens, measured.pool_source, origin,
                      line.not_affecting if line else (), line.estimated if line else (), split)


# -- fleet: plan --users N and servesize fleet ------------------------------------------------

def users_sizing(scenario: Scenario) -> Scenario:
    """plan --users N: the scenario with one replica of --tensor-parallel-size GPUs of --gpus's type (its count is
    what the sizing answers), planned first to learn what one replica holds."""
    if scenario.data_parallel_size != 1:
        raise BadInput("--users sizes the data-parallel replicas itself: drop --data-parallel-size")
    gpu = gpus_of(scenario).gpu.key
    return scenario.replace(users=None, gpus=f"{scenario.tensor_parallel_size}x{gpu}")


def sized_scenario(scenario: Scenario, replicas: int) -> Scenario:
    """The scenario with ``replicas`` replicas of --tensor-parallel-size GPUs (what plan --users answers)."""
    gpu = gpus_of(scenario).gpu.key
    return scenario.replace(users=None, data_parallel_size=replicas,
                            gpus=f"{scenario.tensor_parallel_size * replicas}x{gpu}")


def _team_spec(spec: str) -> tuple[str, int, str | None]:
    """'research=40:long.toml' -> ('research', 40, 'long.toml')."""
    name, sep, rest = spec.partition("=")
    users_text, _, workload = rest.partition(":")
    if not sep or not name.strip() or not users_text.strip():
        raise BadInput(f"--team {spec!r}: write NAME=USERS[:WORKLOAD], e.g. research=40:rag or support=200:my.toml")
    try:
        users = int(users_text.strip().replace(",", "").replace("_", ""))
    except ValueError:
        raise BadInput(f"--team {spec!r}: {users_text.strip()!r} is not a whole number of users") from None
    return name.strip(), users, workload.strip() or None


def _priorities(specs_given: tuple[str, ...] | None, names: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for spec in specs_given or ():
        name, sep, level = spec.partition("=")
        if not sep or name.strip() not in names:
            raise BadInput(f"--priority {spec!r}: write NAME=LEVEL for one of the teams ({', '.join(names)})")
        try:
            out[name.strip()] = int(level)
        except ValueError:
            raise BadInput(f"--priority {spec!r}: {level.strip()!r} is not a whole number") from None
    return out


def teams_from(source: Any, specs_given: tuple[str, ...] | list[str], priorities: tuple[str, ...] | list[str] | None,
               model_limit: int | None = None) -> tuple[tuple[Team, ...], Workload]:
    """Teams from NAME=USERS[:WORKLOAD] specs: each its own workload (a preset name or a workload file, capped as
    ``source`` caps, --max-model-len else the model's context), else ``source``'s (a FleetQuery or Scenario)."""
    base, _ = resolved_workload(source, model_limit)
    specs = [_team_spec(spec) for spec in specs_given]
    priority = _priorities(tuple(priorities or ()), [name for name, _, _ in specs])
    teams = []
    for name, users, workload in specs:
        own, where = base, "the fleet's workload"
        if workload is not None:
            named = workload in preset_names()
            given = SimpleNamespace(preset=workload if named else None, workload=None if named else workload,
                                    max_model_len=getattr(source, "max_model_len", None))
            own = resolved_workload(given, model_limit)[0]
            where = f"preset {workload}" if named else f"file {workload}"
        teams.append(Team(name, users, own, priority.get(name, 0), where))
    return tuple(teams), base


def teams_of(query: FleetQuery, model_limit: int | None = None) -> tuple[tuple[Team, ...], Workload]:
    """The teams (and the fleet's own workload): --users N is one team of the workload; each --team its own."""
    if query.users is not None:
        base, origin = resolved_workload(query, model_limit)
        return (Team("users", query.users, base, source=f"preset {origin.preset.name}"),), base
    return teams_from(query, query.team or (), query.priority, model_limit)


def fleet_currency(query: FleetQuery) -> str:
    """The fleet's currency: --currency, else the price list's. A power bill added to the prices must be in it:
    the default tariff is in EUR (power.currency), so another currency needs its own --electricity-price."""
    from servesize.planning.prices import gpu_hour_prices

    listed = {p.currency for p in gpu_hour_prices().values()}
    currency = query.currency or (listed.pop() if len(listed) == 1 else "USD")
    if not query.price_includes_power:
        tariff_currency = query.currency or str(Knobs().a("power.currency"))
        if tariff_currency != currency or (query.electricity_price is None and currency != Knobs().a("power.currency")):
            raise BadInput(f"the power bill and the GPU prices must be in one currency: the prices are in {currency} "
                           f"and the default electricity price is in {Knobs().a('power.currency')}; give "
                           f"--electricity-price PRICE --currency {currency}")
    return currency


def _ints(items: tuple[str, ...] | None, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in items or ())
    except ValueError:
        raise BadInput(f"{flag} takes whole numbers, e.g. 1,2,4,8") from None
    if not values or min(values) < 1:
        raise BadInput(f"{flag} takes whole numbers >= 1, e.g. 1,2,4,8")
    return values


def fleet_space(query: FleetQuery) -> tuple[FleetSpace, dict[str, str | InlineConfig]]:
    """What planning.fleet searches, and each model's display name -> the spec it was given as."""
    from servesize.engine.kv_cache import KV_CACHE_DTYPES
    from servesize.engine.weights import normalise_precision
    from servesize.model.hardware import find_gpu, load_gpus
    from servesize.planning.fleet import FleetSpace, ModelChoice
    from servesize.planning.prices import parse_price, with_overrides
    from servesize.workload.teams import TeamMix

    lists = query.lists()
    for name, most in (("models", 8), ("gpus_from", 64), ("precision", 4), ("kv_cache_dtype", 4),
                       ("tensor_parallel_size", 8)):
        if len(lists[name] or ()) > most:
            raise BadInput(f"--{name.replace('_', '-')} takes at most {most} values (a search space to read, "
                           "not to enumerate); run the fleet once per group")
    gpus = tuple(dict.fromkeys(find_gpu(g) for g in lists["gpus_from"])) if lists["gpus_from"] \
        else tuple(load_gpus().values())
    models: list[ModelChoice] = []
    specs: dict[str, str | InlineConfig] = {}
    for spec in lists["models"] or ():
        model = model_of(spec)
        # what every fleet of this model shares, as a Scenario (its GPUs, one of the search's, are not read here)
        shared = Scenario(model=spec, gpus=f"1x{gpus[0].key}", **query.shared())
        knobs = knobs_of(shared)
        check_speculation(shared, model, knobs)
        teams, base = teams_of(query, derived_max_model_len(model.architecture))
        cap = max(t.workload.max_model_len for t in teams)
        template = Deployment(gpu_memory_utilization=query.gpu_memory_utilization,
                              max_num_batched_tokens=query.max_num_batched_tokens, block_size=query.block_size,
                              enforce_eager=query.enforce_eager, mamba_ssm_cache_dtype=query.mamba_ssm_cache_dtype,
                              mamba_cache_mode=query.mamba_cache_mode,
                              num_speculative_tokens=query.num_speculative_tokens or 0, vllm_version=query.vllm_version)
        deployment = planned_deployment(template, model, base.replace(max_model_len=cap), knobs, shared)
        models.append(ModelChoice(display_name(model), hf_id_of(model, spec), model.architecture, deployment,
                                  TeamMix(teams), knobs))
        specs[display_name(model)] = spec
    if not models:
        raise BadInput("name the model(s) to serve: --models qwen3.6-27b (a comma list compares several)")
    for kv in lists["kv_cache_dtype"] or ():
        if kv not in KV_CACHE_DTYPES:
            raise BadInput(f"--kv-cache-dtype {kv!r} is not one of {', '.join(KV_CACHE_DTYPES)}")
    precisions = lists["precision"] or ("native",)
    for precision in precisions:
        normalise_precision(precision)  # an unknown precision is refused before the search
    overrides = dict(parse_price(text) for text in query.gpu_hour_price or ())
    currency = fleet_currency(query)
    prices = with_overrides(overrides, currency, query.price_includes_power)
    if not any(g.key in prices for g in gpus):
        raise BadInput(f"no GPU searched has a price in {currency}: give --gpu-hour-price GPU=PRICE "
                       "(data/prices.toml lists USD prices)")
    space = FleetSpace(tuple(models), gpus, prices, precisions, lists["kv_cache_dtype"] or ("auto",),
                       _ints(lists["tensor_parallel_size"], "--tensor-parallel-size"), query.max_gpus, query.budget,
                       query.top, currency, query.price_includes_power)
    return space, specs


def confirm_scenario(query: FleetQuery, spec: str | InlineConfig, option: FleetOption) -> Scenario | None:
    """The Scenario ``servesize plan`` confirms a one-workload fleet answer with (None for several teams)."""
    if query.users is None:
        return None
    return Scenario(model=spec, gpus=option.gpus, tensor_parallel_size=option.tp, data_parallel_size=option.dp,
                    quantization=option.precision, kv_cache_dtype=option.kv_cache_dtype, **query.shared())


def plan_command(scenario: Scenario) -> str:
    """``servesize plan ...``: the command line of ``scenario`` (its fields that differ from their defaults)."""
    import shlex

    parts = ["servesize", "plan"]
    model = scenario.model
    parts.append(model if isinstance(model, str) else "<inline config>")
    for name, value in scenario.explicit().items():
        if name == "model":
            continue
        p = PARAMS[name]
        if isinstance(value, bool):
            parts.append(p.flag if value else f"--no-{p.flag[2:]}")
        elif isinstance(value, (Workload, Calibration)):
            parts.append(f"{p.flag} <{type(value).__name__} object>")
        else:
            parts += [p.flag, shlex.quote(f"{value:g}" if isinstance(value, float) else str(value))]
    return " ".join(parts)



def auto_fitted_length(scenario: Scenario) -> int:
    """--max-model-len auto in a plan: the length vLLM's auto-fit picks for these flags becomes the
    engine's max_model_len, and so the workload's cap."""
    from servesize.engine.memory import memory_report

    model = model_of(scenario.model)
    report = memory_report(model.architecture, gpus_of(scenario), deployment_of(scenario, model), budget=scenario.budget)
    return report.pool.max_model_len
