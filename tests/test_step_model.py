"""The one step model (planning/step_model.py): every time servesize prices is computed there, and its terms do
what their names say. Decided by the model's own numbers, never by the machine's clock."""

from __future__ import annotations

import ast
import math
import pathlib

import numpy as np
import pytest

from servesize.errors import BadInput
from servesize.planning.decode import DecodeSetup
from servesize.planning.prefill import PrefillSetup
from servesize.planning.step_model import StepModel, StepTerms

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "servesize"

# the rates a time is made from: dividing by one of them, or adding a step's overhead, is pricing a step
TIME_BASES = {"effective_bandwidth_bytes_per_s", "effective_flops_per_s", "achieved_flops_per_s", "step_overhead_s",
              "bandwidth_bytes_per_s", "peak_flops_per_s", "peak_flops_per_gpu", "overhead_s"}


def _time_expressions(path: pathlib.Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.Add))):
            continue
        sides = (node.left, node.right) if isinstance(node.op, ast.Add) else (node.right,)
        for side in sides:
            name = side.attr if isinstance(side, ast.Attribute) else side.id if isinstance(side, ast.Name) else None
            if name in TIME_BASES:
                where = path.relative_to(SRC) if path.is_relative_to(SRC) else path.name
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_no_module_but_the_step_model_turns_work_into_step_seconds():
    offenders = [hit for p in sorted(SRC.rglob("*.py")) if p.name != "step_model.py" for hit in _time_expressions(p)]
    assert offenders == [], "a step's time is computed outside planning/step_model.py:\n" + "\n".join(offenders)


def test_the_scan_finds_a_step_time_written_elsewhere(tmp_path):
    # the guard above could pass by finding nothing at all: a module that prices a step must be caught
    p = tmp_path / "probe.py"  # the same scan on a module outside the source tree (the tests write nothing into src/)
    p.write_text("def t(setup, b):\n    return b / setup.effective_bandwidth_bytes_per_s + setup.step_overhead_s\n")
    assert len(_time_expressions(p)) == 2


@pytest.mark.parametrize("module", ["simulate/engine.py", "planning/decode.py", "planning/prefill.py",
                                    "planning/ceilings.py"])
def test_the_consumers_import_the_step_model(module):
    tree = ast.parse((SRC / module).read_text(encoding="utf-8"))
    names = {a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
             and node.module == "servesize.planning.step_model" for a in node.names}
    if module == "simulate/engine.py":  # the engine takes a StepModel; it must not build step times of its own
        assert not any(isinstance(n, ast.ClassDef) and "Step" in n.name for n in ast.walk(tree))
    else:
        assert names, f"{module} does not import planning.step_model"


@pytest.mark.parametrize("module", ["sizing/teams.py", "sizing/search.py", "planning/plan.py", "api.py"])
def test_the_planners_price_time_through_the_modules_that_use_the_step_model(module):
    # teams, fleet and the plan price decode and prefill through planning.ceilings (decode_setup, prefill_setup,
    # step_model_of), which build on planning.step_model; power takes the decode capacity they computed
    tree = ast.parse((SRC / module).read_text(encoding="utf-8"))
    modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert modules & {"servesize.planning.ceilings", "servesize.planning.step_model"}, module


def test_overhead_grows_per_tp_doubling():
    terms = StepTerms(overhead_s=0.001, overhead_per_tp_doubling_s=0.002)
    assert terms.overhead(1) == pytest.approx(0.001)
    assert terms.overhead(2) == pytest.approx(0.003)
    assert terms.overhead(8) == pytest.approx(0.007)


def test_tp_overhead_grows_with_depth_and_moe_layers_pay_their_kernels_fixed_part():
    terms = StepTerms(overhead_s=0.001, overhead_per_layer_tp_doubling_s=1e-5, moe_layer_fixed_s=3e-5)
    assert terms.overhead(1, 36) == pytest.approx(0.001)                     # no all-reduce at TP 1
    assert terms.overhead(8, 36) == pytest.approx(0.001 + 36 * 1e-5 * 3)     # 36 layers, three doublings
    assert terms.overhead(8, 80) == pytest.approx(0.001 + 80 * 1e-5 * 3)     # deeper: more all-reduces
    assert terms.overhead(1, 36, 36) == pytest.approx(0.001 + 36 * 3e-5)     # every layer a MoE layer
    with pytest.raises(BadInput):
        terms.overhead(1, 36, 37)                                            # more MoE layers than layers


@pytest.mark.parametrize("bad", [dict(overhead_s=-1e-3), dict(request_fixed_s=math.nan), dict(mixed="max"),
                                 dict(moe_layer_fixed_s=-1e-6), dict(overhead_per_layer_tp_doubling_s=math.inf)])
def test_bad_terms_are_refused(bad):
    with pytest.raises(BadInput):
        StepTerms(**bad)


def _setups(overhead=0.002):
    decode = DecodeSetup(bandwidth_bytes_per_s=4.8e12, weight_bytes_per_step=27e9, kv_bytes_per_token_read=65536,
                         bandwidth_efficiency=0.75, peak_flops_per_s=989e12, compute_efficiency=0.6,
                         flops_per_token=2 * 27e9, tp_efficiency=1.0, step_overhead_s=overhead)
    prefill = PrefillSetup(gemm_params=27e9, attention_width=6144, full_attention_layers=16, peak_flops_per_gpu=989e12,
                           tp_efficiency=1.0, mfu=0.6)
    return prefill, decode


def test_a_mixed_step_reads_the_weights_once():
    prefill, decode = _setups()
    contexts = np.full(32, 8000.0)
    one = StepModel(prefill, decode, StepTerms(overhead_s=0.002, mixed="one_weight_read"))
    apart = StepModel(prefill, decode, StepTerms(overhead_s=0.002, mixed="sum"))
    chunk = [(2048.0, 0.0)]
    weights_s = 27e9 / (4.8e12 * 0.75)
    decoders_compute_s = float(decode.step_flops(32, contexts.sum())) / decode.effective_flops_per_s
    # the parts priced apart read the weights a second time; one pass computes the decoders' tokens beside the
    # chunk's on the same tensor cores (both pay one overhead: the old rule priced none on a chunk)
    assert apart.step_s(chunk, contexts) - one.step_s(chunk, contexts) == pytest.approx(
        weights_s - decoders_compute_s, rel=1e-6)
    # and one pass is still dearer than either part alone
    assert one.step_s(chunk, contexts) > max(one.step_s(chunk, None), float(one.decode_s(contexts[None, :])[0]))


def test_a_decode_step_is_a_mixed_step_without_its_chunk_under_the_sequential_roofline():
    """decode.roofline = sequential: the GEMMs' roofline (weights against their FLOPs), then the attention's (the KV
    read against its FLOPs), as the mixed step prices its decoders; so a step that adds one token of prefill costs
    that token more. Under 'max' (the KV read overlapped with the GEMMs) a compute-bound batch jumps when a chunk
    joins it."""
    prefill, _ = _setups()
    fields = dict(bandwidth_bytes_per_s=4.8e12, weight_bytes_per_step=27e9, kv_bytes_per_token_read=65536,
                  bandwidth_efficiency=0.75, peak_flops_per_s=989e12, compute_efficiency=0.6, flops_per_token=2 * 27e9,
                  attention_flops_per_context_token=4 * 6144 * 16, tp_efficiency=1.0, step_overhead_s=0.002)
    contexts = np.full(256, 8000.0)  # 256 decoders: their GEMMs compute-bound, their KV read 134 GB
    bw, flops = 4.8e12 * 0.75, 989e12 * 0.6
    gemm_s, weights_s = 256 * 2 * 27e9 / flops, 27e9 / bw
    kv_s, attention_s = 256 * 8000 * 65536 / bw, 4 * 6144 * 16 * 256 * 8000 / flops
    assert gemm_s > weights_s and kv_s > attention_s
    steps = {}
    for sequential in (True, False):
        decode = DecodeSetup(**fields, sequential=sequential)
        model = StepModel(prefill, decode, StepTerms(overhead_s=0.002, mixed="one_weight_read"))
        alone = float(model.decode_s(contexts[None, :])[0])
        steps[sequential] = alone, model.step_s([(1.0, 0.0)], contexts) - alone
    alone, one_token_more = steps[True]
    assert alone == pytest.approx(gemm_s + kv_s + 0.002, rel=1e-9)
    assert 0 < one_token_more < 1e-4
    alone, one_token_more = steps[False]
    assert alone == pytest.approx(weights_s + kv_s + 0.002, rel=1e-9)  # max(all bytes, all FLOPs): the bytes here
    assert one_token_more > 0.01


def test_the_derivation_prices_the_median_step_as_the_decode_step_does_sliding_layers_and_all():
    """The plan's derivation of the median step (``--explain``, the page's method section) gives the per-user speed
    the vectorised step gives, under both rooflines, with the sliding layers' attention FLOPs counted (a small KV
    read: the attention's FLOPs outlast it); a setup with no weights to read (a degenerate input the setup allows)
    still derives."""
    from servesize.planning.decode import ContextBank, decode_speed_in

    for sequential in (True, False):
        for weights in (27e9, 0.0):
            setup = DecodeSetup(bandwidth_bytes_per_s=4.8e12, weight_bytes_per_step=weights, kv_bytes_per_token_read=512,
                                bandwidth_efficiency=0.75, peak_flops_per_s=989e12, compute_efficiency=0.6,
                                flops_per_token=2 * 27e9, attention_flops_per_context_token=4 * 6144 * 4,
                                window_attention_flops_per_token=4 * 6144 * 60, topk_tokens=4096,
                                topk_bytes_per_token=64, tp_efficiency=1.0, step_overhead_s=0.002,
                                sequential=sequential)
            bank = ContextBank(lambda rng, size: np.full(size, 30000.0), fills=8, topk_tokens=4096)
            speed = decode_speed_in(setup, bank, 256)
            derived = [s for s in speed.derivation.steps if s.name == "per_user_tok_s_p50"][0]
            assert derived.value == pytest.approx(speed.p50_tok_s, rel=1e-9), (sequential, weights)


def test_the_weight_floor_prices_a_short_chunk_at_the_weights_read():
    prefill, decode = _setups()
    floor = StepModel(prefill, decode, StepTerms(overhead_s=0.002, mixed="one_weight_read", prefill_weight_floor=True))
    none = StepModel(prefill, decode, StepTerms(overhead_s=0.002, mixed="one_weight_read"))
    weights_s = 27e9 / (4.8e12 * 0.75)
    assert floor.prefill_s(4, 0) == pytest.approx(weights_s + 0.002)
    assert none.prefill_s(4, 0) - 0.002 < weights_s / 10
    # a long chunk is compute-bound: the floor changes nothing there
    assert floor.prefill_s(8192, 0) == pytest.approx(none.prefill_s(8192, 0))


def test_the_expert_union_rule_reaches_the_decode_step_through_its_assumption():
    """decode.expert_union is read where the decode setup is built: 'expected' (the default) reads the uniform-routing
    union of the routed experts (fewer than min(n k, E) once tokens share experts), 'linear' the no-overlap bound."""
    from dataclasses import replace

    from servesize.api import plan
    from servesize.assumptions import assumption
    from servesize.planning.ceilings import decode_setup
    from servesize.resolve import plan_inputs
    from servesize.scenario import Scenario

    scenario = Scenario(model="qwen3-30b-a3b", gpus="1xH200")   # 128 experts, 8 per token
    fixed, knobs = plan(scenario, sensitivity=False).fixed, plan_inputs(scenario).knobs
    linear = decode_setup(fixed, replace(knobs, overrides=(("decode.expert_union", "linear"),)))
    expected = decode_setup(fixed, knobs)
    assert (linear.experts.union, expected.experts.union) == ("linear", "expected")
    assert linear.weight_bytes(1) == pytest.approx(expected.weight_bytes(1))
    shared = linear.weight_bytes_per_step
    read = linear.experts.all_expert_bytes / linear.experts.read_share    # at the MoE kernel's share of the stream
    measured = 4.13e12 / (4.8e12 * assumption("decode.bandwidth_efficiency"))  # bf16 experts: their kernel's rate
    assert linear.experts.read_share == expected.experts.read_share == pytest.approx(measured)
    assert linear.weight_bytes(16) - shared == pytest.approx(read)                               # 16 x 8 = 128: all
    assert expected.weight_bytes(16) - shared == pytest.approx(read * (1 - (1 - 8 / 128) ** 16))  # 64% of them


KERNELS = pathlib.Path(__file__).resolve().parent / "fixtures" / "measured" / "aiconfigurator-moe-kernels-vllm.csv"
BITS = {"w4a16_mxfp4": 4.25, "bfloat16": 16, "fp8_block": 8}  # MXFP4: 4-bit values and one 8-bit scale per 32
# the Marlin MXFP4 kernel on Hopper (--moe-backend marlin), measured at another model's geometry: apart from the
# default kernels' series (on the L40S Marlin is the default: its series is gpt-oss's own)
MARLIN_HOPPER = "vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu"


def _kernel_rows() -> list[dict]:
    """The fixture's rows of the default kernels (every series but Marlin's on Hopper)."""
    import csv

    with KERNELS.open(encoding="utf-8") as f:
        return [r for r in csv.DictReader(f) if r["kernel_source"] != MARLIN_HOPPER]


def _kernel_rates(dtype: str, system: str, tp: int, kernel: str | None = None) -> list[float]:
    """Bytes per second of vLLM's measured MoE kernel where every expert is touched (n x k >= E, balanced routing)
    and the call is still weight-bound (n <= 512): all E experts' gate, up and down projections, this rank's 1/tp of
    them, over the measured latency (ms). ``kernel``: that kernel_source's series (default: the default kernels')."""
    import csv

    rates = []
    with KERNELS.open(encoding="utf-8") as f:
        for r in csv.DictReader(f):
            if (r["moe_dtype"], r["system"], int(r["moe_tp_size"])) != (dtype, system, tp):
                continue
            if (r["kernel_source"] == MARLIN_HOPPER) != (kernel == MARLIN_HOPPER):
                continue
            e, k, n = int(r["num_experts"]), int(r["topk"]), int(r["num_tokens"])
            if n * k >= e and n <= 512:
                nbytes = e * 3 * int(r["hidden_size"]) * int(r["inter_size"]) * BITS[dtype] / 8 / tp
                rates.append(nbytes / (float(r["latency"]) * 1e-3))
    return rates


def test_fp4_experts_without_fp4_tensor_cores_read_at_the_rate_the_kernel_tables_measure():
    """gpus.toml's fp4_moe_tbps is read from vLLM's measured MoE kernels (aiconfigurator's tables): MXFP4 experts
    run no faster on an H200 than on an H100 (the SMs dequantise them; both GPUs have the same), where bf16 and
    block-FP8 experts run as much faster as the H200's memory is; each GPU's figure is its TP 1 median."""
    from servesize.model.hardware import find_gpu

    median = {key: float(np.median(_kernel_rates(*key))) for key in
              [(d, s, tp) for d in BITS for s in ("h100_sxm", "h200_sxm") for tp in (1, 2)]}
    assert all(len(_kernel_rates(*key)) >= 4 for key in median)
    for tp in (1, 2):
        assert median[("w4a16_mxfp4", "h200_sxm", tp)] / median[("w4a16_mxfp4", "h100_sxm", tp)] < 1.1
        for dtype in ("bfloat16", "fp8_block"):
            assert median[(dtype, "h200_sxm", tp)] / median[(dtype, "h100_sxm", tp)] > 1.25
    median[("w4a16_mxfp4", "l40s", 1)] = float(np.median(_kernel_rates("w4a16_mxfp4", "l40s", 1)))  # Marlin's kernel
    for key, system in (("H100-SXM", "h100_sxm"), ("H200-SXM", "h200_sxm"), ("L40S", "l40s")):
        gpu = find_gpu(key)
        assert not gpu.fp4 and "moe_perf.parquet" in gpu.fp4_moe_source
        assert gpu.fp4_moe_tbps * 1e12 == pytest.approx(median[("w4a16_mxfp4", system, 1)], rel=0.01)


def test_bf16_experts_read_at_the_rate_the_kernel_tables_measure_and_fp8_experts_at_their_fitted_efficiency():
    """gpus.toml's bf16_moe_tbps is the TP 1 median of vLLM's measured bf16 fused-MoE kernel where every expert is
    touched; the step model reads a bf16 MoE's experts at it (step.bf16_moe_kernel_rate = measured), at the fitted
    MoE efficiency under 'fitted' or on a GPU with no measured rate, and FP8 experts at their fitted efficiency on
    every GPU."""
    from dataclasses import replace

    from servesize.api import plan
    from servesize.assumptions import assumption
    from servesize.errors import BadInput
    from servesize.model.hardware import find_gpu
    from servesize.planning.ceilings import decode_setup
    from servesize.planning.plan import step_term_names
    from servesize.resolve import plan_inputs
    from servesize.scenario import Scenario

    for key, system in (("H100-SXM", "h100_sxm"), ("H200-SXM", "h200_sxm")):
        gpu = find_gpu(key)
        assert "moe_perf.parquet" in gpu.bf16_moe_source and "unquantizedfusedmoe" in gpu.bf16_moe_source
        rates = _kernel_rates("bfloat16", system, 1)
        assert len(rates) == 5
        assert gpu.bf16_moe_tbps * 1e12 == pytest.approx(float(np.median(rates)), rel=0.01)
        assert gpu.bf16_moe_tbps * 1e3 < gpu.bandwidth_gbps

    def experts(scenario: Scenario, rule: str = "measured", efficiency: float | None = None) -> tuple[float, str, float]:
        fixed = plan(scenario, sensitivity=False).fixed
        knobs = replace(plan_inputs(scenario).knobs, overrides=(("step.bf16_moe_kernel_rate", rule),))
        setup = decode_setup(fixed, knobs, bandwidth_efficiency=efficiency)
        assert setup.experts is not None
        rate = setup.experts.read_share * setup.effective_bandwidth_bytes_per_s  # B/s the experts are read at
        return fixed.expert_kernel_bytes_per_s, fixed.expert_kernel_rule, rate

    moe = assumption("step.moe_expert_efficiency")
    stream = 4.8e12 * assumption("decode.bandwidth_efficiency")
    bf16 = Scenario(model="qwen3-30b-a3b", gpus="1xH200")
    measured, rule, rate = experts(bf16)
    assert (measured, rule) == (4.13e12, "step.bf16_moe_kernel_rate") and rate == pytest.approx(4.13e12)
    assert experts(bf16, "fitted")[2] == pytest.approx(stream * moe)      # the rule before: 2.52 TB/s, not 4.13
    # memory-bound: an efficiency given for the deployment (a calibration, the plan's bracket) moves it with the stream
    assert experts(bf16, efficiency=0.55)[2] == pytest.approx(4.13e12 * 0.55 / assumption("decode.bandwidth_efficiency"))
    with pytest.raises(BadInput, match="step.bf16_moe_kernel_rate is 'measured' or 'fitted'"):
        experts(bf16, "memory")                                           # the FP4 rule's word, not this one's
    other = Scenario(model="qwen3-30b-a3b", gpus="1xH200", moe_backend="flashinfer_cutlass")
    assert experts(other)[:2] == (0.0, "")                                # another backend's kernel: not measured
    terms = step_term_names(plan(bf16, sensitivity=False).fixed, replace(
        plan_inputs(bf16).knobs, overrides=(("step.bf16_moe_kernel_rate", "fitted"),)))
    assert {"step.bf16_moe_kernel_rate", "step.moe_expert_efficiency"} <= set(terms)  # the table names what priced it
    assert "step.moe_expert_efficiency" not in step_term_names(plan(bf16, sensitivity=False).fixed, plan_inputs(bf16).knobs)
    assert experts(Scenario(model="qwen3-30b-a3b", gpus="1xA100-SXM"))[:2] == (0.0, "")  # not measured there
    fp8, fp8_rule, fp8_rate = experts(Scenario(model="qwen3-30b-a3b", gpus="1xH200", quantization="fp8"))
    assert (fp8, fp8_rule) == (0.0, "")
    assert fp8_rate == pytest.approx(stream * moe * assumption("step.kernel_efficiency_fp8_tensor"))  # -q fp8: per tensor


def _kernel_fixed_parts() -> list[float]:
    """Per measured series (kernel, GPU, TP): its 1-token latency less the bytes of the k experts that token
    touches, read at the series' median rate over its every-expert rows; seconds."""

    out = []
    one = [r for r in _kernel_rows() if int(r["num_tokens"]) == 1]
    for r in one:
        dtype, tp = r["moe_dtype"], int(r["moe_tp_size"])
        rate = float(np.median(_kernel_rates(dtype, r["system"], tp)))
        k_bytes = int(r["topk"]) * 3 * int(r["hidden_size"]) * int(r["inter_size"]) * BITS[dtype] / 8 / tp
        out.append(float(r["latency"]) * 1e-3 - k_bytes / rate)
    return out


def test_a_moe_layers_fixed_part_offered_to_the_fit_is_what_the_kernel_tables_measure():
    """The fit chooses step.moe_layer_fixed_s between 0 and vLLM's measured MoE kernels' figure: the median over
    every series of what one token's call costs beyond its experts' bytes."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("step_accuracy", SRC.parents[1] / "scripts" / "step_accuracy.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("step_accuracy", script)  # its dataclasses look their module up
    spec.loader.exec_module(script)
    parts = _kernel_fixed_parts()
    assert len(parts) == 26
    assert script.MOE_LAYER_FIXED_MEASURED_S == pytest.approx(float(np.median(parts)), rel=0.01)
    assert script.SEARCH["step.moe_layer_fixed_s"] == [0.0, script.MOE_LAYER_FIXED_MEASURED_S]
    # the H100 and H200 series (the Triton kernels) all pay 18-41 us
    assert 15e-6 < sorted(parts)[len(parts) // 4] and max(parts) < 45e-6


def test_a_moe_model_pays_its_kernels_fixed_part_in_every_step_and_a_dense_one_does_not():
    from dataclasses import replace

    from servesize.api import plan
    from servesize.planning.ceilings import decode_setup
    from servesize.resolve import plan_inputs
    from servesize.scenario import Scenario

    def overhead(model: str, fixed_s: float) -> tuple[float, int]:
        scenario = Scenario(model=model, gpus="1xH200")
        fixed = plan(scenario, sensitivity=False).fixed
        knobs = replace(plan_inputs(scenario).knobs, overrides=(("step.moe_layer_fixed_s", fixed_s),))
        return decode_setup(fixed, knobs).step_overhead_s, fixed.moe_layers

    moe_with, layers = overhead("qwen3-30b-a3b", 3e-5)
    moe_without, _ = overhead("qwen3-30b-a3b", 0.0)
    assert layers == 48 and moe_with - moe_without == pytest.approx(48 * 3e-5)
    dense_with, dense_layers = overhead("llama-3.1-8b", 3e-5)
    assert dense_layers == 0 and dense_with == overhead("llama-3.1-8b", 0.0)[0]


def test_the_kernel_rate_reads_gpt_oss_experts_alike_on_h100_and_h200_and_not_where_unmeasured_or_in_hardware():
    from dataclasses import replace

    from servesize.api import plan
    from servesize.assumptions import assumption
    from servesize.planning.ceilings import decode_setup
    from servesize.planning.step_model import dequant_share
    from servesize.resolve import plan_inputs
    from servesize.scenario import Scenario

    def experts(gpus: str, rule: str = "measured") -> tuple[float, float, float]:
        scenario = Scenario(model="gpt-oss-120b", gpus=gpus)
        fixed = plan(scenario, sensitivity=False).fixed
        knobs = replace(plan_inputs(scenario).knobs, overrides=(("step.fp4_moe_kernel_rate", rule),))
        setup = decode_setup(fixed, knobs)
        assert setup.experts is not None
        read_s = setup.experts.all_expert_bytes / setup.experts.read_share / setup.effective_bandwidth_bytes_per_s
        return fixed.expert_kernel_bytes_per_s, setup.experts.read_share, read_s

    (h100_rate, _, h100_s), (h200_rate, _, h200_s) = experts("1xH100-SXM"), experts("1xH200-SXM")
    assert (h100_rate, h200_rate) == (2.41e12, 2.54e12)
    assert h100_s / h200_s == pytest.approx(2.54 / 2.41)       # the kernels' rates, not the memories' (1.43x)
    moe, stream = assumption("step.moe_expert_efficiency"), 3.35 * assumption("decode.bandwidth_efficiency")
    _, memory_share, h100_memory_s = experts("1xH100-SXM", "memory")
    assert memory_share == moe                                  # the rule before: the stream at the MoE efficiency
    assert h100_memory_s / h100_s == pytest.approx(2.41 / (stream * moe))  # (1.76 TB/s on an H100, not 2.41)
    b200_rate, b200_share, b200_s = experts("1xB200")           # FP4 tensor cores: a memory-bound MoE kernel
    assert (b200_rate, b200_share) == (0.0, moe) and b200_s < h200_s
    h20_rate, h20_share, _ = experts("1xH20")                   # no FP4 tensor cores, but no measured rate: as before
    assert (h20_rate, h20_share) == (0.0, moe)
    assert dequant_share(3e12, 0.0) == 1.0                      # no measured kernel: no cap
    # a kernel measured faster than the fitted stream reads at its own measured rate (Marlin on an H100)
    assert dequant_share(1e12, 2.41e12) == pytest.approx(2.41)
    assert dequant_share(3.6e12, 2.54e12) == pytest.approx(2.54 / 3.6)


def test_the_moe_prefill_efficiency_slows_every_flop_or_the_routed_experts_alone_as_its_scope_says():
    """step.moe_prefill_scope: 'all' prices a MoE prefill's every FLOP at step.moe_prefill_efficiency of the dense
    rate; 'experts' only the routed experts' grouped GEMMs (k of E per token), the attention and the shared weights at
    the dense rate. A dense model is priced alike under both."""
    from dataclasses import replace

    from servesize.planning.ceilings import prefill_setup
    from servesize.resolve import plan_inputs
    from servesize.scenario import Scenario

    def setup(model: str, scope: str) -> tuple[PrefillSetup, object]:
        inputs = plan_inputs(Scenario(model=model, gpus="1xH200"))
        _, fixed = inputs.memory_and_fixed(check_prefixes=False)
        knobs = replace(inputs.knobs, overrides=(("step.moe_prefill_efficiency", 0.5), ("step.moe_prefill_scope", scope)))
        return prefill_setup(fixed, knobs), fixed

    every, fixed = setup("qwen3-30b-a3b", "all")
    experts, _ = setup("qwen3-30b-a3b", "experts")
    routed = fixed.expert_gemm_params
    assert 0 < routed < fixed.gemm_params
    tokens, prior = 2048.0, 1000.0
    flops = float(experts.flops(tokens, prior))
    assert flops == float(every.flops(tokens, prior))  # the work is the same; its price is not
    # 'all': the whole pass at half the dense rate; 'experts': the routed experts' 2 P_e T FLOPs count twice
    assert every.achieved_flops_per_s == pytest.approx(experts.achieved_flops_per_s * 0.5)
    assert experts.seconds(tokens, prior) * experts.achieved_flops_per_s == pytest.approx(flops + 2 * routed * tokens)
    assert every.seconds(tokens, prior) == pytest.approx(flops / (experts.achieved_flops_per_s * 0.5))
    assert experts.seconds(tokens, prior) < every.seconds(tokens, prior)
    dense_all, _ = setup("llama-3.1-8b", "all")
    dense_experts, _ = setup("llama-3.1-8b", "experts")
    assert dense_all.seconds(tokens, prior) == dense_experts.seconds(tokens, prior)
    with pytest.raises(BadInput, match="moe_prefill_scope"):
        setup("qwen3-30b-a3b", "shared")


def test_a_prefills_routed_experts_reach_below_the_dense_mfu_as_the_kernel_tables_measure():
    """What step.moe_prefill_scope = 'experts' describes (data/assumptions.toml): vLLM's fused-MoE kernels measured
    alone are weight-bound up to some 512 tokens and compute-bound past a few thousand, where at 16,384 tokens (TP 1)
    their grouped GEMMs reach 0.43 (block FP8, of the FP8 peak) to 0.86 (MXFP4 on Hopper, of the bf16 peak) of the
    dense prefill's share of its peak (prefill.mfu, 0.66)."""

    from servesize.assumptions import assumption
    from servesize.model.hardware import find_gpu

    mfu = float(assumption("prefill.mfu"))
    rows = [r for r in _kernel_rows() if int(r["moe_tp_size"]) == 1 and r["system"] != "l40s"]
    shares = {}
    for r in rows:
        n, k = int(r["num_tokens"]), int(r["topk"])
        flops = 2 * 3 * n * k * int(r["hidden_size"]) * int(r["inter_size"])
        gpu = find_gpu({"h100_sxm": "H100-SXM", "h200_sxm": "H200-SXM"}[r["system"]])
        peak = gpu.fp8_dense_tflops if r["moe_dtype"] == "fp8_block" else gpu.bf16_dense_tflops
        shares[(r["system"], r["moe_dtype"], n)] = flops / (float(r["latency"]) * 1e-3) / (peak * 1e12) / mfu
    series = {(s, d) for s, d, _ in shares}
    assert len(series) == 6
    for s, d in series:
        # weight-bound: 64 to 512 tokens take about as long as 64 (the experts' bytes, read once)
        assert shares[(s, d, 512)] / shares[(s, d, 64)] > 5
        assert 0.4 < shares[(s, d, 16384)] <= 1.0
    at_16k = sorted(round(shares[(s, d, 16384)], 2) for s, d in series)
    assert at_16k[0] == pytest.approx(0.43, abs=0.02) and at_16k[-1] == pytest.approx(0.86, abs=0.02)


def test_marlin_reads_fp4_experts_on_hopper_at_the_rate_the_kernel_tables_measure_and_the_step_model_takes_it_when_asked():
    """gpus.toml's fp4_moe_marlin_tbps is the TP 1 median of vLLM's measured Marlin MXFP4 MoE kernel where every expert
    is touched; --moe-backend marlin reads gpt-oss-120b's experts at it, faster than the default (Triton) kernel on
    both GPUs; another backend, or a GPU with no Marlin rate, keeps the default kernel's."""
    from servesize.model.hardware import find_gpu
    from servesize.resolve import plan_inputs
    from servesize.scenario import Scenario

    for key, system in (("H100-SXM", "h100_sxm"), ("H200-SXM", "h200_sxm")):
        rates = _kernel_rates("w4a16_mxfp4", system, 1, kernel=MARLIN_HOPPER)
        assert len(rates) == 4
        gpu = find_gpu(key)
        assert "moe_perf.parquet" in gpu.fp4_moe_marlin_source
        assert gpu.fp4_moe_marlin_tbps * 1e12 == pytest.approx(float(np.median(rates)), rel=0.01)
        assert gpu.fp4_moe_marlin_tbps > gpu.fp4_moe_tbps

    def rate(gpus: str, backend: str) -> float:
        inputs = plan_inputs(Scenario(model="gpt-oss-120b", gpus=gpus, tensor_parallel_size=int(gpus[0]),
                                      moe_backend=backend))
        return inputs.memory_and_fixed(check_prefixes=False)[1].expert_kernel_bytes_per_s

    assert rate("1xH100-SXM", "marlin") == pytest.approx(find_gpu("H100-SXM").fp4_moe_marlin_tbps * 1e12)
    assert rate("1xH100-SXM", "auto") == rate("1xH100-SXM", "triton") == pytest.approx(2.41e12)
    assert rate("2xL40S", "marlin") == rate("2xL40S", "auto")  # Marlin is the L40S's default: one measured rate


GEMM_SYSTEMS = {"a100_sxm": "A100-SXM", "h100_sxm": "H100-SXM", "h200_sxm": "H200-SXM", "l40s": "L40S",
                "b200_sxm": "B200", "b300_sxm": "B300", "gb200": "GB200", "gb300": "GB300",
                "rtx_pro_6000_server": "RTX-PRO-6000"}


def test_each_gpus_gemm_read_share_is_what_vllms_measured_gemms_read():
    """gpus.toml's gemm_read_share is recomputed from the measured GEMM rows (aiconfigurator's tables): the bytes
    of bf16 weights 4,096-16,384 a side read at 1-8 tokens over their measured time, over the GPU's bandwidth."""
    import csv

    from servesize.model.hardware import find_gpu

    path = SRC.parents[1] / "tests" / "fixtures" / "measured" / "aiconfigurator-gemm-kernels-vllm.csv"
    with path.open() as f:
        rows = list(csv.DictReader(f))
    seen: dict[str, list[float]] = {}
    for r in rows:
        assert r["gemm_dtype"] == "bfloat16" and 1 <= int(r["m"]) <= 8
        assert {int(r["n"]), int(r["k"])} <= {4096, 8192, 16384}
        acc = seen.setdefault(r["system"], [0.0, 0.0])
        acc[0] += int(r["n"]) * int(r["k"]) * 2
        acc[1] += float(r["latency"]) * 1e-3
    assert set(seen) == set(GEMM_SYSTEMS)
    for system, (nbytes, seconds) in seen.items():
        gpu = find_gpu(GEMM_SYSTEMS[system])
        assert gpu.gemm_read_share == pytest.approx(nbytes / seconds / gpu.bandwidth_bytes_per_s, abs=6e-4)
        assert "gemm_perf.parquet" in gpu.gemm_read_source
    # an A100's GEMMs read a smaller share of its HBM than a Hopper's do
    assert find_gpu("A100-SXM").gemm_read_share < 0.8 * find_gpu("H100-SXM").gemm_read_share + 0.05


def test_a_gpus_memory_kernels_scale_its_decode_stream_against_the_fit_gpus_and_only_where_measured():
    """step.gpu_memory_kernels: on an A100 the fitted efficiency is scaled by its measured share over the H100's and
    H200's mean; those two (the fit's GPUs) and a GPU with no measured share at 1; 'catalogue' prices them all alike
    (the rule before); an efficiency the user or a calibration gives is the GPU's own."""
    from dataclasses import replace

    from servesize.api import plan
    from servesize.model.hardware import MEMORY_KERNEL_REFERENCE, find_gpu, memory_kernel_factor
    from servesize.planning.ceilings import decode_setup
    from servesize.resolve import plan_inputs
    from servesize.scenario import Scenario

    ref = sum(find_gpu(k).gemm_read_share for k in MEMORY_KERNEL_REFERENCE) / len(MEMORY_KERNEL_REFERENCE)
    a100 = find_gpu("A100-SXM")
    assert memory_kernel_factor(a100) == pytest.approx(a100.gemm_read_share / ref) and memory_kernel_factor(a100) < 0.9
    assert [memory_kernel_factor(find_gpu(k)) for k in ("H100-SXM", "H200-SXM", "H20")] == [1.0, 1.0, 1.0]
    # a part of the same chip takes its measured sibling's share: an A100 PCIe is not priced faster than the SXM
    pcie = find_gpu("A100-PCIE")
    assert memory_kernel_factor(pcie) == memory_kernel_factor(a100) and "A100-SXM" in pcie.gemm_read_source
    assert pcie.bandwidth_gbps * memory_kernel_factor(pcie) < a100.bandwidth_gbps * memory_kernel_factor(a100)

    def bandwidth(gpus: str, rule: str) -> float:
        scenario = Scenario(model="qwen2.5-7b", gpus=gpus)
        fixed = plan(scenario, sensitivity=False).fixed
        knobs = replace(plan_inputs(scenario).knobs, overrides=(("step.gpu_memory_kernels", rule),))
        return decode_setup(fixed, knobs).effective_bandwidth_bytes_per_s

    assert bandwidth("1xA100-SXM", "measured") / bandwidth("1xA100-SXM", "catalogue") == \
        pytest.approx(memory_kernel_factor(a100))
    assert bandwidth("1xH100-SXM", "measured") == bandwidth("1xH100-SXM", "catalogue")
    with pytest.raises(BadInput, match="gpu_memory_kernels"):
        bandwidth("1xA100-SXM", "fast")
    # an efficiency given for the deployment (--bandwidth-efficiency, a calibration) is that GPU's own: not scaled
    scenario = Scenario(model="qwen2.5-7b", gpus="1xA100-SXM")
    fixed = plan(scenario, sensitivity=False).fixed
    given = replace(plan_inputs(scenario).knobs, bandwidth_efficiency=0.7)
    assert decode_setup(fixed, given).effective_bandwidth_bytes_per_s == pytest.approx(0.7 * 2039e9)


PREFILL_SHAPES = {4096, 8192, 16384}
PREFILL_TOKENS = {1024, 2048, 4096, 8192}


def test_each_gpus_fp8_prefill_share_is_what_vllms_measured_fp8_gemms_reach_against_its_bf16_ones():
    """gpus.toml's fp8_prefill_share and fp8_block_prefill_share are recomputed from the measured GEMM rows
    (aiconfigurator's tables): the same 36 calls (1,024-8,192 tokens, weights 4,096-16,384 a side) in bf16 and in
    FP8, the bf16 calls' summed time over the FP8 ones', times the GPU's bf16 over FP8 dense peak."""
    import csv

    from servesize.model.hardware import find_gpu, load_gpus

    path = SRC.parents[1] / "tests" / "fixtures" / "measured" / "aiconfigurator-gemm-prefill-kernels-vllm.csv"
    with path.open() as f:
        rows = list(csv.DictReader(f))
    seconds: dict[tuple[str, str], float] = {}
    calls: dict[tuple[str, str], set] = {}
    for r in rows:
        assert r["gemm_dtype"] in ("bfloat16", "fp8", "fp8_block") and int(r["m"]) in PREFILL_TOKENS
        assert {int(r["n"]), int(r["k"])} <= PREFILL_SHAPES
        key = (r["system"], r["gemm_dtype"])
        seconds[key] = seconds.get(key, 0.0) + float(r["latency"]) * 1e-3
        calls.setdefault(key, set()).add((r["m"], r["n"], r["k"]))
    systems = {s for s, _ in seconds}
    assert systems == set(GEMM_SYSTEMS) - {"a100_sxm"}  # the A100 has no FP8 tensor cores
    for system in systems:
        gpu = find_gpu(GEMM_SYSTEMS[system])
        peaks = gpu.bf16_dense_tflops / gpu.fp8_dense_tflops
        assert len(calls[(system, "bfloat16")]) == 36
        for dtype, share in (("fp8", gpu.fp8_prefill_share), ("fp8_block", gpu.fp8_block_prefill_share)):
            if (system, dtype) not in seconds:
                assert share == 0.0
                continue
            assert calls[(system, dtype)] == calls[(system, "bfloat16")]
            assert share == pytest.approx(seconds[(system, "bfloat16")] / seconds[(system, dtype)] * peaks, abs=6e-4)
            assert "gemm_perf.parquet" in gpu.fp8_prefill_source
    # no measured GPU's FP8 GEMMs reach twice its bf16 ones' rate at prefill sizes, the rule before's assumption
    shared = [g for g in load_gpus().values() if g.fp8_prefill_share or g.fp8_block_prefill_share]
    assert all(0 < g.fp8_prefill_share < 1 and 0 <= g.fp8_block_prefill_share < 1 for g in shared)
    # every share is one of these rows', or its same-chip sibling's: none typed in by hand
    measured = {GEMM_SYSTEMS[system] for system in systems}
    assert all(g.key in measured or g.fp8_prefill_source.startswith("the same chip's") for g in shared)
    ada, nvl = find_gpu("RTX-6000-ADA"), find_gpu("H100-NVL")
    assert ada.fp8_prefill_share == find_gpu("L40S").fp8_prefill_share and "L40S" in ada.fp8_prefill_source
    assert nvl.fp8_block_prefill_share == find_gpu("H100-SXM").fp8_block_prefill_share  # H100 PCIe and NVL too


def test_fp8_prefill_runs_at_the_gpus_measured_share_for_its_scales_and_at_the_fitted_factor_elsewhere():
    """step.gpu_fp8_prefill_kernels: 'measured' scales prefill.mfu by the GPU's measured FP8 share for the weights'
    scales (per-tensor for an FP8-quantised bf16 checkpoint, block for a block-scaled one); a GPU with none (an H20;
    an H100 PCIe or NVL takes its SXM sibling's) and the rule 'fitted' take step.prefill_efficiency_fp8; a bf16
    deployment is not touched."""
    from dataclasses import replace

    from servesize.assumptions import assumption
    from servesize.model.hardware import find_gpu
    from servesize.planning.ceilings import prefill_setup
    from servesize.planning.step_model import fp8_prefill_factor
    from servesize.resolve import plan_inputs
    from servesize.scenario import Scenario

    def mfu(model: str, gpus: str, rule: str = "measured", quantization: str = "native") -> float:
        inputs = plan_inputs(Scenario(model=model, gpus=gpus, quantization=quantization))
        fixed = inputs.memory_and_fixed(check_prefixes=False)[1]
        knobs = replace(inputs.knobs, overrides=(("step.gpu_fp8_prefill_kernels", rule),))
        return prefill_setup(fixed, knobs).mfu

    base, fitted = float(assumption("prefill.mfu")), float(assumption("step.prefill_efficiency_fp8"))
    h100 = find_gpu("H100-SXM")
    assert mfu("qwen2.5-7b", "1xH100-SXM", quantization="fp8") == pytest.approx(base * h100.fp8_prefill_share)
    assert mfu("qwen3-32b-fp8", "1xH100-SXM") == pytest.approx(base * h100.fp8_block_prefill_share)
    assert h100.fp8_block_prefill_share < h100.fp8_prefill_share
    assert mfu("qwen2.5-7b", "1xH100-SXM", "fitted", "fp8") == pytest.approx(min(1.0, base * fitted))
    assert mfu("qwen2.5-7b", "1xH20", quantization="fp8") == pytest.approx(min(1.0, base * fitted))  # none measured
    assert mfu("qwen2.5-7b", "1xH100-NVL", quantization="fp8") == pytest.approx(base * h100.fp8_prefill_share)
    # a GPU measured with per-tensor scales only prices block-scaled weights at that share, not the fitted factor
    pro = find_gpu("RTX-PRO-6000")
    assert pro.fp8_block_prefill_share == 0 and mfu("qwen3-32b-fp8", "1xRTX-PRO-6000") == pytest.approx(
        base * pro.fp8_prefill_share)
    assert mfu("qwen2.5-7b", "1xH100-SXM") == mfu("qwen2.5-7b", "1xH100-SXM", "fitted") == pytest.approx(base)
    assert fp8_prefill_factor("measured", 0.0, 0.9) == 0.9 and fp8_prefill_factor("fitted", 0.8, 0.9) == 0.9
    with pytest.raises(BadInput, match="gpu_fp8_prefill_kernels"):
        fp8_prefill_factor("fast", 0.8, 0.9)


def test_a_compressed_tensors_fp8_block_checkpoint_runs_the_block_scaled_kernels_a_native_one_does():
    """compressed-tensors' FP8 'block' strategy (QuantizationArgs strategy "block" with block_structure, llm-compressor's
    FP8_BLOCK scheme) is block-scaled FP8, as a native fp8 checkpoint's weight_block_size is: its prefill share and
    kernel efficiencies are block FP8's, not per-tensor's (quantization.py read every compressed-tensors FP8 as
    per-tensor before 2026-12-07)."""
    import json

    from servesize.model.architecture import from_config
    from servesize.planning.inputs import weight_format_of

    config = json.loads((pathlib.Path(__file__).parent / "fixtures" / "model-configs" / "Qwen--Qwen3-32B"
                         / "config.json").read_text())

    def weights(**scheme):
        q = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
            "num_bits": 8, "type": "float", "symmetric": True, "dynamic": False, **scheme}}}}
        return from_config({**config, "quantization_config": q})

    block = weights(strategy="block", block_structure=[128, 128])
    assert block.quantization.block == (128, 128) and weight_format_of("native", block) == "fp8_block"
    channel = weights(strategy="channel")
    assert channel.quantization.block is None and weight_format_of("native", channel) == "fp8_tensor"
    with pytest.raises(BadInput, match="block_structure"):
        weights(strategy="block")
    with pytest.raises(BadInput, match="block_structure"):
        weights(strategy="block", block_structure=[128])
