"""A pasted `vllm serve ...` line (--vllm-serve): read with the chosen release's vocabulary, every
flag is modelled, listed as changing no figure, or refused in one line with the reason."""

import json

import pytest

from cli_runner import run
from servesize.cli import main
from servesize.errors import BadInput
from servesize.resolve import served

V = (0, 32, 0)


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


# -- `vllm serve` flags given to servesize directly ------------------------------------------

def _memory_parser():
    from servesize.cli import _available, build_parser

    parser = build_parser(_available(), load="memory")
    return next(a for a in parser._actions if a.dest == "command").choices["memory"]


def _no_figure_flags(version):
    """The default release's flags that change no figure: known to that release, not one servesize takes as its
    own (a modelled field, or servesize's own meaning of the name), not refused, not an estimated term."""
    from servesize.engine.vocabulary import flag_effects, flags_of_any_release, known_flag

    own = {s for a in _memory_parser()._actions if a.dest != "vllm_flags" for s in a.option_strings}
    effects = flag_effects()
    return {flag: takes for flag, takes in flags_of_any_release().items()
            if known_flag(flag, version) and flag not in own and flag != "--model"
            and flag not in effects.get("refuse", {}) and flag not in effects.get("estimate", {})
            and flag not in effects.get("connector", {})}


def test_trust_remote_code_given_directly_is_accepted_and_listed_as_changing_no_figure(capsys):
    code, out, err = run(capsys, "memory", "llama-3.1-8b", "--gpus", "1xH100", "--trust-remote-code")
    assert code == 0, err
    assert "  not affecting these figures: --trust-remote-code" in out.splitlines()


def test_every_no_figure_flag_of_the_default_release_is_accepted_directly_and_listed(capsys):
    from servesize.engine.versions import DEFAULT_VLLM_VERSION, parse_version

    flags = _no_figure_flags(parse_version(DEFAULT_VLLM_VERSION))
    assert len(flags) > 300 and "--trust-remote-code" in flags and "--port" in flags
    words = [f"{flag}=v{n}" if takes else flag for n, (flag, takes) in enumerate(sorted(flags.items()))]
    code, out, err = run(capsys, "memory", "llama-3.1-8b", "--gpus", "1xH100", *words, "--json")
    assert code == 0, err
    listed = json.loads(out)["flags_not_affecting"]
    expected = [f"{flag} v{n}" if takes else flag for n, (flag, takes) in enumerate(sorted(flags.items()))]
    assert listed == expected


def test_flags_given_directly_change_no_figure(capsys):
    base = ["memory", "llama-3.1-8b", "--gpus", "1xH100", "--json"]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*base, "--trust-remote-code", "--port", "8001", "--served-model-name", "x"]) == 0
    flagged = json.loads(capsys.readouterr().out)
    assert flagged["flags_not_affecting"] == ["--trust-remote-code", "--port 8001", "--served-model-name x"]
    for key in ("available_kv_bytes_per_gpu", "num_blocks", "kv_cache_tokens", "usable_kv_tokens", "log_lines"):
        assert flagged[key] == plain[key]


def test_flags_given_directly_join_a_pasted_line_after_its_own(capsys):
    code, out, err = run(capsys, "memory", "llama-3.1-8b", "--gpus", "1xH100", "--vllm-serve",
                         "vllm serve x --host 0.0.0.0", "--trust-remote-code", "--json")
    assert code == 0, err
    assert json.loads(out)["flags_not_affecting"] == ["--host 0.0.0.0", "--trust-remote-code"]


def test_plan_lists_the_flags_given_directly(capsys):
    code, out, err = run(capsys, "plan", "llama-3.1-8b", "--gpus", "1xH100", "--fills", "20", "--trust-remote-code",
                         "--port", "9")
    assert code == 0, err
    assert "  not affecting these figures: --trust-remote-code, --port 9" in out.splitlines()


def test_a_direct_flag_the_release_lacks_or_that_servesize_refuses_is_one_line_and_exit_2(capsys):
    code, out, err = run(capsys, "memory", "llama-3.1-8b", "--gpus", "1xH100", "--vllm-version", "0.6.4",
                         "--aggregate-engine-logging")  # a flag from 0.12.0 on
    assert code == 2 and out == ""
    assert err.strip() == "servesize: --vllm-serve: --aggregate-engine-logging is not a flag of vllm serve 0.6.4"
    code, out, err = run(capsys, "memory", "llama-3.1-8b", "--gpus", "1xH100", "--cpu-offload-gb", "4")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--cpu-offload-gb moves up to" in err


def test_servesize_s_own_flags_keep_their_meaning_beside_vllm_s():
    args = _memory_parser().parse_args(["llama-3.1-8b", "--gpus", "1xH100", "--max-model-len", "8k", "--port", "1"])
    assert args.max_model_len == 8000 and args.vllm_flags == ["--port=1"]


# -- KV connectors: modelled where they are vLLM's native CPU offloading, else named in a plain warning ----------

_LMCACHE = '{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}'
_FIGURES = ("available_kv_bytes_per_gpu", "num_blocks", "kv_cache_tokens", "usable_kv_tokens", "log_lines")


def test_a_kv_connector_given_directly_is_warned_of_by_name_not_listed_as_changing_no_figure(capsys):
    base = ["memory", "llama-3.1-8b", "--gpus", "1xH100", "--json"]
    code, out, err = run(capsys, *base)
    plain = json.loads(out)
    code, out, err = run(capsys, *base, "--kv-transfer-config", _LMCACHE)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["flags_not_affecting"] == [] and len(doc["flags_not_modelled"]) == 1
    warning = doc["flags_not_modelled"][0]
    assert warning.startswith("--kv-transfer-config: KV connector LMCacheConnectorV1 changes where KV lives")
    assert "does not model the connector's pool" in warning
    assert all(doc[key] == plain[key] for key in _FIGURES)  # the figures are vLLM's own GPU pool, as without it


@pytest.mark.parametrize("command", [["memory"], ["plan", "--fills", "20", "--no-sensitivity"]])
def test_a_pasted_line_with_a_nixl_connector_says_so_plainly_in_the_text(capsys, command):
    line = "vllm serve x --kv-transfer-config '{\"kv_connector\": \"NixlConnector\", \"kv_role\": \"kv_both\"}'"
    code, out, err = run(capsys, command[0], "llama-3.1-8b", "--gpus", "1xH100", *command[1:], "--vllm-serve", line)
    assert code == 0, err
    warnings = [row for row in out.splitlines() if row.startswith("  warning: --kv-transfer-config")]
    assert len(warnings) == 1 and "KV connector NixlConnector changes where KV lives" in warnings[0]
    assert "not affecting these figures: --kv-transfer-config" not in out


def _plan(capsys, *flags):
    code, out, err = run(capsys, "plan", "llama-3.1-8b", "--gpus", "1xH100", "--fills", "20", "--no-sensitivity",
                         "--seed", "7", "--json", *flags)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("flags", [
    ["--kv-offloading-size", "64"],
    ["--kv-offloading-size", "64", "--kv-offloading-backend", "native"],
    ["--kv-transfer-config", json.dumps({"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                                         "kv_connector_extra_config": {"cpu_bytes_to_use": 64 * 2**30}})],
])
def test_vllm_native_cpu_offloading_is_the_host_ram_of_cpu_offload_gib(capsys, flags):
    as_servesize = _plan(capsys, "--cpu-offload-gib", "64")
    as_vllm = _plan(capsys, *flags)
    assert as_servesize["cpu_offloaded_sessions"]["p50"] > 0
    for key in ("pool_tokens", "warm_users", "warm_sessions", "cpu_offloaded_sessions", "gpu_resident_sessions"):
        assert as_vllm[key] == as_servesize[key]
    assert as_vllm["flags_not_modelled"] == [] and as_vllm["flags_not_affecting"] == []


def test_lmcache_as_the_offloading_backend_is_warned_of_and_not_taken_as_host_ram(capsys):
    without = _plan(capsys)
    doc = _plan(capsys, "--kv-offloading-size", "64", "--kv-offloading-backend", "lmcache")
    assert doc["cpu_offloaded_sessions"] == without["cpu_offloaded_sessions"]
    assert len(doc["flags_not_modelled"]) == 1 and "LMCacheConnectorV1" in doc["flags_not_modelled"][0]


def test_an_offloading_backend_without_a_size_turns_nothing_on_and_is_listed_as_changing_no_figure():
    line = served("vllm serve x --kv-offloading-backend native", (0, 14, 0))
    assert line.not_affecting == ("--kv-offloading-backend native",) and line.not_modelled == () and line.fields == {}


def test_a_connector_config_that_is_not_json_or_nested_too_deep_is_refused_in_one_line():
    for text in ("{kv_connector: x}", "[" * 100_000 + "]" * 100_000):
        with pytest.raises(BadInput, match="--kv-transfer-config"):
            served(f"vllm serve x --kv-transfer-config '{text}'", V)
    dotted = served("vllm serve x --kv-transfer-config.kv_connector=NixlConnector", V)  # vLLM's dotted form: unnamed
    assert len(dotted.not_modelled) == 1 and dotted.not_modelled[0].startswith("--kv-transfer-config: a KV connector")


def test_a_moe_backend_in_a_line_is_modelled_from_the_release_that_has_the_flag():
    """--moe-backend picks the fused-MoE kernel (vLLM 0.17 on): a Scenario field, which the step model reads (Marlin's
    measured rate for FP4 experts on Hopper, tests/test_step_model.py); before 0.17 no such flag exists."""
    assert served("vllm serve openai/gpt-oss-120b -tp 2 --moe-backend marlin", V).fields == {
        "tensor_parallel_size": 2, "moe_backend": "marlin"}
    with pytest.raises(BadInput, match="moe-backend"):
        served("vllm serve openai/gpt-oss-120b --moe-backend marlin", (0, 16, 0))


def test_a_plan_served_on_marlin_says_so_in_its_recipe_and_reads_back(capsys):
    from servesize import api

    plan = api.plan(api.Scenario(model="gpt-oss-120b", gpus="2xH100-SXM", tensor_parallel_size=2, moe_backend="marlin"),
                    sensitivity=False)
    assert "--moe-backend marlin" in plan.recipe
    again = served(plan.recipe, V)
    assert again.fields["moe_backend"] == "marlin"
    default = api.plan(api.Scenario(model="gpt-oss-120b", gpus="2xH100-SXM", tensor_parallel_size=2),
                       sensitivity=False)
    assert "--moe-backend" not in default.recipe
    # Marlin reads the experts faster on an H100 (measured 2.70 against 2.41 TB/s): more decoders keep the floor
    assert plan.result.decode.n > default.result.decode.n


def test_a_moe_backend_for_a_release_without_the_flag_is_one_line_and_exit_2(capsys):
    """Before 0.17 vLLM has no --moe-backend (VLLM_MXFP4_USE_MARLIN=1 chose Marlin): the recipe could not be run."""
    assert main(["plan", "gpt-oss-120b", "--gpus", "2xH100-SXM", "-tp", "2", "--moe-backend", "marlin",
                 "--vllm-version", "0.16.0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--moe-backend is not a flag of vllm serve 0.16.0" in err
    assert main(["plan", "gpt-oss-120b", "--gpus", "2xH100-SXM", "-tp", "2", "--vllm-version", "0.16.0", "--json"]) == 0


def test_a_fleet_searched_on_marlin_confirms_with_it_and_refuses_it_for_a_release_without_the_flag(capsys):
    fleet = ["fleet", "--users", "50", "--models", "gpt-oss-120b", "--gpus-from", "H100-SXM", "--moe-backend", "marlin"]
    assert main([*fleet, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["confirm_scenario"]["moe_backend"] == "marlin" and "--moe-backend marlin" in doc["plan_command"]
    assert main([*fleet, "--vllm-version", "0.16.0"]) == 2
    assert "--moe-backend is not a flag of vllm serve 0.16.0" in capsys.readouterr().err
