"""Reading real vLLM start-up logs (tests/data/vllm-logs/*.log, each citing where its lines were
quoted from, and the six public logs in tests/fixtures/vllm-logs-public.json) into a Calibration."""

import json
import math
import pathlib

import pytest

from servesize.cli import main
from servesize.errors import BadInput
from servesize.render.text import render_text
from servesize.units import GiB
from servesize.vllm_logs.calibration import Calibration, calibrate, calibrate_against, gib_interval
from servesize.vllm_logs.files import load_calibration, load_calibrations, save_calibration, save_calibrations
from servesize.vllm_logs.parse import parse_vllm_log

LOGS = pathlib.Path(__file__).parent / "data" / "vllm-logs"
FIXTURES = pathlib.Path(__file__).parent / "fixtures"


def facts_of(name):
    return parse_vllm_log((LOGS / name).read_text(), name)


@pytest.fixture(scope="module")
def public():
    return {c["id"]: c for c in json.loads((FIXTURES / "vllm-logs-public.json").read_text())}


# --- the six public logs --------------------------------------------------------------------------


@pytest.mark.parametrize("case_id", [
    "vllm-40691-qwen35-27b-h20", "vllm-26646-qwen3-next-80b-int4-tp2", "kvcached-215-gemma3-4b-a100",
    "vllm-17327-qwen3-30b-a3b-4xa10", "lmcache-1739-qwen3-14b",
])
def test_every_public_v1_quote_parses_to_its_reported_tokens_and_concurrency(public, case_id):
    case = public[case_id]
    facts = parse_vllm_log("\n".join(case["quotes"]), case_id)
    r = case["reported"]
    assert facts.gpu_kv_cache_tokens == r["gpu_kv_cache_size_tokens"]
    assert facts.max_concurrency == r["max_concurrency"]
    assert facts.max_concurrency_tokens == r["max_concurrency_at_tokens"]


def test_10517_v0_quote_gives_blocks_memory_breakdown_and_the_block_size_16(public):
    case = public["vllm-10517-llama31-8b-3090-20k"]
    facts = parse_vllm_log("\n".join(case["quotes"]))
    r = case["reported"]
    assert facts.gpu_blocks == r["gpu_blocks"] == 1952
    assert facts.value("cpu_blocks") == 2048
    assert facts.value("total_gpu_memory_gib") == r["total_gpu_memory_gib"]
    cal = calibrate(facts)
    assert cal.era == "v0"
    assert cal.block_size == 16  # 1952 x 16 / 20000 = 1.5616 -> '1.56x'; 8 or 32 would print 0.78x / 3.12x
    assert cal.num_blocks == 1952 and cal.pool_tokens == 1952 * 16
    assert cal.available_kv_bytes_per_gpu == gib_interval(3.81)
    assert cal.weights_gib == 14.9888
    assert cal.activation_gib == pytest.approx(17.06 - 14.9888)  # the V0 peak includes the weights
    assert cal.non_torch_gib == 0.35


def test_40691_hybrid_old_pins_1487_blocks_given_block_784_and_four_groups(public):
    case = public["vllm-40691-qwen35-27b-h20"]
    facts = parse_vllm_log("\n".join(case["quotes"]))
    cal = calibrate(facts)
    assert cal.era == "v1-hybrid-old"  # kv_cache_utils.py:1319 is v0.19
    assert cal.num_blocks is None
    cal = calibrate(facts, block_size=784, kv_cache_groups=4, mamba_cache_mode="none")
    # 290,864 / 784 = 371 = n // 4 -> n in 1484..1487; 1487 / (cdiv(32768, 784) + 3) = 33.04 singles it out
    assert cal.num_blocks == 1487
    # one request's attention tokens: every block but the null block and the 3 x 1 state blocks it pins in 'none' mode
    assert cal.pool_tokens == (1487 - 1 - 3 * 1) * 784


def test_26646_old_line_four_times_under_its_concurrency_is_flagged_and_the_pool_left_unknown(public):
    case = public["vllm-26646-qwen3-next-80b-int4-tp2"]
    cal = calibrate(parse_vllm_log("\n".join(case["quotes"])))
    assert cal.pool_tokens is None
    assert any("too far apart for one KV-cache group" in n for n in cal.notes)


def test_kvcached_215_padding_layers_mark_a_hybrid_so_the_pool_is_unknown(public):
    case = public["kvcached-215-gemma3-4b-a100"]
    facts = parse_vllm_log("\n".join(case["quotes"]))
    assert facts.value("padding_layers") == 1 and facts.value("padding_waste_pct") == 3.45
    assert calibrate(facts).pool_tokens is None


def test_lmcache_1739_uniform_model_gives_2666_blocks_from_tokens_and_block_16(public):
    case = public["lmcache-1739-qwen3-14b"]
    facts = parse_vllm_log("\n".join(case["quotes"]))
    assert facts.available_kv_gib == 6.51
    assert facts.per_rank("available_kv_gib") == {"engine": 6.51}
    cal = calibrate(facts, block_size=16)
    assert cal.num_blocks == 42656 // 16 == 2666
    lo, hi = cal.available_kv_bytes_per_gpu
    assert (lo, hi) == (int(-(-(6.505 * GiB) // 1)), int(-(-(6.515 * GiB) // 1)))
    assert lo <= 2666 * 16 * 40 * 8 * 128 * 2 * 2 < hi  # the blocks fit the interval the log allows


def test_lmcache_1739_calibrate_against_servesize_memory_report_is_exact(public):
    from servesize.engine.deployment import Deployment
    from servesize.engine.memory import memory_report
    from servesize.model.architecture import from_config
    from servesize.model.hardware import parse_gpus

    qwen3_14b = {"model_type": "qwen3", "hidden_size": 5120, "num_hidden_layers": 40, "num_attention_heads": 40,
                 "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "intermediate_size": 17408,
                 "max_position_embeddings": 40960, "torch_dtype": "bfloat16", "tie_word_embeddings": False}
    case = public["lmcache-1739-qwen3-14b"]
    cal = calibrate(parse_vllm_log("\n".join(case["quotes"])), block_size=16)
    rep = memory_report(from_config(qwen3_14b, "Qwen3-14B"), parse_gpus("1xH100"),
                        Deployment(max_model_len=32768, vllm_version="0.11.0", kv_cache_memory_bytes=int(6.51 * GiB)))
    check = calibrate_against(cal, rep)
    assert check.get("num_blocks").error == 0
    assert check.get("kv_cache_tokens_logged").error == 0
    assert check.get("available_kv_bytes_per_gpu").error == 0
    assert check.get("max_concurrency").error == 0
    assert "num_blocks" in render_text(check)


# --- fixture files, one per era ---------------------------------------------------------------------


def test_v1_before_08_gpu_blocks_line_with_block_size_inferred():
    cal = calibrate(facts_of("v1-07-gpu-blocks.log"))
    assert cal.num_blocks == 1381 and cal.block_size == 16  # 1381 x 16 / 2048 = 10.79
    assert cal.weights_gib == 67.7229


def test_v0_breakdown_line_gives_weights_activation_non_torch_and_available():
    facts = facts_of("v0-cuda-blocks-breakdown.log")
    cal = calibrate(facts)
    assert (cal.weights_gib, cal.non_torch_gib, cal.activation_gib) == (3.26, 0.02, 1.22)
    assert cal.available_kv_gib_logged == 2.38 and cal.num_blocks == 1395
    assert cal.total_gpu_memory_gib == 7.65 and cal.gpu_memory_utilization == 0.90
    assert facts.value("cpu_blocks") == 2340


def test_first_v1_token_line_is_blocks_times_16():
    cal = calibrate(facts_of("v1-08-token-line.log"), block_size=16)
    assert cal.era == "v1-uniform"
    assert cal.num_blocks == 2042016 // 16 == 127626  # PR #13596 printed '# GPU blocks: 127626' for the same run
    assert cal.pool_tokens == (127626 - 1) * 16


def test_085_docker_compose_prefix_and_worker_rank_prefix_are_tolerated():
    facts = facts_of("v1-085-qwen3-30b-tp4-compose.log")
    assert facts.gpu_kv_cache_tokens == 198784 and facts.max_concurrency == 24.27
    assert facts.fact("model_loading_gib").rank == "rank=0"
    cal = calibrate(facts)
    assert cal.era == "v1-uniform" and cal.pool_tokens == 198784
    assert calibrate(facts, block_size=16).num_blocks == 198784 // 16 == 12424


def test_0102_config_line_and_old_suggestion_line_decompose():
    facts = facts_of("v1-0102-qwen3-235b-l40s-tp.log")
    assert facts.vllm_version == "0.10.2"
    assert facts.value("model") == "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"
    assert facts.value("tensor_parallel_size") == 8 and facts.value("max_model_len") == 32768
    assert facts.value("quantization") == "fp8" and facts.value("kv_cache_dtype") == "auto"
    assert facts.fact("available_kv_gib").rank == "TP3_EP3"
    s = facts.value("suggestion")
    assert (s["free_gib"], s["total_gib"], s["gpu_memory_utilization"], s["requested_gib"]) == (43.93, 44.42, 0.9, 39.98)
    assert (s["weights_gib"], s["activation_gib"], s["non_torch_gib"], s["cudagraph_gib"]) == (27.72, 1.4, 0.21, 3.45)
    assert s["kv_cache_memory_to_fit_bytes"] == 7564378828 and s["kv_cache_memory_to_fill_bytes"] == 11809093120
    cal = calibrate(facts)
    assert cal.era == "v1-hybrid-old" and cal.cudagraph_gib == 3.45 and cal.weights_gib == 27.72


def test_011_graph_capture_and_exact_kv_bytes_from_the_suggestion_line():
    cal = calibrate(facts_of("v1-011-suggestion-graphs.log"))
    assert cal.available_kv_bytes_per_gpu == (59212694937, 59212694938)
    assert cal.cudagraph_gib == 0.67 and cal.activation_gib == 1.97
    assert cal.kv_cache_tokens_logged == 451744 and cal.max_concurrency == 110.29


def test_new_era_ansi_colours_and_tp_worker_tags():
    facts = facts_of("v1-new-tp4-cudagraph-ansi.log")
    assert facts.ranks == ("TP0", "TP1", "TP3")
    assert facts.value("cudagraph_estimate_gib") == 0.17
    assert facts.value("cudagraph_profiling") == {"enabled": True, "gpu_memory_utilization": 0.92, "equivalent_without": 0.9129}
    cal = calibrate(facts)
    assert cal.era == "v1-new" and cal.available_kv_gib_logged == 15.72


def test_024_two_line_token_figure_that_is_not_a_block_multiple_means_several_groups():
    cal = calibrate(facts_of("v1-024-two-line.log"))
    assert cal.era == "v1-new" and cal.vllm_version == "0.24.0"
    assert cal.kv_cache_tokens_logged == 567978 and cal.max_concurrency == 4.33
    assert cal.pool_tokens is None  # 567,978 is not a multiple of 16 while 131,072 is


def test_one_line_031_with_block_16_pins_28781_blocks_inside_the_available_interval():
    facts = facts_of("v1-031-one-line-llama8b-a100.log")
    assert facts.fact("combined_kv_line") is not None
    cal = calibrate(facts, block_size=16)
    # int(n / cdiv(131072, 16) x 131072) = 16 n = 460,496 -> n = 28,781
    assert cal.num_blocks == 460496 // 16 == 28781
    lo, hi = cal.available_kv_bytes_per_gpu
    block_bytes = 16 * 32 * 8 * 128 * 2 * 2  # Llama-3.1-8B: 32 layers x 8 KV heads x 128 x K,V x bf16
    assert lo // block_bytes <= 28781 <= hi // block_bytes
    assert cal.weights_gib == 15.0 and cal.activation_gib == 1.44 and cal.cudagraph_gib == 0.23
    assert cal.non_torch_gib == pytest.approx(15.26 - 15.0)
    assert cal.total_gpu_memory_gib == 79.25 and cal.gpu_memory_utilization == 0.92


def test_gdn_hybrid_reads_attention_block_mamba_mode_and_graph_pool_but_leaves_the_pool_unknown():
    facts = facts_of("v1-new-hybrid-gdn-mi50.log")
    assert facts.value("attention_block_size") == 800 and facts.value("mamba_cache_mode") == "align"
    assert facts.value("cudagraph_actual_gib") == 2.0 and facts.value("cudagraph_estimate_gib") == 1.59
    cal = calibrate(facts)
    assert cal.block_size == 800 and cal.pool_tokens is None and cal.weights_gib == 10.0


def test_padding_layers_warning_marks_the_new_line_as_not_the_pool():
    facts = facts_of("v1-padding-layers-0246.log")
    assert facts.value("padding_layers") == 3 and facts.value("padding_waste_pct") == 6.25
    assert calibrate(facts).pool_tokens is None


def test_mamba_page_padding_line_is_read_even_without_kv_lines():
    text = (LOGS / "v1-hybrid-padding-qwen38.log").read_text() + "\nINFO Available KV cache memory: 1.00 GiB\n"
    facts = parse_vllm_log(text)
    assert facts.value("attention_block_size") == 480 and facts.value("mamba_padding_pct") == 1.27


def test_cpu_build_line_is_the_cpu_pool():
    facts = facts_of("cpu-build-one-line.log")
    assert facts.cpu_kv_cache_tokens == 699008 and facts.gpu_kv_cache_tokens is None
    cal = calibrate(facts)
    assert cal.cpu_kv_cache_tokens_logged == 699008 and cal.max_concurrency == 341.31
    assert any("CPU build" in n for n in cal.notes)


# --- ranks and restarts --------------------------------------------------------------------------


def test_per_worker_repeats_are_kept_apart():
    facts = facts_of("v1-08-per-rank-ascend.log")
    assert facts.per_rank("gpu_kv_cache_tokens") == {"engine": 159232, "engine#2": 159232}
    assert facts.gpu_kv_cache_tokens == 159232


def test_the_pool_is_the_minimum_over_ranks():
    # Made from the 0.8.5 line format of vllm#17327 with two workers that profiled differently (values invented).
    text = "\n".join([
        "(VllmWorker rank=0 pid=105) INFO 04-29 01:09:49 [kv_cache_utils.py:634] GPU KV cache size: 198,784 tokens",
        "(VllmWorker rank=1 pid=106) INFO 04-29 01:09:49 [kv_cache_utils.py:634] GPU KV cache size: 197,120 tokens",
        "(VllmWorker rank=0 pid=105) INFO 04-29 01:09:49 [kv_cache_utils.py:637] Maximum concurrency for 8,192 tokens per request: 24.27x",
        "(VllmWorker rank=1 pid=106) INFO 04-29 01:09:49 [kv_cache_utils.py:637] Maximum concurrency for 8,192 tokens per request: 24.06x",
    ])
    facts = parse_vllm_log(text)
    assert facts.per_rank("gpu_kv_cache_tokens") == {"rank=0": 198784, "rank=1": 197120}
    assert facts.gpu_kv_cache_tokens == 197120 and facts.max_concurrency == 24.06
    cal = calibrate(facts, block_size=16)
    assert cal.num_blocks == 197120 // 16 and any("minimum" in n for n in cal.notes)


def test_restart_keeps_the_last_start_up_that_did_not_fail_and_says_so():
    facts = facts_of("v0-llama31-8b-3090-restart.log")
    assert facts.startups == 2 and facts.chosen == 1
    assert facts.gpu_blocks == 1952 and facts.max_concurrency_tokens == 20000
    assert any("later start-up" in n for n in facts.notes)


def test_restart_keeps_the_last_successful_start_up():
    one = (LOGS / "v1-07-gpu-blocks.log").read_text()
    two = one.replace("# GPU blocks: 1381", "# GPU blocks: 1500")
    facts = parse_vllm_log(one + "\n" + two)
    assert facts.startups == 2 and facts.chosen == 2 and facts.gpu_blocks == 1500
    assert any("2 start-ups" in n for n in facts.notes)


def test_a_file_with_no_kv_lines_is_bad_input():
    with pytest.raises(BadInput, match="no KV-cache lines"):
        parse_vllm_log("INFO 01-01 00:00:00 api_server.py:1] hello\nnothing here\n")
    with pytest.raises(BadInput):
        parse_vllm_log((LOGS / "v1-hybrid-padding-qwen38.log").read_text())


# --- persistence and the command -------------------------------------------------------------------


def test_calibration_round_trips_through_json(tmp_path):
    cal = calibrate(facts_of("v1-031-one-line-llama8b-a100.log"), block_size=16)
    path = tmp_path / "c.json"
    save_calibration(cal, path)
    assert load_calibration(path) == cal
    assert Calibration.from_dict(json.loads(path.read_text())) == cal
    two = [cal, calibrate(facts_of("v1-07-gpu-blocks.log"))]
    save_calibrations(two, tmp_path / "two.json")
    assert load_calibrations(tmp_path / "two.json") == tuple(two)
    with pytest.raises(BadInput):
        load_calibration(tmp_path / "two.json")
    with pytest.raises(BadInput):
        Calibration.from_dict({"source": "x", "era": "v0", "bogus": 1})


def test_cli_prints_facts_with_line_numbers_and_writes_the_file(capsys, tmp_path):
    out = tmp_path / "cal.json"
    rc = main(["calibrate", "--vllm-log", str(LOGS / "v1-0102-qwen3-235b-l40s-tp.log"),
               "--vllm-log", str(LOGS / "v0-llama31-8b-3090-restart.log"), "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "gpu_kv_cache_tokens" in text and "238,208" in text and "start-up 1 of 2" in text
    assert len(load_calibrations(out)) == 2


def test_cli_json_is_one_document(capsys):
    rc = main(["calibrate", "--vllm-log", str(LOGS / "v1-024-two-line.log"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["calibrations"][0]["kv_cache_tokens_logged"] == 567978


def test_cli_refuses_a_missing_file_and_a_log_without_kv_lines(capsys, tmp_path):
    assert main(["calibrate", "--vllm-log", str(tmp_path / "missing.log")]) == 2
    assert "cannot read" in capsys.readouterr().err
    empty = tmp_path / "empty.log"
    empty.write_text("INFO starting\n")
    assert main(["calibrate", "--vllm-log", str(empty)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("servesize: ") and err.count("\n") == 1


# -- hybrid-model logs: calibrate completes, and plan uses what it wrote (issue 20) ------------

def _log_40691(tmp_path):
    path = tmp_path / "vllm-40691.log"  # the two lines quoted in vllm-project/vllm#40691 (tests/fixtures)
    cases = {c["id"]: c for c in json.loads((FIXTURES / "vllm-logs-public.json").read_text())}
    path.write_text("\n".join(cases["vllm-40691-qwen35-27b-h20"]["quotes"]) + "\n")
    return path


def test_calibrate_on_the_40691_log_given_the_block_size_and_groups_it_asks_for_pins_the_pool(capsys, tmp_path):
    log = _log_40691(tmp_path)
    assert main(["calibrate", "--vllm-log", str(log)]) == 0
    asked = capsys.readouterr().out
    assert "pass --block-size and --kv-cache-groups" in asked
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--vllm-log", str(log), "--block-size", "784", "--kv-cache-groups", "4",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "pass --block-size and --kv-cache-groups" not in text  # no loop: what it asked for was enough
    cal = load_calibration(out)
    # (n // 4) x 784 = 290,864 allows n in 1,484..1,487; n / (cdiv(32768, 784) + 3 x 1) = n / 45 prints 33.04 only at 1,487;
    # the pool: every block but the null block and the 3 state blocks one request pins (n / 48, 'align', prints 30.98)
    assert cal.num_blocks == 1487 and cal.pool_tokens == (1487 - 1 - 3) * 784


def test_plan_uses_the_40691_calibration(capsys, tmp_path):
    log, out = _log_40691(tmp_path), tmp_path / "cal.json"
    assert main(["calibrate", "--vllm-log", str(log), "--block-size", "784", "--kv-cache-groups", "4",
                 "--model", "Qwen/Qwen3.5-27B", "--out", str(out)]) == 0  # the quotes name no model: the issue does
    capsys.readouterr()
    assert main(["plan", "qwen3.5-27b", "--gpus", "1xH20", "--max-model-len", "32768", "--calibration", str(out),
                 "--fills", "20", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pool_tokens"] == (1487 - 1 - 3) * 784


def test_a_calibration_at_another_memory_utilisation_is_refused_in_one_line_unless_told(capsys, tmp_path):
    log, out = _log_40691(tmp_path), tmp_path / "cal.json"
    assert main(["calibrate", "--vllm-log", str(log), "--block-size", "784", "--kv-cache-groups", "4",
                 "--model", "Qwen/Qwen3.5-27B", "--out", str(out)]) == 0
    capsys.readouterr()
    out.write_text(json.dumps({**json.loads(out.read_text()), "gpu_memory_utilization": 0.85}))
    argv = ["plan", "qwen3.5-27b", "--gpus", "1xH20", "--max-model-len", "32768", "--calibration", str(out),
            "--fills", "20", "--json"]
    assert main(argv) == 0  # left unset, the measured setting stands
    capsys.readouterr()
    argv += ["--gpu-memory-utilization", "0.92"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert "measured at gpu_memory_utilization 0.85, not 0.92" in captured.err
    assert "--calibration-mismatch-ok" in captured.err
    assert main([*argv, "--calibration-mismatch-ok"]) == 0
    assert json.loads(capsys.readouterr().out)["pool_tokens"] == (1487 - 1 - 3) * 784
    assert main([*argv[:-2], "--gpu-memory-utilization", "0.85"]) == 0
    assert json.loads(capsys.readouterr().out)["pool_tokens"] == (1487 - 1 - 3) * 784


def test_a_calibration_at_another_memory_utilisation_or_kv_dtype_is_refused_naming_the_field(tmp_path):
    from dataclasses import replace

    from servesize.resolve import check_calibration_matches, deployment_of, model_of
    from servesize.scenario import Scenario

    cal = Calibration.from_dict({"source": "x.log", "era": "v1-new", "model": "meta-llama/Llama-3.1-8B",
                                 "max_model_len": 32768, "gpu_memory_utilization": 0.8, "kv_cache_dtype": "fp8_e4m3", "pool_tokens": 1000})
    scenario = Scenario(model="llama-3.1-8b", gpus="1xH100", max_model_len=32768, kv_cache_dtype="fp8",
                        gpu_memory_utilization=0.9)
    deployment = deployment_of(scenario, model_of("llama-3.1-8b"))
    with pytest.raises(BadInput, match="gpu_memory_utilization 0.8, not 0.9"):
        check_calibration_matches(cal, scenario, deployment, "calibration x.log")
    matching = replace(scenario, gpu_memory_utilization=0.8)
    check_calibration_matches(cal, matching, deployment_of(matching, model_of("llama-3.1-8b")), "calibration x.log")
    bf16 = replace(cal, kv_cache_dtype="auto")  # measured at the model's dtype, asked at fp8
    with pytest.raises(BadInput, match="kv_cache_dtype auto, not fp8"):
        check_calibration_matches(bf16, matching, deployment_of(matching, model_of("llama-3.1-8b")), "calibration x.log")
    unset = Scenario(model="llama-3.1-8b", gpus="1xH100", max_model_len=32768)  # left unset: the measured ones stand
    check_calibration_matches(cal, unset, deployment_of(unset, model_of("llama-3.1-8b")), "calibration x.log")


def test_a_v1_new_hybrid_log_given_the_groups_does_not_ask_for_them_again(capsys):
    assert main(["calibrate", "--vllm-log", str(LOGS / "v1-new-hybrid-gdn-mi50.log"), "--kv-cache-groups", "4"]) == 0
    out = capsys.readouterr().out
    assert "pass --block-size and --kv-cache-groups" not in out and "pass --kv-cache-groups" not in out


# -- the GDN hybrids of tests/data/vllm-logs with a draft model: calibrate completes, plan uses it --------------------

def _awq_qwen35_27b(tmp_path):
    """The mi50 log's model: Qwen3.5-27B's geometry (tests/fixtures/model-configs) as a 4-bit AWQ checkpoint."""
    config = json.loads((FIXTURES / "model-configs" / "Qwen--Qwen3.5-27B" / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}
    path = tmp_path / "qwen35-27b-awq" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    return str(path)


_MTP2 = ["--enable-prefix-caching", "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}']
# The mi50 log: TP 2 on two 32 GB cards (31.98 GiB as CUDA/ROCm reports them). The catalogue has no MI50 row; an
# RTX 5090 (31.84 GiB) is the card of that memory, and only the memory is checked against the calibration.
_MI50_PLAN = ["--gpus", "2xRTX5090", "-tp", "2", "--max-model-len", "262144", *_MTP2]
# The 0246 log: Qwen 27B NVFP4 on one RTX 5090 at 131,072 tokens, fp8 KV, gpu_memory_utilization 0.92 (its
# CUDA-graph line), MTP on (the 3 padding layers: 16 full-attention layers + the MTP layer = groups of 17)
_0246_PLAN = ["qwen3.6-27b-nvfp4", "--gpus", "1xRTX5090", "--max-model-len", "131072", "--kv-cache-dtype", "fp8",
              "--gpu-memory-utilization", "0.92", *_MTP2]


def test_calibrate_on_the_mi50_gdn_log_with_its_draft_tokens_pins_473_blocks(capsys, tmp_path):
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--vllm-log", str(LOGS / "v1-new-hybrid-gdn-mi50.log"), "--kv-cache-groups", "4",
                 "--num-speculative-tokens", "2", "--out", str(out)]) == 0
    assert "pass --" not in capsys.readouterr().out
    cal = load_calibration(out)
    # 1 attention + 3 GDN groups; each GDN group pins 2 ('align', the log's mode) + 2 draft blocks per request:
    # s = cdiv(262144, 800) + 3 x 4 = 340, and int(n / 340 x 262144) = 364,688 only at n = 473 (473 / 340 prints 1.39)
    s = math.ceil(262144 / 800) + 3 * (2 + 2)
    assert s == 340 and int(473 / s * 262144) == 364688 and f"{473 / s:.2f}" == "1.39"
    assert cal.num_blocks == 473 and cal.kv_cache_groups == 4
    assert cal.pool_tokens == (473 - 1 - 3 * 4) * 800
    lo, hi = cal.available_kv_bytes_per_gpu  # and 473 blocks of 17 layers x 800 tokens x 2 KV heads x 256 x K,V x 2 B fit
    assert lo // (17 * 800 * 2 * 256 * 2 * 2) == 473


def test_plan_uses_the_mi50_calibration(capsys, tmp_path):
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--vllm-log", str(LOGS / "v1-new-hybrid-gdn-mi50.log"), "--kv-cache-groups", "4",
                 "--num-speculative-tokens", "2", "--model", "qwen35-27b-awq", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["plan", _awq_qwen35_27b(tmp_path), *_MI50_PLAN, "--calibration", str(out), "--fills", "20",
                 "--no-sensitivity", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pool_tokens"] == (473 - 1 - 3 * 4) * 800 and doc["pool_source"] == f"calibration {out} (pool)"


def test_calibrate_on_the_padding_layers_log_given_what_memory_explain_prints_pins_117_blocks(capsys, tmp_path):
    log, out = str(LOGS / "v1-padding-layers-0246.log"), tmp_path / "cal.json"
    assert main(["calibrate", "--vllm-log", log, "--block-size", "1600", "--kv-cache-groups", "4"]) == 0
    asked = capsys.readouterr().out
    assert "--blocks-per-request" in asked and "--mamba-cache-mode" in asked  # what is still open, not the same flags
    # servesize memory --explain for this start-up: block 1600, 4 groups of 17, blocks_per_request = 82 + 3 x 5
    assert main(["memory", *_0246_PLAN, "--explain"]) == 0
    explained = capsys.readouterr().out
    assert "1600 tokens (4 group(s) of 17 layer(s))" in explained and "= 5 + 5 + 5 + 82 = 97 blocks" in explained
    assert main(["calibrate", "--vllm-log", log, "--block-size", "1600", "--kv-cache-groups", "4",
                 "--mamba-cache-mode", "align", "--blocks-per-request", "97", "--out", str(out)]) == 0
    capsys.readouterr()
    cal = load_calibration(out)
    # int(n / 97 x 131072) = 158,097 and n / 97 prints 1.21 only at n = 117
    assert int(117 / 97 * 131072) == 158097 and f"{117 / 97:.2f}" == "1.21"
    assert cal.num_blocks == 117 and cal.pool_tokens == (117 - 1 - (97 - 82)) * 1600


def test_plan_uses_the_padding_layers_calibration(capsys, tmp_path):
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--vllm-log", str(LOGS / "v1-padding-layers-0246.log"), "--block-size", "1600",
                 "--kv-cache-groups", "4", "--mamba-cache-mode", "align", "--blocks-per-request", "97",
                 "--model", "Qwen3.6-27B-NVFP4", "--out", str(out)]) == 0   # the excerpt names no model
    capsys.readouterr()
    assert main(["plan", *_0246_PLAN, "--calibration", str(out), "--fills", "20", "--no-sensitivity", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pool_tokens"] == (117 - 1 - 15) * 1600


@pytest.mark.parametrize(("named", "argv", "says"), [
    ("qwen35-27b-awq", ["llama-3.1-8b", "--gpus", "2xRTX5090", "-tp", "2"],
     "measured on model 'qwen35-27b-awq', not llama-3.1-8b"),
    # a name that a one-group model's also holds (qwen3 in qwen3-8b): the KV-cache groups still tell them apart
    ("qwen3", ["qwen3-8b", "--gpus", "2xRTX5090", "-tp", "2"], "calibrated for a model of 4 KV-cache groups, not"),
    (None, ["llama-3.1-8b", "--gpus", "2xRTX5090", "-tp", "2"], "does not say which model it measured"),
    ("qwen35-27b-awq", ["AWQ", "--gpus", "2xH100", "-tp", "2"], "measured on a GPU of 31.98 GiB, not H100-SXM's"),
])
def test_a_hybrid_calibration_applied_to_another_model_or_gpu_is_refused_in_one_line(capsys, tmp_path, named, argv,
                                                                                      says):
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--vllm-log", str(LOGS / "v1-new-hybrid-gdn-mi50.log"), "--kv-cache-groups", "4",
                 "--num-speculative-tokens", "2", *(["--model", named] if named else []), "--out", str(out)]) == 0
    told = capsys.readouterr().out
    assert ("--calibration-mismatch-ok" in told) == (named is None)   # calibrate says what an unnamed log will need
    argv = [_awq_qwen35_27b(tmp_path) if a == "AWQ" else a for a in argv]
    assert main(["plan", *argv, "--calibration", str(out), "--fills", "20", "--no-sensitivity"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1 and says in captured.err
    assert main(["plan", *argv, "--calibration", str(out), "--fills", "20", "--no-sensitivity",
                 "--calibration-mismatch-ok"]) in (0, 3)   # told, it is applied (exit 3: that model does not fit)


def test_a_calibration_at_another_tensor_parallel_size_or_of_another_model_is_refused_in_one_line(capsys, tmp_path,
                                                                                                 monkeypatch):
    monkeypatch.chdir(tmp_path)  # a short path: the one line then holds the model's whole name
    out = "cal.json"
    assert main(["calibrate", "--vllm-log", str(LOGS / "v1-0102-qwen3-235b-l40s-tp.log"), "--out", str(out)]) == 0
    capsys.readouterr()
    base = ["plan", "llama-3.1-8b", "--gpus", "8xL40S", "--calibration", str(out), "--fills", "20", "--no-sensitivity"]
    for argv, says in ((["-tp", "4"], "measured at tensor_parallel_size 8, not this scenario's 4"),
                       (["-tp", "8"], "measured on model 'Qwen/Qwen3-235B-A22B-Instruct-2507-FP8', not llama-3.1-8b")):
        assert main([*base, *argv]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and len(captured.err.strip().splitlines()) == 1 and says in captured.err


def test_the_library_calibrates_the_mi50_log_as_the_command_does():
    from servesize import api

    cal = api.calibrate((LOGS / "v1-new-hybrid-gdn-mi50.log").read_text(), kv_cache_groups=4, num_speculative_tokens=2)
    assert cal.num_blocks == 473 and cal.pool_tokens == (473 - 1 - 3 * 4) * 800
    given = api.calibrate((LOGS / "v1-new-hybrid-gdn-mi50.log").read_text(), kv_cache_groups=4, blocks_per_request=340)
    assert given.num_blocks == 473


def test_plan_uses_the_26646_qwen3_next_calibration(capsys, tmp_path, public):
    case = public["vllm-26646-qwen3-next-80b-int4-tp2"]  # 1 attention + 3 GDN groups (12 full, 36 GDN layers)
    log, out = tmp_path / "vllm-26646.log", tmp_path / "cal.json"
    log.write_text("\n".join(case["quotes"]) + "\n")
    assert main(["calibrate", "--vllm-log", str(log), "--kv-cache-groups", "4", "--mamba-cache-mode", "none",
                 "--model", "Qwen3-Next-80B-A3B", "--out", str(out)]) == 0   # the fixture's model (a local path)
    capsys.readouterr()
    # the pre-v0.20.1 line is (n // 4) x B: the pool of one request's attention is the logged tokens x 4 groups
    assert load_calibration(out).pool_tokens == 90048 * 4
    # the log names no GPU (its calibration carries no GPU figure to refuse another by): two H200s hold the weights
    assert main(["plan", "qwen3-next-80b-a3b-thinking", "--gpus", "2xH200", "-tp", "2", "--max-model-len", "215040",
                 "--vllm-version", "0.11.0", "--calibration", str(out), "--fills", "20", "--no-sensitivity",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pool_tokens"] == 90048 * 4


def test_a_model_given_to_calibrate_names_a_log_that_names_none_and_never_overrides_one_that_does(tmp_path):
    from servesize import api

    quoted = api.calibrate(_log_40691(tmp_path).read_text(), model="Qwen/Qwen3.5-27B")
    assert quoted.model == "Qwen/Qwen3.5-27B" and any("as given: the log names none" in n for n in quoted.notes)
    unnamed = api.calibrate(_log_40691(tmp_path).read_text())
    assert unnamed.model is None and any("--calibration-mismatch-ok" in n for n in unnamed.notes)
    full = (LOGS / "v1-0102-qwen3-235b-l40s-tp.log").read_text()   # its config line names the model
    named = api.calibrate(full, model="llama-3.1-8b")
    assert named.model == "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"
    assert any("llama-3.1-8b" in n and "is not used" in n for n in named.notes)


def test_kvcached_215_gemma3_log_given_block_and_groups_calibrates_to_blocks_plan_uses(public, tmp_path, capsys):
    """The pre-v0.20.1 line leaves 7 consecutive block counts (138,747-138,753) for 7 sliding/full groups, and
    the concurrency cannot narrow them (it depends on a batch size the log does not print): the lowest is
    taken, with a note, and plan sizes the pool from it; memory at that count prints both logged lines."""
    from test_vllm_logs import GEMMA3_4B

    case = public["kvcached-215-gemma3-4b-a100"]
    log, config, cal = tmp_path / "kvcached-215.log", tmp_path / "gemma-3-4b-it" / "config.json", tmp_path / "cal.json"
    log.write_text("\n".join(case["quotes"]) + "\n")
    config.parent.mkdir()
    config.write_text(json.dumps(GEMMA3_4B))
    assert main(["calibrate", "--vllm-log", str(log), "--block-size", "16", "--kv-cache-groups", "7",
                 "--model", str(config), "--out", str(cal)]) == 0
    out = capsys.readouterr().out
    assert "allow 7 block counts, 138,747 to 138,753" in out and "mamba-cache-mode" not in out
    assert json.loads(cal.read_text())["num_blocks"] == 138747
    engine = ["--gpus", "1xA100", "--max-model-len", "3072", "--vllm-version", "0.11.0"]
    assert main(["plan", str(config), *engine, "--median", "1500", "--prefix", "500", "--calibration", str(cal), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert "block count" in plan["pool_source"]
    assert main(["memory", str(config), *engine, "--num-gpu-blocks-override", "138747", "--json"]) == 0
    memory = json.loads(capsys.readouterr().out)
    tokens, conc = case["reported"]["gpu_kv_cache_size_tokens"], case["reported"]["max_concurrency"]
    assert memory["log_lines"] == [f"GPU KV cache size: {tokens:,} tokens",
                                   f"Maximum concurrency for 3,072 tokens per request: {conc:.2f}x"]
    assert plan["pool_tokens"] == memory["usable_kv_tokens"]
