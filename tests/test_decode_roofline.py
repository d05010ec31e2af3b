"""Decode at the real limit: each step takes the longer of its memory and compute time, with MTP verification and
the batch's attention FLOPs priced; an unreachable floor is said, and the batch sized at the best speed's margin."""


import numpy as np
import pytest

from cli_runner import run_json
from servesize.assumptions import assumption
from servesize.cli import main
from servesize.planning.decode import DecodeSetup, decode_ceiling, decode_speed

GiB = 2**30
FAST = ["--no-sensitivity", "--fills", "200"]


def constant(tokens):
    return lambda rng, size: np.full(size, float(tokens))


def test_a_step_takes_the_longer_of_its_memory_and_its_compute_time():
    # 10 GB of weights at 1 TB/s (10 ms); 2 x 5e9 FLOPs per token at 100 TFLOP/s x 0.5
    setup = DecodeSetup(bandwidth_bytes_per_s=1e12, weight_bytes_per_step=10e9, kv_bytes_per_token_read=0,
                        bandwidth_efficiency=1.0, peak_flops_per_s=100e12, compute_efficiency=0.5,
                        flops_per_token=2 * 5e9)
    memory_s = 10e9 / 1e12
    for n in (1, 4, 64):
        compute_s = n * 2 * 5e9 / (100e12 * 0.5)
        speed = decode_speed(setup, constant(1_000), n, fills=4)
        assert speed.p50_tok_s == pytest.approx(1 / max(memory_s, compute_s))
        assert speed.bound == ("compute" if compute_s > memory_s else "memory")
    # the ridge point: n = memory_s / (2 x 5e9 / 5e13) = 50 decoders
    assert decode_speed(setup, constant(1_000), 49, fills=4).bound == "memory"
    assert decode_speed(setup, constant(1_000), 51, fills=4).bound == "compute"


def test_mtp_verifies_k_plus_one_tokens_and_runs_its_head_k_times():
    k, speedup = 2, 1.7
    setup = DecodeSetup(bandwidth_bytes_per_s=1e12, weight_bytes_per_step=10e9, kv_bytes_per_token_read=1_000,
                        bandwidth_efficiency=1.0, spec_speedup=speedup, peak_flops_per_s=1e15, compute_efficiency=0.5,
                        flops_per_token=2e10, query_tokens_per_step=1 + k, draft_flops_per_sequence=k * 2e9,
                        draft_bytes_per_step=k * 1e9, attention_flops_per_context_token=4 * 4_096 * 32)
    n, ctx = 100, 2_000
    step_bytes = 10e9 + k * 1e9 + n * ctx * 1_000
    step_flops = n * ((1 + k) * 2e10 + k * 2e9) + (1 + k) * 4 * 4_096 * 32 * n * ctx
    expected = speedup / max(step_bytes / 1e12, step_flops / (1e15 * 0.5))
    assert decode_speed(setup, constant(ctx), n, fills=4).p50_tok_s == pytest.approx(expected)


def test_without_compute_figures_the_roofline_is_the_seeds_memory_only_one():
    setup = DecodeSetup(bandwidth_bytes_per_s=4.8e12, weight_bytes_per_step=30e9, kv_bytes_per_token_read=32_768,
                        spec_speedup=1.7, bandwidth_efficiency=1.0)
    assert not setup.prices_compute
    assert decode_speed(setup, constant(40_000), 100, fills=4).p50_tok_s == pytest.approx(
        1.7 * 4.8e12 / (30e9 + 100 * 40_000 * 32_768))


def test_the_roofline_and_the_mtp_cost_are_named_assumptions_the_seed_switches_off():
    assert assumption("decode.roofline") == "sequential" and assumption("decode.roofline", "seed") == "memory"
    assert assumption("decode.mtp_verified_tokens_per_draft") == 1.0
    assert assumption("decode.mtp_verified_tokens_per_draft", "seed") == 0.0
    assert assumption("decode.attention_flops_per_context_token") == 4.0
    assert 0.3 <= assumption("decode.compute_efficiency") <= 0.6


def plan_json(capsys, *argv):
    return run_json(capsys, "plan", *argv, *FAST, "--json")


def test_qwen36_27b_fp8_tp2_with_mtp_has_compute_bound_gemms_at_its_decode_ceiling(capsys):
    d = plan_json(capsys, "qwen3.6-27b", "--gpus", "2xH200", "-tp", "2", "-q", "fp8", "--kv-cache-dtype", "fp8")
    at = d["decode"]["points"][-1]
    assert 100 < at["concurrent_decoders"] <= d["decode"]["ceiling_per_replica"] + 1
    # decode.roofline = sequential: the GEMMs' legs. Compute: n x 3 tokens x 2 x 25.6e9 FLOPs against 2 x 1,979
    # TFLOP/s x 0.9 x 0.45 (~10 ms at n = 108); their weights' read ~27 GB at 2 x 4.8 TB/s x 0.75 x 0.9 (~4 ms)
    assert 1.5 < at["compute_over_memory"] < 3.0 and at["bound"] == "compute"


def test_a_large_chat_batch_on_one_h200_is_compute_bound(capsys):
    d = plan_json(capsys, "qwen3.6-27b", "--gpus", "1xH200", "-q", "fp8", "--kv-cache-dtype", "fp8", "--preset", "chat")
    one, at = d["decode"]["points"]
    assert one["bound"] == "memory" and at["bound"] == "compute" and at["compute_over_memory"] > 1
    assert one["bounds_tok_s"][0] < one["per_user_tok_s_p50"] < one["bounds_tok_s"][1]


def test_the_seed_figures_stay_memory_only(capsys):
    d = plan_json(capsys, "qwen3.6-27b", "-q", "fp8", "--state-dtype", "bfloat16", "--assumptions", "seed",
                  "--vllm-version", "0.19.0", "--gpus", "1xH200", "--kv-cache-dtype", "fp8", "--pool-tokens", "2770000")
    assert d["decode"]["roofline"] == "memory" and all(p["compute_over_memory"] == 0 for p in d["decode"]["points"])
    assert d["ceilings"]["decode"] == pytest.approx(118, abs=3)


def test_an_unreachable_floor_is_said_and_the_batch_sized_at_80_percent_of_the_best_speed(capsys):
    from servesize.model.hardware import find_gpu, memory_kernel_factor

    # the L40S case: Llama 3.1 8B bf16 alone reads 14.96e9 B of weights + the median 2,000-token context
    argv = ["llama-3.1-8b", "--gpus", "1xL40S", "--median", "2k", "--prefix", "500", "--subagent-ratio", "0",
            "--max-model-len", "32k"]
    d = plan_json(capsys, *argv)
    weights = 16_060_522_496 - 128_256 * 4_096 * 2
    # the L40S's memory kernels read at its measured share against the fit's GPUs' (step.gpu_memory_kernels)
    l40s = memory_kernel_factor(find_gpu("L40S"))
    roofline_s = (weights + 2_000 * 131_072) / (864e9 * assumption("decode.bandwidth_efficiency") * l40s)
    # + the fitted per-step overhead of a 32-layer model at TP 1 (planning/step_model.py StepTerms.overhead)
    one_user = 1 / (roofline_s + assumption("decode.step_overhead_s") + 32 * assumption("step.overhead_per_layer_s"))
    assert l40s < 1 and one_user == pytest.approx(38.0, abs=0.1) and one_user < 40
    out = d["decode"]["floor_out_of_reach"]
    assert d["decode"]["floor_reached"] is False
    assert out["one_user_tok_s"] == pytest.approx(one_user, rel=0.005)
    assert out["sized_at_tok_s"] == pytest.approx(0.8 * out["one_user_tok_s"])
    n = d["decode"]["ceiling_per_replica"]
    assert n > 1 and f"--max-num-seqs {n} " in d["recipe"] and d["decode"]["every_user_bound_users"] == n
    # users who think between turns: more of them than decoders, unless the prefill chunks beside their decodes
    # stop them first (planning.interference)
    assert d["ceilings"]["decode"] >= n or d["decode"]["load"]["stall_binds"]
    at = d["decode"]["points"][-1]
    assert at["concurrent_decoders"] == n and at["per_user_tok_s_p50"] >= out["sized_at_tok_s"]
    # the text says so, and shows the speed at one user and at the recommended batch
    assert main(["plan", *argv, *FAST]) == 0
    text = capsys.readouterr().out
    assert f"the 40 tok/s floor is out of reach: one user alone decodes at {one_user:.1f} tok/s" in text
    assert f"{n} users (--max-num-seqs)" in text and "1 user" in text


def test_the_ceiling_at_the_sized_floor_is_where_the_p50_crosses_it():
    setup = DecodeSetup(bandwidth_bytes_per_s=864e9, weight_bytes_per_step=14.96e9, kv_bytes_per_token_read=131_072,
                        bandwidth_efficiency=0.7)
    assert decode_ceiling(setup, constant(2_000), floor_tok_s=40, fills=4).n == 0
    floor = 0.8 * 864e9 * 0.7 / (14.96e9 + 2_000 * 131_072)
    n = decode_ceiling(setup, constant(2_000), floor_tok_s=floor, fills=4).n
    assert n == int((864e9 * 0.7 / floor - 14.96e9) // (2_000 * 131_072))
