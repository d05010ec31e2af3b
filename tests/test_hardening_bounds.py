"""Issue 16's bounds cases, each a regression test: a declared range means what it says (no value inside it
divides by zero, overflows, counts for minutes or prints a numpy warning); what vLLM would refuse to start is
exit 3 with the reason and the fix; vLLM's vocabulary is accepted only where vLLM accepts it; a config.json,
a calibration and a number are read as they say, or refused in one line naming what is wrong.

The fuzz suite (test_fuzz_inputs.py, section "issue 16: bounds") generates such inputs; these are the ones the
issue named.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from cli_runner import run
from servesize.errors import MAX_MESSAGE_CHARS, BadInput, ServesizeError, clip
from servesize.sizing.teams import REPLICAS_PAST_COUNTING, replicas_for
from servesize.units import MiB, parse_tokens, parse_vllm_int

ROOT = pathlib.Path(__file__).resolve().parent
LLAMA = json.loads((ROOT / "fixtures" / "model-configs" / "meta-llama--Meta-Llama-3.1-8B" / "config.json").read_text())
QWEN_TP8_LOG = ROOT / "data" / "vllm-logs" / "v1-0102-qwen3-235b-l40s-tp.log"
PLAN = ["plan", "llama-3.1-8b", "--gpus", "1xH100", "--no-sensitivity", "--fills", "20", "--draws", "200"]
MEMORY = ["memory", "llama-3.1-8b", "--gpus", "1xH100"]
# every command here runs with numpy's RuntimeWarning as an error: a warning becomes the bug line the asserts refuse
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


def refusal(err: str) -> str:
    """The one line after any progress lines, checked to be a refusal and not the last-resort bug line."""
    lines = err.strip().split("\n")
    assert lines and all(line.startswith("servesize") for line in lines), err
    assert "Traceback" not in err and "servesize: bug:" not in err and "Warning" not in err, err
    return lines[-1]


# -- declared ranges that mean what they say ------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["--mfu", "--gpu-flops", "--tp-efficiency", "--bandwidth-efficiency",
                                  "--decode-compute-efficiency", "--gpu-bandwidth", "--gpu-tdp", "--think-time"])
@pytest.mark.parametrize("tiny", ["1e-300", "5e-324"])
def test_a_tiny_positive_value_is_refused_where_the_scenario_is_made_with_the_bounds_reason(flag, tiny, capsys):
    code, _, err = run(capsys, *PLAN, flag, tiny)
    line = refusal(err)
    assert code == 2 and line.startswith(f"servesize: {flag} ") and "out of range" in line, line
    assert "(" in line.partition("out of range")[2].partition("]")[2], line  # the reason follows the range


def test_values_at_the_new_lower_bounds_plan_without_a_numpy_warning(capsys):
    code, out, err = run(capsys, *PLAN, "--gpus", "2xH100", "-tp", "2", "--gpu-flops", "0.01", "--mfu", "0.01",
                          "--tp-efficiency", "0.01", "--decode-compute-efficiency", "0.01", "--gpu-bandwidth", "1",
                          "--bandwidth-efficiency", "0.01", "--think-time", "0.01", "--json")
    assert code == 0, err
    assert all(line.startswith("servesize") for line in err.strip().split("\n") if line), err
    assert json.loads(out)["ceilings"]


def test_replicas_for_a_ceiling_of_1e_300_users_stops_counting_instead_of_looping_or_overflowing():
    assert replicas_for(1e-300, 100.0) == REPLICAS_PAST_COUNTING  # users / ceiling = 1e302: no loop walks to it
    assert replicas_for(5e-324, 100.0) == REPLICAS_PAST_COUNTING  # users / ceiling = inf: was an OverflowError
    assert replicas_for(2.5, 10.0) == 4  # ceil(10 / 2.5)
    assert replicas_for(3.0, 10.0) == 4  # 3 x 3 = 9 < 10


def test_a_fleet_that_serves_no_one_says_why_instead_of_the_command_did_not_complete(capsys):
    code, _, err = run(capsys, "fleet", "--models", "llama-3.1-8b", "--users", "100000", "--gpus-from", "H100", "--max-gpus",
                        "1", "-tp", "1", "-q", "native", "--kv-cache-dtype", "auto", "--fills", "20", "--draws", "200")
    line = refusal(err)
    assert code == 2 and "did not complete" not in line, line
    assert "no fleet of at most 1 GPUs in the search space serves all 100,000 users" in line, line


# -- what vLLM would refuse to start: exit 3 with the fix ------------------------------------------------------

def _weights_bytes(capsys) -> int:
    code, out, err = run(capsys, *MEMORY, "--json")
    assert code == 0, err
    return json.loads(out)["weights_bytes_per_gpu"]


def test_a_kv_cache_larger_than_the_gpu_beside_the_weights_would_not_start(capsys):
    weights = _weights_bytes(capsys)
    room = 81559 * MiB - weights  # H100-SXM: 81,559 MiB as nvidia-smi reports it
    code, _, err = run(capsys, *MEMORY, "--kv-cache-memory-bytes", "1000GiB")
    line = refusal(err)
    assert code == 3 and "1,000.00 GiB of KV cache per GPU" in line, line
    assert f"--kv-cache-memory-bytes at most {room / 2**30:,.2f} GiB" in line, line
    code, _, err = run(capsys, *MEMORY, "--kv-cache-memory-bytes", "60GiB")  # fits beside 14.96 GiB of weights
    assert code == 0, err


def test_a_block_count_override_larger_than_the_gpu_would_not_start_and_names_the_most_that_fits(capsys):
    weights = _weights_bytes(capsys)
    per_block = 32 * 16 * 8 * 128 * 2 * 2  # layers x block tokens x KV heads x head_dim x (K, V) x bf16 = 2 MiB
    most = (81559 * MiB - weights) // per_block
    code, _, err = run(capsys, *MEMORY, "--num-gpu-blocks-override", "4294967296")
    line = refusal(err)
    assert code == 3 and f"blocks of {per_block:,} B" in line and f"at most {most:,}" in line, line
    code, _, err = run(capsys, *MEMORY, "--num-gpu-blocks-override", str(most), "--max-model-len", "8192")
    assert code == 0, err
    code, _, err = run(capsys, *MEMORY, "--num-gpu-blocks-override", str(most + 1), "--max-model-len", "8192")
    assert code == 3, err


def test_a_batch_smaller_than_max_model_len_without_chunked_prefill_would_not_start(capsys):
    code, _, err = run(capsys, *MEMORY, "--max-num-batched-tokens", "1", "--no-enable-chunked-prefill")
    line = refusal(err)
    assert code == 3 and "max_num_batched_tokens (1) is smaller than max_model_len (131,072)" in line, line
    assert "--enable-chunked-prefill" in line and "--max-num-batched-tokens 131072" in line, line
    code, _, err = run(capsys, *MEMORY, "--max-num-batched-tokens", "8192", "--no-enable-chunked-prefill",
                        "--max-model-len", "8192")
    assert code == 0, err


def test_a_batch_smaller_than_max_num_seqs_would_not_start(capsys):
    code, _, err = run(capsys, *MEMORY, "--max-num-batched-tokens", "100", "--max-num-seqs", "200")
    assert code == 3 and "must be at least max_num_seqs (200)" in refusal(err), err


# -- vLLM's vocabulary only where vLLM accepts it --------------------------------------------------------------

def test_a_serve_line_with_config_is_refused_saying_to_pass_the_flags_themselves(capsys):
    code, _, err = run(capsys, "memory", "--gpus", "1xH100", "--vllm-serve",
                        "vllm serve meta-llama/Llama-3.1-8B-Instruct --config f.yaml")
    line = refusal(err)
    assert code == 2 and "--config" in line and "put the YAML's flags on the line itself" in line, line


def test_mtp_draft_tokens_on_a_model_without_an_mtp_head_are_refused(capsys):
    code, _, err = run(capsys, *MEMORY, "--num-speculative-tokens", "16")
    line = refusal(err)
    assert code == 2 and "llama-3.1-8b has no MTP head" in line and "--speculative-config" in line, line
    code, _, err = run(capsys, "memory", "qwen3.6-27b", "--gpus", "1xH200", "--num-speculative-tokens", "2")
    assert code == 0, err


def test_an_mla_cache_layout_on_attention_that_is_not_mla_is_refused(capsys):
    code, _, err = run(capsys, *MEMORY, "--kv-cache-dtype", "fp8_ds_mla")
    line = refusal(err)
    assert code == 2 and "fp8_ds_mla" in line and "not MLA" in line and "use fp8" in line, line
    code, _, err = run(capsys, "memory", "deepseek-v3", "--gpus", "8xH200", "-tp", "8", "--kv-cache-dtype", "fp8_ds_mla",
                        "--max-model-len", "32768")
    assert code == 0, err


@pytest.mark.parametrize("version", ["99.0.0", "0.0.0", "0.34.0", "0.6.3"])
def test_a_vllm_version_outside_the_releases_read_is_refused_naming_the_range(version, capsys):
    code, _, err = run(capsys, *MEMORY, "--vllm-version", version)
    line = refusal(err)
    assert code == 2 and "from 0.6.4 to 0.33.x" in line, line


@pytest.mark.parametrize("version", ["0.6.4", "0.20.0", "0.33.0", "0.33.7"])
def test_a_vllm_version_inside_the_releases_read_is_accepted(version, capsys):
    code, _, err = run(capsys, *MEMORY, "--vllm-version", version, "--max-model-len", "8192")
    assert code == 0, err


# -- config.json read as it says -------------------------------------------------------------------------------

@pytest.mark.parametrize("change, named", [
    ({"intermediate_size": None}, "intermediate_size"),
    ({"tie_word_embeddings": "NaN"}, "tie_word_embeddings"),
    ({"tie_word_embeddings": 0}, "tie_word_embeddings"),
    ({"architectures": ["BertModel"]}, "'BertModel'"),
    ({"architectures": ["LlamaForSequenceClassification"]}, "'LlamaForSequenceClassification'"),
])
def test_a_config_field_that_is_not_what_it_should_be_is_refused_naming_file_and_field(change, named, tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, **change}))
    code, _, err = run(capsys, "memory", str(path), "--gpus", "1xH100")
    line = refusal(err)
    assert code == 2 and line.startswith(f"servesize: {path}: ") and named in line, line


def test_a_config_without_intermediate_size_is_refused_not_counted_as_2_39b(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in LLAMA.items() if k != "intermediate_size"}))
    code, _, err = run(capsys, "memory", str(path), "--gpus", "1xH100")
    assert code == 2 and "intermediate_size" in refusal(err), err


# -- a calibration applied only to what it measured ------------------------------------------------------------

@pytest.fixture()
def qwen_calibration(tmp_path, capsys) -> pathlib.Path:
    out = tmp_path / "cal.json"
    code, _, err = run(capsys, "calibrate", "--vllm-log", QWEN_TP8_LOG, "--out", out)
    assert code == 0, err
    cal = json.loads(out.read_text())
    assert cal["model"] == "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8" and cal["tensor_parallel_size"] == 8
    return out


@pytest.mark.parametrize("argv, differs", [
    (["llama-3.1-8b", "--gpus", "8xL40S", "-tp", "8"], "on model 'Qwen/Qwen3-235B-A22B-Instruct-2507-FP8'"),
    (["qwen3-235b-a22b-fp8", "--gpus", "8xL40S", "-tp", "4"], "at tensor_parallel_size 8, not this scenario's 4"),
    (["qwen3-235b-a22b-fp8", "--gpus", "8xH100", "-tp", "8"], "on a GPU of 44.42 GiB, not H100-SXM's"),
])
def test_a_calibration_of_another_deployment_is_refused_naming_the_field(qwen_calibration, argv, differs, capsys):
    code, _, err = run(capsys, "plan", *argv, "--calibration", str(qwen_calibration), "--no-sensitivity", "--fills", "20",
                        "--draws", "200")
    assert code == 2 and differs in refusal(err), err


def test_a_calibration_of_this_deployment_is_applied(qwen_calibration, capsys):
    code, out, err = run(capsys, "plan", "qwen3-235b-a22b-fp8", "--gpus", "8xL40S", "-tp", "8", "--calibration",
                          str(qwen_calibration), "--no-sensitivity", "--fills", "20", "--draws", "200", "--json")
    assert code == 0, err
    assert "calibration" in json.loads(out)["pool_source"]


def test_a_calibration_at_tp_1000000_is_refused_by_the_reader(qwen_calibration, capsys):
    cal = json.loads(qwen_calibration.read_text())
    qwen_calibration.write_text(json.dumps({**cal, "tensor_parallel_size": 1_000_000}))
    code, _, err = run(capsys, "plan", "qwen3-235b-a22b-fp8", "--gpus", "8xL40S", "-tp", "8", "--calibration",
                        str(qwen_calibration), "--no-sensitivity")
    line = refusal(err)
    assert code == 2 and "'tensor_parallel_size' must be a whole number in [1, 1,024]" in line, line


# -- numbers without digit separators --------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [[*PLAN, "--median", "1_6k"], [*PLAN, "--median", "1,024"],
                                  [*MEMORY, "--max-model-len", "1,024"], [*MEMORY, "--max-model-len", "1_6k"],
                                  [*PLAN, "--users", "1_000"], [*PLAN, "--mfu", "0,5"], [*PLAN, "--mfu", "0_5"],
                                  [*MEMORY, "--gpu-memory", "8_0GiB"]])
def test_a_number_with_a_digit_separator_is_refused(argv, capsys):
    code, _, err = run(capsys, *argv)
    assert code == 2 and "is not" in refusal(err), err


def test_vllm_flags_take_an_underscore_where_vllms_int_does_and_never_a_comma():
    assert parse_vllm_int("32_768") == 32768  # vLLM's human_readable_int ends in int(value): PEP 515 digits
    for text in ("1,024", "1_6k", "32__768", "_1", "1_"):
        with pytest.raises(BadInput):
            parse_vllm_int(text)
    with pytest.raises(BadInput, match="without ',' or '_'"):
        parse_tokens("32_768")  # servesize's own token counts take no separator at all


# -- refusal lines of bounded length ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [[*PLAN, "--median", "9" * 5000], [*MEMORY, "--max-num-batched-tokens", "9" * 5000],
                                  [*MEMORY, "--max-model-len", "9" * 5000], [*PLAN, "--users", "9" * 5000],
                                  [*PLAN, "--median", "1e99t"], [*MEMORY, "--num-gpu-blocks-override", "1e99"],
                                  [*MEMORY, "--dtype", "x" * 5000], [*MEMORY, "--vllm-version", "0." + "9" * 5000]])
def test_a_refusal_echoes_at_most_a_clipped_value(argv, capsys):
    code, _, err = run(capsys, *argv)
    line = refusal(err)
    assert code == 2 and len(line) < 300, (len(line), line[:300])
    assert "9" * 61 not in line and "x" * 61 not in line, line


def test_clip_cuts_a_value_to_60_characters_with_an_ellipsis_and_any_refusal_line_is_bounded():
    assert clip("9" * 5000) == "'" + "9" * 56 + "..." and len(clip("9" * 5000)) == 60
    assert clip("1_6k") == "'1_6k'"
    long = ServesizeError("a" * 5000 + " the fix")
    assert len(str(long)) <= MAX_MESSAGE_CHARS and str(long).endswith(" the fix")


def test_a_workload_whose_think_time_is_1e_300_is_refused_as_the_flag_is():
    from servesize.resolve import workload_of
    from servesize.scenario import Scenario
    from servesize.workload.model import MIN_THINK_TIME_S

    workload = workload_of(Scenario(model="llama-3.1-8b", gpus="1xH100"))
    for tiny in (1e-300, 5e-324, MIN_THINK_TIME_S / 2):
        with pytest.raises(BadInput, match="think_time_s"):
            workload.replace(think_time_s=tiny)
    assert workload.replace(think_time_s=MIN_THINK_TIME_S).think_time_s == MIN_THINK_TIME_S


@pytest.mark.parametrize("price", ["H100=2_5", "H100=2,5", "H100=" + "9" * 5000])
def test_a_gpu_hour_price_with_a_separator_or_5000_digits_is_refused_in_a_short_line(price):
    from servesize.sizing.prices import parse_price

    with pytest.raises(BadInput) as refused:
        parse_price(price)
    assert len(str(refused.value)) < 200, str(refused.value)
