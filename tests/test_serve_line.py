"""A pasted `vllm serve ...` line (--vllm-serve): read with the chosen release's vocabulary, every
flag is modelled, listed as changing no figure, or refused in one line with the reason."""

import json

import pytest

from servesize.cli import main
from servesize.errors import BadInput
from servesize.resolve import served

V = (0, 32, 0)


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_serve_line_sets_the_fields_vllm_would_and_lists_the_rest():
    line = served("vllm serve Qwen/Qwen3-8B --host 0.0.0.0 --port 8000 -tp 2 --max-model-len 16K --trust-remote-code "
                  "--enable-prefix-caching --gpu-memory-utilization 0.85 --served-model-name q --enable-chunked-prefill",
                  V)
    assert line.model == "Qwen/Qwen3-8B"
    assert line.fields == {"tensor_parallel_size": 2, "max_model_len": 16 * 1024, "enable_prefix_caching": True,
                           "gpu_memory_utilization": 0.85, "enable_chunked_prefill": True}
    assert line.not_affecting == ("--host 0.0.0.0", "--port 8000", "--trust-remote-code", "--served-model-name q")


def test_the_line_reads_vllms_spellings_underscores_equals_signs_and_negations():
    line = served("vllm serve m --max_model_len=32k --no-enable-prefix-caching --kv-cache-dtype=fp8 -O3", V)
    assert line.fields == {"max_model_len": 32_000, "enable_prefix_caching": False, "kv_cache_dtype": "fp8"}
    assert line.estimated and line.estimated[0].startswith("-O")


def test_an_api_server_module_line_is_read_too():
    line = served("python -m vllm.entrypoints.openai.api_server --model /m --dtype bfloat16 --block-size 32", V)
    assert line.model == "/m" and line.fields == {"dtype": "bfloat16", "block_size": 32}


@pytest.mark.parametrize("text,fragment", [
    ("vllm serve m --enable-everything", "--enable-everything is not a flag of vllm serve 0.32.0"),
    ("vllm serve m --cpu-offload-gb 8", "--cpu-offload-gb moves up to that many GiB of weights"),
    ("vllm serve m --max-model-len", "--max-model-len needs a value"),
    ("vllm serve m n", "a second model"),
    ("vllm serve m --speculative-config '{bad'", "not valid JSON"),
    ("llama.cpp -m x", "takes a `vllm serve MODEL [flags]` line"),
])
def test_a_line_vllm_would_not_take_or_servesize_does_not_model_is_refused_with_why(text, fragment):
    with pytest.raises(BadInput) as err:
        served(text, V)
    assert fragment in str(err.value)


def test_a_flag_of_a_later_release_is_unknown_to_an_earlier_one():
    served("vllm serve m --kv-offloading-size 8", (0, 32, 0))
    with pytest.raises(BadInput, match="not a flag of vllm serve 0.8.5"):
        served("vllm serve m --kv-offloading-size 8", (0, 8, 5))


def test_memory_with_a_serve_line_equals_memory_with_the_same_flags_and_lists_what_changes_nothing(capsys):
    code, out, err = run(capsys, "memory", "--gpus", "2xH100", "--json", "--vllm-serve",
                         "vllm serve llama-3.1-8b -tp 2 --max-model-len 16K --host 0.0.0.0 --enable-auto-tool-choice "
                         "--tool-call-parser hermes")
    assert code == 0, err
    doc = json.loads(out)
    code, out2, _ = run(capsys, "memory", "llama-3.1-8b", "--gpus", "2xH100", "-tp", "2", "--max-model-len", "16384",
                        "--json")
    plain = json.loads(out2)
    assert doc["log_lines"] == plain["log_lines"] and doc["available_kv_bytes_per_gpu"] == plain["available_kv_bytes_per_gpu"]
    assert doc["flags_not_affecting"] == ["--host 0.0.0.0", "--enable-auto-tool-choice", "--tool-call-parser hermes"]


def test_flags_given_to_servesize_win_over_the_lines(capsys):
    code, out, err = run(capsys, "memory", "--gpus", "1xH100", "--max-model-len", "8192", "--json", "--vllm-serve",
                         "vllm serve llama-3.1-8b --max-model-len 32768")
    assert code == 0, err and json.loads(out)["max_model_len"] == 8192
    assert json.loads(out)["max_model_len"] == 8192


def test_the_text_report_names_the_flags_that_change_no_figure(capsys):
    code, out, err = run(capsys, "memory", "--gpus", "1xH100", "--vllm-serve",
                         "vllm serve llama-3.1-8b --max-model-len 8192 --port 9000")
    assert code == 0, err and "not affecting these figures: --port 9000" in out
    assert "not affecting these figures: --port 9000" in out


def test_an_unknown_flag_in_a_serve_line_is_one_line_and_exit_2(capsys):
    code, out, err = run(capsys, "memory", "--gpus", "1xH100", "--vllm-serve", "vllm serve llama-3.1-8b --turbo")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "--turbo" in err


def test_a_predicted_refusal_exits_3_with_the_fix(capsys):
    code, out, err = run(capsys, "memory", "llama-3.1-8b", "--gpus", "1xH100", "--kv-cache-memory-bytes", "2G")
    assert code == 3 and out == "" and len(err.strip().splitlines()) == 1
    assert "vLLM would refuse to start" in err and "the largest --max-model-len that starts is" in err
