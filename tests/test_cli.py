"""The command line as a user meets it: exit codes, one-line errors, --json purity."""

import json
import pathlib
import re

import pytest

from cli_runner import run
from servesize.cli import main

REPO = pathlib.Path(__file__).resolve().parent.parent


def assert_one_line_error(code, out, err, *fragments):
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("servesize: ") and "Traceback" not in err
    for f in fragments:
        assert f.lower() in lines[0].lower()


def test_a_missing_config_file_is_one_line_and_exit_2(capsys, tmp_path):
    code, out, err = run(capsys, "memory", str(tmp_path / "nope" / "config.json"), "--gpus", "1xH100")
    assert_one_line_error(code, out, err)


def test_a_malformed_config_file_is_one_line_and_exit_2(capsys, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama", "hidden_size": ')
    code, out, err = run(capsys, "memory", str(bad), "--gpus", "1xH100")
    assert_one_line_error(code, out, err, "not valid json")


def test_an_unknown_architecture_is_refused_naming_the_field(capsys, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "rwkv7", "hidden_size": 4096, "num_hidden_layers": 32}))
    code, out, err = run(capsys, "memory", str(cfg), "--gpus", "1xH100")
    assert_one_line_error(code, out, err, "rwkv7", "model_type")


def test_a_tp_size_that_does_not_divide_the_heads_is_refused(capsys):
    # Llama 3.1 8B has 32 attention heads; 3 does not divide them.
    code, out, err = run(capsys, "memory", "llama-3.1-8b", "--gpus", "4xH100", "--tensor-parallel-size", "3")
    assert_one_line_error(code, out, err, "does not divide")


def test_weights_larger_than_the_gpu_do_not_fit_and_exit_2(capsys):
    code, out, err = run(capsys, "memory", "llama-3.1-405b", "--gpus", "1xH100")  # loading runs out of memory
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "does not fit" in err and "tensor-parallel" in err


def test_weights_that_load_but_leave_no_cache_memory_exit_with_the_would_not_start_code(capsys):
    # 67.67 GiB of FP8 weights load on an H100, but 0.85 of its memory leaves no room for cache blocks:
    # vLLM's profiler refuses ("No available memory for the cache blocks")
    code, out, err = run(capsys, "memory", "llama-3.1-70b", "-q", "fp8", "--gpus", "1xH100",
                         "--gpu-memory-utilization", "0.85")
    assert code == 3 and out == "" and len(err.strip().splitlines()) == 1
    assert "would not start" in err and "tensor-parallel" in err


def test_an_unknown_gpu_is_one_line_with_suggestions(capsys):
    code, out, err = run(capsys, "memory", "llama-3.1-8b", "--gpus", "1xH1000")
    assert_one_line_error(code, out, err, "servesize gpus")


def test_an_unknown_model_is_one_line(capsys):
    code, out, err = run(capsys, "memory", "llama-9-900b", "--gpus", "1xH100")
    assert_one_line_error(code, out, err, "servesize models")


def test_memory_json_is_one_document_with_the_contract_keys(capsys):
    code, out, err = run(capsys, "memory", "llama-3.1-8b", "--gpus", "1xH100", "--json")
    assert code == 0
    doc = json.loads(out)
    for key in ("weights_bytes_per_gpu", "kv_bytes_per_token", "available_kv_bytes_per_gpu", "block_size",
                "num_blocks", "kv_cache_tokens", "max_concurrency", "usable_kv_tokens"):
        assert key in doc, key
    assert doc["kv_bytes_per_token"] == 2 * 8 * 128 * 2 * 32
    assert doc["block_size"] == 16
    assert doc["usable_kv_tokens"] == (doc["num_blocks"] - 1) * 16


def test_memory_explain_shows_each_number_from_its_own_terms(capsys):
    code, out, err = run(capsys, "memory", "llama-3.1-8b", "--gpus", "1xH100", "--explain")
    assert code == 0
    assert any(line.startswith("num_blocks = ") and "page_bytes_all_layers" in line for line in out.splitlines())
    assert "activation_peak_bytes" in out


def test_fit_json_parses_and_lists_placements(capsys):
    code, out, err = run(capsys, "fit", "--gpus", "8xH100", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["placements"] and all(p["concurrent_per_replica"] >= 1 for p in doc["placements"])


def test_help_lists_every_command(capsys):
    code, out, err = run(capsys, "--help")
    assert code == 0
    for command in ("models", "gpus", "fit", "memory", "plan", "calibrate", "workload", "measure"):
        assert re.search(rf"^\s+{command}\b", out, re.M), command


def test_every_commands_help_renders_its_own_words_not_argparses_internals():
    """argparse %-formats each help string with the action's fields: a bare '%' followed by a letter ('within 15%
    and' read as '%a') printed the whole action dict into `plan --help`. Every command's help must render clean."""
    from servesize.cli import COMMANDS, _available, build_parser

    def walk(parser, path):
        text = parser.format_help()
        assert "option_strings" not in text and "<argparse." not in text, path
        for action in parser._actions:
            choices = getattr(action, "choices", None)
            for name, child in (choices.items() if isinstance(choices, dict) else ()):
                if hasattr(child, "format_help"):
                    yield from walk(child, f"{path} {name}")
        yield path

    seen = [path for name in COMMANDS for path in walk(build_parser(_available(name), load=name), "servesize")]
    assert any(p.endswith(" plan") for p in seen) and any(p.endswith(" fit") for p in seen)


def test_a_named_command_builds_its_parser_alone_and_a_mistyped_one_still_lists_every_command(capsys):
    from servesize.cli import COMMANDS, _available, build_parser

    assert list(_available("memory")) == ["memory"]
    sub = next(a for a in build_parser(_available("memory"), load="memory")._actions if a.dest == "command")
    assert list(sub.choices) == ["memory"]
    assert main(["memroy", "x"]) == 2
    err = capsys.readouterr().err
    assert all(f"'{name.split()[0]}'" in err for name in COMMANDS)  # the typo is told every command


@pytest.mark.parametrize("flag,value", [("--max-model-len", "abc"), ("--kv-cache-memory-bytes", "12 parsecs"),
                                        ("--gpu-memory-utilization", "1.5"), ("--tensor-parallel-size", "0")])
def test_a_flag_value_that_cannot_be_read_is_one_line_and_exit_2(capsys, flag, value):
    code, out, err = run(capsys, "memory", "llama-3.1-8b", "--gpus", "1xH100", flag, value)
    assert code == 2 and out == "" and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_memory_json_prints_one_document_with_the_refusal_and_the_largest_length_on_exit_3(capsys):
    code, out, err = run(capsys, "memory", "llama-3.1-8b", "--gpus", "1xA10", "--json")
    assert code == 3 and len(err.strip().splitlines()) == 1
    doc = json.loads(out)  # one document, nothing else on stdout
    assert doc["would_start"] is False and doc["exit_code"] == 3
    assert doc["model"] == "llama-3.1-8b" and doc["gpus"] == "1xA10"
    assert err.strip() == f"servesize: {doc['refusal']}"
    largest = doc["largest_max_model_len"]
    assert largest > 0 and f"the largest --max-model-len that starts is {largest:,}" in doc["refusal"]
    # the length it names starts; one block more does not
    code, out, _ = run(capsys, "memory", "llama-3.1-8b", "--gpus", "1xA10", "--max-model-len", str(largest), "--json")
    assert code == 0 and json.loads(out)["max_model_len"] == largest
    code, out, _ = run(capsys, "memory", "llama-3.1-8b", "--gpus", "1xA10", "--max-model-len", str(largest + 16), "--json")
    assert code == 3 and json.loads(out)["largest_max_model_len"] == largest


@pytest.mark.parametrize("gpu", ["1xA100-SXM", "1xH100", "1xH200", "1xL4"])
def test_the_batch_defaults_in_help_are_the_engines_own_for_every_tier(gpu, capsys):
    """--max-num-seqs / --max-num-batched-tokens help is generated from the table Deployment._tier reads (it said
    "1024 on >= 70 GiB GPUs" while an 80 GB A100 gets 256): the GPU's tier by the help's own words is what memory uses."""
    from servesize.engine.deployment import CUDA_BATCH_FALLBACK, CUDA_BATCH_TIERS, _cuda_total_bytes, batch_default_words
    from servesize.model.hardware import parse_gpus

    seqs_words = batch_default_words("seqs")
    for t in CUDA_BATCH_TIERS:
        assert f"{t.seqs} on >= {t.min_bytes // 2**30} GiB GPUs" + (" other than A100s" if t.not_a100 else "") in seqs_words
    assert main(["memory", "llama-3.1-8b", "--gpus", gpu, "--max-model-len", "8192", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["deployment"]
    group = parse_gpus(gpu)
    tier = next(((t.batched_tokens, t.seqs) for t in CUDA_BATCH_TIERS if _cuda_total_bytes(group) >= t.min_bytes
                 and not (t.not_a100 and "a100" in group.gpu.name.lower())), CUDA_BATCH_FALLBACK)
    assert (doc["max_num_batched_tokens"], doc["max_num_seqs"]) == tier


def test_the_vllm_flags_join_the_parser_only_when_a_word_may_be_one_and_parse_the_same_either_way():
    from servesize.cli import _available, build_parser

    own = ["plan", "qwen3.6-27b", "--gpus", "1xH200", "-q", "fp8", "--kv-cache-dtype=fp8", "--json"]
    lean = build_parser(_available(), load="plan", argv=own)
    full = build_parser(_available(), load="plan")  # argv unknown: every vllm serve flag, as before
    assert vars(lean.parse_args(own)) == vars(full.parse_args(own))
    plan_of = lambda parser: parser._subparsers._group_actions[0].choices["plan"]  # noqa: E731
    assert "--trust-remote-code" not in plan_of(lean)._option_string_actions
    assert "--trust-remote-code" in plan_of(full)._option_string_actions
    for extra in (["--trust-remote-code"], ["--port=8001"], ["--max-model", "8k"], ["--"]):  # a vLLM flag, an abbreviation
        assert "--trust-remote-code" in plan_of(build_parser(_available(), load="plan", argv=own + extra))._option_string_actions


def test_main_in_a_callers_process_leaves_its_collector_as_it_was(capsys):
    """Only the console script freezes start-up's objects (cli.entry); a caller of main (a test, a library user) keeps
    its garbage collectable and its collector on: this suite calls main thousands of times in one process."""
    import gc

    frozen_before = gc.get_freeze_count()
    assert main(["memory", "llama-3.1-8b", "--gpus", "1xH100", "--max-model-len", "8192", "--json"]) == 0
    capsys.readouterr()
    assert gc.get_freeze_count() == frozen_before and gc.isenabled()
